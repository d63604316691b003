"""Gradient accumulation (tests/zoo/grad_accum.py: ``jax.grad`` inside ``lax.scan`` over 4
microbatches, 3 checkpointed layers in a Python loop): the region's forward and backward run in
one scan trip, so its residuals are held for one trip (trace.loops.in_trip, Region.in_trip), never
stacked across trips. Checked against compiled programs (memory_analysis of the stock
policies) and a plan compiled at a budget between the anchors."""

from __future__ import annotations

import functools

import pytest

from planner._src.cost import build_cost_model, evaluate
from planner._src.cost.baselines import stock_assignment
from planner._src.graph import build_graph
from planner._src.trace import trace_step
from tests.zoo import grad_accum
from tests.zoo._util import compile_step, device_bytes, stock_policy

POLICIES = ("nothing_saveable", "dots_saveable", "everything_saveable")


@functools.cache
def _compiled(policy: str, layer_loop: str = "python") -> int:
    step, args = grad_accum.make(stock_policy(policy), layer_loop=layer_loop)
    return device_bytes(compile_step(step, args)[0])


@pytest.fixture(scope="module")
def traced():
    step, args = grad_accum.make()
    tr = trace_step(step, args)
    graph = build_graph(tr)
    return tr, graph, build_cost_model(tr, graph, "cpu", allow_offload=False)


def test_the_region_runs_forward_and_backward_in_one_trip(traced):
    tr, graph, _ = traced
    (region,) = graph.regions
    assert region.region.in_trip == 4  # the microbatch scan's trips
    assert not region.region.in_scan  # not a layer scan: nothing stacked across trips
    assert region.region.multiplicity == 12  # 3 layers x 4 microbatches (the time terms)
    # Before 2026-12-06 every residual was taken for one XLA drops (no loop stacks it):
    # no candidate was needed and every policy was predicted alike.
    assert sum(c.nbytes for c in region.region.candidates if c.needed) > 0


def test_stock_policies_are_told_apart_and_predicted_near_their_compiles(traced):
    tr, graph, cost = traced
    preds = {p: evaluate(cost, graph, stock_assignment(graph, p)) for p in POLICIES}
    # Saving more is faster and bigger, as the compiler says.
    assert preds["nothing_saveable"].step_s > preds["dots_saveable"].step_s
    assert _compiled("everything_saveable") > _compiled("nothing_saveable")
    for p in POLICIES:  # within 10% of the compiled figure (was -43% for everything_saveable)
        assert abs(preds[p].peak_bytes / _compiled(p) - 1) < 0.10, (p, preds[p].peak_bytes)


def test_a_plan_between_the_anchors_fits_and_is_no_slower_than_the_best_stock(traced):
    import planner

    step, args = grad_accum.make()
    lo, hi = _compiled("nothing_saveable"), _compiled("everything_saveable")
    budget = lo + 0.5 * (hi - lo)
    plan = planner.solve(step, *args, hbm_gb=budget / 1e9, hardware="cpu")
    assert plan.verification.compiled_device_bytes <= budget
    # No slower (predicted) than the fastest stock policy that compiled within the budget;
    # and here, where dots_saveable fits, faster than full remat.
    fits = [
        b.prediction.step_s
        for b in plan.baselines
        if b.compiled_device_bytes is not None and b.compiled_device_bytes <= budget
    ]
    assert fits
    assert plan.prediction.step_s <= min(fits) * (1 + 1e-9)
    remat = {b.name: b for b in plan.baselines}["nothing_saveable"]
    assert plan.prediction.step_s < remat.prediction.step_s


def test_a_layer_scan_inside_the_accumulation_scan_holds_one_microbatch():
    """The layers under a lax.scan nested in the accumulation scan: the backward layer scan
    reads the forward layer scan's stacks, both made in one microbatch's trip. Before
    2026-12-06 the memory terms held every microbatch's stacks at once: dots_saveable and
    everything_saveable predicted +96% and +141% over their compiles (JAX 0.12.0.1); now
    +5.5% / -17.4% there and +12.2% / 0.0% on 0.10.2 (the verify compile is the judge)."""
    step, args = grad_accum.make(layer_loop="scan")
    tr = trace_step(step, args)
    graph = build_graph(tr)
    cost = build_cost_model(tr, graph, "cpu", allow_offload=False)
    (region,) = graph.regions
    assert region.region.in_scan and region.region.in_trip == 4
    assert region.region.multiplicity == 12
    for p in POLICIES:
        pred = evaluate(cost, graph, stock_assignment(graph, p)).peak_bytes
        assert abs(pred / _compiled(p, "scan") - 1) < 0.25, (p, pred, _compiled(p, "scan"))


def test_the_verify_checks_and_the_report_count_one_trips_residuals():
    """Several train steps (or microbatches) under one lax.scan around a layer scan: each trip
    stacks one step's residuals, so verify's stacking check and the report's bytes count
    Region.live executions, not every trip (new-user trial 2026-12-06b F1: three train steps
    under lax.scan failed "traced step stacks the planned device residuals" on every plan,
    expecting 3x the bytes stacked, and the report said keeping a class would take 3x its
    bytes)."""
    import planner

    step, args = grad_accum.make(layer_loop="scan")
    lo, hi = _compiled("nothing_saveable", "scan"), _compiled("everything_saveable", "scan")
    plan = planner.solve(step, *args, hbm_gb=(lo + 0.5 * (hi - lo)) / 1e9, hardware="cpu")
    checks = {c.name: c for c in plan.verification.checks}
    stacking = checks["traced step stacks the planned device residuals"]
    assert stacking.ok, stacking.detail
    assert plan.verification.ok, [c for c in plan.verification.checks if not c.ok]
    report = plan.report()
    assert "12 trips under lax.scan (3 held at once" in report
    # The Decisions table's bytes are one microbatch's (3 layers' trips), not all 12
    # executions' (every class the backward pass reads has a row).
    from planner._src.results.report import build_report

    (region,) = plan.graph.regions
    rows = build_report(plan).rows
    shown = sum(row.nbytes_per_step for row in rows)
    assert 0 < shown <= region.region.live * sum(c.nbytes for c in region.region.candidates)
