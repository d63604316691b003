"""Penzai's own Llama-like transformer (``penzai.models.transformer``), tiny, checkpointed.

The model is ``llamalike_common.build_llamalike_transformer`` (the builder behind penzai's
Llama / Mistral / Gemma variants) with tiny sizes: ``layers="stack"`` (default) sets
``use_layer_stack=True`` (one ``pz.nn.LayerStack``, run under ``jax.lax.scan``),
``layers="unrolled"`` builds one block per layer. Gradient checkpointing is applied the way
penzai's docs say (``penzai.toolshed.gradient_checkpointing``): select every
``TransformerBlock`` and wrap it in ``Checkpointed(block, policy=...)``. The step is penzai's
own ``basic_training.StatefulTrainer`` step function (optax AdamW), built with ``jit=False``
and called on the unbound model and frozen variable values, as ``StatefulTrainer.step`` calls
it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

DEFAULTS = dict(
    vocab=256,
    d_model=64,
    n_kv_heads=2,
    q_per_kv=2,
    head_dim=16,
    d_ff=256,
    n_layers=2,
    seq=128,
    batch=4,
    lr=3e-4,
    layers="stack",
)


def skip_reason():
    try:
        import penzai  # noqa: F401
    except ImportError as e:
        return f"penzai is not installed ({e})"
    return None


def make(policy=None, **overrides):
    """``(train_step, (params, trainer_state, state_vars, root_rng, inputs, targets))``.

    The step returns ``(params, trainer_state, state_vars, loss)``.
    """
    from penzai import pz
    from penzai.models.transformer import model_parts
    from penzai.models.transformer.variants import llamalike_common
    from penzai.toolshed import basic_training, gradient_checkpointing

    cfg = {**DEFAULTS, **overrides}
    config = llamalike_common.LlamalikeTransformerConfig(
        num_kv_heads=cfg["n_kv_heads"],
        query_head_multiplier=cfg["q_per_kv"],
        embedding_dim=cfg["d_model"],
        projection_dim=cfg["head_dim"],
        mlp_hidden_dim=cfg["d_ff"],
        num_decoder_blocks=cfg["n_layers"],
        vocab_size=cfg["vocab"],
        mlp_variant="swiglu",
        tie_embedder_and_logits=False,
        parameter_dtype=jnp.float32,
        activation_dtype=jnp.float32,
        use_layer_stack=cfg["layers"] == "stack",
    )
    model = llamalike_common.build_llamalike_transformer(config, init_base_rng=jax.random.key(0))
    model = (
        pz.select(model)
        .at_instances_of(model_parts.TransformerBlock)
        .apply(lambda block: gradient_checkpointing.Checkpointed(block, policy=policy))
    )

    def loss_fn(*, model, state, rng, inputs, targets):
        logits = model(inputs)
        nll = pz.nx.nmap(optax.softmax_cross_entropy_with_integer_labels)(
            logits.untag("vocabulary"), targets
        )
        loss = nll.untag("batch", "seq").unwrap().mean()
        return loss, state, loss  # aux = the loss: StatefulTrainer's step returns only aux

    trainer = basic_training.StatefulTrainer.build(
        root_rng=jax.random.key(42),
        model=model,
        optimizer_def=optax.adamw(cfg["lr"]),
        loss_fn=loss_fn,
        jit=False,
    )

    # What StatefulTrainer.step does around its step function, without the in-place updates.
    stateless_model, variables = pz.unbind_variables(trainer.model)
    trainable = tuple(
        v for v in variables if isinstance(v, pz.Parameter) and v.metadata.get("trainable", True)
    )
    frozen = tuple(
        v
        for v in variables
        if isinstance(v, pz.Parameter) and not v.metadata.get("trainable", True)
    )
    state_vars = tuple(v for v in variables if isinstance(v, pz.StateVariable))

    # The unbound model is closed over, not passed as an argument the way StatefulTrainer's
    # jitted step takes it: ``Checkpointed.policy`` is a pytree field (not static), so a
    # model holding a policy function is not a valid ``jax.jit`` argument.
    frozen = pz.freeze_variables(frozen)

    def train_step(params, trainer_state, state_vars, root_rng, inputs, targets):
        loss, params, state_vars, trainer_state = trainer.step_fn(
            root_rng=root_rng,
            state=trainer_state,
            stateless_model=stateless_model,
            trainable_params=params,
            frozen_params=frozen,
            state_vars=state_vars,
            loss_fn=trainer.loss_fn,
            optimizer_def=trainer.optimizer_def,
            kwargs=dict(inputs=inputs, targets=targets),
        )
        return params, trainer_state, state_vars, loss

    tokens = jax.random.randint(jax.random.key(1), (cfg["batch"], cfg["seq"] + 1), 0, cfg["vocab"])
    inputs = pz.nx.wrap(tokens[:, :-1]).tag("batch", "seq")
    targets = pz.nx.wrap(tokens[:, 1:]).tag("batch", "seq")
    args = (
        pz.freeze_variables(trainable),
        trainer.state.value,
        pz.freeze_variables(state_vars),
        trainer.root_rng,
        inputs,
        targets,
    )
    return train_step, args


def make_with_policy(policy, **overrides):
    return make(policy=policy, **overrides)
