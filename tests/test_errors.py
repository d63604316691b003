"""Errors that teach: bad input fails before any work, with what happened, why and the fix."""

import math

import jax.numpy as jnp
import pytest

import planner
from examples import llama

STEP, ARGS = llama.make_train_step(llama.LlamaConfig(n_layers=2))


@pytest.mark.parametrize("bad, match", [
    (0, "positive, finite"), (-3, "positive, finite"), (math.nan, "positive, finite"),
    (math.inf, "positive, finite"), ("80", "number of gigabytes"), (True, "number of gigabytes"),
    (5e9, "per device, in GB"),
])
def test_bad_budgets(bad, match):
    with pytest.raises(planner.InvalidArgumentError, match=match):
        planner.solve(STEP, *ARGS, hbm_gb=bad)


def test_unknown_hardware_lists_the_profiles():
    with pytest.raises(planner.InvalidArgumentError, match="h200"):
        planner.solve(STEP, *ARGS, hbm_gb=1, hardware="h300")


def test_missing_arguments_and_non_callable():
    with pytest.raises(planner.InvalidArgumentError, match="No example arguments"):
        planner.solve(STEP, hbm_gb=1)
    with pytest.raises(planner.InvalidArgumentError, match="callable train step"):
        planner.solve("step", *ARGS, hbm_gb=1)


def test_budget_below_every_plan_names_the_smallest_feasible_budget():
    with pytest.raises(planner.InfeasibleBudgetError, match=r"pass hbm_gb >= \d") as e:
        planner.solve(STEP, *ARGS, hbm_gb=0.001, hardware="cpu")
    assert 0.001e9 < e.value.min_feasible_bytes < 1e9
    # The named budget is enough: planning at it succeeds.
    plan = planner.solve(STEP, *ARGS, hbm_gb=math.ceil(e.value.min_feasible_bytes / 1e6) / 1e3
                         + 0.002, hardware="cpu")
    assert plan.verification.compiled_device_bytes <= plan.budget_bytes


def test_offload_requested_without_host_memory(monkeypatch):
    monkeypatch.setattr(planner.plan, "_host_memory_available", lambda: False)
    with pytest.raises(planner.UnsupportedError, match="allow_offload=False"):
        planner.solve(STEP, *ARGS, hbm_gb=1, allow_offload=True)


def test_error_hierarchy():
    for cls in (planner.InvalidArgumentError, planner.TraceError, planner.NoCheckpointRegionError,
                planner.InfeasibleBudgetError, planner.SolverError, planner.UnsupportedError,
                planner.PlanFileError):
        assert issubclass(cls, planner.PlannerError)
    assert jnp is not None


@pytest.mark.parametrize("exact", [True, False])
def test_an_estimated_compiled_size_never_overrules_an_infeasible_model(exact):
    """When the model fits nothing, the smallest plan's compiled size may prove it fits after
    all, but only an exact figure: on a backend whose host arrays share device memory it is
    an estimate (host bytes subtracted) and the model's bound stands."""
    from planner.cost import evaluate
    from planner.errors import InfeasibleBudgetError
    from planner.plan import _smallest_plan
    from planner.solve import SolverOptions, min_feasible_bytes, min_peak_assignment
    from planner.verify import STATUS_OK, Verification
    from synthetic import random_problem

    graph, cost = random_problem(3, n_nodes=8, n_classes=4)
    opts = SolverOptions(time_limit_s=5)
    need = min_feasible_bytes(graph, cost, opts)
    budget = int(need * 0.9)

    def attempt(cost_, assignment):
        pred = evaluate(cost_, graph, assignment)
        ver = Verification(status=STATUS_OK, compiled=None, compiled_device_bytes=budget // 2,
                           predicted_peak_bytes=pred.peak_bytes, budget_bytes=budget, checks=(),
                           backend="cpu", exact=exact)
        return assignment, pred, None, ver

    error = InfeasibleBudgetError("model", budget_bytes=budget, min_feasible_bytes=need)
    if exact:
        sol, pred, _, ver = _smallest_plan(graph, cost, opts, budget, attempt, error)
        assert ver.compiled_device_bytes <= budget and sol.budget_bytes == budget
    else:
        with pytest.raises(InfeasibleBudgetError, match="an estimate there") as e:
            _smallest_plan(graph, cost, opts, budget, attempt, error)
        # The need named is the model's peak of the smallest plan (the estimate is lower).
        smallest = evaluate(cost, graph, min_peak_assignment(graph, cost, opts)[0]).peak_bytes
        assert e.value.min_feasible_bytes == smallest >= need > budget
