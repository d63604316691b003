"""Errors that teach: bad input fails before any work, with what happened, why and the fix."""

import dataclasses
import math

import jax
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


@pytest.mark.slow  # plans (compiles) a Flax model several times
def test_a_budget_is_refused_only_after_the_models_larger_plans_are_compiled():
    """New-user trial 2026-12-06b F3: on JAX 0.10.2's XLA:CPU this optax.MultiSteps step
    compiles to 43.440 MB fully rematerialized and 43.442 MB saving everything (no stock
    policy below), the model puts every plan at 42.6 MB or more, and a 41.0 MB budget was
    refused, while the model's plan for a larger budget compiles to 40.556 MB. Before a
    refusal the planner compiles the model's plans for larger budgets (probe rounds): a
    budget is planned when one fits; a refusal names a budget that plans."""
    from tests.zoo import multisteps
    from tests.zoo._util import STOCK_POLICIES, compile_step, device_bytes, stock_policy

    step, args = multisteps.make()
    stock = {
        p: device_bytes(compile_step(*multisteps.make_with_policy(stock_policy(p)))[0])
        for p in STOCK_POLICIES
    }
    budget = 0.94 * min(stock.values())  # below every stock policy
    try:
        plan = planner.solve(step, *args, hbm_gb=budget / 1e9, hardware="cpu")
    except planner.InfeasibleBudgetError as e:
        assert not jax.__version__.startswith("0.10."), "JAX 0.10.2 plans this budget"
        plan = planner.solve(step, *args, hbm_gb=e.min_feasible_bytes / 1e9, hardware="cpu")
        assert plan.verification.compiled_device_bytes <= e.min_feasible_bytes
    else:
        assert plan.verification.compiled_device_bytes <= budget
        assert plan.verification.ok
        if jax.__version__.startswith("0.10."):  # found by a probe round, not the first solve
            assert any(r.purpose == "probe" for r in plan.rounds)


def test_offload_requested_without_host_memory(monkeypatch):
    import planner._src.planning.inputs as plan_module

    monkeypatch.setattr(plan_module, "host_memory_available", lambda: False)
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
    from planner._src.planning.context import overrules_model
    from planner._src.types import Status, Verification

    budget = 1000
    ver = Verification(
        status=Status.OK if exact else Status.UNVERIFIED,
        compiled=None,
        compiled_device_bytes=budget // 2,
        predicted_peak_bytes=2 * budget,
        usable_bytes=budget,
        checks=(),
        backend="cpu",
        exact=exact,
    )
    assert overrules_model(ver, budget) == exact
    assert not overrules_model(dataclasses.replace(ver, compiled_device_bytes=budget + 1), budget)
