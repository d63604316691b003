"""Per position: bytes in use (union of live ranges) in the temp allocation and in output
allocations (temporaries XLA placed there before the output is written, and outputs already
written). live_split.py DIR [DIR...]"""

import glob
import re
import sys

sys.path.insert(0, "benchmarks")
import xla_peak

for d in sys.argv[1:]:
    ba = sorted(glob.glob(f"{d}/*train_step*after_optimizations-buffer-assignment.txt"))[-1]
    kind = {}
    for line in open(ba):
        if m := re.match(r"allocation (\d+): size (\d+), (.*)", line):
            a, rest = int(m.group(1)), m.group(3)
            kind[a] = (
                "temp"
                if "preallocated-temp" in rest
                else "param"
                if "parameter" in rest
                else "out"
                if "live-out" in rest
                else "other"
            )
    seq, values = xla_peak.live_values(d)
    seq = dict(seq)
    last = max(r[1] for *_, r in values if r)
    for t in range(last + 1):
        seq.setdefault(t, "")
    occ = {
        k: xla_peak.occupancy(seq, [v for v in values if kind.get(v[2]) == k])
        for k in ("temp", "out")
    }
    n = len(occ["temp"])
    tot = [occ["temp"][t] + occ["out"][t] for t in range(n)]
    t = max(range(n), key=tot.__getitem__)
    tt = max(range(n), key=occ["temp"].__getitem__)
    print(
        d.split("/")[-1],
        f"temp peak {occ['temp'][tt]:,} at {tt} (out {occ['out'][tt]:,}); temp+out peak {tot[t]:,} at {t} (temp {occ['temp'][t]:,} out {occ['out'][t]:,})",
    )
