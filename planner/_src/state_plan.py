"""One plan for the whole budget: activations and the optimizer state's placement.

    session = planner.Planner(train_step, params, opt_state, batch, hardware="h200")
    sp = planner.plan_state(session, hbm_gb=60, opt_state_argnum=1, params_argnum=0)
    sp.policy            # jax.checkpoint policy for the layers (as Plan.policy)
    sp.placement         # which optimizer-state leaves live in pinned host memory
    print(sp.summary())  # the budget split: parameters, gradients, optimizer state, activations

The session's trace, graph and cost model are used as they are (the fixed bytes ``F`` are
measured from the step with the whole state in HBM); :func:`state.with_state` prices every
optimizer-state leaf and one CP-SAT model (solve.py) decides the activations and the leaves
together. The step the user runs applies the placement: ``state_shardings`` for the jit's in /
out shardings of the optimizer state (donated), and ``streamed_update`` around the optax
update; :meth:`StatePlan.check` compiles that step and reads its device and host bytes.

With ``build`` (the step as the user applies the placement), the plan is compiled and held
to the budget as ``Planner.plan`` holds its plans: over the budget, the model is corrected by
the compiled figure and solved again. What ``Planner.plan`` does and this does not (yet):
the fill rounds, the stock-policy comparison and the numerics check (tests/test_state.py
compares the streamed update's numbers with the unplanned step's).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from planner._src import state as st
from planner._src import target as targets
from planner._src.cost import build_cost_model, evaluate
from planner._src.emit import emit
from planner._src.errors import InvalidArgumentError, PlannerError
from planner._src.solve import check_solution, solve_assignment
from planner._src.types import Emitted, Prediction, Solution
from planner._src.units import GB

__all__ = ["StatePlan", "plan_state"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StatePlan:
    """The activations' decisions and the optimizer state's placement for one budget."""

    budget_bytes: int  # usable bytes the plan was solved for (session.usable_bytes)
    solution: Solution
    prediction: Prediction  # with the state's terms (cost.evaluate(state_on_host=...))
    emitted: Emitted
    placement: st.StatePlacement
    split: dict  # state.budget_split: part -> {"hbm", "host", "moved"} bytes
    compiled: st.StateCheck | None = None  # the compile of the applied step (build given)
    correction_bytes: int = 0  # the model's correction this plan was solved with (cost.py)
    compiler: Any = dataclasses.field(repr=False, compare=False, default=None)

    @property
    def policy(self):
        return self.emitted.policy

    def check(self, build: Callable[[Any, st.StatePlacement], tuple]) -> st.StateCheck:
        """Compile the step the user applies and read its figures (state.check_compiled).

        ``build(policy, placement) -> (jitted_step, args)``: the user's step under the plan's
        checkpoint policy, jitted with ``state_shardings`` for the optimizer state and
        ``streamed_update`` around its update, and its arguments (the state placed with
        ``jax.device_put(opt_state, shardings)``). Compiled on the session's compiler (a
        deviceless XLA:GPU compile for a GPU target without the GPU).
        """
        jitted, args = build(self.policy, self.placement)
        if self.compiler is not None and self.compiler.kind == "deviceless":
            prog = targets.compile_traced(
                self.compiler, jitted, targets.args_for(self.compiler, args)
            )
            compiled = prog.compiled
        else:
            compiled = jitted.lower(*args).compile()
        return st.check_compiled(compiled, self.placement)

    def summary(self) -> str:
        """The budget split as a text table (MB per device), and the predicted figures."""
        rows = [f"{'':18s}{'HBM MB':>10s}{'host MB':>10s}{'moved/step MB':>15s}"]
        for part, v in self.split.items():
            rows.append(
                f"{part:18s}{v['hbm'] / 1e6:10.1f}{v['host'] / 1e6:10.1f}{v['moved'] / 1e6:15.1f}"
            )
        p = self.prediction
        rows.append(
            f"predicted peak {p.peak_bytes / 1e6:.1f} MB of {self.budget_bytes / 1e6:.1f} MB usable"
            f", host {p.host_bytes / 1e6:.1f} MB, step {p.step_s * 1e3:.3f} ms "
            f"(exposed copies {p.exposed_transfer_s * 1e3:.3f} ms)"
        )
        if self.compiled is not None:
            c = self.compiled
            rows.append(
                f"compiled: device {c.device_bytes / 1e6:.1f} MB, host arguments "
                f"{c.host_argument_bytes / 1e6:.1f} MB (planned {c.planned_host_bytes / 1e6:.1f} MB)"
                f", model correction {self.correction_bytes / 1e6:+.1f} MB"
            )
        rows.append(
            f"optimizer-state leaves on the host: {len(self.placement.on_host)} of "
            f"{sum(1 for x in self.placement.leaves if x.movable)}"
        )
        return "\n".join(rows)


def _arg(args: tuple, argnum: int | None, what: str):
    if argnum is None:
        return None
    if isinstance(argnum, bool) or not isinstance(argnum, int) or not 0 <= argnum < len(args):
        raise InvalidArgumentError(
            f"{what}={argnum!r} does not name one of the step's {len(args)} positional "
            f"arguments.\nFix: pass the index of the argument that holds the {what[:-7]} "
            "(e.g. opt_state_argnum=1 for train_step(params, opt_state, batch))."
        )
    return args[argnum]


def plan_state(
    session,
    hbm_gb: float,
    *,
    opt_state_argnum: int,
    params_argnum: int | None = None,
    build: Callable[[Any, st.StatePlacement], tuple] | None = None,
) -> StatePlan:
    """Solve activations and optimizer-state placement together for ``hbm_gb`` per device.

    ``opt_state_argnum``: which positional argument of the session's step is the optimizer
    state (an optax state pytree); ``params_argnum``: the parameters (for the budget split;
    they stay in HBM, see state.py). ``build`` (see :meth:`StatePlan.check`): when given,
    each plan is compiled as the user applies it and held to the budget: a plan whose
    compiled device bytes exceed it is solved again with the model corrected by the measured
    error (``c' = c + compiled - predicted``, cost.py), at most ``max_rounds`` times (the
    session's option), and a step that does not take the planned host bytes is an error.
    Raises InfeasibleBudgetError when the model fits nothing.
    """
    from planner._src.session import io_bytes, usable_bytes

    args = session._user_args
    opt_state = _arg(args, opt_state_argnum, "opt_state_argnum")
    params = _arg(args, params_argnum, "params_argnum")
    tr, graph, hw = session.trace, session.graph, session.hardware
    budget = usable_bytes(int(hbm_gb * GB), hw, io_bytes(tr), session.compiler.margin)
    correction = 0
    seen = []
    for _ in range(max(1, session.options.max_rounds) if build else 1):
        plan = _solve(session, graph, tr, hw, budget, correction, opt_state, params)
        if build is None:
            return plan
        chk = plan.check(build)
        plan = dataclasses.replace(plan, compiled=chk, correction_bytes=correction)
        if not chk.host_matches:
            raise PlannerError(
                f"The compiled step takes {chk.host_argument_bytes:,} bytes of host arguments, "
                f"the plan puts {chk.planned_host_bytes:,} bytes of optimizer state there.\n"
                "Why: the step that build() returns does not apply the placement (or the "
                "compiler has no host memory space: XLA:CPU reports none).\nFix: jit the step "
                "with state_shardings(opt_state, placement, sharding) as the optimizer state's "
                "in and out shardings, put the state there with jax.device_put, and wrap the "
                "update with streamed_update; check on XLA:GPU (deviceless works)."
            )
        seen.append(chk.device_bytes)
        if chk.device_bytes <= budget:
            return plan
        correction += chk.device_bytes - plan.prediction.peak_bytes
    raise PlannerError(
        f"No plan compiled within {budget / 1e6:.1f} MB usable of {hbm_gb:g} GB in "
        f"{len(seen)} rounds (compiled device bytes: {', '.join(f'{b / 1e6:.1f} MB' for b in seen)})."
        "\nWhy: each round corrected the model by the compiler's measured error and solved "
        "again, and the compiled step stayed over the budget.\nFix: raise hbm_gb, or raise "
        "max_rounds (PlanOptions)."
    )


def _solve(session, graph, tr, hw, budget, correction, opt_state, params) -> StatePlan:
    cost = build_cost_model(
        tr, graph, hw, allow_offload=session.offload, correction_bytes=correction
    )
    # The layer count: the largest trip count of a region (a scanned layer stack).
    layers = max((rc.multiplicity for rc in cost.regions), default=1)
    leaves = st.state_leaves(opt_state, layers=layers, params=params)
    cost = st.with_state(cost, leaves)
    sol = solve_assignment(graph, cost, budget, session.options.solver)
    check_solution(graph, cost, sol)
    pred = evaluate(cost, graph, sol.assignment, state_on_host=sol.state_on_host)
    act = evaluate(cost, graph, sol.assignment)  # the activations' own peak above F
    emitted = emit(sol.assignment, {c.key: c.name for c in graph.classes}, hw)
    placement = st.placement_of(leaves, sol.state_on_host)
    terms = st.evaluate_state(cost.state, sol.state_on_host)
    split = st.budget_split(
        leaves,
        placement,
        activation_bytes=act.peak_bytes - act.fixed_bytes,
        activation_host_bytes=pred.host_bytes - terms.host_bytes,
    )
    return StatePlan(
        budget_bytes=budget,
        solution=sol,
        prediction=pred,
        emitted=emitted,
        placement=placement,
        split=split,
        compiler=session.compiler,
    )
