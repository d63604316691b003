"""The model's terms per stock policy for a zoo model: policies.py MODEL [POLICY...]."""

import sys
import warnings

import jax

import planner
from planner._src import cost
from planner._src.cost.baselines import stock_assignment
from tests.zoo import MODELS

jax.config.update("jax_platforms", "cpu")

name = sys.argv[1]
pols = sys.argv[2:] or [
    "nothing_saveable",
    "dots_with_no_batch_dims_saveable",
    "dots_saveable",
    "everything_saveable",
]
step, args = MODELS[name].make()
warnings.simplefilter("ignore")
s = planner.Planner(step, *args, hardware="cpu")
m = cost.build_cost_model(s.trace, s.graph, s.hardware, allow_offload=s.offload)
print(
    "jax", jax.__version__, "hoists", s.trace.hoists_recompute, "twice", s.trace.holds_rereads_twice
)
print(
    "anchors",
    s.trace.anchor.device_bytes,
    s.trace.anchor_saved.device_bytes,
    "F",
    m.fixed_bytes,
    "omega",
    m.working_set_scale,
)
for pol in pols:
    a = stock_assignment(s.graph, pol)
    p = cost.evaluate(m, s.graph, a)
    print(f"{pol}: peak {p.peak_bytes:,} res {p.residual_bytes:,} ws {p.working_set_bytes:,}")
    for rg, rc, r in zip(s.graph.regions, m.regions, p.regions):
        dec = cost.decisions_per_candidate(s.graph, a)[0]
        print(
            f"   L {rc.multiplicity} saved {r.device_residual_bytes:,} inv {r.invariant_residual_bytes:,} inputs {r.input_residual_bytes:,} twice {r.twice_held_bytes:,} hoisted {r.hoisted_bytes:,} hinv {r.invariant_hoisted_bytes:,} released {r.released_bytes:,} ws {r.working_set_bytes:,}"
        )
        kept = [
            f"{c.index}:{c.primitive}:{c.nbytes}"
            for c in rg.region.candidates
            if r.needed[c.index] and dec[c.index] == "save" and c.nbytes
        ]
        print("   saved:", " ".join(kept))
        rem = [
            f"{c.index}:{c.primitive}:{c.nbytes}"
            for c in rg.region.candidates
            if r.needed[c.index] and dec[c.index] == "remat" and c.nbytes
        ]
        print("   remat needed:", " ".join(rem))
