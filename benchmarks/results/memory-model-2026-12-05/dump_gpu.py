"""The same, compiled deviceless for the H200 (planner/_src/target.py; /work/venvs/v0112):
dump_gpu.py MODEL POLICY."""

import importlib
import sys

import jax

from planner._src import target as tg

jax.config.update("jax_platforms", "cpu")

name, pol = sys.argv[1], sys.argv[2]
mod = importlib.import_module("tests.zoo." + name)
step, args = mod.make_with_policy(getattr(jax.checkpoint_policies, pol))
t = tg.resolve("h200", num_devices=1)
print(t.description, t.exact)
prog = tg.compile_traced(t, step, tg.args_for(t, args))
f = tg.read_figures(t, prog.compiled)
print(
    pol,
    "arg",
    f.argument_bytes,
    "out",
    f.output_bytes,
    "alias",
    f.alias_bytes,
    "temp",
    f.temp_bytes,
    "device",
    f.device_bytes / 1e6,
)
