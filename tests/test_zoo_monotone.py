"""Issue 45's must-show on code we did not write: every runnable zoo model at five close
budgets, asked through ``pareto`` and through separate calls in the opposite order on the
same Planner (whose caches then hold the other order's solves and compiles): the answers
are the same, and a larger budget never gets one predicted slower (planning/walk.py)."""

import dataclasses
import math
import warnings

import pytest

import planner
from planner._src.budget import io_bytes, requested_for
from tests.zoo import MODELS

# Close budgets: the usable bytes 40-48% of the way from the smaller compiled anchor to
# the larger, 2% of that span apart (a fraction of a grid step to a few).
FRACTIONS = (0.40, 0.42, 0.44, 0.46, 0.48)


def _answer(p):
    if isinstance(p, Exception):
        return type(p).__name__
    return p.prediction.step_s, tuple(sorted(p.assignment.as_dict().items())), p.choice


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_zoo_answers_are_monotone_at_five_close_budgets(name, zoo_session):
    reason = MODELS[name].skip_reason()
    if reason is not None:
        pytest.skip(reason)
    _, _, s = zoo_session(name)  # conftest.py: traced and anchored once per process
    lo, hi = sorted((s.trace.anchor.device_bytes, s.trace.anchor_saved.device_bytes))
    io = io_bytes(s.trace)
    budgets = [
        math.ceil(requested_for(lo + f * (hi - lo), s.hardware, io, s.margin)) / 1e9
        for f in FRACTIONS
    ]
    kept = s.options
    s.options = dataclasses.replace(kept, check_numerics=False)  # answers, not numerics
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", planner.PlanWarning)
            front = s.pareto(budgets)
            separate = []
            for b in reversed(budgets):
                try:
                    separate.append(s.plan(b))
                except planner.PlannerError as e:
                    separate.append(e)
            separate.reverse()
    finally:
        s.options = kept
    assert [_answer(p) for p in separate] == [_answer(p) for p in front]
    steps = [p.prediction.step_s for p in front if not isinstance(p, Exception)]
    assert len(steps) == len(budgets), [_answer(p) for p in front]  # full remat fits each
    outside = [p.walk_note for p in front if p.walk_note]
    assert steps == sorted(steps, reverse=True) or outside, (budgets, steps)
