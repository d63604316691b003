"""jax-offload-planner: choose save / remat / offload for every activation of a JAX train step.

    import planner
    plan = planner.solve(train_step, state, batch, hbm_gb=80, hardware="h200")
    print(plan.report())
    layer = jax.checkpoint(layer, policy=plan.policy)
    # layer groups (one checkpoint call site per group, decided separately):
    group_layer = jax.checkpoint(layer, policy=plan.policies[g])
"""

from planner.cost import Assignment, Prediction
from planner.emit import PlannerPolicy
from planner.errors import (
    InfeasibleBudgetError,
    InvalidArgumentError,
    LayerGroupsError,
    NoCheckpointRegionError,
    PlanFileError,
    PlannerError,
    SolverError,
    TraceError,
    UnsupportedError,
)
from planner.plan import Plan, PlanWarning, pareto, solve
from planner.planfile import SavedPlan
from planner.profile import ProfileResult, profile
from planner.planfile import load as load_plan

__all__ = [
    "Assignment", "InfeasibleBudgetError", "InvalidArgumentError", "LayerGroupsError",
    "NoCheckpointRegionError",
    "Plan", "PlanFileError", "ProfileResult", "profile", "PlanWarning", "PlannerError", "PlannerPolicy", "Prediction",
    "SavedPlan", "SolverError", "TraceError", "UnsupportedError", "load_plan", "pareto", "solve",
]
