"""Turn `gpu_bench.py compare` results into a Markdown table and a PNG.

    python benchmarks/summarize.py STOCK.jsonl [MORE.jsonl ...] --plans PLANS.jsonl \
        --md table.md --png curve.png

Stock measurements (``stock:NAME``) are taken from every file given (a later file wins);
the planner's rows come from ``--plans`` (default: the last file): its ``plan`` records (the
budget, the plan's decisions and predictions) and its ``plan@B`` jobs. A capped run that
failed is reported with the uncapped rerun's figures (``plan@B:uncapped``) and "no" under
"fits". Plans with the same decisions are the same program: one that was not run is shown
with the measurement of the identical plan that was (said in the row). Stock policies the
driver found identical (``same_program``) likewise. The predictions beside each measurement
come from the same plan record's baselines (one cost model for all rows).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _records(path: Path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load(stock_files: list[Path], plan_file: Path):
    stock, alias = {}, {}
    for f in stock_files:
        for r in _records(f):
            if r["kind"] == "job" and r["job"]["name"].startswith("stock:") and r["ok"]:
                stock[r["job"]["name"][6:]] = r
            elif r["kind"] == "same_program":
                alias[r["stock"]] = r["as"]
    plans, runs = {}, {}
    for r in _records(plan_file):
        if r["kind"] == "plan":
            plans[float(r["budget_gb"])] = r
        elif r["kind"] == "job" and r["job"]["name"].startswith("plan@"):
            name = r["job"]["name"][5:]
            b, _, tag = name.partition(":")
            runs.setdefault(float(b), {})[tag or "capped"] = r
    return stock, alias, plans, runs


def _plan_measurement(b, plans, runs):
    """(result, fits, note) for the plan at budget b, reusing an identical plan's run."""
    same = [b] + [
        o for o in sorted(plans) if o != b and plans[o]["decisions"] == plans[b]["decisions"]
    ]
    for o in same:
        got = runs.get(o, {})
        cap, unc = got.get("capped"), got.get("uncapped")
        note = "" if o == b else f"same decisions as the plan at {o:g} GB, measured there"
        if cap is not None and cap["ok"]:
            return cap["result"], cap["result"]["peak_bytes_in_use"] <= b * 1e9, note
        if unc is not None and unc["ok"]:
            return (
                unc["result"],
                False,
                (note + "; " if note else "") + ("capped run out of memory: uncapped figures"),
            )
        if cap is not None:
            return (
                None,
                False,
                ((note + "; ") if note else "")
                + (
                    "out of memory under the cap (the driver had no time left for an uncapped rerun)"
                ),
            )
    return None, None, "not measured"


def table(stock, alias, plans, runs):
    lines = [
        "| budget GB | policy | fits | measured peak GB | predicted peak GB | "
        "measured step ms | predicted step ms | tokens/s | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rows = []
    for b, plan in sorted(plans.items()):
        res, fits, note = _plan_measurement(b, plans, runs)
        cands = [("planner", res, fits, plan["predicted_peak"], plan["predicted_step_ms"], note)]
        for name, (pk, ms) in plan["baselines"].items():
            src = name if name in stock else alias.get(name)
            if src not in stock:
                continue
            r = stock[src]["result"]
            cands.append(
                (
                    name,
                    r,
                    r["peak_bytes_in_use"] <= b * 1e9,
                    pk,
                    ms,
                    "" if src == name else f"same program as {src}",
                )
            )
        for name, r, ok, pk, ms, note in cands:
            r = r or {}
            rows.append(
                dict(
                    budget=b,
                    name=name,
                    fits=ok,
                    peak=r.get("peak_bytes_in_use"),
                    pred_peak=pk,
                    step=r.get("step_ms_median"),
                    pred_step=ms,
                    tps=r.get("tokens_per_s"),
                    note=note,
                )
            )
    f = lambda x, d=1: "" if x is None else f"{x:,.{d}f}"
    for w in rows:
        fits = {True: "yes", False: "no", None: ""}[w["fits"]]
        lines.append(
            f"| {w['budget']:g} | {w['name']} | {fits} | {f(w['peak'] and w['peak'] / 1e9, 2)} | "
            f"{f(w['pred_peak'] and w['pred_peak'] / 1e9, 2)} | {f(w['step'])} | "
            f"{f(w['pred_step'])} | {f(w['tps'], 0)} | {w['note']} |"
        )
    return "\n".join(lines) + "\n", rows


def targets(rows) -> str:
    """Issue 4's targets per budget: plan vs the best stock policy that fits."""
    out = [
        "| budget GB | plan ms | best stock that fits | its ms | plan / best | "
        "plan vs full remat | plan peak error | plan step error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for b in sorted({w["budget"] for w in rows}):
        at = [w for w in rows if w["budget"] == b]
        plan = next(w for w in at if w["name"] == "planner")
        fitting = [w for w in at if w["name"] != "planner" and w["fits"] and w["step"]]
        best = min(fitting, key=lambda w: w["step"], default=None)
        full = next((w for w in at if w["name"] == "nothing_saveable" and w["step"]), None)
        if not plan["step"]:
            out.append(f"| {b:g} | {plan['note'] or 'not measured'} | | | | | | |")
            continue
        ratio = f"{plan['step'] / best['step']:.3f}" if best else ""
        gain = 100 * (1 - plan["step"] / full["step"]) if full else None
        vs = (
            "" if gain is None else (f"{gain:.1f}% faster" if gain >= 0 else f"{-gain:.1f}% slower")
        )
        pe = f"{100 * (plan['pred_peak'] / plan['peak'] - 1):+.1f}%" if plan["peak"] else ""
        se = f"{100 * (plan['pred_step'] / plan['step'] - 1):+.1f}%"
        out.append(
            f"| {b:g} | {plan['step']:,.1f}{'' if plan['fits'] else ' (did not fit)'} | "
            f"{best['name'] if best else ''} | {best['step']:,.1f} | {ratio} | {vs} | "
            f"{pe} | {se} |"
            if best
            else f"| {b:g} | {plan['step']:,.1f} | none | | | {vs} | {pe} | {se} |"
        )
    return "\n".join(out) + "\n"


def plot(rows, png: Path, title: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    names = sorted({w["name"] for w in rows}, key=lambda n: (n != "planner", n))
    for name in names:
        pts = [
            (w["budget"], w["step"]) for w in rows if w["name"] == name and w["fits"] and w["step"]
        ]
        if pts:
            xs, ys = zip(*sorted(pts))
            ax.plot(
                xs,
                ys,
                marker="o",
                lw=2.8 if name == "planner" else 1.2,
                label=name,
                color="black" if name == "planner" else None,
            )
    ax.set_xlabel("HBM budget (GB)")
    ax.set_ylabel("measured step time (ms), policies that fit")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+", type=Path)
    ap.add_argument("--plans", type=Path, help="file with the plan records (default: last)")
    ap.add_argument("--md")
    ap.add_argument("--png")
    ap.add_argument("--title", default="One H200: measured step time of the policies that fit")
    a = ap.parse_args()
    stock, alias, plans, runs = load(a.results, a.plans or a.results[-1])
    text, rows = table(stock, alias, plans, runs)
    text += "\n" + targets(rows)
    print(text)
    if a.md:
        Path(a.md).write_text(text)
    if a.png:
        plot(rows, Path(a.png), a.title)


if __name__ == "__main__":
    main()
