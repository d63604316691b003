"""Issue 20's must-show on an H200: the planner's (batch, plan) against the best (batch, stock
policy) that MaxText's estimator procedure finds, measured side by side, each run capped.

    python benchmarks/throughput_h200.py all --out DIR [--hbm-gb 40] [--models llama,moe]
    python benchmarks/throughput_h200.py plan --out DIR      # planning only (GPU, or CPU deviceless)
    python benchmarks/throughput_h200.py measure --out DIR   # the capped runs of DIR/plan-*.json

For each model (examples/llama.py and examples/moe.py at the gpu_bench.py sizes, d_model 4096
/ 2048, seq 4096, bf16, with --layers layers):

1. plan (a fresh process, on this GPU, exact compiles): ``planner.maximize_throughput`` with
   the batch searched (per policy: doubling from 1, then bisection, as MaxText's estimator
   binary-searches ``per_device_batch_size``), the stock policies of ``--stock`` searched the
   same way. Written to DIR/plan-MODEL.json: the chosen (batch, plan, flags, predicted
   tokens/s) and, per stock policy, its largest fitting batch (the estimator's answer) with
   the predicted tokens/s there.
2. measure (each run a fresh gpu_bench.py worker, XLA_PYTHON_CLIENT_MEM_FRACTION = budget /
   HBM, so a run that fits ran inside the budget): the chosen plan at its batch, and the
   ``--measure-stock`` estimator answers predicted fastest (the estimator has no throughput
   model: its list of (largest batch, policy) is ranked here by the planner's prediction and
   the top ones are measured, so the best stock answer is a measured one), ``--steps`` steps
   each, median step time -> tokens/s = batch x seq / median.
3. DIR/summary.md: per model, predicted and measured tokens/s side by side, the measured
   ratio, the prediction error (|predicted - measured| / measured), the allocator's peak
   against the budget.

Time (an estimate, not measured): a trace and two to four compiles per batch size probed, five
to eight probes per model with ``--max-batch 8``, then about 40 s per measured run (gpu_bench
workers). The defaults aim at 9 minutes for ``all``: at most 200 s of planning per model
(``--plan-timeout-s``), then runs while ``--budget-s`` (130 s) lasts; ``measure`` stops
starting runs when ``--budget-s`` is nearly spent
and still writes the summary. Where the device time is short, run ``plan`` first on a CPU
machine with the CUDA plugin (deviceless XLA:GPU for ``--hardware h200``, no device time;
those plans carry the deviceless margin) and only ``measure`` on the H200.
A CPU dry run of the whole flow (tiny models, deviceless compiles): GPU_BENCH_DRY_RUN=1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_bench  # noqa: E402  (the worker, the driver and the model sizes)

DEFAULT_STOCK = "nothing_saveable,dots_saveable,everything_saveable"


def _config(model: str, layers: int) -> dict:
    base = gpu_bench.MOE_BENCH if model == "moe" else gpu_bench.BENCH
    return {**base, "n_layers": layers} if not os.environ.get("GPU_BENCH_DRY_RUN") else base


def run_throughput_worker(job: dict) -> dict:
    """Plan for throughput on this device: the chosen plan and every stock policy's limit."""
    import jax

    import planner

    module, cfg0 = gpu_bench._model(job)

    def make_step(batch):
        step, args = module.make_train_step(dataclasses.replace(cfg0, batch=batch))
        # planned as it runs: the measurement workers donate the train state
        return jax.jit(step, donate_argnums=(0,)), args

    t = time.perf_counter()
    r = planner.maximize_throughput(
        make_step,
        hbm_gb=job["hbm_gb"],
        hardware=job["hardware"],
        stock=tuple(job["stock"]),
        max_batch_size=job["max_batch"],
        refine=job.get("refine", 1),
        solver_time_limit_s=20,
        progress=lambda m: print(f"[{time.perf_counter() - t:6.1f}s] {m}", file=sys.stderr),
    )
    p = r.plan
    chosen = {
        "batch": r.batch_size,
        "choice": p.choice,
        "policy": (
            {
                "kind": "plan",
                "decisions": [list(x) for x in p.assignment.decisions],
                "names": {c.key: c.name for c in p.graph.classes},
            }
            if p.choice == "planner"
            else {"kind": "stock", "name": p.choice}
        ),
        "flags": p.xla_flags,
        "predicted_tokens_per_s": r.tokens_per_s,
        "predicted_step_ms": p.prediction.step_s * 1e3,
        "compiled_peak": p.verification.compiled_device_bytes,
        "decisions": p.decisions(),
    }
    estimator = []
    for lim in r.limits:
        if lim.policy == "planner" or lim.largest_fitting is None:
            continue
        row = next(x for x in r.rows(lim.policy) if x.batch_size == lim.largest_fitting and x.fits)
        estimator.append(
            {
                "policy": lim.policy,
                "batch": lim.largest_fitting,
                "first_over": lim.first_over,
                "predicted_tokens_per_s": row.tokens_per_s,
                "predicted_step_ms": row.predicted_step_s * 1e3,
                "compiled_peak": row.compiled_peak_bytes,
                "best_batch": lim.best_batch_size,
                "best_predicted_tokens_per_s": lim.best_tokens_per_s,
            }
        )
    estimator.sort(key=lambda e: -e["predicted_tokens_per_s"])
    return {
        "chosen": chosen,
        "estimator": estimator,
        "report_md": r.report("markdown"),
        "traced_batch_sizes": list(r.traced_batch_sizes),
        "plan_wall_s": time.perf_counter() - t,
        "machine": gpu_bench._machine(),
    }


def _spawn_plan(job: dict, timeout: float) -> dict:
    path = Path(tempfile.gettempdir()) / f"throughput-job-{os.getpid()}-{job['model']}.json"
    path.write_text(json.dumps(job))
    env = dict(os.environ)
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    try:
        p = subprocess.run(
            [sys.executable, __file__, "worker", str(path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        return {"error": f"planning took over {timeout:.0f} s (--plan-timeout-s)\n{err[-2500:]}"}
    sys.stderr.write(p.stderr[-4000:])
    if p.returncode != 0:
        return {"error": (p.stdout + p.stderr)[-3000:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def _plan_job(a, model: str) -> dict:
    return {
        "model": model,
        "config": _config(model, a.layers),
        "hbm_gb": a.hbm_gb,
        "hardware": a.hardware,
        "stock": a.stock.split(","),
        "max_batch": a.max_batch,
    }


def run_plan(a) -> None:
    """Plan every model for throughput (each in a fresh process) into DIR/plan-MODEL.json:
    on the H200 (exact compiles), or on a CPU machine with the CUDA plugin (deviceless
    XLA:GPU compiles for --hardware h200, no device time; README "Compiling for the target
    GPU on a CPU")."""
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for model in filter(None, a.models.split(",")):
        planned = _spawn_plan(_plan_job(a, model), timeout=a.plan_timeout_s)
        planned["job"] = _plan_job(a, model)
        (out / f"plan-{model}.json").write_text(json.dumps(planned, indent=1, default=str))
        print(model, json.dumps(planned.get("chosen", planned.get("error")), default=str)[:400])


def run_measure(a) -> None:
    """Measure the plans of DIR/plan-MODEL.json on this GPU, each run capped; DIR/summary.md."""
    out = Path(a.out)
    d = gpu_bench.Driver(out, a.budget_s)
    frac = a.hbm_gb * 1e9 / gpu_bench.HBM_BYTES_H200
    summary = [
        f"# Throughput: planner vs the estimator's procedure, {a.hbm_gb:g} GB per run",
        "",
        f"Command: python benchmarks/throughput_h200.py {a.cmd} --out {a.out} --hbm-gb "
        f"{a.hbm_gb:g} --models {a.models} --layers {a.layers} --max-batch {a.max_batch} "
        f"--stock {a.stock} --measure-stock {a.measure_stock} --steps {a.steps}",
        f"Each run: a fresh process, XLA_PYTHON_CLIENT_MEM_FRACTION={frac:.4f} "
        f"(= {a.hbm_gb:g} GB of {gpu_bench.HBM_BYTES_H200 / 1e9:.2f} GB).",
        "",
    ]
    for model in filter(None, a.models.split(",")):
        path = out / f"plan-{model}.json"
        if not path.exists():
            summary += [f"## {model}: no {path.name} (run plan first)", ""]
            continue
        planned = json.loads(path.read_text())
        config = planned.get("job", {}).get("config") or _config(model, a.layers)
        d.record(
            "planned", {"model": model, **{k: v for k, v in planned.items() if k != "report_md"}}
        )
        if "error" in planned:
            summary += [f"## {model}: planning failed", "", "```", planned["error"][-1500:], "```"]
            continue
        runs = []
        c = planned["chosen"]
        runs.append(("planner", c["choice"], c["batch"], c["policy"], c["flags"], c))
        for e in planned["estimator"][: a.measure_stock]:
            spec = {"kind": "stock", "name": e["policy"]}
            runs.append(("estimator", e["policy"], e["batch"], spec, "", e))
        table = [
            "| who | policy | batch | predicted tokens/s | measured tokens/s (steps back to "
            "back) | error | measured, each step waited for | peak GB (allocator) | ran |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        measured = {}
        for who, name, batch, spec, flags, pred in runs:
            r = d.job(
                {
                    "name": f"{model}:{who}:{name}@{batch}",
                    "model": model,
                    "config": {**config, "batch": batch},
                    "policy": spec,
                    "flags": flags,
                    "steps": a.steps,
                    "mem_fraction": frac,
                },
                need_s=45,
            )
            res = (r or {}).get("result") or {}
            # A training loop dispatches steps back to back; the per-step waits idle the GPU
            # while Python dispatches (gpu_bench.run_worker): the comparison uses the former.
            tps = res.get("tokens_per_s_pipelined") or res.get("tokens_per_s")
            waited = res.get("tokens_per_s")
            p = pred["predicted_tokens_per_s"]
            measured[(who, name)] = tps
            peak = res.get("peak_bytes_in_use")
            table.append(
                f"| {who} | {name} | {batch} | {p:,.0f} | "
                + (f"{tps:,.0f}" if tps else "-")
                + " | "
                + (f"{abs(p - tps) / tps:.1%}" if tps else "-")
                + " | "
                + (f"{waited:,.0f}" if waited else "-")
                + " | "
                + (f"{peak / 1e9:.2f}" if peak else "-")
                + " | "
                + ("yes" if r and r["ok"] else ("skipped" if r is None else "failed (OOM?)"))
                + " |"
            )
        best_stock = max(
            (v for (w, _), v in measured.items() if w == "estimator" and v), default=None
        )
        mine = measured.get(("planner", c["choice"]))
        summary += [f"## {model} ({config['n_layers']} layers)", "", *table, ""]
        if mine and best_stock:
            summary.append(
                f"Planner / best estimator answer, measured: {mine / best_stock:.3f}x "
                f"(planning: {planned['plan_wall_s']:.0f} s, batch sizes traced "
                f"{planned['traced_batch_sizes']}, on {planned['machine']})."
            )
        summary += [
            "",
            "<details><summary>the planner's table</summary>",
            "",
            planned["report_md"],
            "</details>",
            "",
        ]
    (out / "summary.md").write_text("\n".join(summary))
    print("\n".join(summary))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    parsers = {
        "all": sub.add_parser("all", help="plan on this GPU, then measure, every model"),
        "plan": sub.add_parser("plan", help="plan for throughput only (GPU or deviceless CPU)"),
        "measure": sub.add_parser("measure", help="measure DIR/plan-*.json on this GPU"),
    }
    for p in parsers.values():
        _arguments(p)
    w = sub.add_parser("worker")
    w.add_argument("job")
    a = ap.parse_args()
    if a.cmd == "worker":
        print(json.dumps(run_throughput_worker(json.loads(Path(a.job).read_text())), default=str))
        return
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    if a.cmd in ("all", "plan"):
        run_plan(a)
    if a.cmd in ("all", "measure"):
        run_measure(a)


def _arguments(p) -> None:
    p.add_argument("--out", required=True)
    p.add_argument("--hbm-gb", type=float, default=40.0)
    p.add_argument("--hardware", default="h200")
    p.add_argument("--models", default="llama,moe")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--max-batch", type=int, default=8)
    p.add_argument("--stock", default=DEFAULT_STOCK)
    p.add_argument("--measure-stock", type=int, default=1)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--budget-s", type=float, default=130, help="measure: stop starting runs")
    p.add_argument("--plan-timeout-s", type=float, default=200, help="plan: per model")


if __name__ == "__main__":
    main()
