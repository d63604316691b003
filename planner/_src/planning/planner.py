"""The Planner: a train step traced once, planned for any number of budgets; and the verbs
``solve`` and ``pareto``.

``Planner(step_fn, *example_args, hardware=...)`` checks its inputs, runs the trace and
graph stages once and holds what every budget shares (the stock-policy compiles, the
numerics reference, the CP-SAT solves). ``planner.plan(hbm_gb)`` plans one budget through
the steps of :mod:`planner._src.planning.one_budget`; ``planner.pareto(...)`` several.

What a Planner guarantees, by construction (the compiler is the judge):

* A plan is "within budget" only when the verifying compiler's figure for it,
  ``argument + output - alias + temp`` of ``memory_analysis()``, is within what the budget
  leaves usable (:class:`~planner._src.budget.Budget`). Where the backend keeps host arrays
  in device memory the status says "unverified", never "within budget".
* It never returns a plan predicted slower than the fastest stock policy (JAX's, MaxText's)
  that compiles within the budget on the same compiler (choose.py).
* It never raises :class:`InfeasibleBudgetError` while a stock policy compiles within the
  budget: before raising, every applicable stock policy is compiled (refusal.py).
* A plan whose saving rests on a tensor JAX will not keep is solved again with those
  tensors recomputed (walk.py).
* A larger budget never gets a plan predicted slower, and an answer never depends on the
  budgets asked before: the frontier walk compiles the model's plans at one fixed grid of
  caps, from a little over the budget down, and returns the first that fits (walk.py, which
  names where this does not reach; the report says when a budget is such a case).
* Per-call-site decisions (``plan.policies``) only where the user's code can pass the call
  sites different policies, unless asked for with ``layer_groups=True`` (groups.py).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

import jax

from planner._src.budget import (
    Budget,
    Margin,
    io_bytes,
    margin_of,
    requested_for,
    usable_bytes,
)
from planner._src.cost import build_cost_model
from planner._src.cost.baselines import evaluate_baselines
from planner._src.errors import InvalidArgumentError, PlannerError, TraceError, UnsupportedError
from planner._src.graph import build_graph
from planner._src.options import PlanOptions, check_fits_device
from planner._src.planning import inputs, sessions
from planner._src.planning.attempt import CompileThreads
from planner._src.planning.context import (
    Context,
    Solves,
    StateSpec,
    Subject,
    Timings,
    names_only,
    with_forced,
)
from planner._src.planning.groups import groups_pay, groups_possible
from planner._src.planning.numerics_check import (
    NUMERICS_FORCED_WHY,
    NumericsJudge,
    not_checked_why,
)
from planner._src.planning.one_budget import plan_budget, warn_unfit
from planner._src.planning.scale_check import check_small_scale, with_check
from planner._src.planning.stock import StockCompiles
from planner._src.planning.train_state import state_spec
from planner._src.results.plan import Plan
from planner._src.trace import merge_call_sites, trace_step
from planner._src.trainstate import select
from planner._src.units import GB
from planner._src.verify import numerics
from planner._src.xla import deviceless
from planner._src.xla.adapter import HOST_KIND

__all__ = ["Planner", "pareto", "solve"]


class Planner:
    """A train step traced once, planned for any number of budgets.

        session = planner.Planner(train_step, state, batch, hardware="h200")
        plan = session.plan(hbm_gb=80)
        plans = session.pareto(hbm_gb=[60, 80, 100])

    Args:
      step_fn: the train step (loss, gradient and update), unmodified. Its
        ``jax.checkpoint`` / ``jax.remat`` / Flax remat regions are what the planner decides.
      example_args: arrays or ``jax.ShapeDtypeStruct``s, as the step takes them.
      hardware: a profile name (``planner.hardware.list_profiles()``), a JSON file, or a profile.
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
        inputs.validate_step(step_fn, example_args)
        opts = inputs.merge_options(options, option_fields)
        hw = inputs.load_hardware(hardware)
        compiler = inputs.resolve_compiler(hw, example_args, opts.compiler)
        for_absent_gpu = compiler.kind == "deviceless"
        args = deviceless.args_for(compiler, example_args) if for_absent_gpu else example_args
        host_ok = for_absent_gpu or inputs.host_memory_available()
        if opts.allow_offload and not host_ok:
            raise UnsupportedError(
                f"allow_offload=True, but the {jax.default_backend()} backend here has no "
                f"'{HOST_KIND}' memory kind, so JAX cannot place residuals in host "
                "memory.\nFix: run on a GPU/TPU or CPU backend with host memory kinds (JAX >= "
                "0.4.31), or pass allow_offload=False."
            )
        offload, offload_why = inputs.offload_choice(opts.allow_offload, host_ok, hw.platform)
        # The train state, before any trace: a selection that cannot be optimizer state is
        # refused here; an optimizer state found but not asked for is named by refusals.
        self._named = select.resolve(
            example_args,
            *opts.state_selection,
            stream_params=opts.stream_params,
            names=(
                "opt_state" if opts.opt_state_argnum is None else "opt_state_argnum",
                "params" if opts.params_argnum is None else "params_argnum",
            ),
        )
        self._named_for = opts.state_selection
        self._found = None if opts.opt_state is False else select.detect(example_args)
        self.subject = Subject(
            fn=step_fn,
            args=args,
            user_args=example_args,
            hardware=hw,
            options=opts,
            compiler=compiler,
            backend="cuda" if for_absent_gpu else jax.default_backend(),
            offload=offload,
            offload_why=offload_why,
            say=progress or (lambda message: None),
            compile_only=bool(not_checked_why(opts, example_args, compiler)),
        )
        self.numerics = NumericsJudge(self.subject)
        if opts.check_numerics:
            why = self.numerics.impossible_why()
            if why:
                raise InvalidArgumentError(
                    f"check_numerics=True, but {why}.\nFix: {numerics.HOW_TO_CHECK}; or leave "
                    "check_numerics=None, and the report says the numerics were not checked."
                )
        self.timings: list[tuple[str, float]] = []
        t = time.perf_counter()
        self.subject.say(
            "tracing the step and compiling it under full remat and save-everything (the anchors)"
        )
        # One region per call site; merged, identical ones share their decisions (uniform).
        anchor: list = []  # its executable: the numerics check's full-remat run
        with self.subject.scope():
            self.sites = trace_step(
                step_fn,
                args,
                split_call_sites=True,
                backend=self.subject.backend,
                compiler=compiler.description,
                hardware=hw,
                workers=self.subject.anchor_workers(),
                anchor_out=anchor if self.numerics.not_checked_why() == "" else None,
            )
        self.numerics.full_remat = anchor[0] if anchor else None
        self.trace = merge_call_sites(self.sites)
        self.timings.append(("trace + anchor compiles", time.perf_counter() - t))
        t = time.perf_counter()
        self.graph = names_only(build_graph(self.trace), opts.decide_names)
        self._grouped = None
        if groups_possible(self.sites, opts.layer_groups):
            self._grouped = (self.sites, names_only(build_graph(self.sites), opts.decide_names))
        self.timings.append(("graph", time.perf_counter() - t))
        self._solves = Solves()
        # A small working-set scale is judged by a third compile before any budget (the
        # per-call-site traces carry the same judgement)
        t, checked = time.perf_counter(), Timings()
        with self.subject.scope():
            check = check_small_scale(self.subject, self._solves, checked, self.trace, self.graph)
        if check is not None:
            self.trace, self.sites = with_check(self.trace, check), with_check(self.sites, check)
            self.timings.append(("scale check (a third compile)", time.perf_counter() - t))
        self._threads = CompileThreads(self.subject)
        self.stock = StockCompiles(self.subject, self.trace, self._threads)
        # A budget's plan and its seconds, kept where planner.solve / pareto keep this
        # Planner for later calls (sessions.py: ``_session`` sets it)
        self._plans: dict[tuple, tuple] | None = None  # (plan, seconds, warnings)

    # ------------------------------------------------------------------ what it holds

    @property
    def options(self) -> PlanOptions:
        """The options every plan of this Planner is made with. Set it to plan the next
        budgets with other options (those that shape the trace, such as ``decide_names`` or
        ``compiler``, keep the values the Planner was made with)."""
        return self.subject.options

    @options.setter
    def options(self, value: PlanOptions) -> None:
        if not isinstance(value, PlanOptions):
            raise InvalidArgumentError(f"options must be a planner.PlanOptions, got {value!r}.")
        self._set_subject(dataclasses.replace(self.subject, options=value))

    def _set_subject(self, subject: Subject) -> None:
        self.subject = subject
        for service in (self.numerics, self.stock, self._threads):
            service.subject = subject

    @property
    def hardware(self):
        """The hardware profile (cost_models.HardwareProfile) planned for."""
        return self.subject.hardware

    @property
    def compiler(self):
        """The verifying compiler (target.CompilerTarget)."""
        return self.subject.compiler

    @property
    def offload(self) -> bool:
        """Whether plans may offload to pinned host memory."""
        return self.subject.offload

    @property
    def offload_why(self) -> str:
        """Why offloading is off where the Planner turned it off ('' otherwise)."""
        return self.subject.offload_why

    @property
    def example_args(self) -> tuple:
        """The example arguments as given to the constructor (concrete arrays or
        ShapeDtypeStructs; not the copies placed on a deviceless target)."""
        return self.subject.user_args

    @property
    def backend(self) -> str:
        """The backend this Planner traces and compiles for: ``"cuda"`` for a deviceless
        target compile, else this machine's ``jax.default_backend()``."""
        return self.subject.backend

    def plan_fields(self) -> dict:
        """The Plan fields every plan of this Planner shares (the verifying compiler, why
        offloading was off); a stage that builds a Plan of this Planner passes them on."""
        return {**self.subject.plan_fields(), "compiler_margin": self.margin}

    def compile_workers(self) -> int:
        """How many verify compiles run at once (``PlanOptions.parallel_compiles``)."""
        return self.subject.compile_workers()

    def numerics_not_checked_why(self) -> str:
        """Why this Planner's plans get no numerics check ('' when they do):
        ``check_numerics=False``, abstract example arguments, or a compiler for a GPU that
        is not here."""
        return self.numerics.not_checked_why()

    def judge_run(self, plan: Plan, run: Callable):
        """The outputs of ``run()`` (a step that applies ``plan``, on its own arguments)
        judged against the step under the user's own policies on the example arguments
        (run once per Planner): numerics.judge's result."""
        return self.numerics.judge_run(plan, run, Timings())

    @property
    def margin(self) -> Margin | float:
        """What the verifying compiler cannot see of the GPU's own (budget.margin_of)."""
        return margin_of(self.compiler, self.trace)

    def budget(self, requested: int) -> Budget:
        """The budget of ``requested`` bytes per device: what a plan may use of it."""
        return Budget.of(requested, self.hardware, io_bytes(self.trace), self.margin)

    def usable(self, requested: int) -> int:
        """Bytes a plan may use of ``requested`` (``budget(requested).usable``)."""
        return usable_bytes(requested, self.hardware, io_bytes(self.trace), self.margin)

    # ------------------------------------------------------------------ the verbs

    def plan(
        self,
        hbm_gb: float,
        *,
        opt_state=None,
        params=None,
        opt_state_argnum: int | None = None,
        params_argnum: int | None = None,
        build: Callable | None = None,
        stream_params: bool | None = None,
    ) -> Plan:
        """The plan for one budget (GB per device); raises InfeasibleBudgetError when neither
        a plan nor a stock policy fits.

        ``opt_state`` (default: ``PlanOptions.opt_state``): where the optimizer state is in
        the arguments (an index, a path, a selector, or ``"auto"``: found); the plan then
        also decides which of its leaves live in pinned host memory (``plan.state``;
        train_state.py), and ``plan.apply(step)`` applies it. ``params`` names the
        parameters (found beside the optimizer state where they can be);
        ``opt_state_argnum`` / ``params_argnum``: the older spellings. ``build(policy,
        placement) -> (jitted_step, args)``: your step as you run it under a plan's policy
        and placement, compiled in place of ``plan.apply``'s (needed where parameters move).
        ``stream_params`` (default: ``PlanOptions.stream_params``): your step streams its
        stacked layer parameters (``plan.state.stream_layer_params``), so the plan may put
        them in pinned host memory too."""
        b = inputs.validate_budget(hbm_gb)
        inputs.warn_above_allocator_limit(b, self.hardware)
        for name, v, old in (
            ("opt_state", opt_state, opt_state_argnum),
            ("params", params, params_argnum),
        ):
            if v is not None and old is not None:
                raise InvalidArgumentError(
                    f"{name}= and {name}_argnum= both given.\nFix: pass one of them."
                )
        names = (
            "opt_state" if opt_state_argnum is None else "opt_state_argnum",
            "params" if params_argnum is None else "params_argnum",
        )
        opt = opt_state if opt_state_argnum is None else opt_state_argnum
        par = params if params_argnum is None else params_argnum
        return self._plan_budget(int(b * GB), opt, par, build, stream_params, names)

    def pareto(self, hbm_gb=None, *, points: int = 5) -> list:
        """Plans for several budgets: ``[Plan or PlannerError per budget]``.

        ``hbm_gb=None`` spans the whole trade-off (:meth:`span_budgets`)."""
        if hbm_gb is None:
            if isinstance(points, bool) or not isinstance(points, int) or points < 1:
                raise InvalidArgumentError(f"points must be an int >= 1, got {points!r}.")
            budgets = self.span_budgets(points)
        else:
            budgets = inputs.budget_list(hbm_gb)
        inputs.warn_above_allocator_limit(max(budgets), self.hardware)
        out = []
        for b in budgets:
            try:
                out.append(self._plan_budget(int(b * GB)))
            except PlannerError as e:
                out.append(e)
        return out

    def span_budgets(self, points: int) -> list[float]:
        """``points`` budgets (GB) whose usable bytes are evenly spaced above the predicted
        peak of full remat up to that of saving everything (capped at the device's HBM),
        ``lo + (hi - lo) * k / points`` for ``k = 1..points``."""
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
        # No budget above the device's HBM: when saving everything would not fit, what the
        # plans may use ends at what the HBM leaves usable.
        io = io_bytes(tr)
        m = self.margin
        top = usable_bytes(int(hw.hbm_bytes), hw, io, m)
        if lo < top < hi:
            hi = top
        return [
            requested_for(lo + (hi - lo) * k / points, hw, io, m) / GB for k in range(1, points + 1)
        ]

    def plan_activations(self, requested: int) -> Plan:
        """The plan for ``requested`` bytes per device (before headroom) that decides the
        activations only, with the train state where the step has it: what :meth:`plan`
        returns without ``opt_state``, whatever the options say."""
        return self._plan_with(requested, None)

    def _plan_with(self, requested: int, state: StateSpec | None) -> Plan:
        """One budget through one_budget.py, planned again where the numerics check isolated
        classes whose saving changes the math."""
        while True:
            ctx = self._context(requested, state)
            plan = plan_budget(ctx, self._threads, (self.trace, self.graph))
            if not self.numerics.isolate_culprits(plan, ctx.timings):
                break
        if plan.choice == "planner":
            plan = self.numerics.noting_forced(plan)
        warn_unfit(plan, ctx.usable)  # a failed check always warns, stock answers too
        return plan

    # ------------------------------------------------------------------ one budget

    def _context(self, requested: int, state: StateSpec | None = None) -> Context:
        """The context of one budget: the merged trace and graph, or the per-call-site ones
        where deciding per layer group pays; the classes the numerics check forced; the
        train state it places (or, where it places none, the one found, for a refusal)."""
        budget = self.budget(requested)
        tr, graph = self.trace, self.graph
        if self._grouped is not None and (
            self.options.layer_groups
            or groups_pay(self.subject, self._solves, self._grouped, budget.usable)
        ):
            tr, graph = self._grouped
        return Context(
            subject=self.subject,
            trace=tr,
            graph=with_forced(graph, self.numerics.forced, NUMERICS_FORCED_WHY),
            budget=budget,
            solves=self._solves,
            stock=self.stock,
            numerics=self.numerics,
            timings=Timings(self.timings),
            state=state,
            offer=self._found if state is None else None,
        )

    def _plan_budget(
        self,
        requested: int,
        opt=None,
        par=None,
        build=None,
        stream_params=None,
        names=("opt_state", "params"),
    ) -> Plan:
        """:meth:`plan_activations`, or with the train state's placement where it is asked
        for (by the arguments or the options)."""
        opts = self.options
        selection = None
        if opt is None and par is None:
            opt, par = opts.state_selection
            selection = self._named if (opt, par) == self._named_for else None
        if stream_params is None:
            stream_params = opts.stream_params
        # A budget planned before with the same options: its plan, as it was (every stage
        # it rests on is this Planner's, and planning is deterministic). Not with ``build``:
        # the user's function is run to verify, and may have changed.
        key = (requested, opt, par, names, bool(stream_params), opts)
        keep = build is None and self._plans is not None and _hashable(key)
        if keep and key in self._plans:
            t = time.perf_counter()
            plan, took, warned = self._plans[key]
            sessions.warn_again(warned)  # what planning it warned, as a cold call would
            what = f"plan reused: this budget was planned before by this Planner in {took:.2f} s"
            return dataclasses.replace(plan, timings=((what, time.perf_counter() - t),))
        if not keep:
            return self._plan_budget_anew(
                requested, opt, par, build, stream_params, names, selection
            )
        t = time.perf_counter()
        with sessions.recording() as warned:
            plan = self._plan_budget_anew(
                requested, opt, par, build, stream_params, names, selection
            )
        self._plans[key] = (plan, time.perf_counter() - t, tuple(warned))
        return plan

    def _plan_budget_anew(
        self, requested: int, opt, par, build, stream_params, names, selection
    ) -> Plan:
        opts = self.options
        if opt is None or opt is False:
            if par is not None or build is not None:
                what = names[1] if par is not None else "build"
                raise InvalidArgumentError(
                    f"{what} was given without opt_state_argnum or opt_state.\nWhy: both "
                    "belong to planning the optimizer state's placement, which opt_state asks "
                    "for.\nFix: pass opt_state (e.g. opt_state=1 for train_step(params, "
                    "opt_state, batch), or opt_state='auto'), or neither."
                )
            return self.plan_activations(requested)
        if selection is None or stream_params != opts.stream_params:
            selection = select.resolve(
                self.example_args, opt, par, stream_params=bool(stream_params), names=names
            )
        spec = state_spec(
            self.subject, self.trace, selection, build=build, stream_params=bool(stream_params)
        )
        return self._plan_with(requested, spec)


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
      hardware: a profile name (``planner.hardware.list_profiles()``), a JSON file, or a profile.
      options: :class:`planner.PlanOptions`; or its fields as keywords (``allow_offload``,
        ``verify_compile``, ``max_rounds``, ``layer_groups``, ``solver_time_limit_s``, ...).
      progress: called with a short message as each slow stage starts; None: silent.
    """
    b = inputs.validate_budget(hbm_gb)
    check_fits_device(b, inputs.load_hardware(hardware))  # before the trace, not after it
    session, found = _session(step_fn, example_args, hardware, options, progress, option_fields)
    return _found(session.plan(b, build=build), session, found)


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
        hbm_gb = inputs.budget_list(hbm_gb)  # a generator is read once, here
        check_fits_device(max(hbm_gb), inputs.load_hardware(hardware))
    session, found = _session(step_fn, example_args, hardware, options, progress, option_fields)
    return [_found(p, session, found) for p in session.pareto(hbm_gb, points=points)]


def _found(plan, session: Planner, found):
    """``plan`` of a Planner found in the session cache, its timings what this call spent:
    finding it, then this budget's stages (not the trace stage it was made with)."""
    if not found or not isinstance(plan, Plan):
        return plan
    made = tuple(session.timings)
    own = plan.timings[len(made) :] if plan.timings[: len(made)] == made else plan.timings
    return dataclasses.replace(plan, timings=(found, *own))


def _session(step_fn, example_args, hardware, options, progress, option_fields):
    """The Planner of ``step_fn(*example_args)`` (sessions.py): the one kept for the same
    step, hardware and options, with ``(label, seconds)`` of finding it; else a new one
    (kept, the fingerprint's time in its timings) and None."""
    inputs.validate_step(step_fn, example_args)
    opts = inputs.merge_options(options, option_fields)
    key = None
    if opts.session_cache > 0:
        key = sessions.session_key(step_fn, example_args, inputs.load_hardware(hardware), opts)
        session = sessions.find(key)
        if session is not None:
            say = progress or (lambda message: None)
            session._set_subject(dataclasses.replace(session.subject, say=say))
            return session, (sessions.HIT, key.seconds)
    try:
        session = Planner(
            step_fn, *example_args, hardware=hardware, options=opts, progress=progress
        )
    except TraceError as e:
        traced_once = key is not None and key.key is not None
        if traced_once and isinstance(e.__cause__, Exception) and e.first_trace:
            # The fingerprint's trace worked: the step failed when traced again.
            raise sessions.traced_again_error(e.__cause__) from e.__cause__
        raise
    if key is not None and key.key is not None:
        session.timings.insert(0, (sessions.MISS, key.seconds))
        session._plans = {}
    sessions.keep(key, session, opts.session_cache)
    return session, None


def _hashable(key) -> bool:
    """Whether a budget's cache key can be kept (a selector given as a list is not)."""
    try:
        hash(key)
    except TypeError:
        return False
    return True
