"""Whole steps of saved plans priced from their compiled HLO, kernel by kernel (issue 18).

Compiles each plan of a ``gpu_bench.py plan`` file (and full remat) deviceless for the H200
with Triton GEMMs on (the device's kernels: benchmarks/results/hlo-kernel-time-2026-12-05.md,
section 3), prices every kernel with ``planner._src.xla.kernels`` (kernels, and the loops'
device-to-device copies apart) and prints per step the estimate and what it saves over full
remat, next to the H200's measured steps where given (``hlo_recompute_prices.measured_steps``).
The absolute level of such an estimate is 5-9% short of the walls; the differences between
steps are what it is for.

    JAX_PLATFORMS=cpu /work/venvs/v0112/bin/python benchmarks/archive/hlo_plan_steps.py \\
        --plans benchmarks/results/offload-plans-2026-12-04-rates/moe.json --budgets 88.82,113.16 \\
        --measured benchmarks/results/h200-2026-12-04-offload-must-show
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plans", type=Path, required=True)
    ap.add_argument("--budgets", default="", help="keys of the file's plans (default: all)")
    ap.add_argument("--measured", type=Path, help="the H200 runs of these plans")
    ap.add_argument("--hardware", default="h200")
    args = ap.parse_args()

    import jax

    import cost_models as cm
    from benchmarks import gpu_bench as gb
    from benchmarks.archive.hlo_recompute_prices import measured_steps
    from planner._src.xla import compile as xla_compile
    from planner._src.xla import compile_options, deviceless
    from planner._src.xla import kernels as K
    from planner._src.xla import targets as T

    hw = cm.load_profile(args.hardware)
    tgt = T.resolve(args.hardware)
    saved = json.loads(args.plans.read_text())
    walls = measured_steps(args.measured, args.plans.stem) if args.measured else {}
    budgets = args.budgets.split(",") if args.budgets else list(saved["plans"])
    specs = [("stock:nothing_saveable", {"kind": "stock", "name": "nothing_saveable"})]
    specs += [(f"plan@{b}", saved["plans"][b]["policy"]) for b in budgets]
    rows = []
    for label, spec in specs:
        module, cfg = gb._model(
            {"model": saved["model"], "config": saved["config"]}, gb._policy_from_spec(spec)
        )
        step, step_args = module.make_train_step(cfg, concrete=False)
        t = time.perf_counter()
        program = xla_compile.compile_traced(
            tgt,
            jax.jit(step, donate_argnums=(0,)),
            deviceless.args_for(tgt, step_args),
            dict(compile_options.PRICING_COMPILE_OPTIONS),
        )
        ks = K.kernel_times(program.compiled.as_text(), hw)
        kern = 1e3 * K.step_seconds(ks, include_d2d=False)
        rows.append((label, kern, 1e3 * K.step_seconds(ks) - kern, walls.get(label)))
        print(f"{label}: compiled in {time.perf_counter() - t:.0f} s", file=sys.stderr)
        jax.clear_caches()
    base = rows[0][1] + rows[0][2]
    wall0 = rows[0][3]
    print(
        f"{args.plans} on {tgt.description}, Triton GEMMs on, JAX {jax.__version__}; "
        f"priced with the {hw.name} profile\n"
    )
    print(
        "| step | kernels ms | d2d ms | total | saved over full remat | measured | "
        "measured saving |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, kern, d2d, w in rows:
        tot = kern + d2d
        meas = "-" if w is None else f"{w:.1f}"
        msave = "-" if w is None or wall0 is None else f"{wall0 - w:+.1f}"
        print(
            f"| {label} | {kern:.1f} | {d2d:.1f} | {tot:.1f} | {base - tot:+.1f} | {meas} "
            f"| {msave} |"
        )


if __name__ == "__main__":
    main()
