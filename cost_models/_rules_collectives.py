"""Cost rules of the collectives (importing this module registers them): the bytes each
device sends on a ring of n devices. Conventions: cost_models/_rules.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ._cost import Cost, aval_bytes, in_bytes, known_axis_sizes, out_bytes, register_rule
from ._rules import _register

# --------------------------------------------------------------------------------------------
# Collectives: bytes each device sends on a ring of n devices


def _ring_fraction(eqn: Any) -> tuple[float, tuple[str, ...]]:
    """(n - 1) / n for the n devices of the collective, from its axis_index_groups, its
    axis_size param or the known axis sizes; if n is unknown, 1 (the large-n limit) and a note."""
    params = eqn.params
    groups = params.get("axis_index_groups")
    names = params.get("axes", params.get("axis_name"))
    names = tuple(names) if isinstance(names, tuple | list) else (names,)
    sizes = known_axis_sizes()
    if groups:
        n = len(groups[0])
    elif params.get("axis_size"):
        n = int(params["axis_size"])
    elif all(name in sizes for name in names):
        n = math.prod(sizes[name] for name in names)
    else:
        note = (
            f"{eqn.primitive.name}: size of axes {names} unknown; ring factor (n-1)/n taken as 1 "
            "(pass axis_sizes= to jaxpr_cost)"
        )
        return 1.0, (note,)
    return (n - 1) / n, ()


def _collective(payload: Callable[[Any], float], passes: int) -> Callable[[Any], Cost]:
    def rule(eqn: Any) -> Cost:
        fraction, notes = _ring_fraction(eqn)
        return Cost(
            collective_bytes=passes * fraction * payload(eqn),
            kernel_launches=1,
            notes=notes,
        )

    return rule


# All-reduce on a ring = reduce-scatter + all-gather: 2 (n-1)/n of the buffer (NCCL's
# PERFORMANCE.md "bus bandwidth" factors: allreduce 2(n-1)/n, allgather and reducescatter
# (n-1)/n, alltoall (n-1)/n).
_register("psum psum_invariant pmax pmin unreduced_psum", _collective(in_bytes, 2))
# All-gather: each device receives (n-1)/n of the gathered (output) buffer.
_register("all_gather all_gather_invariant", _collective(out_bytes, 1))
_register("reduce_scatter psum_scatter unreduced_reduce_scatter", _collective(in_bytes, 1))
# All-to-all: each device keeps 1/n of its buffer and sends the rest (ragged: the operand).
_register("all_to_all ragged_all_to_all", _collective(lambda e: aval_bytes(e.invars[0].aval), 1))


@register_rule("ppermute")
def _ppermute(eqn: Any) -> Cost:
    """Each device sends its buffer once, unless the permutation keeps it in place."""
    moves = any(src != dst for src, dst in eqn.params["perm"])
    return Cost(collective_bytes=in_bytes(eqn) if moves else 0.0, kernel_launches=1)


@register_rule("pbroadcast")
def _pbroadcast(eqn: Any) -> Cost:
    """Collective broadcast from one source: every other device receives the buffer once."""
    return Cost(collective_bytes=in_bytes(eqn), kernel_launches=1)
