import json
import sys

b, a = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))


def cell(p, c):
    return f"{p:.2f} / {c:.2f} ({(p / c - 1) * 100:+.1f}%)" if c else f"{p:.2f} / -"


for n in a:
    rb, ra = b[n], a[n]
    print(f"\n### {n}\n\n| row | before | after |\n|---|---|---|")
    print(
        f"| omega, F (MB) | {rb['scale']:.3f}, {rb['fixed']:.2f} | {ra['scale']:.3f}, {ra['fixed']:.2f} |"
    )
    for k in ("anchor_remat", "anchor_saved"):
        print(
            f"| {k} | {cell(rb[k]['pred'], rb[k]['compiled'])} | {cell(ra[k]['pred'], ra[k]['compiled'])} |"
        )
    for pb, pa in zip(rb["plans"], ra["plans"]):
        print(
            f"| budget {pa['budget']:.2f} | {pb['choice']} {cell(pb['pred'], pb['compiled'])} | {pa['choice']} {cell(pa['pred'], pa['compiled'])} |"
        )
    for s in sorted(set(rb["stock"]) | set(ra["stock"])):
        f = lambda r, s=s: (
            cell(r["stock"][s]["pred"], r["stock"][s]["compiled"]) if s in r["stock"] else "not run"
        )
        print(f"| stock {s} | {f(rb)} | {f(ra)} |")
