"""Issue 18, requirement 4: what makes XLA issue the device-to-host copy (the store) earlier.

    python benchmarks/archive/store_hiding.py --out DIR                       # every variant, points 3 and 6
    python benchmarks/archive/store_hiding.py --out DIR --variants lhs,sol --points 6
    python benchmarks/archive/store_hiding.py --out DIR --summarize           # the table only

On 2026-12-02 the H200 trace of an offloading step hid 132.6 of 133.0 ms of reloads but 48.4 of
130.3 ms of stores: with the planner's flags (latency-hiding scheduler, command buffers off)
XLA starts each store late. The sweep of 2026-12-03 (h200-2026-12-03-sweep*.md) showed the
same per tensor: q, k, v offloaded (403 MB per trip) left 5.13 of 8.27 ms of stores exposed per
trip; the two MLP inputs (1,879 MB) hid 5.63 ms of ~37 ms.

Model and points: as benchmarks/overlap_sweep.py (examples/llama.py H200_BENCH, cuDNN attention,
8 layers under lax.scan, 32k tokens, bf16; full remat plus the point's named set offloaded).
Each variant is one way to move the store's start earlier, each job a fresh process traced by
``planner.profile`` (per direction per trip: copy time and the part no compute overlaps) and
then timed untraced:

- ``lhs``: the planner's flags (baseline, as the sweep);
- ``analytical``: + ``--xla_gpu_enable_analytical_latency_estimator=true``: the scheduler
  estimates each async copy's latency from its bytes instead of a fixed small cost, so it has
  a reason to put compute between a copy's start and done
  (openxla/xla xla/service/gpu/gpu_hlo_schedule.cc, ``GetLatencyEstimator``);
- ``sol``: + ``--xla_gpu_enable_analytical_sol_latency_estimator=true`` (the speed-of-light
  estimator, same place);
- ``pipelined``: + ``--xla_gpu_enable_pipelined_host_offloading=true`` (moves the store into the
  next trip; benchmarks/flag_sets.json);
- ``split2``: the planner's flags, two layers per scan trip (``layers_per_iter=2``: each layer
  its own checkpoint, so the first layer's stores can run under the second layer's compute).

Results: DIR/results.jsonl (one record per job) and DIR/summary.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import overlap_sweep as sw  # noqa: E402
from benchmarks import profile_overlap as po  # noqa: E402

LHS = "--xla_gpu_enable_latency_hiding_scheduler=true"
PIPELINED = "--xla_gpu_enable_pipelined_host_offloading=true"
SPLIT2 = {"layers_per_iter": 2}

# name -> (flags added to the planner's, flags removed from them, model config changes)
VARIANTS = {
    "lhs": ((), (), {}),
    "analytical": (("--xla_gpu_enable_analytical_latency_estimator=true",), (), {}),
    "sol": (("--xla_gpu_enable_analytical_sol_latency_estimator=true",), (), {}),
    "pipelined": ((PIPELINED,), (), {}),
    "split2": ((), (), SPLIT2),
    "pipelined_split2": ((PIPELINED,), (), SPLIT2),
    # The planner's flags without the latency-hiding scheduler: XLA's memory scheduler, whose
    # post-processing puts async starts as early and dones as late as it can
    # (gpu_hlo_schedule.cc, PostprocessorToScheduleAsEarlyOrLateAsPossible).
    "nolhs": ((), (LHS,), {}),
    # A lead from the schedule replay (2026-12-05): with offset verification on, XLA keeps
    # the loop's dynamic-slice copies out of the asynchronous dynamic-slice fusion path, and
    # the replay of the deviceless schedule finds no store exposed for the long-context plans.
    "verify_offsets": (
        ("--xla_gpu_experimental_dynamic_slice_fusion_verify_offsets=true",),
        (),
        {},
    ),
}


def _describe(variant: str) -> str:
    add, drop, cfg = VARIANTS[variant]
    parts = [*(f"+ {f}" for f in add), *(f"without {f}" for f in drop)]
    parts += [f"{k}={v}" for k, v in cfg.items()]
    return ", ".join(parts) or "(planner flags)"


def run(a) -> None:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    base_flags = sw._flags()
    cache = {
        "JAX_COMPILATION_CACHE_DIR": "/tmp/store-hiding-jax-cache",
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }
    t0 = time.monotonic()
    for i in [int(p) for p in a.points.split(",")]:
        for v in a.variants.split(","):
            if time.monotonic() - t0 > a.budget_s - a.timeout:
                print(f"out of time before point {i} {v}", file=sys.stderr)
                return
            add, drop, cfg = VARIANTS[v]
            flags = " ".join([*(f for f in base_flags.split() if f not in drop), *add])
            names = list(sw.POINTS[i])
            po.spawn(
                {
                    "kind": "profile",
                    "config": {**sw._bench_config(), **cfg},
                    "flags": flags,
                    "env": cache,
                    "point": i,
                    "variant": v,
                    "policy": {"kind": "names", "save": [], "offload": names},
                    "steps": a.steps,
                    "png": str(out / f"p{i}-{v}.png") if a.png else "/dev/null",
                    "profile_json": "/dev/null",
                },
                out,
                a.timeout,
            )


def summarize(a) -> str:
    out = Path(a.out)
    recs = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines() if x]
    rows = [
        "| point | variant | change | d2h ms/step | d2h exposed | h2d ms/step | h2d exposed "
        "| step ms (untraced) | peak GB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in recs:
        j = r["job"]
        extra = _describe(j["variant"])
        res = r.get("result") or {}
        steps = (res.get("profile") or {}).get("steps") or []
        if not steps:
            err = [x for x in (r.get("error") or "no trace").strip().splitlines() if x.strip()]
            why = next((x for x in reversed(err) if "Error" in x), err[-1])
            if r.get("rc") == -6:  # SIGABRT: XLA's own check; name its innermost XLA frame
                frame = next((x for x in err if "xla::" in x), why).split("xla::", 1)[-1]
                why = f"XLA aborted (SIGABRT) in xla::{frame.strip()}"
            rows.append(f"| {j['point']} | {j['variant']} | {extra} | failed: {why[:160]} |")
            continue

        def per_step(key, steps=steps):
            return statistics.median(sum(t[key] for t in s.get("per_trip") or []) for s in steps)

        d2h, d2h_x = per_step("d2h_s"), per_step("d2h_exposed_s")
        h2d, h2d_x = per_step("h2d_s"), per_step("h2d_exposed_s")
        peak = res.get("peak_bytes_in_use")
        rows.append(
            f"| {j['point']} ({', '.join(sw.POINTS[j['point']])}) | {j['variant']} | {extra} | "
            f"{d2h * 1e3:.1f} | {d2h_x * 1e3:.1f} ({d2h_x / max(d2h, 1e-12):.0%}) | "
            f"{h2d * 1e3:.1f} | {h2d_x * 1e3:.1f} ({h2d_x / max(h2d, 1e-12):.0%}) | "
            f"{res.get('untraced_step_ms', float('nan')):.1f} | "
            f"{'n/a' if peak is None else f'{peak / 1e9:.2f}'} |"
        )
    text = "\n".join(rows) + "\n"
    (out / "summary.md").write_text(text)
    print(text)
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", required=True)
    ap.add_argument("--points", default="3,6", help="indices into overlap_sweep.POINTS")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per job")
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop starting jobs after")
    ap.add_argument("--png", action="store_true", help="a timeline PNG per job")
    ap.add_argument("--summarize", action="store_true")
    a = ap.parse_args(argv)
    if not a.summarize:
        run(a)
    summarize(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
