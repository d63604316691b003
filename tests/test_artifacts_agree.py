"""Every emitted artifact agrees with the decisions, and the report's words with what it
shows (issue 45): the MaxText block says why beside a value the table does not show; a stock
answer's report says no CP-SAT solve made it and where its reason is; small sizes print in
MB; the stock table's "fits" names the compiler or says it was predicted."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest

import planner
from planner._src.emit.emit import maxtext_yaml
from planner._src.planning.choose import _of
from planner._src.results.report import build_report
from planner._src.results.report.model import PolicyLine
from planner._src.types import Assignment


def test_a_recomputed_decoder_layer_input_says_why_it_reads_device():
    yaml = pytest.importorskip("yaml")
    names = {"c0": "decoder_layer_input", "c1": "mlpwi"}
    text = maxtext_yaml(Assignment.of({"c0": "remat", "c1": "remat"}), names)
    line = next(x for x in text.splitlines() if x.startswith("decoder_layer_input"))
    assert "'device'" in line and "# the plan recomputes it" in line
    assert yaml.safe_load(text)["decoder_layer_input"] == "device"
    saved = maxtext_yaml(Assignment.of({"c0": "save", "c1": "remat"}), names)
    assert "#" not in next(x for x in saved.splitlines() if x.startswith("decoder_layer_input"))


def test_small_sizes_in_choices_print_in_mb_and_apart():
    assert _of(74_000_000, 74_300_000) == "74.000 MB of 74.300 MB"
    a, b = _of(74_000_000, 74_000_001).split(" of ")
    assert a != b  # never two equal figures
    assert _of(40e9, 80e9) == "40.000 GB of 80.000 GB"


def test_fits_names_the_compiler_or_says_predicted():
    line = PolicyLine(
        name="dots_saveable", peak_gb=0.04, host_gb=0, step_ms=1, fits=True, applicable=True
    )
    assert line.fits_text == "yes, predicted (not compiled)"
    compiled = dataclasses.replace(line, compiled_gb=0.05, fits=False, compiler="XLA:GPU")
    assert compiled.fits_text == "no, compiled by XLA:GPU"


def _step(w, x):
    return jax.grad(lambda w: jnp.mean(jax.checkpoint(lambda w, x: jnp.tanh(x @ w))(w, x)))(w)


def test_a_stock_answers_report_names_no_solve_and_points_to_its_reason():
    args = (jnp.ones((32, 32)), jnp.ones((16, 32)))
    plan = planner.solve(_step, *args, hbm_gb=1.0, hardware="cpu", compare_stock=False)
    stock = dataclasses.replace(
        plan, choice="everything_saveable", choice_why="it is predicted faster"
    )
    r = build_report(stock)
    assert r.solver.startswith("no CP-SAT solve for this answer: it is the stock policy")
    assert "0 variables" not in r.solver
    use = dict(r.status_lines).get("budget use", "")
    assert "above" not in use and "below" in use, r.status_lines
    assert any("The answer is the stock policy everything_saveable" in n for n in r.notes)
    assert build_report(plan).solver.startswith("CP-SAT ")


def test_a_corrected_model_says_why_stock_predictions_move_between_budgets():
    """One stock policy's predicted peak changed between budgets (41.175 vs 45.247 MB) with
    no word: each budget's model is corrected by what its compiles measured."""
    args = (jnp.ones((32, 32)), jnp.ones((16, 32)))
    plan = planner.solve(_step, *args, hbm_gb=1.0, hardware="cpu", compare_stock=False)
    corrected = dataclasses.replace(
        plan, cost=dataclasses.replace(plan.cost, correction_bytes=-1_500_000)
    )
    notes = build_report(corrected).notes
    assert any("corrected by -1.500 MB" in n and "differ from another" in n for n in notes)
    if not plan.cost.correction_bytes:
        assert not any("corrected by" in n for n in build_report(plan).notes)
