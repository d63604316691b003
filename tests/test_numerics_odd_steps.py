"""The numerics check on steps nobody here wrote (issue 45): a step that also returns
non-array leaves (a str, a Python number, None, an object) has them compared as values, so a
correct plan passes; a step whose traces differ (it reads a NumPy random draw or a Python
global it changes while tracing) is reported as such, never judged with a tolerance its
constants widened (it grew to 67% of a leaf's scale and passed a 25% difference)."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import planner
from planner._src.verify.numerics import compare, traces_differ

ARGS = (jnp.ones((32, 32)) * 0.1, jnp.ones((16, 32)))


def _grad(w, x, c=0.0):
    return jax.grad(
        lambda w: jnp.mean(jax.checkpoint(lambda w, x: jnp.tanh(x @ w + c))(w, x) ** 2)
    )(w)


class Tag:  # an object without its own ==: each trace makes another instance
    pass


class Eq:
    def __init__(self, n):
        self.n = n

    def __eq__(self, other):
        return isinstance(other, Eq) and other.n == self.n

    __hash__ = None


@pytest.mark.parametrize(
    "extra",
    ["step 3", 3, 2.5, None, Tag(), Eq(1)],
    ids=["str", "int", "float", "None", "object", "object with __eq__"],
)
def test_non_array_outputs_are_compared_as_values(extra):
    def step(w, x):
        return _grad(w, x), extra

    with warnings.catch_warnings():
        warnings.simplefilter("error", planner.PlanWarning)
        plan = planner.solve(
            step, *ARGS, hbm_gb=1.0, hardware="cpu", compare_stock=False, check_numerics=True
        )
    assert plan.numerics.checked and plan.numerics.ok, plan.numerics.detail
    assert plan.verification.status != "numerics differ"


def test_value_leaves_that_differ_are_a_difference():
    g = jnp.ones(3)
    assert [lf.ok for lf in compare((g, "a"), (g, "a"), 1e-7)] == [True, True]
    assert [lf.ok for lf in compare((g, "a"), (g, "b"), 1e-7)] == [True, False]
    assert [lf.ok for lf in compare((g, 3), (g, 3.0), 1e-7)] == [True, False]  # int vs float
    assert [lf.ok for lf in compare((g, Eq(1)), (g, Eq(2)), 1e-7)] == [True, False]


def _random_constant_step(w, x):
    # A NumPy draw while tracing: each trace bakes another constant into the program.
    return _grad(w, x, c=np.float32(np.random.uniform(-1.0, 1.0)))


STATE = {"calls": 0}


def _global_step(w, x):
    STATE["calls"] += 1  # a global the step changes while tracing
    return _grad(w, x, c=0.25 * STATE["calls"])


@pytest.mark.parametrize("step", [_random_constant_step, _global_step])
def test_a_step_whose_traces_differ_is_reported_not_judged(step):
    with pytest.warns(planner.PlanWarning, match="other outputs each time it is traced"):
        plan = planner.solve(
            step, *ARGS, hbm_gb=1.0, hardware="cpu", compare_stock=False, check_numerics=None
        )
    res = plan.numerics
    assert not res.checked and "other outputs each time it is traced" in res.detail
    assert "Fix: pass such values as arguments" in res.detail
    assert res.leaves == () and res.tolerance == 0.0  # no widened tolerance, no verdict
    # the public verb says the same
    again = planner.check_numerics(plan, step, *ARGS)
    assert not again.checked and "traced" in again.detail


def test_a_deterministic_step_is_not_called_trace_dependent():
    from planner._src.verify.numerics import run_reference

    ref = run_reference(_grad, ARGS)
    assert traces_differ(_grad, ARGS, ref, 1.2e-7) == ""


def test_the_trace_check_compares_programs_before_running_a_trace_of_its_own():
    """Issue 46: the trace check lowers the step again and compares its program, constants
    included, with the reference's; only where they differ (or the text cannot tell) does it
    compile and run a trace of its own. A step that bakes another constant into each trace
    never passes on its text; where closed-over arrays are arguments of the executable, the
    text cannot tell."""
    from planner._src.verify.numerics.runs import _compiled_reference, _same_program_again

    exe = _compiled_reference(_grad, ARGS)
    assert exe.program is not None and "stablehlo" in exe.program
    assert _same_program_again(_grad, ARGS, exe)
    for step in (_random_constant_step, _global_step):
        assert not _same_program_again(step, ARGS, _compiled_reference(step, ARGS))
    # closed-over arrays passed as arguments of the executable (JAX's const_args, where
    # jax_use_simplified_jaxpr_constants makes them): their values are not in the text
    from types import SimpleNamespace

    from planner._src.xla.adapter import lowered_program

    lowered = jax.jit(_grad).trace(*ARGS).lower()
    assert lowered_program(lowered) == lowered.as_text()
    hoisted = SimpleNamespace(_lowering=SimpleNamespace(const_args=[ARGS[0]]), as_text=str)
    assert lowered_program(hoisted) is None
    assert lowered_program(SimpleNamespace(as_text=str)) is None  # a lowering of another kind
