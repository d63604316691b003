"""Per-device sizes of a sharded (SPMD) train step, read from the partitioned program.

A step jitted over a ``jax.sharding.Mesh`` (``NamedSharding`` arguments,
``with_sharding_constraint`` inside) is traced to a jaxpr whose avals are *global*: a
``f32[256,4096]`` activation sharded 8 ways is 1/8 of that on each device. What each device
holds is only known after XLA's sharding propagation and SPMD partitioning, so this module
reads it from the compiled program (``compiled.as_text()``, the optimized, partitioned HLO,
whose shapes are per device):

* Every HLO instruction carries ``metadata={op_name="jit(step)/jvp()/.../dot_general"
  stack_frame_id=N}`` (or ``source_file=`` / ``source_line=`` on other XLA versions): the
  last part of ``op_name`` is the JAX primitive, the stack frame gives the user's file and
  line. A candidate equation is matched to the instructions with its primitive and its
  innermost source line, in the forward pass (``jvp(...)``) or its recompute
  (``rematted_computation``), never the transposed (backward) ops of the same line.
* Matched instructions whose rank equals the candidate's and whose every dimension divides
  the global one give the *shard divisor* ``global elements / per-device elements``. When
  only instructions of another rank match (XLA collapses a batched ``[B, S, D] @ [D, F]``
  into a ``[B*S, D]`` dot), the element ratio is used if it divides the device count
  (source ``hlo (reshaped)``).
  Fusion wrappers, copies, bitcasts, tuples and collectives are skipped (their shapes are
  not the equation's output; the instructions inside a fusion carry the same metadata).
  Several different divisors (one source line used for differently sharded tensors) keep the
  smallest one: the most bytes, conservative, and the source says ``hlo (ambiguous)``.
* Collectives the partitioner inserted for an equation (the all-gather of an FSDP weight
  before a matmul, the all-reduce after a row-parallel matmul) carry that equation's
  metadata. Their per-device link bytes are attributed to the equation: rematerializing it
  pays them again (XLA's recompute in the backward pass has the same collectives, under
  ``rematted_computation``).

What is not matched falls back, in this order, and says so in ``Candidate.shard_source``:
``input-sharding`` (an operand with the same number of elements has a known divisor, as for
``checkpoint_name``, ``sharding_constraint`` and elementwise ops, which XLA partitions like
their operand) or ``unsharded (conservative)`` (global bytes: never under-counts memory).

Nothing here touches JAX internals: the input is the compiled program's text.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable

from planner._src.xla import hlo

# HLO opcodes whose shape is not the output of the equation named in their metadata.
# (custom-call stays: a cuBLAS gemm is one, its first tuple element is the matmul's output.)
_NOT_OUTPUTS = frozenset(
    {
        "fusion",
        "copy",
        "bitcast",
        "get-tuple-element",
        "parameter",
        "constant",
        "tuple",
        "while",
        "conditional",
        "call",
        "copy-start",
        "copy-done",
        "async-start",
        "async-done",
        "opt-barrier",
        "after-all",
        "partition-id",
        "replica-id",
    }
)
# Collectives, as the SPMD partitioner and XLA's async passes spell them.
_COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "collective-permute", "all-to-all")

_EXPLICIT_COLLECTIVES = frozenset(
    {
        "psum",
        "psum_invariant",
        "pmax",
        "pmin",
        "all_gather",
        "all_gather_invariant",
        "reduce_scatter",
        "psum_scatter",
        "all_to_all",
        "ragged_all_to_all",
        "ppermute",
        "pbroadcast",
        "unreduced_psum",
        "unreduced_reduce_scatter",
    }
)

_GROUPS_LIST = re.compile(r"replica_groups=\{(\{[\d,]*\}(?:,\{[\d,]*\})*)\}")
_GROUPS_IOTA = re.compile(r"replica_groups=\[([\d,]+)\]<=")
_GROUPS_MESH = re.compile(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}")
# Instructions a collective's result passes through unchanged on its way to its reader.
_PASS_THROUGH = frozenset(
    {
        "bitcast",
        "copy",
        "get-tuple-element",
        "all-gather-done",
        "all-reduce-done",
        "collective-permute-done",
        "async-done",
        "reshape",
        "transpose",
    }
)


@dataclasses.dataclass(frozen=True, slots=True)
class HloOp:
    """One instruction of the partitioned program, with what the planner matches on."""

    name: str
    opcode: str
    shapes: tuple[tuple[str, tuple[int, ...]], ...]  # (dtype, per-device dims) per output
    operands: tuple[tuple[int, ...] | None, ...]  # per-device dims of each operand, if known
    primitive: str  # last part of op_name (JAX primitive)
    where: tuple[str, int] | None  # (file basename, line) of the user's code
    forward: bool  # forward pass or its recompute
    rematted: bool  # in the backward pass's recompute
    program: int  # which of the indexed programs
    collective_bytes: float  # per device, over the device link
    attrs: str  # the rest of the line (dims attributes)


@dataclasses.dataclass(frozen=True, slots=True)
class HloIndex:
    """The instructions of one or more compiled programs, by (primitive, file, line)."""

    num_partitions: int
    ops: dict = dataclasses.field(default_factory=dict)  # key -> list[HloOp]

    def find(self, primitive: str, where: tuple[str, int] | None) -> list[HloOp]:
        return self.ops.get((primitive, where), []) if where else []


def _group_size(line: str, num_partitions: int) -> int:
    """Devices in each group of a collective, from its ``replica_groups``."""
    m = _GROUPS_LIST.search(line)
    if m:
        first = m.group(1).split("}")[0].strip("{")
        return max(1, len([x for x in first.split(",") if x]))
    m = _GROUPS_IOTA.search(line)
    if m:  # [groups, size]<=[...]: the last dimension is the group size
        return int(m.group(1).split(",")[-1])
    m = _GROUPS_MESH.search(line)
    if m:  # mesh['a'=4,'b'=2] {'a'}: the product of the named axes
        sizes = {
            k.strip("' "): int(v)
            for k, v in (kv.split("=") for kv in m.group(1).split(",") if "=" in kv)
        }
        return math.prod(sizes.get(a.strip("' "), 1) for a in m.group(2).split(",") if a.strip())
    return num_partitions  # no groups: every device takes part


def _collective_bytes(opcode: str, out_bytes: float, n: int) -> float:
    """Bytes one device sends in a ring implementation of the collective over ``n`` devices."""
    if n <= 1:
        return 0.0
    base = opcode.removesuffix("-start")
    if base == "all-gather":
        return (n - 1) / n * out_bytes
    if base == "all-reduce":
        return 2 * (n - 1) / n * out_bytes
    if base == "reduce-scatter":
        return (n - 1) * out_bytes  # its input is n times its output
    if base == "all-to-all":
        return (n - 1) / n * out_bytes
    return out_bytes  # collective-permute: the whole buffer moves


def program_collective_bytes(text: str) -> float:
    """Bytes one device sends per run of a partitioned program in all its collectives (ring
    implementations, ``_collective_bytes``), each counted once per run of the loop body
    holding it (``hlo.while_trips``): the compiled save-everything step's all-gathers and
    reduce-scatters (FSDP), all-reduces (data parallelism), all-to-alls and permutes."""
    module = hlo.parse(text or "")
    if module.num_partitions <= 1:
        return 0.0
    trips = hlo.while_trips(module)
    total = 0.0
    for ins in module.instructions:
        if ins.opcode.removesuffix("-start") not in _COLLECTIVES:
            continue
        sizes = [hlo.array_bytes(t, d) for t, d in ins.arrays if d]
        if not sizes:
            continue
        # An async start returns (operand, result, contexts): the result is the gathered
        # (largest) array of an all-gather, the scattered (smallest) of a reduce-scatter.
        if not ins.opcode.endswith("-start") or len(sizes) == 1:
            out_b = float(sum(sizes))
        elif ins.opcode.startswith("reduce-scatter"):
            out_b = float(min(sizes))
        else:
            out_b = float(max(sizes))
        n = _group_size(ins.line, module.num_partitions)
        total += _collective_bytes(ins.opcode, out_b, n) * trips.get(ins.computation, 1)
    return total


def parse_hlo(texts: Iterable[str | hlo.Module]) -> HloIndex:
    """Index the instructions of compiled HLO modules (``compiled.as_text()``, or that text
    already parsed by hlo.parse).

    A collective is indexed under its own metadata and, where its result feeds another
    instruction (through bitcasts, copies, async dones), also under that reader's: XLA 0.12's
    partitioner names the remat call (``.../remat2``) as the source of the all-gather of an
    FSDP weight, while the matmul reading it carries the equation's own metadata."""
    index = HloIndex(num_partitions=1)
    parts = 1
    for program, text in enumerate(texts):
        if not text:
            continue
        module = text if isinstance(text, hlo.Module) else hlo.parse(text)
        parts = max(parts, module.num_partitions)
        if parts <= 1:
            continue  # one device: global sizes are per-device sizes, nothing to match
        by_name = module.by_name()
        shapes = {
            i.name: i.arrays[0][1]
            for i in module.instructions
            if i.arrays and not i.shape.startswith("(")
        }
        ops: dict[str, HloOp] = {}
        for ins in module.instructions:
            if not ins.op_name:
                continue
            outs = ins.arrays
            coll = 0.0
            if ins.opcode.removesuffix("-start") in _COLLECTIVES:
                out_b = sum(hlo.array_bytes(t, d) for t, d in outs)
                if ins.opcode.endswith("-start") and len(outs) > 1:
                    out_b /= 2  # async start returns (operand, result): count the result
                coll = _collective_bytes(ins.opcode, out_b, _group_size(ins.line, parts))
            op = HloOp(
                name=ins.name,
                opcode=ins.opcode,
                shapes=outs,
                operands=tuple(shapes.get(n) for n in ins.operands),
                primitive=ins.primitive,
                where=ins.where,
                forward="transpose(" not in ins.op_name or "rematted_computation" in ins.op_name,
                rematted="rematted_computation" in ins.op_name,
                program=program,
                collective_bytes=coll,
                attrs=ins.attrs,
            )
            ops[ins.name] = op
            index.ops.setdefault((op.primitive, op.where), []).append(op)
        # Collectives feeding a reader of another key: indexed under the reader's key too,
        # as the reader sees them (forward or recompute).
        for ins in module.instructions:
            reader = ops.get(ins.name)
            if reader is None or reader.opcode.removesuffix("-start") in _COLLECTIVES:
                continue
            key = (reader.primitive, reader.where)
            have = {o.name for o in index.ops.get(key, ()) if o.program == program}
            for src in _collectives_feeding(ins, by_name):
                c = ops.get(src)
                if c is None or c.name in have or (c.primitive, c.where) == key:
                    continue
                have.add(c.name)
                index.ops.setdefault(key, []).append(
                    dataclasses.replace(
                        c,
                        primitive=reader.primitive,
                        where=reader.where,
                        forward=reader.forward,
                        rematted=reader.rematted,
                    )
                )
    return dataclasses.replace(index, num_partitions=parts)


def _collectives_feeding(ins: hlo.Instruction, by_name: dict) -> list[str]:
    """Names of the collectives whose results reach ``ins``'s operands directly or through
    pass-through instructions (bitcast, copy, get-tuple-element, async done)."""
    found, stack, seen = [], list(ins.operands), set()
    while stack:
        name = stack.pop()
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        src = by_name[name]
        if src.opcode.removesuffix("-start") in _COLLECTIVES:
            found.append(name)
        elif src.opcode in _PASS_THROUGH:
            stack.extend(src.operands)
    return found


def dims_divisor(global_shape: tuple[int, ...], local: tuple[int, ...] | None) -> int | None:
    """``prod(global) / prod(local)`` when ``local`` is a shard of ``global`` (same rank, every
    dimension divides), else None."""
    if local is None or len(local) != len(global_shape):
        return None
    if any(n <= 0 or g % n for g, n in zip(global_shape, local)):
        return None
    return math.prod(g // n for g, n in zip(global_shape, local))


def reshaped_divisor(
    global_shape: tuple[int, ...], local: tuple[int, ...] | None, num_partitions: int
) -> int | None:
    """``prod(global) / prod(local)`` for a per-device shape of another rank (XLA collapsed
    or split dimensions), when it is a whole number that divides the device count."""
    if local is None or len(local) == len(global_shape) or not local:
        return None
    g, n = math.prod(global_shape), math.prod(local)
    if n <= 0 or g % n or num_partitions % (g // n):
        return None
    return g // n


@dataclasses.dataclass(frozen=True, slots=True)
class Match:
    """What the partitioned program says about one equation."""

    divisor: int | None  # of its first output; None: no matching instruction
    ambiguous: bool  # several instructions disagreed (the smallest was kept)
    reshaped: bool  # only instructions of another rank matched (element ratio)
    flop_divisor: int | None  # for matmuls: global FLOPs / per-device FLOPs
    collective_bytes: float  # per device, per run of the equation, forward collectives
    collectives: tuple[str, ...]
    operand_divisors: tuple[int | None, ...]  # per jaxpr operand, from the HLO operand shapes


def match_equation(
    index: HloIndex,
    primitive: str,
    where: tuple[str, int] | None,
    out_shape: tuple[int, ...],
    in_shapes: tuple[tuple[int, ...], ...],
    params: dict,
    sharers: int = 1,
) -> Match:
    """Match one jaxpr equation to its partitioned instructions (see the module docstring).

    ``sharers`` is how many candidates of the region have the same key (primitive, line):
    the collectives of that key are split evenly between them.
    """
    ops = [o for o in index.find(primitive, where) if o.forward]
    divs: set[int] = set()
    flop_divs: set[int] = set()
    operand_divs: list[set[int]] = [set() for _ in in_shapes]
    reshaped: set[int] = set()
    for o in ops:
        if o.opcode in _NOT_OUTPUTS or o.opcode.removesuffix("-start") in _COLLECTIVES:
            continue
        if not o.shapes:
            continue
        d = dims_divisor(out_shape, o.shapes[0][1])
        if d is not None and index.num_partitions % d:
            continue  # not a shard (a slice or reduction of the line's value): no match
        if d is None:
            # XLA often collapses dimensions (a batched [B, S, D] @ [D, F] becomes a
            # [B*S, D] @ [D, F] dot): a shard of another rank still gives the element ratio.
            d = reshaped_divisor(out_shape, o.shapes[0][1], index.num_partitions)
            if d is None:
                continue
            reshaped.add(d)
        else:
            divs.add(d)
        if len(o.operands) == len(in_shapes):
            for k, (g, loc) in enumerate(zip(in_shapes, o.operands)):
                od = dims_divisor(g, loc)
                if od is None:
                    od = reshaped_divisor(g, loc, index.num_partitions)
                if od is not None:
                    operand_divs[k].add(od)
        if o.opcode == "dot" and len(o.operands) >= 1 and o.operands[0] is not None:
            c = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", o.attrs)
            (lc, _), _ = params.get("dimension_numbers", (((), ()), ((), ())))
            if c is not None and len(in_shapes) >= 1:
                loc_k = math.prod(o.operands[0][int(i)] for i in c.group(1).split(",") if i)
                glob_k = math.prod(in_shapes[0][int(i)] for i in lc)
                local = math.prod(o.shapes[0][1]) * loc_k
                glob = math.prod(out_shape) * glob_k
                if local and glob % local == 0:
                    flop_divs.add(glob // local)
    # Explicit collectives (psum, all_gather... under shard_map) are costed by their own
    # cost_models rules; only the partitioner's implicit ones are added here.
    colls = (
        []
        if primitive in _EXPLICIT_COLLECTIVES
        else [o for o in ops if o.opcode.removesuffix("-start") in _COLLECTIVES]
    )
    per_prog = _one_program(colls)
    cbytes = sum(o.collective_bytes for o in per_prog) / max(1, sharers)
    texts = tuple(
        f"{o.opcode.removesuffix('-start')} "
        + ",".join(f"{t}[{','.join(map(str, d))}]" for t, d in o.shapes)
        for o in per_prog
    )
    via_reshape = not divs and bool(reshaped)
    divs = divs or reshaped
    return Match(
        divisor=min(divs) if divs else None,
        ambiguous=len(divs) > 1,
        reshaped=via_reshape,
        flop_divisor=min(flop_divs) if flop_divs else None,
        collective_bytes=cbytes,
        collectives=texts,
        operand_divisors=tuple(min(s) if s else None for s in operand_divs),
    )


def _one_program(colls: list[HloOp]) -> list[HloOp]:
    """The forward-pass collectives of one compiled program: the index may hold several
    compiles of the same step (the two anchors), whose instruction names restart; keep the
    compile with the most forward (not recompute) collectives of this equation."""
    groups: dict[int, list[HloOp]] = {}
    for o in colls:
        if not o.rematted:
            groups.setdefault(o.program, []).append(o)
    if not groups:  # XLA dropped the forward pass's (nothing reads its output): the
        for o in colls:  # recompute's collectives are the ones the equation pays
            groups.setdefault(o.program, []).append(o)
    return max(groups.values(), key=len) if groups else []
