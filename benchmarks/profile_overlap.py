"""Issue 8's must-show on the GPU: exposed copy time from a device trace, per flag set.

    python benchmarks/profile_overlap.py --out benchmarks/results/h200-YYYY-MM-DD-profile
    python benchmarks/profile_overlap.py --out DIR --budget 80 --flag-sets default,planner,pipelined
    python benchmarks/profile_overlap.py --out DIR --flag-sets all --trace-saved   # every set
    python benchmarks/profile_overlap.py --out DIR --probe-policy --config '{..., "layers_per_iter": 2}'
                                          # one fixed policy, k layers per scan iteration
    python benchmarks/profile_overlap.py worker JOB.json          # one profile, fresh process

Model: examples/llama.py H200_BENCH (8 layers under lax.scan, 32k tokens, bf16), as
benchmarks/results/h200-2026-11-30.md. Steps:

1. plan (own process: planning must not hold GPU memory while the step runs) at ``--budget``
   GB with the measured H200 profile; if the plan offloads nothing, fall back to the probe's
   offloading policy (save six projections, offload ``mlpwi_0``) and say so;
2. for each flag set (``default``: none; ``planner``: the plan's ``xla_flags``; ``pipelined``:
   ``--xla_gpu_enable_pipelined_host_offloading=true``; or any set of
   ``benchmarks/flag_sets.json``, with its environment, e.g. ``JAX_OPTIMIZATION_LEVEL=O1``;
   ``all``: every one), in a fresh process: build the step with
   the policy, ``planner.profile`` it (1 warm-up, ``--steps`` traced), write the figures and a
   timeline PNG of step 0, and time ``--steps`` more steps untraced (the profiler's own cost);
3. the same untraced timing with the offloaded tensors **saved** instead (same flags): the
   step-time cost of offloading. Issue 8 asks whether ``exposed copy time`` (trace) accounts for
   ``step(offload) - step(save)``; the summary table puts them side by side, with the
   efficiency ``hidden / copy`` and the profile ``overlap_from_trace`` would write. With
   ``--trace-saved`` the saved-instead run is traced too, and the table gives both programs'
   compute-busy time: what besides the copies differs between them (2026-12-01: the step
   difference was 37% below the trace's exposed copy time).

Results: DIR/results.jsonl (one record per job), DIR/<flag set>.png, DIR/summary.md,
DIR/<flag set>-measured.json (the hardware profile with the measured overlap).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PIPELINED = "--xla_gpu_enable_pipelined_host_offloading=true"
MEASURED_PROFILE = ROOT / "benchmarks/results/h200-2026-11-30-probe/h200-measured.json"
# The probe's offloading policy (h200-2026-11-30.md): save six projections, offload mlpwi_0.
FALLBACK = {
    "kind": "names",
    "save": ["query_proj", "key_proj", "value_proj", "out_proj", "mlpwi_1", "mlpwo"],
    "offload": ["mlpwi_0"],
}


def _policy(spec):
    from jax.ad_checkpoint import checkpoint_policies as cp

    if spec["kind"] == "names":
        return cp.save_and_offload_only_these_names(
            names_which_can_be_saved=spec["save"],
            names_which_can_be_offloaded=spec["offload"],
            offload_src="device",
            offload_dst="pinned_host",
        )
    if spec["kind"] == "plan":
        from planner._src.cost import Assignment
        from planner._src.emit.emit import emit

        a = Assignment.of(dict(spec["decisions"]))
        if spec.get("saved_instead"):
            a = Assignment.of({k: ("save" if d == "offload" else d) for k, d in a.decisions})
        return emit(a, spec["names"], "h200").policy
    raise ValueError(spec)


def _config(job):
    from examples import llama

    return llama.LlamaConfig(**job["config"]) if job.get("config") else llama.H200_BENCH


def run_plan(job):
    """Plan H200_BENCH at job['budget'] GB; the plan as a job spec."""
    import jax

    import planner
    from examples import llama

    step, ex = llama.make_train_step(_config(job))
    step = jax.jit(step, donate_argnums=(0,))  # as the profiled program: the state donated
    p = planner.solve(
        step,
        *ex,
        hbm_gb=job["budget"],
        hardware=job["hardware"],
        solver_time_limit_s=20,
        verify_compile=False,
    )
    decisions = [list(x) for x in p.assignment.decisions]
    return {
        "policy": {
            "kind": "plan",
            "decisions": decisions,
            "names": {c.key: c.name for c in p.graph.classes},
        },
        "flags": p.xla_flags,
        "offloads": [k for k, d in decisions if d == "offload"],
        "decisions": p.decisions(),
        "predicted_step_ms": p.prediction.step_s * 1e3,
        "predicted_transfer_ms": p.prediction.transfer_s * 1e3,
        "predicted_exposed_ms": p.prediction.exposed_transfer_s * 1e3,
    }


def run_profile(job):
    """Profile (traced) then time (untraced) one policy under one flag set."""
    import jax

    from examples import llama
    from planner import profile
    from planner._src.emit.emit import flags_to_compiler_options

    cfg = dataclasses.replace(_config(job), remat_policy=_policy(job["policy"]))
    step, args = llama.make_train_step(cfg, concrete=True)
    shim = type("FlagsOnly", (), {"xla_flags": job["flags"]})()
    out = {}
    if job.get("trace", True):
        r = profile(
            shim,
            step,
            *args,
            steps=job["steps"],
            warmup=1,
            logdir=job.get("logdir"),
            donate_argnums=(0,),
        )
        out["profile"] = r.to_json()
        out["summary"] = r.summary()
        if r.measured:
            r.timeline_png(job["png"])
            from cost_models._trace_overlap import overlap_from_trace

            hw = overlap_from_trace(r, str(MEASURED_PROFILE))
            Path(job["profile_json"]).write_text(json.dumps(hw.to_json(), indent=2))
        step, args = llama.make_train_step(cfg, concrete=True)  # the profile donated the state
    opts = flags_to_compiler_options(job["flags"])
    lowered = jax.jit(step, donate_argnums=(0,)).lower(*args)
    compiled = lowered.compile(compiler_options=opts) if opts else lowered.compile()
    state, batch = args
    times = []
    for i in range(1 + job["steps"]):
        t = time.perf_counter()
        state, loss = compiled(state, batch)
        loss.block_until_ready()
        if i:
            times.append(time.perf_counter() - t)
    out["untraced_step_ms"] = 1e3 * statistics.median(times)
    out["untraced_step_ms_all"] = [1e3 * t for t in times]
    out["peak_bytes_in_use"] = (jax.devices()[0].memory_stats() or {}).get("peak_bytes_in_use")
    out["device"] = jax.devices()[0].device_kind
    out["jax"] = jax.__version__
    return out


def spawn(job, out_dir: Path, timeout: float):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, dir=out_dir) as f:
        json.dump(job, f)
    t = time.perf_counter()
    try:
        env = {**os.environ, **job.get("env", {})}  # e.g. JAX_OPTIMIZATION_LEVEL for a set
        done = subprocess.run(
            [sys.executable, __file__, "worker", f.name],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
            check=False,
            env=env,
        )
        rec = {"job": job, "rc": done.returncode, "wall_s": time.perf_counter() - t}
        if done.returncode == 0:
            rec["result"] = json.loads(done.stdout.strip().splitlines()[-1])
        else:
            rec["error"] = (done.stderr or done.stdout)[-3000:]
    except subprocess.TimeoutExpired:
        rec = {"job": job, "rc": None, "error": f"timeout after {timeout} s"}
    os.unlink(f.name)
    with open(out_dir / "results.jsonl", "a") as fh:
        fh.write(json.dumps(rec) + "\n")
    print(json.dumps({k: rec.get(k) for k in ("rc", "wall_s", "error")})[:400], file=sys.stderr)
    return rec


def _summary(out_dir: Path, plan, recs, date):
    def ms(x):
        return "n/a" if x is None else f"{x * 1e3:,.1f}"

    rows = [
        "| flag set | XLA flags | step ms (offload, untraced) | step ms (saved instead) | "
        "difference ms | host copy ms (trace) | exposed ms (trace) | hidden / copy | "
        "compute busy ms (offload / saved) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, (off, sav) in recs.items():
        ro, rs = off.get("result", {}), sav.get("result", {})
        med = (ro.get("profile") or {}).get("median", {})
        med_s = (rs.get("profile") or {}).get("median", {})
        so, ss = ro.get("untraced_step_ms"), rs.get("untraced_step_ms")
        diff = f"{so - ss:,.1f}" if so is not None and ss is not None else "n/a"
        eff = med.get("overlap_efficiency")
        env = off["job"].get("env") or {}
        shown = " ".join([f"{k}={v}" for k, v in env.items()] + [off["job"]["flags"]]).strip()
        rows.append(
            f"| {name} | `{shown or 'none'}` | "
            f"{'n/a' if so is None else f'{so:,.1f}'} | "
            f"{'n/a' if ss is None else f'{ss:,.1f}'} | {diff} | "
            f"{ms(med.get('copy_s'))} | {ms(med.get('exposed_s'))} | "
            f"{'n/a' if eff is None else f'{eff:.3f}'} | "
            f"{ms(med.get('compute_s'))} / {ms(med_s.get('compute_s'))} |"
        )

    def status_of(o):
        prof = o.get("result", {}).get("profile") or {}
        text = prof.get("status", o.get("error", "")[:300])
        streams = prof.get("streams") or {}
        if streams.get("copies"):
            text += (
                f"; copies on {', '.join(streams['copies'])}, compute on "
                f"{', '.join(streams.get('compute', []))}"
            )
        if prof.get("stream_diagnosis"):
            text += f" ({prof['stream_diagnosis']})"
        return text

    status = "\n".join(f"- {n}: {status_of(o)}" for n, (o, _) in recs.items())
    text = (
        f"# Exposed host-copy time from a device trace ({date})\n\n"
        f"Command: `python benchmarks/profile_overlap.py {' '.join(sys.argv[1:])}`\n\n"
        f"Policy: {plan.get('label')}; offloaded: {plan.get('offloads')}"
        + (
            f"; the plan's model predicted {plan['predicted_exposed_ms']:.1f} ms exposed of "
            f"{plan['predicted_transfer_ms']:.1f} ms copies per step"
            if "predicted_exposed_ms" in plan
            else ""
        )
        + ".\n\n"
        + "\n".join(rows)
        + "\n\nStatus per flag set:\n"
        + status
        + "\n\n"
        "Reading: if the trace's classification is right, `exposed` should be close to "
        "`difference` (the offload's step-time cost over saving, where the extra memory "
        "traffic and recompute are equal); a large gap means copies slow compute down "
        "(shared HBM bandwidth) or the classification missed copies: check the PNGs.\n"
    )
    (out_dir / "summary.md").write_text(text)
    print(text)


def main(argv=None):
    if argv is None and len(sys.argv) > 2 and sys.argv[1] == "worker":
        job = json.loads(Path(sys.argv[2]).read_text())
        res = run_plan(job) if job["kind"] == "plan" else run_profile(job)
        print(json.dumps(res))
        return 0
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget", type=float, default=80.0, help="planning budget, GB")
    ap.add_argument("--hardware", default=str(MEASURED_PROFILE))
    ap.add_argument(
        "--flag-sets",
        default="default,planner,pipelined",
        help="comma-separated: default, planner, pipelined, any name in "
        "benchmarks/flag_sets.json, or 'all'",
    )
    ap.add_argument(
        "--trace-saved",
        action="store_true",
        help="also trace the saved-instead run (compute-busy time of both)",
    )
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=540.0, help="seconds per job")
    ap.add_argument(
        "--keep-traces",
        action="store_true",
        help="keep the .xplane.pb traces under DIR/trace-<set> (tens of MB each)",
    )
    ap.add_argument(
        "--probe-policy",
        action="store_true",
        help="skip planning; profile the probe's policy (save six projections, "
        "offload mlpwi_0), the same program for any --config",
    )
    ap.add_argument(
        "--config",
        default="",
        help="JSON LlamaConfig fields instead of "
        "H200_BENCH, for a CPU smoke test: '{\"n_layers\": 2}'",
    )
    a = ap.parse_args(argv)
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    date = datetime.date.today().isoformat()
    config = json.loads(a.config) if a.config else None
    if a.probe_policy:  # the same policy for every layout: compare layers_per_iter values
        rec = {"error": "not planned: --probe-policy"}
    else:
        rec = spawn(
            {"kind": "plan", "budget": a.budget, "hardware": a.hardware, "config": config},
            out_dir,
            a.timeout,
        )
    plan = rec.get("result") or {}
    if plan.get("offloads"):
        policy, flags = plan["policy"], plan["flags"]
        plan["label"] = f"planner at {a.budget:g} GB"
        saved = {**policy, "saved_instead": True}
    else:
        policy, flags = (
            FALLBACK,
            "--xla_gpu_enable_host_memory_offloading=true "
            "--xla_gpu_enable_latency_hiding_scheduler=true",
        )
        why = (
            f"failed: {rec['error'][:200]}"
            if rec.get("error")
            else "offloaded nothing: at this budget saving or recomputing was faster"
        )
        plan = {
            "label": "the probe's policy, saving six projections and offloading mlpwi_0 "
            "(--probe-policy)"
            if a.probe_policy
            else f"fallback: the probe's offload of mlpwi_0 (the plan at {a.budget:g} GB {why})",
            "offloads": FALLBACK["offload"],
        }
        saved = {"kind": "names", "save": FALLBACK["save"] + FALLBACK["offload"], "offload": []}
    sets = {"default": ("", {}), "planner": (flags, {}), "pipelined": (PIPELINED, {})}
    # Every set of benchmarks/flag_sets.json too (docs/xla-flags-research.md ranks them).
    for fs in json.loads((ROOT / "benchmarks" / "flag_sets.json").read_text()):
        sets.setdefault(fs["name"], (fs["xla_flags"], fs.get("env", {})))
    names = list(sets) if a.flag_sets == "all" else a.flag_sets.split(",")
    unknown = [n for n in names if n not in sets]
    if unknown:
        raise SystemExit(f"unknown flag set(s) {unknown}; known: {sorted(sets)} or 'all'")
    recs = {}
    for name in names:
        xla_flags, env = sets[name]
        base = {
            "kind": "profile",
            "flags": xla_flags,
            "env": env,
            "steps": a.steps,
            "config": config,
        }
        logdir = str(out_dir / f"trace-{name}") if a.keep_traces else None
        off = spawn(
            {
                **base,
                "policy": policy,
                "logdir": logdir,
                "png": str(out_dir / f"{name}.png"),
                "profile_json": str(out_dir / f"{name}-measured.json"),
            },
            out_dir,
            a.timeout,
        )
        # The same step with the offloads saved instead: untraced by default; traced with
        # --trace-saved, so that its compute-busy time shows what else differs between them.
        sav = spawn(
            {
                **base,
                "policy": saved,
                "trace": a.trace_saved,
                "png": str(out_dir / f"{name}-saved.png"),
                "profile_json": str(out_dir / f"{name}-saved-measured.json"),
            },
            out_dir,
            a.timeout,
        )
        recs[name] = (off, sav)
    _summary(out_dir, plan, recs, date)
    return 0


if __name__ == "__main__":
    sys.exit(main())
