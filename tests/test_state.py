"""Train-state placement (planner/_src/trainstate/, cost/state.py, solve/state.py): the solver
against brute force with the optimizer state's leaves in the model, and the streamed update on a
real Adam step: the same numbers as the unplanned step, the host leaves in pinned host memory, the
compiled host and device bytes as planned (deviceless XLA:GPU, where the CUDA plugin is
installed)."""

import dataclasses
import types
import warnings

import jax
import numpy as np
import pytest
from synthetic import check_state_solve, random_problem, state_options

import planner
from examples import llama
from planner._src import trainstate as st
from planner._src.cost import state as cst
from planner._src.errors import InfeasibleBudgetError, PlannerError, PlanWarning
from planner._src.solve import solve_assignment
from planner._src.types import SolverOptions
from planner._src.verify.numerics import coarsest_eps, compare
from planner._src.xla import compile as xla_compile
from planner._src.xla import deviceless
from planner._src.xla import targets as tg

OPTS = SolverOptions(time_limit_s=5.0)
CFG = dataclasses.replace(llama.QUICKSTART, d_model=128, n_heads=4, d_ff=256, seq=32, batch=2)


def _leaves(scale: int) -> tuple[st.StateLeaf, ...]:
    """Three optimizer-state leaves (two stacked over 4 layers, one not) and a count."""

    def leaf(path, kib, layers):
        return st.StateLeaf(
            path=path,
            role="opt",
            nbytes=kib * 1024 * scale,
            layers=layers,
            shape=(4, kib * 256),
            dtype="float32",
        )

    return (
        leaf("mu_w", 256, 4),
        leaf("nu_w", 384, 4),
        leaf("mu_emb", 128, 1),
        st.StateLeaf(path="count", role="opt", nbytes=4, layers=1, shape=(), dtype="int32"),
    )


@pytest.mark.parametrize("seed", range(6))
def test_state_placement_equals_brute_force(seed):
    """CP-SAT's step time equals enumeration over (activation assignment x host subset) at
    budgets between the smallest and largest peak; some budget fits only with state on the
    host (the all-HBM state does not fit), which is the point of the feature."""
    graph, cost = random_problem(seed, n_nodes=6, n_regions=1, n_classes=3)
    cost = cst.with_state(cost, _leaves(1 + seed % 2))
    assert [c.leaf.path for c in cost.state] == ["mu_w", "nu_w", "mu_emb"]  # count never moves
    options = state_options(graph, cost)
    hbm_only = min(p.peak_bytes for _, h, p in options if not h)
    lowest = min(p.peak_bytes for _, _, p in options)
    assert lowest < hbm_only  # the state on the host lowers the smallest peak
    for budget in sorted({lowest, (lowest + hbm_only) // 2, hbm_only}):
        sol = check_state_solve(graph, cost, budget, options, OPTS)
        if sol is None:
            continue
        if budget < hbm_only:
            assert sol.state_on_host  # only a plan with state on the host fits
        # phase 2 (fewest host bytes at the fastest time) never moves state for nothing
        if budget >= max(p.peak_bytes for _, h, p in options if not h):
            assert not sol.state_on_host


def test_state_cost_formulas():
    """The module docstring's terms, by hand, on the H200 profile's link."""
    hw = planner.hardware.load_profile("h200")
    (mu, _, emb, _) = _leaves(1)
    costs = {c.leaf.path: c for c in cst.leaf_costs(_leaves(1), hw)}
    assert set(costs) == {"mu_w", "nu_w", "mu_emb"}
    piece = mu.nbytes // 4
    from cost_models import transfer_seconds

    want = 4 * (transfer_seconds(piece, hw, "h2d") + transfer_seconds(piece, hw, "d2h"))
    assert costs["mu_w"].exposed_s == pytest.approx(want)
    assert costs["mu_w"].update_buffer_bytes == 2 * piece
    assert costs["mu_emb"].update_buffer_bytes == 2 * emb.nbytes  # unstacked: whole leaf
    t = cst.evaluate_state(tuple(costs.values()), frozenset({"mu_w", "mu_emb"}))
    assert t.saved_bytes == t.host_bytes == mu.nbytes + emb.nbytes
    assert t.moved_bytes == 2 * t.host_bytes
    with pytest.raises(PlannerError, match="no such movable"):
        cst.evaluate_state(tuple(costs.values()), frozenset({"count"}))


def _placed_step(placement, policy=None):
    """The Adam step with ``placement`` applied: shardings, donation, streamed update."""
    step, (params, opt, batch) = llama.make_adam_step(
        dataclasses.replace(CFG, remat_policy=policy),
        wrap=lambda u: st.streamed_update(u, placement, CFG.n_layers),
    )
    dev = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    osh = st.state_shardings(opt, placement, dev)
    psh = jax.tree.map(lambda _: dev, params)
    bsh = jax.tree.map(lambda _: dev, batch)
    jitted = jax.jit(
        step, in_shardings=(psh, osh, bsh), out_shardings=(psh, osh, dev), donate_argnums=(0, 1)
    )
    return jitted, (params, opt, batch), osh


def _build(policy, placement):
    jitted, (params, opt, batch), osh = _placed_step(placement, policy)
    return jitted, (params, jax.device_put(opt, osh), batch)


def _host_placement():
    _, (params, opt, _) = llama.make_adam_step(CFG)
    leaves = st.state_leaves(opt, layers=CFG.n_layers, params=params)
    # Adam's moments of the stacked layer weights: the largest movable leaves, half of each
    host = {x.path for x in leaves if x.movable and x.layers > 1 and x.path.endswith("['wq']")}
    host |= {x.path for x in leaves if x.movable and x.layers > 1 and ".nu[" in x.path}
    host |= {x.path for x in leaves if x.path.endswith(".nu['unembed']")}  # unstacked, whole
    return leaves, st.placement_of(leaves, host)


def test_streamed_update_equals_unplanned_adam_step():
    """Part of Adam's state in pinned host memory, updated per layer slice: the new params,
    moments and count are bitwise the unplanned step's; the host leaves stay on the host."""
    leaves, placement = _host_placement()
    assert placement.on_host and placement.host_bytes() < sum(
        x.nbytes for x in leaves if x.role == "opt"
    )
    ref_step, args = llama.make_adam_step(CFG)
    want = jax.jit(ref_step)(*args)
    jitted, (params, opt, batch), osh = _placed_step(placement)
    got = jitted(params, jax.device_put(opt, osh), batch)
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    kinds = jax.tree_util.tree_flatten_with_path(got[1])[0]
    for key, x in kinds:
        path = jax.tree_util.keystr(key)
        assert x.sharding.memory_kind == ("pinned_host" if path in placement.on_host else "device")
    split = st.budget_split(leaves, placement, activation_bytes=0, activation_host_bytes=0)
    assert split["optimizer state"]["host"] == placement.host_bytes()
    assert split["parameters"]["hbm"] == split["gradients"]["hbm"] > 0


def test_compiled_host_and_device_bytes_match_the_placement():
    """Deviceless XLA:GPU for the H200 (skipped without the CUDA plugin): the compiled step
    takes exactly the planned bytes as host arguments, its device arguments drop by exactly
    those bytes, and its device bytes are at most the all-HBM step's minus the saving plus
    the streamed update's buffer U (docs/cost-model.md#the-train-state)."""
    target = tg.resolve("h200", num_devices=1)
    if target.kind != "deviceless":
        pytest.skip(f"no deviceless XLA:GPU here: {target.description}")
    leaves, placement = _host_placement()
    empty = st.placement_of(leaves, set())
    checks = {}
    for name, pl in (("hbm", empty), ("mixed", placement)):
        jitted, (params, opt, batch), osh = _placed_step(pl)
        args = deviceless.args_for(target, (params, jax.device_put(opt, osh), batch))
        prog = xla_compile.compile_traced(target, jitted, args)
        checks[name] = st.check_compiled(prog.compiled, pl)
    hbm, mixed = checks["hbm"], checks["mixed"]
    # With nothing on the host the wrapper is the optimizer itself: the plain donated step's
    # bytes (the version that carried every stacked leaf through its scan doubled both).
    step, args = llama.make_adam_step(CFG)
    plain = xla_compile.compile_traced(
        target, jax.jit(step, donate_argnums=(0, 1)), deviceless.args_for(target, args)
    )
    assert hbm.device_bytes == st.check_compiled(plain.compiled, empty).device_bytes
    assert hbm.host_argument_bytes == 0 and mixed.host_matches
    assert hbm.device_argument_bytes - mixed.device_argument_bytes == placement.host_bytes()
    costs = cst.leaf_costs(leaves, planner.hardware.load_profile("h200"))
    terms = cst.evaluate_state(costs, placement.on_host)
    assert mixed.device_bytes <= hbm.device_bytes - terms.saved_bytes + terms.update_buffer_bytes


def test_state_check_reads_host_outputs_only_where_reported():
    """StateCheck from memory_analysis figures: 0 host output bytes against a placement with
    host leaves is a mismatch (the state came back in HBM: out-shardings of the device's
    memory kind on a GPU); a compiler that has no host-output figure at all leaves only the
    arguments to check. (Figures by hand: a deviceless compile cannot show the slip, since
    it takes an output's kind from its value and aliases the donated host input to it.)"""
    leaves, placement = _host_placement()
    b = placement.host_bytes()

    class Compiled:
        def __init__(self, **host):
            self.m = types.SimpleNamespace(
                argument_size_in_bytes=10 * b,
                output_size_in_bytes=9 * b,
                alias_size_in_bytes=9 * b,
                temp_size_in_bytes=b,
                host_argument_size_in_bytes=b,
                host_temp_size_in_bytes=0,
                **host,
            )

        def memory_analysis(self):
            return self.m

    ok = st.check_compiled(Compiled(host_output_size_in_bytes=b), placement)
    assert ok.host_matches and ok.status.startswith("host bytes as planned")
    in_hbm = st.check_compiled(Compiled(host_output_size_in_bytes=0), placement)
    assert not in_hbm.host_matches and "gives back 0 bytes of host outputs" in in_hbm.status
    silent = st.check_compiled(Compiled(), placement)
    assert silent.host_output_bytes is None and silent.host_matches
    assert "unreported out" in silent.status
    assert silent.device_bytes == 11 * b


def test_plan_state_on_cpu_places_state_and_keeps_the_numbers():
    """The whole pipeline on XLA:CPU: at a budget the all-HBM state does not fit (the plan
    with no state on the host is infeasible), plan_state puts optimizer state on the host;
    the step under the plan's policy and placement gives the unplanned step's numbers
    within the numerics check's tolerance (planner/_src/verify/numerics/: a plan that keeps
    values the unplanned step recomputes changes XLA's fusions and so the rounding; bitwise
    equal while the plan kept what the unplanned step does, 3.7e-9 apart after the cost
    model's fusion rules moved the plan, 2026-12-04)."""
    step, args = llama.make_adam_step(CFG)
    session = planner.Planner(step, *args, hardware="cpu")  # not donated: a PlanWarning
    with pytest.warns(PlanWarning, match=r"does not donate(.|\n)*donate_argnums=\(0, 1\)"):
        roomy = planner.state.plan_state(session, 0.03, opt_state_argnum=1, params_argnum=0)
    assert not roomy.placement.on_host  # room enough: nothing moves (phase 2)
    with pytest.warns(PlanWarning, match="86.9 GB undonated"):
        tight = planner.state.plan_state(session, 0.02, opt_state_argnum=1, params_argnum=0)
    assert tight.placement.on_host
    assert tight.prediction.peak_bytes <= tight.usable_bytes
    split = tight.split
    assert split["optimizer state"]["host"] == tight.placement.host_bytes() > 0
    assert split["optimizer state"]["moved"] == 2 * tight.placement.host_bytes()
    assert "optimizer state" in tight.summary()
    # Without the state's freedom the same budget has no plan.
    no_state = dataclasses.replace(tight.placement, on_host=frozenset())
    assert no_state.host_bytes() == 0
    from planner._src.cost import build_cost_model

    cost = build_cost_model(session.trace, session.graph, session.hardware, allow_offload=True)
    with pytest.raises(InfeasibleBudgetError):
        solve_assignment(session.graph, cost, tight.usable_bytes, OPTS)
    want = jax.jit(step)(*args)
    jitted, placed = _build(tight.policy, tight.placement)
    got = jitted(*placed)
    leaves = compare(got, want, coarsest_eps(want))
    assert leaves and all(leaf.ok for leaf in leaves), [lf for lf in leaves if not lf.ok]
    # XLA:CPU has no host memory space in memory_analysis: the compile of the step as
    # applied is recorded as an estimate, not held to the budget (plan_state is Planner.plan
    # now, which did so already; it raised here before).
    with pytest.warns(PlanWarning, match="does not donate"):
        built = planner.state.plan_state(
            session, 0.02, opt_state_argnum=1, params_argnum=0, build=_build
        )
    assert built.compiled.estimated and "host memory space" in built.compiled.status
    with pytest.raises(planner.InvalidArgumentError, match="opt_state_argnum=3"):
        planner.state.plan_state(session, 0.02, opt_state_argnum=3)


def _compiled_bytes(placement) -> st.StateCheck:
    jitted, (params, opt, batch), osh = _placed_step(placement)
    compiled = jitted.lower(params, jax.device_put(opt, osh), batch).compile()
    return st.check_compiled(compiled, placement)


def test_streamed_update_writes_in_place():
    """The regression of 2026-12-04 (+41.4 GB on a 7.2 B Adam step): streamed_update must
    not carry the HBM state and the updates through its scan. On XLA:CPU (no host memory space: a
    host leaf stays in its one memory, and its new value, the scan's output, is a buffer of its
    own), one stacked moment on the host may add at most that leaf and the update's buffer U
    (docs/cost-model.md#the-train-state) to the donated step's bytes with the whole state in HBM.
    The version that carried every stacked leaf compiled to +7.09 MB here (22.03 vs 14.94 MB, with
    or without a leaf on the host) against the +0.26 MB this allows."""
    _, (params, opt, _) = llama.make_adam_step(CFG)
    leaves = st.state_leaves(opt, layers=CFG.n_layers, params=params)
    one = st.placement_of(
        leaves, {x.path for x in leaves if x.path.endswith(".nu['layers']['wq']")}
    )
    assert one.on_host and all(
        x.layers == CFG.n_layers for x in one.leaves if x.path in one.on_host
    )
    step, args = llama.make_adam_step(CFG)
    plain = jax.jit(step, donate_argnums=(0, 1)).lower(*args).compile().memory_analysis()
    hbm = plain.argument_size_in_bytes + plain.output_size_in_bytes
    hbm += plain.temp_size_in_bytes - plain.alias_size_in_bytes
    terms = cst.evaluate_state(
        cst.leaf_costs(leaves, planner.hardware.load_profile("h200")), one.on_host
    )
    mixed = _compiled_bytes(one)
    assert mixed.device_bytes <= hbm + one.host_bytes() + terms.update_buffer_bytes
    assert mixed.alias_bytes >= plain.alias_size_in_bytes - one.host_bytes()  # donated


def test_state_made_by_jit_in_plan_shardings_is_updated_in_place():
    """A state created by ``jax.jit(tx.init, out_shardings=...)`` (state_shardings' own
    advice): with the placement's shardings (NamedShardings) its host leaves trace as host
    memory and the streamed update writes them in place, silently; with a
    SingleDeviceSharding of memory kind pinned_host (the 7.2 B H200 harness of 2026-12-04)
    they trace as device memory, and the update, still exact, warns that it copies them
    whole every step, naming them."""
    import optax

    leaves, placement = _host_placement()
    plain, (params, opt, batch) = llama.make_adam_step(CFG)
    want = jax.jit(plain)(params, opt, batch)
    dev = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    osh = st.state_shardings(opt, placement, dev)
    assert all(isinstance(x, jax.sharding.NamedSharding) for x in jax.tree.leaves(osh))
    single = jax.tree.map(
        lambda x, h: dev.with_memory_kind("pinned_host" if h else "device"),
        opt,
        st.shardings._mask(opt, placement),
    )
    init = optax.adam(1e-3).init
    n_host = sum(1 for x in leaves if x.key in placement.on_host and x.layers > 1)
    for shardings, warns in ((osh, False), (single, True)):
        step, _ = llama.make_adam_step(  # a step of its own: JAX traces it anew
            CFG, wrap=lambda u: st.streamed_update(u, placement, CFG.n_layers), concrete=False
        )
        made = jax.jit(init, out_shardings=shardings)(params)
        host_avals = [
            x for x in jax.tree.leaves(made) if "host" in str(x.aval.memory_space).lower()
        ]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = jax.jit(step)(params, made, batch)
        msgs = [str(w.message) for w in caught if issubclass(w.category, PlanWarning)]
        if warns:
            assert not host_avals
            assert len(msgs) == 1 and f"copies {n_host} host leaves whole" in msgs[0], msgs
            assert ".mu['layers']['wq']" in msgs[0] and "NamedSharding" in msgs[0]
        else:
            assert len(host_avals) == sum(1 for x in leaves if x.key in placement.on_host)
            assert not msgs, msgs
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


@pytest.fixture(scope="module")
def donated_session():
    step, args = llama.make_adam_step(CFG)
    return planner.Planner(jax.jit(step, donate_argnums=(0, 1)), *args, hardware="cpu")


def test_planner_plan_places_state_reports_the_split_and_checks_numerics(donated_session):
    """Planner.plan with opt_state_argnum (XLA:CPU, the donated step): at a budget the
    whole state in HBM does not fit, a Plan whose plan.state puts optimizer state on the
    host; its report shows the budget split and what to apply; with build the step as
    applied is compiled and its outputs checked against the user's step's (the planner's
    numerics check); no donation warning. The same decisions as plan_state."""
    import json

    from planner._src.results.report import report_from_dict

    session = donated_session
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = session.plan(0.012, opt_state_argnum=1, params_argnum=0, build=_build)
        sp = planner.state.plan_state(
            session, 0.012, opt_state_argnum=1, params_argnum=0, build=_build
        )
    said = [str(w.message) for w in caught if issubclass(w.category, PlanWarning)]
    # donated: no donation warning; XLA:CPU cannot check the host bytes: "not verified"
    assert said and all(m.startswith("The plan is compiled but not verified") for m in said)
    assert plan.state.placement == sp.placement and plan.state.placement.on_host
    assert plan.state.donated
    assert plan.prediction.peak_bytes == sp.prediction.peak_bytes <= 12_000_000
    parts = {x.part: x for x in plan.state.parts}
    host = plan.state.placement.host_bytes()
    assert parts["optimizer state"].host_bytes == host > 0
    assert parts["optimizer state"].moved_bytes == 2 * host
    assert parts["parameters"].hbm_bytes == parts["gradients"].hbm_bytes > 0
    # The step as applied ran and gave the user's step's numbers.
    assert plan.numerics is not None and plan.numerics.checked and plan.numerics.ok
    assert plan.state.compiled is not None and plan.state.compiled.estimated  # XLA:CPU
    assert plan.verification.status == "compiled, unverified"
    text = plan.report()
    assert "budget split" in text and "plan.state.streamed_update(tx.update)" in text
    assert "donate_argnums=(0, 1)" in text
    data = json.loads(plan.report("json"))
    assert report_from_dict(data).budget_split == tuple(
        dataclasses.asdict(x) for x in plan.state.parts
    )
    assert "Budget split" in plan.report("markdown")
    # What to apply, from the plan: the shardings' memory kinds follow the placement.
    _, (_, opt, _) = llama.make_adam_step(CFG)
    dev = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    kinds = jax.tree_util.tree_flatten_with_path(plan.state.shardings(opt, dev))[0]
    on_host = {jax.tree_util.keystr(k) for k, s in kinds if s.memory_kind == "pinned_host"}
    assert on_host == plan.state.placement.on_host
    # Without build the plan is compiled as plan.apply returns it (the optimizer is closed
    # over by this step: host leaves come in whole, and are priced so), and the report says
    # how it is applied (before plan.apply existed, such a plan was not compiled).
    bare = session.plan(0.012, opt_state_argnum=1)
    assert bare.state.mode == "whole" and bare.state.layers == 1
    assert bare.state.compiled is not None and bare.state.compiled.estimated
    assert "brings each host leaf in whole" in bare.report()
    with pytest.raises(planner.InvalidArgumentError, match="without opt_state_argnum"):
        session.plan(0.012, build=_build)
    with pytest.raises(planner.InvalidArgumentError, match="params_argnum"):
        planner.PlanOptions(params_argnum=0)


@pytest.mark.slow
def test_plan_state_deviceless_h200_compiles_as_planned():
    """Deviceless XLA:GPU for the H200: plans with optimizer state on the host compile
    within the budget (after the correction rounds) and take exactly the planned host bytes."""
    target = tg.resolve("h200", num_devices=1)
    if target.kind != "deviceless":
        pytest.skip(f"no deviceless XLA:GPU here: {target.description}")
    step, args = llama.make_adam_step(CFG)
    session = planner.Planner(step, *args, hardware="h200")
    # 1.05 x the full-remat anchor: after the allocator headroom, XLA's 95% and the
    # deviceless margin, less than the all-HBM step needs (the anchor is mostly cuBLAS
    # workspaces and the state at this size: 54.3 MB, 6.8 MB of it Adam moments, 2026-12-04).
    hbm_gb = 1.05 * session.trace.anchor.device_bytes / 1e9
    with pytest.warns(PlanWarning, match="does not donate"):
        plan = planner.state.plan_state(
            session, hbm_gb, opt_state_argnum=1, params_argnum=0, build=_build
        )
    assert plan.placement.on_host
    assert plan.compiled.host_matches
    assert plan.compiled.device_bytes <= plan.usable_bytes
    # The same through Planner.plan: a Plan compiled as applied, within budget, with the
    # planned host bytes (the step is not donated here: the PlanWarning says so).
    with pytest.warns(PlanWarning, match="does not donate"):
        full = session.plan(hbm_gb, opt_state_argnum=1, params_argnum=0, build=_build)
    assert full.state.placement == plan.placement
    assert full.verification.status == "compiled, within budget", full.verification
    assert full.verification.compiled_device_bytes == plan.compiled.device_bytes
    assert all(c.ok for c in full.verification.checks)
    assert full.state.compiled.host_matches and not full.state.compiled.estimated
