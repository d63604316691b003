"""The train state's runtime: the code users run in training to apply a placement of the
optimizer state and the stacked parameters in pinned host memory.

records.py (the leaves, a placement, the budget split), shardings.py (memory kinds to place
the state in), streamed.py (the update one layer slice at a time, a host parameter's slice
brought in inside the checkpoint), checks.py (a compiled step's host bytes against the
placement), select.py (where the optimizer state and the parameters are in the step's
arguments: named or found), plan_state.py (``plan.state``). What a placement saves and costs is priced by
the cost stage (cost/state.py) and decided by the solver (solve/state.py); formulas:
docs/cost-model.md#the-train-state.
"""

from planner._src.trainstate.checks import StateCheck, check_compiled
from planner._src.trainstate.plan_state import PlanState
from planner._src.trainstate.records import (
    BudgetPart,
    StateApply,
    StateLeaf,
    StatePlacement,
    StateTerms,
    budget_parts,
    budget_split,
    placement_of,
    state_leaves,
)
from planner._src.trainstate.select import StateSelection, detect, resolve
from planner._src.trainstate.shardings import param_shardings, state_shardings
from planner._src.trainstate.streamed import (
    stream_layer_params,
    streamed_apply,
    streamed_apply_updates,
    streamed_update,
)

__all__ = [
    "BudgetPart",
    "PlanState",
    "StateApply",
    "StateCheck",
    "StateLeaf",
    "StatePlacement",
    "StateSelection",
    "StateTerms",
    "budget_parts",
    "budget_split",
    "check_compiled",
    "detect",
    "param_shardings",
    "placement_of",
    "resolve",
    "state_leaves",
    "state_shardings",
    "stream_layer_params",
    "streamed_apply",
    "streamed_apply_updates",
    "streamed_update",
]
