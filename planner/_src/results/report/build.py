"""Stage 7, report: build_report gathers every figure of a Plan once into the Report model.

Every number comes from the cost model (formulas in cost.py, hardware figures cited in the
profile), the compiler (memory_analysis of the verify compile), or the solver; the
renderers only format what this module gathered.
"""

from __future__ import annotations

import dataclasses

import cost_models as cm
from planner._src.cost.predict import evaluate, hiding_models
from planner._src.emit.paste import PLAN_FILE, apply_snippet, paste_snippets
from planner._src.results.report.model import NOT_READ, REGION_LINE, PolicyLine, Report, Row
from planner._src.results.report.timing import (
    compile_seconds,
    persistent_cache_note,
    planning_time,
)
from planner._src.units import GB, fmt_bytes


def _reason(d: str, rec_ms: float, exposed: float, nbytes: int, plan, room: int) -> str:
    """The decision in words, against the options not taken (every figure from the cost
    model, per step over all trips: recompute time, ``exposed``: the tensor's copies' exposed
    ms were it offloaded alone, through the profile's per-direction hiding models and its
    windows (cost.py X terms), ``room``: bytes left under the planned-to budget)."""
    offload = f"offload {exposed:.3f} ms exposed" if plan.cost.allow_offload else "no offload"
    room_text = f"{fmt_bytes(room)} of room"
    if d == "save":
        return f"saved: recompute {rec_ms:.3f} ms vs {offload}; {room_text}"
    if d == "remat":
        # Only what is true: keeping it alone would exceed the room, or it would fit and the
        # solver recomputed it anyway (given the other choices, the room buys more elsewhere;
        # a claim "X > room" for every row would be false for most).
        if nbytes > room:
            return (
                f"recomputed: {rec_ms:.3f} ms vs {offload}; keeping its {fmt_bytes(nbytes)} "
                f"would exceed the {room_text}"
            )
        return (
            f"recomputed: {rec_ms:.3f} ms vs {offload}; its {fmt_bytes(nbytes)} would fit the "
            f"{room_text} alone, but given the other choices the room is worth more to them"
        )
    return f"offloaded: {exposed:.3f} ms exposed vs recompute {rec_ms:.3f} ms vs {room_text}"


def jax_label(c) -> str:
    """A candidate as ``print_saved_residuals`` prints it when kept, string for string:
    ``f32[4,256] output of dot_general from /path/model.py:12:8 (layer)`` (recorded at trace
    time, xla.adapter.residual_label). Candidates built by hand: the same form from their
    fields."""
    if c.jax_label:
        return c.jax_label
    short = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "int32": "i32"}
    aval = f"{short.get(c.dtype, c.dtype)}[{','.join(map(str, c.shape))}]"
    what = f"named '{c.name}'" if c.name else f"output of {c.primitive}"
    return f"{aval} {what} from {c.source}"


def relative(source: str) -> str:
    """A source line relative to the working directory (how the user names their files)."""
    import os

    cwd = os.getcwd().rstrip("/") + "/"
    return source[len(cwd) :] if source.startswith(cwd) else source


def _source_or(where: str, region_source: str = "") -> str:
    """The user's line; equations JAX's own rules made (no user frame): the region's line."""
    where, region_source = relative(where), relative(region_source)
    if where:
        return where
    if region_source:
        return f"{region_source} [{REGION_LINE}]"
    return "(no source line: JAX recorded none outside JAX and the planner)"


def _status_lines(plan) -> tuple[tuple[str, str], ...]:
    """What was checked where: the compiler, the budget as given and as planned to (and
    why), the compiled figure against the planned-to budget."""
    ver = plan.verification
    usable = plan.budget.usable
    compiler = plan.compiler or ver.backend
    state = getattr(plan, "state", None)
    if ver.compiled is None and state is not None and state.placement.on_host:
        where = (
            "none: the plan moves parameters, which only your step can stream (pass "
            "build= to Planner.plan to compile it as applied; notes)"
        )
    elif ver.compiled is None:
        where = "not compiled (verify_compile=False): every figure is the cost model's"
    elif plan.compiler_exact:
        where = f"{compiler} (the target's compiler)"
    elif "estimate" in compiler:
        where = f"{compiler}: this machine's backend, not the target's"
    else:
        where = f"{compiler} (this machine's backend, not the target's: an estimate)"
    lines = [("compiled by", where)]
    lines += times_lines(plan.hardware)
    if ver.status == "compiled, unverified" and "not verified for the GPU" in ver.note:
        lines.append(("not verified", ver.note.removeprefix("not verified ")))
    lines.append(("budget", f"{fmt_bytes(plan.budget_bytes)} as given (hbm_gb, per device)"))
    if plan.headroom_bytes:
        lines.append(("planned to", f"{fmt_bytes(usable)}: {plan.headroom_why(short=True)}"))
    if ver.compiled_device_bytes is not None:
        fits = "fits" if ver.compiled_device_bytes <= usable else "OVER"
        lines.append(
            (
                "compiled",
                f"{fmt_bytes(ver.compiled_device_bytes)} (arguments + outputs - aliased + "
                f"temporaries) vs {fmt_bytes(usable)} planned to: {fits}; predicted "
                f"{fmt_bytes(plan.prediction.peak_bytes)}",
            )
        )
        if ver.compiled_device_bytes <= usable:
            lines.append(("budget use", budget_use(plan)))
    num = plan.numerics
    if num is not None and not getattr(num, "checked", True):
        why = getattr(num, "detail", "").removeprefix("Numerics not checked: ")
        lines.append(("numerics", "not checked: " + why.split(". ")[0].split(": ")[0]))
    lines += [("check", f"{c.word}: {c.name}: {c.detail}") for c in ver.checks]
    return tuple(lines)


# The figures a step's time is predicted from (a profile's sources name them).
_TIME_FIGURES = ("hbm_bytes_per_s", "matmul_flops_per_s", "vector_flops_per_s")


def times_lines(hw) -> list[tuple[str, str]]:
    """The status line that says where the times come from: a made-up profile (no speed
    claim), or this machine's CPU calibration (which CPU, when, where cached); none for a
    profile of cited figures (each figure's source is in the profile)."""
    made_up = made_up_times(hw)
    if made_up:
        why = (
            f"from the made-up {hw.name} profile: not a measurement ({made_up} made up); no "
            "plan here is predicted faster than another in a sense to rely on. "
        )
        if hw.platform == "cpu":
            why += (
                "Plan with this machine's calibration: hardware='cpu' with "
                "PLANNER_CPU_PROFILE unset; or measure a device: python -m cost_models calibrate"
            )
        else:
            why += "Measure the device: python -m cost_models calibrate"
        return [("times", why)]
    note = cm.calibration_note(hw)
    return [("times", f"from {note}; {CPU_TIMES_CAVEAT}")] if note else []


# What the calibration does not fix (docs/guide/hardware.md, measured in
# benchmarks/results/cpu-calibration-2026-12-06.md): the figures are this machine's, but the
# cost model's form misses XLA:CPU's costs (an exp at one FLOP, a lax.scan's per-trip work).
CPU_TIMES_CAVEAT = (
    "measured steps on XLA:CPU ran 0.9-5.7x the cost model's, which did not order the stock "
    "policies as measured, so no plan here is predicted faster in a sense to rely on "
    "(docs/guide/hardware.md)"
)


def made_up_times(hw) -> str:
    """The time figures of profile ``hw`` whose cited source says they are made up ("made up
    for tests": the cpu profile), as text; "" for a profile of cited or measured figures."""
    sources = dict(getattr(hw, "sources", ()) or ())
    made_up = sorted(
        key
        for key, source in sources.items()
        if key.split(".")[0] in _TIME_FIGURES and str(source).lower().startswith("made up")
    )
    return ", ".join(made_up)


def budget_use(plan) -> str:
    """How much of the planned-to budget the returned plan leaves, and why (the frontier
    walk, planning/walk.py; the rounds are in the JSON's "rounds")."""
    usable = plan.budget.usable
    got = plan.verification.compiled_device_bytes
    walked = sum(1 for r in plan.rounds if getattr(r, "purpose", "") == "walk")
    text = (  # after the line's label, "budget use"
        f"{fmt_bytes(got)} of {fmt_bytes(usable)} ({fmt_bytes(usable - got)} left, "
        f"{(usable - got) / usable:.1%})"
        if usable > 0
        else fmt_bytes(got)
    )
    if plan.choice != "planner":
        why = (
            f'the stock policy {plan.choice} was returned (why: the note "The answer is ..." below)'
        )
    else:
        why = plan.fill_why or "the plan was not verified within budget"
    rounds = f"; {walked} plan{'s' if walked != 1 else ''} compiled on the walk" * bool(walked)
    note = getattr(plan, "walk_note", "")
    note = f" (no guarantee that a larger budget plans no slower: {note})" if note else ""
    return f"{text}: {why}{rounds}{note}"


def _round_dict(n: int, r, usable: int) -> dict:
    """One round of the verify loop for the report (JSON "rounds")."""
    return {
        "round": n,
        "purpose": r.purpose,
        "correction_bytes": r.correction_bytes,
        # what the uncorrected model was held to: the budget less the correction
        "model_budget_bytes": None if r.purpose == "stock" else usable - r.correction_bytes,
        "predicted_peak_bytes": r.predicted_peak_bytes,
        "compiled_bytes": r.compiled_device_bytes,
        "predicted_step_ms": None if r.predicted_step_s is None else r.predicted_step_s * 1e3,
        "status": r.status,
        "outcome": r.outcome,
    }


def build_report(plan, plan_file: str | None = None) -> Report:
    """``plan_file``: where the plan was saved (the snippets load it from there)."""
    graph, cost, pred = plan.graph, plan.cost, plan.prediction
    a = plan.assignment
    rows = []
    by_region = {
        rg.region.id: (rg, rc, rp) for rg, rc, rp in zip(graph.regions, cost.regions, pred.regions)
    }
    # A class is listed when the backward pass reads it in the plan or in full-remat form.
    everything = evaluate(cost, graph, type(a).of({c.key: "save" for c in graph.classes}))
    read_any = {rg.region.id: rp.needed for rg, rp in zip(graph.regions, everything.regions)}
    total = 0
    entries = []
    hide_d2h, hide_h2d = hiding_models(cost)
    for cls in graph.classes:
        nbytes = rec = xfer = exposed = 0
        members = 0
        source = label = region_source = ""
        shards: set[str] = set()
        for rid, i in cls.members:
            rg, rc, rp = by_region[rid]
            if not (rp.needed[i] or read_any[rid][i]):
                continue
            c = rg.region.candidates[i]
            L = rc.multiplicity
            # bytes held at once (RegionCost.live); time over every execution
            nbytes += rc.live * c.nbytes
            rec += L * rc.recompute_s[i]
            xfer += L * (rc.d2h_s[i] + rc.h2d_s[i])
            exposed += L * (
                hide_d2h.exposed([(rc.d2h_s[i], rc.fwd_after_s[i])])
                + hide_h2d.exposed([(rc.h2d_s[i], rc.bwd_before_s[i])])
            )
            members += 1
            # the row's source and label: of one member, the first with a line of the user's
            if not label or (c.source and not source):
                source, label = c.source, jax_label(c)
            region_source = region_source or rg.region.source
            shards.add(f"1/{c.shard_divisor} ({c.shard_source})")
        read = members > 0
        if not read and cls.name:
            # A named tensor no backward pass reads (under this plan, or with everything
            # saved): listed anyway, as the MaxText block sets every name (emit.maxtext_yaml).
            rg = by_region[cls.members[0][0]][0]
            c = rg.region.candidates[cls.members[0][1]]
            members, source, label = len(cls.members), c.source, jax_label(c)
            region_source = rg.region.source
        if not members:
            continue
        total += nbytes
        entries.append(
            (
                cls,
                nbytes,
                rec,
                (xfer, exposed),
                members,
                _source_or(source, region_source),
                "; ".join(sorted(shards)) if plan.trace.num_partitions > 1 else "",
                label,
                read,
            )
        )
    threshold = 0.001 * total
    room = max(0, plan.budget.usable - pred.peak_bytes)
    small = [0, 0]
    # Per layer group (a section each), then the largest first.
    for cls, nbytes, rec, (xfer, exposed), members, source, shard, label, read in sorted(
        entries, key=lambda e: (e[0].group or 0, -e[1])
    ):
        d = a.get(cls.key)
        # Small recomputed classes are folded into one line; named ones never are (the
        # MaxText block sets each name, so each has its row).
        if nbytes < threshold and d == "remat" and not cls.name:
            small[0] += 1
            small[1] += nbytes
            continue
        rows.append(
            Row(
                label=cls.label,
                decision=d,
                nbytes_per_step=nbytes,
                members=members,
                recompute_ms=rec * 1e3,
                transfer_ms=xfer * 1e3,
                source=source,
                shard=shard,
                reason=(
                    _reason(d, rec * 1e3, exposed * 1e3, nbytes, plan, room) if read else NOT_READ
                ),
                group=cls.group,
                jax_label=label,
                name=cls.name,
                key=cls.key,
            )
        )

    compiled = plan.verification.compiled_device_bytes
    # the verifying compiler compiles the stock policies too (planning/stock.py)
    short_compiler = (plan.compiler or plan.verification.compiler or "").split(" (")[0]
    planner_fits = (pred.peak_bytes if compiled is None else compiled) <= plan.budget.usable
    # compiled, but no figure to hold to the budget (XLA:CPU keeps host state in its one memory)
    unverified = plan.verification.status == "compiled, unverified"
    if compiled is None and unverified and plan.verification.compiled is not None:
        compiled = plan.verification.compiled.device_bytes  # shown, "unverified"
    policies = [
        PolicyLine(
            name="planner",
            peak_gb=pred.peak_bytes / GB,
            host_gb=pred.host_bytes / GB,
            step_ms=pred.step_s * 1e3,
            fits=planner_fits,
            applicable=True,
            compiled_gb=None if compiled is None else compiled / GB,
            compiler=short_compiler,
            unverified=unverified,
        )
    ]
    for b in plan.baselines:
        policies.append(
            PolicyLine(
                name=b.name,
                peak_gb=b.prediction.peak_bytes / GB,
                host_gb=b.prediction.host_bytes / GB,
                step_ms=b.prediction.step_s * 1e3,
                fits=b.fits,
                applicable=b.applicable,
                compiled_gb=(
                    None if b.compiled_device_bytes is None else b.compiled_device_bytes / GB
                ),
                compiler=short_compiler,
            )
        )
    ver = plan.verification
    sol = plan.solution
    notes = []
    if plan.compiler_note:
        notes.append(
            (
                f"The compiled figures come from {plan.compiler}, not the target's "
                f"compiler: {plan.compiler_note}"
            )
            if not plan.compiler_exact
            else f"{plan.compiler}: {plan.compiler_note}."
        )
    if plan.offload_why:
        notes.append(plan.offload_why)
    if plan.state is not None:
        notes.append("Train state: " + "; ".join(plan.state.lines()) + ".")
    if plan.choice != "planner":
        notes.append(f"The answer is the stock policy {plan.choice}: {plan.choice_why}.")
    elif plan.choice_why:
        notes.append(f"The answer is the planner's plan: {plan.choice_why}.")
    if ver.note:
        notes.append(ver.note)
    if cost.correction_bytes:
        notes.append(
            "The stock policies' predicted peaks are on this budget's memory model, corrected "
            f"by {'+' if cost.correction_bytes > 0 else '-'}"
            f"{fmt_bytes(abs(cost.correction_bytes))} (what its compiles measured against the "
            "model), so they differ from another budget's by the correction; their compiled "
            "figures do not change."
        )
    if cost.unknown_primitives:
        notes.append(
            "No cost rule for: "
            + ", ".join(cost.unknown_primitives)
            + " (costed by their bytes only; see cost_models)."
        )
    merged = [c for c in graph.classes if len(c.members) > 1 and not c.name]
    if merged:
        notes.append(
            f"{len(merged)} unnamed classes merge several tensors of the same signature "
            "(a policy cannot tell them apart); name tensors with checkpoint_name to "
            "decide them separately."
        )
    notes.extend(sharding_notes(plan.trace))
    if plan.trace.undifferentiated_regions:
        # Not "never differentiated": Flax's nn.scan traces a remat body for its shapes, a
        # bind the step's program never runs; a region whose output is unused is another.
        notes.append(
            f"{plan.trace.undifferentiated_regions} checkpoint region(s) were bound while "
            "tracing but have no backward pass in the step's program (a library tracing a "
            "body for its shapes, as Flax's nn.scan does, or an output nothing uses); they "
            "hold nothing to plan."
        )
    for rg in graph.regions:
        if rg.region.scan_unroll > 1 and cost.allow_offload:
            notes.append(
                f"Region {rg.region.id} runs under lax.scan(unroll={rg.region.scan_unroll}): "
                "its tensors are never offloaded (nor by the stock offload policies compared), "
                "because JAX concatenates the unrolled trips' residuals before stacking them "
                "and XLA's host offloader cannot compile compute on host data (our H200 "
                "failed to compile it; docs/xla-flags-research.md). To offload there, use "
                "unroll=1, or k layers per iteration each in its own jax.checkpoint "
                "(examples/llama.py, layers_per_iter)."
            )
    unrolled = [rg.region for rg in graph.regions if not rg.region.in_scan]
    merged = [r.id for r in unrolled if not r.prevent_cse]
    if merged:
        notes.append(
            f"{_regions(merged)} not under lax.scan and jax.checkpoint has prevent_cse=False "
            "there: XLA may merge the recompute with the forward pass (common-subexpression "
            "elimination), so the policy decides little of what the compiled program keeps (for "
            "the Python-loop Llama compiled on the H200, nothing_saveable and "
            "everything_saveable gave the same 31.38 GB, 17.06 vs 48.89 GB with prevent_cse=True: "
            "benchmarks/results/h200-2026-12-02-zoo.md). Use prevent_cse=True (jax.checkpoint's default; MaxText "
            "passes prevent_cse=not scan_layers) for unrolled layers."
        )
    elif unrolled and cost.allow_offload:
        notes.append(
            f"{_regions([r.id for r in unrolled])} not under lax.scan: on GPU, XLA dropped "
            "offloads of unrolled layers in our measurements; check the compiled program "
            "(verification) before trusting offloads there."
        )
    groups = len(plan.emitted.policies)
    if groups:
        same = plan.emitted.policy is not None
        notes.append(
            f"Layer groups: the {groups} checkpoint call sites were decided separately"
            + (
                " and came out the same, so plan.policy serves all of them."
                if same
                else "; pass plan.policies[g] to the g-th group's jax.checkpoint "
                "(plan.policy has no single answer)."
            )
        )
    regions = tuple(
        ("" if rg.region.group is None else f"layer group {rg.region.group}: ")
        + f"region {rg.region.id} at {_source_or(rg.region.source)}: "
        f"{rg.region.multiplicity} trips"
        f"{' under lax.scan' if rg.region.in_scan else ''}"
        + (
            f" ({rg.region.live} held at once: its forward and backward pass run in one "
            f"trip of a loop of {rg.region.in_trip} around it)"
            if rg.region.in_trip > 1
            else ""
        )
        + f", {len(rg.region.candidates)} "
        f"forward equations, user policy {rg.region.user_policy}"
        for rg in graph.regions
    )
    return Report(
        status=ver.status
        if ver.ok or ver.status != "compiled, within budget"
        else "compiled, within budget, but a check failed",
        checks=tuple((c.name, c.ok, c.detail) for c in ver.checks),
        hardware=plan.hardware.name,
        backend=ver.backend,
        compiler=plan.compiler or ver.backend,
        compiler_exact=plan.compiler_exact,
        compiler_note=plan.compiler_note,
        budget_gb=plan.budget_bytes / GB,
        headroom_gb=plan.headroom_bytes / GB,
        headroom_why=plan.headroom_why() if plan.headroom_bytes else "",
        predicted_peak_gb=pred.peak_bytes / GB,
        compiled_gb=None if ver.compiled_device_bytes is None else ver.compiled_device_bytes / GB,
        host_gb=pred.host_bytes / GB,
        step_ms=pred.step_s * 1e3,
        base_ms=pred.base_step_s * 1e3,
        recompute_ms=pred.recompute_s * 1e3,
        saving_ms=pred.materialize_s * 1e3,
        recompute_priced_from=plan.cost.recompute_priced_from,
        transfer_ms=pred.transfer_s * 1e3,
        exposed_ms=pred.exposed_transfer_s * 1e3,
        fixed_gb=pred.fixed_bytes / GB,
        residual_gb=pred.residual_bytes / GB,
        working_set_gb=pred.working_set_bytes / GB,
        solver=(
            f"no CP-SAT solve for this answer: it is the stock policy {plan.choice} "
            f"({sol.num_classes} classes)"
            if plan.choice != "planner"
            else f"CP-SAT {sol.status}, gap {sol.gap:.2%}, {sol.num_classes} classes, "
            f"{sol.num_variables} variables, {sol.wall_s:.2f} s"
            + (
                ""
                if sol.reproducible
                else "; stopped by the wall-clock guard on a slow or loaded machine, so another "
                "run may pick another plan of similar cost (solve on an idle machine, or "
                "name fewer classes with checkpoint_name)"
            )
        ),
        regions=regions,
        rows=tuple(rows),
        small_rows=(small[0], small[1]),
        stock_policies=tuple(policies),
        policy_source=plan.emitted.policy_source,
        xla_flags=plan.emitted.xla_flags,
        flag_notes=plan.emitted.xla_flag_notes,
        maxtext_yaml=plan.emitted.maxtext_yaml,
        notes=tuple(notes),
        rounds=tuple(_round_dict(i + 1, r, plan.budget.usable) for i, r in enumerate(plan.rounds)),
        layer_groups=groups,
        status_lines=_status_lines(plan),
        snippets=_snippets(plan, plan_file),
        budget_split=()
        if plan.state is None
        else tuple(dataclasses.asdict(x) for x in plan.state.parts),
        state_host_leaves=() if plan.state is None else plan.state.host_paths(),
        schedule_exposure=None if ver.schedule is None else dataclasses.asdict(ver.schedule),
        planning_time=planning_time(plan.timings, plan.trace.timings),
        compile_cache=persistent_cache_note(compile_seconds(plan.timings)),
    )


def _snippets(plan, plan_file: str | None) -> dict:
    out = paste_snippets(plan, plan_file or PLAN_FILE)
    out["apply"] = apply_snippet(plan, plan_file or PLAN_FILE)
    if plan.state is not None:
        out["state"] = plan.state.snippet()
    return out


def sharding_notes(trace) -> list[str]:
    """What the report says about a sharded step: bytes are per device, and how each
    candidate's per-device size was found, naming those that fell back (never silently)."""
    if trace.num_partitions <= 1:
        return []
    cands = [c for r in trace.regions for c in r.candidates]
    by_src: dict[str, int] = {}
    for c in cands:
        by_src[c.shard_source] = by_src.get(c.shard_source, 0) + 1
    out = [
        f"Sharded step over {trace.num_partitions} devices: bytes, times and the budget are "
        "per device; per-device sizes of the candidates: "
        + ", ".join(f"{n} {src}" for src, n in sorted(by_src.items()))
        + " (see planner/_src/trace/shard.py)."
    ]
    fallback = [c for c in cands if c.shard_source == "unsharded (conservative)" and c.shape]
    fallback_in = [
        i
        for r in trace.regions
        for i in r.inputs
        if i.shard_source == "unsharded (conservative)" and i.stacked
    ]
    if fallback or fallback_in:
        names = ", ".join(sorted({f"{c.name or c.primitive}{list(c.shape)}" for c in fallback}))
        out.append(
            f"Per-device size unknown for {len(fallback)} candidate(s) and "
            f"{len(fallback_in)} stacked region input(s), counted at their global size "
            f"(conservative: the plan may keep less than it could): {names or 'inputs'}."
        )
    colls = sum(1 for c in cands if c.collectives)
    if colls:
        out.append(
            f"{colls} candidate(s) need collectives the partitioner inserted (e.g. "
            "all-gathers of FSDP weights); their recompute time includes them again."
        )
    return out


def _regions(ids) -> str:
    """'Region 3 is' / 'Regions 0-7 are' / 'Regions 0, 2 are'."""
    ids = sorted(ids)
    if len(ids) == 1:
        return f"Region {ids[0]} is"
    span = ids == list(range(ids[0], ids[-1] + 1))
    return f"Regions {ids[0]}-{ids[-1]} are" if span else f"Regions {', '.join(map(str, ids))} are"
