# The 200-layer Python-loop model of planning_time.py: the step as written and plan.apply(step),
# each traced (and lowered) three times by a fresh jax.jit (no trace cache hit), seconds.
# JAX_PLATFORMS=cpu python benchmarks/results/applied-trace-2026-12-07/applied_trace.py
import sys, time
sys.path.insert(0, "benchmarks")
import jax
from planning_time import loop_model, session_budget_gb
import planner
step, args = loop_model(200)
def tm(mk, n=3):
    ts = []
    for _ in range(n):
        f = mk()
        t = time.perf_counter(); f(); ts.append(round(time.perf_counter() - t, 3))
    return ts
session = planner.Planner(step, *args, hardware="cpu", check_numerics=False)
lo = session.trace.anchor.device_bytes; hi = session.trace.anchor_saved.device_bytes
plan = session.plan(session_budget_gb(session, (lo + hi) / 2))
print("plain trace", tm(lambda: (lambda: jax.jit(lambda *a: step(*a)).trace(*args))))
print("applied trace", tm(lambda: (lambda: jax.jit(plan.apply(step, check=False)).trace(*args))))
print("plain lower", tm(lambda: (lambda: jax.jit(lambda *a: step(*a)).lower(*args))))
print("applied lower", tm(lambda: (lambda: jax.jit(plan.apply(step, check=False)).lower(*args))))
print("plain full", tm(lambda: (lambda: jax.jit(lambda *a: step(*a)).lower(*args).compile())))
from planner._src.xla import adapter

from planner._src.xla.compile import lower_with
from planner._src.verify.sites import policy_maker
make = policy_maker(plan.graph, plan.emitted.policy, plan.emitted.policies)
print("lower_with", tm(lambda: (lambda: lower_with(step, args, make))))
import cProfile, pstats
pr = cProfile.Profile(); pr.enable(); lower_with(step, args, make); pr.disable()
st = pstats.Stats(pr); st.sort_stats("tottime").print_stats(12)
