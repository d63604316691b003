"""Stage 4, solve: one CP-SAT model choosing save / remat / offload per class.

The model encodes exactly the formulas of ``docs/cost-model.md`` (read its docstring first); every
variable family and constraint family below says what it stands for. Four lexicographic
phases: first the fastest predicted step under the budget; then, at that step time, the
fewest bytes sent to the host; then, at both, the smallest peak; then the fewest residual
bytes (ties between saving and recomputing free tensors). Deterministic: one search worker
and a fixed seed, so the same inputs give the same plan.

Layer groups: when the trace keeps each checkpoint call site as its own region (``group``
set), the classes are per (group, signature) (graph.class_key), so the variables ``x`` below
are per group and class while every constraint stays per region; ``uniform=True`` ties the
groups together (the best single policy for all of them, which a per-group plan must beat).

Integer scaling: bytes are counted in KiB rounded *up* for what a plan uses and *down* for
the budget, so rounding can only make a plan more conservative; times are in nanoseconds.
"""

from __future__ import annotations

import dataclasses
import math
import time

from ortools.sat.python import cp_model

import cost_models as cm
from planner._src.cost.predict import (
    REDUCTIONS,
    evaluate,
    has_view,
    hiding_models,
    regions_in_order,
)
from planner._src.errors import InfeasibleBudgetError, SolverError
from planner._src.graph import VIEWS, LivenessGraph, class_key
from planner._src.solve.state import add_to_model
from planner._src.types import Assignment, CostModel, Solution, SolverOptions
from planner._src.units import gb_at_least

__all__ = [
    "Solution",
    "SolverOptions",
    "check_solution",
    "min_feasible_bytes",
    "min_peak_assignment",
    "solve_assignment",
]

KIB = 1024
NS = 1e9  # nanoseconds per second


def _any_both(m, r, readers) -> object:
    """A 0/1 term at least ``r AND (any of readers)`` (a lower bound suffices: it only adds
    memory, so the solver keeps it at its bound); 0 when no reader can be 1."""
    readers = [x for x in readers if not (isinstance(x, int) and not x)]
    if not readers or (isinstance(r, int) and not r):
        return 0
    if isinstance(r, int) and all(isinstance(x, int) for x in readers):
        return 1
    y = m.NewBoolVar("reduced")
    for x in readers:
        m.Add(y >= r + x - 1)
    return y


def _kib_up(b: float) -> int:
    return int(math.ceil(b / KIB))


def _ns(t: float) -> int:
    return int(round(t * NS))


class _Model:
    """The CP-SAT model for one (graph, cost model, budget)."""

    def __init__(
        self,
        graph: LivenessGraph,
        cost: CostModel,
        usable_bytes: float | None,
        uniform: bool = False,
    ):
        m = self.cp = cp_model.CpModel()
        decisions = ("save", "remat", "offload") if cost.allow_offload else ("save", "remat")
        self.decisions = decisions
        forced = graph.forced()
        # choose[k, d]: class k takes decision d. One decision per class. With layer groups a
        # class is (group, signature): each group's call site has its own policy, so the same
        # tensor may be kept in one group and recomputed in another.
        self.choose = {}
        for cls in graph.classes:
            for d in decisions:
                self.choose[cls.key, d] = m.NewBoolVar(f"choose[{cls.label}|{d}]")
            m.AddExactlyOne(self.choose[cls.key, d] for d in decisions)
            # A forced class (graph.py: a policy cannot keep it as the model counts it) takes
            # its forced decision.
            if cls.key in forced:
                m.Add(self.choose[cls.key, forced[cls.key]] == 1)
            # A class of a region under scan(unroll > 1) stays on the device: XLA cannot
            # compile its offload (cost.CostModel.no_offload_classes).
            if "offload" in decisions and cls.key in cost.no_offload_classes:
                m.Add(self.choose[cls.key, "offload"] == 0)
        # uniform: every group takes the same decision for the same signature (one policy for
        # all groups), the baseline a per-group plan must beat.
        if uniform:
            first = {}
            for cls in graph.classes:
                if cls.group is None:
                    continue
                other = first.setdefault(cls.signature, cls.key)
                for d in decisions:
                    if other != cls.key:
                        m.Add(self.choose[cls.key, d] == self.choose[other, d])

        residual_terms, host_terms, time_terms, ws_terms = [], [], [], []
        tie_terms = []  # phase 4: residual bytes, weighted by forward position (see there)
        for rg, rc in zip(graph.regions, cost.regions):
            cands = rg.region.candidates
            trips = rc.multiplicity  # executions per step: the time terms
            live = rc.live  # executions whose residuals are held at once: the memory terms
            # Which candidates can ever be needed: the needed ones and their ancestors.
            possible = rg.possibly_needed

            def dec(c, d, rg=rg):
                if c.effectful:  # JAX always runs effectful equations forward and keeps them
                    return 1 if d == "save" else 0
                return self.choose[class_key(rg.region, c), d] if d in decisions else 0

            # need[v]: the backward pass reads v, or v feeds a needed recomputed value.
            need = {}
            for c in cands:
                if c.index in possible:
                    need[c.index] = (
                        1 if c.needed else m.NewBoolVar(f"need[{rg.region.id},{c.index}]")
                    )
            # Remat dependency: need[u] >= need[v] AND remat[v] for each input u of v.
            for c in cands:
                if c.index not in need:
                    continue
                r = dec(c, "remat")
                for u in rg.reads(c.index):
                    if isinstance(need[u], int):
                        continue
                    if isinstance(need[c.index], int):
                        if not isinstance(r, int):
                            m.Add(need[u] >= r)
                        elif r:
                            m.Add(need[u] == 1)
                    else:
                        m.Add(need[u] >= need[c.index] + r - 1)

            # both(v, d) = need[v] AND decision d: v is a residual (save/offload) or recomputed.
            # Exact (both bounds): it is read as a benefit too, by held[] below.
            cache = {}

            def both(c, d, need=need, cache=cache):
                if (c.index, d) not in cache:
                    cache[c.index, d] = _both(c, d, need)
                return cache[c.index, d]

            def _both(c, d, need):
                n, x = need[c.index], dec(c, d)
                if isinstance(x, int) and isinstance(n, int):
                    return n * x
                if isinstance(x, int):
                    return n if x else 0
                if isinstance(n, int):
                    return x if n else 0
                y = m.NewBoolVar(f"both[{c.index},{d}]")
                m.Add(y >= n + x - 1)
                m.Add(y <= n)
                m.Add(y <= x)
                return y

            per_trip_kib, invariant_kib, working_kib, extra_ns, offloads = [], [], [], [], []
            # K_r (docs/cost-model.md): the backward trip of a scan copies this share of each saved
            # per-trip residual out of the stacked buffer; not scaled by omega.
            share = cost.slice_copy_share if rg.region.in_scan else 0.0
            slice_kib = []
            # Q_r (docs/cost-model.md): one trip's residuals kept only for its own recompute, freed
            # by it before the trip's working set peaks (KiB rounded down: the peak stays an upper
            # bound of cost.evaluate's)
            trip_freed_kib = []
            # the working-set terms of each parallel branch (graph.parallel_branches): the
            # branches run backward one after another, so the trip holds the largest of them
            branch_kib: dict[int, list] = {}

            def working_of(i, rg=rg, working_kib=working_kib, branch_kib=branch_kib):
                if rg.branch and rg.branch[i] >= 0:
                    return branch_kib.setdefault(rg.branch[i], [])
                return working_kib

            ws_scale = cost.working_set_scale
            # transient: the largest recompute intermediate (read by no gradient), live one at a time.
            transient = m.NewIntVar(0, 1 << 50, f"transient_kib[{rg.region.id}]")
            exposed_fwd = m.NewIntVar(0, 1 << 50, f"exposed_fwd_ns[{rg.region.id}]")
            exposed_bwd = m.NewIntVar(0, 1 << 50, f"exposed_bwd_ns[{rg.region.id}]")
            hide_d2h, hide_h2d = hiding_models(cost)  # per direction: eta, capacity, floor
            # held[v]: v's buffer is in memory without a new allocation in the backward pass:
            # v is kept (saved or reloaded), or it is a recomputed view of a held value or of
            # a region input (cost.held_values). free[v] (<= remat, <= held of its source):
            # a recomputed view that adds nothing to the working set.
            held = {}
            # The recomputed reductions that read each candidate (cost.reduction_operands).
            by_index = {c.index: c for c in cands}
            reducers = {
                u: [v for v in need if by_index[v].primitive in REDUCTIONS and u in rg.reads(v)]
                for u in need
            }
            for c in cands:
                if c.index not in need:
                    continue
                i = c.index
                kib = _kib_up(c.nbytes)
                s = both(c, "save")
                r = both(c, "remat")
                o = both(c, "offload") if "offload" in decisions else 0
                free = 0
                src = rg.view_of(i)
                if src is not None and (not isinstance(r, int) or r):
                    if src[0] == "input":
                        free = r
                    elif src[1] in held:
                        free = m.NewBoolVar(f"free[{rg.region.id},{i}]")
                        m.Add(free <= r)
                        m.Add(free <= held[src[1]])
                held[i] = s + o + free
                # A loop-invariant residual is stored once, the others once per trip; under a
                # hoisted recompute (E_r, docs/cost-model.md) a per-trip value the backward does not
                # read is freed in the forward pass, after the recompute that reads it.
                source_only = not c.needed and not c.loop_invariant and not has_view(rg, i)
                if not (rc.hoists_recompute and source_only):
                    (invariant_kib if c.loop_invariant else per_trip_kib).append(kib * s)
                if share and not c.loop_invariant:
                    slice_kib.append(math.ceil(share * kib) * s)
                if source_only and rc.frees_sources_in_trip and not rc.hoists_recompute:
                    trip_freed_kib.append((c.nbytes // KIB) * s)
                # Twice held (D_r, docs/cost-model.md): outside lax.scan, a kept value of a producer
                # XLA does not duplicate, read in the backward pass by a kernel and by a fusion (as
                # traced, or through a needed recomputed reader), is held twice.
                if (
                    rc.twice_held
                    and rc.twice_held[i]
                    and not c.loop_invariant
                    and (not isinstance(s, int) or s)
                ):
                    again = [
                        (by_index[w], both(by_index[w], "remat"))
                        for w in rg.readers(i)
                        if w in need
                    ]
                    twice = s
                    for traced, rereads in (
                        (
                            c.read_by_kernel or c.read_by_reduction,
                            [x for w, x in again if w.primitive not in cm.FUSIBLE],
                        ),
                        (
                            c.read_by_fusion,
                            [
                                x
                                for w, x in again
                                if w.primitive in cm.FUSIBLE and w.primitive not in VIEWS
                            ],
                        ),
                    ):
                        if not traced:
                            twice = _any_both(m, twice, rereads)
                    per_trip_kib.append(kib * twice)
                    tie_terms.append(live * kib * (len(cands) + i) * twice)
                tie_terms.append((1 if c.loop_invariant else live) * kib * (len(cands) + i) * s)
                if not c.loop_invariant and rc.materialize_s[i]:
                    # Saving or offloading a fusible value costs the forward write of it.
                    extra_ns.append(_ns(rc.materialize_s[i]) * s)
                    extra_ns.append(_ns(rc.materialize_s[i]) * o)
                if not c.loop_invariant and rc.stack_copy_s and rc.stack_copy_s[i]:
                    # Saving (not offloading) a value in HBM inside lax.scan costs its copy
                    # into the scan's stacked residual (S_v, docs/cost-model.md).
                    extra_ns.append(_ns(rc.stack_copy_s[i]) * s)
                # Working-set terms carry the measured scale, rounded up per term.
                w_kib = math.ceil(ws_scale * kib)
                if rc.hoists_recompute:
                    # Hoisted (E_r, docs/cost-model.md): the compiler recomputes in the forward pass
                    # and holds what the backward reads from there on, like a saved value; the
                    # recompute's intermediates are forward transients.
                    if c.needed:
                        hoisted = r - free
                        (invariant_kib if c.loop_invariant else per_trip_kib).append(kib * hoisted)
                        tie_terms.append(
                            (1 if c.loop_invariant else live) * kib * (len(cands) + i) * hoisted
                        )
                elif c.needed and not (rc.fused_away and rc.fused_away[i]):
                    working_of(i).append(w_kib * (r - free))
                elif not isinstance(r, int) or r:
                    # reduced: v is recomputed and a recomputed reduction reads it, so it is
                    # materialized whole with the working set, not one transient at a time.
                    reducing = [both(by_index[v], "remat") for v in reducers[i]]
                    reduced = _any_both(m, r - free, reducing)
                    working_of(i).append(w_kib * reduced)
                    m.Add(transient >= w_kib * (r - free - reduced))
                extra_ns.append(_ns(rc.recompute_s[i]) * r)
                if "offload" in decisions:
                    working_kib.append(w_kib * o)
                    # Loop-invariant residuals are hoisted: one host copy, not one per trip.
                    host_terms.append((1 if c.loop_invariant else live) * kib * o)
                    if not isinstance(o, int) or o:
                        offloads.append((i, o))
            # Exposed copy time of one trip, per direction (docs/cost-model.md X^fwd, X^bwd): each
            # direction's copies queue on the link in production order; with that direction's
            # calibrated model (eta, capacity, floor), exposed_* is at least each of the terms
            # below, and the objective (which minimizes it) keeps it at their maximum.
            for exposed, copy_s, window_s, hide in (
                (exposed_fwd, rc.d2h_s, rc.fwd_after_s, hide_d2h),  # stores: after the producer
                (exposed_bwd, rc.h2d_s, rc.bwd_before_s, hide_h2d),  # reloads: before the reader
            ):
                # The queue's tails: the copies from u on hide behind eta times u's window
                # and the rest is exposed. With eta = 0 every tail is dominated by the whole
                # queue (the first start).
                starts = offloads if hide.eta > 0 else offloads[:1]
                for k, (u, _) in enumerate(starts):
                    tail = offloads[k:] if hide.eta > 0 else offloads
                    m.Add(
                        exposed
                        >= sum(_ns(copy_s[v]) * o for v, o in tail) - _ns(hide.eta * window_s[u])
                    )
                # Capacity: one trip hides at most `capacity` of this direction's copy time,
                # however much compute surrounds it.
                if offloads and math.isfinite(hide.capacity_s):
                    m.Add(
                        exposed
                        >= sum(_ns(copy_s[v]) * o for v, o in offloads) - _ns(hide.capacity_s)
                    )
                # Floor: a share of every copy is exposed whatever compute is around it.
                if offloads and hide.floor > 0:
                    m.Add(exposed >= sum(_ns(hide.floor * copy_s[v]) * o for v, o in offloads))
            # need_in[u]: a region input the scan stacks is kept when the backward pass reads
            # it or a needed recompute does.
            stacked_inputs = []
            for inp in rg.region.inputs:
                if not inp.stacked:
                    continue
                if inp.needed:
                    stacked_inputs.append(_kib_up(inp.nbytes))
                    continue
                readers = [
                    c for c in cands if inp.index in rg.reads_inputs(c.index) and c.index in need
                ]
                if not readers:
                    continue
                n_in = m.NewBoolVar(f"need_in[{rg.region.id},{inp.index}]")
                for c in readers:
                    m.Add(n_in >= both(c, "remat"))
                stacked_inputs.append(_kib_up(inp.nbytes) * n_in)
            per_trip_kib.extend(stacked_inputs)
            # Working set of one backward trip of this region: the shared terms, the largest
            # branch (a lower bound suffices: it only adds memory), the largest transient.
            if branch_kib:
                largest = m.NewIntVar(0, 1 << 50, f"branch_kib[{rg.region.id}]")
                for terms in branch_kib.values():
                    m.Add(largest >= sum(terms))
                working_kib.append(largest)
            ws_terms.append(sum(working_kib) + transient + sum(slice_kib) - sum(trip_freed_kib))
            residual_terms.append(live * sum(per_trip_kib) + sum(invariant_kib))
            time_terms.append(trips * (sum(extra_ns) + exposed_fwd + exposed_bwd))

        # Peak HBM: fixed bytes + the residuals still held while region k runs backward (its
        # own and those of the regions before it) + region k's working set, worst k.
        # Variable bounds: 2^50 KiB (an exbibyte) is beyond any memory; the fixed bytes may be
        # negative when the model's full-remat terms exceed the anchor compile.
        self.peak_kib = m.NewIntVar(-(1 << 50), 1 << 50, "peak_kib")
        fixed = _kib_up(cost.fixed_bytes)
        # ---- train state (issue 21; formulas in state.py's docstring) --------------------
        # state_on_host[i]: train-state leaf i (an optimizer-state array, or a stacked
        # parameter the step streams per layer slice) lives in pinned host memory (h_i).
        # - its bytes leave the fixed bytes F for the whole step: F' = F - S, S = sum s_i h_i
        #   (a parameter: its bytes and its gradient's, which the backward writes to the host);
        # - a host parameter's slices in flight (V_i) are on the device while the layers run
        #   forward and backward: each region's peak below counts F' + V;
        # - its streamed update holds U_i on the device after the backward pass, when the
        #   activations are freed: peak >= F' + U;
        # - its bytes join the host total, under the same cap as offloaded activations;
        # - its copies in and out, one layer slice at a time, are exposed step time.
        self.state_on_host = {}
        fixed_layers = fixed  # F' + V: the fixed bytes while the layers run
        if cost.state:
            self.state_on_host, saved_kib, update_kib, inflight_kib, state_host_kib, state_ns = (
                add_to_model(m, cost.state, _kib_up, _ns)
            )
            fixed = fixed - saved_kib
            fixed_layers = fixed + inflight_kib
            m.Add(self.peak_kib >= fixed + update_kib)
            host_terms.append(state_host_kib)
            time_terms.append(state_ns)
        # ---- end train state
        ordered = regions_in_order(graph)  # else every region's residuals at every k
        for k in range(len(ws_terms)):
            held = residual_terms[: k + 1] if ordered else residual_terms
            m.Add(self.peak_kib >= fixed_layers + sum(held) + ws_terms[k])
        # The end of the forward pass, every residual held: above the backward trips' peaks
        # where a trip frees more of its own (Q_r) than its working set adds.
        m.Add(self.peak_kib >= fixed_layers + sum(residual_terms))
        if usable_bytes is not None:
            m.Add(self.peak_kib <= int(usable_bytes // KIB))
        # Host memory: every offloaded residual of every trip at once.
        if host_terms:
            m.Add(sum(host_terms) <= int(cost.host_cap_bytes // KIB))
        # Step time beyond the base: recompute + forced writes + exposed transfers.
        self.extra_ns = sum(time_terms)
        # Bytes the plan sends to the host per step (phase 2's objective, below).
        self.host_kib = sum(host_terms) if host_terms else 0
        # Phase 4's objective: the device residual bytes, each weighted by n + its forward
        # position (n candidates in its region), so that of two equally large tensors the
        # earlier is kept, alike in every region and layer group.
        self.residual_kib = sum(residual_terms) * (
            1 + max((len(rg.region.candidates) for rg in graph.regions), default=0)
        ) + sum(tie_terms)
        self.base_ns = _ns(cost.base_step_s)
        self.num_variables = len(m.Proto().variables)
        self.wall_stopped = False

    def hint_all_remat(self):
        for (_, d), v in self.choose.items():
            self.cp.AddHint(v, 1 if d == "remat" else 0)

    def run(self, objective, opts: SolverOptions, time_limit: float):
        self.cp.Minimize(objective)
        s = cp_model.CpSolver()
        # The limit is in CP-SAT's deterministic time (work counted, not seconds elapsed), so
        # a search stopped by it gives the same plan on a busy or an idle machine. The wall
        # clock limit only guards against a pathological search; it is generous (ten times
        # the deterministic limit plus 30 s) because a search it stops is no longer
        # reproducible: a loaded 2-core CI machine hit a 3x guard at 0.5 deterministic
        # seconds and returned a different plan on the second call. A stop by the guard is
        # recorded (Solution.reproducible) and the report says so.
        limit = max(0.1, time_limit)
        s.parameters.max_deterministic_time = limit
        s.parameters.max_time_in_seconds = 10 * limit + 30
        s.parameters.num_workers = opts.workers
        s.parameters.random_seed = opts.seed
        s.parameters.linearization_level = opts.linearization_level
        status = s.Solve(self.cp)
        if (
            status in (cp_model.FEASIBLE, cp_model.UNKNOWN)
            and s.WallTime() >= 0.99 * s.parameters.max_time_in_seconds
        ):
            self.wall_stopped = True
        return s, status

    def state_host(self, solver) -> frozenset:
        """The paths of the train-state leaves the solution puts on the host."""
        return frozenset(p for p, h in self.state_on_host.items() if solver.Value(h))

    def assignment(self, solver) -> Assignment:
        out = {}
        for (k, d), v in self.choose.items():
            if solver.Value(v):
                out[k] = d
        return Assignment.of(out)


def min_peak_assignment(
    graph: LivenessGraph, cost: CostModel, opts: SolverOptions
) -> tuple[Assignment, float]:
    """The assignment with the smallest predicted peak, and the proved lower bound on any peak."""
    mod = _Model(graph, cost, None)
    mod.hint_all_remat()
    s, status = mod.run(mod.peak_kib, opts, opts.time_limit_s)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise SolverError(
            "CP-SAT found no assignment at all, even without a budget: "
            f"status {s.StatusName(status)}. This is a planner bug; please report it."
        )
    # The proved lower bound is the honest "no plan goes below this" figure.
    return mod.assignment(s), float(s.BestObjectiveBound() * KIB)


def min_feasible_bytes(graph: LivenessGraph, cost: CostModel, opts: SolverOptions) -> float:
    """The smallest peak any assignment reaches under the model (host cap respected)."""
    return min_peak_assignment(graph, cost, opts)[1]


def solve_assignment(
    graph: LivenessGraph,
    cost: CostModel,
    usable_bytes: float,
    opts: SolverOptions = SolverOptions(),
    *,
    uniform: bool = False,
) -> Solution:
    """Fastest predicted assignment within ``usable_bytes``; raises if none fits.

    ``uniform=True`` ties the layer groups' decisions together (one policy for every group).
    """
    t0 = time.perf_counter()
    mod = _Model(graph, cost, usable_bytes, uniform)
    mod.hint_all_remat()
    s, status = mod.run(mod.extra_ns, opts, opts.time_limit_s)
    if status == cp_model.UNKNOWN and opts.linearization_level > 1:
        # The stronger relaxation can spend a short limit before any solution on a large
        # model (2,000 candidates at 0.5 deterministic s); the default one finds a first plan
        # sooner. Still deterministic: the same inputs take the same path.
        s, status = mod.run(
            mod.extra_ns, dataclasses.replace(opts, linearization_level=1), opts.time_limit_s
        )
    if status == cp_model.INFEASIBLE:
        need = min_feasible_bytes(graph, cost, opts)
        raise InfeasibleBudgetError(
            f"No plan fits {usable_bytes / 1e9:.3f} GB: no combination of save / remat / "
            f"offload peaks below {need / 1e9:.3f} GB (a bound CP-SAT proved).\n"
            f"Why: {cost.fixed_bytes / 1e9:.3f} GB do not depend on the plan (parameters, "
            "optimizer state, batch, outputs, activations outside checkpoint regions, "
            "compiler buffers), and the backward pass of one layer needs its working set.\n"
            f"Fix: pass hbm_gb >= {gb_at_least(need)}, or shrink what is fixed "
            "(smaller batch per device, shard parameters and optimizer state, donate the "
            "train state with donate_argnums).",
            budget_bytes=usable_bytes,
            min_feasible_bytes=need,
        )
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise SolverError(
            f"CP-SAT stopped with status {s.StatusName(status)} before finding any plan in "
            f"{opts.time_limit_s:g} deterministic s.\nFix: raise solver_time_limit_s, or give fewer "
            "classes (name the tensors that matter with checkpoint_name)."
        )
    first = s.ObjectiveValue()
    bound = s.BestObjectiveBound()
    phase1_status = status
    # Phase 2: at that step time, the fewest bytes copied to the host. A copy the model
    # predicts hidden still competes for HBM bandwidth and can be exposed by the schedule
    # XLA picks (measured: benchmarks/results/h200-2026-12-01.md), so the planner offloads only what
    # buys predicted time, never merely to lower a peak that already fits.
    # Phase 3: at both, the smallest peak (keeps spare memory for the user). Phase 4: at all
    # three, the fewest residual bytes: a tensor whose saving and recompute cost the same
    # (a view, an elementwise op) is not kept where keeping it does not set the peak, so
    # ties break the same way in every region and layer group. Each phase has its own
    # deterministic time budget, so the answer does not depend on the machine's load.
    final = s
    mod.cp.Add(mod.extra_ns <= int(first))
    for objective, keep in ((mod.host_kib, True), (mod.peak_kib, True), (mod.residual_kib, False)):
        if isinstance(objective, int):  # nothing can be offloaded
            continue
        mod.cp.ClearHints()
        for v in (*mod.choose.values(), *mod.state_on_host.values()):
            mod.cp.AddHint(v, final.Value(v))
        s2, status2 = mod.run(objective, opts, opts.time_limit_s)
        if status2 not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        final = s2
        if keep:
            mod.cp.Add(objective <= int(s2.ObjectiveValue()))
    assignment = mod.assignment(final)
    obj_s = (mod.base_ns + first) / NS
    bound_s = (mod.base_ns + bound) / NS
    return Solution(
        assignment=assignment,
        status="OPTIMAL" if phase1_status == cp_model.OPTIMAL else "FEASIBLE",
        objective_s=obj_s,
        bound_s=bound_s,
        gap=0.0 if obj_s <= 0 else max(0.0, (obj_s - bound_s) / obj_s),
        wall_s=time.perf_counter() - t0,
        num_classes=len(graph.classes),
        num_variables=mod.num_variables,
        usable_bytes=int(usable_bytes),
        reproducible=not mod.wall_stopped,
        state_on_host=mod.state_host(final),
    )


def check_solution(graph: LivenessGraph, cost: CostModel, sol: Solution) -> None:
    """The solver is never its own judge: re-evaluate its answer with the direct formulas."""
    p = evaluate(cost, graph, sol.assignment, state_on_host=sol.state_on_host)
    slack = KIB * (1 + sum(len(r.region.candidates) for r in graph.regions) + len(cost.state))
    # slack: the solver rounds each term up to whole KiB, at most one KiB per candidate.
    if p.peak_bytes > sol.usable_bytes + slack:
        raise SolverError(
            f"internal check failed: solver plan peaks at {p.peak_bytes} bytes "
            f"over its budget {sol.usable_bytes}; please report this bug"
        )
    if p.host_bytes > cost.host_cap_bytes + slack:
        raise SolverError(
            f"internal check failed: solver plan puts {p.host_bytes} bytes in host "
            f"memory over the cap {cost.host_cap_bytes}; please report this bug"
        )
