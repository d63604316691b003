"""The compiles of one planning session, found again by what was compiled: a program lowered
again the same way is compiled once (:class:`CompileMemo`, entered with :func:`compile_memo`;
``xla/compile.py``'s ``compile_lowered`` reads it)."""

from __future__ import annotations

import collections
import contextlib
import contextvars
import hashlib
import threading
from collections.abc import Iterator
from typing import Any

import jax

from planner._src.xla import deviceless


class CompileMemo:
    """The compiles of one session, each found again by the lowered program's text, the XLA
    options and the target: a program lowered again the same way (another policy that gives
    the same program, a budget's plan another budget verified) is compiled once. XLA compiles
    the same text under the same options to the same executable, so nothing a guarantee rests
    on is skipped: the figures are that compile's. At most ``size`` executables, least
    recently used out first."""

    def __init__(self, size: int = 8):
        self.size = size
        self.hits = 0
        self._done: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(lowered, options: dict[str, Any], text: str | None = None) -> str:
        """The memo's key of ``lowered`` compiled with ``options`` (``text``: its text, where
        the caller has it already)."""
        scope = deviceless.active_scope()
        target = scope.target.description if scope is not None else jax.default_backend()
        h = hashlib.sha256((lowered.as_text() if text is None else text).encode())
        h.update(repr(sorted(options.items())).encode())
        h.update(target.encode())
        return h.hexdigest()

    def get(self, key: str):
        with self._lock:
            got = self._done.get(key)
            if got is not None:
                self._done.move_to_end(key)
                self.hits += 1
            return got

    def put(self, key: str, compiled) -> None:
        with self._lock:
            self._done[key] = compiled
            while len(self._done) > self.size:
                self._done.popitem(last=False)


_compile_memo: contextvars.ContextVar[CompileMemo | None] = contextvars.ContextVar(
    "planner_compile_memo", default=None
)


def active_memo() -> CompileMemo | None:
    """The memo of the :func:`compile_memo` context around this call (None outside one)."""
    return _compile_memo.get()


@contextlib.contextmanager
def compile_memo(memo: CompileMemo | None) -> Iterator[None]:
    """Within this context (and the compile threads started from it), :func:`compile_lowered`
    takes a program compiled before from ``memo``. None: every compile runs."""
    token = _compile_memo.set(memo)
    try:
        yield
    finally:
        _compile_memo.reset(token)
