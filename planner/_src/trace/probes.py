"""Compiler probes: two facts of the compiler in scope about regions outside ``lax.scan``,
each read from the temporary bytes of a few small programs, once per compiler and JAX
(:func:`holds_rereads_twice`, :func:`hoists_recompute`, with the rules that read the bytes:
:func:`rereads_twice_rule`, :func:`hoists_rule`)."""

from __future__ import annotations

import threading

import jax

from planner._src.errors import PlanWarning
from planner._src.xla import compile as xla_compile
from planner._src.xla import compile_options, deviceless

_TWICE: dict[tuple[str, str], bool] = {}


def holds_rereads_twice(compiler: str) -> bool:
    """Whether the compiler in scope holds a kept value twice outside lax.scan when the
    backward pass reads it with a kernel and with a fusion (cost.py, ``D_r``): JAX keeps the
    residual as ``reduce_precision(v)``; XLA of jaxlib 0.10.2 (XLA:CPU) duplicates that copy
    into the backward fusion that recomputes from it, which then reads ``v``'s own buffer,
    while the copy stays for the matmul: both live from the forward to the backward pass.
    XLA of jaxlib 0.12.0.1 fuses the copy into ``v``'s producer and holds one buffer.

    A probe, compiled once per compiler and JAX: four checkpointed layers in a Python loop,
    ``tanh(x @ w1) @ w2``, keeping nothing (N), tanh's output only, its derivative recomputed
    from it (A), and every value but the matmuls' (C: no fusion re-reads a kept value). True
    when A's temporary bytes exceed N's by more than half of C's excess (activations
    [4096, 1024] f32, 16.8 MB each): True for JAX 0.10.2's XLA:CPU; False for 0.12.0.1's
    XLA:CPU and for the H200's deviceless XLA (jaxlib 0.11.2, the probe's arguments placed on
    the target). A probe that cannot compile, or whose C does not exceed N by
    one tensor (no reading), answers False with a PlanWarning: verify then measures what the
    model misses."""
    key = (compiler, jax.__version__)
    if key in _TWICE:
        return _TWICE[key]
    try:
        _TWICE[key] = _probe_rereads_twice(compiler)
    except Exception as e:  # noqa: BLE001  (an optional refinement of the model)
        import warnings

        warnings.warn(
            PlanWarning(
                f"The compiler probe for twice-held residuals did not compile ({e!s:.200}).\n"
                "Why: it decides whether this compiler holds a kept value twice outside "
                "lax.scan (cost.py, D_r); without it the memory model assumes it does not.\n"
                "Fix: nothing to do: the verify stage's compile measures what the model misses; "
                "report this with your JAX version if plans need several walk compiles."
            ),
            stacklevel=2,
        )
        _TWICE[key] = False
    return _TWICE[key]


# The probes' program: checkpointed layers ``tanh(x @ w1) @ w2`` in a Python loop, with
# activations much larger than weights, so that the peaks are the residuals' (on the H200's
# compiler, 256 x 512 activations under 4 MiB weights gave no reading).
_PROBE_N, _PROBE_D = 4096, 256

_PROBE_TENSOR = _PROBE_N * 4 * _PROBE_D * 4  # one tanh output, f32


def _probe_temp_bytes(policy, layers: int = 4) -> int:
    """Temporary bytes of the probe program's gradient, ``layers`` layers under ``policy``,
    compiled by the compiler in scope (deviceless: the arguments on the target's device)."""
    import jax.numpy as jnp

    n, d = _PROBE_N, _PROBE_D

    def layer(w, x):
        return jnp.tanh(x @ w[0]) @ w[1]

    def loss(ws, x):
        for w in ws:
            x = jax.checkpoint(layer, policy=policy)(w, x)
        return jnp.sum(x)

    w = (
        jax.ShapeDtypeStruct((d, 4 * d), jnp.float32),
        jax.ShapeDtypeStruct((4 * d, d), jnp.float32),
    )
    args = ([w] * layers, jax.ShapeDtypeStruct((n, d), jnp.float32))
    target = deviceless.active_target()
    if target is not None:  # a deviceless compile: the arguments on the target's device
        args = deviceless.args_for(target, args)
    traced = jax.jit(jax.grad(loss)).trace(*args)
    compiled = xla_compile.compile_lowered(
        xla_compile.lower(traced), compile_options.probe_compile_options()
    )
    return int(compiled.memory_analysis().temp_size_in_bytes)


_TEMP: dict[tuple, int] = {}
_TEMP_LOCKS: dict[tuple, threading.Lock] = {}
_TEMP_LOCK = threading.Lock()


def _shared_temp_bytes(compiler: str, policy, layers: int = 4) -> int:
    """:func:`_probe_temp_bytes`, compiled once per compiler and JAX: both probes read the
    four-layer full-remat program (the two probes may run on two compile threads: the second
    to ask waits for the first's compile)."""
    key = (compiler, jax.__version__, policy, layers)
    with _TEMP_LOCK:
        lock = _TEMP_LOCKS.setdefault(key, threading.Lock())
    with lock:
        if key not in _TEMP:
            _TEMP[key] = _probe_temp_bytes(policy, layers)
        return _TEMP[key]


def _nothing_saveable(*_, **__) -> bool:
    return False


def _probe_only_tanh(prim, *_, **__) -> bool:
    """The probe's policy A: tanh's output kept, its derivative recomputed from it."""
    return prim.name == "tanh"


def _probe_all_but_dots(prim, *_, **__) -> bool:
    """The probe's policy C: every value kept but the matmuls' outputs."""
    return prim.name != "dot_general"


def rereads_twice_rule(a: int, c: int, nothing: int) -> bool:
    """:func:`holds_rereads_twice`'s answer from the probe's temporary bytes under policies
    A, C and N (raises ValueError when C does not exceed N by one tensor: no reading)."""
    if c - nothing < _PROBE_TENSOR:
        raise ValueError(f"no reading: keeping every value added {c - nothing} bytes")
    return a - nothing > (c - nothing) / 2


def hoists_rule(two: int, four: int) -> bool:
    """:func:`hoists_recompute`'s answer from the probe's temporary bytes with 2 and 4 layers
    under full remat: two more layers hold two more layer inputs in any case ([4096, 256]: a
    quarter of an activation each), and two more activations when the compiler hoists."""
    return four - two > _PROBE_TENSOR + 2 * _PROBE_N * _PROBE_D * 4


def _probe_rereads_twice(compiler: str = "") -> bool:
    """The probe of :func:`holds_rereads_twice`, on the compiler in scope."""
    return rereads_twice_rule(
        _probe_temp_bytes(_probe_only_tanh),
        _probe_temp_bytes(_probe_all_but_dots),
        _shared_temp_bytes(compiler, _nothing_saveable),
    )


_HOISTS: dict[tuple[str, str], bool] = {}


def hoists_recompute(compiler: str) -> bool:
    """Whether the compiler in scope runs the recompute of a checkpointed region outside
    lax.scan in the *forward* pass and holds what it recomputes until the backward pass reads
    it (cost.py, ``E_r``): JAX puts an ``optimization_barrier`` on the recompute's operands
    together with the incoming cotangent, so that it waits for the backward pass; XLA:CPU of
    jaxlib 0.10.2 drops the barrier before it schedules, and its scheduler then computes each
    layer's "recomputed" values next to their forward twins (in tests/zoo/gpt2_loop.py's
    full-remat program every rematted fusion of layer l sits beside its forward fusion, and
    the softmax, the MLP's matmul output, tanh and GELU of all three layers are live at the
    peak). Under lax.scan the backward trip is its own loop body and nothing can move.

    A probe, compiled once per compiler and JAX: the program of :func:`holds_rereads_twice`
    ([4096, 1024] f32 activations, 16.8 MB each) fully rematerialized, with 2 and with 4
    layers. True when the two more layers add more than one activation besides their two
    layer inputs (JAX 0.10.2's XLA:CPU holds one tanh output and one layer input more per
    layer: True; JAX 0.12.0.1's XLA:CPU the layer inputs only: False). A probe that cannot
    compile answers False with a PlanWarning (the model then defers every recompute to the
    backward pass; verify measures what it misses)."""
    key = (compiler, jax.__version__)
    if key in _HOISTS:
        return _HOISTS[key]
    try:
        two = _probe_temp_bytes(_nothing_saveable, layers=2)
        four = _shared_temp_bytes(compiler, _nothing_saveable)
        _HOISTS[key] = hoists_rule(two, four)
    except Exception as e:  # noqa: BLE001  (an optional refinement of the model)
        import warnings

        warnings.warn(
            PlanWarning(
                f"The compiler probe for recomputes run in the forward pass did not compile "
                f"({e!s:.200}).\n"
                "Why: it decides whether this compiler holds the recompute of a region "
                "outside lax.scan from the forward pass on (cost.py, E_r); without it the "
                "memory model assumes the recompute waits for the backward pass.\n"
                "Fix: nothing to do: the verify stage's compile measures what the model misses; "
                "report this with your JAX version if plans need several walk compiles."
            ),
            stacklevel=2,
        )
        _HOISTS[key] = False
    return _HOISTS[key]
