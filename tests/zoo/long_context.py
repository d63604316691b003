"""A plain-JAX decoder with a long sequence for its width: attention scores dominate.

Sequence 2048 against ``d_model`` 64 and batch 1: each layer's ``[batch, heads, seq, seq]``
score and probability tensors (32 MB each in f32 with 2 heads) dwarf its ``[seq, d_model]``
activations (0.5 MB). Plain causal attention written out (no flash
kernel), pre-RMSNorm, GELU MLP, ``jax.checkpoint`` per layer under ``lax.scan``, no names.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

DEFAULTS = dict(vocab=128, d_model=64, n_heads=2, d_ff=128, n_layers=2, seq=2048, batch=1, lr=3e-4)


def init_params(key, cfg):
    d, f, L, v = cfg["d_model"], cfg["d_ff"], cfg["n_layers"], cfg["vocab"]
    ks = jax.random.split(key, 6)
    n = lambda k, shape, fan_in: jax.random.normal(k, shape) / jnp.sqrt(fan_in)  # noqa: E731
    layers = dict(
        ln1=jnp.ones((L, d)),
        wqkv=n(ks[0], (L, d, 3 * d), d),
        wo=n(ks[1], (L, d, d), d),
        ln2=jnp.ones((L, d)),
        w1=n(ks[2], (L, d, f), d),
        w2=n(ks[3], (L, f, d), f),
    )
    return dict(
        embed=0.02 * jax.random.normal(ks[4], (v, d)),
        layers=layers,
        ln_f=jnp.ones(d),
        head=n(ks[5], (d, v), d),
    )


def rms_norm(x, scale, eps=1e-6):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * scale


def make_layer(n_heads):
    def layer(x, p):
        b, t, d = x.shape
        h = rms_norm(x, p["ln1"])
        q, k, v = jnp.split(h @ p["wqkv"], 3, axis=-1)
        heads = lambda a: a.reshape(b, t, n_heads, d // n_heads)  # noqa: E731
        s = jnp.einsum("bqhd,bkhd->bhqk", heads(q), heads(k)) / jnp.sqrt(d // n_heads)
        s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e9)
        a = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), heads(v)).reshape(b, t, d)
        x = x + a @ p["wo"]
        return x + jax.nn.gelu(rms_norm(x, p["ln2"]) @ p["w1"]) @ p["w2"], None

    return layer


def make(policy=None, **overrides):
    """``(train_step, (params, opt_state, tokens))``; the step returns ``(params, opt_state, loss)``."""
    cfg = {**DEFAULTS, **overrides}
    params = init_params(jax.random.key(0), cfg)
    opt = optax.adamw(cfg["lr"])
    opt_state = opt.init(params)
    layer = jax.checkpoint(make_layer(cfg["n_heads"]), policy=policy)

    def loss_fn(params, tokens):
        x = params["embed"][tokens[:, :-1]]
        x, _ = jax.lax.scan(layer, x, params["layers"])
        logits = rms_norm(x, params["ln_f"]) @ params["head"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    def train_step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    tokens = jax.random.randint(jax.random.key(1), (cfg["batch"], cfg["seq"] + 1), 0, cfg["vocab"])
    return train_step, (params, opt_state, tokens)


def make_with_policy(policy, **overrides):
    return make(policy=policy, **overrides)
