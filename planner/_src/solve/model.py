"""Stage 4, solve: the CP-SAT model for one (graph, cost model, budget), built by named
pieces: the decisions, each region's terms (solve/regions.py), the train state
(solve/state.py), the peak, the objectives.

The model encodes exactly the formulas of the cost stage
(docs/cost-model.md#the-memory-and-time-model-term-by-term); every variable family and
constraint family below says what it stands for. The pieces run in a fixed order, the order
in which they add variables and constraints: with one worker and a fixed seed CP-SAT returns
the same optimum among ties only for the same model in the same order.

Layer groups: when the trace keeps each checkpoint call site as its own region (``group``
set), the classes are per (group, signature) (graph.class_key), so the variables ``choose``
are per group and class while every constraint stays per region; ``uniform=True`` ties the
groups together (the best single policy for all of them, which a per-group plan must beat).

Integer scaling: bytes are counted in KiB rounded *up* for what a plan uses and *down* for
the budget, so rounding can only make a plan more conservative; times are in nanoseconds.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from planner._src.cost.predict import regions_in_order
from planner._src.graph import LivenessGraph
from planner._src.solve.regions import KIB, RegionTerms, kib_up, ns
from planner._src.solve.state import add_to_model
from planner._src.types import Assignment, CostModel, SolverOptions

__all__ = ["Model"]


class Model:
    """The CP-SAT model for one (graph, cost model, budget)."""

    def __init__(
        self,
        graph: LivenessGraph,
        cost: CostModel,
        usable_bytes: float | None,
        uniform: bool = False,
    ):
        self.cp = cp_model.CpModel()
        self.decisions = ("save", "remat", "offload") if cost.allow_offload else ("save", "remat")
        self._decisions(graph, cost)
        if uniform:
            self._uniform(graph)
        self._regions(graph, cost)
        self._peak(graph, cost, usable_bytes)
        self._objectives(graph, cost)
        self.num_variables = len(self.cp.Proto().variables)
        self.wall_stopped = False

    # ---- decisions ----------------------------------------------------------------------
    def _decisions(self, graph: LivenessGraph, cost: CostModel):
        m, decisions = self.cp, self.decisions
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

    def _uniform(self, graph: LivenessGraph):
        # uniform: every group takes the same decision for the same signature (one policy for
        # all groups), the baseline a per-group plan must beat.
        first = {}
        for cls in graph.classes:
            if cls.group is None:
                continue
            other = first.setdefault(cls.signature, cls.key)
            for d in self.decisions:
                if other != cls.key:
                    self.cp.Add(self.choose[cls.key, d] == self.choose[other, d])

    # ---- region terms -------------------------------------------------------------------
    def _regions(self, graph: LivenessGraph, cost: CostModel):
        # Per region (solve/regions.py), in forward order: its residuals (held from its
        # forward trip to its backward trip), the working set of its backward trip, its step
        # time beyond the base; the host bytes of every region's offloads (host_terms) and
        # phase 4's tie-breaking terms (tie_terms: residual bytes weighted by forward
        # position, see _objectives).
        self.residual_terms, self.host_terms, self.time_terms, self.ws_terms = [], [], [], []
        self.tie_terms = []
        for rg, rc in zip(graph.regions, cost.regions):
            region = RegionTerms(
                self.cp, rg, rc, cost, self.choose, self.decisions, self.tie_terms, self.host_terms
            )
            self.ws_terms.append(region.working_set)
            self.residual_terms.append(region.residuals)
            self.time_terms.append(region.time)

    # ---- train state --------------------------------------------------------------------
    def _train_state(self, cost: CostModel, fixed: int) -> tuple[object, object]:
        """The train state's variables (solve/state.py; formulas:
        docs/cost-model.md#the-train-state); returns ``(F', F' + V)``: the fixed bytes for the
        whole step, and while the layers run."""
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
                add_to_model(self.cp, cost.state, kib_up, ns)
            )
            fixed = fixed - saved_kib
            fixed_layers = fixed + inflight_kib
            self.cp.Add(self.peak_kib >= fixed + update_kib)
            self.host_terms.append(state_host_kib)
            self.time_terms.append(state_ns)
        return fixed, fixed_layers

    # ---- peak ---------------------------------------------------------------------------
    def _peak(self, graph: LivenessGraph, cost: CostModel, usable_bytes: float | None):
        m = self.cp
        # Peak HBM: fixed bytes + the residuals still held while region k runs backward (its
        # own and those of the regions before it) + region k's working set, worst k.
        # Variable bounds: 2^50 KiB (an exbibyte) is beyond any memory; the fixed bytes may be
        # negative when the model's full-remat terms exceed the anchor compile.
        self.peak_kib = m.NewIntVar(-(1 << 50), 1 << 50, "peak_kib")
        fixed = kib_up(cost.fixed_bytes)
        fixed, fixed_layers = self._train_state(cost, fixed)
        residual_terms = self.residual_terms
        ordered = regions_in_order(graph)  # else every region's residuals at every k
        for k in range(len(self.ws_terms)):
            held = residual_terms[: k + 1] if ordered else residual_terms
            m.Add(self.peak_kib >= fixed_layers + sum(held) + self.ws_terms[k])
        # The end of the forward pass, every residual held: above the backward trips' peaks
        # where a trip frees more of its own (Q_r) than its working set adds.
        m.Add(self.peak_kib >= fixed_layers + sum(residual_terms))
        # The budget, in KiB rounded down.
        if usable_bytes is not None:
            m.Add(self.peak_kib <= int(usable_bytes // KIB))
        # Host memory: every offloaded residual of every trip at once.
        if self.host_terms:
            m.Add(sum(self.host_terms) <= int(cost.host_cap_bytes // KIB))

    # ---- objectives ---------------------------------------------------------------------
    def _objectives(self, graph: LivenessGraph, cost: CostModel):
        # The four objectives of the lexicographic phases (solve/phases.py); none adds a
        # variable or a constraint here.
        # Step time beyond the base: recompute + forced writes + exposed transfers.
        self.extra_ns = sum(self.time_terms)
        # Bytes the plan sends to the host per step (phase 2's objective, below).
        self.host_kib = sum(self.host_terms) if self.host_terms else 0
        # Phase 4's objective: the device residual bytes, each weighted by n + its forward
        # position (n candidates in its region), so that of two equally large tensors the
        # earlier is kept, alike in every region and layer group.
        self.residual_kib = sum(self.residual_terms) * (
            1 + max((len(rg.region.candidates) for rg in graph.regions), default=0)
        ) + sum(self.tie_terms)
        self.base_ns = ns(cost.base_step_s)

    # ---- solving ----------------------------------------------------------------------
    def hint_all_remat(self):
        for (_, d), v in self.choose.items():
            self.cp.AddHint(v, 1 if d == "remat" else 0)

    def solver(self, opts: SolverOptions, time_limit: float) -> cp_model.CpSolver:
        """A CP-SAT solver set up as every phase runs it.

        The limit is in CP-SAT's deterministic time (work counted, not seconds elapsed), so
        a search stopped by it gives the same plan on a busy or an idle machine. The wall
        clock limit only guards against a pathological search; it is generous (ten times
        the deterministic limit plus 30 s) because a search it stops is no longer
        reproducible: a loaded 2-core CI machine hit a 3x guard at 0.5 deterministic
        seconds and returned a different plan on the second call. A stop by the guard is
        recorded (Solution.reproducible) and the report says so."""
        s = cp_model.CpSolver()
        limit = max(0.1, time_limit)
        s.parameters.max_deterministic_time = limit
        s.parameters.max_time_in_seconds = 10 * limit + 30
        s.parameters.num_workers = opts.workers
        s.parameters.random_seed = opts.seed
        s.parameters.linearization_level = opts.linearization_level
        return s

    def run(self, objective, opts: SolverOptions, time_limit: float, solver=None):
        """Minimize ``objective`` (with ``solver``, else :meth:`solver`'s)."""
        self.cp.Minimize(objective)
        s = solver if solver is not None else self.solver(opts, time_limit)
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
