"""Errors that teach: bad input fails before any work, with what happened, why and the fix."""

import dataclasses
import math

import pytest

import planner
from examples import llama

STEP, ARGS = llama.make_train_step(llama.LlamaConfig(n_layers=2))


@pytest.mark.parametrize(
    "bad, match",
    [
        (0, "positive, finite"),
        (-3, "positive, finite"),
        (math.nan, "positive, finite"),
        (math.inf, "positive, finite"),
        ("80", "number of gigabytes"),
        (True, "number of gigabytes"),
        (5e9, "per device, in GB"),
    ],
)
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


@pytest.mark.slow
def test_budget_below_every_plan_names_the_smallest_feasible_budget():
    with pytest.raises(planner.InfeasibleBudgetError, match=r"pass hbm_gb >= \d") as e:
        planner.solve(STEP, *ARGS, hbm_gb=0.001, hardware="cpu")
    assert 0.001e9 < e.value.min_feasible_bytes < 1e9
    # The named budget is enough: planning at it succeeds.
    plan = planner.solve(
        STEP,
        *ARGS,
        hbm_gb=math.ceil(e.value.min_feasible_bytes / 1e6) / 1e3 + 0.002,
        hardware="cpu",
    )
    assert plan.verification.compiled_device_bytes <= plan.budget_bytes


def test_offload_requested_without_host_memory(monkeypatch):
    import planner._src.session as plan_module

    monkeypatch.setattr(plan_module, "_host_memory_available", lambda: False)
    with pytest.raises(planner.UnsupportedError, match="allow_offload=False"):
        planner.solve(STEP, *ARGS, hbm_gb=1, allow_offload=True, compiler="local")


def test_error_hierarchy():
    for cls in (
        planner.InvalidArgumentError,
        planner.TraceError,
        planner.NoCheckpointRegionError,
        planner.InfeasibleBudgetError,
        planner.SolverError,
        planner.UnsupportedError,
        planner.PlanFileError,
    ):
        assert issubclass(cls, planner.PlannerError)


@pytest.mark.parametrize("exact", [True, False])
def test_an_estimated_compiled_size_never_overrules_an_infeasible_model(exact):
    """When the model fits nothing, the smallest plan's compiled size may prove it fits after
    all, but only an exact figure: on a backend whose host arrays share device memory it is
    an estimate (host bytes subtracted) and the model's bound stands."""
    from planner._src.session import overrules_model
    from planner._src.verify import STATUS_OK, STATUS_UNVERIFIED, Verification

    budget = 1000
    ver = Verification(
        status=STATUS_OK if exact else STATUS_UNVERIFIED,
        compiled=None,
        compiled_device_bytes=budget // 2,
        predicted_peak_bytes=2 * budget,
        budget_bytes=budget,
        checks=(),
        backend="cpu",
        exact=exact,
    )
    assert overrules_model(ver, budget) == exact
    assert not overrules_model(dataclasses.replace(ver, compiled_device_bytes=budget + 1), budget)
