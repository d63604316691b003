import sys, importlib, jax
jax.config.update("jax_platforms", "cpu")
from planner._src import target as tg
name, pol = sys.argv[1], sys.argv[2]
mod = importlib.import_module("tests.zoo." + name)
step, args = mod.make_with_policy(getattr(jax.checkpoint_policies, pol))
t = tg.resolve("h200", num_devices=1)
print(t.description, t.exact)
prog = tg.compile_traced(t, step, tg.args_for(t, args))
f = tg.read_figures(t, prog.compiled)
print(pol, "arg", f.argument_bytes, "out", f.output_bytes, "alias", f.alias_bytes, "temp", f.temp_bytes, "device", f.device_bytes / 1e6)
