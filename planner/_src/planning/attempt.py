"""One candidate made real: emit an assignment (or a stock policy) and verify it on the
subject's compiler (:func:`attempt`); start a plan's verify compile on the compile threads
ahead of its verify (:func:`start_plan_compile`)."""

from __future__ import annotations

import concurrent.futures
import time
import weakref

from planner._src.cost import evaluate
from planner._src.emit.emit import emit
from planner._src.graph import LivenessGraph
from planner._src.planning.context import Attempt, Subject, Timings, normalize
from planner._src.types import Assignment, CostModel, Trace
from planner._src.units import GB
from planner._src.verify.verify import VerifyRequest, precompile, verify


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
) -> Attempt:
    """Emit ``assignment`` (or the stock policy ``stock``) and verify it against ``budget``
    (``precompiled``: its verify compile, started ahead)."""
    if stock is None:
        assignment = normalize(graph, cost, assignment)
    pred = evaluate(cost, graph, assignment)
    class_names = {c.key: c.name for c in graph.classes}
    emitted = emit(assignment, class_names, subject.hardware, stock=stock)
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
