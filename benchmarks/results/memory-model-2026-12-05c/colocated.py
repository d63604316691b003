"""Bytes of temporaries XLA placed in output allocations, live at a position:
colocated.py DIR POS [POS...] (a value in an output allocation that is not the allocation's
last value, i.e. not the output itself)."""

import glob
import re
import sys

sys.path.insert(0, "benchmarks")
import xla_peak

d = sys.argv[1]
ba = sorted(glob.glob(f"{d}/*train_step*after_optimizations-buffer-assignment.txt"))[-1]
out_alloc = set()
for line in open(ba):
    if m := re.match(r"allocation (\d+): size (\d+), (.*)", line):
        if "live-out" in m.group(3) and "parameter" not in m.group(3):
            out_alloc.add(int(m.group(1)))
seq, values = xla_peak.live_values(d)
last_end = {}
for v in values:
    if v[2] in out_alloc and v[5]:
        last_end[v[2]] = max(last_end.get(v[2], -1), v[5][1])
for pos in map(int, sys.argv[2:]):
    tmp = [
        (v[0], v[1])
        for v in values
        if v[2] in out_alloc and v[5] and v[5][0] <= pos <= v[5][1] and v[5][1] < last_end[v[2]]
    ]
    print(
        pos,
        "temporaries in output allocations:",
        f"{sum(s for _, s in tmp):,}",
        "bytes,",
        len(tmp),
        "values:",
        " ".join(n for n, _ in tmp),
    )
