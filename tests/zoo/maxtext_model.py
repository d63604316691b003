"""MaxText's own train step (``maxtext.trainers.pre_train.train.train_step``) from its config.

Built the way MaxText's AOT compile (``maxtext/trainers/pre_train/train_compile.py``,
``get_shaped_inputs``) builds it, with the local devices instead of a target topology:
``pyconfig.initialize`` on ``configs/base.yml`` with tiny overrides, the mesh from
``maxtext_utils.get_mesh_from_config``, the NNX model from
``model_creation_utils.create_nnx_abstract_model``, the optimizer from
``optimizers.get_optimizer``, the abstract ``TrainStateNNX`` state and its shardings from
``maxtext_utils.get_abstract_state``, the batch from ``maxtext_utils.get_shaped_batch`` and
the step from ``maxtext_utils.get_functional_train_with_signature(train.train_step, ...)``.
The step enters the mesh and the logical-axis rules while it traces, as ``train_compile``'s
``jit_and_compile`` does around ``lower``.

``make(**overrides)`` takes MaxText config keys (``scan_layers=False``,
``remat_policy="minimal"``, ...; see ``OVERRIDES``). ``concrete=True`` (default) initializes the
state the way ``maxtext_utils.setup_initial_state`` does (``jax.jit`` of the init function with
the state shardings) and a synthetic batch; ``concrete=False`` returns ``train_compile``'s
``jax.ShapeDtypeStruct``s (with their shardings).

MaxText takes its checkpoint policy from the config only (``remat_policy`` names a preset or
``custom`` with ``tensors_on_device`` / ``tensors_to_offload``); there is no place for a
policy callable. ``make_with_policy(policy)`` therefore sets ``remat_policy=full`` (so every
layer is wrapped in MaxText's own ``jax.checkpoint``) and, while the step traces, makes
``NNXDecoder.get_remat_policy`` return ``policy``: the callable reaches exactly the
``jax.checkpoint(..., policy=...)`` call sites MaxText's presets reach.

Needs Python >= 3.12, ``maxtext==0.2.5`` and its dependencies (a venv of its own; see
``tests/zoo/__init__.py``).
"""

from __future__ import annotations

import contextlib
import os
from unittest import mock

OVERRIDES = dict(
    model_name="default",
    base_emb_dim=64,
    base_num_query_heads=4,
    base_num_kv_heads=4,
    base_mlp_dim=256,
    base_num_decoder_layers=4,
    head_dim=16,
    vocab_size=256,
    per_device_batch_size=4,
    max_target_length=128,
    scan_layers=True,
    remat_policy="full",
    attention="dot_product",
    dtype="float32",
    weight_dtype="float32",
    dataset_type="synthetic",
    enable_checkpointing=False,
    enable_tensorboard=False,
    enable_goodput_recording=False,
    monitor_goodput=False,
    steps=1,
    run_name="zoo",
    base_output_directory="/tmp/maxtext-zoo",  # hardware stays base.yml's "tpu": "cpu" means
    # multi-process CPU (it initializes jax.distributed from JOB_INDEX); "tpu" runs on the local CPU
    jax_cache_dir="",  # base.yml's "~/jax_cache" turns on JAX's persistent compilation cache
)


def skip_reason():
    import sys

    if sys.version_info < (3, 12):
        return "MaxText 0.2.5 needs Python >= 3.12"
    try:
        import maxtext  # noqa: F401
        from maxtext.trainers.pre_train import train  # noqa: F401
    except Exception as e:  # ImportError, or a dependency failing at import
        return f"maxtext is not importable here ({type(e).__name__}: {e})"
    return None


def make(policy=None, concrete=True, **overrides):
    """``(train_step, (state, batch))``; the step returns ``(state, loss)``.

    ``policy`` (a ``jax.checkpoint`` policy callable) is applied at MaxText's checkpoint call
    sites as described in the module docstring; ``None`` keeps the config's ``remat_policy``.
    """
    import jax
    import jax.numpy as jnp
    import maxtext
    from flax import nnx
    from flax.core.spmd import logical_axis_rules as axis_rules
    from maxtext.common import train_state_nnx
    from maxtext.configs import pyconfig
    from maxtext.layers import nnx_decoders
    from maxtext.optimizers import optimizers
    from maxtext.trainers.pre_train import train
    from maxtext.utils import maxtext_utils, model_creation_utils, sharding

    cfg = {**OVERRIDES, **overrides}
    if policy is not None:
        cfg["remat_policy"] = "full"
    base_yml = os.path.join(os.path.dirname(maxtext.__file__), "configs", "base.yml")
    argv = ["", base_yml] + [f"{k}={v}" for k, v in cfg.items()]
    config = pyconfig.initialize(argv)

    # train_compile.get_shaped_inputs, on the local devices.
    mesh = maxtext_utils.get_mesh_from_config(config, jax.devices())
    create_model, model = model_creation_utils.create_nnx_abstract_model(config, mesh)
    schedule = maxtext_utils.create_learning_rate_schedule(config)
    tx = optimizers.get_optimizer(config, schedule, model, mesh=mesh)

    def create_train_state_fn():
        nnx_model = create_model()
        return train_state_nnx.TrainStateNNX(nnx_model, nnx.Optimizer(nnx_model, tx, wrt=nnx.Param))

    abstract_state, _, state_mesh_shardings = maxtext_utils.get_abstract_state(
        config, mesh, create_train_state_fn, True
    )
    with axis_rules(config.logical_axis_rules):
        graphdef, _ = nnx.split(nnx.eval_shape(create_train_state_fn))
    data_sharding = sharding.get_input_data_sharding(config, mesh)
    shaped_batch = maxtext_utils.get_shaped_batch(config, batch_sharding=data_sharding)
    params_shardings, state_mesh_shardings = sharding.maybe_update_params_sharding_with_opt(
        config, state_mesh_shardings
    )
    input_shardings = sharding.build_zero1_input_state_mesh_shardings(
        config, state_mesh_shardings, params_shardings
    )
    functional_train, *_ = maxtext_utils.get_functional_train_with_signature(
        train.train_step, data_sharding, input_shardings, graphdef, config, params_shardings
    )

    def policy_patch():
        if policy is None:
            return contextlib.nullcontext()
        return mock.patch.object(nnx_decoders.NNXDecoder, "get_remat_policy", lambda self: policy)

    def train_step(state, batch):
        with (
            jax.sharding.use_abstract_mesh(mesh.abstract_mesh),
            axis_rules(config.logical_axis_rules),
            policy_patch(),
        ):
            new_state, metrics = functional_train(state, batch)
        return new_state, metrics["scalar"]["learning/loss"]

    if not concrete:
        return train_step, (abstract_state, shaped_batch)

    # maxtext_utils.setup_initial_state without a checkpoint, and a synthetic batch.
    with jax.set_mesh(mesh), axis_rules(config.logical_axis_rules):
        state = jax.jit(
            lambda: nnx.state(create_train_state_fn()),
            in_shardings=None,
            out_shardings=state_mesh_shardings,
        )()
    b, t = shaped_batch["inputs"].shape
    tokens = jax.random.randint(jax.random.key(1), (b, t + 1), 1, config.vocab_size)
    positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    segments = jnp.ones((b, t), jnp.int32)
    batch = dict(
        inputs=tokens[:, :-1],
        inputs_position=positions,
        inputs_segmentation=segments,
        targets=tokens[:, 1:],
        targets_position=positions,
        targets_segmentation=segments,
    )
    batch = {
        k: jax.device_put(v.astype(shaped_batch[k].dtype), shaped_batch[k].sharding)
        for k, v in batch.items()
        if k in shaped_batch
    }
    return train_step, (state, batch)


def make_with_policy(policy, **overrides):
    return make(policy=policy, **overrides)
