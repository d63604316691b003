import os, sys, warnings, time
os.environ.setdefault("JAX_PLATFORMS","cpu")
sys.path.insert(0, ".")
warnings.simplefilter("ignore")
import jax
from examples import frontier as F
cfg = F.CONFIGS["llama3-70b"]
jax.config.update("jax_num_cpu_devices", cfg.n_devices)
import planner, cost_models as cm
hw = cm.load_profile("h200")
step, args = F.make_train_step(cfg)
t = time.perf_counter()
plan = planner.solve(step, *args, hbm_gb=0.9 * hw.hbm_bytes / 1e9, hardware="h200", verify_compile=True, compiler=sys.argv[1])
print("s", time.perf_counter() - t, plan.solution.status, "usable", plan.budget.usable)
for r in plan.rounds: print(r.purpose, r.predicted_peak_bytes, r.compiled_device_bytes, None if not r.compiled_device_bytes else round(r.compiled_device_bytes / r.predicted_peak_bytes - 1, 4), r.outcome)
for b in plan.baselines: print("  stock", b.name, b.prediction.peak_bytes, round(b.prediction.step_s, 3))
print(plan.report().split("planning time")[1][:600] if "planning time" in plan.report() else "")
