"""Issue 21's must-show on one H200: the mixed plan (activations + part of Adam's state in
pinned host memory, one CP-SAT model) against (a) the whole optimizer state on the host,
brought back in one piece for the update (MaxText's optimizer_memory_host_offload) with the
best activation plan for the memory that frees, and (b) full remat with the whole state in
HBM at the largest batch that fits. Every run is a fresh process capped at the same budget.

    python benchmarks/state_offload_h200.py run --out DIR     # all of it, one command, < 9 min
    python benchmarks/state_offload_h200.py worker JOB.json   # one job in a fresh process

Model (CONFIG): examples/llama.py's H200_BENCH layer (d_model 4096, ffn 14336, 32 heads, 8 KV
heads, bf16, cuDNN attention), 32 layers under lax.scan (7.2 B parameters: 14.5 GB, their
gradients 14.5 GB, Adam's two moments 29.0 GB), optax.adam, batch 8 x seq 512. The
configuration and its budget were chosen on the CPU with the planner's model and deviceless
H200 compiles (benchmarks/state_offload_config.py; benchmarks/results/
state-offload-config-2026-12-04.md): at 59.10 GB (58.32 GB usable) full remat with the whole
state in HBM compiles to 58.12 GB at batch 1 and 58.37 GB at batch 2 (deviceless), so (b)
runs at batch 1 (512 tokens a step), while the mixed plan runs the batch of 8.

The plans are made beforehand on the CPU (the device has no ortools) and read from PLANS:
mixed plans at deviceless margins 0, 0.01 and 0.03 (the planner's default margin for a
deviceless plan is 0.15: here the device's own compile decides instead), and (a)'s
activation plan. Steps (JSON lines in DIR/results.jsonl; the driver stops starting jobs
when fewer than 60 s of its TOTAL_S are left):

1. the mixed plans in order: each compiled on the device under the cap; the first whose
   device bytes are within the usable bytes runs, the others are recorded as over.
2. (b): full remat with the state in HBM compiled (uncapped) at batch 1, 2, ...; the largest
   batch within the usable bytes runs capped, and the next batch up is attempted capped too
   (XLA may rematerialize under the cap on its own; recorded either way).
3. (a) at the batch of 8.

On the device host (jax 0.11.2 and optax installed; no ortools needed):

    PYTHONPATH=. python benchmarks/state_offload_h200.py run --out $OUT/state21

Read DIR/summary.md: tokens/s per configuration next to the model's prediction, compiled
device and host bytes, peak bytes in use, the plan's budget split.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HBM_BYTES_H200 = 143771 * 2**20  # nvidia-smi on our H200 (KINDS.md): 143771 MiB
CONFIG = dict(
    vocab=32000,
    d_model=4096,
    n_heads=32,
    n_kv_heads=8,
    d_ff=14336,
    n_layers=32,
    batch=8,
    seq=512,
    dtype="bfloat16",
    attention_impl="cudnn",
)
TOTAL_S = 500.0
# the plans (state_offload_config.py); STATE_OFFLOAD_PLANS: another folder (gpu_suite.py plan)
PLANS = Path(
    os.environ.get("STATE_OFFLOAD_PLANS")
    or ROOT / "benchmarks/results/state-offload-config-2026-12-04"
)
MIXED = ("mixed-m0.json", "mixed-m0.01.json", "mixed-m0.03.json")  # tried in this order


def _cfg(batch: int, policy=None):
    from examples import llama

    return llama.LlamaConfig(**{**CONFIG, "batch": batch}, remat_policy=policy)


def _policy(spec: dict | None):
    if spec is None:
        return None
    if spec["kind"] == "stock":
        from planner._src.policies import STOCK

        return STOCK[spec["name"]].policy()
    from planner._src.emit.emit import policies_for
    from planner._src.types import Assignment

    policy, _, _, per_group, _ = policies_for(
        Assignment.of(dict(spec["decisions"])), dict(spec["names"])
    )
    return policy if policy is not None else per_group


def _build(cfg, mode: str, on_host=(), *, concrete: bool = True):
    """(jitted step, args) with the optimizer state placed by ``mode``: "hbm" (all in HBM),
    "mixed" (``on_host`` paths, streamed update), "whole" (all on the host, brought back in
    one piece for the update: MaxText's optimizer_memory_host_offload)."""
    import jax

    from examples import llama
    from planner._src import trainstate as st
    from planner._src.xla import adapter

    holder = {}

    def wrap(update):
        if mode == "hbm":
            return update
        if mode == "mixed":  # the placement is known once the state's leaves are
            return lambda g, s, p: st.streamed_update(update, holder["placement"], cfg.n_layers)(
                g, s, p
            )

        def whole(g, s, p):  # MaxText: the whole state back to HBM, updated, put back
            s = jax.tree.map(lambda x: adapter.to_memory(x, "device") if x.ndim else x, s)
            u, s = update(g, s, p)
            return u, jax.tree.map(
                lambda x: adapter.to_memory(x, "pinned_host") if x.ndim else x, s
            )

        return whole

    # Abstract first: the state is then created in its placement (below), never whole in HBM.
    step, (params, opt, batch) = llama.make_adam_step(cfg, wrap=wrap, concrete=False)
    leaves = st.state_leaves(opt, layers=cfg.n_layers, params=params)
    if mode == "whole":
        on_host = {x.path for x in leaves if x.movable}
    placement = st.placement_of(leaves, set(on_host) if mode != "hbm" else set())
    holder["placement"] = placement
    dev = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    osh = st.state_shardings(opt, placement, dev)
    psh = jax.tree.map(lambda _: dev, params)
    bsh = jax.tree.map(lambda _: dev, batch)
    jitted = jax.jit(
        step, in_shardings=(psh, osh, bsh), out_shardings=(psh, osh, dev), donate_argnums=(0, 1)
    )
    if concrete:
        # Created where it lives: Adam's moments initialized by a jit whose out_shardings are
        # the placement. On 2026-12-04 the harness built the whole state in HBM and then moved
        # half of it to the host: the freed 26 GB left HBM fragmented, and the mixed plan's
        # 36 GiB temporary found no contiguous block under the cap (OOM at a compiled 56.4 GB
        # of a 67.6 GB limit; h200-2026-12-04-state-offload.md).
        import jax.numpy as jnp
        import optax

        params = jax.jit(lambda: llama.init_params(cfg, jax.random.key(0)))()
        opt = jax.jit(optax.adam(1e-3).init, out_shardings=osh)(params)
        tokens = jax.random.randint(jax.random.key(1), (cfg.batch, cfg.seq), 0, cfg.vocab)
        batch = {"tokens": tokens, "targets": jnp.roll(tokens, -1, axis=1)}
    else:
        opt = jax.tree.map(
            lambda x, sh: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sh), opt, osh
        )
    return jitted, (params, opt, batch), placement


def _figures(compiled) -> dict:
    m = compiled.memory_analysis()
    return {
        "device_bytes": int(
            m.argument_size_in_bytes
            + m.output_size_in_bytes
            - m.alias_size_in_bytes
            + m.temp_size_in_bytes
        ),
        "host_argument_bytes": int(getattr(m, "host_argument_size_in_bytes", 0) or 0),
        "host_temp_bytes": int(getattr(m, "host_temp_size_in_bytes", 0) or 0),
    }


def job_compile(job: dict) -> dict:
    cfg = _cfg(job["batch"], _policy(job.get("policy")))
    jitted, args, _ = _build(cfg, job.get("mode", "hbm"), job.get("on_host", ()), concrete=False)
    t = time.perf_counter()
    compiled = jitted.lower(*args).compile()
    return {"compile_s": time.perf_counter() - t, **_figures(compiled)}


def job_measure(job: dict) -> dict:
    import jax
    import numpy as np

    cfg = _cfg(job["batch"], _policy(job.get("policy")))
    jitted, args, placement = _build(cfg, job["mode"], job.get("on_host", ()))
    compiled = jitted.lower(*args).compile()
    res = _figures(compiled)
    res["planned_host_bytes"] = placement.host_bytes()
    if job.get("usable_bytes") and res["device_bytes"] > job["usable_bytes"]:
        return {**res, "over": True}  # the device's own compile: over the usable bytes
    params, opt, batch = args
    times = []
    for i in range(1 + job.get("steps", 5)):
        t = time.perf_counter()
        params, opt, loss = compiled(params, opt, batch)
        loss.block_until_ready()
        if i:
            times.append(time.perf_counter() - t)
    stats = jax.devices()[0].memory_stats() or {}
    res.update(
        step_ms_median=1e3 * statistics.median(times),
        tokens_per_s=cfg.batch * cfg.seq / statistics.median(times),
        peak_bytes_in_use=stats.get("peak_bytes_in_use"),
        bytes_limit=stats.get("bytes_limit"),
        loss=float(np.asarray(loss)),
    )
    return res


def worker(path: str) -> None:
    job = json.loads(Path(path).read_text())
    fn = {"compile": job_compile, "measure": job_measure}[job["kind"]]
    print(json.dumps(fn(job)))


def spawn(job: dict, out: Path, deadline: float) -> dict:
    left = deadline - time.time()
    if left < 60:
        return {"job": job, "ok": False, "tail": "skipped: the run's time is up"}
    path = Path(tempfile.gettempdir()) / f"state21-{os.getpid()}-{job['id']}.json"
    path.write_text(json.dumps(job))
    env = dict(os.environ)
    env.setdefault("JAX_COMPILATION_CACHE_DIR", str(out / ".jax-cache"))
    env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    if job.get("budget_bytes") and job["kind"] == "measure":
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{job['budget_bytes'] / HBM_BYTES_H200:.4f}"
    t = time.perf_counter()
    try:
        p = subprocess.run(
            [sys.executable, __file__, "worker", str(path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=left - 30,
        )
        ok = p.returncode == 0
        result = json.loads(p.stdout.strip().splitlines()[-1]) if ok else None
        tail = None if ok else (p.stdout + p.stderr)[-1500:]
    except subprocess.TimeoutExpired:
        ok, result, tail = False, None, "timeout"
    rec = {"job": job, "ok": ok, "wall_s": time.perf_counter() - t, "result": result, "tail": tail}
    with open(out / "results.jsonl", "a") as f:
        f.write(json.dumps(rec) + "\n")
    print(f"{job['id']}: ok={ok} {rec['wall_s']:.0f}s", flush=True)
    return rec


def _gb(x: dict, k: str) -> str:
    return f"{x[k] / 1e9:.2f}" if x.get(k) is not None else "-"


def _load_plans() -> tuple[list[dict], dict]:
    """The mixed plans (in the order tried) and the predictions made on the CPU."""
    plans = [json.loads((PLANS / name).read_text()) for name in MIXED]
    pred = json.loads((PLANS / "predictions.json").read_text())
    return plans, pred


def run(out: Path, only: str = "") -> None:
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.time() + TOTAL_S
    plans, pred = _load_plans()
    b0 = CONFIG["batch"]
    budget = int(plans[0]["hbm_gb"] * 1e9)  # the cap of every run
    mixed = plans[0]["mixed"]
    usable = int(
        mixed.get("usable_bytes", mixed.get("budget_bytes"))
    )  # usable_bytes(budget), margin 0
    full = {"kind": "stock", "name": "nothing_saveable"}
    rows = []  # (name, record, predicted tokens/s)
    # 1. the mixed plans: the first that the device's compile puts within the usable bytes
    for p in plans if only in ("", "mixed") else []:
        m = p["mixed"]
        r = spawn(
            {
                "id": f"mixed-m{p['margin']}",
                "kind": "measure",
                "batch": b0,
                "mode": "mixed",
                "policy": {"kind": "plan", "decisions": m["decisions"], "names": m["names"]},
                "on_host": m["on_host"],
                "budget_bytes": budget,
                "usable_bytes": usable,
            },
            out,
            deadline,
        )
        over = r["ok"] and r["result"].get("over")
        name = f"mixed plan (margin {p['margin']}), batch {b0}" + (
            " - over the usable bytes on the device, not run" if over else ""
        )
        rows.append((name, r, m["predicted_tokens_per_s"]))
        if r["ok"] and not over:
            break
    # 2. (b): the largest batch whose device compile is within the usable bytes
    fit = None
    for b in range(1, b0 + 1) if only in ("", "remat") else []:
        c = spawn(
            {"id": f"compile-full-remat-b{b}", "kind": "compile", "batch": b, "policy": full},
            out,
            deadline,
        )
        if not c["ok"] or c["result"]["device_bytes"] > usable:
            break
        fit = b
    for b in ([fit] if fit else []) + [(fit or 0) + 1]:
        if b > b0 or only not in ("", "remat"):
            break
        r = spawn(
            {
                "id": f"full-remat-b{b}",
                "kind": "measure",
                "batch": b,
                "policy": full,
                "mode": "hbm",
                "budget_bytes": budget,
            },
            out,
            deadline,
        )
        why = "largest batch within the usable bytes" if b == fit else "one batch up, attempted"
        rows.append(
            (
                f"(b) full remat, state in HBM, batch {b} ({why})",
                r,
                pred["full_remat"].get(str(b), {}).get("tokens_per_s"),
            )
        )
    # 3. (a): MaxText's whole-state offload with the best activation plan for its room; if
    # it does not run at the batch (on 2026-12-04 it failed to allocate the 41.37 GiB of
    # state it brings back), full remat at half the batch, down to 1: the update needs the
    # whole state in HBM at once, whatever the batch.
    w = plans[0]["whole"]
    b = b0
    while only in ("", "whole") and b >= 1:
        policy = (
            {"kind": "plan", "decisions": w["decisions"], "names": w["names"]} if b == b0 else full
        )
        r = spawn(
            {
                "id": f"whole-offload-b{b}",
                "kind": "measure",
                "batch": b,
                "mode": "whole",
                "policy": policy,
                "budget_bytes": budget,
            },
            out,
            deadline,
        )
        what = "the plan for its room" if b == b0 else "full remat"
        rows.append(
            (
                f"(a) whole optimizer state on the host, batch {b}, {what}",
                r,
                w["predicted_tokens_per_s"] if b == b0 else None,
            )
        )
        if r["ok"]:
            break
        b //= 2
    lines = [
        f"# Issue 21 on the H200: batch {b0} x seq {CONFIG['seq']}, budget {budget / 1e9:.2f} GB "
        f"({usable / 1e9:.2f} GB usable), every run capped at it",
        "",
        "| configuration | ok | tokens/s | predicted | step ms | device GB | host GB | peak GB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r, want in rows:
        x = r.get("result") or {}
        lines.append(
            f"| {name} | {r['ok']} | {x.get('tokens_per_s', 0):.0f} | "
            f"{want or 0:.0f} | {x.get('step_ms_median', 0):.0f} | {_gb(x, 'device_bytes')} | "
            f"{_gb(x, 'host_argument_bytes')} | {_gb(x, 'peak_bytes_in_use')} |"
        )
    for p in plans:
        lines += [
            "",
            f"Mixed plan, margin {p['margin']} (planner, CPU):",
            "```",
            p["mixed"]["summary"],
            "```",
        ]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--only", choices=("", "mixed", "remat", "whole"), default="")
    w = sub.add_parser("worker")
    w.add_argument("job")
    a = ap.parse_args()
    if a.cmd == "run":
        run(a.out, a.only)
    else:
        worker(a.job)


if __name__ == "__main__":
    main()
