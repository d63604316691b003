"""The integration examples (Equinox, Flax NNX, MaxText-style) plan and verify as written.

Each budget is checked to lie between the step's compiled peak under full remat and with
everything saved, so the planner has real decisions to make.
"""

import warnings

import jax
import pytest
from jax.ad_checkpoint import checkpoint_policies as cp

import planner
from planner._src.xla.compile import compiled_figures

pytestmark = pytest.mark.slow  # compiles whole models (the fast tier is -m "not slow")


def _device_bytes(step, args):
    jaxpr = jax.make_jaxpr(step)(*args)
    return compiled_figures(jax.jit(step).lower(*args).compile(), jaxpr).device_bytes


def _plan(make, make_lo, make_hi, fraction=0.5):
    lo, hi = _device_bytes(*make_lo()), _device_bytes(*make_hi())
    assert hi > 1.2 * lo, "the example is too small for the decisions to matter"
    step, args = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)  # the checks are asserted below
        return planner.solve(step, *args, hbm_gb=(lo + fraction * (hi - lo)) / 1e9, hardware="cpu")


def _assert_verified(plan, checks=True):
    v = plan.verification
    assert v.status == "compiled, within budget", plan.report("markdown")
    assert v.compiled_device_bytes <= plan.budget_bytes
    if checks:
        assert v.checks and all(c.ok for c in v.checks), [c.detail for c in v.checks]


@pytest.fixture(scope="module")
def equinox_plan():
    pytest.importorskip("equinox")
    from examples import equinox_model as m

    return _plan(
        m.make, lambda: m.make(cp.nothing_saveable), lambda: m.make(cp.everything_saveable)
    )


@pytest.fixture(scope="module")
def nnx_plan():
    pytest.importorskip("flax.nnx")
    from examples import flax_nnx_model as m

    return _plan(
        m.make, lambda: m.make(cp.nothing_saveable), lambda: m.make(cp.everything_saveable)
    )


@pytest.fixture(scope="module")
def maxtext_plan():
    from examples import maxtext_style as m

    return _plan(
        m.make, lambda: m.make(m.config_with("full")), lambda: m.make(m.config_with("everything"))
    )


def test_equinox_filter_checkpoint_under_scan_compiles_within_budget(equinox_plan):
    (rg,) = equinox_plan.graph.regions
    assert rg.region.in_scan and rg.region.multiplicity == 4
    assert {"mlpwi", "mlpwo"} <= {c.name for c in equinox_plan.graph.classes}
    _assert_verified(equinox_plan, checks=False)


def test_equinox_plan_passes_every_check(equinox_plan):
    _assert_verified(equinox_plan)


def test_flax_nnx_remat_under_nnx_scan_compiles_within_budget(nnx_plan):
    (rg,) = nnx_plan.graph.regions
    assert rg.region.in_scan and rg.region.multiplicity == 4
    _assert_verified(nnx_plan, checks=False)


def test_flax_nnx_plan_passes_every_check(nnx_plan):
    _assert_verified(nnx_plan)


def test_maxtext_style_plan_passes_every_check(maxtext_plan):
    from examples import maxtext_style as m

    _assert_verified(maxtext_plan)
    names = {c.name for c in maxtext_plan.graph.classes if c.name}
    assert names == set(m.TENSOR_NAMES)


def test_maxtext_block_round_trips_through_the_config(maxtext_plan):
    # Paste the plan's block into the config; the model builds a policy that decides every
    # named tensor as the plan did, and the step still compiles within the budget.
    yaml = pytest.importorskip("yaml")
    from examples import maxtext_style as m
    from planner._src.xla import adapter

    config = m.apply_yaml(m.DEFAULT_CONFIG, yaml.safe_load(maxtext_plan.maxtext_yaml))
    policy = m.policy_from_config(config)
    got = adapter.decisions_of(*m.make(), policy)
    for rg in maxtext_plan.graph.regions:
        for c in rg.region.candidates:
            if c.name:
                want = maxtext_plan.assignment.get(c.signature)
                if c.name == "decoder_layer_input" and want == "remat":
                    want = "save"  # written 'device': MaxText cannot remat it (emit.py)
                assert got[c.signature] == want, c.name


def test_maxtext_config_errors_teach():
    from examples import maxtext_style as m

    with pytest.raises(ValueError, match="one of"):
        m.make({**m.DEFAULT_CONFIG, "mlpwo": "keep"})
    with pytest.raises(KeyError, match="not keys of this model's config"):
        m.apply_yaml(m.DEFAULT_CONFIG, {"attention_out": "device"})


def test_moe_example_routed_and_shared_experts_are_planned_and_verified():
    from examples import moe

    step, args = moe.make()
    with warnings.catch_warnings():
        warnings.simplefilter("error", planner.PlanWarning)
        plan = planner.solve(step, *args, hbm_gb=0.03, hardware="cpu")
    names = {c.name for c in plan.graph.classes if c.name}
    assert {"moe_mlpwi_0", "moe_mlpwi_1", "moe_mlpwo", "mlpwi_0", "mlpwi_1", "mlpwo"} <= names
    assert plan.graph.regions[0].region.multiplicity == moe.MoEConfig().n_layers
    assert plan.verification.ok, [c.detail for c in plan.verification.checks]


def test_moe_capacity_dispatch_matches_dropless_when_nothing_is_dropped():
    """With capacity for every copy, the [E, C, D] dispatch computes the ragged_dot result;
    with capacity 1 per expert it drops copies (and differs)."""
    import dataclasses

    import jax
    import numpy as np

    from examples import moe

    cfg = moe.MoEConfig(n_layers=1, batch=1, seq=16)
    params = moe.init_params(cfg, jax.random.key(0))
    layer = jax.tree.map(lambda w: w[0], params["layers"])
    h = jax.random.normal(jax.random.key(1), (16, cfg.d_model))
    ragged = moe.moe_block(cfg, h, layer)
    # capacity_factor = n_experts / top_k gives C = tokens: no expert can overflow.
    full = dataclasses.replace(cfg, dispatch="capacity", capacity_factor=cfg.n_experts / cfg.top_k)
    assert moe.capacity(full) == 16
    np.testing.assert_allclose(moe.moe_block(full, h, layer), ragged, rtol=2e-5, atol=2e-5)
    tight = dataclasses.replace(full, capacity_factor=cfg.n_experts / (16 * cfg.top_k))
    assert moe.capacity(tight) == 1
    assert not np.allclose(moe.moe_block(tight, h, layer), ragged, atol=1e-3)


def test_moe_capacity_dispatch_is_planned_with_expert_names():
    import dataclasses

    import planner
    from examples import moe

    cfg = dataclasses.replace(moe.MoEConfig(), dispatch="capacity")
    step, args = moe.make_train_step(cfg)
    plan = planner.solve(step, *args, hbm_gb=1.0, hardware="h200", verify_compile=False)
    names = {c.name for c in plan.graph.classes if c.name}
    assert {"moe_mlpwi_0", "moe_mlpwi_1", "moe_mlpwo"} <= names
    shapes = {tuple(c["shape"]) for c in plan.candidates() if c["name"] == "moe_mlpwi_0"}
    assert shapes == {(cfg.n_experts, moe.capacity(cfg), cfg.d_expert)}


def test_llama_layers_per_iter_computes_the_same_step_and_plans_per_sub_layer():
    """k layers per scan iteration (docs/xla-flags-research.md, T2): the same loss and
    update as one layer per iteration (weights stored as k interleaved stacks), k checkpoint
    call sites run n/k times each, the same stacked residuals as k = 1 under full remat and a
    bounded compiler temp (no padded weight gradients), and a plan that verifies."""
    import dataclasses

    import numpy as np

    from examples import llama

    cfg1 = llama.LlamaConfig(vocab=128, d_model=64, n_heads=4, n_kv_heads=2, d_ff=192, seq=64)
    cfg2 = dataclasses.replace(cfg1, layers_per_iter=2)
    step1, (state, batch) = llama.make_train_step(cfg1, concrete=True)
    step2, _ = llama.make_train_step(cfg2, concrete=True)

    def as_k2(st):
        return {
            part: {**st[part], "layers": llama.interleave_layers(st[part]["layers"], 2)}
            for part in ("params", "momentum")
        }

    (s1, l1), (s2, l2) = step1(state, batch), step2(as_k2(state), batch)
    np.testing.assert_allclose(l2, l1, rtol=1e-6)
    for a, b in zip(jax.tree.leaves(as_k2(s1)), jax.tree.leaves(s2)):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)

    full1 = _device_bytes(
        *llama.make_train_step(dataclasses.replace(cfg1, remat_policy=cp.nothing_saveable))
    )
    full2 = _device_bytes(
        *llama.make_train_step(dataclasses.replace(cfg2, remat_policy=cp.nothing_saveable))
    )
    # The same arguments and stacked residuals; what grows is the temp of one trip's backward
    # (XLA may run one sub-layer's recompute before the other's backward): 5.43 vs 4.67 MB
    # here. Slicing a [k, ...] weight block inside each checkpoint instead (padded weight
    # gradients) needed 9.7 MB more.
    assert full2 <= full1 * 1.2, (full1, full2)

    def make(policy=None):
        return llama.make_train_step(dataclasses.replace(cfg2, remat_policy=policy))

    plan = _plan(make, lambda: make(cp.nothing_saveable), lambda: make(cp.everything_saveable))
    regions = [rg.region for rg in plan.graph.regions]
    assert sum(r.multiplicity for r in regions) == 4 and sum(r.call_sites for r in regions) == 2
    assert all(r.in_scan for r in regions)
    # Full remat stacks only the layer inputs, as with one layer per iteration.
    assert (
        plan.trace.anchor.stacked_device_bytes == 2 * 2 * cfg1.batch * cfg1.seq * cfg1.d_model * 4
    )
    assert {"save", "remat"} <= set(plan.decisions().values())
    _assert_verified(plan)
    # Per-call-site policies (plan.policies) are accepted by the model, one per sub-layer.
    per_site = llama.group_policies(
        dataclasses.replace(cfg2, remat_policy=[cp.nothing_saveable, cp.dots_saveable])
    )
    assert per_site == (cp.nothing_saveable, cp.dots_saveable)


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(layers_per_iter=3), "dividing the 4 layers"),
        (dict(layers_per_iter=0), "int >= 1"),
        (dict(layers_per_iter=2, layer_loop="loop"), "layer_loop='scan' only"),
        (dict(layers_per_iter=4, layer_groups=2), "dividing the 2 layers"),
        (dict(layers_per_iter=2, remat_policy=[None] * 3), "one per call site \\(2\\)"),
    ],
)
def test_llama_layers_per_iter_errors_teach(changes, match):
    import dataclasses

    from examples import llama

    cfg = dataclasses.replace(llama.LlamaConfig(), **changes)
    with pytest.raises(ValueError, match=match):
        llama.make_train_step(cfg)
