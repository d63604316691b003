"""Stage 3, cost: what placing each train-state leaf in pinned host memory saves and costs
(LeafCost, leaf_costs, with_state), and the sums for a placement (evaluate_state), which
cost.predict.evaluate adds to its prediction. Formulas: docs/cost-model.md#the-train-state.
"""

from __future__ import annotations

import dataclasses
import math

import cost_models as cm
from planner._src.errors import PlannerError
from planner._src.trainstate.records import StateLeaf, StateTerms

__all__ = ["INFLIGHT_SLICES", "LeafCost", "evaluate_state", "leaf_costs", "with_state"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LeafCost:
    """What placing one leaf on the host saves and costs per step (formulas: docs/cost-model.md#the-train-state)."""

    leaf: StateLeaf
    saved_bytes: int  # b_i (a parameter: b_i + its gradient's bytes)
    update_buffer_bytes: int  # U_i: 2 b_i / n_i (a parameter: 3 b_i / n_i)
    exposed_s: float  # X_i
    moved_bytes: int  # over the host link per step: 2 b_i (a parameter: 6 b_i)
    host_bytes: int = 0  # b_i, resident in pinned host memory between steps
    inflight_bytes: int = 0  # V_i: a parameter's slices on the device in its layers' passes
    # the step's host temporaries: a parameter's gradient, b_i, written to the host slice by
    # slice in the backward pass; a state leaf 0 (updated in place in its own buffer)
    host_temp_bytes: int = 0
    # brought in whole for an update the planner cannot stream (emit/apply_state.py,
    # "whole"): priced as each leaf's copies beside its own update, so the update holds the
    # largest such leaf's U_i, not their sum. XLA's default scheduler places them so; XLA:GPU's
    # latency-hiding scheduler starts them all at the step's start, where they save nothing
    # (benchmarks/results/whole-mode-2026-12-06.md): the compile of the step as applied
    # judges each such plan
    whole: bool = False


# Slices of a streamed parameter on the device while its layer runs backward, counted from
# the compile (measured: benchmarks/results/param-state-probe-2026-12-04.md): the slice brought in,
# the next one prefetched, the gradient slice before it goes out. Measured 2.88 slices for
# one leaf alone (deviceless H200, JAX 0.11.2; 2.50 on 0.12.0.1) and 2.13 for three together
# (their slices are not all live at the peak): 3 per leaf is an upper bound, conservative
# for several leaves.
INFLIGHT_SLICES = 3


def leaf_costs(
    leaves: tuple[StateLeaf, ...], hardware, whole: bool = False
) -> tuple[LeafCost, ...]:
    """:class:`LeafCost` of every movable leaf on ``hardware`` (a cost_models profile);
    ``whole``: the optimizer-state leaves are brought in whole for an update the planner
    cannot stream (their update buffers combine by the largest, not the sum)."""
    out = []
    for leaf in leaves:
        if not leaf.movable:
            continue
        piece = math.ceil(leaf.nbytes / leaf.layers)
        h2d = cm.transfer_seconds(piece, hardware, "h2d")
        d2h = cm.transfer_seconds(piece, hardware, "d2h")
        if leaf.role == "param":
            # per slice: in for the forward, in again for the backward (the checkpointed
            # layer recomputes), its gradient out, and the update's parameter and gradient
            # in and new parameter out: 4 h2d + 2 d2h (the gradient has the param's dtype)
            out.append(
                LeafCost(
                    leaf=leaf,
                    saved_bytes=2 * leaf.nbytes,
                    update_buffer_bytes=3 * piece,
                    exposed_s=float(leaf.layers * (4 * h2d + 2 * d2h)),
                    moved_bytes=6 * leaf.nbytes,
                    host_bytes=leaf.nbytes,
                    inflight_bytes=INFLIGHT_SLICES * piece,
                    host_temp_bytes=leaf.nbytes,
                )
            )
            continue
        out.append(
            LeafCost(
                leaf=leaf,
                saved_bytes=leaf.nbytes,
                update_buffer_bytes=2 * piece,
                exposed_s=float(leaf.layers * (h2d + d2h)),
                moved_bytes=2 * leaf.nbytes,
                host_bytes=leaf.nbytes,
                whole=whole and leaf.layers == 1,
            )
        )
    return tuple(out)


def evaluate_state(costs: tuple[LeafCost, ...], on_host: frozenset[str]) -> StateTerms:
    """The terms for the leaves ``on_host`` (cost.evaluate adds them to its prediction)."""
    by_path = {c.leaf.key: c for c in costs}
    unknown = sorted(set(on_host) - set(by_path))
    if unknown:
        raise PlannerError(
            f"The plan puts {unknown} on the host, but the cost model has no such movable "
            "leaf.\nWhy: a placement is only priced for the optimizer-state leaves traced with "
            "this cost model.\nFix: plan and evaluate with the same Planner."
        )
    chosen = [by_path[p] for p in sorted(on_host)]
    return StateTerms(
        saved_bytes=sum(c.saved_bytes for c in chosen),
        update_buffer_bytes=sum(c.update_buffer_bytes for c in chosen if not c.whole)
        + max((c.update_buffer_bytes for c in chosen if c.whole), default=0),
        host_bytes=sum(c.host_bytes for c in chosen),
        exposed_s=sum(c.exposed_s for c in chosen),
        moved_bytes=sum(c.moved_bytes for c in chosen),
        inflight_bytes=sum(c.inflight_bytes for c in chosen),
        host_temp_bytes=sum(c.host_temp_bytes for c in chosen),
    )


def with_state(cost, leaves: tuple[StateLeaf, ...], whole: bool = False):
    """``cost`` (a CostModel) with the train state's leaves priced on its hardware, so that
    solve.solve_assignment decides their placement with the activations' (``whole``:
    :func:`leaf_costs`)."""
    return dataclasses.replace(cost, state=leaf_costs(leaves, cost.hardware, whole=whole))
