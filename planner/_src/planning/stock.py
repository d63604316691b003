"""The stock policies (JAX's and MaxText's) on the verifying compiler: each compiled once
per Planner, budget-free, and held to each budget by its figure (:class:`StockCompiles`);
the fastest of them that fits (:func:`fastest_verified`)."""

from __future__ import annotations

import time
from collections.abc import Mapping

from planner._src.cost.baselines import stock_assignment
from planner._src.emit.emit import emit
from planner._src.planning.attempt import CompileThreads, attempt
from planner._src.planning.context import Attempt, Subject, Timings, normalize
from planner._src.policies import STOCK
from planner._src.types import Trace, Verification
from planner._src.xla import compile_options


class StockCompiles:
    """The verifying compiler's figures of the stock policies for one Planner: each
    compiled once, and once for all stock policies that decide every class alike (the
    anchors give ``nothing_saveable`` and ``everything_saveable``). Compiles may start ahead
    on the compile threads (:meth:`prefetch`) and are taken by the verify that needs them."""

    def __init__(self, subject: Subject, trace: Trace, threads: CompileThreads):
        self.subject = subject
        self.threads = threads
        self._ver: dict[str, Verification] = {}
        self._compiled: dict = {}  # name -> its verify compile (live)
        self._pending: dict = {}  # name -> a Future of its verify program
        self._bytes: dict[str, int | None] = {"nothing_saveable": trace.anchor.device_bytes}
        # the stock policies with the optimizer state on the host (train_state.py: MaxText's
        # optimizer_memory_host_offload), compiled as applied: (name, selection) -> Attempt
        self._applied: dict[tuple, Attempt] = {}
        if trace.anchor_saved is not None:
            self._bytes["everything_saveable"] = trace.anchor_saved.device_bytes

    @property
    def figures(self) -> Mapping[str, int | None]:
        """Stock policy -> its compiled device bytes, None where its compile gave none."""
        return dict(self._bytes)

    @property
    def compiled_bytes(self) -> Mapping[str, int]:
        """Stock policy -> its compiled device bytes, for those compiled so far."""
        return {n: b for n, b in self._bytes.items() if b is not None}

    @property
    def started(self) -> tuple[str, ...]:
        """The stock policies whose verify compiles run in the background, not yet taken."""
        return tuple(self._pending)

    def verification(self, name: str) -> Verification | None:
        """The budget-free verification of stock policy ``name`` (None: not compiled by a
        verify, e.g. an anchor)."""
        return self._ver.get(name)

    def compiled(self, name: str):
        """The live verify compile of ``name`` (None where there is none)."""
        return self._compiled.get(name)

    def exact(self, name: str) -> bool:
        """Whether ``name``'s compiled figure is exact (not an estimate with host bytes
        subtracted); the anchors, compiled without offloads, are."""
        ver = self._ver.get(name)
        return ver.exact if ver is not None else True

    def fit_bytes(self, name: str, timings: Timings, trace, graph, cost) -> int | None:
        """The verifying compiler's bytes for stock policy ``name`` (compiled now if needed;
        None where verify compiles are off)."""
        if name in self._bytes:
            return self._bytes[name]
        if not self.subject.options.verify_compile:
            return None
        pending = same_program(name, graph, cost, dict.fromkeys(self._pending, 1))
        if pending is not None and name not in self._pending:  # started in the background
            self.fit_bytes(pending, timings, trace, graph, cost)
        other = same_program(name, graph, cost, self._bytes)
        if other is not None:
            got = self._bytes[name] = self._bytes[other]  # the same program
            if other in self._ver:
                self._ver[name] = self._ver[other]
                self._compiled[name] = self._compiled.get(other)
            return got
        att = self.attempt(name, timings, trace, graph, cost, 0)
        self._ver[name] = att.verification
        # the numerics check runs it, if chosen (compiled again where it was compiled for
        # its figures only: numerics_check.py)
        self._compiled[name] = att.compiled
        self._bytes[name] = att.verification.compiled_device_bytes
        return self._bytes[name]

    def attempt(self, name: str, timings: Timings, trace, graph, cost, budget: int) -> Attempt:
        """Stock policy ``name`` emitted and verified against ``budget`` (its compile taken
        from the background where it was started). Compiled for its figures only, also where
        the numerics check runs the Planner's other compiles: a stock policy is run only where
        it is the answer, and most are compiled to be found over the budget (XLA:CPU's LLVM
        at level 0: the same figures in about two thirds of the time,
        xla.compile_options.COMPILE_ONLY_CPU_OPTIONS)."""
        with compile_options.compile_only(True):
            return attempt(
                self.subject,
                timings,
                trace,
                graph,
                cost,
                stock_assignment(graph, name),
                budget,
                stock=name,
                label=f"stock {name}",
                precompiled=self._pending.pop(name, None),
            )

    def applied(self, key: tuple, make) -> Attempt:
        """The attempt of a stock policy with the train state placed (``key``: its name and
        the placement's selection), made by ``make()`` once per Planner (budget-free: held
        to each budget by its figure)."""
        if key not in self._applied:
            self._applied[key] = make()
        return self._applied[key]

    def applied_bytes(self, key: tuple) -> int | None:
        """The compiled device bytes of :meth:`applied`'s attempt, if it was compiled."""
        att = self._applied.get(key)
        return None if att is None else att.verification.compiled_device_bytes

    def prefetch(self, names, timings: Timings, graph, cost) -> None:
        """Start the verify compiles of the stock policies ``names`` (those not compiled or
        started yet, one per distinct program) on the compile threads, and return: each is
        traced and lowered here, compiled there, and taken by the verify that needs it.
        Where compiles do not run ahead: nothing (each is compiled when verified)."""
        if not self.threads.on:
            return
        todo: list[str] = []
        for name in names:
            if name in self._bytes or name in self._pending or name in todo:
                continue
            known = {**self._bytes, **dict.fromkeys([*self._pending, *todo], 1)}
            if same_program(name, graph, cost, known) is None:
                todo.append(name)
        if not todo:
            return
        t = time.perf_counter()
        class_names = {c.key: c.name for c in graph.classes}
        programs = []
        for name in todo:
            e = emit(stock_assignment(graph, name), class_names, self.subject.hardware, stock=name)
            programs.append((e.policy, e.policies, e.compiler_options))
        workers = self.threads.workers
        self.subject.say(
            f"compiling {len(todo)} stock policies in the background, {workers} at once"
        )
        with compile_options.compile_only(True):
            started = self.threads.start(graph, programs)
        self._pending.update(zip(todo, started, strict=True))
        timings.timed(
            f"lower {len(todo)} stock policies; compiled in the background, {workers} at once", t
        )


def same_program(name: str, graph, cost, compiled) -> str | None:
    """A stock policy among ``compiled`` (names with a figure) that decides every class as
    ``name`` does, offloading alike: the same program, compiled once."""
    a = normalize(graph, cost, stock_assignment(graph, name))
    for other, got in compiled.items():
        if (
            got is not None
            and other != name
            and STOCK[other].offloads == STOCK[name].offloads
            and normalize(graph, cost, stock_assignment(graph, other)) == a
        ):
            return other
    return None


def offload_estimate(name: str, platform: str) -> bool:
    """Whether stock policy ``name``'s figure can only be an estimate: an offloading policy
    compiled for a CPU target (host memory is the same memory there)."""
    return STOCK[name].offloads and platform == "cpu"
