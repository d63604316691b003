"""The session cache of ``planner.solve`` and ``planner.pareto``: the Planners of the last few
steps planned in this process, each found again by its key (:func:`session_key`), so a later
call on the same step keeps its trace, anchors, stock-policy compiles, numerics reference
and plans instead of making them again.

The key is the step's :class:`~planner._src.fingerprints.StepFingerprint` ``.key`` (the
program, the arguments' shapes and dtypes, the JAX: one trace of the step, the only work a
call that finds its Planner does), with what else makes a Planner's answers: the arguments'
shardings, the hardware profile, this machine's backend and devices (the compiler a Planner
resolves) and the options. Where the numerics check runs the step, its answer depends on the
values of the arguments and of the step's closed-over arrays too: a Planner is found only
for the same values, compared where they live (the same array objects, else one compiled
comparison on their devices; never a copy of them to the host, which on a GPU would read
every weight for each call).

Bounded: at most ``PlanOptions.session_cache`` Planners (default 2), least recently used
first out; each holds its step, its example arguments (concrete arrays stay alive), traces,
graphs and compiled executables. 0 keeps none (every call plans from nothing); ``clear()``
lets them all go."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import threading
import time
import warnings

import jax
import numpy as np

from planner._src.fingerprints import leaf_signature
from planner._src.xla import adapter
from planner._src.xla import compile as xla_compile
from planner._src.xla.fingerprint import fingerprint_of

# What a call that found its Planner, or did not, shows in the plan's timings.
HIT = "session cache: the step's fingerprint (one trace), Planner found"
MISS = "session cache: the step's fingerprint (one trace), no Planner yet"

_lock = threading.Lock()
_sessions: collections.OrderedDict = collections.OrderedDict()


@dataclasses.dataclass(frozen=True)
class SessionKey:
    """Where ``planner.solve`` finds a kept Planner: ``key`` (None: the step does not trace,
    nothing is cached), ``values`` (the argument and closed-over leaves whose values the
    numerics check's answer depends on; None where it runs nothing) and the ``seconds`` the
    key took."""

    key: str | None
    values: tuple | None
    seconds: float


def session_key(step_fn, args, hardware, options) -> SessionKey:
    """The session key of planning ``step_fn(*args)`` for ``hardware`` with ``options``
    (:class:`SessionKey`; its ``key`` is None where the step does not trace: the Planner then
    raises its own error, with the fix)."""
    t = time.perf_counter()
    try:
        traced, _ = adapter.trace_step_with(
            step_fn, args, lambda rid, r: adapter.everything_saveable
        )
    except Exception:  # noqa: BLE001  (the Planner traces it again and says why it fails)
        return SessionKey(None, None, time.perf_counter() - t)
    fp = fingerprint_of(traced.jaxpr, args)
    h = hashlib.sha256()
    for part in (
        fp.key,
        *(_sharding(x) for x in jax.tree.leaves(args)),
        repr(hardware),
        jax.default_backend(),
        ",".join(f"{d.platform}:{d.device_kind}" for d in jax.devices()),
        repr(_keyed_options(options)),
    ):
        h.update(part.encode())
        h.update(b"\0")
    values = None
    if options.check_numerics is not False and _concrete(args):
        # The numerics check runs the step on these values: another value, another check.
        values = (*jax.tree.leaves(args), *_consts(traced))
    return SessionKey(h.hexdigest()[:32], values, time.perf_counter() - t)


def traced_again_error(cause: Exception):
    """The step failed on the Planner's trace after :func:`session_key`'s trace of it worked:
    a step that traces only once (xla/compile.py's ``again_error``, naming this trace)."""
    return xla_compile.again_error(
        cause, "the second trace (the planner's own, after the session cache's fingerprint trace)"
    )


def find(key: SessionKey):
    """The Planner kept under ``key`` for the same values (now the most recently used), or
    None."""
    if key.key is None:
        return None
    with _lock:
        got = _sessions.get(key.key)
    if got is None:
        return None
    session, values = got
    try:
        same = same_values(values, key.values)
    except Exception:  # noqa: BLE001  (values not comparable here: plan anew)
        same = False
    if not same:
        return None
    with _lock:
        if key.key in _sessions:
            _sessions.move_to_end(key.key)
    return session


def keep(key: SessionKey | None, session, size: int) -> None:
    """Keep ``session`` under ``key`` with its values, at most ``size`` Planners in all
    (least recently used out first; 0: none, and those kept are let go). A Planner kept
    for other values of the same key is replaced."""
    with _lock:
        if key is not None and key.key is not None and size > 0:
            _sessions[key.key] = (session, key.values)
            _sessions.move_to_end(key.key)
        while len(_sessions) > max(size, 0):
            _sessions.popitem(last=False)


def same_values(kept: tuple | None, given: tuple | None) -> bool:
    """Whether the leaves ``given`` hold the values of ``kept`` (both None: no values
    matter). The same objects are equal without a look (JAX arrays are immutable); other
    JAX arrays are compared on their devices in one compiled comparison, NumPy arrays and
    scalars on the host; a NaN anywhere compares unequal (plan anew: never a wrong hit)."""
    if kept is None or given is None:
        return kept is None and given is None
    if len(kept) != len(given):
        return False
    on_device: list[tuple] = []
    for a, b in zip(kept, given, strict=True):
        if a is b:
            continue
        if isinstance(a, jax.Array) and isinstance(b, jax.Array):
            if a.shape != b.shape or a.dtype != b.dtype or a.sharding != b.sharding:
                return False
            on_device.append((_key_data(a), _key_data(b)))
        elif isinstance(a, jax.Array) or isinstance(b, jax.Array):
            return False
        elif isinstance(a, np.ndarray | np.generic) or isinstance(b, np.ndarray | np.generic):
            a, b = np.asarray(a), np.asarray(b)
            if a.dtype != b.dtype or not np.array_equal(a, b):
                return False
        elif type(a) is not type(b) or repr(a) != repr(b):
            return False
    if not on_device:
        return True
    xs, ys = zip(*on_device, strict=True)
    try:
        return bool(_all_equal(xs, ys))
    except ValueError:  # leaves on different devices: one comparison each
        return all(bool(_all_equal((x,), (y,))) for x, y in on_device)


@jax.jit
def _all_equal(xs, ys):
    import jax.numpy as jnp

    return jnp.all(jnp.stack([jnp.array_equal(x, y) for x, y in zip(xs, ys, strict=True)]))


def _key_data(x):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(x)
    return x


def clear() -> None:
    """Let every kept Planner go."""
    with _lock:
        _sessions.clear()


def kept() -> int:
    """How many Planners are kept."""
    with _lock:
        return len(_sessions)


@contextlib.contextmanager
def recording():
    """The warnings raised inside the block, issued as they come (the caller's filters
    apply) and listed, so a plan kept for later calls warns again when it is returned."""
    got: list = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield got
            finally:
                seen = set()
                for w in caught:  # each warning once, as the default filter shows it
                    where = (str(w.message), w.category, w.filename, w.lineno)
                    if where not in seen:
                        seen.add(where)
                        got.append(w)
    finally:
        warn_again(got)


def warn_again(caught) -> None:
    """Issue recorded warnings again, under the caller's filters."""
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def _keyed_options(options):
    # The cache's own size changes no answer.
    return dataclasses.replace(options, session_cache=0)


def _sharding(x) -> str:
    s = getattr(x, "sharding", None)
    return f"{leaf_signature(x)} {s!r}"


def _concrete(args) -> bool:
    return not any(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(args))


def _consts(traced) -> list:
    jaxpr = getattr(traced, "jaxpr", None)
    return list(getattr(jaxpr, "consts", ()) or ())
