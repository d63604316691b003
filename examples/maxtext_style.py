"""A decoder configured the way MaxText is: a config dict, tensors named as MaxText names them,
and ``remat_policy: custom`` turned into JAX's ``save_and_offload_only_these_names``.

This shows the round trip a MaxText user makes: plan, paste ``plan.maxtext_yaml`` into the
config, and the model builds the same policy from it:

    plan = planner.solve(*maxtext_style.make(), hbm_gb=0.02, hardware="cpu")
    config = maxtext_style.apply_yaml(maxtext_style.DEFAULT_CONFIG, yaml.safe_load(plan.maxtext_yaml))
    step, args = maxtext_style.make(config)       # runs with the planned policy

``policy_from_config`` follows MaxText's decoder (layers/decoders.py, ``get_remat_policy``):
for ``remat_policy: custom`` each named tensor's value is ``remat``, ``device`` (saved in
HBM) or ``offload`` (to pinned host memory).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jax.ad_checkpoint import checkpoint_policies as cp

# The tensor names of MaxText's `remat_policy: custom` options (configs/base.yml) that this
# decoder layer produces.
TENSOR_NAMES = (
    "decoder_layer_input",
    "query_proj",
    "key_proj",
    "value_proj",
    "context",
    "out_proj",
    "mlpwi_0",
    "mlpwi_1",
    "mlpwo",
)
VALUES = ("remat", "device", "offload")

DEFAULT_CONFIG = {
    "emb_dim": 64,
    "mlp_dim": 256,
    "num_query_heads": 4,
    "head_dim": 16,
    "num_decoder_layers": 3,
    "vocab_size": 128,
    "per_device_batch_size": 4,
    "max_target_length": 64,
    "dtype": "float32",
    "scan_layers": True,
    "remat_policy": "custom",
    **{name: "remat" for name in TENSOR_NAMES},
    "decoder_layer_input": "device",
}


def apply_yaml(config: dict, block: dict) -> dict:
    """``config`` updated with a parsed MaxText YAML block (e.g. ``plan.maxtext_yaml``)."""
    unknown = sorted(k for k in block if k not in config)
    if unknown:
        raise KeyError(
            f"{unknown} are not keys of this model's config.\nWhy: MaxText only "
            f"knows the tensor names {TENSOR_NAMES}.\nFix: plan this model, whose "
            "tensors carry those names, or drop the unknown keys."
        )
    return {**config, **block}


def policy_from_config(config: dict):
    """The checkpoint policy MaxText builds for ``config["remat_policy"]``.

    ``full`` saves nothing; ``minimal`` saves every projection; ``custom`` reads each name's
    value (``remat`` / ``device`` / ``offload``), as MaxText's decoder does.
    """
    rp = config["remat_policy"]
    if rp == "full":
        return cp.nothing_saveable
    if rp == "minimal":
        return cp.save_only_these_names(*[n for n in TENSOR_NAMES if n != "context"])
    if rp == "everything":  # not a MaxText option: the save-everything end of the range
        return cp.everything_saveable
    if rp != "custom":
        raise ValueError(f"remat_policy {rp!r} is not one of 'full', 'minimal', 'custom'.")
    bad = {n: config[n] for n in TENSOR_NAMES if config[n] not in VALUES}
    if bad:
        raise ValueError(
            f"remat_policy: custom needs each of {TENSOR_NAMES} to be one of {VALUES}; got {bad}."
        )
    return cp.save_and_offload_only_these_names(
        names_which_can_be_saved=[n for n in TENSOR_NAMES if config[n] == "device"],
        names_which_can_be_offloaded=[n for n in TENSOR_NAMES if config[n] == "offload"],
        offload_src="device",
        offload_dst="pinned_host",
    )


def config_with(remat_policy: str) -> dict:
    """``DEFAULT_CONFIG`` with another ``remat_policy`` (``full``, ``minimal``, ...)."""
    return {**DEFAULT_CONFIG, "remat_policy": remat_policy}


def _rms(x):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6)


def decoder_layer(config, x, w):
    """Pre-norm attention and SwiGLU MLP; every tensor MaxText names carries its name."""
    b, s, _ = x.shape
    nh, hd = config["num_query_heads"], config["head_dim"]
    x = checkpoint_name(x, "decoder_layer_input")
    h = _rms(x)
    q = checkpoint_name(h @ w["wq"], "query_proj").reshape(b, s, nh, hd)
    k = checkpoint_name(h @ w["wk"], "key_proj").reshape(b, s, nh, hd)
    v = checkpoint_name(h @ w["wv"], "value_proj").reshape(b, s, nh, hd)
    ctx = jax.nn.dot_product_attention(q, k, v, is_causal=True).reshape(b, s, nh * hd)
    x = x + checkpoint_name(checkpoint_name(ctx, "context") @ w["wo"], "out_proj")
    h = _rms(x)
    gate = checkpoint_name(h @ w["wi_0"], "mlpwi_0")
    up = checkpoint_name(h @ w["wi_1"], "mlpwi_1")
    return x + checkpoint_name((jax.nn.silu(gate) * up) @ w["wo_mlp"], "mlpwo")


def init_params(config: dict, key) -> dict:
    d, f, hd = config["emb_dim"], config["mlp_dim"], config["num_query_heads"] * config["head_dim"]
    n, dt = config["num_decoder_layers"], jnp.dtype(config["dtype"])
    shapes = {
        "wq": (n, d, hd),
        "wk": (n, d, hd),
        "wv": (n, d, hd),
        "wo": (n, hd, d),
        "wi_0": (n, d, f),
        "wi_1": (n, d, f),
        "wo_mlp": (n, f, d),
    }
    keys = jax.random.split(key, len(shapes) + 1)
    layers = {
        name: (jax.random.normal(k, s) * s[-2] ** -0.5).astype(dt)
        for k, (name, s) in zip(keys, shapes.items())
    }
    return {
        "embed": (jax.random.normal(keys[-1], (config["vocab_size"], d)) * 0.02).astype(dt),
        "layers": layers,
    }


def loss_fn(config, params, tokens):
    layer = jax.checkpoint(
        functools.partial(decoder_layer, config),
        policy=policy_from_config(config),
        prevent_cse=not config["scan_layers"],
    )
    x = params["embed"][tokens]
    if config["scan_layers"]:
        x, _ = jax.lax.scan(lambda x, w: (layer(x, w), None), x, params["layers"])
    else:
        for i in range(config["num_decoder_layers"]):
            x = layer(x, jax.tree.map(lambda a, i=i: a[i], params["layers"]))
    logits = _rms(x) @ params["embed"].T
    targets = jnp.roll(tokens, -1, axis=1)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], -1))


def make(config: dict | None = None):
    """``(train_step, (params, tokens))`` for ``config`` (default ``DEFAULT_CONFIG``)."""
    config = dict(DEFAULT_CONFIG if config is None else config)
    policy_from_config(config)  # fail here, with the reason, on a bad remat_policy block

    def train_step(params, tokens):
        loss, grads = jax.value_and_grad(functools.partial(loss_fn, config))(params, tokens)
        return jax.tree.map(lambda p, g: p - 1e-2 * g, params, grads), loss

    tokens = jax.random.randint(
        jax.random.key(1),
        (config["per_device_batch_size"], config["max_target_length"]),
        0,
        config["vocab_size"],
    )
    return train_step, (init_params(config, jax.random.key(0)), tokens)
