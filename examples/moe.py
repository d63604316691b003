"""A DeepSeek-style mixture-of-experts decoder and its train step, for the planner.

Each layer: RMSNorm, grouped-query attention (as in ``examples/llama.py``), then an MoE
feed-forward block with a shared SwiGLU expert and ``n_experts`` routed SwiGLU experts, each
token sent to its ``top_k`` experts by a softmax router. Two dispatches (``dispatch``):

* ``"ragged"``: grouped matmuls (``jax.lax.ragged_dot``) on the tokens sorted by expert,
  dropless, MaxText's ``sparse_matmul``. On GPU, JAX 0.11 lowers ``ragged_dot`` to XLA's
  ``ragged-dot`` instruction, and the GPU compiler's memory for it scales with experts x
  tokens: on our H200 (2026-12-01, first MoE run) the 64-expert, 32k-token ``H200_BENCH``
  compiled to a 233 GB full-remat peak, above the 141 GB of HBM.
* ``"capacity"``: GShard / MaxText ``dense_matmul``-style dispatch with a capacity per
  expert, ``C = ceil(capacity_factor * tokens * top_k / n_experts)``: the routed copies are
  scattered into an ``[n_experts, C, d_model]`` buffer (copies past an expert's capacity are
  dropped) and each expert is one batched matmul; what GPUs run well today. Layers are stacked under ``jax.lax.scan``, each in
``jax.checkpoint``; tensors carry MaxText's names (``moe_mlpwi_0``, ``moe_mlpwi_1``,
``moe_mlpwo`` for the routed experts; ``mlpwi_0``, ``mlpwi_1``, ``mlpwo`` for the shared one).

``make_train_step(config)`` returns ``(step_fn, (state, batch))`` like the Llama example.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from examples import llama


@dataclasses.dataclass(frozen=True, kw_only=True)
class MoEConfig:
    vocab: int = 512
    d_model: int = 128
    n_heads: int = 4
    n_kv_heads: int = 2
    d_expert: int = 96  # hidden size of each routed expert
    d_shared: int = 192  # hidden size of the shared expert
    n_experts: int = 8
    top_k: int = 2
    n_layers: int = 3
    batch: int = 2
    seq: int = 64
    dtype: str = "float32"
    attention_impl: str | None = None
    dispatch: str = "ragged"  # "ragged" (dropless ragged_dot) or "capacity" (see above)
    capacity_factor: float = 1.25  # MaxText's default capacity_factor for dropping MoE
    remat_policy: Callable[..., Any] | None = None

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def attention_config(self) -> llama.LlamaConfig:
        return llama.LlamaConfig(
            vocab=self.vocab,
            d_model=self.d_model,
            n_heads=self.n_heads,
            n_kv_heads=self.n_kv_heads,
            d_ff=self.d_shared,
            n_layers=self.n_layers,
            batch=self.batch,
            seq=self.seq,
            dtype=self.dtype,
            attention_impl=self.attention_impl,
        )


# Sized for one H200 (benchmarks/gpu_bench.py --model moe): 32k tokens, 8 layers,
# 64 routed experts top-6 plus a shared expert (DeepSeek-V2-Lite-like proportions).
H200_BENCH = MoEConfig(
    vocab=32000,
    d_model=2048,
    n_heads=16,
    n_kv_heads=16,
    d_expert=1408,
    d_shared=2816,
    n_experts=64,
    top_k=6,
    n_layers=8,
    batch=8,
    seq=4096,
    dtype="bfloat16",
    attention_impl="cudnn",
    dispatch="capacity",
)


def _swiglu(h, w1, w3, w2, names):
    gate = checkpoint_name(h @ w1, names[0])
    up = checkpoint_name(h @ w3, names[1])
    return checkpoint_name((jax.nn.silu(gate) * up) @ w2, names[2])


def moe_block(cfg: MoEConfig, h, layer):
    """Shared expert + top-k routed experts over the flattened tokens ``h: [T, D]``."""
    shared = _swiglu(
        h, layer["s_w1"], layer["s_w3"], layer["s_w2"], ("mlpwi_0", "mlpwi_1", "mlpwo")
    )
    probs = jax.nn.softmax((h @ layer["router"]).astype(jnp.float32), axis=-1)
    weights, experts = jax.lax.top_k(probs, cfg.top_k)  # [T, k]
    routed = (_capacity_experts if cfg.dispatch == "capacity" else _ragged_experts)(
        cfg, h, layer, weights, experts
    )
    return shared + routed


def _ragged_experts(cfg: MoEConfig, h, layer, weights, experts):
    """Dropless: the token copies sorted by expert, one ragged (grouped) matmul per weight."""
    t, d = h.shape
    flat = experts.reshape(-1)  # [T*k]
    order = jnp.argsort(flat)
    tokens = h[order // cfg.top_k]  # sorted by expert
    sizes = jnp.bincount(flat, length=cfg.n_experts).astype(jnp.int32)
    gate = checkpoint_name(jax.lax.ragged_dot(tokens, layer["e_w1"], sizes), "moe_mlpwi_0")
    up = checkpoint_name(jax.lax.ragged_dot(tokens, layer["e_w3"], sizes), "moe_mlpwi_1")
    out = checkpoint_name(
        jax.lax.ragged_dot(jax.nn.silu(gate) * up, layer["e_w2"], sizes), "moe_mlpwo"
    )
    routed = jnp.zeros((t * cfg.top_k, d), out.dtype).at[order].set(out)
    return jnp.sum(routed.reshape(t, cfg.top_k, d) * weights[..., None].astype(out.dtype), axis=1)


def capacity(cfg: MoEConfig) -> int:
    """Slots per expert: ``ceil(capacity_factor * tokens * top_k / n_experts)``."""
    import math

    return math.ceil(cfg.capacity_factor * cfg.batch * cfg.seq * cfg.top_k / cfg.n_experts)


def _capacity_experts(cfg: MoEConfig, h, layer, weights, experts):
    """Capacity dispatch: ``[E, C, D]`` buffers, one batched matmul per weight."""
    t, d = h.shape
    e, k, c = cfg.n_experts, cfg.top_k, capacity(cfg)
    flat = experts.reshape(-1)  # [T*k], token-major
    # Slot of each routed copy: its rank among the copies sent to the same expert.
    rank = jnp.cumsum(jax.nn.one_hot(flat, e, dtype=jnp.int32), axis=0) - 1
    rank = jnp.take_along_axis(rank, flat[:, None], axis=1)[:, 0]
    kept = rank < c
    slot = jnp.where(kept, flat * c + rank, e * c)  # e*c: the drop slot
    buf = jnp.zeros((e * c + 1, d), h.dtype).at[slot].set(jnp.repeat(h, k, axis=0))
    x = buf[: e * c].reshape(e, c, d)
    gate = checkpoint_name(jnp.einsum("ecd,edf->ecf", x, layer["e_w1"]), "moe_mlpwi_0")
    up = checkpoint_name(jnp.einsum("ecd,edf->ecf", x, layer["e_w3"]), "moe_mlpwi_1")
    out = checkpoint_name(
        jnp.einsum("ecf,efd->ecd", jax.nn.silu(gate) * up, layer["e_w2"]), "moe_mlpwo"
    )
    out = jnp.concatenate([out.reshape(e * c, d), jnp.zeros((1, d), out.dtype)])
    w = (weights.reshape(-1) * kept).astype(out.dtype)  # dropped copies: 0
    return jnp.sum((out[slot] * w[:, None]).reshape(t, k, d), axis=1)


def decoder_layer(cfg: MoEConfig, x, layer, positions):
    b, s, d = x.shape
    x = llama.attention_sublayer(cfg.attention_config(), x, layer, positions)
    h = llama._rms_norm(x, layer["mlp_norm"]).reshape(b * s, d)
    return x + moe_block(cfg, h, layer).reshape(b, s, d)


def init_params(cfg: MoEConfig, key) -> dict:
    kv = cfg.n_kv_heads * cfg.head_dim
    L, D, E, F, S = cfg.n_layers, cfg.d_model, cfg.n_experts, cfg.d_expert, cfg.d_shared
    shapes = {
        "wq": (L, D, D),
        "wk": (L, D, kv),
        "wv": (L, D, kv),
        "wo": (L, D, D),
        "router": (L, D, E),
        "s_w1": (L, D, S),
        "s_w3": (L, D, S),
        "s_w2": (L, S, D),
        "e_w1": (L, E, D, F),
        "e_w3": (L, E, D, F),
        "e_w2": (L, E, F, D),
    }
    return llama.init_decoder_params(cfg, key, shapes)


def forward(cfg: MoEConfig, params, tokens):
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
    x = params["embed"][tokens]
    layer_fn = jax.checkpoint(
        functools.partial(decoder_layer, cfg), policy=cfg.remat_policy, prevent_cse=False
    )
    x, _ = jax.lax.scan(lambda x, layer: (layer_fn(x, layer, positions), None), x, params["layers"])
    x = llama._rms_norm(x, params["final_norm"])
    return (x @ params["unembed"]).astype(jnp.float32)


def make_train_step(cfg: MoEConfig = MoEConfig(), *, concrete: bool = False, lr: float = 1e-3):
    """``(train_step, (state, batch))``; ``state = {"params", "momentum"}``, SGD with momentum."""
    return llama.lm_train_step(
        cfg,
        functools.partial(forward, cfg),
        functools.partial(init_params, cfg),
        concrete=concrete,
        lr=lr,
        momentum=0.9,
    )


def make(config: MoEConfig | None = None):
    """Factory for ``python -m planner solve examples.moe:make``."""
    return make_train_step(config or MoEConfig())
