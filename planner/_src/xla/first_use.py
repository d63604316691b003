"""Host leaves moved to HBM at their first use, the update streamed leaf by leaf.

``plan.apply``'s "whole" mode (emit/apply_state.py) runs a step whose optimizer the planner
cannot reach, with some state leaves in pinned host memory. Moving every such leaf to HBM at
the step's start lets XLA:GPU hold all of them through the forward and backward passes, so
the plan saves nothing where the activations peak; and an optimizer such as optax's updates
leaf-wise across the whole pytree (every new first moment, then every second moment, then
every update, some of it in one jitted tree map), so even moved in late, every leaf's new
moments are in HBM at once, with every gradient. :func:`call_moving_at_first_use` traces the
step with those leaves in HBM and replays its jaxpr equation by equation inside the caller's
trace, changing only where the copies go and the order of the equations:

- nested jit calls from the first equation that reads a host leaf on are inlined, so the
  update is one flat list of per-leaf equations;
- those equations are grouped output by output (each output's producers not yet emitted,
  in post order: one leaf's moments, update and new parameter together), and each group is
  emitted just after the last earlier equation it needs: a leaf's update follows its
  gradient in the backward pass, rather than waiting for every gradient;
- a host leaf is moved in just before the first equation that reads it, behind an
  ``optimization_barrier`` with the last value XLA keeps as a buffer of its own before it
  (:data:`_MATERIALIZED`) and with every output made since the previous move in, so XLA
  can neither start the copy earlier (it otherwise starts every copy at the step's start)
  nor run two leaves' updates at once;
- an output that goes back to the host (``to_host``) is moved there where it is made.

The update then holds about one leaf's state and gradient in HBM at a time. The math is the
step's: each equation is bound with its own parameters, in an order its data dependencies
allow (equations with effects keep theirs); only memory kinds and order change.
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
        self.last: Any = None  # the last materialized value: the next move in waits for it
        self.done: list = []  # outputs made since the last move in: it waits for them too

    def _after_last(self, x):
        deps = ([] if self.last is None else [self.last]) + self.done
        self.done = []
        if not deps:
            return x
        x, _ = jax.lax.optimization_barrier((x, deps))
        return x

    def move_in(self, x):
        return to_memory(self._after_last(x), "device")

    def move_out(self, x):
        return to_memory(x, "pinned_host")

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

        def reads_host(e):
            return any(is_var(v) and v in pending for v in e.invars)

        eqns = list(jaxpr.eqns)
        first = next((k for k, e in enumerate(eqns) if reads_host(e)), len(eqns))
        eqns = _interleaved(eqns, first, jaxpr.outvars)
        first = next((k for k, e in enumerate(eqns) if reads_host(e)), len(eqns))
        outvars = {v for v in jaxpr.outvars if is_var(v)}
        copies: dict[Any, Any] = {}
        for k, eqn in enumerate(eqns):
            outs = bind_equation(eqn, [read(v) for v in eqn.invars])
            for v, o in zip(eqn.outvars, outs):
                env[v] = o
                if getattr(o, "ndim", 0) and _materialized(eqn):
                    self.last = o
                if out_host.get(v):
                    copies[v] = self.move_out(o)
                if k >= first and v in outvars and getattr(o, "ndim", 0):
                    self.done.append(copies.get(v, o))
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


def _inlined_from_first_host_read(closed, host: set[int]):
    """``closed`` (``make_jaxpr``'s) with every nested jit / closed_call from the first
    equation that reads a host leaf (``host``: indices of its non-constant inputs) on
    inlined, recursively; optax computes, e.g., every bias-corrected moment in one jitted
    tree map, which :func:`_interleaved` could not split by leaf."""
    consts, jaxpr = constvars_as_invars(closed)
    shift = len(consts)

    def run(jx, args, hosts: set[int], past: list) -> list:
        env = dict(zip(jx.invars, args))
        for eqn in jx.eqns:
            ins = [env[v] if is_var(v) else v.val for v in eqn.invars]
            past[0] = past[0] or any(id(x) in hosts for x in ins)
            body = call_body(eqn) if past[0] else None
            if body is not None:
                outs = run(body[1], body[0] + ins, hosts, past)
            else:
                outs = bind_equation(eqn, ins)
            env.update(zip(eqn.outvars, outs))
        return [env[v] if is_var(v) else v.val for v in jx.outvars]

    def flat(*leaves):
        return run(jaxpr, consts + list(leaves), {id(leaves[i]) for i in host}, [False])

    return jax.make_jaxpr(flat)(*[v.aval for v in jaxpr.invars[shift:]])


def _interleaved(eqns: list, first: int, outvars) -> list:
    """``eqns`` with those from ``first`` on (the update) grouped output by output: each
    output's producers among them not yet placed, in post order, the group placed just
    after the last earlier equation it needs (or that reads an input it reads, so that a
    donated parameter is not overwritten before its last reader). Unchanged where one of
    them has effects."""
    head, tail = eqns[:first], eqns[first:]
    if any(e.effects for e in tail):
        return eqns
    after: dict = {}  # a var made or read in the head -> the last head equation doing so
    for i, e in enumerate(head):
        after.update((v, i) for v in (*e.invars, *e.outvars) if is_var(v))
    producer: dict = {}
    ready: list[int] = []  # per tail equation: the head equation it may follow
    for i, e in enumerate(tail):
        deps = [
            ready[producer[v]] if v in producer else after.get(v, -1) for v in e.invars if is_var(v)
        ]
        ready.append(max([-1, *deps]))
        producer.update((v, i) for v in e.outvars)
    roots = sorted(
        (producer[v] for v in outvars if is_var(v) and v in producer), key=ready.__getitem__
    )
    placed: set[int] = set()
    at: dict[int, list] = {}
    for root in roots:
        stack = [(root, False)]
        while stack:
            i, expanded = stack.pop()
            if i in placed:
                continue
            if expanded:
                placed.add(i)
                at.setdefault(ready[root], []).append(tail[i])
                continue
            stack.append((i, True))
            stack.extend(
                (producer[v], False)
                for v in reversed(tail[i].invars)
                if is_var(v) and v in producer
            )
    out = list(at.get(-1, []))
    for k, e in enumerate(head):
        out += [e, *at.get(k, [])]
    return out + [e for i, e in enumerate(tail) if i not in placed]


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
    closed = _inlined_from_first_host_read(closed, host)
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
