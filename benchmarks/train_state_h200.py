"""A Llama-style Adam step kept in a Flax linen ``TrainState``, planned deviceless for the H200
at a budget its optimizer state does not fit in HBM (issue 42's must-show).

    JAX_PLATFORMS=cpu python benchmarks/train_state_h200.py [--seq 512] [--batch 1] \
        [--share 0.5] [--over '{"n_layers": 4}'] [--out benchmarks/results/train-state-h200-deviceless.json]

The step is ``examples/llama.py``'s model (``state_offload_h200.CONFIG``: d_model 4096, 32
layers under ``lax.scan``, bf16, 7.2 B parameters) written as a TrainState user writes it:
``train_step(state, batch) -> (state.apply_gradients(grads=grads), loss)``, optax Adam in
``state.tx``, jitted donated, its arguments abstract (``jax.eval_shape``: nothing is
allocated). The budget is the full-remat compile with the whole state in HBM less ``share`` of
the moments' bytes, so the activations alone cannot fit it: the planner is first asked without
``opt_state`` (the refusal must name the placement), then with ``opt_state="auto"``. Prints
and writes the figures (every byte figure the deviceless XLA:GPU compile's): the refusal's
last lines, the selection line, what moved, the plan's verified device bytes against the
budget, the stock comparison (MaxText's optimizer_memory_host_offload rows included), the
compile of the step ``plan.apply`` returns, and the wall time.

With ``--save-dir DIR`` it also writes the plan (``DIR/plan.json``, ``plan.save``) and what a
GPU run needs (``DIR/job.json``: the configuration, the budget, the usable bytes, the stock
policy of the best MaxText row). ``--skip-refusal`` leaves out the plan without
``opt_state`` (it compiles every stock policy: 465 s on this CPU).

On the H200 (issue 42's last must-show; ``gpu_suite.py`` runs it; no ortools needed):

    python benchmarks/train_state_h200.py run --plans DIR --out OUT

Each configuration runs in a fresh process capped at the budget
(``XLA_PYTHON_CLIENT_MEM_FRACTION``), with the plan's XLA flags, its state created where it
lives (a jit whose out-shardings are the placement), 1 warm-up step and 10 timed:

1. ``plan``: ``planner.load_plan(DIR/plan.json).apply(train_step)``, the plan made on the CPU;
2. ``maxtext``: MaxText's ``optimizer_memory_host_offload`` written into the same TrainState
   step as MaxText writes it: the whole ``opt_state`` in pinned host memory, put in HBM at the
   step's start, updated, put back (``jax.device_put`` in the step, host out-shardings), under
   the stock policy of the plan's best MaxText row; if its compile on the device is over the
   usable bytes, it is not run capped, and ``maxtext-uncapped`` times it without the cap;
3. ``hbm``: full remat with the whole state in HBM (expected over the budget: compiled only).

``OUT/results.jsonl`` has one record per process, ``OUT/summary.md`` the table: device bytes
by the device's own compile, tokens/s, median step, peak bytes in use, the first step's loss
(the same initial state and batch for every row, so the losses agree to rounding).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

# the H200's bytes and a compile's figures, as state_offload_h200.py (issue 21) counts them
from state_offload_h200 import HBM_BYTES_H200, _figures  # noqa: E402


def make_train_state_step(cfg, lr: float = 1e-3):
    """``(train_step, (state, batch), make_args)``: ``state`` a Flax ``TrainState`` of
    ``jax.ShapeDtypeStruct``s, ``make_args()`` the concrete arguments (jit it with
    out-shardings to create them where they live). One ``tx`` for both: a TrainState's
    ``tx`` is part of its tree structure."""
    import functools

    import jax
    import jax.numpy as jnp
    import optax
    from flax.training import train_state

    from examples import llama

    loss_of = llama.lm_loss(functools.partial(llama.forward, cfg))
    tx = optax.adam(lr)

    def train_step(state, batch):
        loss, grads = jax.value_and_grad(loss_of)(state.params, batch)
        return state.apply_gradients(grads=grads), loss

    def make_args():
        params = llama.init_params(cfg, jax.random.key(0))
        state = train_state.TrainState.create(apply_fn=None, params=params, tx=tx)
        tokens = jax.random.randint(jax.random.key(1), (cfg.batch, cfg.seq), 0, cfg.vocab)
        return state, {"tokens": tokens, "targets": jnp.roll(tokens, -1, axis=1)}

    return train_step, jax.eval_shape(make_args), make_args


def plan_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--share", type=float, default=0.5)
    ap.add_argument("--out", default="")
    ap.add_argument("--over", default="{}", help="JSON overrides of the model's config")
    ap.add_argument("--save-dir", default="", help="write plan.json and job.json here")
    ap.add_argument("--skip-refusal", action="store_true")
    a = ap.parse_args(argv)

    import jax
    import state_offload_h200 as h

    import planner
    from examples import llama
    from planner._src.budget import io_bytes, requested_for
    from planner._src.trainstate import check_compiled, detect
    from planner._src.units import GB
    from planner._src.xla import compile as xla_compile
    from planner._src.xla import deviceless, targets

    target = targets.resolve("h200", num_devices=1)
    if target.kind != "deviceless":
        sys.exit(f"no deviceless XLA:GPU here: {target.description}")
    config = {**h.CONFIG, "batch": a.batch, "seq": a.seq, **json.loads(a.over)}
    cfg = llama.LlamaConfig(**config)
    step, args, _ = make_train_state_step(cfg)
    out: dict = {"config": config, "jax": jax.__version__}
    t0 = time.perf_counter()
    session = planner.Planner(jax.jit(step, donate_argnums=(0,)), *args, hardware="h200")
    out["trace_s"] = round(time.perf_counter() - t0, 1)
    sel = detect(args)
    moments = sum(x.size * x.dtype.itemsize for _, x in sel.opt_leaves(args) if x.ndim)
    full = session.trace.anchor.device_bytes
    usable = full - a.share * moments
    hbm_gb = requested_for(usable, session.hardware, io_bytes(session.trace), session.margin)
    hbm_gb /= GB
    out.update(
        full_remat_device_bytes=full,
        moment_bytes=moments,
        hbm_gb=round(hbm_gb, 3),
        selection=sel.line(),
    )
    t0 = time.perf_counter()
    try:
        if not a.skip_refusal:
            session.plan(hbm_gb)
            out["without_opt_state"] = "planned (unexpected: the activations alone fit)"
    except planner.InfeasibleBudgetError as e:
        out["without_opt_state"] = str(e).splitlines()[-1]
    out["refusal_s"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    plan = session.plan(hbm_gb, opt_state="auto")
    out["plan_s"] = round(time.perf_counter() - t0, 1)
    st = plan.state
    out.update(
        status=str(plan.verification.status),
        usable_bytes=plan.budget.usable,
        compiled_device_bytes=plan.verification.compiled_device_bytes,
        host_bytes_planned=st.placement.host_bytes(),
        host_leaves=len(st.placement.on_host),
        mode=st.mode,
        state_lines=list(st.lines()),
        stock={
            b.name: {"device_bytes": b.compiled_device_bytes, "fits": b.fits}
            for b in plan.baselines
        },
    )
    applied = plan.apply(step)
    placed = applied.placed(deviceless.args_for(target, args))
    prog = xla_compile.compile_traced(target, applied.jitted(placed), placed)
    check = check_compiled(prog.compiled, st.placement)
    out["applied"] = {
        "device_bytes": check.device_bytes,
        "host_argument_bytes": check.host_argument_bytes,
        "host_matches": check.host_matches,
        "within_budget": check.device_bytes <= plan.budget.usable,
    }
    out["report"] = plan.report()
    print(json.dumps({k: v for k, v in out.items() if k != "report"}, indent=1))
    print(out["report"])
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    if a.save_dir:
        d = Path(a.save_dir)
        d.mkdir(parents=True, exist_ok=True)
        plan.save(d / "plan.json")
        job = {
            "config": config,
            "jax": jax.__version__,
            "hbm_gb": round(hbm_gb, 3),
            "usable_bytes": plan.budget.usable,
            "plan_device_bytes": plan.verification.compiled_device_bytes,
            "maxtext_policy": _maxtext_policy(plan),
            "xla_flags": plan.xla_flags,
        }
        (d / "job.json").write_text(json.dumps(job, indent=1) + "\n")
        print(f"wrote {d / 'plan.json'} and {d / 'job.json'}")


def _maxtext_policy(plan) -> str:
    """The stock policy of the plan's best MaxText row (``... + optimizer_memory_host_offload``
    predicted or compiled within the budget, fastest predicted), else full remat."""
    from planner._src.planning.train_state import is_state_baseline

    rows = [b for b in plan.baselines if is_state_baseline(b.name) and b.fits and b.applicable]
    if not rows:
        return "nothing_saveable"
    best = min(rows, key=lambda b: b.prediction.step_s)
    return best.name.split(" + ")[0]


# ------------------------------------------------------------------ on the H200: run mode

TOTAL_S = 500.0
STEPS = 10


def _on_host_sharding():
    import jax

    mesh = jax.sharding.Mesh(jax.devices()[:1], ("d",))
    spec = jax.sharding.PartitionSpec()
    return (
        jax.sharding.NamedSharding(mesh, spec),
        jax.sharding.NamedSharding(mesh, spec, memory_kind="pinned_host"),
    )


def _maxtext_step(step):
    """``step`` as MaxText's optimizer_memory_host_offload runs it: the whole optimizer state
    brought to HBM at the step's start, updated, and put back in pinned host memory."""
    import jax

    from planner._src.xla import adapter

    def moved(tree, kind):
        return jax.tree.map(lambda x: adapter.to_memory(x, kind) if x.ndim else x, tree)

    def maxtext_step(state, batch):
        new, loss = step(state.replace(opt_state=moved(state.opt_state, "device")), batch)
        return new.replace(opt_state=moved(new.opt_state, "pinned_host")), loss

    return maxtext_step


def _created_in_place(make_args, abstract, shard):
    """``make_args()`` created where each leaf lives: no state made whole in HBM and moved
    (state_offload_h200.py's note of 2026-12-04: the freed room fragments HBM). The device
    leaves come from one jit (the host leaves are not its outputs, so never in HBM); the
    host leaves, Adam's moments, are zeros at initialization (``optax.adam``'s ``init``),
    written from host memory straight to pinned host memory."""
    import jax
    import numpy as np

    flat_shard, tree = jax.tree.flatten(shard)
    flat_abs = tree.flatten_up_to(abstract)
    on_host = [getattr(s, "memory_kind", None) == "pinned_host" for s in flat_shard]

    def device_leaves():
        return [x for x, h in zip(jax.tree.leaves(make_args()), on_host) if not h]

    dev_shard = [s for s, h in zip(flat_shard, on_host) if not h]
    dev = iter(jax.jit(device_leaves, out_shardings=dev_shard)())
    vals = [
        jax.device_put(np.zeros(a.shape, a.dtype), s) if h else next(dev)
        for a, s, h in zip(flat_abs, flat_shard, on_host)
    ]
    return jax.tree.unflatten(tree, vals)


def job_measure(job: dict) -> dict:
    """One configuration in this process (run mode's docstring): compile, and where the
    device's compile is within the usable bytes (or the job is uncapped), time it."""
    import statistics

    import jax
    import numpy as np

    from examples import llama
    from planner._src.policies import STOCK

    plans = Path(job["plans"])
    spec = json.loads((plans / "job.json").read_text())
    kind = job["kind"]
    policy = None if kind == "plan" else STOCK[job["policy"]].policy()
    cfg = llama.LlamaConfig(**{**spec["config"], "remat_policy": policy})
    step, abstract, make_args = make_train_state_step(cfg)
    dev, host = _on_host_sharding()
    if kind == "plan":
        import planner

        applied = planner.load_plan(plans / "plan.json").apply(step)
        placed = applied.placed(abstract)
        shard = jax.tree.map(lambda x: x.sharding or dev, placed)
        run = None  # jitted below, from the concrete arguments' shardings
    else:
        state_sh = jax.tree.map(lambda _: dev, abstract[0])
        if kind.startswith("maxtext"):
            state_sh = state_sh.replace(
                opt_state=jax.tree.map(lambda x: host if x.ndim else dev, abstract[0].opt_state)
            )
            step = _maxtext_step(step)
        shard = (state_sh, jax.tree.map(lambda _: dev, abstract[1]))
        run = jax.jit(step, in_shardings=shard, out_shardings=(state_sh, dev), donate_argnums=(0,))

    args = _created_in_place(make_args, abstract, shard)
    res: dict = {}
    t = time.perf_counter()
    if run is None:
        # applied.lower runs the plan file's first-call check (the step against the plan's)
        try:
            lowered = applied.lower(*args)
        except planner.PlanFileError as e:
            res["check"] = str(e)[-600:]
            applied = planner.load_plan(plans / "plan.json").apply(step, check=False)
            lowered = applied.lower(*args)
        run = applied.jitted(applied.placed(args))
    else:
        lowered = run.lower(*args)
    compiled = lowered.compile()
    res.update(compile_s=round(time.perf_counter() - t, 1), **_figures(compiled))
    if job.get("capped") and res["device_bytes"] > spec["usable_bytes"]:
        return {**res, "over": True}
    state, batch = args
    times, losses = [], []
    for i in range(1 + STEPS):
        t = time.perf_counter()
        state, loss = compiled(state, batch)
        loss.block_until_ready()
        losses.append(float(np.asarray(loss)))
        if i:
            times.append(time.perf_counter() - t)
    stats = jax.devices()[0].memory_stats() or {}
    med = statistics.median(times)
    return {
        **res,
        "step_ms_median": 1e3 * med,
        "tokens_per_s": cfg.batch * cfg.seq / med,
        "peak_bytes_in_use": stats.get("peak_bytes_in_use"),
        "bytes_limit": stats.get("bytes_limit"),
        "losses": losses[:3],
    }


def spawn(job: dict, out: Path, deadline: float) -> dict:
    import os
    import subprocess
    import tempfile

    left = deadline - time.time()
    if left < 60:
        return {"job": job, "ok": False, "tail": "skipped: the run's time is up"}
    spec = json.loads((Path(job["plans"]) / "job.json").read_text())
    path = Path(tempfile.gettempdir()) / f"train-state-{os.getpid()}-{job['id']}.json"
    path.write_text(json.dumps(job))
    env = dict(os.environ)
    env.setdefault("JAX_COMPILATION_CACHE_DIR", str(out / ".jax-cache"))
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + spec.get("xla_flags", "")).strip()
    if job.get("capped"):
        frac = spec["hbm_gb"] * 1e9 / HBM_BYTES_H200
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{frac:.4f}"
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


def run_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plans", type=Path, required=True, help="plan mode's --save-dir")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=TOTAL_S, help="no job starts after it")
    ap.add_argument(
        "--dry", action="store_true", help="on a CPU: nothing capped, every row run (a check)"
    )
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    spec = json.loads((a.plans / "job.json").read_text())
    deadline = time.time() + a.budget_s
    plans = str(a.plans.resolve())
    mt = spec["maxtext_policy"]
    rows = []
    for name, job in [
        (
            "the plan (plan.apply of the CPU-made plan file)",
            {"id": "plan", "kind": "plan", "capped": True},
        ),
        (
            f"MaxText optimizer_memory_host_offload, {mt}",
            {"id": "maxtext", "kind": "maxtext", "policy": mt, "capped": True},
        ),
        (
            "full remat, whole state in HBM",
            {"id": "hbm", "kind": "hbm", "policy": "nothing_saveable", "capped": True},
        ),
    ]:
        r = spawn({**job, "plans": plans, "capped": job["capped"] and not a.dry}, a.out, deadline)
        over = r["ok"] and r["result"].get("over")
        rows.append((name + (": over the usable bytes on the device, not run" if over else ""), r))
        if job["id"] == "maxtext" and (over or not r["ok"]) and not a.dry:
            u = spawn(
                {
                    "id": "maxtext-uncapped",
                    "kind": "maxtext",
                    "policy": mt,
                    "capped": False,
                    "plans": plans,
                },
                a.out,
                deadline,
            )
            rows.append((f"MaxText optimizer_memory_host_offload, {mt}, uncapped (time only)", u))
    lines = [
        f"# A TrainState Adam step on the H200 (issue 42): budget {spec['hbm_gb']:.3f} GB "
        f"({spec['usable_bytes'] / 1e9:.2f} GB usable), planned on the CPU with JAX "
        f"{spec['jax']} (deviceless: {spec['plan_device_bytes'] / 1e9:.2f} GB)",
        "",
        "| configuration | ok | tokens/s | step ms | device GB | host args GB | peak GB | "
        "first losses |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows:
        x = r.get("result") or {}
        lines.append(
            f"| {name} | {r['ok']} | {x.get('tokens_per_s', 0):.0f} | "
            f"{x.get('step_ms_median', 0):.0f} | {_gb(x, 'device_bytes')} | "
            f"{_gb(x, 'host_argument_bytes')} | {_gb(x, 'peak_bytes_in_use')} | "
            f"{', '.join(f'{v:.4f}' for v in x.get('losses', []))} |"
        )
    (a.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["run"]:
        run_main(argv[1:])
    elif argv[:1] == ["worker"]:
        print(json.dumps(job_measure(json.loads(Path(argv[1]).read_text()))))
    else:
        plan_main(argv[1:] if argv[:1] == ["plan"] else argv)


if __name__ == "__main__":
    main()
