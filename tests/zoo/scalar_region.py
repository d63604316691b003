"""A checkpointed region whose activations are all scalars (f32[]): a learned scalar ODE.

A damped, driven oscillator ``x'' = -k x - c x' + a sin(w t)`` with four learnable scalar
parameters, integrated by a ``jax.checkpoint``-ed semi-implicit Euler step under
``lax.scan`` (the "checkpoint the solver step" pattern of differentiable simulation), fitted
to a target trajectory with optax Adam. Every value inside the region is a 0-d array, so
each candidate tensor is 4 bytes: the policies barely change the compiled memory (the
stacked per-step residuals are ``n_steps`` scalars each), which is the point of the fixture.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

DEFAULTS = dict(n_steps=64, dt=0.05, lr=1e-2)


def make_step(dt):
    def step(carry, t):
        params, x, v = carry
        accel = -params["k"] * x - params["c"] * v + params["a"] * jnp.sin(params["w"] * t)
        v = v + dt * accel
        x = x + dt * v
        energy = 0.5 * v * v + 0.5 * params["k"] * x * x
        return (params, x, v), (x, energy)

    return step


def make(policy=None, **overrides):
    """``(train_step, (params, opt_state, target))``; the step returns ``(params, opt_state, loss)``."""
    cfg = {**DEFAULTS, **overrides}
    params = dict(k=jnp.float32(1.5), c=jnp.float32(0.1), a=jnp.float32(0.3), w=jnp.float32(1.0))
    ts = jnp.arange(cfg["n_steps"], dtype=jnp.float32) * cfg["dt"]
    true = dict(k=jnp.float32(2.0), c=jnp.float32(0.3), a=jnp.float32(0.5), w=jnp.float32(1.3))
    x0, v0 = jnp.float32(1.0), jnp.float32(0.0)
    step = make_step(cfg["dt"])
    _, (target, _) = jax.lax.scan(step, (true, x0, v0), ts)
    opt = optax.adam(cfg["lr"])
    opt_state = opt.init(params)
    ckpt_step = jax.checkpoint(step, policy=policy)

    def loss_fn(params, target):
        _, (xs, energy) = jax.lax.scan(ckpt_step, (params, x0, v0), ts)
        return jnp.mean((xs - target) ** 2) + 1e-3 * jnp.mean(energy)

    def train_step(params, opt_state, target):
        loss, grads = jax.value_and_grad(loss_fn)(params, target)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step, (params, opt_state, target)


def make_with_policy(policy, **overrides):
    return make(policy=policy, **overrides)
