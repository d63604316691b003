import sys, jax
jax.config.update("jax_platforms", "cpu")
from tests.zoo import MODELS
import importlib
name, pol = sys.argv[1], sys.argv[2]
mod = importlib.import_module("tests.zoo." + name)
policy = getattr(jax.checkpoint_policies, pol)
step, args = mod.make_with_policy(policy)
m = jax.jit(step).lower(*args).compile().memory_analysis()
print(pol, "arg", m.argument_size_in_bytes, "out", m.output_size_in_bytes, "alias", m.alias_size_in_bytes, "temp", m.temp_size_in_bytes,
      "device", (m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes)/1e6)
