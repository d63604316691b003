"""Feed a measured overlap back into a hardware profile: ``overlap_from_trace(result, hw)``.

The measurement (``planner.profile``, a device trace of the real train step) gives, summed over
the profiled steps, the host-copy time ``copy`` (the union of device->host and host->device copy
intervals) and the part of it that ran while some compute kernel ran, ``hidden`` (the
intersection with the union of compute intervals). The profile's overlap efficiency becomes

    eta = clamp(hidden / copy, 0, 1)

Relation to the planner's model (planner/cost.py docstring): per trip, the exposed copy time is
``max(0, sum of copies - eta * compute window)``: the link moves at a fraction ``eta`` of its
speed while compute runs. With ``eta = hidden / copy`` the model reproduces the measured
exposed time ``copy - hidden`` exactly when the compute window it uses equals the copy time;
when the window is longer than the copies (a small offload in a long layer) the model hides
more than was measured (it is optimistic), when shorter, less. The figure is the same
definition as the 0.2 in ``benchmarks/results/h200-2026-11-30-probe/h200-measured.json`` (there
derived from step-time differences, here read off the trace), so the two can be compared.

This module does not import ``planner``: it accepts any object with ``measured``, ``steps``
(each with ``copy_s`` and ``hidden_s``), ``device``, ``date``, ``step_name``, ``xla_flags``,
``trace_path`` (a ``planner.profile.ProfileResult``), or plain numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ._profiles import HardwareProfile, load_profile


def measured_overlap_efficiency(hidden_s: float, copy_s: float) -> float:
    """``hidden_s / copy_s`` clamped to [0, 1]; ValueError if there was no copy time."""
    for name, v in (("hidden_s", hidden_s), ("copy_s", copy_s)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{name} must be a finite number of seconds, got {v!r}.")
    if copy_s <= 0:
        raise ValueError(
            f"copy_s is {copy_s!r}: the trace shows no host-copy time, so there is no overlap "
            "to measure. Profile a plan that offloads, on a device with host memory (GPU).")
    return min(1.0, max(0.0, hidden_s / copy_s))


def _numbers(result_or_numbers: Any) -> dict[str, Any]:
    """hidden_s, copy_s (summed over steps) and citation details from any accepted input."""
    r = result_or_numbers
    if isinstance(r, tuple) and len(r) == 2:
        return {"hidden_s": float(r[0]), "copy_s": float(r[1])}
    if isinstance(r, Mapping):
        missing = [k for k in ("hidden_s", "copy_s") if k not in r]
        if missing:
            raise ValueError(f"overlap_from_trace needs {missing} in the mapping; got keys "
                             f"{sorted(r)}. Pass a ProfileResult, (hidden_s, copy_s) or "
                             "{'hidden_s': ..., 'copy_s': ..., 'device': ..., 'date': ...}.")
        return dict(r)
    if hasattr(r, "measured") and hasattr(r, "steps"):
        if not r.measured:
            raise ValueError(f"the profile measured nothing: {r.status}")
        steps = list(r.steps)
        return {
            "hidden_s": sum(s.hidden_s for s in steps), "copy_s": sum(s.copy_s for s in steps),
            "d2h": (sum(s.d2h_hidden_s for s in steps), sum(s.d2h_s for s in steps)),
            "h2d": (sum(s.h2d_hidden_s for s in steps), sum(s.h2d_s for s in steps)),
            "steps": len(steps), "device": r.device, "date": r.date, "step": r.step_name,
            "xla_flags": r.xla_flags, "trace": r.trace_path,
        }
    raise TypeError(
        f"overlap_from_trace takes a planner.profile.ProfileResult, a (hidden_s, copy_s) tuple "
        f"or a mapping with hidden_s and copy_s; got {type(r).__name__}.")


def overlap_from_trace(result_or_numbers: Any, hw: HardwareProfile | str) -> HardwareProfile:
    """``hw`` with ``overlap_efficiency`` = measured hidden / copy time, cited to the trace.

    ``result_or_numbers``: a ``planner.profile.ProfileResult`` (efficiency over all its steps),
    a ``(hidden_s, copy_s)`` tuple, or a mapping with ``hidden_s``, ``copy_s`` and optionally
    ``device``, ``date``, ``step``, ``steps``, ``xla_flags``, ``trace`` for the citation.
    ``hw``: a profile or a name/path for ``load_profile``.
    """
    hw = load_profile(hw)
    n = _numbers(result_or_numbers)
    eta = measured_overlap_efficiency(n["hidden_s"], n["copy_s"])
    parts = [f"measured from a device trace (planner.profile) on {n.get('device', 'an unnamed device')}"
             f", {n.get('date', 'undated')}"]
    if n.get("step"):
        parts.append(f"step function {n['step']}")
    if n.get("steps"):
        parts.append(f"{n['steps']} profiled steps")
    if "xla_flags" in n:
        parts.append(f"XLA flags {n['xla_flags']!r}" if n["xla_flags"] else "default XLA flags")
    parts.append(f"hidden copy time {n['hidden_s'] * 1e3:.3f} ms of {n['copy_s'] * 1e3:.3f} ms "
                 f"host-copy time -> hidden/copy = {eta:.3f}")
    for d in ("d2h", "h2d"):
        if n.get(d):
            h, c = n[d]
            parts.append(f"{d} {h * 1e3:.3f}/{c * 1e3:.3f} ms hidden")
    if n.get("trace"):
        parts.append(f"trace {n['trace']}")
    source = "; ".join(parts)
    return hw.replace(overlap_efficiency=eta, sources={"overlap_efficiency": source})
