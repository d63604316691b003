"""Use the whole budget (issue 18, requirement 3): at a model's largest budget, the plan's
compiled figure against the usable budget without fill rounds and with them, and what the
rounds cost (benchmarks/results/use-whole-budget-2026-12-03.md).

    python benchmarks/archive/use_whole_budget.py ex:equinox_model ex:flax_nnx_model ex:llama --json OUT.json
    python benchmarks/archive/use_whole_budget.py ex:moe --every    # the zoo's three budgets
    python benchmarks/archive/use_whole_budget.py ex:llama --budget-mb 420
    python benchmarks/archive/use_whole_budget.py ex:llama4 --budget-mb 69.675

A name is a tests/zoo model, ``ex:<module>`` of examples/ with a ``make()``, or ``ex:llama``
(examples.llama:quickstart) or ``ex:llama4`` (``LlamaConfig(n_layers=4)``). Each is planned for ``hardware="cpu"`` at its largest budget:
the zoo's (tests/test_zoo.py's ``zoo_budgets``: usable = the save-everything anchor's
compiled bytes) unless ``--budget-mb`` gives one. One session per name traces once; the
same budget is planned with ``fill_rounds=0`` ("before") and the default ("after"), the
"after" plan timed by its own ``plan.timings`` (the fill rounds' solves and compiles).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402

jax.config.update("jax_platforms", "cpu")

MB = 1e6


def _make(name: str):
    if name == "ex:llama":
        from examples import llama

        return llama.quickstart()
    if name == "ex:llama4":  # the e2e tests' model (tests/test_planner_e2e.py, test_fill.py)
        from examples import llama

        return llama.make_train_step(llama.LlamaConfig(n_layers=4))
    if name.startswith("ex:"):
        return importlib.import_module("examples." + name[3:]).make()
    from tests.zoo import MODELS

    return MODELS[name].make()


def _figures(p) -> dict:
    usable = p.budget_bytes - p.headroom_bytes
    got = p.verification.compiled_device_bytes
    fill = [r for r in p.rounds if r.purpose == "fill"]
    return {
        "choice": p.choice,
        "status": p.verification.status,
        "usable_mb": usable / MB,
        "predicted_mb": p.prediction.peak_bytes / MB,
        "compiled_mb": None if got is None else got / MB,
        "left_pct": None if got is None else 100 * (usable - got) / usable,
        "step_ms": p.prediction.step_s * 1e3,
        "fill_why": p.fill_why,
        "fill_compiles": len(fill),
        "rounds": [
            {
                "purpose": r.purpose,
                "correction_mb": r.correction_bytes / MB,
                "predicted_mb": r.predicted_peak_bytes / MB,
                "compiled_mb": None
                if r.compiled_device_bytes is None
                else r.compiled_device_bytes / MB,
                "step_ms": None if r.predicted_step_s is None else r.predicted_step_s * 1e3,
                "outcome": r.outcome,
            }
            for r in p.rounds
        ],
        "fill_s": sum(t for label, t in p.timings if "fill" in label),
    }


def measure(name: str, budget_mb: float | None, every: bool = False) -> list[dict]:
    import planner
    from planner._src.results.report.build import budget_use
    from tests.test_zoo import zoo_budgets

    t = time.perf_counter()
    step, args = _make(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = planner.Planner(step, *args, hardware="cpu", fill_rounds=0)
        trace_s = time.perf_counter() - t
        if budget_mb:
            budgets = [budget_mb * MB]
        else:
            budgets = sorted(zoo_budgets(s)) if every else [max(zoo_budgets(s))]
        out = []
        for b in budgets:
            s.options = dataclasses.replace(s.options, fill_rounds=0)
            t = time.perf_counter()
            before = s.plan(b / 1e9)
            before_s = time.perf_counter() - t
            s.options = dataclasses.replace(
                s.options, fill_rounds=planner.PlanOptions().fill_rounds
            )
            t = time.perf_counter()
            after = s.plan(b / 1e9)
            after_s = time.perf_counter() - t
            out.append(
                {
                    "budget_mb": b / MB,
                    "trace_s": trace_s,
                    "before": {**_figures(before), "plan_s": before_s},
                    "after": {**_figures(after), "plan_s": after_s},
                    "status_line": budget_use(after),
                }
            )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="+")
    ap.add_argument("--budget-mb", type=float, default=None)
    ap.add_argument("--every", action="store_true", help="the zoo's three budgets")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    out = {}
    for name in a.names:
        out[name] = measure(name, a.budget_mb, a.every)
        print(name, json.dumps(out[name], indent=1), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
