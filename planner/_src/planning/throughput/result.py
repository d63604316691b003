"""What maximize_throughput returns: the records (one row per batch size and policy, each
policy's limit, the result) and the result's renderings (text, Markdown, JSON)."""

from __future__ import annotations

import dataclasses
import json

from planner._src.results.plan import Plan
from planner._src.results.plots import throughput_curve
from planner._src.units import fmt_bytes

PLANNER = "planner"  # the policy name of the planner's rows


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ThroughputRow:
    """One batch size (or micro-batch count) under one policy."""

    batch_size: int  # what make_step was called with (the micro-batch size when accumulating)
    microbatches: int  # n: calls of the step per optimizer step
    policy: str  # "planner" or a stock policy's name (planner._src.policies.STOCK)
    # planner rows: what the session returned ("planner", or the stock policy it chose by its
    # never-worse-than-stock guarantee); stock rows: the policy itself
    chosen: str
    tokens_per_step: int  # N, per optimizer step (b x n examples)
    predicted_step_s: float | None  # T = n x the predicted time of one step call
    predicted_peak_bytes: int | None  # cost model
    compiled_peak_bytes: int | None  # the verifying compiler (memory_analysis)
    usable_bytes: int  # what the budget leaves usable at this batch size (Planner.usable)
    fits: bool  # compiled_peak_bytes <= usable_bytes
    compiler: str  # which compiler made compiled_peak_bytes
    exact: bool  # False: the compiler's figure is an estimate (another backend)
    note: str = ""

    @property
    def global_batch_size(self) -> int:
        """Examples per optimizer step, ``batch_size x microbatches``."""
        return self.batch_size * self.microbatches

    @property
    def tokens_per_s(self) -> float | None:
        """Predicted tokens per second, ``N / T``."""
        if not self.predicted_step_s:
            return None
        return self.tokens_per_step / self.predicted_step_s


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PolicyLimit:
    """Where one policy stops fitting, and where it does best."""

    policy: str
    largest_fitting: int | None  # batch size (None: not even the smallest probed fits)
    first_over: int | None  # the next probed batch size, which does not fit (None: not reached)
    first_over_compiled_bytes: int | None
    first_over_usable_bytes: int | None
    best_batch_size: int | None  # where its predicted tokens/s is highest among fitting rows
    best_tokens_per_s: float | None
    tokens_per_s_at_largest: float | None  # at largest_fitting (the estimator's pick)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ThroughputResult:
    """The chosen (batch size, plan) and every row the search compiled."""

    batch_size: int  # what make_step was called with for the chosen plan
    microbatches: int
    plan: Plan
    tokens_per_s: float  # predicted
    tokens_per_step: int
    table: tuple[ThroughputRow, ...]
    limits: tuple[PolicyLimit, ...]
    budget_bytes: int
    hardware: str
    compiler: str
    traced_batch_sizes: tuple[int, ...]  # one trace (session) each
    retraced: str  # what was traced again per batch size, and why
    search: str  # how the batch sizes were chosen
    tokens_rule: str  # how tokens per step were counted

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.microbatches

    @property
    def policy(self) -> str:
        """The chosen policy: "planner" or the stock policy the session returned."""
        return self.plan.choice

    def rows(self, policy: str) -> tuple[ThroughputRow, ...]:
        return tuple(r for r in self.table if r.policy == policy)

    def limit(self, policy: str) -> PolicyLimit:
        for lim in self.limits:
            if lim.policy == policy:
                return lim
        raise KeyError(policy)

    def to_dict(self) -> dict:
        return {
            "batch_size": self.batch_size,
            "microbatches": self.microbatches,
            "global_batch": self.global_batch,
            "policy": self.policy,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_step": self.tokens_per_step,
            "predicted_step_s": self.plan.prediction.step_s * self.microbatches,
            "compiled_peak_bytes": self.plan.verification.compiled_device_bytes,
            "budget_bytes": self.budget_bytes,
            "hardware": self.hardware,
            "compiler": self.compiler,
            "traced_batch_sizes": list(self.traced_batch_sizes),
            "retraced": self.retraced,
            "search": self.search,
            "tokens_rule": self.tokens_rule,
            "limits": [dataclasses.asdict(x) for x in self.limits],
            "table": [dict(dataclasses.asdict(r), tokens_per_s=r.tokens_per_s) for r in self.table],
            "decisions": dict(sorted(self.plan.decisions().items())),
        }

    def report(self, fmt: str = "text") -> str:
        """The table and the choice: ``text``, ``markdown`` or ``json``."""
        if fmt == "json":
            return json.dumps(self.to_dict(), indent=2, sort_keys=True)
        if fmt == "markdown":
            return _markdown(self)
        if fmt == "text":
            return _text(self)
        raise ValueError(f"unknown report format {fmt!r}; expected 'text', 'markdown' or 'json'")

    def plot(self, path):
        """Draw predicted tokens/s against batch size per policy (planner.plots)."""
        return throughput_curve(self, path)


# ------------------------------------------------------------------------------ rendering


def _tps(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.3f}"


def _b(x: int | None) -> str:
    return "-" if x is None else fmt_bytes(x)


def _summary_lines(r: ThroughputResult) -> list[str]:
    plan = r.plan
    lines = [
        f"Chosen: batch size {r.batch_size}"
        + (
            f" x {r.microbatches} micro-batches (global {r.global_batch})"
            if r.microbatches > 1
            else ""
        )
        + f", policy {r.policy}: {_tps(r.tokens_per_s)} tokens/s predicted "
        f"({r.tokens_per_step} tokens per step, {plan.prediction.step_s * r.microbatches * 1e3:.3f} "
        f"ms per step), compiled peak {_b(plan.verification.compiled_device_bytes)} of "
        f"{fmt_bytes(r.budget_bytes)} ({plan.verification.status}; {r.compiler})",
        f"Hardware {r.hardware}; tokens per step: {r.tokens_rule}.",
        f"Batch sizes: {r.search}.",
        f"Traces: {r.retraced}.",
    ]
    return lines


_LIMIT_HEAD = (
    "policy",
    "largest batch that fits",
    "first over",
    "its compiled peak / usable",
    "tokens/s there",
    "best batch",
    "best tokens/s",
)


def _limit_cells(lim: PolicyLimit) -> tuple[str, ...]:
    over = (
        f"{_b(lim.first_over_compiled_bytes)} / {_b(lim.first_over_usable_bytes)}"
        if lim.first_over is not None
        else "-"
    )
    return (
        lim.policy,
        "none" if lim.largest_fitting is None else str(lim.largest_fitting),
        "-" if lim.first_over is None else str(lim.first_over),
        over,
        _tps(lim.tokens_per_s_at_largest),
        "-" if lim.best_batch_size is None else str(lim.best_batch_size),
        _tps(lim.best_tokens_per_s),
    )


_ROW_HEAD = (
    "batch",
    "n",
    "policy",
    "step ms",
    "predicted peak",
    "compiled peak",
    "usable",
    "fits",
    "tokens/s",
)


def _row_cells(x: ThroughputRow) -> tuple[str, ...]:
    pol = x.policy if x.chosen in (x.policy, "none") else f"{x.policy} ({x.chosen})"
    return (
        str(x.batch_size),
        str(x.microbatches),
        pol,
        _ms(x.predicted_step_s),
        _b(x.predicted_peak_bytes),
        _b(x.compiled_peak_bytes),
        fmt_bytes(x.usable_bytes),
        "yes" if x.fits else "no",
        _tps(x.tokens_per_s) if x.fits else f"({_tps(x.tokens_per_s)})",
    )


def _text(r: ThroughputResult) -> str:
    import io

    from rich.console import Console
    from rich.table import Table

    buf = io.StringIO()
    con = Console(file=buf, width=140, force_terminal=False, force_jupyter=False, color_system=None)
    for line in _summary_lines(r):
        con.print(line, highlight=False)
    t = Table(title="Where each policy stops fitting (compiled) and where it does best")
    for c in _LIMIT_HEAD:
        t.add_column(c, overflow="fold")
    for lim in r.limits:
        t.add_row(*_limit_cells(lim))
    con.print(t)
    t = Table(
        title="Every batch size and policy (predicted tokens/s; in parentheses: does not fit)"
    )
    for c in _ROW_HEAD:
        t.add_column(c, overflow="fold")
    for x in r.table:
        t.add_row(*_row_cells(x))
    con.print(t)
    con.print(f"Compiled figures by: {r.compiler}", highlight=False)
    return buf.getvalue()


def _markdown(r: ThroughputResult) -> str:
    def table(head, rows):
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
        return out

    lines = ["# Throughput plan", ""]
    lines += [f"- {x}" for x in _summary_lines(r)]
    lines += ["", "## Where each policy stops fitting", ""]
    lines += table(_LIMIT_HEAD, [_limit_cells(x) for x in r.limits])
    lines += ["", "## Every batch size and policy", ""]
    lines += table(_ROW_HEAD, [_row_cells(x) for x in r.table])
    lines += ["", f"Compiled figures by: {r.compiler}.", ""]
    return "\n".join(lines)
