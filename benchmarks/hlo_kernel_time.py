"""Per-kernel device time estimated from compiled XLA:GPU HLO, against measured kernels.

Reads what ``benchmarks/compute_rates.py kernels`` brought back from the H200 (per kernel
name: device ms and calls per step; the compiled HLO of the same program), prices every
instruction of the HLO that launches work with ``planner._src.xla.kernels`` (bytes moved over
the HBM rate, or flops over the matmul rate, the larger; one read per reduction pass; runs
per step from the while loops' trip counts), matches each measured kernel to the
instructions it ran for, and prints, per kind of work (the kinds of
``benchmarks/kernel_attribution.py``, classified the same way on both sides), measured vs
estimated ms per step, then the differences against the full-remat step (what a plan
saves), then the largest kernels one by one.

Matching: XLA:GPU names a kernel after its HLO instruction (``fusion.161`` ->
``fusion_161``); instructions it deduplicated into one kernel (``deduplicated_name``)
run the same kernel, so a kernel is matched to its group of instructions and its calls
per step to theirs; a kernel named after an instruction inside a fused computation (a
``sort``) to the fusion calling it. cuBLAS names its own kernels (``nvjet_*``): those are
compared with the cuBLAS custom-calls together. The device-to-device memcpys of the
asynchronous loop-slice fusions are not kernels: the trace kept no memcpy (compute events
only), so they are reported apart ("d2d") and left out of the totals.

    python benchmarks/hlo_kernel_time.py --measured benchmarks/results/h200-2026-12-04-moe-kernels
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

from benchmarks.kernel_attribution import KINDS, measured_kind  # noqa: E402

CUBLAS = re.compile(r"^(nvjet|cutlass|sm\d+_xmma|gemv|cublas|ampere|sm90)", re.I)


def sanitize(name: str) -> str:
    return name.replace(".", "_").replace("-", "_")


def load(dir_: Path, label: str, hlo_dir: Path | None = None):
    """(compiled HLO text, measured record) of one step: the HLO the device compiled, or
    the one of ``hlo_dir`` (a deviceless compile of the same program, ``compile_deviceless``)."""
    src = (hlo_dir or dir_) / f"hlo-{label}.txt.gz"
    text = gzip.decompress(src.read_bytes()).decode()
    rec = json.loads((dir_ / f"kernels-{label}.json").read_text())
    return text, rec


def compile_deviceless(
    measured: Path, plans: Path | None, out: Path, only: str = "", options: str = ""
) -> None:
    """Compile each measured step's program deviceless for the H200 (the planner's own
    ``target.compile_traced`` for ``resolve("h200")``, as the planner compiles its anchors
    and verifies its plans) and write its HLO as ``out/hlo-LABEL.txt.gz``. Run with the
    CUDA plugin's JAX (``/work/venvs/v0112``, ``JAX_PLATFORMS=cpu``)."""
    import jax

    from benchmarks import gpu_bench as gb
    from planner._src.xla import compile as xla_compile
    from planner._src.xla import deviceless
    from planner._src.xla import targets as T

    out.mkdir(parents=True, exist_ok=True)
    tgt = T.resolve("h200")
    for p in sorted(measured.glob("kernels-*.json")):
        label = p.name[len("kernels-") : -len(".json")]
        if only and label not in only.split(","):
            continue
        rec = json.loads(p.read_text())
        pol = rec["policy"]
        if pol.startswith("plan "):
            budget = pol.rsplit("@", 1)[1].strip()
            spec = json.loads(plans.read_text())["plans"][budget]["policy"]
        else:
            spec = {"kind": "stock", "name": pol}
        module, cfg = gb._model(
            {"model": rec["model"], "config": rec["config"]}, gb._policy_from_spec(spec)
        )
        step, args = module.make_train_step(cfg, concrete=False)
        opts = {k: v == "true" for k, v in (kv.split("=") for kv in options.split(",") if kv)}
        program = xla_compile.compile_traced(
            tgt, jax.jit(step, donate_argnums=(0,)), deviceless.args_for(tgt, args), opts or None
        )
        text = program.compiled.as_text()
        (out / f"hlo-{label}.txt.gz").write_bytes(gzip.compress(text.encode()))
        print(f"{label}: {len(text)} chars, {tgt.description}, JAX {jax.__version__}", flush=True)


def estimate(text: str, hw):
    """(kernel times, module) of one compiled program."""
    from planner._src.xla import hlo
    from planner._src.xla import kernels as K

    module = hlo.parse(text)
    return K.kernel_times(module, hw), module


def kernel_index(module, ks) -> dict[str, str]:
    """Sanitized kernel name -> group: every member of a group, and every instruction inside
    the fused computation a member calls (kernels named after an inner ``sort``)."""
    comps = module.computations()
    by_name = module.by_name()
    out: dict[str, str] = {}
    for k in ks:
        out.setdefault(sanitize(k.name), k.group)
        ins = by_name[k.name]
        m = re.search(r"calls=%?([\w.\-]+)", ins.attrs)
        for inner in comps.get(m.group(1), ()) if m else ():
            out.setdefault(sanitize(inner.name), k.group)
    for k in ks:  # a group's own name wins over an inner instruction's of another
        out[sanitize(k.group)] = k.group
        out[sanitize(k.name)] = k.group
    return out


def group_kind(group: str, info: dict | None, est_kind: str) -> str:
    if est_kind == "gemm" or group == "cublas":
        return "gemm"
    return measured_kind(sanitize(group), info)


def compare(dir_: Path, label: str, hw, hlo_dir: Path | None = None) -> dict:
    """Per group: measured ms, estimated ms, kind; and the d2d copies estimated."""
    text, rec = load(dir_, label, hlo_dir)
    ks, module = estimate(text, hw)
    by_name = module.by_name()
    idx = kernel_index(module, ks)
    groups: dict[str, dict] = {}

    def g(name: str, kind_hint: str = "other") -> dict:
        return groups.setdefault(
            name, {"meas_ms": 0.0, "meas_calls": 0.0, "est_ms": 0.0, "est_runs": 0, "kind": None}
        )

    d2d_ms = 0.0
    for k in ks:
        if k.kind == "d2d":
            d2d_ms += 1e3 * k.step_seconds
            continue
        key = "cublas" if k.kind == "gemm" and k.name.startswith("custom-call") else k.group
        e = g(key)
        e["est_ms"] += 1e3 * k.step_seconds
        e["est_runs"] += k.runs
        if e["kind"] is None:
            ins = by_name[k.name]
            e["kind"] = group_kind(key, {"shape": ins.shape, "op_name": ins.op_name}, k.kind)
    unmatched = collections.Counter()
    for kr in rec["by_hlo_op"]:
        name = kr["name"]
        if CUBLAS.match(name):
            key = "cublas"
        elif name.startswith("Memset"):
            key = "memset"
        else:
            key = idx.get(name)
            if key is None:
                unmatched[name] += kr["ms"]
                key = "unmatched:" + name
        e = g(key)
        e["meas_ms"] += kr["ms"]
        e["meas_calls"] += kr["calls"]
        if e["kind"] is None:
            e["kind"] = "gemm" if key == "cublas" else "elementwise/other"
    return {
        "groups": groups,
        "d2d_ms": d2d_ms,
        "unmatched": dict(unmatched),
        "wall_ms": min(rec["wall_ms"]),
        "policy": rec["policy"],
    }


def _recomputed_keys(module, body: str) -> set[tuple[str, str]]:
    """(primitive, dims) of every recomputed equation in a loop body and what it calls."""
    from planner._src.xla import kernels as K
    from planner._src.xla import recompute_shares as R

    comps = module.computations()
    keys: set[tuple[str, str]] = set()
    todo, seen = [body], {body}
    while todo:
        for ins in comps.get(todo.pop(), ()):
            if R.REMAT in ins.op_name and ins.opcode not in K.ELEMENTWISE_FREE:
                keys.add((ins.primitive, R._dims(ins.shape)))
            callee = K.called(ins)
            if callee and callee not in seen:
                seen.add(callee)
                todo.append(callee)
    return keys


def anchor_savings(dir_: Path, labels: list[str], base: str, hw, hlo_dir: Path | None):
    """Per step, ms per step: what the full-remat program's recompute shares
    (``recompute_shares.recompute_shares`` of its backward loop) say the step saves by no longer
    recomputing the equations its own HLO does not recompute (the planner would read that
    from its decisions, through ``recompute_shares.match_shares``), less what its forward loop's
    kernels cost more (the residual writes); and the same two from the steps' own HLO."""
    from planner._src.xla import hlo
    from planner._src.xla import recompute_shares as R

    def loops(label):
        module = hlo.parse(load(dir_, label, hlo_dir)[0])
        lt = R.loop_times(module, hw)
        return module, next(x for x in lt if x.backward), next(x for x in lt if not x.backward)

    rm, rb, rf = loops(base)
    shares: dict[tuple[str, str], float] = collections.defaultdict(float)
    for sh in R.recompute_shares(rm, hw, rb.body):
        shares[(sh.primitive, sh.shape)] += sh.seconds
    out = {"_shares_ms_per_trip": 1e3 * sum(shares.values())}
    for lb in labels:
        if lb == base:
            continue
        m, b, f = loops(lb)
        kept = _recomputed_keys(m, b.body)
        dropped = sum(v for k, v in shares.items() if k not in kept)
        out[lb] = {
            "shares_dropped_ms": 1e3 * rb.trips * dropped,
            "forward_more_ms": 1e3 * rf.trips * (f.kernel_s - rf.kernel_s),
            "backward_less_ms": 1e3 * rb.trips * (rb.kernel_s - b.kernel_s),
        }
    return out


def by_kind(res: dict) -> tuple[dict, dict]:
    meas: dict[str, float] = collections.defaultdict(float)
    est: dict[str, float] = collections.defaultdict(float)
    for e in res["groups"].values():
        meas[e["kind"]] += e["meas_ms"]
        est[e["kind"]] += e["est_ms"]
    return meas, est


LIBRARY = {  # the cost library's roofline per kind, ms per step, copied from the
    # "(model)" figures of benchmarks/results/h200-2026-12-04-moe-kernels.md (printed by
    # benchmarks/kernel_attribution.py, JAX 0.10.2, this CPU): gemm, scatter, gather,
    # scores, reduce, transpose/copy, elementwise/other
    "moe-remat": (412.6, 31.7, 21.2, 232.7, 2.0, 10.1, 241.1),
    "moe-dnb": (391.1, 31.7, 21.2, 232.7, 5.3, 10.1, 239.4),
    "moe-plan-65.2": (396.4, 31.7, 21.2, 216.2, 2.5, 9.9, 239.2),
    "moe-plan-113.16": (334.0, 27.2, 12.1, 208.1, 14.6, 8.0, 224.7),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measured", type=Path, required=True)
    ap.add_argument("--hardware", default="h200")
    ap.add_argument("--top", type=int, default=12, help="kernels listed one by one per step")
    ap.add_argument("--json", type=Path, help="write the per-group figures here")
    ap.add_argument("--hlo", type=Path, help="price the HLO of this directory instead")
    ap.add_argument("--compile-deviceless", type=Path, metavar="OUT", help="write OUT/hlo-*")
    ap.add_argument("--plans", type=Path, help="the gpu_bench.py plan file of the plan labels")
    ap.add_argument("--only", default="", help="labels to compile, comma-separated")
    ap.add_argument(
        "--options", default="", help="boolean XLA options of the deviceless compile, k=true,..."
    )
    args = ap.parse_args()
    if args.compile_deviceless:
        compile_deviceless(
            args.measured, args.plans, args.compile_deviceless, args.only, args.options
        )
        return

    import cost_models as cm

    hw = cm.load_profile(args.hardware)
    labels = sorted(
        p.name[len("kernels-") : -len(".json")] for p in args.measured.glob("kernels-*.json")
    )
    base = next((lb for lb in labels if lb.endswith("remat")), labels[0])
    labels = [base] + [lb for lb in labels if lb != base]
    results = {lb: compare(args.measured, lb, hw) for lb in labels}
    # With --hlo the estimate prices another compile of the same program (deviceless): its
    # instruction names differ, so the measured side keeps the device HLO's kinds and only
    # the per-kind totals are compared.
    priced = (
        {lb: compare(args.measured, lb, hw, args.hlo) for lb in labels} if args.hlo else results
    )
    kinds = [k for k in KINDS]

    print("Device ms per step: measured / HLO estimate / cost library (library: the doc's)\n")
    print("| step | " + " | ".join(kinds) + " | total | d2d copies (est.) |")
    print("|---" * (len(kinds) + 3) + "|")
    tot = {}
    for lb in labels:
        m, _ = by_kind(results[lb])
        _, e = by_kind(priced[lb])
        lib = dict(zip(KINDS, LIBRARY.get(lb, ())))
        cells = [
            f"{m.get(k, 0):.1f} / {e.get(k, 0):.1f} / {lib.get(k, float('nan')):.1f}" for k in kinds
        ]
        tm, te = sum(m.values()), sum(e.values())
        tl = sum(lib.values()) if lib else float("nan")
        tot[lb] = (m, e, lib)
        print(
            f"| {lb} | "
            + " | ".join(cells)
            + f" | {tm:.1f} / {te:.1f} / {tl:.1f} | {priced[lb]['d2d_ms']:.1f} |"
        )

    print("\nSaved against full remat, ms per step: measured / HLO estimate / cost library\n")
    print("| step | " + " | ".join(kinds) + " | total |")
    print("|---" * (len(kinds) + 2) + "|")
    bm, be, bl = tot[base]
    for lb in labels[1:]:
        m, e, lib = tot[lb]
        cells = []
        for k in kinds:
            dl = bl.get(k, float("nan")) - lib.get(k, float("nan")) if lib else float("nan")
            cells.append(
                f"{bm.get(k, 0) - m.get(k, 0):+.1f} / {be.get(k, 0) - e.get(k, 0):+.1f} / {dl:+.1f}"
            )
        dm = sum(bm.values()) - sum(m.values())
        de = sum(be.values()) - sum(e.values())
        dl = (sum(bl.values()) - sum(lib.values())) if lib else float("nan")
        print(f"| {lb} | " + " | ".join(cells) + f" | {dm:+.1f} / {de:+.1f} / {dl:+.1f} |")

    sav = anchor_savings(args.measured, labels, base, hw, args.hlo)
    print(
        "\nSaved against full remat, ms per step: measured kernels; the HLO estimate of each "
        "step's own program (backward loop less, forward loop more); the full-remat anchor's "
        f"recompute shares ({sav['_shares_ms_per_trip']:.2f} ms per trip) the step no longer "
        "recomputes, less its forward's extra kernel time; the cost library\n"
    )
    print("| step | measured | own HLO: bwd - fwd | anchor shares - fwd | library |")
    print("|---|---|---|---|---|")
    for lb in labels[1:]:
        m, _, lib = tot[lb]
        dm = sum(bm.values()) - sum(m.values())
        dl = (sum(bl.values()) - sum(lib.values())) if lib else float("nan")
        a = sav[lb]
        own = a["backward_less_ms"] - a["forward_more_ms"]
        add = a["shares_dropped_ms"] - a["forward_more_ms"]
        print(
            f"| {lb} | {dm:+.1f} | {a['backward_less_ms']:+.1f} - {a['forward_more_ms']:.1f} = "
            f"{own:+.1f} | {a['shares_dropped_ms']:+.1f} - {a['forward_more_ms']:.1f} = "
            f"{add:+.1f} | {dl:+.1f} |"
        )

    print("\nStep: measured wall ms; HLO kernels + d2d memcpys (estimated); error\n")
    print("| step | measured wall | kernels + d2d | error |")
    print("|---|---|---|---|")
    for lb in labels:
        _, e, _ = tot[lb]
        pred = sum(e.values()) + priced[lb]["d2d_ms"]
        wall = results[lb]["wall_ms"]
        print(
            f"| {lb} | {wall:.1f} | {sum(e.values()):.1f} + {priced[lb]['d2d_ms']:.1f} = "
            f"{pred:.1f} | {100 * (pred / wall - 1):+.1f}% |"
        )

    for lb in labels if not args.hlo else ():
        res = results[lb]
        print(f"\n{lb}: largest kernels, measured ms / estimated ms per step (calls / runs)\n")
        print("| kernel group | kind | measured | estimate | ratio |")
        print("|---|---|---|---|---|")
        top = sorted(res["groups"].items(), key=lambda kv: -max(kv[1]["meas_ms"], kv[1]["est_ms"]))
        for name, e in top[: args.top]:
            ratio = e["meas_ms"] / e["est_ms"] if e["est_ms"] else float("inf")
            print(
                f"| {name} | {e['kind']} | {e['meas_ms']:.1f} ({e['meas_calls']:.0f}) "
                f"| {e['est_ms']:.1f} ({e['est_runs']}) | {ratio:.2f} |"
            )
        um = res["unmatched"]
        if um:
            print(
                f"\nunmatched measured kernels: {sum(um.values()):.2f} ms ({len(um)}): "
                + ", ".join(
                    f"{n} {ms:.2f}" for n, ms in sorted(um.items(), key=lambda kv: -kv[1])[:6]
                )
            )

    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
