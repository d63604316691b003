"""Where a train step's device sits idle: the gaps between its kernels, traced on the GPU.

Why (issue 20, 2026-12-04): the 4-layer Llama example at batch 1 ran 98.7 ms a step on the
H200 while its kernels took 87.3 ms; at batch 4 wall and kernels agreed. The cost model has no
term for that idle time, so it ranked batch 1 first and lost 2.3% to full remat at batch 4.
This traces steps at several batch sizes, policies and flag sets, each in a fresh process,
and writes per step: the step window (XLA's module event), device busy time (the union of
every kernel and copy), idle = window - busy, the number of device events, and the largest
gaps with the events on either side, so the idle time can be attributed (host-side launch
rate, command-buffer updates, synchronisations) and modelled.

    python benchmarks/idle_time.py all --out DIR                  # on the GPU, one command
    python benchmarks/idle_time.py one --out DIR --batch 1 --policy dots_saveable --label L

Results: DIR/idle-LABEL.json per run, DIR/idle-summary.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NO_COMMAND_BUFFERS = "--xla_gpu_enable_command_buffer="

# (label, model, batch, policy, flags, extra config)
RUNS = [
    ("llama-b1-dots", "llama", 1, "dots_saveable", "", ""),
    ("llama-b1-dots-nocb", "llama", 1, "dots_saveable", NO_COMMAND_BUFFERS, ""),
    ("llama-b1-remat", "llama", 1, "nothing_saveable", "", ""),
    ("llama-b2-remat", "llama", 2, "nothing_saveable", "", ""),
    ("llama-b4-remat", "llama", 4, "nothing_saveable", "", ""),
    ("llama-b4-remat-nocb", "llama", 4, "nothing_saveable", NO_COMMAND_BUFFERS, ""),
    ("moe-b1-remat", "moe", 1, "nothing_saveable", "", ""),
    ("moe-b4-remat", "moe", 4, "nothing_saveable", "", ""),
]


def _union(intervals: list[tuple[float, float]]) -> float:
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def one(out: Path, model: str, batch: int, policy: str, flags: str, config: str, label: str):
    import jax

    from benchmarks import gpu_bench as gb
    from planner._src.emit.emit import flags_to_compiler_options
    from planner._src.policies import STOCK
    from planner._src.profiling.xplane import read_trace

    base = gb.bench_config(model, config, n_layers=4, batch=batch)
    module, cfg = gb._model({"model": model, "config": base}, STOCK[policy].policy())
    step, args = module.make_train_step(cfg, concrete=True)
    opts = flags_to_compiler_options(flags)
    lowered = jax.jit(step, donate_argnums=(0,)).lower(*args)
    compiled = lowered.compile(compiler_options=opts) if opts else lowered.compile()
    hlo = compiled.as_text()
    state, batch_arr = args
    for _ in range(3):
        state, loss = compiled(state, batch_arr)
    loss.block_until_ready()
    n = 3
    walls = []
    logdir = tempfile.mkdtemp()
    with jax.profiler.trace(logdir):
        for _ in range(n):
            t = time.perf_counter()
            state, loss = compiled(state, batch_arr)
            loss.block_until_ready()
            walls.append(1e3 * (time.perf_counter() - t))
    # back to back, untraced
    t = time.perf_counter()
    for _ in range(5):
        state, loss = compiled(state, batch_arr)
    loss.block_until_ready()
    pipelined = 1e3 * (time.perf_counter() - t) / 5
    trace = read_trace(logdir, module="jit_train_step")
    if not trace.step_windows:
        trace = read_trace(logdir)
    steps = []
    for ws, we in trace.step_windows:
        evs = [e for e in trace.events if e.start_ns < we and e.end_ns > ws]
        evs.sort(key=lambda e: e.start_ns)
        busy = _union([(max(e.start_ns, ws), min(e.end_ns, we)) for e in evs])
        kernel_sum = sum(min(e.end_ns, we) - max(e.start_ns, ws) for e in evs)
        gaps = []
        last_end, last_name = ws, "<step start>"
        for e in evs:
            if e.start_ns > last_end:
                gaps.append(
                    {
                        "us": (e.start_ns - last_end) / 1e3,
                        "after": last_name[:120],
                        "before": e.name[:120],
                        "before_hlo": e.hlo_op[:80],
                        "at_ms": (last_end - ws) / 1e6,
                    }
                )
            if e.end_ns > last_end:
                last_end, last_name = e.end_ns, e.name
        if we > last_end:
            gaps.append({"us": (we - last_end) / 1e3, "after": last_name, "before": "<end>"})
        gaps.sort(key=lambda g: -g["us"])
        hist = {}
        for lo, hi in ((0, 5), (5, 20), (20, 100), (100, 1000), (1000, 1e12)):
            sel = [g["us"] for g in gaps if lo <= g["us"] < hi]
            hist[f"{lo}-{hi if hi < 1e12 else 'inf'}us"] = {"n": len(sel), "ms": sum(sel) / 1e3}
        kinds = {}
        for e in evs:
            kinds.setdefault(e.kind, [0, 0.0])
            kinds[e.kind][0] += 1
            kinds[e.kind][1] += (e.end_ns - e.start_ns) / 1e6
        short = [e for e in evs if e.end_ns - e.start_ns < 20e3]
        steps.append(
            {
                "window_ms": (we - ws) / 1e6,
                "busy_ms": busy / 1e6,
                "idle_ms": (we - ws - busy) / 1e6,
                "kernel_sum_ms": kernel_sum / 1e6,
                "events": len(evs),
                "events_under_20us": len(short),
                "by_kind": kinds,
                "gap_histogram": hist,
                "top_gaps": gaps[:25],
            }
        )
    res = {
        "label": label,
        "model": model,
        "config": base,
        "policy": policy,
        "flags": flags,
        "wall_ms_traced": walls,
        "step_ms_pipelined": pipelined,
        "step_source": trace.step_source,
        "hlo_while": hlo.count(" while("),
        "hlo_fusions": hlo.count(" fusion("),
        "hlo_custom_calls": hlo.count(" custom-call("),
        "steps": steps,
    }
    (out / f"idle-{label}.json").write_text(json.dumps(res, indent=1))
    summary = {k: v for k, v in res.items() if k not in ("steps", "config")}
    summary["per_step"] = [
        {k: s[k] for k in ("window_ms", "busy_ms", "idle_ms", "events", "events_under_20us")}
        for s in steps
    ]
    print(json.dumps(summary), flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("all")
    a.add_argument("--out", type=Path, required=True)
    a.add_argument("--only", default="")
    a.add_argument("--budget-s", type=float, default=400)
    o = sub.add_parser("one")
    o.add_argument("--out", type=Path, required=True)
    o.add_argument("--model", default="llama")
    o.add_argument("--batch", type=int, default=1)
    o.add_argument("--policy", default="nothing_saveable")
    o.add_argument("--flags", default="")
    o.add_argument("--config", default="")
    o.add_argument("--label", default="run")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.cmd == "one":
        one(args.out, args.model, args.batch, args.policy, args.flags, args.config, args.label)
        return
    t0 = time.time()
    only = set(filter(None, args.only.split(",")))
    lines = []
    for label, model, batch, policy, flags, config in RUNS:
        if only and label not in only:
            continue
        if time.time() - t0 > args.budget_s:
            print(f"budget spent, skipping {label}", flush=True)
            continue
        cmd = [sys.executable, __file__, "one", "--out", str(args.out), "--model", model]
        cmd += ["--batch", str(batch), "--policy", policy, "--config", config, "--label", label]
        cmd += ["--flags=" + flags]
        t = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=False)
        last = (p.stdout.strip().splitlines() or [""])[-1]
        print(f"{label}: rc {p.returncode}, {time.time() - t:.0f} s: {last[:600]}", flush=True)
        if p.returncode:
            print(p.stderr[-2000:], flush=True)
        lines.append({"label": label, "rc": p.returncode, "out": last})
    (args.out / "idle-summary.json").write_text(json.dumps(lines, indent=1))


if __name__ == "__main__":
    main()
