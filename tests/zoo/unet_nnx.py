"""A DDPM U-Net denoiser in Flax NNX, each block through ``nnx.remat``.

The layout of Ho et al. (2020, "Denoising Diffusion Probabilistic Models") as the common
JAX/Flax ports write it, at a small size: a sinusoidal time embedding through a two-layer MLP;
``conv_in``; per resolution level ``ResBlock``s (GroupNorm, SiLU, 3x3 conv, the time embedding
projected and added per channel, GroupNorm, SiLU, 3x3 conv, a 1x1 conv on the shortcut where
the channels change) whose outputs are kept as skips, and a strided 3x3 conv to downsample;
two middle ``ResBlock``s; on the way up each ``ResBlock`` takes its level's skip concatenated
on the channels, with nearest-neighbour upsampling (``jax.image.resize``) and a 3x3 conv
between levels; GroupNorm, SiLU and ``conv_out`` back to the image's channels. No attention
blocks (the small DDPM configurations without them). Every ``ResBlock`` is called through
``nnx.remat(..., policy=...)``.

The train step is DDPM's: ``t`` uniform over the ``T`` steps of a linear beta schedule,
``x_t = sqrt(abar_t) x_0 + sqrt(1 - abar_t) eps``, and the MSE between the predicted and the
true noise; the key comes with the batch (split by the training loop outside the step).
Training uses ``nnx.Optimizer(model, optax.adam(...), wrt=nnx.Param)`` and
``nnx.value_and_grad``, functionalized with ``nnx.split`` / ``nnx.merge`` as in the NNX
performance guide, so the step is a plain function of ``nnx.State``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import optax
from flax import nnx

DEFAULTS = dict(
    image=32,
    channels=3,
    base=32,
    mults=(1, 2, 2),
    groups=8,
    timesteps=1000,
    batch=8,
    lr=2e-4,
)


def timestep_embedding(t, dim, max_period=10_000):
    """Sinusoidal embedding of integer timesteps ``t`` (b,) -> (b, dim)."""
    half = dim // 2
    freqs = jnp.exp(-math.log(max_period) * jnp.arange(half, dtype=jnp.float32) / half)
    args = t.astype(jnp.float32)[:, None] * freqs[None]
    return jnp.concatenate([jnp.cos(args), jnp.sin(args)], axis=-1)


class ResBlock(nnx.Module):
    def __init__(self, in_ch, out_ch, temb_dim, groups, *, rngs: nnx.Rngs):
        self.norm1 = nnx.GroupNorm(in_ch, num_groups=groups, rngs=rngs)
        self.conv1 = nnx.Conv(in_ch, out_ch, kernel_size=(3, 3), rngs=rngs)
        self.temb_proj = nnx.Linear(temb_dim, out_ch, rngs=rngs)
        self.norm2 = nnx.GroupNorm(out_ch, num_groups=groups, rngs=rngs)
        self.conv2 = nnx.Conv(out_ch, out_ch, kernel_size=(3, 3), rngs=rngs)
        self.shortcut = (
            nnx.Conv(in_ch, out_ch, kernel_size=(1, 1), rngs=rngs) if in_ch != out_ch else None
        )

    def __call__(self, x, temb):
        h = self.conv1(nnx.silu(self.norm1(x)))
        h = h + self.temb_proj(nnx.silu(temb))[:, None, None, :]
        h = self.conv2(nnx.silu(self.norm2(h)))
        skip = x if self.shortcut is None else self.shortcut(x)
        return skip + h


class Downsample(nnx.Module):
    def __init__(self, ch, *, rngs: nnx.Rngs):
        self.conv = nnx.Conv(ch, ch, kernel_size=(3, 3), strides=(2, 2), rngs=rngs)

    def __call__(self, x):
        return self.conv(x)


class Upsample(nnx.Module):
    def __init__(self, ch, *, rngs: nnx.Rngs):
        self.conv = nnx.Conv(ch, ch, kernel_size=(3, 3), rngs=rngs)

    def __call__(self, x):
        b, h, w, c = x.shape
        return self.conv(jax.image.resize(x, (b, 2 * h, 2 * w, c), method="nearest"))


class UNet(nnx.Module):
    def __init__(self, cfg, *, rngs: nnx.Rngs, policy=None):
        base, groups, mults = cfg["base"], cfg["groups"], cfg["mults"]
        temb_dim = 4 * base
        self.policy = policy
        self.base = base
        self.temb1 = nnx.Linear(base, temb_dim, rngs=rngs)
        self.temb2 = nnx.Linear(temb_dim, temb_dim, rngs=rngs)
        self.conv_in = nnx.Conv(cfg["channels"], base, kernel_size=(3, 3), rngs=rngs)

        chans = [base * m for m in mults]
        down, downsample = [], []
        skip_chans = []
        ch = base
        for i, out_ch in enumerate(chans):
            down.append(ResBlock(ch, out_ch, temb_dim, groups, rngs=rngs))
            ch = out_ch
            skip_chans.append(ch)
            if i < len(chans) - 1:
                downsample.append(Downsample(ch, rngs=rngs))
        self.down = nnx.List(down)
        self.downsample = nnx.List(downsample)
        self.mid1 = ResBlock(ch, ch, temb_dim, groups, rngs=rngs)
        self.mid2 = ResBlock(ch, ch, temb_dim, groups, rngs=rngs)
        up, upsample = [], []
        for i, out_ch in reversed(list(enumerate(chans))):
            up.append(ResBlock(ch + skip_chans.pop(), out_ch, temb_dim, groups, rngs=rngs))
            ch = out_ch
            if i > 0:
                upsample.append(Upsample(ch, rngs=rngs))
        self.up = nnx.List(up)
        self.upsample = nnx.List(upsample)
        self.norm_out = nnx.GroupNorm(ch, num_groups=groups, rngs=rngs)
        self.conv_out = nnx.Conv(ch, cfg["channels"], kernel_size=(3, 3), rngs=rngs)

    def block(self, block, x, temb):
        return nnx.remat(lambda block, x, temb: block(x, temb), policy=self.policy)(block, x, temb)

    def __call__(self, x, t):
        temb = timestep_embedding(t, self.base)
        temb = self.temb2(nnx.silu(self.temb1(temb)))
        h = self.conv_in(x)
        skips = []
        for i, block in enumerate(self.down):
            h = self.block(block, h, temb)
            skips.append(h)
            if i < len(self.downsample):
                h = self.downsample[i](h)
        h = self.block(self.mid1, h, temb)
        h = self.block(self.mid2, h, temb)
        for i, block in enumerate(self.up):
            h = self.block(block, jnp.concatenate([h, skips.pop()], axis=-1), temb)
            if i < len(self.upsample):
                h = self.upsample[i](h)
        return self.conv_out(nnx.silu(self.norm_out(h)))


def make(policy=None, **overrides):
    """``(train_step, (state, images, key))``: ``state`` is the ``nnx.State`` of (model,
    optimizer); the step returns ``(state, loss)``."""
    cfg = {**DEFAULTS, **overrides}
    model = UNet(cfg, rngs=nnx.Rngs(0), policy=policy)
    optimizer = nnx.Optimizer(model, optax.adam(cfg["lr"]), wrt=nnx.Param)
    graphdef, state = nnx.split((model, optimizer))

    betas = jnp.linspace(1e-4, 0.02, cfg["timesteps"], dtype=jnp.float32)
    alphas_cumprod = jnp.cumprod(1.0 - betas)

    def loss_fn(model, images, key):
        t_key, noise_key = jax.random.split(key)
        t = jax.random.randint(t_key, (images.shape[0],), 0, cfg["timesteps"])
        noise = jax.random.normal(noise_key, images.shape, images.dtype)
        abar = alphas_cumprod[t][:, None, None, None]
        x_t = jnp.sqrt(abar) * images + jnp.sqrt(1.0 - abar) * noise
        return jnp.mean((model(x_t, t) - noise) ** 2)

    def train_step(state, images, key):
        model, optimizer = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(loss_fn)(model, images, key)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), loss

    shape = (cfg["batch"], cfg["image"], cfg["image"], cfg["channels"])
    images = jax.random.uniform(jax.random.key(1), shape, minval=-1.0, maxval=1.0)
    return train_step, (state, images, jax.random.key(2))


def make_with_policy(policy, **overrides):
    return make(policy=policy, **overrides)
