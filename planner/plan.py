"""The planner's entry point: ``solve(step_fn, *example_args, hbm_gb=...) -> Plan``.

It runs the pipeline trace -> graph -> cost -> solve -> emit -> verify -> report, and
re-solves with a corrected memory model when the compiled program exceeds the budget
(bounded rounds).
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from typing import Any, Callable

import cost_models as cm
import jax

from planner import _jax_adapter as adapter
from planner.baselines import Baseline, evaluate_baselines
from planner.cost import Assignment, CostModel, Prediction, build_cost_model, evaluate
from planner.emit import Emitted, emit
from planner.errors import (
    InfeasibleBudgetError,
    InvalidArgumentError,
    PlannerError,
    UnsupportedError,
)
from planner.graph import LivenessGraph, build_graph, class_key
from planner.solve import (
    Solution,
    SolverOptions,
    check_solution,
    min_peak_assignment,
    solve_assignment,
)
from planner.trace import Trace, merge_call_sites, trace_step
from planner.verify import Verification, verify

GB = 1e9  # budgets are in GB = 10^9 bytes, the unit of GPU datasheets (H200: 141 GB)


class PlanWarning(UserWarning):
    """The plan was returned but its compiled program does not meet the budget."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Round:
    """One solve-and-compile round of the verify loop."""

    correction_bytes: int
    predicted_peak_bytes: int
    compiled_device_bytes: int | None
    status: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    budget_bytes: int
    hardware: Any                    # cost_models.HardwareProfile
    trace: Trace = dataclasses.field(repr=False)
    graph: LivenessGraph = dataclasses.field(repr=False)
    cost: CostModel = dataclasses.field(repr=False)
    solution: Solution
    prediction: Prediction
    baselines: tuple[Baseline, ...]
    emitted: Emitted
    verification: Verification
    rounds: tuple[Round, ...]
    timings: tuple[tuple[str, float], ...]
    # Bytes of the budget left free (_usable: the hardware profile's allocator_headroom and,
    # on GPU, XLA's own compile-time limit; headroom_why() says which): the plan, its verify
    # compile and the stock policies' "fits" are held to budget_bytes - headroom_bytes.
    headroom_bytes: int = 0

    @property
    def policy(self):
        """Pass to ``jax.checkpoint(fn, policy=plan.policy)`` in your code.

        A plan whose layer groups decide differently has no single policy: this raises
        ``LayerGroupsError`` (use ``plan.policies[g]`` for the g-th group)."""
        if self.emitted.policy is None:
            from planner.emit import differing_groups_error
            raise differing_groups_error(self.assignment,
                                         {c.key: c.name for c in self.graph.classes})
        return self.emitted.policy

    @property
    def policies(self) -> tuple:
        """One policy per checkpoint call site (layer group), in call order:
        ``jax.checkpoint(layer, policy=plan.policies[g])`` for the g-th group. A uniform plan
        gives the same policy for every call site."""
        if self.emitted.policies:
            return self.emitted.policies
        return (self.emitted.policy,) * sum(rg.region.call_sites for rg in self.graph.regions)

    @property
    def layer_groups(self) -> int:
        """How many layer groups the plan decides separately (0: one decision for all)."""
        return len(self.emitted.policies)

    @property
    def xla_flags(self) -> str:
        """Set ``os.environ["XLA_FLAGS"] = plan.xla_flags`` before JAX starts."""
        return self.emitted.xla_flags

    @property
    def maxtext_yaml(self) -> str:
        return self.emitted.maxtext_yaml

    @property
    def assignment(self) -> Assignment:
        return self.solution.assignment

    def headroom_why(self) -> str:
        """Why ``headroom_bytes`` of the budget is left free (allocator, XLA's own limit)."""
        return _headroom_why(self.hardware)

    def decisions(self) -> dict[str, str]:
        """Decision per tensor label for the classes the backward pass reads."""
        from planner.report import build_report
        return {row.label: row.decision for row in build_report(self).rows}

    def report(self, fmt: str = "text") -> str:
        """The report: ``text`` (rich console), ``markdown`` or ``json``."""
        from planner.report import build_report, render
        return render(build_report(self), fmt)

    def save(self, path) -> None:
        """Write a versioned JSON plan file; ``planner.load_plan(path)`` reads it back."""
        from planner.planfile import save
        save(self, path)

    @staticmethod
    def load(path):
        """Read a plan file: a ``SavedPlan`` with ``policy``, ``xla_flags``, ``check(step, *args)``."""
        from planner.planfile import load
        return load(path)

    def candidates(self) -> list[dict]:
        """Every candidate tensor of every region, with its class's decision."""
        out = []
        for rg, rp in zip(self.graph.regions, self.prediction.regions):
            r = rg.region
            for c in r.candidates:
                out.append({
                    "region": r.id, "index": c.index, "name": c.name, "primitive": c.primitive,
                    "shape": c.shape, "dtype": c.dtype, "bytes_per_trip": c.nbytes,
                    # Sharded steps: bytes_per_trip is per device = global / shard_divisor;
                    # shard_source says how the divisor was found (planner/shard.py).
                    "global_bytes_per_trip": c.global_nbytes, "shard_divisor": c.shard_divisor,
                    "shard_source": c.shard_source, "collectives": list(c.collectives),
                    "multiplicity": r.multiplicity, "source": c.source,
                    "needed_by_backward": rp.needed[c.index], "class": class_key(r, c),
                    "group": r.group,
                    # JAX keeps effectful equations whatever the policy says.
                    "decision": "save" if c.effectful else self.assignment.get(class_key(r, c)),
                })
        return out


def _validate(step_fn, example_args, hbm_gb, hardware, time_limit_s, max_rounds):
    if not callable(step_fn):
        raise InvalidArgumentError(
            f"step_fn must be a callable train step, got {type(step_fn).__name__}.\n"
            "Fix: pass the function itself, e.g. planner.solve(train_step, state, batch, hbm_gb=80).")
    if not example_args:
        raise InvalidArgumentError(
            "No example arguments were given.\nWhy: the planner traces step_fn(*example_args) "
            "to see the shapes of every activation.\nFix: pass the arguments the step takes, "
            "as arrays or jax.ShapeDtypeStruct: planner.solve(step, state, batch, hbm_gb=...).")
    if isinstance(hbm_gb, bool) or not isinstance(hbm_gb, (int, float)):
        raise InvalidArgumentError(
            f"hbm_gb must be a number of gigabytes (10^9 bytes), got {hbm_gb!r}.\n"
            "Fix: e.g. hbm_gb=141 for a whole H200, or less to leave room for other buffers.")
    if not math.isfinite(hbm_gb) or hbm_gb <= 0:
        raise InvalidArgumentError(
            f"hbm_gb must be a positive, finite number of gigabytes, got {hbm_gb!r}.\n"
            "Fix: pass the device memory the step may use, e.g. hbm_gb=80.")
    if hbm_gb > 100_000:
        raise InvalidArgumentError(
            f"hbm_gb={hbm_gb!r} is over 100 TB for one device: the budget is per device, in GB "
            "(10^9 bytes), not in bytes or MB.\nFix: e.g. hbm_gb=141 for an H200.")
    if not isinstance(time_limit_s, (int, float)) or not time_limit_s > 0:
        raise InvalidArgumentError(f"solver_time_limit_s must be > 0 seconds, got {time_limit_s!r}.")
    if not isinstance(max_rounds, int) or max_rounds < 1:
        raise InvalidArgumentError(f"max_rounds must be an int >= 1, got {max_rounds!r}.")
    try:
        return cm.load_profile(hardware)
    except cm.ProfileError as e:
        raise InvalidArgumentError(str(e)) from e


def _host_memory_available() -> bool:
    try:
        kinds = {m.kind for m in jax.devices()[0].addressable_memories()}
    except Exception:  # backends without the memories API
        return False
    return adapter.HOST_KIND in kinds


def _normalize(graph: LivenessGraph, cost: CostModel, a: Assignment) -> Assignment:
    """Drop decisions that change nothing (classes the backward pass never reads)."""
    p = evaluate(cost, graph, a)
    relevant = set()
    for rg, rp in zip(graph.regions, p.regions):
        for c in rg.region.candidates:
            if rp.needed[c.index]:
                relevant.add(class_key(rg.region, c))
    return Assignment.of({k: d for k, d in a.decisions if k in relevant and d != "remat"})


def _with_headroom(e: InfeasibleBudgetError, requested: int, headroom: int, hw, io_bytes: int):
    """The infeasible-budget error restated for the budget the user asked for."""
    if not headroom:
        return e
    need = _requested_for(e.min_feasible_bytes, hw, io_bytes)
    return InfeasibleBudgetError(
        f"{e}\nNote: of hbm_gb={requested / GB:g} the planner plans to {(requested - headroom) / GB:.3f} GB, "
        f"leaving {headroom / GB:.3f} GB free: {_headroom_why(hw)}; with it, the smallest budget "
        f"that works is hbm_gb >= {math.ceil(need / 1e6) / 1000:.3f}.",
        budget_bytes=requested, min_feasible_bytes=need)


def _headroom_why(hw) -> str:
    """Why a plan leaves part of its budget free, for error messages and the report."""
    why = []
    if hw.allocator_headroom:
        why.append(f"the {hw.name} profile's allocator headroom of {hw.allocator_headroom:.0%} "
                   f"for the device allocator ({hw.source('allocator_headroom')[:120]}...)")
    f = cm.compiler_temp_fraction(hw)
    if f < 1.0:
        why.append(f"XLA:GPU compiles against {f:.0%} of the budget left after the step's "
                   "inputs and outputs and recomputes on its own above it (a slower program "
                   "than the plan; cost_models.compiler_temp_fraction)")
    return " and ".join(why)


def _smallest_plan(graph, cost, opts, budget, attempt, error):
    """The smallest-peak assignment, compiled; returned if it fits, else a teaching error."""
    a, _ = min_peak_assignment(graph, cost, opts)
    assignment, pred, emitted, ver = attempt(cost, a)
    compiled = ver.compiled_device_bytes
    # Only an exact compiled figure overrules the model: on a backend that keeps host arrays
    # in device memory it is an estimate (the host bytes subtracted), which a k-layer scan
    # body on XLA:CPU drove below the arguments and outputs alone (35.7 MB of 52.5 MB).
    if compiled is not None and ver.exact and compiled <= budget:
        sol = Solution(assignment=assignment, status="FEASIBLE", objective_s=pred.step_s,
                       bound_s=pred.step_s, gap=0.0, wall_s=0.0, num_classes=len(graph.classes),
                       num_variables=0, budget_bytes=budget)
        return sol, pred, emitted, ver
    if compiled is not None and ver.exact:
        need = float(compiled)
        what = f"the plan with the smallest memory compiles to {need / GB:.3f} GB on this backend"
    else:
        need = float(max(pred.peak_bytes, compiled or 0))
        what = (f"the plan with the smallest memory needs {need / GB:.3f} GB"
                + ("" if compiled is None else
                   f" (the larger of the model's {pred.peak_bytes / GB:.3f} GB and its compiled "
                   f"size on {ver.backend}, {compiled / GB:.3f} GB, an estimate there: host "
                   "arrays share device memory)"))
    raise InfeasibleBudgetError(
        f"No plan fits {budget / GB:.3f} GB: {what} (the model's lower bound for any plan: "
        f"{error.min_feasible_bytes / GB:.3f} GB).\nWhy: {cost.fixed_bytes / GB:.3f} GB do not "
        "depend on the plan (parameters, optimizer state, batch, outputs, activations outside "
        "checkpoint regions, compiler buffers), and the backward pass of a layer needs its "
        "working set.\n"
        f"Fix: pass hbm_gb >= {math.ceil(need / 1e6) / 1000:.3f}, or shrink what is fixed "
        "(smaller batch per device, sharded parameters and optimizer state, donated state).",
        budget_bytes=budget, min_feasible_bytes=need)


def solve(step_fn: Callable, *example_args, hbm_gb: float, hardware="h200",
          allow_offload: bool | None = None, solver_time_limit_s: float = 30.0,
          verify_compile: bool = True, max_rounds: int = 3,
          progress: Callable[[str], None] | None = None,
          layer_groups: bool | None = None) -> Plan:
    """Plan what the backward pass of ``step_fn(*example_args)`` keeps, under ``hbm_gb``.

    Args:
      step_fn: the train step (loss, gradient and update), unmodified. Its
        ``jax.checkpoint`` / ``jax.remat`` / Flax remat regions are what the planner decides.
      example_args: arrays or ``jax.ShapeDtypeStruct``s, as the step takes them.
      hbm_gb: device memory budget per device, GB (10^9 bytes).
      hardware: a profile name (``cost_models.list_profiles()``), a JSON file, or a profile.
      allow_offload: None (default) offloads when the local backend has a ``pinned_host``
        memory kind and the hardware has a host link; False never offloads.
      solver_time_limit_s: CP-SAT deterministic seconds per solver phase (four phases per
        solve; one is 1-4 wall seconds, see SolverOptions); the gap is reported.
      verify_compile: compile the step with the emitted policy and check it (recommended).
      max_rounds: solve / compile rounds when the compiled program exceeds the budget.
      progress: called with a short message as each slow stage starts (trace, solve,
        compile); the CLI shows them on stderr. None: silent.
      layer_groups: decide each checkpoint call site (layer group: one of several scans over
        layers, or each layer of an unrolled loop) separately, with one policy per call site
        (``plan.policies``). True: always, when the step has several call sites. False: one
        decision for all identical regions (``plan.policy``). None (default): per group when
        identical regions sit at several call sites and the model predicts a faster step than
        the best uniform plan (more than 0.1%), else uniform.
    """
    return pareto(step_fn, *example_args, hbm_gb=[hbm_gb], hardware=hardware,
                  allow_offload=allow_offload, solver_time_limit_s=solver_time_limit_s,
                  verify_compile=verify_compile, max_rounds=max_rounds, progress=progress,
                  layer_groups=layer_groups, _raise=True)[0]


def pareto(step_fn: Callable, *example_args, hbm_gb=None, hardware="h200",
           allow_offload: bool | None = None, solver_time_limit_s: float = 30.0,
           verify_compile: bool = False, max_rounds: int = 3, points: int = 5,
           progress: Callable[[str], None] | None = None, layer_groups: bool | None = None,
           _raise: bool = False):
    """Plans for several budgets from one trace: ``[Plan or PlannerError per budget]``.

    The step is traced (and the anchor compiled) once; each budget is solved, emitted and,
    with ``verify_compile``, compiled. A budget no plan reaches gives its
    ``InfeasibleBudgetError`` in the list instead of a plan. ``progress`` is as in ``solve``.

    ``hbm_gb=None`` spans the whole trade-off: ``points`` budgets evenly spaced above the
    predicted peak of full remat (JAX's ``nothing_saveable``) up to the predicted peak of
    saving everything, ``lo + (hi - lo) * k / points`` for ``k = 1..points`` (``hi`` capped at
    the hardware profile's HBM capacity when saving everything would not fit the device);
    each plan's ``budget_bytes`` says which budget it was made for. ``layer_groups`` is as in
    ``solve``, decided per budget when None.
    """
    if layer_groups is not None and not isinstance(layer_groups, bool):
        raise InvalidArgumentError(
            f"layer_groups must be True, False or None (decide), got {layer_groups!r}.")
    say = progress or (lambda message: None)
    auto = hbm_gb is None
    if auto:
        if isinstance(points, bool) or not isinstance(points, int) or points < 1:
            raise InvalidArgumentError(f"points must be an int >= 1, got {points!r}.")
        hbm_gb = [1.0]  # validated below; the real budgets come from the trace
    budgets = list(hbm_gb) if isinstance(hbm_gb, (list, tuple)) else [hbm_gb]
    if not budgets:
        raise InvalidArgumentError("hbm_gb is an empty list; give at least one budget in GB.")
    for b in budgets:
        hw = _validate(step_fn, example_args, b, hardware, solver_time_limit_s, max_rounds)
    host_ok = _host_memory_available()
    if allow_offload and not host_ok:
        raise UnsupportedError(
            f"allow_offload=True, but the {jax.default_backend()} backend here has no "
            f"'{adapter.HOST_KIND}' memory kind, so JAX cannot place residuals in host memory.\n"
            "Fix: run on a GPU/TPU or CPU backend with host memory kinds (JAX >= 0.4.31), "
            "or pass allow_offload=False.")
    offload = host_ok if allow_offload is None else bool(allow_offload)
    opts = SolverOptions(time_limit_s=float(solver_time_limit_s))
    timings = []
    t = time.perf_counter()
    say("tracing the step and compiling it under full remat (the anchor)")
    # One region per call site; merged, identical ones share their decisions (uniform).
    sites = trace_step(step_fn, example_args, split_call_sites=True)
    tr = merge_call_sites(sites)
    timings.append(("trace + anchor compile", time.perf_counter() - t))
    t = time.perf_counter()
    graph = build_graph(tr)
    # Layer groups: candidates when the step has several call sites (True) or identical
    # regions at several call sites (None: then the solver says whether they pay).
    grouped = None
    if (layer_groups is True and len(sites.regions) > 1) or (
            layer_groups is None and any(r.call_sites > 1 for r in tr.regions)):
        grouped = (sites, build_graph(sites))
    timings.append(("graph", time.perf_counter() - t))
    if auto:
        budgets = _span_budgets(tr, graph, hw, offload, points)
    _warn_above_allocator_limit(max(budgets), hw)
    out = []
    solves = _Solves()
    for b in budgets:
        try:
            use = (tr, graph)
            if grouped is not None and (layer_groups or _groups_pay(
                    *grouped, hw, offload, _usable(int(b * GB), hw, _io_bytes(tr)), solves,
                    opts, say)):
                use = grouped
            out.append(_plan_one(step_fn, example_args, *use, hw, offload, int(b * GB), solves,
                                 opts, verify_compile, max_rounds, list(timings), say))
        except PlannerError as e:
            if _raise:
                raise
            out.append(e)
    return out


UNIFORM = "planner, one policy for all groups"


def _allocator_limit_bytes() -> int | None:
    """This process's device allocator limit (``memory_stats()["bytes_limit"]``), or None
    where the backend does not say (XLA:CPU)."""
    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:  # a backend without memory statistics
        return None
    limit = (stats or {}).get("bytes_limit")
    return int(limit) if limit else None


def _warn_above_allocator_limit(budget_gb: float, hw) -> None:
    """A GPU budget above what this process's allocator may use: XLA compiles against the
    allocator's limit, not hbm_gb, so say so before the plan is trusted."""
    limit = _allocator_limit_bytes() if hw.platform == "gpu" else None
    if limit is None or budget_gb * GB <= limit:
        return
    warnings.warn(
        f"hbm_gb={budget_gb:g} is above this process's device allocator limit of "
        f"{limit / GB:.2f} GB (memory_stats()['bytes_limit'] = XLA_PYTHON_CLIENT_MEM_FRACTION "
        "x HBM; JAX's default fraction is 0.75).\nWhy: XLA compiles the step against the "
        "allocator's limit, not against hbm_gb; a training process with this limit would "
        "rematerialize on its own or run out of memory with a plan for hbm_gb.\nFix: plan for "
        f"hbm_gb <= {limit / GB:.2f}, or start the training (and planning) process with an "
        f"XLA_PYTHON_CLIENT_MEM_FRACTION whose share of HBM is at least {budget_gb:g} GB.",
        PlanWarning, stacklevel=3)


def _io_bytes(tr: Trace) -> int:
    """The step's arguments and outputs on the device (aliased outputs once): what XLA's
    compile-time memory limit subtracts before it limits the temporaries."""
    a = tr.anchor
    return a.argument_bytes + a.output_bytes - a.alias_bytes


def _usable(requested: int, hw, io_bytes: int) -> int:
    """The bytes a plan may use of ``requested``, the least of

    * ``requested`` less the profile's allocator headroom (fragmentation room), and
    * on GPU, what XLA itself lets the program use when the allocator is capped at
      ``requested``: inputs/outputs plus ``slop`` (0.95) of the rest for temporaries
      (cost_models.compiler_temp_fraction). Above that XLA rematerializes on its own, a
      program slower than the plan: on the H200 every plan whose temporaries reached that
      limit ran slower than the plan one budget below it (benchmarks/results/h200-2026-12-02.md).
    """
    alloc = requested - int(requested * hw.allocator_headroom)
    f = cm.compiler_temp_fraction(hw)
    if f >= 1.0 or requested <= io_bytes:
        return alloc
    return min(alloc, io_bytes + int(f * (requested - io_bytes)))


def _requested_for(usable: float, hw, io_bytes: int) -> float:
    """The smallest budget whose ``_usable`` is at least ``usable`` (its inverse)."""
    need = usable / (1 - hw.allocator_headroom)
    f = cm.compiler_temp_fraction(hw)
    if f < 1.0 and usable > io_bytes:
        need = max(need, io_bytes + (usable - io_bytes) / f)
    return need


class _Solves:
    """The CP-SAT solves of one ``pareto`` call, each (graph, cost model, budget, uniform)
    solved once: deciding whether layer groups pay solves the per-group and the uniform
    problem, which are also a plan's first round and its uniform baseline."""

    def __init__(self):
        self._done: dict[tuple, Solution | InfeasibleBudgetError] = {}

    def __call__(self, graph, cost, budget, opts, *, uniform: bool = False) -> Solution:
        key = (id(graph), cost, budget, uniform)  # graphs live as long as the pareto call
        if key not in self._done:
            try:
                self._done[key] = solve_assignment(graph, cost, budget, opts, uniform=uniform)
            except InfeasibleBudgetError as e:
                self._done[key] = e
        got = self._done[key]
        if isinstance(got, InfeasibleBudgetError):
            raise got
        return got


def _uniform_baseline(graph, cost, budget, solves, opts) -> tuple[Baseline, ...]:
    """For a per-group plan: the best plan that gives every group the same decisions, on the
    same model, so the report shows what deciding per group bought."""
    if all(c.group is None for c in graph.classes):
        return ()
    try:
        sol = solves(graph, cost, budget, opts, uniform=True)
    except InfeasibleBudgetError:
        return ()
    a = _normalize(graph, cost, sol.assignment)
    p = evaluate(cost, graph, a)
    return (Baseline(name=UNIFORM, assignment=a, prediction=p, applicable=True,
                     fits=p.peak_bytes <= budget and p.host_bytes <= cost.host_cap_bytes),)


GROUP_GAIN = 1e-3  # per-group plans when they predict a step this much faster than uniform


def _groups_pay(tr, graph, hw, offload, budget, solves, opts, say) -> bool:
    """Whether deciding each layer group separately predicts a faster step than one decision
    for every group, on the same per-call-site model (the tie is the only difference)."""
    say(f"solving per layer group and uniform for {budget / GB:g} GB")
    cost = build_cost_model(tr, graph, hw, allow_offload=offload)
    try:
        per_group = solves(graph, cost, budget, opts)
    except InfeasibleBudgetError:
        return False
    try:
        uniform = solves(graph, cost, budget, opts, uniform=True)
    except InfeasibleBudgetError:
        return True  # only a per-group plan fits the model
    return per_group.objective_s < uniform.objective_s * (1 - GROUP_GAIN)


def _span_budgets(tr, graph, hw, offload, points: int) -> list[float]:
    """Budgets (GB) from just above full remat's predicted peak to saving everything's."""
    cost = build_cost_model(tr, graph, hw, allow_offload=offload)
    ends = {b.name: b.prediction.peak_bytes for b in evaluate_baselines(
        graph, cost, math.inf, names=("nothing_saveable", "everything_saveable"))}
    lo, hi = ends["nothing_saveable"], max(ends["everything_saveable"], ends["nothing_saveable"])
    # A plan may use less than its budget (_usable: allocator headroom, XLA's own limit), so
    # the budgets are those whose usable bytes span lo..hi (_requested_for). No budget above
    # the device's HBM: when saving everything would not fit, what the plans may use ends at
    # what the HBM leaves usable (where even full remat does not fit, the span stays).
    io = _io_bytes(tr)
    top = _usable(int(hw.hbm_bytes), hw, io)
    if lo < top < hi:
        hi = top
    return [_requested_for(lo + (hi - lo) * k / points, hw, io) / GB
            for k in range(1, points + 1)]


def _plan_one(step_fn, example_args, tr, graph, hw, offload, requested, solves, opts,
              verify_compile, max_rounds, timings, say=lambda message: None) -> Plan:
    budget = _usable(requested, hw, _io_bytes(tr))  # what the plan may use
    headroom = requested - budget
    correction = 0
    rounds = []
    class_names = {c.key: c.name for c in graph.classes}

    def attempt(cost, assignment):
        assignment = _normalize(graph, cost, assignment)
        pred = evaluate(cost, graph, assignment)
        emitted = emit(assignment, class_names, hw)
        if verify_compile:
            say(f"compiling the plan for {budget / GB:g} GB to verify it (round {len(rounds) + 1})")
        t = time.perf_counter()
        ver = verify(step_fn, example_args, tr, graph, cost, assignment, emitted.policy, pred,
                     budget, compile=verify_compile, policies=emitted.policies,
                     compiler_options=emitted.compiler_options)
        timings.append((f"verify (round {len(rounds) + 1})", time.perf_counter() - t))
        rounds.append(Round(correction_bytes=correction, predicted_peak_bytes=pred.peak_bytes,
                            compiled_device_bytes=ver.compiled_device_bytes, status=ver.status))
        return assignment, pred, emitted, ver

    for round_no in range(max_rounds):
        t = time.perf_counter()
        cost = build_cost_model(tr, graph, hw, allow_offload=offload, correction_bytes=correction)
        timings.append((f"cost (round {round_no + 1})", time.perf_counter() - t))
        say(f"solving for {budget / GB:g} GB (round {round_no + 1})")
        t = time.perf_counter()
        try:
            try:
                sol = solves(graph, cost, budget, opts)
            except InfeasibleBudgetError as e:
                if not verify_compile:
                    raise
                # The model fits nothing: the smallest-memory plan as it really compiles
                # either fits after all (the model is conservative) or names the budget that
                # works.
                sol, pred, emitted, ver = _smallest_plan(graph, cost, opts, budget, attempt, e)
                break
        except InfeasibleBudgetError as e:
            raise _with_headroom(e, requested, headroom, hw, _io_bytes(tr)) from None
        check_solution(graph, cost, sol)
        timings.append((f"solve (round {round_no + 1})", time.perf_counter() - t))
        assignment, pred, emitted, ver = attempt(cost, sol.assignment)
        sol = dataclasses.replace(sol, assignment=assignment)
        if ver.compiled_device_bytes is None or ver.compiled_device_bytes <= budget:
            break
        # The compiler needs more than the model said: learn the error and solve again.
        correction += max(1, ver.compiled_device_bytes - pred.peak_bytes)

    baselines = (evaluate_baselines(graph, cost, budget)
                 + _uniform_baseline(graph, cost, budget, solves, opts))
    plan = Plan(
        budget_bytes=requested, hardware=hw, trace=tr, graph=graph, cost=cost, solution=sol,
        prediction=pred, baselines=baselines, emitted=emitted, verification=ver,
        rounds=tuple(rounds), timings=tuple(timings), headroom_bytes=headroom,
    )
    if ver.compiled_device_bytes is not None and ver.compiled_device_bytes > budget:
        warnings.warn(
            f"After {len(rounds)} rounds the compiled step still needs "
            f"{ver.compiled_device_bytes / GB:.3f} GB against a budget of {budget / GB:.3f} GB. "
            "The plan is returned for inspection; do not run it at this budget. "
            "Raise hbm_gb or max_rounds.", PlanWarning, stacklevel=3)
    failed = [c for c in ver.checks if not c.ok]
    if failed:
        warnings.warn("Verification checks failed: " + "; ".join(c.detail for c in failed),
                      PlanWarning, stacklevel=3)
    return plan
