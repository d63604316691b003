"""planner.maximize_throughput: the batch-size search (compiled), the never-worse-than-stock
guarantee across batch sizes, micro-batching and its accumulation loop, the CLI."""

import dataclasses
import json

import jax
import numpy as np
import pytest

import planner
from examples.accumulate import TINY, make_accumulating_step, make_micro_step, make_tiny_step
from examples.llama import make_train_step
from planner._src.cli.main import main

# Two stock policies that are the session's anchor compiles (no extra compile per batch).
ANCHORS = ("nothing_saveable", "everything_saveable")
FAST = dict(allow_offload=False, fill_rounds=0, solver_time_limit_s=2.0)
# On TINY (XLA:CPU, JAX 0.10.2) full remat compiles to 2.07 / 2.41 / 2.91 MB at batch 1 / 2 /
# 4 and saving everything to 2.45 / 3.02 MB at batch 1 / 2: 2.7 MB puts both limits inside
# the search's first four batch sizes (1, 2, 4, 3).
SEARCH_GB = 0.0027


@pytest.fixture(scope="module")
def searched():
    return planner.maximize_throughput(
        make_tiny_step,
        hbm_gb=SEARCH_GB,
        hardware="cpu",
        stock=ANCHORS,
        max_batch_size=4,
        **FAST,
    )


def _row(result, policy, batch):
    (row,) = [r for r in result.table if r.policy == policy and r.batch_size == batch]
    return row


@pytest.mark.slow  # one trace per batch size (4 sessions; 3 below)
def test_search_finds_where_each_policy_stops_fitting(searched):
    r = searched
    for policy in ("planner", *ANCHORS):
        lim = r.limit(policy)
        assert lim.largest_fitting is not None and lim.first_over == lim.largest_fitting + 1, lim
        ok, over = _row(r, policy, lim.largest_fitting), _row(r, policy, lim.first_over)
        if policy != "planner" or over.compiled_peak_bytes is not None:
            assert over.compiled_peak_bytes > over.usable_bytes and not over.fits
        assert ok.fits and ok.compiled_peak_bytes <= ok.usable_bytes
    # saving everything stops fitting before full remat does
    assert (
        r.limit("everything_saveable").largest_fitting < r.limit("nothing_saveable").largest_fitting
    )
    # one trace per batch size probed, and the report says so
    assert r.traced_batch_sizes == tuple(sorted({x.batch_size for x in r.table}))
    assert f"{len(r.traced_batch_sizes)} traces" in r.retraced


@pytest.mark.slow
def test_chosen_plan_beats_every_stock_policy(searched):
    r = searched
    v = r.plan.verification
    assert v.compiled_device_bytes <= r.plan.budget_bytes - r.plan.headroom_bytes
    chosen = _row(r, "planner", r.batch_size)
    assert chosen.fits and chosen.tokens_per_s == pytest.approx(r.tokens_per_s)
    for lim in r.limits:
        if lim.policy != "planner" and lim.best_tokens_per_s is not None:
            assert r.tokens_per_s >= lim.best_tokens_per_s
    # in particular every fitting stock row, at every batch size
    assert all(r.tokens_per_s >= x.tokens_per_s for x in r.table if x.fits)


@pytest.mark.slow
def test_table_is_consistent(searched):
    r = searched
    for x in r.table:
        assert x.tokens_per_step == x.batch_size * TINY.seq  # the derived sequence length
        assert x.microbatches == 1
        if x.policy == "planner" and x.compiled_peak_bytes is not None:
            assert x.fits == (x.compiled_peak_bytes <= x.usable_bytes)
        if x.predicted_step_s:
            assert x.tokens_per_s == pytest.approx(x.tokens_per_step / x.predicted_step_s)
        assert x.compiler == "XLA:CPU"
    # every probed batch size has a row per policy
    for b in r.traced_batch_sizes:
        assert {x.policy for x in r.table if x.batch_size == b} == {"planner", *ANCHORS}
    # the stock rows are the session's anchor compiles
    data = json.loads(r.report("json"))
    assert data["batch_size"] == r.batch_size and data["policy"] == r.policy
    assert len(data["table"]) == len(r.table)
    md = r.report("markdown")
    assert "| batch | n | policy |" in md and "Where each policy stops fitting" in md
    assert f"batch size {r.batch_size}" in r.report()


@pytest.mark.slow
def test_throughput_plot(searched, tmp_path):
    path = searched.plot(tmp_path / "tps.png")
    assert path.stat().st_size > 1000


@pytest.mark.slow
def test_microbatching_picks_a_count_and_its_loop_matches_the_step(tmp_path):
    # The global batch of 4 as 1 or 2 micro-batches: at 2.3 MB the whole batch does not fit
    # (full remat of 4 examples needs more), two micro-batches of 2 do.
    r = planner.maximize_throughput(
        make_micro_step,
        hbm_gb=0.0023,
        hardware="cpu",
        global_batch=4,
        microbatches=(1, 2),
        stock=ANCHORS,
        **FAST,
    )
    assert r.global_batch == 4 and r.microbatches == 2
    for x in r.table:
        assert x.batch_size * x.microbatches == 4
        assert x.tokens_per_step == 4 * TINY.seq
    assert not _row(r, "planner", 4).fits  # one micro-batch of 4 does not fit
    chosen = _row(r, "planner", r.batch_size)
    assert chosen.predicted_step_s == pytest.approx(r.microbatches * r.plan.prediction.step_s)
    assert all(r.tokens_per_s >= x.tokens_per_s for x in r.table if x.fits)
    assert "micro-batches" in r.report() and r.plot(tmp_path / "micro.svg").stat().st_size > 1000

    # The accumulation loop the plan is for, under the plan's policy, against the whole
    # batch's step without it: the same loss and update up to float rounding.
    cfg = dataclasses.replace(TINY, batch=4)
    plain, args = make_train_step(cfg, concrete=True)
    looped = make_accumulating_step(
        dataclasses.replace(cfg, remat_policy=r.plan.policy), r.microbatches
    )
    (s1, l1), (s2, l2) = jax.jit(plain)(*args), jax.jit(looped)(*args)
    np.testing.assert_allclose(l2, l1, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(s2), jax.tree.leaves(s1)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_cli_throughput_end_to_end(tmp_path, capsys):
    png, out = tmp_path / "tps.png", tmp_path / "report.json"
    rc = main(
        [
            "throughput",
            "examples.accumulate:make_tiny_step",
            "--hbm-gb",
            "1",
            "--hardware",
            "cpu",
            "--batch-sizes",
            "2",
            "--stock",
            ",".join(ANCHORS),
            "--no-offload",
            "--time-limit",
            "2",
            "--json",
            "--png",
            str(png),
            "--out",
            str(out),
        ]
    )
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    data = json.loads(cap.out)
    assert data["batch_size"] == 2 and data["tokens_per_step"] == 2 * TINY.seq
    assert json.loads(out.read_text()) == data
    assert png.stat().st_size > 1000
    assert "batch size 2: tracing the step" in cap.err  # progress lines on stderr


def _float_step(b):
    x = jax.ShapeDtypeStruct((b, 8), np.float32)
    return (lambda w, x: jax.grad(lambda w: (jax.checkpoint(lambda x: x @ w)(x) ** 2).sum())(w)), (
        jax.ShapeDtypeStruct((8, 8), np.float32),
        x,
    )


def test_errors_teach():
    with pytest.raises(planner.InvalidArgumentError, match="tokens_per_example=SEQ_LEN"):
        planner.maximize_throughput(_float_step, hbm_gb=1, hardware="cpu", batch_sizes=(2,))
    with pytest.raises(planner.InvalidArgumentError, match="microbatches needs global_batch"):
        planner.maximize_throughput(make_micro_step, hbm_gb=1, hardware="cpu", microbatches=(2,))
    with pytest.raises(planner.InvalidArgumentError, match="verify_compile=True"):
        planner.maximize_throughput(make_tiny_step, hbm_gb=1, hardware="cpu", verify_compile=False)
    with pytest.raises(planner.InvalidArgumentError, match="divides"):
        planner.maximize_throughput(
            make_micro_step, hbm_gb=1, hardware="cpu", global_batch=3, microbatches=(2, 4)
        )
    with pytest.raises(planner.InvalidArgumentError, match="Unknown stock"):
        planner.maximize_throughput(make_tiny_step, hbm_gb=1, hardware="cpu", stock=("nope",))


def test_nothing_fits_says_so():
    # 1 MB is under what the step's parameters, optimizer state and batch take at batch 1.
    with pytest.raises(planner.InfeasibleBudgetError, match="No batch size fits(.|\n)*Fix:"):
        planner.maximize_throughput(
            make_tiny_step,
            hbm_gb=0.001,
            hardware="cpu",
            tokens_per_example=32,
            stock=ANCHORS,
            **FAST,
        )
