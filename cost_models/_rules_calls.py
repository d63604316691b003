"""Cost rules of calls and control flow (importing this module registers them): the cost of
their sub-jaxprs. Conventions: cost_models/_rules.py.
"""

from __future__ import annotations

import functools
from typing import Any

from ._cost import Cost, axis_sizes_in, jaxpr_cost, register_rule
from ._rules import _register

# --------------------------------------------------------------------------------------------
# Calls and control flow: cost of the sub-jaxprs


def _call(eqn: Any) -> Cost:
    """A call runs its body once. The body is params['jaxpr'] (jit, named pjit in older JAX;
    remat2, which is jax.checkpoint; xla_metadata_call), params['call_jaxpr'] (call, closed_call,
    custom_jvp_call, custom_vjp_call) or params['fun_jaxpr'] (custom_jvp_call_jaxpr)."""
    for key in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        if key in eqn.params:
            return jaxpr_cost(eqn.params[key])
    raise ValueError(
        f"{eqn.primitive.name}: no 'jaxpr', 'call_jaxpr' or 'fun_jaxpr' param (params: "
        f"{sorted(eqn.params)}); this call primitive changed. Update "
        "cost_models/_rules_calls.py:_call."
    )


_register(
    """
    jit pjit closed_call call remat2 custom_jvp_call custom_vjp_call custom_jvp_call_jaxpr
    xla_metadata_call
    """,
    _call,
)


@register_rule("scan")
def _scan(eqn: Any) -> Cost:
    """The body `length` times."""
    return jaxpr_cost(eqn.params["jaxpr"]).scale(eqn.params["length"])


@register_rule("while")
def _while(eqn: Any) -> Cost:
    """The trip count is a runtime value: condition and body are counted once, with a note.
    (fori_loop with static bounds traces to scan, which is counted exactly.)"""
    once = jaxpr_cost(eqn.params["cond_jaxpr"]) + jaxpr_cost(eqn.params["body_jaxpr"])
    return once + Cost(notes=("while: trip count unknown at trace time; body counted once",))


@register_rule("cond")
def _cond(eqn: Any) -> Cost:
    """One branch runs: the largest of each figure over the branches (an upper bound)."""
    return functools.reduce(Cost.elementwise_max, (jaxpr_cost(b) for b in eqn.params["branches"]))


@register_rule("shard_map")
def _shard_map(eqn: Any) -> Cost:
    """The per-device body, with the mesh's axis sizes known to its collectives."""
    with axis_sizes_in(dict(eqn.params["mesh"].shape)):
        return jaxpr_cost(eqn.params["jaxpr"])


@register_rule("xla_pmap")
def _pmap(eqn: Any) -> Cost:
    """The per-device body, with the mapped axis size known to its collectives."""
    with axis_sizes_in({eqn.params["axis_name"]: eqn.params["axis_size"]}):
        return jaxpr_cost(eqn.params["call_jaxpr"])
