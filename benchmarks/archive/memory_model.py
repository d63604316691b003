"""The memory model against the compiler: anchors, plans and stock policies, predicted vs
compiled (issue 14, requirement 3; benchmarks/results/memory-model-2026-12-03.md).

    python benchmarks/archive/memory_model.py long_context penzai_stack --json OUT.json
    python benchmarks/archive/memory_model.py ex:moe ex:equinox_model --json OUT.json
    python benchmarks/archive/memory_model.py --probe pv_smax     # long_context under a shape policy

A name is a tests/zoo model or ``ex:<module>`` of examples/ with a ``make()`` (``ex:<module>:<factory>``
for another factory, e.g. ``ex:llama:quickstart``); each is planned
for ``hardware="cpu"`` (``--hardware h200``: deviceless XLA:GPU) at the zoo's three budgets (tests/test_zoo.py's ``zoo_budgets``).
``--probe`` compiles tests/zoo/long_context.py saving the values of the named shapes only
(``PROBES``) and prints its ``memory_analysis()`` (with ``--xla_dump_to`` in XLA_FLAGS, XLA
writes its buffer report: ``*memory-usage-report.txt``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import warnings

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402

jax.config.update("jax_platforms", "cpu")

MB = 1e6
SCORES, STATS, PV = (1, 2, 2048, 2048), (1, 2, 2048, 1), (1, 2, 32, 2048)
PROBES = {
    "remat": (),
    "mask": ((2048, 2048),),
    "smax": (STATS,),
    "pv": (PV,),
    "pv_smax": (PV, STATS),
    "scores": (SCORES,),
}


def _by_shape(shapes):
    def policy(prim, *avals, **params):
        try:
            out = prim.abstract_eval(*avals, **params)[0]
        except Exception:  # noqa: BLE001  (a primitive without a plain abstract_eval: recompute)
            return False
        outs = out if isinstance(out, (list, tuple)) else [out]
        return any(tuple(getattr(o, "shape", ())) in shapes for o in outs)

    return policy


def probe(name: str) -> dict:
    from tests.zoo import long_context

    step, args = long_context.make_with_policy(_by_shape(PROBES[name]))
    m = jax.jit(step).lower(*args).compile().memory_analysis()
    device = (
        m.argument_size_in_bytes
        + m.output_size_in_bytes
        - m.alias_size_in_bytes
        + m.temp_size_in_bytes
    )
    return {"probe": name, "temp_mb": m.temp_size_in_bytes / MB, "device_mb": device / MB}


def _make(name: str):
    if name.startswith("ex:"):
        module, _, factory = name[3:].partition(":")
        mod = importlib.import_module("examples." + module)
        return getattr(mod, factory or "make")()
    from tests.zoo import MODELS

    return MODELS[name].make()


def _figures(p) -> dict:
    return {"pred": p.peak_bytes / MB, "res": p.residual_bytes / MB, "ws": p.working_set_bytes / MB}


def measure(name: str, hardware: str = "cpu") -> dict:
    import planner
    from planner._src import cost
    from planner._src.types import Assignment
    from tests.test_zoo import zoo_budgets

    t = time.perf_counter()
    step, args = _make(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = planner.Planner(step, *args, hardware=hardware)
        m = cost.build_cost_model(s.trace, s.graph, s.hardware, allow_offload=s.offload)
        every = Assignment.of({c.key: "save" for c in s.graph.classes})
        rec = {
            "scale": m.working_set_scale,
            "fixed": m.fixed_bytes / MB,
            "anchor_remat": {
                **_figures(cost.evaluate(m, s.graph, Assignment.of({}))),
                "compiled": s.trace.anchor.device_bytes / MB,
            },
            "anchor_saved": {
                **_figures(cost.evaluate(m, s.graph, every)),
                "compiled": s.trace.anchor_saved.device_bytes / MB,
            },
            "plans": [],
            "stock": {},
        }
        for b in zoo_budgets(s):
            p = s.plan(b / 1e9)
            compiled = p.verification.compiled_device_bytes
            rec["plans"].append(
                {
                    "budget": b / MB,
                    "choice": p.choice,
                    **_figures(p.prediction),
                    "fixed": p.prediction.fixed_bytes / MB,
                    "compiled": (compiled or 0) / MB,
                    "err": p.prediction.peak_bytes / compiled - 1 if compiled else None,
                }
            )
            for bl in p.baselines:
                if bl.compiled_device_bytes:
                    rec["stock"][bl.name] = {
                        "pred": bl.prediction.peak_bytes / MB,
                        "compiled": bl.compiled_device_bytes / MB,
                    }
    rec["wall_s"] = time.perf_counter() - t
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--json", default=None)
    # "h200": deviceless XLA:GPU compiles for that GPU (planner/_src/xla/; needs a jaxlib
    # with the CUDA plugin, /work/venvs/v0112), so the anchors and plans are its figures.
    ap.add_argument("--hardware", default="cpu")
    ap.add_argument("--probe", action="append", default=[], choices=sorted(PROBES))
    a = ap.parse_args(argv)
    out = {f"probe:{n}": probe(n) for n in a.probe}
    for name in a.names:
        out[name] = measure(name, a.hardware)
        print(name, json.dumps(out[name], indent=1), flush=True)
    for n in a.probe:
        print(json.dumps(out[f"probe:{n}"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
