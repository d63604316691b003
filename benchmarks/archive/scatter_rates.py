"""Scatter and gather rates on the device, against the cost library's byte count.

Issue 18 (h200-2026-12-04-moe-kernels.md, "next" 2): the MoE plans' scatters ran far below the
roofline the cost library prices them at (``cost_models/_rules_arrays.py``: a scatter moves
``3 x updates + indices`` bytes at the HBM rate; a gather ``2 x output + indices``). This
measures, per dtype, row width and row count, the device time of one ``x.at[idx].add(u)``
(scatter-add, combining), ``x.at[idx].set(u)`` (scatter) and ``x[idx]`` (gather) in its own
jitted program (the operand donated, so the scatter is in place), with unique row indices
(a capacity dispatch: each slot written once) and with duplicates (every row index drawn
with replacement: a gradient's scatter into shared rows). Timed as the median of ``--reps``
calls after two warm-ups, ``block_until_ready`` on each; the rate reported is the rule's
bytes over that time, so 1.0 x the profile's HBM rate is what the model assumes.

    python benchmarks/archive/scatter_rates.py --out OUT            # on the GPU; writes OUT/rates.json
    python benchmarks/archive/scatter_rates.py --summarize OUT      # the table (Markdown)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

# (rows updated, rows in the operand, row width): the MoE example's capacity dispatch
# (196,608 x 2,048 rows into 245,760) and smaller ones around it.
SHAPES = (
    (8192, 10240, 512),
    (8192, 10240, 2048),
    (32768, 40960, 2048),
    (196608, 245760, 2048),
    (32768, 32768, 64),
)
DTYPES = ("bfloat16", "float32")


def _median_ms(fn, make_args, reps: int) -> float:
    import jax

    times = []
    for i in range(reps + 2):
        args = make_args()
        jax.block_until_ready(args)
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        if i >= 2:
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


SMOKE_SHAPES = ((256, 320, 64),)  # --smoke: the script's own check, on any backend


def measure(reps: int, shapes=SHAPES) -> list[dict]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    out = []
    rng = np.random.default_rng(0)
    for n, m, d in shapes:
        for dtype in DTYPES:
            dt = jnp.dtype(dtype)
            for unique in (True, False):
                idx_np = (rng.permutation(m)[:n] if unique else rng.integers(0, m, n)).astype(
                    np.int32
                )
                idx = jnp.asarray(idx_np)
                upd = jnp.ones((n, d), dt)
                item = dt.itemsize
                upd_b, idx_b = n * d * item, n * 4
                ops = {
                    "scatter-add": (
                        jax.jit(lambda x, i, u: x.at[i].add(u), donate_argnums=0),
                        3 * upd_b + idx_b,
                    ),
                    "scatter": (
                        jax.jit(lambda x, i, u: x.at[i].set(u), donate_argnums=0),
                        3 * upd_b + idx_b,
                    ),
                    "gather": (jax.jit(lambda x, i, u: x[i]), 2 * upd_b + idx_b),
                }
                for op, (fn, nbytes) in ops.items():

                    def make(m=m, d=d, dt=dt, idx=idx, upd=upd):
                        return jnp.zeros((m, d), dt), idx, upd

                    ms = _median_ms(fn, make, reps)
                    row = {
                        "op": op,
                        "dtype": dtype,
                        "rows": n,
                        "operand_rows": m,
                        "width": d,
                        "unique_indices": unique,
                        "ms": ms,
                        "rule_bytes": nbytes,
                        "rule_bytes_per_s": nbytes / (ms / 1e3),
                    }
                    print(json.dumps(row), flush=True)
                    out.append(row)
    return out


def summarize(path: Path) -> str:
    rows = json.loads((path / "rates.json").read_text())
    meta = rows["meta"]
    lines = [
        f"device: {meta['device']}, JAX {meta['jax']}, {meta['date']}; rate = the cost rule's "
        "bytes / measured time (TB/s)",
        "",
        "| op | dtype | rows x width (operand rows) | indices | ms | rule GB | TB/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows["rows"]:
        lines.append(
            f"| {r['op']} | {r['dtype']} | {r['rows']:,} x {r['width']:,} ({r['operand_rows']:,}) "
            f"| {'unique' if r['unique_indices'] else 'repeated'} | {r['ms']:.3f} | "
            f"{r['rule_bytes'] / 1e9:.3f} | {r['rule_bytes_per_s'] / 1e12:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--summarize")
    ap.add_argument("--smoke", action="store_true", help="one small shape (a check of the script)")
    a = ap.parse_args()
    if a.summarize:
        print(summarize(Path(a.summarize)))
        return
    import datetime

    import jax

    rows = measure(a.reps, SMOKE_SHAPES if a.smoke else SHAPES)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "device": str(jax.devices()[0].device_kind),
        "jax": jax.__version__,
        "date": datetime.date.today().isoformat(),
        "reps": a.reps,
    }
    (out / "rates.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(summarize(out))


if __name__ == "__main__":
    main()
