"""One candidate made real: emit an assignment (or a stock policy) and verify it on the
subject's compiler (:func:`attempt`); start a plan's verify compile on the compile threads
ahead of its verify (:func:`start_plan_compile`).

A candidate that puts train state in pinned host memory is verified by compiling the step
as applied (emit/apply_state.py, the step ``plan.apply`` returns; or the user's ``build``):
the traced step keeps the state in HBM, so only that compile shows the plan's bytes
(verify/applied.py reads it)."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
import weakref

from planner._src.budget import io_bytes, margin_of, program_usable
from planner._src.cost import evaluate
from planner._src.cost.state import evaluate_state
from planner._src.emit.apply import binding
from planner._src.emit.apply_state import apply_state
from planner._src.emit.emit import emit
from planner._src.errors import PlannerError
from planner._src.graph import LivenessGraph
from planner._src.planning.context import (
    AppliedRun,
    Attempt,
    StateSpec,
    Subject,
    Timings,
    normalize,
)
from planner._src.trainstate import StateApply, check_compiled, placement_of
from planner._src.types import Assignment, CostModel, Emitted, Trace
from planner._src.units import GB
from planner._src.verify.applied import applied_step_verification
from planner._src.verify.verify import VerifyRequest, precompile, verify
from planner._src.xla import compile as xla_compile
from planner._src.xla import deviceless
from planner._src.xla.deviceless_bound import unseen_workspaces


def attempt(
    subject: Subject,
    timings: Timings,
    trace: Trace,
    graph: LivenessGraph,
    cost: CostModel,
    assignment: Assignment,
    budget: int,
    *,
    stock: str | None = None,
    label: str = "",
    precompiled=None,
    state: StateSpec | None = None,
    state_on_host: frozenset = frozenset(),
) -> Attempt:
    """Emit ``assignment`` (or the stock policy ``stock``) and verify it against ``budget``
    (``precompiled``: its verify compile, started ahead); with ``state_on_host`` (leaves of
    ``state``), the step as applied is compiled (module docstring)."""
    if stock is None:
        assignment = normalize(graph, cost, assignment)
    pred = evaluate(cost, graph, assignment, state_on_host=state_on_host)
    class_names = {c.key: c.name for c in graph.classes}
    emitted = emit(
        assignment, class_names, subject.hardware, stock=stock, host_copies=bool(state_on_host)
    )
    if state_on_host:
        return _attempt_applied(
            subject,
            timings,
            graph,
            cost,
            assignment,
            pred,
            emitted,
            budget,
            state,
            state_on_host,
            label,
            io_bytes(trace),
            margin_of(subject.compiler, trace),
        )
    opts = subject.options
    if opts.verify_compile:
        subject.say(f"compiling {label or 'the plan'} for {budget / GB:g} GB to verify it")
    t = time.perf_counter()
    with subject.scope():
        res = verify(
            VerifyRequest(
                step_fn=subject.fn,
                args=subject.args,
                trace=trace,
                graph=graph,
                cost=cost,
                assignment=assignment,
                emitted=emitted,
                prediction=pred,
                usable_bytes=budget,
                compile=opts.verify_compile,
                backend=subject.backend,
                compiler=subject.compiler.description,
                schedule_exposure=opts.schedule_exposure,
                precompiled=precompiled,
            )
        )
    timings.timed(f"verify ({label or 'plan'})", t)
    return Attempt(
        assignment,
        pred,
        emitted,
        res.verification,
        res.not_kept,
        res.compiled,
        cost=cost,
        graph=graph,
    )


def state_apply(state: StateSpec, on_host: frozenset) -> StateApply:
    """How ``state`` is applied with the leaves ``on_host`` (emit/apply_state.py)."""
    sel = state.selection
    return StateApply(
        opt_path=sel.opt_path,
        params_path=sel.params_path,
        container=sel.container,
        on_host=frozenset(on_host),
        layers=state.layers,
        mode=state.mode,
        mode_why=state.mode_why,
    )


def bind_groups(graph: LivenessGraph) -> dict[int, int | None]:
    """Bind order of the step's checkpoint call sites -> their layer group (Plan.bind_groups)."""
    return {b: rg.region.group for rg in graph.regions for b in rg.region.bind_ids}


def _attempt_applied(
    subject: Subject,
    timings: Timings,
    graph: LivenessGraph,
    cost: CostModel,
    assignment: Assignment,
    pred,
    emitted: Emitted,
    budget: int,
    state: StateSpec,
    on_host: frozenset,
    label: str,
    io: int,
    margin,
) -> Attempt:
    """A candidate with train state on the host, verified by compiling the step as applied
    (``plan.apply``'s, or the user's ``build``) and reading its device and host bytes; held
    to ``budget`` (folded for ``io`` input/output bytes) by its own inputs, outputs and
    workspaces under the verifying compiler's ``margin`` (budget.program_usable)."""
    placement = placement_of(state.leaves, on_host)
    terms = evaluate_state(cost.state, on_host)
    compiler = subject.compiler
    subject.say(f"compiling {label or 'the plan'} as applied for {budget / GB:g} GB")
    t = time.perf_counter()
    # host parameters are streamed into the layers by the user's step: only build applies them
    compiles = subject.options.verify_compile and (
        state.build is not None or not placement.param_paths()
    )
    if not compiles:
        jitted = args = target_args = None
    elif state.build is not None:
        jitted, args = state.build(emitted.policy, placement)
        target_args = deviceless.args_for(compiler, args)
    else:
        step = apply_state(
            subject.fn,
            binding(bind_groups(graph), emitted.policy, emitted.policies),
            state_apply(state, on_host),
        )
        args = target_args = step.placed(subject.args)
        jitted = step.jitted(args)
    run = None
    check = None
    limit = budget
    if compiles:
        with subject.scope():
            prog = xla_compile.compile_traced(
                compiler, jitted, target_args, emitted.compiler_options or None
            )
        check = check_compiled(prog.compiled, placement, terms)
        ws = None
        if compiler.kind == "deviceless":
            ws = unseen_workspaces(prog.compiled.as_text() or "").bytes
        limit = program_usable(budget, io, check.device_bytes - check.temp_bytes, margin, ws)
        if compiler.kind != "deviceless":
            run = AppliedRun(prog.compiled, tuple(args))
        if subject.backend == "cpu" and check.host_argument_bytes == 0 and check.planned_host_bytes:
            check = dataclasses.replace(check, estimated=True)  # XLA:CPU: no host memory space
        elif not check.host_matches:
            raise PlannerError(
                f"The compiled step does not hold the plan's host bytes: {check.status}.\n"
                + (
                    "Why: the step that build() returns does not apply the placement.\nFix: "
                    "jit the step with plan.state.shardings / plan.state.param_shardings as "
                    "the in and out shardings of the optimizer state and parameters, put them "
                    "there with jax.device_put, wrap the layer with "
                    "plan.state.stream_layer_params (host parameters) and the update with "
                    "plan.state.streamed_apply (or streamed_update where no parameter moves)."
                    if state.build is not None
                    else "Why: the step as applied did not take or give back the optimizer "
                    f"state at `{state.selection.opt_text}` in pinned host memory (a step "
                    "must return the new state, shaped as it takes it).\nFix: return the new "
                    "optimizer state from the step, or pass build= to apply the placement "
                    "yourself."
                )
            )
    timings.timed(f"verify as applied ({label or 'plan'})", t)
    ver = applied_step_verification(
        check, pred.peak_bytes, limit, backend=subject.backend, compiler=compiler
    )
    return Attempt(
        assignment,
        pred,
        emitted,
        ver,
        (),
        run,
        cost=cost,
        graph=graph,
        state_on_host=frozenset(on_host),
        state_check=check,
    )


class CompileThreads:
    """The Planner's compile threads, started at first use (``Subject.compile_workers()``
    of them): verify compiles run there while the planning thread goes on."""

    def __init__(self, subject: Subject):
        self.subject = subject
        self.workers = subject.compile_workers()
        self._pool = None

    @property
    def on(self) -> bool:
        """Whether compiles run ahead: two workers or more, and verify compiles asked for."""
        return self.workers >= 2 and self.subject.options.verify_compile

    def pool(self) -> concurrent.futures.Executor:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.workers, thread_name_prefix="planner-compile"
            )
            weakref.finalize(self, self._pool.shutdown, wait=False)
        return self._pool

    def start(self, graph: LivenessGraph, programs) -> list:
        """Trace and lower ``programs`` (``(policy, policies, compiler_options)``) here and
        compile them on the threads: one ``Future`` per program."""
        with self.subject.scope():
            return precompile(self.subject.fn, self.subject.args, graph, programs, self.pool())


def start_plan_compile(threads: CompileThreads, graph, cost, assignment):
    """Start the verify compile of the plan ``assignment`` on the compile threads and return
    its ``Future`` (None where compiles do not run ahead): the planning thread lowers the
    stock policies meanwhile (measured: benchmarks/results/planning-time-2026-12-05b.md)."""
    if not threads.on:
        return None
    assignment = normalize(graph, cost, assignment)
    class_names = {c.key: c.name for c in graph.classes}
    e = emit(assignment, class_names, threads.subject.hardware)
    (started,) = threads.start(graph, [(e.policy, e.policies, e.compiler_options)])
    return started
