"""Turn a `gpu_bench.py compare` results.jsonl into a Markdown table and a PNG.

    python benchmarks/summarize.py benchmarks/results/h200-2026-11-30-compare/results.jsonl \
        --md benchmarks/results/h200-2026-11-30.md --png benchmarks/results/h200-2026-11-30.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def load(path: Path):
    plans, jobs = {}, {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r["kind"] == "plan":
            plans[float(r["budget_gb"])] = r
        elif r["kind"] == "job" and r["job"].get("type") != "plan":
            jobs[r["job"]["name"]] = r
    return plans, jobs


def table(plans, jobs) -> str:
    stock = {n.split(":", 1)[1]: r for n, r in jobs.items() if n.startswith("stock:")}
    lines = ["| budget GB | policy | fits (measured peak <= budget) | measured peak GB | "
             "predicted peak GB | measured step ms | predicted step ms | tokens/s |",
             "|---|---|---|---|---|---|---|---|"]
    rows = []
    for b, plan in sorted(plans.items()):
        candidates = [("planner", jobs.get(f"plan@{b}"), plan["predicted_peak"],
                       plan["predicted_step_ms"])]
        for name, r in stock.items():
            pk, ms = plan["baselines"].get(name, [None, None])
            candidates.append((name, r, pk, ms))
        for name, r, pk, ms in candidates:
            res = (r or {}).get("result") or {}
            peak = res.get("peak_bytes_in_use")
            fits = peak is not None and peak <= b * 1e9
            rows.append((b, name, fits, peak, pk, res.get("step_ms_median"), ms,
                         res.get("tokens_per_s")))
    for b, name, fits, peak, pk, meas, pred, tps in rows:
        f = lambda x, d=1: "" if x is None else f"{x:,.{d}f}"
        lines.append(f"| {b:g} | {name} | {'yes' if fits else 'no'} | {f(peak and peak / 1e9, 2)} | "
                     f"{f(pk and pk / 1e9, 2)} | {f(meas)} | {f(pred)} | {f(tps, 0)} |")
    return "\n".join(lines) + "\n", rows


def plot(rows, png: Path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    names = sorted({r[1] for r in rows}, key=lambda n: (n != "planner", n))
    for name in names:
        pts = [(b, meas) for b, n, fits, _, _, meas, _, _ in rows if n == name and fits and meas]
        if pts:
            xs, ys = zip(*sorted(pts))
            ax.plot(xs, ys, marker="o", lw=2.5 if name == "planner" else 1.2, label=name)
    ax.set_xlabel("HBM budget (GB)")
    ax.set_ylabel("measured step time (ms)")
    ax.set_title("Example model on one H200: policies that fit each budget")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--md")
    ap.add_argument("--png")
    a = ap.parse_args()
    plans, jobs = load(Path(a.results))
    text, rows = table(plans, jobs)
    print(text)
    if a.png:
        plot(rows, Path(a.png))


if __name__ == "__main__":
    main()
