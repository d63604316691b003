"""Before/after rows of two benchmarks/memory_model.py --json files: table.py BEFORE AFTER."""

import json
import sys

b = json.load(open(sys.argv[1]))
a = json.load(open(sys.argv[2]))


def cell(v):
    return "{:.2f} / {:.2f} ({:+.1f}%)".format(
        v["pred"], v["compiled"], 100 * (v["pred"] / v["compiled"] - 1)
    )


for n in a:
    if n not in b:
        continue
    B, A = b[n], a[n]
    print(f"\n### {n}\n\n| row | before | after |\n|---|---|---|")
    print(
        f"| omega, F (MB) | {B['scale']:.3f}, {B['fixed']:.2f} | {A['scale']:.3f}, {A['fixed']:.2f} |"
    )
    for k in ("anchor_remat", "anchor_saved"):
        print(f"| {k} | {cell(B[k])} | {cell(A[k])} |")
    for pb, pa in zip(B["plans"], A["plans"]):
        print(
            f"| budget {pb['budget']:.1f} | {pb['choice']} {cell(pb)} | {pa['choice']} {cell(pa)} |"
        )
    for k in dict.fromkeys([*B["stock"], *A["stock"]]):
        print(
            f"| stock {k} |",
            cell(B["stock"][k]) if k in B["stock"] else "not run",
            "|",
            cell(A["stock"][k]) if k in A["stock"] else "not run",
            "|",
        )
