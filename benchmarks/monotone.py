"""Answers against the budget: one Planner per run (the 2-layer Llama of examples/llama.py)
plans N budgets evenly spaced between the two compiled anchors (5%-95% of the way), ascending, and counts the budgets whose answer is
predicted slower than a smaller budget's (issue 45 requirement 2: there must be none).

    PLANNER_CPU_PROFILE=made-up JAX_PLATFORMS=cpu python benchmarks/monotone.py \
        [--budgets 20] [--distort step|crc|none] [--spread 0.15]

``--distort`` moves the verify compile's figure of each plan (the compile itself is real):
``step`` adds ``spread`` of it to every plan the model puts above the anchors' midpoint (a
compiler that breaks the model above a size); ``crc`` moves each plan by its own fixed
pseudo-random share up to ``spread`` either way. Prints one JSON line: the planner's path,
wall seconds, distinct answers, budgets out of order, and the predicted steps (us).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import warnings
import zlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budgets", type=int, default=20)
    ap.add_argument("--distort", default="none", choices=("none", "step", "crc"))
    ap.add_argument("--spread", type=float, default=0.15)
    a = ap.parse_args()
    t0 = time.perf_counter()
    import planner
    from planner._src.budget import io_bytes, requested_for
    from planner._src.planning import attempt as attempt_mod
    from planner._src.types import Status

    warnings.simplefilter("ignore")
    from examples import llama

    step, args = llama.make_train_step(llama.LlamaConfig(n_layers=2))
    s = planner.Planner(step, *args, hardware="cpu", check_numerics=False)
    lo, hi = s.trace.anchor.device_bytes, s.trace.anchor_saved.device_bytes
    mid = lo + 0.5 * (hi - lo)
    real = attempt_mod.verify

    def verify(request):
        res = real(request)
        ver = res.verification
        if ver.compiled_device_bytes is None:
            return res
        if a.distort == "step":
            extra = a.spread * ver.compiled_device_bytes if ver.predicted_peak_bytes > mid else 0
            got = int(ver.compiled_device_bytes + extra)
        else:
            key = repr(sorted(request.assignment.as_dict().items())).encode()
            got = int(ver.compiled_device_bytes * (1 + (zlib.crc32(key) / 2**31 - 1) * a.spread))
        status = Status.OK if got <= request.usable_bytes else Status.OVER
        ver = dataclasses.replace(ver, compiled_device_bytes=got, status=status)
        return dataclasses.replace(res, verification=ver)

    if a.distort != "none":
        attempt_mod.verify = verify
    fractions = [0.05 + 0.9 * i / max(1, a.budgets - 1) for i in range(a.budgets)]
    io = io_bytes(s.trace)
    steps = []
    for f in fractions:
        requested = requested_for(lo + f * (hi - lo), s.hardware, io, s.margin)
        try:
            steps.append(s.plan(requested / 1e9).prediction.step_s * 1e6)
        except planner.PlannerError:
            steps.append(None)
    got = [x for x in steps if x is not None]
    print(
        json.dumps(
            {
                "planner": os.path.dirname(os.path.dirname(planner.__file__)),
                "model": "llama2",
                "distort": a.distort,
                "spread": a.spread,
                "wall_s": round(time.perf_counter() - t0, 1),
                "distinct_answers": len(set(got)),
                "out_of_order": sum(1 for x, y in zip(got, got[1:]) if y > x),
                "steps_us": [None if x is None else round(x, 2) for x in steps],
            }
        )
    )


if __name__ == "__main__":
    main()
