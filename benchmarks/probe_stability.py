"""Are the compiler probes' answers stable on a live GPU? (trace.holds_rereads_twice,
trace.hoists_recompute; xla.compile_options.PROBE_COMPILE_OPTIONS says why this is asked.)

    python benchmarks/probe_stability.py --out DIR [--repeats 3]

Each repeat is a fresh process (XLA keeps autotune results per process) that compiles the
probes' five programs at once on the session's threads, as the trace stage does, beside a
load: a compile of a program of large bf16 matmuls that keeps the autotuner timing kernels
on the same GPU (the anchors' autotuning does so in the trace stage). Two modes per repeat:

- ``autotuned``: the probes compiled with XLA's defaults (before 2026-12-05: the autotuner
  picks each matmul's kernel by timing it, beside the load);
- ``probe``: with ``xla.compile_options.PROBE_COMPILE_OPTIONS`` (no autotuning, cuBLAS matmuls).

Results: DIR/probe-stability.jsonl (one record per process: each program's temporary bytes
and the two answers, computed with the probes' own rules) and DIR/summary.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def one(mode: str) -> dict:
    import jax
    import jax.numpy as jnp

    from planner._src.trace import probes as T
    from planner._src.xla import compile_options
    from planner._src.xla.jobs import at_once

    if mode == "autotuned":
        compile_options.probe_compile_options = lambda: {}

    def load():
        def f(a, b, c):
            x = a
            for _ in range(6):
                x = jnp.tanh(x @ b) @ c
            return x

        s = jax.ShapeDtypeStruct
        t0 = time.perf_counter()
        jax.jit(f).trace(
            s((8192, 8192), jnp.bfloat16),
            s((8192, 8192), jnp.bfloat16),
            s((8192, 8192), jnp.bfloat16),
        ).lower().compile()
        return time.perf_counter() - t0

    programs = {
        "A (tanh kept), 4 layers": lambda: T._probe_temp_bytes(T._probe_only_tanh, 4),
        "C (all but dots), 4 layers": lambda: T._probe_temp_bytes(T._probe_all_but_dots, 4),
        "N (nothing), 4 layers": lambda: T._probe_temp_bytes(T._nothing_saveable, 4),
        "N (nothing), 2 layers": lambda: T._probe_temp_bytes(T._nothing_saveable, 2),
    }
    jobs = [load, *programs.values()]
    done = at_once(jobs, 4)
    got = {name: r for name, (r, _) in zip(programs, done[1:])}
    secs = {name: s for name, (_, s) in zip(programs, done[1:])}
    a, c = got["A (tanh kept), 4 layers"], got["C (all but dots), 4 layers"]
    n4, n2 = got["N (nothing), 4 layers"], got["N (nothing), 2 layers"]
    try:
        twice = T.rereads_twice_rule(a, c, n4)
    except ValueError:  # no reading: the trace stage answers False with a PlanWarning
        twice = None
    return {
        "mode": mode,
        "jax": jax.__version__,
        "device": str(jax.devices()[0]),
        "temp_bytes": got,
        "compile_s": secs,
        "load_compile_s": done[0][0],
        "holds_rereads_twice": twice,
        "hoists_recompute": T.hoists_rule(n2, n4),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print("RESULT " + json.dumps(one(a.one)))
        return
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    recs = []
    for r in range(a.repeats):
        for mode in ("autotuned", "probe"):
            p = subprocess.run(
                [sys.executable, __file__, "--one", mode],
                capture_output=True,
                text=True,
                timeout=300,
            )
            line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
            rec = json.loads(line[0][7:]) if line else {"mode": mode, "error": p.stderr[-2000:]}
            rec["repeat"] = r
            recs.append(rec)
            print(json.dumps(rec), flush=True)
    (out / "probe-stability.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
    rows = [
        "| repeat | mode | A | C | N4 | N2 | twice | hoists |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for x in recs:
        if "error" in x:
            rows.append(f"| {x['repeat']} | {x['mode']} | error | | | | | |")
            continue
        t = x["temp_bytes"]
        vals = [t[k] / 1e6 for k in t]
        rows.append(
            f"| {x['repeat']} | {x['mode']} | "
            + " | ".join(f"{v:.1f}" for v in vals)
            + f" | {x['holds_rereads_twice']} | {x['hoists_recompute']} |"
        )
    (out / "summary.md").write_text("temporary bytes in MB\n\n" + "\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
