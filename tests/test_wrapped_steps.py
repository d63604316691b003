"""Steps wrapped the way their libraries teach, planned as written (new-user trial
2026-12-04): a ``@nnx.jit`` step (F1), an ``@eqx.filter_jit`` step whose model has non-array
leaves (F2)."""

import warnings

import jax
import jax.numpy as jnp
import pytest

import planner

nnx = pytest.importorskip("flax.nnx")


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
        session = planner.Planner(step, *args, hardware="cpu", check_numerics=False)
    assert len(session.graph.regions) >= 1
    plan = session.plan(hbm_gb=session.trace.anchor_saved.device_bytes / 1e9 * 1.5)
    assert plan.verification.compiled_device_bytes <= plan.budget_bytes


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
