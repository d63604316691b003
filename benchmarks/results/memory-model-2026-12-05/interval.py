"""Prototype: the backward working set as interval liveness (not in cost.py)."""

import sys
import warnings

import jax

import planner
from planner._src import cost
from planner._src.types import Assignment
from tests.zoo import MODELS

jax.config.update("jax_platforms", "cpu")


def interval_ws(rg, dec, need0):
    cands = rg.region.candidates
    need = list(need0)
    for c in reversed(cands):
        if need[c.index] and dec[c.index] == "remat":
            for u in rg.reads(c.index):
                need[u] = True
    held = cost.held_values(rg, dec, need)
    reduced = cost.reduction_operands(rg, dec, need)
    live = {}
    for c in cands:
        i = c.index
        if need[i] and dec[i] == "remat" and not held[i] and (c.needed or reduced[i]):
            live[i] = c.nbytes
    rem = {c.index for c in cands if need[c.index] and dec[c.index] == "remat"}
    lo = {i: min((i,) + rg.readers(i)) for i in live}
    hi = {c.index: max((c.index,) + rg.readers(c.index)) for c in cands}
    for c in reversed(cands):  # a recomputed reader w needs v when w is recomputed
        i = c.index
        for w in rg.readers(i):
            if w in rem:
                hi[i] = max(hi[i], hi[w])
    n = len(cands)
    best, at = 0, None
    for p in range(n):
        s = sum(b for i, b in live.items() if lo[i] <= p <= hi[i])
        if s > best:
            best, at = s, p
    return best, at, sum(live.values())


warnings.simplefilter("ignore")
for name in sys.argv[1:]:
    step, args = MODELS[name].make()
    s = planner.Planner(step, *args, hardware="cpu")
    per = cost.decisions_per_candidate(s.graph, Assignment.of({}))
    for rg, dec in zip(s.graph.regions, per):
        need = [c.needed for c in rg.region.candidates]
        best, at, total = interval_ws(rg, dec, need)
        print(
            name,
            "region",
            rg.region.id,
            "in_scan",
            rg.region.in_scan,
            "interval W",
            best,
            "at fwd idx",
            at,
            "sum W",
            total,
        )
