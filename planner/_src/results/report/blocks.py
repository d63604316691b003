"""What the text and Markdown renderers both print: the status block, the snippets, the
schedule line, the budget split, the planning time, and the report's figure formats."""

from __future__ import annotations

from planner._src.results.report.model import Report, Row
from planner._src.units import MB, fmt_gb


def planning_time_lines(r: Report) -> list[str]:
    """The report's planning-time lines: the total and each stage, the trace stage's parts
    on a line of their own, then what JAX's persistent compilation cache does for these
    compiles (or the line that turns it on)."""
    if not r.planning_time:
        return []
    top = [x for x in r.planning_time if not x[0].startswith("  ")]
    parts = [x for x in r.planning_time if x[0].startswith("  ")]

    def item(what, s, n):
        return f"{what.strip()} {s:.1f} s" + (f" ({n})" if n > 1 else "")

    lines = [
        f"Planning time {sum(s for _, s, _ in top):.1f} s: "
        + "; ".join(item(*x) for x in top if x[1] >= 0.05)
    ]
    if parts:
        stage = next((s for w, s, _ in top if w.startswith("trace stage")), 0.0)
        # the stage's compiles run side by side (Subject.anchor_workers): each part is its
        # own wall time, so they can sum to more than the stage
        side = " (compiles side by side: the parts overlap)"
        overlap = side if sum(s for _, s, _ in parts) > stage * 1.01 + 0.05 else ""
        lines.append("Trace stage: " + "; ".join(item(*x) for x in parts) + overlap)
    if r.compile_cache:
        lines.append(r.compile_cache)
    return lines


def split_lines(r: Report) -> list[str]:
    """The budget split as aligned text rows (MB per device), then the leaves on the host."""
    if not r.budget_split:
        return []
    rows = [f"{'':18s}{'HBM MB':>12s}{'host MB':>12s}{'moved/step MB':>16s}"]
    for x in r.budget_split:
        rows.append(
            f"{x['part']:18s}{x['hbm_bytes'] / MB:12,.1f}{x['host_bytes'] / MB:12,.1f}"
            f"{x['moved_bytes'] / MB:16,.1f}"
        )
    # the placement's keys: a parameter's is "params" + its path (state.StateLeaf.key)
    params = [x for x in r.state_host_leaves if x.startswith("params")]
    opt = [x for x in r.state_host_leaves if not x.startswith("params")]
    for what, keys in (("optimizer-state leaves", opt), ("parameters", params)):
        if what == "parameters" and not keys:
            continue
        n = len(keys)
        rows.append(
            f"{what} in pinned host memory: {n}"
            + (": " + ", ".join(keys[:6]) + (" ..." if n > 6 else "") if n else "")
            + (" (streamed per layer slice, their gradients with them)" if params is keys else "")
        )
    return rows


def status_block(r: Report) -> tuple[tuple[str, str], ...]:
    """The status block (plan files written before it: the old header's figures)."""
    if r.status_lines:
        return r.status_lines
    comp = "not compiled" if r.compiled_gb is None else fmt_gb(r.compiled_gb)
    return (
        ("compiled by", compiler_label(r)),
        ("budget", f"{fmt_gb(r.budget_gb)}{_headroom(r)}"),
        ("compiled", comp),
    )


def snippet_texts(r: Report) -> dict:
    """The snippets (plan files written before they were recorded: rebuilt from the policy
    text and flags as those files printed them)."""
    if r.snippets:
        return r.snippets
    return {
        "apply": "# (saved by an older planner: solve again for the apply line)\n",
        "python": f"policy = {r.policy_source}\n",
        "xla_flags": f"export XLA_FLAGS={r.xla_flags!r}\n" if r.xla_flags else "# none\n",
        "maxtext": r.maxtext_yaml,
    }


def inside(row: Row) -> str:
    """For a tensor made inside a jitted function, which equation of it (JAX's label names
    the function only: jnp.where's select_n and broadcast_in_dim read alike)."""
    if " output of jitted function " not in row.jax_label:
        return ""
    return f" [{row.label.split('[')[0]} inside]"


def fmt_mb(nbytes: float) -> str:
    """Bytes in the MB column: one decimal, more where that would read 0.0."""
    mb = nbytes / MB
    return f"{mb:,.1f}" if mb >= 0.1 or not mb else f"{mb:.2g}"


def schedule_line(r: Report) -> str:
    """The exposed copy time the compiled schedule predicts, beside the model's."""
    x = r.schedule_exposure
    return (
        f"Exposed copies from the compiled schedule ({x['compiler'] or r.backend}, "
        f"{x['source']}): stores {x['d2h_exposed_s'] * 1e3:.2f} ms (model "
        f"{x['model_d2h_exposed_s'] * 1e3:.2f}) of {x['d2h_copy_s'] * 1e3:.2f}, reloads "
        f"{x['h2d_exposed_s'] * 1e3:.2f} ms (model {x['model_h2d_exposed_s'] * 1e3:.2f}) of "
        f"{x['h2d_copy_s'] * 1e3:.2f}; step with the schedule's reloads "
        f"{x['step_s'] * 1e3:.2f} ms (the stores keep the model's figure: the schedule's were "
        "not closer to the H200, benchmarks/results/schedule-exposure-2026-12-05.md)"
    )


def compiler_label(r: Report) -> str:
    """The compiler's label, marked where it is not the target's."""
    name = r.compiler or r.backend
    return name if r.compiler_exact or "estimate" in name else f"{name}: an estimate"


def _headroom(r: Report) -> str:
    if not r.headroom_gb:
        return ""
    return (
        f" (planned to {fmt_gb(r.budget_gb - r.headroom_gb)}: {fmt_gb(r.headroom_gb)} left "
        f"free: {r.headroom_why})"
    )
