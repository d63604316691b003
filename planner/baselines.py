"""The policies users run today, as assignments on the same graph and the same cost model.

JAX's stock policies (``jax.checkpoint_policies``) and MaxText's named presets
(MaxText ``layers/decoders.py``, ``remat_policy`` options) are applied to every class the
trace found, exactly as JAX would call them, and then predicted with ``cost.evaluate``: the
planner's answer and the stock answers go through one model and one result type.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from jax.ad_checkpoint import checkpoint_policies as cp

from planner import _jax_adapter as adapter
from planner.cost import Assignment, CostModel, Prediction, assignment_from_policy, evaluate
from planner.graph import LivenessGraph


def _names(saved=(), offloaded=()):
    return cp.save_and_offload_only_these_names(
        names_which_can_be_saved=list(saved), names_which_can_be_offloaded=list(offloaded),
        offload_src=adapter.DEVICE_KIND, offload_dst=adapter.HOST_KIND)


_QKV = ("query_proj", "key_proj", "value_proj", "qkv_proj")
_DOTS = _QKV + ("out_proj", "mlpwi", "mlpwi_0", "mlpwi_1", "mlpwo")

# name -> (policy factory, uses host offload, needs checkpoint names to mean anything)
STOCK: dict[str, tuple[Callable[[], Callable], bool, bool]] = {
    "nothing_saveable": (lambda: cp.nothing_saveable, False, False),
    "dots_with_no_batch_dims_saveable": (lambda: cp.dots_with_no_batch_dims_saveable, False, False),
    "dots_saveable": (lambda: cp.dots_saveable, False, False),
    "everything_saveable": (lambda: cp.everything_saveable, False, False),
    "offload_dot_with_no_batch_dims": (
        lambda: cp.offload_dot_with_no_batch_dims(adapter.DEVICE_KIND, adapter.HOST_KIND), True, False),
    # MaxText presets written with names (MaxText decoders.py, remat_policy).
    "maxtext:minimal": (lambda: _names(saved=_DOTS), False, True),
    "maxtext:save_qkv_proj": (lambda: _names(saved=_QKV), False, True),
    "maxtext:save_dot_except_mlp": (lambda: _names(saved=_QKV + ("out_proj",)), False, True),
    "maxtext:qkv_proj_offloaded": (lambda: _names(offloaded=_QKV), True, True),
    "maxtext:minimal_offloaded": (lambda: _names(offloaded=_DOTS), True, True),
}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Baseline:
    name: str
    assignment: Assignment
    prediction: Prediction
    fits: bool                # predicted peak within the budget and host within its cap
    applicable: bool          # False: offload not allowed here, or the model has no such names


def evaluate_baselines(graph: LivenessGraph, cost: CostModel, budget_bytes: float,
                       names: tuple[str, ...] | None = None) -> tuple[Baseline, ...]:
    present = {c.name for c in graph.classes if c.name}
    out = []
    for name in names or tuple(STOCK):
        factory, offloads, needs_names = STOCK[name]
        a = assignment_from_policy(graph, factory())
        p = evaluate(cost, graph, a)
        # Offloading is not applicable where it is not allowed, nor where XLA cannot compile
        # it: a region under scan(unroll > 1) (cost.no_offload_classes) whose backward pass
        # would read an offloaded tensor.
        blocked = any(rg.region.scan_unroll > 1 and rp.host_residual_bytes + rp.invariant_host_bytes
                      for rg, rp in zip(graph.regions, p.regions))
        applicable = (cost.allow_offload or not offloads) and not blocked and (
            not needs_names or bool(present & set(_DOTS)))
        fits = p.peak_bytes <= budget_bytes and p.host_bytes <= cost.host_cap_bytes
        out.append(Baseline(name=name, assignment=a, prediction=p, fits=fits and applicable,
                            applicable=applicable))
    return tuple(out)
