"""Issue 21's must-show on one H200: the mixed plan (activations + part of Adam's state in
pinned host memory, one CP-SAT model) against (a) the whole optimizer state on the host,
brought back in one piece for the update (MaxText's optimizer_memory_host_offload) with the
best activation policy for the memory that frees, and (b) full remat with the whole state in
HBM at the largest batch that fits. Every run is capped at the same budget.

    python benchmarks/state_offload_h200.py run --out DIR     # all of it, one command, < 9 min
    python benchmarks/state_offload_h200.py worker JOB.json   # one job in a fresh process

Model: examples/llama.py's H200_BENCH shape (d_model 4096, ffn 14336, 32 heads, 8 KV heads,
batch 8 x seq 4096, bf16, cuDNN attention) with 32 layers under lax.scan (7.2 B parameters:
14.5 GB, their gradients 14.5 GB, Adam's two moments 29.0 GB), optax.adam. Not f32: cuDNN's
fused attention takes bf16 only, and XLA's f32 attention would materialize 17 GB of scores
per layer at this shape. How the budget is chosen, so that the claim is
measured, not assumed: the driver compiles full remat with the whole state in HBM at batch
8 (no cap) and sets the budget to 90% of its device bytes (``argument + output - alias +
temp``), so that configuration cannot fit; its capped run is attempted anyway and recorded.

Steps (each a fresh process; results as JSON lines in DIR/results.jsonl; the driver stops
starting jobs when fewer than 60 s of its 520 s are left):

1. ``compile`` full remat, state in HBM, batch 8: device bytes D; budget = 0.9 D.
2. ``plan``: planner.Planner on the step, plan_state(budget, build=...) (compiled on the H200
   and held to the budget), and for (a) the activation plan solved with the optimizer state's
   bytes out of the fixed bytes (all of it on the host during forward and backward).
3. ``measure`` capped (XLA_PYTHON_CLIENT_MEM_FRACTION = budget / HBM): full remat batch 8
   (expected to fail), the mixed plan, (a), and (b) at the largest batch whose compile fits
   (device bytes are affine in the batch: compiled at batch 4 too, the line gives the batch
   to try first, then smaller ones until one compiles within the budget).

On the device host (jax 0.11.2 installed; ortools from the repository's .whl/ folder):

    pip install --no-index --no-deps --target /tmp/site .whl/*.whl   # if ortools is missing
    PYTHONPATH=/tmp/site:. python benchmarks/state_offload_h200.py run --out /tmp/state21

Read DIR/summary.md: tokens/s per configuration, compiled device and host bytes, peak bytes in
use, the plan's budget split.
"""

from __future__ import annotations

import argparse
import dataclasses
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
    seq=4096,
    dtype="bfloat16",
    attention_impl="cudnn",
)
TOTAL_S = 520.0
# --smoke: a tiny model, to check the script's plumbing off the GPU (its figures mean nothing)
SMOKE = dict(
    CONFIG,
    vocab=256,
    d_model=64,
    n_heads=4,
    n_kv_heads=2,
    d_ff=128,
    n_layers=4,
    batch=4,
    seq=32,
    attention_impl=None,
)
if os.environ.get("STATE21_SMOKE"):
    CONFIG = SMOKE


def _cfg(batch: int, policy=None):
    from examples import llama

    return llama.LlamaConfig(**{**CONFIG, "batch": batch}, remat_policy=policy)


def _policy(spec: dict | None):
    if spec is None:
        return None
    if spec["kind"] == "stock":
        from planner._src.policies import STOCK

        return STOCK[spec["name"]].policy()
    from planner._src.emit import policies_for
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
    from planner._src import jax_adapter as adapter
    from planner._src import state as st

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


def job_plan(job: dict) -> dict:
    import planner
    from examples import llama
    from planner._src.cost import build_cost_model
    from planner._src.emit import emit
    from planner._src.session import io_bytes, usable_bytes
    from planner._src.solve import solve_assignment

    cfg = _cfg(job["batch"])
    step, args = llama.make_adam_step(cfg, concrete=False)  # compiles only: no arrays
    session = planner.Planner(step, *args, hardware="h200")
    hbm_gb = job["budget_bytes"] / 1e9

    def build(policy, placement):
        jitted, a, _ = _build(
            dataclasses.replace(cfg, remat_policy=policy),
            "mixed",
            placement.on_host,
            concrete=False,
        )
        return jitted, a

    sp = planner.plan_state(session, hbm_gb, opt_state_argnum=1, params_argnum=0, build=build)
    names = [(c.key, c.name) for c in session.graph.classes]
    mixed = {
        "decisions": [list(d) for d in sp.solution.assignment.decisions],
        "names": names,
        "on_host": sorted(sp.placement.on_host),
        "summary": sp.summary(),
        "predicted_step_s": sp.prediction.step_s,
    }
    # (a): the activations' best plan with every optimizer-state byte out of F (the whole
    # state on the host during forward and backward); the update's peak is the compiler's.
    tr, graph, hw = session.trace, session.graph, session.hardware
    budget = usable_bytes(int(hbm_gb * 1e9), hw, io_bytes(tr), session.compiler.margin)
    cost = build_cost_model(tr, graph, hw, allow_offload=session.offload)
    opt_bytes = sum(x.nbytes for x in sp.placement.leaves if x.movable)
    cost_a = dataclasses.replace(cost, fixed_bytes=cost.fixed_bytes - opt_bytes)
    sol_a = solve_assignment(graph, cost_a, budget, session.options.solver)
    emit(sol_a.assignment, dict(names), hw)  # the same emit path the plan takes
    whole = {"decisions": [list(d) for d in sol_a.assignment.decisions], "names": names}
    return {"mixed": mixed, "whole": whole}


def worker(path: str) -> None:
    job = json.loads(Path(path).read_text())
    fn = {"compile": job_compile, "measure": job_measure, "plan": job_plan}[job["kind"]]
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


def run(out: Path, fraction: float = 0.9) -> None:
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.time() + TOTAL_S
    full = {"kind": "stock", "name": "nothing_saveable"}
    b0 = CONFIG["batch"]
    ref = spawn(
        {"id": "compile-full-remat-hbm", "kind": "compile", "batch": b0, "policy": full},
        out,
        deadline,
    )
    if not ref["ok"]:
        raise SystemExit(f"the reference compile failed:\n{ref['tail']}")
    budget = int(fraction * ref["result"]["device_bytes"])
    plan = spawn({"id": "plan", "kind": "plan", "batch": b0, "budget_bytes": budget}, out, deadline)
    rows = [
        (
            f"full remat, state in HBM, batch {b0} (over the budget by construction)",
            spawn(
                {
                    "id": "full-remat-hbm",
                    "kind": "measure",
                    "batch": b0,
                    "policy": full,
                    "mode": "hbm",
                    "budget_bytes": budget,
                },
                out,
                deadline,
            ),
        )
    ]
    if plan["ok"]:
        m, w = plan["result"]["mixed"], plan["result"]["whole"]
        rows.append(
            (
                "mixed plan (this issue)",
                spawn(
                    {
                        "id": "mixed",
                        "kind": "measure",
                        "batch": b0,
                        "mode": "mixed",
                        "policy": {"kind": "plan", **{k: m[k] for k in ("decisions", "names")}},
                        "on_host": m["on_host"],
                        "budget_bytes": budget,
                    },
                    out,
                    deadline,
                ),
            )
        )
        rows.append(
            (
                "(a) whole optimizer state on the host, best activation plan",
                spawn(
                    {
                        "id": "whole-offload",
                        "kind": "measure",
                        "batch": b0,
                        "mode": "whole",
                        "policy": {"kind": "plan", **w},
                        "budget_bytes": budget,
                    },
                    out,
                    deadline,
                ),
            )
        )
    # (b): the largest batch whose compile fits. Device bytes are affine in the batch (the
    # state is fixed, activations scale), so a second compile at half the batch gives the
    # line; the first batch tried is the line's answer, then smaller ones until one fits.
    half = spawn(
        {
            "id": f"compile-full-remat-b{b0 // 2}",
            "kind": "compile",
            "batch": b0 // 2,
            "policy": full,
        },
        out,
        deadline,
    )
    start = b0 - 1
    if half["ok"]:
        d8, d4 = ref["result"]["device_bytes"], half["result"]["device_bytes"]
        slope = (d8 - d4) / (b0 - b0 // 2)
        if slope > 0:
            start = max(1, min(b0 - 1, int((budget - (d8 - slope * b0)) // slope)))
    for b in range(start, 0, -1):
        c = (
            half
            if b == b0 // 2 and half["ok"]
            else spawn(
                {"id": f"compile-full-remat-b{b}", "kind": "compile", "batch": b, "policy": full},
                out,
                deadline,
            )
        )
        if c["ok"] and c["result"]["device_bytes"] <= budget:
            rows.append(
                (
                    f"(b) full remat, state in HBM, batch {b}",
                    spawn(
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
                    ),
                )
            )
            break
    lines = [
        f"# Issue 21 on the H200: budget {budget / 1e9:.2f} GB "
        f"({fraction} x full remat's {ref['result']['device_bytes'] / 1e9:.2f} GB)",
        "",
        "| configuration | ok | tokens/s | step ms | device GB | host GB | peak in use GB |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in rows:
        x = r.get("result") or {}
        lines.append(
            f"| {name} | {r['ok']} | {x.get('tokens_per_s', 0):.0f} | "
            f"{x.get('step_ms_median', 0):.0f} | {_gb(x, 'device_bytes')} | "
            f"{_gb(x, 'host_argument_bytes')} | {_gb(x, 'peak_bytes_in_use')} |"
        )
    if plan["ok"]:
        lines += [
            "",
            "The mixed plan's budget split (planner):",
            "```",
            plan["result"]["mixed"]["summary"],
            "```",
        ]
    else:
        lines += ["", "plan failed:", "```", str(plan.get("tail")), "```"]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--smoke", action="store_true", help="tiny model: plumbing check only")
    r.add_argument(
        "--fraction",
        type=float,
        default=0.9,
        help="budget as a fraction of full remat's device bytes (default 0.9: it cannot fit)",
    )
    w = sub.add_parser("worker")
    w.add_argument("job")
    a = ap.parse_args()
    if a.cmd == "run":
        if a.smoke:
            os.environ["STATE21_SMOKE"] = "1"  # the workers read it
            globals()["CONFIG"] = SMOKE
        run(a.out, a.fraction)
    else:
        worker(a.job)


if __name__ == "__main__":
    main()
