"""Parameters and optimizer state in pinned host memory on the Adam Llama step: what the
compiled step holds (issue 21, requirement 1, the parameters' cost terms).

    JAX_PLATFORMS=cpu PYTHONPATH=. python benchmarks/param_state_probe.py [--d 256] [--ff 1024]

Deviceless XLA:GPU for the H200 (planner/_src/xla/; needs the CUDA plugin). The step:
examples/llama.py's Adam step (4 layers under ``lax.scan``, each layer checkpointed with
nothing saved), ``cfg.layer_wrap = stream_layer_params`` for the host parameters,
``state.streamed_apply`` around ``tx.update``, params and state donated, shardings with
memory kinds. Variants (the leaves on the host): ``none`` (the reference), ``w1``
(``['layers']['w1']``, its moments in HBM), ``w1+mom`` (w1 and both its moments), ``3p``
(w1, w2, w3), ``mom`` (w1's moments alone). Per variant, from ``memory_analysis()``: device
bytes (arguments + outputs - aliased + temporaries), temporaries, host arguments / outputs /
temporaries; and what that implies: ``(device(none) - device(v))`` against the bytes the
variant moves. One JSON line per variant.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._param_state_setup import VARIANTS, build  # noqa: E402


def main() -> None:
    import jax

    from examples import llama
    from planner._src.xla import compile as xla_compile
    from planner._src.xla import deviceless
    from planner._src.xla import targets as tg

    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--ff", type=int, default=1024)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    a = ap.parse_args()
    cfg = dataclasses.replace(llama.QUICKSTART, d_model=a.d, n_heads=4, d_ff=a.ff, seq=64, batch=2)
    target = tg.resolve("h200", num_devices=1)
    if target.kind != "deviceless":
        sys.exit(f"no deviceless XLA:GPU here: {target.description}")
    dev = jax.devices()[0]
    rows = {}
    for name in a.variants.split(","):
        ps, _ = VARIANTS[name]
        s = build(cfg, name, dev)
        leaves, host = s.leaves, s.host
        args = deviceless.args_for(
            target,
            (
                jax.device_put(s.params, s.param_shardings),
                jax.device_put(s.opt, s.opt_shardings),
                s.batch,
            ),
        )
        jitted = s.jitted
        m = xla_compile.compile_traced(target, jitted, args).compiled.memory_analysis()
        dev_b = (
            m.argument_size_in_bytes
            + m.output_size_in_bytes
            - m.alias_size_in_bytes
            + m.temp_size_in_bytes
        )
        pbytes = sum(x.nbytes for x in leaves if x.key in host and x.role == "param")
        obytes = sum(x.nbytes for x in leaves if x.key in host and x.role == "opt")
        rows[name] = row = {
            "variant": name,
            "jax": jax.__version__,
            "device_bytes": int(dev_b),
            "temp_bytes": int(m.temp_size_in_bytes),
            "argument_bytes": int(m.argument_size_in_bytes),
            "host_argument_bytes": int(getattr(m, "host_argument_size_in_bytes", 0)),
            "host_output_bytes": int(getattr(m, "host_output_size_in_bytes", 0)),
            "host_temp_bytes": int(getattr(m, "host_temp_size_in_bytes", 0)),
            "param_host_bytes": pbytes,
            "opt_host_bytes": obytes,
            "slice_bytes": pbytes // cfg.n_layers // max(1, len(ps)),
        }
        if "none" in rows:
            row["saved_bytes"] = rows["none"]["device_bytes"] - row["device_bytes"]
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
