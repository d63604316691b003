"""Measurement on a device: run a plan's step under the profiler and read how much of the
host-copy time hid behind compute (``planner.profile``).

* ``intervals``: interval arithmetic (unions, intersections of event intervals);
* ``xplane``: reading a device trace into classified events;
* ``overlap``: per-step and per-trip overlap figures and :class:`ProfileResult`;
* ``runner``: :func:`profile`, which compiles, runs and traces the step.
"""

from planner._src.hlo import host_transfer_ops
from planner._src.profiling.intervals import (
    Interval,
    clip,
    difference,
    exposed_length,
    intersection,
    intersection_length,
    total_length,
    union,
)
from planner._src.profiling.overlap import (
    CPU_STATUS,
    ProfileResult,
    StepOverlap,
    TripOverlap,
    analyze_trace,
    step_overlap,
)
from planner._src.profiling.runner import profile
from planner._src.profiling.xplane import (
    KINDS,
    STEP_ANNOTATION,
    Event,
    TraceData,
    classify,
    find_xplane,
    read_trace,
)

__all__ = [
    "CPU_STATUS",
    "KINDS",
    "STEP_ANNOTATION",
    "Event",
    "Interval",
    "ProfileResult",
    "StepOverlap",
    "TraceData",
    "TripOverlap",
    "analyze_trace",
    "classify",
    "clip",
    "difference",
    "exposed_length",
    "find_xplane",
    "host_transfer_ops",
    "intersection",
    "intersection_length",
    "profile",
    "read_trace",
    "step_overlap",
    "total_length",
    "union",
]
