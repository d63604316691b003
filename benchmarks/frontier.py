"""Plan frontier-size models (examples/frontier.py) on this CPU, for H200 and GB200 profiles.

    python benchmarks/frontier.py                       # every model x hardware, a Markdown table
    python benchmarks/frontier.py --models llama3.1-405b --hardware h200
    python benchmarks/frontier.py --profile             # + cProfile of each plan (top functions)
    python benchmarks/frontier.py --out results.md      # also write the table and summaries

Each plan runs in its own process (so its peak RSS is its own) with as many fake CPU devices
(``jax_num_cpu_devices``) as its mesh has: 512 for the 64 x 8 (fsdp x tensor) mesh of the
default models, 8 (4 x 2) for ``llama3-70b``, planned only when named. The arguments are abstract
(``jax.ShapeDtypeStruct`` with ``NamedSharding``): nothing of the model is allocated. The
budget is per device: ``--budget-fraction`` (default 0.9) of the profile's HBM.

Measured per plan: wall time of ``planner.solve`` (trace + the anchor compiles + graph + cost
+ solve; ``verify_compile=False`` unless ``--verify``), the planner's own stage timings, peak RSS of the process
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``, which includes importing JAX), and the plan's
summary: decision per tensor class, predicted peak per device, predicted step time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("llama3.1-405b", "deepseek-v3-671b", "deepseek-v3-671b-capacity")
# Planned only when named (--models): an 8-device model (issue 46's planning-time target).
OTHER_MODELS = ("llama3-70b",)
HARDWARE = ("h200", "gb200")


def _one(
    model: str,
    hardware: str,
    fraction: float,
    profile: bool,
    n_devices: int | None,
    compiler: str,
    verify: bool = False,
) -> dict:
    """Plan one (model, hardware) in this process; returns the figures as a dict."""
    import jax

    from examples import frontier as F  # builds no arrays: the devices are set below

    cfg = F.CONFIGS[model]
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", n_devices or cfg.n_devices)
    import resource

    import cost_models as cm
    import planner
    from planner._src.results.report import build_report

    hw = cm.load_profile(hardware)
    budget_gb = fraction * hw.hbm_bytes / 1e9
    out = {
        "model": model,
        "hardware": hardware,
        "budget_gb": budget_gb,
        "params_b": F.param_count(cfg) / 1e9,
        "mesh": list(cfg.mesh_shape),
        "per_device_batch": cfg.per_device_batch,
        "seq": cfg.seq,
        "global_batch": cfg.batch,
        "verify_compile": verify,
    }
    t0 = time.perf_counter()
    # Deviceless GPU compiles move the step's out_shardings onto the target mesh (target.lower).
    step, args = F.make_train_step(cfg)
    out["build_s"] = time.perf_counter() - t0
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    t0 = time.perf_counter()
    try:
        plan = planner.solve(
            step,
            *args,
            hbm_gb=budget_gb,
            hardware=hardware,
            verify_compile=verify,
            compiler=compiler,
        )
    except planner.InfeasibleBudgetError as e:
        out["status"] = "infeasible"
        out["min_feasible_gb"] = e.min_feasible_bytes / 1e9
        out["error"] = str(e).splitlines()[0]
        plan = None
    except planner.PlannerError as e:
        out["status"] = type(e).__name__
        out["error"] = str(e).splitlines()[0]
        plan = None
    out["plan_s"] = time.perf_counter() - t0
    if prof is not None:
        import io
        import pstats

        prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(25)
        out["cprofile"] = s.getvalue()
    out["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    if plan is not None:
        rep = build_report(plan)
        out.update(
            compiler=plan.compiler,
            compiler_exact=plan.compiler_exact,
            status=plan.solution.status,
            gap=plan.solution.gap,
            timings={k: v for k, v in plan.timings},
            predicted_peak_gb=plan.prediction.peak_bytes / 1e9,
            predicted_step_s=plan.prediction.step_s,
            host_gb=plan.prediction.host_bytes / 1e9,
            fixed_gb=plan.cost.fixed_bytes / 1e9,
            anchor_device_gb=plan.trace.anchor.device_bytes / 1e9,
            anchor_temp_gb=plan.trace.anchor.temp_bytes / 1e9,
            argument_gb_per_device=plan.trace.anchor.argument_bytes / 1e9,
            regions=len(plan.graph.regions),
            candidates=sum(len(r.region.candidates) for r in plan.graph.regions),
            classes=len(plan.graph.classes),
            solver_variables=plan.solution.num_variables,
            decisions=[
                {
                    "label": r.label,
                    "decision": r.decision,
                    "gb_per_step": r.nbytes_per_step / 1e9,
                    "members": r.members,
                }
                for r in rep.rows
            ],
            baselines=[
                {
                    "name": b.name,
                    "peak_gb": b.prediction.peak_bytes / 1e9,
                    "step_s": b.prediction.step_s,
                }
                for b in plan.baselines
            ],
        )
        # How big one named candidate is in the trace (global or per-device shapes?).
        for c in plan.candidates():
            if c["name"] == "decoder_layer_input":
                out["decoder_layer_input"] = {
                    "shape": list(c["shape"]),
                    "bytes_per_trip": c["bytes_per_trip"],
                }
                break
    return out


def _machine() -> str:
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        mem = f", {kb / 1024**2:.1f} GiB RAM"
    except OSError:
        pass
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{os.cpu_count()} CPU cores (nproc), {cpu}{mem}, Python {platform.python_version()}"


def _table(rows: list[dict]) -> str:
    head = (
        "| model | hardware | compiler | budget/device GB | status | plan wall s | trace+anchors s | "
        "solve s | peak RSS GB | predicted peak/device GB | predicted step s | classes | "
        "candidates |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        t = r.get("timings", {})  # absent when the planner raised (infeasible budget)
        trace = t.get("trace + anchor compiles", t.get("trace + anchor compile"))
        trace_s = f"{trace:.1f}" if trace is not None else "-"
        solve_s = f"{sum(v for k, v in t.items() if k.startswith('solve')):.2f}" if t else "-"
        peak = (
            f"{r['predicted_peak_gb']:.1f}"
            if "predicted_peak_gb" in r
            else (f"(needs >= {r['min_feasible_gb']:.1f})" if "min_feasible_gb" in r else "-")
        )
        step = f"{r['predicted_step_s']:.3f}" if "predicted_step_s" in r else "-"
        lines.append(
            f"| {r['model']} | {r['hardware']} | {r.get('compiler', '-')} | {r['budget_gb']:.1f} | "
            f"{r.get('status', '?')} | "
            f"{r.get('plan_s', float('nan')):.1f} | "
            f"{trace_s} | {solve_s} | "
            f"{r.get('peak_rss_gb', float('nan')):.2f} | {peak} | {step} | "
            f"{r.get('classes', '-')} | {r.get('candidates', '-')} |"
        )
    return "\n".join(lines)


def _summary(r: dict) -> str:
    out = [f"#### {r['model']} on {r['hardware']} (budget {r['budget_gb']:.1f} GB per device)", ""]
    if "params_b" not in r:  # the process crashed before it measured anything
        return "\n".join(out + [f"- {r.get('status')}: {r.get('error', '')[-500:]}"])
    out.append(
        f"- parameters: {r['params_b']:.1f} B; mesh fsdp x tensor = "
        f"{r['mesh'][0]} x {r['mesh'][1]}; batch {r['global_batch']} x {r['seq']} "
        f"({r['per_device_batch']} sequence(s) per fsdp shard)"
    )
    if "error" in r:
        out.append(f"- planner: {r['status']}: {r['error']}")
    if "predicted_peak_gb" in r:
        out.append(
            f"- solver: {r['status']} (gap {r['gap']:.3g}), {r['classes']} classes, "
            f"{r['candidates']} candidates in {r['regions']} region(s), "
            f"{r['solver_variables']} CP-SAT variables"
        )
        out.append(
            f"- predicted peak per device {r['predicted_peak_gb']:.2f} GB "
            f"(fixed {r['fixed_gb']:.2f} GB; anchor compile: arguments "
            f"{r['argument_gb_per_device']:.2f} GB/device, "
            f"temp {r['anchor_temp_gb']:.2f} GB); "
            f"host {r['host_gb']:.2f} GB; predicted step {r['predicted_step_s']:.3f} s"
        )
        if "decoder_layer_input" in r:
            d = r["decoder_layer_input"]
            out.append(
                f"- candidate `decoder_layer_input`: shape {tuple(d['shape'])}, "
                f"{d['bytes_per_trip'] / 1e9:.3f} GB per trip as the trace counts it"
            )
        counts: dict[str, int] = {}
        for d in r["decisions"]:
            counts[d["decision"]] = counts.get(d["decision"], 0) + 1
        out.append("- decisions: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        named = [d for d in r["decisions"] if "[" not in d["label"]]
        if named:
            out.append(
                "- named tensors: " + ", ".join(f"`{d['label']}` {d['decision']}" for d in named)
            )
        out.append(
            "- baselines (predicted peak GB / step s): "
            + ", ".join(
                f"{b['name']} {b['peak_gb']:.1f} / {b['step_s']:.3f}" for b in r["baselines"]
            )
        )
        out.append(
            "- planner stages (s): " + ", ".join(f"{k} {v:.2f}" for k, v in r["timings"].items())
        )
    return "\n".join(out)


def plan_in_process(
    model: str,
    hardware: str,
    *,
    compiler: str = "auto",
    verify: bool = False,
    profile: bool = False,
    fraction: float = 0.9,
    timeout: float = 1800,
) -> dict:
    """:func:`_one` in a fresh process (its fake devices are set before JAX starts): its
    figures, or a row that says how the process ended."""
    cmd = [sys.executable, os.path.abspath(__file__), "--one", model, hardware]
    cmd += ["--budget-fraction", str(fraction), "--compiler", compiler]
    cmd += ["--profile"] if profile else []
    cmd += ["--verify"] if verify else []
    failed = {"model": model, "hardware": hardware, "budget_gb": float("nan")}
    try:
        p = subprocess.run(
            cmd,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONPATH": ROOT},  # the --one process imports examples/
        )
    except subprocess.TimeoutExpired:
        return {**failed, "status": f"timeout {timeout:.0f} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if lines:
        return json.loads(lines[-1])
    return {**failed, "status": f"crashed rc={p.returncode}", "error": p.stderr.strip()[-500:]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS + OTHER_MODELS)
    ap.add_argument("--hardware", nargs="+", default=list(HARDWARE))
    ap.add_argument("--budget-fraction", type=float, default=0.9)
    ap.add_argument("--profile", action="store_true", help="cProfile each plan")
    ap.add_argument(
        "--verify",
        action="store_true",
        help="verify_compile=True (the planner's default): the plan and the stock policies "
        "predicted faster are compiled too; off by default here, as at 512 devices",
    )
    ap.add_argument("--out", help="write the Markdown (table + summaries) here too")
    ap.add_argument("--json", help="write the raw figures here")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per plan")
    ap.add_argument("--one", nargs=2, metavar=("MODEL", "HARDWARE"), help=argparse.SUPPRESS)
    ap.add_argument("--devices", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument(
        "--compiler",
        default="auto",
        choices=("auto", "target", "local"),
        help="PlanOptions.compiler: 'target' compiles the anchors deviceless for the GPU "
        "(needs the CUDA plugin, JAX 0.12), 'local' on XLA:CPU",
    )
    a = ap.parse_args(argv)
    if a.one:
        figures = _one(
            a.one[0], a.one[1], a.budget_fraction, a.profile, a.devices, a.compiler, a.verify
        )
        print(json.dumps(figures))
        return 0
    rows = []
    for model in a.models:
        for hw in a.hardware:
            print(f"planning {model} on {hw} ...", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            r = plan_in_process(
                model,
                hw,
                compiler=a.compiler,
                verify=a.verify,
                profile=a.profile,
                fraction=a.budget_fraction,
                timeout=a.timeout,
            )
            r["process_s"] = time.perf_counter() - t0
            rows.append(r)
            print(
                f"  {r.get('status')} in {r.get('plan_s', float('nan')):.1f} s, "
                f"RSS {r.get('peak_rss_gb', float('nan')):.2f} GB",
                file=sys.stderr,
                flush=True,
            )
    if a.json:  # the raw figures first: a table that fails to render loses nothing
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    md = [
        f"Command: `python benchmarks/frontier.py {' '.join(argv or sys.argv[1:])}`".rstrip(),
        f"Date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        f"Machine: {_machine()}; load average (1, 5, 15 min) at the end: "
        + ", ".join(f"{x:.2f}" for x in os.getloadavg()),
        "",
        _table(rows),
        "",
    ]
    md += [_summary(r) + "\n" for r in rows]
    if a.profile:
        for r in rows:
            if "cprofile" in r:
                md += [
                    f"cProfile, {r['model']} on {r['hardware']} (cumulative, top 25):",
                    "```",
                    r["cprofile"].strip(),
                    "```",
                    "",
                ]
    text = "\n".join(md)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
