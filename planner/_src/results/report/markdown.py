"""The report as Markdown: the same blocks as the text report, as lists, tables and code
fences."""

from __future__ import annotations

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
from planner._src.results.report.model import Report
from planner._src.units import MB, fmt_bytes, fmt_gb


def render_markdown(r: Report) -> str:
    out = [f"# Plan: {r.status}", ""]
    out += [f"- {what} {text}" for what, text in status_block(r)]
    if not r.status_lines:  # plan files written before the status block
        out += [f"- [{'x' if ok else ' '}] {name}: {detail}" for name, ok, detail in r.checks]
    out += [
        "",
        f"Hardware **{r.hardware}**; predicted peak **{fmt_gb(r.predicted_peak_gb)}** (fixed "
        f"{fmt_gb(r.fixed_gb)} + residuals {fmt_gb(r.residual_gb)} + backward working set "
        f"{fmt_gb(r.working_set_gb)}); host {fmt_gb(r.host_gb)}.",
        f"Predicted step **{r.step_ms:.2f} ms** = base {r.base_ms:.2f} + recompute "
        f"{r.recompute_ms:.2f} + saving writes {r.saving_ms:.2f} + exposed copies "
        f"{r.exposed_ms:.2f} (of {r.transfer_ms:.2f}).",
        *([schedule_line(r) + "."] if r.schedule_exposure else []),
    ]
    if r.recompute_priced_from:
        out.append(f"Recompute priced from {r.recompute_priced_from}.")
    out += [
        f"Solver: {r.solver}.",
        *[x + "." for x in planning_time_lines(r)],
        "",
    ]
    if r.budget_split:
        out += [
            "Budget split (per device):",
            "",
            "| part | HBM | host | moved per step |",
            "|---|---|---|---|",
        ]
        out += [
            f"| {x['part']} | {fmt_mb(x['hbm_bytes'])} MB | {fmt_mb(x['host_bytes'])} MB "
            f"| {fmt_mb(x['moved_bytes'])} MB |"
            for x in r.budget_split
        ]
        out += [""] + [x + "." for x in split_lines(r)[len(r.budget_split) + 1 :]] + [""]
    out += [f"- {x}" for x in r.regions] + [""]
    sharded = any(row.shard for row in r.rows)
    g = r.layer_groups > 0
    out += [
        ("| group " if g else "") + "| source | as print_saved_residuals shows it | members "
        "| decision | MB/step | recompute ms | copies ms | why |"
        + (" per device |" if sharded else ""),
        ("|---" if g else "") + "|---|---|---|---|---|---|---|---|" + ("---|" if sharded else ""),
    ]
    for row in r.rows:
        out.append(
            ("" if not g else f"| {row.group} ")
            + f"| {row.source} | {shown_label(row.jax_label) + inside(row) or row.label} "
            f"| {row.members} "
            f"| {row.decision} | "
            f"{fmt_mb(row.nbytes_per_step)} | {row.recompute_ms:.3f} | {row.transfer_ms:.3f} | "
            f"{row.reason} |" + (f" {row.shard} |" if sharded else "")
        )
    if r.small_rows[0]:
        out.append(
            ("| " if g else "")
            + f"| | {r.small_rows[0]} smaller unnamed classes | | remat | {r.small_rows[1] / MB:,.2f} | "
            "| | under 0.1% of the bytes each |"
        )
    out += [
        "",
        f"Stock policies (predicted by the cost model; compiled by {compiler_label(r)}):",
        "",
        "| policy | predicted peak | compiled | host | step ms | fits |",
        "|---|---|---|---|---|---|",
    ]
    for p in r.stock_policies:
        out.append(
            f"| {p.name} | {fmt_gb(p.peak_gb)} | {p.compiled_text} | {fmt_gb(p.host_gb)} | "
            f"{p.step_ms:.2f} | {p.fits_text} |"
        )
    sn = snippet_texts(r)
    if "state" in sn:
        out += ["", "Apply the optimizer state's placement:", "```python"]
        out += [sn["state"].rstrip(), "```"]
    out += [
        "",
        "Apply the plan without editing the model:",
        "```python",
        sn["apply"].rstrip(),
        "```",
        "Or paste the policy next to your `jax.checkpoint` call:",
        "```python",
        sn["python"].rstrip(),
        "```",
        "XLA flags (in the shell that starts training):",
        "```bash",
        sn["xla_flags"].rstrip(),
        "```",
    ]
    for flag, why, src in r.flag_notes:
        out.append(f"- `{flag}`: {why} ({src})")
    out += ["", "MaxText:", "```yaml", sn["maxtext"].rstrip(), "```"]
    if r.rounds and len(r.rounds) > 1:
        out += ["", "Verify rounds:"] + [f"- {_round_text(x)}" for x in r.rounds]
    if r.notes:
        out += ["", "Notes:"] + [f"- {n}" for n in r.notes]
    return "\n".join(out) + "\n"


def shown_label(label: str) -> str:
    """A print_saved_residuals label with its source relative to the working directory."""
    import os

    return label.replace(" from " + os.getcwd().rstrip("/") + "/", " from ", 1)


def _round_text(x) -> str:
    """A round in one line (a plan file's older tuple form too)."""
    if not isinstance(x, dict):
        n, c, b, s = x[:4]
        return (
            f"round {n}: correction {c:,} bytes, compiled {b if b is None else f'{b:,}'} bytes, {s}"
        )
    b = x["compiled_bytes"]
    mb = x["model_budget_bytes"]
    step = x["predicted_step_ms"]
    return (
        f"round {x['round']} ({x['purpose']}): correction {x['correction_bytes']:+,} bytes"
        + ("" if mb is None else f" (model held to {fmt_bytes(mb)})")
        + f", predicted {fmt_bytes(x['predicted_peak_bytes'])}"
        + ("" if step is None else f" / {step:.2f} ms")
        + f", compiled {'-' if b is None else fmt_bytes(b)}: {x['outcome'] or x['status']}"
    )
