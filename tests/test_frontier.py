"""examples/frontier.py at a tiny scale (same code paths, 8 fake CPU devices from conftest),
and benchmarks/solver_scale.py at a small count."""

import math
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AbstractMesh, NamedSharding

from examples import frontier as F
from planner._src.xla import adapter

pytestmark = pytest.mark.slow  # compiles whole models (the fast tier is -m "not slow")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

MLA_NAMES = {
    "query_wa_proj",
    "mla_q",
    "kv_wa_proj",
    "mla_kv",
    "query_proj",
    "key_proj",
    "value_proj",
    "attention_out",
    "out_proj",
    "decoder_layer_input",
}
EXPERT_NAMES = {"moe_mlpwi_0", "moe_mlpwi_1", "moe_mlpwo", "mlpwi_0", "mlpwi_1", "mlpwo"}
GQA_NAMES = {
    "decoder_layer_input",
    "query_proj",
    "key_proj",
    "value_proj",
    "attention_out",
    "out_proj",
    "mlpwi_0",
    "mlpwi_1",
    "mlpwo",
}


def _names(jaxpr) -> set[str]:
    out = {e.params["name"] for e in jaxpr.eqns if e.primitive.name == "name"}
    for e in jaxpr.eqns:
        for sub, _ in adapter.subjaxprs(e):
            out |= _names(sub)
    return out


def _regions(jaxpr) -> int:
    return sum(
        (e.primitive is adapter.remat_p) + sum(_regions(sub) for sub, _ in adapter.subjaxprs(e))
        for e in jaxpr.eqns
    )


@pytest.mark.parametrize(
    "cfg,expected,regions",
    [
        (F.TINY_LLAMA, GQA_NAMES, 1),
        (F.TINY_DEEPSEEK, MLA_NAMES | EXPERT_NAMES, 2),
        (F.TINY_DEEPSEEK_CAPACITY, MLA_NAMES | EXPERT_NAMES, 2),
    ],
)
def test_tiny_configs_trace_with_abstract_sharded_args(cfg, expected, regions):
    step, (state, batch) = F.make_train_step(cfg)
    leaves = jax.tree.leaves((state, batch))
    assert all(isinstance(x, jax.ShapeDtypeStruct) for x in leaves)  # nothing allocated
    assert all(isinstance(x.sharding, NamedSharding) for x in leaves)
    assert {x.sharding.mesh.shape_tuple for x in leaves} == {(("fsdp", 4), ("tensor", 2))}
    jaxpr = step.trace(state, batch).jaxpr.jaxpr
    assert expected <= _names(jaxpr)
    # One checkpoint region per layer stack (dense; MoE): the backward scan's remat equation
    # (the forward pass of a differentiated region is partial-evaluated out of it).
    assert _regions(jaxpr) == regions


def test_full_size_layouts_and_per_device_bytes():
    # The published totals: 405B (Llama 3.1) and 671B (DeepSeek-V3 without its MTP module).
    assert F.param_count(F.LLAMA3_405B) / 1e9 == pytest.approx(405.85, abs=0.01)
    assert F.param_count(F.DEEPSEEK_V3) / 1e9 == pytest.approx(671.03, abs=0.01)
    # Shardings on the 512-device mesh, checked on an AbstractMesh (no devices needed):
    # parameters + momentum in bf16 are 4 bytes per parameter over 512 devices.
    mesh = AbstractMesh((64, 8), ("fsdp", "tensor"))
    for cfg in (F.LLAMA3_405B, F.DEEPSEEK_V3):
        state, batch = F.abstract_args(cfg, mesh)
        per_device = sum(
            math.prod(x.sharding.shard_shape(x.shape)) * x.dtype.itemsize
            for x in jax.tree.leaves(state)
        )
        assert per_device == pytest.approx(4 * F.param_count(cfg) / 512, rel=0.01)
        assert batch["tokens"].sharding.shard_shape(batch["tokens"].shape) == (1, 8192)


def test_capacity_block_without_drops_matches_ragged_block():
    cfg = F.TINY_DEEPSEEK.scaled(mesh_shape=(1, 1), dtype="float32", capacity_factor=8.0)
    layout = F.param_layout(cfg)["moe_layers"]
    keys = iter(jax.random.split(jax.random.key(0), len(layout) + 1))
    layer = {
        k: jax.random.normal(next(keys), s[1:], jnp.float32) * 0.3 for k, (s, _) in layout.items()
    }
    h = jax.random.normal(next(keys), (1, 16, cfg.d_model), jnp.float32)
    capacity = jax.jit(lambda h, w: F.capacity_moe_block(cfg, h, w)[0])(h, layer)
    ragged = jax.jit(lambda h, w: F.moe.moe_block(F._moe_cfg(cfg), h[0], w))(h, layer)
    np.testing.assert_allclose(capacity, ragged, rtol=2e-4, atol=2e-4)


def test_planner_plans_tiny_llama():
    import planner

    step, args = F.make_train_step(F.TINY_LLAMA.scaled(n_layers=1, seq=16, vocab=64))
    plan = planner.solve(step, *args, hbm_gb=10, hardware="h200", verify_compile=False)
    names = {c["name"] for c in plan.candidates() if c["name"]}
    assert GQA_NAMES <= names
    assert plan.solution.status in ("OPTIMAL", "FEASIBLE")


def test_solver_scale_small(capsys):
    import solver_scale

    row = solver_scale.run_one(60, time_limit=2.0)
    assert row["candidates"] == 60 and row["variables"] > 0
    assert row["status"] in ("OPTIMAL", "FEASIBLE", "INFEASIBLE")
    assert solver_scale.main(["--counts", "40", "--time-limit", "1"]) == 0
    assert "| 40 |" in capsys.readouterr().out
