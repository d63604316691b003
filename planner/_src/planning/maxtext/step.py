"""MaxText's train step built from its config the way MaxText's AOT compile builds it
(abstract state, shardings, the jitted step), and a synthetic batch to run it on."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from planner._src.errors import InvalidArgumentError
from planner._src.planning.maxtext.config import import_maxtext, load_config


@dataclasses.dataclass(frozen=True)
class Built:
    """MaxText's train step as ``train_compile`` builds it (abstract arguments)."""

    step: Callable  # jax.jit(train_step, in/out shardings, donate_argnums=0)
    args: tuple  # (abstract state, shaped batch), ShapeDtypeStructs with shardings
    config: Any
    mesh: Any
    # () -> the concrete train state, initialised as MaxText's setup_initial_state does it
    # (jit of the model and optimizer factory), placed with the step's input shardings: for
    # running the step (benchmarks/maxtext_step.py), not needed to plan it
    init: Callable | None = None


def _devices_needed(config) -> int:
    n = 1
    for prefix in ("ici", "dcn"):
        for k in dir(config):
            if k.startswith(prefix + "_") and k.endswith("_parallelism"):
                v = getattr(config, k, 1)
                if isinstance(v, int) and v > 1:
                    n *= v
    return n


def build(config_path: str | None, overrides: Mapping[str, str]) -> Built:
    """MaxText's train step from the config, with abstract state (the package docstring, 1)."""
    import jax
    from flax import nnx
    from flax.core.spmd import logical_axis_rules as axis_rules
    from maxtext.common import train_state_nnx
    from maxtext.optimizers import optimizers
    from maxtext.utils import maxtext_utils, model_creation_utils, sharding

    _, _, train, _ = import_maxtext()
    config = load_config(config_path, overrides)
    try:
        mesh = maxtext_utils.get_mesh_from_config(config, jax.devices())
    except Exception as e:  # noqa: BLE001
        need = _devices_needed(config)
        raise InvalidArgumentError(
            f"MaxText could not build its mesh here ({type(e).__name__}: {e}).\nWhy: the "
            f"config's ici_* / dcn_* parallelism asks for {need} devices and this process has "
            f"{jax.device_count()} ({jax.default_backend()}); the planner builds MaxText's own "
            "sharding, so the per-device figures need the mesh.\nFix: on a CPU, start Python "
            f"with XLA_FLAGS=--xla_force_host_platform_device_count={need} (the command "
            "`python -m planner maxtext ... --host-devices N` does it), or lower the "
            "parallelism."
        ) from e
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
    functional, in_sh, out_sh, _, donate = maxtext_utils.get_functional_train_with_signature(
        train.train_step, data_sharding, input_shardings, graphdef, config, params_shardings
    )

    def train_step(state, batch):
        # train_compile.jit_and_compile traces inside the mesh and the logical-axis rules.
        with (
            jax.sharding.use_abstract_mesh(mesh.abstract_mesh),
            axis_rules(config.logical_axis_rules),
        ):
            return functional(state, batch)

    train_step.__name__ = "train_step"
    step = jax.jit(train_step, in_shardings=in_sh, out_shardings=out_sh, donate_argnums=donate)

    def init():
        with axis_rules(config.logical_axis_rules):
            return jax.jit(lambda: nnx.state(create_train_state_fn()), out_shardings=in_sh[0])()

    return Built(
        step=step, args=(abstract_state, shaped_batch), config=config, mesh=mesh, init=init
    )


def synthetic_batch(shaped, vocab: int, seed: int = 0) -> dict:
    """A concrete batch of the shapes and shardings ``shaped`` (``Built.args[1]``): random
    tokens in [1, vocab), positions 0..L-1, one segment per row."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {}
    for k, s in shaped.items():
        if k in ("inputs", "targets"):
            a = rng.integers(1, vocab, size=s.shape, dtype=np.int32)
        elif k.endswith("_position"):
            a = np.broadcast_to(np.arange(s.shape[-1], dtype=np.int32), s.shape).copy()
        else:  # segmentation: one segment per row
            a = np.ones(s.shape, dtype=np.int32)
        out[k] = jax.device_put(jnp.asarray(a, dtype=s.dtype), s.sharding)
    return out
