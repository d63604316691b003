"""Before/after rows of two benchmarks/memory_model.py --json files: table.py BEFORE AFTER."""

import json
import sys

before, after = (json.load(open(p)) for p in sys.argv[1:3])


def cell(v):
    return "{:.2f} / {:.2f} ({:+.1f}%)".format(
        v["pred"], v["compiled"], 100 * (v["pred"] / v["compiled"] - 1)
    )


for name in before:
    b, a = before[name], after[name]
    print(f"\n### {name}\n")
    print("| row | before (summed W) | after (largest branch) |")
    print("|---|---|---|")
    print(
        "| omega, F (MB) | {:.3f}, {:.2f} | {:.3f}, {:.2f} |".format(
            b["scale"], b["fixed"], a["scale"], a["fixed"]
        )
    )
    for k in ("anchor_remat", "anchor_saved"):
        print(f"| {k} (ws {b[k]['ws']:.2f} / {a[k]['ws']:.2f}) | {cell(b[k])} | {cell(a[k])} |")
    for pb, pa in zip(b["plans"], a["plans"]):
        print(
            "| budget {:.1f} | {} {} | {} {} |".format(
                pb["budget"], pb["choice"], cell(pb), pa["choice"], cell(pa)
            )
        )
    for k in dict.fromkeys([*b["stock"], *a["stock"]]):
        cells = [cell(x["stock"][k]) if k in x["stock"] else "not run" for x in (b, a)]
        print(f"| stock {k} | {cells[0]} | {cells[1]} |")
