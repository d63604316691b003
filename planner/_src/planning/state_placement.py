"""``planner.state.plan_state``: a Planner's plan for one budget with the train state placed, as a
:class:`StatePlan` (the decisions, the placement, the budget split as a table).

    session = planner.Planner(train_step, params, opt_state, batch, hardware="h200")
    sp = planner.state.plan_state(session, hbm_gb=60, opt_state=1, params=0)
    sp.policy            # jax.checkpoint policy for the layers (as Plan.policy)
    sp.placement         # which optimizer-state leaves live in pinned host memory
    print(sp.summary())  # the budget split: parameters, gradients, optimizer state, activations
    step = sp.plan.apply(train_step)   # the placement applied

It is ``session.plan(hbm_gb, opt_state=..., ...)`` (the one path: the frontier walk,
the stock comparison, the numerics check; planning/train_state.py), read as a StatePlan; it
uses only the Planner's public members.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from planner._src import trainstate as st
from planner._src.results.plan import Plan
from planner._src.types import CostModel, Emitted, Prediction, Round, Solution
from planner._src.xla import compile as xla_compile
from planner._src.xla import deviceless

__all__ = ["StatePlan", "plan_state"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StatePlan:
    """The activations' decisions and the optimizer state's placement for one budget."""

    usable_bytes: int  # the usable budget the plan was solved for (budget.usable_bytes)
    solution: Solution
    prediction: Prediction  # with the state's terms (cost.evaluate(state_on_host=...))
    emitted: Emitted
    placement: st.StatePlacement
    split: dict  # state.budget_split: part -> {"hbm", "host", "moved"} bytes
    compiled: st.StateCheck | None = None  # the compile of the step as applied
    correction_bytes: int = 0  # the model's correction this plan was solved with (cost.py)
    layers: int = 1  # the slices a stacked leaf is streamed in
    terms: st.StateTerms | None = None  # the model's terms of the leaves on the host
    rounds: tuple[Round, ...] = ()  # one per compile (fit, fill, stock, probe)
    cost: CostModel | None = dataclasses.field(repr=False, compare=False, default=None)
    compiler: Any = dataclasses.field(repr=False, compare=False, default=None)
    plan: Plan | None = dataclasses.field(repr=False, compare=False, default=None)

    @property
    def policy(self):
        return self.emitted.policy

    def check(self, build: Callable[[Any, st.StatePlacement], tuple]) -> st.StateCheck:
        """Compile the step ``build(policy, placement) -> (jitted_step, args)`` returns and
        read its figures against the placement (trainstate.check_compiled), on the
        session's compiler (a deviceless XLA:GPU compile for a GPU target without the GPU)."""
        jitted, args = build(self.policy, self.placement)
        if self.compiler is not None and self.compiler.kind == "deviceless":
            prog = xla_compile.compile_traced(
                self.compiler, jitted, deviceless.args_for(self.compiler, args)
            )
            return st.check_compiled(prog.compiled, self.placement, self.terms)
        return st.check_compiled(jitted.lower(*args).compile(), self.placement, self.terms)

    def summary(self) -> str:
        """The budget split as a text table (MB per device), and the predicted figures."""
        rows = [f"{'':18s}{'HBM MB':>10s}{'host MB':>10s}{'moved/step MB':>15s}"]
        for part, v in self.split.items():
            rows.append(
                f"{part:18s}{v['hbm'] / 1e6:10.1f}{v['host'] / 1e6:10.1f}{v['moved'] / 1e6:15.1f}"
            )
        p = self.prediction
        rows.append(
            f"predicted peak {p.peak_bytes / 1e6:.1f} MB of {self.usable_bytes / 1e6:.1f} MB usable"
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
            rows.append(f"compiled host bytes: {c.status}")
        pl = self.placement
        rows.append(
            f"optimizer-state leaves on the host: {len(pl.opt_paths())} of "
            f"{sum(1 for x in pl.leaves if x.movable and x.role == 'opt')}"
        )
        if any(x.movable and x.role == "param" for x in pl.leaves):
            rows.append(
                f"parameters on the host (streamed per layer slice): {len(pl.param_paths())} of "
                f"{sum(1 for x in pl.leaves if x.movable and x.role == 'param')}"
            )
        return "\n".join(rows)


def plan_state(
    session,
    hbm_gb: float,
    *,
    opt_state=None,
    params=None,
    opt_state_argnum: int | None = None,
    params_argnum: int | None = None,
    build: Callable[[Any, st.StatePlacement], tuple] | None = None,
    stream_params: bool = False,
) -> StatePlan:
    """Solve activations and the optimizer state's placement together for ``hbm_gb`` per
    device: ``session.plan(hbm_gb, opt_state=..., params=..., build=..., stream_params=...)``
    read as a :class:`StatePlan` (module docstring). ``opt_state`` / ``params``: an
    argument index, a path, a selector, or ``opt_state="auto"``; ``opt_state_argnum`` /
    ``params_argnum``: the older spellings. Raises InfeasibleBudgetError where nothing fits."""
    if opt_state is None and opt_state_argnum is None:
        opt_state = "auto"
    plan = session.plan(
        hbm_gb,
        opt_state=opt_state,
        params=params,
        opt_state_argnum=opt_state_argnum,
        params_argnum=params_argnum,
        build=build,
        stream_params=stream_params,
    )
    state = plan.state
    split = {
        x.part: {"hbm": x.hbm_bytes, "host": x.host_bytes, "moved": x.moved_bytes}
        for x in state.parts
    }
    return StatePlan(
        usable_bytes=plan.budget.usable,
        solution=plan.solution,
        prediction=plan.prediction,
        emitted=plan.emitted,
        placement=state.placement,
        split=split,
        compiled=state.compiled,
        correction_bytes=plan.cost.correction_bytes,
        layers=state.layers,
        terms=state.terms,
        rounds=plan.rounds,
        cost=plan.cost,
        compiler=session.compiler,
        plan=plan,
    )
