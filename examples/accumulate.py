"""Gradient accumulation over micro-batches around the checkpointed Llama example: the loop a
``planner.maximize_throughput(..., global_batch=G, microbatches=(1, 2, 4, 8))`` plan is for.

One optimizer step of a global batch of ``G`` examples runs ``n`` micro-batches of
``m = G / n`` examples through :func:`micro_step` under ``jax.lax.scan``, adding the
gradients into an accumulator, then applies one update with the mean gradient::

    for i in range(n):                       # lax.scan over the micro-batches
        acc, loss_i = micro_step(state, acc, micro_batch[i])
    state = update(state, acc / n)           # once per optimizer step

The planner plans :func:`micro_step` (``make_micro_step(m)``): its checkpoint regions, its
activations, and its arguments (the whole train state, the accumulator, one micro-batch), so
the compiled figure holds what the loop holds at any time. The predicted time of the
optimizer step is ``n x`` that of the micro step (the update's own time is left out of it).
The plan's policy goes where the model's ``jax.checkpoint`` is, as for any plan:
``make_accumulating_step(replace(cfg, remat_policy=plan.policy), n)``.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from examples.llama import LlamaConfig, forward, init_params, lm_loss

# A small configuration for the tests and the CLI example (CPU, seconds).
TINY = LlamaConfig(vocab=128, d_model=64, n_heads=2, n_kv_heads=1, d_ff=192, n_layers=2, seq=32)


def micro_step(cfg: LlamaConfig):
    """``micro_step(state, acc, micro_batch) -> (acc + grads, loss)``: one micro-batch's
    forward and backward, its gradient added into the accumulator ``acc`` (the shapes of the
    parameters). ``state = {"params", "momentum"}`` is passed whole, so the planned program
    holds the optimizer state as the loop does."""
    loss_of = lm_loss(functools.partial(forward, cfg))

    def step(state, acc, batch):
        loss, grads = jax.value_and_grad(loss_of)(state["params"], batch)
        return jax.tree.map(lambda a, g: a + g.astype(a.dtype), acc, grads), loss

    return step


def make_accumulating_step(cfg: LlamaConfig, n: int, *, lr: float = 1e-3, momentum: float = 0.9):
    """``train_step(state, batch) -> (state, loss)`` for a global batch of ``cfg.batch``
    examples in ``n`` micro-batches: :func:`micro_step` under ``lax.scan``, then one SGD
    with momentum update with the mean gradient (as ``examples.llama.sgd_momentum_step``
    does with the whole batch at once: the same numbers up to float rounding)."""
    if cfg.batch % n:
        raise ValueError(f"the global batch {cfg.batch} does not split into {n} micro-batches")
    one = micro_step(cfg)

    def train_step(state, batch):
        micro = jax.tree.map(lambda x: x.reshape(n, x.shape[0] // n, *x.shape[1:]), batch)
        acc0 = jax.tree.map(jnp.zeros_like, state["params"])

        def body(acc, mb):
            acc, loss = one(state, acc, mb)
            return acc, loss

        acc, losses = jax.lax.scan(body, acc0, micro)
        grads = jax.tree.map(lambda a: a / n, acc)
        mom = jax.tree.map(lambda m, g: momentum * m + g.astype(m.dtype), state["momentum"], grads)
        params = jax.tree.map(lambda p, m: (p - lr * m).astype(p.dtype), state["params"], mom)
        return {"params": params, "momentum": mom}, jnp.mean(losses)

    return train_step


def example_args(cfg: LlamaConfig, batch: int, *, concrete: bool = False):
    """``(state, batch)`` of ``batch`` examples for ``cfg`` (ShapeDtypeStructs unless
    ``concrete``)."""

    def make():
        params = init_params(cfg, jax.random.key(0))
        state = {"params": params, "momentum": jax.tree.map(jnp.zeros_like, params)}
        tokens = jax.random.randint(jax.random.key(1), (batch, cfg.seq), 0, cfg.vocab)
        return state, {"tokens": tokens, "targets": jnp.roll(tokens, -1, axis=1)}

    return make() if concrete else jax.eval_shape(make)


def make_micro_step(micro_batch_size: int, cfg: LlamaConfig = TINY):
    """``make_step`` for ``maximize_throughput(..., global_batch=..., microbatches=...)``:
    ``(micro_step, (state, acc, micro_batch))`` for micro-batches of ``micro_batch_size``."""
    cfg = dataclasses.replace(cfg, batch=micro_batch_size)
    state, batch = example_args(cfg, micro_batch_size)
    return micro_step(cfg), (state, state["params"], batch)


def make_tiny_step(batch_size: int):
    """``make_step`` for ``maximize_throughput`` without micro-batching, on :data:`TINY`:
    ``python -m planner throughput examples.accumulate:make_tiny_step --hardware cpu ...``."""
    from examples.llama import make_train_step

    return make_train_step(dataclasses.replace(TINY, batch=batch_size))
