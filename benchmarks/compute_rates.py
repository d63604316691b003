"""What XLA reaches on the device, at the shapes the cost model prices: matmul and fused
attention rates, and where a train step's device time goes, kernel by kernel.

Why (issue 18's must-show, 2026-12-04): the H200 plans of the Llama example and the
long-context decoder ran 15-20% slower than predicted, the MoE within 4%. The h200 profile's
bf16 rate (790 TFLOP/s) is PyTorch's 8192^3 product; cuDNN's fused attention was priced at
that rate too. This measures both through JAX, at the models' own shapes, and traces full
remat steps to see which kernels take the time.

    python benchmarks/compute_rates.py all --out DIR          # on the GPU, one command
    python benchmarks/compute_rates.py rates --out DIR        # matmuls and attention only
    python benchmarks/compute_rates.py kernels --out DIR --model llama --config batch=2,seq=16384

Results: DIR/rates.json (per case: shape, FLOPs by the cost model's own formulas, median
seconds, TFLOP/s), DIR/kernels-NAME.json (per traced step: device time per kernel, grouped
into gemm / attention / other by name). Each kernels run is a fresh process.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (name, lhs shape, rhs shape, contracting dims) in bf16: the Llama example at 32k tokens
# (d_model 4096, ffn 14336, 8 KV heads x 128, vocab 32000), its backward's weight-gradient
# form (contracting over the tokens), and the MoE example's expert matmuls (64 experts,
# capacity 3840, d_model 2048, d_expert 1408).
MATMULS = [
    ("square 8192", (8192, 8192), (8192, 8192), ((1,), (0,))),
    ("llama wi 32768x4096x14336", (32768, 4096), (4096, 14336), ((1,), (0,))),
    ("llama wo 32768x14336x4096", (32768, 14336), (14336, 4096), ((1,), (0,))),
    ("llama q/o 32768x4096x4096", (32768, 4096), (4096, 4096), ((1,), (0,))),
    ("llama k/v 32768x4096x1024", (32768, 4096), (4096, 1024), ((1,), (0,))),
    ("llama dW wi 4096x32768x14336", (32768, 4096), (32768, 14336), ((0,), (0,))),
    ("llama dW q 4096x32768x4096", (32768, 4096), (32768, 4096), ((0,), (0,))),
    ("llama unembed 32768x4096x32000", (32768, 4096), (4096, 32000), ((1,), (0,))),
    ("moe dense 32768x2048x2048", (32768, 2048), (2048, 2048), ((1,), (0,))),
]
MOE_EXPERTS = [
    ("moe experts 64x3840x2048x1408", (64, 3840, 2048), (64, 2048, 1408)),
    ("moe experts 64x3840x1408x2048", (64, 3840, 1408), (64, 1408, 2048)),
]
# (name, batch, seq, query heads, kv heads, head dim): the Llama example (8 x 4096) and the
# long-context decoder (2 x 16384), causal, bf16, BTNH.
ATTENTION = [
    ("llama 8x4096", 8, 4096, 32, 8, 128),
    ("long context 2x16384", 2, 16384, 32, 8, 128),
]


def _median_s(fn, *args, repeats: int = 7) -> float:
    import jax

    jax.block_until_ready(fn(*args))
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.3:  # boost clocks
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def rates(out: Path) -> list[dict]:
    import jax
    import jax.numpy as jnp
    from jax import lax

    from cost_models._calibrate import causal_attention, causal_attention_fwd_bwd

    key = jax.random.key(0)
    rows = []
    for name, ls, rs, contract in MATMULS:
        a = jax.random.normal(key, ls, jnp.bfloat16)
        b = jax.random.normal(jax.random.key(1), rs, jnp.bfloat16)
        f = jax.jit(lambda a, b, c=contract: lax.dot_general(a, b, (c, ((), ()))))
        s = _median_s(f, a, b)
        k = ls[contract[0][0]]
        m = ls[1 - contract[0][0]]
        n = rs[1 - contract[1][0]]
        flops = 2 * m * k * n
        rows.append(
            {"kind": "matmul", "name": name, "flops": flops, "s": s, "tflops": flops / s / 1e12}
        )
        print(rows[-1], flush=True)
    for name, ls, rs in MOE_EXPERTS:
        a = jax.random.normal(key, ls, jnp.bfloat16)
        b = jax.random.normal(jax.random.key(1), rs, jnp.bfloat16)
        f = jax.jit(lambda a, b: jnp.einsum("ecd,edf->ecf", a, b))
        s = _median_s(f, a, b)
        flops = 2 * ls[0] * ls[1] * ls[2] * rs[2]
        rows.append(
            {"kind": "matmul", "name": name, "flops": flops, "s": s, "tflops": flops / s / 1e12}
        )
        print(rows[-1], flush=True)
    for name, b_, t, h, kv, d in ATTENTION:
        q = jax.random.normal(key, (b_, t, h, d), jnp.bfloat16)
        k = jax.random.normal(jax.random.key(1), (b_, t, kv, d), jnp.bfloat16)
        v = jax.random.normal(jax.random.key(2), (b_, t, kv, d), jnp.bfloat16)

        fwd = jax.jit(causal_attention)
        both = jax.jit(causal_attention_fwd_bwd)
        s_f = _median_s(fwd, q, k, v)
        s_fb = _median_s(both, q, k, v)
        scores = b_ * h * t * t * 0.5  # cost_models/_rules.py: causal keeps half
        f_flops = 2 * scores * (d + d)
        b_flops = 2 * scores * (3 * d + 2 * d)
        for part, flops, s in (
            ("fwd", f_flops, s_f),
            ("bwd", b_flops, s_fb - s_f),
            ("fwd+bwd", f_flops + b_flops, s_fb),
        ):
            rows.append(
                {
                    "kind": f"attention {part}",
                    "name": name,
                    "flops": flops,
                    "s": s,
                    "tflops": flops / s / 1e12,
                }
            )
            print(rows[-1], flush=True)
    (out / "rates.json").write_text(
        json.dumps(
            {"device": str(jax.devices()[0].device_kind), "jax": jax.__version__, "rows": rows},
            indent=1,
        )
    )
    return rows


def sizes(out: Path) -> list[dict]:
    """bf16 matmul rate against size, back-to-back calls (cost_models.calibrate's timing: no
    dispatch in the figure): M tokens from 512 to 32768 against the Llama example's weight
    shapes, and cuDNN attention at 1, 2, 4, 8 sequences of 4096."""
    import functools

    import jax
    import jax.numpy as jnp
    from jax import lax

    from cost_models._calibrate import _seconds_per_call, attention_seconds

    rows = []
    for k, n in ((4096, 4096), (4096, 14336), (14336, 4096), (4096, 1024), (2048, 1408)):
        w = jax.random.normal(jax.random.key(1), (k, n), jnp.bfloat16)
        f = jax.jit(lambda a, b: lax.dot(a, b))
        for m in (512, 1024, 2048, 4096, 8192, 16384, 32768):
            a = jax.random.normal(jax.random.key(0), (m, k), jnp.bfloat16)
            sec = _seconds_per_call(functools.partial(f, a, w), repeats=5, batched=True)
            flops = 2 * m * k * n
            rows.append(
                {
                    "kind": "matmul",
                    "m": m,
                    "k": k,
                    "n": n,
                    "flops": flops,
                    "s": sec,
                    "tflops": flops / sec / 1e12,
                }
            )
            print(rows[-1], flush=True)

    for b in (1, 2, 4, 8):
        sf, sb = attention_seconds(jax.devices()[0], b, 4096, repeats=5)
        ff = 2 * (b * 32 * 4096 * 4096 * 0.5) * 256
        rows.append(
            {
                "kind": "attention",
                "batch": b,
                "fwd_s": sf,
                "both_s": sb,
                "fwd_tflops": ff / sf / 1e12,
                "bwd_tflops": 2.5 * ff / (sb - sf) / 1e12,
            }
        )
        print(rows[-1], flush=True)
    (out / "sizes.json").write_text(
        json.dumps(
            {"device": str(jax.devices()[0].device_kind), "jax": jax.__version__, "rows": rows},
            indent=1,
        )
    )
    return rows


_GEMM = re.compile(r"gemm|xmma|nvjet|cutlass|cublas|triton_gemm|__dot|_dot_", re.I)
_ATTN = re.compile(r"cudnn|fmha|flash|sdpa|attention", re.I)


def category(name: str) -> str:
    if _ATTN.search(name):
        return "attention"
    if _GEMM.search(name):
        return "gemm"
    return "other"


def _plan_policy(plan_file: str, budget: str) -> tuple[dict, str, dict]:
    """(policy spec, XLA flags, bench config) of one budget of a ``gpu_bench.py plan`` file."""
    d = json.loads(Path(plan_file).read_text())
    p = d["plans"][budget]
    return p["policy"], p.get("flags", ""), d["config"]


def kernels(
    out: Path,
    model: str,
    config: str,
    policy: str,
    label: str,
    flags: str = "",
    plan: str = "",
    budget: str = "",
) -> dict:
    """One step of (model, config) under a stock policy, or under one budget's plan of a
    ``gpu_bench.py plan`` file (``plan``, ``budget``; its config and flags), traced: device
    ms per kernel name (every kernel), and the compiled HLO (``hlo-LABEL.txt.gz``) so each
    kernel name can be read back to its HLO instruction and the JAX equations in its
    metadata (benchmarks/kernel_attribution.py)."""
    import gzip

    import jax

    from benchmarks import gpu_bench as gb
    from planner._src.profiling.xplane import read_trace

    if plan:
        spec, flags, overrides = _plan_policy(plan, budget)
        policy = f"plan {Path(plan).name} @ {budget}"
    else:
        spec = {"kind": "stock", "name": policy}
        overrides = gb.bench_config(model, config)
    module, cfg = gb._model({"model": model, "config": overrides}, gb._policy_from_spec(spec))
    step, args = module.make_train_step(cfg, concrete=True)
    from planner._src.emit.emit import flags_to_compiler_options

    opts = flags_to_compiler_options(flags)
    lowered = jax.jit(step, donate_argnums=(0,)).lower(*args)
    compiled = lowered.compile(compiler_options=opts) if opts else lowered.compile()
    (out / f"hlo-{label}.txt.gz").write_bytes(gzip.compress(compiled.as_text().encode()))
    state, batch = args
    for _ in range(2):
        state, loss = compiled(state, batch)
        loss.block_until_ready()
    logdir = tempfile.mkdtemp()
    steps = 2
    walls = []
    with jax.profiler.trace(logdir):
        for _ in range(steps):
            t = time.perf_counter()
            state, loss = compiled(state, batch)
            loss.block_until_ready()
            walls.append(time.perf_counter() - t)
    trace = read_trace(logdir)
    per_name: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    per_op: dict[tuple[str, str], float] = defaultdict(float)
    op_counts: dict[tuple[str, str], int] = defaultdict(int)
    for e in trace.events:
        if e.kind != "compute":
            continue
        per_name[e.name] += (e.end_ns - e.start_ns) / 1e6 / steps
        counts[e.name] += 1
        # the HLO instruction the kernel runs for (cuBLAS kernels are named by cuBLAS)
        per_op[(e.hlo_op, e.name)] += (e.end_ns - e.start_ns) / 1e6 / steps
        op_counts[(e.hlo_op, e.name)] += 1
    by_cat: dict[str, float] = defaultdict(float)
    for n, ms in per_name.items():
        by_cat[category(n)] += ms
    top = sorted(per_name.items(), key=lambda kv: -kv[1])
    res = {
        "label": label,
        "model": model,
        "config": overrides,
        "policy": policy,
        "flags": flags,
        "wall_ms": [1e3 * w for w in walls],
        "device_ms_by_category": dict(by_cat),
        "device_ms_total": sum(per_name.values()),
        "kernels": len(per_name),
        "top": [{"name": n[:200], "ms": ms, "calls": counts[n] / steps} for n, ms in top],
        "by_hlo_op": [
            {"hlo_op": op, "name": n[:200], "ms": ms, "calls": op_counts[(op, n)] / steps}
            for (op, n), ms in sorted(per_op.items(), key=lambda kv: -kv[1])
        ],
    }
    (out / f"kernels-{label}.json").write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k not in ("top", "by_hlo_op")}), flush=True)
    return res


KERNEL_RUNS = [
    ("llama-remat", "llama", "attention_impl=cudnn", "nothing_saveable"),
    ("llama-dots", "llama", "attention_impl=cudnn", "dots_saveable"),
    ("long-remat", "llama", "batch=2,seq=16384,attention_impl=cudnn", "nothing_saveable"),
    ("moe-remat", "moe", "", "nothing_saveable"),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("all")
    a.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("rates")
    r.add_argument("--out", type=Path, required=True)
    z = sub.add_parser("sizes")
    z.add_argument("--out", type=Path, required=True)
    k = sub.add_parser("kernels")
    k.add_argument("--out", type=Path, required=True)
    k.add_argument("--model", default="llama")
    k.add_argument("--config", default="")
    k.add_argument("--policy", default="nothing_saveable")
    k.add_argument("--label", default="run")
    k.add_argument("--plan", default="", help="a gpu_bench.py plan file (its config, flags)")
    k.add_argument("--budget", default="", help="the plan file's budget key, e.g. 113.16")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.cmd == "rates":
        rates(args.out)
    elif args.cmd == "sizes":
        sizes(args.out)
    elif args.cmd == "kernels":
        kernels(
            args.out,
            args.model,
            args.config,
            args.policy,
            args.label,
            plan=args.plan,
            budget=args.budget,
        )
    else:
        cmd = [sys.executable, __file__]
        subprocess.run(cmd + ["rates", "--out", str(args.out)], check=False, timeout=240)
        for label, model, config, policy in KERNEL_RUNS:
            t = time.time()
            subprocess.run(
                cmd
                + [
                    "kernels",
                    "--out",
                    str(args.out),
                    "--model",
                    model,
                    "--config",
                    config,
                    "--policy",
                    policy,
                    "--label",
                    label,
                ],
                check=False,
                timeout=240,
                env={**os.environ},
            )
            print(f"{label}: {time.time() - t:.0f} s", flush=True)


if __name__ == "__main__":
    main()
