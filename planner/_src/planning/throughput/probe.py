"""One batch size of the search: its session (one trace), its usable budget, and whether a
policy (the planner or a stock policy) compiles within it there."""

from __future__ import annotations

import warnings

from planner._src.cost import build_cost_model
from planner._src.cost.baselines import evaluate_baselines
from planner._src.errors import InfeasibleBudgetError, PlannerError, PlanWarning
from planner._src.planning.context import Timings
from planner._src.planning.planner import Planner
from planner._src.planning.throughput.result import PLANNER
from planner._src.results.plan import Plan
from planner._src.units import GB, fmt_bytes


class Probe:
    """One batch size: its session (one trace), and its rows as they are computed."""

    def __init__(self, batch: int, session: Planner, requested: int):
        self.batch = batch
        self.session = session
        self.usable = session.usable(requested)
        self.cost = build_cost_model(
            session.trace, session.graph, session.hardware, allow_offload=session.offload
        )
        self.baselines = {
            b.name: b for b in evaluate_baselines(session.graph, self.cost, self.usable)
        }
        self.plan: Plan | None = None
        self.plan_error: PlannerError | None = None
        self.plan_warnings: tuple[str, ...] = ()
        self.planned = False

    def stock_bytes(self, name: str) -> int | None:
        s = self.session
        return s.stock.fit_bytes(name, Timings(), s.trace, s.graph, self.cost)

    def fits(self, policy: str, requested: int) -> bool:
        if policy == PLANNER:
            self.run_plan(requested)
            return self.plan is not None and plan_fits(self.plan, self.usable)
        got = self.stock_bytes(policy)
        return got is not None and got <= self.usable

    def run_plan(self, requested: int) -> None:
        if self.planned:
            return
        self.planned = True
        full = self.session.stock.compiled_bytes.get("nothing_saveable")
        if not self.session.offload and full is not None and full > self.usable:
            # Nothing can keep less than full remat without offloading: no plan fits, and
            # the session would compile every stock policy to say so.
            self.plan_error = InfeasibleBudgetError(
                f"No plan fits at batch size {self.batch}: full remat (nothing_saveable) "
                f"compiles to {fmt_bytes(full)}, over the {fmt_bytes(self.usable)} usable, and "
                "without offloading no plan keeps less.\nFix: a larger hbm_gb, a smaller "
                "batch, or allow_offload (where the backend has host memory).",
                budget_bytes=requested,
                min_feasible_bytes=float(full),
            )
            return
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PlanWarning)
            try:
                self.plan = self.session.plan(requested / GB)
            except InfeasibleBudgetError as e:
                self.plan_error = e
        self.plan_warnings = tuple(str(w.message).splitlines()[0] for w in caught)


def plan_fits(plan: Plan, usable: int) -> bool:
    got = plan.verification.compiled_device_bytes
    return got is not None and got <= usable
