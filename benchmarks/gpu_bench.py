"""GPU measurements for the planner, one command per device lease.

    python benchmarks/gpu_bench.py probe   --out DIR   # calibration, per-layer times, flag sweep
    python benchmarks/gpu_bench.py compare --out DIR   # planner vs stock policies across budgets
    python benchmarks/gpu_bench.py worker  JOB.json    # one measurement in a fresh process

Every measurement that needs a clean allocator (peak bytes, a memory cap) runs in a fresh
worker process: XLA_PYTHON_CLIENT_MEM_FRACTION caps the allocator at the budget so that
"fits" means the step really ran inside it, and memory_stats()["peak_bytes_in_use"] is the
peak of that one program. Results are JSON lines in DIR/results.jsonl; the driver stops
starting new jobs when its time is nearly up, so a partial run still reports.

Model: examples/llama.py H200_BENCH (d_model 4096, ffn 14336, 32 heads, 8 KV heads, 8 layers,
batch 8 x seq 4096 = 32k tokens, bf16), the configuration of benchmarks/results/h200-2026-11-30-shared-probe.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HBM_BYTES_H200 = 143771 * 2**20  # nvidia-smi on our H200 (KINDS.md): 143771 MiB


def _model(job: dict, policy=None):
    """(module, config) of a job: the Llama example by default, the MoE one for "moe"."""
    from examples import llama, moe

    module = moe if job.get("model") == "moe" else llama
    cls = moe.MoEConfig if module is moe else llama.LlamaConfig
    return module, cls(**job["config"], remat_policy=policy)


def bench_config(model: str, overrides: str = "", **fixed) -> dict:
    """The bench config of ``model`` ("llama" or "moe"): BENCH / MOE_BENCH, then ``fixed``,
    then ``overrides`` ("key=value,key=value", each value cast to the field's type)."""
    config = dict(MOE_BENCH if model == "moe" else BENCH)
    config.update(fixed)
    for kv in filter(None, overrides.split(",")):
        k, v = kv.split("=")
        config[k] = type(config[k])(v) if k in config else v
    return config


def _policy_from_spec(spec: dict):
    """A checkpoint policy from a job spec: a stock name, or a plan's decisions."""
    from planner._src.policies import STOCK
    from planner._src.types import Assignment

    if spec["kind"] == "stock":
        return STOCK[spec["name"]].policy()
    if spec["kind"] == "names":
        from jax.ad_checkpoint import checkpoint_policies as cp

        return cp.save_and_offload_only_these_names(
            names_which_can_be_saved=spec["save"],
            names_which_can_be_offloaded=spec["offload"],
            offload_src="device",
            offload_dst="pinned_host",
        )
    if spec["kind"] == "plan":
        from planner._src.emit.emit import policies_for

        policy, _, _, per_group, _ = policies_for(
            Assignment.of(dict(spec["decisions"])), dict(spec["names"])
        )
        # A per-layer-group plan whose groups differ: one policy per scan (layer_groups).
        return policy if policy is not None else per_group
    raise ValueError(spec)


def _hlo_counts(text: str) -> dict:
    lines = text.splitlines()
    s5 = [ln for ln in lines if "S(5)" in ln]
    return {
        "s5_lines": len(s5),
        "s5_async_starts": sum(1 for ln in s5 if "-start" in ln),
        "copy_start": sum(1 for ln in lines if "copy-start" in ln),
        "while_loops": sum(1 for ln in lines if " while(" in ln),
    }


def run_worker(job: dict) -> dict:
    """Compile and time one (config, policy, flags) in this process."""
    import jax
    import numpy as np

    module, cfg = _model(job, _policy_from_spec(job["policy"]))
    step, args = module.make_train_step(cfg, concrete=True)
    if job.get("forward_only"):  # the loss alone: per-layer forward time from two depths
        from examples.llama import lm_loss

        loss_of = lm_loss(lambda params, tokens: module.forward(cfg, params, tokens))

        def step(state, batch):
            return state, loss_of(state["params"], batch)

    from planner._src.emit.emit import flags_to_compiler_options

    opts = flags_to_compiler_options(job.get("flags", ""))
    t0 = time.perf_counter()
    lowered = jax.jit(step, donate_argnums=(0,)).lower(*args)
    compiled = lowered.compile(compiler_options=opts) if opts else lowered.compile()
    compile_s = time.perf_counter() - t0
    m = compiled.memory_analysis()
    res = {
        "compile_s": compile_s,
        "argument_bytes": m.argument_size_in_bytes,
        "output_bytes": m.output_size_in_bytes,
        "alias_bytes": m.alias_size_in_bytes,
        "temp_bytes": m.temp_size_in_bytes,
        "host_temp_bytes": getattr(m, "host_temp_size_in_bytes", 0),
        **_hlo_counts(compiled.as_text()),
    }
    state, batch = args
    times = []
    for i in range(job.get("warmup", 1) + job.get("steps", 10)):
        t = time.perf_counter()
        state, loss = compiled(state, batch)
        loss.block_until_ready()
        if i >= job.get("warmup", 1):
            times.append(time.perf_counter() - t)
    # Back to back, one wait at the end, as a training loop dispatches its steps: the GPU
    # does not idle while Python dispatches the next step (the loop above waits each step;
    # on the H200 on 2026-12-04 a 4-layer Llama step at batch 1 spent 11 ms of its 99 ms
    # wall so, and 0-12 ms at batch 4: throughput at small batches was understated).
    n = job.get("steps", 10)
    t = time.perf_counter()
    for _ in range(n):
        state, loss = compiled(state, batch)
    loss.block_until_ready()
    pipelined = (time.perf_counter() - t) / n
    stats = jax.devices()[0].memory_stats() or {}
    tokens = cfg.batch * cfg.seq
    res.update(
        {
            "step_ms_median": 1e3 * statistics.median(times),
            "step_ms_all": [1e3 * t for t in times],
            "step_ms_pipelined": 1e3 * pipelined,
            "tokens_per_s_pipelined": tokens / pipelined,
            "tokens_per_s": tokens / statistics.median(times),
            "peak_bytes_in_use": stats.get("peak_bytes_in_use"),
            "bytes_limit": stats.get("bytes_limit"),
            "loss": float(np.asarray(loss)),
        }
    )
    return res


def run_profile_worker(job: dict) -> dict:
    """One policy traced (planner.profile: per direction the host-copy time and the part no
    compute overlaps, per step), then timed untraced (run_worker), in this process."""
    from planner._src.profiling import profile

    module, cfg = _model(job, _policy_from_spec(job["policy"]))
    step, args = module.make_train_step(cfg, concrete=True)
    shim = type("FlagsOnly", (), {"xla_flags": job.get("flags", "")})()
    r = profile(shim, step, *args, steps=job.get("trace_steps", 2), warmup=1, donate_argnums=(0,))
    res: dict = {"profile_status": r.status, "measured": bool(r.measured)}
    if r.measured:
        steps = list(r.steps)

        def med(key):
            return 1e3 * statistics.median(getattr(s, key) for s in steps)

        # every per-step time figure the trace reader gives (StepOverlap), in its order
        from planner._src.profiling.overlap import STEP_FIELDS as keys

        res["trace"] = {k + "_ms": med(k) for k in keys}
        res["trace_steps"] = [
            {
                **{k + "_ms": 1e3 * getattr(s, k) for k in keys},
                "n_d2h": s.n_d2h,
                "n_h2d": s.n_h2d,
                "per_trip_ms": [
                    [
                        t.trip,
                        1e3 * t.d2h_s,
                        1e3 * t.d2h_exposed_s,
                        1e3 * t.h2d_s,
                        1e3 * t.h2d_exposed_s,
                    ]
                    for t in s.per_trip
                ],
                "per_trip_note": s.per_trip_note,
            }
            for s in steps
        ]
        res["trace_step_source"] = r.step_source
        res["trace_streams"] = {k: list(v) for k, v in r.streams().items()}
    if job.get("keep_trace_dir"):  # the .xplane.pb, for a second look (tens of MB)
        import shutil

        dst = Path(job["keep_trace_dir"])
        dst.mkdir(parents=True, exist_ok=True)
        if r.trace_path and os.path.exists(r.trace_path):
            name = f"{job.get('name', 'trace').replace(':', '_').replace('@', '_')}.xplane.pb"
            shutil.copy(r.trace_path, dst / name)
            res["trace_copy"] = str(dst / name)
    del step, args, r
    res.update(run_worker(job))  # untraced steps: the step time, the peak, the loss
    return res


def run_layer_worker(job: dict) -> dict:
    """One decoder layer: measured forward and forward+backward time beside the prediction."""
    import functools

    import jax
    import jax.numpy as jnp

    from examples import llama
    from planner._src.cost import build_cost_model, evaluate
    from planner._src.cost.baselines import policy_assignment
    from planner._src.graph import build_graph
    from planner._src.trace import trace_step

    cfg = llama.LlamaConfig(**job["config"])
    policy = _policy_from_spec(job["policy"])
    params = llama.init_params(dataclasses.replace(cfg, n_layers=1), jax.random.key(0))
    layer_w = jax.tree.map(lambda w: w[0], params["layers"])
    x = jax.random.normal(
        jax.random.key(1), (cfg.batch, cfg.seq, cfg.d_model), jnp.dtype(cfg.dtype)
    )
    pos = jnp.broadcast_to(jnp.arange(cfg.seq), (cfg.batch, cfg.seq))
    body = functools.partial(llama.decoder_layer, cfg)

    def loss(x, w, policy):
        y = jax.checkpoint(body, policy=policy)(x, w, pos)
        return jnp.sum(y.astype(jnp.float32))

    fwd = jax.jit(lambda x, w: body(x, w, pos))
    both = jax.jit(jax.grad(functools.partial(loss, policy=policy), argnums=(0, 1)))

    steps = job.get("steps", 10)

    def timeit(f, n=steps):
        jax.block_until_ready(f(x, layer_w))
        ts = []
        for _ in range(n):
            t = time.perf_counter()
            jax.block_until_ready(f(x, layer_w))
            ts.append(time.perf_counter() - t)
        return 1e3 * statistics.median(ts)

    res = {"fwd_ms": timeit(fwd), "fwd_bwd_ms": timeit(both)}
    # Prediction: the planner's trace of this one-layer step and the cost model.
    planned = lambda x, w: jax.grad(functools.partial(loss, policy=None), argnums=(0, 1))(x, w)
    tr = trace_step(planned, (x, layer_w))
    g = build_graph(tr)
    hw = job.get("hardware", "h200")
    cmod = build_cost_model(tr, g, hw, allow_offload=True)
    pred = evaluate(cmod, g, policy_assignment(g, planned, (x, layer_w), policy))
    rc = cmod.regions[0]
    res.update(
        {
            "pred_fwd_ms": 1e3 * rc.fwd_s,
            "pred_fwd_bwd_ms": 1e3
            * (rc.fwd_s + rc.bwd_s + pred.recompute_s + pred.exposed_transfer_s),
            "pred_recompute_ms": 1e3 * pred.recompute_s,
            "pred_exposed_ms": 1e3 * pred.exposed_transfer_s,
            "unknown_primitives": list(cmod.unknown_primitives),
        }
    )
    return res


def _offload_queue(p) -> list[dict]:
    """Per region, the offloaded tensors the backward pass needs, in production order: their
    bytes, per-direction copy time and the window the hiding models were given (docs/cost-model.md:
    stores hide behind the forward compute after the tensor, reloads behind the backward
    compute before its first use), one trip. What ``predicted_exposed_*`` was computed from."""
    from planner._src.cost import decisions_per_candidate

    out = []
    per_cand = decisions_per_candidate(p.graph, p.assignment)
    for rg, rc, rp, dec in zip(p.graph.regions, p.cost.regions, p.prediction.regions, per_cand):
        for c in rg.region.candidates:
            i = c.index
            if dec[i] != "offload" or not rp.needed[i]:
                continue
            out.append(
                {
                    "region": rc.region_id,
                    "tensor": c.name or f"{c.primitive}{list(c.shape)}",
                    "source": c.source,
                    "bytes": c.nbytes,
                    "loop_invariant": c.loop_invariant,
                    "d2h_ms": 1e3 * rc.d2h_s[i],
                    "fwd_after_ms": 1e3 * rc.fwd_after_s[i],
                    "h2d_ms": 1e3 * rc.h2d_s[i],
                    "bwd_before_ms": 1e3 * rc.bwd_before_s[i],
                    "trip_fwd_ms": 1e3 * rc.fwd_s,
                    "trip_bwd_ms": 1e3 * rc.bwd_s,
                }
            )
    return out


def run_plan_worker(job: dict) -> dict:
    """Plan the benchmark model for several budgets on this device; plans as job specs."""
    import jax

    import planner

    module, cfg = _model(job)
    step, ex = module.make_train_step(cfg)
    # Planned as it runs: the measurement workers donate the train state, and so does the
    # step the planner traces and compiles (its anchors then alias the new state onto the
    # old, as the measured program does).
    step = jax.jit(step, donate_argnums=(0,))
    t = time.perf_counter()
    auto = job["budgets"] == "auto"
    session = planner.Planner(
        step,
        *ex,
        hardware=job["hardware"],
        solver_time_limit_s=20,
        parallel_compiles=job.get("parallel_compiles"),
        autotune_cache_dir=job.get("autotune_cache_dir"),
    )
    trace_s = time.perf_counter() - t
    plans, plan_s = [], []
    if job["budgets"] == "anchors":  # 4 budgets from just above full remat's compiled size to
        # save-everything's (requested so that what a plan may use spans them)
        from planner._src.budget import io_bytes, requested_for

        lo = session.trace.anchor.device_bytes
        hi = session.trace.anchor_saved.device_bytes
        io = io_bytes(session.trace)
        # Requested budgets spanning [full remat, save-everything], but not past the device:
        # where save-everything needs more than the HBM (the MoE: 227 GB), the span ends at
        # 97% of the profile's HBM (so that a capped run's memory fraction stays below 1).
        first = requested_for(lo, session.hardware, io)
        last = min(
            requested_for(hi, session.hardware, io), 0.97 * float(session.hardware.hbm_bytes)
        )
        job = {
            **job,
            "budgets": [
                math.ceil((first + f * (last - first)) / 1e7) / 100 for f in (0.03, 0.35, 0.68, 1.0)
            ],
        }
        auto = False
    for b in session.span_budgets(job.get("points", 5)) if auto else job["budgets"]:
        t1 = time.perf_counter()
        try:  # compiled on this GPU; corrected if over; a stock policy where it is faster
            plans.append(session.plan(b))
        except planner.PlannerError as e:
            plans.append(e)
        plan_s.append(time.perf_counter() - t1)
    # Auto: budgets of 10 GB and more rounded up to a tenth of a GB for the table (the plans
    # were made for the exact ones, a little below).
    budgets = (
        [
            math.ceil(p.budget_bytes / 1e8) / 10
            if getattr(p, "budget_bytes", 0) >= 1e10
            else getattr(p, "budget_bytes", 0) / 1e9
            for p in plans
        ]
        if auto
        else job["budgets"]
    )
    out = {}
    for b, p in zip(budgets, plans):
        if isinstance(p, Exception):
            out[str(b)] = {"error": str(p)[:1500]}
            continue
        out[str(b)] = {
            "policy": (
                {
                    "kind": "plan",
                    "decisions": [list(x) for x in p.assignment.decisions],
                    "names": {c.key: c.name for c in p.graph.classes},
                }
                if p.choice == "planner"
                else {"kind": "stock", "name": p.choice}
            ),
            "choice": p.choice,
            "choice_why": p.choice_why,
            "timings": [list(t) for t in p.timings],
            "flags": p.xla_flags,
            "policy_source": p.emitted.policy_source,
            "decisions": p.decisions(),
            "predicted_peak": p.prediction.peak_bytes,
            "predicted_step_ms": p.prediction.step_s * 1e3,
            # Per direction, per step (every trip of every region): the copy time the model
            # says is exposed (docs/cost-model.md X^fwd, X^bwd), for the trace's figure (issue 18).
            "predicted_exposed_d2h_ms": 1e3
            * sum(
                rc.multiplicity * rp.exposed_fwd_s
                for rc, rp in zip(p.cost.regions, p.prediction.regions)
            ),
            "predicted_exposed_h2d_ms": 1e3
            * sum(
                rc.multiplicity * rp.exposed_bwd_s
                for rc, rp in zip(p.cost.regions, p.prediction.regions)
            ),
            "predicted_copy_ms": 1e3 * p.prediction.transfer_s,
            # Per direction, per step: the copy time the model expects (before hiding), the
            # bytes offloaded per trip, and each region's queue of copies with the windows
            # the hiding models were given (for checking the model against a trace).
            "predicted_d2h_copy_ms": 1e3
            * sum(
                rc.multiplicity * rp.d2h_s for rc, rp in zip(p.cost.regions, p.prediction.regions)
            ),
            "predicted_h2d_copy_ms": 1e3
            * sum(
                rc.multiplicity * rp.h2d_s for rc, rp in zip(p.cost.regions, p.prediction.regions)
            ),
            "offloaded_bytes_per_trip": [rp.host_residual_bytes for rp in p.prediction.regions],
            "trips": [rc.multiplicity for rc in p.cost.regions],
            "offload_queue": _offload_queue(p),
            "fixed_bytes": p.prediction.fixed_bytes,
            "anchor_device_bytes": p.trace.anchor.device_bytes,
            "baselines": {
                x.name: [x.prediction.peak_bytes, x.prediction.step_s * 1e3] for x in p.baselines
            },
            "plan_budget_bytes": p.budget_bytes,
            # The verify stage's compile (under the plan's flags; exact on GPU): the peak the
            # planner checked before the run, beside the model's predicted_peak.
            "verified_peak": p.verification.compiled_device_bytes,
        }
    first = next((p for p in plans if not isinstance(p, Exception)), None)
    per_layer = {}
    if first is not None:  # one layer trip inside the scan, per stock policy (issue 3)
        for x in first.baselines:
            rc, rp = first.cost.regions[0], x.prediction.regions[0]
            per_layer[x.name] = {
                "fwd_ms": 1e3 * rc.fwd_s,
                "bwd_ms": 1e3 * rc.bwd_s,
                "recompute_ms": 1e3 * rp.recompute_s,
                "exposed_ms": 1e3 * (rp.exposed_fwd_s + rp.exposed_bwd_s),
                "layer_ms": 1e3
                * (rc.fwd_s + rc.bwd_s + rp.recompute_s + rp.exposed_fwd_s + rp.exposed_bwd_s),
                "step_ms": 1e3 * x.prediction.step_s,
            }
    # Stock policies that make the same decision for every tensor class compile to the same
    # program (e.g. dots_saveable and dots_with_no_batch_dims_saveable when the only batched
    # dots are inside cuDNN attention): the driver measures each distinct one once.
    same = {x.name: json.dumps(x.assignment.decisions) for x in first.baselines} if first else {}
    return {
        "plans": out,
        "per_layer": per_layer,
        "stock_assignments": same,
        "wall_s": time.perf_counter() - t,
        "trace_s": trace_s,
        "trace_timings": list(session.trace.timings),
        # the compiler probes' answers (trace/probes.py): they shape the memory model outside scan
        "probes": {
            "holds_rereads_twice": session.trace.holds_rereads_twice,
            "hoists_recompute": session.trace.hoists_recompute,
        },
        "compile_workers": session.compile_workers(),
        "plan_s": plan_s,
        "stock_compiled": dict(session.stock.figures),
        "unknown_primitives": list(first.cost.unknown_primitives) if first else [],
    }


def spawn(job: dict, out_dir: Path, timeout: float) -> dict:
    import tempfile

    path = Path(tempfile.gettempdir()) / f"gpu-bench-job-{os.getpid()}-{job['id']}.json"
    path.write_text(json.dumps(job))
    env = dict(os.environ)
    env.pop("XLA_PYTHON_CLIENT_PREALLOCATE", None)  # the driver's setting, not the workers'
    # One persistent compilation cache for every worker: JAX also points XLA's per-fusion
    # autotune cache there (jax_persistent_cache_enable_xla_caches), so a worker reuses the
    # autotuning of the matmuls earlier workers tuned. Compile time only; the kernels chosen
    # are the same. It also lets a capped worker skip autotuning, whose scratch buffers
    # made capped compiles run out of memory on 2026-11-30.
    env.setdefault("JAX_COMPILATION_CACHE_DIR", str(out_dir / ".jax-cache"))
    env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    env.update(job.get("env", {}))
    if job.get("mem_fraction"):
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{job['mem_fraction']:.4f}"
    t = time.perf_counter()
    try:
        p = subprocess.run(
            [sys.executable, __file__, "worker", str(path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        ok = p.returncode == 0
        tail = (p.stdout + p.stderr)[-1500:]
        result = json.loads(p.stdout.strip().splitlines()[-1]) if ok else None
    except subprocess.TimeoutExpired:
        ok, tail, result = False, "timeout", None
    except (json.JSONDecodeError, IndexError):
        ok, result = False, None
    return {
        "job": job,
        "ok": ok,
        "wall_s": time.perf_counter() - t,
        "result": result,
        "tail": None if ok else tail,
    }


class Driver:
    def __init__(self, out: Path, budget_s: float):
        self.out = out
        self.out.mkdir(parents=True, exist_ok=True)
        self.deadline = time.perf_counter() + budget_s
        self.log = (out / "results.jsonl").open("a")
        self.n = 0

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def record(self, kind: str, payload: dict):
        self.log.write(json.dumps({"kind": kind, **payload}, default=str) + "\n")
        self.log.flush()
        print(kind, json.dumps(payload, default=str)[:600], flush=True)

    def job(self, job: dict, *, need_s: float = 60.0):
        if self.left() < need_s:
            self.record("skipped", {"job": job, "why": "out of time"})
            return None
        self.n += 1
        job = {"id": self.n, **job}
        r = spawn(job, self.out, timeout=max(30.0, self.left() - 5))
        self.record("job", r)
        return r


BENCH = dict(
    vocab=32000,
    d_model=4096,
    n_heads=32,
    n_kv_heads=8,
    d_ff=14336,
    n_layers=8,
    batch=8,
    seq=4096,
    dtype="bfloat16",
)
# examples/moe.py H200_BENCH: 64 routed experts top-6 + a shared expert, 32k tokens, 8 layers,
# capacity dispatch (the dropless ragged_dot form compiles to 233 GB on the GPU: moe.py).
MOE_BENCH = dict(
    vocab=32000,
    d_model=2048,
    n_heads=16,
    n_kv_heads=16,
    d_expert=1408,
    d_shared=2816,
    n_experts=64,
    top_k=6,
    n_layers=8,
    batch=8,
    seq=4096,
    dtype="bfloat16",
    dispatch="capacity",
)
if os.environ.get("GPU_BENCH_DRY_RUN"):  # a CPU dry run of the whole script, tiny model
    BENCH = dict(n_layers=2)
    MOE_BENCH = dict(n_layers=2, dispatch="capacity")
DOTS = ["query_proj", "key_proj", "value_proj", "out_proj", "mlpwi_0", "mlpwi_1", "mlpwo"]


def probe(args):
    d = Driver(Path(args.out), args.budget_s)
    import jax

    d.record(
        "env",
        {
            "jax": jax.__version__,
            "device": str(jax.devices()[0]),
            "kind": jax.devices()[0].device_kind,
            "date": time.strftime("%Y-%m-%d"),
        },
    )
    # 1. Calibration of the live device (matrix rate, HBM, link both ways, overlap).
    try:
        import cost_models as cm

        t = time.perf_counter()
        prof = cm.calibrate(out_path=str(Path(args.out) / "h200-calibrated.json"), base="h200")
        d.record("calibration", {"profile": prof.to_json(), "wall_s": time.perf_counter() - t})
    except Exception as e:  # keep going: the other measurements matter as much
        d.record("calibration_failed", {"error": repr(e)[:2000]})
    # 2. One layer: measured vs predicted forward and forward+backward, per policy.
    hw = str(Path(args.out) / "h200-calibrated.json")
    hw = hw if Path(hw).exists() else "h200"
    for pname, pol in (
        ("full_remat", {"kind": "stock", "name": "nothing_saveable"}),
        ("save_dots", {"kind": "names", "save": DOTS, "offload": []}),
        (
            "offload_wi0",
            {"kind": "names", "offload": ["mlpwi_0"], "save": [n for n in DOTS if n != "mlpwi_0"]},
        ),
    ):
        d.job(
            {
                "type": "layer",
                "name": f"layer:{pname}",
                "config": BENCH,
                "policy": pol,
                "hardware": hw,
                "steps": 10,
            }
        )
    # 3. Flag sweep on offload policies, and the save-dots reference.
    sets = json.loads((ROOT / "benchmarks" / "flag_sets.json").read_text())
    chosen = [s for s in sets if s["name"] in args.flag_sets.split(",")]
    save_dots = {"kind": "names", "save": DOTS, "offload": []}
    off_wi0 = {"kind": "names", "save": [n for n in DOTS if n != "mlpwi_0"], "offload": ["mlpwi_0"]}
    off_dots = {"kind": "names", "save": [], "offload": DOTS}
    full = {"kind": "stock", "name": "nothing_saveable"}
    d.job({"name": "full_remat", "config": BENCH, "policy": full, "steps": 5})
    d.job({"name": "save_dots", "config": BENCH, "policy": save_dots, "steps": 5})
    for fs in chosen:
        for pname, pol in (("offload_wi0", off_wi0), ("offload_dots", off_dots)):
            d.job(
                {
                    "name": f"{pname}@{fs['name']}",
                    "config": BENCH,
                    "policy": pol,
                    "flags": fs["xla_flags"],
                    "env": fs.get("env", {}),
                    "steps": 5,
                }
            )


def compare(args):
    """Planner vs stock at several budgets; plan on this device with the given flags."""
    d = Driver(Path(args.out), args.budget_s)  # no JAX in this process: workers get the GPU
    budgets = (
        args.budgets
        if args.budgets in ("auto", "anchors")
        else [float(b) for b in args.budgets.split(",")]
    )
    # Plan in a worker process: compiling on the GPU leaves the allocator holding memory
    # (autotuning buffers) that the measurement workers would then not get.
    bench = MOE_BENCH if args.model == "moe" else BENCH
    if args.attention:
        bench = {**bench, "attention_impl": args.attention}
    if args.layer_groups > 1:
        bench = {**bench, "layer_groups": args.layer_groups}
    if args.layers_per_iter > 1:
        bench = {**bench, "layers_per_iter": args.layers_per_iter}
    for kv in filter(None, args.config.split(",")):  # key=value overrides of the config
        k, _, v = kv.partition("=")
        try:  # numbers, true/false, lists; anything else is a string (float32, loop)
            val = json.loads(v)
        except json.JSONDecodeError:
            val = v
        bench = {**bench, k: val}
    r = d.job(
        {
            "type": "plan",
            "name": "plan",
            "config": bench,
            "model": args.model,
            "budgets": budgets,
            "hardware": args.hardware,
        },
        need_s=90,
    )
    specs = (r or {}).get("result") or {}
    if specs.get("per_layer"):
        d.record("per_layer_prediction", {"per_layer": specs["per_layer"]})
    for b, spec in specs.get("plans", {}).items():
        if "error" in spec:
            d.record("plan_failed", {"budget_gb": b, "error": spec["error"]})
            continue
        d.record("plan", {"budget_gb": b, **{k: v for k, v in spec.items() if k != "policy"}})
        job = {
            "name": f"plan@{b}",
            "config": bench,
            "model": args.model,
            "policy": spec["policy"],
            "flags": spec["flags"],
            "budget_gb": float(b),
            "steps": 10,
        }
        # The allocator capped at the budget, so "fits" means it ran inside it; if the
        # capped run fails, the same job uncapped says by how much it missed.
        r = d.job({**job, "mem_fraction": float(b) * 1e9 / HBM_BYTES_H200}, need_s=40)
        if r is not None and not r["ok"]:
            d.job({**job, "name": f"plan@{b}:uncapped"}, need_s=40)
    measured: dict[str, str] = {}  # assignment -> the stock policy measured for it
    for name in filter(None, args.stock.split(",")):
        key = specs.get("stock_assignments", {}).get(name)
        if key is not None and key in measured:
            d.record("same_program", {"stock": name, "as": measured[key]})
            continue
        d.job(
            {
                "name": f"stock:{name}",
                "config": bench,
                "model": args.model,
                "policy": {"kind": "stock", "name": name},
                "flags": args.stock_flags,
                "steps": 10,
            },
            need_s=35,
        )
        if key is not None:
            measured[key] = name
    # Per layer inside the scan (issue 3): the same step with half the layers; the
    # difference of the two step times over the layers removed is one layer's trip.
    half = {**bench, "n_layers": bench.get("n_layers", 8) // 2}
    for name in filter(None, args.per_layer.split(",")):
        d.job(
            {
                "name": f"half:{name}",
                "config": half,
                "model": args.model,
                "policy": {"kind": "stock", "name": name},
                "flags": args.stock_flags,
                "steps": 10,
            },
            need_s=30,
        )
    if args.per_layer or args.forward:  # the forward alone at both depths: fwd vs bwd per layer
        for depth, cfg in (("full", bench), ("half", half)):
            d.job(
                {
                    "name": f"forward:{depth}",
                    "config": cfg,
                    "model": args.model,
                    "policy": {"kind": "stock", "name": "nothing_saveable"},
                    "forward_only": True,
                    "steps": 10,
                },
                need_s=30,
            )


def _bench(args) -> dict:
    bench = MOE_BENCH if args.model == "moe" else BENCH
    for kv in filter(None, args.config.split(",")):  # key=value overrides of the config
        k, _, v = kv.partition("=")
        try:  # numbers, true/false, lists; anything else is a string (float32, loop)
            val = json.loads(v)
        except json.JSONDecodeError:
            val = v
        bench = {**bench, k: val}
    return bench


def plan_here(args):
    """Plan on this machine (deviceless XLA:GPU for the target where the CUDA plugin is
    installed) and save the plans as job specs for ``replay`` on the GPU."""
    bench = _bench(args)
    budgets = (
        args.budgets
        if args.budgets in ("auto", "anchors")
        else [float(b) for b in args.budgets.split(",")]
    )
    t = time.perf_counter()
    res = run_plan_worker(
        {
            "config": bench,
            "model": args.model,
            "budgets": budgets,
            "hardware": args.hardware,
            "parallel_compiles": args.parallel_compiles,
            "autotune_cache_dir": args.autotune_cache,
        }
    )
    res["config"], res["model"], res["planned_on"] = bench, args.model, _machine()
    res["plan_wall_s"] = time.perf_counter() - t
    Path(args.save).write_text(json.dumps(res, indent=1, default=str))
    for b, spec in res["plans"].items():
        print(b, spec.get("choice"), spec.get("verified_peak"), spec.get("error", "")[:200])


def _machine() -> str:
    import jax

    d = jax.devices()[0]
    return f"{d.platform} {getattr(d, 'device_kind', '')}, jax {jax.__version__}"


def replay(args):
    """Run saved plans (``plan``) on this GPU, each capped at its budget, and the stock
    policies uncapped (their peaks say which fit), in fresh processes; one planning of the
    first budget on this device, timed."""
    d = Driver(Path(args.out), args.budget_s)
    saved = json.loads(Path(args.plans).read_text())
    bench, model = saved["config"], saved.get("model", "llama")
    d.record(
        "planned",
        {
            k: saved[k]
            for k in ("planned_on", "plan_wall_s", "trace_s", "plan_s", "stock_compiled")
            if k in saved
        },
    )
    for b, spec in saved["plans"].items():
        if "error" in spec:
            d.record("plan_failed", {"budget_gb": b, "error": spec["error"]})
            continue
        d.record("plan", {"budget_gb": b, **{k: v for k, v in spec.items() if k != "policy"}})
        job = {
            "name": f"plan@{b}",
            "config": bench,
            "model": model,
            "policy": spec["policy"],
            "flags": spec["flags"],
            "budget_gb": float(b),
            "steps": args.steps,
        }
        r = d.job({**job, "mem_fraction": float(b) * 1e9 / HBM_BYTES_H200}, need_s=40)
        if r is not None and not r["ok"]:
            d.job({**job, "name": f"plan@{b}:uncapped"}, need_s=40)
    measured: dict[str, str] = {}
    for name in filter(None, args.stock.split(",")):
        key = saved.get("stock_assignments", {}).get(name)
        if key is not None and key in measured:
            d.record("same_program", {"stock": name, "as": measured[key]})
            continue
        d.job(
            {
                "name": f"stock:{name}",
                "config": bench,
                "model": model,
                "policy": {"kind": "stock", "name": name},
                "flags": args.stock_flags,
                "steps": args.steps,
            },
            need_s=35,
        )
        if key is not None:
            measured[key] = name
    if args.time_planning and saved["plans"]:
        first = float(next(iter(saved["plans"])))
        d.job(
            {
                "type": "plan",
                "name": "plan-on-device",
                "config": bench,
                "model": model,
                "budgets": [first],
                "hardware": args.hardware,
            },
            need_s=90,
        )


def alternate(args):
    """Run saved worker jobs in turn (A, B, A, B, ...), each in a fresh process, for
    ``--rounds`` rounds: two programs measured side by side, so drift hits both alike."""
    d = Driver(Path(args.out), args.budget_s)
    jobs = [json.loads(Path(p).read_text()) for p in args.jobs.split(",")]
    for spec in filter(None, args.stock.split(",")):  # a stock policy on the first job's model
        jobs.append(
            {
                **{k: v for k, v in jobs[0].items() if k not in ("mem_fraction", "budget_gb")},
                "name": f"stock:{spec}",
                "policy": {"kind": "stock", "name": spec},
                "flags": "",
            }
        )
    for r in range(args.rounds):
        for i, job in enumerate(jobs):
            d.job({**job, "id": f"{r}-{i}", "steps": args.steps, "round": r}, need_s=40)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("probe")
    p.add_argument("--out", required=True)
    p.add_argument("--budget-s", type=float, default=540)
    p.add_argument(
        "--flag-sets", default="baseline,pipelined_host_offload,pipelined_host_offload_lhs"
    )
    c = sub.add_parser("compare")
    c.add_argument("--out", required=True)
    c.add_argument("--budget-s", type=float, default=540)
    c.add_argument(
        "--budgets",
        default="auto",
        help="GB, comma-separated, or 'auto': five from just above full remat's "
        "predicted peak to saving everything's (planner.pareto(hbm_gb=None))",
    )
    c.add_argument(
        "--per-layer",
        default="",
        help="stock policies to also run with half the layers (per-layer time)",
    )
    c.add_argument(
        "--layer-groups",
        type=int,
        default=1,
        help="split the layer scan into this many scans (examples/llama.py "
        "layer_groups); the planner may then decide per group",
    )
    c.add_argument(
        "--layers-per-iter",
        type=int,
        default=1,
        help="layers per scan iteration, each its own checkpoint (examples/llama.py "
        "layers_per_iter): a copy window wider than one layer",
    )
    c.add_argument(
        "--forward",
        action="store_true",
        help="also time the forward pass alone at full and half depth",
    )
    c.add_argument("--hardware", default="h200")
    c.add_argument(
        "--config",
        default="",
        help="config overrides, key=value,...: layer_loop=loop, parallel_residual=true, "
        "batch=4 (JSON values)",
    )
    c.add_argument(
        "--stock-flags",
        default="",
        help="XLA_FLAGS for the stock and half-depth runs (default none, as users "
        "run them today); e.g. the planner's, to time a stock offload policy "
        "with copies that can overlap",
    )
    c.add_argument("--model", choices=("llama", "moe"), default="llama")
    c.add_argument(
        "--attention",
        choices=("xla", "cudnn"),
        default=None,
        help="jax.nn.dot_product_attention implementation (default: JAX picks)",
    )
    c.add_argument(
        "--stock",
        default=",".join(
            [
                "nothing_saveable",
                "dots_with_no_batch_dims_saveable",
                "dots_saveable",
                "offload_dot_with_no_batch_dims",
                "maxtext:minimal",
                "maxtext:save_qkv_proj",
                "maxtext:qkv_proj_offloaded",
                "maxtext:minimal_offloaded",
            ]
        ),
    )
    h = sub.add_parser("plan", help="plan here and save the plans for replay on the GPU")
    h.add_argument("--save", required=True)
    h.add_argument("--budgets", default="anchors")
    h.add_argument("--hardware", default="h200")
    h.add_argument("--model", choices=("llama", "moe"), default="llama")
    h.add_argument("--config", default="")
    h.add_argument(
        "--parallel-compiles",
        type=int,
        default=None,
        help="PlanOptions.parallel_compiles (default: the planner's, a quarter of the cores, "
        "at most 4; 0: one compile at a time)",
    )
    h.add_argument(
        "--autotune-cache",
        default=None,
        help="PlanOptions.autotune_cache_dir: XLA's autotune results kept in this directory "
        "for later processes",
    )
    r = sub.add_parser("replay", help="run saved plans capped and the stock policies")
    r.add_argument("--plans", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--budget-s", type=float, default=540)
    r.add_argument("--steps", type=int, default=10)
    r.add_argument("--hardware", default="h200")
    r.add_argument("--stock-flags", default="")
    r.add_argument("--time-planning", action="store_true")
    r.add_argument(
        "--stock",
        default=",".join(
            [
                "nothing_saveable",
                "dots_with_no_batch_dims_saveable",
                "dots_saveable",
                "everything_saveable",
                "maxtext:minimal",
                "maxtext:save_qkv_proj",
                "maxtext:qkv_proj_offloaded",
                "maxtext:minimal_offloaded",
            ]
        ),
    )
    a = sub.add_parser("alternate", help="saved worker jobs in turn, several rounds")
    a.add_argument("--jobs", required=True, help="comma-separated worker job files")
    a.add_argument("--stock", default="", help="stock policies run on the first job's model")
    a.add_argument("--out", required=True)
    a.add_argument("--rounds", type=int, default=3)
    a.add_argument("--steps", type=int, default=20)
    a.add_argument("--budget-s", type=float, default=300)
    w = sub.add_parser("worker")
    w.add_argument("job")
    a = ap.parse_args()
    if a.cmd not in ("worker", "plan"):
        # The driver calibrates and compiles; it must not take the GPU memory workers need.
        os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    if a.cmd == "worker":
        job = json.loads(Path(a.job).read_text())
        fn = {
            "layer": run_layer_worker,
            "plan": run_plan_worker,
            "profile": run_profile_worker,
        }.get(job.get("type"), run_worker)
        print(json.dumps(fn(job)))
    elif a.cmd == "probe":
        probe(a)
    elif a.cmd == "plan":
        plan_here(a)
    elif a.cmd == "replay":
        replay(a)
    elif a.cmd == "alternate":
        alternate(a)
    else:
        compare(a)


if __name__ == "__main__":
    main()
