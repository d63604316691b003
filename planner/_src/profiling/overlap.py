"""Per-step and per-trip overlap of host copies with compute, and the result type."""

from __future__ import annotations

import dataclasses
import datetime
import os
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from planner._src.profiling.intervals import (
    Interval,
    clip,
    difference,
    exposed_length,
    intersection_length,
    total_length,
    union,
)
from planner._src.profiling.xplane import Event, read_trace

CPU_STATUS = (
    "no device->host copies in the trace: this backend (cpu) has no separate host "
    "memory / copy engines; nothing measured"
)


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
    copy_s: float  # |U(d2h + h2d)|
    hidden_s: float
    exposed_s: float
    copy_other_s: float
    n_d2h: int
    n_h2d: int
    # Against all the work of the compute streams (kernels and the device-to-device copies
    # stream-ordered with them: XLA's loop-slice copies), not kernels alone: a host copy that
    # runs beside a device-to-device copy on a compute stream is hidden behind work the step
    # does anyway, yet `*_exposed_s` counts it exposed. `busy_s` = |U(that work)|; per
    # direction `*_stall_s` = |U(copies) - U(busy)|.
    busy_s: float = 0.0
    d2h_stall_s: float = 0.0
    h2d_stall_s: float = 0.0
    # The compute streams' idle gaps (within the step, between busy intervals) that end
    # within WAIT_TOLERANCE_NS of the end of a host copy of that direction: the compute
    # resumed when that copy finished, so it waited for it; the whole gap counts. Gaps no
    # copy ends (launch gaps, host syncs) count for neither, whatever copy runs in them.
    d2h_waited_s: float = 0.0
    h2d_waited_s: float = 0.0
    idle_s: float = 0.0  # step - busy
    idle_no_copy_s: float = 0.0  # idle time with no host copy in flight
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
        return (), (
            "per trip not identifiable: some copy events carry no hlo_op stat, so "
            "executions of one copy instruction cannot be told apart"
        )
    seen: dict[str, int] = {}
    by_trip: dict[int, dict[str, list[Interval]]] = {}
    for e in sorted(copies, key=lambda e: e.start_ns):
        k = seen.get(e.hlo_op, 0)
        seen[e.hlo_op] = k + 1
        by_trip.setdefault(k, {"d2h": [], "h2d": []})[e.kind].append(e.interval)
    if len(by_trip) == 1:
        return (), (
            "per trip not identifiable: each copy instruction ran once in the step "
            "(no loop over layers, or the loop was unrolled)"
        )
    rows = []
    for k in sorted(by_trip):
        d, h = by_trip[k]["d2h"], by_trip[k]["h2d"]
        rows.append(
            TripOverlap(
                trip=k,
                d2h_s=total_length(d) * 1e-9,
                d2h_exposed_s=exposed_length(d, compute) * 1e-9,
                h2d_s=total_length(h) * 1e-9,
                h2d_exposed_s=exposed_length(h, compute) * 1e-9,
            )
        )
    return tuple(rows), (
        "trip k = the k-th execution of each copy instruction in the step: "
        "d2h trips are forward layers 0..L-1, h2d trips backward layers "
        "L-1..0 (the backward loop runs in reverse)"
    )


# A kernel that waited for a copy starts this soon after the copy ends (a cross-stream event
# wait and a launch: microseconds on the H200); a gap ended later was not ended by the copy.
WAIT_TOLERANCE_NS = 50_000.0


def _waited(gaps: list[Interval], copies: dict[str, list[Interval]]) -> dict[str, float]:
    """Per direction, the length of the gaps whose end follows the end of one of its copies
    within WAIT_TOLERANCE_NS (the latest-ending copy takes the gap when both qualify)."""
    out = {k: 0.0 for k in copies}
    for g0, g1 in gaps:
        best, when = None, -1.0
        for kind, ivs in copies.items():
            for _, e in ivs:
                if g0 <= e <= g1 and g1 - e <= WAIT_TOLERANCE_NS and e > when:
                    best, when = kind, e
        if best is not None:
            out[best] += g1 - g0
    return out


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
    compute_lines = {e.line for e in inside if e.kind == "compute"}
    busy = union(
        comp
        + clip(
            [e.interval for e in inside if e.kind == "copy_other" and e.line in compute_lines],
            lo,
            hi,
        )
    )
    gaps = difference([(lo, hi)], busy)
    waited = _waited(gaps, {"d2h": d2h, "h2d": h2d})
    busy_len = total_length(busy)
    ns = 1e-9
    return StepOverlap(
        index=index,
        start_ns=lo,
        end_ns=hi,
        step_s=(hi - lo) * ns,
        compute_s=total_length(comp) * ns,
        d2h_s=total_length(d2h) * ns,
        h2d_s=total_length(h2d) * ns,
        d2h_hidden_s=d2h_hidden * ns,
        h2d_hidden_s=h2d_hidden * ns,
        d2h_exposed_s=(total_length(d2h) - d2h_hidden) * ns,
        h2d_exposed_s=(total_length(h2d) - h2d_hidden) * ns,
        copy_s=total_length(both) * ns,
        hidden_s=hidden * ns,
        exposed_s=(total_length(both) - hidden) * ns,
        copy_other_s=total_length(other) * ns,
        n_d2h=sum(e.kind == "d2h" for e in inside),
        n_h2d=sum(e.kind == "h2d" for e in inside),
        busy_s=busy_len * ns,
        d2h_stall_s=exposed_length(d2h, busy) * ns,
        h2d_stall_s=exposed_length(h2d, busy) * ns,
        d2h_waited_s=waited["d2h"] * ns,
        h2d_waited_s=waited["h2d"] * ns,
        idle_s=(hi - lo - busy_len) * ns,
        idle_no_copy_s=(hi - lo - busy_len - total_length(difference(both, busy))) * ns,
        per_trip=trips,
        per_trip_note=note,
        events=tuple(inside),
    )


# The per-step time figures (seconds) of StepOverlap, in report order; benchmarks read them
# from here (benchmarks/gpu_bench.py) so a new reading reaches their records too.
STEP_FIELDS = (
    "step_s",
    "compute_s",
    "d2h_s",
    "h2d_s",
    "d2h_hidden_s",
    "h2d_hidden_s",
    "d2h_exposed_s",
    "h2d_exposed_s",
    "copy_s",
    "hidden_s",
    "exposed_s",
    "copy_other_s",
    "busy_s",
    "d2h_stall_s",
    "h2d_stall_s",
    "d2h_waited_s",
    "h2d_waited_s",
    "idle_s",
    "idle_no_copy_s",
)


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
    wall_step_s: tuple[float, ...] = ()  # host-timed steps under the profiler
    predicted_exposed_s: float | None = None  # the plan's model, whole step
    predicted_transfer_s: float | None = None

    def _median(self, field: str) -> float | None:
        if not self.steps:  # (steps without host copies still have their compute time)
            return None
        return statistics.median(getattr(s, field) for s in self.steps)

    def __getattr__(self, name):  # medians over steps: result.exposed_s, result.copy_s, ...
        if name in STEP_FIELDS:
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
        out = {f: self._median(f) for f in STEP_FIELDS}
        out["overlap_efficiency"] = self.overlap_efficiency
        out["steps"] = len(self.steps)
        return out

    def streams(self) -> dict[str, tuple[str, ...]]:
        """The device stream lines that carried host copies and compute, over all steps."""
        ev = [e for s in self.steps for e in s.events]
        return {
            "copies": tuple(sorted({e.line for e in ev if e.kind in ("d2h", "h2d")})),
            "compute": tuple(sorted({e.line for e in ev if e.kind == "compute"})),
        }

    def stream_diagnosis(self) -> str:
        """Why copies could not overlap, when the trace shows it: every host copy ran on a
        stream that also ran compute kernels, which execute one after another."""
        st = self.streams()
        if not self.measured or not st["copies"] or not set(st["copies"]) <= set(st["compute"]):
            return ""
        if not all(line.startswith("Stream #") for line in st["copies"]):
            return ""  # TPU-style planes: one "XLA Ops" line holds everything; no CUDA streams
        hidden = sum(s.hidden_s for s in self.steps)
        return (
            f"every host copy ran on a stream that also runs compute ({', '.join(st['copies'])})"
            + (
                f", yet {hidden * 1e3:.3g} ms overlapped: another compute stream ran beside it"
                if hidden > 0
                else ": work on one CUDA stream runs in order, so no schedule can hide these "
                "copies. XLA puts its host dynamic-(update-)slice copies on an async stream "
                "(docs/xla-flags-research.md, finding 4) unless something serializes them; "
                "CUDA-graph command buffers capture them by default (DYNAMIC_SLICE_FUSION), "
                "so try XLA_FLAGS=--xla_gpu_enable_command_buffer= (graphs off) first"
            )
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "measured": self.measured,
            "status": self.status,
            "backend": self.backend,
            "device": self.device,
            "date": self.date,
            "step_name": self.step_name,
            "xla_flags": self.xla_flags,
            "trace_path": self.trace_path,
            "step_source": self.step_source,
            "wall_step_s": list(self.wall_step_s),
            "predicted_exposed_s": self.predicted_exposed_s,
            "predicted_transfer_s": self.predicted_transfer_s,
            "median": self.figures(),
            "streams": {k: list(v) for k, v in self.streams().items()},
            "stream_diagnosis": self.stream_diagnosis(),
            "steps": [
                {
                    **{f: getattr(s, f) for f in STEP_FIELDS},
                    "index": s.index,
                    "n_d2h": s.n_d2h,
                    "n_h2d": s.n_h2d,
                    "overlap_efficiency": s.overlap_efficiency,
                    "per_trip": [dataclasses.asdict(t) for t in s.per_trip],
                    "per_trip_note": s.per_trip_note,
                }
                for s in self.steps
            ],
        }

    def summary(self) -> str:
        head = f"profile of {self.step_name} on {self.device} ({self.backend}), {self.date}"
        if not self.measured:
            busy = (
                f"\ncompute busy {self._median('compute_s') * 1e3:.4g} ms of a "
                f"{self._median('step_s') * 1e3:.4g} ms step (median of {len(self.steps)})"
                if self.steps
                else ""
            )
            return f"{head}\nstatus: {self.status}{busy}\ntrace: {self.trace_path}"
        f = self.figures()

        def ms(x):
            return "n/a" if x is None else f"{x * 1e3:.4g} ms"

        lines = [
            head,
            f"status: {self.status}",
            f"steps: {len(self.steps)} (windows from {self.step_source}); medians per step:",
            f"  step {ms(f['step_s'])}, compute busy {ms(f['compute_s'])}",
            f"  d2h {ms(f['d2h_s'])}: hidden {ms(f['d2h_hidden_s'])}, "
            f"exposed {ms(f['d2h_exposed_s'])}",
            f"  h2d {ms(f['h2d_s'])}: hidden {ms(f['h2d_hidden_s'])}, "
            f"exposed {ms(f['h2d_exposed_s'])}",
            f"  all host copies {ms(f['copy_s'])}: exposed {ms(f['exposed_s'])}; "
            f"overlap efficiency (hidden/copy) {f['overlap_efficiency']:.3f}"
            if f["overlap_efficiency"] is not None
            else f"  all host copies {ms(f['copy_s'])}",
        ]
        if self.predicted_exposed_s is not None:
            lines.append(
                f"  the plan's model predicted exposed {ms(self.predicted_exposed_s)} "
                f"of {ms(self.predicted_transfer_s)} copy time"
            )
        s0 = self.steps[0]
        if s0.per_trip:
            lines.append(
                "  per trip (step 0): "
                + "; ".join(
                    f"#{t.trip} d2h {t.d2h_s * 1e3:.2f}/{t.d2h_exposed_s * 1e3:.2f} exp, "
                    f"h2d {t.h2d_s * 1e3:.2f}/{t.h2d_exposed_s * 1e3:.2f} exp"
                    for t in s0.per_trip
                )
            )
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
        colors = {
            "compute": "#4c72b0",
            "d2h": "#dd8452",
            "h2d": "#55a868",
            "copy_other": "#8c8c8c",
            "exposed": "#c44e52",
        }
        rows = sorted(
            {e.line for e in s.events},
            key=lambda ln: (not any(e.kind == "compute" for e in s.events if e.line == ln), ln),
        )
        fig, ax = plt.subplots(figsize=(14, 1.2 + 0.5 * len(rows)))
        for i, row in enumerate(rows):
            for kind, color in colors.items():
                if kind == "exposed":
                    continue
                bars = [
                    ((e.start_ns - s.start_ns) * 1e-6, (e.end_ns - e.start_ns) * 1e-6)
                    for e in s.events
                    if e.line == row and e.kind == kind
                ]
                if bars:
                    ax.broken_barh(bars, (i - 0.4, 0.8), facecolors=color, linewidth=0)
        rel = [
            ((a - s.start_ns) * 1e-6, (b - a) * 1e-6)
            for a, b in difference(
                [e.interval for e in s.events if e.kind in ("d2h", "h2d")],
                [e.interval for e in s.events if e.kind == "compute"],
            )
        ]
        if rel:
            ax.broken_barh(rel, (len(rows) - 0.4, 0.8), facecolors="#c44e52", linewidth=0)
        labels = [r.split(" ", 1)[-1][:40] for r in rows] + ["exposed host copies"]
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=8)
        ax.set_ylim(-0.6, len(labels) - 0.4)
        ax.set_xlim(0, s.step_s * 1e3)
        ax.set_xlabel("ms from step start")
        eff = s.overlap_efficiency
        ax.set_title(
            f"{self.step_name}, step {s.index} on {self.device}: step "
            f"{s.step_s * 1e3:.4g} ms, compute {s.compute_s * 1e3:.4g} ms, host copies "
            f"{s.copy_s * 1e3:.4g} ms, exposed {s.exposed_s * 1e3:.4g} ms"
            + (f", hidden/copy {eff:.2f}" if eff is not None else ""),
            fontsize=9,
        )
        ax.legend(
            handles=[Patch(color=c, label=k) for k, c in colors.items()],
            loc="upper left",
            bbox_to_anchor=(1.0, 1.0),
            fontsize=7,
        )
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return os.fspath(path)


# ----------------------------------------------------------------------------------------------
# Putting it together.


def analyze_trace(
    source,
    *,
    host_ops: Mapping[str, str] | None = None,
    module: str | None = None,
    backend: str = "gpu",
    device: str = "",
    step_name: str = "step",
    xla_flags: str = "",
    date: str = "",
    expect_offload: bool | None = None,
    wall_step_s: Sequence[float] = (),
    predicted_exposed_s: float | None = None,
    predicted_transfer_s: float | None = None,
) -> ProfileResult:
    """A `ProfileResult` from a trace already on disk (see `read_trace` for `source`)."""
    td = read_trace(source, host_ops=host_ops, module=module)
    common = dict(
        backend=backend,
        device=device or td.device_kind or backend,
        date=date or datetime.date.today().isoformat(),
        step_name=step_name,
        xla_flags=xla_flags,
        trace_path=td.path,
        step_source=td.step_source,
        wall_step_s=tuple(wall_step_s),
        predicted_exposed_s=predicted_exposed_s,
        predicted_transfer_s=predicted_transfer_s,
    )
    if backend == "cpu":
        return ProfileResult(measured=False, status=CPU_STATUS, **common)
    if not td.device_planes:
        return ProfileResult(
            measured=False,
            status=(
                f"no device plane in the trace (planes: {', '.join(td.planes)}): the device "
                "tracer (CUPTI on GPU) recorded nothing; nothing measured"
            ),
            **common,
        )
    if not td.events:
        return ProfileResult(
            measured=False,
            status=("the device plane has no stream events; nothing measured"),
            **common,
        )
    steps = tuple(step_overlap(td.events, w, i) for i, w in enumerate(td.step_windows))
    n_copies = sum(s.n_d2h + s.n_h2d for s in steps)
    if n_copies == 0:
        why = (
            " although the plan offloads: was the step built with plan.policy?"
            if expect_offload
            else ""
        )
        # No overlap to measure, but the steps' compute-busy time is still reported (a
        # program without offloads, traced beside one with them: benchmarks/profile_overlap.py
        # --trace-saved).
        return ProfileResult(
            measured=False,
            status=(
                f"no device->host or host->device copies in the trace{why}; no overlap measured "
                f"({sum(len(s.events) for s in steps)} compute events seen)"
            ),
            steps=steps,
            **common,
        )
    status = (
        f"measured: {len(steps)} steps, {n_copies} host copies "
        f"({sum(s.n_d2h for s in steps)} d2h, {sum(s.n_h2d for s in steps)} h2d)"
    )
    return ProfileResult(measured=True, status=status, steps=steps, **common)
