"""How much of one layer trip's host copies hides behind its compute, per direction.

A layer trip under ``lax.scan`` stores its offloaded tensors (device to host) during the
forward trip and reloads them (host to device) during the backward trip. Per direction, the
copies form one queue on the link in production order; tensor ``u`` has a *window*, the
compute that can overlap its copy (the planner's cost stage: for a store the forward compute
after ``u`` is made, for a reload the backward compute ahead of ``u``'s first use). With
``C`` the trip's copy time in that direction and ``T_u`` the copy time of ``u`` and every
tensor produced after it, the exposed (not hidden) copy time of the trip is

    exposed = max(floor * C, C - capacity, max_u (T_u - eta * window_u), 0)

* ``eta``: the link's share of its speed while compute runs (the queue's tail must fit in
  ``eta`` times its window, the old single ``overlap_efficiency``);
* ``capacity``: the most copy time one trip hides in this direction, however much compute
  there is (``inf``: no such limit);
* ``floor``: the part of every copy that is exposed whatever compute is around it (XLA's
  latency-hiding scheduler places each copy's done; one placed next to its start waits).

The profile's single ``overlap_efficiency`` is the special case ``(eta, inf, 0)``.
:func:`fit_hiding` fits the candidate forms (subsets of the three parameters) to measured
per-trip exposed times and keeps the form with the smallest leave-one-out error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ._units import TIME, UnitError, format_quantity, parse_quantity

__all__ = ["FORMS", "HidingFit", "HidingModel", "HidingPoint", "fit_hiding", "tail_exposure"]


class HidingError(ValueError):
    """A hiding model or fit that cannot be used (a bad figure, too few points)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HidingModel:
    """One direction's calibrated hiding model (module docstring)."""

    eta: float
    capacity_s: float = math.inf
    floor: float = 0.0
    form: str = "eta"  # which of FORMS was fitted (informational)

    def __post_init__(self) -> None:
        for name, v, hi in (("eta", self.eta, 1.0), ("floor", self.floor, 1.0)):
            if not (isinstance(v, int | float) and math.isfinite(v) and 0 <= v <= hi):
                raise HidingError(
                    f"hiding model: {name} is {v!r}; it must be a number from 0 to {hi:g} "
                    f"(a fraction). Example: {{'eta': 0.2, 'capacity': '10 ms', 'floor': 0.1}}."
                )
        if not (isinstance(self.capacity_s, int | float) and self.capacity_s >= 0):
            raise HidingError(
                f"hiding model: capacity is {self.capacity_s!r}; give a time like '10 ms', "
                "or null for no capacity limit."
            )

    def exposed(self, copies: Sequence[tuple[float, float]]) -> float:
        """Exposed seconds of one trip's queue: ``copies`` = (copy_s, window_s) per offloaded
        tensor, in production order."""
        total = sum(c for c, _ in copies)
        return max(
            self.floor * total,
            total - self.capacity_s,
            tail_exposure(copies, self.eta),
            0.0,
        )

    def to_json(self) -> dict[str, object]:
        cap = None if math.isinf(self.capacity_s) else format_quantity(self.capacity_s, TIME)
        return {"eta": self.eta, "capacity": cap, "floor": self.floor, "form": self.form}

    @classmethod
    def from_json(cls, d: object, where: str) -> HidingModel:
        if not isinstance(d, dict) or not {"eta"} <= set(d) <= {
            "eta",
            "capacity",
            "floor",
            "form",
        }:
            raise HidingError(
                f"{where}: a hiding model is an object with eta, capacity (a time or null) and "
                f"floor, like {{'eta': 0.2, 'capacity': '10 ms', 'floor': 0.1}}; got {d!r:.100}."
            )
        cap = d.get("capacity")
        try:
            cap_s = math.inf if cap is None else parse_quantity(cap, TIME)
        except (UnitError, ValueError) as err:
            raise HidingError(f"{where}: capacity: {err}. Write it like '10 ms'.") from None
        try:
            return cls(
                eta=float(d["eta"]),
                capacity_s=cap_s,
                floor=float(d.get("floor", 0.0)),
                form=str(d.get("form", "eta")),
            )
        except (TypeError, ValueError) as err:
            raise HidingError(f"{where}: {err}") from None


def tail_exposure(copies: Sequence[tuple[float, float]], eta: float) -> float:
    """``max_u (T_u - eta * window_u)`` over the queue (0 when empty): the worst tail."""
    worst, tail = 0.0, 0.0
    for c, w in reversed(copies):
        tail += c
        worst = max(worst, tail - eta * w)
    return worst


@dataclass(frozen=True, slots=True, kw_only=True)
class HidingPoint:
    """One measured trip: the model's (copy_s, window_s) per offloaded tensor in production
    order, and the exposed copy time per trip the device trace measured."""

    copies: tuple[tuple[float, float], ...]
    exposed_s: float
    label: str = ""


# The candidate forms: which parameters are fitted (the others stay at eta = 0 with no tail
# term, capacity = inf, floor = 0).
FORMS: dict[str, tuple[str, ...]] = {
    "eta": ("eta",),
    "hinge": ("capacity", "floor"),
    "eta+floor": ("eta", "floor"),
    "eta+capacity": ("eta", "capacity"),
    "eta+capacity+floor": ("eta", "capacity", "floor"),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class HidingFit:
    """Every candidate form's fit: (model, rms_s, loo_rms_s, within_20) and the kept one."""

    forms: dict[str, tuple[HidingModel, float, float, int]]
    best: str

    @property
    def model(self) -> HidingModel:
        return self.forms[self.best][0]

    def describe(self) -> str:
        parts = []
        for name, (m, rms, loo, w) in self.forms.items():
            cap = "inf" if math.isinf(m.capacity_s) else f"{m.capacity_s * 1e3:.2f} ms"
            parts.append(
                f"{name}: eta {m.eta:.3f}, capacity {cap}, floor {m.floor:.2f}, rms "
                f"{rms * 1e3:.2f} ms, leave-one-out rms {loo * 1e3:.2f} ms, {w} within 20%"
            )
        return "; ".join(parts)


def _grid(form: tuple[str, ...], points: Sequence[HidingPoint], steps: int):
    top = max((sum(c for c, _ in p.copies) for p in points), default=0.0)
    # A form without eta keeps eta = 1 (the link at full speed beside compute): its queue
    # term then binds only where a window is shorter than the copies queued behind it.
    etas = [i / steps for i in range(steps + 1)] if "eta" in form else [1.0]
    caps = (
        [top * i / (2 * steps) for i in range(2 * steps + 1)] + [math.inf]
        if "capacity" in form
        else [math.inf]
    )
    floors = [i / steps for i in range(steps + 1)] if "floor" in form else [0.0]
    return etas, caps, floors


def _fit_form(form, points, steps) -> tuple[HidingModel, float]:
    """Least squares on a grid (the form has kinks: no gradient)."""
    import numpy as np

    etas, caps, floors = _grid(form, points, steps)
    totals = np.array([sum(c for c, _ in p.copies) for p in points])
    y = np.array([p.exposed_s for p in points])
    cap_arr = np.array(caps)
    best = None
    for eta in etas:
        tails = np.array([tail_exposure(p.copies, eta) for p in points])
        for floor in floors:
            base = np.maximum(np.maximum(floor * totals, tails), 0.0)
            pred = np.maximum(base[:, None], totals[:, None] - cap_arr[None, :])
            err = ((pred - y[:, None]) ** 2).sum(axis=0)
            k = int(np.argmin(err))  # the first (smallest capacity) of equal errors
            if best is None or err[k] < best[0] - 1e-18:
                best = (float(err[k]), eta, caps[k], floor)
    err, eta, cap, floor = best
    name = next(k for k, v in FORMS.items() if v == form)
    model = HidingModel(eta=eta, capacity_s=cap, floor=floor, form=name)
    return model, math.sqrt(err / len(points))


def fit_hiding(points: Sequence[HidingPoint], *, steps: int = 100) -> HidingFit:
    """Fit every form of :data:`FORMS` to ``points`` and keep the one whose leave-one-out
    rms error is smallest (ties: fewer parameters). ``steps``: grid steps per parameter."""
    points = list(points)
    if len(points) < 3:
        raise HidingError(
            f"fit_hiding needs at least 3 measured trips, got {len(points)}: with fewer, a "
            "leave-one-out error cannot tell the forms apart. Measure more offload sets "
            "(benchmarks/overlap_sweep.py runs nine)."
        )
    forms = {}
    for name, form in FORMS.items():
        model, rms = _fit_form(form, points, steps)
        loo = []
        for j in range(len(points)):
            rest = points[:j] + points[j + 1 :]
            m, _ = _fit_form(form, rest, steps)
            loo.append(m.exposed(points[j].copies) - points[j].exposed_s)
        within = sum(
            abs(model.exposed(p.copies) - p.exposed_s) <= 0.2 * p.exposed_s for p in points
        )
        forms[name] = (model, rms, math.sqrt(sum(e * e for e in loo) / len(loo)), within)
    # Ties (within a relative 1e-9 or 1e-15 s: copies can be microseconds): fewer parameters.
    lo = min(f[2] for f in forms.values())
    best = min(
        (k for k in forms if forms[k][2] <= lo * (1 + 1e-9) + 1e-15),
        key=lambda k: (len(FORMS[k]), forms[k][2]),
    )
    return HidingFit(forms=forms, best=best)
