"""Can a scanned model's stacked parameter live in pinned host memory and come to HBM one
layer slice at a time, forward and backward? (issue 21, requirement 1, the parameter half)

    JAX_PLATFORMS=cpu PYTHONPATH=. python benchmarks/param_offload_probe.py [--layers 8] \
        [--d 1024] [--variants a,b,c] [--hlo DIR]

Deviceless XLA:GPU for the H200 (planner/_src/xla/): each variant is one jitted step
``W, x -> (loss, new W)`` (SGD, W donated) over ``L`` layers ``x = tanh(x @ W[l])`` under
``lax.scan``; W is ``[L, d, d]`` f32. Printed per variant, from ``memory_analysis()``: device
arguments, host arguments, outputs, aliased, temporaries, device bytes (arguments + outputs -
aliased + temporaries), and from the HLO: instructions with an ``S(5)`` (host) shape, async
copies (copy-start / copy-done), dynamic-slices and dynamic-update-slices that read or write
host memory. One JSON line per variant.

Variants (``w_l`` the layer's slice, ``dev(.)`` = ``jax.device_put(., Space.Device)``); each
``hbm_*`` is the same program with W in HBM and no ``dev`` (its reference):

* ``host_xs``: W in pinned host memory, scanned as ``xs``, ``dev(w_l)`` in the body.
* ``host_xs_remat``: as ``host_xs``, the body under ``jax.checkpoint`` (nothing saved), the
  ``dev`` inside it: the backward brings the slice in again instead of keeping it.
* ``host_idx_remat``: W closed over (not ``xs``), ``dev(dynamic_index(W, l))`` inside the
  checkpointed body.
* ``host_whole``: ``dev(W)`` before the scan (MaxText's parameter offload: all or nothing).

Modes: ``grad`` (loss, gradient: the forward and backward alone) and ``step`` (loss, new W;
W donated; on the host the SGD update is streamed per slice: ``dev(w_l) - lr g_l`` put back
with ``Space.Host``, the scan's ys). Results: benchmarks/results/param-offload-probe-2026-12-04.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = (
    "hbm_xs",
    "hbm_xs_remat",
    "hbm_idx_remat",
    "host_xs",
    "host_xs_remat",
    "host_idx_remat",
    "host_whole",
)


def _step(variant: str, layers: int):
    import jax
    import jax.numpy as jnp

    dev = lambda v: jax.device_put(v, jax.memory.Space.Device)  # noqa: E731

    def layer(x, w):
        return jnp.tanh(x @ w)

    def loss(W, x):
        put = dev if variant.startswith("host") else (lambda v: v)
        if variant in ("hbm_xs", "host_whole"):
            w_all = dev(W) if variant == "host_whole" else W

            def body(h, w):
                return layer(h, w), None

            h, _ = jax.lax.scan(body, x, w_all)
        elif variant.endswith("_xs"):

            def body(h, w):
                return layer(h, put(w)), None

            h, _ = jax.lax.scan(body, x, W)
        elif variant.endswith("_xs_remat"):

            @jax.checkpoint
            def body(h, w):
                return layer(h, put(w)), None

            h, _ = jax.lax.scan(body, x, W)
        elif variant.endswith("_idx_remat"):

            @jax.checkpoint
            def body(h, i):
                w = put(jax.lax.dynamic_index_in_dim(W, i, 0, keepdims=False))
                return layer(h, w), None

            h, _ = jax.lax.scan(body, x, jnp.arange(layers))
        else:
            raise ValueError(variant)
        return jnp.sum(h * h)

    def step(W, x):  # (loss, new W): SGD, streamed per layer slice where W is on the host
        value, g = jax.value_and_grad(loss)(W, x)
        if not variant.startswith("host"):
            return value, W - 1e-3 * g

        def upd(_, wg):
            w, gl = wg
            return None, jax.device_put(dev(w) - 1e-3 * dev(gl), jax.memory.Space.Host)

        _, new = jax.lax.scan(upd, None, (W, g))
        return value, new

    step.loss = loss
    return step


def run(variant: str, layers: int, d: int, batch: int, hlo_dir: str | None, mode: str) -> dict:
    import jax
    import jax.numpy as jnp

    from planner._src.xla import compile as xla_compile
    from planner._src.xla import deviceless
    from planner._src.xla import targets as tg

    target = tg.resolve("h200", num_devices=1)
    if target.kind != "deviceless":
        return {"variant": variant, "skipped": target.description}
    # The shardings name this machine's (CPU) device, as a user's step does; compile_traced
    # moves them onto the target. A sharding built on the target's compile-only device loses
    # its memory kind (those devices list no memories: SingleDeviceSharding(d, memory_kind=
    # "pinned_host").memory_kind is None on JAX 0.11.2 and 0.12.0.1), which is why the first
    # probe of 2026-12-04 saw 0 host argument bytes. The jit's in_shardings carry the kind
    # into the trace (the argument's aval gets memory space Host), and the lowering keeps it.
    cpu = jax.devices()[0]
    host = variant.startswith("host")
    wsh = jax.sharding.SingleDeviceSharding(cpu, memory_kind="pinned_host" if host else "device")
    xsh = jax.sharding.SingleDeviceSharding(cpu, memory_kind="device")
    W = jax.ShapeDtypeStruct((layers, d, d), jnp.float32, sharding=wsh)
    x = jax.ShapeDtypeStruct((batch, d), jnp.float32, sharding=xsh)
    if mode == "grad":  # (loss, gradient): the forward and backward alone
        jitted = jax.jit(jax.value_and_grad(_step(variant, layers).loss), in_shardings=(wsh, xsh))
    else:  # (loss, new W), W donated; the new W's memory kind is its value's (module doc)
        jitted = jax.jit(_step(variant, layers), in_shardings=(wsh, xsh), donate_argnums=(0,))
    out = {"variant": variant, "mode": mode, "jax": jax.__version__, "layers": layers, "d": d}
    try:
        prog = xla_compile.compile_traced(target, jitted, deviceless.args_for(target, (W, x)))
    except Exception as e:  # noqa: BLE001  (a probe: record what the compiler says)
        out["error"] = f"{type(e).__name__}: {str(e)[:600]}"
        return out
    m = prog.compiled.memory_analysis()
    text = prog.compiled.as_text() or ""
    if hlo_dir:
        Path(hlo_dir).mkdir(parents=True, exist_ok=True)
        (Path(hlo_dir) / f"{mode}-{variant}-jax{jax.__version__}.hlo.txt").write_text(text)
    lines = text.splitlines()
    host_lines = [ln for ln in lines if "S(5)" in ln]
    w_bytes = layers * d * d * 4
    out.update(
        {
            "W_bytes": w_bytes,
            "slice_bytes": w_bytes // layers,
            "argument": int(m.argument_size_in_bytes),
            "host_argument": int(getattr(m, "host_argument_size_in_bytes", 0) or 0),
            "output": int(m.output_size_in_bytes),
            "host_output": int(getattr(m, "host_output_size_in_bytes", 0) or 0),
            "alias": int(m.alias_size_in_bytes),
            "temp": int(m.temp_size_in_bytes),
            "host_temp": int(getattr(m, "host_temp_size_in_bytes", 0) or 0),
            "device_bytes": int(
                m.argument_size_in_bytes
                + m.output_size_in_bytes
                - m.alias_size_in_bytes
                + m.temp_size_in_bytes
            ),
            "hlo_S5_lines": len(host_lines),
            "copy_start": sum(1 for ln in lines if re.search(r"= \S+ copy-start", ln)),
            "host_dynamic_slice": sum(1 for ln in host_lines if " dynamic-slice(" in ln),
            "host_dus": sum(1 for ln in host_lines if " dynamic-update-slice(" in ln),
        }
    )
    out["temp_in_slices"] = round(out["temp"] / out["slice_bytes"], 2)
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--d", type=int, default=1024)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--modes", default="grad,step")
    p.add_argument("--hlo", default=None, help="write each compile's HLO text here")
    a = p.parse_args(argv)
    for mode in a.modes.split(","):
        for v in a.variants.split(","):
            print(json.dumps(run(v, a.layers, a.d, a.batch, a.hlo, mode)), flush=True)


if __name__ == "__main__":
    main()
