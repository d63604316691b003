"""Helpers shared by the zoo's checks (not by the models: each model module stands alone)."""

from __future__ import annotations

import time

import jax
import numpy as np

STOCK_POLICIES = (
    "nothing_saveable",
    "dots_saveable",
    "dots_with_no_batch_dims_saveable",
    "everything_saveable",
)


def stock_policy(name):
    return getattr(jax.checkpoint_policies, name)


def lower_args(args):
    """The example arguments as ``jax.jit(...).lower`` takes them (arrays or ShapeDtypeStructs)."""
    return args


def compile_step(step, args):
    """``(compiled, seconds)``: trace, lower and compile ``step`` on ``args``."""
    t0 = time.perf_counter()
    compiled = jax.jit(step).lower(*args).compile()
    return compiled, time.perf_counter() - t0


def device_bytes(compiled):
    """``argument + output - alias + temp`` bytes of a compiled step (``memory_analysis()``)."""
    m = compiled.memory_analysis()
    if isinstance(m, (list, tuple)):  # one entry per device/program on some versions
        m = m[0]
    return int(
        m.argument_size_in_bytes
        + m.output_size_in_bytes
        - m.alias_size_in_bytes
        + m.temp_size_in_bytes
    )


def _float_leaves(tree):
    out = []
    for leaf in jax.tree.leaves(tree):
        if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            continue
        a = np.asarray(leaf)
        if np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.complexfloating):
            out.append(a)
    return out


def loss_of(result):
    """The loss of a step's result: by the zoo's convention its last element (a scalar)."""
    return result[-1]


def state_of(result):
    return result[:-1]


def all_finite(tree):
    return all(np.all(np.isfinite(a)) for a in _float_leaves(tree))


def tree_changed(before, after):
    """Whether any floating leaf of ``after`` differs from the matching leaf of ``before``."""
    b, a = _float_leaves(before), _float_leaves(after)
    if len(a) != len(b):
        return True
    return any(x.shape != y.shape or not np.array_equal(x, y) for x, y in zip(b, a))
