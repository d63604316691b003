"""The text report says only what is true, and prints user-derived text as written (new-user
trial 2026-12-04: F4, F6)."""

import dataclasses
import re
import warnings

import jax
import jax.numpy as jnp
import pytest

import planner
from planner._src.report import _text, build_report, report_from_dict
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


def test_stock_table_says_what_each_fits_rests_on(plan):
    """New-user trial F5: the stock table's "fits" mixed predictions and compiled figures
    without saying which. Each row now shows the predicted peak and the compiled figure
    (or "not compiled"), and "fits" names what it rests on, consistent with the plan's
    baselines: compiled rows are held to the compiled figure."""
    r = build_report(plan)
    by_name = {b.name: b for b in plan.baselines}
    assert r.stock_policies[0].name == "planner"
    assert r.stock_policies[0].compiled_gb is not None  # verified plans are compiled
    compiled_rows = 0
    for line in r.stock_policies[1:]:
        b = by_name[line.name]
        if not line.applicable:
            assert line.fits_text == "n/a"
            continue
        if b.compiled_device_bytes is None:
            assert line.compiled_gb is None and line.fits_text.endswith(", predicted")
            assert line.compiled_text == "not compiled"
        else:
            compiled_rows += 1
            assert line.compiled_gb == pytest.approx(b.compiled_device_bytes / 1e9)
            assert line.fits_text == ("yes" if b.fits else "no") + ", compiled"
    assert compiled_rows  # the planner compiles the stock policies it compares against
    text = _text(r)
    assert "compiled by XLA:CPU" in text and "predicted peak" in text
    for line in r.stock_policies:
        assert re.search(rf"{re.escape(line.name)}\s.*{re.escape(line.fits_text)}", text)
    # A plan file written before the compiled column: no claim about what "fits" rests on.
    d = dataclasses.asdict(r)
    for line in d["stock_policies"]:
        del line["compiled_gb"], line["compiled_recorded"]
    old = report_from_dict(d)
    assert {p.fits_text for p in old.stock_policies} <= {"yes", "no", "n/a"}
    assert {p.compiled_text for p in old.stock_policies} == {"not recorded"}
