"""The text report says only what is true, and prints user-derived text as written (new-user
trial 2026-12-04: F4, F6)."""

import dataclasses
import re
import warnings

import jax
import jax.numpy as jnp
import pytest

import planner
from planner._src.report import _text, build_report
from planner._src.units import fmt_bytes


def _step():
    def layer(x, w):
        return jnp.tanh(jnp.tanh(x @ w) @ w.T)

    def loss(ws, x):
        for w in ws:
            x = jax.checkpoint(layer)(x, w)
        return jnp.mean(x**2)

    def step(ws, x):
        g = jax.grad(loss)(ws, x)
        return [w - 1e-3 * d for w, d in zip(ws, g)]

    ws = [jnp.ones((128, 256)) * 0.01 for _ in range(3)]
    return step, (ws, jnp.ones((64, 128)))


@pytest.fixture(scope="module")
def plan():
    step, args = _step()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        s = planner.Planner(step, *args, hardware="cpu", check_numerics=False)
        lo, hi = s.trace.anchor.device_bytes, s.trace.anchor_saved.device_bytes
        return s.plan(hbm_gb=(lo + 0.5 * (hi - lo)) / 1e9)


def test_recomputed_rows_claim_no_false_inequality(plan):
    r = build_report(plan)
    room = max(0, plan.budget_bytes - plan.headroom_bytes - plan.prediction.peak_bytes)
    remat = [row for row in r.rows if row.decision == "remat"]
    assert remat
    for row in remat:
        assert " > " not in row.reason, row.reason
        exceeds = "would exceed" in row.reason
        assert exceeds == (row.nbytes_per_step > room), (row.reason, row.nbytes_per_step, room)
        assert fmt_bytes(room) in row.reason


def test_source_lines_are_not_emoji_codes(plan):
    r = build_report(plan)
    r = dataclasses.replace(r, notes=(*r.notes, "bound at model.py:100:8 [cuda] :smile:"))
    text = _text(r)
    assert "model.py:100:8 [cuda] :smile:" in text
    assert "\U0001f4af" not in text and not re.search(r"[\U0001f300-\U0001faff]", text)
