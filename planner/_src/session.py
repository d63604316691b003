"""The planning session: trace a step once, plan it for any number of budgets.

``Planner(step_fn, *example_args, hardware=...)`` runs the trace and graph stages once;
``planner.plan(hbm_gb)`` runs cost -> solve -> emit -> verify for one budget and returns a
:class:`~planner._src.plan.Plan`; ``planner.pareto(...)`` does it for several.
``planner.solve`` and ``planner.pareto`` (the module-level verbs) are thin wrappers.

What a session guarantees, by construction (the compiler is the judge):

* A plan is "within budget" only when the verifying compiler's figure for it,
  ``argument + output - alias + temp`` of ``memory_analysis()``, is within what the budget
  leaves usable (:func:`usable_bytes`). Where the backend keeps host arrays in device memory
  the status says "unverified", never "within budget".
* It never returns a plan predicted slower than the fastest stock policy (JAX's, MaxText's)
  that compiles within the budget on the same compiler: stock policies the model predicts
  faster than the plan are compiled, fastest first, and the first that fits is returned
  instead, with the reason in the report.
* It never raises :class:`InfeasibleBudgetError` while a stock policy compiles within the
  budget: before raising, every applicable stock policy is compiled.
* A plan whose saving rests on a tensor JAX will not keep (the replay of JAX's residual
  choice under the emitted policy disagrees) is solved again with those tensors recomputed.
* The budget is used (``Planner._fill``): a verified plan that compiles more than
  ``fill_slack(budget)`` = max(2% of the planned-to budget, 1 MB) under it, where the model has
  a faster plan with more memory, is followed by at most ``PlanOptions.fill_rounds`` rounds,
  each a real compile: the model is corrected by the last compile's measured error
  (``correction += compiled - predicted``, negative when the model over-predicted: the same
  as solving the uncorrected model against the budget raised by the over-prediction; cost.py)
  and solved again. A new plan replaces the verified one only if it verifies within the
  budget and is predicted faster, so the returned plan never verified over the budget and is
  never predicted slower than the first verified plan; the stock-policy guarantees above are
  checked after it. The report says how much of the budget is left and why.
* Per-call-site decisions (``plan.policies``) only where the user's code can pass the call
  sites different policies, unless asked for with ``layer_groups=True``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import warnings
from collections.abc import Callable
from typing import Any

import jax

import cost_models as cm
from planner._src import numerics
from planner._src.baselines import evaluate_baselines, stock_assignment
from planner._src.budget import headroom_why, io_bytes, requested_for, usable_bytes
from planner._src.cost import build_cost_model, evaluate
from planner._src.emit import emit
from planner._src.errors import (
    InfeasibleBudgetError,
    InvalidArgumentError,
    PlannerError,
    PlanWarning,
    SolverError,
    UnsupportedError,
)
from planner._src.graph import NAMES_ONLY_WHY, LivenessGraph, build_graph, class_key
from planner._src.options import PlanOptions, check_fits_device, real_scalar
from planner._src.plan import UNIFORM, Plan
from planner._src.policies import STOCK
from planner._src.solve import check_solution, min_peak_assignment, solve_assignment
from planner._src.state_plan import plan_in_session
from planner._src.trace import merge_call_sites, trace_step
from planner._src.types import (
    Assignment,
    Baseline,
    CostModel,
    Round,
    Solution,
    Status,
    Verification,
)
from planner._src.units import GB, fmt_bytes, gb_at_least
from planner._src.verify import (
    policy_maker,
    precompile,
    verify,
)
from planner._src.xla import adapter, gpus, targets
from planner._src.xla import compile as xla_compile
from planner._src.xla.deviceless import args_for, target_scope

__all__ = ["Planner", "pareto", "solve"]


# ------------------------------------------------------------------------------ validation


def _validate_step(step_fn, example_args) -> None:
    if not callable(step_fn):
        raise InvalidArgumentError(
            f"step_fn must be a callable train step, got {type(step_fn).__name__}.\n"
            "Fix: pass the function itself, e.g. planner.solve(train_step, state, batch, hbm_gb=80)."
        )
    if not example_args:
        raise InvalidArgumentError(
            "No example arguments were given.\nWhy: the planner traces step_fn(*example_args) "
            "to see the shapes of every activation.\nFix: pass the arguments the step takes, "
            "as arrays or jax.ShapeDtypeStruct: planner.solve(step, state, batch, hbm_gb=...)."
        )


def _validate_budget(hbm_gb) -> float:
    hbm_gb = real_scalar(hbm_gb)  # np.float32(40), jnp.array(40.) are numbers too (options.py)
    if isinstance(hbm_gb, bool) or not isinstance(hbm_gb, (int, float)):
        raise InvalidArgumentError(
            f"hbm_gb must be a number of gigabytes (10^9 bytes), got {hbm_gb!r}.\n"
            "Fix: e.g. hbm_gb=141 for a whole H200, or less to leave room for other buffers."
        )
    if not math.isfinite(hbm_gb) or hbm_gb <= 0:
        raise InvalidArgumentError(
            f"hbm_gb must be a positive, finite number of gigabytes, got {hbm_gb!r}.\n"
            "Fix: pass the device memory the step may use, e.g. hbm_gb=80."
        )
    if hbm_gb > 100_000:
        raise InvalidArgumentError(
            f"hbm_gb={hbm_gb!r} is over 100 TB for one device: the budget is per device, in GB "
            "(10^9 bytes), not in bytes or MB.\nFix: e.g. hbm_gb=141 for an H200."
        )
    return float(hbm_gb)


def _load_hardware(hardware):
    try:
        return cm.load_profile(hardware)
    except cm.ProfileError as e:
        raise InvalidArgumentError(str(e)) from e


def _host_memory_available() -> bool:
    try:
        kinds = {m.kind for m in jax.devices()[0].addressable_memories()}
    except Exception:  # noqa: BLE001  (backends without the memories API)
        return False
    return adapter.HOST_KIND in kinds


def step_devices(example_args) -> int:
    """How many devices the step is partitioned over: the largest mesh among the example
    arguments' NamedShardings (1 when none is sharded)."""
    n = 1
    for x in jax.tree.leaves(example_args):
        mesh = getattr(getattr(x, "sharding", None), "mesh", None)
        size = getattr(mesh, "size", None)
        if isinstance(size, int) and not getattr(mesh, "empty", False):
            n = max(n, size)
    return n


def resolve_compiler(hw, example_args, choice: str) -> targets.CompilerTarget:
    """The verifying compiler for ``hw`` (PlanOptions.compiler): the target GPU's XLA, on this
    device or deviceless, where it can be had ("auto", "target"), else this machine's
    backend, labelled an estimate where it is not the target's ("local")."""
    gpu = None
    if hw.platform == "gpu":
        try:
            gpu = gpus.gpu(hw.name).name
        except gpus.TargetError:
            gpu = None  # a GPU profile without a target config (a calibrated one, say)
    n = step_devices(example_args)
    if choice == "local" or gpu is None:
        local = targets.resolve(None, num_devices=n)
        if gpu is None and hw.platform == "gpu" and jax.default_backend() == "cpu":
            return dataclasses.replace(
                local,
                description="XLA:CPU (another backend: an estimate)",
                exact=False,
                how_to_get_exact=f"the {hw.name} profile names no GPU the planner has a "
                "target config for; plan with one of h100-sxm, h100-pcie, h200, b200, gb200, "
                "gh200, or on that GPU",
            )
        if choice == "local" and hw.platform == "gpu" and jax.default_backend() == "cpu":
            return dataclasses.replace(
                local,
                description="XLA:CPU (another backend: an estimate)",
                exact=False,
                how_to_get_exact="compiler='auto'",
            )
        return local
    got = targets.resolve(gpu, num_devices=n)
    if choice == "target" and not got.exact:
        raise UnsupportedError(
            f"compiler='target', but {got.how_to_get_exact or 'the target compiler is not here'}"
        )
    return got


def _options(options: PlanOptions | None, overrides: dict) -> PlanOptions:
    options = options or PlanOptions()
    if not overrides:
        return options
    names = {f.name for f in dataclasses.fields(PlanOptions)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise InvalidArgumentError(
            f"Unknown option(s) {', '.join(unknown)}.\nFix: use the fields of "
            f"planner.PlanOptions: {', '.join(sorted(names))}."
        )
    return dataclasses.replace(options, **overrides)


# ------------------------------------------------------------------------------ budgets


def _fixed_why(fixed: int, io: int) -> str:
    """The refusal's account of the memory model's plan-independent bytes. That term is
    fitted: the full-remat anchor's compile less the model's residuals and working set. Where
    it comes out below the step's own arguments and outputs (a compiler that reuses their
    buffers for temporaries, or holds as much under every policy, as XLA:CPU of JAX 0.10.2
    does for a ViT; measured: benchmarks/results/new-user-2026-12-06.md), it is not "parameters,
    optimizer state, ..." and is not called so."""
    if fixed >= io:
        return (
            f"{fmt_bytes(fixed)} do not depend on the plan (parameters, optimizer state, batch, "
            "outputs, activations outside checkpoint regions, compiler buffers)"
        )
    return (
        f"the step's arguments and outputs take {fmt_bytes(io)} (parameters, optimizer state, "
        f"batch); fitted to this compiler's programs, the memory model counts only "
        f"{fmt_bytes(fixed)} as independent of the plan (the compiler reuses their buffers, "
        "or holds memory no policy changes)"
    )


def _allocator_limit_bytes() -> int | None:
    """This process's device allocator limit (``memory_stats()["bytes_limit"]``), or None
    where the backend does not say (XLA:CPU)."""
    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:  # noqa: BLE001  (a backend without memory statistics)
        return None
    limit = (stats or {}).get("bytes_limit")
    return int(limit) if limit else None


def _warn_above_allocator_limit(budget_gb: float, hw) -> None:
    """A GPU budget above what this process's allocator may use: XLA compiles against the
    allocator's limit, not hbm_gb, so say so before the plan is trusted."""
    check_fits_device(budget_gb, hw)  # above the device's HBM: an error (options.py)
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
        PlanWarning,
        stacklevel=4,
    )


# ------------------------------------------------------------------------------ helpers


MAX_NUMERICS_REPLANS = 3  # re-plans per session after a numerics mismatch
NUMERICS_FORCED_WHY = (
    "keeping it changed the step's outputs beyond rounding (a JAX/XLA bug, isolated by the "
    "numerics check)"
)


# Using the whole budget (Planner._fill): a verified plan leaving more than this of the
# planned-to budget unused, where the model has a faster plan, starts fill rounds. 2% of the
# budget: issue 18 asks the largest-budget plans to compile within 5% of it; 1 MB: a floor (a
# choice, not a measurement) so that the small CPU models of the tests, with budgets of tens
# of MB, do not spend a solve and a compile on a fraction of a megabyte.
FILL_FRACTION = 0.02
FILL_MIN_BYTES = 1_000_000
# Two predicted step times closer than this (relative) are equal: the same decisions summed
# in another order differ by float rounding, far below any decision's time.
STEP_RTOL = 1e-9


# Why a class is forced to be recomputed after the verify stage's replay of JAX's residual
# choice found that the emitted policy does not keep it (the fit and the fill rounds).
NOT_KEPT_WHY = (
    "the emitted policy did not keep it when JAX's residual choice was replayed (verify, level 1)"
)


def fill_slack(budget: int) -> int:
    """Bytes of the planned-to ``budget`` a verified plan may leave unused before
    ``Planner._fill`` tries a faster plan: ``max(FILL_FRACTION * budget, FILL_MIN_BYTES)``."""
    return max(int(FILL_FRACTION * budget), FILL_MIN_BYTES)


def _faster(step_s: float, than_s: float) -> bool:
    return step_s < than_s * (1 - STEP_RTOL)


def _normalize(graph: LivenessGraph, cost: CostModel, a: Assignment) -> Assignment:
    """Drop decisions that change nothing (classes the backward pass never reads)."""
    p = evaluate(cost, graph, a)
    relevant = set()
    for rg, rp in zip(graph.regions, p.regions):
        for c in rg.region.candidates:
            if rp.needed[c.index]:
                relevant.add(class_key(rg.region, c))
    return Assignment.of({k: d for k, d in a.decisions if k in relevant and d != "remat"})


def _with_forced(graph: LivenessGraph, keys, why: str) -> LivenessGraph:
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


def _names_only(graph: LivenessGraph, names) -> LivenessGraph:
    """``graph`` with every class whose ``checkpoint_name`` is not in ``names`` forced to be
    recomputed (``PlanOptions.decide_names``); ``graph`` itself where ``names`` is None."""
    if names is None:
        return graph
    keep = set(names)
    return _with_forced(graph, [c.key for c in graph.classes if c.name not in keep], NAMES_ONLY_WHY)


def _restatus(ver: Verification, budget: int) -> Verification:
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


def _fits(ver: Verification, budget: int) -> bool:
    return ver.compiled_device_bytes is not None and ver.compiled_device_bytes <= budget


def overrules_model(ver: Verification, budget: int) -> bool:
    """Whether a compile proves the model's "nothing fits" wrong: only an exact figure does.
    On a backend that keeps host arrays in device memory the figure is an estimate (the host
    bytes subtracted), which a k-layer scan body on XLA:CPU drove below the step's arguments
    and outputs alone (35.7 MB of 52.5 MB)."""
    return ver.exact and _fits(ver, budget)


def _unsolved(assignment, status: str, step_s: float, graph, budget: int) -> Solution:
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


def _round(att, correction: int, budget: int, purpose: str, not_kept=frozenset()) -> Round:
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


def _within(slack: int, budget: int) -> str:
    return (
        f"within the fill margin, max({FILL_FRACTION:.0%} of the budget, "
        f"{fmt_bytes(FILL_MIN_BYTES)}) = {fmt_bytes(slack)}"
    )


# The cost model's step-time error: predicted step time is -5.0% to +7.2% of measured over
# 13 H200 budgets (measured: benchmarks/results/h200-2026-12-02.md). An unverified answer must be
# predicted faster than a verified one by more than this to be preferred.
STEP_MODEL_ERROR = 0.072

CPU_OFFLOAD_WHY = "offload off: the target is a CPU; host memory is the same memory"


# How much slower than the first solution a stock policy may be predicted and still have its
# verify compile started beside the plan's (Planner._prefetch_stock).
PREFETCH_MARGIN = 0.05
# Before refusing a budget, the model's plans at these fractions of the way from its smallest
# plan's predicted peak to save-everything's are compiled too (Planner._probe_frontier).
PROBE_FRACTIONS = (0.25, 0.5, 0.75)
PROBE_BELOW = 0.85  # no probes below this share of the smallest figure compiled so far


def _offload_choice(allow_offload, host_ok: bool, platform: str) -> tuple[bool, str]:
    """Whether plans may offload, and the report's line where the session turned it off.

    On a CPU target pinned_host is the same DRAM as the "device": an offloaded tensor still
    occupies the memory the budget is about, so offloading saves nothing there and XLA:CPU
    counts it in temp (the status can only be "unverified"), so an offloading policy can
    compile over a budget full remat meets. Off by default there;
    an explicit allow_offload=True is kept (a CPU profile standing in for a target with host
    memory, as the tests' fake devices do) with a warning."""
    if allow_offload is None:
        if platform == "cpu":
            return False, CPU_OFFLOAD_WHY
        return host_ok, ""
    if allow_offload and platform == "cpu":
        warnings.warn(
            "allow_offload=True for a CPU target: offloaded tensors stay in the same memory.\n"
            "Why: on a CPU, pinned_host and the device are one DRAM, so offloading frees none "
            "of the budget, and XLA:CPU counts the offloaded bytes in temp, so such a plan can "
            "only be 'unverified' (it may compile over the budget).\n"
            "Fix: leave allow_offload unset (None) for a CPU target, or plan for the target "
            "that has host memory (hardware='h200', which compiles deviceless for the GPU).",
            PlanWarning,
            stacklevel=4,
        )
    return bool(allow_offload), ""


class _Solves:
    """The CP-SAT solves of one session, each (graph, cost model, budget, uniform) solved
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


@dataclasses.dataclass(frozen=True, slots=True)
class _Attempt:
    assignment: Assignment
    prediction: Any
    emitted: Any
    verification: Verification
    not_kept: tuple[str, ...]
    compiled: Any = None  # the verify compile (live), which the numerics check runs


# ------------------------------------------------------------------------------ the session


class Planner:
    """A train step traced once, planned for any number of budgets.

        session = planner.Planner(train_step, state, batch, hardware="h200")
        plan = session.plan(hbm_gb=80)
        plans = session.pareto(hbm_gb=[60, 80, 100])

    Args:
      step_fn: the train step (loss, gradient and update), unmodified. Its
        ``jax.checkpoint`` / ``jax.remat`` / Flax remat regions are what the planner decides.
      example_args: arrays or ``jax.ShapeDtypeStruct``s, as the step takes them.
      hardware: a profile name (``planner.list_profiles()``), a JSON file, or a profile.
      options: a :class:`planner.PlanOptions`; its fields may also be given as keywords.
      progress: called with a short message as each slow stage starts; None: silent.
    """

    def __init__(
        self,
        step_fn: Callable,
        *example_args,
        hardware="h200",
        options: PlanOptions | None = None,
        progress: Callable[[str], None] | None = None,
        **option_fields,
    ):
        _validate_step(step_fn, example_args)
        self.options = _options(options, option_fields)
        self.hardware = _load_hardware(hardware)
        self._step = step_fn
        self._args = example_args
        self._user_args = example_args  # as given (self._args may be placed on the target)
        self._reference = None  # the step's outputs under the user's policies (numerics)
        self._sensitivity = None  # rounding-only runs of the step (numerics.run_sensitivity)
        self._float64_tried = False  # the step was run in float64 (_judged)
        self._float64 = None  # its outputs (numerics.run_float64), None: not run or cannot
        # classes whose saving changed the step's outputs (numerics.isolate): recomputed in
        # every later plan of this session; key -> what was measured
        self._numerics_forced: dict[str, str] = {}
        self._replans = 0
        self._say = progress or (lambda message: None)
        self.compiler = resolve_compiler(self.hardware, example_args, self.options.compiler)
        deviceless = self.compiler.kind == "deviceless"
        if deviceless:
            self._args = args_for(self.compiler, example_args)
        self._backend = "cuda" if deviceless else jax.default_backend()
        host_ok = deviceless or _host_memory_available()
        if self.options.allow_offload and not host_ok:
            raise UnsupportedError(
                f"allow_offload=True, but the {jax.default_backend()} backend here has no "
                f"'{adapter.HOST_KIND}' memory kind, so JAX cannot place residuals in host "
                "memory.\nFix: run on a GPU/TPU or CPU backend with host memory kinds (JAX >= "
                "0.4.31), or pass allow_offload=False."
            )
        self.offload, self.offload_why = _offload_choice(
            self.options.allow_offload, host_ok, self.hardware.platform
        )
        if self.options.check_numerics:
            why = self._numerics_impossible()
            if why:
                raise InvalidArgumentError(
                    f"check_numerics=True, but {why}.\nFix: {numerics.HOW_TO_CHECK}; or leave "
                    "check_numerics=None, and the report says the numerics were not checked."
                )
        self.timings: list[tuple[str, float]] = []
        t = time.perf_counter()
        self._say(
            "tracing the step and compiling it under full remat and save-everything (the anchors)"
        )
        # One region per call site; merged, identical ones share their decisions (uniform).
        with self._scope():
            self.sites = trace_step(
                step_fn,
                self._args,
                split_call_sites=True,
                backend=self._backend,
                compiler=self.compiler.description,
                hardware=self.hardware,
                workers=self.compile_workers(),
            )
        self.trace = merge_call_sites(self.sites)
        self.timings.append(("trace + anchor compiles", time.perf_counter() - t))
        t = time.perf_counter()
        self.graph = _names_only(build_graph(self.trace), self.options.decide_names)
        self._grouped = None
        if self._groups_possible():
            self._grouped = (
                self.sites,
                _names_only(build_graph(self.sites), self.options.decide_names),
            )
        self.timings.append(("graph", time.perf_counter() - t))
        self._solves = _Solves()
        self._last_timings: list[tuple[str, float]] = []
        # name -> the verifying compiler's verification of that stock policy (budget-free);
        # the anchors are two of them already.
        self._stock_ver: dict[str, Verification] = {}
        self._stock_compiled: dict[str, Any] = {}  # name -> its verify compile (live)
        # name -> its verify program (a Future of a Precompiled), compiled ahead on the
        # session's compile threads (_prefetch_stock) while the planning thread goes on
        self._stock_pre: dict[str, Any] = {}
        self._pool = None  # those threads, started at the first _prefetch_stock
        self._stock_bytes: dict[str, int] = {"nothing_saveable": self.trace.anchor.device_bytes}
        if self.trace.anchor_saved is not None:
            self._stock_bytes["everything_saveable"] = self.trace.anchor_saved.device_bytes

    def plan_fields(self) -> dict:
        """The Plan fields every plan of this session shares: the verifying compiler, and
        why offloading was off where the session decided it (``offload_why``); a stage
        that builds a Plan of this session (state_plan.py) passes them on."""
        c = self.compiler
        note = c.how_to_get_exact if not c.exact else "; ".join(c.caveats)
        return {
            "offload_why": self.offload_why,
            "compiler": c.description,
            "compiler_exact": c.exact,
            "compiler_note": note,
            "compiler_margin": c.margin,
        }

    def _scope(self):
        """Where traces and compiles run: the target's scope for a deviceless compile; on
        this machine's compiler, XLA's autotune cache directory where one is given."""
        if self.compiler.kind == "deviceless":
            return target_scope(self.compiler)
        return xla_compile.autotune_cache(self.options.autotune_cache_dir)

    # ------------------------------------- for stages that plan with a session (state_plan.py)

    @property
    def example_args(self) -> tuple:
        """The example arguments as given to the constructor (concrete arrays or
        ShapeDtypeStructs; not the copies placed on a deviceless target)."""
        return self._user_args

    @property
    def backend(self) -> str:
        """The backend this session traces and compiles for: ``"cuda"`` for a deviceless
        target compile, else this machine's ``jax.default_backend()``."""
        return self._backend

    def plan_activations(self, requested: int) -> Plan:
        """The plan for ``requested`` bytes per device (before headroom) that decides the
        activations only, with the train state where the step has it: what :meth:`plan`
        returns without ``opt_state_argnum``, whatever the session's options say."""
        return self._plan_one(requested)

    def numerics_not_checked_why(self) -> str:
        """Why this session's plans get no numerics check ('' when they do):
        ``check_numerics=False``, abstract example arguments, or a compiler for a GPU that
        is not here."""
        if self.options.check_numerics is False:
            return "check_numerics=False"
        return self._numerics_impossible()

    def judge_run(self, plan: Plan, run: Callable[[], Any]):
        """The outputs of ``run()`` (a step that applies ``plan``, on its own arguments)
        judged against the step under the user's own policies on the example arguments
        (run first, once per session, with its rounding-only runs: numerics.reference_runs):
        numerics.judge's result."""
        self._ensure_reference(plan.trace.float_dtypes)
        return self._judged(run(), plan)

    def _judged(self, planned, plan: Plan):
        """numerics.judge of ``planned`` (the outputs of a step applying ``plan``); where it
        fails, once per session the step is run in float64 (numerics.run_float64): a leaf the
        float32 step computes no better than the plan does (Adam on near-zero gradients;
        measured: benchmarks/results/new-user-2026-12-06b.md, F2) passes when the plan is no farther
        from the float64 answer than twice the user's own step is (numerics.compare)."""

        def judged():
            return numerics.judge(
                planned,
                self._reference,
                numerics.coarsest_eps(
                    self._args, self._reference, computed=plan.trace.float_dtypes
                ),
                decisions=plan.decisions(),
                ran_on=numerics.backend_note(),
                sensitivity=self._sensitivity,
                float64=self._float64,
            )

        result = judged()
        if result.ok or self._float64_tried:
            return result
        self._float64_tried = True
        t = time.perf_counter()
        self._float64 = numerics.run_float64(
            self._step, self._args, draws_random=plan.trace.draws_random
        )
        self._last_timings.append(("numerics: the step in float64", time.perf_counter() - t))
        return result if self._float64 is None else judged()

    def _ensure_reference(self, float_dtypes) -> None:
        if self._reference is None:
            self._reference, self._sensitivity = numerics.reference_runs(
                self._step, self._args, float_dtypes
            )

    # -------------------------------------------------------------------- public

    def plan(
        self,
        hbm_gb: float,
        *,
        opt_state_argnum: int | None = None,
        params_argnum: int | None = None,
        build: Callable | None = None,
        stream_params: bool | None = None,
    ) -> Plan:
        """The plan for one budget (GB per device); raises InfeasibleBudgetError when neither
        a plan nor a stock policy fits.

        ``opt_state_argnum`` (default: the session's ``PlanOptions.opt_state_argnum``): which
        argument of the step is the optimizer state; the plan then also decides which of its
        leaves live in pinned host memory (``plan.state``; planner/_src/state_plan.py), and
        ``params_argnum`` names the parameters for the budget split. ``build(policy,
        placement) -> (jitted_step, args)``: your step as you run it under a plan's policy
        and placement (``plan.state.shardings``, ``plan.state.streamed_update``, donated),
        compiled to hold a plan that moves state to the budget and run to check its numbers
        against your step's; without it such a plan is not compiled (the report says so).
        ``stream_params`` (default: ``PlanOptions.stream_params``): your step streams its
        stacked layer parameters (``plan.state.stream_layer_params``), so the plan may put
        them in pinned host memory too (``plan.state.streamed_apply`` updates them)."""
        b = _validate_budget(hbm_gb)
        _warn_above_allocator_limit(b, self.hardware)
        return self._plan_budget(int(b * GB), opt_state_argnum, params_argnum, build, stream_params)

    def _plan_budget(
        self,
        requested: int,
        opt_state_argnum=None,
        params_argnum=None,
        build=None,
        stream_params=None,
    ) -> Plan:
        """``_plan_one``, or with the optimizer state's placement where it is asked for (by
        the arguments or the session's options)."""
        if opt_state_argnum is None and params_argnum is None:
            opt_state_argnum = self.options.opt_state_argnum
            params_argnum = self.options.params_argnum
        if stream_params is None:
            stream_params = self.options.stream_params
        if opt_state_argnum is None:
            if params_argnum is not None or build is not None:
                what = "params_argnum" if params_argnum is not None else "build"
                raise InvalidArgumentError(
                    f"{what} was given without opt_state_argnum.\nWhy: both belong to "
                    "planning the optimizer state's placement, which opt_state_argnum asks "
                    "for.\nFix: pass opt_state_argnum (e.g. opt_state_argnum=1 for "
                    "train_step(params, opt_state, batch)), or neither."
                )
            return self._plan_one(requested)
        PlanOptions(  # checks
            opt_state_argnum=opt_state_argnum,
            params_argnum=params_argnum,
            stream_params=bool(stream_params),
        )
        return plan_in_session(
            self,
            requested,
            opt_state_argnum=opt_state_argnum,
            params_argnum=params_argnum,
            build=build,
            stream_params=bool(stream_params),
        )

    def pareto(self, hbm_gb=None, *, points: int = 5) -> list:
        """Plans for several budgets: ``[Plan or PlannerError per budget]``.

        ``hbm_gb=None`` spans the whole trade-off: ``points`` budgets whose usable bytes are
        evenly spaced above the predicted peak of full remat up to that of saving everything
        (capped at the device's HBM), ``lo + (hi - lo) * k / points`` for ``k = 1..points``."""
        if hbm_gb is None:
            if isinstance(points, bool) or not isinstance(points, int) or points < 1:
                raise InvalidArgumentError(f"points must be an int >= 1, got {points!r}.")
            budgets = self._span_budgets(points)
        else:
            budgets = list(hbm_gb) if isinstance(hbm_gb, (list, tuple)) else [hbm_gb]
            if not budgets:
                raise InvalidArgumentError(
                    "hbm_gb is an empty list; give at least one budget in GB."
                )
            budgets = [_validate_budget(b) for b in budgets]
        _warn_above_allocator_limit(max(budgets), self.hardware)
        out = []
        for b in budgets:
            try:
                out.append(self._plan_budget(int(b * GB)))
            except PlannerError as e:
                out.append(e)
        return out

    # -------------------------------------------------------------------- groups

    def _groups_possible(self) -> bool:
        """Whether per-call-site decisions are candidates (options.layer_groups)."""
        lg = self.options.layer_groups
        if lg is False or len(self.sites.regions) <= 1:
            return False
        if lg is True:
            return True
        # None: only call sites the user's code can give different policies (trace.site_key).
        keys_by_body: dict[str, set[str]] = {}
        for r in self.sites.regions:
            keys_by_body.setdefault(r.body, set()).add(r.site_key)
        return any(len(keys) > 1 for keys in keys_by_body.values())

    def _groups_pay(self, budget: int) -> bool:
        """Whether deciding each call site separately predicts a faster step than one
        decision for every call site, on the same per-call-site model."""
        tr, graph = self._grouped
        self._say(f"solving per layer group and uniform for {budget / GB:g} GB")
        cost = build_cost_model(tr, graph, self.hardware, allow_offload=self.offload)
        opts = self.options.solver
        try:
            per_group = self._solves(graph, cost, budget, opts)
        except InfeasibleBudgetError:
            return False
        try:
            uniform = self._solves(graph, cost, budget, opts, uniform=True)
        except InfeasibleBudgetError:
            return True  # only a per-group plan fits the model
        return per_group.objective_s < uniform.objective_s * (1 - self.options.group_gain)

    def _uniform_baseline(self, graph, cost, budget) -> tuple[Baseline, ...]:
        """For a per-group plan: the best plan that gives every group the same decisions, on
        the same model, so the report shows what deciding per group bought."""
        if all(c.group is None for c in graph.classes):
            return ()
        try:
            sol = self._solves(graph, cost, budget, self.options.solver, uniform=True)
        except InfeasibleBudgetError:
            return ()
        a = _normalize(graph, cost, sol.assignment)
        p = evaluate(cost, graph, a)
        return (
            Baseline(
                name=UNIFORM,
                assignment=a,
                prediction=p,
                applicable=True,
                fits=p.peak_bytes <= budget and p.host_bytes <= cost.host_cap_bytes,
            ),
        )

    # -------------------------------------------------------------------- budgets

    def _span_budgets(self, points: int) -> list[float]:
        """Budgets (GB) from just above full remat's predicted peak to saving everything's."""
        tr, graph, hw = self.trace, self.graph, self.hardware
        cost = build_cost_model(tr, graph, hw, allow_offload=self.offload)
        ends = {
            b.name: b.prediction.peak_bytes
            for b in evaluate_baselines(
                graph, cost, math.inf, names=("nothing_saveable", "everything_saveable")
            )
        }
        lo = ends["nothing_saveable"]
        hi = max(ends["everything_saveable"], ends["nothing_saveable"])
        # A plan may use less than its budget (usable_bytes), so the budgets are those whose
        # usable bytes span lo..hi. No budget above the device's HBM: when saving everything
        # would not fit, what the plans may use ends at what the HBM leaves usable.
        io = io_bytes(tr)
        m = self.compiler.margin
        top = usable_bytes(int(hw.hbm_bytes), hw, io, m)
        if lo < top < hi:
            hi = top
        return [
            requested_for(lo + (hi - lo) * k / points, hw, io, m) / GB for k in range(1, points + 1)
        ]

    # -------------------------------------------------------------------- one budget

    def _attempt(
        self,
        tr,
        graph,
        cost,
        assignment,
        budget,
        *,
        stock: str | None = None,
        label: str = "",
        precompiled=None,
    ) -> _Attempt:
        """Emit ``assignment`` (or the stock policy ``stock``) and verify it (``precompiled``:
        its compile, started by :meth:`_start_plan_compile`)."""
        if stock is None:
            assignment = _normalize(graph, cost, assignment)
        pred = evaluate(cost, graph, assignment)
        class_names = {c.key: c.name for c in graph.classes}
        emitted = emit(assignment, class_names, self.hardware, stock=stock)
        if self.options.verify_compile:
            self._say(f"compiling {label or 'the plan'} for {budget / GB:g} GB to verify it")
        t = time.perf_counter()
        compiled: list = []
        with self._scope():
            ver, not_kept = verify(
                self._step,
                self._args,
                tr,
                graph,
                cost,
                assignment,
                emitted.policy,
                pred,
                budget,
                compile=self.options.verify_compile,
                policies=emitted.policies,
                compiler_options=emitted.compiler_options,
                backend=self._backend,
                compiler=self.compiler.description,
                compiled_out=compiled,
                schedule_exposure=self.options.schedule_exposure,
                precompiled=self._stock_pre.pop(stock, None) if stock else precompiled,
            )
        self._last_timings.append((f"verify ({label or 'plan'})", time.perf_counter() - t))
        return _Attempt(assignment, pred, emitted, ver, not_kept, compiled[0] if compiled else None)

    # -------------------------------------------------------------------- numerics

    def _numerics_impossible(self) -> str:
        """Why the numerics check cannot run here ('' when it can)."""
        if not numerics.is_concrete(self._user_args):
            return (
                "the example arguments are abstract (jax.ShapeDtypeStruct): there are no "
                "values to run the step on"
            )
        if self.compiler.kind == "deviceless":
            return (
                f"the verifying compiler, {self.compiler.description}, compiles for a GPU "
                "that is not here and cannot run the step"
            )
        return ""

    def _with_numerics(self, plan: Plan, compiled=None) -> Plan:
        """``plan`` with the numerics check (numerics.py) in its verification: a check when
        it ran (a mismatch is the status), a note saying why not and how to check when not."""
        why = self.numerics_not_checked_why()
        if why:
            result = numerics.not_checked(why)
        else:
            self._say("running the planned step and yours once to compare their outputs")
            t = time.perf_counter()
            try:
                self._ensure_reference(plan.trace.float_dtypes)
                planned = numerics.run_planned(
                    self._step,
                    self._args,
                    policy_maker(plan.graph, plan.emitted.policy, plan.emitted.policies),
                    compiled,
                )
            except Exception as e:  # noqa: BLE001  (a step that cannot run here, e.g. OOM)
                if self.options.check_numerics:
                    raise
                result = numerics.not_checked(
                    f"running the step here failed with {type(e).__name__}: {str(e)[:300]}"
                )
            else:
                result = self._judged(planned, plan)
            self._last_timings.append(("numerics check", time.perf_counter() - t))
        ver = plan.verification
        if result.checked:
            ver = dataclasses.replace(
                ver,
                checks=ver.checks + (result.check,),
                status=ver.status if result.ok else Status.NUMERICS,
            )
        else:
            ver = dataclasses.replace(
                ver, note=(ver.note + " " if ver.note else "") + result.detail
            )
        return dataclasses.replace(
            plan, verification=ver, numerics=result, timings=tuple(self._last_timings)
        )

    def _replan_without_culprits(self, plan: Plan, requested: int) -> Plan | None:
        """When the planner's own plan changes the step's outputs beyond rounding (a JAX or
        XLA bug: a valid policy must not change the math; e.g. saving softmax's row-max
        broadcast: benchmarks/results/jax-remat-bug-2026-12-03.md), find the kept classes behind
        it (numerics.isolate: each probe runs the step keeping only a subset), force them to
        be recomputed and plan again. At most ``MAX_NUMERICS_REPLANS`` times per session;
        None when there is nothing to do."""
        res = plan.numerics
        if plan.choice != "planner" or res is None or not res.checked or res.ok:
            return None
        if self._replans >= MAX_NUMERICS_REPLANS:
            return None
        kept = tuple(
            k
            for k, d in plan.assignment.decisions
            if d != "remat" and k not in self._numerics_forced
        )
        names = {c.key: c.name for c in plan.graph.classes}
        eps = numerics.coarsest_eps(self._args, self._reference, computed=plan.trace.float_dtypes)
        probes: list[tuple[tuple[str, ...], bool]] = []

        def differs(sub: tuple[str, ...]) -> bool:
            keep = {k: d for k, d in plan.assignment.decisions if k in set(sub)}
            em = emit(Assignment.of(keep), names, self.hardware)
            out = numerics.run_planned(
                self._step, self._args, policy_maker(plan.graph, em.policy, em.policies)
            )
            checks = numerics.compare(out, self._reference, eps, self._sensitivity, self._float64)
            bad = any(not leaf.ok for leaf in checks)
            probes.append((sub, bad))
            return bad

        self._say(
            f"the plan changes the step's outputs: isolating which of {len(kept)} kept classes"
        )
        t = time.perf_counter()
        try:
            culprits = numerics.isolate(differs, kept)
        except Exception:  # noqa: BLE001  (a probe that cannot run: keep the plan as checked)
            culprits = ()
        self._last_timings.append(
            (f"numerics isolation ({len(probes)} runs)", time.perf_counter() - t)
        )
        if not culprits:
            return None
        labels = {c.key: c.label for c in plan.graph.classes}
        for k in culprits:
            self._numerics_forced[k] = (
                f"keeping {labels.get(k, k)} {plan.assignment.get(k)}d changed the step's "
                f"outputs beyond rounding ({len(probes)} probe runs, JAX {jax.__version__})"
            )
        self._replans += 1
        return self._plan_one(requested)

    def _noting_forced(self, plan: Plan) -> Plan:
        """The verification note names the classes recomputed because keeping them changed
        the math (they are not the plan's choice: JAX/XLA computes them wrongly when kept)."""
        used = {c.key for c in plan.graph.classes}
        hit = [why for k, why in self._numerics_forced.items() if k in used]
        if not hit:
            return plan
        note = (
            "Recomputed, not kept, because keeping them changed the step's outputs beyond "
            "rounding on this JAX/XLA (a compiler bug: a checkpoint policy must not change the "
            "math; the classes were isolated by running the step keeping subsets): "
            + "; ".join(hit)
            + "."
        )
        ver = plan.verification
        ver = dataclasses.replace(ver, note=(ver.note + " " if ver.note else "") + note)
        return dataclasses.replace(plan, verification=ver)

    def _stock_fit_bytes(self, name: str, tr, graph, cost) -> int | None:
        """The verifying compiler's bytes for stock policy ``name``: compiled once per
        session, and once for all stock policies that decide every class alike (the
        anchors give nothing_saveable and everything_saveable)."""
        if name in self._stock_bytes:
            return self._stock_bytes[name]
        if not self.options.verify_compile:
            return None
        pending = self._same_program(name, graph, cost, dict.fromkeys(self._stock_pre, 1))
        if pending is not None and name not in self._stock_pre:  # started in the background
            self._stock_fit_bytes(pending, tr, graph, cost)
        other = self._same_program(name, graph, cost, self._stock_bytes)
        if other is not None:
            got = self._stock_bytes[name] = self._stock_bytes[other]  # the same program
            if other in self._stock_ver:
                self._stock_ver[name] = self._stock_ver[other]
                self._stock_compiled[name] = self._stock_compiled.get(other)
            return got
        att = self._attempt(
            tr, graph, cost, stock_assignment(graph, name), 0, stock=name, label=f"stock {name}"
        )
        self._stock_ver[name] = att.verification
        self._stock_compiled[name] = att.compiled  # the numerics check runs it, if chosen
        self._stock_bytes[name] = att.verification.compiled_device_bytes
        return self._stock_bytes[name]

    @staticmethod
    def _same_program(name: str, graph, cost, compiled) -> str | None:
        """A stock policy among ``compiled`` (names with a figure) that decides every class
        as ``name`` does, offloading alike: the same program, compiled once."""
        a = _normalize(graph, cost, stock_assignment(graph, name))
        for other, got in compiled.items():
            if (
                got is not None
                and other != name
                and STOCK[other].offloads == STOCK[name].offloads
                and _normalize(graph, cost, stock_assignment(graph, other)) == a
            ):
                return other
        return None

    def compile_workers(self) -> int:
        """How many verify compiles run at once (``PlanOptions.parallel_compiles``; by default
        a quarter of this machine's cores, at most 4: 4 on the H200's 16-core host, none on
        a 2-core CI machine, where concurrent compiles only contend)."""
        n = self.options.parallel_compiles
        return min(4, (os.cpu_count() or 1) // 4) if n is None else n

    def _compile_pool(self, workers: int):
        """The session's compile threads (``workers`` of them), started at first use."""
        if self._pool is None:
            import concurrent.futures
            import weakref

            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=workers, thread_name_prefix="planner-compile"
            )
            weakref.finalize(self, self._pool.shutdown, wait=False)
        return self._pool

    def _start_plan_compile(self, graph, cost, assignment):
        """Start the verify compile of the plan ``assignment`` on the compile threads and
        return its ``Future`` (None with fewer than two workers): the planning thread lowers
        the stock policies meanwhile, which would otherwise delay the plan's verify compile
        by seconds (measured: benchmarks/results/planning-time-2026-12-05b.md)."""
        workers = self.compile_workers()
        if workers < 2 or not self.options.verify_compile:
            return None
        assignment = _normalize(graph, cost, assignment)
        class_names = {c.key: c.name for c in graph.classes}
        e = emit(assignment, class_names, self.hardware)
        with self._scope():
            (started,) = precompile(
                self._step,
                self._args,
                graph,
                [(e.policy, e.policies, e.compiler_options)],
                self._compile_pool(workers),
            )
        return started

    def _prefetch_stock(self, names, graph, cost) -> None:
        """Start the verify compiles of the stock policies ``names`` (those not compiled or
        started yet, one per distinct program) on the session's compile threads, and return:
        each is traced and lowered here, compiled there, and taken from ``_stock_pre`` by the
        verify that needs it (which waits for it). The planning thread meanwhile solves and
        verifies the plan (``_plan_one`` starts the stock policies predicted faster than its
        first solution before that solution's verify compile). Where fewer than two workers
        or programs: nothing (each is compiled when verified)."""
        workers = self.compile_workers()
        if workers < 2 or not self.options.verify_compile:
            return
        todo: list[str] = []
        for name in names:
            if name in self._stock_bytes or name in self._stock_pre or name in todo:
                continue
            known = {**self._stock_bytes, **dict.fromkeys([*self._stock_pre, *todo], 1)}
            if self._same_program(name, graph, cost, known) is None:
                todo.append(name)
        if not todo:
            return
        t = time.perf_counter()
        pool = self._compile_pool(workers)
        class_names = {c.key: c.name for c in graph.classes}
        programs = []
        for name in todo:
            e = emit(stock_assignment(graph, name), class_names, self.hardware, stock=name)
            programs.append((e.policy, e.policies, e.compiler_options))
        self._say(f"compiling {len(todo)} stock policies in the background, {workers} at once")
        with self._scope():
            started = precompile(self._step, self._args, graph, programs, pool)
        self._stock_pre.update(zip(todo, started, strict=True))
        self._last_timings.append(
            (
                f"lower {len(todo)} stock policies; compiled in the background, {workers} at once",
                time.perf_counter() - t,
            )
        )

    def _stock_exact(self, name: str) -> bool:
        """Whether stock policy ``name``'s compiled figure is exact (not an estimate with host
        bytes subtracted); the anchors, compiled without offloads, are."""
        ver = self._stock_ver.get(name)
        return ver.exact if ver is not None else True

    def _fastest_verified(self, baselines, tr, graph, cost, budget, plan_att):
        """(name, predicted step s, compiled bytes) of the fastest answer that compiles
        within ``budget`` with an exact figure: the planner's plan (``plan_att``, "planner")
        or a stock policy, compiled fastest first until one fits; None where none does."""
        found = None
        if plan_att is not None and plan_att.verification.exact:
            found = (
                "planner",
                plan_att.prediction.step_s,
                plan_att.verification.compiled_device_bytes,
            )
        ranked = sorted(
            (b for b in baselines if b.applicable and b.name in STOCK),
            key=lambda b: b.prediction.step_s,
        )
        self._prefetch_stock(
            [
                b.name
                for b in ranked
                if (found is None or b.prediction.step_s < found[1])
                and not (STOCK[b.name].offloads and self.hardware.platform == "cpu")
            ],
            graph,
            cost,
        )
        for b in ranked:
            if found is not None and b.prediction.step_s >= found[1]:
                break
            if STOCK[b.name].offloads and self.hardware.platform == "cpu":
                continue  # on a CPU an offloading policy's figure is an estimate
            got = self._stock_fit_bytes(b.name, tr, graph, cost)
            if got is not None and got <= budget and self._stock_exact(b.name):
                return (b.name, b.prediction.step_s, got)
        return found

    def _stock_plan(
        self, name, tr, graph, cost, budget, why, rounds, timings, headroom, requested, baselines
    ) -> Plan:
        """The plan that is stock policy ``name``: its own policy object, verified (the
        compile made while comparing is reused)."""
        a = stock_assignment(graph, name)
        if name in self._stock_ver:
            pred = evaluate(cost, graph, a)
            emitted = emit(a, {c.key: c.name for c in graph.classes}, self.hardware, stock=name)
            att = _Attempt(
                a,
                pred,
                emitted,
                _restatus(self._stock_ver[name], budget),
                (),
                self._stock_compiled.get(name),
            )
        else:
            att = self._attempt(tr, graph, cost, a, budget, stock=name, label=f"stock {name}")
        sol = _unsolved(a, "STOCK", att.prediction.step_s, graph, budget)
        rounds.append(_round(att, cost.correction_bytes, budget, "stock"))
        plan = Plan(
            budget_bytes=requested,
            hardware=self.hardware,
            trace=tr,
            graph=graph,
            cost=cost,
            solution=sol,
            prediction=att.prediction,
            baselines=baselines,
            emitted=att.emitted,
            verification=att.verification,
            rounds=tuple(rounds),
            timings=tuple(timings),
            headroom_bytes=headroom,
            choice=name,
            choice_why=why,
            **self.plan_fields(),
        )
        plan = self._with_numerics(plan, att.compiled)
        if plan.numerics is not None and plan.numerics.checked and not plan.numerics.ok:
            warnings.warn(plan.numerics.detail, PlanWarning, stacklevel=4)
        return plan

    def _plan_one(self, requested: int) -> Plan:
        hw, opts = self.hardware, self.options
        self._last_timings = timings = list(self.timings)
        tr, graph = self.trace, self.graph
        # what the plan may use
        budget = usable_bytes(requested, hw, io_bytes(tr), self.compiler.margin)
        headroom = requested - budget
        if self._grouped is not None and (opts.layer_groups or self._groups_pay(budget)):
            tr, graph = self._grouped
        graph = _with_forced(graph, self._numerics_forced, NUMERICS_FORCED_WHY)
        correction = 0
        not_kept: set[str] = set()
        rounds: list[Round] = []
        best: _Attempt | None = None
        sol: Solution | None = None
        infeasible: InfeasibleBudgetError | None = None
        cost = None
        graph_used = graph
        model_overruled = False  # the model fit nothing, and a compile proved it wrong
        for round_no in range(opts.max_rounds):
            t = time.perf_counter()
            cost = build_cost_model(
                tr, graph, hw, allow_offload=self.offload, correction_bytes=correction
            )
            timings.append((f"cost (round {round_no + 1})", time.perf_counter() - t))
            g = _with_forced(
                graph,
                not_kept,
                NOT_KEPT_WHY,
            )
            self._say(f"solving for {budget / GB:g} GB (round {round_no + 1})")
            t = time.perf_counter()
            try:
                sol = self._solves(g, cost, budget, opts.solver)
                check_solution(g, cost, sol)
                candidate = sol.assignment
            except InfeasibleBudgetError as e:
                infeasible = e
                if not opts.verify_compile:
                    break
                # The model fits nothing: the smallest-memory plan as it really compiles may
                # fit after all (the model is conservative). Where the full-remat anchor, the
                # program compiled first, fits, that is the plan to try: after a correction
                # learned from an under-predicted plan the model can put every plan, full
                # remat too, above a budget full remat meets (tests/test_apply.py).
                if tr.anchor.device_bytes <= budget:
                    candidate = Assignment.of({})
                else:
                    candidate, _ = min_peak_assignment(g, cost, opts.solver)
                sol = None
            timings.append((f"solve (round {round_no + 1})", time.perf_counter() - t))
            plan_pre = None
            if round_no == 0 and opts.compare_stock and opts.verify_compile:
                plan_pre = self._start_plan_compile(g, cost, candidate)
                # The stock policies predicted faster than this first plan are compared with
                # the answer at the end: their compiles start now, beside the plan's. Within
                # PREFETCH_MARGIN of it too: a correction of the fit rounds makes the later
                # plan slower, and a stock policy lowered only after the fill rounds makes its
                # verify wait for its compile (measured: benchmarks/results/planning-time-2026-12-05.md).
                step = (1 + PREFETCH_MARGIN) * evaluate(
                    cost, g, _normalize(g, cost, candidate)
                ).step_s
                self._prefetch_stock(
                    [
                        b.name
                        for b in evaluate_baselines(g, cost, budget)
                        if b.applicable
                        and b.name in STOCK
                        and b.prediction.step_s < step
                        and not (STOCK[b.name].offloads and self.hardware.platform == "cpu")
                    ],
                    g,
                    cost,
                )
            att = self._attempt(tr, g, cost, candidate, budget, precompiled=plan_pre)
            rounds.append(_round(att, correction, budget, "fit", not_kept))
            graph_used = g
            if att.not_kept and not set(att.not_kept) <= not_kept:
                # The plan rests on tensors JAX will not keep: it is wrong, solve without them.
                not_kept |= set(att.not_kept)
                continue
            best = att
            if sol is None:  # the smallest plan: fits or not, nothing smaller to try
                if overrules_model(att.verification, budget):
                    sol = _unsolved(att.assignment, "FEASIBLE", att.prediction.step_s, g, budget)
                    infeasible = None
                    model_overruled = True
                break
            infeasible = None
            ver = att.verification
            if ver.compiled_device_bytes is None or _fits(ver, budget):
                break
            # The compiler needs more than the model said: learn the error and solve again.
            correction += max(1, ver.compiled_device_bytes - att.prediction.peak_bytes)
        if cost is None:
            raise AssertionError("max_rounds >= 1 is validated")
        probed = None
        if (infeasible is not None or model_overruled) and opts.verify_compile:
            # The model fit nothing: its plans for larger budgets may compile within this one
            # (a refusal is then wrong), and faster than the smallest plan that did (else a
            # larger budget can get a slower plan than a smaller one; measured:
            # benchmarks/results/new-user-2026-12-06b.md, F4).
            found, probed = self._probe_frontier(
                tr, graph, not_kept, cost, budget, rounds, tried=best, correction=correction
            )
            if found is not None and (
                infeasible is not None or found[0].prediction.step_s < best.prediction.step_s
            ):
                best, sol, graph_used = found
                infeasible = None
        fill_why = ""
        if best is not None and sol is not None and infeasible is None and opts.verify_compile:
            best, sol, cost, graph_used, fill_why = self._fill(
                tr, graph, not_kept, budget, best, sol, cost, graph_used, rounds
            )
        graph = graph_used
        compiled_stock = {n: b for n, b in self._stock_bytes.items() if b is not None}
        baselines = evaluate_baselines(
            graph, cost, budget, compiled=compiled_stock
        ) + self._uniform_baseline(graph, cost, budget)
        plan_fits = (
            best is not None
            and sol is not None
            and (
                best.verification.compiled_device_bytes is None or _fits(best.verification, budget)
            )
        )

        # Never worse than the stock policies: the fastest stock policy that compiles within
        # the budget wins over a slower (or unfitting) plan.
        plan_why = ""
        if opts.compare_stock and opts.verify_compile:
            plan_step = best.prediction.step_s if plan_fits else math.inf
            faster = sorted(
                (
                    b
                    for b in baselines
                    if b.applicable and b.name in STOCK and b.prediction.step_s < plan_step
                ),
                key=lambda b: b.prediction.step_s,
            )
            pick, why = None, ""
            self._prefetch_stock([b.name for b in faster], graph, cost)
            for b in faster:
                got = self._stock_fit_bytes(b.name, tr, graph, cost)
                if got is not None and got <= budget:
                    pick = b
                    if plan_fits:
                        why = (
                            f"{b.name} is predicted faster than the planner's own plan "
                            f"({b.prediction.step_s * 1e3:.2f} vs "
                            f"{best.prediction.step_s * 1e3:.2f} ms) and compiles within "
                            f"the budget ({got / GB:.3f} of {budget / GB:.3f} GB usable), "
                            "where the model had it "
                            f"at {b.prediction.peak_bytes / GB:.3f} GB"
                        )
                    else:
                        why = (
                            f"the planner's own plan does not fit ({self._plan_miss(best, infeasible)}"
                            f"), while {b.name} compiles within the budget ({got / GB:.3f} "
                            f"of {budget / GB:.3f} GB usable)"
                        )
                    break
            # Verified within budget beats unverified: an answer that fits only by an
            # estimate (host bytes subtracted on a backend without host memory) gives way to
            # the fastest answer whose compiled figure is exact and within the budget, unless
            # it is predicted faster by more than the model's step-time error.
            if pick is not None:
                answer = (pick.name, pick.prediction.step_s, self._stock_exact(pick.name))
            elif plan_fits:
                answer = ("the planner's plan", best.prediction.step_s, best.verification.exact)
            else:
                answer = None
            if answer is not None and not answer[2]:
                sure = self._fastest_verified(
                    baselines, tr, graph, cost, budget, best if plan_fits else None
                )
                if sure is not None:
                    name, step_s, got = sure
                    gain = 1 - answer[1] / step_s
                    figures = (
                        f"{answer[0]} fits only by an estimate (unverified: {self.compiler.description} "
                        f"keeps host memory in the same memory), while {name} compiled within "
                        f"the budget ({got / GB:.3f} of {budget / GB:.3f} GB usable); the "
                        f"unverified one is predicted {gain:.1%} faster ({answer[1] * 1e3:.2f} vs "
                        f"{step_s * 1e3:.2f} ms)"
                    )
                    if gain <= STEP_MODEL_ERROR:
                        why = (
                            "verified within budget beats unverified: "
                            + figures
                            + f", within the model's step-time error ({STEP_MODEL_ERROR:.1%})"
                        )
                        pick = None
                        if name != "planner":
                            pick = next(b for b in baselines if b.name == name)
                        else:
                            plan_why = why
                    else:
                        why = (
                            "kept although unverified: "
                            + figures
                            + f", more than the model's step-time error ({STEP_MODEL_ERROR:.1%})"
                        )
                        if pick is None:
                            plan_why = why
            if pick is not None:
                baselines = evaluate_baselines(
                    graph,
                    cost,
                    budget,
                    compiled={n: v for n, v in self._stock_bytes.items() if v is not None},
                ) + self._uniform_baseline(graph, cost, budget)
                return self._stock_plan(
                    pick.name,
                    tr,
                    graph,
                    cost,
                    budget,
                    why,
                    rounds,
                    timings,
                    headroom,
                    requested,
                    baselines,
                )
        if infeasible is not None or best is None or sol is None:
            raise self._infeasible(requested, budget, headroom, best, infeasible, cost, probed)
        sol = dataclasses.replace(sol, assignment=best.assignment)
        plan = Plan(
            budget_bytes=requested,
            hardware=hw,
            trace=tr,
            graph=graph,
            cost=cost,
            solution=sol,
            prediction=best.prediction,
            baselines=baselines,
            emitted=best.emitted,
            verification=best.verification,
            rounds=tuple(rounds),
            timings=tuple(timings),
            headroom_bytes=headroom,
            choice="planner",
            choice_why=plan_why,
            fill_why=fill_why,
            **self.plan_fields(),
        )
        plan = self._with_numerics(plan, best.compiled)
        replanned = self._replan_without_culprits(plan, requested)
        if replanned is not None:
            return replanned
        plan = self._noting_forced(plan)
        ver = plan.verification
        if ver.compiled_device_bytes is not None and not _fits(ver, budget):
            warnings.warn(
                f"After {len(rounds)} rounds the compiled step still needs "
                f"{ver.compiled_device_bytes / GB:.3f} GB against a budget of {budget / GB:.3f} "
                "GB, and no stock policy fits either. The plan is returned for inspection; do "
                "not run it at this budget. Raise hbm_gb or max_rounds.",
                PlanWarning,
                stacklevel=4,
            )
        failed = [c for c in ver.checks if not c.ok]
        if failed:
            warnings.warn(
                "Verification checks failed: " + "; ".join(c.detail for c in failed),
                PlanWarning,
                stacklevel=4,
            )
        return plan

    def _fill(self, tr, graph, not_kept, budget, best, sol, cost, g_best, rounds):
        """Use the budget the verify compile shows unused: ``(best, sol, cost, graph, why)``.

        ``best`` verified within ``budget`` (its cost model ``cost``, graph ``g_best``). While
        it leaves more than :func:`fill_slack` unused and rounds remain
        (``PlanOptions.fill_rounds``), the model is corrected by the last compiled plan's
        measured error, ``c' = c + compiled - predicted`` (negative where the model
        over-predicted: the uncorrected model solved against ``budget - c'``; cost.py), and
        solved again. The solution is compiled only if it is predicted faster than ``best``
        and was not compiled before; it becomes ``best`` only if it verifies within the
        budget (status and every check). A plan that compiles over the budget corrects the
        next round upward by its own error. ``why`` says why the returned plan leaves what it
        leaves (the report's "budget use" line); each compile is a :class:`Round` with
        purpose "fill"."""
        opts, hw = self.options, self.hardware
        ver = best.verification
        if ver.compiled_device_bytes is None:
            return best, sol, cost, g_best, ""
        if not ver.ok:
            what = ver.status if ver.status != Status.OK else "a verification check failed"
            return best, sol, cost, g_best, f"no fill rounds: {what}"
        slack = fill_slack(budget)
        if budget - ver.compiled_device_bytes <= slack:
            return best, sol, cost, g_best, _within(slack, budget)
        if opts.fill_rounds == 0:
            return best, sol, cost, g_best, "fill_rounds=0: no rounds to use it"
        start = len(rounds)
        tried = {best.assignment}
        over: int | None = None  # the smallest compile of a faster plan over the budget
        last, last_cost = best, cost
        not_kept = set(not_kept)
        why = ""
        n = 0
        while True:
            err = last.verification.compiled_device_bytes - last.prediction.peak_bytes
            correction = last_cost.correction_bytes + err
            t = time.perf_counter()
            cost_k = build_cost_model(
                tr, graph, hw, allow_offload=self.offload, correction_bytes=correction
            )
            g = _with_forced(
                graph,
                not_kept,
                NOT_KEPT_WHY,
            )
            self._say(
                f"{(budget - best.verification.compiled_device_bytes) / GB:g} GB of "
                f"{budget / GB:g} GB unused: solving with the model corrected by "
                f"{correction / GB:+g} GB"
            )
            try:
                s = self._solves(g, cost_k, budget, opts.solver)
                check_solution(g, cost_k, s)
            except InfeasibleBudgetError:
                s = None
            self._last_timings.append((f"solve (fill round {n + 1})", time.perf_counter() - t))
            a = None if s is None else _normalize(g, cost_k, s.assignment)
            step = math.inf if a is None else evaluate(cost_k, g, a).step_s
            if a is None or a in tried or not _faster(step, best.prediction.step_s):
                why = self._fill_stop_why(g_best, cost, best, over, err)
                break
            if n >= opts.fill_rounds:
                why = (
                    f"fill_rounds={opts.fill_rounds} rounds used "
                    f"({len(rounds) - start} compiles), a faster plan left untried"
                    + (
                        ""
                        if over is None
                        else f"; a faster plan compiled to {fmt_bytes(over)}, over the budget"
                    )
                )
                break
            n += 1
            tried.add(a)
            att = self._attempt(
                tr, g, cost_k, s.assignment, budget, label=f"a faster plan (fill round {n})"
            )
            rounds.append(_round(att, correction, budget, "fill", not_kept))
            if att.not_kept and not set(att.not_kept) <= not_kept:
                not_kept |= set(att.not_kept)  # solve again without them, same correction
                continue
            v = att.verification
            if v.compiled_device_bytes is None:
                break
            if v.ok and _faster(att.prediction.step_s, best.prediction.step_s):
                best, sol, cost, g_best = att, s, cost_k, g
                if budget - v.compiled_device_bytes <= slack:
                    why = _within(slack, budget)
                    break
            elif v.compiled_device_bytes > budget:
                over = (
                    v.compiled_device_bytes if over is None else min(over, v.compiled_device_bytes)
                )
            last, last_cost = att, cost_k
        return best, sol, cost, g_best, why

    def _fill_stop_why(self, g, cost, best, over, err) -> str:
        """Why no faster plan was tried (the corrected model's answer is not faster, or was
        compiled already): the model has none at any budget, or a faster one did not fit."""
        if over is not None:
            return f"the next faster plan compiled to {fmt_bytes(over)}, over the budget"
        if not _faster(self._fastest_step(g, cost), best.prediction.step_s):
            needed = evaluate(cost, g, Assignment.of({c.key: "save" for c in g.classes})).regions
            kept = evaluate(cost, g, best.assignment).regions
            if all(
                best.assignment.get(class_key(rg.region, c)) == "save"
                for rg, rp, rk in zip(g.regions, needed, kept)
                for c in rg.region.candidates
                if rp.needed[c.index] or rk.needed[c.index]
            ):
                return "every tensor the backward pass reads is saved"
            return "the fastest plan the model has at any budget"
        if err < 0:
            return (
                f"no faster plan fits the model corrected by its {fmt_bytes(-err)} "
                "over-prediction of this plan"
            )
        return "no faster plan fits the model (it does not over-predict this plan)"

    def _fastest_step(self, g, cost) -> float:
        """The model's fastest step at any budget (cost.evaluate of the solver's plan for
        more bytes than any plan holds: full remat's peak, which holds the fixed bytes, plus
        every region input and three times every candidate of every trip: residuals once, a
        working set at most twice, cost.WORKING_SET_SCALE_BOUNDS)."""
        full = evaluate(cost, g, Assignment.of({}))
        every = sum(
            rg.region.multiplicity
            * (
                sum(3 * c.nbytes for c in rg.region.candidates)
                + sum(i.nbytes for i in rg.region.inputs)
            )
            for rg in g.regions
        )
        try:
            sol = self._solves(g, cost, full.peak_bytes + every, self.options.solver)
        except InfeasibleBudgetError:
            return math.inf
        return evaluate(cost, g, _normalize(g, cost, sol.assignment)).step_s

    @staticmethod
    def _plan_miss(best: _Attempt | None, infeasible) -> str:
        if best is not None and best.verification.compiled_device_bytes is not None:
            return f"it compiles to {best.verification.compiled_device_bytes / GB:.3f} GB"
        if infeasible is not None:
            return f"the model's smallest plan needs {infeasible.min_feasible_bytes / GB:.3f} GB"
        return "not compiled"

    def _probe_frontier(self, tr, graph, not_kept, cost, budget, rounds, tried=None, correction=0):
        """Before a budget is refused: the model's plans for larger budgets, compiled. Where a
        compiler holds some saved values in less memory than their recompute (JAX 0.10.2's
        XLA:CPU), a plan that saves a little can compile under full remat, which the model,
        fitted at full remat and save-everything, does not see (measured:
        benchmarks/results/new-user-2026-12-06b.md, F3). At most
        ``len(PROBE_FRACTIONS) + 1`` compiles (the model's smallest plan first), only where the
        model fit nothing (on the way to a refusal, or after the smallest plan compiled within
        the budget against the model: ``tried``, that attempt, is not compiled again); the
        fastest plan that compiles within the budget (an exact figure) is returned as
        ``((attempt, solution, graph) or None, the smallest exact figure the probes compiled
        to or None)``."""
        # Far below every figure compiled so far no plan fits: the largest undercut of full
        # remat seen is 7% (F3), so below PROBE_BELOW of the smallest no compile is spent.
        known = [tr.anchor.device_bytes] + [b for b in self._stock_bytes.values() if b]
        if tr.anchor_saved is not None:
            known.append(tr.anchor_saved.device_bytes)
        if tried is not None and tried.verification.compiled_device_bytes:
            known.append(tried.verification.compiled_device_bytes)
        if budget < io_bytes(tr) or budget < PROBE_BELOW * min(known):
            return None, None
        g = _with_forced(graph, not_kept, NOT_KEPT_WHY)
        try:
            smallest_plan, _ = min_peak_assignment(g, cost, self.options.solver)
        except (InfeasibleBudgetError, SolverError):
            return None, None
        lo = evaluate(cost, g, _normalize(g, cost, smallest_plan)).peak_bytes
        everything = Assignment.of({c.key: "save" for c in g.classes})
        hi = evaluate(cost, g, _normalize(g, cost, everything)).peak_bytes

        def key(a):
            return _normalize(g, cost, a).decisions

        seen: set = set() if tried is None else {key(tried.assignment)}
        fits = []
        smallest = None

        def solutions():
            step_s = evaluate(cost, g, _normalize(g, cost, smallest_plan)).step_s
            yield lo, _unsolved(smallest_plan, "FEASIBLE", step_s, g, budget)
            for f in PROBE_FRACTIONS:
                at = int(lo + f * (hi - lo))
                if at <= lo:
                    continue
                try:
                    yield at, self._solves(g, cost, at, self.options.solver)
                except (InfeasibleBudgetError, SolverError):  # a probe that finds nothing
                    continue

        for at, sol in solutions():
            if key(sol.assignment) in seen:
                continue
            seen.add(key(sol.assignment))
            self._say(f"probing the model's plan for {at / GB:g} GB: does it compile smaller?")
            att = self._attempt(tr, g, cost, sol.assignment, budget)
            rounds.append(_round(att, correction, budget, "probe", not_kept))
            v = att.verification
            if att.not_kept or v.compiled_device_bytes is None or not v.exact:
                continue
            smallest = min(smallest or v.compiled_device_bytes, v.compiled_device_bytes)
            if overrules_model(v, budget) and v.ok:  # every check passed, not only the bytes
                fits.append((att.prediction.step_s, len(fits), att, sol))
        if not fits:
            return None, smallest
        _, _, att, sol = min(fits)
        return (att, dataclasses.replace(sol, usable_bytes=budget), g), smallest

    def _infeasible(
        self, requested, budget, headroom, best, error, cost, probed=None
    ) -> InfeasibleBudgetError:
        """The teaching error when nothing fits: the smallest figure any plan or stock policy
        compiled to, as the budget that works (``probed``: the smallest exact figure of the
        plans _probe_frontier compiled)."""
        hw = self.hardware
        # Without verify_compile the model is the judge; with it, the compiler's figures.
        tried = (
            {n: b for n, b in self._stock_bytes.items() if b is not None}
            if self.options.verify_compile
            else {}
        )
        if self.options.verify_compile and self.options.compare_stock:
            # Before saying nothing fits, every applicable stock policy has been compiled.
            for b in evaluate_baselines(self.graph, cost, budget):
                if b.applicable and b.name in STOCK and b.name not in tried:
                    got = self._stock_fit_bytes(b.name, self.trace, self.graph, cost)
                    if got is not None:
                        tried[b.name] = got
        figures = dict(tried)
        # Only an exact figure can be named as the budget that works: an estimate (XLA:CPU with
        # host bytes subtracted, "unverified") is not accepted as fitting when planning there,
        # so naming it sent users round in a loop (the program fuzzer, seeds 6 and 84).
        if (
            best is not None
            and best.verification.compiled_device_bytes is not None
            and best.verification.exact
        ):
            figures["the planner's smallest plan"] = best.verification.compiled_device_bytes
        if probed is not None and probed < figures.get("the planner's smallest plan", probed + 1):
            figures["the planner's smallest plan"] = probed
        if figures:
            name, need = min(figures.items(), key=lambda kv: kv[1])
            what = f"the smallest of the plans tried compiles to {fmt_bytes(need)} ({name})"
        else:
            need = error.min_feasible_bytes if error is not None else float(budget)
            what = f"the model's smallest plan needs {fmt_bytes(need)} (not compiled)"
        need_req = requested_for(need, hw, io_bytes(self.trace), self.compiler.margin)
        note = (
            f"\nNote: of hbm_gb={requested / GB:g} the planner plans to {budget / GB:.3f} GB, "
            f"leaving {headroom / GB:.3f} GB free: {headroom_why(hw, margin=self.compiler.margin)}."
            if headroom
            else ""
        )
        return InfeasibleBudgetError(
            f"No plan fits {fmt_bytes(budget)}: {what}"
            + (
                ""
                if error is None
                else f" (the model's lower bound for any plan: {fmt_bytes(error.min_feasible_bytes)})"
                if error.min_feasible_bytes <= need
                else f" (the memory model put every plan at {fmt_bytes(error.min_feasible_bytes)} "
                "or more; the compiled figures overrule it)"
            )
            + ".\n"
            f"Why: {_fixed_why(cost.fixed_bytes, io_bytes(self.trace))}, and the backward pass "
            "of a layer needs its working set.\n"
            f"Fix: pass hbm_gb >= {gb_at_least(need_req)}, or shrink what is "
            "fixed (smaller batch per device, sharded parameters and optimizer state, donated "
            "state)." + note,
            budget_bytes=requested,
            min_feasible_bytes=need_req,
        )


# ------------------------------------------------------------------------------ the verbs


def solve(
    step_fn: Callable,
    *example_args,
    hbm_gb: float,
    hardware="h200",
    options: PlanOptions | None = None,
    progress: Callable[[str], None] | None = None,
    build: Callable | None = None,
    **option_fields,
) -> Plan:
    """Plan what the backward pass of ``step_fn(*example_args)`` keeps, under ``hbm_gb``.

    With ``opt_state_argnum=`` (and ``params_argnum=``, ``build=``: :meth:`Planner.plan`),
    also which optimizer-state leaves live in pinned host memory (``plan.state``).

    Args:
      step_fn: the train step (loss, gradient and update), unmodified.
      example_args: arrays or ``jax.ShapeDtypeStruct``s, as the step takes them.
      hbm_gb: device memory budget per device, GB (10^9 bytes).
      hardware: a profile name (``planner.list_profiles()``), a JSON file, or a profile.
      options: :class:`planner.PlanOptions`; or its fields as keywords (``allow_offload``,
        ``verify_compile``, ``max_rounds``, ``layer_groups``, ``solver_time_limit_s``, ...).
      progress: called with a short message as each slow stage starts; None: silent.
    """
    b = _validate_budget(hbm_gb)
    check_fits_device(b, _load_hardware(hardware))  # before the trace, not after it
    return Planner(
        step_fn,
        *example_args,
        hardware=hardware,
        options=options,
        progress=progress,
        **option_fields,
    ).plan(b, build=build)


def pareto(
    step_fn: Callable,
    *example_args,
    hbm_gb=None,
    hardware="h200",
    options: PlanOptions | None = None,
    points: int = 5,
    progress: Callable[[str], None] | None = None,
    **option_fields,
) -> list:
    """Plans for several budgets from one trace: ``[Plan or PlannerError per budget]``
    (:meth:`Planner.pareto`)."""
    if hbm_gb is not None:
        budgets = list(hbm_gb) if isinstance(hbm_gb, (list, tuple)) else [hbm_gb]
        if not budgets:
            raise InvalidArgumentError("hbm_gb is an empty list; give at least one budget in GB.")
        check_fits_device(max(_validate_budget(b) for b in budgets), _load_hardware(hardware))
    return Planner(
        step_fn,
        *example_args,
        hardware=hardware,
        options=options,
        progress=progress,
        **option_fields,
    ).pareto(hbm_gb, points=points)
