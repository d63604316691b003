"""Command line: ``python -m planner solve MODULE:FACTORY --hbm-gb N [--hardware NAME]``.

The factory is a function of no arguments returning ``(step_fn, example_args)``, for
example ``examples.llama:quickstart``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path


def _load_factory(spec: str):
    from planner.errors import InvalidArgumentError

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidArgumentError(
            f"{spec!r} is not MODULE:FACTORY.\nFix: name a module and a function in it that "
            "returns (step_fn, example_args), e.g. examples.llama:quickstart.")
    sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise InvalidArgumentError(f"Cannot import {module_name!r}: {e}.\nFix: run from the "
                                   "directory that holds it, or install it.") from e
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise InvalidArgumentError(f"{module_name} has no function {attr!r}.")
    made = factory()
    if not (isinstance(made, tuple) and len(made) == 2 and callable(made[0])):
        raise InvalidArgumentError(
            f"{spec} returned {type(made).__name__}; it must return (step_fn, example_args) "
            "with example_args a tuple of the step's arguments.")
    step, args = made
    return step, tuple(args)


def main(argv=None) -> int:
    import planner

    ap = argparse.ArgumentParser(prog="python -m planner", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("solve", help="plan a train step under an HBM budget")
    s.add_argument("factory", help="MODULE:FACTORY returning (step_fn, example_args)")
    s.add_argument("--hbm-gb", type=float, required=True, help="budget per device, GB (1e9 bytes)")
    s.add_argument("--hardware", default="h200", help="profile name or JSON file")
    s.add_argument("--no-offload", action="store_true", help="never offload to host memory")
    s.add_argument("--time-limit", type=float, default=30.0, help="CP-SAT seconds per solve")
    s.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    s.add_argument("--out", help="also write the report to this file")
    a = ap.parse_args(argv)
    try:
        step, args = _load_factory(a.factory)
        print(f"planning {a.factory} for {a.hardware} under {a.hbm_gb} GB ...", file=sys.stderr)
        plan = planner.solve(step, *args, hbm_gb=a.hbm_gb, hardware=a.hardware,
                             allow_offload=False if a.no_offload else None,
                             solver_time_limit_s=a.time_limit)
    except planner.PlannerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = plan.report(a.format)
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    return 0 if plan.verification.ok else 1


if __name__ == "__main__":
    sys.exit(main())
