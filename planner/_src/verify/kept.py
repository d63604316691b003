"""Level 1 of the verify stage: JAX's own residual choice (partial evaluation) under the
emitted policy, replayed on every region the verify trace bound, against the bytes the plan
keeps there; and the plan's graph as the traced program sees it (traced candidates, global
sizes), which level 2 compares with too."""

from __future__ import annotations

import dataclasses
from collections import Counter

from planner._src.cost import evaluate
from planner._src.graph import LivenessGraph, class_key
from planner._src.types import Assignment, Check
from planner._src.xla import adapter

CHECK_KEPT = "JAX keeps the planned residuals"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class KeptCheck:
    """Level 1 for one region: JAX's residual choice under the emitted policy, replayed,
    against the plan."""

    check: Check
    # Classes the plan keeps (saves or offloads) of which JAX keeps nothing of their shape
    # in this region: the plan's saving rests on them, and it is wrong (the session solves
    # again with them recomputed).
    not_kept: tuple[str, ...] = ()


def kept_checks(
    graph: LivenessGraph, cost, assignment: Assignment, bound, policy_of, *, global_sizes: bool
) -> list[KeptCheck]:
    """Level 1: replay JAX's own residual selection (``partial_eval_jaxpr_custom``) with the
    emitted policy on every region the verify trace bound, and compare the bytes JAX keeps,
    in device and in host memory, with what the plan counts for that region (the traced
    view, at global sizes where the step is sharded: the jaxpr's avals are global)."""
    g = as_traced(graph)
    if global_sizes:
        g = at_global_sizes(g)
    pred = evaluate(cost, g, assignment)
    by_bind = {br.region_id: br for br in bound}
    out = []
    for rg, rp in zip(g.regions, pred.regions):
        r = rg.region
        br = next((by_bind[b] for b in r.bind_ids if b in by_bind), None)
        if br is None:
            continue
        kept = adapter.kept_by_policy(br, policy_of(r))
        want_dev = rp.device_residual_bytes + rp.invariant_residual_bytes
        want_host = rp.host_residual_bytes + rp.invariant_host_bytes
        ok = kept.device_bytes == want_dev and kept.host_bytes == want_host
        where = f"region {r.id}" + ("" if r.group is None else f" (layer group {r.group})")
        not_kept = ()
        if ok:
            detail = (
                f"{where}: JAX keeps {kept.device_bytes:,} device and {kept.host_bytes:,} "
                "host bytes per trip, as planned"
            )
        else:
            shapes = Counter((tuple(s), d) for s, d, _ in kept.residuals)
            planned = {}
            d = assignment.as_dict()
            for c in r.candidates:
                key = class_key(r, c)
                if (
                    rp.needed[c.index]
                    and c.decidable
                    and not c.effectful
                    and d.get(key, "remat") != "remat"
                ):
                    planned.setdefault(key, []).append((tuple(c.shape), c.dtype))
            not_kept = tuple(
                sorted(k for k, avals in planned.items() if not any(shapes[a] for a in avals))
            )
            labels = {c.key: c.label for c in graph.classes}
            detail = (
                f"{where}: JAX keeps {kept.device_bytes:,} device and "
                f"{kept.host_bytes:,} host bytes per trip where the plan counts "
                f"{want_dev:,} and {want_host:,}"
                + (
                    f"; kept by the plan, not by JAX: {[labels.get(k, k) for k in not_kept]}"
                    if not_kept
                    else ""
                )
            )
        out.append(KeptCheck(check=Check(name=CHECK_KEPT, ok=ok, detail=detail), not_kept=not_kept))
    return out


def as_traced(graph: LivenessGraph) -> LivenessGraph:
    """``graph`` with each region's candidates as the traced program keeps them
    (``Region.traced_candidates``); ``graph`` itself where no region has another view."""
    if all(rg.region.traced_candidates is None for rg in graph.regions):
        return graph
    regions = tuple(
        rg
        if rg.region.traced_candidates is None
        else dataclasses.replace(
            rg, region=dataclasses.replace(rg.region, candidates=rg.region.traced_candidates)
        )
        for rg in graph.regions
    )
    return dataclasses.replace(graph, regions=regions)


def at_global_sizes(graph: LivenessGraph) -> LivenessGraph:
    """``graph`` with every candidate and region input at its global (jaxpr) size, for
    checks against the traced jaxpr of a sharded step (see trace.py on sharded steps)."""
    regions = tuple(
        dataclasses.replace(
            rg,
            region=dataclasses.replace(
                rg.region,
                candidates=tuple(
                    dataclasses.replace(c, nbytes=c.global_nbytes or c.nbytes)
                    for c in rg.region.candidates
                ),
                inputs=tuple(
                    dataclasses.replace(i, nbytes=i.global_nbytes or i.nbytes)
                    for i in rg.region.inputs
                ),
            ),
        )
        for rg in graph.regions
    )
    return dataclasses.replace(graph, regions=regions)
