"""A Llama-style decoder and its full train step: the bundled example model.

Written the way users write JAX models today, with nothing planner-specific in it:

* RMSNorm, grouped-query attention through ``jax.nn.dot_product_attention``, rotary
  position embeddings, a SwiGLU MLP;
* the decoder layers stacked on a leading axis and run under ``jax.lax.scan``, each layer
  wrapped in ``jax.checkpoint`` (with a default policy the planner overrides while it plans);
* the tensors carry MaxText's ``checkpoint_name``s (decoder_layer_input, query_proj,
  key_proj, value_proj, attention_out, out_proj, mlpwi_0, mlpwi_1, mlpwo), so a plan made
  for this model reads like a MaxText ``remat_policy: custom`` block;
* a full train step: cross-entropy loss, gradient, and an SGD-with-momentum update.

``make_train_step(config)`` returns ``(step_fn, example_args)``; the example arguments are
``jax.ShapeDtypeStruct``s unless ``concrete=True``, so large configurations can be planned
without allocating them.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name


@dataclasses.dataclass(frozen=True, kw_only=True)
class LlamaConfig:
    """Sizes of the decoder. The defaults are the small CPU configuration used by the tests."""

    vocab: int = 512
    d_model: int = 256
    n_heads: int = 8
    n_kv_heads: int = 2
    d_ff: int = 768
    n_layers: int = 4
    batch: int = 2
    seq: int = 128
    dtype: str = "float32"
    # "scan": layers under lax.scan (the form MaxText uses with scan_layers=True);
    # "loop": a Python loop over layers (unrolled in the program).
    layer_loop: str = "scan"
    # The layer stack as this many consecutive groups (n_layers / layer_groups layers each,
    # parameters sliced), each with its own jax.checkpoint call site: under "scan" one
    # lax.scan per group. remat_policy may then be one policy (every group) or a sequence of
    # layer_groups policies, one per group (plan.policies of a per-group plan).
    layer_groups: int = 1
    # Under "scan": layers applied per scan iteration, each its own jax.checkpoint call site.
    # The weights are then stored as k stacks (params["layers"] is a tuple: stack j holds
    # layers j, j + k, j + 2k, ...), so each call site's weights are a slice of the scan's
    # xs, which JAX forwards instead of stacking again, and the weight gradients need no
    # padding. Not scan(unroll=k), which concatenates host-space residuals and fails to
    # compile with offloading (docs/xla-flags-research.md, T2 / T3): here each sub-layer's
    # residual is its own scan output, so the offload of sub-layer j may finish during
    # sub-layers j+1..k-1 of the same iteration, a wider copy window than one layer.
    # remat_policy may be one policy, one per layer group, or one per call site
    # (layer_groups x layers_per_iter, group-major: plan.policies of a per-call-site plan).
    layers_per_iter: int = 1
    # what the user wrote; the planner overrides it while it plans
    remat_policy: Callable[..., Any] | Sequence[Callable[..., Any] | None] | None = None
    prevent_cse: bool = False  # MaxText passes prevent_cse=not scan_layers
    # jax.nn.dot_product_attention's implementation: None lets JAX pick (on our H200 it picked
    # XLA's, which materialises the scores); "cudnn" is the fused kernel MaxText uses on GPU.
    attention_impl: str | None = None
    # GPT-J / PaLM parallel residual: attention and MLP both read one norm of the layer input,
    # x + attn(norm(x)) + mlp(norm(x)) (the same weights; mlp_norm is not used).
    parallel_residual: bool = False
    # Applied to the decoder layer function inside its jax.checkpoint (layer_groups=1 only):
    # planner.state.stream_layer_params(fn, host=...) there brings host-resident stacked weights in
    # one layer slice at a time (planner/_src/trainstate/streamed.py: outside the checkpoint it saves none).
    layer_wrap: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


# The configuration of the H200 measurements (benchmarks/results/h200-2026-11-30-shared-probe and benchmarks/).
H200_BENCH = LlamaConfig(
    vocab=32000,
    d_model=4096,
    n_heads=32,
    n_kv_heads=8,
    d_ff=14336,
    n_layers=8,
    batch=8,
    seq=4096,
    dtype="bfloat16",
)

# A medium CPU configuration for the quickstart: big enough that decisions matter.
QUICKSTART = LlamaConfig(
    vocab=1024,
    d_model=512,
    n_heads=8,
    n_kv_heads=2,
    d_ff=1536,
    n_layers=4,
    batch=4,
    seq=256,
)


def _rms_norm(x, scale, eps=1e-6):
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (y * scale).astype(x.dtype)


def _rope(x, positions):
    # x: [batch, seq, heads, head_dim]; rotary embedding on pairs of channels.
    half = x.shape[-1] // 2
    freq = 1.0 / (10000.0 ** (jnp.arange(half, dtype=jnp.float32) / half))
    angle = positions[:, :, None, None].astype(jnp.float32) * freq
    sin, cos = jnp.sin(angle), jnp.cos(angle)
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def attention_sublayer(cfg: LlamaConfig, x, layer, positions, h=None):
    """Pre-norm grouped-query attention with its residual: ``x + out_proj(attention)``;
    ``h``: the normed input, when the caller made it (parallel residual)."""
    b, s, _ = x.shape
    if h is None:
        x = checkpoint_name(x, "decoder_layer_input")
        h = _rms_norm(x, layer["attn_norm"])
    q = checkpoint_name(h @ layer["wq"], "query_proj")
    k = checkpoint_name(h @ layer["wk"], "key_proj")
    v = checkpoint_name(h @ layer["wv"], "value_proj")
    q = _rope(q.reshape(b, s, cfg.n_heads, cfg.head_dim), positions)
    k = _rope(k.reshape(b, s, cfg.n_kv_heads, cfg.head_dim), positions)
    v = v.reshape(b, s, cfg.n_kv_heads, cfg.head_dim)
    attn = jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=cfg.attention_impl)
    attn = checkpoint_name(attn.reshape(b, s, cfg.d_model), "attention_out")
    return x + checkpoint_name(attn @ layer["wo"], "out_proj")


def decoder_layer(cfg: LlamaConfig, x, layer, positions):
    """One pre-norm decoder layer. ``layer`` holds this layer's weights."""
    if cfg.parallel_residual:  # x + attn(h) + mlp(h), one norm
        x = checkpoint_name(x, "decoder_layer_input")
        h = _rms_norm(x, layer["attn_norm"])
        x = attention_sublayer(cfg, x, layer, positions, h=h)
    else:
        x = attention_sublayer(cfg, x, layer, positions)
        h = _rms_norm(x, layer["mlp_norm"])
    gate = checkpoint_name(h @ layer["w1"], "mlpwi_0")
    up = checkpoint_name(h @ layer["w3"], "mlpwi_1")
    y = checkpoint_name((jax.nn.silu(gate) * up) @ layer["w2"], "mlpwo")
    return x + y


def init_params(cfg: LlamaConfig, key) -> dict:
    kv = cfg.n_kv_heads * cfg.head_dim
    L, D, F = cfg.n_layers, cfg.d_model, cfg.d_ff
    shapes = {
        "wq": (L, D, D),
        "wk": (L, D, kv),
        "wv": (L, D, kv),
        "wo": (L, D, D),
        "w1": (L, D, F),
        "w3": (L, D, F),
        "w2": (L, F, D),
    }
    params = init_decoder_params(cfg, key, shapes)
    return {**params, "layers": interleave_layers(params["layers"], cfg.layers_per_iter)}


def interleave_layers(layers, k: int):
    """Stacked ``[n, ...]`` layer weights as ``k`` stacks (stack j: layers j, j + k, ...),
    the layout of ``layers_per_iter=k``; ``k = 1`` returns them unchanged."""
    if k == 1:
        return layers
    return tuple(jax.tree.map(lambda w, j=j: w[j::k], layers) for j in range(k))


def init_decoder_params(cfg, key, shapes: dict) -> dict:
    """Stacked layer weights of ``shapes`` (scaled normal), the two norms, embed and unembed."""
    dt, L, D = jnp.dtype(cfg.dtype), cfg.n_layers, cfg.d_model
    keys = jax.random.split(key, len(shapes) + 2)
    layers = {
        n: (jax.random.normal(k, s, jnp.float32) * s[-2] ** -0.5).astype(dt)
        for k, (n, s) in zip(keys, shapes.items())
    }
    layers["attn_norm"] = jnp.ones((L, D), dt)
    layers["mlp_norm"] = jnp.ones((L, D), dt)
    return {
        "embed": (jax.random.normal(keys[-2], (cfg.vocab, D), jnp.float32) * 0.02).astype(dt),
        "layers": layers,
        "final_norm": jnp.ones((D,), dt),
        "unembed": (jax.random.normal(keys[-1], (D, cfg.vocab), jnp.float32) * D**-0.5).astype(dt),
    }


def group_policies(cfg: LlamaConfig) -> tuple:
    """``cfg.remat_policy`` as one policy per checkpoint call site: layer_groups x
    layers_per_iter of them, group-major."""
    G = cfg.layer_groups
    if isinstance(G, bool) or not isinstance(G, int) or G < 1 or cfg.n_layers % G:
        raise ValueError(
            f"layer_groups must be an int >= 1 dividing n_layers={cfg.n_layers}, got {G!r}"
        )
    k = _layers_per_iter(cfg)
    pol = cfg.remat_policy
    if isinstance(pol, (list, tuple)):
        if len(pol) == G:
            return tuple(p for p in pol for _ in range(k))
        if len(pol) == G * k:
            return tuple(pol)
        raise ValueError(
            f"remat_policy is a sequence of {len(pol)} policies but "
            f"layer_groups={G}"
            + (f" x layers_per_iter={k}" if k > 1 else "")
            + ": give one policy, one per group"
            + (f", or one per call site ({G * k})" if k > 1 else "")
        )
    return (pol,) * (G * k)


def _layers_per_iter(cfg) -> int:
    k, per = cfg.layers_per_iter, cfg.n_layers // cfg.layer_groups
    if isinstance(k, bool) or not isinstance(k, int) or k < 1 or per % k:
        raise ValueError(
            f"layers_per_iter must be an int >= 1 dividing the {per} layers of a "
            f"group (n_layers={cfg.n_layers}, layer_groups={cfg.layer_groups}), "
            f"got {k!r}"
        )
    if k > 1 and cfg.layer_loop != "scan":
        raise ValueError(
            f"layers_per_iter={k} applies to layer_loop='scan' only; "
            f"got layer_loop={cfg.layer_loop!r}"
        )
    return k


def forward(cfg: LlamaConfig, params, tokens):
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
    x = params["embed"][tokens]
    policies = group_policies(cfg)
    G, per = cfg.layer_groups, cfg.n_layers // cfg.layer_groups
    k = _layers_per_iter(cfg)
    trips = per // k
    for g in range(G):
        layer_fn = functools.partial(decoder_layer, cfg)
        if cfg.layer_wrap is not None:
            if G != 1:
                raise ValueError(
                    "layer_wrap applies to layer_groups=1 only (slices of host "
                    "weights per group would be copied whole)"
                )
            layer_fn = cfg.layer_wrap(layer_fn)
        fns = [
            jax.checkpoint(
                layer_fn,
                policy=policies[g * k + j],
                prevent_cse=cfg.prevent_cse,
            )
            for j in range(k)
        ]
        # G = 1 uses the stacked weights as they are (no slice): the program of one scan.
        layers = (
            params["layers"]
            if G == 1
            else jax.tree.map(lambda w, g=g: w[g * trips : (g + 1) * trips], params["layers"])
        )
        if cfg.layer_loop == "scan" and k == 1:

            def body(x, layer, fn=fns[0]):
                return fn(x, layer, positions), None

            x, _ = jax.lax.scan(body, x, layers)
        elif cfg.layer_loop == "scan":

            def body_k(x, stacks, fns=fns):  # a trip: layer j from stack j, k call sites
                for fn, layer in zip(fns, stacks):
                    x = fn(x, layer, positions)
                return x, None

            x, _ = jax.lax.scan(body_k, x, layers)
        elif cfg.layer_loop == "loop":
            for i in range(per):
                x = fns[0](x, jax.tree.map(lambda w, i=i: w[i], layers), positions)
        else:
            raise ValueError(f"layer_loop must be 'scan' or 'loop', got {cfg.layer_loop!r}")
    x = _rms_norm(x, params["final_norm"])
    return (x @ params["unembed"]).astype(jnp.float32)


def make_train_step(
    cfg: LlamaConfig = LlamaConfig(),
    *,
    concrete: bool = False,
    lr: float = 1e-3,
    momentum: float = 0.9,
):
    """Returns ``(train_step, (state, batch))`` for ``cfg``.

    ``train_step(state, batch) -> (state, loss)`` with ``state = {"params", "momentum"}``.
    With ``concrete=False`` the example arguments are ``jax.ShapeDtypeStruct``s.
    """
    group_policies(cfg)  # bad layer layouts (groups, layers_per_iter) fail here, not when traced
    return lm_train_step(
        cfg,
        functools.partial(forward, cfg),
        functools.partial(init_params, cfg),
        concrete=concrete,
        lr=lr,
        momentum=momentum,
    )


def lm_loss(forward_fn):
    """Next-token cross-entropy ``loss_of(params, batch)`` of ``forward_fn(params, tokens)``."""

    def loss_of(params, batch):
        logp = jax.nn.log_softmax(forward_fn(params, batch["tokens"]))
        return -jnp.mean(jnp.take_along_axis(logp, batch["targets"][..., None], axis=-1))

    return loss_of


def sgd_momentum_step(forward_fn, *, lr: float, momentum: float):
    """``train_step(state, batch) -> (state, loss)``: the LM loss of ``forward_fn``, SGD with
    momentum; ``state = {"params", "momentum"}``."""
    loss_of = lm_loss(forward_fn)

    def train_step(state, batch):
        loss, grads = jax.value_and_grad(loss_of)(state["params"], batch)
        mom = jax.tree.map(lambda m, g: momentum * m + g.astype(m.dtype), state["momentum"], grads)
        params = jax.tree.map(lambda p, m: (p - lr * m).astype(p.dtype), state["params"], mom)
        return {"params": params, "momentum": mom}, loss

    return train_step


def lm_train_step(cfg, forward_fn, init_fn, *, concrete: bool, lr: float, momentum: float):
    """A language-model train step (next-token cross-entropy, SGD with momentum) for any
    ``forward_fn(params, tokens) -> logits``, and its example arguments."""
    train_step = sgd_momentum_step(forward_fn, lr=lr, momentum=momentum)

    def make_args():
        params = init_fn(jax.random.key(0))
        state = {"params": params, "momentum": jax.tree.map(jnp.zeros_like, params)}
        tokens = jax.random.randint(jax.random.key(1), (cfg.batch, cfg.seq), 0, cfg.vocab)
        return state, {"tokens": tokens, "targets": jnp.roll(tokens, -1, axis=1)}

    return train_step, (make_args() if concrete else jax.eval_shape(make_args))


def profile_quickstart(policy=None):
    """Profile factory for the quickstart model: ``(step built with policy, concrete args)``,
    for ``python -m planner profile examples.llama:profile_quickstart``."""
    return make_train_step(dataclasses.replace(QUICKSTART, remat_policy=policy), concrete=True)


def quickstart():
    """The README's example: ``python -m planner solve examples.llama:quickstart ...``."""
    return make_train_step(QUICKSTART)


def make_adam_step(
    cfg: LlamaConfig = LlamaConfig(),
    *,
    lr: float = 1e-3,
    wrap=None,
    apply=None,
    concrete: bool = True,
):
    """``(train_step, (params, opt_state, batch))``: the LM loss of ``cfg`` with optax's Adam.

    ``train_step(params, opt_state, batch) -> (params, opt_state, loss)``. ``wrap``, if
    given, wraps ``tx.update`` (e.g. ``lambda u: planner.state.streamed_update(u, placement,
    cfg.n_layers)``, which streams host-resident optimizer state per layer slice); the
    optimizer is the same. ``apply``, if given, wraps ``tx.update`` into ``(grads, opt_state,
    params) -> (new params, new opt_state)`` in place of update + ``optax.apply_updates``
    (``lambda u: plan.state.streamed_apply(u)``: parameters in pinned host memory too, with
    ``cfg.layer_wrap`` streaming them into the layers). ``concrete=False``: the arguments as
    ``jax.ShapeDtypeStruct``s.
    """
    import optax

    tx = optax.adam(lr)
    loss_of = lm_loss(functools.partial(forward, cfg))
    apply_update = wrap(tx.update) if wrap else tx.update
    apply_all = apply(tx.update) if apply else None

    def train_step(params, opt_state, batch):
        loss, grads = jax.value_and_grad(loss_of)(params, batch)
        if apply_all is not None:
            params, opt_state = apply_all(grads, opt_state, params)
            return params, opt_state, loss
        updates, opt_state = apply_update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def make_args():
        params = init_params(cfg, jax.random.key(0))
        tokens = jax.random.randint(jax.random.key(1), (cfg.batch, cfg.seq), 0, cfg.vocab)
        batch = {"tokens": tokens, "targets": jnp.roll(tokens, -1, axis=1)}
        return params, tx.init(params), batch

    return train_step, (make_args() if concrete else jax.eval_shape(make_args))


def adam_quickstart():
    """The quickstart model with optax's Adam, jitted donated as it runs, for planning the
    optimizer state's placement: ``python -m planner solve examples.llama:adam_quickstart
    --hbm-gb 0.8 --hardware h200 --opt-state-argnum 1 --params-argnum 0``."""
    step, args = make_adam_step(QUICKSTART)
    return jax.jit(step, donate_argnums=(0, 1)), args


# The long-context decoder of issue 18 (32k tokens as 2 x 16384, cuDNN attention): offloading
# the attention output beat recomputing it on the H200 (benchmarks/results/h200-2026-12-02.md).
LONG_CONTEXT = dataclasses.replace(H200_BENCH, batch=2, seq=16384, attention_impl="cudnn")
