"""The compiled schedule's copy windows: how much of each host copy the compute around it hides.

A compiled XLA:GPU module is *scheduled*: the instructions of each computation are listed in
the order the compute stream runs them. An asynchronous host copy is a pair, a start
(``copy-start``, or the ``fusion-start`` of a dynamic-(update-)slice into or out of a buffer
in host memory space ``S(5)``) and the done that waits for it. The copy runs on a copy engine
while the compute stream runs what the schedule puts between the two; when the compute stream
reaches the done and the copy is still running, it waits: that wait is the copy's exposed time.

Measured on the H200 (benchmarks/results/h200-2026-12-04-exposure-b/, 2026-12-04): offloading
the cuDNN attention output, XLA put the reload's done right after its start in the backward
trip, nothing between them: 98% of every reload exposed, where the cost model's proportional
window (cost.py: the backward compute before the first use, 29 ms a trip) had hidden half.
The window that decides is the compiled schedule's, not a position in the traced program.

:func:`read_windows` reads it: per host copy (both directions, in while bodies too) the
instructions the schedule puts between start and done and their compute time, priced by the
hardware profile's rates (:func:`instruction_seconds`: matmuls and fused attention by their
FLOPs at the profile's measured rates, other kernels by their HBM bytes), and the exposed time
from replaying the schedule: the compute stream advances by each instruction's time, a copy
starts when its start is reached and its direction's link is free (copies of one direction
queue on one link), and a done waits for its copy's end. A computation run by a ``while`` counts
once per trip (``known_trip_count``). Nothing here touches JAX: the input is the HLO text.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re

import cost_models as cm
from cost_models._transfer import DIRECTIONS
from planner._src import hlo

# Async pairs whose start and done bracket work on another stream. Their own time is not the
# compute stream's: only host copies (S(5)) are modelled as copies; the rest (the device-side
# loop-slice copies XLA makes asynchronous) are taken as free for the compute stream.
_ASYNC_DONE = {"copy-done", "fusion-done", "async-done", "send-done", "recv-done"}
_FREE = hlo.STRUCTURAL - {"while", "call", "conditional", "custom-call"} | {
    "copy-start",
    "fusion-start",
    "async-start",
    "partition-id",
    "replica-id",
}


@dataclasses.dataclass(frozen=True, slots=True)
class HostCopy:
    """One asynchronous host copy of the compiled schedule, per run of its computation."""

    start: str  # the start instruction's name
    done: str  # the done instruction's name ("" when the module has none: then not waited for)
    computation: str
    direction: str  # "d2h" (a store) or "h2d" (a reload)
    nbytes: int
    trips: int  # runs of its computation per step (a while body's trip count; 1 otherwise)
    copy_s: float  # bytes at the profile's link rate for its direction
    window: tuple[str, ...]  # instructions the schedule runs between start and done, priced > 0
    window_s: float  # their compute time
    exposed_s: float  # the compute stream's wait at the done, from the schedule's replay


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduleWindows:
    """Per direction, per step: copy time, compute in the copies' windows, exposed time."""

    copies: tuple[HostCopy, ...]
    compiler: str = ""  # who scheduled the module (target.CompilerTarget.description)

    def copy_s(self, direction: str) -> float:
        return sum(c.trips * c.copy_s for c in self.copies if c.direction == direction)

    def window_s(self, direction: str) -> float:
        return sum(c.trips * c.window_s for c in self.copies if c.direction == direction)

    def exposed_s(self, direction: str) -> float:
        return sum(c.trips * c.exposed_s for c in self.copies if c.direction == direction)

    def by_direction(self) -> dict[str, tuple[float, float, float]]:
        """``{"d2h": (copy, window compute, exposed), "h2d": (...)}``, seconds per step."""
        return {d: (self.copy_s(d), self.window_s(d), self.exposed_s(d)) for d in ("d2h", "h2d")}


# ------------------------------------------------------------------------------ pricing


def _first_array(shape: str) -> tuple[str, tuple[int, ...]] | None:
    arrays = hlo.array_shapes(shape)
    return arrays[0] if arrays else None


def _bytes(shape: str) -> int:
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
    """(direction, key length, FLOPs) of a cuDNN fused attention call: cost_models/_rules.py's
    formulas (forward 4 b h t s d, half of it under a causal mask; backward 2.5 times that)."""
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
        full = _bytes(ins.shape)
        if use and all(
            u.opcode == "dynamic-slice"
            or (u.opcode == "dynamic-update-slice" and u.operands[:1] == (ins.name,))
            for u in use
        ):
            part = 0
            for u in use:
                if u.opcode == "dynamic-slice":
                    part += _bytes(u.shape)
                elif len(u.operands) > 1:
                    part += _bytes(shapes.get(u.operands[1], ""))
            out[int(m.group(1))] = min(full, part)
        else:
            out[int(m.group(1))] = full
    return out


class _Pricer:
    """Seconds of each instruction on the compute stream, by the profile's rates."""

    def __init__(self, module: hlo.Module, hw):
        self.hw = hw
        self.shapes = {i.name: i.shape for i in module.instructions}
        self.bodies = module.computations()
        self.memo: dict[str, float] = {}

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
        if op in _FREE or op in _ASYNC_DONE or op.endswith(("-start", "-done", "-update")):
            return 0.0
        if op == "while":
            loop = hlo.while_loop(ins)
            return loop[1] * self.computation(loop[0]) if loop else 0.0
        if op in ("call", "conditional"):
            return self.computation(self._called(ins))
        if op == "custom-call":
            target = re.search(r'custom_call_target="([^"]*)"', ins.attrs)
            target = target.group(1) if target else ""
            io = _bytes(ins.shape) + sum(_bytes(self.shapes.get(o, "")) for o in ins.operands)
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
                reads.get(k, _bytes(self.shapes.get(o, ""))) for k, o in enumerate(ins.operands)
            )
            return self._kernel(0.0, read + _bytes(ins.shape))
        if op == "dot":
            io = _bytes(ins.shape) + sum(_bytes(self.shapes.get(o, "")) for o in ins.operands)
            return self._kernel(_gemm_flops(ins, self.shapes), io)
        # Anything else the compute stream runs (copy, transpose, reduce, ...): its bytes.
        return self._kernel(
            0.0, _bytes(ins.shape) + sum(_bytes(self.shapes.get(o, "")) for o in ins.operands)
        )


# ------------------------------------------------------------------------------ windows


def read_windows(text_or_module, hardware, *, compiler: str = "") -> ScheduleWindows:
    """The host copies of a compiled module with their schedule windows (module docstring).

    ``hardware``: a cost_models profile or its name (link rates, matmul / attention / HBM
    rates, kernel launch time). ``compiler``: who scheduled it, for the report.
    """
    module = hlo.parse(text_or_module) if isinstance(text_or_module, str) else text_or_module
    hw = cm.load_profile(hardware)
    directions = hlo.host_transfer_ops(module)
    pricer = _Pricer(module, hw)
    trips = hlo.while_trips(module)
    copies: list[HostCopy] = []
    for comp, body in module.computations().items():
        starts = [
            i for i in body if i.opcode.endswith("-start") and directions.get(i.name) in DIRECTIONS
        ]
        if not starts:
            continue
        copies.extend(_replay(body, starts, directions, pricer, hw, trips.get(comp, 1)))
    return ScheduleWindows(copies=tuple(copies), compiler=compiler)


def _copy_bytes(ins: hlo.Instruction, direction: str) -> int:
    """Bytes a host copy moves: a reload its output (the slice read back), a store the slice
    written (a dynamic-update-slice's update operand, else its output)."""
    if not ins.shape.startswith("("):
        return _bytes(ins.shape)
    elems = hlo.split_top(ins.shape[1:-1])  # ((operands...), output, context)
    if direction == "h2d":
        return _bytes(elems[1]) if len(elems) > 1 else 0
    operands = hlo.split_top(elems[0][1:-1]) if elems[0].startswith("(") else [elems[0]]
    if "S(5)" in operands[0] and len(operands) > 1:  # an update into a host buffer
        return _bytes(operands[1])
    return _bytes(elems[1]) if len(elems) > 1 else 0


def _replay(body, starts, directions, pricer, hw, trips) -> list[HostCopy]:
    """One run of ``body`` on a compute stream and one link per direction (module docstring)."""
    start_names = {s.name for s in starts}
    done_of: dict[str, str] = {}
    for ins in body:
        if ins.opcode in _ASYNC_DONE and ins.operands and ins.operands[0] in start_names:
            done_of[ins.operands[0]] = ins.name
    clock = 0.0
    link_free = {d: 0.0 for d in DIRECTIONS}
    running: dict[str, dict] = {}  # start name -> its copy in flight
    out: list[HostCopy] = []
    for ins in body:
        if ins.name in start_names:
            d = directions[ins.name]
            n = _copy_bytes(ins, d)
            copy_s = cm.transfer_seconds(n, hw, d) if n else 0.0
            begin = max(clock, link_free[d])
            link_free[d] = begin + copy_s
            running[ins.name] = {
                "d": d,
                "n": n,
                "copy_s": copy_s,
                "end": begin + copy_s,
                "window": [],
                "window_s": 0.0,
            }
            continue
        if ins.opcode in _ASYNC_DONE and ins.operands and ins.operands[0] in running:
            c = running.pop(ins.operands[0])
            wait = max(0.0, c["end"] - clock)
            clock += wait
            out.append(_copy(ins.operands[0], ins.name, body, c, wait, trips))
            continue
        t = pricer.instruction(ins)
        clock += t
        for c in running.values():
            if t > 0:
                c["window"].append(ins.name)
                c["window_s"] += t
    for name, c in running.items():  # never waited for in this computation
        out.append(_copy(name, "", body, c, 0.0, trips))
    return out


def _copy(start, done, body, c, wait, trips) -> HostCopy:
    return HostCopy(
        start=start,
        done=done,
        computation=body[0].computation if body else "",
        direction=c["d"],
        nbytes=c["n"],
        trips=trips,
        copy_s=c["copy_s"],
        window=tuple(c["window"]),
        window_s=c["window_s"],
        exposed_s=wait,
    )


def total_compute_s(text_or_module, hardware) -> float:
    """The priced compute of the whole module (every loop at its trip count): for checking
    the pricing against a measured step's kernel time."""
    module = hlo.parse(text_or_module) if isinstance(text_or_module, str) else text_or_module
    return _Pricer(module, cm.load_profile(hardware)).computation(module.entry)
