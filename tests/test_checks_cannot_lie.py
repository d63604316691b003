"""Checks that cannot lie (issue 45): a stock answer is judged by what JAX keeps under that
policy, not by the memory model's class count; a failed check always raises a PlanWarning
with what, why and the fix, whichever answer (the planner's or a stock policy) it is."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest

import planner
from planner._src.planning.one_budget import judged_by_jax, warn_unfit
from planner._src.types import Check
from planner._src.verify.kept import CHECK_KEPT


def _step(w, x):
    return jax.grad(lambda w: jnp.mean(jax.checkpoint(lambda w, x: jnp.tanh(x @ w))(w, x)))(w)


@pytest.fixture(scope="module")
def plan():
    args = (jnp.ones((32, 32)), jnp.ones((16, 32)))
    return planner.solve(_step, *args, hbm_gb=1.0, hardware="cpu", compare_stock=False)


def _with(plan, *checks, choice="planner"):
    ver = dataclasses.replace(plan.verification, checks=tuple(checks))
    return dataclasses.replace(plan, verification=ver, choice=choice)


COUNT = Check(
    name=CHECK_KEPT,
    ok=False,
    detail="region 0: JAX keeps 10,904,064 device and 0 host bytes per trip where the plan "
    "counts 10,920,448 and 0",
)


def test_a_stock_answers_kept_check_is_what_jax_keeps_under_it(plan):
    ver = judged_by_jax(_with(plan, COUNT).verification, "everything_saveable")
    (check,) = ver.checks
    assert check.ok and "10,904,064" in check.detail
    assert "JAX's own everything_saveable" in check.detail and "is the judge" in check.detail
    other = Check(name="numerics", ok=False, detail="differ")
    assert judged_by_jax(_with(plan, other).verification, "x").checks == (other,)


@pytest.mark.parametrize("choice", ["planner", "everything_saveable"])
def test_a_failed_check_always_warns_with_what_why_and_fix(plan, choice):
    failed = _with(plan, COUNT, choice=choice)
    with pytest.warns(planner.PlanWarning) as got:
        warn_unfit(failed, failed.budget.usable)
    text = str(got[0].message)
    assert "10,920,448" in text and "Why:" in text and "Fix:" in text


def test_a_passing_plan_does_not_warn(plan, recwarn):
    warn_unfit(plan, plan.budget.usable)
    assert not [w for w in recwarn if issubclass(w.category, planner.PlanWarning)]
