"""Pictures of a plan: device memory over one step, and step time against the budget.

* :func:`hbm_timeline` draws the device memory the cost model predicts at each forward and
  backward trip of one step, for the plan and for JAX's stock policies, against the budget:
  where each policy peaks and why the plan fits.
* :func:`pareto_curve` draws the predicted step time of the plans of ``planner.pareto``
  against their budgets, with infeasible budgets marked and the stock policies as points.

The timeline replays the memory accounting of ``planner._src.cost.evaluate`` (formulas in cost.py's
docstring) trip by trip, so its highest point is the plan's predicted peak
(``plan.prediction.peak_bytes``); it reads only the prediction, never the simulator.
Figures are drawn with matplotlib's Agg canvas (no display needed, no pyplot state touched)
and written as PNG or SVG according to the file suffix.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from planner._src.budget import headroom_legend
from planner._src.cost import regions_in_order
from planner._src.units import GB, MB

DEFAULT_POLICIES = ("planner", "nothing_saveable", "dots_saveable", "everything_saveable")
_FORMATS = {".png": "png", ".svg": "svg"}


@dataclasses.dataclass(frozen=True, slots=True)
class MemoryPoint:
    """Device bytes held at one moment of the step, and what the step is doing then."""

    label: str
    phase: str  # "start", "forward" or "backward"
    device_bytes: int


# ------------------------------------------------------------------------------ the model


def memory_timeline(prediction, multiplicities, ordered: bool = True) -> tuple[MemoryPoint, ...]:
    """Device bytes over one step, replaying ``cost.evaluate``'s accounting trip by trip.

    Fixed bytes ``F`` are held throughout. Forward, in region order: a region's
    loop-invariant residuals ``I_r`` once, then each of its ``L_r`` trips adds its device
    residuals and the scan-stacked inputs, ``R_r + S_r``. Backward, regions in reverse and
    trips in reverse: a trip holds its working set ``W_r`` on top while it runs, then frees it
    and its own residuals; the invariants go after the region's last backward trip. The
    highest point is ``F + max_k (sum_{r<=k} (L_r (R_r + S_r) + I_r) + W_k)``, the model's peak.
    With ``ordered=False`` (merged regions whose places may interleave: ``cost.regions_in_order``)
    residuals are freed only after the last backward trip, as the model then assumes.
    """
    regions = list(zip(prediction.regions, multiplicities))
    held = int(prediction.fixed_bytes)
    points = [MemoryPoint("start: fixed bytes", "start", held)]
    # Every policy gets the same points (zero-byte steps included) so that timelines of
    # different policies line up on one x axis.
    for p, trips in regions:
        held += p.invariant_residual_bytes + p.invariant_hoisted_bytes
        points.append(MemoryPoint(f"region {p.region_id} loop invariants", "forward", held))
        for t in range(trips):
            held += _per_trip(p)
            points.append(
                MemoryPoint(f"forward region {p.region_id} trip {t + 1}", "forward", held)
            )
    for p, trips in reversed(regions):
        for t in reversed(range(trips)):
            label = f"backward region {p.region_id} trip {t + 1}"
            points.append(MemoryPoint(label, "backward", held + p.working_set_bytes))
            if ordered:
                held -= _per_trip(p)
            points.append(MemoryPoint(label + " done", "backward", held))
        if ordered:
            held -= p.invariant_residual_bytes + p.invariant_hoisted_bytes
        points.append(MemoryPoint(f"region {p.region_id} invariants freed", "backward", held))
    if not ordered:  # everything the regions kept goes once the last backward trip is done
        held = int(prediction.fixed_bytes)
        points.append(MemoryPoint("all residuals freed", "backward", held))
    return tuple(points)


def _per_trip(p) -> int:
    """What one forward trip of a region holds until its backward trip (cost.py's peak):
    its residuals, stacked inputs, twice-held copies and hoisted recomputes."""
    return (
        p.device_residual_bytes
        + p.input_residual_bytes
        + p.twice_held_bytes
        + p.hoisted_bytes
        - p.released_bytes
    )


def _multiplicities(plan) -> tuple[int, ...]:
    return tuple(rc.live for rc in plan.cost.regions)


def _predictions(plan) -> dict:
    """Name -> prediction: ``"planner"`` and every stock policy the plan was compared with."""
    out = {"planner": plan.prediction}
    out.update({b.name: b.prediction for b in plan.baselines})
    return out


def policy_timeline(plan, policy: str = "planner") -> tuple[MemoryPoint, ...]:
    """The :func:`memory_timeline` of the plan (``"planner"``) or of one stock policy."""
    preds = _predictions(plan)
    if policy not in preds:
        raise ValueError(
            f"No prediction for policy {policy!r}.\nWhy: the timeline draws the plan and the "
            "stock policies its report compares it with, nothing else.\n"
            f"Fix: choose among {', '.join(preds)}."
        )

    return memory_timeline(preds[policy], _multiplicities(plan), regions_in_order(plan.graph))


# ------------------------------------------------------------------------------ drawing


def _figure():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError(
            f"planner.plots needs matplotlib ({e}).\n"
            "Fix: pip install 'jax-offload-planner[plots]' (or pip install matplotlib)."
        ) from e
    fig = Figure(figsize=(11, 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _save(fig, path) -> Path:
    path = Path(path)
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(
            f"Cannot tell the image format of {str(path)!r} from its suffix.\n"
            f"Fix: name the file with one of {', '.join(_FORMATS)}, e.g. timeline.png."
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format=fmt, dpi=120)
    return path


def _unit(max_bytes: float) -> tuple[float, str]:
    """The unit that shows ``max_bytes`` with three significant decimals: GB, MB or KB."""
    for div, name in ((GB, "GB"), (MB, "MB")):
        if max_bytes >= 0.1 * div:
            return div, name
    return 1e3, "KB"


def _fmt(nbytes: float, unit: tuple[float, str]) -> str:
    return f"{nbytes / unit[0]:.3f} {unit[1]}"


def _trip_ticks(points, limit: int = 18) -> tuple[list[int], list[str]]:
    """x ticks at the trips: ``F3`` = forward trip 3, ``B3`` = its backward trip (``r1 F3``
    with several regions), at most ``limit`` of them, evenly thinned."""
    regions = {p.label.split(" trip ")[0].split()[-1] for p in points if " trip " in p.label}
    many = len(regions) > 1
    idx, labels = [], []
    for i, p in enumerate(points):
        if " trip " not in p.label or p.label.endswith(" done"):
            continue
        head, trip = p.label.rsplit(" trip ", 1)
        kind = "F" if head.startswith("forward") else "B"
        region = head.split()[-1]
        idx.append(i)
        labels.append(f"r{region} {kind}{trip}" if many else f"{kind}{trip}")
    if len(idx) > limit:
        keep = sorted({round(k * (len(idx) - 1) / (limit - 1)) for k in range(limit)})
        idx, labels = [idx[k] for k in keep], [labels[k] for k in keep]
    return idx, labels


def _status_line(plan) -> tuple[str, bool]:
    """The plan's verification in a few words, and whether it fits (compiled within the
    planned-to budget with every check passed)."""
    v = plan.verification
    ok = bool(v.ok)
    return v.status.upper() + ("" if ok else ": not a fitting plan"), ok


def draw_hbm_timeline(plan, policies=DEFAULT_POLICIES):
    """The figure of :func:`hbm_timeline` (a matplotlib ``Figure``, Agg canvas)."""
    fig, ax = _figure()
    series = [(name, policy_timeline(plan, name)) for name in policies]
    v = plan.verification
    planned_to = plan.budget.usable
    top = max(
        [plan.budget_bytes, v.compiled_device_bytes or 0]
        + [p.device_bytes for _, pts in series for p in pts]
    )
    unit = _unit(top)
    status, ok = _status_line(plan)
    boundary = None
    for name, points in series:
        ys = [p.device_bytes / unit[0] for p in points]
        peak = max(p.device_bytes for p in points)
        mine = name == "planner"
        ax.step(
            range(len(ys)),
            ys,
            where="post",
            linewidth=2.4 if mine else 1.3,
            linestyle="-" if ok or not mine else (0, (4, 2)),
            label=f"{name}: predicted peak {_fmt(peak, unit)}"
            + ("" if ok or not mine else " (did not verify)"),
            zorder=3 if mine else 2,
        )
        if boundary is None:
            boundary = next(i for i, p in enumerate(points) if p.phase == "backward")
    ax.axhline(
        plan.budget_bytes / unit[0],
        color="crimson",
        linestyle="--",
        label=f"budget {_fmt(plan.budget_bytes, unit)} (as given)",
    )
    if plan.headroom_bytes:
        ax.axhline(
            planned_to / unit[0],
            color="darkorange",
            linestyle="-.",
            label=f"planned to {_fmt(planned_to, unit)} ({headroom_legend(plan.hardware, getattr(plan, 'compiler_margin', 0.0))})",
        )
    if v.compiled_device_bytes is not None:
        # The compiler's figure is one number for the whole step: drawn at the plan's
        # predicted peak position, where the model puts the step's high-water mark.
        plan_pts = dict(series).get("planner") or policy_timeline(plan, "planner")
        at = max(range(len(plan_pts)), key=lambda i: plan_pts[i].device_bytes)
        ax.plot(
            [at + 0.5],
            [v.compiled_device_bytes / unit[0]],
            marker="*",
            markersize=15,
            color="black" if ok else "crimson",
            linestyle="none",
            zorder=5,
            label=f"compiled: {_fmt(v.compiled_device_bytes, unit)} by {v.compiler or v.backend}"
            + ("" if v.exact or "estimate" in (v.compiler or "") else " (an estimate)"),
        )
    if boundary is not None:
        ax.axvline(boundary - 0.5, color="gray", linestyle=":")
        ax.text(
            boundary - 0.5,
            0.01,
            " backward →",
            color="gray",
            va="bottom",
            transform=ax.get_xaxis_transform(),
        )
    ticks, labels = _trip_ticks(series[0][1]) if series else ([], [])
    # A step drawn with where="post" holds point i's value from x = i to i + 1: label its middle.
    ax.set_xticks(
        [t + 0.5 for t in ticks], labels, fontsize="x-small", rotation=0 if len(ticks) <= 12 else 45
    )
    ax.set_xlabel("one train step: forward trips F1..Fn, then backward trips Bn..B1")
    ax.set_ylabel(f"predicted device memory ({unit[1]})")
    ax.set_title(
        f"Device memory over one step ({plan.hardware.name}, cost model) — {status}",
        color="black" if ok else "crimson",
        fontsize="medium",
    )
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    return fig


def hbm_timeline(plan, path, policies=DEFAULT_POLICIES) -> Path:
    """Draw predicted device memory over one step for ``policies``; return the file written.

    ``policies`` names ``"planner"`` and any of the stock policies in ``plan.baselines``
    (``nothing_saveable``, ``everything_saveable``, ``maxtext:minimal``, ...). Lines: the
    budget as given (dashed), the budget the plan was made for after the profile's headroom
    (dash-dot, ``plan.headroom_why()``), the compiled figure of the verifying compiler (a
    star at the predicted peak's position), the forward / backward divide (dotted); x ticks
    name the trips. A plan that did not verify says so in the title and is drawn dashed.
    """
    return _save(draw_hbm_timeline(plan, policies), path)


def _budget_gb(item, budgets_gb, i) -> float | None:
    if hasattr(item, "budget_bytes"):  # a Plan, or an InfeasibleBudgetError
        return item.budget_bytes / GB
    return None if budgets_gb is None else float(budgets_gb[i])


_MARKERS = "s^vD<>pPhX*d"
_PLAN_SIZE, _STOCK_SIZE = 6, 11  # points: a stock marker rings a planner dot under it
# Two points closer than this (axes fractions, x and y: about a stock marker's width at the
# figure's size, 11 x 4.8 in) hide one another: the chart names them together.
_NEAR = (0.012, 0.025)


def _same_points(ax, points) -> list[list[tuple[str, float, float]]]:
    """The groups of ``(name, x, y)`` points drawn within ``_NEAR`` of one another (chains
    included), two or more to a group, in x order."""
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    frac = [((x - x0) / (x1 - x0 or 1.0), (y - y0) / (y1 - y0 or 1.0)) for _, x, y in points]
    parent = list(range(len(points)))

    def root(i):
        while parent[i] != i:
            i = parent[i]
        return i

    for i in range(len(points)):
        for j in range(i):
            if abs(frac[i][0] - frac[j][0]) < _NEAR[0] and abs(frac[i][1] - frac[j][1]) < _NEAR[1]:
                parent[root(i)] = root(j)
    groups: dict[int, list] = {}
    for i, p in enumerate(points):
        groups.setdefault(root(i), []).append(p)
    return sorted((g for g in groups.values() if len(g) > 1), key=lambda g: min(p[1] for p in g))


def _same_point_text(group) -> str:
    """``planner (budgets 0.461, 0.515 GB) = dots_saveable``: who shares a drawn point."""
    budgets = [n.split("@", 1)[1] for n, _, _ in group if n.startswith("planner@")]
    names = [n for n, _, _ in group if not n.startswith("planner@")]
    if budgets:
        s = "s" if len(budgets) > 1 else ""
        names.insert(0, f"planner (budget{s} {', '.join(budgets)} GB)")
    return " = ".join(names)


def _name_same_points(ax, points) -> None:
    """Points that hide one another get a note naming all of them, joined to the point by a
    thin line (offsets alternate so that neighbouring notes do not overlap)."""
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    for k, group in enumerate(_same_points(ax, points)):
        x = sum(p[1] for p in group) / len(group)
        y = sum(p[2] for p in group) / len(group)
        right = (x - x0) / (x1 - x0 or 1.0) < 0.6  # the note goes toward the open side
        high = (y - y0) / (y1 - y0 or 1.0) < 0.7
        dy = (14 + 16 * (k % 3)) * (1 if high else -1)
        ax.annotate(
            _same_point_text(group),
            (x, y),
            xytext=(18 if right else -18, dy),
            textcoords="offset points",
            ha="left" if right else "right",
            va="center",
            fontsize="x-small",
            arrowprops={"arrowstyle": "-", "color": "gray", "linewidth": 0.7},
            bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "alpha": 0.85, "linewidth": 0},
            zorder=5,
            annotation_clip=False,
        )


def draw_pareto_curve(plans_or_errors, budgets_gb=None):
    """The figure of :func:`pareto_curve` (a matplotlib ``Figure``, Agg canvas)."""
    items = list(plans_or_errors)
    plans = [
        (b, p)
        for i, p in enumerate(items)
        if hasattr(p, "prediction") and (b := _budget_gb(p, budgets_gb, i)) is not None
    ]
    failed = [
        b
        for i, p in enumerate(items)
        if not hasattr(p, "prediction") and (b := _budget_gb(p, budgets_gb, i)) is not None
    ]
    fig, ax = _figure()
    points: list[tuple[str, float, float]] = []  # (name, x, y as drawn): see _same_points
    if plans:
        plans.sort(key=lambda bp: bp[0])
        xs = [p.prediction.peak_bytes / GB for _, p in plans]
        ys = [p.prediction.step_s * 1e3 for _, p in plans]
        ax.plot(
            xs,
            ys,
            "o-",
            markersize=_PLAN_SIZE,
            linewidth=2,
            label="planner: predicted peak, step",
            zorder=3,
        )
        points += [(f"planner@{b:.3g}", x, y) for (b, _), x, y in zip(plans, xs, ys)]
        for (b, p), x, y in zip(plans, xs, ys):
            fits = bool(p.verification.ok)
            # The budget it was planned at: a thin line from the budget to its plan's peak.
            ax.plot([b, x], [y, y], color="gray", linewidth=0.8, zorder=2)
            ax.plot([b], [y], "|", color="crimson", markersize=12, markeredgewidth=1.5, zorder=3)
            if not fits:
                ax.plot([x], [y], "o", color="crimson", markersize=11, fillstyle="none", zorder=4)
        ax.plot([], [], "|", color="crimson", markersize=12, label="its budget (GB)")
        if any(not p.verification.ok for _, p in plans):
            ax.plot([], [], "o", color="crimson", fillstyle="none", label="did not verify")
        # The y axis spans the plans and the stock policies near them; a stock policy far
        # slower (offloading presets on a small model) is drawn on the top edge, its step in
        # the legend, so it does not flatten the curve.
        ceiling = 1.5 * max(ys)
        near = [
            b.prediction.step_s * 1e3
            for b in plans[0][1].baselines
            if b.applicable and b.prediction.step_s * 1e3 <= ceiling
        ]
        lo, hi = min(ys + near), max(ys + near)
        pad = 0.08 * (hi - lo or hi or 1.0)
        ax.set_ylim(lo - pad, hi + pad)
        # Stock policies: hollow markers, larger than the planner's dots and drawn above
        # them, so one at the planner's point (dots_saveable is often the plan) still shows.
        for k, b in enumerate(x for x in plans[0][1].baselines if x.applicable):
            step_ms = b.prediction.step_s * 1e3
            above = step_ms > hi + pad
            y = hi + pad if above else step_ms
            ax.plot(
                [b.prediction.peak_bytes / GB],
                [y],
                _MARKERS[k % len(_MARKERS)],
                markersize=_STOCK_SIZE,
                fillstyle="none",
                markeredgewidth=1.6,
                linestyle="none",
                clip_on=not above,
                zorder=4,
                label=f"{b.name}" + (f" ({step_ms:.3g} ms: above the chart)" if above else ""),
            )
            if not above:  # a point pinned to the top edge shares no step time with its
                # neighbours there: its legend entry gives its own, no "=" note
                points.append((b.name, b.prediction.peak_bytes / GB, y))
    if failed:
        ax.plot(
            failed,
            [0.0] * len(failed),
            "x",
            color="crimson",
            markersize=10,
            markeredgewidth=2,
            clip_on=False,
            transform=ax.get_xaxis_transform(),
            label="infeasible budget",
            zorder=4,
        )
    ax.margins(x=0.05)
    ax.autoscale_view()
    _name_same_points(ax, points)
    ax.set_xlabel("device memory (GB): predicted peak (points), budget asked (red ticks)")
    ax.set_ylabel("predicted step time (ms)")
    ax.set_title("Step time against device memory (cost model)")
    ax.legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(alpha=0.3)
    return fig


def pareto_curve(plans_or_errors, path, budgets_gb=None) -> Path:
    """Draw predicted peak (x) against predicted step time (y) for ``planner.pareto``'s answers.

    Each plan is a point at its predicted peak, joined in budget order, with a red tick at
    the budget it was planned at (a thin line joins the two: the budget left unused); plans
    that did not verify are circled in red; budgets no plan reaches are red crosses on the x
    axis (errors without a budget of their own are placed by ``budgets_gb``, the list given
    to ``pareto``, else left out); the stock policies are points at their predicted peak,
    named in the legend beside the axes. The y axis spans the data.
    """
    return _save(draw_pareto_curve(plans_or_errors, budgets_gb), path)


def draw_throughput_curve(result):
    """The figure of :func:`throughput_curve` (a matplotlib ``Figure``, Agg canvas)."""
    fig, ax = _figure()
    policies = [lim.policy for lim in result.limits]
    # micro-batching: one global batch, so the x axis is the micro-batch size
    micro = any(r.microbatches > 1 for r in result.table)

    def x_of(r):
        return r.batch_size if micro else r.global_batch_size

    for k, policy in enumerate(policies):
        rows = sorted(
            (r for r in result.table if r.policy == policy and r.tokens_per_s),
            key=lambda r: r.batch_size,
        )
        fit = [r for r in rows if r.fits]
        if not fit:
            continue
        xs = [x_of(r) for r in fit]
        ys = [r.tokens_per_s for r in fit]
        if policy == "planner":
            ax.plot(xs, ys, "o-", markersize=_PLAN_SIZE, linewidth=2, label="planner", zorder=3)
        else:
            ax.plot(
                xs,
                ys,
                _MARKERS[k % len(_MARKERS)] + "--",
                markersize=_STOCK_SIZE,
                fillstyle="none",
                markeredgewidth=1.4,
                linewidth=1,
                label=policy,
                zorder=4,
            )
        lim = result.limit(policy)
        if lim.first_over is not None:  # where it stops fitting: a cross on the x axis
            over = next(r for r in result.table if r.batch_size == lim.first_over)
            ax.plot(
                [x_of(over)],
                [0.0],
                "x",
                color=ax.lines[-1].get_color(),
                markersize=9,
                markeredgewidth=2,
                clip_on=False,
                transform=ax.get_xaxis_transform(),
                zorder=4,
            )
    chosen = (
        f"chosen: {result.microbatches} x {result.batch_size}"
        if micro
        else f"chosen: batch {result.batch_size}"
    )
    ax.plot(
        [result.batch_size],
        [result.tokens_per_s],
        "*",
        color="crimson",
        markersize=16,
        label=f"{chosen}, {result.policy}",
        zorder=5,
    )
    ax.plot([], [], "x", color="gray", label="first batch that does not fit (compiled)")
    ax.set_xscale("log", base=2)
    ticks = sorted({x_of(r) for r in result.table})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel(
        f"micro-batch size (global batch {result.global_batch} = size x micro-batches)"
        if micro
        else "batch size (examples per step)"
    )
    ax.set_ylabel("predicted tokens/s")
    ax.set_title(
        f"Predicted tokens/s against batch size under {result.budget_bytes / GB:g} GB "
        f"({result.hardware}; fits: {result.compiler})"
    )
    ax.legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(alpha=0.3)
    return fig


def throughput_curve(result, path) -> Path:
    """Draw ``maximize_throughput``'s table: predicted tokens/s (y) against the global batch
    (x, log scale) for the planner and each stock policy, at the batch sizes where each
    compiles within the budget; a cross on the x axis where each stops fitting, a star at the
    chosen (batch, plan)."""
    return _save(draw_throughput_curve(result), path)
