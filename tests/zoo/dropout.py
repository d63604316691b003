"""A decoder with dropout inside the checkpointed layer, drawn from typed PRNG keys.

The train state carries a new-style key (``jax.random.key``, dtype ``key<fry>``); each step
splits it into the next state key and a step key, the step key is split into one key per
layer, and the per-layer keys are scanned over with the weights. Inside the
``jax.checkpoint``-ed layer the key is split again for the attention-probability, attention-
output and MLP dropouts (``jax.random.bernoulli``). A rematerialized layer redraws the same
masks from the same key, so remat is exact; the masks themselves are candidates a policy may
keep (bool tensors) or recompute.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

DEFAULTS = dict(
    vocab=256, d_model=64, n_heads=4, d_ff=256, n_layers=4, seq=128, batch=4, lr=3e-4, rate=0.1
)


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


def dropout(key, x, rate):
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def make_layer(n_heads, rate):
    def layer(x, inputs):
        p, key = inputs
        k_att, k_out, k_mlp = jax.random.split(key, 3)
        b, t, d = x.shape
        h = rms_norm(x, p["ln1"])
        q, k, v = jnp.split(h @ p["wqkv"], 3, axis=-1)
        heads = lambda a: a.reshape(b, t, n_heads, d // n_heads)  # noqa: E731
        s = jnp.einsum("bqhd,bkhd->bhqk", heads(q), heads(k)) / jnp.sqrt(d // n_heads)
        s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e9)
        probs = dropout(k_att, jax.nn.softmax(s, -1), rate)
        a = jnp.einsum("bhqk,bkhd->bqhd", probs, heads(v)).reshape(b, t, d)
        x = x + dropout(k_out, a @ p["wo"], rate)
        h = jax.nn.gelu(rms_norm(x, p["ln2"]) @ p["w1"])
        return x + dropout(k_mlp, h @ p["w2"], rate), None

    return layer


def make(policy=None, **overrides):
    """``(train_step, (state, tokens))`` with ``state = {"params", "opt_state", "key"}``."""
    cfg = {**DEFAULTS, **overrides}
    params = init_params(jax.random.key(0), cfg)
    opt = optax.adamw(cfg["lr"])
    state = dict(params=params, opt_state=opt.init(params), key=jax.random.key(1234))
    layer = jax.checkpoint(make_layer(cfg["n_heads"], cfg["rate"]), policy=policy)

    def loss_fn(params, tokens, key):
        x = params["embed"][tokens[:, :-1]]
        layer_keys = jax.random.split(key, cfg["n_layers"])
        x, _ = jax.lax.scan(layer, x, (params["layers"], layer_keys))
        logits = rms_norm(x, params["ln_f"]) @ params["head"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    def train_step(state, tokens):
        key, step_key = jax.random.split(state["key"])
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], tokens, step_key)
        updates, opt_state = opt.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        return dict(params=params, opt_state=opt_state, key=key), loss

    tokens = jax.random.randint(jax.random.key(1), (cfg["batch"], cfg["seq"] + 1), 0, cfg["vocab"])
    return train_step, (state, tokens)


def make_with_policy(policy, **overrides):
    return make(policy=policy, **overrides)
