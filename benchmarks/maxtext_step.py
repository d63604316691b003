"""Run MaxText's own train step under several remat settings and time it (issue 22's H200 run).

    python benchmarks/maxtext_step.py --out OUT.json [--steps 10] \\
        --set plan="remat_policy=custom decoder_layer_input=offload ..." \\
        --set full="remat_policy=full" --set preset="remat_policy=qkv_proj_offloaded" \\
        -- key=value ...              # the MaxText config overrides (base.yml), as planned

For each ``--set NAME="key=value ..."`` the step is built from MaxText's config with those
overrides (``planner._src.planning.maxtext.step.build``: MaxText's pyconfig, its NNX model
and optimizer, its ``train_step`` jitted with its shardings and donation, as its
train_compile does), the state initialised as MaxText's ``setup_initial_state`` does it (no
checkpoint), and run on a synthetic batch (random tokens, positions 0..L-1, one segment):
compile time, ``memory_analysis()``, ``--steps`` timed steps after two warm-up steps (each ended by
``block_until_ready``), the loss, and the device's ``peak_bytes_in_use``, each set in a
process of its own (its allocator and peak are its own). A set that fails (compile, out of
memory) records its error and the next one runs.

Imports MaxText, Flax and JAX only (not the planner's solver: no OR-Tools), so that it runs
where the planner is not installed; the plan is made beforehand with ``python -m planner
maxtext``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_set(name: str, overrides: dict, steps: int, config_path: str | None) -> dict:
    import jax

    from planner._src.planning.maxtext.step import build, synthetic_batch

    got: dict = {"name": name, "overrides": overrides, "jax": jax.__version__}
    t0 = time.perf_counter()
    try:
        built = build(config_path, overrides)
        state_abs, batch_abs = built.args
        t1 = time.perf_counter()
        compiled = built.step.lower(state_abs, batch_abs).compile()
        got["compile_s"] = time.perf_counter() - t1
        m = compiled.memory_analysis()
        if m is not None:
            got["memory_analysis"] = {
                k: int(getattr(m, k))
                for k in (
                    "argument_size_in_bytes",
                    "output_size_in_bytes",
                    "alias_size_in_bytes",
                    "temp_size_in_bytes",
                    "host_temp_size_in_bytes",
                )
                if hasattr(m, k)
            }
        state = built.init()
        batch = synthetic_batch(batch_abs, int(built.config.vocab_size))
        times, losses = [], []
        for i in range(steps + 2):
            t = time.perf_counter()
            state, metrics = compiled(state, batch)
            jax.block_until_ready((state, metrics))
            if i >= 2:
                times.append(time.perf_counter() - t)
            loss = (
                metrics.get("scalar", {}).get("learning/loss")
                if isinstance(metrics, dict)
                else None
            )
            if loss is not None:
                losses.append(float(loss))
        times.sort()
        got.update(
            ok=True,
            step_s_median=times[len(times) // 2],
            step_s_min=times[0],
            step_s=times,
            losses=losses,
        )
        got["device"] = str(jax.devices()[0])
        stats = jax.devices()[0].memory_stats() or {}
        got["memory_stats"] = {
            k: stats[k] for k in ("peak_bytes_in_use", "bytes_limit", "bytes_in_use") if k in stats
        }
        del state, batch, compiled, built
    except Exception as e:  # noqa: BLE001  (recorded; the next set runs)
        got.update(
            ok=False, error=f"{type(e).__name__}: {e}"[:4000], tb=traceback.format_exc()[-4000:]
        )
    got["wall_s"] = time.perf_counter() - t0
    jax.clear_caches()
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--config", default=None, help="a MaxText YAML (default: its base.yml)")
    ap.add_argument(
        "--set",
        action="append",
        required=True,
        metavar='NAME="key=value ..."',
        help="one remat setting to run; repeat",
    )
    ap.add_argument(
        "--in-process",
        action="store_true",
        help="run every set in this process (default: one child process per set, so that "
        "each set's peak_bytes_in_use and allocator are its own)",
    )
    ap.add_argument("overrides", nargs="*", help="MaxText key=value overrides for every set")
    a = ap.parse_args()
    from planner._src.planning.maxtext.config import parse_overrides

    base = parse_overrides(a.overrides)
    rows = []
    for i, item in enumerate(a.set):
        name, _, spec = item.partition("=")
        print(f"[maxtext_step] {name}: {spec}", file=sys.stderr, flush=True)
        if a.in_process or len(a.set) == 1:
            rows.append(run_set(name, {**base, **parse_overrides(spec)}, a.steps, a.config))
        else:
            child_out = f"{a.out}.{i}.json"
            cmd = [sys.executable, os.path.abspath(__file__), "--out", child_out]
            cmd += ["--steps", str(a.steps), "--set", item]
            cmd += ["--config", a.config] if a.config else []
            rc = subprocess.call([*cmd, "--", *a.overrides])
            try:
                with open(child_out) as f:
                    rows.append(json.load(f)["sets"][0])
                os.remove(child_out)
            except (OSError, ValueError, KeyError, IndexError):
                rows.append({"name": name, "ok": False, "error": f"child exited {rc}"})
        r = rows[-1]
        print(
            f"[maxtext_step] {name}: "
            + (
                f"{r['step_s_median'] * 1e3:.1f} ms/step"
                if r.get("ok")
                else r.get("error", "")[:300]
            ),
            file=sys.stderr,
            flush=True,
        )
        # (this process starts no JAX backend when the sets run in children: on a GPU it
        # would take the memory they need)
        with open(a.out, "w") as f:  # after every set: a later failure keeps the earlier rows
            json.dump({"argv": sys.argv, "sets": rows}, f, indent=1)


if __name__ == "__main__":
    main()
