"""The train state: plan the optimizer state's (and the stacked parameters') place in pinned
host memory with the activations, and the helpers a training step runs to apply it.

    import planner

    plan = planner.solve(train_step, state, batch, hbm_gb=60, hardware="h200",
                         opt_state="auto")        # a TrainState's .opt_state, found
    train_step = plan.apply(train_step)           # memory kinds, donation, streamed update

    # a step the planner cannot rebuild itself (its layers stream the parameters): build=
    plan = session.plan(60, opt_state=1, params=0, build=build)
    shardings = plan.state.shardings(opt_state, device_sharding)   # memory kinds per leaf
    update = plan.state.streamed_update(tx.update)                 # your optax update, streamed

``plan.state`` is a :class:`PlanState`: the placement, the budget split, and the helpers
bound to the placement. The free functions take a :class:`StatePlacement`, for a placement
of your own (``placement_of(state_leaves(opt_state, layers=n), host_paths)``). Written
``planner.state.<name>`` (a train step's own ``state`` variable does not hide it); the
guide: docs/guide/train-state.md.
"""

from planner._src.cost.state import with_state as with_state
from planner._src.planning.state_placement import StatePlan as StatePlan
from planner._src.planning.state_placement import plan_state as plan_state
from planner._src.trainstate import PlanState as PlanState
from planner._src.trainstate import StatePlacement as StatePlacement
from planner._src.trainstate import budget_split as budget_split
from planner._src.trainstate import check_compiled as check_compiled
from planner._src.trainstate import param_shardings as param_shardings
from planner._src.trainstate import placement_of as placement_of
from planner._src.trainstate import state_leaves as state_leaves
from planner._src.trainstate import state_shardings as state_shardings
from planner._src.trainstate import stream_layer_params as stream_layer_params
from planner._src.trainstate import streamed_apply as streamed_apply
from planner._src.trainstate import streamed_apply_updates as streamed_apply_updates
from planner._src.trainstate import streamed_update as streamed_update

__all__ = [
    "PlanState",
    "StatePlacement",
    "StatePlan",
    "budget_split",
    "check_compiled",
    "param_shardings",
    "placement_of",
    "plan_state",
    "state_leaves",
    "state_shardings",
    "stream_layer_params",
    "streamed_apply",
    "streamed_apply_updates",
    "streamed_update",
    "with_state",
]
