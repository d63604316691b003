"""Equinox transformer with ``eqx.filter_checkpoint``: a list of blocks or a scanned stack.

Written as Equinox users write it: modules act on one sequence (``[seq, d_model]``) and the
batch is ``jax.vmap``-ped outside; attention is ``eqx.nn.MultiheadAttention`` with a causal
mask, the MLP two ``eqx.nn.Linear`` applied per position with ``jax.vmap``, an untied
``eqx.nn.Linear`` head. Training is optax
AdamW on ``eqx.filter(model, eqx.is_array)`` with ``eqx.filter_value_and_grad`` and
``eqx.apply_updates``; the step is a plain function of the model's arrays (``eqx.partition``
/ ``eqx.combine``), so ``jax.jit`` takes it as is.

- ``layers="list"`` (default): ``self.blocks`` is a Python list, called in a ``for`` loop,
  each call through ``eqx.filter_checkpoint(block, policy=...)``.
- ``layers="scan"``: the blocks are created stacked by ``eqx.filter_vmap`` and run under
  ``jax.lax.scan`` over ``eqx.partition(blocks, eqx.is_array)`` (the Equinox FAQ idiom), the
  scan body an ``eqx.filter_checkpoint``-ed function.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

DEFAULTS = dict(
    vocab=256, d_model=64, n_heads=4, d_ff=256, n_layers=4, seq=128, batch=4, lr=3e-4, layers="list"
)


class Block(eqx.Module):
    ln1: eqx.nn.LayerNorm
    attn: eqx.nn.MultiheadAttention
    ln2: eqx.nn.LayerNorm
    up: eqx.nn.Linear
    down: eqx.nn.Linear

    def __init__(self, d_model, n_heads, d_ff, *, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.ln1 = eqx.nn.LayerNorm(d_model)
        self.attn = eqx.nn.MultiheadAttention(n_heads, d_model, key=k1)
        self.ln2 = eqx.nn.LayerNorm(d_model)
        self.up = eqx.nn.Linear(d_model, d_ff, key=k2)
        self.down = eqx.nn.Linear(d_ff, d_model, key=k3)

    def __call__(self, x):
        seq = x.shape[0]
        mask = jnp.tril(jnp.ones((seq, seq), dtype=bool))
        h = jax.vmap(self.ln1)(x)
        x = x + self.attn(h, h, h, mask=mask)
        h = jax.vmap(self.ln2)(x)
        return x + jax.vmap(self.down)(jax.nn.gelu(jax.vmap(self.up)(h)))


class Transformer(eqx.Module):
    embed: eqx.nn.Embedding
    pos: jax.Array
    blocks: object
    ln_f: eqx.nn.LayerNorm
    head: eqx.nn.Linear
    layers: str = eqx.field(static=True)
    policy: object = eqx.field(static=True)

    def __init__(self, cfg, *, key, policy=None):
        ke, kp, kb, kh = jax.random.split(key, 4)
        d = cfg["d_model"]
        self.embed = eqx.nn.Embedding(cfg["vocab"], d, key=ke)
        self.pos = 0.02 * jax.random.normal(kp, (cfg["seq"], d))
        keys = jax.random.split(kb, cfg["n_layers"])
        make_block = lambda k: Block(d, cfg["n_heads"], cfg["d_ff"], key=k)  # noqa: E731
        if cfg["layers"] == "scan":
            self.blocks = eqx.filter_vmap(make_block)(keys)
        else:
            self.blocks = [make_block(k) for k in keys]
        self.ln_f = eqx.nn.LayerNorm(d)
        self.head = eqx.nn.Linear(d, cfg["vocab"], use_bias=False, key=kh)
        self.layers = cfg["layers"]
        self.policy = policy

    def __call__(self, tokens):
        x = jax.vmap(self.embed)(tokens) + self.pos[: tokens.shape[0]]
        if self.layers == "scan":
            dynamic, static = eqx.partition(self.blocks, eqx.is_array)

            @eqx.filter_checkpoint(policy=self.policy)
            def f(x, block_arrays):
                return eqx.combine(block_arrays, static)(x), None

            x, _ = jax.lax.scan(f, x, dynamic)
        else:
            for block in self.blocks:
                x = eqx.filter_checkpoint(block, policy=self.policy)(x)
        return jax.vmap(self.head)(jax.vmap(self.ln_f)(x))


def make(policy=None, **overrides):
    """``(train_step, (params, opt_state, tokens))``; ``params`` are the model's arrays."""
    cfg = {**DEFAULTS, **overrides}
    model = Transformer(cfg, key=jax.random.key(0), policy=policy)
    params, static = eqx.partition(model, eqx.is_array)
    optim = optax.adamw(cfg["lr"])
    opt_state = optim.init(params)

    def loss_fn(model, tokens):
        logits = jax.vmap(model)(tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    def train_step(params, opt_state, tokens):
        model = eqx.combine(params, static)
        loss, grads = eqx.filter_value_and_grad(loss_fn)(model, tokens)
        updates, opt_state = optim.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        model = eqx.apply_updates(model, updates)
        return eqx.filter(model, eqx.is_array), opt_state, loss

    tokens = jax.random.randint(jax.random.key(1), (cfg["batch"], cfg["seq"] + 1), 0, cfg["vocab"])
    return train_step, (params, opt_state, tokens)


def make_with_policy(policy, **overrides):
    return make(policy=policy, **overrides)
