"""Where a plan's planning time went, as the report shows it: the plan's timings summed per
stage (:func:`planning_time`), the seconds a compilation cache can keep
(:func:`compile_seconds`), and what the report says of JAX's persistent compilation cache
(:func:`persistent_cache_note`)."""

from __future__ import annotations

import jax

from planner._src.xla.compile_options import persistent_cache_dir

# How plan.timings' labels (session.py) group into the report's stages, and whether a stage's
# seconds are compiles a compilation cache can keep (compile_seconds).
_TIME_STAGES = (
    ("trace + anchor compiles", "trace stage (once per session)", True),
    ("graph", "graph", False),
    ("cost (", "cost model", False),
    ("solve (", "CP-SAT solves", False),
    ("verify (stock ", "stock policies' verify compiles (waiting for those compiled beside)", True),
    ("verify (", "the plan's verify compiles", True),
    ("lower ", "stock policies traced and lowered (compiled beside the plan)", False),
    ("compile ", "stock policies compiled at once", True),
    ("numerics check", "numerics check", False),
)


def compile_seconds(timings) -> float:
    """The seconds of a plan's timings that a compilation cache can keep: the trace stage
    (its anchors and probes) and every verify or stock compile."""
    stages = tuple(prefix for prefix, _, cached in _TIME_STAGES if cached)
    return sum(s for label, s in timings if label.startswith(stages))


def planning_time(timings, trace_timings=()) -> tuple[tuple[str, float, int], ...]:
    """Where the time of a plan went: ``timings`` (Plan.timings: (label, wall s) of the
    session's stages in order, none overlapping) summed per stage of ``_TIME_STAGES``,
    first-seen order, with how many timings each sums; the trace stage's own parts
    (Trace.timings) after it, their names indented by two spaces. Compiles run beside the
    planning thread count where it waits for them."""
    out: dict[str, list] = {}
    for label, s in timings:
        stage = next((name for pre, name, _ in _TIME_STAGES if label.startswith(pre)), label)
        got = out.setdefault(stage, [0.0, 0])
        got[0] += s
        got[1] += 1
    rows = []
    for stage, (s, n) in out.items():
        rows.append((stage, s, n))
        if stage == _TIME_STAGES[0][1]:
            rows += [("  " + what, t, 1) for what, t in trace_timings]
    return tuple(rows)


# Below this many seconds of compiles a plan gains too little from a cache to be told about
# one; JAX's own threshold for keeping one compile is jax_persistent_cache_min_compile_time_secs.
_OFFER_CACHE_S = 1.0


def persistent_cache_note(compile_s: float) -> str:
    """What the report says of JAX's persistent compilation cache, for a plan whose trace
    stage and compiles took ``compile_s`` seconds: where it keeps them when the user set one;
    when not, the one line that keeps them for the next process (the planner never sets it:
    it is the user's configuration); "" for a plan whose compiles took under a second."""
    d = persistent_cache_dir()
    least = getattr(jax.config, "jax_persistent_cache_min_compile_time_secs", None)
    kept = f" (compiles of at least {least:g} s: jax_persistent_cache_min_compile_time_secs)"
    if d is not None:
        return f"Compilation cache: JAX's persistent cache keeps these compiles in {d}" + (
            kept if least else ""
        )
    if compile_s < _OFFER_CACHE_S:
        return ""
    return (
        "Compilation cache: JAX's persistent cache is off, so a new process compiles these "
        f"again ({compile_s:.1f} s here); to keep them, before planning: "
        'jax.config.update("jax_compilation_cache_dir", "/path/to/cache")'
        + (
            " (on a GPU it keeps XLA's autotune results too)"
            if jax.default_backend() == "gpu"
            else ""
        )
    )
