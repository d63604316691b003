"""The report as text: rich tables printed to a plain-text console (as the CLI prints it)."""

from __future__ import annotations

import io

from planner._src.results.report.blocks import (
    compiler_label,
    fmt_mb,
    inside,
    planning_time_lines,
    schedule_line,
    snippet_texts,
    split_lines,
    status_block,
)
from planner._src.results.report.model import REGION_LINE, Report, Row
from planner._src.units import MB, fmt_gb


def text_console(width: int):
    """A rich Console that writes plain text into a string, ``console.file.getvalue()``:
    no colour, a string also in Jupyter (no display_data), and the text as written."""
    from rich.console import Console

    return Console(
        file=io.StringIO(),
        width=width,
        force_terminal=False,
        force_jupyter=False,
        color_system=None,
        markup=False,  # rich would eat '[cuda]' in 'pip install -e ".[cuda]"'
        emoji=False,  # and would render a source line 'file.py:100:8' as 'file.py💯8'
        highlight=False,
    )


def render_text(r: Report) -> str:
    from rich.table import Table

    con = text_console(150)
    con.print(f"PLAN STATUS: {r.status.upper()}")
    for what, text in status_block(r):
        con.print(f"  {what} {text}", highlight=False, markup=False)
    if not r.status_lines:  # plan files written before the status block
        for name, ok, detail in r.checks:
            con.print(f"  [{'ok' if ok else 'FAILED'}] {name}: {detail}", markup=False)
    con.print(
        f"hardware {r.hardware} | predicted peak {fmt_gb(r.predicted_peak_gb)} (fixed "
        f"{fmt_gb(r.fixed_gb)} + residuals {fmt_gb(r.residual_gb)} + working set "
        f"{fmt_gb(r.working_set_gb)}) | host {fmt_gb(r.host_gb)}",
        highlight=False,
    )
    con.print(
        f"predicted step {r.step_ms:.2f} ms = base {r.base_ms:.2f} + recompute "
        f"{r.recompute_ms:.2f} + saving writes {r.saving_ms:.2f} + exposed copies "
        f"{r.exposed_ms:.2f} (of {r.transfer_ms:.2f})",
        highlight=False,
    )
    if r.schedule_exposure:
        con.print(schedule_line(r), highlight=False)
    if r.recompute_priced_from:
        con.print(f"recompute priced from {r.recompute_priced_from}", highlight=False)
    con.print(f"solver: {r.solver}", highlight=False)
    for line in planning_time_lines(r):
        con.print(line[0].lower() + line[1:], highlight=False)
    if r.budget_split:
        con.print("budget split (per device):", highlight=False)
        for line in split_lines(r):
            con.print(f"  {line}", highlight=False)
    for x in r.regions:
        con.print(f"  {x}", highlight=False)
    t = Table(title="Decisions (per step, all trips)")
    g = r.layer_groups > 0
    if g:
        t.add_column("group", justify="right")
    for col, kw in (
        ("source", {"max_width": 22}),
        ("as print_saved_residuals shows it", {"max_width": 34}),
        ("n", {"justify": "right"}),
        ("decision", {}),
        ("MB", {"justify": "right"}),
        ("remat ms", {"justify": "right"}),
        ("copy ms", {"justify": "right"}),
        ("why", {"ratio": 1}),
    ):
        t.add_column(col, overflow="fold", **kw)
    sharded = any(row.shard for row in r.rows)
    if sharded:
        t.add_column("per device", overflow="fold", max_width=24)
    for row in r.rows:
        t.add_row(
            *([str(row.group)] if g else []),
            _short_source(row.source),
            _short_label(row),
            str(row.members),
            row.decision,
            fmt_mb(row.nbytes_per_step),
            f"{row.recompute_ms:.3f}",
            f"{row.transfer_ms:.3f}",
            row.reason,
            *([row.shard] if sharded else []),
        )
    if r.small_rows[0]:
        t.add_row(
            *([""] if g else []),
            "",
            f"{r.small_rows[0]} smaller unnamed classes",
            "",
            "remat",
            f"{r.small_rows[1] / MB:,.2f}",
            "",
            "",
            "each under 0.1% of the bytes",
        )
    con.print(t)
    p = Table(
        title="Same model, stock policies (predicted by the cost model; compiled by "
        f"{compiler_label(r)})"
    )
    for col in ("policy", "predicted peak", "compiled", "host", "step ms", "fits"):
        p.add_column(col)
    for x in r.stock_policies:
        p.add_row(
            x.name,
            fmt_gb(x.peak_gb),
            x.compiled_text,
            fmt_gb(x.host_gb),
            f"{x.step_ms:.2f}",
            x.fits_text,
        )
    con.print(p)
    sn = snippet_texts(r)
    if "state" in sn:
        con.print(
            f"--- Apply the optimizer state's placement (Python):\n{sn['state'].rstrip()}",
            highlight=False,
            markup=False,
        )
    for title, key in (
        ("Apply the plan without editing the model (Python)", "apply"),
        ("Or paste the policy next to your jax.checkpoint call (Python)", "python"),
        ("XLA flags (shell, before training starts)", "xla_flags"),
    ):
        con.print(f"--- {title}:\n{sn[key].rstrip()}", highlight=False, markup=False)
    for flag, why, src in r.flag_notes:
        con.print(f"  {flag}: {why} ({src})", highlight=False, markup=False)
    con.print("--- MaxText:\n" + sn["maxtext"].rstrip(), highlight=False, markup=False)
    con.print("---", highlight=False)
    for n in r.notes:
        con.print(f"note: {n}", highlight=False)
    return con.file.getvalue()


def _short_source(source: str) -> str:
    """``file.py:line:col`` of a row's source (``(region)`` where JAX made the tensor)."""
    short = source.rsplit("/", 1)[-1].split(" (")[0].split(" [")[0]
    return short + " (region)" if REGION_LINE in source else short


def _short_label(row: Row) -> str:
    """The print_saved_residuals label without its source (the source column has it)."""
    label = row.jax_label or row.label
    return label.split(" from ")[0] + inside(row)
