"""Values of the preallocated-temp allocation live at its peak: temp_peak.py DIR [min_bytes]."""

import glob
import re
import sys

sys.path.insert(0, "benchmarks")
import xla_peak

d = sys.argv[1]
mn = int(sys.argv[2]) if len(sys.argv) > 2 else 16384
ba = sorted(glob.glob(f"{d}/*train_step*after_optimizations-buffer-assignment.txt"))[-1]
temp = None
for line in open(ba):
    if m := re.match(r"allocation (\d+): size (\d+).*preallocated-temp", line):
        temp, tsize = int(m.group(1)), int(m.group(2))
seq, values = xla_peak.live_values(d)
tv = [v for v in values if v[2] == temp]
occ = xla_peak.occupancy(seq, tv)
lo, hi = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (0, len(occ) - 1)
t = max(range(lo, hi + 1), key=occ.__getitem__)
print(
    f"temp allocation {temp} size {tsize:,}; occupancy peak {occ[t]:,} at {t} ({seq.get(t)}) of {len(occ)}"
)
tot = 0
for name, size, _, off, shape, r in sorted(
    (v for v in tv if v[5] and v[5][0] <= t <= v[5][1]), key=lambda v: v[3]
):
    tot += size
    if size >= mn:
        print(f"  off {off:>9,} {size:>9,}  {name}  {shape}  live {r}")
print("sum of live sizes", f"{tot:,}")
step = max(1, len(occ) // 50)
print("timeline (MB):", " ".join(f"{i}:{occ[i] / 1e6:.2f}" for i in range(0, len(occ), step)))
