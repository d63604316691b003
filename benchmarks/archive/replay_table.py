"""The table of a ``gpu_bench.py replay`` run: each plan, run capped at its budget, beside
the fastest stock policy whose measured peak fits that budget.

    python benchmarks/archive/replay_table.py benchmarks/results/h200-2026-12-02-zoo/loop/results.jsonl

Peak: the allocator's ``peak_bytes_in_use`` on the GPU; "compiled": ``argument + output -
alias + temp`` of the run's ``memory_analysis()``; step: the median of the measured steps.
"""

from __future__ import annotations

import json
import sys


def _compiled(r: dict) -> int:
    return r["argument_bytes"] + r["output_bytes"] - r["alias_bytes"] + r["temp_bytes"]


def table(path: str) -> str:
    plans, stock, same = {}, {}, {}
    for line in open(path):
        rec = json.loads(line)
        if rec["kind"] == "job":
            name, res = rec["job"]["name"], rec["result"]
            if name.startswith("plan@"):
                b = name[5:].removesuffix(":uncapped")
                plans.setdefault(b, []).append((name.endswith(":uncapped"), rec))
            elif name.startswith("stock:") and rec["ok"]:
                stock[name[6:]] = res
        elif rec["kind"] == "same_program":
            same[rec["stock"]] = rec["as"]
    for alias, src in same.items():
        if src in stock:
            stock[alias] = stock[src]
    rows = [
        "| budget GB | planner's answer | capped run | peak GB | compiled GB | step ms "
        "| best stock that fits (peak GB, step ms) | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for b, runs in plans.items():
        capped = next(r for u, r in runs if not u)
        res = capped["result"]
        choice = capped["job"]["policy"].get("name", "plan")
        budget = float(b) * 1e9
        fits = {k: v for k, v in stock.items() if v["peak_bytes_in_use"] <= budget}
        best = min(fits, key=lambda k: fits[k]["step_ms_median"]) if fits else None
        if res is None:
            rows.append(f"| {b} | {choice} | failed: {(capped['tail'] or '')[-120:]!r} |||||")
            continue
        ratio = res["step_ms_median"] / fits[best]["step_ms_median"] if best else float("nan")
        rows.append(
            f"| {b} | {choice} | ran | {res['peak_bytes_in_use'] / 1e9:.2f} | "
            f"{_compiled(res) / 1e9:.2f} | {res['step_ms_median']:.1f} | "
            + (
                f"{best} ({fits[best]['peak_bytes_in_use'] / 1e9:.2f}, "
                f"{fits[best]['step_ms_median']:.1f})"
                if best
                else "none fits"
            )
            + f" | {ratio:.3f} |"
        )
    rows += ["", "| stock policy | peak GB | compiled GB | step ms |", "|---|---|---|---|"]
    for k, v in sorted(stock.items(), key=lambda kv: kv[1]["peak_bytes_in_use"]):
        rows.append(
            f"| {k} | {v['peak_bytes_in_use'] / 1e9:.2f} | {_compiled(v) / 1e9:.2f} | "
            f"{v['step_ms_median']:.1f} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(f"### {p}\n\n{table(p)}\n")
