"""Per-device bytes of a sharded step's candidates and region inputs.

Sharded steps (SPMD over a ``jax.sharding.Mesh``): every byte figure of the trace is *per
device*. The jaxpr's avals are global, so the candidates' and region inputs' per-device sizes
come from the partitioned HLO of the two anchor compiles (trace/shard.py matches each
equation to its instructions by primitive and source line). ``Candidate.shard_divisor`` is
global elements / per-device elements and ``Candidate.shard_source`` says where it came from:
``hlo`` (matched), ``hlo (reshaped)`` (matched an instruction XLA reshaped: the element
ratio), ``hlo (ambiguous)`` (several matches disagreed; the smallest divisor, most bytes,
is kept), ``sharding-constraint`` (the equation is a with_sharding_constraint:
its sharding's shard shape), ``input-sharding`` (not in the HLO, e.g. checkpoint_name: the
divisor of an operand with as many elements), ``reader-sharding`` (the same, from a value
that reads it: e.g. a region's input activation whose first reader is a checkpoint_name;
or a broadcast of literals, from a bigger value it feeds whose divisor divides its size), ``same-shape``
(a broadcast of a literal XLA fused away, like an attention mask: the divisor of another
value of the same shape), ``unsharded (conservative)`` (nothing known:
global bytes, which never under-counts memory) or ``single device`` (one partition: exact).
The anchors' memory_analysis() is per device already, so the cost stage's fixed bytes stay
consistent with these per-device candidate bytes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import jax

from planner._src.trace import shard
from planner._src.types import Candidate, RegionInput
from planner._src.xla import adapter


def _constraint_divisor(eqn) -> int | None:
    """Shard divisor of a ``with_sharding_constraint`` output, from its own sharding."""
    sharding = eqn.params.get("sharding")
    if eqn.params.get("unconstrained_dims"):  # the partitioner picks those: not known here
        return None
    shape = tuple(getattr(eqn.outvars[0].aval, "shape", ()))
    try:
        local = tuple(sharding.shard_shape(shape))
    except Exception:  # unconstrained dims, abstract meshes: leave it to the other rules
        return None
    return shard.dims_divisor(shape, local)


def per_device(
    cands: list[Candidate],
    eqns: Sequence[Any],
    inputs: tuple[RegionInput, ...],
    in_vars,
    index: shard.HloIndex | None,
):
    """Candidates and region inputs with per-device bytes (module docstring, trace/shard.py);
    ``eqns[i]`` is candidate ``i``'s equation.

    ``in_vars`` are the region's primal input variables, in ``inputs`` order. First what the
    partitioned program says (each equation's matched instructions; a region input: the
    operands its readers' instructions read); then, for what is still unknown, a divisor
    passes between values of the same number of elements, forward from an operand
    (``input-sharding``: checkpoint_name, elementwise ops are partitioned like their operand)
    and backward from a reader (``reader-sharding``: the layer input of a region, read first
    by a checkpoint_name, is partitioned like what reads it), until nothing changes; the
    rest keeps its global bytes (``unsharded (conservative)``)."""
    if index is None or index.num_partitions <= 1:
        return (
            [dataclasses.replace(c, global_nbytes=c.nbytes) for c in cands],
            tuple(dataclasses.replace(i, global_nbytes=i.nbytes) for i in inputs),
        )
    in_pos = {v: k for k, v in enumerate(in_vars)}
    key_count: dict[tuple, int] = {}
    for c in cands:
        key = (c.primitive, adapter.eqn_where(eqns[c.index]))
        key_count[key] = key_count.get(key, 0) + 1
    input_divs: dict[int, set[int]] = {}
    matches = []
    for c in cands:
        e = eqns[c.index]
        where = adapter.eqn_where(e)
        in_shapes = tuple(tuple(getattr(v.aval, "shape", ())) for v in e.invars)
        m = shard.match_equation(
            index,
            c.primitive,
            where,
            c.shape,
            in_shapes,
            e.params,
            sharers=key_count[(c.primitive, where)],
        )
        matches.append(m)
        for k, v in enumerate(e.invars):
            if adapter.is_var(v) and v in in_pos and m.operand_divisors[k]:
                input_divs.setdefault(in_pos[v], set()).add(m.operand_divisors[k])
    # (divisor, source) per candidate and per region input; None: not known yet.
    found: list[tuple[int, str] | None] = []
    for c, m in zip(cands, matches):
        if c.primitive == "sharding_constraint" and _constraint_divisor(eqns[c.index]):
            found.append((_constraint_divisor(eqns[c.index]), "sharding-constraint"))
        elif m.divisor is not None:
            found.append(
                (
                    m.divisor,
                    "hlo (ambiguous)" if m.ambiguous else "hlo (reshaped)" if m.reshaped else "hlo",
                )
            )
        else:
            found.append(None)
    # A region input's divisor: the smallest its readers' partitioned operands show.
    in_found: dict[int, tuple[int, str] | None] = {
        i.index: (min(input_divs[i.index]), "hlo") if i.index in input_divs else None
        for i in inputs
    }
    size = lambda v: math.prod(getattr(v.aval, "shape", ()))
    readers: dict[Any, list[int]] = {}
    for j, c in enumerate(cands):
        for v in eqns[c.index].invars:
            if adapter.is_var(v):
                readers.setdefault(v, []).append(j)

    def div_of(v):  # the known divisor of a value: a candidate's output or a region input
        if v in in_pos:
            f = in_found.get(in_pos[v])
            return f[0] if f else None
        return None

    producer = {v: j for j, c in enumerate(cands) for v in eqns[c.index].outvars}
    var_div = lambda v: (
        div_of(v)
        if v in in_pos
        else (found[producer[v]][0] if v in producer and found[producer[v]] else None)
    )

    def propagate():
        changed = True
        while changed:
            changed = False
            for j, c in enumerate(cands):  # forward: from an operand of the same size
                if found[j] is None and eqns[c.index].outvars:
                    n = size(eqns[c.index].outvars[0])
                    ds = [
                        var_div(v)
                        for v in eqns[c.index].invars
                        if adapter.is_var(v) and size(v) == n and var_div(v)
                    ]
                    if ds:
                        found[j], changed = (min(ds), "input-sharding"), True
            for j in reversed(range(len(cands))):  # backward: from a reader of the same size
                c = cands[j]
                if found[j] is None and eqns[c.index].outvars:
                    v = eqns[c.index].outvars[0]
                    ds = [
                        found[r][0]
                        for r in readers.get(v, ())
                        if found[r] and eqns[r].outvars and size(eqns[r].outvars[0]) == size(v)
                    ]
                    if ds:
                        found[j], changed = (min(ds), "reader-sharding"), True
            for v, k in in_pos.items():
                if in_found.get(k) is None:
                    ds = [
                        found[r][0]
                        for r in readers.get(v, ())
                        if found[r] and eqns[r].outvars and size(eqns[r].outvars[0]) == size(v)
                    ]
                    if ds:
                        in_found[k], changed = (min(ds), "reader-sharding"), True

    propagate()
    # Still unknown, typically broadcasts of literals that XLA fuses away (attention masks,
    # zeros): a value of the same shape with a known divisor (``same-shape``), else, for a
    # broadcast of literals, the smallest divisor of a reader that divides its size
    # (``reader-sharding``: XLA builds such a constant inside the fusion that reads it, at
    # that fusion's partitioning), then propagate again. Other values stay conservative (a
    # broadcast mask (S, S) feeding a (B, H, S, S) value sharded over B and H is replicated).
    by_shape: dict[tuple, list[int]] = {}
    for j, c in enumerate(cands):
        if found[j]:
            by_shape.setdefault(tuple(c.shape), []).append(found[j][0])
    for j, c in enumerate(cands):
        if found[j] is None and eqns[c.index].outvars and c.shape:
            if tuple(c.shape) in by_shape:
                found[j] = (min(by_shape[tuple(c.shape)]), "same-shape")
                continue
            constant = not any(adapter.is_var(v) for v in eqns[c.index].invars)
            n = size(eqns[c.index].outvars[0])
            ds = [
                found[r][0]
                for r in readers.get(eqns[c.index].outvars[0], ())
                if found[r] and n % found[r][0] == 0
            ]
            if constant and ds:  # a constant XLA builds inside each reader's fusion
                found[j] = (min(ds), "reader-sharding")
    propagate()
    fallback = (1, "unsharded (conservative)")
    new_inputs = []
    for i in inputs:
        d, src = in_found.get(i.index) or fallback
        new_inputs.append(
            dataclasses.replace(
                i,
                global_nbytes=i.nbytes,
                shard_divisor=d,
                nbytes=-(-i.nbytes // d),
                shard_source=src,
            )
        )
    out = []
    for c, m, f in zip(cands, matches, found):
        d, src = f or fallback
        out.append(
            dataclasses.replace(
                c,
                global_nbytes=c.nbytes,
                nbytes=sum(
                    -(-adapter.nbytes(eqns[c.index].outvars[k].aval) // d)
                    for k in (
                        range(len(eqns[c.index].outvars))
                        if c.live_outputs is None
                        else c.live_outputs
                    )
                ),
                shard_divisor=d,
                shard_source=src,
                flop_divisor=m.flop_divisor or d,
                collective_bytes=m.collective_bytes,
                collectives=m.collectives,
            )
        )
    return out, tuple(new_inputs)


def shard_nbytes(x) -> int:
    """Bytes of one argument on one device: its sharding's shard shape when it has one
    (typed PRNG keys count their key data: their dtype carries its itemsize)."""
    sharding = getattr(x, "sharding", None)
    shape = tuple(getattr(x, "shape", ()))
    try:
        local = tuple(sharding.shard_shape(shape)) if sharding is not None else shape
    except Exception:  # noqa: BLE001  (no concrete shard shape, e.g. an abstract mesh)
        local = shape
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return 0
    return adapter.nbytes(jax.ShapeDtypeStruct(local, dtype))
