"""Frontier-size train steps, abstract and sharded, for planning on a machine without GPUs.

Two configurations, each with its train step (next-token cross-entropy, SGD with momentum,
the state donated) and ABSTRACT arguments: every parameter, momentum buffer and batch array
is a ``jax.ShapeDtypeStruct`` carrying a ``NamedSharding`` on a stated mesh. Nothing is
allocated; the planner traces and compiles the step from shapes alone.

* ``LLAMA3_405B``: Llama 3.1 405B. 126 layers, d_model 16384, FFN 53248, 128 query heads,
  8 KV heads (head_dim 128), vocabulary 128256, RoPE theta 500000, SwiGLU, RMSNorm.
  Sources: "The Llama 3 Herd of Models", Grattafiori et al., 2024, arXiv:2407.21783,
  Table 3 ("405B: layers 126, model dimension 16,384, FFN dimension 53,248, attention heads
  128, key/value heads 8, vocabulary 128,000 [128,256 with special tokens], RoPE base
  500,000"); model card / config.json of meta-llama/Llama-3.1-405B on Hugging Face
  (hidden_size 16384, intermediate_size 53248, num_hidden_layers 126,
  num_attention_heads 128, num_key_value_heads 8, vocab_size 128256). Pre-training used
  sequences of 8192 tokens (paper, section 3.4.1), the ``seq`` used here.

* ``DEEPSEEK_V3``: DeepSeek-V3 671B. 61 layers, the first 3 dense (FFN 18432), the other 58
  MoE with 256 routed experts (top-8, expert hidden size 2048) and 1 shared expert (2048);
  d_model 7168, 128 heads, Multi-head Latent Attention with q_lora_rank 1536, kv_lora_rank
  512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128; vocabulary 129280.
  Sources: "DeepSeek-V3 Technical Report", DeepSeek-AI, 2024, arXiv:2412.19437, section
  4.2 ("61 Transformer layers and the hidden dimension to 7168 ... 128 attention heads ...
  per-head dimension 128 ... KV compression dimension 512 ... query compression dimension
  1536 ... per-head dimension of the decoupled queries and key 64 ... all FFNs except for
  the first three layers with MoE layers. Each MoE layer consists of 1 shared expert and
  256 routed experts, where the intermediate hidden dimension of each expert is 2048 ...
  8 experts will be activated for each token"); config.json of deepseek-ai/DeepSeek-V3 on
  Hugging Face (first_k_dense_replace 3, intermediate_size 18432, moe_intermediate_size
  2048, n_routed_experts 256, n_shared_experts 1, num_experts_per_tok 8, vocab_size 129280).
  Simplifications, stated: the router is a softmax top-k (V3 uses sigmoid affinities with a
  bias term and node-limited routing), and the multi-token-prediction module is left out.
  Pre-training sequences were 4096 tokens (report, section 4.2); ``seq`` is 8192 here as
  the issue asks, the same as Llama's, so the two plans compare.

The mesh: ``("fsdp", "tensor") = (64, 8)``, 512 devices. Weights are sharded 64-way over
"fsdp" on one matrix dimension and 8-way over "tensor" on the other (Megatron-style column
/ row split for the tensor axis); the batch is sharded over "fsdp", so each group of 8
tensor-parallel devices holds ``per_device_batch`` sequences (1 sequence of 8192 tokens
by default: 64 sequences, 524,288 tokens per step globally). Routed experts are sharded
64-way over "fsdp" on the expert axis (4 experts per group) and 8-way over "tensor" on
their hidden dimension.

To build a 512-device ``Mesh`` on a CPU, set ``jax.config.update("jax_num_cpu_devices",
512)`` (or ``XLA_FLAGS=--xla_force_host_platform_device_count=512``) before JAX starts;
``benchmarks/frontier.py`` does. ``jax.sharding.AbstractMesh`` traces but cannot be
compiled, and the planner compiles the step (its anchor), so a concrete mesh is needed.

``make_train_step(cfg)`` returns ``(step_fn, (state, batch))`` like the other examples.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from examples import llama, moe

FSDP, TP = "fsdp", "tensor"


# ---------------------------------------------------------------------------- configs


@dataclasses.dataclass(frozen=True, kw_only=True)
class FrontierConfig:
    """A decoder and the mesh it is planned on. ``attention`` is ``"gqa"`` or ``"mla"``."""

    name: str
    vocab: int
    d_model: int
    n_heads: int
    n_layers: int
    seq: int
    d_ff: int  # dense FFN hidden size
    attention: str = "gqa"
    n_kv_heads: int = 0  # GQA
    head_dim: int = 128  # GQA
    # MLA (DeepSeek-V2/V3)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # MoE: the first ``n_dense_layers`` are dense, the rest MoE (none when n_experts == 0).
    n_dense_layers: int = 0
    n_experts: int = 0
    top_k: int = 0
    d_expert: int = 0
    d_shared: int = 0  # one shared expert of this hidden size
    # "ragged": examples/moe.py's dropless block (one sort of all tokens, jax.lax.ragged_dot),
    # what MaxText runs on GPU with sparse_matmul=True. "capacity": GShard-style dispatch
    # of each fsdp shard's tokens into [experts, capacity] slots and dense einsums, MaxText's
    # sparse_matmul=False path; it shards over the mesh (expert parallelism over "fsdp").
    moe_impl: str = "ragged"
    capacity_factor: float = 1.25
    # Mesh and batch.
    mesh_shape: tuple[int, int] = (64, 8)  # (fsdp, tensor)
    per_device_batch: int = 1  # sequences per fsdp shard (shared by its tensor group)
    dtype: str = "bfloat16"

    @property
    def n_devices(self) -> int:
        return math.prod(self.mesh_shape)

    @property
    def batch(self) -> int:
        return self.per_device_batch * self.mesh_shape[0]

    @property
    def n_moe_layers(self) -> int:
        return self.n_layers - self.n_dense_layers if self.n_experts else 0

    def scaled(self, **changes) -> FrontierConfig:
        return dataclasses.replace(self, **changes)


LLAMA3_405B = FrontierConfig(
    name="llama3.1-405b",
    vocab=128256,
    d_model=16384,
    n_heads=128,
    n_kv_heads=8,
    head_dim=128,
    d_ff=53248,
    n_layers=126,
    seq=8192,
)

DEEPSEEK_V3 = FrontierConfig(
    name="deepseek-v3-671b",
    vocab=129280,
    d_model=7168,
    n_heads=128,
    n_layers=61,
    seq=8192,
    d_ff=18432,
    attention="mla",
    q_lora_rank=1536,
    kv_lora_rank=512,
    qk_nope_head_dim=128,
    qk_rope_head_dim=64,
    v_head_dim=128,
    n_dense_layers=3,
    n_experts=256,
    top_k=8,
    d_expert=2048,
    d_shared=2048,
)

# Llama 3 70B (Meta's config.json: hidden_size 8192, intermediate_size 28672,
# num_hidden_layers 80, 64 heads, 8 KV heads) on one 8-GPU host: fsdp 4 x tensor 2.
LLAMA3_70B = LLAMA3_405B.scaled(
    name="llama3-70b",
    d_model=8192,
    n_heads=64,
    d_ff=28672,
    n_layers=80,
    mesh_shape=(4, 2),
)

# The same code paths at a size a test traces in seconds on 8 fake CPU devices (4 x 2 mesh).
TINY_LLAMA = LLAMA3_405B.scaled(
    name="tiny-llama",
    vocab=256,
    d_model=64,
    n_heads=4,
    n_kv_heads=2,
    head_dim=16,
    d_ff=128,
    n_layers=2,
    seq=32,
    mesh_shape=(4, 2),
)
TINY_DEEPSEEK = DEEPSEEK_V3.scaled(
    name="tiny-deepseek",
    vocab=256,
    d_model=64,
    n_heads=4,
    n_layers=3,
    seq=32,
    d_ff=128,
    q_lora_rank=32,
    kv_lora_rank=16,
    qk_nope_head_dim=16,
    qk_rope_head_dim=8,
    v_head_dim=16,
    n_dense_layers=1,
    n_experts=8,
    top_k=2,
    d_expert=32,
    d_shared=32,
    mesh_shape=(4, 2),
)

# DeepSeek-V3 with capacity-limited expert dispatch (see FrontierConfig.moe_impl).
DEEPSEEK_V3_CAPACITY = DEEPSEEK_V3.scaled(name="deepseek-v3-671b-capacity", moe_impl="capacity")
TINY_DEEPSEEK_CAPACITY = TINY_DEEPSEEK.scaled(name="tiny-deepseek-capacity", moe_impl="capacity")

CONFIGS = {c.name: c for c in (LLAMA3_405B, LLAMA3_70B, DEEPSEEK_V3, DEEPSEEK_V3_CAPACITY)}


# ---------------------------------------------------------------------------- layers


def _llama_cfg(cfg: FrontierConfig) -> llama.LlamaConfig:
    return llama.LlamaConfig(
        vocab=cfg.vocab,
        d_model=cfg.d_model,
        n_heads=cfg.n_heads,
        n_kv_heads=cfg.n_kv_heads,
        d_ff=cfg.d_ff,
        n_layers=cfg.n_layers,
        batch=cfg.batch,
        seq=cfg.seq,
        dtype=cfg.dtype,
    )


def _moe_cfg(cfg: FrontierConfig) -> moe.MoEConfig:
    return moe.MoEConfig(
        vocab=cfg.vocab,
        d_model=cfg.d_model,
        n_heads=cfg.n_heads,
        n_kv_heads=cfg.n_heads,
        d_expert=cfg.d_expert,
        d_shared=cfg.d_shared,
        n_experts=cfg.n_experts,
        top_k=cfg.top_k,
        n_layers=cfg.n_moe_layers,
        batch=cfg.batch,
        seq=cfg.seq,
        dtype=cfg.dtype,
    )


def _causal_attention(q, k, v):
    """Softmax attention with a causal mask; q, k: [b, s, h, dq], v: [b, s, h, dv].

    Written out (not ``jax.nn.dot_product_attention``) because MLA's value head dimension
    (128) differs from its query/key head dimension (192)."""
    s = q.shape[1]
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32)
    scores = scores * (q.shape[-1] ** -0.5)
    mask = jnp.tril(jnp.ones((s, s), jnp.bool_))
    scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v)


def mla_attention_sublayer(cfg: FrontierConfig, x, layer, positions, mesh=None):
    """Multi-head Latent Attention (DeepSeek-V2/V3) with its residual.

    Queries and keys/values go through low-rank latents; RoPE is applied to a decoupled
    64-dim part of the queries and to one key part shared by all heads. Tensor names follow
    MaxText's ``attention_mla.py``: query_wa_proj, mla_q, kv_wa_proj, mla_kv, query_proj,
    key_proj, value_proj; attention_out and out_proj as in ``examples/llama.py``.
    """
    b, s, _ = x.shape
    H, dn, dr, dv = cfg.n_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    x = checkpoint_name(x, "decoder_layer_input")
    h = llama._rms_norm(x, layer["attn_norm"])
    # Queries: D -> q_lora_rank -> heads x (nope + rope).
    q_lat = checkpoint_name(h @ layer["wq_a"], "query_wa_proj")
    q_lat = checkpoint_name(llama._rms_norm(q_lat, layer["q_norm"]), "mla_q")
    q = (q_lat @ layer["wq_b"]).reshape(b, s, H, dn + dr)
    q_nope, q_rope = q[..., :dn], q[..., dn:]
    q = checkpoint_name(
        jnp.concatenate([q_nope, llama._rope(q_rope, positions)], axis=-1), "query_proj"
    )
    # Keys and values: D -> kv_lora_rank (+ the shared rope key) -> heads x (nope + v).
    kv_a = checkpoint_name(h @ layer["wkv_a"], "kv_wa_proj")
    kv_lat, k_rope = kv_a[..., : cfg.kv_lora_rank], kv_a[..., cfg.kv_lora_rank :]
    kv_lat = checkpoint_name(llama._rms_norm(kv_lat, layer["kv_norm"]), "mla_kv")
    k_rope = llama._rope(k_rope.reshape(b, s, 1, dr), positions)
    kv = (kv_lat @ layer["wkv_b"]).reshape(b, s, H, dn + dv)
    k_nope, v = kv[..., :dn], kv[..., dn:]
    k = checkpoint_name(
        jnp.concatenate([k_nope, jnp.broadcast_to(k_rope, (b, s, H, dr))], axis=-1), "key_proj"
    )
    v = checkpoint_name(v, "value_proj")
    heads = P(FSDP, None, TP, None)  # batch over fsdp, heads over tensor
    q, k, v = (_constrain(t, mesh, heads) for t in (q, k, v))
    attn = checkpoint_name(_causal_attention(q, k, v).reshape(b, s, H * dv), "attention_out")
    return x + checkpoint_name(attn @ layer["wo"], "out_proj")


def _attention(cfg: FrontierConfig, x, layer, positions, mesh=None):
    if cfg.attention == "mla":
        return mla_attention_sublayer(cfg, x, layer, positions, mesh)
    return _constrain(
        llama.attention_sublayer(_llama_cfg(cfg), x, layer, positions), mesh, P(FSDP, None, None)
    )


def dense_layer(cfg: FrontierConfig, x, layer, positions, mesh=None):
    """Attention, then a SwiGLU FFN (MaxText names mlpwi_0, mlpwi_1, mlpwo)."""
    x = _attention(cfg, x, layer, positions, mesh)
    h = llama._rms_norm(x, layer["mlp_norm"])
    return x + moe._swiglu(
        h, layer["w1"], layer["w3"], layer["w2"], ("mlpwi_0", "mlpwi_1", "mlpwo")
    )


def capacity_moe_block(cfg: FrontierConfig, h, layer, mesh=None):
    """Shared expert + top-k routed experts with capacity-limited dispatch, per group.

    ``h: [G, T, D]``: G groups of T tokens (one group per fsdp shard). Each expert takes at
    most ``C = ceil(T * top_k / E * capacity_factor)`` tokens of a group, first come first
    served; the rest are dropped (their routed output is zero). Dispatch and combine are
    one-hot einsums, as in GShard (Lepikhin et al., 2020, arXiv:2006.16668) and MaxText.
    """
    g, t, d = h.shape
    E, k = cfg.n_experts, cfg.top_k
    cap = max(1, math.ceil(t * k / E * cfg.capacity_factor))
    shared = moe._swiglu(
        h, layer["s_w1"], layer["s_w3"], layer["s_w2"], ("mlpwi_0", "mlpwi_1", "mlpwo")
    )
    probs = jax.nn.softmax((h @ layer["router"]).astype(jnp.float32), axis=-1)  # [G, T, E]
    weights, experts = jax.lax.top_k(probs, k)  # [G, T, k]
    onehot = jax.nn.one_hot(experts, E, dtype=jnp.int32)  # [G, T, k, E]
    # Slot of each (token, choice) in its expert's queue, in token order.
    slot = (jnp.cumsum(onehot.reshape(g, t * k, E), axis=1) - 1).reshape(g, t, k, E)
    keep = (slot < cap) & (onehot > 0)
    slot_1h = jax.nn.one_hot(jnp.where(keep, slot, cap), cap, dtype=h.dtype)  # [G,T,k,E,C]
    dispatch = jnp.sum(slot_1h, axis=2)  # [G, T, E, C]
    combine = jnp.einsum("gtk,gtkec->gtec", weights.astype(h.dtype), slot_1h)
    xe = jnp.einsum("gtec,gtd->egcd", dispatch, h)
    xe = _constrain(xe, mesh, P(FSDP, None, None, None))  # all-to-all: experts over fsdp
    gate = checkpoint_name(jnp.einsum("egcd,edf->egcf", xe, layer["e_w1"]), "moe_mlpwi_0")
    up = checkpoint_name(jnp.einsum("egcd,edf->egcf", xe, layer["e_w3"]), "moe_mlpwi_1")
    ye = checkpoint_name(
        jnp.einsum("egcf,efd->egcd", jax.nn.silu(gate) * up, layer["e_w2"]), "moe_mlpwo"
    )
    ye = _constrain(ye, mesh, P(None, FSDP, None, None))  # all-to-all back: groups over fsdp
    return shared + jnp.einsum("gtec,egcd->gtd", combine, ye)


def moe_layer(cfg: FrontierConfig, x, layer, positions, mesh=None):
    """Attention, then shared + routed experts: ``examples/moe.py``'s block (one sort of
    all tokens, ragged_dot) or ``capacity_moe_block``, as ``cfg.moe_impl`` says."""
    b, s, d = x.shape
    x = _attention(cfg, x, layer, positions, mesh)
    h = llama._rms_norm(x, layer["mlp_norm"])
    if cfg.moe_impl == "capacity":
        groups = cfg.mesh_shape[0]
        h = _constrain(h.reshape(groups, b * s // groups, d), mesh, P(FSDP, None, None))
        return x + capacity_moe_block(cfg, h, layer, mesh).reshape(b, s, d)
    if cfg.moe_impl != "ragged":
        raise ValueError(f"moe_impl must be 'ragged' or 'capacity', got {cfg.moe_impl!r}")
    h = _constrain(h.reshape(b * s, d), mesh, P(FSDP, None))
    return x + moe.moe_block(_moe_cfg(cfg), h, layer).reshape(b, s, d)


def _constrain(x, mesh, spec):
    """Pin an activation's sharding (MaxText does the same with logical axis rules); without
    it the compiler's propagation may follow the weights and replicate the batch."""
    if mesh is None:
        return x
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))


def _scan_layers(layer_fn, x, stacked, positions, mesh):
    def body(x, layer):
        x = _constrain(x, mesh, P(FSDP, None, None))
        return _constrain(layer_fn(x, layer, positions), mesh, P(FSDP, None, None))

    fn = jax.checkpoint(body, prevent_cse=False)
    x, _ = jax.lax.scan(lambda x, layer: (fn(x, layer), None), x, stacked)
    return x


def forward(cfg: FrontierConfig, params, tokens, mesh=None):
    """Logits of ``tokens``; ``mesh`` (optional) pins the activations' batch sharding."""
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
    x = _constrain(params["embed"][tokens], mesh, P(FSDP, None, None))
    if "dense_layers" in params:
        x = _scan_layers(
            functools.partial(dense_layer, cfg, mesh=mesh),
            x,
            params["dense_layers"],
            positions,
            mesh,
        )
    if "moe_layers" in params:
        x = _scan_layers(
            functools.partial(moe_layer, cfg, mesh=mesh), x, params["moe_layers"], positions, mesh
        )
    x = llama._rms_norm(x, params["final_norm"])
    return _constrain((x @ params["unembed"]).astype(jnp.float32), mesh, P(FSDP, None, TP))


# ------------------------------------------------------------------ abstract parameters


# Per stacked weight: (shape without the layer axis, partition spec without it).
# "in" projections D -> wide are (fsdp, tensor); "out" projections wide -> D are (tensor, fsdp).
def _attention_shapes(cfg: FrontierConfig) -> dict:
    D, H = cfg.d_model, cfg.n_heads
    if cfg.attention == "mla":
        return {
            "wq_a": ((D, cfg.q_lora_rank), P(FSDP, TP)),
            "q_norm": ((cfg.q_lora_rank,), P(None)),
            "wq_b": (
                (cfg.q_lora_rank, H * (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim)),
                P(FSDP, TP),
            ),
            "wkv_a": ((D, cfg.kv_lora_rank + cfg.qk_rope_head_dim), P(FSDP, TP)),
            "kv_norm": ((cfg.kv_lora_rank,), P(None)),
            "wkv_b": ((cfg.kv_lora_rank, H * (cfg.qk_nope_head_dim + cfg.v_head_dim)), P(FSDP, TP)),
            "wo": ((H * cfg.v_head_dim, D), P(TP, FSDP)),
            "attn_norm": ((D,), P(None)),
            "mlp_norm": ((D,), P(None)),
        }
    kv = cfg.n_kv_heads * cfg.head_dim
    return {
        "wq": ((D, H * cfg.head_dim), P(FSDP, TP)),
        "wk": ((D, kv), P(FSDP, TP)),
        "wv": ((D, kv), P(FSDP, TP)),
        "wo": ((H * cfg.head_dim, D), P(TP, FSDP)),
        "attn_norm": ((D,), P(None)),
        "mlp_norm": ((D,), P(None)),
    }


def _ffn_shapes(D: int, F: int, prefix: str = "") -> dict:
    return {
        f"{prefix}w1": ((D, F), P(FSDP, TP)),
        f"{prefix}w3": ((D, F), P(FSDP, TP)),
        f"{prefix}w2": ((F, D), P(TP, FSDP)),
    }


def _moe_shapes(cfg: FrontierConfig) -> dict:
    D, E, F = cfg.d_model, cfg.n_experts, cfg.d_expert
    return {
        **_ffn_shapes(D, cfg.d_shared, "s_"),
        "router": ((D, E), P(FSDP, None)),
        "e_w1": ((E, D, F), P(FSDP, None, TP)),
        "e_w3": ((E, D, F), P(FSDP, None, TP)),
        "e_w2": ((E, F, D), P(FSDP, TP, None)),
    }


def param_layout(cfg: FrontierConfig) -> dict:
    """The parameter tree as ``(shape, PartitionSpec)`` leaves."""
    D = cfg.d_model
    attn = _attention_shapes(cfg)

    def stack(n, shapes):
        return {k: ((n, *s), P(None, *spec)) for k, (s, spec) in shapes.items()}

    n_dense = cfg.n_dense_layers if cfg.n_experts else cfg.n_layers
    params = {"embed": ((cfg.vocab, D), P(TP, FSDP))}
    if n_dense:
        params["dense_layers"] = stack(n_dense, {**attn, **_ffn_shapes(D, cfg.d_ff)})
    if cfg.n_moe_layers:
        params["moe_layers"] = stack(cfg.n_moe_layers, {**attn, **_moe_shapes(cfg)})
    params["final_norm"] = ((D,), P(None))
    params["unembed"] = ((D, cfg.vocab), P(FSDP, TP))
    return params


def param_count(cfg: FrontierConfig) -> int:
    leaves = jax.tree.leaves(
        param_layout(cfg),
        is_leaf=lambda x: isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], P),
    )
    return sum(math.prod(shape) for shape, _ in leaves)


def make_mesh(cfg: FrontierConfig) -> jax.sharding.Mesh:
    have = len(jax.devices())
    if have < cfg.n_devices:
        raise RuntimeError(
            f"{cfg.name} is planned on a {cfg.mesh_shape[0]} x {cfg.mesh_shape[1]} mesh "
            f"({cfg.n_devices} devices) but JAX sees {have}.\nFix: before JAX starts, "
            f"jax.config.update('jax_num_cpu_devices', {cfg.n_devices}) (or XLA_FLAGS="
            f"--xla_force_host_platform_device_count={cfg.n_devices}) to plan on fake CPU devices."
        )
    # Auto axes: the compiler propagates shardings from the arguments (GSPMD / Shardy), as in
    # MaxText; Explicit axes would need a sharding rule at every gather and reshape.
    return jax.make_mesh(
        cfg.mesh_shape,
        (FSDP, TP),
        devices=jax.devices()[: cfg.n_devices],
        axis_types=(jax.sharding.AxisType.Auto,) * 2,
    )


def abstract_args(cfg: FrontierConfig, mesh) -> tuple[dict, dict]:
    """``(state, batch)`` as sharded ``jax.ShapeDtypeStruct``s; nothing is allocated."""
    dt = jnp.dtype(cfg.dtype)

    def sds(shape, spec, dtype=dt):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))

    is_leaf = lambda x: isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], P)  # noqa: E731
    layout = param_layout(cfg)
    params = jax.tree.map(lambda spec: sds(*spec), layout, is_leaf=is_leaf)
    momentum = jax.tree.map(lambda spec: sds(*spec), layout, is_leaf=is_leaf)
    tok = sds((cfg.batch, cfg.seq), P(FSDP, None), jnp.int32)
    return {"params": params, "momentum": momentum}, {"tokens": tok, "targets": tok}


def make_train_step(
    cfg: FrontierConfig = TINY_LLAMA,
    *,
    mesh=None,
    lr: float = 1e-3,
    momentum: float = 0.9,
    out_shardings: bool = True,
):
    """``(train_step, (state, batch))``: the step jitted with the state donated and its
    outputs sharded like its inputs; the arguments abstract and sharded on ``mesh``
    (default: ``make_mesh(cfg)``). ``out_shardings=False`` leaves the outputs' shardings to
    XLA's propagation. A step compiled for a GPU target on a CPU (deviceless) may keep its
    ``out_shardings`` on this machine's devices: the planner moves them onto the target mesh
    (planner/_src/xla/compile.py's ``lower``)."""
    mesh = make_mesh(cfg) if mesh is None else mesh
    args = abstract_args(cfg, mesh)

    train_step = llama.sgd_momentum_step(
        lambda params, tokens: forward(cfg, params, tokens, mesh), lr=lr, momentum=momentum
    )

    state_sh = jax.tree.map(lambda s: s.sharding, args[0])
    if not out_shardings:
        return jax.jit(train_step, donate_argnums=(0,)), args
    step = jax.jit(
        train_step, donate_argnums=(0,), out_shardings=(state_sh, NamedSharding(mesh, P()))
    )
    return step, args


def llama405b():
    """Factory for ``python -m planner solve examples.frontier:llama405b`` (512 devices)."""
    return make_train_step(LLAMA3_405B)


def deepseek_v3():
    """Factory for ``python -m planner solve examples.frontier:deepseek_v3`` (512 devices)."""
    return make_train_step(DEEPSEEK_V3)
