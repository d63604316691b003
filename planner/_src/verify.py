"""Stage 6, verify: compile the step with the emitted policy and hold the plan to it.

Three levels, as JAX's own memories tests do:

1. the policy: JAX's partial evaluation, replayed on every region with the *emitted* policy
   object, keeps exactly the tensors the plan keeps, where the plan keeps them;
2. the traced step: the arrays the forward scans stack for the backward scans grow, relative
   to the full-remat anchor, by exactly the plan's device bytes, and its host-memory arrays
   are the plan's offloaded bytes;
3. the compiled step: ``memory_analysis()`` against the predicted peak and the budget, and
   the HLO's host-memory markers (``S(5)``) when the plan offloads on a backend that places
   buffers in host memory. We saw XLA drop offloads silently (../shared/measurements):
   that is reported as a failed check, never as success.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import jax

from planner._src import schedule as sched
from planner._src.cost import evaluate
from planner._src.graph import LivenessGraph, class_key
from planner._src.types import (
    Assignment,
    Check,
    CompiledFigures,
    Prediction,
    ScheduleExposure,
    Status,
    Trace,
    Verification,
)
from planner._src.units import fmt_bytes
from planner._src.xla import adapter, targets
from planner._src.xla import compile as xla_compile
from planner._src.xla.compile import compile_with, compiled_figures, lower_with

# Backends whose compiler keeps pinned_host buffers apart from device memory in
# memory_analysis (host_temp_size_in_bytes). On the CPU backend both kinds are the same
# RAM and the compiler counts host-placed arrays in temp_size_in_bytes.
_SEPARATE_HOST_MEMORY = ("gpu", "cuda", "rocm", "tpu")


CHECK_KEPT = "JAX keeps the planned residuals"


def _region_policy(region, policy, policies):
    """The policy a region's call site gets: its layer group's, else the one policy."""
    return policies[region.group] if policies and region.group is not None else policy


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class KeptCheck:
    """Level 1 for one region: JAX's residual choice under the emitted policy, replayed,
    against the plan."""

    check: Check
    # Classes the plan keeps (saves or offloads) of which JAX keeps nothing of their shape
    # in this region: the plan's saving rests on them, and it is wrong (the session solves
    # again with them recomputed).
    not_kept: tuple[str, ...] = ()


def kept_checks(
    graph: LivenessGraph, cost, assignment: Assignment, bound, policy_of, *, global_sizes: bool
) -> list[KeptCheck]:
    """Level 1: replay JAX's own residual selection (``partial_eval_jaxpr_custom``) with the
    emitted policy on every region the verify trace bound, and compare the bytes JAX keeps,
    in device and in host memory, with what the plan counts for that region (the traced
    view, at global sizes where the step is sharded: the jaxpr's avals are global)."""
    g = _as_traced(graph)
    if global_sizes:
        g = _at_global_sizes(g)
    pred = evaluate(cost, g, assignment)
    by_bind = {br.region_id: br for br in bound}
    out = []
    for rg, rp in zip(g.regions, pred.regions):
        r = rg.region
        br = next((by_bind[b] for b in r.bind_ids if b in by_bind), None)
        if br is None:
            continue
        kept = adapter.kept_by_policy(br, policy_of(r))
        want_dev = rp.device_residual_bytes + rp.invariant_residual_bytes
        want_host = rp.host_residual_bytes + rp.invariant_host_bytes
        ok = kept.device_bytes == want_dev and kept.host_bytes == want_host
        where = f"region {r.id}" + ("" if r.group is None else f" (layer group {r.group})")
        not_kept = ()
        if ok:
            detail = (
                f"{where}: JAX keeps {kept.device_bytes:,} device and {kept.host_bytes:,} "
                "host bytes per trip, as planned"
            )
        else:
            shapes = Counter((tuple(s), d) for s, d, _ in kept.residuals)
            planned = {}
            d = assignment.as_dict()
            for c in r.candidates:
                key = class_key(r, c)
                if (
                    rp.needed[c.index]
                    and c.decidable
                    and not c.effectful
                    and d.get(key, "remat") != "remat"
                ):
                    planned.setdefault(key, []).append((tuple(c.shape), c.dtype))
            not_kept = tuple(
                sorted(k for k, avals in planned.items() if not any(shapes[a] for a in avals))
            )
            labels = {c.key: c.label for c in graph.classes}
            detail = (
                f"{where}: JAX keeps {kept.device_bytes:,} device and "
                f"{kept.host_bytes:,} host bytes per trip where the plan counts "
                f"{want_dev:,} and {want_host:,}"
                + (
                    f"; kept by the plan, not by JAX: {[labels.get(k, k) for k in not_kept]}"
                    if not_kept
                    else ""
                )
            )
        out.append(KeptCheck(check=Check(name=CHECK_KEPT, ok=ok, detail=detail), not_kept=not_kept))
    return out


def _as_traced(graph: LivenessGraph) -> LivenessGraph:
    """``graph`` with each region's candidates as the traced program keeps them
    (``Region.traced_candidates``); ``graph`` itself where no region has another view."""
    if all(rg.region.traced_candidates is None for rg in graph.regions):
        return graph
    regions = tuple(
        rg
        if rg.region.traced_candidates is None
        else dataclasses.replace(
            rg, region=dataclasses.replace(rg.region, candidates=rg.region.traced_candidates)
        )
        for rg in graph.regions
    )
    return dataclasses.replace(graph, regions=regions)


def _at_global_sizes(graph: LivenessGraph) -> LivenessGraph:
    """``graph`` with every candidate and region input at its global (jaxpr) size, for
    checks against the traced jaxpr of a sharded step (see trace.py on sharded steps)."""
    regions = tuple(
        dataclasses.replace(
            rg,
            region=dataclasses.replace(
                rg.region,
                candidates=tuple(
                    dataclasses.replace(c, nbytes=c.global_nbytes or c.nbytes)
                    for c in rg.region.candidates
                ),
                inputs=tuple(
                    dataclasses.replace(i, nbytes=i.global_nbytes or i.nbytes)
                    for i in rg.region.inputs
                ),
            ),
        )
        for rg in graph.regions
    )
    return dataclasses.replace(graph, regions=regions)


def policy_maker(graph: LivenessGraph, policy, policies: tuple = ()):
    """``make(region_id, region)``: the emitted policy each checkpoint call site gets, as the
    user's code would pass it (its layer group's, else the one policy); the trace stage
    recorded which adapter region ids (bind order) each region's call sites had."""
    by_bind = {
        b: _region_policy(rg.region, policy, policies)
        for rg in graph.regions
        for b in rg.region.bind_ids
    }
    fallback = policy if policy is not None else policies[0]
    return lambda rid, r: by_bind.get(rid, fallback)


def verify(
    step_fn: Callable,
    args: Sequence[Any],
    trace: Trace,
    graph: LivenessGraph,
    cost,
    assignment: Assignment,
    policy,
    prediction: Prediction,
    usable_bytes: int,
    *,
    compile: bool = True,
    policies: tuple = (),
    compiler_options: Sequence[tuple[str, Any]] = (),
    backend: str | None = None,
    compiler: str = "",
    compiled_out: list | None = None,
    schedule_exposure: bool = True,
    precompiled: Any = None,
) -> tuple[Verification, tuple[str, ...]]:
    """Check a plan at the three levels of the module docstring.

    ``policy``: the one emitted policy; ``policies``: one per layer group (call site, in
    call order) when the plan decides groups separately (then ``policy`` may be None).
    ``compiler_options``: the plan's XLA flags as compiler options (``Emitted``); the step is
    compiled with them, because they change the schedule and so the peak: a plan verified
    under the default flags can compile over its budget under its own flags and run out of
    memory there (measured: benchmarks/results/h200-2026-12-02.md).

    ``compiled_out``, when given, receives the compiled program (the numerics check runs it).
    ``precompiled``: the program :func:`precompile` compiled for this policy and these
    flags (a :class:`Precompiled`, or the ``Future`` of one, waited for here); it is used
    instead of compiling again.
    ``schedule_exposure``: on an XLA:GPU backend, for a plan whose compile has async host
    copies, also read the exposed copy time from the compiled schedule
    (:func:`schedule_exposure_of`; ``Verification.schedule``).

    Returns the verification and the classes the plan keeps that JAX does not (level 1:
    the plan is wrong about them; empty when the policy does what the plan says)."""
    backend = backend or jax.default_backend()
    make = policy_maker(graph, policy, policies)
    fallback = policy if policy is not None else policies[0]
    bound: list = []
    lowered: list = []  # the verify compile's lowered program (the schedule compiles it again)
    if compile and precompiled is not None:
        if not isinstance(precompiled, Precompiled):  # a Future of precompile's
            precompiled = precompiled.result()
        step_jaxpr, compiled = precompiled.step_jaxpr, precompiled.compiled
        bound = list(precompiled.bound)
        lowered.append(precompiled.lowered)
        if compiled_out is not None:
            compiled_out.append(compiled)
    elif compile:
        step_jaxpr, compiled = compile_with(
            step_fn, args, make, compiler_options, bound_out=bound, lowered_out=lowered
        )
        if compiled_out is not None:
            compiled_out.append(compiled)
    else:
        traced, bound = adapter.trace_step_with(step_fn, args, make)
    level1 = kept_checks(
        graph,
        cost,
        assignment,
        bound,
        lambda r: _region_policy(r, policy, policies) or fallback,
        global_sizes=trace.num_partitions > 1,
    )
    checks = [k.check for k in level1]
    not_kept = tuple(sorted({c for k in level1 for c in k.not_kept}))
    if not compile:
        return Verification(
            status=Status.NOT_COMPILED,
            compiled=None,
            compiled_device_bytes=None,
            predicted_peak_bytes=prediction.peak_bytes,
            usable_bytes=usable_bytes,
            checks=tuple(checks),
            backend=backend,
            note="compilation skipped (verify_compile=False)",
            compiler=compiler,
        ), not_kept
    figs = compiled_figures(compiled, step_jaxpr, backend=backend, compiler=compiler)

    # Level 2: stacked residuals of the traced step against the full-remat anchor.
    scanned = [(rg, rp) for rg, rp in zip(graph.regions, prediction.regions) if rg.region.in_scan]
    if scanned:
        # The plan as the traced program keeps it (residuals XLA drops later still stacked).
        g = _as_traced(graph)
        if trace.num_partitions > 1:
            # The traced step's avals are global (the jaxpr is not partitioned): compare it
            # with the plan at global sizes, not with the per-device prediction.
            g = _at_global_sizes(g)
        if g is not graph:
            scanned = [
                (rg, rp)
                for rg, rp in zip(g.regions, evaluate(cost, g, assignment).regions)
                if rg.region.in_scan
            ]
        full = {p.region_id: p for p in evaluate(cost, g, Assignment.of({})).regions}
        # Per step of the loops around it, a region stacks the residuals of the executions
        # held at once (Region.live: one trip's where forward and backward share an outer
        # loop's trip, e.g. several train steps or microbatches under one lax.scan).
        want_dev = sum(
            rg.region.live
            * (
                rp.device_residual_bytes
                + rp.input_residual_bytes
                - full[rg.region.id].input_residual_bytes
            )
            for rg, rp in scanned
        )
        # Stacked host arrays: per-trip offloads (loop-invariant ones are hoisted, not stacked).
        want_host = sum(rg.region.live * rp.host_residual_bytes for rg, rp in scanned)
        grown = figs.stacked_device_bytes - trace.anchor.stacked_device_bytes
        checks.append(
            Check(
                name="traced step stacks the planned device residuals",
                ok=grown == want_dev,
                detail=f"forward scans stack {grown:,} more device bytes than under full remat; "
                f"the plan keeps {want_dev:,} per-trip bytes (loop-invariant ones are "
                "hoisted, not stacked)",
            )
        )
        if want_host or figs.stacked_host_bytes:
            checks.append(
                Check(
                    name="offloaded residuals live in host memory",
                    ok=figs.stacked_host_bytes == want_host,
                    detail=f"{figs.stacked_host_arrays} stacked arrays, {figs.stacked_host_bytes:,} "
                    f"bytes in {adapter.HOST_KIND}; the plan offloads {want_host:,} bytes",
                )
            )

    # Level 3: the compiled program, counted as users count it (arguments + outputs -
    # aliased + temporaries).
    separate_host = backend in _SEPARATE_HOST_MEMORY
    device_bytes = figs.device_bytes
    note = ""
    if device_bytes < 0 or min(figs.argument_bytes, figs.output_bytes, figs.temp_bytes) < 0:
        # arguments + outputs - aliased + temporaries cannot be negative for a real program
        # (aliased bytes are outputs that are also arguments): a figure that is says nothing.
        checks.append(
            Check(
                name="the compiler's memory figure is a size",
                ok=False,
                detail=f"memory_analysis() gave arguments {figs.argument_bytes:,} + outputs "
                f"{figs.output_bytes:,} - aliased {figs.alias_bytes:,} + temporaries "
                f"{figs.temp_bytes:,} = {device_bytes:,} bytes; a negative size cannot be "
                "held to a budget",
            )
        )
        return Verification(
            status=Status.INVALID,
            compiled=figs,
            compiled_device_bytes=None,
            predicted_peak_bytes=prediction.peak_bytes,
            usable_bytes=usable_bytes,
            checks=tuple(checks),
            backend=backend,
            note="The compiler's memory figure for this plan is negative "
            f"({device_bytes:,} bytes), so the plan is not verified: do not run it at this "
            "budget before compiling it on the target.",
            compiler=compiler,
        ), not_kept
    status = Status.OK if device_bytes <= usable_bytes else Status.OVER
    estimated = False
    if not separate_host and figs.jaxpr_host_bytes and status == Status.OVER:
        # Same RAM for both memory kinds: the compiler counts host arrays in temp, so it
        # cannot tell whether the device part fits. The figure without them is an estimate.
        # Only temporaries can hold them, and XLA may have deleted some the traced program
        # has: never subtract more than the compiler counted in temp (subtracting the
        # traced bytes from a program XLA had emptied gave -6,291,456 bytes "within budget").
        estimated = True
        host_in_temp = min(figs.jaxpr_host_bytes, figs.temp_bytes)
        device_bytes -= host_in_temp
        if device_bytes <= usable_bytes:
            status = Status.UNVERIFIED
        note = (
            f"The {backend} backend keeps {adapter.HOST_KIND} arrays in the same memory as "
            f"device arrays, so its compiler counts the {host_in_temp:,} offloaded "
            f"bytes in temp ({figs.device_bytes:,} bytes in all): without them the program "
            f"needs an estimated {device_bytes:,} bytes; only a compiler with host memory "
            "(the target GPU's) can verify the plan."
        )
    planned_host = prediction.host_bytes > 0
    if planned_host and separate_host:
        checks.append(
            Check(
                name="compiled program places offloads in host memory",
                ok=figs.host_buffers_in_hlo > 0 and figs.host_temp_bytes > 0,
                detail=f"{figs.host_buffers_in_hlo} HLO instructions in host memory space S(5), "
                f"host temp {figs.host_temp_bytes:,} bytes; an offload the compiler dropped "
                "shows as 0 here",
            )
        )
    timed = None
    # schedule.py reads XLA:GPU's async host copies and copy streams (XLA:CPU has none; a
    # TPU's copies are not XLA:GPU's streams)
    if (
        schedule_exposure
        and backend in xla_compile.XLA_GPU_BACKENDS
        and figs.async_host_copies_in_hlo
    ):
        timed = schedule_exposure_of(
            compiled,
            cost,
            prediction,
            compiler,
            # the same lowered program, compiled under other options: no second trace
            recompile=lambda options: xla_compile.compile_lowered(lowered[0], dict(options)),
            compiler_options=compiler_options,
        )
    return Verification(
        status=status,
        compiled=figs,
        compiled_device_bytes=int(device_bytes),
        predicted_peak_bytes=prediction.peak_bytes,
        usable_bytes=usable_bytes,
        checks=tuple(checks),
        backend=backend,
        note=note,
        exact=not estimated,
        compiler=compiler,
        schedule=timed,
    ), not_kept


@dataclasses.dataclass(frozen=True)
class Precompiled:
    """One program :func:`precompile` compiled: the traced step's jaxpr, its lowered program
    and compiled executable (live), and the regions its trace bound (the level-1 checks
    replay them)."""

    step_jaxpr: Any
    lowered: Any
    compiled: Any
    bound: tuple


def precompile(
    step_fn: Callable,
    args: Sequence[Any],
    graph: LivenessGraph,
    programs: Sequence[tuple[Any, tuple, Sequence[tuple[str, Any]]]],
    pool,
) -> list:
    """Compile several policies' programs of the step on the threads of ``pool`` (a
    ``concurrent.futures.Executor``): ``programs`` are ``(policy, policies,
    compiler_options)`` as :func:`verify` takes them. Each is traced and lowered on this
    thread (the planner's policies are bound per thread, and the user's step is traced only
    here); the compiles are submitted, each in a copy of the caller's context (a deviceless
    target's scope), and this returns at once: one ``Future`` of a :class:`Precompiled` per
    program, in order (XLA compiles without the GIL, and one after the other the stock
    policies' verify compiles are most of a budget's planning time; measured:
    benchmarks/results/h200-2026-12-05-zoo.md)."""
    import contextvars

    def compile_one(step_jaxpr, low, bound, options):
        compiled = xla_compile.compile_lowered(low, options)
        return Precompiled(step_jaxpr=step_jaxpr, lowered=low, compiled=compiled, bound=bound)

    futures = []
    for policy, policies, options in programs:
        make = policy_maker(graph, policy, policies)
        step_jaxpr, low, bound = lower_with(step_fn, args, make)
        futures.append(
            pool.submit(
                contextvars.copy_context().run,
                compile_one,
                step_jaxpr,
                low,
                tuple(bound),
                dict(options),
            )
        )
    return futures


def schedule_exposure_of(
    compiled,
    cost,
    prediction: Prediction,
    compiler: str,
    *,
    recompile: Callable[[tuple], Any] | None = None,
    compiler_options: Sequence[tuple[str, Any]] = (),
) -> ScheduleExposure:
    """The exposed host-copy time the compiled schedule predicts, per direction
    (planner/_src/schedule.py), beside the cost model's for the same plan.

    On a live GPU the verify compile is the device's own program: its schedule is read. On
    a deviceless target ``recompile(options)`` compiles the plan again with Triton GEMMs on
    (``target.pricing_compile_options``: the device's kernels, as the recompute pricing
    compiles the anchor; with them off XLA folds the loop slices into cuBLAS calls and
    schedules the reloads otherwise, further from the device's; measured:
    benchmarks/results/schedule-exposure-2026-12-05.md),
    and that schedule is read. ``step_s``: the model's step with the schedule's reload (h2d) exposure in place of
    the model's; the stores keep the model's figure (``ScheduleExposure``'s docstring says
    why)."""
    pricing = (
        xla_compile.pricing_compile_options()
    )  # None on a live GPU: its compile is the device's
    source = "the verify compile"
    if pricing is not None and recompile is not None:
        options = {**dict(compiler_options), **pricing}
        compiled = recompile(tuple(options.items()))
        source = "a second compile with Triton GEMMs on (the device's GEMM emitter)"
    w = sched.read_windows(
        compiled.as_text(),
        cost.hardware,
        compiler=compiler,
        pricing="kernels",
        # (the module was compiled by this process's XLA: its streams are this jaxlib's)
        host_streams=sched.host_streams_of(targets.jaxlib_version()),
    )
    by = w.by_direction()
    regions = list(zip(cost.regions, prediction.regions))
    model_d2h = sum(rc.multiplicity * p.exposed_fwd_s for rc, p in regions)
    model_h2d = sum(rc.multiplicity * p.exposed_bwd_s for rc, p in regions)
    return ScheduleExposure(
        d2h_copy_s=by["d2h"][0],
        d2h_exposed_s=by["d2h"][2],
        h2d_copy_s=by["h2d"][0],
        h2d_exposed_s=by["h2d"][2],
        model_d2h_exposed_s=model_d2h,
        model_h2d_exposed_s=model_h2d,
        step_s=prediction.step_s - model_h2d + by["h2d"][2],
        copies=len(w.copies),
        compiler=compiler,
        source=source,
    )


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
