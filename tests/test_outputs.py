"""What users paste (planner.paste) and the pictures (planner.plots), on a real plan."""

import dataclasses
import shutil
import subprocess
import warnings

import pytest

import planner
from examples import llama, maxtext_style
from planner._src.cost import evaluate, regions_in_order
from planner._src.emit.emit import emit
from planner._src.emit.paste import paste_snippets
from planner._src.results.plots import hbm_timeline, memory_timeline, pareto_curve, policy_timeline
from planner._src.xla import adapter

pytestmark = pytest.mark.slow  # compiles whole models (the fast tier is -m "not slow")

MAXTEXT_VALUES = {"save": "device", "remat": "remat", "offload": "offload"}


@pytest.fixture(scope="module")
def llama_step():
    return llama.make_train_step(llama.LlamaConfig(n_layers=4))


@pytest.fixture(scope="module")
def plan(llama_step):
    step, args = llama_step
    return planner.solve(step, *args, hbm_gb=0.075, hardware="cpu")


@pytest.fixture(scope="module")
def maxtext_plan():
    step, args = maxtext_style.make()
    return planner.solve(step, *args, hbm_gb=0.009, hardware="cpu")


def _names_only(plan):
    """The plan with only its named decisions, emitted as JAX's own name policy."""
    names = {c.key: c.name for c in plan.graph.classes}
    kept = {k: d for k, d in plan.assignment.decisions if names.get(k)}
    a = planner.Assignment.of(kept)
    em = emit(a, names, plan.hardware)
    assert em.names_only
    return dataclasses.replace(
        plan, emitted=em, solution=dataclasses.replace(plan.solution, assignment=a)
    )


def _decides_like(policy, plan, step_and_args, *, as_maxtext=False):
    """``policy`` decides every equation JAX asks about as ``plan.policy`` does (both read by
    tracing the step with them, as JAX calls them). ``as_maxtext``: MaxText writes a
    recomputed decoder_layer_input as 'device' (emit.maxtext_yaml), the same buffer."""
    step, args = step_and_args
    want = adapter.decisions_of(step, args, plan.policy)
    got = adapter.decisions_of(step, args, policy)
    if as_maxtext and want.get("name:decoder_layer_input") == "remat":
        want["name:decoder_layer_input"] = "save"
    assert want and got == want


def _exec_policy(source):
    scope = {}
    exec(source, scope)  # noqa: S102 (the snippet is what users paste)
    return scope["policy"]


# ------------------------------------------------------------------------------ paste


def test_snippets_have_the_three_keys(plan):
    s = paste_snippets(plan)
    assert set(s) == {"python", "xla_flags", "maxtext"}
    assert all(isinstance(v, str) and v.endswith("\n") for v in s.values())


def test_names_only_python_snippet_is_plain_jax_and_decides_like_the_plan(maxtext_plan):
    p = _names_only(maxtext_plan)
    source = paste_snippets(p)["python"]
    assert source.startswith("import jax\n") and "planner" not in source
    _decides_like(_exec_policy(source), p, maxtext_style.make())


def test_python_snippet_with_unnamed_tensors_loads_the_plan_file(plan, tmp_path):
    assert not plan.emitted.names_only  # this plan keeps unnamed tensors
    path = tmp_path / "plan.json"
    plan.save(path)
    source = paste_snippets(plan, plan_file=str(path))["python"]
    assert "planner.load_plan" in source
    _decides_like(_exec_policy(source), plan, llama.make_train_step(llama.LlamaConfig(n_layers=4)))


def test_xla_flags_line_without_flags_is_a_comment(plan):
    assert plan.xla_flags == ""
    line = paste_snippets(plan)["xla_flags"]
    assert line.startswith("#") and "no XLA flags" in line


def test_xla_flags_line_quotes_for_the_shell(plan):
    flags = '--xla_gpu_enable_latency_hiding_scheduler=true --xla_dump_to="/tmp/a b" $HOME `x`'
    p = dataclasses.replace(plan, emitted=dataclasses.replace(plan.emitted, xla_flags=flags))
    line = paste_snippets(p)["xla_flags"]
    assert line.startswith("export XLA_FLAGS=")
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no POSIX shell to run the line")
    for mine in ("", "--xla_cpu_enable_fast_math=false"):  # the user's own flags are kept
        out = subprocess.run(
            [sh, "-c", f'export XLA_FLAGS="{mine}"\n' + line + 'printf %s "$XLA_FLAGS"'],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert out == (f"{mine} {flags}" if mine else flags)


def _check_maxtext_block(plan, text):
    yaml = pytest.importorskip("yaml")
    block = yaml.safe_load(text)
    assert block.pop("remat_policy") == "custom"
    names = {c.name: c.key for c in plan.graph.classes if c.name}
    assert set(block) == set(names)
    for name, value in block.items():
        assert value in ("remat", "device", "offload"), (name, value)
        want = MAXTEXT_VALUES[plan.assignment.get(names[name])]
        if name == "decoder_layer_input" and want == "remat":
            want = "device"  # MaxText cannot remat it; recomputing a view of the layer input
            # (the plan's choice) or keeping it holds the same buffer (emit.maxtext_yaml)
        assert value == want, name
    return block


def test_maxtext_block_parses_and_maps_every_name(plan, maxtext_plan):
    for p in (plan, maxtext_plan, _names_only(maxtext_plan)):
        _check_maxtext_block(p, paste_snippets(p)["maxtext"])
    assert paste_snippets(plan)["maxtext"].startswith("# Partial")


def test_every_name_the_maxtext_block_sets_has_its_row_in_the_decision_table(plan, maxtext_plan):
    """The MaxText block sets every checkpoint name; the table lists each (never folded into
    the smaller classes' line, a name no backward pass reads marked so), with the decision
    the block writes."""
    from planner._src.results.report import build_report
    from planner._src.results.report.model import NOT_READ

    for p in (plan, maxtext_plan):
        block = _check_maxtext_block(p, paste_snippets(p)["maxtext"])
        r = build_report(p)
        rows = {row.name: row for row in r.rows if row.name}
        assert set(block) == set(rows)
        for name, value in block.items():
            want = MAXTEXT_VALUES[rows[name].decision]
            if name == "decoder_layer_input" and want == "remat":
                want = "device"
            assert value == want, name
            assert (rows[name].nbytes_per_step == 0) == (rows[name].reason == NOT_READ)
        md, text = p.report("markdown"), p.report("text")
        for name in block:
            assert f"named '{name}'" in md and f"'{name}'" in text, name
    # the llama model names a tensor its backward pass never reads (mlpwo: the add after it
    # needs no operand): a row of its own, not a name the table lacks
    unread = [row for row in build_report(plan).rows if row.reason == NOT_READ]
    assert unread and all(row.name and row.members >= 1 for row in unread)


def test_maxtext_block_pasted_into_a_maxtext_config_gives_the_planned_policy(maxtext_plan):
    # The user's round trip: parse the block, update the config, build MaxText's policy.
    p = _names_only(maxtext_plan)
    block = _check_maxtext_block(p, paste_snippets(p)["maxtext"])
    config = maxtext_style.apply_yaml(
        maxtext_style.DEFAULT_CONFIG, {"remat_policy": "custom", **block}
    )
    _decides_like(
        maxtext_style.policy_from_config(config), p, maxtext_style.make(), as_maxtext=True
    )


def test_paste_works_on_a_saved_plan(plan, tmp_path):
    plan.save(tmp_path / "plan.json")
    saved = planner.load_plan(tmp_path / "plan.json")
    assert paste_snippets(saved) == paste_snippets(plan)


# ------------------------------------------------------------------------------ plots


def test_timeline_peaks_at_the_predicted_peak_for_the_plan_and_every_stock_policy(plan):
    tl = policy_timeline(plan)
    assert max(p.device_bytes for p in tl) == plan.prediction.peak_bytes
    assert tl[0].device_bytes == tl[-1].device_bytes == plan.prediction.fixed_bytes
    for b in plan.baselines:
        assert (
            max(p.device_bytes for p in policy_timeline(plan, b.name)) == b.prediction.peak_bytes
        ), b.name


@pytest.mark.parametrize("seed", range(30))
def test_timeline_over_several_regions_peaks_where_evaluate_says(seed):
    # Random graphs of 3 regions, every assignment: the peak is the max over backward
    # positions of several regions, with invariants and stacked inputs.
    from synthetic import all_assignments, random_problem

    graph, cost = random_problem(seed, n_nodes=5, n_regions=3, n_classes=3)
    mult = [rc.multiplicity for rc in cost.regions]
    for a in all_assignments(graph, cost):
        pred = evaluate(cost, graph, a)
        tl = memory_timeline(pred, mult, regions_in_order(graph))
        assert max(x.device_bytes for x in tl) == pred.peak_bytes
        assert tl[-1].device_bytes == pred.fixed_bytes


def test_hbm_timeline_writes_png_and_svg(plan, tmp_path):
    png = hbm_timeline(plan, tmp_path / "t.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = hbm_timeline(plan, tmp_path / "t.svg", policies=("planner", "maxtext:minimal"))
    assert "<svg" in svg.read_text()[:2000]


def _legend(fig) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_hbm_timeline_draws_budget_planned_to_compiled_and_trips(plan):
    from planner._src.results.plots import draw_hbm_timeline

    fig = draw_hbm_timeline(plan)
    texts = _legend(fig)
    v = plan.verification
    assert any(t.startswith("budget ") and "(as given)" in t for t in texts), texts
    assert any(t.startswith("compiled: ") and v.compiler in t for t in texts), texts
    # hardware="cpu" keeps no headroom: no planned-to line; a GPU profile's plan gets one
    assert plan.headroom_bytes == 0 and not any(t.startswith("planned to") for t in texts)
    import dataclasses

    gpu = dataclasses.replace(
        plan, hardware=planner.hardware.load_profile("h200"), headroom_bytes=plan.budget_bytes // 20
    )
    planned = [t for t in _legend(draw_hbm_timeline(gpu)) if t.startswith("planned to ")]
    assert planned and "1% allocator headroom" in planned[0] and "95%" in planned[0], planned
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    trips = plan.cost.regions[0].multiplicity
    assert labels[0] == "F1" and f"B{trips}" in labels and labels[-1] == "B1", labels
    assert "WITHIN BUDGET" in fig.axes[0].get_title()


def test_hbm_timeline_marks_a_plan_that_did_not_verify(plan):
    import dataclasses

    from planner._src.results.plots import draw_hbm_timeline

    failed = dataclasses.replace(
        plan, verification=dataclasses.replace(plan.verification, status="over budget")
    )
    fig = draw_hbm_timeline(failed)
    assert "not a fitting plan" in fig.axes[0].get_title()
    assert any("(did not verify)" in t for t in _legend(fig))


def test_pareto_curve_keeps_its_y_axis_around_the_plans(plan):
    import dataclasses

    from planner._src.results.plots import draw_pareto_curve

    # A stock policy 10x slower than the plan must not flatten the curve: it sits on the top
    # edge, its time in the legend.
    slow = plan.baselines[0]
    slow = dataclasses.replace(
        slow,
        applicable=True,
        prediction=dataclasses.replace(slow.prediction, step_s=10 * plan.prediction.step_s),
    )
    other = dataclasses.replace(plan, baselines=(slow, *plan.baselines[1:]))
    fig = draw_pareto_curve([other])
    lo, hi = fig.axes[0].get_ylim()
    assert lo > 0 and hi < 10 * plan.prediction.step_s * 1e3
    assert lo <= plan.prediction.step_s * 1e3 <= hi
    assert any(t.startswith(slow.name) and "above the chart" in t for t in _legend(fig))
    assert any("its budget" in t for t in _legend(fig))


def test_pareto_curve_shows_and_names_points_that_coincide(plan):
    """A stock policy at the planner's very point (the quickstart's dots_saveable) is not
    hidden under it: its hollow marker is larger and drawn above the planner's dot, and a
    note names both; a policy far from every other point gets no note."""
    import dataclasses

    from planner._src.results.plots import draw_pareto_curve

    twin, far = plan.baselines[0], plan.baselines[1]
    twin = dataclasses.replace(twin, applicable=True, prediction=plan.prediction)
    far = dataclasses.replace(
        far,
        applicable=True,
        prediction=dataclasses.replace(
            plan.prediction,
            peak_bytes=3 * plan.prediction.peak_bytes,
            step_s=1.2 * plan.prediction.step_s,
        ),
    )
    other = dataclasses.replace(plan, baselines=(twin, far))
    ax = draw_pareto_curve([other]).axes[0]
    notes = [t.get_text() for t in ax.texts]
    budget = f"{plan.budget_bytes / 1e9:.3g}"
    assert f"planner (budget {budget} GB) = {twin.name}" in notes, notes
    assert not any(far.name in n for n in notes), notes
    lines = {line.get_label(): line for line in ax.get_lines()}
    mine, stock = lines["planner: predicted peak, step"], lines[twin.name]
    assert stock.get_fillstyle() == "none"
    assert stock.get_markersize() > mine.get_markersize() and stock.get_zorder() > mine.get_zorder()
    assert tuple(stock.get_xydata()[0]) == tuple(mine.get_xydata()[0])  # the same point


def test_pareto_curve_does_not_call_points_pinned_above_the_chart_equal(plan):
    """Two stock policies far slower than every plan are drawn on the top edge at one peak:
    their legend entries give each its own step time, and no note calls them equal."""
    import dataclasses

    from planner._src.results.plots import draw_pareto_curve

    slow = [
        dataclasses.replace(
            b,
            applicable=True,
            prediction=dataclasses.replace(
                plan.prediction,
                peak_bytes=0.5 * plan.prediction.peak_bytes,
                step_s=k * plan.prediction.step_s,
            ),
        )
        for b, k in zip(plan.baselines[:2], (3.0, 5.0))
    ]
    ax = draw_pareto_curve([dataclasses.replace(plan, baselines=tuple(slow))]).axes[0]
    notes = [t.get_text() for t in ax.texts]
    assert not any(" = " in n and slow[1].name in n for n in notes), notes
    labels = [line.get_label() for line in ax.get_lines()]
    for b in slow:
        ms = b.prediction.step_s * 1e3
        assert f"{b.name} ({ms:.3g} ms: above the chart)" in labels, labels


def test_plot_errors_teach(plan, tmp_path):
    with pytest.raises(ValueError, match="Fix: name the file with one of .png, .svg"):
        hbm_timeline(plan, tmp_path / "t.jpg")
    with pytest.raises(ValueError, match="choose among planner, nothing_saveable"):
        hbm_timeline(plan, tmp_path / "t.png", policies=("planner", "save_all"))


def test_pareto_curve_marks_infeasible_budgets(llama_step, tmp_path):
    step, args = llama_step
    budgets = [0.03, 0.07, 0.09]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        results = planner.pareto(step, *args, hbm_gb=budgets, hardware="cpu")
    assert isinstance(results[0], planner.InfeasibleBudgetError)
    assert all(isinstance(r, planner.Plan) for r in results[1:])
    png = pareto_curve(results, tmp_path / "p.png", budgets_gb=budgets)
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert "<svg" in pareto_curve(results, tmp_path / "p.svg").read_text()[:2000]


def test_report_step_time_breakdown_adds_up(plan):
    """The report's predicted step = base + recompute + saving writes + exposed copies, in
    every format, and the saving writes are the model's (fusible values the plan saves)."""
    from planner._src.results.report import build_report, render

    r = build_report(plan)
    assert r.step_ms == pytest.approx(r.base_ms + r.recompute_ms + r.saving_ms + r.exposed_ms)
    assert r.saving_ms == pytest.approx(plan.prediction.materialize_s * 1e3)
    assert f"saving writes {r.saving_ms:.2f}" in render(r, "markdown")
    assert f"saving writes {r.saving_ms:.2f}" in render(r, "text")


def test_the_text_report_prints_brackets_as_written(plan):
    """rich reads '[cuda]' as a style tag: the quickstart's note printed
    'pip install -e "."' for 'pip install -e ".[cuda]"' (2026-12-03)."""
    import dataclasses

    noted = dataclasses.replace(plan, compiler_note='Fix: pip install -e ".[cuda]" [bold]x[/bold]')
    text = noted.report("text")
    assert 'pip install -e ".[cuda]" [bold]x[/bold]' in text


def test_state_on_the_host_gets_the_offloading_flags():
    """A plan that offloads no activation but keeps train state in pinned host memory still
    copies to and from the host every step: on a GPU it gets the flags that let those copies
    overlap compute; without host copies, none."""
    a = planner.Assignment.of({"name:x": "remat"})
    names = {"name:x": "x"}
    assert emit(a, names, "h200").xla_flags == ""
    flags = emit(a, names, "h200", host_copies=True).xla_flags.split()
    assert "--xla_gpu_enable_command_buffer=" in flags
    assert "--xla_gpu_enable_latency_hiding_scheduler=true" in flags
    assert emit(a, names, "cpu", host_copies=True).xla_flags == ""
