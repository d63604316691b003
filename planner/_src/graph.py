"""Stage 2, graph: the liveness graph of each region's activations, and the decision classes.

Per region, a networkx DiGraph whose nodes are the region's forward equations (candidates)
and whose edges ``u -> v`` say that ``v`` reads ``u``'s output: what a recompute needs. The
later stages read the dependencies from it and nowhere else: the cost model and the solver
(``RegionGraph.reads``: a recomputed value needs its inputs; ``possibly_needed``: what the
backward pass can ever need), the simulator (the recompute walk) and the report. Each node
carries its bytes, whether the backward pass reads it and, as ``last_forward_use``, the
last forward equation that reads it.

Decisions are made per *class*: a checkpoint policy is called as ``policy(prim, *avals,
**params)`` and cannot tell two equations with the same signature apart, so they share a
decision. Classes are global across regions because one emitted policy serves every region
the user wraps with it, except with layer groups: a region of one call site that carries a
``group`` gets its own classes (key ``g<group>|<signature>``, see :func:`class_key`), because
that call site gets its own policy (``plan.policies[group]``).

A class is *forced* to be recomputed when the policy cannot keep it as the model would
count it: its equation is a higher-order one (a ``cond``, a loop: JAX's partial evaluation
asks the policy about the equations inside, never about their outputs, and recomputes the
whole construct from its operands), or its signature also occurs inside one (keeping it
would keep copies inside the construct the model does not see).
"""

from __future__ import annotations

import dataclasses
import re

import networkx as nx

from planner._src.types import Candidate, Region, TensorClass, Trace

# Primitives whose output is a view of their one input: no arithmetic, and no buffer of their
# own in XLA (a bitcast), so recomputing one whose input is held allocates nothing.
VIEWS = frozenset({"name", "reshape", "squeeze", "expand_dims", "copy", "copy_p"})


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RegionGraph:
    """One region and the dependency graph of its forward equations."""

    region: Region
    graph: nx.DiGraph = dataclasses.field(compare=False)  # candidate index -> its readers
    possibly_needed: frozenset[int]  # read by the backward pass, or by a recompute of it
    last_forward_use: tuple[int, ...]  # per candidate: index of its last forward reader
    # per candidate: its parallel branch (``parallel_branches``), -1 where shared; () for none
    branch: tuple[int, ...] = ()

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        return self.region.candidates

    def reads(self, i: int) -> tuple[int, ...]:
        """The candidates whose outputs candidate ``i`` reads (what its recompute needs)."""
        return tuple(sorted(self.graph.predecessors(i)))

    def readers(self, i: int) -> tuple[int, ...]:
        """The candidates that read candidate ``i``'s outputs."""
        return tuple(sorted(self.graph.successors(i)))

    def reads_inputs(self, i: int) -> tuple[int, ...]:
        """The region inputs candidate ``i`` reads."""
        return self.graph.nodes[i]["input_reads"]

    def view_of(self, i: int) -> tuple[str, int] | None:
        """What candidate ``i`` is a view of (``VIEWS``, one operand): ``("candidate", u)`` or
        ``("input", k)``; None if it is not a view. A recomputed view of a value the backward
        pass holds anyway (saved, reloaded, a region input) is the same buffer: on the CPU
        test model, counting checkpoint_name(saved dot) again put the working set 3-6 MB
        (8.8% of the step) over the compiled figure for dots_with_no_batch_dims_saveable."""
        return self.graph.nodes[i]["view_of"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LivenessGraph:
    regions: tuple[RegionGraph, ...]
    classes: tuple[TensorClass, ...]

    def forced(self) -> dict[str, str]:
        """Class key -> the decision it cannot escape (module docstring)."""
        return {c.key: c.forced for c in self.classes if c.forced}


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


def region_graph(r: Region) -> RegionGraph:
    """The dependency graph of one region's candidates."""
    g = nx.DiGraph()
    for c in r.candidates:
        reads = len(c.inputs) + len(c.input_reads)
        view = None
        if c.primitive in VIEWS and c.decidable and not c.effectful and reads == 1:
            view = ("candidate", c.inputs[0]) if c.inputs else ("input", c.input_reads[0])
        g.add_node(
            c.index,
            nbytes=c.nbytes,
            needed=c.needed,
            signature=c.signature,
            input_reads=tuple(c.input_reads),
            view_of=view,
        )
    for c in r.candidates:
        for u in c.inputs:
            g.add_edge(u, c.index)
    if not nx.is_directed_acyclic_graph(g):  # a jaxpr is in SSA form: this cannot happen
        raise AssertionError(f"region {r.id} has a cyclic dependency graph")
    needed = {c.index for c in r.candidates if c.needed}
    possible = set(needed)
    for i in needed:
        possible |= nx.ancestors(g, i)
    last_use = tuple(max(g.successors(c.index), default=c.index) for c in r.candidates)
    return RegionGraph(
        region=r,
        graph=g,
        possibly_needed=frozenset(possible),
        last_forward_use=last_use,
        branch=parallel_branches(r, g),
    )


# Joins whose backward pass reads none of their operands: the cotangent of each operand is
# the join's own (negated for ``sub``), so each operand's backward can run on its own.
ADDITIVE = frozenset({"add", "add_any", "sub"})


def parallel_branches(r: Region, g: nx.DiGraph) -> tuple[int, ...]:
    """Per candidate: the parallel branch of the region it belongs to, -1 where it is shared;
    ``()`` when the region has fewer than two branches (the working set is then one sum).

    The region's output is a tree of additive joins (``ADDITIVE``: ``x + attn(h) + mlp(h)``
    of a parallel-residual layer) read by no candidate; its leaves are the branches' outputs.
    A candidate is in branch ``k`` when it is an ancestor of leaf ``k`` and of no other leaf
    (the attention's scores, the MLP's activations), or when the backward pass alone reads it
    (no forward reader: a factor of a derivative) and it reads branch ``k`` and no other; an
    ancestor of several leaves (the norm ``h``, the residual stream ``x``) is shared. The
    backward pass of one branch then needs nothing of another branch: XLA recomputes and
    back-propagates one branch, frees it, then the next, so a branch's recomputed values are
    live only while that branch runs (docs/cost-model.md, W_r). A sequential layer
    (``x1 = x + attn(h1)``, ``x1 + mlp(norm(x1))``) has one branch: ``x1`` is an ancestor of
    the MLP's leaf, so the attention is shared, as it is in XLA's program (the MLP's inputs
    are recomputed through the attention). Branches without bytes do not count.
    XLA:CPU's full-remat backward of tests/zoo/parallel_residual.py holds the MLP branch's
    recomputed values at its peak and none of the attention's score-sized ones (measured:
    benchmarks/results/memory-model-2026-12-05.md).
    """
    cands = {c.index: c for c in r.candidates}
    roots = [
        i
        for i, c in cands.items()
        if c.primitive in ADDITIVE and not c.needed and not c.effectful and g.out_degree(i) == 0
    ]
    if len(roots) != 1:
        return ()
    tree, leaves, stack = set(), [], [roots[0]]
    while stack:
        j = stack.pop()
        tree.add(j)
        for u in sorted(g.predecessors(j)):
            if cands[u].primitive in ADDITIVE and set(g.successors(u)) <= tree | {j}:
                stack.append(u)
            elif u not in leaves:
                leaves.append(u)
    leaves.sort()
    owners: dict[int, set[int]] = {}
    for k, leaf in enumerate(leaves):
        for v in nx.ancestors(g, leaf) | {leaf}:
            owners.setdefault(v, set()).add(k)
    branch = {i: -1 for i in cands}
    for v, ks in owners.items():
        if len(ks) == 1:
            branch[v] = next(iter(ks))
    for i in sorted(cands):  # read by the backward pass alone: with the branch it reads
        if i in tree or i in owners:
            continue
        ks = {branch[u] for u in g.predecessors(i)} - {-1}
        if len(ks) > 1:  # ties two branches together: one sum, as before
            return ()
        branch[i] = ks.pop() if ks else -1
    sized = {k for i, k in branch.items() if k >= 0 and cands[i].nbytes > 0}
    if len(sized) < 2:
        return ()
    return tuple(branch[c.index] if branch[c.index] in sized else -1 for c in r.candidates)


# Why a class is forced to be recomputed under PlanOptions.decide_names (session._names_only;
# baselines.applicable reads it to leave out stock policies that keep such a class).
NAMES_ONLY_WHY = (
    "not one of the names decided (PlanOptions.decide_names): a name-based policy such as "
    "MaxText's remat_policy: custom recomputes every tensor it does not list"
)


def _forced(cands: list[Candidate], inner: set[str]) -> tuple[str | None, str]:
    """The decision a class's members force, and why (module docstring)."""
    for c in cands:
        if not c.decidable and not c.effectful:
            return "remat", (
                f"{c.primitive} is a higher-order equation: a checkpoint policy "
                "decides the equations inside it, never its outputs, so JAX "
                "recomputes it from its operands"
            )
    if cands and cands[0].signature in inner:
        return "remat", (
            "the same signature occurs inside a cond or loop body of the region, "
            "where a policy keeping it would keep copies the plan does not count"
        )
    return None, ""


def build_graph(trace: Trace) -> LivenessGraph:
    regions = [region_graph(r) for r in trace.regions]
    members: dict[str, list[tuple[int, int]]] = {}
    first: dict[str, Candidate] = {}
    inner: set[str] = set()
    for rg in regions:
        r = rg.region
        inner |= set(r.inner_signatures)
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
        forced, why = _forced(cands, inner)
        classes.append(
            TensorClass(
                key=key,
                label=label,
                name=first[key].name,
                members=tuple(mem),
                nbytes_per_trip=sum(c.nbytes for c in cands),
                needed_members=sum(1 for c in cands if c.needed),
                group=group,
                signature=signature,
                forced=forced,
                forced_why=why,
            )
        )
    seen: dict[str, int] = {}
    unique = []
    for c in classes:  # still equal (same line too): number them in trace order
        seen[c.label] = seen.get(c.label, 0) + 1
        unique.append(
            c if seen[c.label] == 1 else dataclasses.replace(c, label=f"{c.label}#{seen[c.label]}")
        )
    return LivenessGraph(regions=tuple(regions), classes=tuple(unique))
