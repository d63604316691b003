"""Device time of a compiled XLA:GPU program, kernel by kernel, from its HLO text.

Why: the cost library prices a step equation by equation (cost_models' fusion-aware
roofline), but on the H200 the time of the dense attention's score chain is decided by the
few fusions XLA forms and the passes each makes over memory (full remat's backward
recomputes the softmax inside one Triton fusion per layer, which the plans that save the row
statistics drop, and the roofline prices that saving several times low; measured:
benchmarks/results/h200-2026-12-04-moe-kernels.md). The planner compiles the full-remat and
save-everything anchors and verifies each plan with a compile, so the compiled HLO of the
programs it compares is at hand; this module prices it.

Each instruction that launches work (a fusion, an async ``fusion-start``, a cuBLAS / cuDNN
custom-call, an unfused copy or other op) in a computation the program runs (the entry,
while bodies and conditions, called and async computations) costs, per run,

    max(bytes moved / HBM rate, matmul flops / matmul rate + other flops / vector rate)

times its runs per step (``hlo.while_trips``: nested loops multiply), where

* bytes moved = bytes its operands are read + bytes its outputs are written; a parameter
  read only through ``slice`` / ``dynamic-slice`` / ``gather`` counts the slices' bytes; the
  buffer of an in-place ``dynamic-update-slice`` or ``scatter`` (its operand 0 a fusion
  parameter) counts the update's bytes, read and written, not the buffer's;
* a fusion that reduces rows and then reads the same rows again with the reduced value
  (softmax: row max, then exp-sum, then normalise) reads its operands once per *pass*: the
  reductions of a fusion are put in levels (a reduction whose inputs need another
  reduction's result is one level later), each level reads the parameters its reductions
  reach without crossing another reduction, and outputs that need a reduction's result read
  theirs in one more pass;
* bitcasts, tuples, get-tuple-element, parameters, constants, ``*-done`` move nothing;
* cuBLAS GEMMs (``__cublas$gemm``, ``__cublas$lt$matmul``) and Triton GEMM fusions count
  ``2 x batch x M x N x K`` at the operands' matmul rate (f32 at DEFAULT precision: TF32);
  cuDNN fused attention counts ``4 b h s_q s_k d`` (forward; backward 2.5x) times the share
  of scores its mask keeps (causal: 1/2, as cost_models counts it) at the profile's
  attention rate.

Asynchronous ``fusion-start`` of a fusion that only slices or updates a slice (a scan's
stacked operand sliced by the loop counter) runs as a device-to-device memcpy on XLA:GPU,
not as a kernel (``hlo.loop_slice_copy_bytes``), and so does a ``copy`` that keeps its
operand's layout: kind ``"d2d"``, priced at the profile's ``loop_copy_rate`` on the bytes
read.

Nothing here touches JAX: the input is HLO text (``compiled.as_text()``) and a profile.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections import defaultdict

from cost_models._rules import CAUSAL_FRACTION
from planner._src.xla import hlo

# Instructions that launch nothing (they route, alias, wrap or wait).
FREE = frozenset(
    {
        "parameter",
        "constant",
        "get-tuple-element",
        "tuple",
        "bitcast",
        "while",
        "call",
        "conditional",
        "after-all",
        "opt-barrier",
        "fusion-done",
        "async-done",
        "copy-done",
        "partition-id",
        "replica-id",
        "iota",  # (XLA:GPU wraps a live iota in a fusion; a bare one is folded)
        "add-dependency",
        "domain",
    }
)
_GEMM_TARGETS = ("__cublas$gemm", "__cublas$lt$matmul")
ELEMENTWISE_FREE = frozenset(
    {"parameter", "constant", "bitcast", "broadcast", "reshape", "tuple", "get-tuple-element"}
)
# Reads of a parameter that touch only part of it: the bytes read are the result's.
_PARTIAL_READS = frozenset({"slice", "dynamic-slice", "gather"})
# Updates in place of their operand 0 (the buffer): the update's bytes are read and written.
_IN_PLACE = frozenset({"dynamic-update-slice", "scatter"})


@dataclasses.dataclass(frozen=True, slots=True)
class KernelTime:
    """The estimate of one instruction that launches work, per step."""

    name: str  # the instruction
    computation: str  # the computation it runs in
    group: str  # XLA:GPU's deduplicated kernel (``deduplicated_name``), else the name
    kind: str  # "gemm" | "attention" | "d2d" | "fusion" | "copy" | "other"
    runs: int  # runs per step (while trip counts multiplied)
    bytes_read: int  # per run
    bytes_written: int  # per run
    passes: int  # reads of the operands per run (1, or the reduction levels + outputs)
    matmul_flops: float  # per run
    vector_flops: float  # per run
    seconds: float  # per run
    op_name: str
    shape: str

    @property
    def step_seconds(self) -> float:
        return self.seconds * self.runs


# ------------------------------------------------------------------------- the program


def computation_runs(module: hlo.Module) -> dict[str, int]:
    """Computations the program runs as code of their own (not fused) -> runs per step: the
    entry once, a while body its trip count times the runs of its caller (the condition as
    often), a ``call``ed, async or conditional-branch computation as often as its caller."""
    comps = module.computations()
    runs: dict[str, int] = {module.entry: 1} if module.entry else {}
    todo = [module.entry] if module.entry else []
    while todo:
        comp = todo.pop()
        for ins in comps.get(comp, ()):
            callees: list[tuple[str, int]] = []
            loop = hlo.while_loop(ins)
            if loop:
                callees.append((loop[0], loop[1]))
                cond = re.search(r"condition=%?([\w.\-]+)", ins.attrs)
                if cond:
                    callees.append((cond.group(1), loop[1]))
            elif ins.opcode == "call" or ins.opcode == "async-start":
                for c in re.findall(r"(?:to_apply|calls)=%?([\w.\-]+)", ins.attrs):
                    callees.append((c, 1))
            elif ins.opcode == "conditional":
                m = re.search(r"branch_computations=\{([^}]*)\}", ins.attrs)
                names = re.findall(r"%?([\w.\-]+)", m.group(1)) if m else []
                names += re.findall(r"(?:true|false)_computation=%?([\w.\-]+)", ins.attrs)
                callees += [(c, 1) for c in names]  # (each branch as if it ran: an upper bound)
            for c, n in callees:
                if c in comps and c not in runs:
                    runs[c] = runs[comp] * n
                    todo.append(c)
    return runs


def _target(ins: hlo.Instruction) -> str:
    m = re.search(r'custom_call_target="([^"]*)"', ins.line)
    return m.group(1) if m else ""


def called(ins: hlo.Instruction) -> str | None:
    m = re.search(r"calls=%?([\w.\-]+)", ins.attrs)
    return m.group(1) if m else None


def shape_bytes(shape: str) -> int:
    return sum(hlo.array_bytes(t, d) for t, d in hlo.array_shapes(shape))


def _elements(shape: str) -> int:
    return sum(int(math.prod(d)) for _, d in hlo.array_shapes(shape))


def _dedup(ins: hlo.Instruction) -> str:
    m = re.search(r'deduplicated_name="([^"]*)"', ins.line)
    return m.group(1) if m else ins.name


def start_operands(ins: hlo.Instruction) -> str:
    """The operand shapes of an async ``*-start``: the first element of its result tuple
    ``((operands...), output, context)``."""
    top = hlo.split_top(ins.shape[1:-1]) if ins.shape.startswith("(") else [ins.shape]
    return top[0] if top else ""


def _start_output(ins: hlo.Instruction) -> str:
    top = hlo.split_top(ins.shape[1:-1]) if ins.shape.startswith("(") else [ins.shape]
    return top[1] if len(top) > 1 else ins.shape


# ---------------------------------------------------------------------------- fusions


@dataclasses.dataclass(frozen=True, slots=True)
class FusionCost:
    """What one run of a fused computation reads, writes and computes."""

    bytes_read: int
    bytes_written: int
    passes: int
    matmul_flops: float
    matmul_dtype: str
    vector_flops: float
    only_moves: bool  # nothing but slicing / updating a slice (a memcpy on XLA:GPU)


def _users(body: list[hlo.Instruction]) -> dict[str, list[hlo.Instruction]]:
    out: dict[str, list[hlo.Instruction]] = defaultdict(list)
    for ins in body:
        for op in ins.operands:
            out[op].append(ins)
    return out


def _through_bitcasts(name: str, users, by_name) -> list[tuple[hlo.Instruction, str]]:
    """(user, the operand name it reads) of ``name``, looking through bitcasts/reshapes."""
    out = []
    for u in users.get(name, ()):
        if u.opcode in ("bitcast", "reshape"):
            out += _through_bitcasts(u.name, users, by_name)
        else:
            out.append((u, name))
    return out


def _dot_flops(ins: hlo.Instruction, shapes: dict[str, str]) -> float:
    """2 x (output elements) x (contracted elements) of a ``dot``."""
    out = _elements(ins.shape)
    lhs = hlo.array_shapes(shapes.get(ins.operands[0], "")) if ins.operands else ()
    m = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", ins.attrs)
    if not lhs or not m:
        return 0.0
    dims = lhs[0][1]
    k = math.prod(dims[int(i)] for i in m.group(1).split(",") if i)
    return 2.0 * out * k


def _matmul_dtype(types: list[str], precision_highest: bool) -> str:
    if any(t.startswith("f8") for t in types):
        return "float8"
    if "f32" in types:
        return "float32" if precision_highest else "tf32"
    if "f16" in types and "bf16" not in types:
        return "float16"
    return "bfloat16"


def fusion_cost(body: list[hlo.Instruction], operand_shapes: list[str]) -> FusionCost:
    """Bytes, passes and flops of one run of a fused computation (``body``: its
    instructions in text order), given the shapes of the fusion's operands in order."""
    by_name = {i.name: i for i in body}
    users = _users(body)
    params: dict[str, int] = {}
    for ins in body:
        if ins.opcode == "parameter":
            m = re.match(r"(\d+)", ins.operand_text)
            params[ins.name] = int(m.group(1)) if m else 0
    shapes = {i.name: i.shape for i in body}

    def pbytes(p: str) -> int:
        idx = params[p]
        text = operand_shapes[idx] if idx < len(operand_shapes) else shapes[p]
        return shape_bytes(text)

    # What each parameter costs to read once: all of it, the slices it is read through, or
    # nothing when it is only the buffer of an in-place update (counted with the update).
    read_once: dict[str, int] = {}
    in_place_written = 0
    for p in params:
        uses = _through_bitcasts(p, users, by_name)
        full = pbytes(p)
        if uses and all(u.opcode in _PARTIAL_READS and u.operands[0] == nm for u, nm in uses):
            read_once[p] = min(full, sum(shape_bytes(u.shape) for u, _ in uses))
        elif uses and all(u.opcode in _IN_PLACE and u.operands[0] == nm for u, nm in uses):
            read_once[p] = 0
        else:
            read_once[p] = full

    # Outputs: the root, or the root tuple's elements (through bitcasts).
    root = next((i for i in body if i.root), body[-1] if body else None)
    outs = [root] if root is not None else []
    if root is not None and root.opcode == "tuple":
        outs = [by_name[o] for o in root.operands if o in by_name]
    written = 0
    for o in outs:
        base = o
        while base.opcode in ("bitcast", "reshape") and base.operands[0] in by_name:
            base = by_name[base.operands[0]]
        if base.opcode in _IN_PLACE and base.operands and base.operands[0] in params:
            # the update (dynamic-update-slice operand 1; scatter: its updates, the last)
            upd = base.operands[1] if base.opcode == "dynamic-update-slice" else base.operands[-1]
            ub = shape_bytes(shapes.get(upd, ""))
            written += ub
            in_place_written += ub  # the touched part of the buffer is read too
        elif base.opcode == "custom-call" and base.shape.startswith("("):
            written += shape_bytes(hlo.split_top(base.shape[1:-1])[0])  # not the workspace
        else:
            written += shape_bytes(o.shape)

    # Passes: reductions in levels; each level reads what its reductions reach.
    reduces = [i for i in body if i.opcode == "reduce" and is_row_reduction(i, shapes)]
    reduce_names = {r.name for r in reduces}
    cone_cache: dict[str, tuple[frozenset[str], frozenset[str]]] = {}

    def cone(name: str, start: bool = True) -> tuple[frozenset[str], frozenset[str]]:
        """(parameters, reductions) reached from ``name`` without crossing a reduction."""
        key = name if not start else "^" + name
        if key in cone_cache:
            return cone_cache[key]
        ps: set[str] = set()
        rs: set[str] = set()
        stack = list(by_name[name].operands) if start else [name]
        seen: set[str] = set()
        while stack:
            n = stack.pop()
            if n in seen or n not in by_name:
                continue
            seen.add(n)
            if n in params:
                ps.add(n)
            elif n in reduce_names:
                rs.add(n)
            else:
                stack.extend(by_name[n].operands)
        cone_cache[key] = (frozenset(ps), frozenset(rs))
        return cone_cache[key]

    level: dict[str, int] = {}

    def level_of(r: str, depth: int = 0) -> int:
        if r not in level:
            _, rs = cone(r)
            level[r] = 1 + max((level_of(x, depth + 1) for x in rs), default=-1)
        return level[r]

    reads_at: dict[int, set[str]] = defaultdict(set)
    for r in reduces:
        reads_at[level_of(r.name)] |= cone(r.name)[0]
    for o in outs:
        if o.name in reduce_names:
            continue
        ps, rs = cone(o.name, start=False)
        lv = 1 + max((level_of(x) for x in rs), default=-1) if rs else 0
        reads_at[lv] |= ps
    if not reads_at:
        reads_at[0] = set(params)
    bytes_read = sum(read_once[p] for ps in reads_at.values() for p in ps) + in_place_written
    passes = len(reads_at)

    mm_flops = 0.0
    mm_types: list[str] = []
    highest = False
    vec = 0.0
    moves = False  # slices or updates a slice of an array
    computes = False  # does anything else to an array (index arithmetic on scalars is not)
    for ins in body:
        if ins.opcode == "dot":
            mm_flops += _dot_flops(ins, shapes)
            mm_types += [t for o in ins.operands for t, _ in hlo.array_shapes(shapes.get(o, ""))]
            highest = highest or "HIGHEST" in ins.attrs
            computes = True
        elif ins.opcode == "custom-call" and _target(ins) in _GEMM_TARGETS:
            # a cuBLAS call wrapped with the slices of its operands (XLA:GPU's
            # dynamic_slice_fusion: the slices become address offsets)
            f, dtype, _ = _gemm_custom_call(ins, shapes)
            mm_flops += f
            mm_types.append({"float32": "f32", "tf32": "f32", "float16": "f16"}.get(dtype, "bf16"))
            computes = True
        elif ins.opcode in ("dynamic-slice", "dynamic-update-slice", "slice"):
            moves = True
        elif ins.opcode not in ELEMENTWISE_FREE:
            src = shapes.get(ins.operands[0], "") if ins.operands else ""
            elems = _elements(src) if ins.opcode == "reduce" else _elements(ins.shape)
            vec += elems
            computes = computes or elems > 1
    only_moves = moves and not computes
    return FusionCost(
        bytes_read=bytes_read,
        bytes_written=written,
        passes=passes,
        matmul_flops=mm_flops,
        matmul_dtype=_matmul_dtype(mm_types, highest),
        vector_flops=vec,
        only_moves=only_moves,
    )


def is_row_reduction(ins: hlo.Instruction, shapes: dict[str, str]) -> bool:
    """A ``reduce`` that shrinks its operand (not a tuple-of-scalars bookkeeping reduce)."""
    src = _elements(shapes.get(ins.operands[0], "")) if ins.operands else 0
    return src > _elements(ins.shape)


# ----------------------------------------------------------------------- custom-calls


def _gemm_custom_call(ins: hlo.Instruction, shapes: dict[str, str]) -> tuple[float, str, int]:
    """(flops, matmul dtype, output bytes without the workspace) of a cuBLAS custom-call."""
    out = hlo.split_top(ins.shape[1:-1])[0] if ins.shape.startswith("(") else ins.shape
    cfg = re.search(r'"dot_dimension_numbers":(\{[^}]*\})', ins.line)
    lhs = hlo.array_shapes(shapes.get(ins.operands[0], "")) if ins.operands else ()
    k = 1
    if cfg and lhs:
        dims = json.loads(cfg.group(1))
        k = math.prod(lhs[0][1][int(i)] for i in dims.get("lhs_contracting_dimensions", []))
    types = [t for o in ins.operands[:2] for t, _ in hlo.array_shapes(shapes.get(o, ""))]
    highest = '"HIGHEST"' in ins.line
    return 2.0 * _elements(out) * k, _matmul_dtype(types, highest), shape_bytes(out)


def _attention_custom_call(ins: hlo.Instruction, shapes: dict[str, str]) -> tuple[float, str]:
    """(flops, direction) of a cuDNN fused attention call: 4 b h s_q s_k d forward (the
    two matmuls), 2.5x that backward, over the scores the mask keeps: x CAUSAL_FRACTION for
    a causal mask (``"mask_type":"CAUSAL"`` in its backend config), min(window, s_k) / s_k
    for a sliding window. These are cost_models/_rules_matrix.py's formulas, the FLOPs by which the
    profile's attention rates were measured (cost_models/_calibrate.py): counting a causal
    call's masked half would price it at twice the library's time."""
    q = hlo.array_shapes(shapes.get(ins.operands[0], "")) if ins.operands else ()
    k = hlo.array_shapes(shapes.get(ins.operands[1], "")) if len(ins.operands) > 1 else ()
    if not q or not k or len(q[0][1]) != 4:
        return 0.0, "fwd"
    b, sq, h, d = q[0][1]  # (cuDNN's BTNH layout; the product is what matters)
    sk = k[0][1][1]
    backward = "backward" in ins.line.lower() or "bwd" in ins.line.lower()
    window = re.search(r'"sliding_window_length":"?(\d+)', ins.line)
    if window and int(window.group(1)) > 0:
        kept = min(int(window.group(1)), sk) / sk
    elif re.search(r'"mask_type":"[A-Z_]*CAUSAL|"is_causal_mask":true', ins.line):
        kept = CAUSAL_FRACTION
    else:
        kept = 1.0
    f = 4.0 * b * h * sq * sk * d * kept
    return (2.5 * f if backward else f), ("bwd" if backward else "fwd")


# --------------------------------------------------------------------------- the model


def kernel_times(module: hlo.Module | str, hw) -> list[KernelTime]:
    """Every instruction of ``module`` that launches work, with its estimated device time
    (see the module docstring), in text order."""
    if isinstance(module, str):
        module = hlo.parse(module)
    comps = module.computations()
    runs = computation_runs(module)
    shapes = {i.name: i.shape for i in module.instructions}
    hbm = hw.hbm_bytes_per_s
    out: list[KernelTime] = []
    for comp, n in runs.items():
        for ins in comps.get(comp, ()):
            if ins.opcode in FREE or ins.opcode.endswith("-done"):
                continue
            if ins.opcode == "async-start":
                continue  # its called computation is walked on its own (computation_runs)
            kt = _one(ins, comps, shapes, hw, hbm, n)
            if kt is not None:
                out.append(kt)
    return out


def _one(ins, comps, shapes, hw, hbm, n) -> KernelTime | None:
    operand_shapes = [shapes.get(o, "") for o in ins.operands]
    read = sum(shape_bytes(s) for s in operand_shapes)
    written = shape_bytes(ins.shape)
    mm = vec = 0.0
    dtype = "bfloat16"
    passes = 1
    kind = "other"
    seconds = None
    if ins.opcode in ("fusion", "fusion-start"):
        body = comps.get(called(ins) or "", [])
        if ins.opcode == "fusion-start":
            operand_shapes = [s for s in hlo.split_top(start_operands(ins)[1:-1])] or operand_shapes
        fc = fusion_cost(body, operand_shapes)
        read, written, passes = fc.bytes_read, fc.bytes_written, fc.passes
        mm, dtype, vec = fc.matmul_flops, fc.matmul_dtype, fc.vector_flops
        kind = "gemm" if mm else "fusion"
        if ins.opcode == "fusion-start" and fc.only_moves:
            kind = "d2d"
            seconds = written / hw.loop_copy_rate()  # the bytes copied (hlo.loop_slice_copy_bytes)
    elif ins.opcode == "custom-call":
        target = re.search(r'custom_call_target="([^"]*)"', ins.line)
        target_s = target.group(1) if target else ""
        if target_s in _GEMM_TARGETS:
            mm, dtype, written = _gemm_custom_call(ins, shapes)
            kind = "gemm"
        elif "cudnn" in target_s and ("fmha" in target_s or "attention" in target_s.lower()):
            flops, direction = _attention_custom_call(ins, shapes)
            q = hlo.array_shapes(operand_shapes[1]) if len(operand_shapes) > 1 else ()
            length = q[0][1][1] if q and len(q[0][1]) == 4 else 4096
            kind = "attention"
            seconds = max(flops / hw.attention_rate(direction, length), (read + written) / hbm)
            mm = flops
    elif ins.opcode in ("copy", "copy-start"):
        kind = "copy"
        written = shape_bytes(_start_output(ins)) if ins.opcode == "copy-start" else written
        if ins.opcode == "copy" and operand_shapes and operand_shapes[0] == ins.shape:
            # Same dims, same layout: XLA:GPU runs it as a device-to-device memcpy.
            kind = "d2d"
            seconds = read / hw.loop_copy_rate()
    if seconds is None:
        compute = (mm / hw.matmul_rate(dtype) if mm else 0.0) + vec / hw.vector_flops_per_s
        seconds = max((read + written) / hbm, compute)
    return KernelTime(
        name=ins.name,
        computation=ins.computation,
        group=_dedup(ins),
        kind=kind,
        runs=n,
        bytes_read=read,
        bytes_written=written,
        passes=passes,
        matmul_flops=mm,
        vector_flops=vec,
        seconds=seconds,
        op_name=ins.op_name,
        shape=ins.shape,
    )


def step_seconds(kernels: list[KernelTime], *, include_d2d: bool = True) -> float:
    """The sum of the kernels' device time per step."""
    return sum(k.step_seconds for k in kernels if include_d2d or k.kind != "d2d")
