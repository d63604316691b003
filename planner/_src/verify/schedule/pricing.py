"""Pricing the compiled schedule: the seconds of each instruction on the compute stream,
by the hardware profile's rates (matmuls and fused attention by their FLOPs, other kernels by
their HBM bytes; a ``while`` at its trip count), or per kernel by planner/_src/xla/kernels.py."""

from __future__ import annotations

import json
import math
import re

import cost_models as cm
from planner._src.xla import hlo

# Async pairs whose start and done bracket work on another stream. Their own time is not the
# compute stream's: only host copies (S(5)) are modelled as copies; the rest (the device-side
# loop-slice copies XLA makes asynchronous) are taken as free for the compute stream.
ASYNC_DONE = {"copy-done", "fusion-done", "async-done", "send-done", "recv-done"}
_FREE = hlo.STRUCTURAL - {"while", "call", "conditional", "custom-call"} | {
    "copy-start",
    "fusion-start",
    "async-start",
    "partition-id",
    "replica-id",
}


def _first_array(shape: str) -> tuple[str, tuple[int, ...]] | None:
    arrays = hlo.array_shapes(shape)
    return arrays[0] if arrays else None


def shape_bytes(shape: str) -> int:
    return sum(hlo.array_bytes(t, d) for t, d in hlo.array_shapes(shape))


def _backend_config(ins: hlo.Instruction) -> dict:
    m = re.search(r"backend_config=(\{.*\})\s*$", ins.attrs)
    if not m:
        return {}
    try:
        return json.loads(m.group(1))
    except ValueError:
        return {}


def _gemm_flops(ins: hlo.Instruction, shapes: dict[str, str]) -> float:
    """2 x output elements x contracted size of a cuBLAS gemm custom call or a ``dot``."""
    out = _first_array(ins.shape)
    lhs = _first_array(shapes.get(ins.operands[0], "")) if ins.operands else None
    if out is None or lhs is None:
        return 0.0
    cfg = _backend_config(ins).get("gemm_backend_config", {})
    dims = cfg.get("dot_dimension_numbers", {}).get("lhs_contracting_dimensions")
    if dims is None:  # a plain dot: lhs_contracting_dims={1}
        m = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", ins.attrs)
        dims = m.group(1).split(",") if m and m.group(1) else []
    k = math.prod(lhs[1][int(d)] for d in dims if int(d) < len(lhs[1]))
    return 2.0 * math.prod(out[1]) * k


def _attention_flops(ins: hlo.Instruction, shapes: dict[str, str]) -> tuple[str, int, float]:
    """(direction, key length, FLOPs) of a cuDNN fused attention call:
    cost_models/_rules_matrix.py's formulas (forward 4 b h t s d, half of it under a causal
    mask; backward 2.5 times that)."""
    cfg = _backend_config(ins).get("cudnn_fmha_backend_config", {})
    inter = [int(x) for x in cfg.get("intermediate_tensor_shape", {}).get("dimensions", [])]
    q = _first_array(shapes.get(ins.operands[0], "")) if ins.operands else None
    if len(inter) != 4 or q is None:
        return ("fwd", 0, 0.0)
    b, h, t, s = inter
    flops = 4.0 * b * h * t * s * q[1][-1]
    if cfg.get("mask_type", "") == "CAUSAL":
        flops *= 0.5
    backward = "Backward" in ins.attrs.split("custom_call_target=")[-1].split(",")[0]
    return ("bwd" if backward else "fwd", s, flops * (2.5 if backward else 1.0))


def _param_read_bytes(body: list[hlo.Instruction], shapes: dict[str, str]) -> dict[int, int]:
    """Bytes a fused computation really reads of each parameter: a parameter only sliced
    (dynamic-slice) or updated in place (operand 0 of dynamic-update-slice) is read as its
    slices, not whole (a scan's stacked residual read one layer at a time)."""
    users: dict[str, list[hlo.Instruction]] = {}
    for ins in body:
        for op in ins.operands:
            users.setdefault(op, []).append(ins)
    out: dict[int, int] = {}
    for ins in body:
        if ins.opcode != "parameter":
            continue
        m = re.match(r"(\d+)", ins.operand_text)
        if not m:
            continue
        use = users.get(ins.name, [])
        full = shape_bytes(ins.shape)
        if use and all(
            u.opcode == "dynamic-slice"
            or (u.opcode == "dynamic-update-slice" and u.operands[:1] == (ins.name,))
            for u in use
        ):
            part = 0
            for u in use:
                if u.opcode == "dynamic-slice":
                    part += shape_bytes(u.shape)
                elif len(u.operands) > 1:
                    part += shape_bytes(shapes.get(u.operands[1], ""))
            out[int(m.group(1))] = min(full, part)
        else:
            out[int(m.group(1))] = full
    return out


class Pricer:
    """Seconds of each instruction on the compute stream, by the profile's rates."""

    def __init__(self, module: hlo.Module, hw):
        self.hw = hw
        self.shapes = {i.name: i.shape for i in module.instructions}
        self.bodies = module.computations()
        self.memo: dict[str, float] = {}
        self.leaf: dict[str, float] | None = None  # per-instruction seconds (pricing="kernels")

    def computation(self, name: str) -> float:
        if name not in self.memo:
            self.memo[name] = 0.0  # (recursion guard)
            self.memo[name] = sum(self.instruction(i) for i in self.bodies.get(name, ()))
        return self.memo[name]

    def _called(self, ins: hlo.Instruction) -> str:
        m = re.search(r"calls=%?([\w.\-]+)", ins.attrs)
        return m.group(1) if m else ""

    def _kernel(self, flops: float, hbm_bytes: float, attention=()) -> float:
        hw = self.hw
        att = sum(f / hw.attention_rate(d, n) for d, n, f in attention)
        compute = flops / hw.matmul_rate("bf16") + att
        return max(compute, hbm_bytes / hw.hbm_bytes_per_s) + hw.kernel_launch_s

    def instruction(self, ins: hlo.Instruction) -> float:
        op = ins.opcode
        if self.leaf is not None and op not in ("while", "call", "conditional"):
            if op in _FREE or op in ASYNC_DONE or op.endswith(("-start", "-done", "-update")):
                return 0.0
            return self.leaf.get(ins.name, 0.0)
        if op in _FREE or op in ASYNC_DONE or op.endswith(("-start", "-done", "-update")):
            return 0.0
        if op == "while":
            loop = hlo.while_loop(ins)
            return loop[1] * self.computation(loop[0]) if loop else 0.0
        if op in ("call", "conditional"):
            return self.computation(self._called(ins))
        if op == "custom-call":
            target = re.search(r'custom_call_target="([^"]*)"', ins.attrs)
            target = target.group(1) if target else ""
            io = shape_bytes(ins.shape) + sum(
                shape_bytes(self.shapes.get(o, "")) for o in ins.operands
            )
            if "cublas" in target or "gemm" in target:
                return self._kernel(_gemm_flops(ins, self.shapes), io)
            if "fmha" in target:
                return self._kernel(0.0, io, (_attention_flops(ins, self.shapes),))
            if target in ("AllocateBuffer",):
                return 0.0
            return self._kernel(0.0, io)
        if op == "fusion":
            body = self.bodies.get(self._called(ins), [])
            inner = [i for i in body if i.opcode in ("custom-call", "dot", "fusion", "while")]
            if inner:  # a custom fusion around a gemm (dynamic-slice fusion): the gemm's time
                return sum(self.instruction(i) for i in inner)
            reads = _param_read_bytes(body, self.shapes)
            read = sum(
                reads.get(k, shape_bytes(self.shapes.get(o, "")))
                for k, o in enumerate(ins.operands)
            )
            return self._kernel(0.0, read + shape_bytes(ins.shape))
        if op == "dot":
            io = shape_bytes(ins.shape) + sum(
                shape_bytes(self.shapes.get(o, "")) for o in ins.operands
            )
            return self._kernel(_gemm_flops(ins, self.shapes), io)
        # Anything else the compute stream runs (copy, transpose, reduce, ...): its bytes.
        return self._kernel(
            0.0,
            shape_bytes(ins.shape) + sum(shape_bytes(self.shapes.get(o, "")) for o in ins.operands),
        )


def total_compute_s(text_or_module, hardware) -> float:
    """The priced compute of the whole module (every loop at its trip count): for checking
    the pricing against a measured step's kernel time."""
    module = hlo.parse(text_or_module) if isinstance(text_or_module, str) else text_or_module
    return Pricer(module, cm.load_profile(hardware)).computation(module.entry)
