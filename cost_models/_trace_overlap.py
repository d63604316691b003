"""Feed a measured overlap back into a hardware profile: ``overlap_from_trace(result, hw)``.

The measurement (``planner.profile``, a device trace of the real train step) gives, summed over
the profiled steps, the host-copy time ``copy`` (the union of device->host and host->device copy
intervals), the part of it that ran while some compute kernel ran, ``hidden`` (the intersection
with the union of compute intervals), and the compute busy time ``compute``.

The planner's model (planner/cost.py docstring) reads the overlap efficiency ``eta`` as the
fraction of the compute time that copies hide behind: exposed = ``max(0, copy - eta * window)``.
The trace gives the exposed time ``copy - hidden`` directly, so the ``eta`` that reproduces it
with the step's compute as the window is

    eta = clamp(hidden / compute, 0, 1)          (when the compute time is known)

and, for plain numbers without a compute time, ``hidden / copy`` (which equals the former only
when the copies take as long as the compute; it overstates eta for small offloads). When every
copy hid, ``hidden / compute`` is the smallest eta consistent with the trace: conservative.
The H200 figure 0.2 in ``cost_models/profiles/h200.json`` is of the first kind (hidden copy
time over the compute it hid behind, from step-time differences).

This module does not import ``planner``: it accepts any object with ``measured``, ``steps``
(each with ``copy_s`` and ``hidden_s``), ``device``, ``date``, ``step_name``, ``xla_flags``,
``trace_path`` (a ``planner.profile.ProfileResult``), or plain numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ._hiding import fit_hiding
from ._load import load_profile
from ._profiles import HardwareProfile


def measured_overlap_efficiency(hidden_s: float, copy_s: float) -> float:
    """``hidden_s / copy_s`` clamped to [0, 1]; ValueError if there was no copy time."""
    for name, v in (("hidden_s", hidden_s), ("copy_s", copy_s)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{name} must be a finite number of seconds, got {v!r}.")
    if copy_s <= 0:
        raise ValueError(
            f"copy_s is {copy_s!r}: the trace shows no host-copy time, so there is no overlap "
            "to measure. Profile a plan that offloads, on a device with host memory (GPU)."
        )
    return min(1.0, max(0.0, hidden_s / copy_s))


def _numbers(result_or_numbers: Any) -> dict[str, Any]:
    """hidden_s, copy_s (summed over steps) and citation details from any accepted input."""
    r = result_or_numbers
    if isinstance(r, tuple) and len(r) == 2:
        return {"hidden_s": float(r[0]), "copy_s": float(r[1])}
    if isinstance(r, Mapping):
        missing = [k for k in ("hidden_s", "copy_s") if k not in r]  # compute_s: optional
        if missing:
            raise ValueError(
                f"overlap_from_trace needs {missing} in the mapping; got keys "
                f"{sorted(r)}. Pass a ProfileResult, (hidden_s, copy_s) or "
                "{'hidden_s': ..., 'copy_s': ..., 'device': ..., 'date': ...}."
            )
        return dict(r)
    if hasattr(r, "measured") and hasattr(r, "steps"):
        if not r.measured:
            raise ValueError(f"the profile measured nothing: {r.status}")
        steps = list(r.steps)
        return {
            "hidden_s": sum(s.hidden_s for s in steps),
            "copy_s": sum(s.copy_s for s in steps),
            "compute_s": sum(s.compute_s for s in steps),
            "d2h": (sum(s.d2h_hidden_s for s in steps), sum(s.d2h_s for s in steps)),
            "h2d": (sum(s.h2d_hidden_s for s in steps), sum(s.h2d_s for s in steps)),
            "steps": len(steps),
            "device": r.device,
            "date": r.date,
            "step": r.step_name,
            "xla_flags": r.xla_flags,
            "trace": r.trace_path,
        }
    raise TypeError(
        f"overlap_from_trace takes a planner.profile.ProfileResult, a (hidden_s, copy_s) tuple "
        f"or a mapping with hidden_s and copy_s; got {type(r).__name__}."
    )


def overlap_from_trace(result_or_numbers: Any, hw: HardwareProfile | str) -> HardwareProfile:
    """``hw`` with the overlap efficiency the trace measured (module docstring), cited to it.

    ``result_or_numbers``: a ``planner.profile.ProfileResult`` (efficiency over all its steps),
    a ``(hidden_s, copy_s)`` tuple, or a mapping with ``hidden_s``, ``copy_s`` and optionally
    ``device``, ``date``, ``step``, ``steps``, ``xla_flags``, ``trace`` for the citation.
    ``hw``: a profile or a name/path for ``load_profile``.
    """
    hw = load_profile(hw)
    n = _numbers(result_or_numbers)
    eta = measured_overlap_efficiency(n["hidden_s"], n["copy_s"])
    per = "hidden/copy"
    if n.get("compute_s"):
        eta = min(1.0, max(0.0, n["hidden_s"] / n["compute_s"]))
        per = f"hidden/compute ({n['compute_s'] * 1e3:.3f} ms compute)"
    parts = [
        f"measured from a device trace (planner.profile) on {n.get('device', 'an unnamed device')}"
        f", {n.get('date', 'undated')}"
    ]
    if n.get("step"):
        parts.append(f"step function {n['step']}")
    if n.get("steps"):
        parts.append(f"{n['steps']} profiled steps")
    if "xla_flags" in n:
        parts.append(f"XLA flags {n['xla_flags']!r}" if n["xla_flags"] else "default XLA flags")
    parts.append(
        f"hidden copy time {n['hidden_s'] * 1e3:.3f} ms of {n['copy_s'] * 1e3:.3f} ms "
        f"host-copy time -> {per} = {eta:.3f}"
    )
    for d in ("d2h", "h2d"):
        if n.get(d):
            h, c = n[d]
            parts.append(f"{d} {h * 1e3:.3f}/{c * 1e3:.3f} ms hidden")
    if n.get("trace"):
        parts.append(f"trace {n['trace']}")
    source = "; ".join(parts)
    return hw.replace(overlap_efficiency=eta, sources={"overlap_efficiency": source})


def hiding_from_sweep(
    hw: HardwareProfile | str,
    d2h: Any,
    h2d: Any,
    *,
    source: str,
    steps: int = 100,
) -> tuple[HardwareProfile, dict[str, Any]]:
    """``hw`` with per-direction hiding models fitted to a copy-heavy sweep, each cited.

    ``d2h`` / ``h2d``: the sweep's measured trips (``cost_models.HidingPoint``: the cost
    model's (copy, window) per offloaded tensor and the exposed copy time per trip the
    device trace measured, e.g. ``planner.profile``'s ``TripOverlap.d2h_exposed_s``). Every
    form of ``cost_models.HIDING_FORMS`` is fitted (least squares on a grid of ``steps`` per
    parameter) and the one with the smallest leave-one-out rms error is kept; its source
    gives ``source`` (what was run, where the results are) and every form's errors. Returns
    the profile and ``{"d2h": HidingFit, "h2d": HidingFit}``.
    """
    import dataclasses

    hw = load_profile(hw)
    d2h, h2d = list(d2h), list(h2d)
    fits = {"d2h": fit_hiding(d2h, steps=steps), "h2d": fit_hiding(h2d, steps=steps)}
    counts = {"d2h": len(d2h), "h2d": len(h2d)}
    sources = {
        f"link.{d}_hiding": (
            f"{source}; {counts[d]} measured trips; kept form {fits[d].best} (smallest "
            f"leave-one-out rms); fits: {fits[d].describe()}"
        )
        for d in fits
    }
    link = dataclasses.replace(hw.link, d2h_hiding=fits["d2h"].model, h2d_hiding=fits["h2d"].model)
    return hw.replace(link=link, sources=sources), fits
