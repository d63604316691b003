"""The pareto command: plan several budgets from one trace; print the table, draw the curve."""

from __future__ import annotations

import argparse
import json
import math

from planner._src.cli.common import (
    LAYER_GROUPS,
    Progress,
    emit_text,
    image_path,
    load_factory,
    parse_gb,
)
from planner._src.units import GB


def _budgets(text: str) -> list[float]:
    """``"10,20,30"`` -> ``[10.0, 20.0, 30.0]``; ``"auto"`` -> None (the planner spans the
    range); a teaching error for anything else."""
    from planner._src.errors import (
        InvalidArgumentError,
    )  # deferred: --help answers without importing JAX

    if text.strip().lower() == "auto":
        return None
    try:
        out = [parse_gb(x) for x in text.split(",") if x.strip()]
    except argparse.ArgumentTypeError as e:
        if any(c.isdigit() for c in text):  # "80GB,100GB": say what to write
            raise InvalidArgumentError(f"--hbm-gb {e}") from None
        out = []
    if not out:
        raise InvalidArgumentError(
            f"--hbm-gb {text!r} is not a comma-separated list of budgets in GB.\n"
            "Fix: e.g. --hbm-gb 60,80,100, or --hbm-gb auto for five budgets from full remat "
            "to saving everything."
        )
    return out


def _pareto_rows(results, budgets) -> list[dict]:
    """One row per budget: the plan's predicted figures, or why no plan fits."""
    rows = []
    for b, r in zip(budgets, results):
        if isinstance(r, Exception):
            rows.append(
                {"budget_gb": b, "feasible": False, "status": type(r).__name__, "error": str(r)}
            )
            continue
        v = r.verification
        rows.append(
            {
                "budget_gb": b,
                "feasible": True,
                "status": v.status,
                "choice": r.choice,
                "predicted_peak_gb": r.prediction.peak_bytes / GB,
                "host_gb": r.prediction.host_bytes / GB,
                "step_ms": r.prediction.step_s * 1e3,
                "compiled_gb": None
                if v.compiled_device_bytes is None
                else v.compiled_device_bytes / GB,
                "decisions": dict(sorted(r.decisions().items())),
            }
        )
    return rows


def _stock_rows(results) -> list[dict]:
    plan = next((r for r in results if not isinstance(r, Exception)), None)
    if plan is None:
        return []
    return [
        {
            "name": b.name,
            "predicted_peak_gb": b.prediction.peak_bytes / GB,
            "host_gb": b.prediction.host_bytes / GB,
            "step_ms": b.prediction.step_s * 1e3,
            "applicable": b.applicable,
        }
        for b in plan.baselines
    ]


def _gbcol(gb: float) -> str:
    """A figure of a GB column: three decimals, three significant digits below 0.1 GB, so a
    small model does not read 0.000."""
    return f"{gb:.3f}" if gb >= 0.1 or not gb else f"{gb:.3g}"


def _pareto_table(rows, stock) -> str:
    """The pareto rows and stock policies as two rich tables, plain text."""
    from rich.table import Table

    from planner._src.results.report.text import (
        text_console,
    )  # deferred: --help answers without importing JAX

    con = text_console(120)
    t = Table(title="Planner: predicted peak and step time per budget")
    for col in ("budget GB", "predicted peak GB", "host GB", "step ms", "compiled GB", "status"):
        t.add_column(col, overflow="fold")
    for r in rows:
        if not r["feasible"]:
            t.add_row(
                f"{r['budget_gb']:g}",
                "-",
                "-",
                "-",
                "-",
                "INFEASIBLE: " + r["error"].splitlines()[0],
            )
            continue
        comp = "-" if r["compiled_gb"] is None else _gbcol(r["compiled_gb"])
        t.add_row(
            f"{r['budget_gb']:g}",
            _gbcol(r["predicted_peak_gb"]),
            _gbcol(r["host_gb"]),
            f"{r['step_ms']:.2f}",
            comp,
            r["status"],
        )
    con.print(t)
    if stock:
        s = Table(title="Same model, stock policies (predicted)")
        for col in ("policy", "peak GB", "host GB", "step ms"):
            s.add_column(col)
        for x in stock:
            if x["applicable"]:
                s.add_row(
                    x["name"],
                    _gbcol(x["predicted_peak_gb"]),
                    _gbcol(x["host_gb"]),
                    f"{x['step_ms']:.2f}",
                )
        con.print(s)
    return con.file.getvalue()


def cmd_pareto(a) -> int:
    import planner  # deferred: --help answers without importing JAX

    budgets = _budgets(a.hbm_gb)
    image_path(a.png, (".png",), "--png")
    image_path(a.svg, (".svg",), "--svg")
    from planner._src.results.planfile import (
        check_writable,
    )  # deferred: --help answers without importing JAX

    for path, what in ((a.png, "the curve"), (a.svg, "the curve"), (a.out, "the table file")):
        if path:
            check_writable(path, what)  # before the solves, as for solve's outputs
    step, args = load_factory(a.factory)
    with Progress(a.quiet) as progress:
        progress(
            f"planning {a.factory} for {a.hardware} under "
            + (f"{len(budgets)} budgets" if budgets else "budgets spanning the range")
        )
        results = planner.pareto(
            step,
            *args,
            hbm_gb=budgets,
            hardware=a.hardware,
            allow_offload=False if a.no_offload else None,
            solver_time_limit_s=a.time_limit,
            verify_compile=not a.no_verify,
            progress=progress,
            layer_groups=LAYER_GROUPS[a.layer_groups],
        )
        if budgets is None:  # auto: every budget is above full remat's, so each is a plan
            budgets = [getattr(r, "budget_bytes", math.nan) / 1e9 for r in results]
        for path in (a.png, a.svg):
            if path:
                from planner._src.results.plots import (
                    pareto_curve,
                )  # deferred: --help answers without importing JAX

                progress(f"drawing the curve to {path}")
                pareto_curve(results, path, budgets_gb=budgets)
    rows, stock = _pareto_rows(results, budgets), _stock_rows(results)
    verified = not a.no_verify
    if a.json:
        data = {"budgets": rows, "stock_policies": stock, "verified": verified}
        emit_text(json.dumps(data, indent=2), a.out)
    else:
        note = (
            ""
            if verified
            else "not verified (--no-verify): no plan was compiled; every figure is the cost "
            "model's\n"
        )
        emit_text(_pareto_table(rows, stock) + note, a.out)
    return 0 if any(r["feasible"] for r in rows) else 1
