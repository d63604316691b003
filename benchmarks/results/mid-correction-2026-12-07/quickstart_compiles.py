"""The quickstart (benchmarks/planning_time.py's part) with the mid correction off or on (fitted
with the rule of mid_correction.py, as the Planner did by default at c6ae01f): XLA
compiles and seconds per stage, one fresh process each.
Usage (repo root): python quickstart_compiles.py off|on"""

import os
import sys
import time
import warnings

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, ".")
warnings.simplefilter("ignore")

import jax  # noqa: E402

import planner  # noqa: E402
from examples.llama import QUICKSTART, make_train_step  # noqa: E402
from planner._src.planning.context import Timings  # noqa: E402
from planner._src.planning.mid_correction import fit_mid_correction  # noqa: E402
from planner._src.xla import memo  # noqa: E402

puts = []
put = memo.CompileMemo.put
memo.CompileMemo.put = lambda self, key, c: (puts.append(key), put(self, key, c))[1]
step, args = make_train_step(QUICKSTART)
t = time.perf_counter()
jax.jit(step).lower(*args).compile()
plain = time.perf_counter() - t
print(f"plain compile {plain:.2f} s")
t, n = time.perf_counter(), 0
p = planner.Planner(step, *args, hardware="h200", compiler="local")
if sys.argv[1] == "on":  # as the Planner fitted it by default at c6ae01f
    with p.subject.scope():
        p.mid_correction = fit_mid_correction(p.subject, p._solves, Timings(), p.trace, p.graph)
for gb in (0.42, 0.40):
    plan = p.plan(gb)
    s = time.perf_counter() - t
    walk = sum(r.purpose == "walk" for r in plan.rounds)
    print(
        f"{sys.argv[1]} after {gb} GB: {len(puts) - n} XLA compiles (Planner's memo hits "
        f"{p.subject.compiles.hits}), walk rounds {walk}, {s:.2f} s = {s / plain:.2f}x, "
        f"step {plan.prediction.step_s:.6g} compiled {plan.verification.compiled_device_bytes}"
    )
    t, n = time.perf_counter(), len(puts)
print("mid correction", p.mid_correction)
