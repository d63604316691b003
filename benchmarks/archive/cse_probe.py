"""Does prevent_cse=False let XLA merge the recompute of unrolled layers with the forward pass?
Compiles the Python-loop Llama (gpu_bench.py's BENCH, batch 4, cuDNN attention) under
nothing_saveable and everything_saveable with prevent_cse False and True, on this device, and
prints each program's memory_analysis() (argument + output - alias + temp, GB).

    python benchmarks/archive/cse_probe.py
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
from jax.ad_checkpoint import checkpoint_policies as cp  # noqa: E402

from benchmarks.gpu_bench import BENCH  # noqa: E402
from examples import llama  # noqa: E402

out = {"jax": jax.__version__, "device": str(jax.devices()[0].device_kind)}
for cse in (False, True):
    for name in ("nothing_saveable", "everything_saveable"):
        cfg = llama.LlamaConfig(
            **{**BENCH, "batch": 4},
            layer_loop="loop",
            attention_impl="cudnn",
            prevent_cse=cse,
            remat_policy=getattr(cp, name),
        )
        step, args = llama.make_train_step(cfg)
        m = jax.jit(step, donate_argnums=(0,)).lower(*args).compile().memory_analysis()
        gb = (
            m.argument_size_in_bytes
            + m.output_size_in_bytes
            - m.alias_size_in_bytes
            + m.temp_size_in_bytes
        ) / 1e9
        out[f"prevent_cse={cse} {name}"] = round(gb, 3)
        print(cse, name, round(gb, 3), flush=True)
print(json.dumps(out))
