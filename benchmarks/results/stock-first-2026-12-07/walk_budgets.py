"""The frontier walk with stock first off or on (planning/stock_first.py), budget by budget
on one Planner in a fresh process: the walk's compiles per budget, the stock policies
compiled so far, and the answer. Seconds mean little on a loaded machine; counts do.

Usage (repo root), one of:
  python walk_budgets.py off|on llama3-70b target 0.8,0.85,0.9,0.95,1.0  (fractions of H200 HBM)
  python walk_budgets.py off|on quickstart local 0.42,0.40                (GB)
"""

import os
import sys
import time
import warnings

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, ".")
warnings.simplefilter("ignore")

import jax  # noqa: E402

import cost_models as cm  # noqa: E402
import planner  # noqa: E402
from planner._src.planning import stock_first  # noqa: E402
from planner._src.xla import memo  # noqa: E402

mode, name, compiler, figures = sys.argv[1:5]
stock_first.ENABLED = mode == "on"
puts = []
put = memo.CompileMemo.put
memo.CompileMemo.put = lambda self, key, c: (puts.append(key), put(self, key, c))[1]
if name == "quickstart":
    from examples.llama import QUICKSTART, make_train_step

    step, args = make_train_step(QUICKSTART)
    gbs = [float(x) for x in figures.split(",")]
    kw = {"hardware": "h200", "compiler": compiler}
else:
    from examples import frontier as F

    cfg = F.CONFIGS[name]
    jax.config.update("jax_num_cpu_devices", cfg.n_devices)
    step, args = F.make_train_step(cfg)
    hbm = cm.load_profile("h200").hbm_bytes / 1e9
    gbs = [float(x) * hbm for x in figures.split(",")]
    kw = {"hardware": "h200", "compiler": compiler, "verify_compile": True}
t = time.perf_counter()
p = planner.Planner(step, *args, **kw)
print(f"{mode} {name}: Planner {time.perf_counter() - t:.1f} s, {len(puts)} XLA compiles")
for gb in gbs:
    t, n = time.perf_counter(), len(puts)
    plan = p.plan(hbm_gb=gb)
    walk = [r for r in plan.rounds if r.purpose == "walk"]
    print(
        f"{mode} {name} {gb:.6g} GB usable {plan.budget.usable}: walk compiles {len(walk)}, "
        f"XLA compiles {len(puts) - n}, stock compiled {len(p.stock.compiled_bytes)}; "
        f"choice {plan.choice} compiled {plan.verification.compiled_device_bytes} "
        f"step {plan.prediction.step_s:.6g} ({time.perf_counter() - t:.1f} s)",
        flush=True,
    )
    for r in walk:
        print(
            f"    pred {r.predicted_peak_bytes} compiled {r.compiled_device_bytes} "
            f"step {r.predicted_step_s:.6g} {r.outcome}",
            flush=True,
        )
    if plan.walk_note:
        print(f"    walk note: {plan.walk_note}")
