"""Flax NNX transformer with ``nnx.remat``: scanned (``nnx.vmap`` + ``nnx.scan``) or a loop.

``layers="scan"`` (default) is the scan-over-layers idiom of the Flax NNX guides: the blocks
are created stacked by ``nnx.split_rngs`` + ``nnx.vmap`` and run by ``nnx.scan`` over an
``nnx.remat``-wrapped call. ``layers="loop"`` keeps an ``nnx.List`` of blocks and calls each
through ``nnx.remat`` in a Python loop. Attention is ``nnx.MultiHeadAttention`` with a causal
mask. Training uses ``nnx.Optimizer(model, optax.adamw(...), wrt=nnx.Param)`` and
``nnx.value_and_grad``, functionalized with ``nnx.split`` / ``nnx.merge`` as in the NNX
performance guide, so the step is a plain function of ``nnx.State``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

DEFAULTS = dict(
    vocab=256, d_model=64, n_heads=4, d_ff=256, n_layers=4, seq=128, batch=4, lr=3e-4, layers="scan"
)


class Block(nnx.Module):
    def __init__(self, d_model, n_heads, d_ff, *, rngs: nnx.Rngs):
        self.ln1 = nnx.LayerNorm(d_model, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(
            num_heads=n_heads, in_features=d_model, decode=False, rngs=rngs
        )
        self.ln2 = nnx.LayerNorm(d_model, rngs=rngs)
        self.up = nnx.Linear(d_model, d_ff, rngs=rngs)
        self.down = nnx.Linear(d_ff, d_model, rngs=rngs)

    def __call__(self, x):
        mask = nnx.make_causal_mask(jnp.ones(x.shape[:2], dtype=jnp.int32))
        x = x + self.attn(self.ln1(x), mask=mask)
        return x + self.down(nnx.gelu(self.up(self.ln2(x))))


class Transformer(nnx.Module):
    def __init__(self, cfg, *, rngs: nnx.Rngs, policy=None):
        d = cfg["d_model"]
        self.embed = nnx.Embed(cfg["vocab"], d, rngs=rngs)
        self.pos = nnx.Param(0.02 * jax.random.normal(rngs.params(), (cfg["seq"], d)))
        self.layers_kind = cfg["layers"]
        self.policy = policy
        make_block = lambda rngs: Block(d, cfg["n_heads"], cfg["d_ff"], rngs=rngs)  # noqa: E731
        if self.layers_kind == "scan":

            @nnx.split_rngs(splits=cfg["n_layers"])
            @nnx.vmap(in_axes=(0,), out_axes=0)
            def create(rngs):
                return make_block(rngs)

            self.blocks = create(rngs)
        else:
            self.blocks = nnx.List([make_block(rngs) for _ in range(cfg["n_layers"])])
        self.ln_f = nnx.LayerNorm(d, rngs=rngs)

    def __call__(self, tokens):
        x = self.embed(tokens) + self.pos[...][: tokens.shape[1]]
        if self.layers_kind == "scan":

            @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry)
            @nnx.remat(policy=self.policy)
            def body(block, x):
                return block(x)

            x = body(self.blocks, x)
        else:
            for block in self.blocks:
                x = nnx.remat(lambda block, x: block(x), policy=self.policy)(block, x)
        return self.embed.attend(self.ln_f(x))


def make(policy=None, **overrides):
    """``(train_step, (state, tokens))``: ``state`` is the ``nnx.State`` of (model, optimizer)."""
    cfg = {**DEFAULTS, **overrides}
    model = Transformer(cfg, rngs=nnx.Rngs(0), policy=policy)
    optimizer = nnx.Optimizer(model, optax.adamw(cfg["lr"]), wrt=nnx.Param)
    graphdef, state = nnx.split((model, optimizer))

    def loss_fn(model, tokens):
        logits = model(tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    def train_step(state, tokens):
        model, optimizer = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(loss_fn)(model, tokens)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), loss

    tokens = jax.random.randint(jax.random.key(1), (cfg["batch"], cfg["seq"] + 1), 0, cfg["vocab"])
    return train_step, (state, tokens)


def make_with_policy(policy, **overrides):
    return make(policy=policy, **overrides)
