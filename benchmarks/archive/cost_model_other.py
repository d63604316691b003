"""The step-time model against measured H200 steps, split by kernel group (issues 18 and 20).

    JAX_PLATFORMS=cpu python benchmarks/archive/cost_model_other.py [--runs NAMES] [--steps] [--json OUT]

For each measured step below (policy, config and measured figures from the stored results),
the planner's predicted step time for that stock policy on the ``h200`` profile, and its
split the way ``benchmarks/compute_rates.py`` splits a device trace: matmul (gemm), fused
attention, other; "other" further by the primitive that costs it. With ``--steps``, also every
other measured H200 step of the stored tables (stock policies and saved plans). The anchors are
compiled deviceless for the H200 as ``planner.solve(hardware="h200")`` does on a CPU (their
loop-slice copies join T0); ``--no-anchors`` skips them (a minute instead of about fifteen).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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


MS = R + "h200-2026-12-04-offload-must-show/"
TP = R + "throughput-plans-2026-12-04/"
LONG = {"batch": 2, "seq": 16384, "attention_impl": "cudnn"}
LLAMA_CUDNN = {"attention_impl": "cudnn"}
MOE4 = {"n_layers": 4}
# (name, model, config overrides, policy: a stock name or (file, selector) of a saved plan,
#  measured wall ms, source of the measured figure)
STEPS = [
    # h200-2026-12-04-offload-must-show.md: stock policies and plans, 8 layers, 32k tokens
    ("must-show llama nothing_saveable", "llama", LLAMA_CUDNN, "nothing_saveable", 814.6, MS),
    ("must-show llama dots_saveable", "llama", LLAMA_CUDNN, "dots_saveable", 696.9, MS),
    ("must-show llama everything_saveable", "llama", LLAMA_CUDNN, "everything_saveable", 729.4, MS),
    ("must-show long nothing_saveable", "llama", LONG, "nothing_saveable", 1023.8, MS),
    ("must-show long dots_saveable", "llama", LONG, "dots_saveable", 910.5, MS),
    ("must-show long everything_saveable", "llama", LONG, "everything_saveable", 896.7, MS),
    ("must-show moe nothing_saveable", "moe", {}, "nothing_saveable", 850.6, MS),
    *[
        (f"must-show long plan @{b} GB", "llama", LONG, ("long_context", b), ms, MS)
        for b, ms in (("22.95", 1012.6), ("47.08", 852.5), ("71.98", 853.4), ("96.11", 847.9))
    ],
    *[
        (f"must-show llama plan @{b} GB", "llama", LLAMA_CUDNN, ("llama", b), ms, MS)
        for b, ms in (("22.95", 814.1), ("47.08", 680.6), ("71.98", 682.5), ("96.11", 683.0))
    ],
    *[
        (f"must-show moe plan @{b} GB", "moe", {}, ("moe", b), ms, MS)
        for b, ms in (("88.82", 752.3), ("113.16", 746.2), ("136.77", 738.7))
    ],
    # h200-2026-12-04-throughput.md (pipelined-measure3, back to back): 4 layers, XLA
    # attention; step ms = batch x 4096 tokens / measured tokens/s
    *[
        (
            f"throughput llama {pol} b{b}",
            "llama",
            {"n_layers": 4, "batch": b},
            pol,
            4096e3 * b / tps,
            TP,
        )
        for pol, b, tps in (
            ("dots_saveable", 1, 42307),
            ("everything_saveable", 1, 40836),
            ("nothing_saveable", 4, 45467),
        )
    ],
    (
        "throughput llama plan b1",
        "llama",
        {"n_layers": 4, "batch": 1},
        ("tp-llama", 1),
        4096e3 / 44406,
        TP,
    ),
    *[
        (f"throughput moe {pol} b{b}", "moe", {**MOE4, "batch": b}, pol, 4096e3 * b / tps, TP)
        for pol, b, tps in (
            ("dots_saveable", 2, 68408),
            ("nothing_saveable", 5, 73707),
            ("everything_saveable", 1, 59990),
        )
    ],
    ("throughput moe plan b4", "moe", {**MOE4, "batch": 4}, ("tp-moe", 4), 4096e3 * 4 / 82552, TP),
]


def _plan_decisions(which) -> tuple[dict, bool]:
    """(decisions, offloads) of a saved plan: a must-show plan by (model, budget), or the
    chosen plan of a throughput run."""
    key, sel = which
    if key.startswith("tp-"):
        chosen = json.loads(Path(TP, f"plan-{key[3:]}.json").read_text())["chosen"]
        assert chosen["batch"] == sel and chosen["policy"]["kind"] == "plan", chosen
        dec = dict(chosen["policy"]["decisions"])
    else:
        f = "results-moe.jsonl" if key == "moe" else "results-llama-long.jsonl"
        for line in Path(MS, f).read_text().splitlines():
            r = json.loads(line)
            if r.get("kind") == "plan" and r["model"] == key and r["budget_gb"] == sel:
                dec = dict(r["policy"]["decisions"])
                break
        else:
            raise KeyError(which)
    return dec, "offload" in dec.values()


_TRACES: dict = {}


def _traced(model: str, cfg: dict, policy=None):
    """(trace, graph) of the example at ``cfg``, traced as ``planner.solve(hardware="h200")``
    does on a CPU: the anchors compiled deviceless for the H200 (their loop-slice copies join
    T0), or not compiled at all with --no-anchors."""
    from benchmarks import gpu_bench as gb
    from planner._src.graph import build_graph
    from planner._src.trace import trace_step
    from planner._src.xla import deviceless
    from planner._src.xla import targets as T

    key = json.dumps([model, cfg], sort_keys=True)
    if key not in _TRACES:
        module, config = gb._model({"model": model, "config": cfg}, policy)
        step, args = module.make_train_step(config)
        if _ANCHORS:
            target = T.resolve("h200")
            with deviceless.target_scope(target):
                trace = trace_step(
                    step,
                    deviceless.args_for(target, args),
                    backend="gpu",
                    compiler=target.description,
                )
        else:
            trace = trace_step(step, args)
        _TRACES[key] = (trace, build_graph(trace))
    return _TRACES[key]


_ANCHORS = True


def predict_step(step_row) -> dict:
    """The model's step time for one measured step (a stock policy or a saved plan)."""
    from benchmarks import gpu_bench as gb
    from planner._src.cost import build_cost_model, evaluate
    from planner._src.cost.baselines import stock_assignment
    from planner._src.types import Assignment

    name, model, over, policy, wall, src = step_row
    cfg = dict(gb.MOE_BENCH if model == "moe" else gb.BENCH)
    cfg.update(over)
    trace, graph = _traced(model, cfg)
    if isinstance(policy, str):
        assignment, offloads = stock_assignment(graph, policy), False
    else:
        dec, offloads = _plan_decisions(policy)
        known = {c.key for c in graph.classes}
        missing = sorted(set(dec) - known)
        if missing:
            raise KeyError(f"{name}: plan classes not in this trace: {missing[:3]}")
        assignment = Assignment.of(dec)
    cost = build_cost_model(trace, graph, "h200", allow_offload=offloads)
    pred = evaluate(cost, graph, assignment)
    ms = 1e3 * pred.step_s
    return {"name": name, "predicted_ms": ms, "measured_ms": wall, "error": ms / wall - 1}


def _no_compile():
    """Skip the trace stage's anchor compiles: they feed the memory model, not the time."""
    from planner._src.xla import compile as xla_compile

    class _Mem:
        argument_size_in_bytes = output_size_in_bytes = alias_size_in_bytes = 0
        temp_size_in_bytes = host_temp_size_in_bytes = 0

    class _Compiled:
        def memory_analysis(self):
            return _Mem()

        def as_text(self):
            return ""

    xla_compile.compile_lowered = lambda *a, **k: _Compiled()
    xla_compile.lower = lambda traced, *a, **k: None


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
    from planner._src.cost import build_cost_model, evaluate
    from planner._src.cost.baselines import stock_assignment
    from planner._src.policies import STOCK

    name, model, over, policy, wall, measured, src = run
    cfg = dict(gb.MOE_BENCH if model == "moe" else gb.BENCH)
    cfg.update(over)
    t0 = time.time()
    trace, graph = _traced(model, cfg)
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
    # base step (docs/cost-model.md); they are fusible or views, so "other".
    from planner._src.cost.build import _time_divisor

    left_out = 0.0
    for rg in graph.regions:
        for c in rg.region.candidates:
            written = getattr(c, "residual_write_bytes", None)  # None before the rule
            if c.needed and not c.loop_invariant and written is not None:
                w = written / _time_divisor(c) / hw.hbm_bytes_per_s
                left_out += rg.region.multiplicity * w
    base["other"] -= left_out
    # The anchor's loop-slice copies (T0 on XLA:GPU): copy kernels, "other" in a trace.
    loop_copies = getattr(trace.anchor, "loop_copy_bytes", 0) / hw.loop_copy_rate()
    base["other"] += loop_copies
    base_prims = defaultdict(float)
    out = defaultdict(float)
    step_jaxpr = None
    try:
        from planner._src.xla import adapter

        module, config = gb._model({"model": model, "config": cfg}, STOCK[policy].policy())
        step, args = module.make_train_step(config)
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
        "loop_copies_ms": 1e3 * loop_copies,
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
    ap.add_argument("--steps", action="store_true", help="also every measured step (STEPS)")
    ap.add_argument(
        "--no-anchors",
        action="store_true",
        help="skip the anchor compiles (fast; T0 then lacks the anchor's loop-slice copies)",
    )
    args = ap.parse_args()
    if args.no_anchors:
        global _ANCHORS
        _ANCHORS = False
        _no_compile()
    wanted = set(filter(None, args.runs.split(",")))
    out: dict = {"runs": [], "steps": [], "anchors": _ANCHORS}
    for run in RUNS:
        if wanted and run[0] not in wanted:
            continue
        out["runs"].append(predict(run))
        print(json.dumps(out["runs"][-1]), flush=True)
    for st in STEPS if args.steps else ():
        out["steps"].append(predict_step(st))
        print(json.dumps(out["steps"][-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
