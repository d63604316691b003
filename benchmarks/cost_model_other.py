"""The step-time model against measured H200 steps, split by kernel group (issues 18 and 20).

    JAX_PLATFORMS=cpu python benchmarks/cost_model_other.py [--runs NAMES] [--json OUT]

For each measured step below (policy, config and measured figures from the stored results),
the planner's predicted step time for that stock policy on the ``h200`` profile, and its
split the way ``benchmarks/compute_rates.py`` splits a device trace: matmul (gemm), fused
attention, other; "other" further by the primitive that costs it. Only a trace is needed: the
anchor compiles the trace stage makes for its memory model are skipped (they do not enter the
time prediction), so this runs on any CPU in a few minutes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

R = "benchmarks/results/"
# (name, model, config overrides, policy, measured wall ms, measured kernels by group, source)
RUNS = [
    (
        "llama-8x4096-remat-cudnn",
        "llama",
        {"attention_impl": "cudnn"},
        "nothing_saveable",
        829.3,
        {"gemm": 656.7, "attention": 94.6, "other": 68.7},
        R + "h200-2026-12-04-compute-rates/kernels-llama-remat.json",
    ),
    (
        "llama-8x4096-dots-cudnn",
        "llama",
        {"attention_impl": "cudnn"},
        "dots_saveable",
        705.9,
        {"gemm": 529.0, "attention": 94.2, "other": 63.0},
        R + "h200-2026-12-04-compute-rates/kernels-llama-dots.json",
    ),
    (
        "long-2x16384-remat-cudnn",
        "llama",
        {"batch": 2, "seq": 16384, "attention_impl": "cudnn"},
        "nothing_saveable",
        1043.1,
        {"gemm": 635.5, "attention": 331.7, "other": 66.8},
        R + "h200-2026-12-04-compute-rates/kernels-long-remat.json",
    ),
    (
        "moe-8x4096-remat",
        "moe",
        {},
        "nothing_saveable",
        855.7,
        {"gemm": 417.8, "other": 417.8},
        R + "h200-2026-12-04-compute-rates/kernels-moe-remat.json",
    ),
    (
        "llama4L-4x4096-remat-xla",
        "llama",
        {"n_layers": 4, "batch": 4},
        "nothing_saveable",
        368.6,
        {"gemm": 225.2, "other": 138.8},
        R + "h200-2026-12-04-throughput/kernels-llama-b4-remat.json",
    ),
    (
        "llama4L-1x4096-dots-xla",
        "llama",
        {"n_layers": 4, "batch": 1},
        "dots_saveable",
        98.7,
        {"gemm": 41.5, "other": 45.8},
        R + "h200-2026-12-04-throughput/kernels-llama-b1-dots.json",
    ),
]


def _no_compile():
    """Skip the trace stage's anchor compiles: they feed the memory model, not the time."""
    from planner._src import trace as tr

    class _Mem:
        argument_size_in_bytes = output_size_in_bytes = alias_size_in_bytes = 0
        temp_size_in_bytes = host_temp_size_in_bytes = 0

    class _Compiled:
        def memory_analysis(self):
            return _Mem()

        def as_text(self):
            return ""

    tr.targets.compile_lowered = lambda *a, **k: _Compiled()
    tr.targets.lower = lambda traced, *a, **k: None


def group_of(key: str, cost) -> str:
    if cost.attention:
        return "attention"
    if cost.matmul_flops > 0:
        return "gemm"
    return "other"


def split_jaxpr(jaxpr, hw, mult: float, out: dict, prims: dict) -> None:
    """Seconds of ``jaxpr`` per kernel group and, within "other", per primitive; walks
    loops and calls as ``cost_models.work_of`` does."""
    import cost_models as cm
    from cost_models import _fusion as fu

    jx = fu._inner(jaxpr)
    for e, c in zip(jx.eqns, fu.fused_eqn_costs(jx), strict=True):
        name = e.primitive.name
        subs = fu._subjaxprs(e)
        if subs and name == "scan":
            split_jaxpr(subs[0], hw, mult * int(e.params["length"]), out, prims)
        elif subs and name in fu._CALLS + ("while", "cond"):
            for s in subs[:1]:
                split_jaxpr(s, hw, mult, out, prims)
        else:
            s = mult * c.seconds(hw, fu.rate_key(fu.matmul_key(e), hw))
            g = group_of("", c)
            out[g] += s
            if g == "other":
                prims[name] += s
    del cm


def predict(run) -> dict:
    import cost_models as cm
    from benchmarks import gpu_bench as gb
    from planner._src.baselines import stock_assignment
    from planner._src.cost import build_cost_model, evaluate
    from planner._src.graph import build_graph
    from planner._src.policies import STOCK
    from planner._src.trace import trace_step

    name, model, over, policy, wall, measured, src = run
    cfg = dict(gb.MOE_BENCH if model == "moe" else gb.BENCH)
    cfg.update(over)
    module, config = gb._model({"model": model, "config": cfg}, STOCK[policy].policy())
    step, args = module.make_train_step(config)
    t0 = time.time()
    trace = trace_step(step, args)
    graph = build_graph(trace)
    hw = cm.load_profile("h200")
    cost = build_cost_model(trace, graph, "h200", allow_offload=False)
    pred = evaluate(cost, graph, stock_assignment(graph, policy))
    # Split: the base step (forward + backward, nothing recomputed) from its kernels; the
    # recompute from each recomputed candidate's cost.
    base = defaultdict(float)
    for key, c in trace.step_work.kernels:
        base[group_of(key, c)] += c.seconds(hw, cm.rate_key(key, hw))
    rec = defaultdict(float)
    rec_prims = defaultdict(float)
    assignment = stock_assignment(graph, policy)
    from planner._src.cost import decisions_per_candidate

    for rg, rc, dec, p in zip(
        graph.regions, cost.regions, decisions_per_candidate(graph, assignment), pred.regions
    ):
        for c in rg.region.candidates:
            i = c.index
            if p.needed[i] and dec[i] == "remat":
                g = "gemm" if c.primitive in ("dot_general", "ragged_dot_general") else "other"
                if any(k.attention for _, k in c.work.kernels):
                    g = "attention"
                rec[g] += rc.multiplicity * rc.recompute_s[i]
                if g == "other":
                    rec_prims[c.primitive] += rc.multiplicity * rc.recompute_s[i]
    # T0's forward writes of values kept only as residuals, which the model leaves out of the
    # base step (cost.py); they are fusible or views, so "other".
    from planner._src.cost import _time_divisor

    left_out = 0.0
    for rg in graph.regions:
        for c in rg.region.candidates:
            if c.needed and not c.loop_invariant and c.residual_write_bytes is not None:
                w = c.residual_write_bytes / _time_divisor(c) / hw.hbm_bytes_per_s
                left_out += rg.region.multiplicity * w
    base["other"] -= left_out
    base_prims = defaultdict(float)
    out = defaultdict(float)
    step_jaxpr = None
    try:
        from planner._src import jax_adapter as adapter

        traced, _ = adapter.trace_step_with(step, args, lambda rid, r: adapter.everything_saveable)
        step_jaxpr = traced.jaxpr
        split_jaxpr(step_jaxpr, hw, 1.0, out, base_prims)
    except Exception as e:  # noqa: BLE001
        print("split failed:", e, file=sys.stderr)
    groups = sorted(set(base) | set(rec) | set(measured))
    predicted_ms = 1e3 * pred.step_s
    return {
        "name": name,
        "policy": policy,
        "config": cfg,
        "source": src,
        "measured_wall_ms": wall,
        "measured_ms": measured,
        "predicted_ms": predicted_ms,
        "error": predicted_ms / wall - 1,
        "base_ms": {g: 1e3 * base[g] for g in groups},
        "recompute_ms": {g: 1e3 * rec[g] for g in groups},
        "materialize_ms": 1e3 * pred.materialize_s,
        "residual_writes_left_out_ms": 1e3 * left_out,
        "model_ms": {
            g: 1e3 * (base[g] + rec[g] + (pred.materialize_s if g == "other" else 0.0))
            for g in groups
        },
        "base_other_by_primitive_ms": {
            k: round(1e3 * v, 2) for k, v in sorted(base_prims.items(), key=lambda kv: -kv[1])
        },
        "recompute_other_by_primitive_ms": {
            k: round(1e3 * v, 2) for k, v in sorted(rec_prims.items(), key=lambda kv: -kv[1])
        },
        "trace_s": time.time() - t0,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", default="", help="comma-separated names (default: all)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    _no_compile()
    wanted = set(filter(None, args.runs.split(",")))
    rows = []
    for run in RUNS:
        if wanted and run[0] not in wanted:
            continue
        r = predict(run)
        rows.append(r)
        print(json.dumps(r), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
