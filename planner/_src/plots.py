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

from planner._src.units import GB

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
        held += p.invariant_residual_bytes
        points.append(MemoryPoint(f"region {p.region_id} loop invariants", "forward", held))
        for t in range(trips):
            held += p.device_residual_bytes + p.input_residual_bytes
            points.append(
                MemoryPoint(f"forward region {p.region_id} trip {t + 1}", "forward", held)
            )
    for p, trips in reversed(regions):
        for t in reversed(range(trips)):
            label = f"backward region {p.region_id} trip {t + 1}"
            points.append(MemoryPoint(label, "backward", held + p.working_set_bytes))
            if ordered:
                held -= p.device_residual_bytes + p.input_residual_bytes
            points.append(MemoryPoint(label + " done", "backward", held))
        if ordered:
            held -= p.invariant_residual_bytes
        points.append(MemoryPoint(f"region {p.region_id} invariants freed", "backward", held))
    if not ordered:  # everything the regions kept goes once the last backward trip is done
        held = int(prediction.fixed_bytes)
        points.append(MemoryPoint("all residuals freed", "backward", held))
    return tuple(points)


def _multiplicities(plan) -> tuple[int, ...]:
    return tuple(rc.multiplicity for rc in plan.cost.regions)


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
    from planner._src.cost import regions_in_order

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
    fig = Figure(figsize=(9, 4.8), layout="constrained")
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


def hbm_timeline(plan, path, policies=DEFAULT_POLICIES) -> Path:
    """Draw predicted device memory over one step for ``policies``; return the file written.

    ``policies`` names ``"planner"`` and any of the stock policies in ``plan.baselines``
    (``nothing_saveable``, ``everything_saveable``, ``maxtext:minimal``, ...). The dashed line
    is the budget; the dotted one divides the forward trips from the backward ones.
    """
    fig, ax = _figure()
    boundary = None
    for name in policies:
        points = policy_timeline(plan, name)
        ys = [p.device_bytes / GB for p in points]
        peak = max(ys)
        ax.step(
            range(len(ys)),
            ys,
            where="post",
            linewidth=2.4 if name == "planner" else 1.3,
            label=f"{name} (peak {peak:.3f} GB)",
            zorder=3 if name == "planner" else 2,
        )
        if boundary is None:
            boundary = next(i for i, p in enumerate(points) if p.phase == "backward")
    ax.axhline(
        plan.budget_bytes / GB,
        color="crimson",
        linestyle="--",
        label=f"budget {plan.budget_bytes / GB:.3f} GB",
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
    ax.set_xlabel("one train step: forward trips, then backward trips in reverse")
    ax.set_ylabel("predicted device memory (GB)")
    ax.set_title(f"Device memory over one step ({plan.hardware.name}, cost model)")
    ax.legend(fontsize="small", loc="upper left")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def _budget_gb(item, budgets_gb, i) -> float | None:
    if hasattr(item, "budget_bytes"):  # a Plan, or an InfeasibleBudgetError
        return item.budget_bytes / GB
    return None if budgets_gb is None else float(budgets_gb[i])


def pareto_curve(plans_or_errors, path, budgets_gb=None) -> Path:
    """Draw budget (x) against predicted step time (y) for ``planner.pareto``'s answers.

    Plans are joined by a line; budgets no plan reaches are marked with a red cross on the
    x axis (errors without a budget of their own are placed by ``budgets_gb``, the list given
    to ``pareto``, else left out); the stock policies are points at their predicted peak.
    """
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
    if plans:
        plans.sort(key=lambda bp: bp[0])
        ax.plot(
            [b for b, _ in plans],
            [p.prediction.step_s * 1e3 for _, p in plans],
            "o-",
            linewidth=2,
            label="planner (at its budget)",
            zorder=3,
        )
        for b in plans[0][1].baselines:
            if b.applicable:
                x, y = b.prediction.peak_bytes / GB, b.prediction.step_s * 1e3
                ax.plot([x], [y], "s", markersize=5, alpha=0.8)
                ax.annotate(
                    b.name, (x, y), fontsize="x-small", xytext=(4, 3), textcoords="offset points"
                )
    if failed:
        ax.plot(
            failed,
            [0.0] * len(failed),
            "x",
            color="crimson",
            markersize=10,
            markeredgewidth=2,
            clip_on=False,
            label="infeasible budget",
            zorder=4,
        )
    ax.set_ylim(bottom=0)
    ax.set_xlabel("HBM budget, or a stock policy's predicted peak (GB)")
    ax.set_ylabel("predicted step time (ms)")
    ax.set_title("Step time against the HBM budget (cost model)")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return _save(fig, path)
