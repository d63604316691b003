"""The frontier walk without and with the fitted mid correction (mid_correction.py), budget
by budget on one Planner: compiles per budget (the walk's rounds) and the answer. Compiles
are shared through the Planner's memo, so seconds here mean nothing; counts do.

Usage (repo root), one of:
  python walk_budgets.py llama3-70b target 0.8,0.85,0.9,0.95,1.0   (fractions of H200 HBM)
  python walk_budgets.py quickstart local 0.42,0.40                 (GB, as planning_time.py)
  python walk_budgets.py zoo/NAME                 (plan-equality's budgets of compile-speed)
"""

import json
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
from planner._src.planning.context import Timings  # noqa: E402
from planner._src.planning.mid_correction import fit_mid_correction  # noqa: E402
from planner._src.planning.walk import REACH_FRACTION  # noqa: E402

BUDGETS = "benchmarks/results/plan-equality/compile-speed-b877d76-jax0.12.0.1.json"
name = sys.argv[1]
if name.startswith("zoo/"):
    from tests.zoo import MODELS

    step, args = MODELS[name[4:]].make()
    record = next(m for m in json.load(open(BUDGETS))["models"] if m["model"] == name)
    gbs = [b["hbm_gb"] for b in record["budgets"]]
    kw = {"hardware": "cpu-made-up"}
elif name == "quickstart":
    from examples.llama import QUICKSTART, make_train_step

    step, args = make_train_step(QUICKSTART)
    gbs = [float(x) for x in sys.argv[3].split(",")]
    kw = {"hardware": "h200", "compiler": sys.argv[2]}
else:
    from examples import frontier as F

    cfg = F.CONFIGS[name]
    jax.config.update("jax_num_cpu_devices", cfg.n_devices)
    step, args = F.make_train_step(cfg)
    hbm = cm.load_profile("h200").hbm_bytes / 1e9
    gbs = [float(x) * hbm for x in sys.argv[3].split(",")]
    kw = {"hardware": "h200", "compiler": sys.argv[2], "verify_compile": True}
t = time.perf_counter()
p = planner.Planner(step, *args, **kw)
tr = p.trace
saved = None if tr.anchor_saved is None else tr.anchor_saved.device_bytes
print(f"{name}: Planner {time.perf_counter() - t:.1f} s; anchors {tr.anchor.device_bytes} {saved}")


def run(tag):
    for gb in gbs:
        t = time.perf_counter()
        plan = p.plan(hbm_gb=gb)
        walk = [r for r in plan.rounds if r.purpose == "walk"]
        print(
            f"{tag} {name} {gb:.6g} GB usable {plan.budget.usable} walk {len(walk)} "
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


run("before")
t = time.perf_counter()
with p.subject.scope():
    mid = fit_mid_correction(p.subject, p._solves, Timings(), p.trace, p.graph, where_it_pays=False)
print(
    f"mid correction {mid} ({time.perf_counter() - t:.1f} s); the rule uses it: {used is not None}",
    flush=True,
)
if mid is not None:
    p.mid_correction = mid
    run("after")
