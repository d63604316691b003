"""Parameters in pinned host memory as decisions of the train-state block (planner/_src/
solve/state.py): the solver against brute force with parameter leaves in the model, the cost
terms by hand, and on the Adam Llama step a plan that puts parameters on the host whose
step (stream_layer_params in the checkpointed layer, trainstate.streamed_apply around optax's
update) gives the unplanned step's numbers; on deviceless XLA:GPU for the H200 (skipped
without the CUDA plugin) the compiled step's host bytes are the plan's."""

import dataclasses

import jax
import numpy as np
import pytest
from synthetic import all_assignments, check_state_solve, random_problem, state_options

import planner
from examples import llama
from planner._src import trainstate as st
from planner._src.cost import evaluate
from planner._src.cost import state as cst
from planner._src.errors import InfeasibleBudgetError, PlannerError
from planner._src.solve import solve_assignment
from planner._src.trainstate.select import StateSelection
from planner._src.types import SolverOptions
from planner._src.units import GB
from planner._src.xla import compile as xla_compile
from planner._src.xla import deviceless
from planner._src.xla import targets as tg

OPTS = SolverOptions(time_limit_s=5.0)
CFG = dataclasses.replace(llama.QUICKSTART, d_model=128, n_heads=4, d_ff=256, seq=32, batch=2)
L = CFG.n_layers


def _synthetic_leaves(scale: int) -> tuple[st.StateLeaf, ...]:
    """A stacked parameter (streamable), its two moments, and an unstacked parameter that
    never moves. Sizes: at most the synthetic problems' fixed bytes (1 MiB) saved in all."""

    def leaf(path, role, kib, layers, streamable=False):
        return st.StateLeaf(
            path=path,
            role=role,
            nbytes=kib * 1024 * scale,
            layers=layers,
            shape=(layers, kib * 256 // layers),
            dtype="float32",
            streamable=streamable,
        )

    return (
        leaf("['w']", "param", 128, 4, streamable=True),
        leaf("['emb']", "param", 64, 1, streamable=True),  # not stacked: never moves
        leaf(".mu['w']", "opt", 128, 4),
        leaf(".nu['w']", "opt", 128, 4),
    )


@pytest.mark.parametrize("seed", range(6))
def test_param_placement_equals_brute_force(seed):
    """CP-SAT's step time equals enumeration over (activation assignment x host subset of
    the parameter and its moments); some budget fits only with the parameter on the host
    (every optimizer-state leaf on the host is not enough)."""
    graph, cost = random_problem(seed, n_nodes=6, n_regions=1, n_classes=3)
    cost = cst.with_state(cost, _synthetic_leaves(1 + seed % 2))
    assert [c.leaf.key for c in cost.state] == ["params['w']", ".mu['w']", ".nu['w']"]
    # (the unstacked param never moves)
    options = state_options(graph, cost)
    opt_only = min(p.peak_bytes for _, h, p in options if "params['w']" not in h)
    lowest = min(p.peak_bytes for _, _, p in options)
    assert lowest < opt_only  # the parameter on the host lowers the smallest peak
    for budget in sorted({lowest, (lowest + opt_only) // 2, opt_only}):
        sol = check_state_solve(graph, cost, budget, options, OPTS)
        if sol is not None and budget < opt_only:
            assert "params['w']" in sol.state_on_host  # only a plan with it on the host fits
    with pytest.raises(InfeasibleBudgetError):
        solve_assignment(graph, cost, lowest - 64 * 1024, OPTS)


@pytest.mark.parametrize("seed", range(3))
def test_host_cap_counts_a_host_parameters_gradient(seed):
    """A host parameter holds 2 b in pinned host memory at the step's host peak (b resident,
    its gradient b written during the backward pass): with a host cap between b and 2 b
    the solver never puts it there, and its answer equals brute force under that cap."""
    graph, cost = random_problem(seed, n_nodes=6, n_regions=1, n_classes=3)
    cost = cst.with_state(cost, _synthetic_leaves(1))
    b = next(c.leaf.nbytes for c in cost.state if c.leaf.role == "param")
    cost = dataclasses.replace(cost, host_cap_bytes=float(b + b // 2))
    alone = evaluate(
        cost,
        graph,
        next(iter(all_assignments(graph, cost))),
        state_on_host=frozenset({"params['w']"}),
    )
    # (evaluate's activation host bytes are >= 0: the parameter alone is 2 b)
    assert alone.host_bytes >= 2 * b > cost.host_cap_bytes
    options = state_options(graph, cost)
    within_cap = [h for _, h, p in options if p.host_bytes <= cost.host_cap_bytes]
    assert within_cap and all("params['w']" not in h for h in within_cap)
    budget = min(p.peak_bytes for _, _, p in options if p.host_bytes <= cost.host_cap_bytes)
    sol = check_state_solve(graph, cost, budget, options, OPTS)
    assert "params['w']" not in sol.state_on_host


def test_param_cost_terms_and_budget_split():
    """The train state's parameter terms (docs/cost-model.md#the-train-state) by hand on the H200
    profile's link, and the budget split: a parameter on the host takes its gradient with it."""
    from cost_models import transfer_seconds

    hw = planner.hardware.load_profile("h200")
    leaves = _synthetic_leaves(1)
    w = leaves[0]
    costs = {c.leaf.key: c for c in cst.leaf_costs(leaves, hw)}
    c = costs["params['w']"]
    piece = w.nbytes // 4
    assert c.saved_bytes == 2 * w.nbytes  # the weight and its gradient
    assert c.inflight_bytes == cst.INFLIGHT_SLICES * piece == 3 * piece
    assert c.update_buffer_bytes == 3 * piece
    assert c.host_bytes == w.nbytes and c.host_temp_bytes == w.nbytes  # its host gradient
    want = 4 * (4 * transfer_seconds(piece, hw, "h2d") + 2 * transfer_seconds(piece, hw, "d2h"))
    assert c.exposed_s == pytest.approx(want)
    assert c.moved_bytes == 6 * w.nbytes
    on_host = frozenset({"params['w']", ".mu['w']"})
    t = cst.evaluate_state(tuple(costs.values()), on_host)
    mu = costs[".mu['w']"]
    assert t.saved_bytes == 2 * w.nbytes + mu.saved_bytes
    assert t.inflight_bytes == 3 * piece
    assert t.update_buffer_bytes == 3 * piece + 2 * piece
    pl = st.placement_of(leaves, on_host)
    assert pl.param_paths() == {"['w']"} and pl.opt_paths() == {".mu['w']"}
    assert pl.host_bytes() == 2 * w.nbytes
    split = st.budget_split(leaves, pl, activation_bytes=0, activation_host_bytes=0)
    assert split["parameters"]["host"] == split["gradients"]["host"] == w.nbytes
    assert split["parameters"]["hbm"] == split["gradients"]["hbm"] == leaves[1].nbytes
    assert split["parameters"]["moved"] == 4 * w.nbytes
    assert split["gradients"]["moved"] == 2 * w.nbytes
    with pytest.raises(PlannerError, match="stream_params"):
        st.placement_of(leaves, {"params['emb']"})


# ------------------------------------------------------------------ the Adam Llama step


def _applied(policy, placement, cfg=CFG):
    """The Adam step as the user applies ``placement``: the host parameters streamed into
    the checkpointed layer, trainstate.streamed_apply around optax's update, shardings with
    memory kinds, params and state donated. Returns (jitted, args placed)."""
    ps = st.PlanState(
        selection=StateSelection(opt_path="[1]", params_path="[0]"),
        layers=cfg.n_layers,
        placement=placement,
        parts=(),
        terms=cst.evaluate_state((), frozenset()),
    )
    step, (params, opt, batch) = llama.make_adam_step(
        dataclasses.replace(cfg, remat_policy=policy, layer_wrap=ps.stream_layer_params),
        apply=ps.streamed_apply,
    )
    dev = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    osh, psh = ps.shardings(opt, dev), ps.param_shardings(params, dev)
    jitted = jax.jit(
        step,
        in_shardings=(psh, osh, jax.tree.map(lambda _: dev, batch)),
        out_shardings=(psh, osh, dev),
        donate_argnums=(0, 1),
    )
    return jitted, (jax.device_put(params, psh), jax.device_put(opt, osh), batch)


def _leaves():
    _, (params, opt, _) = llama.make_adam_step(CFG)
    return st.state_leaves(opt, layers=L, params=params, stream_params=True)


def _mixed(leaves):
    """wq and w1 on the host; w1's moments and w2's nu too (w2 itself in HBM)."""
    host = {"params['layers']['wq']", "params['layers']['w1']"}
    host |= {
        x.key
        for x in leaves
        if x.role == "opt"
        and (x.path.endswith(".mu['layers']['w1']") or x.path.endswith("nu['layers']['w1']"))
    }
    host |= {x.key for x in leaves if x.path.endswith(".nu['layers']['w2']")}
    return st.placement_of(leaves, host)


def test_streamed_apply_equals_unplanned_adam_step():
    """Host parameters (two stacked weights), host moments (of a host and of an HBM
    parameter): the new params, moments, count and loss are bitwise the unplanned step's,
    and each leaf comes back in the memory kind the placement gives it."""
    pl = _mixed(_leaves())
    ref_step, args = llama.make_adam_step(CFG)
    want = jax.jit(ref_step)(*args)
    jitted, placed = _applied(None, pl)
    got = jitted(*placed)
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for tree, paths in ((got[0], pl.param_paths()), (got[1], pl.opt_paths())):
        for key, x in jax.tree_util.tree_flatten_with_path(tree)[0]:
            want_kind = "pinned_host" if jax.tree_util.keystr(key) in paths else "device"
            assert x.sharding.memory_kind == want_kind, jax.tree_util.keystr(key)


@pytest.fixture(scope="module")
def session():
    step, args = llama.make_adam_step(CFG)
    return planner.Planner(jax.jit(step, donate_argnums=(0, 1)), *args, hardware="cpu")


def _hbm_gb_for(session, usable: int) -> float:
    """The hbm_gb whose usable bytes (session.usable_bytes) are ``usable`` (bisection)."""
    from planner._src.budget import io_bytes, usable_bytes

    lo, hi = usable / GB, 4 * usable / GB
    for _ in range(60):
        mid = (lo + hi) / 2
        got = usable_bytes(int(mid * GB), session.hardware, io_bytes(session.trace), session.margin)
        lo, hi = (mid, hi) if got < usable else (lo, mid)
    return hi


def _between(session) -> tuple[int, float]:
    """The usable bytes halfway between the solver's smallest peak with the optimizer state
    free to move (parameters in HBM) and with the parameters free too, and its hbm_gb."""
    from planner._src.cost import build_cost_model
    from planner._src.solve import min_feasible_bytes

    base = build_cost_model(session.trace, session.graph, session.hardware, allow_offload=True)
    _, (params, opt, _) = llama.make_adam_step(CFG)
    lowest = {
        stream: min_feasible_bytes(
            session.graph,
            cst.with_state(
                base, st.state_leaves(opt, layers=L, params=params, stream_params=stream)
            ),
            OPTS,
        )
        for stream in (False, True)
    }
    assert lowest[True] < lowest[False]  # the parameters' freedom lowers the smallest peak
    budget = int(lowest[True] + lowest[False]) // 2
    return budget, _hbm_gb_for(session, budget)


def test_plan_puts_parameters_on_the_host_and_keeps_the_numbers(session):
    """XLA:CPU, the whole pipeline: at a budget between the smallest peak with every
    optimizer-state leaf on the host (parameters in HBM) and the smallest with parameters
    and state on the host, the plan puts parameters on the host; its step as applied
    (build) gives the user's step's numbers (the planner's numerics check), the compile is
    recorded as unverified (XLA:CPU has no host memory space), the report's budget split
    shows parameters and gradients on the host, and what to apply names the helpers."""
    budget, hbm_gb = _between(session)
    build = lambda policy, placement: _applied(policy, placement)  # noqa: E731
    with pytest.raises(InfeasibleBudgetError):  # parameters fixed in HBM: no plan
        session.plan(hbm_gb, opt_state_argnum=1, params_argnum=0, build=build)
    plan = session.plan(
        hbm_gb,
        opt_state_argnum=1,
        params_argnum=0,
        stream_params=True,
        build=build,
    )
    pl = plan.state.placement
    assert pl.param_paths(), pl.on_host
    assert plan.prediction.peak_bytes <= budget
    assert plan.numerics is not None and plan.numerics.checked and plan.numerics.ok
    assert plan.state.compiled.estimated and plan.verification.status == "compiled, unverified"
    assert plan.state.compiled.status.startswith("unverified")
    check = {c.name: c for c in plan.verification.checks}["train state on the host"]
    assert check.unverified and check.detail.startswith("the compiler reports no host memory")
    parts = {x.part: x for x in plan.state.parts}
    host_params = sum(x.nbytes for x in pl.leaves if x.role == "param" and x.key in pl.on_host)
    assert parts["parameters"].host_bytes == parts["gradients"].host_bytes == host_params
    assert parts["parameters"].moved_bytes == 4 * host_params
    text = plan.report()
    assert "parameters in pinned host memory" in text
    assert "plan.state.streamed_apply(tx.update)" in text
    assert "plan.state.stream_layer_params" in text and "param_shardings" in text
    with pytest.raises(PlannerError, match="streamed_apply"):
        plan.state.streamed_update(lambda *a: a)


def _compiled(policy, placement):
    target = tg.resolve("h200", num_devices=1)
    jitted, placed = _applied(policy, placement)
    prog = xla_compile.compile_traced(target, jitted, deviceless.args_for(target, placed))
    return prog.compiled


def test_deviceless_h200_host_bytes_are_the_planned_parameter_bytes():
    """Deviceless XLA:GPU for the H200 (skipped without the CUDA plugin): the step with
    parameters and moments on the host takes exactly the planned host bytes as host
    arguments and gives them back as host outputs (StateCheck.status says so), its host
    temporaries are the model's (the gradient and new value of a host parameter, the new
    value of a host moment), and its device bytes drop by at least the model's saving less
    the slices in flight (the model never promises more than the compile saves)."""
    target = tg.resolve("h200", num_devices=1)
    if target.kind != "deviceless":
        pytest.skip(f"no deviceless XLA:GPU here: {target.description}")
    leaves = _leaves()
    pl = _mixed(leaves)
    terms = cst.evaluate_state(
        cst.leaf_costs(leaves, planner.hardware.load_profile("h200")), pl.on_host
    )
    none = st.check_compiled(_compiled(None, st.placement_of(leaves, set())), pl)
    mixed = st.check_compiled(_compiled(None, pl), pl, terms)
    host_params = sum(x.nbytes for x in leaves if x.role == "param" and x.key in pl.on_host)
    assert host_params > 0 and pl.host_bytes() > host_params
    assert mixed.host_argument_bytes == mixed.host_output_bytes == pl.host_bytes()
    assert mixed.host_matches and mixed.status.startswith("host bytes as planned")
    assert mixed.host_temp_bytes == terms.host_temp_bytes
    assert none.host_argument_bytes == 0 and not none.host_matches
    assert "host bytes differ" in none.status
    assert none.device_bytes - mixed.device_bytes >= terms.saved_bytes - terms.inflight_bytes


@pytest.mark.slow
def test_plan_deviceless_h200_compiles_parameters_on_the_host_as_planned():
    """Deviceless XLA:GPU for the H200: at a budget only a plan with parameters on the host
    fits, Planner.plan (stream_params, build) puts parameters there, and the step as
    applied compiles within the budget with exactly the planned host bytes."""
    target = tg.resolve("h200", num_devices=1)
    if target.kind != "deviceless":
        pytest.skip(f"no deviceless XLA:GPU here: {target.description}")
    step, args = llama.make_adam_step(CFG)
    session = planner.Planner(jax.jit(step, donate_argnums=(0, 1)), *args, hardware="h200")
    budget, hbm_gb = _between(session)
    plan = session.plan(
        hbm_gb,
        opt_state_argnum=1,
        params_argnum=0,
        stream_params=True,
        build=lambda policy, placement: _applied(policy, placement),
    )
    pl, chk = plan.state.placement, plan.state.compiled
    assert pl.param_paths()
    assert plan.verification.status == "compiled, within budget", plan.verification
    assert chk.host_matches and not chk.estimated
    assert chk.host_argument_bytes == pl.host_bytes()
    assert chk.device_bytes <= budget
