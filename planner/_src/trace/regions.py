"""Regions at several call sites: identical bodies merged into one region (multiplicities,
call sites and HLO recompute prices combined), and the key under which the user's code can
give a call site its own policy."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from planner._src.types import Region, Trace
from planner._src.xla import adapter


def region_structure_key(jaxpr) -> str:
    # Two call sites with the same body text are the same region for the planner
    # (an unrolled Python loop over identical layers binds one region per layer).
    return str(jaxpr)


def policy_text(policy) -> str:
    """How the report names the policy the user's code passed: a dataclass policy's repr, a
    closure by the function that made it (``save_only_these_names`` on JAX 0.12, whose
    policies are closures; JAX 0.10 returns a ``SaveOnlyTheseNames`` object)."""
    if policy is None:
        return "nothing_saveable (default)"
    if dataclasses.is_dataclass(policy):
        return repr(policy)
    name = getattr(policy, "__qualname__", None) or type(policy).__name__
    return name.split(".<locals>.")[0]


def merge_regions(sites: Sequence[Region]) -> tuple[Region, ...]:
    """Identical regions (same body) at several call sites merged into one: multiplicities
    and call sites summed, one decision per class for all of them (group None)."""
    merged: dict[str, Region] = {}
    for r in sites:
        key = r.body or f"site{r.id}"
        if key in merged:
            m = merged[key]
            merged[key] = dataclasses.replace(
                m,
                hlo_recompute_s=_merged_prices(m, r),
                multiplicity=m.multiplicity + r.multiplicity,
                scan_unroll=max(m.scan_unroll, r.scan_unroll),
                in_trip=min(m.in_trip, r.in_trip),  # fewer trips: more held at once
                call_sites=m.call_sites + r.call_sites,
                bind_ids=m.bind_ids + r.bind_ids,
            )
        else:
            merged[key] = dataclasses.replace(r, id=len(merged), group=None)
    return tuple(merged.values())


def _merged_prices(m: Region, r: Region) -> tuple[float | None, ...] | None:
    """HLO recompute prices of two merged call sites (one body, per trip): their mean
    weighted by trips; None unless both were priced (the cost stage then uses the library's
    for the merged region: one price for all its trips)."""
    a, b = m.hlo_recompute_s, r.hlo_recompute_s
    if a is None or b is None or len(a) != len(b):
        return None
    wa, wb = m.multiplicity, r.multiplicity
    return tuple(
        None if x is None or y is None else (wa * x + wb * y) / (wa + wb) for x, y in zip(a, b)
    )


def merge_call_sites(trace: Trace) -> Trace:
    """``trace`` with its per-call-site regions merged (what ``trace_step`` returns by default)."""
    if all(r.group is None for r in trace.regions):
        return trace
    return dataclasses.replace(trace, regions=merge_regions(trace.regions))


def site_key(br: adapter.BoundRegion) -> str:
    """Where the user's code can give a call site its own policy: the source line that bound
    it and, when the code passed a policy of its own, that policy object's identity. Every
    layer of a Python loop over one ``jax.checkpoint``-ed function binds from one line with
    one policy, so they share a key: the user's code gives them one policy."""
    pol = br.user_policy
    return br.source + ("" if pol is None else f"|policy@{id(pol):x}")
