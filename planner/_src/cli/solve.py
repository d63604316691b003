"""The solve and report commands: plan one budget and print its report; print a saved
plan's report."""

from __future__ import annotations

import sys

from planner._src.cli.common import (
    LAYER_GROUPS,
    Progress,
    StdoutError,
    emit_text,
    image_path,
    load_factory,
)


def cmd_solve(a) -> int:
    import planner  # deferred: --help answers without importing JAX
    from planner._src.results.planfile import (
        check_writable,
    )  # deferred: --help answers without importing JAX

    image_path(a.timeline, (".png", ".svg"), "--timeline")
    # Every output path is checked before the solve, so a typo costs a second, not a solve.
    if a.save:
        check_writable(a.save)
    if a.out:
        check_writable(a.out, "the report file")
    if a.timeline:
        check_writable(a.timeline, "the timeline")
    step, args = load_factory(a.factory)
    with Progress(a.quiet) as progress:
        progress(f"planning {a.factory} for {a.hardware} under {a.hbm_gb:g} GB")
        plan = planner.solve(
            step,
            *args,
            hbm_gb=a.hbm_gb,
            hardware=a.hardware,
            allow_offload=False if a.no_offload else None,
            solver_time_limit_s=a.time_limit,
            progress=progress,
            layer_groups=LAYER_GROUPS[a.layer_groups],
            opt_state=a.opt_state,
            opt_state_argnum=a.opt_state_argnum,
            params_argnum=a.params_argnum,
            stream_params=a.stream_params,
        )
        if a.timeline:
            from planner._src.results.plots import (
                hbm_timeline,
            )  # deferred: --help answers without importing JAX

            progress(f"drawing the memory timeline to {a.timeline}")
            hbm_timeline(plan, a.timeline)
    # the report first: never lost; its snippets load the plan from --save's path
    try:
        emit_text(plan.report("json" if a.json else a.format, plan_file=a.save), a.out)
    except StdoutError:
        if a.save:
            plan.save(a.save)  # a stdout that cannot be written loses no plan
        raise
    if a.save:
        plan.save(a.save)  # a PlanFileError here still leaves the report printed (exit 2)
        print(
            f"[planner] plan saved to {a.save}; load it with planner.load_plan({a.save!r})",
            file=sys.stderr,
        )
    return 0 if plan.verification.ok else 1


def cmd_report(a) -> int:
    import planner  # deferred: --help answers without importing JAX

    saved = planner.load_plan(a.plan)
    emit_text(saved.report("json" if a.json else a.format), a.out)
    return 0
