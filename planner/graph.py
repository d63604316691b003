"""Stage 2, graph: the liveness graph of each region's activations, and the decision classes.

Per region, a networkx DiGraph whose nodes are the region's forward equations (candidates)
and whose edges say which output feeds which equation: what a recompute needs. Each node
carries its bytes, its birth (position in the forward pass), its last forward use, and
whether the backward pass reads it.

Decisions are made per *class*: a checkpoint policy is called as ``policy(prim, *avals,
**params)`` and cannot tell two equations with the same signature apart, so they share a
decision. Classes are global across regions because one emitted policy serves every region
the user wraps with it, except with layer groups: a region of one call site that carries a
``group`` gets its own classes (key ``g<group>|<signature>``, see :func:`class_key`), because
that call site gets its own policy (``plan.policies[group]``).
"""

from __future__ import annotations

import dataclasses
import re

import networkx as nx

from planner.trace import Candidate, Region, Trace


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TensorClass:
    """A set of candidates the policy cannot tell apart, so one decision covers them all."""

    key: str                                  # the policy signature (g<group>|signature per group)
    label: str                                # for people: checkpoint name or primitive[shape]
    name: str | None                          # checkpoint_name when the class is a name
    members: tuple[tuple[int, int], ...]      # (region id, candidate index)
    nbytes_per_trip: int                      # bytes of all members in one trip of their regions
    needed_members: int                       # members the backward pass reads
    group: int | None = None                  # the layer group (call site) it belongs to
    signature: str = ""                       # what the policy sees (the key without its group)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RegionGraph:
    region: Region
    graph: nx.DiGraph = dataclasses.field(compare=False)   # candidate index -> consumers
    last_forward_use: tuple[int, ...]         # per candidate: index of its last forward reader


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LivenessGraph:
    regions: tuple[RegionGraph, ...]
    classes: tuple[TensorClass, ...]



_GROUP_KEY = re.compile(r"g(\d+)\|(.*)", re.DOTALL)


def class_key(region: Region, c: Candidate) -> str:
    """The class (assignment key) of candidate ``c`` of ``region``: its policy signature, per
    layer group when the region is one call site decided on its own."""
    return c.signature if region.group is None else f"g{region.group}|{c.signature}"


def split_key(key: str) -> tuple[int | None, str]:
    """``(group, signature)`` of a class key (group None for keys shared by all regions)."""
    m = _GROUP_KEY.fullmatch(key)
    return (int(m.group(1)), m.group(2)) if m else (None, key)


def num_groups(keys) -> int:
    """How many layer groups the class keys name (0: none, the plan is uniform)."""
    return 1 + max((g for g, _ in map(split_key, keys) if g is not None), default=-1)


def _label(c: Candidate) -> str:
    if c.name:
        return c.name
    dims = ",".join(str(d) for d in c.shape)
    return f"{c.primitive}[{dims}]"


def build_graph(trace: Trace) -> LivenessGraph:
    regions = []
    members: dict[str, list[tuple[int, int]]] = {}
    first: dict[str, Candidate] = {}
    for r in trace.regions:
        g = nx.DiGraph()
        for c in r.candidates:
            g.add_node(c.index, nbytes=c.nbytes, needed=c.needed, signature=c.signature)
        for c in r.candidates:
            for u in c.inputs:
                g.add_edge(u, c.index)
        last_use = tuple(max(g.successors(c.index), default=c.index) for c in r.candidates)
        if not nx.is_directed_acyclic_graph(g):  # a jaxpr is in SSA form: this cannot happen
            raise AssertionError(f"region {r.id} has a cyclic dependency graph")
        regions.append(RegionGraph(region=r, graph=g, last_forward_use=last_use))
        for c in r.candidates:
            members.setdefault(class_key(r, c), []).append((r.id, c.index))
            first.setdefault(class_key(r, c), c)

    by_region = {rg.region.id: rg.region for rg in regions}
    classes = []
    # Labels are for people and must be unique: two unnamed classes of the same primitive and
    # shape (different dtype or parameters) get their source line appended.
    # Per group: the same tensor in two groups is two classes, labelled "... [group g]".
    counts: dict[tuple, int] = {}
    for key in members:
        ck = (split_key(key)[0], _label(first[key]))
        counts[ck] = counts.get(ck, 0) + 1
    for key, mem in members.items():
        cands = [by_region[rid].candidates[i] for rid, i in mem]
        group, signature = split_key(key)
        label = _label(first[key])
        if counts[(group, label)] > 1:
            where = first[key].source.rsplit("/", 1)[-1].split(" (")[0] or first[key].dtype
            label = f"{label}@{where}"
        if group is not None:
            label = f"{label} [group {group}]"
        classes.append(TensorClass(
            key=key, label=label, name=first[key].name, members=tuple(mem),
            nbytes_per_trip=sum(c.nbytes for c in cands),
            needed_members=sum(1 for c in cands if c.needed),
            group=group, signature=signature,
        ))
    seen: dict[str, int] = {}
    unique = []
    for c in classes:  # still equal (same line too): number them in trace order
        seen[c.label] = seen.get(c.label, 0) + 1
        unique.append(c if seen[c.label] == 1 else
                      dataclasses.replace(c, label=f"{c.label}#{seen[c.label]}"))
    return LivenessGraph(regions=tuple(regions), classes=tuple(unique))
