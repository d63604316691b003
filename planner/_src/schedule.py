"""The compiled schedule's copy windows: how much of each host copy the compute around it hides.

A compiled XLA:GPU module is *scheduled*: the instructions of each computation are listed in
the order the compute stream runs them. An asynchronous host copy is a pair, a start
(``copy-start``, or the ``fusion-start`` of a dynamic-(update-)slice into or out of a buffer
in host memory space ``S(5)``) and the done that waits for it. The copy runs on a copy engine
while the compute stream runs what the schedule puts between the two; when the compute stream
reaches the done and the copy is still running, it waits: that wait is the copy's exposed time.

XLA can put a reload's done right after its start, nothing between them, and then the whole
reload is exposed where the cost model's proportional window (cost.py: the backward compute
before the first use) would hide much of it (measured: benchmarks/results/h200-2026-12-04-exposure-b/).
The window that decides is the compiled schedule's, not a position in the traced program.

:func:`read_windows` reads it: per host copy (both directions, in while bodies too) the
instructions the schedule puts between start and done and their compute time, priced by the
hardware profile's rates (:func:`instruction_seconds`: matmuls and fused attention by their
FLOPs at the profile's measured rates, other kernels by their HBM bytes), and the exposed time
from replaying the schedule: the compute stream advances by each instruction's time, a copy
starts when its start is reached and its direction's link is free (copies of one direction
queue on one link), and a done waits for its copy's end. A computation run by a ``while`` counts
once per trip (``known_trip_count``). Nothing here touches JAX: the input is the HLO text.

The copy streams (``streams=4``, the default). On the H200 (measured:
benchmarks/results/schedule-exposure-2026-12-05.md) XLA:GPU runs every asynchronous copy -- the host
copies *and* the device-to-device loop-slice copies (``fusion-start`` of a fusion that only
slices or updates a scan's stacked operand) -- on four copy streams, each async start on one
stream for the whole run. A stream runs its copies in issue order, so a 0.01 ms weight slice
issued behind a 5.5 ms store on the same stream waits for the store, and the compute waits at
the slice's done: that, not the store's own done, is where a store is exposed. Copies of one
direction over the host link never overlap in the traces read (48-55 GB/s each, one at a time, a
copy as long when it waited as when it did not): one link per direction, no sharing of its
bandwidth.

Which waiting copy takes a freed link (``link_order``; measured from the host launch and device
times of H200 traces: benchmarks/results/schedule-race-2026-12-06.md): not the one issued first. A copy
holds nothing while its stream keeps it from starting; the link goes to the copy ready first
(issued and at the head of its stream): ``"ready"``, the default. In lc16k_dots, of the 137
times the link freed with two or more copies waiting, the first ready took it 97 times, the
first issued 56; 5 stores took it up to 26 ms before a store issued ahead of them. Copies ready
at the same instant (two stores issued after one kernel) race: the H200 ran the later-issued 4
MiB statistics store before the 256 MiB output store in 27 of 32 attention trips, but in
lc16k_dots' ties the larger won about as often as the smaller (d2h 44 vs 36 pairs, h2d 16 vs
16): in the trips read the pick follows a fixed cyclic order of the physical copy streams, which
are permuted between steps and are not in the HLO. The replay breaks such ties in issue order
(``"smallest"``: smallest first, for comparison); it does not model the race.

Which start gets which stream is XLA's ``ExecutionStreamAssignment``
(execution_stream_assignment.cc), reproduced by :func:`stream_assignment`: the computations
breadth-first from ENTRY, each in ``MakeInstructionPostOrder`` order (:func:`post_order`:
control predecessors before operands), every async start the next compute stream, round-robin
with *one counter for the module*. It matches the streams XLA dumps (``xla_dump_to``'s thunk
sequence, read by planner/_src/streams.py) in every loop body of the H200 programs read, and
a deal of operands first or with the counter restarted per computation does not (measured:
benchmarks/results/schedule-streams-2026-12-05.md). From jaxlib 0.12 XLA runs the
host copies on one dedicated stream per direction instead (``host_streams="memcpy"``;
:func:`host_streams_of`).

The replay therefore gives every async start its stream (``stream_order="post"``: XLA's deal;
``"schedule"``: the same deal in the text's order; ``"mean"``: averaged over random deals; or
an ``assignment`` read from a dump), starts a copy when its stream, and for a host copy its
link, are free, runs the loop body trip after trip with the streams' and links' state carried
over, and counts a host copy's exposed time as the compute stream's waits while that copy is
in flight -- the trace's own definition (copy time with no kernel running). ``streams=0``:
loop-slice copies free, no streams.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import random
import re
from collections.abc import Mapping

import cost_models as cm
from cost_models._transfer import DIRECTIONS
from planner._src.xla import hlo, kernels

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
    exposed_s: float  # the compute stream's waits while it is in flight, per trip (replay)
    stream: int = -1  # its copy stream (index in the round-robin), -1 without streams
    queued_s: float = 0.0  # part of exposed_s waited at dones of other copies on its stream


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduleWindows:
    """Per direction, per step: copy time, compute in the copies' windows, exposed time."""

    copies: tuple[HostCopy, ...]
    compiler: str = ""  # who scheduled the module (target.CompilerTarget.description)
    streams: int = 0  # copy streams modelled (0: loop-slice copies free, no stream queues)
    stream_order: str = ""  # how the streams were dealt ("post" | "schedule" | "mean")
    pricing: str = "profile"  # "profile" (_Pricer) | "kernels" (kernels.kernel_times)
    host_streams: str = ""  # where the host copies ran ("compute" | "memcpy"), "" without streams

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
            if op in _FREE or op in _ASYNC_DONE or op.endswith(("-start", "-done", "-update")):
                return 0.0
            return self.leaf.get(ins.name, 0.0)
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


def read_windows(
    text_or_module,
    hardware,
    *,
    compiler: str = "",
    streams: int = 4,
    stream_order: str = "post",
    pricing: str = "profile",
    link_rates: dict[str, float] | None = None,
    host_streams: str = "compute",
    assignment: Mapping[str, int] | None = None,
    link_order: str = "ready",
) -> ScheduleWindows:
    """The host copies of a compiled module with their schedule windows (module docstring).

    ``hardware``: a cost_models profile or its name (link rates, matmul / attention / HBM
    rates, kernel launch time, loop-copy rate). ``compiler``: who scheduled it, for the
    report. ``streams``: copy streams the async copies are dealt over (0: the replay without
    streams, loop-slice copies free). ``stream_order``: ``"post"`` or ``"schedule"``.
    ``pricing``: ``"profile"`` (this module's pricer) or ``"kernels"`` (planner/_src/xla/kernels.py,
    the per-kernel pricing checked against H200 kernels: benchmarks/results/hlo-kernel-time-2026-12-05.md).
    ``link_rates``: bytes/s per direction in place of the profile's link rates (e.g. the
    in-step store rate measured on the H200, which is below the profile's device_put rate).
    ``host_streams``: ``"compute"`` or ``"memcpy"``, where XLA puts the host copies
    (:func:`stream_assignment`; :func:`host_streams_of` gives it for a jaxlib version).
    ``assignment``: the stream of each async start in place of :func:`stream_assignment`'s
    (e.g. read from an XLA dump by planner/_src/streams.py; dedicated host streams numbered
    ``streams`` and ``streams + 1``). ``link_order``: which waiting host copy takes a freed
    link (:data:`LINK_ORDERS`; ``"ready"``, the default, as the H200 traces show).
    """
    if stream_order not in ("post", "schedule", "mean"):
        raise ValueError(f"stream_order must be 'post', 'schedule' or 'mean', got {stream_order!r}")
    if pricing not in ("profile", "kernels"):
        raise ValueError(f"pricing must be 'profile' or 'kernels', got {pricing!r}")
    if link_order not in LINK_ORDERS:
        raise ValueError(f"link_order must be one of {LINK_ORDERS}, got {link_order!r}")
    module = hlo.parse(text_or_module) if isinstance(text_or_module, str) else text_or_module
    hw = cm.load_profile(hardware)
    directions = hlo.host_transfer_ops(module)
    pricer = _Pricer(module, hw)
    if pricing == "kernels":
        pricer.leaf = {k.name: k.seconds for k in kernels.kernel_times(module, hw)}
    trips = hlo.while_trips(module)
    starts = copy_starts(module)
    if assignment is None:
        deal_order = "schedule" if stream_order == "schedule" else "post"
        assignment = stream_assignment(module, streams, order=deal_order, host_streams=host_streams)
    copies: list[HostCopy] = []
    for comp, body in module.computations().items():
        if not any(
            i.opcode.endswith("-start") and directions.get(i.name) in DIRECTIONS for i in body
        ):
            continue
        copies.extend(
            _replay(
                body,
                directions,
                pricer,
                hw,
                trips.get(comp, 1),
                streams,
                stream_order,
                dict(link_rates or {}),
                starts,
                assignment,
                link_order,
            )
        )
    return ScheduleWindows(
        copies=tuple(copies),
        compiler=compiler,
        streams=streams,
        stream_order=stream_order if streams else "",
        pricing=pricing,
        host_streams=host_streams if streams else "",
    )


def _copy_bytes(ins: hlo.Instruction, direction: str) -> int:
    """Bytes an async copy moves: a reload its output (the slice read back), a store or an
    in-place device update the slice written (a dynamic-update-slice's update operand: its
    operand 0 has the output's shape), else its output."""
    if not ins.shape.startswith("("):
        return _bytes(ins.shape)
    elems = hlo.split_top(ins.shape[1:-1])  # ((operands...), output, context)
    out = _bytes(elems[1]) if len(elems) > 1 else 0
    if direction == "h2d":
        return out
    operands = hlo.split_top(elems[0][1:-1]) if elems[0].startswith("(") else [elems[0]]
    if len(operands) > 1 and len(elems) > 1:
        same = [a for a, _ in hlo.array_shapes(operands[0])] == [
            a for a, _ in hlo.array_shapes(elems[1])
        ] and _bytes(operands[0]) == out
        if same:  # an update in place (into a host buffer: a store)
            return _bytes(operands[1])
    return out


def post_order(body: list[hlo.Instruction]) -> list[str]:
    """Names of ``body`` in XLA's ``HloComputation::MakeInstructionPostOrder`` order.

    As XLA does it (hlo_computation.cc, ``ForEachInstructionPostOrderImpl``): a depth-first
    walk from every instruction no other instruction of the computation reads (the root among
    them), in list order; below an instruction its *control predecessors first*, the last
    listed first, then its operands in order. The order matters because XLA deals the async
    starts over the streams in it (:func:`stream_assignment`): with the control predecessors
    walked after the operands the deal does not match XLA's dump, with them first it does
    (measured: benchmarks/results/schedule-streams-2026-12-05.md). The list order is the text's, which
    for a scheduled module is the schedule's."""
    by = {i.name: i for i in body}
    read = {o for i in body for o in i.operands if o != i.name}
    seen: set[str] = set()
    out: list[str] = []
    for first in [i.name for i in body if i.name not in read] + [i.name for i in body]:
        stack = [(first, False)]
        while stack:
            name, expanded = stack.pop()
            if expanded:
                out.append(name)
                continue
            if name in seen or name not in by:
                continue
            seen.add(name)
            stack.append((name, True))
            ins = by[name]
            # XLA pushes the operands last-first, then the control predecessors in order, and
            # pops from the top: the last control predecessor is walked first.
            stack.extend((o, False) for o in reversed(ins.operands))
            stack.extend((p, False) for p in control_predecessors(ins))
    return out


def control_predecessors(ins: hlo.Instruction) -> list[str]:
    """The names in ``control-predecessors={...}``, in the order listed."""
    m = re.search(r"control-predecessors=\{([^}]*)\}", ins.attrs)
    return [p.strip().lstrip("%") for p in m.group(1).split(",") if p.strip()] if m else []


# Async starts of collectives run on XLA's communication streams, with a counter of their
# own: they take no compute stream and do not advance the compute streams' round-robin.
_COLLECTIVES = frozenset(
    {
        "all-gather",
        "all-reduce",
        "all-to-all",
        "collective-broadcast",
        "collective-permute",
        "ragged-all-to-all",
        "reduce-scatter",
    }
)
HOST_STREAMS = ("compute", "memcpy")


def copy_starts(module: hlo.Module) -> set[str]:
    """Names of the async starts XLA:GPU runs on a compute stream of its own: ``copy-start``
    and every ``*-start`` (``fusion-start``, ``async-start``, ...) that does not wrap a
    collective."""
    comps = module.computations()
    out = set()
    for ins in module.instructions:
        op = ins.opcode
        if not op.endswith("-start") or op.removesuffix("-start") in _COLLECTIVES:
            continue
        if op == "async-start":  # the generic form: what it wraps is its computation's root
            called = re.search(r"calls=%?([\w.\-]+)", ins.attrs)
            root = [i for i in comps.get(called.group(1), ()) if i.root] if called else []
            if root and root[0].opcode.removesuffix("-start") in _COLLECTIVES:
                continue
        out.add(ins.name)
    return out


def _called_in_order(ins: hlo.Instruction) -> list[str]:
    """Computations a ``while`` / ``call`` / ``conditional`` runs, in XLA's
    ``called_computations()`` order (a while: body, then condition)."""
    a = ins.attrs
    if ins.opcode == "while":
        keys = ("body", "condition")
    elif ins.opcode == "call":
        keys = ("to_apply",)
    else:
        branches = re.search(r"branch_computations=\{([^}]*)\}", a)
        if branches:
            return [b.strip().lstrip("%") for b in branches.group(1).split(",") if b.strip()]
        keys = ("true_computation", "false_computation")
    out = []
    for k in keys:
        m = re.search(rf"\b{k}=%?([\w.\-]+)", a)
        if m:
            out.append(m.group(1))
    return out


def host_streams_of(jaxlib_version: str) -> str:
    """Where the XLA of a jaxlib version runs the host copies: ``"memcpy"`` (one dedicated
    stream per direction) from 0.12 on, ``"compute"`` (dealt over the compute streams with
    every other async start) before. Read in the thunk sequences XLA dumps: jaxlib 0.12.0.1
    names ``memcpy_d2h_stream`` / ``memcpy_h2d_stream`` for them, 0.11.2
    ``computation_stream[k]`` (benchmarks/results/schedule-streams-2026-12-05.md)."""
    parts = [int(x) for x in re.findall(r"\d+", jaxlib_version)[:2]]
    return "memcpy" if parts and tuple(parts) >= (0, 12) else "compute"


def stream_assignment(
    module: hlo.Module,
    streams: int = 4,
    *,
    order: str = "post",
    host_streams: str = "compute",
) -> dict[str, int]:
    """Async start -> its stream, over the whole module, as XLA:GPU's
    ``ExecutionStreamAssignment`` deals them (execution_stream_assignment.cc).

    XLA visits the computations breadth-first from ENTRY (a ``while``, ``call`` or
    ``conditional`` queues the computations it runs when the walk reaches it), each in
    :func:`post_order` (``order="post"``; ``"schedule"``: the text's order), and gives each
    async start the next of ``streams`` compute streams, round-robin, 0 first. The counter is
    one for the module, *not* restarted per computation: which starts of a loop body share a
    stream depends on how many starts came before it. ``host_streams``: where the host
    copies go. ``"compute"`` (XLA of jaxlib 0.11 and before, the H200 runs): dealt like any
    start. ``"memcpy"`` (jaxlib 0.12): on one dedicated stream per direction, numbered
    ``streams`` (d2h) and ``streams + 1`` (h2d), without advancing the counter."""
    if order not in ("post", "schedule"):
        raise ValueError(f"order must be 'post' or 'schedule', got {order!r}")
    if host_streams not in HOST_STREAMS:
        raise ValueError(f"host_streams must be one of {HOST_STREAMS}, got {host_streams!r}")
    if not streams:
        return {}
    comps = module.computations()
    starts = copy_starts(module)
    directions = hlo.host_transfer_ops(module) if host_streams == "memcpy" else {}
    out: dict[str, int] = {}
    k = 0

    def walk(queue: collections.deque) -> None:
        nonlocal k
        walked = 0
        while queue and walked < 100 * len(comps):  # (recursive HLO is malformed: stop)
            body = comps.get(queue.popleft(), [])
            walked += 1
            by = {i.name: i for i in body}
            for name in post_order(body) if order == "post" else list(by):
                ins = by[name]
                if name in starts:
                    d = directions.get(name)
                    if d in DIRECTIONS:
                        out.setdefault(name, streams + DIRECTIONS.index(d))
                    else:
                        # (a computation run from two places is walked twice, as XLA does:
                        # the counter advances again, the first stream stays)
                        out.setdefault(name, k)
                        k = (k + 1) % streams
                if ins.opcode in ("while", "call", "conditional"):
                    queue.extend(_called_in_order(ins))

    walk(collections.deque([module.entry] if module.entry in comps else []))
    # Computations the walk from ENTRY does not reach (a handwritten module without ENTRY)
    # follow in text order.
    unreached = [
        c for c, body in comps.items() if any(i.name in starts and i.name not in out for i in body)
    ]
    walk(collections.deque(unreached))
    return out


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


# Which of the host copies waiting for their direction's link goes next (read_windows'
# ``link_order``). "ready": the one that became ready first (issued, at the head of its
# stream), copies ready at the same instant in issue order; "issue": in issue order, a copy
# holding the link from its issue even while its stream keeps it from starting; "smallest": as
# "ready", copies ready at the same instant smallest first (the outcome of most H200 races
# between two stores, not of all; measured: benchmarks/results/schedule-race-2026-12-06.md).
LINK_ORDERS = ("ready", "issue", "smallest")

# Random deals averaged for stream_order="mean" (seeded: the figure is reproducible).
MEAN_DEALS = 64


def _replay(
    body, directions, pricer, hw, trips, streams, order, rates, starts, assignment, link_order
) -> list[HostCopy]:
    """``body`` run ``trips`` times on a compute stream, copy streams and one link per
    direction (module docstring), each async start on its stream of ``assignment`` (the
    module's deal). ``order="mean"``: the exposure averaged over ``MEAN_DEALS`` random deals
    of the body's starts over the streams (each a round-robin over a random order)."""
    done_of: dict[str, str] = {}
    for ins in body:
        if ins.opcode in _ASYNC_DONE and ins.operands:
            done_of[ins.operands[0]] = ins.name
    host = [
        i.name for i in body if i.opcode.endswith("-start") and directions.get(i.name) in DIRECTIONS
    ]
    if order == "mean" and streams:
        names = {i.name for i in body}
        # (host copies on XLA's dedicated streams stay there: only the compute streams' deal
        # is unknown)
        fixed = {n: s for n, s in assignment.items() if s >= streams and n in names}
        dealt = [i.name for i in body if i.name in starts and i.name not in fixed]
        rng = random.Random(0)
        deals = []
        for _ in range(MEAN_DEALS):
            rng.shuffle(dealt)
            deals.append({**fixed, **{n: k % streams for k, n in enumerate(dealt)}})
    else:
        deals = [{i.name: assignment[i.name] for i in body if i.name in assignment}]
    price = {i.name: pricer.instruction(i) for i in body}
    size = {
        i.name: _copy_bytes(i, directions.get(i.name, "d2d"))
        for i in body
        if i.name in starts or i.name in host
    }
    sums = {n: [0.0, 0.0] for n in host}
    for stream in deals:
        info, got = _simulate(
            body, host, stream, streams, directions, price, size, hw, trips, rates, link_order
        )
        for n in host:
            sums[n][0] += got[n][0] / len(deals)
            sums[n][1] += got[n][1] / len(deals)
    out = []
    for name in host:
        c = info[name]
        out.append(
            HostCopy(
                start=name,
                done=done_of.get(name, ""),
                computation=body[0].computation if body else "",
                direction=c["d"],
                nbytes=c["n"],
                trips=trips,
                copy_s=c["copy_s"],
                window=tuple(c["window"]),
                window_s=c["window_s"],
                exposed_s=sums[name][0],
                stream=deals[0].get(name, -1) if streams and len(deals) == 1 else -1,
                queued_s=sums[name][1],
            )
        )
    return out


def _simulate(body, host, stream, streams, directions, price, size, hw, trips, rates, link_order):
    """One deal of the streams: per host copy ``(exposed, queued)`` seconds per trip, and
    its first trip's window (module docstring).

    Event-driven: a start puts its copy at the back of its stream's queue; a copy is *ready*
    when it is at the head of its queue and issued; a loop-slice copy starts when ready, a
    host copy when ready and its direction's link is free. When several host copies of one
    direction wait for the link, ``link_order`` picks which goes next (:data:`LINK_ORDERS`).
    Copies are started lazily, in time order, as far as a done needs (a start the compute
    has not reached yet cannot change a start before the compute's clock)."""
    hosts = set(host)
    clock = 0.0
    link_free = {d: 0.0 for d in DIRECTIONS}
    unstarted: dict[str, list[int]] = {d: [] for d in DIRECTIONS}  # host copies, issue order
    # (+2: XLA's dedicated d2h and h2d streams, host_streams="memcpy"; an assignment read
    # from a dump may number streams past that: room for whatever it names)
    n_streams = max([streams + 2, *(s + 1 for s in stream.values())])
    stream_free = [0.0] * n_streams
    stream_host = [""] * n_streams  # the host copy last queued on each stream
    queues: list[collections.deque] = [collections.deque() for _ in range(n_streams)]
    waits: list[tuple[float, float, str]] = []  # compute-stream waits: (from, to, blocker)
    spans: dict[str, list[tuple[float, float]]] = {n: [] for n in host}
    info: dict[str, dict] = {}
    started: dict[int, tuple[float, str]] = {}  # copy id -> (end, host copy it queued behind)
    seq = 0

    def start_next() -> float | None:
        """Start the copy that starts first; its start time (None: nothing queued)."""
        best = None  # (begin, rank, stream)
        for s, q in enumerate(queues):
            if not q:
                continue
            cid, name, issued, d, dur = q[0]
            ready = max(issued, stream_free[s])
            begin = max(ready, link_free[d]) if d in DIRECTIONS else ready
            if d not in DIRECTIONS:
                rank = (0, cid)
            elif link_order == "issue":  # (a copy holds the link from its issue on)
                if unstarted[d][0] != cid:
                    continue  # (an earlier copy of its direction holds the link)
                rank = (1, cid)
            elif link_order == "ready":
                rank = (1, ready, cid)
            else:  # "smallest"
                rank = (1, ready, size[name], cid)
            key = (begin, rank, s)
            if best is None or key < best:
                best = key
        if best is None:
            return None
        begin, _, s = best
        cid, name, issued, d, dur = queues[s].popleft()
        behind = ""
        if d in DIRECTIONS:
            link_free[d] = begin + dur
            unstarted[d].remove(cid)
            stream_host[s] = name
            spans[name].append((begin, begin + dur))
        else:
            behind = stream_host[s] if stream_free[s] > issued else ""
            if not behind:
                stream_host[s] = ""
        stream_free[s] = begin + dur
        started[cid] = (begin + dur, behind)
        return begin

    runs = max(1, min(trips, 64))  # trips simulated (the state carries from trip to trip)
    for trip in range(runs):
        running: dict[str, int] = {}  # start name -> copy id, until its done
        for ins in body:
            name = ins.name
            if name in hosts or name in stream:
                d = directions[name] if name in hosts else "d2d"
                if name in hosts:
                    n = size[name]
                    dur = (
                        (hw.link.latency_s + n / rates[d])
                        if d in rates and n
                        else (cm.transfer_seconds(n, hw, d) if n else 0.0)
                    )
                    if trip == 0:
                        info[name] = {"d": d, "n": n, "copy_s": dur, "window": [], "window_s": 0.0}
                else:
                    dur = size[name] / hw.loop_copy_rate()
                # (no streams: one queue per direction, the loop-slice copies free)
                s = stream.get(name, 0) if streams else DIRECTIONS.index(d)
                queues[s].append((seq, name, clock, d, dur))
                if d in DIRECTIONS:
                    unstarted[d].append(seq)
                running[name] = seq
                seq += 1
                continue
            if ins.opcode in _ASYNC_DONE and ins.operands and ins.operands[0] in running:
                cid = running.pop(ins.operands[0])
                while cid not in started:
                    if start_next() is None:  # (cannot happen: queues are in issue order)
                        raise RuntimeError(f"copy of {ins.operands[0]} never starts")
                end, behind = started.pop(cid)
                if ins.operands[0] in hosts:
                    behind = ""  # (a wait at its own done is not a queue's)
                if end > clock:
                    waits.append((clock, end, behind))
                    clock = end
                continue
            t = price[name]
            clock += t
            if trip == 0 and t > 0:
                for c in running:
                    if c in info:
                        info[c]["window"].append(name)
                        info[c]["window_s"] += t
    while start_next() is not None:  # (copies the last trip left without a done)
        pass
    got = {}
    for name in host:
        exposed = queued = 0.0
        for a, b in spans[name]:
            for w0, w1, who in waits:
                o = _overlap(a, b, w0, w1)
                exposed += o
                queued += o if who == name else 0.0
        got[name] = (exposed / runs, queued / runs)
    return info, got


def total_compute_s(text_or_module, hardware) -> float:
    """The priced compute of the whole module (every loop at its trip count): for checking
    the pricing against a measured step's kernel time."""
    module = hlo.parse(text_or_module) if isinstance(text_or_module, str) else text_or_module
    return _Pricer(module, cm.load_profile(hardware)).computation(module.entry)
