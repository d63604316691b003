"""Issue 18, requirements 1-2 checked on the CPU: the per-direction hiding models against the
H200 sweep's nine measured points.

    JAX_PLATFORMS=cpu python benchmarks/offload_windows.py --out benchmarks/results/offload-windows-2026-12-04.md
    JAX_PLATFORMS=cpu python benchmarks/offload_windows.py --out FILE --write-profile   # refit h200.json

Traces examples/llama.py H200_BENCH with cuDNN attention (8 layers under lax.scan, 32k tokens)
with abstract arguments for deviceless XLA:GPU (h200 target; the anchors compile, nothing
runs), builds the cost model with the h200 profile, and for each sweep point of
benchmarks/overlap_sweep.py (named sets offloaded under full remat) reads the offloaded
tensors' copy times and windows (stores: forward compute after the producer; reloads:
backward compute before the reader). The measured exposed copy time per trip per direction
is the median over the 8 layer trips of 2 steps (overlap_sweep.py's fit.json of
benchmarks/results/h200-2026-12-03-sweep/ and -sweep-part2/). It then fits every hiding
form (cost_models.HIDING_FORMS) per direction, keeps the one with the smallest leave-one-out
error (planner._src.profiling.calibrate_hiding), and tables predicted against measured
exposed ms per trip: before (the single overlap_efficiency, eta 0.0895) and after.
``--write-profile`` writes the fitted models with their source into
cost_models/profiles/h200.json. Needs the CUDA plugin (deviceless XLA:GPU: jax 0.11.2/0.12).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SWEEP = ("h200-2026-12-03-sweep", "h200-2026-12-03-sweep-part2")
RESULTS = ROOT / "benchmarks" / "results"


def measured() -> dict[int, tuple[float, float]]:
    """Point -> (d2h, h2d) exposed seconds per trip, from the two sweep runs' fit.json."""
    out = {}
    for d in SWEEP:
        for p in json.loads((RESULTS / d / "fit.json").read_text())["points"]:
            if p["d2h_exposed_s"] is not None:
                out[p["point"]] = (p["d2h_exposed_s"], p["h2d_exposed_s"])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", required=True, help="the markdown table")
    ap.add_argument("--write-profile", action="store_true", help="refit h200.json's models")
    ap.add_argument("--steps", type=int, default=100, help="grid steps per fitted parameter")
    a = ap.parse_args(argv)

    import jax

    import cost_models as cm
    from benchmarks.overlap_sweep import POINTS
    from examples import llama
    from planner._src.cost import build_cost_model
    from planner._src.graph import build_graph
    from planner._src.profiling import calibrate_hiding, sweep_windows
    from planner._src.trace import merge_call_sites, trace_step
    from planner._src.xla import deviceless
    from planner._src.xla import targets as T

    t0 = time.perf_counter()
    cfg = dataclasses.replace(llama.H200_BENCH, attention_impl="cudnn")
    step, args = llama.make_train_step(cfg)
    tgt = T.resolve("h200", num_devices=1)
    if tgt.kind != "deviceless":
        raise SystemExit(f"needs deviceless XLA:GPU (JAX_PLATFORMS=cpu, CUDA plugin): {tgt}")
    args = deviceless.args_for(tgt, args)
    shipped = cm.load_profile("h200")
    # "before": the same profile without calibrated models (the single overlap efficiency)
    before_hw = shipped.replace(
        link=dataclasses.replace(shipped.link, d2h_hiding=None, h2d_hiding=None)
    )
    with deviceless.target_scope(tgt):
        tr = merge_call_sites(
            trace_step(step, args, split_call_sites=True, backend="cuda", compiler=tgt.description)
        )
        graph = build_graph(tr)
        cost = build_cost_model(tr, graph, before_hw, allow_offload=True)
        windows = sweep_windows(step, args, POINTS, before_hw, cost=cost, graph=graph)
    meas = measured()
    idx = [i for i in range(len(POINTS)) if i in meas]
    source = (
        "fitted on the CPU by benchmarks/offload_windows.py (2026-12-04) to the 9 points of "
        "the H200 copy-heavy sweep (benchmarks/results/h200-2026-12-03-sweep.md and "
        "h200-2026-12-03-sweep-part2.md: examples/llama.py H200_BENCH, cuDNN attention, 8 "
        "layers under lax.scan, 32k tokens, named sets offloaded under full remat, planner's "
        "XLA flags, JAX 0.11.2; exposed copy time per trip from planner.profile, median of 8 "
        "trips x 2 steps), against the cost model's own per-tensor windows of that step "
        "(deviceless XLA:GPU trace); table: benchmarks/results/offload-windows-2026-12-04.md"
    )
    fitted_hw, fits = calibrate_hiding(
        [windows[i] for i in idx],
        [meas[i] for i in idx],
        before_hw,
        source=source,
        steps=a.steps,
    )
    after_cost = dataclasses.replace(
        cost, d2h_hiding=fitted_hw.link.d2h_hiding, h2d_hiding=fitted_hw.link.h2d_hiding
    )
    after = sweep_windows(step, args, POINTS, fitted_hw, cost=after_cost, graph=graph)
    rc = cost.regions[0]

    def ms(x):
        return f"{x * 1e3:.2f}"

    def ok(p, m):
        return abs(p - m) <= 0.2 * m

    rows, counts = [], {"before": [0, 0], "after": [0, 0], "both_before": 0, "both_after": 0}
    for i in idx:
        m, b, f = meas[i], windows[i], after[i]
        okb = (ok(b["predicted_d2h_s"], m[0]), ok(b["predicted_h2d_s"], m[1]))
        oka = (ok(f["predicted_d2h_s"], m[0]), ok(f["predicted_h2d_s"], m[1]))
        for k in range(2):
            counts["before"][k] += okb[k]
            counts["after"][k] += oka[k]
        counts["both_before"] += all(okb)
        counts["both_after"] += all(oka)
        mb = sum(c for c, _ in b["d2h"]) * cost.hardware.link.d2h_bytes_per_s / 1e6
        win = lambda ws: ", ".join(f"{w * 1e3:.1f}" for _, w in ws)  # noqa: E731
        rows.append(
            f"| {i} | {', '.join(POINTS[i])} | {mb:,.0f} | {win(b['d2h'])} | {ms(m[0])} | "
            f"{ms(b['predicted_d2h_s'])}{' ✓' if okb[0] else ''} | "
            f"{ms(f['predicted_d2h_s'])}{' ✓' if oka[0] else ''} | {win(b['h2d'])} | "
            f"{ms(m[1])} | {ms(b['predicted_h2d_s'])}{' ✓' if okb[1] else ''} | "
            f"{ms(f['predicted_h2d_s'])}{' ✓' if oka[1] else ''} |"
        )
    import math

    fit_rows = []
    for k, d in enumerate(("d2h", "h2d")):  # before: the profile's eta, not fitted here
        err = [windows[i][f"predicted_{d}_s"] - meas[i][k] for i in idx]
        rms = math.sqrt(sum(e * e for e in err) / len(err))
        fit_rows.append(
            f"| {d} | before: overlap_efficiency | {shipped.overlap_efficiency:.4f} | none | 0.00 | "
            f"{rms * 1e3:.2f} | (not fitted here) | {counts['before'][k]} of {len(idx)} |"
        )
    for d, fit in fits.items():
        for name, (mod, rms, loo, within) in fit.forms.items():
            cap = "none" if mod.capacity_s == float("inf") else f"{mod.capacity_s * 1e3:.2f} ms"
            fit_rows.append(
                f"| {d} | {name}{' (kept)' if name == fit.best else ''} | {mod.eta:.3f} | {cap} | "
                f"{mod.floor:.2f} | {rms * 1e3:.2f} | {loo * 1e3:.2f} | {within} of {len(idx)} |"
            )
    n = len(idx)
    text = f"""# Offload windows: per-direction hiding models against the H200 sweep (2026-12-04)

Issue 18, requirements 1-2, checked on the CPU (no device time): {datetime.date.today()}, JAX
{jax.__version__}, deviceless XLA:GPU for the H200 (`JAX_PLATFORMS=cpu`, CUDA plugin), a
2-core CPU. Command:

    JAX_PLATFORMS=cpu python benchmarks/offload_windows.py --out {a.out}{" --write-profile" if a.write_profile else ""}

The step: examples/llama.py H200_BENCH with cuDNN attention, traced with abstract arguments
(the two anchors compile deviceless; nothing runs). Cost model with the h200 profile: one
layer trip's forward {ms(rc.fwd_s)} ms, backward {ms(rc.bwd_s)} ms. Measured: the H200 sweep of
2026-12-03 ({", ".join(f"`{d}.md`" for d in SWEEP)}): exposed copy time per layer trip, per
direction, median of 8 trips x 2 steps. Windows (ms, per offloaded tensor in production
order): stores, the forward compute after the producer; reloads, the backward compute
before the reader. Before: the profile's single `overlap_efficiency` ({shipped.overlap_efficiency})
as eta in both directions. After: the per-direction models fitted here. ✓: within 20% of
measured. Wall time {time.perf_counter() - t0:.0f} s.

| point | offloaded | MB/trip | d2h windows | d2h measured | before | after | h2d windows | h2d measured | before | after |
|---|---|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

Within 20% of measured: before, d2h {counts["before"][0]} of {n}, h2d {counts["before"][1]} of {n}
(both directions of one point: {counts["both_before"]}); after, d2h {counts["after"][0]} of {n},
h2d {counts["after"][1]} of {n} (both directions: {counts["both_after"]}). The after figures are
in-sample (fitted to these points); the leave-one-out errors below are the honest estimate of
the error on a new offload set.

## The candidate forms (cost_models._hiding: exposed = max(floor x C, C - capacity, max_u (C_u - eta x window_u)))

Least squares on a grid ({a.steps} steps per parameter); kept: the smallest leave-one-out
rms (each point predicted by the form fitted to the other {n - 1}).

| direction | form | eta | capacity | floor | rms ms | leave-one-out rms ms | within 20% |
|---|---|---|---|---|---|---|---|
{chr(10).join(fit_rows)}
"""
    Path(a.out).write_text(text, encoding="utf-8")
    print(text)
    if a.write_profile:
        path = ROOT / "cost_models" / "profiles" / "h200.json"
        data = json.loads(path.read_text())
        for d in ("d2h", "h2d"):
            key = f"{d}_hiding"
            data["link"][key] = {
                "value": getattr(fitted_hw.link, key).to_json(),
                "source": fitted_hw.source(f"link.{key}"),
            }
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        cm.load_profile("h200")  # it loads
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
