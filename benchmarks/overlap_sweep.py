"""Issue 18, requirement 1: how much host-copy time a layer trip can hide, per direction.

    python benchmarks/overlap_sweep.py --out benchmarks/results/h200-YYYY-MM-DD-sweep
    python benchmarks/overlap_sweep.py --out DIR --points 0-4      # a part of the sweep
    python benchmarks/overlap_sweep.py --out DIR --summarize       # the table and the fit

Model: examples/llama.py H200_BENCH (8 layers under lax.scan, 32k tokens, bf16) with cuDNN
attention. Each sweep point offloads a set of named tensors (MaxText's names) and
rematerializes everything else (``save_and_offload_only_these_names(save=[], offload=set)``):
from one KV projection (67 MB per layer trip, 1.3 ms over a 52 GB/s link) to all seven
projections (3.3 GB per trip, 63 ms), past what a trip's compute can hide. Per point, each in
a fresh process with the planner's XLA flags (``cost_models.xla_flags_for(h200,
offloading=True)``):

1. the offloading step, traced (``planner.profile``: per direction the copy time and the part
   of it no compute overlaps, per step and per layer trip), then timed untraced;
2. the same step with the offloaded set **saved** instead, timed untraced: the offload's
   step-time cost is ``step(offload) - step(save)`` (same compute, same HBM residency but the
   copies).

Results: DIR/results.jsonl (one record per job), DIR/summary.md (per point: bytes per trip,
copy and exposed ms per direction per trip, the step-time cost) and DIR/fit.json (per
direction, the hinge ``exposed = max(floor * copy, copy - capacity)`` fitted to the per-trip
figures, in seconds and as a fraction of the trip's compute).

The calibration mode (issue 18, requirement 1): ``--summarize --fit-profile OUT.json`` also
traces the swept step (on this machine's backend, or deviceless XLA:GPU with
``JAX_PLATFORMS=cpu``), reads the cost model's per-tensor windows for every point
(``planner._src.profiling.sweep_windows``), fits the per-direction hiding models to the
measured exposed time per trip (``calibrate_hiding``: every form of
``cost_models.HIDING_FORMS``, the smallest leave-one-out error kept) and writes the profile
(``--hardware``, default h200) with them and their source to OUT.json:

    python benchmarks/overlap_sweep.py --out DIR                       # on the device
    python benchmarks/overlap_sweep.py --out DIR --summarize --fit-profile DIR/profile.json
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import profile_overlap as po  # noqa: E402

# Offloaded name sets, in increasing bytes per layer trip (H200_BENCH: 32768 tokens; q/out
# 268 MB, k/v 67 MB, mlpwi_* 940 MB, mlpwo 268 MB, bf16).
POINTS = (
    ("key_proj",),
    ("key_proj", "value_proj"),
    ("query_proj",),
    ("query_proj", "key_proj", "value_proj"),
    ("query_proj", "key_proj", "value_proj", "out_proj"),
    ("mlpwi_0",),
    ("mlpwi_0", "mlpwi_1"),
    ("query_proj", "mlpwi_0", "mlpwi_1", "mlpwo"),
    ("query_proj", "key_proj", "value_proj", "out_proj", "mlpwi_0", "mlpwi_1", "mlpwo"),
)


def _bench_config() -> dict:
    """examples/llama.py's H200_BENCH with cuDNN attention, as a job's JSON config."""
    import dataclasses

    from examples import llama

    cfg = dataclasses.asdict(llama.H200_BENCH)
    cfg.pop("remat_policy")  # set per job from the point's policy
    return {**cfg, "attention_impl": "cudnn"}


def _flags() -> str:
    import cost_models as cm

    hw = cm.load_profile("h200")
    return cm.format_xla_flags(cm.xla_flags_for(hw, offloading=True))


def _parse_points(text: str) -> list[int]:
    if not text:
        return list(range(len(POINTS)))
    out = []  # in the order given: the most informative points first when time is short
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def run(a) -> None:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    flags = _flags()
    config = json.loads(a.config) if a.config else _bench_config()
    # A second compile of the same program (the untraced timing after the trace) is read from
    # the persistent cache instead of compiled again: device time is what the sweep is short of.
    cache = {
        "JAX_COMPILATION_CACHE_DIR": os.environ.get(
            "SWEEP_JAX_CACHE", "/tmp/overlap-sweep-jax-cache"
        ),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }
    base = {"kind": "profile", "config": config, "flags": flags, "env": cache}
    t0 = time.monotonic()
    for i in _parse_points(a.points):
        if time.monotonic() - t0 > a.budget_s - 2 * a.timeout:
            print(f"out of time before point {i}", file=sys.stderr)
            break
        names = list(POINTS[i])
        off = {"kind": "names", "save": [], "offload": names}
        sav = {"kind": "names", "save": names, "offload": []}
        po.spawn(
            {
                **base,
                "point": i,
                "variant": "offload",
                "policy": off,
                "steps": a.steps,
                "png": str(out / f"point{i}.png"),
                "profile_json": str(out / f"point{i}-measured.json"),
            },
            out,
            a.timeout,
        )
        if a.no_saved:
            continue
        po.spawn(
            {
                **base,
                "point": i,
                "variant": "saved",
                "policy": sav,
                "steps": a.steps,
                "trace": False,
            },
            out,
            a.timeout,
        )


def _hinge_fit(xs: list[float], ys: list[float]) -> dict:
    """Least squares over (floor, capacity) of ``y = max(floor * x, x - capacity)``, on a grid
    (the function is not differentiable at the kink; two parameters, a few points)."""
    best = None
    top = max(xs) if xs else 0.0
    for fi in range(0, 101):
        floor = fi / 100
        for ci in range(0, 401):
            cap = top * ci / 400
            err = sum((max(floor * x, x - cap) - y) ** 2 for x, y in zip(xs, ys))
            if best is None or err < best[0]:
                best = (err, floor, cap)
    err, floor, cap = best or (0.0, 0.0, 0.0)
    return {"floor": floor, "capacity_s": cap, "rms_s": (err / max(1, len(xs))) ** 0.5}


def summarize(a) -> None:
    out = Path(a.out)
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    by = {}
    for r in recs:
        j = r["job"]
        by.setdefault(j["point"], {})[j["variant"]] = r
    rows = [
        "| point | offloaded | MB per trip | d2h ms/trip | d2h exposed | h2d ms/trip | "
        "h2d exposed | step ms offload | step ms saved | cost ms | exposed ms (trace, step) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    fit_in = {"d2h": ([], []), "h2d": ([], [])}
    points = []
    for i in sorted(by):
        off, sav = by[i].get("offload", {}), by[i].get("saved", {})
        ro, rs = off.get("result") or {}, sav.get("result") or {}
        prof = ro.get("profile") or {}
        steps = prof.get("steps") or []
        trips = [t for s in steps for t in (s.get("per_trip") or [])]
        # d2h trips are forward layers, h2d backward layers: per trip, the median over steps
        d2h = statistics.median([t["d2h_s"] for t in trips]) if trips else None
        d2h_x = statistics.median([t["d2h_exposed_s"] for t in trips]) if trips else None
        h2d = statistics.median([t["h2d_s"] for t in trips]) if trips else None
        h2d_x = statistics.median([t["h2d_exposed_s"] for t in trips]) if trips else None
        med = prof.get("median") or {}
        so, ss = ro.get("untraced_step_ms"), rs.get("untraced_step_ms")
        mb = sum(_MB[n] for n in POINTS[i])
        if d2h is not None:
            fit_in["d2h"][0].append(d2h)
            fit_in["d2h"][1].append(d2h_x)
            fit_in["h2d"][0].append(h2d)
            fit_in["h2d"][1].append(h2d_x)
        points.append(
            {
                "point": i,
                "offloaded": list(POINTS[i]),
                "mb_per_trip": mb,
                "d2h_s": d2h,
                "d2h_exposed_s": d2h_x,
                "h2d_s": h2d,
                "h2d_exposed_s": h2d_x,
                "step_ms_offload": so,
                "step_ms_saved": ss,
                "compute_s": med.get("compute_s"),
                "exposed_s": med.get("exposed_s"),
                "errors": [r.get("error", "")[-300:] for r in (off, sav) if r.get("rc") != 0],
            }
        )

        def f(x, scale=1e3):
            return "n/a" if x is None else f"{x * scale:,.2f}"

        rows.append(
            f"| {i} | {', '.join(POINTS[i])} | {mb:,.0f} | {f(d2h)} | {f(d2h_x)} | {f(h2d)} | "
            f"{f(h2d_x)} | {f(so, 1)} | {f(ss, 1)} | "
            f"{'n/a' if so is None or ss is None else f'{so - ss:,.1f}'} | "
            f"{f(med.get('exposed_s'))} |"
        )
    fit = {d: _hinge_fit(*fit_in[d]) for d in fit_in}
    (out / "fit.json").write_text(json.dumps({"fit": fit, "points": points}, indent=2))
    text = (
        f"# Exposed host-copy time per layer trip, per direction ({datetime.date.today()})\n\n"
        f"Command: `python benchmarks/overlap_sweep.py {' '.join(sys.argv[1:])}`\n\n"
        + "\n".join(rows)
        + "\n\nFit per direction, per trip: `exposed = max(floor * copy, copy - capacity)`:\n\n"
        + "\n".join(
            f"- {d}: floor {v['floor']:.2f}, capacity {v['capacity_s'] * 1e3:.2f} ms, "
            f"rms {v['rms_s'] * 1e3:.2f} ms"
            for d, v in fit.items()
        )
        + "\n"
    )
    (out / "summary.md").write_text(text)
    print(text)
    if a.fit_profile:
        fit_profile(a, by)


def fit_profile(a, by: dict) -> None:
    """The calibration mode: windows from the cost model, the fit, the profile written."""
    import dataclasses

    from examples import llama
    from planner._src.profiling import calibrate_hiding, measured_per_trip, sweep_windows
    from planner._src.xla import deviceless

    points = [
        i for i in sorted(by) if ((by[i].get("offload") or {}).get("result") or {}).get("profile")
    ]
    if len(points) < 3:
        raise SystemExit(f"--fit-profile needs at least 3 traced points, DIR has {points}")
    job = by[points[0]]["offload"]["job"]
    cfg = llama.LlamaConfig(**job["config"])
    step, args = llama.make_train_step(dataclasses.replace(cfg, remat_policy=None))
    import cost_models as cm
    from planner._src.planning.inputs import resolve_compiler

    hw = a.hardware
    tgt = resolve_compiler(cm.load_profile(hw), args, "auto")
    if tgt.kind == "deviceless":
        args = deviceless.args_for(tgt, args)
    scope = deviceless.target_scope(tgt) if tgt.kind == "deviceless" else contextlib.nullcontext()
    with scope:
        windows = sweep_windows(step, args, [POINTS[i] for i in points], hw)
    measured = [measured_per_trip(by[i]["offload"]["result"]["profile"]) for i in points]
    source = (
        f"fitted by benchmarks/overlap_sweep.py --fit-profile ({datetime.date.today()}) to "
        f"{len(points)} points of a copy-heavy sweep in {a.out} (results.jsonl: named sets "
        "offloaded under full remat, exposed copy time per trip from planner.profile, median "
        f"over trips and steps; XLA flags {job.get('flags', '')!r}), against the cost model's "
        f"per-tensor windows ({tgt.description})"
    )
    profile, fits = calibrate_hiding(windows, measured, hw, source=source)
    path = Path(a.fit_profile)
    path.write_text(json.dumps(profile.to_json(), indent=2) + "\n", encoding="utf-8")
    for d, f in fits.items():
        print(f"{d}: kept {f.best}; {f.describe()}")
    print(f"wrote {path}; plan with it: hardware={str(path)!r}")


# Bytes per layer trip of each name in H200_BENCH (32768 tokens x width x 2 bytes), MB.
_MB = {
    "query_proj": 32768 * 4096 * 2 / 1e6,
    "key_proj": 32768 * 1024 * 2 / 1e6,
    "value_proj": 32768 * 1024 * 2 / 1e6,
    "out_proj": 32768 * 4096 * 2 / 1e6,
    "mlpwi_0": 32768 * 14336 * 2 / 1e6,
    "mlpwi_1": 32768 * 14336 * 2 / 1e6,
    "mlpwo": 32768 * 4096 * 2 / 1e6,
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", required=True)
    ap.add_argument("--points", default="", help="indices into POINTS, e.g. 0-4 or 1,3")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per job")
    ap.add_argument("--no-saved", action="store_true", help="skip the saved-instead runs")
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop starting points after")
    ap.add_argument("--summarize", action="store_true", help="only write the table and fit")
    ap.add_argument("--config", default="", help="JSON LlamaConfig fields (a CPU smoke test)")
    ap.add_argument("--fit-profile", default="", help="with --summarize: write a profile")
    ap.add_argument("--hardware", default="h200", help="the profile --fit-profile starts from")
    a = ap.parse_args(argv)
    if not a.summarize:
        run(a)
    summarize(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
