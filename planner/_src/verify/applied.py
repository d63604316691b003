"""The Verification of a plan that moves train state, from the compile of the step as the
user applies it (state_plan.py): the traced step cannot show such a plan's bytes."""

from __future__ import annotations

from planner._src.types import Check, CompiledFigures, Status, Verification
from planner._src.units import fmt_bytes


def applied_step_verification(
    check, predicted_peak_bytes: int, usable_bytes: int, *, backend: str, compiler
) -> Verification:
    """The Verification of a plan that moves train state (state_plan.py), from the compile
    of the step as the user applies it: ``check``, a ``state.StateCheck`` (None where no
    ``build`` was given, so nothing was compiled). ``compiler``: the session's
    ``target.CompilerTarget``.

    The traced step cannot verify such a plan: the placement is applied by the user's step
    (the shardings, the streamed update), so only that step's compile shows the plan's bytes.
    XLA:CPU's compile of it (``check.estimated``) keeps the host leaves in its one memory:
    recorded, not held to the budget."""
    if check is None:
        return Verification(
            status=Status.NOT_COMPILED,
            compiled=None,
            compiled_device_bytes=None,
            predicted_peak_bytes=predicted_peak_bytes,
            usable_bytes=usable_bytes,
            checks=(),
            backend=backend,
            note=(
                "Not compiled: the plan puts optimizer state in pinned host memory, which "
                "your step applies (plan.state: the shardings, the streamed update), so the "
                "traced step's compile would not show the plan's bytes. Pass build=(policy, "
                "placement) -> (jitted step, args) to Planner.plan to compile the step as "
                "applied and hold it to the budget."
            ),
            exact=compiler.exact,
            compiler=compiler.description,
        )
    over = check.device_bytes > usable_bytes and not check.estimated
    exact = compiler.exact and not check.estimated
    # state.StateCheck.status: the compiled host bytes against the plan's, or why the
    # compiler cannot say ("unverified" on XLA:CPU, never "within budget")
    host_detail = check.status
    if check.estimated:
        host_detail += (
            f" (XLA:CPU's compile of the step as applied, {fmt_bytes(check.device_bytes)}, "
            f"keeps the {fmt_bytes(check.planned_host_bytes)} the plan puts on the host in "
            "its one memory and copies them)"
        )
    return Verification(
        status=Status.OVER if over else (Status.OK if exact else Status.UNVERIFIED),
        compiled=CompiledFigures(
            argument_bytes=check.device_argument_bytes,
            output_bytes=check.output_bytes,
            alias_bytes=check.alias_bytes,
            temp_bytes=check.temp_bytes,
            host_temp_bytes=check.host_temp_bytes,
            host_buffers_in_hlo=0,  # (the applied step's HLO is not read)
            async_host_copies_in_hlo=0,
            jaxpr_host_bytes=0,
            stacked_device_bytes=0,
            stacked_host_bytes=0,
            stacked_host_arrays=0,
            backend=backend,
            compiler=compiler.description,
        ),
        compiled_device_bytes=None if check.estimated else check.device_bytes,
        predicted_peak_bytes=predicted_peak_bytes,
        usable_bytes=usable_bytes,
        checks=(
            Check(
                name="train state on the host",
                ok=check.host_matches or check.estimated,
                detail=host_detail,
            ),
        ),
        backend=backend,
        note="The compiled figures are the step as applied (build: the plan's policy, "
        "the state's shardings, the streamed update).",
        exact=exact,
        compiler=compiler.description,
    )
