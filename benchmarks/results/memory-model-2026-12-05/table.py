"""The parallel_residual table of a benchmarks/memory_model.py --json file: table.py FILE."""

import json
import sys

d = json.load(open(sys.argv[1]))["parallel_residual"]
print("omega {:.3f} F {:.2f}".format(d["scale"], d["fixed"]))
for k in ("anchor_remat", "anchor_saved"):
    a = d[k]
    print(
        k,
        "{:.2f} / {:.2f} ({:+.1f}%) res {:.2f} ws {:.2f}".format(
            a["pred"], a["compiled"], 100 * (a["pred"] / a["compiled"] - 1), a["res"], a["ws"]
        ),
    )
for p in d["plans"]:
    print(
        "budget {:.1f} {} {:.2f} / {:.2f} ({:+.1f}%)".format(
            p["budget"], p["choice"], p["pred"], p["compiled"], 100 * p["err"]
        )
    )
for k, v in d["stock"].items():
    print(
        "stock",
        k,
        "{:.2f} / {:.2f} ({:+.1f}%)".format(
            v["pred"], v["compiled"], 100 * (v["pred"] / v["compiled"] - 1)
        ),
    )
print("wall {:.0f} s".format(d["wall_s"]))
