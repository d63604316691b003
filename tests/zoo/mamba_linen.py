"""A Mamba-style selective state-space language model in Flax linen, blocks in a Python loop.

Written as the Mamba paper (Gu & Dao, 2023, "Mamba: Linear-Time Sequence Modeling with
Selective State Spaces") and its JAX ports lay out a block: an input projection to two
streams of ``expand * d_model`` channels; on the first, a short causal depthwise convolution
(``nn.Conv`` with ``feature_group_count`` = channels and left padding), SiLU, and the selective
SSM, whose step size ``dt`` and projections ``B`` and ``C`` are computed from the input
(``x_proj``, a low-rank ``dt_proj``, softplus), with ``A = -exp(A_log)`` discretized per
token (``exp(dt * A)``, ``dt * B * x``) and the recurrence ``h_t = dA_t * h_{t-1} + dBx_t`` run
as a parallel prefix scan (``jax.lax.associative_scan``); the output ``C . h + D * x``, gated by
SiLU of the second stream, and an output projection. Each layer is ``x + Mamba(RMSNorm(x))``,
built by ``nn.remat(ResidualBlock, policy=...)`` and called in a Python loop (one module per
layer, ``layers_0`` ...); tied embeddings, a final ``nn.RMSNorm``; training state is
``flax.training.train_state.TrainState`` with optax AdamW.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training import train_state

DEFAULTS = dict(
    vocab=256, d_model=64, n_layers=4, d_state=8, d_conv=4, expand=2, seq=64, batch=4, lr=3e-4
)


def selective_scan(dA, dBx):
    """``h_t = dA_t * h_{t-1} + dBx_t`` along axis 1 (time), ``h_{-1} = 0``, as a prefix scan.

    The combine of two steps ``(a1, b1)`` then ``(a2, b2)`` is ``(a1 * a2, a2 * b1 + b2)``:
    associative, so ``lax.associative_scan`` evaluates it in ``O(log L)`` depth."""

    def combine(left, right):
        a1, b1 = left
        a2, b2 = right
        return a1 * a2, a2 * b1 + b2

    _, h = jax.lax.associative_scan(combine, (dA, dBx), axis=1)
    return h


def dt_bias_init(key, shape, dtype=jnp.float32, dt_min=1e-3, dt_max=1e-1):
    """Mamba's ``dt_proj`` bias: softplus of it is log-uniform in ``[dt_min, dt_max]``."""
    u = jax.random.uniform(key, shape, dtype)
    dt = jnp.exp(u * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
    return dt + jnp.log(-jnp.expm1(-dt))  # the inverse of softplus


class MambaMixer(nn.Module):
    d_model: int
    d_state: int
    d_conv: int
    expand: int

    @nn.compact
    def __call__(self, x):
        d_inner = self.expand * self.d_model
        dt_rank = math.ceil(self.d_model / 16)
        xz = nn.Dense(2 * d_inner, use_bias=False, name="in_proj")(x)
        x, z = jnp.split(xz, 2, axis=-1)
        x = nn.Conv(
            d_inner,
            kernel_size=(self.d_conv,),
            feature_group_count=d_inner,
            padding=((self.d_conv - 1, 0),),  # causal: token t sees t - d_conv + 1 .. t
            name="conv1d",
        )(x)
        x = nn.silu(x)

        # Input-dependent (selective) SSM parameters.
        x_dbl = nn.Dense(dt_rank + 2 * self.d_state, use_bias=False, name="x_proj")(x)
        dt, B, C = jnp.split(x_dbl, [dt_rank, dt_rank + self.d_state], axis=-1)
        dt = nn.softplus(nn.Dense(d_inner, bias_init=dt_bias_init, name="dt_proj")(dt))
        A_log = self.param(
            "A_log",
            lambda _, shape: jnp.log(
                jnp.broadcast_to(jnp.arange(1, shape[1] + 1, dtype=jnp.float32), shape)
            ),
            (d_inner, self.d_state),
        )
        D = self.param("D", nn.initializers.ones, (d_inner,))
        A = -jnp.exp(A_log)  # (d_inner, d_state)

        # Zero-order-hold discretization of A, Euler of B, per token.
        dA = jnp.exp(dt[..., None] * A)  # (b, l, d_inner, d_state)
        dBx = dt[..., None] * B[:, :, None, :] * x[..., None]
        h = selective_scan(dA, dBx)
        y = jnp.einsum("bldn,bln->bld", h, C) + D * x
        y = y * nn.silu(z)
        return nn.Dense(self.d_model, use_bias=False, name="out_proj")(y)


class ResidualBlock(nn.Module):
    d_model: int
    d_state: int
    d_conv: int
    expand: int

    @nn.compact
    def __call__(self, x):
        h = nn.RMSNorm(name="norm")(x)
        return x + MambaMixer(self.d_model, self.d_state, self.d_conv, self.expand, name="mixer")(h)


class MambaLM(nn.Module):
    vocab: int
    d_model: int
    n_layers: int
    d_state: int
    d_conv: int
    expand: int
    remat_policy: object = None

    @nn.compact
    def __call__(self, tokens):
        embed = nn.Embed(self.vocab, self.d_model, name="embedding")
        x = embed(tokens)
        RematBlock = nn.remat(ResidualBlock, policy=self.remat_policy)
        for i in range(self.n_layers):
            x = RematBlock(
                self.d_model, self.d_state, self.d_conv, self.expand, name=f"layers_{i}"
            )(x)
        x = nn.RMSNorm(name="norm_f")(x)
        return embed.attend(x)


def make(policy=None, **overrides):
    """``(train_step, (state, tokens))``; the step returns ``(state, loss)``."""
    cfg = {**DEFAULTS, **overrides}
    model = MambaLM(
        cfg["vocab"],
        cfg["d_model"],
        cfg["n_layers"],
        cfg["d_state"],
        cfg["d_conv"],
        cfg["expand"],
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
