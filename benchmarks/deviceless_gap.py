"""Deviceless XLA:GPU against the GPU's own compile, same jaxlib, same machine (issue 17).

    python benchmarks/deviceless_gap.py run --out DIR [--budget-s 540] [--only NAME,...]
    python benchmarks/deviceless_gap.py one JOB.json      # one compile, this process

Run on the GPU machine. Each (model, policy) is compiled twice, each in a fresh process:
on the device (``jax.jit(step, donate_argnums=(0,)).lower(...).compile()``, autotuning and
cuDNN as a user's run gets them) and deviceless (``JAX_PLATFORMS=cpu``, the planner's own
``target.compile_traced`` for ``resolve("h200")``: the CUDA plugin's compile-only devices built
from ``cost_models/targets``). Both record ``memory_analysis()`` and what in the optimized HLO
can differ without a device: the workspaces of cuDNN and cuBLAS custom calls (the last
``u8[N]`` / ``s8[N]`` element of the call's tuple) and the GEMM backends (cuBLAS calls, Triton
GEMM fusions). With ``--dump``, XLA's memory-usage reports come back in one archive.

Results: DIR/results.jsonl, one JSON line a compile; DIR/summary.md, the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples import llama, moe  # noqa: E402  (the repository root is on the path above)


# The models: examples/llama.py and examples/moe.py at their H200 benchmark sizes
# (H200_BENCH, as benchmarks/gpu_bench.py runs them), with cuDNN attention as GPU users write it.
def _config(cfg) -> dict:
    """A config dataclass's fields as JSON-able keyword arguments (the policy left out)."""
    return {
        f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name != "remat_policy"
    }


LLAMA = {**_config(llama.H200_BENCH), "attention_impl": "cudnn"}
MODELS = {
    # 8 layers under lax.scan, 32k tokens (deviceless-2026-12-02.md's step)
    "llama_scan": ("llama", LLAMA),
    # a Python loop over one jax.checkpoint(layer, prevent_cse=True), 16k tokens
    "llama_loop": ("llama", {**LLAMA, "batch": 4, "layer_loop": "loop", "prevent_cse": True}),
    # parallel residual (attention and MLP from one norm), scan, 16k tokens
    "parallel": ("llama", {**LLAMA, "batch": 4, "parallel_residual": True}),
    # XLA's own attention (no cuDNN call): what is left without cuDNN workspaces
    "llama_xla_attn": ("llama", {**LLAMA, "batch": 2, "attention_impl": "xla"}),
    # 64 routed experts top-6 + a shared expert, capacity dispatch (gpu_bench.MOE_BENCH)
    "moe": ("moe", _config(moe.H200_BENCH)),
}
# XLA's dumps (--dump) go here, outside DIR; the memory reports and optimized HLO come back in
# DIR/reports.tar.xz.
_DUMPS = Path(tempfile.gettempdir()) / "deviceless-gap-dumps"
# The same three models with XLA's own attention (batch 2: XLA materializes the scores).
for _name in ("llama_loop", "parallel", "moe"):
    _m, _c = MODELS[_name]
    MODELS[f"{_name}_xla_attn"] = (_m, {**_c, "batch": 2, "attention_impl": "xla"})
POLICIES = ("nothing_saveable", "dots_saveable", "everything_saveable")
if os.environ.get("DEVICELESS_GAP_DRY_RUN"):  # a CPU dry run of the script, tiny models
    _TINY = dict(d_model=256, n_layers=2, batch=1, seq=256, vocab=512, attention_impl=None)
    _TINY_MOE = dict(d_expert=64, d_shared=128, n_experts=4, top_k=2)
    MODELS = {
        k: (m, {**c, **_TINY, **(_TINY_MOE if m == "moe" else {"d_ff": 512})})
        for k, (m, c) in MODELS.items()
    }


def _step(model: str, config: dict, policy_name):
    """``policy_name``: a stock policy's name, or a saved plan's policy spec (a dict, as
    ``benchmarks/gpu_bench.py`` runs it)."""
    import jax

    module = moe if model == "moe" else llama
    cls = moe.MoEConfig if model == "moe" else llama.LlamaConfig
    if isinstance(policy_name, dict):
        from benchmarks import gpu_bench

        policy = gpu_bench._policy_from_spec(policy_name)
    else:
        policy = getattr(jax.checkpoint_policies, policy_name)
    cfg = cls(**config, remat_policy=policy)
    return module.make_train_step(cfg)  # ShapeDtypeStruct arguments


_TUPLE = re.compile(r"=\s*\((?P<shapes>[^=]*?)\)\s*custom-call\(")
_TARGET = re.compile(r'custom_call_target="(?P<t>[^"]+)"')
_SHAPE = re.compile(r"(?P<dt>[a-z]+[0-9]*)\[(?P<dims>[0-9,]*)\]")


def hlo_facts(text: str) -> dict:
    """cuDNN / cuBLAS custom calls of an optimized HLO module and their workspaces (bytes)."""
    cudnn, cublas = [], []
    triton_gemm = 0
    for line in text.splitlines():
        if '"kind":"__triton_gemm"' in line or '"kind":"__triton_nested_gemm_fusion"' in line:
            triton_gemm += 1
        m = _TARGET.search(line)
        if not m or "custom-call(" not in line:
            continue
        target = m.group("t")
        t = _TUPLE.search(line)
        ws = 0
        if t:
            shapes = _SHAPE.findall(t.group("shapes"))
            if shapes and shapes[-1][0] in ("u8", "s8"):
                dims = [int(x) for x in shapes[-1][1].split(",") if x]
                ws = dims[0] if dims else 0
        if target.startswith("__cudnn"):
            cudnn.append({"target": target, "workspace": ws})
        elif target.startswith("__cublas"):
            cublas.append({"target": target, "workspace": ws})
    return {
        "cudnn_calls": len(cudnn),
        "cudnn_workspaces": sorted({c["workspace"] for c in cudnn}),
        "cudnn_max_workspace": max((c["workspace"] for c in cudnn), default=0),
        "cublas_calls": len(cublas),
        "cublas_max_workspace": max((c["workspace"] for c in cublas), default=0),
        "triton_gemm_fusions": triton_gemm,
    }


def run_one(job: dict) -> dict:
    """Compile one (model, policy) on the device or deviceless, in this process."""
    import jax

    step, args = _step(job["model"], job["config"], job["policy"])
    t0 = time.perf_counter()
    if job["where"] == "deviceless":
        from planner._src.xla import compile as xla_compile
        from planner._src.xla import deviceless
        from planner._src.xla import targets as T

        target = T.resolve("h200")
        assert target.kind == "deviceless", target.how_to_get_exact
        program = xla_compile.compile_traced(
            target, jax.jit(step, donate_argnums=(0,)), deviceless.args_for(target, args)
        )
        compiled = program.compiled
        compiler = target.description
    else:
        import jax.numpy as jnp

        concrete = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), args)
        compiled = jax.jit(step, donate_argnums=(0,)).lower(*concrete).compile()
        d = jax.devices()[0]
        compiler = f"XLA:GPU on this device ({d.device_kind})"
    compile_s = time.perf_counter() - t0
    m = compiled.memory_analysis()
    fig = {
        "argument_bytes": m.argument_size_in_bytes,
        "output_bytes": m.output_size_in_bytes,
        "alias_bytes": m.alias_size_in_bytes,
        "temp_bytes": m.temp_size_in_bytes,
    }
    fig["device_bytes"] = (
        fig["argument_bytes"] + fig["output_bytes"] - fig["alias_bytes"] + fig["temp_bytes"]
    )
    return {
        **job,
        **fig,
        **hlo_facts(compiled.as_text()),
        "compiler": compiler,
        "jax": jax.__version__,
        "compile_s": round(compile_s, 2),
    }


def _spawn(job: dict, out: Path, timeout: float, dump: bool) -> dict:
    path = Path(tempfile.gettempdir()) / f"dgap-{job['id']}.json"
    path.write_text(json.dumps(job))
    env = dict(os.environ)
    if job["where"] == "deviceless":
        env["JAX_PLATFORMS"] = "cpu"
    if job["where"] == "device-autotune0":
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_gpu_autotune_level=0").strip()
    if dump:
        d = _DUMPS / job["id"]
        d.mkdir(parents=True, exist_ok=True)
        env["XLA_FLAGS"] = (
            env.get("XLA_FLAGS", "") + f" --xla_dump_to={d} --xla_dump_hlo_as_text"
            " --xla_dump_hlo_module_re=.*step.* --xla_dump_hlo_pass_re=NONE"
        ).strip()
    t = time.perf_counter()
    try:
        p = subprocess.run(
            [sys.executable, __file__, "one", str(path)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        return {**job, "ok": False, "error": f"timeout {timeout:.0f} s"}
    wall = time.perf_counter() - t
    last = p.stdout.strip().splitlines()[-1:] if p.stdout.strip() else []
    if p.returncode == 0 and last and last[0].startswith("{"):
        return {**json.loads(last[0]), "ok": True, "wall_s": round(wall, 1)}
    return {**job, "ok": False, "rc": p.returncode, "error": p.stderr[-2000:], "wall_s": wall}


def summarize(rows: list[dict]) -> str:
    by = {}
    for r in rows:
        if r.get("ok"):
            by[(r["name"], r.get("policy_label") or r["policy"], r["where"])] = r
    lines = [
        "| model | policy | device bytes (GPU) | deviceless | diff | temp GPU | temp deviceless "
        "| cuDNN ws max GPU / deviceless | cuBLAS calls GPU / deviceless "
        "| GPU, autotune level 0 (diff to deviceless) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (name, pol, where), g in sorted(by.items()):
        if where != "device":
            continue
        d = by.get((name, pol, "deviceless"))
        if d is None:
            continue
        diff = (d["device_bytes"] - g["device_bytes"]) / g["device_bytes"]
        a0 = by.get((name, pol, "device-autotune0"))
        a0_text = (
            f"{a0['device_bytes']:,} ({(d['device_bytes'] - a0['device_bytes']) / a0['device_bytes']:+.2%})"
            if a0
            else "-"
        )
        lines.append(
            f"| {name} | {pol} | {g['device_bytes']:,} | {d['device_bytes']:,} | {diff:+.2%} "
            f"| {g['temp_bytes']:,} | {d['temp_bytes']:,} "
            f"| {g['cudnn_max_workspace']:,} / {d['cudnn_max_workspace']:,} "
            f"| {g['cublas_calls']} / {d['cublas_calls']} | {a0_text} |"
        )
    return "\n".join(lines) + "\n"


def run(args):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    only = set(filter(None, args.only.split(","))) if args.only else None
    policies = args.policies.split(",")
    autotune0 = set(filter(None, args.autotune0.split(",")))
    jobs = []
    for name, (model, config) in MODELS.items():
        if only and name not in only:
            continue
        for pol in policies:
            wheres = ["deviceless", "device"]
            if name in autotune0:
                wheres.append("device-autotune0")
            for where in wheres:
                if args.where and where not in args.where.split(","):
                    continue
                jobs.append(
                    {
                        "id": f"{name}-{pol}-{where}",
                        "name": name,
                        "model": model,
                        "config": config,
                        "policy": pol,
                        "where": where,
                    }
                )
    for item in filter(None, args.plans.split(",")):
        # a saved plan (benchmarks/results/offload-plans-*/MODEL.json) at one of its budgets
        path, budget = item.rsplit(":", 1)
        saved = json.loads(Path(path).read_text())
        spec = saved["plans"][budget]
        name = f"{Path(path).stem}-plan-{budget}"
        for where in ["deviceless", "device", "device-autotune0"]:
            if args.where and where not in args.where.split(","):
                continue
            jobs.append(
                {
                    "id": f"{name}-{where}",
                    "name": name,
                    "model": saved.get("model", "llama"),
                    "config": saved["config"],
                    "policy": spec["policy"],
                    "policy_label": f"plan at {budget} GB",
                    "verified_peak": spec.get("verified_peak"),
                    "where": where,
                }
            )
    start = time.perf_counter()
    rows = []
    results = out / "results.jsonl"
    # Deviceless compiles use the CPU only: run them beside the device compiles, two at once.
    import concurrent.futures as cf

    with cf.ThreadPoolExecutor(max_workers=3) as pool:
        futs = []
        device_jobs = [
            j for j in jobs if j["where"].startswith("device-") or j["where"] == "device"
        ]
        free_jobs = [j for j in jobs if j["where"] == "deviceless"]

        def chain(js):
            res = []
            for j in js:
                left = args.budget_s - (time.perf_counter() - start)
                if left < 30:
                    res.append({**j, "ok": False, "error": "not started: out of time"})
                    continue
                r = _spawn(j, out, min(left, 240), args.dump)
                with open(results, "a") as f:
                    f.write(json.dumps(r) + "\n")
                print(
                    f"{j['id']}: {'ok' if r.get('ok') else 'FAILED'} "
                    f"{r.get('device_bytes', '')} {r.get('wall_s', '')} s",
                    flush=True,
                )
                res.append(r)
            return res

        futs.append(pool.submit(chain, device_jobs))
        half = len(free_jobs) // 2
        futs.append(pool.submit(chain, free_jobs[:half]))
        futs.append(pool.submit(chain, free_jobs[half:]))
        for f in futs:
            rows += f.result()
    table = summarize(rows)
    (out / "summary.md").write_text(table)
    print(table)
    if args.dump:
        with tarfile.open(out / "reports.tar.xz", "w:xz") as tar:
            for p in sorted(_DUMPS.rglob("*")):
                if p.is_file() and (
                    "memory-usage-report" in p.name
                    or "after_optimizations.txt" in p.name
                    or "buffer-assignment" in p.name
                ):
                    tar.add(p, arcname=str(p.relative_to(_DUMPS)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--budget-s", type=float, default=540)
    r.add_argument("--only", default="")
    r.add_argument("--policies", default=",".join(POLICIES))
    r.add_argument("--dump", action="store_true")
    r.add_argument(
        "--plans",
        default="",
        help="saved plans to compile too, FILE:BUDGET[,FILE:BUDGET] "
        "(benchmarks/results/offload-plans-*/MODEL.json), each deviceless, on the device and "
        "on the device without autotuning",
    )
    r.add_argument("--where", default="", help="only these compiles (deviceless,device,...)")
    r.add_argument(
        "--autotune0",
        default="",
        help="models also compiled on the device with --xla_gpu_autotune_level=0 "
        "(device-autotune0): what autotuning changes",
    )
    o = sub.add_parser("one")
    o.add_argument("job")
    a = ap.parse_args()
    if a.cmd == "one":
        print(json.dumps(run_one(json.loads(Path(a.job).read_text()))))
    else:
        run(a)


if __name__ == "__main__":
    main()
