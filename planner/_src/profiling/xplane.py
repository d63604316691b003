"""Read a device trace (``.xplane.pb`` / ``.pbtxt`` / ``jax.profiler.ProfileData``) into
classified device events: compute, device->host, host->device and other copies.

The rules (in order) are in :func:`classify`; the module docstring of
``planner._src.profiling`` says what each figure means.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
from collections.abc import Mapping
from typing import Any

from planner._src.profiling.intervals import Interval

STEP_ANNOTATION = "planner_profile_step"
KINDS = ("compute", "d2h", "h2d", "copy_other")


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """One device event, times in ns on the trace's clock."""

    name: str
    start_ns: float
    end_ns: float
    kind: str  # compute | d2h | h2d | copy_other
    line: str = ""
    hlo_op: str = ""

    @property
    def interval(self) -> Interval:
        return (self.start_ns, self.end_ns)


_HOST_KINDS = ("pinned", "pageable", "managed_host", "host")


def classify(
    name: str, line: str, stats: Mapping[str, Any], host_ops: Mapping[str, str] | None = None
) -> str:
    """The kind of one device event (see the module docstring for the rules, in order)."""
    details = str(stats.get("memcpy_details", "") or "")
    is_memcpy = bool(details) or name.lower().startswith("memcpy")
    if details:
        src = re.search(r"kind_src:(\w+)", details)
        dst = re.search(r"kind_dst:(\w+)", details)
        src_k, dst_k = (src.group(1) if src else ""), (dst.group(1) if dst else "")
        if src_k == "device" and dst_k in _HOST_KINDS:
            return "d2h"
        if src_k in _HOST_KINDS and dst_k == "device":
            return "h2d"
    compact = name.replace(" ", "").lower()
    if compact.startswith(("memcpyd2h", "memcpydtoh")):
        return "d2h"
    if compact.startswith(("memcpyh2d", "memcpyhtod")):
        return "h2d"
    if host_ops:
        for op in re.split(r"[,;\s]+", str(stats.get("hlo_op", "") or "")):
            if op in host_ops:
                return host_ops[op]
    return "copy_other" if is_memcpy else "compute"


@dataclasses.dataclass(frozen=True, slots=True)
class TraceData:
    """What `read_trace` found: device events, step windows and where they came from."""

    path: str
    planes: tuple[str, ...]
    device_planes: tuple[str, ...]
    events: tuple[Event, ...]
    step_windows: tuple[Interval, ...]
    step_source: str  # "XLA Modules" | "StepTraceAnnotation" | "device span"
    host_xla_events: int  # XLA op events on host threads (the CPU backend)
    device_kind: str = ""


def _stats(obj) -> dict[str, Any]:
    try:
        return dict(obj.stats)
    except Exception:  # noqa: BLE001  (stats with unreadable values)
        return {}


def find_xplane(logdir: str, newer_than: float | None = None) -> str:
    """The newest ``*.xplane.pb`` under ``logdir/plugins/profile/*/``."""
    paths = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
    if newer_than is not None:
        paths = [p for p in paths if os.path.getmtime(p) >= newer_than - 1]
    if not paths:
        raise FileNotFoundError(
            f"no .xplane.pb under {logdir}/plugins/profile/*/: did "
            "jax.profiler.trace write a profile there?"
        )
    return max(paths, key=os.path.getmtime)


def read_trace(
    source, *, host_ops: Mapping[str, str] | None = None, module: str | None = None
) -> TraceData:
    """Read a trace: an ``.xplane.pb`` path, a text-proto ``.pbtxt`` path, a log directory, or
    a ``jax.profiler.ProfileData``. ``module``: the HLO module name of the step (e.g.
    ``jit_train_step``) to pick its ``XLA Modules`` events as step windows."""
    from jax.profiler import ProfileData

    path = "<ProfileData>"
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if os.path.isdir(path):
            path = find_xplane(path)
        if path.endswith(".pbtxt"):
            with open(path, encoding="utf-8") as f:
                data = ProfileData.from_text_proto(f.read())
        else:
            data = ProfileData.from_file(path)
    else:
        data = source
    planes = list(data.planes)
    names = tuple(p.name for p in planes)
    dev_planes = [p for p in planes if re.match(r"/device:(GPU|TPU|ROCM)", p.name or "")]
    events: list[Event] = []
    modules: list[Interval] = []
    device_kind = ""
    for p in dev_planes:
        pst = _stats(p)
        device_kind = device_kind or str(pst.get("device_vendor", "") or "")
        lines = list(p.lines)
        streams = [ln for ln in lines if (ln.name or "").startswith("Stream #")]
        if not streams:  # TPU-style planes: the ops line is the device timeline
            streams = [ln for ln in lines if ln.name == "XLA Ops"]
        for ln in streams:
            if "overhead" in (ln.name or "").lower():
                continue
            for e in ln.events:
                st = _stats(e)
                events.append(
                    Event(
                        name=e.name,
                        start_ns=float(e.start_ns),
                        end_ns=float(e.end_ns),
                        kind=classify(e.name, ln.name, st, host_ops),
                        line=f"{p.name} {ln.name}",
                        hlo_op=str(st.get("hlo_op", "") or ""),
                    )
                )
        for ln in lines:
            if ln.name == "XLA Modules":
                for e in ln.events:
                    if module is None or e.name.split("(")[0] == module:
                        modules.append((float(e.start_ns), float(e.end_ns)))
    host_windows: list[Interval] = []
    host_xla = 0
    for p in planes:
        if not (p.name or "").startswith("/host:"):
            continue
        for ln in p.lines:
            for e in ln.events:
                if e.name == STEP_ANNOTATION or e.name.startswith(STEP_ANNOTATION + " "):
                    host_windows.append((float(e.start_ns), float(e.end_ns)))
                elif "hlo_op" in _stats(e):
                    host_xla += 1
    if modules:
        windows, src = sorted(modules), "XLA Modules"
    elif host_windows:
        windows, src = sorted(host_windows), "StepTraceAnnotation"
    elif events:
        windows = [(min(e.start_ns for e in events), max(e.end_ns for e in events))]
        src = "device span"
    else:
        windows, src = [], "none"
    return TraceData(
        path=path,
        planes=names,
        device_planes=tuple(p.name for p in dev_planes),
        events=tuple(sorted(events, key=lambda e: e.start_ns)),
        step_windows=tuple(windows),
        step_source=src,
        host_xla_events=host_xla,
        device_kind=device_kind,
    )
