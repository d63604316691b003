"""Stage 3, cost: time and bytes of every decision, and the model that predicts a plan.

build.py prices every candidate (build_cost_model); predict.py computes the prediction for
any assignment (evaluate); state.py prices the train state's leaves; baselines.py puts the
stock policies through the same model; simulate.py replays a plan independently of both.
Formulas: docs/cost-model.md#the-memory-and-time-model-term-by-term.
"""

from planner._src.cost.build import build_cost_model
from planner._src.cost.predict import decisions_per_candidate, evaluate, regions_in_order
from planner._src.types import (
    DECISIONS,
    Assignment,
    CostModel,
    Prediction,
    RegionCost,
    RegionPrediction,
)

__all__ = [
    "DECISIONS",
    "Assignment",
    "CostModel",
    "Prediction",
    "RegionCost",
    "RegionPrediction",
    "build_cost_model",
    "decisions_per_candidate",
    "evaluate",
    "regions_in_order",
]
