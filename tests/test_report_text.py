"""The text report says only what is true, and prints user-derived text as written (new-user
trial 2026-12-04: F4, F6)."""

import dataclasses
import re
import warnings

import jax
import jax.numpy as jnp
import pytest

import planner
from planner._src.results.report import build_report, report_from_dict
from planner._src.results.report.text import render_text
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
    text = render_text(r)
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
            assert line.compiled_gb is None
            assert line.fits_text.endswith(", predicted (not compiled)")
            assert line.compiled_text == "not compiled"
        else:
            compiled_rows += 1
            assert line.compiled_gb == pytest.approx(b.compiled_device_bytes / 1e9)
            # which compiler said so (issue 45)
            assert line.fits_text == ("yes" if b.fits else "no") + ", compiled by XLA:CPU"
    assert compiled_rows  # the planner compiles the stock policies it compares against
    text = render_text(r)
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


def test_report_says_where_the_planning_time_went(plan):
    """Issue 14 (requirement 6): the report sums the plan's timings per stage, to the total
    the session spent, and lists the trace stage's own parts (the anchors' compiles, the
    compiler probes of a Python-loop step)."""
    r = build_report(plan)
    total = sum(s for _, s in plan.timings)
    top = [x for x in r.planning_time if not x[0].startswith("  ")]
    assert sum(s for _, s, _ in top) == pytest.approx(total)
    assert top[0][0] == "trace stage (once per session)"
    parts = {w.strip(): s for w, s, _ in r.planning_time if w.startswith("  ")}
    for want in (
        "trace the step",
        "compile the full-remat anchor",
        "compile the save-everything anchor",
        "compiler probe: hoisted recompute",
    ):
        assert want in parts, parts
    stage = top[0][1]
    assert all(s <= stage * 1.01 + 0.05 for s in parts.values()), (stage, parts)
    text = render_text(r)
    if sum(parts.values()) > stage * 1.01 + 0.05:  # the anchors compiled side by side
        assert "the parts overlap" in text.replace("\n  ", " ")
    assert f"planning time {total:.1f} s: trace stage (once per session)" in text
    assert "trace stage: trace the step" in text
    assert report_from_dict(json_round_trip(r)).planning_time == r.planning_time


def json_round_trip(r):
    import json

    return json.loads(json.dumps(dataclasses.asdict(r)))


def test_planning_time_sums_each_stage():
    from planner._src.results.report.timing import planning_time

    got = planning_time(
        [
            ("trace + anchor compiles", 10.0),
            ("graph", 0.01),
            ("solve (walk step 1)", 1.0),
            ("lower 2 stock policies; compiled in the background, 4 at once", 0.5),
            ("verify (plan)", 2.0),
            ("solve (walk step 2)", 0.5),
            ("verify (walk step 2)", 2.5),
            ("verify (stock dots_saveable)", 3.0),
        ],
        [("trace the step", 1.0), ("compile the full-remat anchor", 8.0)],
    )
    assert got == (
        ("trace stage (once per session)", 10.0, 1),
        ("  trace the step", 1.0, 1),
        ("  compile the full-remat anchor", 8.0, 1),
        ("graph", 0.01, 1),
        ("CP-SAT solves", 1.5, 2),
        ("stock policies traced and lowered (compiled beside the plan)", 0.5, 1),
        ("the plan's verify compiles", 4.5, 2),
        ("stock policies' verify compiles (waiting for those compiled beside)", 3.0, 1),
    )


def test_report_offers_jax_persistent_compilation_cache_and_never_sets_it(plan, tmp_path):
    """Issue 46 (requirement 1): with no persistent compilation cache configured, the report
    says the compiles run again in a new process and gives the one line that keeps them;
    with one configured, it names where they are kept. Building the report changes no JAX
    setting."""
    from planner._src.results.report.timing import compile_seconds, persistent_cache_note

    before = jax.config.jax_compilation_cache_dir
    assert (
        compile_seconds(
            [
                ("trace + anchor compiles", 2.0),
                ("solve (walk step 1)", 5.0),
                ("verify (plan)", 1.5),
                ("verify (stock x)", 0.5),
            ]
        )
        == 4.0
    )
    try:
        jax.config.update("jax_compilation_cache_dir", None)
        off = persistent_cache_note(4.0)
        assert "persistent cache is off" in off and "(4.0 s here)" in off
        assert 'jax.config.update("jax_compilation_cache_dir", "/path/to/cache")' in off
        assert persistent_cache_note(0.5) == ""  # too little to be worth a line
        r = build_report(plan)
        want = persistent_cache_note(compile_seconds(plan.timings))
        assert r.compile_cache == want
        if want:
            assert want[0].lower() + want[1:30] in render_text(r)
        assert jax.config.jax_compilation_cache_dir is None
        jax.config.update("jax_compilation_cache_dir", str(tmp_path))
        on = build_report(plan).compile_cache
        assert on.startswith("Compilation cache: JAX's persistent cache keeps these compiles in")
        assert str(tmp_path) in on
        assert report_from_dict(json_round_trip(build_report(plan))).compile_cache == on
    finally:
        jax.config.update("jax_compilation_cache_dir", before)
