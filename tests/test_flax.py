"""Models written with Flax remat are planned without editing them."""

import jax
import jax.numpy as jnp
import pytest
from jax.ad_checkpoint import checkpoint_name

import planner

pytestmark = pytest.mark.slow  # compiles whole models (the fast tier is -m "not slow")

nn = pytest.importorskip("flax.linen")
nnx = pytest.importorskip("flax.nnx")


class Block(nn.Module):
    @nn.compact
    def __call__(self, x, _):
        h = checkpoint_name(nn.Dense(256, use_bias=False)(x), "mlpwi")
        return x + nn.Dense(64, use_bias=False)(jax.nn.gelu(h)), None


class LinenModel(nn.Module):
    @nn.compact
    def __call__(self, x):
        scanned = nn.scan(
            nn.remat(Block), variable_axes={"params": 0}, split_rngs={"params": True}, length=4
        )
        x, _ = scanned()(x, None)
        return x


def test_flax_linen_remat_under_scan():
    model = LinenModel()
    x = jnp.ones((8, 32, 64))
    params = model.init(jax.random.key(0), x)

    def step(params, x):
        loss, g = jax.value_and_grad(lambda p: jnp.mean(model.apply(p, x) ** 2))(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, g), loss

    plan = planner.solve(step, params, x, hbm_gb=0.02, hardware="cpu")
    (region,) = plan.graph.regions
    assert region.region.multiplicity == 4 and region.region.in_scan
    assert "mlpwi" in {c.name for c in plan.graph.classes}
    assert plan.verification.ok, plan.report()
    # The report points at the user's code, never into Flax: nn.scan binds the remat inside
    # the loop it traces, with no user frame on the stack, so the region is at the scan's
    # line in LinenModel.__call__; every row at a line of Block.__call__.
    from planner._src.results.report import build_report

    r = build_report(plan)
    (line,) = r.regions
    lines = open(__file__).read().splitlines()
    scan_line = lines.index("        x, _ = scanned()(x, None)") + 1
    assert line.startswith(f"region 0 at tests/test_flax.py:{scan_line}:"), line
    assert "(LinenModel.__call__)" in line
    assert r.rows and all("tests/test_flax.py:" in row.source for row in r.rows)
    assert not any("flax/" in row.source or "/flax/" in row.jax_label for row in r.rows)
    assert not any("never differentiated" in n for n in r.notes)


class NnxBlock(nnx.Module):
    def __init__(self, rngs):
        self.up = nnx.Linear(64, 256, use_bias=False, rngs=rngs)
        self.down = nnx.Linear(256, 64, use_bias=False, rngs=rngs)

    def __call__(self, x):
        h = checkpoint_name(self.up(x), "mlpwi")
        return x + self.down(jax.nn.gelu(h))


class NnxModel(nnx.Module):
    def __init__(self, rngs):
        self.blocks = nnx.List([NnxBlock(rngs) for _ in range(3)])

    def __call__(self, x):
        for b in self.blocks:
            x = nnx.remat(lambda b, x: b(x))(b, x)
        return x


def test_flax_nnx_remat_unrolled():
    model = NnxModel(nnx.Rngs(0))
    graphdef, state = nnx.split(model)
    x = jnp.ones((8, 32, 64))

    def step(state, x):
        def loss(state):
            return jnp.mean(nnx.merge(graphdef, state)(x) ** 2)

        value, g = jax.value_and_grad(loss)(state)
        return jax.tree.map(lambda p, g: p - 0.1 * g, state, g), value

    plan = planner.solve(step, state, x, hbm_gb=0.02, hardware="cpu")
    assert sum(rg.region.multiplicity for rg in plan.graph.regions) == 3
    assert plan.verification.status == "compiled, within budget"
