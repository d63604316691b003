"""Which emitted policy each checkpoint call site of the step gets, as the user's code would
pass it: its layer group's where the plan decides groups apart, else the one policy. The
verify compile, the level-1 replay and the numerics runs bind the step's regions with it."""

from __future__ import annotations

from planner._src.graph import LivenessGraph


def region_policy(region, policy, policies):
    """The policy a region's call site gets: its layer group's, else the one policy."""
    return policies[region.group] if policies and region.group is not None else policy


def policy_maker(graph: LivenessGraph, policy, policies: tuple = ()):
    """``make(region_id, region)``: the emitted policy each checkpoint call site gets, as the
    user's code would pass it (its layer group's, else the one policy); the trace stage
    recorded which adapter region ids (bind order) each region's call sites had."""
    by_bind = {
        b: region_policy(rg.region, policy, policies)
        for rg in graph.regions
        for b in rg.region.bind_ids
    }
    fallback = policy if policy is not None else policies[0]
    return lambda rid, r: by_bind.get(rid, fallback)
