"""Interval arithmetic on half-open ``[start, end)`` intervals (pure; times in any unit).

The overlap figures of a device trace are lengths of unions and intersections of event
intervals: ``|U(copies) & U(compute)|`` is the copy time hidden behind compute.
"""

from __future__ import annotations

from collections.abc import Iterable

Interval = tuple[float, float]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same points; empty ones are dropped."""
    out: list[list[float]] = []
    for s, e in sorted((float(s), float(e)) for s, e in intervals if e > s):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def total_length(intervals: Iterable[Interval]) -> float:
    """Length of the union (overlapping intervals count once)."""
    return sum(e - s for s, e in union(intervals))


def intersection(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """U(a) & U(b) as disjoint intervals."""
    ua, ub = union(a), union(b)
    out, i, j = [], 0, 0
    while i < len(ua) and j < len(ub):
        s, e = max(ua[i][0], ub[j][0]), min(ua[i][1], ub[j][1])
        if e > s:
            out.append((s, e))
        if ua[i][1] < ub[j][1]:
            i += 1
        else:
            j += 1
    return out


def intersection_length(a: Iterable[Interval], b: Iterable[Interval]) -> float:
    """|U(a) & U(b)|: e.g. the copy time that ran while some compute ran."""
    return sum(e - s for s, e in intersection(a, b))


def exposed_length(copies: Iterable[Interval], compute: Iterable[Interval]) -> float:
    """|U(copies) - U(compute)|: copy time during which no compute ran."""
    copies = list(copies)
    return total_length(copies) - intersection_length(copies, compute)


def difference(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """U(a) - U(b) as disjoint intervals (e.g. the exposed parts of the copies)."""
    out = []
    ub = union(b)
    for s, e in union(a):
        cur = s
        for bs, be in ub:
            if be <= cur or bs >= e:
                continue
            if bs > cur:
                out.append((cur, bs))
            cur = max(cur, be)
        if cur < e:
            out.append((cur, e))
    return out


def clip(intervals: Iterable[Interval], lo: float, hi: float) -> list[Interval]:
    """The parts of `intervals` inside [lo, hi)."""
    return [(max(s, lo), min(e, hi)) for s, e in intervals if min(e, hi) > max(s, lo)]
