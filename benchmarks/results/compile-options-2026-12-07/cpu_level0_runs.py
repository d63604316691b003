import os, sys, time
os.environ.setdefault("JAX_PLATFORMS","cpu")
import jax, numpy as np
sys.path.insert(0, "."); sys.path.insert(0, "tests")
from zoo import MODELS
for name in ["flax_linen", "flax_nnx", "mamba_linen", "unet_nnx", "gpt2_loop", "dropout", "moe_dense"]:
    e = MODELS[name]
    step, args = e.make()
    outs, ts = [], []
    for opts in [None, {"xla_backend_optimization_level": 0}]:
        c = jax.jit(step).lower(*args).compile(compiler_options=opts)
        o = c(*args); jax.block_until_ready(o)
        t = time.perf_counter(); o = c(*args); jax.block_until_ready(o); ts.append(time.perf_counter() - t)
        outs.append(jax.tree.leaves(o))
    diffs = [float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)))) if np.asarray(a).size else 0.0 for a, b in zip(*outs)]
    print(f"{name:14s} run O2 {ts[0]*1e3:.1f} ms O0 {ts[1]*1e3:.1f} ms  bitwise-equal leaves {sum(d == 0 for d in diffs)}/{len(diffs)} max|diff| {max(diffs):.3g}", flush=True)
