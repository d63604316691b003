import json, pickle, sys
sys.path.insert(0, "/work/wt-hide")
import planner._src.cost as C
from planner._src.cost import evaluate, hiding_models, decisions_per_candidate
R = "/work/wt-hide/benchmarks/results/"
meas = {}
for d in ("h200-2026-12-03-sweep", "h200-2026-12-03-sweep-part2"):
    for p in json.load(open(R + d + "/fit.json"))["points"]:
        if p["d2h_exposed_s"] is not None:
            meas[f"point{p['point']}"] = (p["d2h_exposed_s"], p["h2d_exposed_s"], p["d2h_s"], p["h2d_s"])
today = {"lc16k_input": (27.1, 29.1, 43.3, 41.0), "lc16k_attn": (9.4, 40.8, 44.2, 41.6),
         "lc32k_attn": (6.7, 41.5, 44.2, 42.2), "lc16k_dots": (372.7, 305.2, 409.9, 382.5)}
for k, v in today.items():
    meas[k] = tuple(x / 8e3 for x in v)
def queues(pk, scope):
    C.RELOAD_WINDOW_SCOPE = scope
    g, cost = pk["graph"], pk["cost"]
    out = {}
    for name, a in pk["assigns"].items():
        p = evaluate(cost, g, a)
        rg, rc, rp = g.regions[0], cost.regions[0], p.regions[0]
        dec = decisions_per_candidate(g, a)[0]
        off = [c.index for c in rg.region.candidates if rp.needed[c.index] and dec[c.index] == "offload"]
        out[name] = dict(off=off, labels=[rg.region.candidates[i].name or rg.region.candidates[i].primitive for i in off],
            d2h=[(rc.d2h_s[i], rc.fwd_after_s[i]) for i in off],
            h2d=[(rc.h2d_s[i], rp.reload_window_s[i]) for i in off],
            h2d_old=[(rc.h2d_s[i], rc.bwd_before_s[i]) for i in off],
            fwd=rc.fwd_s, bwd=rc.bwd_s, rec=rp.recompute_s, pd=p.regions[0].exposed_fwd_s, ph=p.regions[0].exposed_bwd_s)
    return out
if __name__ == "__main__":
    scope = sys.argv[1] if len(sys.argv) > 1 else "prefix"
    for f in ("sweep", "lc16k", "lc32k"):
        try: pk = pickle.load(open(f"/tmp/hide/{f}.pkl", "rb"))
        except FileNotFoundError: continue
        q = queues(pk, scope)
        for n, d in q.items():
            m = meas.get(n)
            print(f"{f} {n}: fwd {d['fwd']*1e3:.1f} bwd {d['bwd']*1e3:.1f} rec {d['rec']*1e3:.1f}; {d['labels']}")
            print("   d2h", [(round(c*1e3,2), round(w*1e3,1)) for c,w in d['d2h']], "meas", m and round(m[0]*1e3,2), "copy", m and round(m[2]*1e3,2), "pred", round(d['pd']*1e3,2))
            print("   h2d old", [round(w*1e3,1) for c,w in d['h2d_old']], "new", [round(w*1e3,2) for c,w in d['h2d']], "meas", m and round(m[1]*1e3,2), "copy", m and round(m[3]*1e3,2), "pred", round(d['ph']*1e3,2))
