"""Steps wrapped the way their libraries teach, planned as written (new-user trial
2026-12-04): a ``@nnx.jit`` step (F1), an ``@eqx.filter_jit`` step whose model has non-array
leaves (F2), ``plan.apply`` of a donated ``jax.jit`` step (F8)."""

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import planner
from planner._src.budget import io_bytes, requested_for
from planner._src.verify.numerics import CHECK_NAME

nnx = pytest.importorskip("flax.nnx")


def _plan_between(session):
    """The plan at the budget halfway between the step's two compiled anchors (full remat,
    ``trace.anchor``; every value kept, ``trace.anchor_saved``), where the plan must choose,
    checked against that budget: the compiled figure (exact on XLA:CPU without offload)
    within it, less the profile's headroom. On JAX 0.10.2's XLA:CPU the two anchors of these
    small Python-loop steps coincide (the recompute is held from the forward pass on,
    tests/test_hoisted_recompute.py; nnx's MLP: 124,204 bytes both), so the budget is the
    tightest any plan fits; one byte over the midpoint keeps it plannable (hbm_gb -> bytes
    rounds down). On JAX 0.12.0.1 they differ (nnx 109,868 / 154,924; eqx 413,852 /
    1,159,068; donated 540,716 / 737,324 bytes, 2026-12-05). The midpoint is what the plan may
    use: the budget asked for is the one whose usable bytes reach it (budget.requested_for; on
    a deviceless target the bound on what it cannot see comes on top)."""
    lo, hi = session.trace.anchor.device_bytes, session.trace.anchor_saved.device_bytes
    usable = (lo + hi) // 2 + 1
    io = io_bytes(session.trace)
    budget = math.ceil(requested_for(usable, session.hardware, io, session.margin)) + 2
    assert session.usable(budget) >= usable
    plan = session.plan(hbm_gb=budget / 1e9)
    ver = plan.verification
    assert ver.compiled_device_bytes <= budget - plan.headroom_bytes, (ver, lo, hi, budget)
    return plan


def _numerics_ok(plan):
    checks = {c.name: c for c in plan.verification.checks}
    assert checks[CHECK_NAME].ok, checks[CHECK_NAME].detail


class _Mlp(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(32, 128, rngs=rngs)
        self.l2 = nnx.Linear(128, 32, rngs=rngs)

    def __call__(self, x):
        for _ in range(2):
            x = nnx.remat(lambda m, x: x + m.l2(jax.nn.gelu(m.l1(x))))(self, x)
        return x


def _nnx_natural():
    model = _Mlp(nnx.Rngs(0))

    @nnx.jit
    def train_step(model, x):
        def loss_fn(m):
            return jnp.mean(m(x) ** 2)

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        nnx.update(model, jax.tree.map(lambda p, g: p - 1e-2 * g, nnx.state(model), grads))
        return loss, nnx.state(model)

    return train_step, (model, jnp.ones((16, 32)))


def test_nnx_jit_step_is_planned_as_written():
    """nnx.jit's ``.trace`` returns no jaxpr: the planner traces the step as a plain function
    (which calls it) instead of crashing on ``traced.jaxpr``."""
    step, args = _nnx_natural()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        session = planner.Planner(step, *args, hardware="cpu")
        assert len(session.graph.regions) >= 1
        plan = _plan_between(session)
    assert plan.verification.exact
    _numerics_ok(plan)


def test_nnx_jit_step_updating_in_place_only_is_told_to_return_its_state():
    step, args = _nnx_natural()
    in_place = nnx.jit(lambda model, x: step(model, x)[0])
    with pytest.raises(planner.NoCheckpointRegionError, match=r"nnx.state\(\(model, optimizer\)\)"):
        planner.Planner(in_place, *args, hardware="cpu", check_numerics=False)


def test_a_wrapper_that_cannot_be_traced_teaches_the_split_merge_form():
    class Wrapped:
        def trace(self, *args):
            return object()  # no jaxpr

        def __call__(self, x):
            raise RuntimeError("opaque wrapper")

    with pytest.raises(planner.TraceError, match=r"(?s)not jax.jit's.*nnx.split"):
        planner.Planner(Wrapped(), jnp.ones(3), hardware="cpu")


def _state_bytes(tree):
    return sum(x.nbytes for x in jax.tree.leaves(tree) if isinstance(x, jax.Array))


def test_nnx_jit_step_keeps_its_donation():
    """nnx.jit's trace donates in its own flattened argument form; the planner maps that back
    onto whole positional arguments (``xla.adapter.wrapper_donation``) and traces the step
    donated, so the compiled figures alias the model state as the step runs. Before, the
    plain trace dropped the donation (a PlanWarning said so) and counted the state twice."""
    step, args = _nnx_natural()
    donated = nnx.jit(step.fun, donate_argnums=(0,))
    with warnings.catch_warnings():
        warnings.simplefilter("error", planner.PlanWarning)  # nothing dropped: no warning
        kept = planner.Planner(donated, *args, hardware="cpu", check_numerics=False)
        plain = planner.Planner(step, *args, hardware="cpu", check_numerics=False)
    state = _state_bytes(nnx.state(args[0]))
    got, undonated = kept.trace.anchor, plain.trace.anchor
    assert undonated.alias_bytes == 0
    assert got.alias_bytes >= state, (got.alias_bytes, state)


def test_nnx_jit_step_with_shardings_warns_that_the_plain_trace_drops_them():
    """What the plain trace cannot keep (nnx.jit's in_shardings, given in its own prefix
    form) is said in a PlanWarning with the fix."""
    from planner._src.xla import adapter

    step, args = _nnx_natural()
    sharded = nnx.jit(step.fun, in_shardings=(None, None))
    with pytest.warns(planner.PlanWarning, match=r"(?s)without the wrapper's in_shardings.*Fix:"):
        adapter.jit_trace(sharded, args)
    with warnings.catch_warnings():
        warnings.simplefilter("error", planner.PlanWarning)
        adapter.jit_trace(step, args)  # no donation, no shardings: nothing dropped, no warning


def test_a_trace_method_that_raises_is_a_trace_error():
    class Wrapped:
        def trace(self, *args):
            raise NotImplementedError("no trace for you")

        def __call__(self, x):
            return x

    with pytest.raises(planner.TraceError, match=r"(?s)own .trace.*NotImplementedError.*Fix:"):
        planner.Planner(Wrapped(), jnp.ones(3), hardware="cpu")


# ------------------------------------------------------------- F2: eqx.filter_jit, static leaves

eqx = pytest.importorskip("equinox")


class _EqxBlock(eqx.Module):
    mlp: eqx.nn.MLP  # its activation and final_activation are function leaves
    drop: eqx.nn.Dropout  # p (a Python float) and inference (a Python bool, used in an `if`)
    scale: float
    repeats: int

    def __init__(self, key):
        self.mlp = eqx.nn.MLP(32, 32, 64, depth=2, activation=jax.nn.gelu, key=key)
        self.drop = eqx.nn.Dropout(0.1, inference=True)
        self.scale = 0.5
        self.repeats = 2

    def __call__(self, x):
        for _ in range(self.repeats):
            x = x + self.scale * self.drop(jax.vmap(self.mlp)(x))
        return x


class _EqxModel(eqx.Module):
    blocks: list

    def __init__(self, key):
        self.blocks = [_EqxBlock(k) for k in jax.random.split(key, 3)]

    def __call__(self, x):
        for block in self.blocks:
            x = eqx.filter_checkpoint(block)(x)
        return x


def _eqx_step(model, x):
    def loss_fn(m):
        return jnp.mean(m(x) ** 2)

    loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
    model = eqx.apply_updates(model, jax.tree.map(lambda g: -1e-2 * g, grads))
    return model, loss


@pytest.mark.parametrize("decorated", [True, False], ids=["filter_jit", "undecorated"])
def test_eqx_step_with_non_array_leaves_plans_as_it_runs(decorated):
    """Failed before with TracerBoolConversionError (Dropout's ``inference`` traced as an
    array) or a function leaf that is no JAX type. The planner jits the step with the
    non-array leaves static, as eqx.filter_jit does; the numerics check runs (the planned
    step gives the unplanned step's numbers) and so does the applied step."""
    step = eqx.filter_jit(_eqx_step) if decorated else _eqx_step
    model, x = _EqxModel(jax.random.key(0)), jax.random.normal(jax.random.key(1), (64, 32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        session = planner.Planner(step, model, x, hardware="cpu")
        assert len(session.graph.regions) >= 1
        plan = _plan_between(session)
    assert plan.verification.exact
    _numerics_ok(plan)

    run = step if decorated else eqx.filter_jit(step)
    ref_model, ref_loss = run(model, x)
    # the undecorated case applies the plain step's plan to eqx.filter_jit(step), whose body
    # returns one more output (Equinox's own): another program, so the check is waived
    got_model, got_loss = plan.apply(run, check=decorated)(model, x)
    assert got_model.blocks[0].mlp.activation is jax.nn.gelu  # static leaves come back as is
    ref, got = eqx.filter(ref_model, eqx.is_array), eqx.filter(got_model, eqx.is_array)
    for a, b in zip(jax.tree.leaves((ref, ref_loss)), jax.tree.leaves((got, got_loss))):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "donate, want", [("all", (0, 1)), ("all-except-first", (1,)), ("none", ())]
)
def test_eqx_filter_jit_donation_is_kept(donate, want):
    """``eqx.filter_jit(donate=...)`` has no JAX ``.trace``: the planner jits the step itself
    and now donates what the wrapper donates (its ``donate_first`` / ``donate_rest``), so
    the anchors alias the model as the step runs; before, every figure counted it twice."""
    from planner._src.xla import adapter

    step = eqx.filter_jit(_eqx_step, donate=donate)
    model, x = _EqxModel(jax.random.key(0)), jax.random.normal(jax.random.key(1), (64, 32))
    assert adapter.wrapper_donation(step, 2) == want
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        warnings.filterwarnings("ignore", message=".*donated buffers.*")
        session = planner.Planner(step, model, x, hardware="cpu", check_numerics=False)
    alias = session.trace.anchor.alias_bytes
    params = _state_bytes(eqx.filter(model, eqx.is_array))
    assert (alias >= params) == (0 in want), (alias, params, donate)


def test_eqx_filter_jit_step_with_non_array_leaves_compiles_deviceless_for_the_h200():
    """The deviceless target compile takes the example arguments as ShapeDtypeStructs
    (target.args_for): the non-array leaves stay static there too (before: the trace failed
    on the function leaf, and args_for handed it to jax.typeof, which refuses it)."""
    import os

    from planner._src.xla import targets as T

    if T.cuda_plugin() is None or T.resolve("h200").kind != "deviceless":
        if os.environ.get("PLANNER_REQUIRE_DEVICELESS") == "1":
            pytest.fail("PLANNER_REQUIRE_DEVICELESS=1 but no deviceless H200 target")
        pytest.skip("no deviceless H200 target here (the CUDA PJRT plugin: .[cuda])")
    model, x = _EqxModel(jax.random.key(0)), jax.random.normal(jax.random.key(1), (64, 32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        session = planner.Planner(eqx.filter_jit(_eqx_step), model, x, hardware="h200")
        _plan_between(session)
    assert session.compiler.kind == "deviceless"


# ----------------------------------------------------- F8: plan.apply keeps a jitted step's jit


def _donated_step():
    ks = jax.random.split(jax.random.key(0), 4)
    params = [0.05 * jax.random.normal(k, (64, 64)) for k in ks]
    layer = jax.checkpoint(lambda w, x: x + jnp.tanh(x @ w))

    def loss(params, x):
        for w in params:
            x = layer(w, x)
        return jnp.mean(x**2)

    def train_step(params, x):
        loss_v, grads = jax.value_and_grad(loss)(params, x)
        return [w - 1e-2 * g for w, g in zip(params, grads)], loss_v

    step = jax.jit(train_step, donate_argnums=(0,))
    return step, (params, jax.random.normal(jax.random.key(1), (256, 64)))


def _fresh(args):
    return jax.tree.map(lambda a: a.copy(), args)


def test_applied_jitted_step_keeps_its_donation():
    """The applied step of ``jax.jit(step, donate_argnums=0)`` lowers and runs through the
    user's jit: the parameters stay donated (aliased to the outputs, as in the step as
    written), and it computes what the unplanned step does. Before, it was a plain function
    without ``.lower`` / ``.trace``."""
    step, args = _donated_step()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        session = planner.Planner(step, *args, hardware="cpu")
        plan = _plan_between(session)
    assert plan.verification.exact
    _numerics_ok(plan)
    applied = plan.apply(step)
    assert hasattr(applied, "lower") and hasattr(applied, "trace")
    param_bytes = sum(w.nbytes for w in args[0])
    want = step.lower(*args).compile().memory_analysis().alias_size_in_bytes
    lowered = applied.lower(*args)
    got = lowered.compile().memory_analysis().alias_size_in_bytes
    assert want >= param_bytes and got == want, (got, want, param_bytes)
    assert "tf.aliasing_output" in lowered.as_text() or "jax.buffer_donor" in lowered.as_text()
    ref = step(*_fresh(args))
    a = _fresh(args)
    out = applied(*a)
    assert all(w.is_deleted() for w in a[0])  # called, it donates too
    for r, o in zip(jax.tree.leaves(ref), jax.tree.leaves(out)):
        np.testing.assert_allclose(np.asarray(o), np.asarray(r), rtol=1e-5, atol=1e-6)
