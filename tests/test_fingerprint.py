"""The step's fingerprint: one record (program, arguments, JAX) that plan files, ``apply`` and
planning caches share. Equal for the same step and arguments in any trace; each kind of change
is named by ``differences``; the key changes with every field."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from planner._src.fingerprints import StepFingerprint, argument_signature
from planner._src.xla.fingerprint import step_fingerprint


def _step(params, batch):
    def loss(p):
        return jnp.mean(jnp.tanh(batch["x"] @ p["w"]) ** 2)

    return jax.grad(loss)(params)


def _args(batch=8, dtype=jnp.float32):
    return (
        {"w": jnp.ones((16, 4), dtype)},
        {"x": jnp.ones((batch, 16), dtype)},
    )


def test_the_same_step_twice_is_the_same_fingerprint():
    a = step_fingerprint(_step, _args())
    b = step_fingerprint(_step, _args())
    assert a == b and a.key == b.key and a.differences(b) == []
    assert a.arguments == ("args[0]['w']: float32[16,4]", "args[1]['x']: float32[8,16]")
    assert a.jax == jax.__version__


def test_another_batch_size_names_the_argument_and_the_program():
    a = step_fingerprint(_step, _args(batch=8))
    b = step_fingerprint(_step, _args(batch=32))
    diff = a.differences(b)
    assert a.key != b.key
    assert any("args[1]['x']: float32[8,16] here, float32[32,16] for the plan" in d for d in diff)
    assert any(d.startswith("the program:") for d in diff)


def test_another_model_with_the_same_arguments_is_another_program():
    def other(params, batch):
        return jax.grad(lambda p: jnp.mean(jnp.sin(batch["x"] @ p["w"])))(params)

    a, b = step_fingerprint(_step, _args()), step_fingerprint(other, _args())
    assert a.arguments == b.arguments
    assert [d.split(":")[0] for d in a.differences(b)] == ["the program"]


def test_another_jax_is_named_and_old_records_compare_on_what_they_have():
    a = step_fingerprint(_step, _args())
    older = StepFingerprint(program=a.program, arguments=a.arguments, jax="0.0.1", jaxlib="0.0.1")
    assert [d.split(":")[0] for d in a.differences(older)] == ["JAX"]
    assert a.key != older.key
    # a plan file of an older planner recorded the program only
    assert a.differences(StepFingerprint(program=a.program)) == []
    assert StepFingerprint.from_json(a.to_json()) == a


def test_argument_signature_of_every_kind_of_leaf():
    sig = argument_signature(
        (
            jax.ShapeDtypeStruct((2, 3), jnp.bfloat16),
            np.zeros((4,), np.int32),
            3,
            1.5,
            jax.random.key(0),
        )
    )
    assert sig == (
        "args[0]: bfloat16[2,3]",
        "args[1]: int32[4]",
        "args[2]: python int",
        "args[3]: python float",
        "args[4]: key<fry>[]",
    )
