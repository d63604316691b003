"""Per while-loop body of compiled HLO text files: the slice copies (any fusion or dynamic-slice that only
slices an operand, synchronous or not) and their bytes per trip: slices.py FILE..."""

import re
import sys

sys.path.insert(0, "/work/main")
from planner._src import hlo

MOVE = {"parameter", "dynamic-slice", "bitcast", "reshape", "copy", "transpose", "constant"}


def pure_slice(comps, name, depth=0):
    if name not in comps or depth > 4:
        return False
    has = False
    for i in comps[name]:
        arrs = i.arrays
        scalar = all(len(d) == 0 for _, d in arrs)
        if i.opcode == "dynamic-slice":
            has = True
        if i.opcode in MOVE or scalar:
            continue
        return False
    return has


for f in sys.argv[1:]:
    m = hlo.parse(open(f).read())
    trips = hlo.while_trips(m)
    comps = m.computations()
    print("==", f.split("/")[-1])
    for body in trips:
        tot = 0
        n = 0
        for ins in comps[body]:
            c = re.search(r"calls=%?([\w.\-]+)", ins.attrs)
            if ins.opcode == "dynamic-slice" or (c and pure_slice(comps, c.group(1))):
                if ins.opcode in ("fusion-start", "async-start"):
                    top = hlo.split_top(ins.shape[1:-1])
                    b = sum(hlo.array_bytes(t, d) for t, d in hlo.array_shapes(top[1]))
                elif ins.opcode in ("fusion-done", "async-done"):
                    continue
                else:
                    b = sum(hlo.array_bytes(t, d) for t, d in ins.arrays)
                tot += b
                n += 1
        print(f"  body {body}: {n} pure slices, {tot} bytes")
