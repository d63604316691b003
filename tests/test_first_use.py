"""Host leaves moved to HBM at their first use (xla/first_use.py, plan.apply's "whole"
mode): the same values as the step, the copy placed after the last materialized value
before its reader (behind an optimization barrier), nested jits reached, outputs sent back
to the host; deviceless XLA:GPU (where the CUDA plugin is installed): a leaf first read at
the update is not held through the activations' peak."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from planner._src.xla import adapter, first_use
from planner._src.xla import compile as xla_compile
from planner._src.xla import targets as tg

N = 256


def _step(w, m, x):
    """A tiny train step: the moment ``m`` is read only by the update, after the backward."""

    def loss(w):
        h = jnp.tanh(x @ w)
        h = jnp.tanh(h @ w)
        return jnp.sum(h * h)

    g = jax.grad(loss)(w)
    m = 0.9 * m + g
    return w - 0.01 * m, m


def _nested_step(w, m, x):
    """The same step with its whole body a jit of its own (as a user's inner jit)."""
    return jax.jit(_step)(w, m, x)


def _args(seed=0):
    k = jax.random.split(jax.random.key(seed), 3)
    return tuple(jax.random.normal(kk, (N, N), jnp.float32) / 16 for kk in k)


def _host_m(path: str) -> bool:
    return path == "[1]"


def _moved(step):
    def inner(w, m, x):
        return first_use.call_moving_at_first_use(
            step, (w, m, x), on_host=_host_m, out_to_host=lambda out: (False, True)
        )

    return inner


def _moved_at_start(step):
    def inner(w, m, x):
        w2, m2 = step(w, adapter.to_memory(m, "device"), x)
        return w2, adapter.to_memory(m2, "pinned_host")

    return inner


@pytest.mark.parametrize("step", [_step, _nested_step], ids=["flat", "nested jit"])
def test_same_values_as_the_step(step):
    args = _args()
    want = jax.jit(step)(*args)
    got = jax.jit(_moved(step))(*args)
    for a, b in zip(want, got):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("step", [_step, _nested_step], ids=["flat", "nested jit"])
def test_the_copy_in_waits_for_the_backward_and_the_new_moment_goes_back(step):
    """In the traced program the host leaf's copy to HBM comes after every matmul of the
    forward and backward passes, behind an optimization barrier with the last of them, and
    the new moment is copied back to the host; moved at the start, the copy is first."""
    jaxpr = jax.make_jaxpr(_moved(step))(*_args()).jaxpr
    eqns = list(jaxpr.eqns)
    names = [e.primitive.name for e in eqns]
    dots = [i for i, n in enumerate(names) if n == "dot_general"]
    puts = [i for i, n in enumerate(names) if n == "device_put"]
    assert len(dots) >= 4 and len(puts) == 2  # forward 2, backward >= 2; in and out
    copy_in, copy_out = puts
    assert copy_in > max(dots)
    barrier = eqns[copy_in - 1]
    assert barrier.primitive.name == "optimization_barrier"
    assert eqns[max(dots)].outvars[0] in barrier.invars  # the last materialized value
    assert jaxpr.invars[1] in barrier.invars
    assert copy_out > copy_in and jaxpr.outvars[1] is eqns[copy_out].outvars[0]
    start = jax.make_jaxpr(_moved_at_start(_step))(*_args()).jaxpr
    assert [e.primitive.name for e in start.eqns].index("device_put") < min(
        i for i, e in enumerate(start.eqns) if e.primitive.name == "dot_general"
    )


def test_deviceless_h200_does_not_hold_the_leaf_through_the_activations():
    """Deviceless XLA:GPU for the H200 (skipped without the CUDA plugin): with ``m`` in
    pinned host memory, moved in at its first use the step compiles to fewer HBM bytes than
    moved in at the step's start, by at least the leaf's size, with the same host bytes."""
    target = tg.resolve("h200", num_devices=1)
    if target.kind != "deviceless":
        pytest.skip(f"no deviceless XLA:GPU here: {target.description}")
    from planner._src.xla import deviceless

    args = deviceless.args_for(target, _args())
    host = deviceless.with_memory_kind(args[1].sharding, "pinned_host")
    m_host = adapter.shape_dtype_struct(args[1].shape, args[1].dtype, host=True, sharding=host)
    placed = (args[0], m_host, args[2])
    shardings = tuple(x.sharding for x in placed)
    bytes_ = {}
    for name, make in (("first use", _moved), ("start", _moved_at_start)):
        fn = jax.jit(make(_step), in_shardings=shardings, donate_argnums=(0, 1))
        m = xla_compile.compile_traced(target, fn, placed).compiled.memory_analysis()
        assert m.host_argument_size_in_bytes == m.host_output_size_in_bytes == N * N * 4
        bytes_[name] = m.temp_size_in_bytes
    assert bytes_["first use"] <= bytes_["start"] - N * N * 4, bytes_
