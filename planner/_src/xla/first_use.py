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
from jax._src import core as _core
from jax._src import source_info_util as _siu
from jax._src.interpreters import partial_eval as _pe

from planner._src.xla.adapter import is_closed_jaxpr, to_memory

__all__ = ["call_moving_at_first_use"]

_CALLS = ("pjit", "jit", "closed_call", "core_call")


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
            if isinstance(v, _core.Literal):
                return v.val
            if v in pending:
                env[v] = self.move_in(pending.pop(v))
            return env[v]

        copies: dict[Any, Any] = {}
        for eqn in jaxpr.eqns:
            inner = _call_body(eqn)
            reads_host = [j for j, v in enumerate(eqn.invars) if _is_var(v) and v in pending]
            if inner is not None and reads_host:
                ins = [pending[v] if j in reads_host else read(v) for j, v in enumerate(eqn.invars)]
                for j in reads_host:
                    pending.pop(eqn.invars[j], None)
                consts = list(inner.consts)
                body = _pe.convert_constvars_jaxpr(inner.jaxpr)
                shift = len(consts)
                outs = self.run(body, consts + ins, {j + shift for j in reads_host}, {})
            else:
                ins = [read(v) for v in eqn.invars]
                bind_params = eqn.primitive.get_bind_params(eqn.params)
                with (
                    _siu.user_context(
                        eqn.source_info.traceback, name_stack=eqn.source_info.name_stack
                    ),
                    eqn.ctx.manager,
                ):
                    outs = eqn.primitive.bind(*ins, **bind_params)
                if not eqn.primitive.multiple_results:
                    outs = [outs]
            for v, o in zip(eqn.outvars, outs):
                env[v] = o
                if getattr(o, "ndim", 0) and _materialized(eqn):
                    self.last = o
                if out_host.get(v):
                    copies[v] = self.move_out(o)
        result = []
        for v in jaxpr.outvars:
            if _is_var(v) and v in copies:
                result.append(copies[v])
            elif _is_var(v) and out_host.get(v):
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


def _is_var(v) -> bool:
    return not isinstance(v, _core.Literal)


def _call_body(eqn):
    """The closed jaxpr a nested call equation runs, else None."""
    if eqn.primitive.name not in _CALLS:
        return None
    inner = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
    if inner is None:
        return None
    return inner if is_closed_jaxpr(inner) else _pe.close_jaxpr(inner)


def _abstract(x):
    """``x`` (a tracer of the caller's jit, or an array) as an HBM value of its shape."""
    aval = jax.typeof(x) if hasattr(jax, "typeof") else _core.get_aval(x)
    return jax.ShapeDtypeStruct(x.shape, x.dtype, weak_type=bool(getattr(aval, "weak_type", 0)))


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
        if m and _is_var(v):
            out_host[v] = True
    jaxpr = _pe.convert_constvars_jaxpr(closed.jaxpr)
    shift = len(closed.consts)
    outs = _Replay().run(jaxpr, list(closed.consts) + values, {i + shift for i in host}, out_host)
    # an output that is a literal (or appears twice) and goes to the host: moved here
    outs = [
        to_memory(o, "pinned_host") if m and not (_is_var(v) and out_host.get(v)) else o
        for o, v, m in zip(outs, closed.jaxpr.outvars, marks)
    ]
    return jax.tree_util.tree_unflatten(out_tree, outs)
