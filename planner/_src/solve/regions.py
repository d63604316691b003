"""Stage 4, solve: one region's variables and terms in the CP-SAT model (RegionTerms).

Per region of the graph: which candidates the backward pass needs, what each decision adds
to the residuals, the working set of a backward trip, the host bytes and the step time, and
the exposed copy time per direction; solve/model.py sums them into the peak and the
objective. Each term is a formula of docs/cost-model.md#the-memory-and-time-model-term-by-term.
Integer scaling: bytes in KiB rounded *up* for what a plan uses, times in nanoseconds.
"""

from __future__ import annotations

import math

from ortools.sat.python import cp_model

import cost_models as cm
from planner._src.cost.predict import REDUCTIONS, has_view, hiding_models
from planner._src.graph import VIEWS, class_key
from planner._src.types import CostModel

__all__ = ["KIB", "NS", "RegionTerms", "any_both", "kib_up", "ns"]

KIB = 1024
NS = 1e9  # nanoseconds per second


def any_both(m, r, readers) -> object:
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


def kib_up(b: float) -> int:
    return int(math.ceil(b / KIB))


def ns(t: float) -> int:
    return int(round(t * NS))


class RegionTerms:
    """The variables and terms of one region ``rg`` (with its costs ``rc``) in the CP-SAT
    model ``m``; ``choose`` is the model's decision variables. Built in a fixed order (the
    order of the variables and constraints decides which optimum a seeded CP-SAT returns
    among ties): the need variables, the region's integer variables, each candidate's
    terms in forward order, the copy-time bounds, the stacked inputs, the largest branch.

    Adds to ``tie_terms`` and ``host_terms`` (the model's, shared by every region) and
    leaves the region's totals in :attr:`working_set`, :attr:`residuals`, :attr:`time`."""

    def __init__(self, m, rg, rc, cost: CostModel, choose, decisions, tie_terms, host_terms):
        self.m, self.rg, self.rc, self.cost = m, rg, rc, cost
        self.choose, self.decisions = choose, decisions
        self.tie_terms, self.host_terms = tie_terms, host_terms
        self.cands = rg.region.candidates
        self.trips = rc.multiplicity  # executions per step: the time terms
        self.live = rc.live  # executions whose residuals are held at once: the memory terms
        self._both = {}  # (candidate, decision) -> its both() term, made on first use
        self._need_variables()
        self._region_variables()
        self._candidate_terms()
        self._transfers()
        self._stacked_inputs()
        self._totals()

    def dec(self, c, d):
        """The 0/1 term of candidate ``c`` taking decision ``d``: its class's variable."""
        if c.effectful:  # JAX always runs effectful equations forward and keeps them
            return 1 if d == "save" else 0
        return self.choose[class_key(self.rg.region, c), d] if d in self.decisions else 0

    # ---- need ---------------------------------------------------------------------------
    def _need_variables(self):
        m, rg = self.m, self.rg
        # Which candidates can ever be needed: the needed ones and their ancestors.
        possible = rg.possibly_needed
        # need[v]: the backward pass reads v, or v feeds a needed recomputed value.
        need = self.need = {}
        for c in self.cands:
            if c.index in possible:
                need[c.index] = 1 if c.needed else m.NewBoolVar(f"need[{rg.region.id},{c.index}]")
        # Remat dependency: need[u] >= need[v] AND remat[v] for each input u of v.
        for c in self.cands:
            if c.index not in need:
                continue
            r = self.dec(c, "remat")
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

    def both(self, c, d):
        """both(v, d) = need[v] AND decision d: v is a residual (save/offload) or recomputed.
        Exact (both bounds): it is read as a benefit too, by held[] below. Made once, on
        first use."""
        if (c.index, d) not in self._both:
            self._both[c.index, d] = self._new_both(c, d)
        return self._both[c.index, d]

    def _new_both(self, c, d):
        m = self.m
        n, x = self.need[c.index], self.dec(c, d)
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

    # ---- the region's integer variables and term lists ----------------------------------
    def _region_variables(self):
        m, rg, cost = self.m, self.rg, self.cost
        # per-trip and loop-invariant residual KiB, working-set KiB, step-time ns, offloads
        self.per_trip_kib, self.invariant_kib, self.working_kib = [], [], []
        self.extra_ns, self.offloads = [], []
        # K_r (docs/cost-model.md): the backward trip of a scan copies this share of each
        # saved per-trip residual out of the stacked buffer; not scaled by omega.
        self.share = cost.slice_copy_share if rg.region.in_scan else 0.0
        self.slice_kib = []
        # Q_r (docs/cost-model.md): one trip's residuals kept only for its own recompute,
        # freed by it before the trip's working set peaks (KiB rounded down: the peak stays
        # an upper bound of cost.evaluate's)
        self.trip_freed_kib = []
        # the working-set terms of each parallel branch (graph.parallel_branches): the
        # branches run backward one after another, so the trip holds the largest of them
        self.branch_kib: dict[int, list] = {}
        self.ws_scale = cost.working_set_scale
        # transient: the largest recompute intermediate (read by no gradient), live one at a time.
        self.transient = m.NewIntVar(0, 1 << 50, f"transient_kib[{rg.region.id}]")
        # exposed_fwd / exposed_bwd: one trip's copy time the compute does not hide, per
        # direction (X^fwd, X^bwd), bounded below by _transfers.
        self.exposed_fwd = m.NewIntVar(0, 1 << 50, f"exposed_fwd_ns[{rg.region.id}]")
        self.exposed_bwd = m.NewIntVar(0, 1 << 50, f"exposed_bwd_ns[{rg.region.id}]")
        self.hide_d2h, self.hide_h2d = hiding_models(cost)  # per direction: eta, capacity, floor
        # held[v]: v's buffer is in memory without a new allocation in the backward pass:
        # v is kept (saved or reloaded), or it is a recomputed view of a held value or of
        # a region input (cost.held_values). free[v] (<= remat, <= held of its source):
        # a recomputed view that adds nothing to the working set.
        self.held = {}
        # The recomputed reductions that read each candidate (cost.reduction_operands).
        self.by_index = by_index = {c.index: c for c in self.cands}
        self.reducers = {
            u: [v for v in self.need if by_index[v].primitive in REDUCTIONS and u in rg.reads(v)]
            for u in self.need
        }

    def working_of(self, i):
        """The list a working-set term of candidate ``i`` goes to: its branch's, or the
        region's shared one."""
        rg = self.rg
        if rg.branch and rg.branch[i] >= 0:
            return self.branch_kib.setdefault(rg.branch[i], [])
        return self.working_kib

    # ---- each candidate's terms, in forward order ---------------------------------------
    def _candidate_terms(self):
        for c in self.cands:
            if c.index not in self.need:
                continue
            kib = kib_up(c.nbytes)
            s = self.both(c, "save")
            r = self.both(c, "remat")
            o = self.both(c, "offload") if "offload" in self.decisions else 0
            free = self._free_view(c, r)
            self.held[c.index] = s + o + free
            self._residuals(c, kib, s)
            self._twice_held(c, kib, s)
            self.tie_terms.append(
                (1 if c.loop_invariant else self.live) * kib * (len(self.cands) + c.index) * s
            )
            self._forced_writes(c, s, o)
            self._working_set(c, kib, r, free)
            self.extra_ns.append(ns(self.rc.recompute_s[c.index]) * r)
            if "offload" in self.decisions:
                self._offload(c, kib, o)

    def _free_view(self, c, r):
        """free[v]: a recomputed view of a region input, or of a held candidate (then a new
        variable, at most remat and at most the source's held), adds no buffer."""
        m, i = self.m, c.index
        free = 0
        src = self.rg.view_of(i)
        if src is not None and (not isinstance(r, int) or r):
            if src[0] == "input":
                free = r
            elif src[1] in self.held:
                free = m.NewBoolVar(f"free[{self.rg.region.id},{i}]")
                m.Add(free <= r)
                m.Add(free <= self.held[src[1]])
        return free

    def _residuals(self, c, kib, s):
        """R_r and I_r (device residuals), K_r (slice copies), Q_r (trip-freed sources)."""
        rc, i = self.rc, c.index
        # A loop-invariant residual is stored once, the others once per trip; under a
        # hoisted recompute (E_r, docs/cost-model.md) a per-trip value the backward does not
        # read is freed in the forward pass, after the recompute that reads it.
        source_only = not c.needed and not c.loop_invariant and not has_view(self.rg, i)
        if not (rc.hoists_recompute and source_only):
            (self.invariant_kib if c.loop_invariant else self.per_trip_kib).append(kib * s)
        if self.share and not c.loop_invariant:
            self.slice_kib.append(math.ceil(self.share * kib) * s)
        if source_only and rc.frees_sources_in_trip and not rc.hoists_recompute:
            self.trip_freed_kib.append((c.nbytes // KIB) * s)

    def _twice_held(self, c, kib, s):
        """D_r: outside lax.scan, a kept value of a producer XLA does not duplicate, read in
        the backward pass by a kernel and by a fusion (as traced, or through a needed
        recomputed reader), is held twice (docs/cost-model.md)."""
        rc, i, by_index = self.rc, c.index, self.by_index
        if not (
            rc.twice_held
            and rc.twice_held[i]
            and not c.loop_invariant
            and (not isinstance(s, int) or s)
        ):
            return
        again = [
            (by_index[w], self.both(by_index[w], "remat"))
            for w in self.rg.readers(i)
            if w in self.need
        ]
        twice = s
        for traced, rereads in (
            (
                c.read_by_kernel or c.read_by_reduction,
                [x for w, x in again if w.primitive not in cm.FUSIBLE],
            ),
            (
                c.read_by_fusion,
                [x for w, x in again if w.primitive in cm.FUSIBLE and w.primitive not in VIEWS],
            ),
        ):
            if not traced:
                twice = any_both(self.m, twice, rereads)
        self.per_trip_kib.append(kib * twice)
        self.tie_terms.append(self.live * kib * (len(self.cands) + i) * twice)

    def _forced_writes(self, c, s, o):
        """M_r and S_v: the forward writes that keeping a value forces (step time)."""
        rc, i = self.rc, c.index
        if not c.loop_invariant and rc.materialize_s[i]:
            # Saving or offloading a fusible value costs the forward write of it.
            self.extra_ns.append(ns(rc.materialize_s[i]) * s)
            self.extra_ns.append(ns(rc.materialize_s[i]) * o)
        if not c.loop_invariant and rc.stack_copy_s and rc.stack_copy_s[i]:
            # Saving (not offloading) a value in HBM inside lax.scan costs its copy
            # into the scan's stacked residual (S_v, docs/cost-model.md).
            self.extra_ns.append(ns(rc.stack_copy_s[i]) * s)

    def _working_set(self, c, kib, r, free):
        """W_r (a recomputed value's share of the backward trip's working set), or E_r
        (a recompute the compiler hoists into the forward pass)."""
        m, rc, i = self.m, self.rc, c.index
        # Working-set terms carry the measured scale, rounded up per term.
        w_kib = math.ceil(self.ws_scale * kib)
        if rc.hoists_recompute:
            # Hoisted (E_r, docs/cost-model.md): the compiler recomputes in the forward pass
            # and holds what the backward reads from there on, like a saved value; the
            # recompute's intermediates are forward transients.
            if c.needed:
                hoisted = r - free
                (self.invariant_kib if c.loop_invariant else self.per_trip_kib).append(
                    kib * hoisted
                )
                self.tie_terms.append(
                    (1 if c.loop_invariant else self.live) * kib * (len(self.cands) + i) * hoisted
                )
        elif c.needed and not (rc.fused_away and rc.fused_away[i]):
            self.working_of(i).append(w_kib * (r - free))
        elif not isinstance(r, int) or r:
            # reduced: v is recomputed and a recomputed reduction reads it, so it is
            # materialized whole with the working set, not one transient at a time.
            reducing = [self.both(self.by_index[v], "remat") for v in self.reducers[i]]
            reduced = any_both(m, r - free, reducing)
            self.working_of(i).append(w_kib * reduced)
            m.Add(self.transient >= w_kib * (r - free - reduced))

    def _offload(self, c, kib, o):
        """An offloaded value: reloaded into the working set, its host bytes, its copies."""
        w_kib = math.ceil(self.ws_scale * kib)
        self.working_kib.append(w_kib * o)
        # Loop-invariant residuals are hoisted: one host copy, not one per trip.
        self.host_terms.append((1 if c.loop_invariant else self.live) * kib * o)
        if not isinstance(o, int) or o:
            self.offloads.append((c.index, o))

    # ---- exposed copy time --------------------------------------------------------------
    def _transfers(self):
        m, rc, offloads = self.m, self.rc, self.offloads
        # Exposed copy time of one trip, per direction (docs/cost-model.md X^fwd, X^bwd):
        # each direction's copies queue on the link in production order; with that
        # direction's calibrated model (eta, capacity, floor), exposed_* is at least each of
        # the terms below, and the objective (which minimizes it) keeps it at their maximum.
        # Stores (d2h) hide behind the forward compute after their producer, reloads (h2d)
        # behind the backward compute before their reader.
        for exposed, copy_s, window_s, hide in (
            (self.exposed_fwd, rc.d2h_s, rc.fwd_after_s, self.hide_d2h),
            (self.exposed_bwd, rc.h2d_s, rc.bwd_before_s, self.hide_h2d),
        ):
            # The queue's tails: the copies from u on hide behind eta times u's window
            # and the rest is exposed. With eta = 0 every tail is dominated by the whole
            # queue (the first start).
            # Each copy's time in ns is computed once and each tail is one weighted sum: the
            # tails hold O(n^2) terms, and building them term by term was most of the
            # model's build time (the constraints are the same, term for term).
            coeffs = [ns(copy_s[v]) for v, _ in offloads]
            terms = [o for _, o in offloads]
            starts = offloads if hide.eta > 0 else offloads[:1]
            for k, (u, _) in enumerate(starts):
                first = k if hide.eta > 0 else 0
                tail = cp_model.LinearExpr.weighted_sum(terms[first:], coeffs[first:])
                m.Add(exposed >= tail - ns(hide.eta * window_s[u]))
            # Capacity: one trip hides at most `capacity` of this direction's copy time,
            # however much compute surrounds it.
            if offloads and math.isfinite(hide.capacity_s):
                whole = cp_model.LinearExpr.weighted_sum(terms, coeffs)
                m.Add(exposed >= whole - ns(hide.capacity_s))
            # Floor: a share of every copy is exposed whatever compute is around it.
            if offloads and hide.floor > 0:
                m.Add(exposed >= sum(ns(hide.floor * copy_s[v]) * o for v, o in offloads))

    # ---- stacked inputs (S_r) -----------------------------------------------------------
    def _stacked_inputs(self):
        m, rg = self.m, self.rg
        # need_in[u]: a region input the scan stacks is kept when the backward pass reads
        # it or a needed recompute does.
        stacked_inputs = []
        for inp in rg.region.inputs:
            if not inp.stacked:
                continue
            if inp.needed:
                stacked_inputs.append(kib_up(inp.nbytes))
                continue
            readers = [
                c
                for c in self.cands
                if inp.index in rg.reads_inputs(c.index) and c.index in self.need
            ]
            if not readers:
                continue
            n_in = m.NewBoolVar(f"need_in[{rg.region.id},{inp.index}]")
            for c in readers:
                m.Add(n_in >= self.both(c, "remat"))
            stacked_inputs.append(kib_up(inp.nbytes) * n_in)
        self.per_trip_kib.extend(stacked_inputs)

    # ---- the region's totals ------------------------------------------------------------
    def _totals(self):
        m, rg = self.m, self.rg
        # Working set of one backward trip of this region: the shared terms, the largest
        # branch (a lower bound suffices: it only adds memory), the largest transient.
        if self.branch_kib:
            # branch_kib[r]: the largest parallel branch's working set, at least each one's.
            largest = m.NewIntVar(0, 1 << 50, f"branch_kib[{rg.region.id}]")
            for terms in self.branch_kib.values():
                m.Add(largest >= sum(terms))
            self.working_kib.append(largest)
        # W_r + K_r - Q_r: the trip's working set, its slice copies, less its freed sources
        self.working_set = (
            sum(self.working_kib) + self.transient + sum(self.slice_kib) - sum(self.trip_freed_kib)
        )
        # L_r (R_r + S_r + D_r + E_r) + I_r: the residuals the region holds
        self.residuals = self.live * sum(self.per_trip_kib) + sum(self.invariant_kib)
        # L_r (C_r + M_r + X^fwd_r + X^bwd_r): the region's step time beyond the base
        self.time = self.trips * (sum(self.extra_ns) + self.exposed_fwd + self.exposed_bwd)
