"""Flax linen decoder-only transformer, layers as ``nn.scan(nn.remat(Block), ...)``.

The scan-over-layers idiom of the Flax linen docs (``flax.linen.scan``, ``flax.linen.remat``):
a ``Block`` whose ``__call__(carry, _)`` returns ``(carry, None)``, rematerialized and scanned
with ``variable_axes={"params": 0}`` and ``split_rngs={"params": True}``. Attention is linen's
own ``nn.MultiHeadDotProductAttention`` with a causal mask, the MLP two ``nn.Dense``; training
state is ``flax.training.train_state.TrainState`` with optax AdamW.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training import train_state

DEFAULTS = dict(vocab=256, d_model=64, n_heads=4, d_ff=256, n_layers=4, seq=128, batch=4, lr=3e-4)


class Block(nn.Module):
    n_heads: int
    d_ff: int

    @nn.compact
    def __call__(self, x, _):
        mask = nn.make_causal_mask(jnp.ones(x.shape[:2], dtype=jnp.int32))
        h = nn.LayerNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=self.n_heads)(h, h, mask=mask)
        h = nn.LayerNorm()(x)
        h = nn.Dense(self.d_ff)(h)
        h = nn.gelu(h)
        x = x + nn.Dense(x.shape[-1])(h)
        return x, None


class Transformer(nn.Module):
    vocab: int
    d_model: int
    n_heads: int
    d_ff: int
    n_layers: int
    remat_policy: object = None

    @nn.compact
    def __call__(self, tokens):
        embed = nn.Embed(self.vocab, self.d_model)
        x = embed(tokens)
        x = x + self.param(
            "pos_embedding", nn.initializers.normal(0.02), (tokens.shape[1], self.d_model)
        )
        RematBlock = nn.remat(Block, policy=self.remat_policy, prevent_cse=False)
        x, _ = nn.scan(
            RematBlock,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            length=self.n_layers,
        )(self.n_heads, self.d_ff, name="layers")(x, None)
        x = nn.LayerNorm()(x)
        return embed.attend(x)


def make(policy=None, **overrides):
    """``(train_step, (state, tokens))``; the step returns ``(state, loss)``."""
    cfg = {**DEFAULTS, **overrides}
    model = Transformer(
        cfg["vocab"],
        cfg["d_model"],
        cfg["n_heads"],
        cfg["d_ff"],
        cfg["n_layers"],
        remat_policy=policy,
    )
    tokens = jax.random.randint(jax.random.key(1), (cfg["batch"], cfg["seq"] + 1), 0, cfg["vocab"])

    @jax.jit
    def create_state(key, tokens):
        params = model.init(key, tokens)["params"]
        return train_state.TrainState.create(
            apply_fn=model.apply, params=params, tx=optax.adamw(cfg["lr"])
        )

    state = create_state(jax.random.key(0), tokens[:, :-1])

    def train_step(state, tokens):
        def loss_fn(params):
            logits = state.apply_fn({"params": params}, tokens[:, :-1])
            return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), loss

    return train_step, (state, tokens)


def make_with_policy(policy, **overrides):
    return make(policy=policy, **overrides)
