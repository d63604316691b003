"""F9 data: per output leaf of bf16 steps' plans, the error and what each tolerance rule allows."""

import dataclasses, sys, warnings, math, json

sys.path.insert(0, "/work/scratch/newuser")
import jax, jax.numpy as jnp, numpy as np
import planner
from planner._src.verify import numerics as nm
from planner._src.session import requested_for, io_bytes
from examples import moe, llama


def cases():
    import case4_linen_mp

    yield "linen_bf16_master_f32", case4_linen_mp.make()
    cfg = dataclasses.replace(moe.MoEConfig(), dtype="bfloat16")
    yield "moe_bf16", moe.make_train_step(cfg, concrete=True)
    lcfg = dataclasses.replace(
        llama.QUICKSTART, d_model=128, n_heads=4, d_ff=256, seq=32, batch=2, dtype="bfloat16"
    )
    yield "llama_bf16", llama.make_adam_step(lcfg)


out = []
for name, (step, args) in cases():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = planner.Planner(step, *args, hardware="cpu")
        lo, hi = s.trace.anchor.device_bytes, s.trace.anchor_saved.device_bytes
        a, b = min(lo, hi), max(lo, hi)
        for f in (0.1, 0.5, 1.0):
            req = requested_for(a + f * (b - a), s.hardware, io_bytes(s.trace))
            plan = s.plan(req / 1e9 + 1e-6)
            if plan.numerics is None or not plan.numerics.checked:
                print(name, f, "not checked")
                continue
            ref, sens = s._reference, s._sensitivity
            for leaf in plan.numerics.leaves:
                out.append(
                    dict(
                        model=name,
                        frac=f,
                        choice=plan.choice,
                        path=leaf.path,
                        what=leaf.what,
                        err=leaf.error,
                        allowed=leaf.tolerance,
                    )
                )
            # sensitivity alone per leaf (eps=0 -> floor only), and own-dtype fixed bound
            rl, _ = jax.tree_util.tree_flatten_with_path(ref)
            sens_only = nm.compare(ref, ref, 0.0, sens)  # error 0, tolerance = max(floor, 2*sens)
            for rec, so, (path, x) in zip(out[-len(rl) :], sens_only, rl):
                rec["sens_allow"] = so.tolerance
                dt = getattr(x, "dtype", None)
                rec["own_eps32"] = (
                    32 * float(jnp.finfo(dt).eps)
                    if dt is not None and jnp.issubdtype(dt, jnp.inexact)
                    else 0.0
                )
            print(
                "  failing leaves:",
                [
                    (r["path"], r["err"], r["allowed"])
                    for r in out[-len(rl) :]
                    if r["err"] > r["allowed"]
                ],
                "numerics ok:",
                plan.numerics.ok,
            )
            worst = max(out[-len(rl) :], key=lambda r: r["err"] / max(r["allowed"], 1e-30))
            print(
                name,
                f,
                plan.choice,
                "status",
                plan.verification.status,
                "worst",
                worst["path"],
                worst["what"],
                f"err {worst['err']:.3g} allowed {worst['allowed']:.3g} sens {worst['sens_allow']:.3g} own32eps {worst['own_eps32']:.3g}",
                flush=True,
            )
json.dump(out, open("leaves-after.json", "w"), indent=0)
