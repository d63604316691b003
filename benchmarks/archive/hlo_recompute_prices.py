"""Measured H200 steps re-predicted with the recompute priced from the compiled HLO (issue 18).

For each plan file given (``gpu_bench.py plan`` / ``offload_must_show.py plan``): trace its
model as ``planner.Planner(..., hardware="h200")`` does on a CPU (deviceless XLA:GPU for the
H200, per call site, merged; with ``hardware`` given, so the trace prices the scanned
regions' recompute from the full-remat anchor compiled with Triton GEMMs on), build the
cost model twice -- the library's recompute prices (the trace's HLO prices ignored: "old")
and the HLO's (what ``build_cost_model`` does now: "new") -- and ``cost.evaluate`` every
plan of the file and the stock policies that ran, next to the step the H200 measured:

* ``offload_must_show.py run`` output (results*.jsonl): ``step_ms_median`` of jobs
  ``<model>:plan@<budget>`` / ``<model>:stock:<name>`` (each run capped at its budget);
* ``compute_rates.py kernels`` output (kernels-*.json): the median of ``wall_ms`` (uncapped).

A model traced once serves every plan file of it (same model and config).

    JAX_PLATFORMS=cpu /work/venvs/v0112/bin/python benchmarks/archive/hlo_recompute_prices.py \\
        --case benchmarks/results/offload-plans-2026-12-04-rates/llama.json benchmarks/results/h200-2026-12-04-offload-must-show \\
        --case benchmarks/results/offload-plans-2026-12-04-fusion/moe.json benchmarks/results/h200-2026-12-04-moe-fusion

Prints a Markdown table (and per model the regions' HLO pricing) on stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def measured_steps(measured: Path, model: str) -> dict[str, float]:
    """ "plan@<budget>" / "stock:<name>" -> measured ms per step of ``model``'s runs."""
    out = {}
    for p in sorted(measured.glob("results*.jsonl")):
        for line in p.read_text().splitlines():
            r = json.loads(line)
            if r.get("kind") != "job" or not r.get("ok"):
                continue
            got = (r.get("result") or {}).get("step_ms_median")
            name = r["job"]["name"]
            if got is not None and name.startswith(f"{model}:"):
                out[name.split(":", 1)[1]] = float(got)
    for p in sorted(measured.glob("kernels-*.json")):
        r = json.loads(p.read_text())
        if r.get("model") != model:
            continue
        pol = r["policy"]
        key = f"plan@{pol.rsplit('@', 1)[1].strip()}" if pol.startswith("plan ") else f"stock:{pol}"
        out[key] = statistics.median(r["wall_ms"])
    return out


def decisions_of(x):
    """A plan's or stock assignment's decisions ([signature, decision] pairs; the plan file
    keeps the stock ones as JSON text)."""
    if isinstance(x, dict):
        x = x["decisions"]
    if isinstance(x, str):
        x = json.loads(x)
    return dict(map(tuple, x))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--case",
        nargs=2,
        action="append",
        required=True,
        metavar=("PLANS_JSON", "MEASURED_DIR"),
        help="a plan file and the directory of its H200 runs (repeat)",
    )
    ap.add_argument("--hardware", default="h200")
    args = ap.parse_args()

    import jax

    import cost_models as cm
    from benchmarks import gpu_bench as gb
    from planner._src.cost import build_cost_model, evaluate
    from planner._src.graph import build_graph
    from planner._src.trace import merge_call_sites, trace_step
    from planner._src.types import Assignment
    from planner._src.xla import deviceless
    from planner._src.xla import targets as T

    hw = cm.load_profile(args.hardware)
    tgt = T.resolve(args.hardware)
    rows, notes, traced = [], [], {}
    for plans_path, measured in args.case:
        saved = json.loads(Path(plans_path).read_text())
        name = Path(plans_path).stem  # offload_must_show's model name (llama, moe, ...)
        key = json.dumps([saved["model"], saved["config"]], sort_keys=True)
        if key not in traced:
            module, config = gb._model({"model": saved["model"], "config": saved["config"]}, None)
            step, step_args = module.make_train_step(config)
            t = time.perf_counter()
            with deviceless.target_scope(tgt):
                trace = merge_call_sites(
                    trace_step(
                        step,
                        deviceless.args_for(tgt, step_args),
                        split_call_sites=True,
                        backend="cuda",
                        compiler=tgt.description,
                        hardware=hw,
                    )
                )
            trace_s = time.perf_counter() - t
            graph = build_graph(trace)
            new = build_cost_model(trace, graph, hw, allow_offload=True)
            old = build_cost_model(
                dataclasses.replace(trace, hlo_priced_with=""), graph, hw, allow_offload=True
            )
            traced[key] = (graph, old, new)
            for r, rn, ro in zip(trace.regions, new.regions, old.regions):
                h = r.hlo_recompute_s
                notes.append(
                    f"{name}: region {r.id} ({r.multiplicity} trips, {len(r.candidates)} "
                    "candidates): "
                    + (
                        "not priced from HLO"
                        if h is None
                        else f"HLO shares for {sum(x is not None for x in h)} candidates, "
                        f"{1e3 * sum(x for x in h if x is not None):.2f} ms per trip; "
                        "recompute of all candidates per trip: HLO-priced "
                        f"{1e3 * sum(rn.recompute_s):.2f} ms, library "
                        f"{1e3 * sum(ro.recompute_s):.2f} ms"
                    )
                )
            notes.append(
                f"{name}: T0 {1e3 * old.base_step_s:.1f} -> {1e3 * new.base_step_s:.1f} ms; "
                f"trace + anchors {trace_s:.0f} s; recompute priced from "
                f"{new.recompute_priced_from}"
            )
            jax.clear_caches()
        graph, old, new = traced[key]
        walls = measured_steps(Path(measured), name)
        steps = [
            (f"stock:{s}", None, decisions_of(saved["stock_assignments"][s]))
            for s in saved.get("stock_assignments", {})
            if f"stock:{s}" in walls
        ]
        steps += [
            (f"plan@{b}", float(p["predicted_step_ms"]), decisions_of(p["policy"]))
            for b, p in saved["plans"].items()
        ]
        where = f"{Path(plans_path).parent.name} / {Path(measured).name}"
        for label, recorded, dec in steps:
            a = Assignment.of(dec)
            po, pn = (1e3 * evaluate(m, graph, a).step_s for m in (old, new))
            rows.append((where, name, label, recorded, po, pn, walls.get(label)))

    def err(p, w):
        return f"{100 * (p / w - 1):+.1f}%" if w else "-"

    print(
        "| plans / measured | model | step | recorded when planned | old: library recompute "
        "| new: HLO recompute | measured H200 | error old | error new |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for where, name, label, recorded, po, pn, w in rows:
        print(
            f"| {where} | {name} | {label} | {'-' if recorded is None else f'{recorded:.1f}'} "
            f"| {po:.1f} | {pn:.1f} | {'-' if w is None else f'{w:.1f}'} | {err(po, w)} | "
            f"{err(pn, w)} |"
        )
    print()
    for n in notes:
        print(f"- {n}")


if __name__ == "__main__":
    main()
