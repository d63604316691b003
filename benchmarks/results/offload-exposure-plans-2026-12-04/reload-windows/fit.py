import json, pickle, sys, math
sys.path.insert(0, "/work/wt-hide"); sys.path.insert(0, "/tmp/hide")
import cost_models as cm
from analyze import queues, meas
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
pk = {f: pickle.load(open(f"/tmp/hide/{f}.pkl", "rb")) for f in ("sweep", "lc16k", "lc32k")}
hw = cm.load_profile("h200")
res = {}
for scope in ("mirror", "prefix", "ancestors"):
    qs = {}
    for f, p in pk.items():
        qs.update(queues(p, "prefix" if scope == "mirror" else scope))
    if scope == "mirror":
        for q in qs.values():
            q["h2d"] = q["h2d_old"]
    sweep = [n for n in qs if n.startswith("point") and n in meas]
    fits = {}
    for k, d in enumerate(("d2h", "h2d")):
        pts = [cm.HidingPoint(copies=tuple(qs[n][d]), exposed_s=meas[n][k], label=n) for n in sweep]
        fit = cm.fit_hiding(pts, steps=steps)
        fits[d] = fit
        print(scope, d, "kept", fit.best, fit.describe())
    shipped = {"d2h": hw.link.d2h_hiding, "h2d": hw.link.h2d_hiding}
    rows = {}
    for n in [*sweep, "lc16k_input", "lc16k_attn", "lc32k_attn", "lc16k_dots"]:
        q = qs[n]; m = meas[n]
        rows[n] = {d: dict(meas=m[k], new=fits[d].model.exposed(q[d]), shipped=shipped[d].exposed(q[d]),
                           old=shipped[d].exposed(q["h2d_old"] if d == "h2d" else q[d]), copy=sum(c for c, _ in q[d]))
                   for k, d in enumerate(("d2h", "h2d"))}
        print(f"  {n:12s}", "  ".join(f"{d}: meas {r['meas']*8e3:6.1f} old {r['old']*8e3:6.1f} new {r['new']*8e3:6.1f}{'*' if abs(r['new']-r['meas'])<=0.2*r['meas'] else ' '}" for d, r in rows[n].items()))
    res[scope] = {"fits": {d: {"best": f.best, "forms": {k: (v[0].to_json(), v[1], v[2], v[3]) for k, v in f.forms.items()}, "describe": f.describe()} for d, f in fits.items()}, "rows": rows,
                  "windows": {n: {d: qs[n][d] for d in ("d2h", "h2d", "h2d_old")} | {"labels": qs[n]["labels"]} for n in rows}}
json.dump(res, open(f"/tmp/hide/fit-{steps}.json", "w"), indent=1)
