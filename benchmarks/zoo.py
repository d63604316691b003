"""Plan every runnable zoo model at three budgets and write the table.

    JAX_PLATFORMS=cpu python benchmarks/zoo.py [--hardware cpu] [--models a,b] [--out FILE]

Per model and budget (from just above the smaller compiled anchor to the larger, as
tests/test_zoo.py): what was returned (the planner's plan or a stock policy), its status,
the compiled bytes against the budget, its predicted step against the best stock policy
that compiles within the budget, the predicted peak against the compiled one, and the
planning time. Markdown on stdout (and in --out).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402

import planner  # noqa: E402
from planner._src.policies import STOCK  # noqa: E402
from tests.test_zoo import zoo_budgets  # noqa: E402
from tests.zoo import MODELS  # noqa: E402


def rows_for(name: str, hardware: str):
    entry = MODELS[name]
    reason = entry.skip_reason()
    if reason:
        return [f"| {name} | skipped: {reason} | | | | | | |"]
    t = time.perf_counter()
    step, args = entry.make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session = planner.Planner(step, *args, hardware=hardware)
    trace_s = time.perf_counter() - t
    out = []
    for requested in zoo_budgets(session):
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                plan = session.plan(requested / 1e9)
            except planner.PlannerError as e:
                out.append(f"| {name} | {requested / 1e6:.3f} | {type(e).__name__} | | | | | |")
                continue
        usable = plan.budget_bytes - plan.headroom_bytes
        fit = [
            b
            for b in plan.baselines
            if b.name in STOCK
            and b.applicable
            and b.compiled_device_bytes is not None
            and b.compiled_device_bytes <= usable
        ]
        best = min(fit, key=lambda b: b.prediction.step_s) if fit else None
        v = plan.verification
        ratio = plan.prediction.step_s / best.prediction.step_s if best else float("nan")
        err = (plan.prediction.peak_bytes - v.compiled_device_bytes) / v.compiled_device_bytes
        out.append(
            f"| {name} | {requested / 1e6:.3f} | {plan.choice} | {v.status} | "
            f"{v.compiled_device_bytes / 1e6:.3f} | {best.name if best else '-'} | "
            f"{ratio:.3f} | {err:+.1%} | {time.perf_counter() - t + (trace_s if not out else 0):.1f} |"
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hardware", default="cpu")
    ap.add_argument("--models", default="", help="comma-separated zoo names (default: all)")
    ap.add_argument("--out", help="also write the table here")
    a = ap.parse_args()
    names = [n for n in a.models.split(",") if n] or list(MODELS)
    lines = [
        f"JAX {jax.__version__}, Python {sys.version.split()[0]}, hardware {a.hardware}, "
        f"{jax.default_backend()} backend",
        "",
        "| model | budget MB | answer | status | compiled MB | best stock that fits | "
        "predicted step / best stock | predicted peak vs compiled | plan s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        for row in rows_for(name, a.hardware):
            print(row, flush=True)
            lines.append(row)
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "a") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
