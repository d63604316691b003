"""Layer groups: per-group decisions (one policy per checkpoint call site) when they pay."""

import dataclasses
import itertools
import math
import warnings

import jax
import pytest
from jax.ad_checkpoint import checkpoint_policies as cp
from synthetic import brute_force, random_problem

import planner
from examples import llama
from planner._src.cost import DECISIONS, Assignment, build_cost_model, evaluate
from planner._src.cost.baselines import evaluate_baselines
from planner._src.emit.paste import paste_snippets
from planner._src.errors import InfeasibleBudgetError, LayerGroupsError
from planner._src.graph import build_graph
from planner._src.solve import SolverOptions, solve_assignment
from planner._src.trace import merge_call_sites, trace_step
from planner._src.xla import adapter
from planner._src.xla.compile import stacked_residuals

pytestmark = pytest.mark.slow  # compiles whole models (the fast tier is -m "not slow")

OPTS = SolverOptions(time_limit_s=20)


# ------------------------------------------------------------------ solver vs brute force


def _uniform_brute_force(graph, cost, budget):
    """Best assignment that gives every group the same decision per signature."""
    sigs = sorted({c.signature for c in graph.classes})
    choices = DECISIONS if cost.allow_offload else ("save", "remat")
    best = None
    for combo in itertools.product(choices, repeat=len(sigs)):
        by_sig = dict(zip(sigs, combo))
        a = Assignment.of({c.key: by_sig[c.signature] for c in graph.classes})
        p = evaluate(cost, graph, a)
        if p.peak_bytes <= budget and p.host_bytes <= cost.host_cap_bytes:
            if best is None or p.step_s < best[1].step_s - 1e-12:
                best = (a, p)
    return best


@pytest.mark.parametrize("seed", range(16))
def test_per_group_solver_equals_brute_force(seed):
    graph, cost = random_problem(seed, n_nodes=6, n_regions=2, n_classes=3, groups=True)
    # Every class belongs to one group: the same signature is two classes in two groups.
    assert {c.group for c in graph.classes} == {0, 1}
    assert all(c.key == f"g{c.group}|{c.signature}" for c in graph.classes)
    peaks = sorted(
        {
            evaluate(cost, graph, Assignment.of({c.key: d for c in graph.classes})).peak_bytes
            for d in ("save", "remat")
        }
    )
    for budget in (peaks[0], (peaks[0] + peaks[-1]) // 2, peaks[-1]):
        for uniform in (False, True):
            best = (_uniform_brute_force if uniform else brute_force)(graph, cost, budget)
            if best is None:
                with pytest.raises(InfeasibleBudgetError):
                    solve_assignment(graph, cost, budget, OPTS, uniform=uniform)
                continue
            sol = solve_assignment(graph, cost, budget, OPTS, uniform=uniform)
            assert sol.status == "OPTIMAL"
            pred = evaluate(cost, graph, sol.assignment)
            assert pred.step_s == pytest.approx(best[1].step_s, rel=1e-6, abs=1e-8)
            assert pred.peak_bytes <= budget
            if uniform:  # tied: each signature decided once for all groups
                d = sol.assignment.as_dict()
                for c in graph.classes:
                    assert d.get(c.key, "remat") == d.get(
                        f"g0|{c.signature}", "remat"
                    ) or f"g0|{c.signature}" not in {k.key for k in graph.classes}


# --------------------------------------------------------------------------- G = 1

SMALL = llama.LlamaConfig(n_layers=4)


def test_one_group_program_and_plan_are_as_before():
    step, args = llama.make_train_step(SMALL)
    # LlamaConfig(layer_groups=1) with one policy or a one-element sequence: the same program.
    seq_step, seq_args = llama.make_train_step(dataclasses.replace(SMALL, remat_policy=[None]))
    assert str(jax.make_jaxpr(step)(*args)) == str(jax.make_jaxpr(seq_step)(*seq_args))
    sites = trace_step(step, args, split_call_sites=True)
    assert len(sites.regions) == 1
    assert merge_call_sites(sites).regions == trace_step(step, args).regions
    budget = 0.5 * sum(b.prediction.peak_bytes for b in _ends(step, args)) / 1e9
    plans = [
        planner.solve(
            step, *args, hbm_gb=budget, hardware="cpu", verify_compile=False, layer_groups=g
        )
        for g in (None, False, True)
    ]
    assert plans[0].assignment == plans[1].assignment == plans[2].assignment
    for p in plans:
        assert p.layer_groups == 0 and p.policies == (p.policy,)
        assert all(rg.region.group is None for rg in p.graph.regions)


def _ends(step, args, split=False):
    tr = trace_step(step, args, split_call_sites=split)
    graph = build_graph(tr)
    cost = build_cost_model(tr, graph, "cpu", allow_offload=False)
    return evaluate_baselines(graph, cost, math.inf, names=("nothing_saveable", "dots_saveable"))


# ----------------------------------------------------------------- two groups, a gain

CFG2 = dataclasses.replace(llama.QUICKSTART, layer_groups=2)


@pytest.fixture(scope="module")
def grouped():
    step, args = llama.make_train_step(CFG2)
    lo, hi = (b.prediction.peak_bytes for b in _ends(step, args, split=True))
    budget = lo + 0.2 * (hi - lo)  # between full remat and "save dots in every layer"
    with warnings.catch_warnings():
        warnings.simplefilter("error", planner.PlanWarning)
        # layer_groups=True: the example's groups are bound from one source line, which the
        # planner treats as one call site by default (test below); compare_stock=False: these
        # tests are about the per-group machinery, not about which answer wins.
        plan = planner.solve(
            step,
            *args,
            hbm_gb=budget / 1e9,
            hardware="cpu",
            allow_offload=False,
            layer_groups=True,
            compare_stock=False,
        )
    return step, args, plan


def test_groups_from_one_source_line_get_one_policy_by_default():
    """A user whose layer groups are bound from one line (the example's loop over groups) can
    give them only one policy without editing the code: by default the plan is uniform and
    plan.policy never raises; a code that passes each group its own policy object is told
    apart (trace.site_key)."""
    step, args = llama.make_train_step(CFG2)
    lo, hi = (b.prediction.peak_bytes for b in _ends(step, args, split=True))
    plan = planner.solve(
        step,
        *args,
        hbm_gb=(lo + 0.2 * (hi - lo)) / 1e9,
        hardware="cpu",
        allow_offload=False,
        verify_compile=False,
    )
    assert plan.layer_groups == 0 and plan.policy is not None
    sites = trace_step(step, args, split_call_sites=True)
    assert len({r.site_key for r in sites.regions}) == 1
    own = llama.make_train_step(
        dataclasses.replace(CFG2, remat_policy=(cp.nothing_saveable, cp.dots_saveable))
    )
    sites = trace_step(*own, split_call_sites=True)
    assert len({r.site_key for r in sites.regions}) == 2


def test_per_group_plan_predicts_a_faster_step_than_any_uniform_plan(grouped):
    _, _, plan = grouped
    assert plan.layer_groups == 2
    assert [rg.region.group for rg in plan.graph.regions] == [0, 1]
    assert [rg.region.multiplicity for rg in plan.graph.regions] == [2, 2]
    uniform = solve_assignment(plan.graph, plan.cost, plan.budget_bytes, OPTS, uniform=True)
    assert plan.prediction.step_s < uniform.objective_s * (1 - 1e-3)
    # ... also faster than the merged (today's) model's best plan at this budget.
    tr = merge_call_sites(plan.trace)
    g = build_graph(tr)
    merged = solve_assignment(
        g, build_cost_model(tr, g, "cpu", allow_offload=False), plan.budget_bytes, OPTS
    )
    assert plan.prediction.step_s < merged.objective_s
    # The groups really differ, and the compiled step is within the budget with every check.
    assert plan.emitted.policy is None
    v = plan.verification
    assert v.status == "compiled, within budget" and v.compiled_device_bytes <= plan.budget_bytes
    assert all(c.ok for c in v.checks), [c.detail for c in v.checks]


def test_policies_keep_exactly_the_planned_residuals_per_group(grouped):
    _, _, plan = grouped
    full = evaluate(plan.cost, plan.graph, Assignment.of({})).regions

    def stacked(policies):
        step, args = llama.make_train_step(dataclasses.replace(CFG2, remat_policy=policies))
        return stacked_residuals(jax.make_jaxpr(step)(*args).jaxpr)[0]

    base = stacked((cp.nothing_saveable, cp.nothing_saveable))
    for g, (rg, rp) in enumerate(zip(plan.graph.regions, plan.prediction.regions)):
        only_g = tuple(plan.policies[g] if k == g else cp.nothing_saveable for k in range(2))
        want = rg.region.multiplicity * (
            rp.device_residual_bytes + rp.input_residual_bytes - full[g].input_residual_bytes
        )
        assert stacked(only_g) - base == want, g
    # The user's own program with both policies: compiled memory within the budget.
    step, args = llama.make_train_step(dataclasses.replace(CFG2, remat_policy=plan.policies))
    compiled = jax.jit(step).lower(*args).compile().memory_analysis()
    used = (
        compiled.argument_size_in_bytes
        + compiled.output_size_in_bytes
        - compiled.alias_size_in_bytes
        + compiled.temp_size_in_bytes
    )
    assert used <= plan.budget_bytes


def test_plan_policy_teaches_when_groups_differ(grouped):
    _, _, plan = grouped
    with pytest.raises(LayerGroupsError) as e:
        _ = plan.policy
    msg = str(e.value)
    assert "2 layer groups differently" in msg and "group 0:" in msg and "group 1:" in msg
    assert "Why:" in msg and "jax.checkpoint(layer, policy=plan.policies[g])" in msg
    assert "layer_groups=False" in msg


def test_outputs_say_per_group_what_was_chosen(grouped):
    _, _, plan = grouped
    md = plan.report("markdown")
    assert "| group | source |" in md and "layer group 1: region 1" in md
    assert "policies = " in md
    from planner._src.results.report import build_report

    rows = {r.group for r in build_report(plan).rows}
    assert rows == {0, 1}
    assert "# layer group 0" in plan.maxtext_yaml and "# layer group 1" in plan.maxtext_yaml
    py = paste_snippets(plan)["python"]
    assert "policies" in py and "policies[g]" in py
    assert "layer group" in plan.report("text")


def test_plan_file_round_trips_the_group_policies(grouped, tmp_path):
    step, args, plan = grouped
    path = tmp_path / "plan.json"
    plan.save(path)
    loaded = planner.load_plan(path)
    loaded.check(step, *args)
    assert loaded.layer_groups == 2 and len(loaded.policies) == 2 and loaded.call_sites == 2
    with pytest.raises(LayerGroupsError, match=r"plan\.policies\[g\]"):
        _ = loaded.policy
    for g in range(len(plan.graph.regions)):
        assert adapter.decisions_of(step, args, loaded.policies[g]) == adapter.decisions_of(
            step, args, plan.policies[g]
        )
    assert loaded.maxtext_yaml == plan.maxtext_yaml
    assert paste_snippets(loaded) == paste_snippets(plan)
    assert "| group | source |" in loaded.report("markdown")


def test_uniform_when_groups_do_not_pay_or_are_refused(tmp_path):
    step, args = llama.make_train_step(dataclasses.replace(SMALL, layer_groups=2))
    # Everything fits: deciding per group buys nothing, so the plan is uniform (merged).
    roomy = planner.solve(step, *args, hbm_gb=10.0, hardware="cpu", verify_compile=False)
    assert roomy.layer_groups == 0 and len(roomy.policies) == 2
    assert roomy.policies[0] is roomy.policies[1] is roomy.policy
    roomy.save(tmp_path / "plan.json")
    saved = planner.load_plan(tmp_path / "plan.json")
    assert saved.layer_groups == 0 and len(saved.policies) == 2 and saved.policy is not None
    refused = planner.solve(
        step, *args, hbm_gb=10.0, hardware="cpu", verify_compile=False, layer_groups=False
    )
    assert refused.layer_groups == 0 and refused.graph.regions[0].region.call_sites == 2
    forced = planner.solve(
        step, *args, hbm_gb=10.0, hardware="cpu", verify_compile=False, layer_groups=True
    )
    assert forced.layer_groups == 2 and len(forced.policies) == 2
    # Nothing to gain per group when everything fits: the same predicted step as uniform.
    # (The groups may still break exact ties differently: a view saved in one group, its
    # matmul in the other; plan.policy then raises the teaching error tested above.)
    assert forced.prediction.step_s == pytest.approx(roomy.prediction.step_s, rel=1e-9)
    with pytest.raises(planner.InvalidArgumentError):
        planner.solve(step, *args, hbm_gb=10.0, hardware="cpu", layer_groups=2)


def test_report_shows_the_best_uniform_plan_and_the_timeline_draws(grouped, tmp_path):
    _, _, plan = grouped
    from planner._src.results.plan import UNIFORM
    from planner._src.results.plots import hbm_timeline

    uniform = {b.name: b for b in plan.baselines}[UNIFORM]
    assert uniform.fits and uniform.prediction.step_s > plan.prediction.step_s
    assert UNIFORM in plan.report("markdown")
    assert hbm_timeline(plan, tmp_path / "hbm.png").exists()
    cands = plan.candidates()
    assert {c["group"] for c in cands} == {0, 1}
    assert any(lbl.endswith("[group 1]") for lbl in plan.decisions())
