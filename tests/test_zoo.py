"""The planner on code it has never seen: every runnable zoo model (tests/zoo, written as
each library's users write them), planned at three budgets between the compiled sizes of
full remat and save-everything. Each answer compiles within its budget (or, where host
arrays share device memory on this backend, is an estimate within it: "unverified"), is no
slower (predicted) than any stock policy that compiles within the budget, and passes its
checks. ``benchmarks/zoo.py`` writes the same as a table to benchmarks/results/."""

import math
import os
import sys
import warnings

import pytest

import planner
from planner._src.budget import io_bytes, requested_for
from planner._src.policies import STOCK
from planner._src.types import Status

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.zoo import MODELS  # noqa: E402

FRACTIONS = (0.1, 0.5, 1.0)


def zoo_budgets(session) -> list[int]:
    """Three budgets (bytes) whose usable part (less the profile's allocator headroom and, on
    GPU, XLA's own limit) runs from just above the smaller of the two compiled anchors to the
    larger: a stock policy compiles within each, so none may be called infeasible. The usable
    part is what the planner leaves of a budget (``session.usable_bytes``), the deviceless
    compiler's bound included (a deviceless H200 target leaves room for what the GPU's own
    compile adds: without it the first budget of a deviceless run was below both anchors, and
    the planner rightly refused it, 2026-12-05)."""
    lo = session.trace.anchor.device_bytes
    hi = session.trace.anchor_saved.device_bytes
    a, b = min(lo, hi), max(lo, hi)
    io = io_bytes(session.trace)
    margin = session.margin
    return [
        math.ceil(requested_for(a + f * (b - a), session.hardware, io, margin)) + 1024
        for f in FRACTIONS
    ]


def check_answer(plan, requested: int) -> None:
    v = plan.verification
    assert v.status in (Status.OK, Status.UNVERIFIED), plan.report("markdown")
    assert v.compiled_device_bytes <= plan.budget_bytes - plan.headroom_bytes, v
    fitting = [
        b
        for b in plan.baselines
        if b.name in STOCK
        and b.applicable
        and b.compiled_device_bytes is not None
        and b.compiled_device_bytes <= plan.budget_bytes - plan.headroom_bytes
    ]
    assert fitting, "a compiled anchor fits every zoo budget"
    best = min(b.prediction.step_s for b in fitting)
    assert plan.prediction.step_s <= best * (1 + 1e-9), (plan.choice, plan.prediction.step_s, best)
    if plan.choice == "planner":
        assert all(c.ok for c in v.checks), [c.detail for c in v.checks if not c.ok]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_zoo_model_is_planned_at_three_budgets(name, zoo_session):
    entry = MODELS[name]
    reason = entry.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    _, _, session = zoo_session(name)  # conftest.py: traced and anchored once per process
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)  # the checks are asserted below
        plans = []
        for requested in zoo_budgets(session):
            plans.append(session.plan(requested / 1e9))
            check_answer(plans[-1], requested)
    # A step with one checkpointed function (every call site bound from one line) gets one
    # policy: plan.policy never raises. (The plan at the last budget, made above: planning
    # that budget again gave the same plan and one more verify compile.)
    if len({r.site_key for r in session.sites.regions}) == 1:
        assert plans[-1].policy is not None
