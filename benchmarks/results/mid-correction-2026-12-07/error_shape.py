"""The memory model's error between the anchors, plan by plan: the model's fastest plan at
several caps between the anchors' compiled bytes, each compiled. Usage (repo root):
python error_shape.py MODEL [target|xla-cpu] [F,...] (F <= 1: that share of the way between
the anchors; F > 1: a cap of F GB)  (MODEL: a config of examples/frontier.py)."""

import os
import sys
import time
import warnings

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, ".")
warnings.simplefilter("ignore")
import jax  # noqa: E402

import planner  # noqa: E402
from planner._src.cost import build_cost_model  # noqa: E402
from planner._src.errors import InfeasibleBudgetError  # noqa: E402
from planner._src.planning.attempt import attempt  # noqa: E402
from planner._src.planning.context import Timings, normalize  # noqa: E402
from planner._src.planning.walk import grid_cap, grid_index_at_most  # noqa: E402

model = sys.argv[1]
fracs = [
    float(x)
    for x in (sys.argv[3].split(",") if len(sys.argv) > 3 else "0.2,0.35,0.5,0.65,0.8".split(","))
]
t0 = time.perf_counter()
if model.startswith("llama3") or model.startswith("deepseek"):
    from examples import frontier as F

    cfg = F.CONFIGS[model]
    jax.config.update("jax_num_cpu_devices", cfg.n_devices)
    step, args = F.make_train_step(cfg)
    p = planner.Planner(step, *args, hardware="h200", compiler=sys.argv[2], verify_compile=True)
else:
    from benchmarks import plan_equality as PE  # noqa

    raise SystemExit("zoo: use the zoo harness")
print("planner", round(time.perf_counter() - t0, 1), "s", flush=True)
tr, g = p.trace, p.graph
lo, hi = tr.anchor.device_bytes, tr.anchor_saved.device_bytes
print("anchors", lo, hi, "scale_check", tr.scale_check)

cost = build_cost_model(tr, g, p.hardware, allow_offload=p.subject.offload)
print(
    "omega",
    cost.working_set_scale,
    "fixed",
    cost.fixed_bytes,
    "unconfirmed",
    cost.unconfirmed_scale,
)
seen = set()
for f in fracs:
    cap = grid_cap(grid_index_at_most(f * 1e9 if f > 1 else lo + f * (hi - lo)))
    try:
        sol = p._solves(g, cost, cap, p.subject.options.solver)
    except InfeasibleBudgetError:
        print(f, "infeasible")
        continue
    plan = normalize(g, cost, sol.assignment)
    if plan in seen:
        print(f, "same plan")
        continue
    seen.add(plan)
    t = time.perf_counter()
    att = attempt(p.subject, Timings(), tr, g, cost, plan, cap, label=f"f{f}")
    pred = att.prediction.peak_bytes
    c = att.verification.compiled_device_bytes
    print(
        f"frac {f} cap {cap} pos {(pred - lo) / (hi - lo):.3f} pred {pred} compiled {c} err {(c - pred) / pred:+.4f} errB {c - pred} step {att.prediction.step_s:.4f} {time.perf_counter() - t:.1f}s",
        flush=True,
    )
