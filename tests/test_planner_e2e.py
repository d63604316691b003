"""The planner end to end on the bundled example: compile the emitted policy and check it."""

import dataclasses
import math
import warnings

import jax
import pytest
from jax.ad_checkpoint import checkpoint_policies as cp

import planner
from examples import llama
from planner._src.cost import Assignment, evaluate
from planner._src.xla.compile import compiled_figures, stacked_residuals

pytestmark = pytest.mark.slow  # compiles whole models (the fast tier is -m "not slow")

CFG = llama.LlamaConfig(n_layers=4)


def _user_compile(policy):
    """Compile the step the way a user would after pasting the policy into their model."""
    step, args = llama.make_train_step(dataclasses.replace(CFG, remat_policy=policy))
    jaxpr = jax.make_jaxpr(step)(*args)
    compiled = jax.jit(step).lower(*args).compile()
    return jaxpr, compiled_figures(compiled, jaxpr)


@pytest.fixture(scope="module")
def peaks():
    lo = _user_compile(cp.nothing_saveable)[1]
    hi = _user_compile(cp.everything_saveable)[1]
    return lo.device_bytes, hi.device_bytes


@pytest.fixture(scope="module")
def plans(peaks):
    lo, hi = peaks
    budgets = [(lo + f * (hi - lo)) / 1e9 for f in (0.2, 0.5, 0.8)]
    step, args = llama.make_train_step(CFG)
    with warnings.catch_warnings():
        warnings.simplefilter("error", planner.PlanWarning)
        out = planner.pareto(step, *args, hbm_gb=budgets, hardware="cpu", verify_compile=True)
    assert all(isinstance(p, planner.Plan) for p in out), out
    return out


def test_budgets_lie_between_full_remat_and_save_everything(peaks):
    lo, hi = peaks
    assert hi > 1.2 * lo  # the example is sized so that the decisions matter


def test_every_plan_compiles_within_budget_with_all_checks(plans):
    for p in plans:
        v = p.verification
        assert v.status == "compiled, within budget", v
        assert v.compiled_device_bytes <= p.budget_bytes
        assert v.checks and all(c.ok for c in v.checks), [c.detail for c in v.checks]


def test_pasted_policy_keeps_exactly_the_planned_residuals(plans):
    anchor_jaxpr, _ = _user_compile(cp.nothing_saveable)
    base_dev, base_host, _, _ = stacked_residuals(anchor_jaxpr.jaxpr)
    for p in plans:
        jaxpr, figs = _user_compile(p.policy)
        dev, host, _, _ = stacked_residuals(jaxpr.jaxpr)
        region = p.graph.regions[0].region
        rp = p.prediction.regions[0]
        full = evaluate(p.cost, p.graph, Assignment.of({})).regions[0]
        # Planned residuals, plus the layer inputs the plan keeps, less those full remat keeps.
        assert dev - base_dev == region.multiplicity * (
            rp.device_residual_bytes + rp.input_residual_bytes - full.input_residual_bytes
        )
        assert host == region.multiplicity * rp.host_residual_bytes
        # Offloaded residuals are typed with the host memory kind in the user's own program.
        assert (host > 0) == any(d == "offload" for _, d in p.assignment.decisions)
        # Memory as the compiler sees it, host-placed bytes set apart (same RAM on CPU).
        assert figs.device_bytes - figs.jaxpr_host_bytes <= p.budget_bytes


def test_saved_names_are_saved_and_remat_names_absent(plans):
    # The emitted policy, called as JAX calls it on each checkpoint_name equation, decides
    # exactly what the plan decided for that name.
    from planner._src.xla import adapter

    step, args = llama.make_train_step(CFG)
    for p in plans:
        got = adapter.decisions_of(step, args, p.policy)
        seen = 0
        for rg in p.graph.regions:
            for c in rg.region.candidates:
                if c.name is None:
                    continue
                assert got[c.signature] == p.assignment.get(c.signature), c.name
                seen += 1
        assert seen >= 9  # the example's MaxText names


def test_tighter_budget_never_predicts_a_faster_step(plans):
    times = [p.prediction.step_s for p in plans]
    assert times == sorted(times, reverse=True) or all(
        a >= b - 1e-12 for a, b in zip(times, times[1:])
    )


def test_plan_beats_or_ties_every_stock_policy_that_fits(plans):
    for p in plans:
        for b in p.baselines:
            if b.fits:
                assert p.prediction.step_s <= b.prediction.step_s + 1e-9, b.name


def test_report_renders_in_every_format(plans):
    import json

    p = plans[1]
    text = p.report()
    assert "PLAN STATUS: COMPILED, WITHIN BUDGET" in text
    md = p.report("markdown")
    assert md.startswith("# Plan: compiled, within budget")
    data = json.loads(p.report("json"))
    assert data["status"] == "compiled, within budget"
    assert {r["decision"] for r in data["rows"]} <= {"save", "remat", "offload"}
    with pytest.raises(ValueError, match="unknown report format"):
        p.report("html")


def test_planning_leaves_the_users_program_alone(peaks):
    # After planning, the user's own policy (nothing_saveable) still compiles to the same program.
    lo, _ = peaks
    assert _user_compile(cp.nothing_saveable)[1].device_bytes == lo
    from jax._src import ad_checkpoint

    from planner._src.xla import adapter

    assert ad_checkpoint.remat_p.bind is adapter._orig_bind


def test_plan_file_round_trips_and_detects_a_stale_step(plans, tmp_path):
    p = plans[1]
    path = tmp_path / "plan.json"
    p.save(path)
    saved = planner.load_plan(path)
    assert saved.assignment == p.assignment and saved.xla_flags == p.xla_flags
    assert saved.report("markdown") == p.report("markdown", plan_file=str(path))
    assert saved.report() == p.report(plan_file=str(path))  # text by default, as the CLI
    assert saved.decisions() == p.decisions()
    assert len(saved.candidates()) == len(p.candidates())
    e = saved.policy
    # The loaded policy decides every candidate as the plan did.
    from planner._src.xla import adapter

    step, args = llama.make_train_step(CFG)
    got = adapter.decisions_of(step, args, e)
    for c in p.graph.regions[0].region.candidates:
        if c.decidable:
            assert got[c.signature] == p.assignment.get(c.signature)
    saved.check(step, *args)
    other, other_args = llama.make_train_step(dataclasses.replace(CFG, d_ff=512))
    with pytest.raises(planner.PlanFileError, match="made for another step"):
        saved.check(other, *other_args)


@pytest.mark.parametrize(
    "content, match",
    [
        ("{not json", "not valid JSON"),
        ('{"a": 1}', "not a jax-offload-planner plan"),
        ('{"format": "jax-offload-planner/plan", "version": 99}', "version 99"),
        ('{"format": "jax-offload-planner/plan", "version": 1}', "damaged plan file"),
    ],
)
def test_corrupt_or_foreign_plan_files(tmp_path, content, match):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(planner.PlanFileError, match=match):
        planner.load_plan(path)


def test_candidates_list_every_tensor_with_its_provenance(plans):
    rows = plans[0].candidates()
    assert len(rows) == len(plans[0].graph.regions[0].region.candidates)
    wi0 = next(r for r in rows if r["name"] == "mlpwi_0")
    assert wi0["multiplicity"] == CFG.n_layers and wi0["bytes_per_trip"] > 0
    assert wi0["dtype"] == "float32" and "llama.py" in wi0["source"]


def test_allocator_headroom_is_left_free_and_reported(tmp_path):
    """A profile with allocator headroom: the plan, its compile and the stock policies'
    "fits" are held to budget x (1 - headroom); the report and the plan file say so; an
    infeasible budget names the hbm_gb that works with the headroom."""
    import dataclasses

    import cost_models as cm
    from planner._src.results.report import build_report, render
    from planner._src.units import fmt_bytes

    step, args = llama.make_train_step(llama.LlamaConfig(n_layers=2, seq=64))
    hw = dataclasses.replace(cm.load_profile("cpu"), allocator_headroom=0.1)
    full = planner.solve(step, *args, hbm_gb=1.0, hardware="cpu", verify_compile=False)
    every = {b.name: b.prediction.peak_bytes for b in full.baselines}["everything_saveable"]
    budget = every / 1e9  # saving everything fits the budget, but not the budget less 10%
    plan = planner.solve(step, *args, hbm_gb=budget, hardware=hw)
    assert plan.headroom_bytes == int(plan.budget_bytes * 0.1)
    usable = plan.budget_bytes - plan.headroom_bytes
    assert usable < every
    # The compiler is the judge: the plan (or a stock policy that compiles within, returned
    # instead) fits what the headroom leaves.
    assert plan.prediction.peak_bytes <= usable or plan.choice != "planner"
    assert plan.verification.compiled_device_bytes <= usable
    assert not {b.name: b for b in plan.baselines}["everything_saveable"].fits
    text = render(build_report(plan), "markdown")
    assert f"planned to {fmt_bytes(usable)}" in text  # GB, or MB for a small model
    plan.save(tmp_path / "plan.json")
    assert f"planned to {fmt_bytes(usable)}" in planner.load_plan(tmp_path / "plan.json").report()
    lo = {b.name: b.prediction.peak_bytes for b in full.baselines}["nothing_saveable"]
    with pytest.raises(planner.InfeasibleBudgetError, match="allocator headroom") as e:
        planner.solve(step, *args, hbm_gb=lo * 1.02 / 1e9, hardware=hw, verify_compile=False)
    assert e.value.min_feasible_bytes > lo * 1.02


def _unrolled_scan_step(unroll):
    import jax.numpy as jnp
    from jax.ad_checkpoint import checkpoint_name

    def layer(x, w):
        # the backward pass reads cos(x) and `a` (for w's gradient), not x itself: keeping
        # them (saved or offloaded) frees the scan's stacked copy of x, which full remat keeps
        # to recompute them from; offloading them is what gets below full remat here
        a = checkpoint_name(jnp.sin(x) * 2.0, "a")
        h = checkpoint_name(jnp.tanh(a @ w), "h")
        return jnp.tanh(h @ w.T) + x

    def step(w, x):
        def loss(w):
            y, _ = jax.lax.scan(
                lambda c, wi: (jax.checkpoint(layer)(c, wi), None), x, w, unroll=unroll
            )
            return jnp.sum(y**2)

        return jax.grad(loss)(w)

    return step, (
        jax.ShapeDtypeStruct((4, 256, 256), jnp.float32),
        jax.ShapeDtypeStruct((512, 256), jnp.float32),
    )


def test_no_offload_under_an_unrolled_scan():
    """scan(unroll=2) concatenates host-space residuals, which XLA's host offloader cannot
    compile (our H200): the planner keeps every tensor of such a region on the device, the
    stock offload policies are not compared, and the report says why. On the same model
    without that restriction, a budget below the smallest on-device plan is met by offloading."""
    from planner._src.errors import InfeasibleBudgetError
    from planner._src.solve import SolverOptions, min_feasible_bytes, solve_assignment

    step, args = _unrolled_scan_step(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        # XLA:CPU's figures, with or without the CUDA plugin installed
        plan = planner.solve(step, *args, hbm_gb=0.012, hardware="h200", compiler="local")
    (rg,) = plan.graph.regions
    assert rg.region.scan_unroll == 2 and rg.region.in_scan
    assert plan.cost.allow_offload and plan.cost.no_offload_classes
    assert plan.prediction.host_bytes == 0
    assert "offload" not in set(plan.decisions().values())
    offloading = [
        b
        for b in plan.baselines
        if b.name in ("offload_dot_with_no_batch_dims", "maxtext:minimal_offloaded")
    ]
    assert offloading and not any(b.applicable or b.fits for b in offloading)
    assert "lax.scan(unroll=2)" in plan.report("markdown")

    opts = SolverOptions(time_limit_s=10)
    on_device = min_feasible_bytes(plan.graph, plan.cost, opts)
    free = dataclasses.replace(plan.cost, no_offload_classes=frozenset())
    below = (on_device + min_feasible_bytes(plan.graph, free, opts)) / 2
    assert below < on_device
    with pytest.raises(InfeasibleBudgetError):
        solve_assignment(plan.graph, plan.cost, below, opts)
    sol = solve_assignment(plan.graph, free, below, opts)
    assert "offload" in dict(sol.assignment.decisions).values()
    # The independent simulator refuses that assignment on the real model.
    from planner._src.cost.simulate import PlanViolation, simulate

    simulate(plan.graph, free, sol.assignment)
    with pytest.raises(PlanViolation, match="unroll"):
        simulate(plan.graph, plan.cost, sol.assignment)


def test_verify_compiles_under_the_plans_own_flags(monkeypatch):
    """The plan runs under its XLA flags, which change the schedule and the peak (the H200
    compare of 2026-12-02: plans verified under the default flags compiled larger under their
    own and ran out of memory). The verify compile gets the same flags as compiler options,
    and XLA accepts them (the compile really runs with them, here on XLA:CPU)."""
    import jax.stages

    seen = []
    original = jax.stages.Lowered.compile

    def spy(self, compiler_options=None, **kw):
        seen.append(dict(compiler_options or {}))
        return original(self, compiler_options=compiler_options, **kw)

    from planner._src.solve import SolverOptions, min_feasible_bytes
    from planner._src.xla import compile_options

    step, args = _unrolled_scan_step(1)
    free = planner.solve(
        step, *args, hbm_gb=1.0, hardware="h200", verify_compile=False, compiler="local"
    )
    full_remat = {b.name: b for b in free.baselines}["nothing_saveable"].prediction.peak_bytes
    smallest = min_feasible_bytes(free.graph, free.cost, SolverOptions(time_limit_s=10))
    assert smallest < full_remat  # only offloading gets below full remat here
    monkeypatch.setattr(jax.stages.Lowered, "compile", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        budget = (smallest + full_remat) / 2 / (1 - free.hardware.allocator_headroom)
        # One round: XLA:CPU's compiled size of an offloading plan is only an estimate (host
        # arrays share its memory), and a correction round would plan without offloads.
        plan = planner.solve(
            step, *args, hbm_gb=budget / 1e9, hardware="h200", max_rounds=1, compiler="local"
        )
    assert "offload" in set(plan.decisions().values())  # so the GPU flags apply
    options = dict(plan.emitted.compiler_options)
    assert options == {
        "xla_gpu_enable_latency_hiding_scheduler": True,
        "xla_gpu_enable_command_buffer": "",
    }
    assert plan.xla_flags.split() == [f"--{k}={str(v).lower()}" for k, v in options.items()]
    # The trace stage's anchors compile without options; the verify compile with the plan's
    # (and, as nothing is run here, both for their figures only: xla.compile_options).
    only = compile_options.COMPILE_ONLY_CPU_OPTIONS
    assert seen[0] == only and seen[-1] == {**only, **options}
    assert plan.verification.compiled_device_bytes is not None


def test_gpu_plans_stay_under_xlas_own_memory_limit():
    """XLA:GPU compiles against (cap - inputs/outputs) x 0.95 for temporaries and recomputes
    on its own above it (H200, 2026-12-02: such plans ran slower than the plan one budget
    down). A GPU plan therefore uses at most inputs/outputs + 0.95 x the rest; the report says
    why; an infeasible budget names one whose usable part fits; auto budgets span full remat
    to saving everything in usable bytes."""
    import cost_models as cm
    from planner._src.results.report import build_report, render

    step, args = llama.make_train_step(llama.LlamaConfig(n_layers=2, seq=64))
    # compiler="local": the arithmetic below is XLA:CPU's (with the CUDA plugin installed the
    # default is a deviceless XLA:GPU compile, whose usable budget also has its margin)
    free = planner.solve(
        step, *args, hbm_gb=1.0, hardware="h200", verify_compile=False, compiler="local"
    )
    a = free.trace.anchor
    io = a.argument_bytes + a.output_bytes - a.alias_bytes
    ends = {b.name: b.prediction.peak_bytes for b in free.baselines}
    lo, hi = ends["nothing_saveable"], ends["everything_saveable"]
    assert io < lo < hi
    # A budget where saving everything fits the budget less the 1% allocator headroom, but
    # not XLA's limit: between hi / 0.99 and io + (hi - io) / 0.95.
    budget = int((hi / 0.99 + io + (hi - io) / 0.95) / 2)
    assert budget * 0.99 >= hi > io + 0.95 * (budget - io)
    from planner._src.solve import SolverOptions, min_feasible_bytes

    smallest = min_feasible_bytes(free.graph, free.cost, SolverOptions(time_limit_s=10))
    need = max(smallest / 0.99, io + (smallest - io) / 0.95)  # the smallest budget that works
    # One trace for three budgets: the one above, one just over the smallest plan (too small
    # once XLA's limit is left free), and the budget the error names.
    plan, small, ok = planner.pareto(
        step,
        *args,
        hbm_gb=[budget / 1e9, smallest * 1.001 / 1e9, math.ceil(need / 1e6) / 1e3],
        hardware="h200",
        verify_compile=False,
        compiler="local",
    )
    usable = io + int(cm.compiler_temp_fraction(plan.hardware) * (budget - io))
    assert plan.budget_bytes - plan.headroom_bytes == usable
    assert plan.prediction.peak_bytes <= usable
    assert not {b.name: b for b in plan.baselines}["everything_saveable"].fits
    assert "XLA:GPU's 95% limit" in render(build_report(plan), "markdown")
    assert isinstance(small, planner.InfeasibleBudgetError) and "XLA:GPU" in str(small)
    assert abs(small.min_feasible_bytes - need) <= 1e-6 * need
    assert isinstance(ok, planner.Plan)
    assert ok.prediction.peak_bytes <= ok.budget_bytes - ok.headroom_bytes
    auto = planner.pareto(
        step, *args, hbm_gb=None, hardware="h200", verify_compile=False, compiler="local"
    )
    used = [p.budget_bytes - p.headroom_bytes for p in auto]
    assert used[0] >= lo - 1 and abs(used[-1] - hi) <= 0.001 * hi


def test_a_gpu_budget_above_the_allocator_limit_warns(monkeypatch):
    """XLA:GPU compiles against the allocator's limit (XLA_PYTHON_CLIENT_MEM_FRACTION x HBM),
    not hbm_gb: a GPU plan for more than this process's allocator holds is warned about, with
    the limit and the fix; within the limit, or on a backend without the figure, no warning.
    (This machine's compiler: the test's budgets are XLA:CPU's figures of the step.)"""
    import planner._src.planning.inputs as pp

    if jax.default_backend() == "cpu":
        assert pp.allocator_limit_bytes() is None  # XLA:CPU reports no memory statistics
    step, args = _unrolled_scan_step(1)
    monkeypatch.setattr(pp, "allocator_limit_bytes", lambda: 5_000_000)
    with pytest.warns(planner.PlanWarning, match=r"allocator limit of 0\.01 GB[\s\S]*Fix: plan"):
        planner.solve(
            step, *args, hbm_gb=0.02, hardware="h200", verify_compile=False, compiler="local"
        )
    with pytest.warns(planner.PlanWarning, match="allocator limit"):  # automatic budgets too
        planner.pareto(
            step, *args, hbm_gb=None, hardware="h200", verify_compile=False, compiler="local"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error", planner.PlanWarning)
        monkeypatch.setattr(pp, "allocator_limit_bytes", lambda: 50_000_000)
        planner.solve(
            step, *args, hbm_gb=0.02, hardware="h200", verify_compile=False, compiler="local"
        )
        monkeypatch.setattr(pp, "allocator_limit_bytes", lambda: None)  # XLA:CPU
        planner.solve(
            step, *args, hbm_gb=0.02, hardware="h200", verify_compile=False, compiler="local"
        )
