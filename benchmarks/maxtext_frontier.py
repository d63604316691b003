"""Plan MaxText's 405B and 671B benchmark configurations on this CPU, per device, for the H200.

    python benchmarks/maxtext_frontier.py --out OUT_DIR [--models llama3.1-405b ...]
        [--timeout 600] [--hbm-gb 100] [--mem-fraction 0.9]

Each model runs ``python -m planner maxtext ... --json`` in a process of its own (so its
peak RSS is its own: ``ru_maxrss`` of ``os.wait4`` on it) with
``JAX_PLATFORMS=cpu`` and ``--host-devices N`` CPU devices for MaxText's mesh; with the CUDA
plugin installed (``pip install --no-deps jax-cuda13-plugin==<jaxlib> jax-cuda13-pjrt==<jaxlib>
nvidia-cudnn-cu13``) every compile (the anchors, the plan's verify compile, MaxText's own
compile of the overrides) is XLA:GPU for an N-GPU H200 topology, deviceless. Writes
``OUT_DIR/<model>.json`` (the command's JSON, or the error) and ``OUT_DIR/summary.md``.

The configurations are MaxText's own:

* ``llama3.1-405b``: ``maxtext/configs/gpu/a3/llama_3.1_405b/128vm.sh`` (in the maxtext 0.2.5
  wheel): its model and batch keys and its mesh (``dcn_fsdp_parallelism=128 x
  ici_fsdp_parallelism=8``, 1024 GPUs, written as ``ici_fsdp_parallelism=1024``: both make
  MaxText's one ``fsdp`` mesh axis, so the per-device shapes are the same, and MaxText
  refuses DCN parallelism in one process) and its ``XLA_FLAGS`` (less ``--xla_dump_to``), with
  ``attention=cudnn_flash_jax`` instead of ``cudnn_flash_te`` (TransformerEngine is not part
  of MaxText's CPU requirements; ``cudnn_flash_jax`` is MaxText's cuDNN flash attention
  through ``jax.nn.dot_product_attention``), ``remat_policy`` left to the planner.
* ``deepseek3-671b``: ``benchmarks/maxtext_v5p_model_configs.py`` ``deepseek_v3_fsdp_v5p_512``
  in AI-Hypercomputer/maxtext (commit 0469c1ac): ``deepseek3-671b``, per-device batch 4 x 8192,
  fsdp over 512 devices, ``sparse_matmul=False`` (capacity dispatch, ``capacity_factor=1``),
  bf16, ``opt_type=adam_pax``; its TPU ``attention=flash`` becomes ``cudnn_flash_jax`` and its
  TPU XLA flags are left out (they are ``xla_tpu_*`` flags).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

A3_405B_XLA_FLAGS = (
    "--xla_gpu_enable_latency_hiding_scheduler=true "
    "--xla_gpu_enable_triton_gemm=false --xla_gpu_enable_command_buffer= "
    "--xla_gpu_enable_highest_priority_async_stream=true "
    "--xla_gpu_all_reduce_combine_threshold_bytes=1073741824 "
    "--xla_gpu_all_gather_combine_threshold_bytes=134217728 "
    "--xla_gpu_reduce_scatter_combine_threshold_bytes=134217728 --xla_gpu_pipeline_all_gather=on "
    "--xla_gpu_pipeline_reduce_scatter=on --xla_gpu_pipeline_all_reduce=on "
    "--xla_gpu_enable_while_loop_double_buffering=true "
    "--xla_gpu_enable_all_gather_combine_by_dim=false "
    "--xla_gpu_enable_reduce_scatter_combine_by_dim=false "
    "--xla_disable_hlo_passes=rematerialization"
)

MODELS = {
    "llama3.1-405b": dict(
        devices=1024,
        xla_flags=A3_405B_XLA_FLAGS,
        overrides=[
            "hardware=gpu",
            "model_name=llama3.1-405b",
            "attention=cudnn_flash_jax",
            "use_iota_embed=True",
            "scan_layers=True",
            "logits_dot_in_fp32=False",
            "per_device_batch_size=1",
            "max_target_length=8192",
            # the script's dcn_fsdp_parallelism=128 x ici_fsdp_parallelism=8, as one fsdp axis
            # of 1024 (MaxText makes the same 'fsdp' mesh axis of both; one process has no
            # DCN slices to split it over)
            "ici_fsdp_parallelism=1024",
            "max_segments_per_seq=32",
            "steps=10",
        ],
    ),
    "deepseek3-671b": dict(
        devices=512,
        xla_flags="",
        overrides=[
            "hardware=gpu",
            "model_name=deepseek3-671b",
            "per_device_batch_size=4",
            "max_target_length=8192",
            "ici_fsdp_parallelism=-1",
            "ici_expert_parallelism=1",
            "use_iota_embed=True",
            "megablox=False",
            "sparse_matmul=False",
            "capacity_factor=1.0",
            "dtype=bfloat16",
            "opt_type=adam_pax",
            "attention=cudnn_flash_jax",
        ],
    ),
}


def run(
    model: str, out_dir: str, timeout: int, hbm_gb: float | None, mem_fraction: float | None = None
) -> dict:
    spec = MODELS[model]
    cmd = [
        sys.executable,
        "-m",
        "planner",
        "maxtext",
        *spec["overrides"],
        "--hardware",
        "h200",
        "--host-devices",
        str(spec["devices"]),
        "--json",
    ]
    if hbm_gb:
        cmd += ["--hbm-gb", str(hbm_gb)]
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=spec["xla_flags"])
    if mem_fraction:  # the planner's budget follows it (planning/maxtext/settings.py budget_gb)
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = str(mem_fraction)
    out_path = os.path.join(out_dir, f"{model}.stdout")
    err_path = os.path.join(out_dir, f"{model}.stderr")
    t0 = time.perf_counter()
    with open(out_path, "w") as fo, open(err_path, "w") as fe:
        p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fo, stderr=fe)
        killer = threading.Timer(timeout, p.kill)
        killer.start()
        _, status, usage = os.wait4(p.pid, 0)  # this child's own peak RSS
        killer.cancel()
    wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    rc = "timeout (killed)" if rc == -9 and wall >= timeout else rc
    rss = usage.ru_maxrss
    stdout = open(out_path).read()
    stderr = open(err_path).read()
    got = {
        "model": model,
        "command": " ".join(cmd),
        "xla_flags": spec["xla_flags"],
        "XLA_PYTHON_CLIENT_MEM_FRACTION": env.get("XLA_PYTHON_CLIENT_MEM_FRACTION"),
        "rc": rc,
        "wall_s": wall,
        "max_rss_gb": rss * 1024 / 1e9,  # ru_maxrss is KiB on Linux
        "stderr_tail": stderr[-4000:],
    }
    try:
        got["result"] = json.loads(stdout)
    except ValueError:
        got["stdout_tail"] = stdout[-4000:]
    with open(os.path.join(out_dir, f"{model}.json"), "w") as f:
        json.dump(got, f, indent=1)
    return got


def summary(rows) -> str:
    import jax

    lines = [
        f"machine: {platform.node()} ({os.cpu_count()} CPUs), Python {sys.version.split()[0]}, "
        f"JAX {jax.__version__}, {datetime.date.today()}",
        "",
        "| model | rc | wall s | max RSS GB | verified (MaxText's compile) | device GB | budget GB "
        "| overrides |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mt = (r.get("result") or {}).get("maxtext") or {}
        v = mt.get("verification") or {}
        lines.append(
            f"| {r['model']} | {r['rc']} | {r['wall_s']:.0f} | {r['max_rss_gb']:.1f} | "
            f"{v.get('within_budget', '-')} ({v.get('compiler', '-')}) | "
            f"{v['device_bytes'] / 1e9:.2f} | {v['budget_bytes'] / 1e9:.2f} | "
            if v
            else f"| {r['model']} | {r['rc']} | {r['wall_s']:.0f} | {r['max_rss_gb']:.1f} | - | - | - | "
        )
        lines[-1] += " ".join(mt.get("override_args", [])) + " |"
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--hbm-gb", type=float, default=None)
    ap.add_argument(
        "--mem-fraction",
        type=float,
        default=None,
        help="XLA_PYTHON_CLIENT_MEM_FRACTION for the planner (default: the environment's, "
        "else JAX's 0.75)",
    )
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for m in a.models:
        print(f"planning {m} ...", file=sys.stderr, flush=True)
        rows.append(run(m, a.out, a.timeout, a.hbm_gb, a.mem_fraction))
        print(f"  rc={rows[-1]['rc']} wall={rows[-1]['wall_s']:.0f}s", file=sys.stderr)
    text = summary(rows)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
