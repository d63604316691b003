"""The full-remat anchor's recompute, priced from its HLO, on the planner's own candidates.

What the cost stage would do with ``planner._src.xla.recompute_shares.region_recompute_seconds``: trace
the MoE example as ``planner.solve(hardware="h200")`` does on a CPU (deviceless XLA:GPU for
the H200), take its scanned region's candidates, price the full-remat program's backward
recompute from its compiled HLO (Triton GEMMs on, as the device compiles), give each share
to its candidate (``recompute_shares.match_shares``), and predict what each plan of a
``gpu_bench.py plan`` file saves over full remat: the shares of the candidates it keeps
(save or offload). Prints the matched and unmatched seconds, the largest candidates, and
per plan the predicted saving next to the cost library's recompute of the same candidates.

    JAX_PLATFORMS=cpu /work/venvs/v0112/bin/python benchmarks/archive/hlo_recompute_candidates.py \\
        --remat-hlo benchmarks/results/hlo-kernel-time-2026-12-05/deviceless-triton-on/hlo-moe-remat.txt.gz \\
        --plans benchmarks/results/offload-plans-2026-12-04-fusion/moe.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--remat-hlo", type=Path, required=True)
    ap.add_argument("--plans", type=Path, required=True)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument(
        "--measured", type=Path, help="compute_rates.py kernels output: the measured wall times"
    )
    args = ap.parse_args()

    import cost_models as cm
    from benchmarks import gpu_bench as gb
    from planner._src.cost import build_cost_model
    from planner._src.graph import build_graph
    from planner._src.trace import trace_step
    from planner._src.xla import deviceless
    from planner._src.xla import recompute_shares as K
    from planner._src.xla import targets as T

    hw = cm.load_profile("h200")
    plans = json.loads(args.plans.read_text())
    module, config = gb._model({"model": plans["model"], "config": plans["config"]}, None)
    step, step_args = module.make_train_step(config)
    tgt = T.resolve("h200")
    with deviceless.target_scope(tgt):
        trace = trace_step(
            step, deviceless.args_for(tgt, step_args), backend="gpu", compiler=tgt.description
        )
    graph = build_graph(trace)
    model = build_cost_model(trace, graph, hw, allow_offload=False)
    text = gzip.decompress(args.remat_hlo.read_bytes()).decode()
    hlo_regions = []
    for region, rc in zip(trace.regions, model.regions):
        if not region.in_scan:
            continue
        got, left = K.region_recompute_seconds(text, hw, region.multiplicity, region.candidates)
        lib = {c.index: t for c, t in zip(region.candidates, rc.recompute_s)}
        print(
            f"region {region.id} ({region.source}, {region.multiplicity} trips, "
            f"{len(region.candidates)} candidates): HLO shares matched "
            f"{1e3 * sum(got.values()):.2f} ms per trip to {len(got)} candidates, unmatched "
            f"{1e3 * left:.2f} ms; the cost library's recompute of all candidates "
            f"{1e3 * sum(lib.values()):.2f} ms per trip\n"
        )
        print("| candidate | signature | HLO ms/trip | library ms/trip |")
        print("|---|---|---|---|")
        by = {c.index: c for c in region.candidates}
        for i, s in sorted(got.items(), key=lambda kv: -kv[1])[: args.top]:
            print(f"| {i} | `{by[i].signature[:70]}` | {1e3 * s:.3f} | {1e3 * lib[i]:.3f} |")
        # The cost stage with the HLO's shares as t_v (0 for a candidate no share went to:
        # its recompute is inside another's kernel), everything else as it is.
        hlo_rec = tuple(got.get(c.index, 0.0) for c in region.candidates)
        hlo_regions.append((region.id, hlo_rec))
    import dataclasses

    from planner._src.cost import evaluate
    from planner._src.types import Assignment

    by_id = dict(hlo_regions)
    model_hlo = dataclasses.replace(
        model,
        regions=tuple(
            dataclasses.replace(rc, recompute_s=by_id[rc.region_id])
            if rc.region_id in by_id
            else rc
            for rc in model.regions
        ),
    )
    steps = {
        "nothing_saveable": plans["stock_assignments"]["nothing_saveable"],
        "dots_with_no_batch_dims_saveable": plans["stock_assignments"][
            "dots_with_no_batch_dims_saveable"
        ],
        **{f"plan @ {b}": p["policy"]["decisions"] for b, p in plans["plans"].items()},
    }
    preds = {}
    for name, decisions in steps.items():
        if isinstance(decisions, str):  # (the plan file keeps the stock ones as JSON text)
            decisions = json.loads(decisions)
        a = Assignment.of(dict(map(tuple, decisions)))
        preds[name] = (evaluate(model, graph, a), evaluate(model_hlo, graph, a))
    base_lib, base_hlo = preds["nothing_saveable"]
    walls = {}
    for p in sorted(args.measured.glob("kernels-*.json")) if args.measured else ():
        rec = json.loads(p.read_text())
        pol = rec["policy"]
        key = f"plan @ {pol.rsplit('@', 1)[1].strip()}" if pol.startswith("plan ") else pol
        walls[key] = min(rec["wall_ms"])
    print(
        "\nBy cost.evaluate, ms per step: the recompute saved over full remat with the cost "
        "library's t_v and with the anchor HLO's; the predicted step with the library's t_v, "
        "and with the HLO's t_v and T0 moved so that full remat predicts what it did "
        "(step_lib(remat) - saved_HLO); the measured wall time\n"
    )
    print(
        "| step | recompute saved, library | recompute saved, HLO | step, library "
        "| step, HLO t_v | measured wall |"
    )
    print("|---|---|---|---|---|---|")
    for name, (lib, hl) in preds.items():
        wall = walls.get(name)
        pred = base_lib.step_s - (base_hlo.step_s - hl.step_s)
        cells = [
            f"{1e3 * (base_lib.recompute_s - lib.recompute_s):+.1f}",
            f"{1e3 * (base_hlo.recompute_s - hl.recompute_s):+.1f}",
            f"{1e3 * lib.step_s:.1f}"
            + (f" ({100 * (1e3 * lib.step_s / wall - 1):+.1f}%)" if wall else ""),
            f"{1e3 * pred:.1f}" + (f" ({100 * (1e3 * pred / wall - 1):+.1f}%)" if wall else ""),
            f"{wall:.1f}" if wall else "-",
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
