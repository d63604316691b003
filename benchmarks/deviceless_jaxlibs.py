"""Deviceless H200 plans of the Llama quickstart step on the installed jaxlib (issue 41):
which target config the installed parser read, the two anchors and a plan at three budgets,
every figure XLA:GPU's for the H200 without a device. One line of JSON per run; run it
under each jaxlib with its CUDA plugin (``JAX_PLATFORMS=cpu python
benchmarks/deviceless_jaxlibs.py``) and collect the lines in benchmarks/results/."""

from __future__ import annotations

import json
import sys
import time
import warnings

import jax
import jaxlib

import planner
from examples import llama
from planner._src.xla import targets


def main() -> int:
    t0 = time.perf_counter()
    target = targets.resolve("h200")
    out = {
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "compiler": target.description,
        "spec": target.spec_source.split(":")[0] if target.spec_source else None,
        "why_not_exact": target.how_to_get_exact or None,
    }
    step, args = llama.quickstart()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        session = planner.Planner(step, *args, hardware="h200")
        lo = session.trace.anchor.device_bytes
        hi = session.trace.anchor_saved.device_bytes
        out["full_remat_bytes"], out["save_everything_bytes"] = lo, hi
        plans = []
        for fraction in (0.25, 0.5, 0.75):
            gb = (lo + fraction * (hi - lo)) / 1e9 * 1.1
            p = session.plan(round(gb, 4))
            plans.append(
                {
                    "budget_gb": round(gb, 4),
                    "choice": str(p.choice),
                    "status": str(p.verification.status),
                    "compiled_bytes": p.verification.compiled_device_bytes,
                    "predicted_step_ms": round(p.prediction.step_s * 1e3, 4),
                }
            )
    out["plans"] = plans
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
