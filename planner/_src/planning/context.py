"""The records the planning steps share: what is planned (:class:`Subject`), one budget's
context (:class:`Context`), one compiled candidate (:class:`Attempt`) and the log of a
budget's attempts (:class:`Attempts`), with the small rules every step applies to them.

A step is a function of a :class:`Context` and an :class:`Attempts` log that returns a
typed record; no step takes the :class:`~planner._src.planning.planner.Planner` itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

from planner._src.budget import Budget
from planner._src.cost import build_cost_model, evaluate
from planner._src.cost.state import with_state
from planner._src.errors import InfeasibleBudgetError
from planner._src.graph import NAMES_ONLY_WHY, LivenessGraph, class_key
from planner._src.options import PlanOptions
from planner._src.solve import solve_assignment
from planner._src.trainstate.records import StateLeaf
from planner._src.trainstate.select import StateSelection
from planner._src.types import (
    Assignment,
    CostModel,
    Emitted,
    Prediction,
    Round,
    Solution,
    Status,
    Trace,
    Verification,
)
from planner._src.xla import compile_options, deviceless
from planner._src.xla import memo as xla_memo

# Two predicted step times closer than this (relative) are equal: the same decisions summed
# in another order differ by float rounding, far below any decision's time.
STEP_RTOL = 1e-9

# Why a class is forced to be recomputed after the verify stage's replay of JAX's residual
# choice found that the emitted policy does not keep it (the frontier walk).
NOT_KEPT_WHY = (
    "the emitted policy did not keep it when JAX's residual choice was replayed (verify, level 1)"
)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Subject:
    """What is planned and how: the step and its arguments, the hardware, the options, the
    verifying compiler and whether plans may offload. One per Planner."""

    fn: Callable
    args: tuple  # as traced and compiled (placed on a deviceless target)
    user_args: tuple  # as the user gave them
    hardware: Any  # cost_models.HardwareProfile
    options: PlanOptions
    compiler: Any  # xla target: CompilerTarget
    backend: str  # "cuda" for a deviceless target compile, else jax.default_backend()
    offload: bool
    offload_why: str  # why offloading is off where the planner turned it off ("" otherwise)
    say: Callable[[str], None]  # progress messages
    # The Planner's compiles by program text: one compile per distinct program (xla.compile)
    compiles: Any = dataclasses.field(default_factory=xla_memo.CompileMemo)
    # Nothing compiled is run here (no numerics check): compiles are made for their figures
    # only (xla.compile_options.compile_only: the same programs, compiled faster)
    compile_only: bool = False

    @contextlib.contextmanager
    def scope(self):
        """Where traces and compiles run: the target's scope for a deviceless compile; on
        this machine's compiler, XLA's autotune cache directory where one is given, and
        compiles made for their figures only where nothing is run here; and the Planner's
        compiles, each distinct program compiled once."""
        with contextlib.ExitStack() as stack:
            if self.compiler.kind == "deviceless":
                stack.enter_context(deviceless.target_scope(self.compiler))
            else:
                stack.enter_context(compile_options.autotune_cache(self.options.autotune_cache_dir))
                # (a compile asked for its figures only within, e.g. a stock policy's, stays so)
                figures_only = self.compile_only or compile_options.compiling_for_figures_only()
                stack.enter_context(compile_options.compile_only(figures_only))
            stack.enter_context(xla_memo.compile_memo(self.compiles))
            yield

    def compile_workers(self) -> int:
        """How many verify compiles run at once (``PlanOptions.parallel_compiles``; by
        default a quarter of this machine's cores, at most 4: 4 on the H200's 16-core host,
        none on a 2-core CI machine, where concurrent compiles only contend)."""
        n = self.options.parallel_compiles
        return min(4, (os.cpu_count() or 1) // 4) if n is None else n

    def anchor_workers(self) -> int:
        """How many of the trace stage's compiles (the two anchors, the compiler probes) run
        at once: ``PlanOptions.parallel_compiles`` where given; by default
        :meth:`compile_workers`, and two on a machine of 2 or 3 cores: the planning thread
        waits for these compiles (nothing of its own to contend with), and two at once took
        0.72x the wall time of one after the other on a 2-core machine at load 5.8 (the
        100-layer loop of benchmarks/planning_time.py, 5 of 5 runs faster)."""
        if self.options.parallel_compiles is not None:
            return self.options.parallel_compiles
        return max(self.compile_workers(), min(2, os.cpu_count() or 1))

    def plan_fields(self) -> dict:
        """The Plan fields every plan of this subject shares: the verifying compiler, and
        why offloading was off where the planner decided it."""
        c = self.compiler
        note = c.how_to_get_exact if not c.exact else "; ".join(c.caveats)
        return {
            "offload_why": self.offload_why,
            "compiler": c.description,
            "compiler_exact": c.exact,
            "compiler_note": note,
            "compiler_margin": c.margin,
        }


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StateSpec:
    """The train state a budget places (planning/train_state.py): where it is in the
    arguments, its leaves as priced (``layers``: the slices a stacked leaf is streamed in;
    1 where the update cannot be streamed and host leaves come in whole), how the plan is
    applied (``mode``, emit/apply_state.py: "streamed", "whole", or "build": the user's
    ``build(policy, placement)``), and why the placement was planned."""

    selection: StateSelection
    leaves: tuple[StateLeaf, ...]
    layers: int
    mode: str
    mode_why: str
    build: Callable | None = None
    donated: bool = True
    # auto-detected selections are planned only where the budget was refused with the state
    # in HBM: what that refusal said ("" for a selection the user named)
    planned_because: str = ""

    def movable_bytes(self) -> int:
        return sum(x.nbytes for x in self.leaves if x.movable and x.role == "opt")


@dataclasses.dataclass(frozen=True, slots=True)
class AppliedRun:
    """The step as applied for a plan that moves train state, compiled, and the arguments
    placed for it (``fn(*args)`` runs it: the numerics check, on fresh copies)."""

    fn: Callable
    args: tuple


class Solves:
    """The CP-SAT solves of one Planner, each (graph, cost model, budget, uniform) solved
    once: deciding whether layer groups pay solves the per-group and the uniform problem,
    which are also a plan's first round and its uniform baseline."""

    def __init__(self):
        self._done: dict[tuple, Solution | InfeasibleBudgetError] = {}

    def __call__(self, graph, cost, budget, opts, *, uniform: bool = False) -> Solution:
        key = (id(graph), graph.classes, cost, budget, uniform)
        if key not in self._done:
            try:
                self._done[key] = solve_assignment(graph, cost, budget, opts, uniform=uniform)
            except InfeasibleBudgetError as e:
                self._done[key] = e
        got = self._done[key]
        if isinstance(got, InfeasibleBudgetError):
            raise got
        return got


class Timings(list):
    """``(what, seconds)`` of one budget's planning, in order (the report's planning time)."""

    def timed(self, what: str, since: float) -> None:
        self.append((what, time.perf_counter() - since))


@dataclasses.dataclass(frozen=True, slots=True)
class Attempt:
    """One candidate plan, emitted and verified: its decisions, the model's prediction, what
    was emitted, the verification, the classes JAX did not keep, and the model it was
    solved on (``cost``, ``graph``, ``solution``: None where the solver did not make it)."""

    assignment: Assignment
    prediction: Prediction
    emitted: Emitted
    verification: Verification
    not_kept: tuple[str, ...]
    compiled: Any = None  # the verify compile (live), which the numerics check runs
    cost: CostModel | None = None
    graph: LivenessGraph | None = None
    solution: Solution | None = None
    # the train-state leaves this candidate puts in pinned host memory (its compile is the
    # step as applied: an AppliedRun in ``compiled``), and that compile's check
    state_on_host: frozenset = frozenset()
    state_check: Any = None  # trainstate.StateCheck

    def solved(self, solution: Solution, cost: CostModel, graph: LivenessGraph) -> Attempt:
        return dataclasses.replace(self, solution=solution, cost=cost, graph=graph)


@dataclasses.dataclass(slots=True)
class Attempts:
    """The log of one budget's compiled rounds (the report's "rounds") and what they taught:
    the classes JAX did not keep."""

    rounds: list[Round] = dataclasses.field(default_factory=list)
    not_kept: set[str] = dataclasses.field(default_factory=set)

    def record(self, att: Attempt, correction: int, budget: int, purpose: str) -> None:
        """A :class:`Round` of ``att`` (held to ``budget``, its model corrected by
        ``correction``), judged against the classes known not kept before it."""
        self.rounds.append(round_of(att, correction, budget, purpose, self.not_kept))

    def learns(self, att: Attempt) -> bool:
        """Whether ``att`` rests on classes JAX does not keep that were not known: they are
        added, and the plan must be solved again without them."""
        if att.not_kept and not set(att.not_kept) <= self.not_kept:
            self.not_kept |= set(att.not_kept)
            return True
        return False


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Context:
    """What the steps of one budget read: the subject, the trace and graph planned (merged
    or per call site, with the classes the numerics check forced), the budget, and the
    Planner's shared services (solves, stock-policy compiles, the numerics judge)."""

    subject: Subject
    trace: Trace
    graph: LivenessGraph
    budget: Budget
    solves: Solves
    stock: Any  # stock.StockCompiles
    numerics: Any  # numerics_check.NumericsJudge
    timings: Timings
    state: StateSpec | None = None  # the train state placed with the activations
    # an optimizer state found in the arguments but left in HBM: a refusal names it
    offer: StateSelection | None = None

    def cost_model(self, trace: Trace, graph: LivenessGraph, correction: int) -> CostModel:
        """The cost model of one round (corrected by ``correction`` bytes), with the train
        state's leaves priced where the budget places them. A budget that places train state
        keeps the working-set scale 1: the scale check (scale_check.py) judged a small scale
        on a plan with the state in HBM, and moving state to the host moves the peak to
        program points that plan did not show (tests/test_state.py's donated Adam step: its
        step as applied compiles within 12 MB by XLA:CPU's estimate, where the small scale's
        model put no plan under 12.40 MB)."""
        cost = build_cost_model(
            trace,
            graph,
            self.hardware,
            allow_offload=self.subject.offload,
            correction_bytes=correction,
            small_scale=False if self.state is not None else None,
        )
        if self.state is None:
            return cost
        return with_state(cost, self.state.leaves, whole=self.state.mode == "whole")

    @property
    def usable(self) -> int:
        return self.budget.usable

    @property
    def options(self) -> PlanOptions:
        return self.subject.options

    @property
    def hardware(self):
        return self.subject.hardware

    def say(self, message: str) -> None:
        self.subject.say(message)


def faster(step_s: float, than_s: float) -> bool:
    return step_s < than_s * (1 - STEP_RTOL)


def normalize(graph: LivenessGraph, cost: CostModel, a: Assignment) -> Assignment:
    """Drop decisions that change nothing (classes the backward pass never reads)."""
    p = evaluate(cost, graph, a)
    relevant = set()
    for rg, rp in zip(graph.regions, p.regions):
        for c in rg.region.candidates:
            if rp.needed[c.index]:
                relevant.add(class_key(rg.region, c))
    return Assignment.of({k: d for k, d in a.decisions if k in relevant and d != "remat"})


def with_forced(graph: LivenessGraph, keys, why: str) -> LivenessGraph:
    """``graph`` with the classes ``keys`` forced to be recomputed, for ``why``."""
    keys = set(keys)
    if not keys:
        return graph
    classes = tuple(
        dataclasses.replace(c, forced="remat", forced_why=why)
        if c.key in keys and not c.forced
        else c
        for c in graph.classes
    )
    return dataclasses.replace(graph, classes=classes)


def names_only(graph: LivenessGraph, names) -> LivenessGraph:
    """``graph`` with every class whose ``checkpoint_name`` is not in ``names`` forced to be
    recomputed (``PlanOptions.decide_names``); ``graph`` itself where ``names`` is None."""
    if names is None:
        return graph
    keep = set(names)
    return with_forced(graph, [c.key for c in graph.classes if c.name not in keep], NAMES_ONLY_WHY)


def restatus(ver: Verification, budget: int) -> Verification:
    """A compiled verification held to another budget."""
    if ver.compiled_device_bytes is None:
        return ver
    if ver.compiled_device_bytes > budget:
        status = Status.OVER
    elif ver.exact or ver.compiled.device_bytes <= budget:
        status = Status.OK
    else:
        status = Status.UNVERIFIED
    return dataclasses.replace(ver, status=status, usable_bytes=budget)


def limit_of(ver: Verification, budget: int) -> int:
    """What a verified program was held to: ``budget``, or less where its own limit is lower
    (a plan that moves train state to the host under a deviceless bound: its inputs and
    outputs differ from the step's, budget.program_usable)."""
    return min(budget, ver.usable_bytes) if ver.usable_bytes > 0 else budget


def fits(ver: Verification, budget: int) -> bool:
    return ver.compiled_device_bytes is not None and ver.compiled_device_bytes <= limit_of(
        ver, budget
    )


def overrules_model(ver: Verification, budget: int) -> bool:
    """Whether a compile proves the model's "nothing fits" wrong: only an exact figure does.
    On a backend that keeps host arrays in device memory the figure is an estimate (the host
    bytes subtracted), which a k-layer scan body on XLA:CPU drove below the step's arguments
    and outputs alone (35.7 MB of 52.5 MB)."""
    return ver.exact and fits(ver, budget)


def unsolved(assignment, status: str, step_s: float, graph, budget: int) -> Solution:
    """The Solution record of an assignment the solver did not produce (a stock policy, the
    model's smallest plan, a compile that overruled the model): its predicted step as both
    objective and bound."""
    return Solution(
        assignment=assignment,
        status=status,
        objective_s=step_s,
        bound_s=step_s,
        gap=0.0,
        wall_s=0.0,
        num_classes=len(graph.classes),
        num_variables=0,
        usable_bytes=budget,
    )


def round_of(
    att: Attempt, correction: int, budget: int, purpose: str, not_kept=frozenset()
) -> Round:
    """The record of one compiled round (report: JSON "rounds")."""
    v = att.verification
    if att.not_kept and not set(att.not_kept) <= set(not_kept):
        outcome = "JAX does not keep " + ", ".join(sorted(att.not_kept)[:3])
    elif v.compiled_device_bytes is None:
        outcome = "not compiled"
    elif v.compiled_device_bytes > budget:
        outcome = "over budget"
    else:
        outcome = "within budget" if v.ok else v.status
    return Round(
        correction_bytes=correction,
        predicted_peak_bytes=att.prediction.peak_bytes,
        compiled_device_bytes=v.compiled_device_bytes,
        status=v.status,
        purpose=purpose,
        predicted_step_s=att.prediction.step_s,
        outcome=outcome,
    )
