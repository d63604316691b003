"""Gradient accumulation: ``jax.value_and_grad`` inside ``lax.scan`` over microbatches.

The way plain-JAX and optax users accumulate gradients (and MaxText's
``gradient_accumulation_steps``): the batch is split into microbatches, a ``lax.scan`` runs
the forward and backward pass of each and sums the gradients, then one optimizer update.
The model is tests/zoo/gpt2_loop.py's decoder (a Python loop over one ``jax.checkpoint``'ed
layer). Each microbatch's residuals live only within its scan trip: the planner must not
treat the scan as a layer scan that stacks them (2026-12-06, a new user's report: every
policy was predicted alike and the plan was the slowest that fits).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from tests.zoo import gpt2_loop

# layer_loop: "python" (a Python loop over the layers) or "scan" (the layers stacked, under a
# lax.scan nested in the accumulation scan).
DEFAULTS = dict(gpt2_loop.DEFAULTS, microbatches=4, layer_loop="python")


def make(policy=None, **overrides):
    """``(train_step, (params, opt_state, tokens))``; the step returns ``(params, opt_state, loss)``."""
    cfg = {**DEFAULTS, **overrides}
    n = cfg["microbatches"]
    params = gpt2_loop.init_params(jax.random.key(0), cfg)
    scanned = cfg["layer_loop"] == "scan"
    if scanned:
        params["layers"] = jax.tree.map(lambda *a: jnp.stack(a), *params["layers"])
    opt = optax.adamw(cfg["lr"])
    opt_state = opt.init(params)
    layer = jax.checkpoint(gpt2_loop.make_layer(cfg["n_heads"]), policy=policy)

    def loss_fn(params, tokens):
        t = tokens.shape[1] - 1
        x = params["wte"][tokens[:, :-1]] + params["wpe"][:t]
        if scanned:
            x, _ = jax.lax.scan(lambda x, p: (layer(p, x), None), x, params["layers"])
        else:
            for p in params["layers"]:
                x = layer(p, x)
        x = gpt2_loop.layer_norm(x, params["lnf_g"], params["lnf_b"])
        logits = x @ params["wte"].T
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    def train_step(params, opt_state, tokens):
        micro = tokens.reshape(n, tokens.shape[0] // n, tokens.shape[1])

        def accumulate(carry, mb):
            loss, grads = jax.value_and_grad(loss_fn)(params, mb)
            return jax.tree.map(jnp.add, carry, (loss, grads)), None

        zero = (jnp.zeros(()), jax.tree.map(jnp.zeros_like, params))
        (loss, grads), _ = jax.lax.scan(accumulate, zero, micro)
        grads = jax.tree.map(lambda g: g / n, grads)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss / n

    batch = cfg["batch"] * n
    tokens = jax.random.randint(jax.random.key(1), (batch, cfg["seq"] + 1), 0, cfg["vocab"])
    return train_step, (params, opt_state, tokens)


def make_with_policy(policy, **overrides):
    return make(policy=policy, **overrides)
