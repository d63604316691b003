"""Compiles run side by side: XLA compiles without holding the GIL, so a compile can run on a
thread while the planning thread traces and lowers the next program (the trace stage's
anchors and compiler probes; benchmarks/probe_stability.py)."""

from __future__ import annotations

import concurrent.futures
import contextvars
import time
from collections.abc import Callable, Sequence
from typing import Any


def _timed(call: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    return call(), time.perf_counter() - t


class CompileJobs:
    """Compiles run side by side (XLA compiles without holding the GIL): each job starts as
    it is added, on one of ``workers`` threads, in a copy of the caller's context (a
    deviceless target's scope, a ``ContextVar``, travels with it), so that a compile can run
    while this thread traces and lowers the next program. Fewer than two workers: each job
    runs on this thread when :meth:`results` is asked, in the order added.

        with CompileJobs(workers) as jobs:
            jobs.add("a", lambda: compile_lowered(a))
            ...  # trace and lower b meanwhile
            jobs.add("b", lambda: compile_lowered(b))
            done = jobs.results()  # {name: (result, wall seconds)}, in the order added

    A job that raises raises in :meth:`results`, after the others have finished; leaving the
    block on an error drops the jobs not started and waits for those running."""

    def __init__(self, workers: int):
        self._pool = (
            concurrent.futures.ThreadPoolExecutor(max_workers=workers) if workers >= 2 else None
        )
        self._jobs: dict[str, Any] = {}  # name -> its Future, or the call itself (no pool)

    def __enter__(self) -> CompileJobs:
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def add(self, name: str, call: Callable[[], Any]) -> None:
        if self._pool is None:
            self._jobs[name] = call
        else:
            self._jobs[name] = self._pool.submit(contextvars.copy_context().run, _timed, call)

    def results(self) -> dict[str, tuple[Any, float]]:
        if self._pool is None:
            return {name: _timed(call) for name, call in self._jobs.items()}
        concurrent.futures.wait(list(self._jobs.values()))
        return {name: future.result() for name, future in self._jobs.items()}


def at_once(calls: Sequence[Callable[[], Any]], workers: int) -> list[tuple[Any, float]]:
    """Run ``calls`` on ``workers`` threads (:class:`CompileJobs`) and return each call's
    result with its own wall seconds, in order. Fewer than two workers: one after the other
    on this thread. A call that raises raises here, after the others have finished."""
    with CompileJobs(workers) as jobs:
        for i, call in enumerate(calls):
            jobs.add(str(i), call)
        return list(jobs.results().values())
