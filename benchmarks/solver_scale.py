"""CP-SAT solve time against candidate count, on synthetic region graphs (no JAX tracing).

    python benchmarks/solver_scale.py                          # 100, 1,000, 10,000 candidates
    python benchmarks/solver_scale.py --counts 100 --time-limit 5
    python benchmarks/solver_scale.py --examples --time-limit 10   # levels 1 vs 2, real traces

The graphs come from ``tests/synthetic.py``'s ``random_problem``: random DAGs of candidates
with hand-set costs. For ``n`` candidates: ``ceil(n / 1000)`` regions of ``n / regions``
candidates each, whose policy signatures are drawn from ``n / 5`` classes (a decision per
class, as for a real trace: the Llama 3.1 405B trace has 150 candidates in 102 classes).
The budget is halfway between the predicted peaks of full remat and of saving everything.

Per size: wall time of ``solve_assignment`` (all four phases: fastest step, then fewest host
bytes, then smallest peak, then fewest residual bytes; each with ``--time-limit``
deterministic seconds), the CP-SAT
status and gap of phase 1 (FEASIBLE = the time limit stopped it before proving optimality),
the number of CP-SAT variables, and the time to build the problem.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import math
import os
import platform
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]


def shape_for(n: int) -> tuple[int, int, int]:
    """(regions, candidates per region, classes) for about ``n`` candidates."""
    regions = max(1, math.ceil(n / 1000))
    return regions, max(1, n // regions), max(4, n // 5)


def run_one(n: int, time_limit: float, seed: int = 0, linearization: int | None = None) -> dict:
    from synthetic import random_problem

    from planner._src.cost import Assignment, evaluate
    from planner._src.errors import InfeasibleBudgetError
    from planner._src.solve import SolverOptions, solve_assignment

    regions, nodes, classes = shape_for(n)
    t0 = time.perf_counter()
    graph, cost = random_problem(seed, n_nodes=nodes, n_regions=regions, n_classes=classes)
    build_s = time.perf_counter() - t0
    keys = [c.key for c in graph.classes]
    lo = evaluate(cost, graph, Assignment.of({k: "remat" for k in keys})).peak_bytes
    hi = evaluate(cost, graph, Assignment.of({k: "save" for k in keys})).peak_bytes
    budget = (lo + hi) / 2
    row = {
        "candidates": regions * nodes,
        "regions": regions,
        "classes": len(keys),
        "build_s": build_s,
        "budget_mb": budget / 1e6,
        "time_limit_s": time_limit,
    }
    t0 = time.perf_counter()
    try:
        opts = SolverOptions(time_limit_s=time_limit)
        if linearization is not None:
            opts = dataclasses.replace(opts, linearization_level=linearization)
        sol = solve_assignment(graph, cost, budget, opts)
        row.update(
            status=sol.status,
            gap=sol.gap,
            variables=sol.num_variables,
            solve_s=sol.wall_s,
            step_ms=sol.objective_s * 1e3,
        )
    except InfeasibleBudgetError:
        row.update(
            status="INFEASIBLE",
            gap=float("nan"),
            variables=0,
            solve_s=time.perf_counter() - t0,
            step_ms=float("nan"),
        )
    row["wall_s"] = time.perf_counter() - t0
    return row


def example_problems():
    """(name, graph, cost, budget) of the bundled examples' real traces at two budgets each,
    20% and 50% of the way from full remat's predicted peak to saving everything's."""
    import warnings

    import planner
    from examples import llama, moe
    from planner._src.cost import Assignment, evaluate

    steps = (
        ("llama quickstart", llama.quickstart()),
        (
            "llama, 2 layers per scan iteration",
            llama.make_train_step(llama.LlamaConfig(layers_per_iter=2)),
        ),
        (
            "llama quickstart, 2 layer groups",
            llama.make_train_step(dataclasses.replace(llama.QUICKSTART, layer_groups=2)),
        ),
        ("MoE example", moe.make()),
    )
    for name, (step, args) in steps:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            plan = planner.solve(
                step,
                *args,
                hbm_gb=100,
                hardware="h200",
                verify_compile=False,
                solver_time_limit_s=1,
                layer_groups=None,
            )
        g, c = plan.graph, plan.cost
        keys = [k.key for k in g.classes]
        lo = evaluate(c, g, Assignment.of({k: "remat" for k in keys})).peak_bytes
        hi = evaluate(c, g, Assignment.of({k: "save" for k in keys})).peak_bytes
        for f in (0.2, 0.5):
            yield f"{name} @ {f:.0%}", g, c, lo + f * (hi - lo)


def compare_levels(time_limit: float) -> str:
    """Markdown: linearization levels 1 and 2 on the example traces."""
    from planner._src.errors import PlannerError
    from planner._src.solve import SolverOptions, solve_assignment

    out = [
        "| trace @ budget | candidates | level 1: status, gap, step ms, wall s | "
        "level 2: status, gap, step ms, wall s |",
        "|---|---|---|---|",
    ]
    for name, g, c, b in example_problems():
        cells = []
        for level in (1, 2):
            t0 = time.perf_counter()
            try:
                sol = solve_assignment(
                    g, c, b, SolverOptions(time_limit_s=time_limit, linearization_level=level)
                )
                cells.append(
                    f"{sol.status}, {sol.gap:.1%}, {sol.objective_s * 1e3:.4f}, "
                    f"{time.perf_counter() - t0:.1f}"
                )
            except PlannerError as e:
                cells.append(type(e).__name__)
        n = sum(len(rg.region.candidates) for rg in g.regions)
        out.append(f"| {name} | {n} | {cells[0]} | {cells[1]} |")
        print(out[-1], file=sys.stderr, flush=True)
    return "\n".join(out)


def table(rows: list[dict]) -> str:
    out = [
        "| candidates | regions | classes | CP-SAT variables | status (phase 1) | gap | "
        "plan's step ms | solve wall s | time limit / phase s | problem build s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['candidates']:,} | {r['regions']} | {r['classes']:,} | "
            f"{r['variables']:,} | {r['status']} | {r['gap']:.2%} | {r['step_ms']:,.1f} | "
            f"{r['wall_s']:.2f} | "
            f"{r['time_limit_s']:g} | {r['build_s']:.2f} |"
        )
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--counts", type=int, nargs="+", default=[100, 1000, 10000])
    ap.add_argument(
        "--time-limit",
        type=float,
        default=30.0,
        help="CP-SAT deterministic seconds per phase (the planner's default: 30)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--linearization",
        type=int,
        default=None,
        help="CP-SAT linearization_level (default: the planner's SolverOptions)",
    )
    ap.add_argument(
        "--examples",
        action="store_true",
        help="instead: linearization levels 1 and 2 on the bundled examples' traces",
    )
    ap.add_argument("--out", help="also write the Markdown here")
    a = ap.parse_args(argv)
    rows = []
    if a.examples:
        body = compare_levels(a.time_limit)
        a.counts = []
    for n in a.counts:
        print(f"solving {n} candidates ...", file=sys.stderr, flush=True)
        rows.append(run_one(n, a.time_limit, a.seed, a.linearization))
        print(f"  {rows[-1]['status']} in {rows[-1]['wall_s']:.2f} s", file=sys.stderr, flush=True)
    args = argv if argv is not None else sys.argv[1:]
    cmd = "python benchmarks/solver_scale.py " + " ".join(args)
    from planner._src.solve import SolverOptions

    level = a.linearization if a.linearization is not None else SolverOptions().linearization_level
    text = "\n".join(
        [
            f"Command: `{cmd.strip()}`",
            f"Date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
            f"Machine: {os.cpu_count()} CPU cores (nproc), Python {platform.python_version()}, "
            f"CP-SAT with 1 worker (the planner's setting), linearization_level "
            f"{'1 and 2' if a.examples else level}; "
            "load average (1, 5, 15 min) at the end: "
            + ", ".join(f"{x:.2f}" for x in os.getloadavg()),
            "",
            body if a.examples else table(rows),
            "",
        ]
    )
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
