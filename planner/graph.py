"""Stage 2, graph: the liveness graph of each region's activations, and the decision classes.

Per region, a networkx DiGraph whose nodes are the region's forward equations (candidates)
and whose edges say which output feeds which equation: what a recompute needs. Each node
carries its bytes, its birth (position in the forward pass), its last forward use, and
whether the backward pass reads it.

Decisions are made per *class*: a checkpoint policy is called as ``policy(prim, *avals,
**params)`` and cannot tell two equations with the same signature apart, so they share a
decision. Classes are global across regions because one emitted policy serves every region
the user wraps with it.
"""

from __future__ import annotations

import dataclasses
import networkx as nx

from planner.trace import Candidate, Region, Trace


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TensorClass:
    """A set of candidates the policy cannot tell apart, so one decision covers them all."""

    key: str                                  # the policy signature
    label: str                                # for people: checkpoint name or primitive[shape]
    name: str | None                          # checkpoint_name when the class is a name
    members: tuple[tuple[int, int], ...]      # (region id, candidate index)
    nbytes_per_trip: int                      # bytes of all members in one trip of their regions
    needed_members: int                       # members the backward pass reads


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RegionGraph:
    region: Region
    graph: nx.DiGraph = dataclasses.field(compare=False)   # candidate index -> consumers
    last_forward_use: tuple[int, ...]         # per candidate: index of its last forward reader


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LivenessGraph:
    regions: tuple[RegionGraph, ...]
    classes: tuple[TensorClass, ...]



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
            members.setdefault(c.signature, []).append((r.id, c.index))
            first.setdefault(c.signature, c)

    by_region = {rg.region.id: rg.region for rg in regions}
    classes = []
    # Labels are for people and must be unique: two unnamed classes of the same primitive and
    # shape (different dtype or parameters) get their source line appended.
    counts: dict[str, int] = {}
    for key in members:
        counts[_label(first[key])] = counts.get(_label(first[key]), 0) + 1
    for key, mem in members.items():
        cands = [by_region[rid].candidates[i] for rid, i in mem]
        label = _label(first[key])
        if counts[label] > 1:
            where = first[key].source.rsplit("/", 1)[-1].split(" (")[0] or first[key].dtype
            label = f"{label}@{where}"
        classes.append(TensorClass(
            key=key, label=label, name=first[key].name, members=tuple(mem),
            nbytes_per_trip=sum(c.nbytes for c in cands),
            needed_members=sum(1 for c in cands if c.needed),
        ))
    seen: dict[str, int] = {}
    unique = []
    for c in classes:  # still equal (same line too): number them in trace order
        seen[c.label] = seen.get(c.label, 0) + 1
        unique.append(c if seen[c.label] == 1 else
                      dataclasses.replace(c, label=f"{c.label}#{seen[c.label]}"))
    return LivenessGraph(regions=tuple(regions), classes=tuple(unique))
