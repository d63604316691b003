"""The model's per-region terms for both anchors and every candidate of a zoo model:
breakdown.py MODEL [HARDWARE]."""

import sys
import warnings

import jax

import planner
from planner._src import cost
from planner._src.types import Assignment
from tests.zoo import MODELS

jax.config.update("jax_platforms", "cpu")

hw = sys.argv[2] if len(sys.argv) > 2 else "cpu"
step, args = MODELS[sys.argv[1]].make()
warnings.simplefilter("ignore")
s = planner.Planner(step, *args, hardware=hw)
m = cost.build_cost_model(s.trace, s.graph, s.hardware, allow_offload=s.offload)
print(
    "anchor remat",
    s.trace.anchor.device_bytes,
    "saved",
    s.trace.anchor_saved.device_bytes,
    "F",
    m.fixed_bytes,
    "omega",
    m.working_set_scale,
)
for label, a in [
    ("remat", Assignment.of({})),
    ("saved", Assignment.of({c.key: "save" for c in s.graph.classes})),
]:
    p = cost.evaluate(m, s.graph, a)
    print(label, "peak", p.peak_bytes, "res", p.residual_bytes, "ws", p.working_set_bytes)
    for rc, r in zip(m.regions, p.regions):
        print(
            "  region",
            r.region_id,
            "L",
            rc.multiplicity,
            "saved",
            r.device_residual_bytes,
            "inv",
            r.invariant_residual_bytes,
            "inputs",
            r.input_residual_bytes,
            "ws",
            r.working_set_bytes,
            "twice",
            r.twice_held_bytes,
        )
for rg in s.graph.regions:
    r = rg.region
    print("region", r.id, "in_scan", r.in_scan, "mult", r.multiplicity)
    for i in r.inputs:
        print(
            "   input",
            i.index,
            getattr(i, "shape", None),
            i.nbytes,
            "needed",
            i.needed,
            "stacked",
            i.stacked,
        )
    for c in r.candidates:
        print(
            f"   {c.index:3d} {c.primitive:22s} {str(c.shape):22s} {c.nbytes:9d} need={int(c.needed)} inv={int(c.loop_invariant)} name={c.name} reads={rg.reads(c.index)} src={c.source.split('/')[-1]}"
        )
