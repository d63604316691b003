"""An Equinox model planned as written: ``eqx.filter_checkpoint`` inside a ``lax.scan``.

The blocks are created with ``eqx.filter_vmap`` (one stacked copy of each weight, the
Equinox idiom for scan-over-layers), split into arrays and static parts with
``eqx.partition``, and run under ``jax.lax.scan`` with each block call wrapped in
``eqx.filter_checkpoint``. Nothing here knows about the planner:

    import planner
    from examples import equinox_model
    plan = planner.solve(*equinox_model.make(), hbm_gb=0.02, hardware="cpu")
    # then: eqx.filter_checkpoint(block_fn, policy=plan.policy), i.e. make(policy=plan.policy)

``make(policy=None)`` returns ``(train_step, (params, x, y))``; ``policy`` is what the user
would pass to ``eqx.filter_checkpoint`` (None: Equinox's default, save nothing).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

D_MODEL, D_HIDDEN, N_LAYERS, BATCH, SEQ = 64, 512, 4, 8, 64


def _tokens(layer):
    """Apply an ``eqx.nn.Linear`` (which takes one vector) to every token of a batch."""
    return jax.vmap(jax.vmap(layer))


class Block(eqx.Module):
    """A pre-norm MLP block with a residual connection; ``x`` is ``[batch, seq, d_model]``."""

    up: eqx.nn.Linear
    down: eqx.nn.Linear

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.up = eqx.nn.Linear(D_MODEL, D_HIDDEN, use_bias=False, key=k1)
        self.down = eqx.nn.Linear(D_HIDDEN, D_MODEL, use_bias=False, key=k2)

    def __call__(self, x):
        h = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6)
        h = checkpoint_name(_tokens(self.up)(h), "mlpwi")
        return x + checkpoint_name(_tokens(self.down)(jax.nn.gelu(h)), "mlpwo")


class Model(eqx.Module):
    """``N_LAYERS`` blocks stacked on a leading axis, scanned, each call checkpointed.

    The whole batch goes through the scan (rather than ``jax.vmap`` of a per-example model)
    so that the checkpoint region sees the activations with their batch dimension.
    """

    blocks: Block
    head: eqx.nn.Linear

    def __init__(self, key):
        kb, kh = jax.random.split(key)
        self.blocks = eqx.filter_vmap(Block)(jax.random.split(kb, N_LAYERS))
        self.head = eqx.nn.Linear(D_MODEL, 1, key=kh)

    def __call__(self, x, policy=None):
        arrays, static = eqx.partition(self.blocks, eqx.is_array)

        @eqx.filter_checkpoint(policy=policy)
        def block_fn(x, block_arrays):
            return eqx.combine(block_arrays, static)(x)

        def body(x, block_arrays):
            return block_fn(x, block_arrays), None

        x, _ = jax.lax.scan(body, x, arrays)
        return _tokens(self.head)(x)[..., 0]


def make(policy=None):
    """``(train_step, (params, x, y))``: MSE loss, gradient, SGD update of the arrays."""
    model = Model(jax.random.key(0))
    params, static = eqx.partition(model, eqx.is_array)

    def train_step(params, x, y):
        def loss_fn(params):
            m = eqx.combine(params, static)
            return jnp.mean((m(x, policy) - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        params = jax.tree.map(lambda p, g: p - 1e-2 * g, params, grads)
        return params, loss

    x = jax.random.normal(jax.random.key(1), (BATCH, SEQ, D_MODEL))
    y = jax.random.normal(jax.random.key(2), (BATCH, SEQ))
    return train_step, (params, x, y)
