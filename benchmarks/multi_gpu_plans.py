"""benchmarks/multi_gpu.py's plans: the FSDP step planned per device at budgets between full
remat and the fastest plan, each with the contention model's view (the same assignment with
one GPU's link alone); the deviceless plans of ``multi_gpu.py plan``; and ``_effect``, the
predicted effect of the shared link on offloading the step (no plan).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

OFFLOADED = "decoder_layer_input"  # the layer input, the one tensor the runs offload


def config(n: int, dry: bool):
    """The Llama-style decoder sharded FSDP over ``n`` devices (examples/frontier.py's code
    path, mesh (n, 1)): on a device, 16 layers of Llama 3 8B's width (d_model 4096, 32 query
    and 8 KV heads of 128, FFN 14336), 4 sequences of 4096 tokens per device, a 32k
    vocabulary; dry, the tiny test model."""
    from examples import frontier as F

    if dry:
        return F.TINY_LLAMA.scaled(name=f"tiny-llama-fsdp{n}", mesh_shape=(n, 1))
    return F.LLAMA3_405B.scaled(
        name=f"llama-16x4096-fsdp{n}",
        vocab=32768,
        d_model=4096,
        n_heads=32,
        n_kv_heads=8,
        head_dim=128,
        d_ff=14336,
        n_layers=16,
        seq=4096,
        per_device_batch=4,
        mesh_shape=(n, 1),
    )


def abstract_step(n: int, dry: bool):
    from examples import frontier as F

    return F.make_train_step(config(n, dry))


def make_plans(n: int, hardware: str, dry: bool, out: Path, points: int = 4) -> list[dict]:
    """Plans at ``points`` budgets per device for the step over ``n`` devices, saved in
    ``out``; per plan its budget, prediction and, for the contention model, the same
    assignment's predicted step with one GPU's link (not shared)."""
    import cost_models as cm
    import planner
    from planner._src.cost import build_cost_model, evaluate

    step, args = abstract_step(n, dry)
    session = planner.Planner(step, *args, hardware=hardware)
    hw = cm.load_profile(hardware)
    alone = hw.replace(link=hw.link.__class__(**{**_fields(hw.link), "shared": None}))
    rows = []
    budgets = plan_budgets(session, points)
    for k, plan in enumerate(session.pareto(hbm_gb=budgets), start=1):
        if isinstance(plan, Exception):
            rows.append({"plan": k, "error": f"{type(plan).__name__}: {plan}"[:600]})
            continue
        f = out / f"{hardware}-{n}-plan{k}.json"
        plan.save(f)
        unshared = build_cost_model(plan.trace, plan.graph, alone, allow_offload=True)
        p_alone = evaluate(unshared, plan.graph, plan.assignment)
        pred = plan.prediction
        rows.append(
            {
                "plan": k,
                "file": str(f),
                "budget_gb": plan.budget_bytes / 1e9,
                "predicted_step_s": pred.step_s,
                "predicted_peak_bytes": pred.peak_bytes,
                "transfer_s": pred.transfer_s,
                "exposed_transfer_s": pred.exposed_transfer_s,
                "alone_step_s": p_alone.step_s,
                "alone_exposed_transfer_s": p_alone.exposed_transfer_s,
                "link_d2h_bytes_per_s": plan.cost.hardware.link.d2h_bytes_per_s,
                "step_collective_bytes": plan.trace.step_collective_bytes,
                "decisions": plan.decisions(),
                "verified": bool(getattr(plan.verification, "ok", False)),
                "compiled_device_bytes": getattr(plan.verification, "compiled_device_bytes", None),
                "compiler": plan.compiler,
                "choice": plan.choice,
                "xla_flags": plan.xla_flags,
            }
        )
    return rows


def plan_budgets(session, points: int) -> list[float]:
    """``points`` budgets (GB per device) from above full remat's predicted peak up to the
    fastest plan's (solved at the device's whole HBM without its verify compile): the range
    where plans differ. Where that range is empty: ``Planner.span_budgets``."""
    import dataclasses

    two = session.span_budgets(2)  # [lo + (hi - lo) / 2, hi]
    lo = 2 * two[0] - two[1]
    opts = session.options
    session.options = dataclasses.replace(opts, verify_compile=False)
    try:
        top = session.plan(two[1])
    finally:
        session.options = opts
    hi = 1.02 * (top.prediction.peak_bytes + top.headroom_bytes) / 1e9
    if not lo < hi <= two[1]:
        return session.span_budgets(points)
    return [lo + (hi - lo) * k / points for k in range(1, points + 1)]


def _fields(link) -> dict:
    import dataclasses

    return {f.name: getattr(link, f.name) for f in dataclasses.fields(link)}


def plan_one(hardware: str, n: int, out: Path) -> None:
    import jax

    t = time.perf_counter()
    rows = make_plans(n, hardware, False, out)
    rec = {
        "key": f"deviceless/{hardware}/{n}",
        "hardware": hardware,
        "devices": n,
        "jax": jax.__version__,
        "wall_s": time.perf_counter() - t,
        "plans": rows,
    }
    with open(out / "deviceless.jsonl", "a") as f:
        f.write(json.dumps(rec) + "\n")
    print(json.dumps(rec, indent=1)[:3000])


def effect(hardware: str, n: int, out: Path) -> None:
    """The contention model's predicted effect on the step over ``n`` devices (deviceless
    compiles; no plan): per assignment (full remat with one named class offloaded; every
    class that may be offloaded offloaded), the predicted step, copy and exposed copy time
    with the profile's link.shared row for ``n`` GPUs and with one GPU's link alone."""
    import cost_models as cm
    import planner
    from planner._src.cost import Assignment, build_cost_model, evaluate

    step, args = abstract_step(n, False)
    session = planner.Planner(step, *args, hardware=hardware)
    tr, g = session.trace, session.graph
    hw = cm.load_profile(hardware)
    alone = hw.replace(link=hw.link.__class__(**{**_fields(hw.link), "shared": None}))
    models = {
        "shared": build_cost_model(tr, g, hw, allow_offload=True),
        "alone": build_cost_model(tr, g, alone, allow_offload=True),
    }
    movable = [c.key for c in g.classes if c.key not in models["shared"].no_offload_classes]
    names = {c.key: c.name for c in g.classes}
    picks = {
        f"offload {OFFLOADED}": [k for k in movable if names.get(k) == OFFLOADED],
        "offload every movable class": movable,
    }
    rows = []
    for label, keys in picks.items():
        assignment = Assignment.of(dict.fromkeys(keys, "offload"))
        row = {"assignment": label, "classes": len(keys)}
        for which, model in models.items():
            p = evaluate(model, g, assignment)
            row[which] = {
                "link_d2h_bytes_per_s": model.hardware.link.d2h_bytes_per_s,
                "step_s": p.step_s,
                "transfer_s": p.transfer_s,
                "exposed_transfer_s": p.exposed_transfer_s,
                "peak_bytes": p.peak_bytes,
            }
        rows.append(row)
    remat = evaluate(models["shared"], g, Assignment.of({}))
    rec = {
        "key": f"effect/{hardware}/{n}",
        "hardware": hardware,
        "devices": n,
        "full_remat_step_s": remat.step_s,
        "step_collective_bytes": tr.step_collective_bytes,
        "rows": rows,
    }
    with open(out / "effect.jsonl", "a") as f:
        f.write(json.dumps(rec) + "\n")
    print(json.dumps(rec, indent=1))
