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

This module runs the three levels for one plan (:func:`verify`) and compiles several plans'
programs ahead on threads (:func:`precompile`). Level 1 is kept.py; which policy each call
site gets, sites.py; the schedule's copy exposure, exposure.py; the Verification of a plan
that moves train state, applied.py; the numerics check, numerics/.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax

from planner._src.cost import evaluate
from planner._src.graph import LivenessGraph
from planner._src.types import (
    Assignment,
    Check,
    CostModel,
    Emitted,
    Prediction,
    Status,
    Trace,
    Verification,
)
from planner._src.verify.exposure import schedule_exposure_of
from planner._src.verify.kept import as_traced, at_global_sizes, kept_checks
from planner._src.verify.sites import policy_maker, region_policy
from planner._src.xla import adapter, compile_options
from planner._src.xla import compile as xla_compile
from planner._src.xla.compile import compile_with, compiled_figures, lower_with

# Backends whose compiler keeps pinned_host buffers apart from device memory in
# memory_analysis (host_temp_size_in_bytes). On the CPU backend both kinds are the same
# RAM and the compiler counts host-placed arrays in temp_size_in_bytes.
_SEPARATE_HOST_MEMORY = ("gpu", "cuda", "rocm", "tpu")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class VerifyRequest:
    """What :func:`verify` checks, and how.

    The plan: ``assignment`` on the traced step (``trace``, ``graph``, ``cost``), what was
    emitted for it (``emitted``: the one policy, or one per layer group, call site in call
    order, when the plan decides groups separately; and its XLA flags, as compiler options:
    the step is compiled with them, because they change the schedule and so the peak: a plan
    verified under the default flags can compile over its budget under its own flags and run
    out of memory there; measured: benchmarks/results/h200-2026-12-02.md), and the cost
    model's ``prediction``; checked on ``step_fn(*args)`` against ``usable_bytes``.

    The options: ``compile`` False traces the step only (level 1; status "not compiled").
    ``backend``: the verifying compiler's backend (None: JAX's default); ``compiler``: its
    description, for the report. ``schedule_exposure``: on an XLA:GPU backend, for a plan
    whose compile has async host copies, also read the exposed copy time from the compiled
    schedule (:func:`schedule_exposure_of`; ``Verification.schedule``). ``precompiled``: the
    program :func:`precompile` compiled for this policy and these flags (a
    :class:`Precompiled`, or the ``Future`` of one, waited for here); it is used instead of
    compiling again."""

    step_fn: Callable
    args: Sequence[Any]
    trace: Trace
    graph: LivenessGraph
    cost: CostModel
    assignment: Assignment
    emitted: Emitted
    prediction: Prediction
    usable_bytes: int
    compile: bool = True
    backend: str | None = None
    compiler: str = ""
    schedule_exposure: bool = True
    precompiled: Any = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class VerifyResult:
    """What :func:`verify` found: the ``verification``; ``not_kept``, the classes the plan
    keeps that JAX does not (level 1: the plan is wrong about them; empty when the policy does
    what the plan says); and ``compiled``, the compiled program (live; the numerics check runs
    it), None when the step was not compiled."""

    verification: Verification
    not_kept: tuple[str, ...] = ()
    compiled: Any = None


def verify(request: VerifyRequest) -> VerifyResult:
    """Check a plan at the three levels of the module docstring (``request``: what and how,
    :class:`VerifyRequest`)."""
    step_fn, args, trace, graph = request.step_fn, request.args, request.trace, request.graph
    cost, assignment = request.cost, request.assignment
    prediction, usable_bytes = request.prediction, request.usable_bytes
    compile, backend, compiler = request.compile, request.backend, request.compiler
    schedule_exposure, precompiled = request.schedule_exposure, request.precompiled
    policy, policies = request.emitted.policy, request.emitted.policies
    compiler_options = request.emitted.compiler_options
    backend = backend or jax.default_backend()
    make = policy_maker(graph, policy, policies)
    fallback = policy if policy is not None else policies[0]
    bound: list = []
    lowered: list = []  # the verify compile's lowered program (the schedule compiles it again)
    compiled = None
    if compile and precompiled is not None:
        if not isinstance(precompiled, Precompiled):  # a Future of precompile's
            precompiled = precompiled.result()
        step_jaxpr, compiled = precompiled.step_jaxpr, precompiled.compiled
        bound = list(precompiled.bound)
        lowered.append(precompiled.lowered)
    elif compile:
        step_jaxpr, compiled = compile_with(
            step_fn, args, make, compiler_options, bound_out=bound, lowered_out=lowered
        )
    else:
        traced, bound = adapter.trace_step_with(step_fn, args, make)
    level1 = kept_checks(
        graph,
        cost,
        assignment,
        bound,
        lambda r: region_policy(r, policy, policies) or fallback,
        global_sizes=trace.num_partitions > 1,
    )
    checks = [k.check for k in level1]
    not_kept = tuple(sorted({c for k in level1 for c in k.not_kept}))
    if not compile:
        return VerifyResult(
            verification=Verification(
                status=Status.NOT_COMPILED,
                compiled=None,
                compiled_device_bytes=None,
                predicted_peak_bytes=prediction.peak_bytes,
                usable_bytes=usable_bytes,
                checks=tuple(checks),
                backend=backend,
                note="compilation skipped (verify_compile=False)",
                compiler=compiler,
            ),
            not_kept=not_kept,
            compiled=compiled,
        )
    figs = compiled_figures(compiled, step_jaxpr, backend=backend, compiler=compiler)

    # Level 2: stacked residuals of the traced step against the full-remat anchor.
    scanned = [(rg, rp) for rg, rp in zip(graph.regions, prediction.regions) if rg.region.in_scan]
    if scanned:
        # The plan as the traced program keeps it (residuals XLA drops later still stacked).
        g = as_traced(graph)
        if trace.num_partitions > 1:
            # The traced step's avals are global (the jaxpr is not partitioned): compare it
            # with the plan at global sizes, not with the per-device prediction.
            g = at_global_sizes(g)
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
        return VerifyResult(
            verification=Verification(
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
            ),
            not_kept=not_kept,
            compiled=compiled,
        )
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
        and backend in compile_options.XLA_GPU_BACKENDS
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
    return VerifyResult(
        verification=Verification(
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
        ),
        not_kept=not_kept,
        compiled=compiled,
    )


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
    compiler_options)`` as an ``Emitted`` carries them (``VerifyRequest.emitted``). Each is
    traced and lowered on this thread (the planner's policies are bound per thread, and the
    user's step is traced only here); the compiles are submitted, each in a copy of the
    caller's context (a deviceless target's scope), and this returns at once: one ``Future``
    of a :class:`Precompiled` per program, in order (XLA compiles without the GIL, and one
    after the other the stock policies' verify compiles are most of a budget's planning
    time; measured: benchmarks/results/h200-2026-12-05-zoo.md)."""
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
