"""Host leaves moved to HBM at their first use, and back as soon as they are final.

``plan.apply``'s "whole" mode (emit/apply_state.py) runs a step whose optimizer the planner
cannot reach, with some state leaves in pinned host memory. Moving every such leaf to HBM at
the step's start lets XLA:GPU hold all of them through the forward and backward passes, so
the plan saves nothing where the activations peak. :func:`call_moving_at_first_use` instead
traces the step with those leaves in HBM and replays its jaxpr equation by equation inside
the caller's trace:

- a host leaf is moved in just before the first equation that reads it, behind an
  ``optimization_barrier`` with the value computed last before that equation, so that the
  copy cannot be scheduled earlier (XLA otherwise starts every copy at the step's start);
- an output that goes back to the host (``to_host``) is moved there as soon as the
  equation that makes it has run, and the next move in waits for it (the same barrier), so
  an optimizer's update goes leaf by leaf: one leaf's state in HBM at a time.

Nested jit calls that read a host leaf are replayed the same way, so a step whose body is a
jitted function of its own is reached too. The math is the step's: each equation is bound
with its own parameters; only the memory kinds of those leaves and the order of the copies
change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax

from planner._src.xla.adapter import (
    bind_equation,
    call_body,
    constvars_as_invars,
    is_var,
    to_memory,
)

__all__ = ["call_moving_at_first_use"]


class _Replay:
    """Equation-by-equation evaluation with the moves (module docstring)."""

    def __init__(self):
        self.last: Any = None  # the value computed last: the next move in waits for it

    def _after_last(self, x):
        if self.last is None:
            return x
        x, _ = jax.lax.optimization_barrier((x, self.last))
        return x

    def move_in(self, x):
        return to_memory(self._after_last(x), "device")

    def move_out(self, x):
        out = to_memory(x, "pinned_host")
        self.last = out
        return out

    def run(self, jaxpr, args: Sequence, host_in: set[int], out_host: dict) -> list:
        """``jaxpr`` on ``args``; ``args[i]`` for ``i in host_in`` is in host memory and is
        moved in at its first reader; ``out_host`` maps an outvar to whether it goes back to
        the host (filled with its host copy, made where it is computed)."""
        env: dict[Any, Any] = {}
        pending: dict[Any, Any] = {}
        for i, (v, a) in enumerate(zip(jaxpr.invars, args)):
            (pending if i in host_in else env)[v] = a

        def read(v):
            if not is_var(v):
                return v.val
            if v in pending:
                env[v] = self.move_in(pending.pop(v))
            return env[v]

        copies: dict[Any, Any] = {}
        for eqn in jaxpr.eqns:
            body = call_body(eqn)
            reads_host = [j for j, v in enumerate(eqn.invars) if is_var(v) and v in pending]
            if body is not None and reads_host:
                ins = [pending[v] if j in reads_host else read(v) for j, v in enumerate(eqn.invars)]
                for j in reads_host:
                    pending.pop(eqn.invars[j], None)
                consts, inner = body
                shift = len(consts)
                outs = self.run(inner, consts + ins, {j + shift for j in reads_host}, {})
            else:
                outs = bind_equation(eqn, [read(v) for v in eqn.invars])
            for v, o in zip(eqn.outvars, outs):
                env[v] = o
                if getattr(o, "ndim", 0) and _materialized(eqn):
                    self.last = o
                if out_host.get(v):
                    copies[v] = self.move_out(o)
        result = []
        for v in jaxpr.outvars:
            if is_var(v) and v in copies:
                result.append(copies[v])
            elif is_var(v) and out_host.get(v):
                result.append(self.move_out(read(v)))  # an input passed through, or a literal
            else:
                result.append(read(v))
        return result


# Equations whose outputs XLA keeps as buffers of their own (it does not fuse them into
# their readers): the copy waits for the last of these. Waiting for any value instead makes
# XLA materialize an elementwise intermediate it would have fused, which cost more HBM than
# the late copy saved on an Equinox Adam update (benchmarks/results/whole-at-first-use-2026-12-07.md).
_MATERIALIZED = (
    "dot_general",
    "conv_general_dilated",
    "reduce_sum",
    "reduce_max",
    "reduce_min",
    "reduce_prod",
    "reduce_and",
    "reduce_or",
    "argmax",
    "argmin",
    "cumsum",
    "cumprod",
    "cummax",
    "cummin",
    "cumlogsumexp",
    "sort",
    "scatter",
    "scatter-add",
    "scatter_add",
    "psum",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "scan",
    "while",
    "custom_vjp_call",
    "custom_vjp_call_jaxpr",
)


def _materialized(eqn) -> bool:
    return eqn.primitive.name in _MATERIALIZED


def _abstract(x):
    """``x`` (a tracer of the caller's jit, or an array) as an HBM value of its shape."""
    weak = bool(getattr(jax.typeof(x), "weak_type", False))
    return jax.ShapeDtypeStruct(x.shape, x.dtype, weak_type=weak)


def call_moving_at_first_use(
    fn: Callable,
    args: tuple,
    on_host: Callable[[str], bool],
    out_to_host: Callable[[Any], Any],
):
    """``fn(*args)`` inside a jitted function, where ``args``' leaves whose keystr path
    ``on_host`` names are in pinned host memory: each is moved to HBM at its first reader,
    and the outputs ``out_to_host(out_shape)`` marks (a pytree of bools shaped as ``fn``'s
    output) are moved to pinned host memory where they are made (module docstring)."""
    flat, tree = jax.tree_util.tree_flatten_with_path(tuple(args))
    paths = [jax.tree_util.keystr(k) for k, _ in flat]
    values = [x for _, x in flat]
    host = {
        i for i, (p, x) in enumerate(zip(paths, values)) if getattr(x, "ndim", 0) and on_host(p)
    }
    avals = [_abstract(x) for x in values]
    unflat = jax.tree_util.tree_structure(tuple(args))

    def flat_fn(*leaves):
        return fn(*jax.tree_util.tree_unflatten(unflat, leaves))

    closed, out_shape = jax.make_jaxpr(flat_fn, return_shape=True)(*avals)
    marks = jax.tree.leaves(out_to_host(out_shape))
    out_tree = jax.tree.structure(out_shape)
    out_host: dict[Any, bool] = {}
    for v, m in zip(closed.jaxpr.outvars, marks):
        if m and is_var(v):
            out_host[v] = True
    consts, jaxpr = constvars_as_invars(closed)
    shift = len(consts)
    outs = _Replay().run(jaxpr, consts + values, {i + shift for i in host}, out_host)
    # an output that is a literal (or appears twice) and goes to the host: moved here
    outs = [
        to_memory(o, "pinned_host") if m and not (is_var(v) and out_host.get(v)) else o
        for o, v, m in zip(outs, closed.jaxpr.outvars, marks)
    ]
    return jax.tree_util.tree_unflatten(out_tree, outs)
