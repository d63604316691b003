"""dump_zoo.py MODEL POLICY: compile a tests/zoo entry (MODELS name) under a stock policy."""

import sys

import jax

from tests.zoo import MODELS

jax.config.update("jax_platforms", "cpu")

name, pol = sys.argv[1], sys.argv[2]
step, args = MODELS[name].make_with_policy(getattr(jax.checkpoint_policies, pol))
m = jax.jit(step).lower(*args).compile().memory_analysis()
print(
    pol,
    "arg",
    m.argument_size_in_bytes,
    "out",
    m.output_size_in_bytes,
    "alias",
    m.alias_size_in_bytes,
    "temp",
    m.temp_size_in_bytes,
    "device",
    (
        m.argument_size_in_bytes
        + m.output_size_in_bytes
        - m.alias_size_in_bytes
        + m.temp_size_in_bytes
    )
    / 1e6,
)
