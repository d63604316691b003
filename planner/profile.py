"""See the overlap: measure exposed host-copy time from a real device trace (issue 8).

    step, args = examples.llama.make_train_step(
        dataclasses.replace(cfg, remat_policy=plan.policy), concrete=True)
    result = planner.profile(plan, step, *args, steps=5)
    print(result.summary())
    result.timeline_png("timeline.png")
    hw = cost_models.overlap_from_trace(result, plan.hardware)   # feed the measurement back

API choice: ``profile(plan, step_fn, *args)`` takes a step **already built with
``plan.policy``** (the README's flow: ``jax.checkpoint(layer, policy=plan.policy)`` in your
code), the same shape as ``planner.solve(step_fn, *args)``. It cannot see which policy your
code used, so it checks the compiled program instead: when the plan offloads and the backend
has host memory, the compiled HLO must hold host-memory (``S(5)``) transfers, else the
result says the step was probably not built with ``plan.policy``.

What it does: compiles ``jax.jit(step_fn).lower(*args).compile(compiler_options=...)`` with
``plan.xla_flags`` parsed into per-compile options (no process-global ``XLA_FLAGS``), runs
``warmup`` steps, then ``steps`` steps under ``jax.profiler.trace(logdir)``, each inside a
``jax.profiler.StepTraceAnnotation``, and reads the ``.xplane.pb`` back with
``jax.profiler.ProfileData`` (no GUI). Device events (lines ``Stream #N(...)`` of the
``/device:GPU:N`` planes, as XLA's CUPTI collector names them) are classified:

* ``d2h`` / ``h2d``: memcpys whose ``memcpy_details`` stat says device -> host memory
  (pinned / pageable) or back; memcpys named ``MemcpyD2H`` / ``MemcpyH2D``; and any event whose
  ``hlo_op`` is one of the compiled program's host transfers. Those are read from the HLO
  text: an instruction whose result is in host memory space ``S(5)`` is a device->host
  transfer (under ``lax.scan`` XLA's async ``dynamic-update-slice`` fusion into the stacked host
  buffer), one that reads an ``S(5)`` operand into device memory is host->device (the async
  ``dynamic-slice`` reload); instructions of the computations they call count too. Names
  alone are not used: the scan also slices its stacked weights with device ``dynamic-slice``
  fusions, which are compute.
* ``copy_other``: other memcpys (device->device, peer): neither compute nor a host copy.
* ``compute``: every other event on a stream line (kernels).

Per step (the device plane's ``XLA Modules`` event of the step's module when present, else
the host's ``StepTraceAnnotation`` window), with ``U(x)`` the union of intervals:
``compute_s = |U(compute)|``, ``d2h_s = |U(d2h)|``, ``d2h_hidden_s = |U(d2h) & U(compute)|``,
``d2h_exposed_s = d2h_s - d2h_hidden_s`` (same for h2d), and for both directions together
``copy_s = |U(d2h + h2d)|``, ``hidden_s``, ``exposed_s``. ``overlap_efficiency`` here is the
hidden fraction of the copies, ``hidden_s / copy_s``; the cost model's figure, which
``cost_models.overlap_from_trace`` writes, is ``hidden_s / compute_s``. Per trip of the layer loop: a copy
instruction in a while body runs once per trip, so its k-th execution in a step is trip k
(forward trips run layers 0..L-1, backward trips L-1..0); given when every copy event carries
an ``hlo_op`` stat, else ``per_trip`` is empty and ``per_trip_note`` says why.

On a backend without separate device memory (CPU) there are no device->host copies to see:
``profile`` returns a result with ``measured=False`` and a ``status`` that says so; its
figures are ``None``, never zeros. ``overlap_from_trace`` refuses such a result.
"""

from __future__ import annotations

import dataclasses
import datetime
import glob
import os
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from planner.emit import flags_to_compiler_options  # noqa: F401  (public here too)
from planner.shard import split_shape

Interval = tuple[float, float]

STEP_ANNOTATION = "planner_profile_step"
CPU_STATUS = ("no device->host copies in the trace: this backend (cpu) has no separate host "
              "memory / copy engines; nothing measured")
KINDS = ("compute", "d2h", "h2d", "copy_other")


# ----------------------------------------------------------------------------------------------
# Interval arithmetic (pure; times in any unit, intervals half-open [start, end)).

def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same points; empty ones are dropped."""
    out: list[list[float]] = []
    for s, e in sorted((float(s), float(e)) for s, e in intervals if e > s):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def total_length(intervals: Iterable[Interval]) -> float:
    """Length of the union (overlapping intervals count once)."""
    return sum(e - s for s, e in union(intervals))


def intersection(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """U(a) & U(b) as disjoint intervals."""
    ua, ub = union(a), union(b)
    out, i, j = [], 0, 0
    while i < len(ua) and j < len(ub):
        s, e = max(ua[i][0], ub[j][0]), min(ua[i][1], ub[j][1])
        if e > s:
            out.append((s, e))
        if ua[i][1] < ub[j][1]:
            i += 1
        else:
            j += 1
    return out


def intersection_length(a: Iterable[Interval], b: Iterable[Interval]) -> float:
    """|U(a) & U(b)|: e.g. the copy time that ran while some compute ran."""
    return sum(e - s for s, e in intersection(a, b))


def exposed_length(copies: Iterable[Interval], compute: Iterable[Interval]) -> float:
    """|U(copies) - U(compute)|: copy time during which no compute ran."""
    copies = list(copies)
    return total_length(copies) - intersection_length(copies, compute)


def difference(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """U(a) - U(b) as disjoint intervals (e.g. the exposed parts of the copies)."""
    out = []
    ub = union(b)
    for s, e in union(a):
        cur = s
        for bs, be in ub:
            if be <= cur or bs >= e:
                continue
            if bs > cur:
                out.append((cur, bs))
            cur = max(cur, be)
        if cur < e:
            out.append((cur, e))
    return out


def clip(intervals: Iterable[Interval], lo: float, hi: float) -> list[Interval]:
    """The parts of `intervals` inside [lo, hi)."""
    return [(max(s, lo), min(e, hi)) for s, e in intervals if min(e, hi) > max(s, lo)]


# ----------------------------------------------------------------------------------------------
# Flags (flags_to_compiler_options lives in emit.py) and the compiled program's host transfers.

_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_COMP = re.compile(r"^\s*(?:ENTRY\s+)?%?([\w.\-]+)\s*(?:\(.*\))?.*\{\s*$")
_STRUCTURAL = {"parameter", "get-tuple-element", "tuple", "while", "custom-call", "bitcast",
               "constant", "broadcast", "call", "conditional", "opt-barrier", "after-all",
               "iota", "copy-done", "fusion-done", "async-done"}


def _split_top(s: str) -> list[str]:
    """Split at commas outside brackets/parentheses/braces."""
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def host_transfer_ops(hlo_text: str) -> dict[str, str]:
    """Instruction name -> ``"d2h"`` or ``"h2d"`` for the host transfers of a compiled HLO.

    ``S(5)`` marks host memory space in HLO layouts. An instruction whose result (for an async
    ``*-start``, the tuple's second element, its output) is in ``S(5)`` writes host memory:
    d2h. One that reads an ``S(5)`` operand and produces device memory: h2d. Structural
    instructions (parameters, tuples, loops, buffer allocation, bitcasts) move nothing. The
    matching ``*-done`` and every instruction of a called computation (``calls=%c``) get the
    same direction, so whichever name the profiler attaches is found.
    """
    ops: dict[str, str] = {}
    calls: dict[str, str] = {}
    bodies: dict[str, list[str]] = {}
    shapes: dict[str, str] = {}
    current = None
    for line in hlo_text.splitlines():
        if line.rstrip().endswith("{") and "=" not in line.split("{")[0].split("(")[0]:
            m = _COMP.match(line)
            current = m.group(1) if m else None
            if current:
                bodies[current] = []
            continue
        m = _INSTR.match(line)
        if not m:
            continue
        name, rhs = m.group(1), m.group(2)
        if current:
            bodies[current].append(name)
        shape, rest = split_shape(rhs)
        shapes[name] = shape
        om = re.match(r"([\w\-]+)\((.*)", rest)
        if not om:
            continue
        opcode, tail = om.group(1), om.group(2)
        if opcode in _STRUCTURAL:
            continue
        operands = tail.split(")")[0]
        if opcode.endswith("-start") and shape.startswith("("):
            # async start: ((operand shapes...), output, context)
            elems = _split_top(shape[1:-1])
            out_shape = elems[1] if len(elems) > 1 else shape
            operands = elems[0] + " " + operands
        else:
            out_shape = shape
        host_in = "S(5)" in operands or any(
            "S(5)" in shapes.get(op, "") for op in re.findall(r"%([\w.\-]+)", operands))
        if "S(5)" in out_shape:
            direction = "d2h"
        elif host_in:
            direction = "h2d"
        else:
            continue
        ops[name] = direction
        if name.endswith("-start") or "-start." in name:
            ops[name.replace("-start", "-done")] = direction
        cm = re.search(r"calls=%?([\w.\-]+)", rest)
        if cm:
            calls[cm.group(1)] = direction
    for comp, direction in calls.items():
        ops.setdefault(comp, direction)
        for inner in bodies.get(comp, ()):
            if inner.startswith(("param", "Arg_")):
                continue
            ops.setdefault(inner, direction)
    return ops


# ----------------------------------------------------------------------------------------------
# Trace reading and classification.

@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """One device event, times in ns on the trace's clock."""

    name: str
    start_ns: float
    end_ns: float
    kind: str                 # compute | d2h | h2d | copy_other
    line: str = ""
    hlo_op: str = ""

    @property
    def interval(self) -> Interval:
        return (self.start_ns, self.end_ns)


_HOST_KINDS = ("pinned", "pageable", "managed_host", "host")


def classify(name: str, line: str, stats: Mapping[str, Any],
             host_ops: Mapping[str, str] | None = None) -> str:
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
    step_source: str                       # "XLA Modules" | "StepTraceAnnotation" | "device span"
    host_xla_events: int                   # XLA op events on host threads (the CPU backend)
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
        raise FileNotFoundError(f"no .xplane.pb under {logdir}/plugins/profile/*/: did "
                                "jax.profiler.trace write a profile there?")
    return max(paths, key=os.path.getmtime)


def read_trace(source, *, host_ops: Mapping[str, str] | None = None,
               module: str | None = None) -> TraceData:
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
                events.append(Event(name=e.name, start_ns=float(e.start_ns),
                                    end_ns=float(e.end_ns),
                                    kind=classify(e.name, ln.name, st, host_ops),
                                    line=f"{p.name} {ln.name}",
                                    hlo_op=str(st.get("hlo_op", "") or "")))
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
    return TraceData(path=path, planes=names, device_planes=tuple(p.name for p in dev_planes),
                     events=tuple(sorted(events, key=lambda e: e.start_ns)),
                     step_windows=tuple(windows), step_source=src, host_xla_events=host_xla,
                     device_kind=device_kind)


# ----------------------------------------------------------------------------------------------
# Per-step figures.

@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TripOverlap:
    """One trip of the layer loop: the k-th execution of each copy instruction in a step."""

    trip: int
    d2h_s: float
    d2h_exposed_s: float
    h2d_s: float
    h2d_exposed_s: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StepOverlap:
    """Figures of one step, seconds. `hidden` = overlapped with the union of compute."""

    index: int
    start_ns: float
    end_ns: float
    step_s: float
    compute_s: float
    d2h_s: float
    h2d_s: float
    d2h_hidden_s: float
    h2d_hidden_s: float
    d2h_exposed_s: float
    h2d_exposed_s: float
    copy_s: float             # |U(d2h + h2d)|
    hidden_s: float
    exposed_s: float
    copy_other_s: float
    n_d2h: int
    n_h2d: int
    per_trip: tuple[TripOverlap, ...] = ()
    per_trip_note: str = ""
    events: tuple[Event, ...] = dataclasses.field(default=(), repr=False)

    @property
    def overlap_efficiency(self) -> float | None:
        return None if self.copy_s <= 0 else min(1.0, max(0.0, self.hidden_s / self.copy_s))


def _trips(events: Sequence[Event], compute: list[Interval]) -> tuple[tuple[TripOverlap, ...], str]:
    copies = [e for e in events if e.kind in ("d2h", "h2d")]
    if not copies:
        return (), "no host copies in this step"
    if any(not e.hlo_op for e in copies):
        return (), ("per trip not identifiable: some copy events carry no hlo_op stat, so "
                    "executions of one copy instruction cannot be told apart")
    seen: dict[str, int] = {}
    by_trip: dict[int, dict[str, list[Interval]]] = {}
    for e in sorted(copies, key=lambda e: e.start_ns):
        k = seen.get(e.hlo_op, 0)
        seen[e.hlo_op] = k + 1
        by_trip.setdefault(k, {"d2h": [], "h2d": []})[e.kind].append(e.interval)
    if len(by_trip) == 1:
        return (), ("per trip not identifiable: each copy instruction ran once in the step "
                    "(no loop over layers, or the loop was unrolled)")
    rows = []
    for k in sorted(by_trip):
        d, h = by_trip[k]["d2h"], by_trip[k]["h2d"]
        rows.append(TripOverlap(trip=k, d2h_s=total_length(d) * 1e-9,
                                d2h_exposed_s=exposed_length(d, compute) * 1e-9,
                                h2d_s=total_length(h) * 1e-9,
                                h2d_exposed_s=exposed_length(h, compute) * 1e-9))
    return tuple(rows), ("trip k = the k-th execution of each copy instruction in the step: "
                         "d2h trips are forward layers 0..L-1, h2d trips backward layers "
                         "L-1..0 (the backward loop runs in reverse)")


def step_overlap(events: Sequence[Event], window: Interval, index: int = 0) -> StepOverlap:
    """Figures of one step from classified events (pure; events are clipped to `window`)."""
    lo, hi = window
    inside = [e for e in events if e.end_ns > lo and e.start_ns < hi]

    def ivs(kind):
        return clip([e.interval for e in inside if e.kind == kind], lo, hi)

    comp, d2h, h2d, other = ivs("compute"), ivs("d2h"), ivs("h2d"), ivs("copy_other")
    both = d2h + h2d
    d2h_hidden, h2d_hidden = intersection_length(d2h, comp), intersection_length(h2d, comp)
    hidden = intersection_length(both, comp)
    trips, note = _trips(inside, comp)
    ns = 1e-9
    return StepOverlap(
        index=index, start_ns=lo, end_ns=hi, step_s=(hi - lo) * ns,
        compute_s=total_length(comp) * ns,
        d2h_s=total_length(d2h) * ns, h2d_s=total_length(h2d) * ns,
        d2h_hidden_s=d2h_hidden * ns, h2d_hidden_s=h2d_hidden * ns,
        d2h_exposed_s=(total_length(d2h) - d2h_hidden) * ns,
        h2d_exposed_s=(total_length(h2d) - h2d_hidden) * ns,
        copy_s=total_length(both) * ns, hidden_s=hidden * ns,
        exposed_s=(total_length(both) - hidden) * ns, copy_other_s=total_length(other) * ns,
        n_d2h=sum(e.kind == "d2h" for e in inside), n_h2d=sum(e.kind == "h2d" for e in inside),
        per_trip=trips, per_trip_note=note, events=tuple(inside))


# ----------------------------------------------------------------------------------------------
# The result.

_FIELDS = ("step_s", "compute_s", "d2h_s", "h2d_s", "d2h_hidden_s", "h2d_hidden_s",
           "d2h_exposed_s", "h2d_exposed_s", "copy_s", "hidden_s", "exposed_s", "copy_other_s")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ProfileResult:
    """Measured overlap of host copies with compute. Figures are ``None`` unless ``measured``."""

    measured: bool
    status: str
    backend: str
    device: str
    date: str
    step_name: str
    xla_flags: str
    trace_path: str
    step_source: str = ""
    steps: tuple[StepOverlap, ...] = ()
    wall_step_s: tuple[float, ...] = ()          # host-timed steps under the profiler
    predicted_exposed_s: float | None = None     # the plan's model, whole step
    predicted_transfer_s: float | None = None

    def _median(self, field: str) -> float | None:
        if not self.steps:  # (steps without host copies still have their compute time)
            return None
        return statistics.median(getattr(s, field) for s in self.steps)

    def __getattr__(self, name):  # medians over steps: result.exposed_s, result.copy_s, ...
        if name in _FIELDS:
            return self._median(name)
        raise AttributeError(name)

    @property
    def overlap_efficiency(self) -> float | None:
        """Hidden / copy time summed over the profiled steps, in [0, 1]; None if not measured."""
        if not self.measured:
            return None
        copy = sum(s.copy_s for s in self.steps)
        if copy <= 0:
            return None
        return min(1.0, max(0.0, sum(s.hidden_s for s in self.steps) / copy))

    def figures(self) -> dict[str, Any]:
        """Medians over steps and the efficiency (all None when nothing was measured)."""
        out = {f: self._median(f) for f in _FIELDS}
        out["overlap_efficiency"] = self.overlap_efficiency
        out["steps"] = len(self.steps)
        return out

    def streams(self) -> dict[str, tuple[str, ...]]:
        """The device stream lines that carried host copies and compute, over all steps."""
        ev = [e for s in self.steps for e in s.events]
        return {"copies": tuple(sorted({e.line for e in ev if e.kind in ("d2h", "h2d")})),
                "compute": tuple(sorted({e.line for e in ev if e.kind == "compute"}))}

    def stream_diagnosis(self) -> str:
        """Why copies could not overlap, when the trace shows it: every host copy ran on a
        stream that also ran compute kernels, which execute one after another."""
        st = self.streams()
        if not self.measured or not st["copies"] or not set(st["copies"]) <= set(st["compute"]):
            return ""
        if not all(line.startswith("Stream #") for line in st["copies"]):
            return ""  # TPU-style planes: one "XLA Ops" line holds everything; no CUDA streams
        hidden = sum(s.hidden_s for s in self.steps)
        return (f"every host copy ran on a stream that also runs compute ({', '.join(st['copies'])})"
                + (f", yet {hidden * 1e3:.3g} ms overlapped: another compute stream ran beside it"
                   if hidden > 0 else
                   ": work on one CUDA stream runs in order, so no schedule can hide these "
                   "copies. XLA puts its host dynamic-(update-)slice copies on an async stream "
                   "(docs/xla-flags-research.md, finding 4) unless something serializes them; "
                   "CUDA-graph command buffers capture them by default (DYNAMIC_SLICE_FUSION), "
                   "so try XLA_FLAGS=--xla_gpu_enable_command_buffer= (graphs off) first"))

    def to_json(self) -> dict[str, Any]:
        return {
            "measured": self.measured, "status": self.status, "backend": self.backend,
            "device": self.device, "date": self.date, "step_name": self.step_name,
            "xla_flags": self.xla_flags, "trace_path": self.trace_path,
            "step_source": self.step_source, "wall_step_s": list(self.wall_step_s),
            "predicted_exposed_s": self.predicted_exposed_s,
            "predicted_transfer_s": self.predicted_transfer_s,
            "median": self.figures(),
            "streams": {k: list(v) for k, v in self.streams().items()},
            "stream_diagnosis": self.stream_diagnosis(),
            "steps": [{**{f: getattr(s, f) for f in _FIELDS}, "index": s.index,
                       "n_d2h": s.n_d2h, "n_h2d": s.n_h2d,
                       "overlap_efficiency": s.overlap_efficiency,
                       "per_trip": [dataclasses.asdict(t) for t in s.per_trip],
                       "per_trip_note": s.per_trip_note} for s in self.steps],
        }

    def summary(self) -> str:
        head = f"profile of {self.step_name} on {self.device} ({self.backend}), {self.date}"
        if not self.measured:
            busy = (f"\ncompute busy {self._median('compute_s') * 1e3:.4g} ms of a "
                    f"{self._median('step_s') * 1e3:.4g} ms step (median of {len(self.steps)})"
                    if self.steps else "")
            return f"{head}\nstatus: {self.status}{busy}\ntrace: {self.trace_path}"
        f = self.figures()

        def ms(x):
            return "n/a" if x is None else f"{x * 1e3:.4g} ms"

        lines = [head, f"status: {self.status}",
                 f"steps: {len(self.steps)} (windows from {self.step_source}); medians per step:",
                 f"  step {ms(f['step_s'])}, compute busy {ms(f['compute_s'])}",
                 f"  d2h {ms(f['d2h_s'])}: hidden {ms(f['d2h_hidden_s'])}, "
                 f"exposed {ms(f['d2h_exposed_s'])}",
                 f"  h2d {ms(f['h2d_s'])}: hidden {ms(f['h2d_hidden_s'])}, "
                 f"exposed {ms(f['h2d_exposed_s'])}",
                 f"  all host copies {ms(f['copy_s'])}: exposed {ms(f['exposed_s'])}; "
                 f"overlap efficiency (hidden/copy) {f['overlap_efficiency']:.3f}"
                 if f["overlap_efficiency"] is not None else
                 f"  all host copies {ms(f['copy_s'])}"]
        if self.predicted_exposed_s is not None:
            lines.append(f"  the plan's model predicted exposed {ms(self.predicted_exposed_s)} "
                         f"of {ms(self.predicted_transfer_s)} copy time")
        s0 = self.steps[0]
        if s0.per_trip:
            lines.append("  per trip (step 0): " + "; ".join(
                f"#{t.trip} d2h {t.d2h_s * 1e3:.2f}/{t.d2h_exposed_s * 1e3:.2f} exp, "
                f"h2d {t.h2d_s * 1e3:.2f}/{t.h2d_exposed_s * 1e3:.2f} exp" for t in s0.per_trip))
        lines.append(f"  {s0.per_trip_note}")
        diagnosis = self.stream_diagnosis()
        if diagnosis:
            lines.append(f"  streams: {diagnosis}")
        lines.append(f"trace: {self.trace_path}")
        return "\n".join(lines)

    def timeline_png(self, path, step: int = 0) -> str:
        """A timeline strip of one step: each device stream a row, compute vs copies."""
        if not self.measured or not self.steps:
            raise ValueError(f"nothing to draw: {self.status}")
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch

        s = self.steps[step]
        colors = {"compute": "#4c72b0", "d2h": "#dd8452", "h2d": "#55a868",
                  "copy_other": "#8c8c8c", "exposed": "#c44e52"}
        rows = sorted({e.line for e in s.events},
                      key=lambda ln: (not any(e.kind == "compute" for e in s.events
                                              if e.line == ln), ln))
        fig, ax = plt.subplots(figsize=(14, 1.2 + 0.5 * len(rows)))
        for i, row in enumerate(rows):
            for kind, color in colors.items():
                if kind == "exposed":
                    continue
                bars = [((e.start_ns - s.start_ns) * 1e-6, (e.end_ns - e.start_ns) * 1e-6)
                        for e in s.events if e.line == row and e.kind == kind]
                if bars:
                    ax.broken_barh(bars, (i - 0.4, 0.8), facecolors=color, linewidth=0)
        rel = [((a - s.start_ns) * 1e-6, (b - a) * 1e-6) for a, b in difference(
            [e.interval for e in s.events if e.kind in ("d2h", "h2d")],
            [e.interval for e in s.events if e.kind == "compute"])]
        if rel:
            ax.broken_barh(rel, (len(rows) - 0.4, 0.8), facecolors="#c44e52", linewidth=0)
        labels = [r.split(" ", 1)[-1][:40] for r in rows] + ["exposed host copies"]
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=8)
        ax.set_ylim(-0.6, len(labels) - 0.4)
        ax.set_xlim(0, s.step_s * 1e3)
        ax.set_xlabel("ms from step start")
        eff = s.overlap_efficiency
        ax.set_title(f"{self.step_name}, step {s.index} on {self.device}: step "
                     f"{s.step_s * 1e3:.4g} ms, compute {s.compute_s * 1e3:.4g} ms, host copies "
                     f"{s.copy_s * 1e3:.4g} ms, exposed {s.exposed_s * 1e3:.4g} ms"
                     + (f", hidden/copy {eff:.2f}" if eff is not None else ""), fontsize=9)
        ax.legend(handles=[Patch(color=c, label=k) for k, c in colors.items()],
                  loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return os.fspath(path)


# ----------------------------------------------------------------------------------------------
# Putting it together.

def analyze_trace(source, *, host_ops: Mapping[str, str] | None = None,
                  module: str | None = None, backend: str = "gpu", device: str = "",
                  step_name: str = "step", xla_flags: str = "", date: str = "",
                  expect_offload: bool | None = None, wall_step_s: Sequence[float] = (),
                  predicted_exposed_s: float | None = None,
                  predicted_transfer_s: float | None = None) -> ProfileResult:
    """A `ProfileResult` from a trace already on disk (see `read_trace` for `source`)."""
    td = read_trace(source, host_ops=host_ops, module=module)
    common = dict(backend=backend, device=device or td.device_kind or backend,
                  date=date or datetime.date.today().isoformat(), step_name=step_name,
                  xla_flags=xla_flags, trace_path=td.path, step_source=td.step_source,
                  wall_step_s=tuple(wall_step_s), predicted_exposed_s=predicted_exposed_s,
                  predicted_transfer_s=predicted_transfer_s)
    if backend == "cpu":
        return ProfileResult(measured=False, status=CPU_STATUS, **common)
    if not td.device_planes:
        return ProfileResult(measured=False, status=(
            f"no device plane in the trace (planes: {', '.join(td.planes)}): the device "
            "tracer (CUPTI on GPU) recorded nothing; nothing measured"), **common)
    if not td.events:
        return ProfileResult(measured=False, status=(
            "the device plane has no stream events; nothing measured"), **common)
    steps = tuple(step_overlap(td.events, w, i) for i, w in enumerate(td.step_windows))
    n_copies = sum(s.n_d2h + s.n_h2d for s in steps)
    if n_copies == 0:
        why = (" although the plan offloads: was the step built with plan.policy?"
               if expect_offload else "")
        # No overlap to measure, but the steps' compute-busy time is still reported (a
        # program without offloads, traced beside one with them: benchmarks/profile_overlap.py
        # --trace-saved).
        return ProfileResult(measured=False, status=(
            f"no device->host or host->device copies in the trace{why}; no overlap measured "
            f"({sum(len(s.events) for s in steps)} compute events seen)"), steps=steps, **common)
    status = (f"measured: {len(steps)} steps, {n_copies} host copies "
              f"({sum(s.n_d2h for s in steps)} d2h, {sum(s.n_h2d for s in steps)} h2d)")
    return ProfileResult(measured=True, status=status, steps=steps, **common)


def _device_description(dev) -> str:
    kind = getattr(dev, "device_kind", "") or ""
    return f"{kind} ({dev.platform})" if kind and kind != dev.platform else str(dev.platform)


def profile(plan, step_fn: Callable, *args, steps: int = 5, warmup: int = 1,
            logdir: str | None = None, donate_argnums: tuple[int, ...] = ()) -> ProfileResult:
    """Run ``step_fn(*args)`` (built with ``plan.policy``) under the profiler; read the overlap.

    Args:
      plan: a ``planner.Plan`` (or ``SavedPlan``): its ``xla_flags`` are applied per compile;
        a Plan's prediction is reported next to the measurement.
      step_fn: the train step, already using ``plan.policy`` in its ``jax.checkpoint``s.
      args: concrete arguments (arrays, not ShapeDtypeStructs).
      steps / warmup: traced steps, and untraced calls before them (compile and warm-up).
      logdir: where ``jax.profiler.trace`` writes; a new temporary directory if None.
      donate_argnums: donated arguments; each step then feeds ``out[i]`` back as argument ``i``
        (the ``step(state, batch) -> (state, metrics)`` convention; use ``(0,)`` for it).
    Returns a ``ProfileResult``; on CPU ``measured=False`` and ``status`` says why.
    """
    import jax

    if steps < 1 or warmup < 0:
        raise ValueError(f"steps must be >= 1 and warmup >= 0, got steps={steps}, "
                         f"warmup={warmup}.")
    flags = getattr(plan, "xla_flags", "") or ""
    opts = flags_to_compiler_options(flags)
    backend = jax.default_backend()
    lowered = jax.jit(step_fn, donate_argnums=donate_argnums).lower(*args)
    try:
        compiled = lowered.compile(compiler_options=opts) if opts else lowered.compile()
    except Exception as e:
        if not opts or "compile option" not in str(e):
            raise
        from planner.errors import InvalidArgumentError
        raise InvalidArgumentError(
            f"XLA rejected a flag of plan.xla_flags ({flags!r}) on the {backend} backend: "
            f"{e}.\nWhy: each flag is passed as a per-compile option, and this jaxlib does "
            "not know it.\nFix: drop that flag from the plan's flags (or profile on the "
            "platform the plan was made for).") from e
    hlo = compiled.as_text() or ""
    host_ops = host_transfer_ops(hlo)
    module = None
    mm = re.search(r"^HloModule\s+([\w.\-]+)", hlo, re.MULTILINE)
    if mm:
        module = mm.group(1)
    assignment = getattr(plan, "assignment", None)
    offloads = None
    if assignment is not None:
        offloads = any(d == "offload" for _, d in assignment.decisions)
    pred = getattr(plan, "prediction", None)
    args = list(args)

    def call():
        out = compiled(*args)
        jax.block_until_ready(out)
        for i in donate_argnums:
            args[i] = out[i]
        return out

    for _ in range(warmup):
        call()
    logdir = logdir or tempfile.mkdtemp(prefix="planner-profile-")
    t_start = time.time()
    walls = []
    with jax.profiler.trace(logdir):
        for i in range(steps):
            with jax.profiler.StepTraceAnnotation(STEP_ANNOTATION, step_num=i):
                t = time.perf_counter()
                call()
                walls.append(time.perf_counter() - t)
    path = find_xplane(logdir, newer_than=t_start)
    result = analyze_trace(
        path, host_ops=host_ops, module=module, backend=backend,
        device=_device_description(jax.devices()[0]),
        step_name=getattr(step_fn, "__name__", type(step_fn).__name__), xla_flags=flags,
        expect_offload=offloads, wall_step_s=walls,
        predicted_exposed_s=getattr(pred, "exposed_transfer_s", None),
        predicted_transfer_s=getattr(pred, "transfer_s", None))
    if result.measured and offloads and not host_ops:
        result = dataclasses.replace(result, status=result.status + (
            "; warning: the compiled HLO has no host-memory (S(5)) transfers although the plan "
            "offloads: was the step built with plan.policy?"))
    return result


# ----------------------------------------------------------------------------------------------
# Command line: ``python -m planner profile MODULE:FACTORY --hbm-gb N`` (wired in __main__.py).

def llama_quickstart(policy=None):
    """Profile factory for the bundled example: ``(step built with policy, concrete args)``."""
    from examples import llama

    return llama.make_train_step(dataclasses.replace(llama.QUICKSTART, remat_policy=policy),
                                 concrete=True)


def add_cli_arguments(p) -> None:
    """Arguments of the ``profile`` subcommand."""
    p.add_argument("factory", help="MODULE:FACTORY; FACTORY(policy) returns (step_fn, args) "
                   "with the step built with that policy and concrete args, e.g. "
                   "planner.profile:llama_quickstart")
    p.add_argument("--hbm-gb", type=float, help="plan at this budget (or give --plan)")
    p.add_argument("--plan", help="a plan file written by plan.save() instead of planning")
    p.add_argument("--hardware", default="h200", help="profile name or JSON file")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--logdir", help="trace directory (default: a new temporary one)")
    p.add_argument("--png", help="write the timeline of step 0 here")
    p.add_argument("--json", action="store_true", help="the result as JSON on stdout")
    p.add_argument("--out", help="also write the result as JSON to this file")
    p.add_argument("--measured-profile", help="write the hardware profile with the measured "
                   "overlap_efficiency here (cost_models.overlap_from_trace)")


def run_cli(a) -> int:
    """Run the ``profile`` subcommand: 0 measured, 1 nothing measured (e.g. CPU).

    Planner errors propagate (``python -m planner`` prints them and exits 2)."""
    import json
    import sys

    import planner
    from planner.errors import InvalidArgumentError

    if (a.hbm_gb is None) == (a.plan is None):
        raise InvalidArgumentError("give exactly one of --hbm-gb N (plan now) or --plan FILE "
                                   "(a saved plan).\nFix: e.g. --hbm-gb 0.42.")
    from planner.__main__ import import_factory
    factory = import_factory(a.factory, "FACTORY(policy) -> (step_fn, args), e.g. "
                             "planner.profile:llama_quickstart")
    if a.plan:
        plan = planner.load_plan(a.plan)
    else:
        step0, args0 = factory(None)
        print(f"planning {a.factory} for {a.hardware} under {a.hbm_gb} GB ...", file=sys.stderr)
        plan = planner.solve(step0, *args0, hbm_gb=a.hbm_gb, hardware=a.hardware)
    step, args = factory(plan.policy)
    print(f"profiling {a.steps} steps ...", file=sys.stderr)
    result = profile(plan, step, *args, steps=a.steps, warmup=a.warmup, logdir=a.logdir)
    data = result.to_json()
    print(json.dumps(data, indent=2) if a.json else result.summary())
    if a.out:
        with open(a.out, "w") as f:
            json.dump(data, f, indent=2)
    if result.measured and a.png:
        result.timeline_png(a.png)
    if result.measured and a.measured_profile:
        from cost_models._trace_overlap import overlap_from_trace

        hw = getattr(plan, "hardware", None)
        hw = overlap_from_trace(result, hw if hw is not None else a.hardware)
        with open(a.measured_profile, "w") as f:
            json.dump(hw.to_json(), f, indent=2)
    return 0 if result.measured else 1
