"""jax-offload-planner: choose save / remat / offload for every activation of a JAX train step.

    import planner
    plan = planner.solve(train_step, state, batch, hbm_gb=80, hardware="h200")
    print(plan.report())
    layer = jax.checkpoint(layer, policy=plan.policy)

    session = planner.Planner(train_step, state, batch, hardware="h200")   # trace once
    plans = session.pareto(hbm_gb=[60, 80, 100])                           # plan many

Everything below is the public API; the modules under ``planner._src`` are private.
"""

from cost_models import HardwareProfile, list_profiles, load_profile
from planner._src.emit import PlannerPolicy
from planner._src.errors import (
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
from planner._src.numerics import NumericsResult, check_numerics
from planner._src.options import PlanOptions
from planner._src.paste import paste_snippets
from planner._src.plan import Plan, PlanWarning
from planner._src.planfile import SavedPlan
from planner._src.planfile import load as load_plan
from planner._src.plots import hbm_timeline, pareto_curve
from planner._src.profiling import ProfileResult, profile
from planner._src.session import Planner, pareto, solve
from planner._src.types import Assignment, Prediction, Verification

__version__ = "0.2.0"

__all__ = [
    "Assignment",
    "HardwareProfile",
    "InfeasibleBudgetError",
    "InvalidArgumentError",
    "LayerGroupsError",
    "NoCheckpointRegionError",
    "NumericsResult",
    "Plan",
    "PlanFileError",
    "PlanOptions",
    "PlanWarning",
    "Planner",
    "PlannerError",
    "PlannerPolicy",
    "Prediction",
    "ProfileResult",
    "SavedPlan",
    "SolverError",
    "TraceError",
    "UnsupportedError",
    "Verification",
    "__version__",
    "check_numerics",
    "hbm_timeline",
    "list_profiles",
    "load_plan",
    "load_profile",
    "pareto",
    "pareto_curve",
    "paste_snippets",
    "profile",
    "solve",
]
