"""A Flax NNX model planned as written: ``nnx.remat`` on every block, scanned over layers.

The blocks are created stacked with ``nnx.vmap`` and run with ``nnx.scan`` over an
``nnx.remat``-wrapped call, the scan-over-layers idiom of the Flax NNX guides. Nothing here
knows about the planner:

    import planner
    from examples import flax_nnx_model
    plan = planner.solve(*flax_nnx_model.make(), hbm_gb=0.03, hardware="cpu")
    # then: nnx.remat(block_fn, policy=plan.policy), i.e. make(policy=plan.policy)

``make(policy=None)`` returns ``(train_step, (state, x, y))`` with ``state`` the model's
``nnx.State`` (split from its graph definition, so the step is a plain JAX function).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

D_MODEL, D_HIDDEN, N_LAYERS, BATCH, SEQ = 64, 512, 4, 8, 64


class Block(nnx.Module):
    """A pre-norm MLP block with a residual connection; ``x`` is ``[batch, seq, d_model]``."""

    def __init__(self, rngs: nnx.Rngs):
        self.norm = nnx.RMSNorm(D_MODEL, rngs=rngs)
        self.up = nnx.Linear(D_MODEL, D_HIDDEN, use_bias=False, rngs=rngs)
        self.down = nnx.Linear(D_HIDDEN, D_MODEL, use_bias=False, rngs=rngs)

    def __call__(self, x):
        x = checkpoint_name(x, "decoder_layer_input")
        h = checkpoint_name(self.up(self.norm(x)), "mlpwi")
        return x + checkpoint_name(self.down(jax.nn.silu(h)), "mlpwo")


class Model(nnx.Module):
    """``N_LAYERS`` blocks stacked by ``nnx.vmap``, run by ``nnx.scan`` under ``nnx.remat``."""

    def __init__(self, rngs: nnx.Rngs, policy=None):
        @nnx.split_rngs(splits=N_LAYERS)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def create(rngs):
            return Block(rngs)

        self.blocks = create(rngs)
        self.head = nnx.Linear(D_MODEL, 1, rngs=rngs)
        self.policy = policy

    def __call__(self, x):
        @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry)
        @nnx.remat(policy=self.policy)
        def body(block, x):
            return block(x)

        return self.head(body(self.blocks, x))[..., 0]


def make(policy=None):
    """``(train_step, (state, x, y))``: MSE loss, gradient, SGD update of the state."""
    graphdef, state = nnx.split(Model(nnx.Rngs(0), policy=policy))

    def train_step(state, x, y):
        def loss_fn(state):
            return jnp.mean((nnx.merge(graphdef, state)(x) - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(state)
        state = jax.tree.map(lambda p, g: p - 1e-2 * g, state, grads)
        return state, loss

    x = jax.random.normal(jax.random.key(1), (BATCH, SEQ, D_MODEL))
    y = jax.random.normal(jax.random.key(2), (BATCH, SEQ))
    return train_step, (state, x, y)
