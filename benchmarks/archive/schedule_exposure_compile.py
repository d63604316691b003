"""Compile the exposure plans deviceless for the H200 and keep their scheduled HLO text.

    JAX_PLATFORMS=cpu PYTHONPATH=. /work/venvs/v0112/bin/python benchmarks/archive/schedule_exposure_compile.py \
        --plans benchmarks/results/offload-exposure-plans-2026-12-04 \
        --out benchmarks/results/schedule-exposure-2026-12-05/hlo [--triton off|on|both]

    ... --sweep --out benchmarks/results/schedule-exposure-2026-12-05/hlo [--points 0-8]

One deviceless compile per plan and variant (30-60 s each on a 2-core CPU), the text written
gzipped so that the analysis (benchmarks/archive/schedule_exposure.py) never compiles again. A plan's
step is rebuilt from its plan file exactly as benchmarks/archive/schedule_windows.py does; a sweep
point's (``--sweep``) as benchmarks/overlap_sweep.py ran it on the H200 on 2026-12-03:
examples/llama.py H200_BENCH with cuDNN attention, full remat plus the point's named set
offloaded, the planner's XLA flags for the h200 profile with offloading.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.archive.schedule_windows import compile_plan  # noqa: E402

TRITON = {"off": {}, "on": {"xla_gpu_enable_triton_gemm": True}}


def compile_sweep_point(i: int, extra: dict) -> str:
    import jax

    from benchmarks import gpu_bench as gb
    from benchmarks.overlap_sweep import POINTS, _bench_config, _flags
    from planner._src.emit.emit import flags_to_compiler_options
    from planner._src.xla import compile as xla_compile
    from planner._src.xla import deviceless
    from planner._src.xla import targets as T

    spec = {"kind": "names", "save": [], "offload": list(POINTS[i])}
    job = {"config": _bench_config(), "model": "llama"}
    module, cfg = gb._model(job, gb._policy_from_spec(spec))
    step, args = module.make_train_step(cfg)
    tgt = T.resolve("h200", num_devices=1)
    if tgt.kind != "deviceless":
        raise SystemExit(f"needs the deviceless H200 target, got {tgt.description}")
    opts = {**flags_to_compiler_options(_flags()), **extra}
    prog = xla_compile.compile_traced(
        tgt, jax.jit(step, donate_argnums=(0,)), deviceless.args_for(tgt, args), opts
    )
    return prog.compiled.as_text()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--plans", default="benchmarks/results/offload-exposure-plans-2026-12-04")
    ap.add_argument("--names", default="lc16k_input,lc16k_attn,lc32k_attn,lc16k_dots")
    ap.add_argument("--triton", default="on", choices=("on", "off", "both"))
    ap.add_argument("--sweep", action="store_true", help="the 2026-12-03 sweep points instead")
    ap.add_argument("--points", default="0-8")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    variants = ("off", "on") if a.triton == "both" else (a.triton,)
    if a.sweep:
        lo, _, hi = a.points.partition("-")
        jobs = [(f"sweep{i}", i) for i in range(int(lo), int(hi or lo) + 1)]
    else:
        jobs = [(name, None) for name in a.names.split(",")]
    for name, point in jobs:
        for v in variants:
            dest = out / f"{name}-triton-{v}.txt.gz"
            if dest.exists():
                print("kept", dest, flush=True)
                continue
            t0 = time.perf_counter()
            if point is None:
                text = compile_plan(Path(a.plans) / f"{name}.json", TRITON[v])
            else:
                text = compile_sweep_point(point, TRITON[v])
            with gzip.open(dest, "wt") as f:
                f.write(text)
            print(f"{dest} {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
