import os, sys, time
os.environ.setdefault("JAX_PLATFORMS","cpu")
import jax
sys.path.insert(0, "."); sys.path.insert(0, "tests")
from zoo import MODELS
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_policies as cp
def mem(c):
    m = c.memory_analysis()
    return (m.argument_size_in_bytes, m.output_size_in_bytes, m.alias_size_in_bytes, m.temp_size_in_bytes, m.generated_code_size_in_bytes)
tot = [0, 0]
bad = 0
for name, e in MODELS.items():
    if e.skip_reason(): continue
    for pol in [None, cp.nothing_saveable, cp.dots_saveable]:
        try:
            step, args = e.make_with_policy(pol) if pol else e.make()
        except Exception as ex:
            print(name, "skip", type(ex).__name__); break
        res = []
        for opts in [None, {"xla_backend_optimization_level": 0}]:
            lo = jax.jit(step).lower(*args)
            t = time.perf_counter(); c = lo.compile(compiler_options=opts); dt = time.perf_counter() - t
            res.append((dt, mem(c)))
        same = res[0][1][:4] == res[1][1][:4]
        bad += not same
        tot[0] += res[0][0]; tot[1] += res[1][0]
        print(f"{name:28s} {getattr(pol,'__name__',str(pol)):20s} O2 {res[0][0]:.2f}s O0 {res[1][0]:.2f}s same={same} {res[0][1][:4] if not same else ''} {res[1][1][:4] if not same else ''}", flush=True)
print("total", tot, "differ", bad)
