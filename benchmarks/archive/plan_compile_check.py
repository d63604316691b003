"""Compile one saved plan on this GPU and print ``memory_analysis()``: is the device's program
the one the deviceless verify compile measured? (Issue 18, 2026-12-04: the MoE plan at 65.2 GB,
verified at 59.02 GB deviceless, failed on the H200 to allocate a 44.35 GiB temporary.)

    python benchmarks/archive/plan_compile_check.py PLANS.json BUDGET [--cap]   # on the GPU

``--cap``: with ``XLA_PYTHON_CLIENT_MEM_FRACTION`` = budget / HBM, as the capped run had (set
before JAX starts, so run each variant in its own process). Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    path, budget = sys.argv[1], sys.argv[2]
    from benchmarks import gpu_bench as gb

    if "--cap" in sys.argv:
        os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = (
            f"{float(budget) * 1e9 / gb.HBM_BYTES_H200:.4f}"
        )
    import jax

    saved = json.loads(Path(path).read_text())
    spec = saved["plans"][budget]
    job = {"model": saved.get("model", "llama"), "config": saved["config"]}
    module, cfg = gb._model(job, gb._policy_from_spec(spec["policy"]))
    step, args = module.make_train_step(cfg)
    from planner._src.emit.emit import flags_to_compiler_options

    opts = flags_to_compiler_options(spec.get("flags", ""))
    lowered = jax.jit(step, donate_argnums=(0,)).lower(*args)
    compiled = lowered.compile(compiler_options=opts) if opts else lowered.compile()
    m = compiled.memory_analysis()
    out = {
        "budget": budget,
        "cap": os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION"),
        "argument": m.argument_size_in_bytes,
        "output": m.output_size_in_bytes,
        "alias": m.alias_size_in_bytes,
        "temp": m.temp_size_in_bytes,
        "device_bytes": m.argument_size_in_bytes
        + m.output_size_in_bytes
        - m.alias_size_in_bytes
        + m.temp_size_in_bytes,
        "verified_peak (deviceless)": spec.get("verified_peak"),
        "predicted_peak": spec.get("predicted_peak"),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
