"""``plan.apply(step_fn)`` and ``load_plan(path).apply(step_fn)``: the user's step under the
plan's policies without editing the model, checked with JAX's own saved-residuals list
(``jax.ad_checkpoint.print_saved_residuals``) against the model edited by hand, and the
applied step's numbers against the unplanned step's."""

from __future__ import annotations

import contextlib
import io

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.ad_checkpoint import print_saved_residuals

import planner
from planner._src.budget import io_bytes, requested_for
from planner._src.verify.numerics import coarsest_eps, compare
from planner._src.xla import adapter
from tests.zoo import flax_linen

D, LAYERS, BATCH = 128, 4, 512


def _layer(p, x):
    h = jnp.tanh(x @ p["w1"])
    return x + jnp.sin(h @ p["w2"])


def _params():
    ks = jax.random.split(jax.random.key(0), 2 * LAYERS)
    return [
        dict(
            w1=0.05 * jax.random.normal(ks[2 * i], (D, 4 * D)),
            w2=0.05 * jax.random.normal(ks[2 * i + 1], (4 * D, D)),
        )
        for i in range(LAYERS)
    ]


def _loss_with(policies):
    """A Python loop over the layers; ``policies[i]``: layer i's ``jax.checkpoint`` policy
    (the model edited by hand, one call site per layer)."""
    layers = [jax.checkpoint(_layer, policy=p) for p in policies]

    def loss(params, x):
        for layer, p in zip(layers, params):
            x = layer(p, x)
        return jnp.mean(x**2)

    return loss


LOSS = _loss_with([None] * LAYERS)  # the user's model: one policy (None) for every layer


def _step(params, x):
    loss, grads = jax.value_and_grad(LOSS)(params, x)
    return jax.tree.map(lambda a, g: a - 0.1 * g, params, grads), loss


@pytest.fixture(scope="module")
def loop_plan():
    params = _params()
    x = jax.random.normal(jax.random.key(1), (BATCH, D))
    # 20% of the way from full remat's compiled bytes to saving everything (JAX 0.10.2: 9.96
    # to 14.16 MB; 0.12.0.1: 6.55 to 14.16 MB, so no fixed budget serves both): not every
    # layer can keep what it would like, and the layers decide differently (0.10.2 and
    # 0.12.0.1: 2 distinct per-layer saved sets; at 30%, 0.10.2 plans every layer alike since
    # the model counts tanh's twice-held buffer, test below).
    session = planner.Planner(
        _step,
        params,
        x,
        hardware="cpu",
        allow_offload=False,
        layer_groups=True,
        compare_stock=False,
    )
    lo, hi = session.trace.anchor.device_bytes, session.trace.anchor_saved.device_bytes
    # Where the compiler runs a Python loop's recompute in the forward pass (JAX 0.10.2's XLA:CPU,
    # trace.hoists_recompute; docs/cost-model.md E_r), every policy that keeps matmul outputs holds
    # what full remat holds (9.96 MB), and the layers first decide differently at 80% of the span
    # (layer 3 keeps tanh, 11.01 MB compiled; at 20% the plan is full remat). Elsewhere (0.12.0.1)
    # 20% (7.86 MB: two distinct per-layer sets; from 60% on every layer keeps tanh and its matmul
    # output).
    usable = lo + (0.8 if session.trace.hoists_recompute else 0.2) * (hi - lo)
    plan = session.plan(requested_for(usable, session.hardware, io_bytes(session.trace)) / 1e9)
    return plan, params, x


def test_a_saved_tanh_a_fusion_rereads_is_held_twice():
    """Outside lax.scan (a Python loop of checkpointed layers), keeping tanh's output while
    the backward pass recomputes tanh's derivative from it: JAX keeps the residual as
    ``reduce_precision(tanh)``, XLA duplicates that copy into the derivative's backward fusion,
    which then reads tanh's own buffer, and the copy stays for the weight gradient's matmul:
    both live from the forward to the backward pass (XLA:CPU buffer assignment, 2026-12-04;
    the same on the H200's deviceless compiler). The model counts the value twice
    (docs/cost-model.md, D_r): before, this plan was predicted 11.01 MB and compiled to 14.16 MB
    (-22%), and the verify loop's correction then made every plan but full remat infeasible."""
    from planner._src.cost import build_cost_model, evaluate
    from planner._src.emit.emit import emit
    from planner._src.graph import build_graph, class_key
    from planner._src.trace import trace_step
    from planner._src.types import Assignment
    from planner._src.verify.verify import VerifyRequest, verify

    params = _params()
    x = jax.ShapeDtypeStruct((BATCH, D), jnp.float32)
    tr = trace_step(_step, (params, x))
    graph = build_graph(tr)
    cost = build_cost_model(tr, graph, "cpu", allow_offload=False)
    rc, rg = cost.regions[0], graph.regions[0]
    (t,) = [c for c in rg.region.candidates if c.primitive == "tanh"]
    saving = Assignment.of({class_key(rg.region, t): "save"})
    predicted = evaluate(cost, graph, saving)
    # The second copy is the compiler's, not JAX's: the check that JAX keeps the planned
    # residuals passes (it compares JAX's residuals with device_residual_bytes).
    emitted = emit(saving, {c.key: c.name for c in graph.classes}, cost.hardware)
    res = verify(
        VerifyRequest(
            step_fn=_step,
            args=(params, x),
            trace=tr,
            graph=graph,
            cost=cost,
            assignment=saving,
            emitted=emitted,
            prediction=predicted,
            usable_bytes=10**9,
            compile=False,
        )
    )
    ver, not_kept = res.verification, res.not_kept
    assert not not_kept and all(k.ok for k in ver.checks), ver.checks
    assert predicted.regions[0].twice_held_bytes == (t.nbytes if tr.holds_rereads_twice else 0)
    assert t.read_by_kernel  # the weight gradient's matmul
    assert rc.twice_held[t.index] == tr.holds_rereads_twice

    def only_tanh(prim, *_, **__):
        return prim.name == "tanh"

    def step(params, x):
        loss, grads = jax.value_and_grad(_loss_with([only_tanh] * LAYERS))(params, x)
        return jax.tree.map(lambda a, g: a - 0.1 * g, params, grads), loss

    m = jax.jit(step).lower(params, x).compile().memory_analysis()
    compiled = (
        m.argument_size_in_bytes
        + m.output_size_in_bytes
        - m.alias_size_in_bytes
        + m.temp_size_in_bytes
    )
    # The model without the twice-held term:
    single = predicted.peak_bytes - (LAYERS * t.nbytes if tr.holds_rereads_twice else 0)
    # The probe (trace.holds_rereads_twice) says what this program shows: JAX 0.10.2's
    # XLA:CPU holds the four tanh outputs twice (compiled 14.16 MB, 2.89 MB over the model
    # without the term), JAX 0.12.0.1's does not (9.70 MB, 1.83 MB over; half of the four
    # tensors is 2.10 MB). The H200's deviceless compiler (jaxlib 0.11.2) does not either.
    assert tr.holds_rereads_twice == (compiled - single > 0.5 * LAYERS * t.nbytes)
    if tr.holds_rereads_twice:
        # JAX 0.10.2: predicted 15.47 MB (+9%: the model adds the last layer's backward
        # working set to every residual; XLA's peak is at the end of the forward pass);
        # without the term 11.27 MB (-20%).
        assert 0.98 * compiled <= predicted.peak_bytes <= 1.12 * compiled, (predicted, compiled)


def _same_numbers(got, want):
    """Every output leaf within the numerics check's tolerance (planner/_src/verify/numerics/:
    recomputed and saved values round differently; AdamW's moments of tiny gradients make
    elementwise relative comparisons meaningless)."""
    leaves = compare(got, want, coarsest_eps(want))
    assert leaves and all(leaf.ok for leaf in leaves), [lf for lf in leaves if not lf.ok]


def _by_group(plan) -> dict[int, set]:
    out: dict[int, set] = {}
    for c in plan.candidates():
        if c["decision"] == "save" and c["needed_by_backward"]:
            out.setdefault(c["group"], set()).add((c["primitive"], c["shape"]))
    return out


def test_apply_gives_each_layer_of_a_python_loop_its_own_policy(loop_plan, tmp_path):
    plan, params, x = loop_plan
    assert plan.layer_groups == LAYERS
    groups = _by_group(plan)
    assert len({frozenset(s) for s in groups.values()}) > 1, groups  # layers decide differently
    assert plan.bind_groups() == {i: i for i in range(LAYERS)}
    applied = adapter.saved_residuals(plan.apply(LOSS, check=False), params, x)
    edited = adapter.saved_residuals(_loss_with(list(plan.policies)), params, x)
    unplanned = adapter.saved_residuals(LOSS, params, x)
    assert sorted(applied) == sorted(edited)
    assert sorted(applied) != sorted(unplanned)
    # the plan file gives the same
    plan.save(tmp_path / "plan.json")
    saved = planner.load_plan(tmp_path / "plan.json")
    applied_saved = saved.apply(LOSS, check=False)  # the step's plan on its loss
    assert sorted(adapter.saved_residuals(applied_saved, params, x)) == sorted(edited)


def test_kept_rows_are_labelled_as_print_saved_residuals_prints_them(loop_plan):
    """The whole model under the plan, a layer per call site (no scan): every kept row of
    the decision table, in every group, is a line JAX prints, string for string."""
    from planner._src.results.report import build_report

    plan, params, x = loop_plan
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_saved_residuals(plan.apply(LOSS, check=False), params, x)
    printed = set(out.getvalue().splitlines())
    kept = [r for r in build_report(plan).rows if r.decision != "remat"]
    assert len({r.group for r in kept}) > 1  # rows of several layers
    for row in kept:
        assert row.jax_label in printed, (row.jax_label, sorted(printed))
        assert "tests/test_apply.py:" in row.jax_label  # the user's line, as JAX gives it


def test_applied_step_computes_what_the_unplanned_step_does(loop_plan):
    plan, params, x = loop_plan
    step = jax.jit(plan.apply(_step))
    got = step(params, x)
    again = step(params, x)  # the second call hits the applied step's cache
    want = jax.jit(_step)(params, x)
    _same_numbers(got, want)
    for a, c in zip(jax.tree.leaves(got), jax.tree.leaves(again)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(c))
    # the step as written keeps its own program: its residuals are the unplanned ones
    assert sorted(adapter.saved_residuals(LOSS, params, x)) != sorted(
        adapter.saved_residuals(plan.apply(LOSS, check=False), params, x)
    )


def test_apply_refuses_what_is_not_a_function(loop_plan):
    with pytest.raises(planner.InvalidArgumentError):
        loop_plan[0].apply("train_step")


def _flax_loss(state):
    def loss(params, tokens):
        logits = state.apply_fn({"params": params}, tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    return loss


def test_apply_on_flax_scan_remat(tmp_path):
    step, (state, tokens) = flax_linen.make()
    plan = planner.solve(
        step,
        state,
        tokens,
        hbm_gb=0.013,
        hardware="cpu",
        allow_offload=False,
        compare_stock=False,
        verify_compile=False,
    )
    loss = _flax_loss(state)
    applied = adapter.saved_residuals(plan.apply(loss, check=False), state.params, tokens)
    edited_state = flax_linen.make(policy=plan.policy)[1][0]  # nn.remat(policy=...) edited in
    edited = adapter.saved_residuals(_flax_loss(edited_state), edited_state.params, tokens)
    assert sorted(applied) == sorted(edited)
    assert sorted(applied) != sorted(adapter.saved_residuals(loss, state.params, tokens))
    plan.save(tmp_path / "plan.json")
    saved = planner.load_plan(tmp_path / "plan.json").apply(loss, check=False)
    assert sorted(adapter.saved_residuals(saved, state.params, tokens)) == sorted(edited)
    got = jax.jit(plan.apply(step))(state, tokens)
    want = jax.jit(step)(state, tokens)
    _same_numbers(got, want)


def test_saved_plan_reads_like_a_plan(loop_plan, tmp_path):
    plan = loop_plan[0]
    plan.save(tmp_path / "plan.json")
    saved = planner.load_plan(tmp_path / "plan.json")
    for name in ("policies", "xla_flags", "maxtext_yaml", "layer_groups"):
        assert hasattr(saved, name), name
    assert saved.bind_groups() == plan.bind_groups()
    assert saved.decisions() == plan.decisions()
    got, want = saved.candidates(), plan.candidates()
    assert [c["decision"] for c in got] == [c["decision"] for c in want]
    assert [tuple(c["shape"]) for c in got] == [tuple(c["shape"]) for c in want]
    assert saved.report() == plan.report(plan_file=str(tmp_path / "plan.json"))


def test_an_unnamed_model_gets_no_empty_maxtext_block(loop_plan):
    from planner._src.emit.paste import paste_snippets

    text = paste_snippets(loop_plan[0])["maxtext"]
    assert text.startswith("# No MaxText block") and "remat_policy: custom\n" not in text


def _remat_policies(fn, *args) -> list:
    """The policy parameter of every checkpoint equation in ``fn``'s forward jaxpr."""
    from jax._src.ad_checkpoint import remat_p

    jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
    return [e.params["policy"] for e in jaxpr.eqns if e.primitive is remat_p]


def test_call_sites_under_one_policy_bind_equal_policies():
    """plan.apply gives every call site under the same policy the same bound policy, so JAX
    partially evaluates and transposes identical layers once, as in the step as written (one
    decide object per call site traced a 200-layer loop 4-5x slower); call sites under
    different policies stay apart."""
    from planner._src.emit.apply import apply, binding

    def loss(ws, x):
        for w in ws:
            x = jax.checkpoint(lambda w, x: jnp.tanh(x @ w))(w, x)
        return jnp.sum(x)

    ws = [jnp.ones((8, 8)) for _ in range(4)]
    x = jnp.ones((2, 8))
    save, remat = (
        jax.checkpoint_policies.everything_saveable,
        jax.checkpoint_policies.nothing_saveable,
    )
    one = _remat_policies(apply(loss, binding({}, save)), ws, x)
    assert len(one) == 4 and all(p == one[0] for p in one) and len({hash(p) for p in one}) == 1
    two = _remat_policies(
        apply(loss, binding({0: 0, 1: 0, 2: 1, 3: 1}, None, (save, remat))), ws, x
    )
    assert two[0] == two[1] and two[2] == two[3] and two[0] != two[2]
