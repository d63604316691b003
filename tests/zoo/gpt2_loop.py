"""GPT-2-style decoder in plain JAX: a Python loop over one ``jax.checkpoint(layer)``.

Written the way a plain-JAX user writes GPT-2: parameters are a dict of arrays, learned
positional embeddings, pre-LayerNorm, causal multi-head attention, a GELU MLP, tied input /
output embeddings, optax AdamW. There is no ``checkpoint_name`` anywhere: a policy can only
tell the tensors apart by primitive and shape. The layers are unrolled (a Python ``for``), so
the one ``jax.checkpoint`` call site is traced once per layer.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

DEFAULTS = dict(vocab=256, d_model=64, n_heads=4, n_layers=3, seq=64, batch=4, lr=3e-4)


def init_params(key, cfg):
    d, v = cfg["d_model"], cfg["vocab"]
    keys = iter(jax.random.split(key, 4 + 4 * cfg["n_layers"]))
    normal = lambda shape, std=0.02: std * jax.random.normal(next(keys), shape)  # noqa: E731
    layers = []
    for _ in range(cfg["n_layers"]):
        layers.append(
            dict(
                ln1_g=jnp.ones(d),
                ln1_b=jnp.zeros(d),
                w_qkv=normal((d, 3 * d)),
                b_qkv=jnp.zeros(3 * d),
                w_o=normal((d, d)),
                b_o=jnp.zeros(d),
                ln2_g=jnp.ones(d),
                ln2_b=jnp.zeros(d),
                w_fc=normal((d, 4 * d)),
                b_fc=jnp.zeros(4 * d),
                w_proj=normal((4 * d, d)),
                b_proj=jnp.zeros(d),
            )
        )
    return dict(
        wte=normal((v, d)),
        wpe=normal((cfg["seq"], d), 0.01),
        layers=layers,
        lnf_g=jnp.ones(d),
        lnf_b=jnp.zeros(d),
    )


def layer_norm(x, g, b, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * g + b


def make_layer(n_heads):
    def layer(p, x):
        b, t, d = x.shape
        h = layer_norm(x, p["ln1_g"], p["ln1_b"])
        q, k, v = jnp.split(h @ p["w_qkv"] + p["b_qkv"], 3, axis=-1)
        split = lambda a: a.reshape(b, t, n_heads, d // n_heads).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = split(q), split(k), split(v)
        att = (q @ k.transpose(0, 1, 3, 2)) / jnp.sqrt(d // n_heads)
        mask = jnp.tril(jnp.ones((t, t), dtype=bool))
        att = jax.nn.softmax(jnp.where(mask, att, -1e9), axis=-1)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
        x = x + y @ p["w_o"] + p["b_o"]
        h = layer_norm(x, p["ln2_g"], p["ln2_b"])
        h = jax.nn.gelu(h @ p["w_fc"] + p["b_fc"])
        return x + h @ p["w_proj"] + p["b_proj"]

    return layer


def make(policy=None, **overrides):
    """``(train_step, (params, opt_state, tokens))``; the step returns ``(params, opt_state, loss)``."""
    cfg = {**DEFAULTS, **overrides}
    params = init_params(jax.random.key(0), cfg)
    opt = optax.adamw(cfg["lr"])
    opt_state = opt.init(params)
    layer = jax.checkpoint(make_layer(cfg["n_heads"]), policy=policy)

    def forward(params, tokens):
        t = tokens.shape[1]
        x = params["wte"][tokens] + params["wpe"][:t]
        for p in params["layers"]:
            x = layer(p, x)
        x = layer_norm(x, params["lnf_g"], params["lnf_b"])
        return x @ params["wte"].T  # tied embeddings

    def loss_fn(params, tokens):
        logits = forward(params, tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    def train_step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    tokens = jax.random.randint(jax.random.key(1), (cfg["batch"], cfg["seq"] + 1), 0, cfg["vocab"])
    return train_step, (params, opt_state, tokens)


def make_with_policy(policy, **overrides):
    return make(policy=policy, **overrides)
