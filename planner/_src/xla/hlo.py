"""The one reader of compiled HLO text (``compiled.as_text()``).

Every stage that looks at a compiled program reads it through :func:`parse`: the trace
stage (the arrays compiled loops stack, per-device shapes of a partitioned program), the
verify stage (host-memory buffers and async host copies) and the profiler (which
instructions are host transfers). Nothing here touches JAX: the input is text.

What the text holds, and what is read of it:

* computations: ``%name (params) -> shape {`` ... ``}`` (``ENTRY`` marks the entry one);
* instructions: ``[ROOT] %name = <shape> <opcode>(<operands>), attr=..., metadata={...}``;
  the shape is an array ``bf16[8,32]{1,0:S(5)}`` (``S(5)``: host memory space) or a tuple
  ``(f32[8], s32[])``;
* metadata: ``op_name="jit(step)/jvp()/.../dot_general"`` (the last part is the JAX
  primitive; ``transpose(`` marks the backward pass, ``rematted_computation`` a recompute)
  and the user's source line, as ``source_file=``/``source_line=`` or as ``stack_frame_id=``
  into the module's ``FileNames`` / ``FileLocations`` / ``StackFrames`` tables;
* ``num_partitions=N`` in the module header (SPMD programs).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections import Counter

_INSTR = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_COMP = re.compile(r"^\s*(ENTRY\s+)?%?([\w.\-]+)\s*(?:\(.*\))?.*\{\s*$")
_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([\d,]*)\]")
_META = re.compile(r"metadata=\{([^}]*)\}")
_OPERAND = re.compile(r"%([\w.\-]+)")
_OPCODE = re.compile(r"([\w\-]+)\((.*)")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_SOURCE_FILE = re.compile(r'source_file="([^"]*)"')
_SOURCE_LINE = re.compile(r"source_line=(\d+)")
_FRAME_ID = re.compile(r"stack_frame_id=(\d+)")

# Bytes per element of XLA's element types (sub-byte types rounded up to one byte).
ITEMSIZE = {
    "pred": 1,
    "s4": 1,
    "u4": 1,
    "s8": 1,
    "u8": 1,
    "s16": 2,
    "u16": 2,
    "f16": 2,
    "bf16": 2,
    "s32": 4,
    "u32": 4,
    "f32": 4,
    "s64": 8,
    "u64": 8,
    "f64": 8,
    "c64": 8,
    "c128": 16,
    "f8e4m3fn": 1,
    "f8e5m2": 1,
    "f8e4m3": 1,
    "f8e5m2fnuz": 1,
    "f8e4m3fnuz": 1,
    "f8e4m3b11fnuz": 1,
    "f8e3m4": 1,
    "f8e8m0fnu": 1,
    "f4e2m1fn": 1,
}

# Instructions that compute nothing of their own (they route, allocate or wrap).
STRUCTURAL = frozenset(
    {
        "parameter",
        "get-tuple-element",
        "tuple",
        "while",
        "custom-call",
        "bitcast",
        "constant",
        "broadcast",
        "call",
        "conditional",
        "opt-barrier",
        "after-all",
        "iota",
        "copy-done",
        "fusion-done",
        "async-done",
    }
)


@dataclasses.dataclass(frozen=True, slots=True)
class Instruction:
    """One instruction of a compiled module."""

    name: str
    computation: str  # the computation it belongs to
    root: bool
    shape: str  # the result shape text, e.g. "bf16[8,32]{1,0}" or "(f32[8], s32[])"
    opcode: str  # e.g. "fusion", "dot", "all-gather-start"
    operands: tuple[str, ...]  # names of the instructions it reads
    operand_text: str  # the text between the opcode's parentheses
    attrs: str  # everything after the opcode (operands, attributes, metadata)
    op_name: str  # metadata op_name, "" when absent
    where: tuple[str, int] | None  # (file basename, line) of the user's code, when known
    line: str  # the whole line

    @property
    def primitive(self) -> str:
        """The JAX primitive named by the metadata (last part of op_name)."""
        return self.op_name.rsplit("/", 1)[-1] if self.op_name else ""

    @property
    def arrays(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """``(element type, dims)`` of every array in the result shape."""
        return array_shapes(self.shape)

    @property
    def in_host_memory(self) -> bool:
        return "S(5)" in self.shape


@dataclasses.dataclass(frozen=True, slots=True)
class Module:
    """A parsed compiled module: instructions in text order, by name and by computation."""

    name: str
    num_partitions: int
    instructions: tuple[Instruction, ...]
    entry: str = ""

    def by_name(self) -> dict[str, Instruction]:
        return {i.name: i for i in self.instructions}

    def computations(self) -> dict[str, list[Instruction]]:
        out: dict[str, list[Instruction]] = {}
        for i in self.instructions:
            out.setdefault(i.computation, []).append(i)
        return out


def array_shapes(shape: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """``"(bf16[8,32]{1,0}, s32[])"`` -> ``(("bf16", (8, 32)), ("s32", ()))``."""
    return tuple(
        (t, tuple(int(d) for d in dims.split(",") if d)) for t, dims in _ARRAY.findall(shape)
    )


def array_bytes(dtype: str, dims: tuple[int, ...]) -> int:
    return int(math.prod(dims)) * ITEMSIZE.get(dtype, 4)


def split_shape(rhs: str) -> tuple[str, str]:
    """The shape of an instruction's right-hand side and what follows it:
    ``'(f32[8], s32[]) tuple(...)'`` or ``'bf16[8,32]{1,0} dot(...)'`` -> (shape, rest)."""
    rhs = rhs.strip()
    if rhs.startswith("("):
        depth = 0
        for i, ch in enumerate(rhs):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                return rhs[: i + 1], rhs[i + 1 :].strip()
    head, _, tail = rhs.partition(" ")
    return head, tail.strip()


def split_top(s: str) -> list[str]:
    """Split at commas outside brackets, parentheses and braces."""
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def _frame_table(lines: list[str]) -> dict[int, tuple[str, int]]:
    """``stack_frame_id -> (file basename, line)`` from the module's frame tables."""
    files: dict[int, str] = {}
    locs: dict[int, tuple[int, int]] = {}
    frames: dict[int, int] = {}
    section = None
    for ln in lines:
        s = ln.strip()
        if s in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            section = s
            continue
        if not s or s.startswith(("%", "ROOT", "HloModule", "ENTRY")):
            section = None if s.startswith(("%", "ENTRY")) else section
            continue
        head, _, body = s.partition(" ")
        if not head.isdigit():
            continue
        if section == "FileNames":
            files[int(head)] = body.strip('"').rsplit("/", 1)[-1]
        elif section == "FileLocations":
            f = re.search(r"file_name_id=(\d+)", body)
            line = re.search(r"\bline=(\d+)", body)
            if f and line:
                locs[int(head)] = (int(f.group(1)), int(line.group(1)))
        elif section == "StackFrames":
            f = re.search(r"file_location_id=(\d+)", body)
            if f:
                frames[int(head)] = int(f.group(1))
    out = {}
    for fid, loc_id in frames.items():
        loc = locs.get(loc_id)
        if loc and loc[0] in files:
            out[fid] = (files[loc[0]], loc[1])
    return out


def num_partitions(text: str) -> int:
    """``num_partitions=N`` of a compiled module's text (its header's; 1 where absent)."""
    text = text or ""
    head = next((ln for ln in text.splitlines() if ln.startswith("HloModule")), "")
    m = re.search(r"num_partitions=(\d+)", head) or re.search(r"num_partitions=(\d+)", text)
    return int(m.group(1)) if m else 1


# A program's text is parsed by several readers (the verify's figures, the schedule's replay,
# the pricing) and again where the Planner's compile memo hands a compile back: the last few
# modules are kept (a Module is immutable).
@functools.lru_cache(maxsize=4)
def parse(text: str) -> Module:
    """Parse ``compiled.as_text()`` (see the module docstring for what is read)."""
    text = text or ""
    lines = text.splitlines()
    head = next((ln for ln in lines if ln.startswith("HloModule")), "")
    parts = num_partitions(text)
    frames = _frame_table(lines)
    out: list[Instruction] = []
    computation, entry = "", ""
    for ln in lines:
        stripped = ln.rstrip()
        if stripped.endswith("{") and "=" not in stripped.split("{")[0].split("(")[0]:
            cm = _COMP.match(ln)
            if cm:
                computation = cm.group(2)
                if cm.group(1):
                    entry = computation
            continue
        im = _INSTR.match(ln)
        if not im:
            continue
        shape, rest = split_shape(im.group(3))
        om = _OPCODE.match(rest)
        if not om:
            continue
        opcode = om.group(1)
        operand_text = om.group(2).split(")")[0]
        meta = _META.search(ln)
        op_name, where = "", None
        if meta:
            fields = meta.group(1)
            name_m = _OP_NAME.search(fields)
            op_name = name_m.group(1) if name_m else ""
            sf = _SOURCE_FILE.search(fields)
            sl = _SOURCE_LINE.search(fields)
            fid = _FRAME_ID.search(fields)
            if sf and sl:
                where = (sf.group(1).rsplit("/", 1)[-1], int(sl.group(1)))
            elif fid:
                where = frames.get(int(fid.group(1)))
        out.append(
            Instruction(
                name=im.group(2),
                computation=computation,
                root=bool(im.group(1)),
                shape=shape,
                opcode=opcode,
                operands=tuple(_OPERAND.findall(operand_text)),
                operand_text=operand_text,
                attrs=rest,
                op_name=op_name,
                where=where,
                line=ln,
            )
        )
    name = head.split()[1].rstrip(",") if len(head.split()) > 1 else ""
    return Module(name=name, num_partitions=parts, instructions=tuple(out), entry=entry)


# ------------------------------------------------------------------------------ questions


def loop_stacks(module: Module) -> Counter:
    """``(dtype, leading dimension, elements per slice) -> count`` of the arrays one compiled
    while loop carries, the most any loop carries of each: a scan's stacked residuals are
    among them with the trip count as leading dimension (each also appears in the backward
    loop, hence the max, not the sum)."""
    out: Counter = Counter()
    for ins in module.instructions:
        if ins.opcode != "while":
            continue
        loop: Counter = Counter()
        for dtype, dims in ins.arrays:
            if dims:
                loop[(dtype, dims[0], int(math.prod(dims[1:])))] += 1
        out |= loop
    return out


def while_loop(ins: Instruction) -> tuple[str, int] | None:
    """(body computation, known trip count) of a ``while`` instruction, the count 1 when XLA
    does not know it; None for any other instruction or a while without a body."""
    if ins.opcode != "while":
        return None
    body = re.search(r"body=%?([\w.\-]+)", ins.attrs)
    if not body:
        return None
    n = re.search(r'"known_trip_count":\{"n":"(\d+)"', ins.attrs)
    return body.group(1), int(n.group(1)) if n else 1


def while_trips(module: Module) -> dict[str, int]:
    """While-body computation -> runs per run of the module: its loop's known trip count
    (1 when XLA does not know it) times the runs of the computation holding the loop, so
    nested loops multiply. Computations that are no loop's body are absent (they run once
    per call of whatever calls them)."""
    parent: dict[str, tuple[str, int]] = {}
    for ins in module.instructions:
        loop = while_loop(ins)
        if loop:
            parent[loop[0]] = (ins.computation, loop[1])

    def runs(comp: str, depth: int = 0) -> int:
        if comp not in parent or depth > 16:  # (a cycle is malformed HLO: stop, do not hang)
            return 1
        up, n = parent[comp]
        return n * runs(up, depth + 1)

    return {c: runs(c) for c in parent}


def loop_slice_copy_bytes(module: Module) -> int:
    """Bytes one run of the module copies device-to-device to slice loop operands: the
    asynchronous dynamic-slice / dynamic-update-slice fusions in while-loop bodies, times
    the runs of the body (``while_trips``: the known trip count, 1 when XLA does not know
    it, times the enclosing loops' in a nest).

    XLA:GPU runs a dynamic-(update-)slice of a scan's stacked operand whose offset is the
    loop counter as a memcpy on a side stream (``async-start`` of a dynamic-slice fusion;
    thunk ``kDynamicSliceFusion``; ``fusion-start`` in the GPU's own compiled modules:
    benchmarks/results/hlo-kernel-time-2026-12-05.md): the layer's weights sliced out of the stacked
    parameters in the forward and backward loops, the weight gradients written into the
    stacked gradient, and every residual a scan stacks whose producer the slice cannot fuse
    into (a matmul's output). These copies run on the device between the kernels, not beside
    them, so they cost step time (measured: benchmarks/results/h200-2026-12-04-idle/). XLA:CPU emits
    none (0)."""
    trips = while_trips(module)
    total = 0
    for ins in module.instructions:
        # async-start (jaxlib 0.11.2 deviceless) or fusion-start (the H200's own compile)
        if ins.opcode not in ("async-start", "fusion-start") or ins.computation not in trips:
            continue
        prim = ins.primitive
        if prim not in ("dynamic_slice", "dynamic_update_slice"):
            continue
        top = split_top(ins.shape[1:-1]) if ins.shape.startswith("(") else [ins.shape]
        if len(top) < 2:
            continue
        if prim == "dynamic_slice":  # ((operand, offsets...), slice, context)
            moved = sum(array_bytes(t, d) for t, d in array_shapes(top[1]))
        else:  # ((buffer, update or offsets...), buffer, context): the update's bytes
            operands = array_shapes(top[0])[1:]
            moved = max((array_bytes(t, d) for t, d in operands), default=0)
        total += moved * trips[ins.computation]
    return total


# What a copy of a slice is made of: array-valued instructions of these opcodes only (index
# arithmetic on scalars aside), at least one of them a dynamic-slice.
_SLICE_COPY_OPS = frozenset(
    ("parameter", "constant", "dynamic-slice", "bitcast", "reshape", "copy", "transpose")
)


def _copies_a_slice(comps: dict[str, list[Instruction]], name: str) -> bool:
    """Whether computation ``name`` (a fusion's) only copies a dynamic slice of an operand."""
    body = comps.get(name)
    if not body:
        return False
    sliced = False
    for ins in body:
        if ins.opcode == "dynamic-slice":
            sliced = True
        elif ins.opcode not in _SLICE_COPY_OPS and any(dims for _, dims in ins.arrays):
            return False
    return sliced


def loop_slice_bytes(module: Module, *, in_line: bool = False) -> int:
    """Bytes of the buffers one run of every while-loop body allocates for *asynchronous*
    copies of slices of its operands, summed over the bodies (once each, not times the
    trips): ``fusion-start`` / ``async-start`` of a fusion that only slices, reshapes or
    transposes an operand (XLA:GPU's ``loop_dynamic_slice_fusion``, a memcpy on a side
    stream). A slice XLA fuses into its reader, or passes to cuBLAS as an address offset,
    allocates nothing. ``in_line``: count the plain ``fusion`` of such a copy as well, for
    XLA:GPU of jaxlib 0.10, which makes these copies in line (thunk ``kDynamicSliceFusion``,
    no async start in the loops) and holds them at the trip's peak as the later XLAs hold
    the async ones (tests/zoo/parallel_residual.py, 2026-12-06: 6.05 MB more a trip in the
    save-everything compile, as jaxlib 0.11.2's async copies).

    In a scan's backward loop these are the trip's residuals copied out of the stacked
    buffers the forward loop wrote (and the layer's weights sliced out of the stacked
    parameters, which every policy's program does alike). The scheduler starts them at the
    top of the trip, ahead of their readers, so they are live together at the trip's peak
    (measured: benchmarks/results/memory-model-2026-12-05-slices.md). Synchronous slice copies are not
    counted: XLA:CPU's are not all live together at the trip's peak, and counting them so
    makes the plans' predictions worse (measured: benchmarks/results/memory-model-2026-12-05.md).
    The cost model's ``K_r`` (cost.py) is their share."""
    trips = while_trips(module)
    comps = module.computations()
    total = 0
    for body in trips:
        for ins in comps.get(body, ()):
            if ins.opcode not in ("fusion-start", "async-start") and not (
                in_line and ins.opcode == "fusion"
            ):
                continue
            called = re.search(r"calls=%?([\w.\-]+)", ins.attrs)
            if called and _copies_a_slice(comps, called.group(1)):
                if ins.opcode == "fusion":  # its result
                    total += sum(array_bytes(t, d) for t, d in array_shapes(ins.shape))
                    continue
                # ((operands), result, context): the result's bytes
                top = split_top(ins.shape[1:-1]) if ins.shape.startswith("(") else []
                if len(top) >= 2:
                    total += sum(array_bytes(t, d) for t, d in array_shapes(top[1]))
    return total


def host_memory_instructions(module: Module) -> list[Instruction]:
    """Instructions whose line names host memory space ``S(5)`` (result or operand layout)."""
    return [i for i in module.instructions if "S(5)" in i.line]


def async_host_copies(module: Module) -> list[Instruction]:
    """Async starts (``copy-start``, ``fusion-start``, ...) that touch host memory."""
    return [i for i in host_memory_instructions(module) if "-start" in i.line]


def host_transfer_ops(module: Module | str) -> dict[str, str]:
    """Instruction name -> ``"d2h"`` or ``"h2d"`` for the host transfers of a program.

    An instruction whose result (for an async ``*-start``, the tuple's second element, its
    output) is in ``S(5)`` writes host memory: d2h. One that reads an ``S(5)`` operand and
    produces device memory: h2d. Structural instructions (parameters, tuples, loops, buffer
    allocation, bitcasts) move nothing. The matching ``*-done`` and every instruction of a
    called computation (``calls=%c``) get the same direction, so whichever name the profiler
    attaches is found.
    """
    if isinstance(module, str):
        module = parse(module)
    shapes = {i.name: i.shape for i in module.instructions}
    bodies = module.computations()
    ops: dict[str, str] = {}
    calls: dict[str, str] = {}
    for ins in module.instructions:
        if ins.opcode in STRUCTURAL:
            continue
        operands = ins.operand_text
        if ins.opcode.endswith("-start") and ins.shape.startswith("("):
            elems = split_top(ins.shape[1:-1])  # ((operand shapes...), output, context)
            out_shape = elems[1] if len(elems) > 1 else ins.shape
            operands = elems[0] + " " + operands
        else:
            out_shape = ins.shape
        host_in = "S(5)" in operands or any("S(5)" in shapes.get(op, "") for op in ins.operands)
        if "S(5)" in out_shape:
            direction = "d2h"
        elif host_in:
            direction = "h2d"
        else:
            continue
        ops[ins.name] = direction
        if ins.name.endswith("-start") or "-start." in ins.name:
            ops[ins.name.replace("-start", "-done")] = direction
        cm = re.search(r"calls=%?([\w.\-]+)", ins.attrs)
        if cm:
            calls[cm.group(1)] = direction
    for comp, direction in calls.items():
        ops.setdefault(comp, direction)
        for inner in bodies.get(comp, ()):
            if inner.name.startswith(("param", "Arg_")):
                continue
            ops.setdefault(inner.name, direction)
    return ops
