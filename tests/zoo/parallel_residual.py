"""GPT-J / PaLM-style parallel-residual decoder in plain JAX under ``lax.scan``.

Each layer normalizes once and feeds the same ``h`` to attention and to the MLP:
``x + attn(h) + mlp(h)`` (GPT-J, PaLM). Rotary position embeddings on q/k (GPT-J), no biases,
a SwiGLU MLP (PaLM), an untied output head. The layer is ``jax.checkpoint``-ed and scanned
over stacked weights; some tensors carry MaxText's ``checkpoint_name`` names
(``decoder_layer_input``, ``query_proj``, ``key_proj``, ``value_proj``, ``out_proj``,
``mlpwi_0``, ``mlpwi_1``, ``mlpwo``); the attention scores, softmax and norm are unnamed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax.ad_checkpoint import checkpoint_name

DEFAULTS = dict(vocab=256, d_model=64, n_heads=4, d_ff=256, n_layers=4, seq=128, batch=4, lr=3e-4)


def init_params(key, cfg):
    d, f, L, v = cfg["d_model"], cfg["d_ff"], cfg["n_layers"], cfg["vocab"]
    ks = jax.random.split(key, 8)
    n = lambda k, shape, fan_in: jax.random.normal(k, shape) / jnp.sqrt(fan_in)  # noqa: E731
    layers = dict(
        norm=jnp.ones((L, d)),
        wq=n(ks[0], (L, d, d), d),
        wk=n(ks[1], (L, d, d), d),
        wv=n(ks[2], (L, d, d), d),
        wo=n(ks[3], (L, d, d), d),
        wi_0=n(ks[4], (L, d, f), d),
        wi_1=n(ks[5], (L, d, f), d),
        wo_mlp=n(ks[6], (L, f, d), f),
    )
    return dict(
        embed=jax.random.normal(ks[7], (v, d)) * 0.02,
        layers=layers,
        final_norm=jnp.ones(d),
        head=n(jax.random.key(99), (d, v), d),
    )


def rms_norm(x, scale, eps=1e-6):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * scale


def rope(x, positions):
    """Rotary embedding on ``x`` ``[b, t, heads, dh]`` (rotate-half form)."""
    dh = x.shape[-1]
    freq = 1.0 / (10_000 ** (jnp.arange(0, dh, 2) / dh))
    ang = positions[:, None] * freq[None, :]
    sin, cos = jnp.sin(ang)[None, :, None, :], jnp.cos(ang)[None, :, None, :]
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def make_layer(n_heads):
    def layer(x, p):
        b, t, d = x.shape
        x = checkpoint_name(x, "decoder_layer_input")
        h = rms_norm(x, p["norm"])
        heads = lambda a: a.reshape(b, t, n_heads, d // n_heads)  # noqa: E731
        q = checkpoint_name(heads(h @ p["wq"]), "query_proj")
        k = checkpoint_name(heads(h @ p["wk"]), "key_proj")
        v = checkpoint_name(heads(h @ p["wv"]), "value_proj")
        pos = jnp.arange(t, dtype=jnp.float32)
        q, k = rope(q, pos), rope(k, pos)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(d // n_heads)
        s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, jnp.finfo(s.dtype).min)
        a = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v).reshape(b, t, d)
        attn = checkpoint_name(a @ p["wo"], "out_proj")
        g = checkpoint_name(h @ p["wi_0"], "mlpwi_0")
        u = checkpoint_name(h @ p["wi_1"], "mlpwi_1")
        mlp = checkpoint_name((jax.nn.silu(g) * u) @ p["wo_mlp"], "mlpwo")
        return x + attn + mlp, None

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
        logits = rms_norm(x, params["final_norm"]) @ params["head"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    def train_step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    tokens = jax.random.randint(jax.random.key(1), (cfg["batch"], cfg["seq"] + 1), 0, cfg["vocab"])
    return train_step, (params, opt_state, tokens)


def make_with_policy(policy, **overrides):
    return make(policy=policy, **overrides)
