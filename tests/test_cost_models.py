"""Tests of cost_models: rules against hand counts, profiles, transfers, flags, calibration."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from types import SimpleNamespace

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import AbstractMesh, AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import cost_models as cm
from cost_models import _units
from cost_models.__main__ import main as cli_main

F32 = 4  # bytes per float32 / int32 element
HW = cm.load_profile("h200")


def eqns_of(closed, name):
    """All equations named `name`, searching sub-jaxprs too."""
    found = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == name:
                found.append(eqn)
            for value in eqn.params.values():
                for item in value if isinstance(value, tuple) else (value,):
                    inner = getattr(item, "jaxpr", item)
                    if hasattr(inner, "eqns"):
                        walk(inner)

    walk(closed.jaxpr)
    return found


def only_eqn(closed, name):
    (eqn,) = eqns_of(closed, name)
    return eqn


def nbytes(aval):
    return math.prod(aval.shape) * aval.dtype.itemsize


# ------------------------------------------------------------------------------------------
# Rules against hand counts


def test_dot_general_with_batch_dims():
    b, m, k, n = 3, 4, 5, 6
    jp = jax.make_jaxpr(lambda x, y: lax.dot_general(x, y, (((2,), (1,)), ((0,), (0,)))))(
        jnp.ones((b, m, k)), jnp.ones((b, k, n))
    )
    cost = cm.eqn_cost(only_eqn(jp, "dot_general"))
    assert cost.matmul_flops == 2 * b * m * n * k
    assert cost.hbm_bytes == (b * m * k + b * k * n + b * m * n) * F32
    assert cost.kernel_launches == 1 and cost.vector_flops == 0


@pytest.mark.parametrize("groups", [1, 3], ids=["dense", "grouped"])
def test_conv(groups):
    x, w = jnp.ones((2, 3, 16, 16)), jnp.ones((6, 3 // groups, 3, 3))
    jp = jax.make_jaxpr(
        lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=groups)
    )(x, w)
    cost = cm.eqn_cost(only_eqn(jp, "conv_general_dilated"))
    out_elements = 2 * 6 * 16 * 16
    assert cost.matmul_flops == 2 * out_elements * (3 // groups) * 3 * 3
    assert cost.hbm_bytes == (x.size + w.size + out_elements) * F32


@pytest.mark.parametrize(
    ("fn", "name", "flops_per_element"),
    [
        (lambda x: x + x, "add", 1),
        (jnp.exp, "exp", 1),  # transcendental weight 1 (rooflines.py convention)
        (lambda x: lax.integer_pow(x, 3), "integer_pow", 2),  # x*x, then *x
        (lambda x: lax.integer_pow(x, -2), "integer_pow", 2),  # x*x, then 1/
        (lambda x: lax.clamp(0.0, x, 1.0), "clamp", 2),
    ],
    ids=["add", "exp", "pow3", "pow-2", "clamp"],
)
def test_elementwise(fn, name, flops_per_element):
    x = jnp.ones((4, 8))
    eqn = only_eqn(jax.make_jaxpr(fn)(x), name)
    cost = cm.eqn_cost(eqn)
    assert cost.vector_flops == flops_per_element * 32
    in_bytes = sum(nbytes(v.aval) for v in eqn.invars)
    assert cost.hbm_bytes == in_bytes + 32 * F32
    assert cost.kernel_launches == 0  # fused into neighbours


def test_reductions():
    x = jnp.ones((4, 8))
    cost = cm.eqn_cost(only_eqn(jax.make_jaxpr(lambda x: x.sum(axis=1))(x), "reduce_sum"))
    assert cost.vector_flops == 4 * 7  # 7 adds per row
    assert cost.hbm_bytes == (32 + 4) * F32
    cost = cm.eqn_cost(only_eqn(jax.make_jaxpr(lambda x: jnp.argmax(x, axis=0))(x), "argmax"))
    assert cost.vector_flops == 32 - 8
    cost = cm.eqn_cost(only_eqn(jax.make_jaxpr(lambda x: jnp.cumsum(x, axis=1))(x), "cumsum"))
    assert cost.vector_flops == 32 and cost.hbm_bytes == 64 * F32


def test_layout_ops_move_bytes_only():
    x = jnp.ones((4, 8))
    jp = jax.make_jaxpr(lambda x: (x.T, x.reshape(8, 4), x[1:3], x.astype(jnp.bfloat16)))(x)
    assert cm.eqn_cost(only_eqn(jp, "transpose")) == cm.Cost(hbm_bytes=64 * F32)
    assert cm.eqn_cost(only_eqn(jp, "reshape")) == cm.Cost()  # a bitcast in XLA
    assert cm.eqn_cost(only_eqn(jp, "slice")) == cm.Cost(hbm_bytes=2 * 16 * F32)  # the slice only
    assert cm.eqn_cost(only_eqn(jp, "convert_element_type")) == cm.Cost(hbm_bytes=32 * (F32 + 2))


def test_gather_counts_slices_and_indices_not_the_operand():
    table, idx = jnp.ones((1000, 16)), jnp.arange(5)
    eqn = only_eqn(jax.make_jaxpr(lambda t, i: t[i])(table, idx), "gather")
    cost = cm.eqn_cost(eqn)
    assert cost.hbm_bytes == 2 * 5 * 16 * F32 + nbytes(eqn.invars[1].aval)
    assert cost.hbm_bytes < table.size * F32 / 10


def test_scatter_add():
    table, idx, upd = jnp.ones((1000, 16)), jnp.arange(5), jnp.ones((5, 16))
    eqn = only_eqn(jax.make_jaxpr(lambda t, i, u: t.at[i].add(u))(table, idx, upd), "scatter-add")
    cost = cm.eqn_cost(eqn)
    assert cost.vector_flops == 5 * 16
    assert cost.hbm_bytes == 3 * 5 * 16 * F32 + nbytes(eqn.invars[1].aval)


def test_dynamic_update_slice_is_in_place():
    x, u = jnp.ones((1000, 16)), jnp.ones((2, 16))
    jp = jax.make_jaxpr(lambda x, u, i: lax.dynamic_update_slice(x, u, (i, 0)))(x, u, 3)
    cost = cm.eqn_cost(only_eqn(jp, "dynamic_update_slice"))
    assert cost.hbm_bytes == 2 * 2 * 16 * F32 + 2 * F32  # update read + written, two indices


def test_sort_and_iota():
    jp = jax.make_jaxpr(lambda x: jnp.sort(x))(jnp.ones((4, 8)))
    assert cm.eqn_cost(only_eqn(jp, "sort")).vector_flops == 32 * 3  # log2(8) per element
    jp = jax.make_jaxpr(lambda: jnp.arange(10))()
    assert cm.eqn_cost(only_eqn(jp, "iota")) == cm.Cost(hbm_bytes=10 * F32)


def test_zero_cost_annotations():
    from jax.ad_checkpoint import checkpoint_name

    jp = jax.make_jaxpr(
        lambda x: lax.optimization_barrier(checkpoint_name(lax.stop_gradient(x), "a"))
    )(jnp.ones(4))
    assert cm.jaxpr_cost(jp) == cm.Cost()


# ------------------------------------------------------------------------------------------
# Collectives


MESH = AbstractMesh((4,), ("x",), axis_types=(AxisType.Explicit,))


def _collectives(a):
    return (
        lax.psum(a, "x"),
        lax.all_gather(a, "x", tiled=True),
        lax.psum_scatter(a, "x", tiled=True),
        lax.all_to_all(a, "x", 0, 0, tiled=True),
        lax.ppermute(a, "x", [(i, (i + 1) % 4) for i in range(4)]),
    )


def _collectives_jaxpr():
    mapped = jax.shard_map(
        _collectives, mesh=MESH, in_specs=P("x"), out_specs=(P(),) * 5, check_vma=False
    )
    sharded = NamedSharding(MESH, P("x"))
    return jax.make_jaxpr(mapped)(jax.ShapeDtypeStruct((16, 8), jnp.float32, sharding=sharded))


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("psum", 2 * 3 / 4 * 32 * F32),  # ring all-reduce: 2 (n-1)/n of the local buffer
        ("all_gather", 3 / 4 * 128 * F32),  # (n-1)/n of the gathered buffer
        ("reduce_scatter", 3 / 4 * 32 * F32),
        ("all_to_all", 3 / 4 * 32 * F32),
        ("ppermute", 32 * F32),
    ],
)
def test_collectives_in_shard_map(name, expected):
    jp = _collectives_jaxpr()
    mapped = only_eqn(jp, "shard_map")
    inner = [e for e in mapped.params["jaxpr"].eqns if e.primitive.name == name]
    with cm._cost.axis_sizes_in(dict(MESH.shape)):
        (cost,) = [cm.eqn_cost(e) for e in inner]
    assert cost.collective_bytes == pytest.approx(expected)
    assert cost.notes == ()


def test_shard_map_rule_supplies_axis_sizes():
    total = cm.jaxpr_cost(_collectives_jaxpr())
    expected = (2 * 3 / 4 * 32 + 3 / 4 * 128 + 3 / 4 * 32 + 3 / 4 * 32 + 32) * F32
    assert total.collective_bytes == pytest.approx(expected)
    assert total.notes == ()


def test_collective_with_unknown_axis_size_assumes_large_n_and_says_so():
    psum = next(
        e
        for e in only_eqn(_collectives_jaxpr(), "shard_map").params["jaxpr"].eqns
        if e.primitive.name == "psum"
    )
    guessed = cm.eqn_cost(psum)
    assert guessed.collective_bytes == 2 * 32 * F32
    assert any("unknown" in note and "axis_sizes" in note for note in guessed.notes)
    known = cm.eqn_cost(psum, axis_sizes={"x": 4})
    assert known.collective_bytes == pytest.approx(2 * 3 / 4 * 32 * F32)


def test_collective_seconds_use_ici_bandwidth():
    cost = cm.Cost(collective_bytes=HW.ici_bytes_per_s)
    assert cost.seconds(HW) == pytest.approx(1.0)


def test_explicit_sharding_costs_per_device():
    mesh = AbstractMesh((2,), ("x",), axis_types=(AxisType.Explicit,))
    x = jax.ShapeDtypeStruct((8, 16), jnp.float32, sharding=NamedSharding(mesh, P("x", None)))
    w = jax.ShapeDtypeStruct((16, 32), jnp.float32, sharding=NamedSharding(mesh, P(None, None)))
    with jax.sharding.use_abstract_mesh(mesh):
        jp = jax.make_jaxpr(lambda x, w: x @ w)(x, w)
    cost = cm.eqn_cost(only_eqn(jp, "dot_general"))
    assert cost.matmul_flops == 2 * (8 // 2) * 32 * 16
    assert cm.aval_bytes(jp.in_avals[0]) == 8 // 2 * 16 * F32


# ------------------------------------------------------------------------------------------
# Calls and control flow


def _matmul(x):
    return x @ x


MATMUL_FLOPS = 2 * 8**3


def test_scan_multiplies_by_length():
    def f(x):
        return lax.scan(lambda c, _: (_matmul(c), None), x, None, length=5)[0]

    assert cm.jaxpr_cost(jax.make_jaxpr(f)(jnp.ones((8, 8)))).matmul_flops == 5 * MATMUL_FLOPS


def test_cond_takes_the_larger_branch():
    def f(p, x):
        return lax.cond(p, lambda x: _matmul(_matmul(x)), lambda x: x * 2, x)

    cost = cm.jaxpr_cost(jax.make_jaxpr(f)(True, jnp.ones((8, 8))))
    assert cost.matmul_flops == 2 * MATMUL_FLOPS
    assert cost.vector_flops == 64  # the other branch's multiply: max per figure


def test_while_counts_the_body_once_and_flags_it():
    def f(x):
        return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, _matmul(c[1])), (0, x))[1]

    cost = cm.jaxpr_cost(jax.make_jaxpr(f)(jnp.ones((8, 8))))
    assert cost.matmul_flops == MATMUL_FLOPS
    assert any("trip count unknown" in note for note in cost.notes)


def test_custom_jvp_custom_vjp_remat_and_nested_jit():
    @jax.custom_jvp
    def jvp_fn(x):
        return _matmul(x)

    jvp_fn.defjvp(lambda p, t: (jvp_fn(p[0]), t[0]))

    @jax.custom_vjp
    def vjp_fn(x):
        return _matmul(x)

    vjp_fn.defvjp(lambda x: (vjp_fn(x), x), lambda x, g: (g,))

    inner = jax.jit(lambda x: jax.jit(_matmul)(x))
    f = lambda x: inner(jax.checkpoint(_matmul)(vjp_fn(jvp_fn(x))))  # noqa: E731
    jp = jax.make_jaxpr(f)(jnp.ones((8, 8)))
    for name in ("custom_jvp_call", "custom_vjp_call", "remat2", "jit"):
        assert eqns_of(jp, name), name
    assert cm.jaxpr_cost(jp).matmul_flops == 4 * MATMUL_FLOPS


def test_grad_of_scanned_checkpoint_has_no_unknown_primitives():
    def loss(w, x):
        layer = jax.checkpoint(lambda c, _: (jnp.tanh(c @ w), None))
        return lax.scan(layer, x, None, length=4)[0].sum()

    cost = cm.jaxpr_cost(jax.make_jaxpr(jax.grad(loss))(jnp.ones((8, 8)), jnp.ones((2, 8))))
    assert cost.unknown_primitives == ()
    # forward 4 matmuls, backward 4 recomputed + 8 (two per layer: dx, dw)
    assert cost.matmul_flops == 16 * 2 * 2 * 8 * 8


# ------------------------------------------------------------------------------------------
# Attention


def test_xla_attention_is_two_dot_generals():
    b, t, s, n, h = 2, 16, 32, 4, 8
    q, k = jnp.ones((b, t, n, h)), jnp.ones((b, s, n, h))
    jp = jax.make_jaxpr(
        lambda q, k: jax.nn.dot_product_attention(q, k, k, is_causal=True, implementation="xla")
    )(q, k)
    # XLA computes the masked scores too: no causal discount.
    assert cm.jaxpr_cost(jp).matmul_flops == 4 * b * n * t * s * h


def _cudnn_attention():
    return pytest.importorskip("jax._src.cudnn.fused_attention_stablehlo")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_cudnn_attention_primitives(causal):
    fa = _cudnn_attention()
    b, t, s, n, h = 2, 16, 32, 4, 8
    q, k = jnp.ones((b, t, n, h), jnp.bfloat16), jnp.ones((b, s, n, h), jnp.bfloat16)
    empty = jnp.zeros(0, jnp.bfloat16)
    params = dict(
        scale=1.0,
        seed=0,
        dropout_rate=0.0,
        variadic_args=(False, False),
        mask_type=fa.MaskType.CAUSAL if causal else fa.MaskType.NO_MASK,
        layout=fa.AttentionLayout.BTNH.value,
        sliding_window_length=None,
    )

    def fwd(q, k):
        return fa._dot_product_attention_fwd_p_wrapper.bind(
            q, k, k, *[empty] * 7, is_training=True, **params
        )

    fwd_jp = jax.make_jaxpr(fwd)(q, k)
    stats = jax.ShapeDtypeStruct(fwd_jp.out_avals[1].shape, fwd_jp.out_avals[1].dtype)
    bwd_jp = jax.make_jaxpr(
        lambda q, k, st, o, g: fa._dot_product_attention_bwd_p_wrapper.bind(
            q, k, k, *[empty] * 7, st, o, g, **params
        )
    )(q, k, stats, q, q)
    kept = 0.5 if causal else 1.0
    fwd_cost = cm.eqn_cost(only_eqn(fwd_jp, "dot_product_attention_fwd_wrapper"))
    bwd_cost = cm.eqn_cost(only_eqn(bwd_jp, "dot_product_attention_bwd_wrapper"))
    assert fwd_cost.matmul_flops == 4 * b * n * t * s * h * kept
    assert bwd_cost.matmul_flops == 2.5 * fwd_cost.matmul_flops
    assert fwd_cost.vector_flops == b * n * t * s * kept  # one exp per kept score
    assert fwd_cost.unknown_primitives == ()
    # The attention FLOPs are tagged with direction and key length, so that they run at the
    # profile's measured fused-attention rate rather than the dense matmul rate.
    assert fwd_cost.attention == (("fwd", s, fwd_cost.matmul_flops),)
    assert bwd_cost.attention == (("bwd", s, bwd_cost.matmul_flops),)
    hw = cm.load_profile("h200")
    fwd_s = fwd_cost.breakdown(hw)["compute"]
    want = fwd_cost.matmul_flops / hw.attention_rate("fwd", s) + fwd_cost.vector_flops / (
        hw.vector_flops_per_s
    )
    assert fwd_s == pytest.approx(want)
    assert hw.attention_rate("fwd", s) < hw.matmul_rate("bf16")  # measured: slower than gemm
    # Without a table, attention runs at the matmul rate (the model before the table).
    plain = hw.replace(attention_flops_per_s={})
    assert fwd_cost.breakdown(plain)["compute"] == pytest.approx(
        fwd_cost.matmul_flops / plain.matmul_rate("bf16")
        + fwd_cost.vector_flops / plain.vector_flops_per_s
    )
    # Sums and repeats keep the tagging per (direction, length).
    total = (fwd_cost + fwd_cost.scale(2.0) + bwd_cost).attention
    assert total == (("bwd", s, bwd_cost.matmul_flops), ("fwd", s, 3 * fwd_cost.matmul_flops))


def test_attention_rate_table():
    """Linear in log2(length) between measured lengths, clamped outside, matmul rate for fp8
    or without a table; the table survives the JSON round trip with its sources."""
    hw = cm.load_profile("h200").replace(
        attention_flops_per_s={"fwd": {1024: 200e12, 4096: 400e12}, "bwd": {2048: 300e12}},
        sources={
            "attention_flops_per_s.fwd": "test table",
            "attention_flops_per_s.bwd": "test table",
        },
    )
    assert hw.attention_rate("fwd", 512) == 200e12
    assert hw.attention_rate("fwd", 2048) == pytest.approx(300e12)  # halfway in log2
    assert hw.attention_rate("fwd", 1 << 20) == 400e12
    assert hw.attention_rate("bwd", 64) == 300e12
    assert hw.attention_rate("fwd", 2048, "float8_e4m3fn") == hw.matmul_rate("fp8")
    assert cm.HardwareProfile.from_json(hw.to_json()) == hw
    assert hw.source("attention_flops_per_s.fwd") == "test table"
    with pytest.raises(cm.ProfileError, match="directions"):
        hw.replace(attention_flops_per_s={"forward": {1024: 1e14}})
    raw = hw.to_json()
    raw["attention_flops_per_s"]["fwd"]["value"]["1024"] = "200 TB/s"
    with pytest.raises(cm.ProfileError, match="key length '1024'"):
        cm.HardwareProfile.from_json(raw)


# ------------------------------------------------------------------------------------------
# Host transfers, unknown primitives, the registry


def test_device_put_to_pinned_host_is_a_link_transfer():
    device = jax.devices()[0]
    host = jax.sharding.SingleDeviceSharding(device, memory_kind="pinned_host")
    back = jax.sharding.SingleDeviceSharding(device, memory_kind="device")
    jp = jax.make_jaxpr(lambda x: jax.device_put(jax.device_put(x, host), back))(jnp.ones(256))
    cost = cm.jaxpr_cost(jp)
    assert (cost.d2h_bytes, cost.h2d_bytes, cost.hbm_bytes) == (256 * F32, 256 * F32, 0)
    assert cost.breakdown(HW)["host_link"] == pytest.approx(
        256 * F32 / HW.link.d2h_bytes_per_s + 256 * F32 / HW.link.h2d_bytes_per_s
    )


def _mystery_primitive():
    prim = jax.extend.core.Primitive("mystery_op")
    prim.def_abstract_eval(lambda x: jax.core.ShapedArray((x.shape[0] * 2,), x.dtype))
    return prim


def test_unknown_primitive_falls_back_and_is_listed():
    prim = _mystery_primitive()
    jp = jax.make_jaxpr(lambda x: jax.jit(lambda y: prim.bind(y) * 2)(x))(jnp.ones(8))
    cost = cm.jaxpr_cost(jp)
    assert cost.unknown_primitives == ("mystery_op",)
    mystery = cm.eqn_cost(only_eqn(jp, "mystery_op"))
    assert mystery.hbm_bytes == (8 + 16) * F32 and mystery.matmul_flops == 0


def test_rules_accept_eqn_like_objects():
    """A rule needs only .primitive.name, .params, .invars and .outvars (with .aval)."""
    x = SimpleNamespace(aval=jax.core.ShapedArray((256,), jnp.float32))
    estimate = SimpleNamespace(flops=1e6, transcendentals=10, bytes_accessed=4096)
    eqn = SimpleNamespace(
        primitive=SimpleNamespace(name="pallas_call"),
        params={"cost_estimate": estimate},
        invars=[x],
        outvars=[x],
    )
    assert cm.eqn_cost(eqn) == cm.Cost(
        matmul_flops=1e6, vector_flops=10, hbm_bytes=4096, kernel_launches=1
    )
    bare = cm.eqn_cost(SimpleNamespace(**{**vars(eqn), "params": {"cost_estimate": None}}))
    assert bare.unknown_primitives == ("pallas_call",) and bare.hbm_bytes == 2 * 256 * F32


def test_register_rule_refuses_duplicates_unless_replacing():
    with pytest.raises(ValueError, match=r"already registered.*replace=True"):
        cm.register_rule("dot_general")(lambda eqn: cm.Cost())
    prim = _mystery_primitive()
    try:
        cm.register_rule("mystery_op")(lambda eqn: cm.Cost(vector_flops=7))
        cm.register_rule("mystery_op", replace=True)(lambda eqn: cm.Cost(vector_flops=9))
        jp = jax.make_jaxpr(prim.bind)(jnp.ones(8))
        assert cm.jaxpr_cost(jp) == cm.Cost(vector_flops=9)
        assert "mystery_op" in cm.registered_primitives()
    finally:
        cm._cost._RULES.pop("mystery_op", None)


def test_cost_arithmetic_and_roofline_formula():
    a = cm.Cost(matmul_flops=2, hbm_bytes=4, unknown_primitives=("b",), notes=("n",))
    b = cm.Cost(vector_flops=3, kernel_launches=1, unknown_primitives=("a", "b"), notes=("n",))
    total = a + b
    assert total == cm.Cost(
        matmul_flops=2,
        vector_flops=3,
        hbm_bytes=4,
        kernel_launches=1,
        unknown_primitives=("a", "b"),
        notes=("n",),
    )
    assert total.scale(3).matmul_flops == 6 and total.scale(3).unknown_primitives == ("a", "b")
    assert cm.Cost.zeros() + a == a
    with pytest.raises(ValueError, match="k >= 0"):
        a.scale(-1)

    cost = cm.Cost(matmul_flops=790e12, vector_flops=0, hbm_bytes=2 * 4.3e12, kernel_launches=2)
    # max(1 s compute, 2 s memory) + 2 launches
    assert cost.seconds(HW) == pytest.approx(2.0 + 2 * HW.kernel_launch_s)
    assert cost.seconds(HW, "float32") == pytest.approx(
        max(790e12 / HW.matmul_rate("fp32"), 2.0) + 2 * HW.kernel_launch_s
    )


# ------------------------------------------------------------------------------------------
# Profiles


@pytest.mark.parametrize("name", cm.list_profiles())
def test_shipped_profile_loads_round_trips_and_cites_every_figure(name):
    profile = cm.load_profile(name)
    assert profile.name == name
    data = profile.to_json()
    assert cm.HardwareProfile.from_json(json.loads(json.dumps(data))) == profile
    # the calibrated hiding models (link.d2h_hiding / h2d_hiding) are cited where present
    hiding = sum(getattr(profile.link, f"{d}_hiding") is not None for d in ("d2h", "h2d"))
    attention = len(profile.attention_flops_per_s)  # measured fused-attention rates
    # several GPUs: link.shared rows and link.collective_contention, cited where present
    several = (profile.link.shared is not None) + (
        "link.collective_contention" in dict(profile.sources)
    )
    figures = 8 + len(profile.matmul_flops_per_s) + 5 + hiding + attention + several
    assert len(profile.sources) == figures
    assert all(source.strip() for _, source in profile.sources)
    assert "TODO" not in json.dumps(data) and "provisional" not in json.dumps(data)


def test_required_profiles_are_shipped():
    assert {"h100-sxm", "h100-pcie", "h200", "gh200", "gb200", "b200", "cpu"} <= set(
        cm.list_profiles()
    )


def test_h200_uses_our_measurements():
    assert HW.link.d2h_bytes_per_s == 52.65e9 and HW.link.h2d_bytes_per_s == 52.31e9
    # bf16 through XLA (calibrate, and a train step's gemm kernels), not PyTorch's 790
    assert HW.matmul_rate("bfloat16") == 701e12 and HW.hbm_bytes_per_s == 4.3e12
    assert HW.attention_rate("fwd", 4096) == 467e12 and HW.attention_rate("bwd", 16384) == 438e12
    # Trace-measured with the planner's flags (graphs off): the profile carries the figure
    # overlap_from_trace wrote for that run, and says it holds only with those flags.
    measured = json.loads(
        (
            Path(__file__).resolve().parents[1] / "benchmarks/results/h200-2026-12-02-overlap/k1/"
            "lhs_no_cmd_buffer-measured.json"
        ).read_text()
    )
    assert HW.overlap_efficiency == round(measured["overlap_efficiency"]["value"], 4) > 0
    assert "h200-2026-12-02-overlap" in HW.source("overlap_efficiency")
    assert "planner's XLA flags" in HW.source("overlap_efficiency")
    assert HW.allocator_headroom == 0.01 and "99.98%" in HW.source("allocator_headroom")
    assert "h200-2026-11-30-probe" in HW.source("link.d2h_bytes_per_s")
    assert "64 GB/s" in HW.source("link.d2h_bytes_per_s")  # the nominal figure is mentioned
    gh200 = cm.load_profile("gh200")
    assert gh200.link.kind == "nvlink-c2c" and gh200.link.d2h_bytes_per_s == 450e9


def test_matmul_rate_dtype_names():
    rates = dict(HW.matmul_flops_per_s)
    assert HW.matmul_rate(jnp.bfloat16) == HW.matmul_rate("bf16") == rates["bf16"]
    assert HW.matmul_rate(np.dtype("float32")) == rates["fp32"]
    assert HW.matmul_rate("float8_e4m3fn") == rates["fp8"]
    assert HW.matmul_rate("float64") == rates["bf16"]  # unknown: falls back to bf16
    assert cm.load_profile("cpu").matmul_rate("tf32") == cm.load_profile("cpu").matmul_rate("bf16")


def _profile_json():
    return cm.load_profile("h100-sxm").to_json()


def _write(tmp_path, data, name="mine.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_load_profile_from_path_and_passthrough(tmp_path):
    path = _write(tmp_path, _profile_json())
    assert cm.load_profile(path) == cm.load_profile(str(path)) == cm.load_profile("h100-sxm")
    assert cm.load_profile(HW) is HW


def test_profile_error_missing_field(tmp_path):
    data = _profile_json()
    del data["hbm_bytes_per_s"]
    with pytest.raises(
        cm.ProfileError, match=r"mine\.json: missing field 'hbm_bytes_per_s'.*4\.8 TB/s"
    ):
        cm.load_profile(_write(tmp_path, data))


def test_profile_error_bad_unit(tmp_path):
    data = _profile_json()
    data["hbm_bytes_per_s"]["value"] = "4.8 TB"
    with pytest.raises(
        cm.ProfileError,
        match=r"mine\.json: field 'hbm_bytes_per_s'.*unit 'TB'.*bytes per second.*'4\.8 TB/s'",
    ):
        cm.load_profile(_write(tmp_path, data))


def test_profile_error_missing_unit(tmp_path):
    data = _profile_json()
    data["link"]["latency_s"]["value"] = 2
    with pytest.raises(cm.ProfileError, match=r"'link\.latency_s'.*unit must be written.*'2 us'"):
        cm.load_profile(_write(tmp_path, data))


def test_profile_error_negative(tmp_path):
    data = _profile_json()
    data["link"]["d2h_bytes_per_s"]["value"] = "-64 GB/s"
    with pytest.raises(cm.ProfileError, match=r"'link\.d2h_bytes_per_s'.*negative.*'4\.8 TB/s'"):
        cm.load_profile(_write(tmp_path, data))
    data = _profile_json()
    data["overlap_efficiency"]["value"] = -0.5
    with pytest.raises(cm.ProfileError, match=r"'overlap_efficiency'.*negative.*0\.4"):
        cm.load_profile(_write(tmp_path, data))


def test_profile_error_unknown_field_suggests_the_right_one(tmp_path):
    data = _profile_json()
    data["hbm_bytes_per_sec"] = data.pop("hbm_bytes_per_s")
    with pytest.raises(
        cm.ProfileError, match=r"unknown field 'hbm_bytes_per_sec'.*Did you mean 'hbm_bytes_per_s'"
    ):
        cm.load_profile(_write(tmp_path, data))


def test_profile_error_missing_source(tmp_path):
    data = _profile_json()
    data["hbm_bytes"]["source"] = " "
    with pytest.raises(cm.ProfileError, match=r"'hbm_bytes' has an empty source.*citation"):
        cm.load_profile(_write(tmp_path, data))


def test_profile_error_unknown_name():
    with pytest.raises(
        cm.ProfileError, match=r"unknown hardware profile 'h201'.*Did you mean 'h200'.*path"
    ):
        cm.load_profile("h201")


def test_profile_error_malformed_json(tmp_path):
    with pytest.raises(cm.ProfileError, match=r"mine\.json: not valid JSON .*line 1 column"):
        cm.load_profile(_write(tmp_path, '{"name": "x",'))


def test_profile_error_missing_file(tmp_path):
    with pytest.raises(cm.ProfileError, match=r"cannot read the profile file"):
        cm.load_profile(tmp_path / "absent.json")


def test_replace_validates_and_marks_uncited_figures():
    faster = HW.replace(hbm_bytes_per_s=5e12)
    assert faster.hbm_bytes_per_s == 5e12
    assert "no citation" in faster.source("hbm_bytes_per_s")
    assert faster.source("hbm_bytes") == HW.source("hbm_bytes")
    cited = HW.replace(overlap_efficiency=0.5, sources={"overlap_efficiency": "my run"})
    assert cited.source("overlap_efficiency") == "my run"
    with pytest.raises(cm.ProfileError, match=r"'overlap_efficiency'.*at most 1"):
        HW.replace(overlap_efficiency=1.5)
    with pytest.raises(cm.ProfileError, match=r"no field \['hbm_gb'\]"):
        HW.replace(hbm_gb=80)


@hypothesis.given(st.floats(min_value=0, max_value=1e18, allow_nan=False))
def test_units_round_trip_exactly(value):
    for kind in (_units.BYTES, _units.BANDWIDTH, _units.FLOP_RATE, _units.TIME):
        assert _units.parse_quantity(_units.format_quantity(value, kind), kind) == value


# ------------------------------------------------------------------------------------------
# Transfers and flags


def test_transfer_seconds():
    link = HW.link
    assert cm.transfer_seconds(52.65e9, HW, "d2h") == pytest.approx(link.latency_s + 1.0)
    assert cm.transfer_seconds(52.31e9, HW, "h2d") == pytest.approx(link.latency_s + 1.0)
    assert cm.transfer_seconds(0, HW, "d2h") == 0.0
    with pytest.raises(ValueError, match=r"'d2h' \(device to host.*'h2d'.*got 'up'"):
        cm.transfer_seconds(1, HW, "up")
    no_link = HW.replace(
        link=cm.LinkProfile(
            kind="none",
            d2h_bytes_per_s=0,
            h2d_bytes_per_s=0,
            latency_s=0,
            copy_engines=0,
            host_pinned_bytes=0,
        )
    )
    with pytest.raises(ValueError, match="no host link"):
        cm.transfer_seconds(1, no_link, "d2h")


def test_exposed_seconds():
    assert cm.exposed_seconds(1.0, 3.0, 0.0) == 1.0  # nothing hides
    assert cm.exposed_seconds(1.0, 3.0, 0.25) == 0.25
    assert cm.exposed_seconds(1.0, 3.0, 1.0) == 0.0
    with pytest.raises(ValueError, match="fraction"):
        cm.exposed_seconds(1.0, 1.0, 1.5)


def test_xla_flags():
    flags = cm.xla_flags_for(HW, offloading=True)
    names = {flag.name for flag in flags}
    assert names == {
        "xla_gpu_enable_latency_hiding_scheduler",
        "xla_gpu_enable_command_buffer",
    }
    assert all(flag.why and "debug_options_flags.cc" in flag.source for flag in flags)
    text = cm.format_xla_flags(flags)
    # Not emitted: it let XLA's own remat offload, which aborted a capped compile on the H200.
    assert "host_memory_offloading" not in text and text.count("--") == 2
    # An empty command-type list (graphs off) is written as "name=" with nothing after it,
    # which XLA's flag parser reads as the empty list (the H200 overlap fix).
    assert "--xla_gpu_enable_command_buffer= " in text + " "
    assert cm.xla_flags_for(HW, offloading=False) == ()
    assert cm.xla_flags_for(cm.load_profile("cpu"), offloading=True) == ()


# ------------------------------------------------------------------------------------------
# Calibration on CPU


def test_calibrate_on_cpu(tmp_path):
    start = time.perf_counter()
    out = tmp_path / "calibrated.json"
    profile = cm.calibrate(out_path=out, sizes_mb=(1, 2), repeats=2, matmul_n=64)
    assert time.perf_counter() - start < 20
    assert profile.name == "cpu-calibrated" and profile.platform == "cpu"
    assert cm.load_profile(out) == profile
    assert cm.HardwareProfile.from_json(profile.to_json()) == profile
    assert 0 <= profile.overlap_efficiency <= 1
    assert profile.link.d2h_bytes_per_s > 0 and profile.hbm_bytes_per_s > 0
    assert "measured by cost_models.calibrate" in profile.source("matmul_flops_per_s.bf16")
    assert "measured by cost_models.calibrate" in profile.source("link.d2h_bytes_per_s")
    assert profile.source("hbm_bytes") == cm.load_profile("cpu").source("hbm_bytes")


def test_overlap_with_flags_runs_in_subprocesses():
    overlaps = cm.calibrate_overlap_with_flags({"default": ""}, size_mb=1, repeats=1, matmul_n=32)
    assert set(overlaps) == {"default"} and 0 <= overlaps["default"] <= 1
    with pytest.raises(cm.CalibrationError, match=r"'bogus'.*unknown XLA flag"):
        cm.calibrate_overlap_with_flags(
            {"bogus": "--xla_no_such_flag=1"}, size_mb=1, repeats=1, matmul_n=32
        )


def test_cli_lists_profiles(capsys):
    assert cli_main(["profiles"]) == 0
    assert capsys.readouterr().out.split() == list(cm.list_profiles())


def test_public_api():
    for name in cm.__all__:
        assert hasattr(cm, name), name
    assert Path(cm.__file__).parent.joinpath("profiles", "h200.json").is_file()


def test_allocator_headroom_is_optional_in_older_profile_files(tmp_path):
    """A profile file written before the figure existed loads with no headroom, and says so;
    a bad value is refused with the figure's range."""
    data = cm.load_profile("h200").to_json()
    del data["allocator_headroom"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    old = cm.load_profile(str(path))
    assert old.allocator_headroom == 0.0
    assert "not in" in old.source("allocator_headroom") and "old.json" in old.source(
        "allocator_headroom"
    )
    data["allocator_headroom"] = {"value": 0.7, "source": "a guess"}
    path.write_text(json.dumps(data))
    with pytest.raises(cm.ProfileError, match=r"'allocator_headroom'.*at most 0\.5"):
        cm.load_profile(str(path))


# ------------------------------------------------------------------------ the registry's contract


def _fake_eqn(name: str, params: dict | None = None):
    import types

    import jax.numpy as jnp

    aval = jax.ShapeDtypeStruct((8, 8), jnp.float32)
    var = types.SimpleNamespace(aval=aval)
    return types.SimpleNamespace(
        primitive=types.SimpleNamespace(name=name),
        params=params or {},
        invars=[var, var],
        outvars=[var],
        effects=(),
    )


@pytest.mark.parametrize("name", sorted(cm.fusible_primitives()))
def test_every_fusible_rule_is_non_negative_and_launches_no_kernel(name):
    """One table of fusibility: a primitive registered fusible launches no kernel of its own
    (XLA fuses it into its neighbours), and no rule gives negative work."""
    cost = cm.eqn_cost(_fake_eqn(name, {"y": 3}))
    assert cost.kernel_launches == 0, name
    for field in ("matmul_flops", "vector_flops", "hbm_bytes", "collective_bytes"):
        assert getattr(cost, field) >= 0, (name, field)
    assert cm.FUSIBLE == cm.fusible_primitives()


def test_every_rule_met_in_real_programs_is_non_negative_and_fusible_ones_launch_nothing():
    """Every equation of the bundled examples' train steps and of a JVP / transpose corpus,
    costed by its registered rule: non-negative, and fusible ones launch no kernel; the
    corpus meets a good part of the registry."""
    import jax.numpy as jnp

    from examples import llama, moe
    from planner._src.xla import adapter

    jaxprs = [jax.make_jaxpr(s)(*a) for s, a in (llama.make_train_step(), moe.make_train_step())]
    jaxprs.append(
        jax.make_jaxpr(jax.grad(lambda x: jnp.sum(jnp.cumsum(jnp.sort(x) ** 3))))(jnp.ones(8))
    )
    seen = set()
    for jx in jaxprs:
        for site in adapter.walk(jx.jaxpr):
            name = site.eqn.primitive.name
            if name not in cm.registered_primitives():
                continue
            seen.add(name)
            cost = cm.eqn_cost(site.eqn)
            for field in (
                "matmul_flops",
                "vector_flops",
                "hbm_bytes",
                "collective_bytes",
                "kernel_launches",
            ):
                assert getattr(cost, field) >= 0, (name, field)
            if name in cm.FUSIBLE:
                assert cost.kernel_launches == 0, name
    assert len(seen) >= 30, sorted(seen)


# ------------------------------------------------------------------------------------------
# XLA attention's softmax chain (issues 18, 20; benchmarks/results/cost-model-other-2026-12-04.md)


def test_a_broadcast_mask_is_read_at_its_source_size_inside_a_layer_scan():
    """jnp.where(mask, scores, -inf) with the causal mask and the filler broadcast to
    [batch, heads, s, s] outside the layer scan (as JAX hoists them): the softmax fusion in
    the loop reads the [s, s] mask and a scalar, not two [batch, heads, s, s] buffers."""
    layers, b, h, s = 3, 2, 4, 64

    def step(scores, causal):  # scores [layers, b, h, s, s] f32, causal [s, s] bool
        mask = jnp.broadcast_to(causal, (b, h, s, s))
        filler = jnp.broadcast_to(jnp.float32(-1e30), (b, h, s, s))

        def body(carry, x):
            return carry + jnp.max(lax.select(mask, x, filler)), None

        return lax.scan(body, jnp.float32(0), scores)[0]

    closed = jax.make_jaxpr(step)(
        jax.ShapeDtypeStruct((layers, b, h, s, s), jnp.float32),
        jax.ShapeDtypeStruct((s, s), jnp.bool_),
    )
    (scan_cost,) = [
        c
        for e, c in zip(closed.jaxpr.eqns, cm.fused_eqn_costs(closed), strict=True)
        if e.primitive.name == "scan"
    ]
    scores_bytes = b * h * s * s * 4
    # Per trip: the scores, the mask's source, the carry in and out (the filler's source is
    # a literal, folded into the kernel).
    per_trip = scores_bytes + s * s + 4 + 4
    assert scan_cost.hbm_bytes == pytest.approx(layers * per_trip)
    # Counted at their broadcast sizes they would add b*h*s*s*(1 + 4) bytes a trip.
    assert scan_cost.hbm_bytes < layers * (scores_bytes + b * h * s * s)
    # The same through the Work the trace stage records for the whole step (plus the two
    # broadcasts, written once before the loop).
    once = b * h * s * s * (1 + 4) + s * s
    assert cm.work_of(closed).total().hbm_bytes == pytest.approx(layers * per_trip + once)


def _softmax_step():
    """A scanned, checkpointed layer: matmul, softmax (a fusible chain), matmul."""
    d, n = 32, 64

    def layer(x, w):
        s = x @ w
        e = jnp.exp(s - s.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True)
        return jnp.tanh(p @ w.T), None

    def loss(ws, x):
        y, _ = lax.scan(jax.checkpoint(layer), x, ws)
        return jnp.sum(y)

    def step(ws, x):
        return jax.grad(loss)(ws, x)

    return step, (
        jax.ShapeDtypeStruct((3, d, n), jnp.float32),
        jax.ShapeDtypeStruct((16, d), jnp.float32),
    )


def test_the_base_step_leaves_out_writes_of_values_kept_only_as_residuals():
    """T0 is costed on the step traced with every residual kept. A fusible value read only by
    fusible forward equations (exp's output) is written there only because it is kept, and
    the full-remat step does not write it: T0 leaves it out, M_v adds it back for a plan that
    keeps it. A fusible value a matmul reads (the probabilities) is written whatever is kept:
    keeping it costs no write (M_v = 0)."""
    from planner._src.cost import build_cost_model, evaluate
    from planner._src.cost.baselines import stock_assignment
    from planner._src.graph import build_graph
    from planner._src.trace import trace_step

    step, args = _softmax_step()
    trace = trace_step(step, args)
    (region,) = trace.regions
    by_prim = {}
    for c in region.candidates:
        by_prim.setdefault(c.primitive, []).append(c)
    (exp,) = by_prim["exp"]
    (div,) = by_prim["div"]
    assert exp.needed and exp.residual_write_bytes == exp.nbytes
    assert div.needed and div.residual_write_bytes == 0  # read by p @ w.T: written anyway
    # The cpu profile: no XLA:GPU loop-slice copies (S_v), so T0 and M_v are all there is.
    hw = cm.load_profile("cpu")
    graph = build_graph(trace)
    model = build_cost_model(trace, graph, "cpu", allow_offload=False)
    rc = model.regions[0]
    assert rc.materialize_s[div.index] == 0
    assert rc.materialize_s[exp.index] == pytest.approx(exp.nbytes / hw.hbm_bytes_per_s)
    # A fusible value the backward does not read (s - max, kept only to recompute exp from
    # it) is in neither traced forward, so its residual_write_bytes say nothing: keeping it
    # writes its bytes (it was free before the review of 2026-12-04).
    unread = [c for c in by_prim["sub"] if not c.needed]
    assert unread
    for c in unread:
        assert rc.materialize_s[c.index] == pytest.approx(c.nbytes / hw.hbm_bytes_per_s)
    kept_only = sum(
        c.residual_write_bytes / hw.hbm_bytes_per_s
        for c in region.candidates
        if c.needed and not c.loop_invariant
    )
    assert kept_only > 0
    assert model.base_step_s == pytest.approx(
        trace.step_work.seconds(hw) - region.multiplicity * kept_only
    )
    # Keeping everything costs what the traced (everything-kept) step costs, less the
    # writes of views (a kept reshape of a matmul output is that output's buffer).
    every = evaluate(model, graph, stock_assignment(graph, "everything_saveable"))
    assert every.step_s <= trace.step_work.seconds(hw) + 1e-12
    assert every.materialize_s > 0
