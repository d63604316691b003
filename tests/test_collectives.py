"""shard_map and pmap steps plan, collectives inside checkpointed regions included.

conftest.py gives the process 8 fake CPU devices (XLA_FLAGS, before JAX starts); each step
below runs on 4 of them. A region bound inside a shard_map body or a pmap is traced again by
the planner (its JVP, JAX's residual selection replayed) inside the named axes it was bound
in: without them its psum / pmean / axis_index fail with JAX's "unbound axis name". Each step
is planned at a budget below what saving everything compiles to; the plan must compile within
that budget (per device: the compiled program of a shard_map or pmap step is one device's)
and, applied with ``plan.apply``, compute the loss and the update of the step as written.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import planner
from planner._src.types import Status
from planner._src.xla.adapter import shard_map

N = 4  # devices
B, D, F, L = 64, 32, 128, 4  # batch per device, width, hidden width, layers
LR = 0.1


def _params(key, shard_hidden=1):
    keys = jax.random.split(key, 2 * L)
    return [
        (
            jax.random.normal(keys[2 * i], (D, F // shard_hidden * shard_hidden)) / np.sqrt(D),
            jax.random.normal(keys[2 * i + 1], (F, D)) / np.sqrt(F),
        )
        for i in range(L)
    ]


def _update(params, grads):
    return jax.tree.map(lambda p, g: p - LR * g, params, grads)


def data_parallel_step():
    """Replicated parameters, the batch split over the mesh; each layer checkpointed; the
    gradients averaged (pmean) outside the checkpointed regions."""
    mesh = Mesh(np.array(jax.devices()[:N]), ("data",))

    def layer(x, w):
        return x + jnp.tanh(jnp.tanh(x @ w[0]) * 1.5) @ w[1]

    def loss(params, x):
        for w in params:
            x = jax.checkpoint(layer)(x, w)
        return jnp.mean(x**2)

    def body(params, x):
        value, grads = jax.value_and_grad(loss)(params, x)
        grads = jax.lax.pmean(grads, "data")
        return jax.lax.pmean(value, "data"), _update(params, grads)

    step = jax.jit(shard_map(body, mesh=mesh, in_specs=(P(), P("data")), out_specs=(P(), P())))
    x = jax.random.normal(jax.random.key(1), (N * B, D))
    return step, (_params(jax.random.key(0)), x)


def tensor_parallel_step():
    """A Megatron MLP: w1 split by columns, w2 by rows, the partial products summed by a psum
    inside each checkpointed layer (as tensor-parallel layers have it)."""
    mesh = Mesh(np.array(jax.devices()[:N]), ("model",))

    def layer(x, w):
        h = jnp.tanh(x @ w[0])  # this device's columns of the hidden activation
        return x + jax.lax.psum(jnp.tanh(h * 1.5) @ w[1], "model")

    def loss(params, x):
        for w in params:
            x = jax.checkpoint(layer)(x, w)
        return jnp.mean(x**2)

    def body(params, x):
        value, grads = jax.value_and_grad(loss)(params, x)
        return value, _update(params, grads)

    specs = [(P(None, "model"), P("model", None))] * L
    step = jax.jit(shard_map(body, mesh=mesh, in_specs=(specs, P()), out_specs=(P(), specs)))
    x = jax.random.normal(jax.random.key(1), (B, D))
    return step, (_params(jax.random.key(0)), x)


def pmap_step():
    """pmap over 4 devices; each checkpointed layer normalises by the batch mean across the
    devices (a pmean inside the region, as synchronised batch norm has it) and scales by the
    device's index (axis_index)."""

    def layer(x, w):
        h = jnp.tanh(x @ w[0])
        h = h - jax.lax.pmean(jnp.mean(h, axis=0), "batch")
        scale = 1.0 + 0.01 * jax.lax.axis_index("batch").astype(h.dtype)
        return x + jnp.tanh(h * scale) @ w[1]

    def loss(params, x):
        for w in params:
            x = jax.checkpoint(layer)(x, w)
        return jnp.mean(x**2)

    def body(params, x):
        value, grads = jax.value_and_grad(loss)(params, x)
        grads = jax.lax.pmean(grads, "batch")
        return jax.lax.pmean(value, "batch"), _update(params, grads)

    step = jax.pmap(body, axis_name="batch", devices=jax.devices()[:N])
    params = jax.tree.map(lambda p: jnp.broadcast_to(p, (N, *p.shape)), _params(jax.random.key(0)))
    x = jax.random.normal(jax.random.key(1), (N, B, D))
    return step, (params, x)


STEPS = {
    "data_parallel": data_parallel_step,
    "tensor_parallel": tensor_parallel_step,
    "pmap": pmap_step,
}


@pytest.mark.parametrize("name", sorted(STEPS))
def test_step_plans_below_save_everything_and_computes_the_same(name):
    step, args = STEPS[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        # compare_stock=False: the planner's own policy, emitted into the shard_map body or
        # the pmap, is what is verified and applied (a stock policy may be the default answer)
        session = planner.Planner(step, *args, hardware="cpu", compare_stock=False)
        top = session.trace.anchor_saved.device_bytes  # save everything, compiled
        bottom = session.trace.anchor.device_bytes  # full remat, compiled
        assert bottom < top, (bottom, top)
        budget = bottom + (top - bottom) // 2  # bytes; the CPU profile has no headroom
        plan = session.plan(budget / 1e9)
    assert session.trace.regions, "the checkpointed regions inside the step were not found"
    ver = plan.verification
    assert ver.compiled_device_bytes is not None
    assert ver.compiled_device_bytes <= plan.budget.usable < top
    assert ver.status == Status.OK, ver.status
    assert plan.choice == "planner", plan.choice_why  # the planner's own policy, emitted
    assert all(c.ok for c in ver.checks), [c.detail for c in ver.checks if not c.ok]
    # Priced per device: the planned residuals are those of one device's shard.
    assert plan.prediction.residual_bytes < top

    want = jax.device_get(step(*args))
    got = jax.device_get(plan.apply(step)(*args))
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=1e-5, atol=1e-6)
    for g, w in zip(jax.tree.leaves(got[1]), jax.tree.leaves(want[1])):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-6)
