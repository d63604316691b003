"""Four tiny decoders, each with one control-flow construct inside its checkpointed layer.

``make(kind=...)``, ``kind`` one of:

- ``"cond"``: ``lax.cond`` on the layer index (scanned as ``xs``): even layers run an
  attention sub-block, odd layers a GELU MLP (an alternating local/global-style stack).
- ``"switch"``: ``lax.switch`` over three MLP variants (GELU, SwiGLU, ReLU^2) by layer index.
- ``"fori_loop"``: ``lax.fori_loop`` with static bounds: ``n_inner`` weight-shared refinement
  steps ``h = h + tanh(h @ w)`` (a looped / universal-transformer block); JAX lowers it to a
  ``scan``, so it is reverse-differentiable.
- ``"while_loop"``: ``lax.while_loop`` finding a power-of-two scale for the MLP input
  (``max|h| / 2**e < 1``, as dynamic-range scaling does) on ``stop_gradient`` values; the
  gradient flows through ``h / scale`` with the scale held constant (a while loop has no
  reverse-mode derivative of its own).

Every variant: pre-RMSNorm layers, ``jax.checkpoint`` per layer under ``lax.scan``, optax
AdamW, no ``checkpoint_name``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

KINDS = ("cond", "switch", "fori_loop", "while_loop")
DEFAULTS = dict(
    vocab=128,
    d_model=64,
    n_heads=4,
    d_ff=256,
    n_layers=4,
    seq=64,
    batch=4,
    lr=3e-4,
    n_inner=3,
    kind="cond",
)


def init_params(key, cfg):
    d, f, L, v = cfg["d_model"], cfg["d_ff"], cfg["n_layers"], cfg["vocab"]
    ks = jax.random.split(key, 8)
    n = lambda k, shape, fan_in: jax.random.normal(k, shape) / jnp.sqrt(fan_in)  # noqa: E731
    layers = dict(
        ln=jnp.ones((L, d)),
        wqkv=n(ks[0], (L, d, 3 * d), d),
        wo=n(ks[1], (L, d, d), d),
        w1=n(ks[2], (L, d, f), d),
        w_gate=n(ks[3], (L, d, f), d),
        w2=n(ks[4], (L, f, d), f),
        w_loop=n(ks[5], (L, d, d), d) * 0.5,
    )
    return dict(
        embed=0.02 * jax.random.normal(ks[6], (v, d)),
        layers=layers,
        ln_f=jnp.ones(d),
        head=n(ks[7], (d, v), d),
    )


def rms_norm(x, scale, eps=1e-6):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * scale


def attention(h, p, n_heads):
    b, t, d = h.shape
    q, k, v = jnp.split(h @ p["wqkv"], 3, axis=-1)
    heads = lambda a: a.reshape(b, t, n_heads, d // n_heads)  # noqa: E731
    s = jnp.einsum("bqhd,bkhd->bhqk", heads(q), heads(k)) / jnp.sqrt(d // n_heads)
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e9)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), heads(v)).reshape(b, t, d) @ p["wo"]


def gelu_mlp(h, p):
    return jax.nn.gelu(h @ p["w1"]) @ p["w2"]


def swiglu_mlp(h, p):
    return (jax.nn.silu(h @ p["w_gate"]) * (h @ p["w1"])) @ p["w2"]


def relu2_mlp(h, p):
    return jnp.square(jax.nn.relu(h @ p["w1"])) @ p["w2"]


def make_layer(cfg):
    kind, n_heads, n_inner = cfg["kind"], cfg["n_heads"], cfg["n_inner"]

    def layer(x, inputs):
        p, i = inputs
        h = rms_norm(x, p["ln"])
        if kind == "cond":
            y = jax.lax.cond(
                i % 2 == 0, lambda h: attention(h, p, n_heads), lambda h: gelu_mlp(h, p), h
            )
        elif kind == "switch":
            y = jax.lax.switch(
                i % 3,
                [lambda h: gelu_mlp(h, p), lambda h: swiglu_mlp(h, p), lambda h: relu2_mlp(h, p)],
                h,
            )
        elif kind == "fori_loop":
            h = jax.lax.fori_loop(0, n_inner, lambda _, h: h + jnp.tanh(h @ p["w_loop"]), h)
            y = gelu_mlp(h, p)
        elif kind == "while_loop":
            amax = jax.lax.stop_gradient(jnp.max(jnp.abs(h)))

            def cond(e):
                return amax / jnp.exp2(e) >= 1.0

            e = jax.lax.while_loop(cond, lambda e: e + 1.0, jnp.zeros((), h.dtype))
            scale = jnp.exp2(e)
            y = gelu_mlp(h / scale, p) * scale
        else:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        return x + y, None

    return layer


def make(policy=None, **overrides):
    """``(train_step, (params, opt_state, tokens))``; the step returns ``(params, opt_state, loss)``."""
    cfg = {**DEFAULTS, **overrides}
    params = init_params(jax.random.key(0), cfg)
    opt = optax.adamw(cfg["lr"])
    opt_state = opt.init(params)
    layer = jax.checkpoint(make_layer(cfg), policy=policy)

    def loss_fn(params, tokens):
        x = params["embed"][tokens[:, :-1]]
        x, _ = jax.lax.scan(layer, x, (params["layers"], jnp.arange(cfg["n_layers"])))
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
