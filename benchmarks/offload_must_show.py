"""Issue 18's must-show on the H200, in one command: plans that offload where it pays, run
capped at their budgets beside full remat and the stock policies, with the trace's exposed
copy time per direction against the model's.

    # 1. on a CPU beforehand (deviceless XLA:GPU for the h200: JAX_PLATFORMS=cpu, the CUDA
    #    plugin; about 2-4 min a model), the plans at 4 budgets per model:
    JAX_PLATFORMS=cpu python benchmarks/offload_must_show.py plan --out benchmarks/results/offload-plans-2026-12-04
    # 2. on the H200 (one command, < 9 min of device time; --budget-s bounds it):
    python benchmarks/offload_must_show.py run --plans benchmarks/results/offload-plans-2026-12-04 --out OUT --budget-s 500
    # 3. anywhere: the table
    python benchmarks/offload_must_show.py summarize --out OUT

Models (``MODELS``): the long-context decoder of issue 18 (examples/llama.py LONG_CONTEXT:
2 x 16384 tokens, d_model 4096, 8 layers under lax.scan, cuDNN attention), and the two
examples at their H200 sizes (examples/llama.py H200_BENCH with cuDNN attention, 32k
tokens; examples/moe.py H200_BENCH, capacity dispatch). Budgets: ``gpu_bench.py plan
--budgets anchors``: 4 budgets from just above full remat's compiled peak to
save-everything's (each plan verified by the deviceless compile, corrected, filled).

On the GPU, per model, each job in a fresh process (gpu_bench.Driver / spawn):

* every plan, capped at its budget (``XLA_PYTHON_CLIENT_MEM_FRACTION`` = budget / HBM), with
  the plan's XLA flags: traced (``planner.profile``, 1 warm-up and 2 traced steps: per
  direction the copy time and its exposed part, per step), then 3 steps timed untraced;
* the stock policies, uncapped (their peaks say whether they fit a budget): full remat
  (``nothing_saveable``) and, per budget, the fastest stock policy the planner's verify
  stage compiled within it (``stock_compiled``), each distinct one once.

The time is shared among the models (``--budget-s`` / 3 each, plans first), so a short
lease still gives every model its plans. Results: OUT/results.jsonl (gpu_bench's records),
OUT/summary.md: per model and budget, the plan's measured step and peak against its
prediction, full remat and the best stock policy that fits; the trace's exposed d2h / h2d
ms per step against the model's (within 20%?).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import gpu_bench as gb  # noqa: E402

# name -> (gpu_bench --model, --config overrides of its BENCH / MOE_BENCH)
MODELS = {
    "long_context": ("llama", "batch=2,seq=16384,attention_impl=cudnn"),
    "llama": ("llama", "attention_impl=cudnn"),
    "moe": ("moe", ""),
    # the long-context decoder at one sequence of 32768 tokens (same tokens per step, twice
    # the attention per token): offload plans at budgets near full remat (exposure check)
    "long_context_32k": ("llama", "batch=1,seq=32768,attention_impl=cudnn"),
}


def plan(a) -> None:
    """Each model planned in its own process (gpu_bench.py plan), plans saved for ``run``."""
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in a.models.split(","):
        model, config = MODELS[name]
        if os.environ.get("GPU_BENCH_DRY_RUN"):  # a CPU dry run: gpu_bench's tiny models
            config = ""
        cmd = [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu_bench.py"),
            "plan",
            "--save",
            str(out / f"{name}.json"),
            "--budgets",
            a.budgets,
            "--model",
            model,
            "--hardware",
            a.hardware,
        ]
        if config:
            cmd += ["--config", config]
        t = time.perf_counter()
        done = subprocess.run(cmd, cwd=ROOT, check=False)
        print(f"{name}: rc {done.returncode} in {time.perf_counter() - t:.0f} s", flush=True)


def _stock_to_run(saved: dict) -> list[str]:
    """Full remat, and per budget the fastest stock policy (by the model) whose verify
    compile fits that budget; distinct programs once."""
    compiled = saved.get("stock_compiled", {})
    names = ["nothing_saveable"]
    for b, spec in saved["plans"].items():
        base = spec.get("baselines", {})
        fits = [
            (base[n][1], n)
            for n, got in compiled.items()
            if n in base and got is not None and got <= float(b) * 1e9
        ]
        if fits:
            names.append(min(fits)[1])
    same = saved.get("stock_assignments", {})
    out, seen = [], set()
    for n in names:
        key = same.get(n, n)
        if key not in seen:
            seen.add(key)
            out.append(n)
    return out


def run(a) -> None:
    plans_dir = Path(a.plans)
    d = gb.Driver(Path(a.out), a.budget_s)
    wanted = a.models.split(",") if a.models else sorted(p.stem for p in plans_dir.glob("*.json"))
    names = [n for n in wanted if (plans_dir / f"{n}.json").exists()]
    for k, name in enumerate(names):
        saved = json.loads((plans_dir / f"{name}.json").read_text())
        model, bench = saved.get("model", "llama"), saved["config"]
        share_end = time.perf_counter() + d.left() / (len(names) - k)  # this model's share
        d.record("planned", {"model": name, "planned_on": saved.get("planned_on")})
        for b, spec in saved["plans"].items():
            if "error" in spec:
                d.record("plan_failed", {"model": name, "budget_gb": b, "error": spec["error"]})
                continue
            if time.perf_counter() > share_end:
                d.record("skipped", {"model": name, "budget_gb": b, "why": "model's share spent"})
                continue
            d.record("plan", {"model": name, "budget_gb": b, **{k: v for k, v in spec.items()}})
            d.job(
                {
                    "type": "profile",
                    "name": f"{name}:plan@{b}",
                    "model_name": name,
                    "config": bench,
                    "model": model,
                    "policy": spec["policy"],
                    "flags": spec["flags"],
                    "budget_gb": float(b),
                    "mem_fraction": float(b) * 1e9 / gb.HBM_BYTES_H200,
                    "steps": a.steps,
                    "trace_steps": 2,
                    **({"keep_trace_dir": str(Path(a.out) / "traces")} if a.keep_traces else {}),
                },
                need_s=45,
            )
        for stock in [] if a.no_stock else _stock_to_run(saved):
            if time.perf_counter() > share_end and stock != "nothing_saveable":
                d.record("skipped", {"model": name, "stock": stock, "why": "model's share spent"})
                continue
            d.job(
                {
                    "name": f"{name}:stock:{stock}",
                    "model_name": name,
                    "config": bench,
                    "model": model,
                    "policy": {"kind": "stock", "name": stock},
                    "flags": "",
                    "steps": 3,
                },
                need_s=30,
            )
    summarize(a)


def summarize(a) -> None:
    out = Path(a.out)
    recs = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines() if x.strip()]
    plans = {(r["model"], str(r["budget_gb"])): r for r in recs if r["kind"] == "plan"}
    jobs = [r for r in recs if r["kind"] == "job"]

    def res(name):
        for r in jobs:
            if r["job"]["name"] == name:
                return r
        return None

    def ms(x):
        return "n/a" if x is None else f"{x:,.1f}"

    rows = [
        "| model | budget GB | choice | plan step ms (pred.) | peak GB | full remat ms | best stock "
        "that fits, ms | d2h exposed ms/step trace (pred.) | h2d exposed ms/step trace (pred.) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (model, b), spec in plans.items():
        r = res(f"{model}:plan@{b}")
        got = (r or {}).get("result") or {}
        tr = got.get("trace") or {}
        full = ((res(f"{model}:stock:nothing_saveable") or {}).get("result") or {}).get(
            "step_ms_median"
        )
        best = None
        for j in jobs:
            n = j["job"]["name"]
            if n.startswith(f"{model}:stock:") and j.get("ok"):
                g = j["result"]
                if (g.get("peak_bytes_in_use") or 1e30) <= float(b) * 1e9:
                    if best is None or g["step_ms_median"] < best[0]:
                        best = (g["step_ms_median"], n.split(":stock:")[1])

        def within(meas, pred):
            if meas is None or pred is None:
                return ""
            return " ✓" if abs(pred - meas) <= 0.2 * meas else ""

        d2h, h2d = tr.get("d2h_exposed_s_ms"), tr.get("h2d_exposed_s_ms")
        pd, ph = spec.get("predicted_exposed_d2h_ms"), spec.get("predicted_exposed_h2d_ms")
        peak = got.get("peak_bytes_in_use")
        rows.append(
            f"| {model} | {b} | {spec.get('choice')} | {ms(got.get('step_ms_median'))} "
            f"({ms(spec.get('predicted_step_ms'))}) | "
            f"{'n/a' if peak is None else f'{peak / 1e9:.2f}'}"
            f"{'' if r is None or r.get('ok') else ' (failed: ' + str(r.get('tail'))[-120:] + ')'} | "
            f"{ms(full)} | {'n/a' if best is None else f'{best[0]:,.1f} ({best[1]})'} | "
            f"{ms(d2h)} ({ms(pd)}){within(d2h, pd)} | {ms(h2d)} ({ms(ph)}){within(h2d, ph)} |"
        )
    text = (
        "# Issue 18 must-show: offload plans capped at their budgets, per-direction exposed "
        "copy time (H200)\n\n"
        f"Command: `python benchmarks/offload_must_show.py {' '.join(sys.argv[1:])}`\n\n"
        + "\n".join(rows)
        + "\n\n✓: the trace's exposed copy time within 20% of the model's prediction.\n\n"
        + exposure_table(plans, res)
    )
    (out / "summary.md").write_text(text, encoding="utf-8")
    print(text)


def pick(a) -> None:
    """A plan file holding some budgets of another (the plans unchanged), for ``run``."""
    saved = json.loads(Path(a.source).read_text())
    keep = a.budgets.split(",")
    missing = [b for b in keep if b not in saved["plans"]]
    if missing:
        raise SystemExit(f"{a.source} has no plans for {missing}; it has {list(saved['plans'])}")
    saved["plans"] = {b: saved["plans"][b] for b in keep}
    saved["picked_from"] = {"file": a.source, "budgets": keep}
    Path(a.save).parent.mkdir(parents=True, exist_ok=True)
    Path(a.save).write_text(json.dumps(saved, indent=1, default=str))
    for b, spec in saved["plans"].items():
        off = [k for k, v in (spec.get("decisions") or {}).items() if v == "offload"]
        print(
            f"{a.save}: {b} GB {spec.get('choice')} offloads {off}; per step exposed d2h "
            f"{spec.get('predicted_exposed_d2h_ms', 0):.1f} ms, h2d "
            f"{spec.get('predicted_exposed_h2d_ms', 0):.1f} ms"
        )


def exposure_table(plans: dict, res) -> str:
    """Per offloading plan and direction: the trace's copy time and exposed copy time per
    step (three readings) against the model's, and how many MB a trip offloads."""

    def ms(x):
        return "n/a" if x is None else f"{x:,.1f}"

    def within(meas, pred):
        if meas is None or pred is None or meas <= 0:
            return ""
        return " ✓" if abs(pred - meas) <= 0.2 * meas else ""

    rows = [
        "| plan | offloaded (one trip) | MB/trip | step ms | d2h copy, trace (model) | d2h "
        "exposed: trace (model) | vs busy | waited | h2d copy, trace (model) | h2d exposed: "
        "trace (model) | vs busy | waited |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (model, b), spec in plans.items():
        r = res(f"{model}:plan@{b}")
        got = (r or {}).get("result") or {}
        tr = got.get("trace") or {}
        off = [k for k, v in (spec.get("decisions") or {}).items() if v == "offload"]
        if not off:
            continue
        per_trip = spec.get("offloaded_bytes_per_trip")
        mb = "n/a" if not per_trip else "+".join(f"{x / 1e6:,.0f}" for x in per_trip if x)
        pd, ph = spec.get("predicted_exposed_d2h_ms"), spec.get("predicted_exposed_h2d_ms")
        cd, ch = spec.get("predicted_d2h_copy_ms"), spec.get("predicted_h2d_copy_ms")
        cells = []
        for k, p_exp, p_copy in (("d2h", pd, cd), ("h2d", ph, ch)):
            e, st, w = (tr.get(f"{k}_{x}_s_ms") for x in ("exposed", "stall", "waited"))
            cells += [
                f"{ms(tr.get(f'{k}_s_ms'))} ({ms(p_copy)})",
                f"{ms(e)} ({ms(p_exp)}){within(e, p_exp)}",
                f"{ms(st)}{within(st, p_exp)}",
                f"{ms(w)}{within(w, p_exp)}",
            ]
        fail = "" if r is None or r.get("ok") else " (failed)"
        rows.append(
            f"| {model} @ {b} GB{fail} | {', '.join(off)} | {mb} | "
            f"{ms(got.get('step_ms_median'))} ({ms(spec.get('predicted_step_ms'))}) | "
            + " | ".join(cells)
            + " |"
        )
    return (
        "## Per direction, exposed copy time per step: trace vs model\n\n"
        + "\n".join(rows)
        + "\n\nms per step, median of the traced steps; (model) = the plan's prediction "
        "(predicted_exposed_d2h_ms / _h2d_ms: every trip of every region). Trace readings "
        "(planner._src.profiling.overlap.StepOverlap): *exposed*, copy time with no kernel "
        "running; *vs busy*, with neither a kernel nor a device-to-device copy of a compute "
        "stream running; *waited*, the compute streams' idle gaps that a copy of that "
        "direction ended (compute resumed within 50 us of its end). ✓: within 20% of the "
        "model.\n"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="plan every model here (deviceless on a CPU)")
    p.add_argument("--out", required=True)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--hardware", default="h200")
    p.add_argument(
        "--budgets",
        default="anchors",
        help="GB, comma-separated, or 'anchors' (4 from full remat's size to save-everything's)",
    )
    r = sub.add_parser("run", help="on the H200: every plan capped and traced, the stocks")
    r.add_argument("--plans", required=True)
    r.add_argument("--out", required=True)
    r.add_argument(
        "--models",
        default="",
        help="plan files (names without .json) in --plans to run, in order; default: all",
    )
    r.add_argument("--budget-s", type=float, default=500)
    r.add_argument(
        "--no-stock",
        action="store_true",
        help="the plans only (no full remat or stock runs): the exposure check",
    )
    r.add_argument("--steps", type=int, default=3, help="untimed-trace steps after the traced ones")
    r.add_argument(
        "--keep-traces", action="store_true", help="copy each plan's .xplane.pb to OUT/traces"
    )
    k = sub.add_parser("pick", help="a plan file with some budgets of another")
    k.add_argument("source")
    k.add_argument("--budgets", required=True, help="keys of the source's plans, e.g. 22.95")
    k.add_argument("--save", required=True)
    s = sub.add_parser("summarize")
    s.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    {"plan": plan, "run": run, "summarize": summarize, "pick": pick}[a.cmd](a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
