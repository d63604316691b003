"""Measurement on a device: run a plan's step under the profiler and read how much of the
host-copy time hid behind compute (``planner.profile``).

* ``intervals``: interval arithmetic (unions, intersections of event intervals);
* ``xplane``: reading a device trace into classified events;
* ``overlap``: per-step and per-trip overlap figures and :class:`ProfileResult`;
* ``runner``: :func:`profile`, which compiles, runs and traces the step;
* ``hiding``: the copy-heavy sweep's calibration of the per-direction hiding models
  (:func:`calibrate_hiding`, :func:`sweep_windows`, :func:`measured_per_trip`).
"""

from planner._src.profiling.hiding import (
    calibrate_hiding,
    measured_per_trip,
    names_policy,
    sweep_windows,
)
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
    WAIT_TOLERANCE_NS,
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
from planner._src.xla.hlo import host_transfer_ops

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
    "WAIT_TOLERANCE_NS",
    "analyze_trace",
    "calibrate_hiding",
    "measured_per_trip",
    "names_policy",
    "sweep_windows",
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
