"""What the first compile of a step costs on the GPU, and what XLA's autotuner settings change
(issue 14, requirement 6: on the H200 the planner's first anchor compile of the 8-layer loop
Llama took 27-29 s, the second anchor 2.3-2.5 s: benchmarks/results/planning-time-2026-12-05.md).

One configuration per process (``--options`` as XLA debug options, name=value,...): the
full-remat and the save-everything program of the bench model compiled in turn, each compile's
wall seconds and its memory_analysis bytes (argument + output - alias + temp), as JSON.

    python benchmarks/archive/autotune_cost.py --out OUT/x.json --options xla_gpu_autotune_level=1
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--options", default="")
    ap.add_argument(
        "--config", default="layer_loop=loop,batch=4,attention_impl=cudnn,prevent_cse=true"
    )
    a = ap.parse_args()
    t0 = time.perf_counter()
    import jax
    from jax.ad_checkpoint import checkpoint_policies as cp

    from benchmarks.gpu_bench import _bench, _model
    from planner._src.xla import compile as xla_compile
    from planner._src.xla.compile import lower_with

    jax.devices()
    init_s = time.perf_counter() - t0
    options = {}
    for kv in filter(None, a.options.split(",")):
        k, _, v = kv.partition("=")
        try:  # numbers, true/false; anything else is a string (a path)
            options[k] = json.loads(v)
        except json.JSONDecodeError:
            options[k] = v
    cfg = _bench(
        argparse.Namespace(
            config=a.config, model="llama", attention="", layer_groups=1, layers_per_iter=1
        )
    )
    module, config = _model({"config": cfg, "model": "llama"})
    step, ex = module.make_train_step(config)
    step = jax.jit(step, donate_argnums=(0,))
    rows = []
    for name, pol in (
        ("nothing_saveable", cp.nothing_saveable),
        ("everything_saveable", cp.everything_saveable),
    ):
        t = time.perf_counter()
        _, low, _ = lower_with(step, ex, lambda rid, r, p=pol: p)
        lower_s = time.perf_counter() - t
        t = time.perf_counter()
        c = xla_compile.compile_lowered(low, options)
        s = time.perf_counter() - t
        m = c.memory_analysis()
        b = (
            m.argument_size_in_bytes
            + m.output_size_in_bytes
            - m.alias_size_in_bytes
            + m.temp_size_in_bytes
        )
        rows.append({"policy": name, "lower_s": lower_s, "compile_s": s, "device_bytes": int(b)})
        print(name, f"lower {lower_s:.2f} s compile {s:.2f} s bytes {b}", flush=True)
    Path(a.out).write_text(
        json.dumps(
            {
                "options": options,
                "init_s": init_s,
                "config": cfg,
                "rows": rows,
                "jax": jax.__version__,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
