"""Calibrate the per-direction hiding models from a copy-heavy sweep (issue 18).

A sweep offloads one set of named tensors per point (everything else rematerialized) and
measures, from a device trace (``planner.profile``), the exposed copy time per layer trip in
each direction. This module pairs each point with the cost model's own view of the same
program (the offloaded tensors' copy times and windows: the forward compute after each
producer for stores, the backward compute before each reader for reloads) and fits
``cost_models.HidingModel`` per direction (``cost_models.hiding_from_sweep``):

* :func:`sweep_windows` (CPU or device): trace the step once, and per offload set the
  (copy_s, window_s) of each offloaded tensor, per direction, with the model's predictions;
* :func:`measured_per_trip`: the median exposed copy time per trip, per direction, of a
  ``ProfileResult`` (or its JSON, as benchmarks/overlap_sweep.py stores it);
* :func:`calibrate_hiding`: the two together, fitted and written into a profile with a
  source that names the sweep.

``benchmarks/overlap_sweep.py --fit-profile`` runs the whole mode on a device (one fresh
process per point); ``benchmarks/offload_windows.py`` fits the shipped h200 profile's
models this way from an overlap sweep's results (benchmarks/results/h200-2026-12-03-sweep.md).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import cost_models as cm
from planner._src.cost import build_cost_model, evaluate
from planner._src.cost.baselines import policy_assignment
from planner._src.graph import build_graph, class_key
from planner._src.policies import _names
from planner._src.trace import merge_call_sites, trace_step

__all__ = ["calibrate_hiding", "measured_per_trip", "names_policy", "sweep_windows"]


def names_policy(offloaded: Sequence[str]):
    """Full remat but ``offloaded`` (checkpoint names), which go to pinned host memory."""
    return _names(saved=(), offloaded=tuple(offloaded))


def sweep_windows(
    step_fn, args, offload_sets: Sequence[Sequence[str]], hardware, *, cost=None, graph=None
) -> list[dict[str, Any]]:
    """Per offload set: ``{"names", "d2h": [(copy_s, window_s), ...], "h2d": [...],
    "predicted_d2h_s", "predicted_h2d_s"}`` for the first region (one layer trip), the
    offloaded tensors in production order; predictions with ``hardware``'s hiding models.

    ``step_fn`` / ``args`` as for ``planner.Planner`` (abstract arguments are fine: nothing
    runs). ``cost`` / ``graph``: an already built cost model and graph of this step (then
    ``hardware`` is not used).
    """

    if graph is None or cost is None:
        tr = merge_call_sites(trace_step(step_fn, args, split_call_sites=True))
        graph = build_graph(tr)
        cost = build_cost_model(tr, graph, hardware, allow_offload=True)
    rg, rc = graph.regions[0], cost.regions[0]
    out = []
    for names in offload_sets:
        a = policy_assignment(graph, step_fn, args, names_policy(names))
        p = evaluate(cost, graph, a)
        rp = p.regions[0]
        dec = a.as_dict()
        off = [
            c.index
            for c in rg.region.candidates
            if rp.needed[c.index] and dec.get(class_key(rg.region, c)) == "offload"
        ]
        out.append(
            {
                "names": list(names),
                "offloaded": off,
                "d2h": [(rc.d2h_s[i], rc.fwd_after_s[i]) for i in off],
                "h2d": [(rc.h2d_s[i], rc.bwd_before_s[i]) for i in off],
                "predicted_d2h_s": rp.exposed_fwd_s,
                "predicted_h2d_s": rp.exposed_bwd_s,
            }
        )
    return out


def measured_per_trip(result: Any) -> tuple[float, float]:
    """(d2h, h2d) exposed seconds per layer trip: the median over every trip of every traced
    step. ``result``: a ``ProfileResult`` or its JSON (``{"steps": [{"per_trip": [...]}]}``)."""
    steps = result["steps"] if isinstance(result, Mapping) else result.steps
    trips = []
    for s in steps:
        per = s["per_trip"] if isinstance(s, Mapping) else s.per_trip
        for t in per or ():
            get = t.get if isinstance(t, Mapping) else lambda k, t=t: getattr(t, k)
            trips.append((get("d2h_exposed_s"), get("h2d_exposed_s")))
    if not trips:
        raise ValueError(
            "the profile has no per-trip figures: it traced no layer loop with host copies. "
            "Profile a step whose layers run under lax.scan with an offloading policy."
        )
    return (
        statistics.median(t[0] for t in trips),
        statistics.median(t[1] for t in trips),
    )


def calibrate_hiding(
    windows: Sequence[Mapping[str, Any]],
    measured: Sequence[tuple[float, float]],
    hardware,
    *,
    source: str,
    steps: int = 100,
):
    """Fit the per-direction hiding models: ``windows`` from :func:`sweep_windows`,
    ``measured`` the (d2h, h2d) exposed seconds per trip of each point (same order, e.g.
    :func:`measured_per_trip`). Returns ``(profile, fits)`` (``cost_models.hiding_from_sweep``)."""
    if len(windows) != len(measured):
        raise ValueError(
            f"{len(windows)} sweep points have windows but {len(measured)} were measured; give "
            "one measurement per offload set, in the same order."
        )
    pts = {
        d: [
            cm.HidingPoint(
                copies=tuple(map(tuple, w[d])), exposed_s=m[k], label="+".join(w["names"])
            )
            for w, m in zip(windows, measured)
            if w[d]
        ]
        for k, d in enumerate(("d2h", "h2d"))
    }
    return cm.hiding_from_sweep(hardware, pts["d2h"], pts["h2d"], source=source, steps=steps)
