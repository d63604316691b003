"""Issue 16's GPU must-show from runs already made: do planned steps compute what unplanned
steps compute?

    python benchmarks/loss_agreement.py > benchmarks/results/h200-loss-agreement-2026-12-03.md

Every job of ``benchmarks/gpu_bench.py`` (``run_worker``) builds the example's train step with
``concrete=True`` (the same seeded parameters, optimizer state and batch for every policy),
runs 1 warm-up and 10 timed steps (11 SGD/AdamW updates on the same batch) and records the
loss the last step returned. A policy changes what is kept, recomputed or copied, never the
arithmetic, so every policy's loss must agree with full remat's (``stock:nothing_saveable``,
what the user's code runs unplanned) up to floating-point reassociation by XLA's fusions:
a residual dropped or read from a wrong host buffer would change the gradient and, over 11
updates, the loss. Tolerance: the spread of the stock policies' own losses around full remat's
(they differ only by XLA's fusion order) times 2: the largest |stock loss - full remat's loss|
of the same call (the same seeded state and batch), over every call of that model (llama,
moe), from calls with at least 3 stock policies (records with fewer are left out); at least
1e-6 of the loss, where the stock policies agree to the bit (XLA:CPU: a dry run).

Reads the JSONL records under benchmarks/results/h200-* (``--results DIR``: every JSONL file
under DIR, as benchmarks/gpu_suite.py runs it on its own records) that hold both ``plan@*``
jobs and ``stock:nothing_saveable`` of the same model and configuration
(offload_must_show.py's ``MODEL:plan@*`` / ``MODEL:stock:*`` too).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def _records(path: Path):
    for line in path.read_text().splitlines():
        r = json.loads(line)
        res = r.get("result") or r.get("data") or {}
        job = r.get("job") or {}
        name = job.get("name") if isinstance(job, dict) else None
        if isinstance(res, dict) and "loss" in res and name:
            for tag in (":plan@", ":stock:"):  # offload_must_show.py: MODEL:plan@B, MODEL:stock:X
                if tag in name:
                    name = name[name.index(tag) + 1 :]
                    break
            yield name, float(res["loss"]), job.get("config"), job.get("model", "llama")


def report(files: list[Path], root: Path) -> tuple[str, float]:
    """The Markdown table over ``files`` (named relative to ``root``) and the largest
    difference over its tolerance."""
    calls = []  # (file, model, {job name: loss})
    for f in files:
        by_cfg: dict[str, dict[str, float]] = {}
        for name, loss, cfg, model in _records(f):
            key = json.dumps([model, cfg], sort_keys=True)
            by_cfg.setdefault(key, {})[name] = loss
        for key, losses in by_cfg.items():
            stock = [v for k, v in losses.items() if k.startswith("stock:")]
            ref = losses.get("stock:nothing_saveable")
            if ref is not None and len(stock) >= 3 and any(k.startswith("plan@") for k in losses):
                calls.append((f, json.loads(key)[0], losses))
    spread_of = {}
    for _, model, losses in calls:
        ref = losses["stock:nothing_saveable"]
        s = max(abs(v - ref) for k, v in losses.items() if k.startswith("stock:"))
        spread_of[model] = max(spread_of.get(model, 0.0), s)
    rows = []
    worst = 0.0
    n_plans = 0
    for f, model, losses in calls:
        ref = losses["stock:nothing_saveable"]
        spread = max(abs(v - ref) for k, v in losses.items() if k.startswith("stock:"))
        tol = max(2 * spread_of[model], 1e-6 * abs(ref))  # not 0 where stocks agree to the bit
        for k, v in sorted(losses.items()):
            if not k.startswith("plan@"):
                continue
            d = abs(v - ref)
            n_plans += 1
            worst = max(worst, d / tol if tol else (0.0 if d == 0 else float("inf")))
            rows.append(
                f"| {_name(f, root)} | {model} | {k} | {v:.6f} | "
                f"{ref:.6f} | {d:.2e} | {spread:.2e} | {tol:.2e} | "
                f"{'yes' if d <= tol else '**no**'} |"
            )
    out = []
    out.append("# Planned vs unplanned losses on the H200 (issue 16)\n")
    out.append("Command: `python benchmarks/loss_agreement.py` (module docstring: what and why).\n")
    out.append(
        "| records | model | plan | loss after 11 steps | full remat's | abs diff | "
        "stock spread (this call) | tolerance (model) | agrees |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|")
    out.append("\n".join(rows))
    out.append(
        f"\n{n_plans} plans; the largest difference is {worst:.2f} x its tolerance. "
        "Tolerance = 2 x the largest |stock loss - full remat's loss| in one call, over the "
        f"calls of that model (largest spreads: {', '.join(f'{m} {t:.2e}' for m, t in sorted(spread_of.items()))})."
    )
    return "\n".join(out) + "\n", worst


def _name(f: Path, root: Path) -> str:
    try:
        return str(f.relative_to(root))
    except ValueError:
        return str(f)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=None, help="every JSONL file under this folder")
    a = ap.parse_args(argv)
    root = Path(a.results) if a.results else RESULTS
    files = (
        sorted(root.rglob("*.jsonl")) if a.results else sorted(RESULTS.glob("h200-*/**/*.jsonl"))
    )
    text, worst = report(files, root)
    print(text, end="")
    return 0 if worst <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
