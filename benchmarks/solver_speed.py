"""The solver's per-phase cost and answers over a sweep of caps (issue 46, "plan in seconds").

    python benchmarks/solver_speed.py record OUT.json [--params JSON] [--cases a,b] [--caps 20]
    python benchmarks/solver_speed.py compare BEFORE.json AFTER.json

``record`` runs ``solve_assignment`` at ``--caps`` usable budgets spread evenly from the smaller
to the larger of all-remat's and all-save's predicted peaks (+1 KiB), on the README quickstart
(examples/llama.py ``QUICKSTART``, hardware "h200" and "cpu"), the MoE example (examples/moe.py,
"h200" and "cpu") and five of tests/synthetic.py's random problems. Per solve it writes the
answer (status, objective, decisions, train-state leaves on the host) and per CP-SAT phase its
objective, status, wall and deterministic seconds, and branches. ``--params`` sets extra CP-SAT
parameters (a JSON object, e.g. ``'{"add_cg_cuts": false}'``) on every phase, to measure a
remedy without changing the planner.

``compare`` prints per case the phases' wall and deterministic seconds before and after, and
how many answers are the same (status, objective, decisions, host leaves) and how many have
the same status and phase objectives (of the phases both ran): a remedy that keeps the
objectives but changes the decisions has picked another plan among equal-objective ties.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.append(ROOT)  # after PYTHONPATH: the planner named there runs
os.environ.setdefault("JAX_PLATFORMS", "cpu")
PHASES = ("time", "host", "peak", "resid")
SYNTHETIC = (
    (0, {}),
    (3, {"fusion": True, "n_nodes": 9}),
    (7, {"n_nodes": 12, "n_classes": 6, "fusion": True, "hiding": True}),
    (11, {"n_regions": 3, "n_nodes": 14, "n_classes": 8, "groups": True}),
    (
        12,
        {
            "n_regions": 2,
            "n_nodes": 20,
            "n_classes": 10,
            "fusion": True,
            "hiding": True,
            "slices": True,
        },
    ),
)


def _cases(names):
    import planner
    from planner._src.cost import build_cost_model
    from planner._src.types import SolverOptions
    from tests.synthetic import random_problem

    print(planner.__file__, file=sys.stderr)
    steps = {}
    for name in names:
        if name.startswith("syn"):
            seed = int(name[3:])
            graph, cost = random_problem(seed, **dict(SYNTHETIC)[seed])
            yield name, graph, cost, SolverOptions()
            continue
        model, hw = name.split("_")
        if model not in steps:
            from examples import llama, moe

            steps[model] = llama.quickstart() if model == "quick" else moe.make()
        step, args = steps[model]
        s = planner.Planner(step, *args, hardware=hw, compiler="local")
        cost = build_cost_model(s.trace, s.graph, s.hardware, allow_offload=s.offload)
        yield name, s.graph, cost, s.subject.options.solver


def record(a) -> int:
    from planner._src.cost import evaluate
    from planner._src.errors import PlannerError
    from planner._src.solve import model as M
    from planner._src.solve import solve_assignment
    from planner._src.types import Assignment

    extra = json.loads(a.params) if a.params else {}
    phases = []
    run = M.Model.run

    def measured(self, objective, opts, time_limit):
        solver = None
        if extra:  # the planner's own settings (Model.solver), then the extra ones
            solver = self.solver(opts, time_limit)
            for k, v in extra.items():
                setattr(solver.parameters, k, v)
        t = time.perf_counter()
        s, status = run(self, objective, opts, time_limit, solver)
        wall = time.perf_counter() - t
        tag = [self.extra_ns, self.host_kib, self.peak_kib, self.residual_kib]
        phases.append(
            {
                "phase": PHASES[[x is objective for x in tag].index(True)],
                "status": s.StatusName(status),
                "objective": s.ObjectiveValue() if status in (2, 4) else None,
                "wall_s": wall,
                "det_s": s.deterministic_time,
                "branches": s.num_branches,
            }
        )
        return s, status

    M.Model.run = measured
    out = {"params": extra, "load_at_start": os.getloadavg(), "solves": {}}
    for name, graph, cost, opts in _cases(a.cases.split(",")):
        keys = [k.key for k in graph.classes]
        ends = [
            evaluate(cost, graph, Assignment.of(dict.fromkeys(keys, d))).peak_bytes
            for d in ("remat", "save")
        ]
        lo, hi = min(ends), max(ends)
        for i in range(a.caps):
            cap = int(lo + (hi - lo) * i / (a.caps - 1)) + 1024
            phases.clear()
            t = time.perf_counter()
            try:
                sol = solve_assignment(graph, cost, cap, opts)
                r = {
                    "status": sol.status,
                    "objective_s": sol.objective_s,
                    "decisions_sha256": _sha(sol.assignment.decisions),
                    "non_remat": sum(d != "remat" for _, d in sol.assignment.decisions),
                    "state_on_host": sorted(sol.state_on_host),
                }
            except PlannerError as e:
                r = {"error": type(e).__name__}
            r.update(cap=cap, wall_s=time.perf_counter() - t, phases=list(phases))
            out["solves"][f"{name}@{i}"] = r
            print(name, i, r.get("status", r.get("error")), f"{r['wall_s']:.3f}", file=sys.stderr)
    out["load_at_end"] = os.getloadavg()
    with open(a.out, "w") as f:
        json.dump(out, f)
    return 0


ANSWER = ("status", "objective_s", "decisions_sha256", "state_on_host", "error")


def _sha(decisions) -> str:
    """The sorted (class key, decision) pairs, hashed: equal hashes, equal decisions."""
    return hashlib.sha256(json.dumps(sorted(map(list, decisions))).encode()).hexdigest()


def compare(a) -> int:
    runs = [json.load(open(p))["solves"] for p in (a.before, a.after)]
    per = collections.defaultdict(lambda: [[0.0] * 8, [0.0] * 8, 0, 0, 0, 0.0, 0.0])
    for key, before in runs[0].items():
        after = runs[1].get(key)
        if after is None:
            continue
        row = per[key.split("@")[0]]
        for k, r in enumerate((before, after)):
            for p in r["phases"]:
                i = PHASES.index(p["phase"])
                row[k][i] += p["wall_s"]
                row[k][4 + i] += p["det_s"]
        row[2] += 1
        row[3] += all(before.get(x) == after.get(x) for x in ANSWER)
        objectives = [{p["phase"]: p["objective"] for p in r["phases"]} for r in (before, after)]
        both = objectives[0].keys() & objectives[1].keys()
        row[4] += before.get("status") == after.get("status") and all(
            objectives[0][k] == objectives[1][k] for k in both
        )
        row[5] += before["wall_s"]
        row[6] += after["wall_s"]
    print("| case | solves | phase | wall s before | after | det s before | after |")
    print("|---|---|---|---|---|---|---|")
    for case, (b, f, n, same, same_obj, wb, wf) in per.items():
        for i, ph in enumerate(PHASES):
            if b[4 + i] or f[4 + i] or b[i] or f[i]:
                print(
                    f"| {case} | {n} | {ph} | {b[i]:.2f} | {f[i]:.2f} | {b[4 + i]:.3f} | {f[4 + i]:.3f} |"
                )
        print(
            f"| {case} | {n} | all | {sum(b[:4]):.2f} | {sum(f[:4]):.2f} | {sum(b[4:]):.3f} | "
            f"{sum(f[4:]):.3f} |"
        )
        print(f"| {case} | {n} | solve_assignment (build + phases) | {wb:.2f} | {wf:.2f} | | |")
        print(
            f"|  | same answer {same}/{n}, same status and phase objectives {same_obj}/{n} "
            "| | | | | |"
        )
    return 0


def main(argv=None) -> int:
    warnings.simplefilter("ignore")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("out")
    r.add_argument("--params", default="")
    r.add_argument(
        "--cases",
        default="quick_h200,moe_h200,quick_cpu,moe_cpu,syn0,syn3,syn7,syn11,syn12",
    )
    r.add_argument("--caps", type=int, default=20)
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    a = p.parse_args(argv)
    return record(a) if a.cmd == "record" else compare(a)


if __name__ == "__main__":
    sys.exit(main())
