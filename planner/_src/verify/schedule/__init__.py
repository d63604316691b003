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
sequence, read by planner/_src/verify/schedule/dump.py) in every loop body of the H200 programs read, and
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

from planner._src.verify.schedule.deal import (
    HOST_STREAMS,
    control_predecessors,
    copy_starts,
    host_streams_of,
    post_order,
    stream_assignment,
)
from planner._src.verify.schedule.pricing import total_compute_s
from planner._src.verify.schedule.replay import LINK_ORDERS, MEAN_DEALS, HostCopy
from planner._src.verify.schedule.windows import ScheduleWindows, read_windows

__all__ = [
    "HOST_STREAMS",
    "LINK_ORDERS",
    "MEAN_DEALS",
    "HostCopy",
    "ScheduleWindows",
    "control_predecessors",
    "copy_starts",
    "host_streams_of",
    "post_order",
    "read_windows",
    "stream_assignment",
    "total_compute_s",
]
