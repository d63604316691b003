"""Fuzz the solver: random region graphs and budgets, every answer checked three ways.

    python benchmarks/fuzz.py --n 1000 --out benchmarks/results/fuzz-2026-11-30.md
    python benchmarks/fuzz.py graphs --n 1000 ...      # the same, named

``python benchmarks/fuzz.py programs --n 500 --out ...`` fuzzes the whole planner on random
programs instead (random layer bodies from a grammar of JAX ops, planned and compiled):
``benchmarks/fuzz_programs.py``.

For each random problem (tests/synthetic.py: random DAGs, shared classes, region inputs,
loop-invariant values, host caps, overlap efficiencies 0 / 0.5 / 1) and a random budget:
the plan must replay in the independent simulator with the same peak and step time, fit the
budget, beat or tie every uniform baseline that fits, match brute force when the problem is
small enough to enumerate, and an infeasible answer must name a budget no assignment beats.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from synthetic import all_assignments, brute_force, random_problem  # noqa: E402

from planner._src.cost import Assignment, evaluate  # noqa: E402
from planner._src.cost.simulate import simulate  # noqa: E402
from planner._src.errors import InfeasibleBudgetError  # noqa: E402
from planner._src.solve import SolverOptions, solve_assignment  # noqa: E402


def check(seed: int) -> str | None:
    rnd = random.Random(seed)
    n_classes = rnd.randint(1, 6)
    graph, cost = random_problem(
        seed, n_nodes=rnd.randint(2, 14), n_regions=rnd.randint(1, 3), n_classes=n_classes
    )
    lo = evaluate(cost, graph, Assignment.of({})).peak_bytes
    hi = evaluate(cost, graph, Assignment.of({c.key: "save" for c in graph.classes})).peak_bytes
    budget = rnd.uniform(0.8 * min(lo, hi), 1.1 * max(lo, hi))
    small = len(graph.classes) <= 5
    best = brute_force(graph, cost, budget) if small else None
    try:
        sol = solve_assignment(graph, cost, budget, SolverOptions(time_limit_s=10))
    except InfeasibleBudgetError as e:
        if best is not None:
            return f"seed {seed}: solver says infeasible, brute force found {best[1].step_s}"
        if small:
            preds = [evaluate(cost, graph, a) for a in all_assignments(graph, cost)]
            lowest = min(p.peak_bytes for p in preds if p.host_bytes <= cost.host_cap_bytes)
            if e.min_feasible_bytes > lowest:
                return f"seed {seed}: named {e.min_feasible_bytes} but {lowest} is reachable"
        return None
    pred = evaluate(cost, graph, sol.assignment)
    sim = simulate(graph, cost, sol.assignment, usable_bytes=budget)
    if sim.peak_bytes != pred.peak_bytes or abs(sim.step_s - pred.step_s) > 1e-9 * pred.step_s:
        return f"seed {seed}: simulator {sim} disagrees with model {pred.peak_bytes} {pred.step_s}"
    if pred.peak_bytes > budget:
        return f"seed {seed}: plan peaks at {pred.peak_bytes} over {budget}"
    if best is not None and pred.step_s > best[1].step_s * (1 + 1e-6) + 1e-9:
        return f"seed {seed}: solver {pred.step_s} worse than brute force {best[1].step_s}"
    for d in ("save", "remat", "offload"):
        b = evaluate(cost, graph, Assignment.of({c.key: d for c in graph.classes}))
        if (
            b.peak_bytes <= budget
            and b.host_bytes <= cost.host_cap_bytes
            and pred.step_s > b.step_s + 1e-9
        ):
            return f"seed {seed}: worse than all-{d}"
    return None


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "programs":
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import fuzz_programs

        return fuzz_programs.main(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "graphs":
        del sys.argv[1]
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--out")
    a = ap.parse_args()
    t = time.perf_counter()
    failures = [f for f in (check(s) for s in range(a.start, a.start + a.n)) if f]
    wall = time.perf_counter() - t
    text = (
        f"# Solver fuzz run\n\nCommand: `python benchmarks/fuzz.py --n {a.n} --start {a.start}`"
        f"\nDate: {time.strftime('%Y-%m-%d')}; machine: 2-core CPU (the project's CI kind).\n\n"
        f"{a.n} random problems, {len(failures)} failures, {wall:.1f} s.\n"
    )
    text += "".join(f"- {f}\n" for f in failures)
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
