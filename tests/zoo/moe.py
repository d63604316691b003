"""A small mixture-of-experts decoder: top-k router, experts by ``ragged_dot`` or dense einsum.

Each layer is pre-norm causal attention plus an MoE MLP: a linear router, ``lax.top_k``
choosing ``top_k`` of ``n_experts`` experts per token (softmax over the chosen logits), and
SwiGLU experts. ``dispatch="ragged"`` (default) sorts the token copies by expert and runs
the experts with ``jax.lax.ragged_dot`` over the group sizes (the dropless MegaBlocks /
MaxText ``sparse_matmul`` pattern); ``dispatch="dense"`` runs every expert on every token
with ``einsum`` and combines with the (mostly zero) gate matrix. A Switch-style
load-balancing loss is added. The layer is ``jax.checkpoint``-ed under ``lax.scan``; no
``checkpoint_name``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

DEFAULTS = dict(
    vocab=256,
    d_model=64,
    n_heads=4,
    d_ff=128,
    n_experts=8,
    top_k=2,
    n_layers=3,
    seq=64,
    batch=4,
    lr=3e-4,
    aux_weight=1e-2,
    dispatch="ragged",
)


def init_params(key, cfg):
    d, f, L, E, v = cfg["d_model"], cfg["d_ff"], cfg["n_layers"], cfg["n_experts"], cfg["vocab"]
    ks = jax.random.split(key, 9)
    n = lambda k, shape, fan_in: jax.random.normal(k, shape) / jnp.sqrt(fan_in)  # noqa: E731
    layers = dict(
        ln1=jnp.ones((L, d)),
        wqkv=n(ks[0], (L, d, 3 * d), d),
        wo=n(ks[1], (L, d, d), d),
        ln2=jnp.ones((L, d)),
        router=n(ks[2], (L, d, E), d),
        wi_0=n(ks[3], (L, E, d, f), d),
        wi_1=n(ks[4], (L, E, d, f), d),
        wo_mlp=n(ks[5], (L, E, f, d), f),
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


def moe_ragged(h, p, top_k, weights, experts):
    """Dropless MoE: sort the ``tokens * top_k`` copies by expert, one ragged matmul per weight."""
    tokens, d = h.shape
    n_experts = p["wi_0"].shape[0]
    flat = experts.reshape(-1)
    order = jnp.argsort(flat)
    x = h[order // top_k]
    group_sizes = jnp.bincount(flat, length=n_experts).astype(jnp.int32)
    g = jax.lax.ragged_dot(x, p["wi_0"], group_sizes)
    u = jax.lax.ragged_dot(x, p["wi_1"], group_sizes)
    y = jax.lax.ragged_dot(jax.nn.silu(g) * u, p["wo_mlp"], group_sizes)
    y = jnp.zeros_like(y).at[order].set(y).reshape(tokens, top_k, d)
    return jnp.einsum("tkd,tk->td", y, weights)


def moe_dense(h, p, top_k, weights, experts):
    """Every expert on every token, combined by the sparse gate matrix."""
    n_experts = p["wi_0"].shape[0]
    gates = jnp.einsum("tk,tke->te", weights, jax.nn.one_hot(experts, n_experts))
    g = jnp.einsum("td,edf->tef", h, p["wi_0"])
    u = jnp.einsum("td,edf->tef", h, p["wi_1"])
    y = jnp.einsum("tef,efd->ted", jax.nn.silu(g) * u, p["wo_mlp"])
    return jnp.einsum("ted,te->td", y, gates)


def make_layer(cfg):
    moe = moe_ragged if cfg["dispatch"] == "ragged" else moe_dense
    top_k, n_experts = cfg["top_k"], cfg["n_experts"]

    def layer(x, p):
        b, t, d = x.shape
        x = x + attention(rms_norm(x, p["ln1"]), p, cfg["n_heads"])
        h = rms_norm(x, p["ln2"]).reshape(b * t, d)
        logits = h @ p["router"]
        top_logits, experts = jax.lax.top_k(logits, top_k)
        weights = jax.nn.softmax(top_logits, axis=-1)
        # Switch-Transformer load-balancing loss: fraction routed x mean router probability.
        frac = jnp.mean(jax.nn.one_hot(experts, n_experts).sum(1), axis=0) / top_k
        aux = n_experts * jnp.sum(frac * jnp.mean(jax.nn.softmax(logits, -1), axis=0))
        return x + moe(h, p, top_k, weights, experts).reshape(b, t, d), aux

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
        x, aux = jax.lax.scan(layer, x, params["layers"])
        logits = rms_norm(x, params["ln_f"]) @ params["head"]
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()
        return ce + cfg["aux_weight"] * aux.mean()

    def train_step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    tokens = jax.random.randint(jax.random.key(1), (cfg["batch"], cfg["seq"] + 1), 0, cfg["vocab"])
    return train_step, (params, opt_state, tokens)


def make_with_policy(policy, **overrides):
    return make(policy=policy, **overrides)
