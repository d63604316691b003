"""Parameters and optimizer state in pinned host memory, on the GPU: compiled bytes and step
time per placement, against the state model's terms (issue 21, requirement 1).

    python benchmarks/param_state_h200.py --out DIR            # on the GPU: every variant
    python benchmarks/param_state_h200.py --out DIR --one w1   # one variant in this process

The step: examples/llama.py's Adam step (bf16, layers under ``lax.scan``, each layer
checkpointed with nothing saved), ``cfg.layer_wrap = stream_layer_params`` for the host
parameters, ``state.streamed_apply`` around ``tx.update``, params and state donated, shardings
with memory kinds (as benchmarks/param_state_probe.py, which compiles deviceless). Each
variant runs in a fresh process: compile (``memory_analysis``: device bytes = arguments +
outputs - aliased + temporaries; host arguments / outputs / temporaries), 2 warm-up steps,
then 10 timed steps (median; each waited for). The model's figures for the same leaves:
``state.leaf_costs`` on the h200 profile (saved HBM bytes, copy seconds counted exposed).
One JSON line per variant in DIR/results.jsonl.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._param_state_setup import VARIANTS, build  # noqa: E402

CONFIG = dict(
    vocab=32000,
    d_model=2048,
    n_heads=16,
    n_kv_heads=8,
    d_ff=8192,
    n_layers=8,
    batch=4,
    seq=2048,
    dtype="bfloat16",
)


def one(name: str) -> dict:
    import jax

    import cost_models as cm
    from examples import llama
    from planner._src.cost import state as st

    cfg = llama.LlamaConfig(**CONFIG)
    s = build(cfg, name, jax.devices()[0])
    leaves, host, jitted = s.leaves, s.host, s.jitted
    p_, o_, b_ = s.placed_args()
    t0 = time.perf_counter()
    compiled = jitted.lower(p_, o_, b_).compile()
    compile_s = time.perf_counter() - t0
    m = compiled.memory_analysis()
    times = []
    for i in range(12):
        t = time.perf_counter()
        p_, o_, loss = compiled(p_, o_, b_)
        loss.block_until_ready()
        if i >= 2:
            times.append(time.perf_counter() - t)
    trace = _traced(compiled, p_, o_, b_) if TRACE else None
    hw = cm.load_profile("h200")
    costs = {lc.leaf.key: lc for lc in st.leaf_costs(leaves, hw)}
    on = [costs[k] for k in host if k in costs]
    stats = jax.devices()[0].memory_stats() or {}
    return {
        "variant": name,
        "jax": jax.__version__,
        "config": CONFIG,
        "compile_s": compile_s,
        "device_bytes": int(
            m.argument_size_in_bytes
            + m.output_size_in_bytes
            - m.alias_size_in_bytes
            + m.temp_size_in_bytes
        ),
        "temp_bytes": int(m.temp_size_in_bytes),
        "host_argument_bytes": int(getattr(m, "host_argument_size_in_bytes", 0)),
        "host_output_bytes": int(getattr(m, "host_output_size_in_bytes", 0)),
        "host_temp_bytes": int(getattr(m, "host_temp_size_in_bytes", 0)),
        "planned_host_bytes": int(sum(lc.host_bytes for lc in on)),
        "model_saved_bytes": int(sum(lc.saved_bytes for lc in on)),
        "model_inflight_bytes": int(sum(lc.inflight_bytes for lc in on)),
        "model_exposed_ms": 1e3 * sum(lc.exposed_s for lc in on),
        "model_moved_bytes": int(sum(lc.moved_bytes for lc in on)),
        "step_ms_median": 1e3 * statistics.median(times),
        "step_ms_all": [1e3 * t for t in times],
        "peak_bytes_in_use": stats.get("peak_bytes_in_use"),
        "loss": float(loss),
        "trace": trace,
    }


TRACE = False


def _union_ms(spans) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(spans):
        if e > end:
            total += e - max(s, end)
            end = e
    return total / 1e6


def _traced(compiled, p_, o_, b_, steps: int = 2) -> dict:
    """Device time of ``steps`` traced steps by kind (compute / d2h / h2d / copy_other,
    planner/_src/profiling/xplane.py), the union of all device work, and the longest
    events: where the step's time goes when state streams through the host."""
    import tempfile

    import jax

    from planner._src.profiling.xplane import read_trace

    logdir = tempfile.mkdtemp()
    t = time.perf_counter()
    with jax.profiler.trace(logdir):
        for _ in range(steps):
            p_, o_, loss = compiled(p_, o_, b_)
            loss.block_until_ready()
    wall = (time.perf_counter() - t) / steps
    r = read_trace(logdir)
    by: dict[str, list] = {}
    for e in r.events:
        by.setdefault(e.kind, []).append((e.start_ns, e.end_ns))
    top = sorted(r.events, key=lambda e: e.start_ns - e.end_ns)[:25]
    return {
        "wall_ms": 1e3 * wall,
        "union_ms_by_kind": {k: _union_ms(v) / steps for k, v in by.items()},
        "sum_ms_by_kind": {k: sum(b - a for a, b in v) / 1e6 / steps for k, v in by.items()},
        "count_by_kind": {k: len(v) / steps for k, v in by.items()},
        "device_busy_ms": _union_ms([x for v in by.values() for x in v]) / steps,
        "longest": [
            {
                "kind": e.kind,
                "name": e.name[:80],
                "hlo_op": e.hlo_op[:80],
                "ms": (e.end_ns - e.start_ns) / 1e6,
            }
            for e in top
        ],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--one", default="")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--trace", action="store_true", help="also trace 2 steps per variant")
    a = ap.parse_args()
    global TRACE
    TRACE = a.trace
    a.out.mkdir(parents=True, exist_ok=True)
    if a.one:
        print(json.dumps(one(a.one)), flush=True)
        return
    with open(a.out / "results.jsonl", "a") as f:
        for name in a.variants.split(","):
            p = subprocess.run(
                [sys.executable, __file__, "--out", str(a.out), "--one", name]
                + (["--trace"] if a.trace else []),
                capture_output=True,
                text=True,
                timeout=240,
            )
            line = p.stdout.strip().splitlines()[-1:] if p.returncode == 0 else []
            rec = json.loads(line[0]) if line else {"variant": name, "error": p.stderr[-2000:]}
            f.write(json.dumps(rec) + "\n")
            print(
                json.dumps({k: v for k, v in rec.items() if k not in ("step_ms_all", "config")}),
                flush=True,
            )


if __name__ == "__main__":
    main()
