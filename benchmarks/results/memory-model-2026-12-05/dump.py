"""Compile a tests/zoo model under a stock policy on this JAX's XLA:CPU and print
memory_analysis() (run with XLA_FLAGS=--xla_dump_to=DIR ...): dump.py MODEL POLICY."""

import importlib
import sys

import jax

jax.config.update("jax_platforms", "cpu")

name, pol = sys.argv[1], sys.argv[2]
mod = importlib.import_module("tests.zoo." + name)
policy = getattr(jax.checkpoint_policies, pol)
step, args = mod.make_with_policy(policy)
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
