"""Plan MODEL at BUDGET_MB, print the plan's model terms per candidate and (with XLA dump
flags set) compile the plan's policy on the zoo model: plan_terms.py MODEL BUDGET_MB"""

import sys
import warnings

import jax

import planner
from planner._src import cost
from tests.zoo import MODELS

jax.config.update("jax_platforms", "cpu")

name, budget = sys.argv[1], float(sys.argv[2])
step, args = MODELS[name].make()
warnings.simplefilter("ignore")
s = planner.Planner(step, *args, hardware="cpu")
p = s.plan(budget / 1e3)
print(
    "choice",
    p.choice,
    "pred",
    p.prediction.peak_bytes,
    "F",
    p.prediction.fixed_bytes,
    "compiled",
    p.verification.compiled_device_bytes,
)
m = cost.build_cost_model(s.trace, s.graph, s.hardware, allow_offload=s.offload)
a = p.assignment
e = cost.evaluate(m, s.graph, a)
print(
    "uncorrected pred",
    e.peak_bytes,
    "res",
    e.residual_bytes,
    "ws",
    e.working_set_bytes,
    "F",
    m.fixed_bytes,
)
dec = cost.decisions_per_candidate(s.graph, a)
for rg, r, d in zip(s.graph.regions, e.regions, dec):
    print(
        f"  saved {r.device_residual_bytes:,} inv {r.invariant_residual_bytes:,} inputs {r.input_residual_bytes:,} twice {r.twice_held_bytes:,} hoisted {r.hoisted_bytes:,} hinv {r.invariant_hoisted_bytes:,} released {r.released_bytes:,} ws {r.working_set_bytes:,}"
    )
    held = cost.held_values(rg, d, list(r.needed))
    tw = cost.twice_held(rg, m.regions[0], d, list(r.needed))
    for c in rg.region.candidates:
        if r.needed[c.index] and c.nbytes >= 4096:
            print(
                f"   {c.index:3d} {c.primitive:18s} {str(c.shape):18s} {c.nbytes:8d} {d[c.index]:6s} needed={int(c.needed)} held={int(held[c.index])} twice={int(tw[c.index])} inv={int(c.loop_invariant)} reads={rg.reads(c.index)}"
            )
pol = p.policy
step2, args2 = MODELS[name].make_with_policy(pol)
ma = jax.jit(step2).lower(*args2).compile().memory_analysis()
print(
    "recompiled",
    ma.argument_size_in_bytes
    + ma.output_size_in_bytes
    - ma.alias_size_in_bytes
    + ma.temp_size_in_bytes,
    "temp",
    ma.temp_size_in_bytes,
)
