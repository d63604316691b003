"""Which copy stream XLA:GPU deals each async start of a compiled module to: XLA's
``ExecutionStreamAssignment`` reproduced (breadth-first from ENTRY, each computation in
``MakeInstructionPostOrder`` order, one round-robin counter for the module), and where a
jaxlib's XLA runs the host copies."""

from __future__ import annotations

import collections
import re

from cost_models._transfer import DIRECTIONS
from planner._src.xla import hlo


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
