"""Where a traced step's device time goes, by kind of work, measured against the cost model.

Reads what ``benchmarks/compute_rates.py kernels`` brings back from the GPU (per kernel:
device ms, calls; the compiled HLO) and groups the kernels by kind (matmul, scatter, gather,
the attention score chain, reductions, transposes and copies, other elementwise): a kernel
named after an HLO instruction (``fusion_161`` is ``%fusion.161``) is classified from that
instruction's shape and the JAX equation in its metadata; cuBLAS kernels (``nvjet_*``,
named by cuBLAS) and Triton GEMM fusions are matmuls. The model's side: the same step's
jaxpr (``jax.make_jaxpr``, the policy applied, so the backward's recompute is in it) priced
equation by equation with the fusion-aware roofline of ``cost_models`` (``fused_eqn_costs``,
the h200 profile), grouped by the same kinds. (This is the cost library's roofline, not the
planner's step prediction, which adds its fusion rules and loop terms: read the differences
between steps, not the totals.)

    python benchmarks/kernel_attribution.py --measured benchmarks/results/h200-2026-12-04-moe-kernels \\
        --plans benchmarks/results/offload-plans-2026-12-04-fusion/moe.json   # JAX_PLATFORMS=cpu
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KINDS = ("gemm", "scatter", "gather", "scores", "reduce", "transpose/copy", "elementwise/other")


def _is_scores(shapes) -> bool:
    """The dense attention's [batch, heads, q, k] chain (the examples' seq is 4096)."""
    return any(re.search(r"4096, ?4096\]|4096, ?4096\)", s) for s in shapes)


def hlo_instructions(text: str) -> dict[str, dict]:
    """name -> {shape, op_name} of every instruction of an HLO module's text."""
    out = {}
    for ln in text.splitlines():
        m = re.match(r"^\s+(?:ROOT )?%([\w.\-]+) = (.+?) ([\w\-]+)\(", ln)
        if not m:
            continue
        op = re.search(r'op_name="([^"]*)"', ln)
        out[m.group(1)] = {"shape": m.group(2), "op_name": op.group(1) if op else ""}
    return out


def measured_kind(kernel: str, info: dict | None) -> str:
    if kernel.startswith(("nvjet", "gemm_fusion", "cutlass")) or "gemm" in kernel:
        return "gemm"
    prim = info["op_name"].rsplit("/", 1)[-1] if info else ""
    if "scatter" in kernel or prim.startswith("scatter"):
        return "scatter"
    if "gather" in kernel or prim == "gather":
        return "gather"
    if info and _is_scores([info["shape"].replace(",", ", ")]):
        return "scores"
    if "reduce" in kernel or prim.startswith("reduce"):
        return "reduce"
    if "transpose" in kernel or "copy" in kernel or "concatenate" in kernel:
        return "transpose/copy"
    return "elementwise/other"


def measured(dir_: Path, label: str) -> dict[str, float]:
    """Device ms per step by kind, of ``kernels-LABEL.json`` and ``hlo-LABEL.txt.gz``."""
    hlo = hlo_instructions(gzip.decompress((dir_ / f"hlo-{label}.txt.gz").read_bytes()).decode())
    rec = json.loads((dir_ / f"kernels-{label}.json").read_text())
    acc: dict[str, float] = collections.defaultdict(float)
    for k in rec["by_hlo_op"]:
        name = k["name"]
        info = hlo.get(re.sub(r"_(\d+)$", r".\1", name)) or hlo.get(name)
        acc[measured_kind(name, info)] += k["ms"]
    return dict(acc)


def model_kind(e) -> str:
    n = e.primitive.name
    if n == "dot_general":
        return "gemm"
    if n.startswith("scatter"):
        return "scatter"
    if n == "gather":
        return "gather"
    if _is_scores([str(getattr(v.aval, "shape", "")) for v in (*e.outvars, *e.invars)]):
        return "scores"
    if n.startswith("reduce") or n in ("cumsum", "argmax", "top_k"):
        return "reduce"
    if n in ("transpose", "copy", "concatenate"):
        return "transpose/copy"
    return "elementwise/other"


def modelled(step, args, hw) -> dict[str, float]:
    """The cost library's fusion-aware roofline ms per kind of the step's jaxpr."""
    import jax

    from cost_models._fusion import (
        _CALLS,
        _inner,
        _subjaxprs,
        body_sources,
        expanded_sources,
        fused_eqn_costs,
        matmul_key,
        rate_key,
    )

    acc: dict[str, float] = collections.defaultdict(float)

    def walk(jaxpr, mult, expanded):
        jx = _inner(jaxpr)
        src = expanded_sources(jx.eqns, expanded)
        for e, c in zip(jx.eqns, fused_eqn_costs(jx, expanded)):
            n, subs = e.primitive.name, _subjaxprs(e)
            if subs and n == "scan":
                walk(subs[0], mult * int(e.params["length"]), body_sources(e, subs[0], src))
            elif subs and n in _CALLS:
                walk(subs[0], mult, body_sources(e, subs[0], src))
            elif subs and n in ("while", "cond"):
                walk(subs[0], mult, None)  # (a cond: its first branch)
            else:
                acc[model_kind(e)] += mult * 1e3 * c.seconds(hw, rate_key(matmul_key(e), hw))

    walk(jax.make_jaxpr(step)(*args), 1, None)
    return dict(acc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measured", type=Path, required=True)
    ap.add_argument("--plans", type=Path, help="the gpu_bench.py plan file of the plan labels")
    ap.add_argument("--model", default="moe")
    ap.add_argument("--hardware", default="h200")
    args = ap.parse_args()

    import cost_models as cm
    from benchmarks import gpu_bench as gb

    labels = sorted(
        p.name[len("kernels-") : -len(".json")] for p in args.measured.glob("kernels-*.json")
    )
    hw = cm.load_profile(args.hardware)
    rows = {}
    for label in labels:
        rec = json.loads((args.measured / f"kernels-{label}.json").read_text())
        pol = rec["policy"]
        if pol.startswith("plan "):
            budget = pol.rsplit("@", 1)[1].strip()
            spec = json.loads(args.plans.read_text())["plans"][budget]["policy"]
        else:
            spec = {"kind": "stock", "name": pol}
        module, cfg = gb._model(
            {"model": args.model, "config": rec["config"]}, gb._policy_from_spec(spec)
        )
        step, step_args = module.make_train_step(cfg, concrete=False)
        rows[label] = (
            measured(args.measured, label),
            modelled(step, step_args, hw),
            rec["wall_ms"],
        )
    print(
        "| step | wall ms | "
        + " | ".join(f"{k} meas. (model)" for k in KINDS)
        + " | total meas. (model) |"
    )
    print("|---" * (len(KINDS) + 3) + "|")
    for label, (m, p, wall) in rows.items():
        cells = [f"{m.get(k, 0):.1f} ({p.get(k, 0):.1f})" for k in KINDS]
        print(
            f"| {label} | {min(wall):.1f} | "
            + " | ".join(cells)
            + f" | {sum(m.values()):.1f} ({sum(p.values()):.1f}) |"
        )
    base = next((lb for lb in rows if lb.endswith("remat")), None)
    if base:
        print(f"\nSaved against {base}, measured (model), ms:\n")
        print("| step | " + " | ".join(KINDS) + " | total |")
        print("|---" * (len(KINDS) + 2) + "|")
        bm, bp, _ = rows[base]
        for label, (m, p, _) in rows.items():
            if label == base:
                continue
            cells = [
                f"{bm.get(k, 0) - m.get(k, 0):+.1f} ({bp.get(k, 0) - p.get(k, 0):+.1f})"
                for k in KINDS
            ]
            tm = sum(bm.values()) - sum(m.values())
            tp = sum(bp.values()) - sum(p.values())
            print(f"| {label} | " + " | ".join(cells) + f" | {tm:+.1f} ({tp:+.1f}) |")


if __name__ == "__main__":
    main()
