"""Find a configuration for issue 21's H200 must-show with the planner's own model (CPU).

    JAX_PLATFORMS=cpu python benchmarks/state_offload_config.py probe '{"seq": 256, "batch": 1}'
    JAX_PLATFORMS=cpu python benchmarks/state_offload_config.py plan '{"seq": 256, "batch": 16}' \
        --hbm-gb 58.3 [--margin 0.0] [--save plan.json]

``probe``: one Planner session on examples/llama.py's Adam step (state_offload_h200.CONFIG
with the JSON's overrides), compiled deviceless for the H200 (XLA:GPU without the GPU):
full remat's and save-everything's compiled device bytes with the whole state in HBM (the
trace's anchors) and the model's predicted step time of full remat: configuration (b) at
this batch. ``plan``: the mixed plan (planner.state.plan_state, compiled as applied) at
``--hbm-gb`` and the activation plan of (a) (the whole optimizer state on the host, the
same solve with the state's bytes out of the fixed bytes, its copies added as the model's
state terms) with their predicted step times; ``--margin`` overrides the share of the
temporaries the deviceless bound leaves free (xla.targets.DEVICELESS_TEMP_FRACTION), for plans that the device's
own compile checks before they run (state_offload_h200.py). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def _session(over: dict):
    import jax
    import state_offload_h200 as h

    import planner
    from examples import llama

    h.CONFIG = {**h.CONFIG, **over}
    cfg = h._cfg(h.CONFIG["batch"])
    step, args = llama.make_adam_step(cfg, concrete=False)
    # Donated as the harness runs it: without donation the anchors count the new parameters
    # and state as outputs beside the old (F too large by the whole train state).
    step = jax.jit(step, donate_argnums=(0, 1))
    t = time.perf_counter()
    session = planner.Planner(step, *args, hardware="h200")
    return h, cfg, args, session, time.perf_counter() - t


def probe(over: dict) -> dict:
    from planner._src.cost import build_cost_model, evaluate
    from planner._src.cost.baselines import stock_assignment

    h, cfg, args, s, trace_s = _session(over)
    tr, graph = s.trace, s.graph
    cost = build_cost_model(tr, graph, s.hardware, allow_offload=s.offload)
    full = evaluate(cost, graph, stock_assignment(graph, "nothing_saveable"))
    tokens = cfg.batch * cfg.seq
    return {
        "config": h.CONFIG,
        "trace_s": round(trace_s, 1),
        "full_remat_device_bytes": tr.anchor.device_bytes,
        "save_all_device_bytes": tr.anchor_saved.device_bytes if tr.anchor_saved else None,
        "io_bytes": tr.anchor.argument_bytes + tr.anchor.output_bytes - tr.anchor.alias_bytes,
        "full_remat_step_s": full.step_s,
        "base_step_s": cost.base_step_s,
        "full_remat_tokens_per_s": tokens / full.step_s,
        "predicted_peak_bytes": full.peak_bytes,
    }


def plan(over: dict, hbm_gb: float, margin: float | None) -> dict:
    import planner
    from planner._src.budget import io_bytes, usable_bytes
    from planner._src.cost import build_cost_model, evaluate
    from planner._src.cost import state as st
    from planner._src.solve import solve_assignment

    h, cfg, args, s, trace_s = _session(over)
    if margin is not None:
        s.compiler = dataclasses.replace(s.compiler, margin=margin)

    def build(policy, placement):
        jitted, a, _ = h._build(
            dataclasses.replace(cfg, remat_policy=policy),
            "mixed",
            placement.on_host,
            concrete=False,
        )
        return jitted, a

    t = time.perf_counter()
    sp = planner.state.plan_state(s, hbm_gb, opt_state_argnum=1, params_argnum=0, build=build)
    plan_s = time.perf_counter() - t
    names = [(c.key, c.name) for c in s.graph.classes]
    tokens = cfg.batch * cfg.seq
    out = {
        "config": h.CONFIG,
        "hbm_gb": hbm_gb,
        "margin": s.compiler.margin,
        "trace_s": round(trace_s, 1),
        "plan_s": round(plan_s, 1),
        "mixed": {
            "decisions": [list(d) for d in sp.solution.assignment.decisions],
            "names": names,
            "on_host": sorted(sp.placement.on_host),
            "summary": sp.summary(),
            "predicted_step_s": sp.prediction.step_s,
            "predicted_tokens_per_s": tokens / sp.prediction.step_s,
            "exposed_s": sp.prediction.exposed_transfer_s,
            "usable_bytes": sp.usable_bytes,
            "compiled_device_bytes": sp.compiled.device_bytes if sp.compiled else None,
            "host_bytes": sp.placement.host_bytes(),
        },
    }
    # (a): every movable optimizer-state leaf on the host, the activations solved for the room
    # that frees (the same solve with all state leaves forced to the host: their bytes out of
    # F, their per-slice copies in the time; MaxText's update brings the state back whole,
    # which the harness compiles and measures).
    tr, graph, hw = s.trace, s.graph, s.hardware
    budget = usable_bytes(int(hbm_gb * 1e9), hw, io_bytes(tr), s.margin)
    cost = build_cost_model(tr, graph, hw, allow_offload=s.offload)
    leaves = sp.placement.leaves
    movable = frozenset(x.path for x in leaves if x.movable)
    terms = st.evaluate_state(st.leaf_costs(leaves, hw), movable)
    cost_a = dataclasses.replace(cost, fixed_bytes=cost.fixed_bytes - terms.saved_bytes)
    sol_a = solve_assignment(graph, cost_a, budget, s.options.solver)
    pred_a = evaluate(cost_a, graph, sol_a.assignment)
    step_a = pred_a.step_s + terms.exposed_s
    out["whole"] = {
        "decisions": [list(d) for d in sol_a.assignment.decisions],
        "names": names,
        "predicted_step_s": step_a,
        "predicted_tokens_per_s": tokens / step_a,
        "exposed_state_s": terms.exposed_s,
        "host_bytes": terms.host_bytes,
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["probe", "plan"])
    ap.add_argument("config", help="JSON overrides of state_offload_h200.CONFIG")
    ap.add_argument("--hbm-gb", type=float)
    ap.add_argument("--margin", type=float, default=None)
    ap.add_argument("--save", type=Path)
    a = ap.parse_args()
    over = json.loads(a.config)
    res = probe(over) if a.cmd == "probe" else plan(over, a.hbm_gb, a.margin)
    if a.save:
        a.save.write_text(json.dumps(res, indent=1) + "\n")
    brief = {k: v for k, v in res.items() if k not in ("mixed", "whole")}
    for k in ("mixed", "whole"):
        if k in res:
            brief[k] = {x: y for x, y in res[k].items() if x not in ("decisions", "names")}
    print(json.dumps(brief))


if __name__ == "__main__":
    main()
