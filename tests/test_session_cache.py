"""planner.solve's session cache (planning/sessions.py) and a Planner's plans per budget: a
second call on the same step pays one trace (the fingerprint) and answers exactly as a cold
call does; another step, another argument shape, other options or other values under the
numerics check find no Planner; ``session_cache=0`` keeps none."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import planner
from planner._src.budget import io_bytes, requested_for
from planner._src.planning import sessions
from planner._src.xla.fingerprint import step_fingerprint

DEPTH, WIDTH, BATCH = 4, 64, 256


def _layer(w, x):
    return jnp.tanh(jnp.sin(x @ w) * 1.5) + x


def _make_step(calls: list):
    def loss(ws, x):
        for w in ws:
            x = jax.checkpoint(_layer)(w, x)
        return jnp.mean(x**2)

    def step(ws, x):
        calls.append(1)  # once per trace of the step (JAX runs the Python function to trace)
        value, g = jax.value_and_grad(loss)(ws, x)
        return [w - 1e-3 * gw for w, gw in zip(ws, g)], value

    return step


def _abstract(batch=BATCH):
    ws = [jax.ShapeDtypeStruct((WIDTH, WIDTH), jnp.float32) for _ in range(DEPTH)]
    return ws, jax.ShapeDtypeStruct((batch, WIDTH), jnp.float32)


def _concrete(seed=0):
    keys = jax.random.split(jax.random.key(seed), DEPTH + 1)
    ws = [jax.random.normal(k, (WIDTH, WIDTH)) / WIDTH**0.5 for k in keys[:-1]]
    return ws, jax.random.normal(keys[-1], (BATCH, WIDTH))


def _budget_gb(args) -> float:
    """A budget between the two anchors (full remat fits, saving everything does not)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        s = planner.Planner(_make_step([]), *args, hardware="cpu", check_numerics=False)
    lo, hi = s.trace.anchor.device_bytes, s.trace.anchor_saved.device_bytes
    return requested_for((lo + hi) / 2, s.hardware, io_bytes(s.trace), s.margin) / 1e9


def _answer(plan):
    v = plan.verification
    return (
        plan.choice,
        plan.assignment,
        plan.prediction.step_s,
        plan.prediction.peak_bytes,
        v.compiled_device_bytes,
        v.status,
        plan.emitted.policy_source,
        plan.emitted.xla_flags,
    )


def _solve(step, args, gb, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        return planner.solve(step, *args, hbm_gb=gb, hardware="cpu", **kw)


@pytest.fixture(autouse=True)
def _empty_cache():
    sessions.clear()
    yield
    sessions.clear()


def test_second_solve_traces_once_and_answers_as_a_cold_call():
    args = _abstract()
    gb = _budget_gb(args)
    calls: list = []
    step = _make_step(calls)
    first = _solve(step, args, gb)
    cold_traces = len(calls)
    assert cold_traces > 2  # the fingerprint, the trace stage, the anchors, the verify
    assert first.timings[0][0] == sessions.MISS

    calls.clear()
    again = _solve(step, args, gb)
    assert len(calls) == 1  # the fingerprint only: no trace stage, anchor or verify again
    assert _answer(again) == _answer(first)
    assert [what for what, _ in again.timings] == [
        sessions.HIT,
        again.timings[1][0],
    ] and again.timings[1][0].startswith("plan reused")

    # A cold call (no cache at all) gives the same answer, tracing everything again.
    calls.clear()
    cold = _solve(step, args, gb, session_cache=0)
    assert len(calls) == cold_traces - 1  # all but the fingerprint
    assert _answer(cold) == _answer(first)
    assert sessions.kept() == 0  # session_cache=0 keeps none (and lets the others go)


def test_a_new_budget_on_a_found_planner_reuses_the_trace_and_matches_cold():
    args = _abstract()
    gb = _budget_gb(args)
    calls: list = []
    step = _make_step(calls)
    _solve(step, args, gb)
    calls.clear()
    other = _solve(step, args, gb * 0.97)
    # no trace stage again: the fingerprint, then only the new budget's verify traces
    stages = [what for what, _ in other.timings]
    assert stages[0] == sessions.HIT
    assert not any(w.startswith(("trace + anchor", "graph", sessions.MISS)) for w in stages)
    assert any(w.startswith("verify (") for w in stages)  # this budget's own stages
    found_traces = len(calls)
    calls.clear()
    cold = _solve(step, args, gb * 0.97, session_cache=0)
    assert _answer(other) == _answer(cold)
    assert len(calls) > found_traces  # the cold call traced the trace stage and anchors too


def test_another_fingerprint_finds_no_planner():
    gb = _budget_gb(_abstract())
    calls: list = []
    step = _make_step(calls)
    _solve(step, _abstract(), gb)
    other_args = _abstract(batch=BATCH // 2)
    assert step_fingerprint(step, other_args).key != step_fingerprint(step, _abstract()).key
    calls.clear()
    plan = _solve(step, other_args, gb)
    assert plan.timings[0][0] == sessions.MISS and len(calls) > 2
    assert sessions.kept() == 2

    # Another program with the same arguments: another fingerprint, another Planner.
    def other_step(ws, x):
        return _make_step([])(ws, x * 2.0)

    assert step_fingerprint(other_step, _abstract()).key != step_fingerprint(step, _abstract()).key
    assert _solve(other_step, _abstract(), gb).timings[0][0] == sessions.MISS
    assert sessions.kept() == 2  # the default bound: the least recently used went


def test_other_options_or_hardware_find_no_planner():
    args = _abstract()
    gb = _budget_gb(args)
    step = _make_step([])
    _solve(step, args, gb)
    assert _solve(step, args, gb, fill_rounds=0).timings[0][0] == sessions.MISS
    hw = planner.PlanOptions()
    key = sessions.session_key(step, args, planner.hardware.load_profile("cpu"), hw).key
    assert key != sessions.session_key(step, args, planner.hardware.load_profile("h200"), hw).key
    # the cache's own size is no part of the key
    assert (
        key
        == sessions.session_key(
            step, args, planner.hardware.load_profile("cpu"), planner.PlanOptions(session_cache=5)
        ).key
    )


def test_values_find_the_planner_only_where_the_numerics_check_runs_the_step():
    step, cpu = _make_step([]), planner.hardware.load_profile("cpu")
    on, off = planner.PlanOptions(), planner.PlanOptions(check_numerics=False)
    a, same, b = _concrete(0), _concrete(0), _concrete(1)
    ka, ksame, kb = (sessions.session_key(step, x, cpu, on) for x in (a, same, b))
    # One key for the step; the values decide whether its Planner answers.
    assert ka.key == ksame.key == kb.key
    sessions.keep(ka, "planner of a", 2)
    assert sessions.find(ka) == "planner of a"  # the same arrays: no comparison needed
    assert sessions.find(ksame) == "planner of a"  # equal values in other arrays
    assert sessions.find(kb) is None  # other values: the numerics check would differ
    # Without the numerics check, values do not matter.
    koff = sessions.session_key(step, a, cpu, off)
    assert koff.values is None and koff.key != ka.key
    sessions.keep(koff, "planner without check", 2)
    assert sessions.find(sessions.session_key(step, b, cpu, off)) == "planner without check"

    # A closed-over array is a value of the step too.
    def closing(v):
        return lambda ws, x: step(ws, x + v)

    k1 = sessions.session_key(closing(jnp.ones((WIDTH,))), a, cpu, on)
    k2 = sessions.session_key(closing(jnp.zeros((WIDTH,))), a, cpu, on)
    sessions.keep(k1, "closing over ones", 2)
    assert k1.key == k2.key and sessions.find(k2) is None


def test_same_values_compares_on_the_device_never_widening():
    x = jnp.arange(6.0)
    assert sessions.same_values((x,), (x,))
    assert sessions.same_values((x, 3, "a"), (jnp.arange(6.0), 3, "a"))
    assert not sessions.same_values((x,), (x.at[5].set(7.0),))
    assert not sessions.same_values((x,), (x.astype(jnp.float16),))
    nan = jnp.array([jnp.nan])
    assert sessions.same_values((nan,), (nan,))  # the same object
    assert not sessions.same_values((nan,), (jnp.array([jnp.nan]),))  # NaN: plan anew
    assert not sessions.same_values((x,), (x, x))
    assert not sessions.same_values((x,), (None,)) and not sessions.same_values(None, (x,))
    assert sessions.same_values((np.ones(3),), (np.ones(3),))
    assert not sessions.same_values((np.ones(3),), (x[:3],))
    k = jax.random.key(0)
    assert sessions.same_values((k,), (jax.random.key(0),))
    assert not sessions.same_values((k,), (jax.random.key(1),))


def test_equal_values_in_new_arrays_find_the_planner_with_the_same_answer():
    step, a = _make_step([]), _concrete(0)
    gb = _budget_gb(_abstract())
    cold = _solve(step, a, gb)
    again = _solve(step, _concrete(0), gb)
    assert again.timings[0][0] == sessions.HIT
    assert _answer(again) == _answer(cold)
    assert _solve(step, _concrete(1), gb).timings[0][0] == sessions.MISS


def test_a_step_that_does_not_trace_is_not_cached_and_raises_the_planners_error():
    def broken(ws, x):
        raise ValueError("not this step")

    with pytest.raises(planner.PlannerError):
        _solve(broken, _abstract(), 1.0)
    assert sessions.kept() == 0


def test_session_cache_must_be_a_count():
    with pytest.raises(planner.InvalidArgumentError, match="session_cache"):
        planner.PlanOptions(session_cache=-1)
    with pytest.raises(planner.InvalidArgumentError, match="session_cache"):
        planner.PlanOptions(session_cache=True)


def test_the_numerics_reference_compiles_the_step_once_and_runs_the_anchor():
    """The reference and its run on inputs moved by one ulp are one executable; the full-remat
    run is the trace stage's anchor: two traces of the step where there were four (the
    executable's, and the one that checks the step's traces agree), the same outputs as each
    run compiled on its own."""
    from planner._src.verify import numerics
    from planner._src.verify.numerics import runs

    calls: list = []
    step, args = _make_step(calls), _concrete()
    session = planner.Planner(step, *args, hardware="cpu")
    anchor = session.numerics.full_remat
    assert anchor is not None  # kept by the trace stage for the check
    calls.clear()
    ref, (moved, remat), differ = numerics.reference_runs(
        step, args, ("float32",), full_remat=anchor
    )
    assert differ == "" and len(calls) == 2
    eps = numerics.coarsest_eps(args, ref, computed=("float32",))
    for got, want in (
        (ref, runs.run_reference(step, args)),
        (moved, runs.run_reference(step, runs.one_ulp_up(args, eps))),
        (remat, runs.run_planned(step, args, runs._full_remat)),
    ):
        assert jax.tree.all(jax.tree.map(lambda a, b: bool((a == b).all()), got, want))
    # abstract arguments or check_numerics=False: no executable kept
    off = planner.Planner(step, *args, hardware="cpu", check_numerics=False)
    assert off.numerics.full_remat is None


def test_a_program_lowered_again_the_same_way_is_compiled_once():
    """xla.compile.CompileMemo: the same lowered text and options give the executable
    compiled before; other options or another program compile anew; no memo, no reuse."""
    from planner._src.xla import compile as xla_compile
    from planner._src.xla import memo as xla_memo

    def make():
        def f(x):
            return jnp.tanh(x) * 2

        return f

    f, x = make(), jnp.ones((8, 8))
    memo = xla_memo.CompileMemo(size=2)
    with xla_memo.compile_memo(memo):
        a = xla_compile.compile_lowered(jax.jit(f).lower(x))
        b = xla_compile.compile_lowered(jax.jit(make()).lower(x))  # another function object
        assert b is a and memo.hits == 1
        c = xla_compile.compile_lowered(jax.jit(f).lower(x), {"xla_cpu_enable_fast_math": True})
        assert c is not a
        d = xla_compile.compile_lowered(jax.jit(jnp.sin).lower(x))
        assert d is not a and memo.hits == 1
        # bounded: the least recently used (a) went
        assert xla_compile.compile_lowered(jax.jit(f).lower(x)) is not a
    assert xla_compile.compile_lowered(jax.jit(f).lower(x)) is not a  # outside: compiles
    assert bool((a(x) == f(x)).all())


def test_a_planners_identical_programs_compile_once_with_the_same_answers():
    """A Planner's budgets whose plans are one program: the second budget's verify takes the
    first's compile (the memo's hit), and its answer is a cold Planner's."""
    args = _abstract()
    step = _make_step([])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        s = planner.Planner(step, *args, hardware="cpu")
        hi = s.trace.anchor_saved.device_bytes
        big = requested_for(hi * 3, s.hardware, io_bytes(s.trace), s.margin) / 1e9
        first = s.plan(big)
        hits = s.subject.compiles.hits
        second = s.plan(big * 1.5)  # saves everything too: the same program
        cold = planner.Planner(step, *args, hardware="cpu").plan(big * 1.5)
    assert first.assignment == second.assignment
    assert s.subject.compiles.hits > hits
    assert _answer(second) == _answer(cold)


def test_pareto_finds_the_planner_too():
    args = _abstract()
    gb = _budget_gb(args)
    calls: list = []
    step = _make_step(calls)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        first = planner.pareto(step, *args, hbm_gb=[gb, gb * 1.2], hardware="cpu")
        calls.clear()
        again = planner.pareto(step, *args, hbm_gb=[gb, gb * 1.2], hardware="cpu")
    assert len(calls) == 1
    assert [_answer(p) for p in again] == [_answer(p) for p in first]
    assert all(p.timings[0][0] == sessions.HIT for p in again)


def test_a_plan_found_again_warns_as_its_first_planning_did(monkeypatch):
    import planner._src.planning.planner as P

    real = P.plan_budget

    def warning(*a, **k):
        warnings.warn("planted: a warning of this budget's planning", planner.PlanWarning, 2)
        return real(*a, **k)

    monkeypatch.setattr(P, "plan_budget", warning)
    args = _abstract()
    gb = _budget_gb(args)
    step = _make_step([])
    for _ in range(2):  # cold, then found with its plan: the same warning, once each
        with pytest.warns(planner.PlanWarning, match="planted") as caught:
            planner.solve(step, *args, hbm_gb=gb, hardware="cpu")
        assert sum("planted" in str(w.message) for w in caught) == 1
