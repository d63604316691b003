"""Where a plan's planning time went, as the report shows it: the plan's timings summed per
stage (:func:`planning_time`), and the seconds a compilation cache can keep
(:func:`compile_seconds`)."""

from __future__ import annotations

# How plan.timings' labels (session.py) group into the report's stages.
_TIME_STAGES = (
    ("trace + anchor compiles", "trace stage (once per session)"),
    ("graph", "graph"),
    ("cost (", "cost model"),
    ("solve (", "CP-SAT solves"),
    ("verify (stock ", "stock policies' verify compiles (waiting for those compiled beside)"),
    ("verify (", "the plan's verify compiles"),
    ("lower ", "stock policies traced and lowered (compiled beside the plan)"),
    ("compile ", "stock policies compiled at once"),
    ("numerics check", "numerics check"),
)


def compile_seconds(timings) -> float:
    """The seconds of a plan's timings that a compilation cache can keep: the trace stage
    (its anchors and probes) and every verify or stock compile."""
    stages = ("trace + anchor compiles", "verify (", "compile ")
    return sum(s for label, s in timings if label.startswith(stages))


def planning_time(timings, trace_timings=()) -> tuple[tuple[str, float, int], ...]:
    """Where the time of a plan went: ``timings`` (Plan.timings: (label, wall s) of the
    session's stages in order, none overlapping) summed per stage of ``_TIME_STAGES``,
    first-seen order, with how many timings each sums; the trace stage's own parts
    (Trace.timings) after it, their names indented by two spaces. Compiles run beside the
    planning thread count where it waits for them."""
    out: dict[str, list] = {}
    for label, s in timings:
        stage = next((name for pre, name in _TIME_STAGES if label.startswith(pre)), label)
        got = out.setdefault(stage, [0.0, 0])
        got[0] += s
        got[1] += 1
    rows = []
    for stage, (s, n) in out.items():
        rows.append((stage, s, n))
        if stage == _TIME_STAGES[0][1]:
            rows += [("  " + what, t, 1) for what, t in trace_timings]
    return tuple(rows)
