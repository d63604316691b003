"""The event-driven replay of one scheduled computation: the compute stream, the copy
streams and one host link per direction, trip after trip, and each host copy's exposed time
(the compute stream's waits while it is in flight)."""

from __future__ import annotations

import collections
import dataclasses
import random

import cost_models as cm
from cost_models._transfer import DIRECTIONS
from planner._src.verify.schedule.pricing import ASYNC_DONE, shape_bytes
from planner._src.xla import hlo


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


def replay(
    body, directions, pricer, hw, trips, streams, order, rates, starts, assignment, link_order
) -> list[HostCopy]:
    """``body`` run ``trips`` times on a compute stream, copy streams and one link per
    direction (package docstring), each async start on its stream of ``assignment`` (the
    module's deal). ``order="mean"``: the exposure averaged over ``MEAN_DEALS`` random deals
    of the body's starts over the streams (each a round-robin over a random order)."""
    done_of: dict[str, str] = {}
    for ins in body:
        if ins.opcode in ASYNC_DONE and ins.operands:
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
    its first trip's window (package docstring).

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
            if ins.opcode in ASYNC_DONE and ins.operands and ins.operands[0] in running:
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


def _copy_bytes(ins: hlo.Instruction, direction: str) -> int:
    """Bytes an async copy moves: a reload its output (the slice read back), a store or an
    in-place device update the slice written (a dynamic-update-slice's update operand: its
    operand 0 has the output's shape), else its output."""
    if not ins.shape.startswith("("):
        return shape_bytes(ins.shape)
    elems = hlo.split_top(ins.shape[1:-1])  # ((operands...), output, context)
    out = shape_bytes(elems[1]) if len(elems) > 1 else 0
    if direction == "h2d":
        return out
    operands = hlo.split_top(elems[0][1:-1]) if elems[0].startswith("(") else [elems[0]]
    if len(operands) > 1 and len(elems) > 1:
        same = [a for a, _ in hlo.array_shapes(operands[0])] == [
            a for a, _ in hlo.array_shapes(elems[1])
        ] and shape_bytes(operands[0]) == out
        if same:  # an update in place (into a host buffer: a store)
            return shape_bytes(operands[1])
    return out
