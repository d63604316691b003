"""One plan for the whole budget: activations and the train state's placement (optimizer
state, and with ``stream_params=True`` the stacked parameters).

    session = planner.Planner(train_step, params, opt_state, batch, hardware="h200")
    sp = planner.state.plan_state(session, hbm_gb=60, opt_state_argnum=1, params_argnum=0)
    sp.policy            # jax.checkpoint policy for the layers (as Plan.policy)
    sp.placement         # which optimizer-state leaves live in pinned host memory
    print(sp.summary())  # the budget split: parameters, gradients, optimizer state, activations

The session's trace, graph and cost model are used as they are (the fixed bytes ``F`` are
measured from the step with the whole state in HBM); :func:`state.with_state` prices every
optimizer-state leaf and one CP-SAT model (solve.py) decides the activations and the leaves
together. The step the user runs applies the placement: ``state_shardings`` for the jit's in /
out shardings of the optimizer state (donated), and ``streamed_update`` around the optax
update; :meth:`StatePlan.check` compiles that step and reads its device and host bytes.

With ``build`` (the step as the user applies the placement), the plan is compiled and held
to the budget as ``Planner.plan`` holds its plans: over the budget, the model is corrected by
the compiled figure and solved again.

``Planner.plan(hbm_gb, opt_state_argnum=..., build=...)`` and ``planner.solve(...,
opt_state_argnum=...)`` return the same decisions as a :class:`~planner._src.results.plan.Plan`
(:func:`plan_in_session`), with ``plan.state`` (state.PlanState: the placement, the budget
split, what to apply) and the report's budget split. Where the solve leaves the whole state
in HBM, that Plan is ``Planner.plan``'s own (every round, the fill rounds, the stock
comparison, the numerics check) with the state part added. Where it moves state, the traced
step is not the step that runs (the user applies the placement), so the plan is compiled
through ``build`` only, held to the budget by correction rounds as above, and, where the
arguments are concrete and the step runs here, the applied step's outputs are compared with
the user's step's (numerics.py); not done there: the fill rounds and the stock policies'
compiles (they are compared on the model, with the state in HBM).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from planner._src import trainstate as st
from planner._src.budget import io_bytes, usable_bytes
from planner._src.cost import build_cost_model, evaluate
from planner._src.cost.baselines import evaluate_baselines
from planner._src.cost.state import evaluate_state, with_state
from planner._src.emit.emit import emit
from planner._src.errors import InvalidArgumentError, PlannerError, PlanWarning
from planner._src.results.plan import Plan
from planner._src.solve import check_solution, solve_assignment
from planner._src.types import CostModel, Emitted, Prediction, Round, Solution, Status
from planner._src.units import GB, fmt_bytes
from planner._src.verify import numerics
from planner._src.verify.applied import applied_step_verification
from planner._src.xla import compile as xla_compile
from planner._src.xla import deviceless

__all__ = ["StatePlan", "plan_in_session", "plan_state", "warn_if_not_donated"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StatePlan:
    """The activations' decisions and the optimizer state's placement for one budget."""

    usable_bytes: int  # the usable budget the plan was solved for (budget.usable_bytes)
    solution: Solution
    prediction: Prediction  # with the state's terms (cost.evaluate(state_on_host=...))
    emitted: Emitted
    placement: st.StatePlacement
    split: dict  # state.budget_split: part -> {"hbm", "host", "moved"} bytes
    compiled: st.StateCheck | None = None  # the compile of the applied step (build given)
    correction_bytes: int = 0  # the model's correction this plan was solved with (cost.py)
    layers: int = 1  # the slices a stacked leaf is streamed in
    terms: st.StateTerms | None = None  # the model's terms of the leaves on the host
    rounds: tuple[Round, ...] = ()  # one per compile of the applied step (build given)
    cost: CostModel | None = dataclasses.field(repr=False, compare=False, default=None)
    compiler: Any = dataclasses.field(repr=False, compare=False, default=None)
    # (compiled step, its arguments) of the last check: the numerics check runs it (live)
    applied: Any = dataclasses.field(repr=False, compare=False, default=None)

    @property
    def policy(self):
        return self.emitted.policy

    def check(self, build: Callable[[Any, st.StatePlacement], tuple]) -> st.StateCheck:
        """Compile the step the user applies and read its figures (state.check_compiled).

        ``build(policy, placement) -> (jitted_step, args)``: the user's step under the plan's
        checkpoint policy, jitted with ``state_shardings`` for the optimizer state and
        ``streamed_update`` around its update, and its arguments (the state placed with
        ``jax.device_put(opt_state, shardings)``). Compiled on the session's compiler (a
        deviceless XLA:GPU compile for a GPU target without the GPU).
        """
        return self.compile_applied(build)[0]

    def compile_applied(self, build) -> tuple[st.StateCheck, Any]:
        """``check``, and ``(compiled, args)`` where the step can run here (else None)."""
        jitted, args = build(self.policy, self.placement)
        if self.compiler is not None and self.compiler.kind == "deviceless":
            prog = xla_compile.compile_traced(
                self.compiler, jitted, deviceless.args_for(self.compiler, args)
            )
            return st.check_compiled(prog.compiled, self.placement, self.terms), None
        compiled = jitted.lower(*args).compile()
        return st.check_compiled(compiled, self.placement, self.terms), (compiled, args)

    def summary(self) -> str:
        """The budget split as a text table (MB per device), and the predicted figures."""
        rows = [f"{'':18s}{'HBM MB':>10s}{'host MB':>10s}{'moved/step MB':>15s}"]
        for part, v in self.split.items():
            rows.append(
                f"{part:18s}{v['hbm'] / 1e6:10.1f}{v['host'] / 1e6:10.1f}{v['moved'] / 1e6:15.1f}"
            )
        p = self.prediction
        rows.append(
            f"predicted peak {p.peak_bytes / 1e6:.1f} MB of {self.usable_bytes / 1e6:.1f} MB usable"
            f", host {p.host_bytes / 1e6:.1f} MB, step {p.step_s * 1e3:.3f} ms "
            f"(exposed copies {p.exposed_transfer_s * 1e3:.3f} ms)"
        )
        if self.compiled is not None:
            c = self.compiled
            rows.append(
                f"compiled: device {c.device_bytes / 1e6:.1f} MB, host arguments "
                f"{c.host_argument_bytes / 1e6:.1f} MB (planned {c.planned_host_bytes / 1e6:.1f} MB)"
                f", model correction {self.correction_bytes / 1e6:+.1f} MB"
            )
            rows.append(f"compiled host bytes: {c.status}")
        pl = self.placement
        rows.append(
            f"optimizer-state leaves on the host: {len(pl.opt_paths())} of "
            f"{sum(1 for x in pl.leaves if x.movable and x.role == 'opt')}"
        )
        if any(x.movable and x.role == "param" for x in pl.leaves):
            rows.append(
                f"parameters on the host (streamed per layer slice): {len(pl.param_paths())} of "
                f"{sum(1 for x in pl.leaves if x.movable and x.role == 'param')}"
            )
        return "\n".join(rows)


def _arg(args: tuple, argnum: int | None, what: str):
    if argnum is None:
        return None
    if isinstance(argnum, bool) or not isinstance(argnum, int) or not 0 <= argnum < len(args):
        raise InvalidArgumentError(
            f"{what}={argnum!r} does not name one of the step's {len(args)} positional "
            f"arguments.\nFix: pass the index of the argument that holds the {what[:-7]} "
            "(e.g. opt_state_argnum=1 for train_step(params, opt_state, batch))."
        )
    return args[argnum]


def _check_state_args(opt_state, params, opt_state_argnum, params_argnum) -> None:
    """Refuse an ``opt_state_argnum`` that cannot be the optimizer state: the parameters'
    own argument, or one without a floating leaf (a batch of token ids), which the plan would
    report as "optimizer state" (issue 45)."""
    if params_argnum is not None and opt_state_argnum == params_argnum:
        raise InvalidArgumentError(
            f"opt_state_argnum and params_argnum are both {opt_state_argnum}: one argument "
            "cannot be the parameters and the optimizer state.\nFix: pass the index of each "
            "(e.g. opt_state_argnum=1, params_argnum=0 for train_step(params, opt_state, "
            "batch))."
        )
    leaves = [x for x in jax.tree.leaves(opt_state) if hasattr(x, "dtype")]
    if leaves and not any(jnp.issubdtype(x.dtype, jnp.inexact) for x in leaves):
        kinds = sorted({str(x.dtype) for x in leaves})
        raise InvalidArgumentError(
            f"opt_state_argnum={opt_state_argnum} names an argument with no floating leaf "
            f"(its {len(leaves)} arrays are {', '.join(kinds)}): not an optimizer state "
            "(Adam's moments, a momentum), perhaps the batch.\nFix: pass the index of the "
            "argument that holds the optimizer state (e.g. opt_state_argnum=1 for "
            "train_step(params, opt_state, batch))."
        )


def _layers(trace) -> int:
    """The layer count: the largest trip count of a region under lax.scan (a scanned layer
    stack; merged Python-loop call sites also have a multiplicity, but no stacked leaves)."""
    return max((r.multiplicity for r in trace.regions if r.in_scan), default=1)


def _leaves(session, opt_state_argnum: int, params_argnum: int | None, stream_params=False):
    args = session.example_args
    opt_state = _arg(args, opt_state_argnum, "opt_state_argnum")
    params = _arg(args, params_argnum, "params_argnum")
    _check_state_args(opt_state, params, opt_state_argnum, params_argnum)
    if stream_params and params is None:
        raise InvalidArgumentError(
            "stream_params=True without params_argnum.\nWhy: the parameters the plan may put "
            "on the host are found by their argument.\nFix: pass params_argnum too (e.g. "
            "params_argnum=0 for train_step(params, opt_state, batch))."
        )
    layers = _layers(session.trace)
    leaves = st.state_leaves(opt_state, layers=layers, params=params, stream_params=stream_params)
    return leaves, layers


def is_donated(trace, leaves: tuple[st.StateLeaf, ...]) -> bool:
    """Whether the traced step donates its optimizer state: its compiled anchor (full remat)
    aliases at least the state's bytes of outputs to inputs (``memory_analysis()``'s alias
    bytes; the parameters may be donated too, and count)."""
    opt = sum(x.nbytes for x in leaves if x.role == "opt")
    return trace.anchor.alias_bytes >= opt


def warn_if_not_donated(
    trace, leaves, opt_state_argnum: int, params_argnum: int | None, stacklevel: int = 3
) -> bool:
    """A PlanWarning where the traced step does not donate its optimizer state; returns
    :func:`is_donated`."""

    if is_donated(trace, leaves):
        return True
    opt = sum(x.nbytes for x in leaves if x.role == "opt")
    donate = tuple(
        sorted({opt_state_argnum} | ({params_argnum} if params_argnum is not None else set()))
    )
    warnings.warn(
        f"The traced step does not donate its optimizer state: its compile aliases "
        f"{fmt_bytes(trace.anchor.alias_bytes)} of outputs to inputs, less than the "
        f"{fmt_bytes(opt)} of optimizer state (argument {opt_state_argnum}).\n"
        "Why: without donation the step holds the old state and the new one side by side, so "
        "the plan's fixed bytes count the state (and the parameters) twice and the plan moves "
        "more state to the host than the step as it runs needs (a 7.2 B Adam step: 86.9 GB "
        "undonated against 58.0 GB donated, benchmarks/results/"
        "state-offload-config-2026-12-04.md).\n"
        f"Fix: plan the step as it runs, donated: planner.Planner(jax.jit(train_step, "
        f"donate_argnums={donate}), *args, ...), and run it donated too.",
        PlanWarning,
        stacklevel=stacklevel,
    )
    return False


def plan_state(
    session,
    hbm_gb: float,
    *,
    opt_state_argnum: int,
    params_argnum: int | None = None,
    build: Callable[[Any, st.StatePlacement], tuple] | None = None,
    stream_params: bool = False,
) -> StatePlan:
    """Solve activations and optimizer-state placement together for ``hbm_gb`` per device.

    ``opt_state_argnum``: which positional argument of the session's step is the optimizer
    state (an optax state pytree); ``params_argnum``: the parameters (for the budget split;
    they stay in HBM unless ``stream_params``). ``stream_params=True``: the step streams
    its stacked layer parameters into the checkpointed layers (``plan.state.
    stream_layer_params``, params.py), so the plan may put them in pinned host memory too
    (state.py: the terms; ``StatePlan.placement.param_paths()``: which). ``build`` (see :meth:`StatePlan.check`): when given,
    each plan is compiled as the user applies it and held to the budget: a plan whose
    compiled device bytes exceed it is solved again with the model corrected by the measured
    error (``c' = c + compiled - predicted``, cost.py), at most ``max_rounds`` times (the
    session's option), and a step that does not take the planned host bytes is an error.
    Raises InfeasibleBudgetError when the model fits nothing. A PlanWarning where the traced
    step does not donate the state (:func:`warn_if_not_donated`).

    ``session.plan(hbm_gb, opt_state_argnum=..., build=...)`` gives the same decisions as a
    Plan (:func:`plan_in_session`).
    """

    tr, hw = session.trace, session.hardware
    leaves, layers = _leaves(session, opt_state_argnum, params_argnum, stream_params)
    warn_if_not_donated(tr, leaves, opt_state_argnum, params_argnum)
    budget = usable_bytes(int(hbm_gb * GB), hw, io_bytes(tr), session.compiler.margin)
    return _state_loop(session, budget, hbm_gb * GB, leaves, layers, build)


def _state_loop(
    session, budget, requested, leaves, layers, build, first=None, estimate_on_cpu=False
) -> StatePlan:
    """Solve (``first``: the first round's solution, when already solved) and, with
    ``build``, compile the applied step and correct the model until it fits the budget.
    ``estimate_on_cpu``: on XLA:CPU, which has no host memory space (it keeps the host
    leaves in its one memory and copies them in and out, so the placed step compiles larger than
    with every leaf in HBM), record the compile as not exact and stop (StateCheck.estimated)
    instead of raising."""
    correction = 0
    seen = []
    rounds: list[Round] = []
    for _ in range(max(1, session.options.max_rounds) if build else 1):
        plan = first if first is not None and not correction else None
        plan = plan or _solve(session, budget, correction, leaves, layers)
        if build is None:
            return plan
        chk, applied = plan.compile_applied(build)
        plan = dataclasses.replace(plan, applied=applied)
        if (
            estimate_on_cpu
            and session.backend == "cpu"
            and chk.host_argument_bytes == 0
            and chk.planned_host_bytes
        ):
            chk = dataclasses.replace(chk, estimated=True)
            rounds.append(
                Round(
                    correction_bytes=correction,
                    predicted_peak_bytes=plan.prediction.peak_bytes,
                    compiled_device_bytes=None,
                    status="compiled, unverified",
                    purpose="fit",
                    predicted_step_s=plan.prediction.step_s,
                    outcome="XLA:CPU has no host memory space",
                )
            )
            return dataclasses.replace(
                plan, compiled=chk, correction_bytes=correction, rounds=tuple(rounds)
            )
        if not chk.host_matches:
            raise PlannerError(
                f"The compiled step does not hold the plan's host bytes: {chk.status}.\n"
                "Why: the step that build() returns does not apply the placement (or the "
                "compiler has no host memory space: XLA:CPU reports none).\nFix: jit the step "
                "with plan.state.shardings / plan.state.param_shardings as the in and out "
                "shardings of the optimizer state and parameters, put them there with "
                "jax.device_put, wrap the layer with plan.state.stream_layer_params (host "
                "parameters) and the update with plan.state.streamed_apply (or streamed_update "
                "where no parameter moves); check on XLA:GPU (deviceless works)."
            )
        over = chk.device_bytes > budget
        rounds.append(
            Round(
                correction_bytes=correction,
                predicted_peak_bytes=plan.prediction.peak_bytes,
                compiled_device_bytes=chk.device_bytes,
                status="compiled, over budget" if over else "compiled, within budget",
                purpose="fit",
                predicted_step_s=plan.prediction.step_s,
                outcome="over budget" if over else "within budget",
            )
        )
        plan = dataclasses.replace(
            plan, compiled=chk, correction_bytes=correction, rounds=tuple(rounds)
        )
        seen.append(chk.device_bytes)
        if not over:
            return plan
        correction += chk.device_bytes - plan.prediction.peak_bytes
    raise PlannerError(
        f"No plan compiled within {budget / 1e6:.1f} MB usable of {requested / GB:g} GB in "
        f"{len(seen)} rounds (compiled device bytes: {', '.join(f'{b / 1e6:.1f} MB' for b in seen)})."
        "\nWhy: each round corrected the model by the compiler's measured error and solved "
        "again, and the compiled step stayed over the budget.\nFix: raise hbm_gb, or raise "
        "max_rounds (PlanOptions)."
    )


def _solve(session, budget, correction, leaves, layers) -> StatePlan:
    tr, graph, hw = session.trace, session.graph, session.hardware
    cost = build_cost_model(
        tr, graph, hw, allow_offload=session.offload, correction_bytes=correction
    )
    cost = with_state(cost, leaves)
    sol = solve_assignment(graph, cost, budget, session.options.solver)
    check_solution(graph, cost, sol)
    pred = evaluate(cost, graph, sol.assignment, state_on_host=sol.state_on_host)
    act = evaluate(cost, graph, sol.assignment)  # the activations' own peak above F
    emitted = emit(sol.assignment, {c.key: c.name for c in graph.classes}, hw)
    placement = st.placement_of(leaves, sol.state_on_host)
    terms = evaluate_state(cost.state, sol.state_on_host)
    split = st.budget_split(
        leaves,
        placement,
        activation_bytes=act.peak_bytes - act.fixed_bytes,
        activation_host_bytes=pred.host_bytes - terms.host_bytes - terms.host_temp_bytes,
    )
    return StatePlan(
        usable_bytes=budget,
        solution=sol,
        prediction=pred,
        emitted=emitted,
        placement=placement,
        split=split,
        layers=layers,
        terms=terms,
        cost=cost,
        compiler=session.compiler,
    )


# ------------------------------------------------------------------------------ as a Plan


def plan_in_session(
    session,
    requested: int,
    *,
    opt_state_argnum: int,
    params_argnum: int | None,
    build: Callable[[Any, st.StatePlacement], tuple] | None,
    stream_params: bool = False,
):
    """``session.plan(...)`` with the optimizer state's placement decided too: a Plan whose
    ``state`` is a :class:`state.PlanState` (module docstring)."""

    tr, hw = session.trace, session.hardware
    leaves, layers = _leaves(session, opt_state_argnum, params_argnum, stream_params)
    donated = warn_if_not_donated(tr, leaves, opt_state_argnum, params_argnum, stacklevel=5)
    budget = usable_bytes(requested, hw, io_bytes(tr), session.compiler.margin)
    first = _solve(session, budget, 0, leaves, layers)

    def part(placement, split, terms, compiled):
        return st.PlanState(
            opt_state_argnum=opt_state_argnum,
            params_argnum=params_argnum,
            layers=layers,
            placement=placement,
            parts=st.budget_parts(split),
            terms=terms,
            compiled=compiled,
            donated=donated,
        )

    if not first.placement.on_host:
        # The whole state in HBM: the traced step is the step that runs; plan it fully.
        plan = session.plan_activations(requested)
        pred = plan.prediction
        empty = st.placement_of(leaves, frozenset())
        split = st.budget_split(
            leaves,
            empty,
            activation_bytes=pred.peak_bytes - pred.fixed_bytes,
            activation_host_bytes=pred.host_bytes,
        )
        terms = evaluate_state(first.cost.state, frozenset())
        return dataclasses.replace(plan, state=part(empty, split, terms, None))
    sp = _state_loop(
        session, budget, requested, leaves, layers, build, first=first, estimate_on_cpu=True
    )
    return _as_plan(
        session, requested, budget, sp, build, part(sp.placement, sp.split, sp.terms, sp.compiled)
    )


def _as_plan(session, requested, budget, sp: StatePlan, build, state):
    """The Plan of a state plan that moves state (module docstring: what is checked)."""

    ver = applied_step_verification(
        sp.compiled,
        sp.prediction.peak_bytes,
        budget,
        backend=session.backend,
        compiler=session.compiler,
    )
    graph = session.graph
    plan = Plan(
        budget_bytes=requested,
        hardware=session.hardware,
        trace=session.trace,
        graph=graph,
        cost=sp.cost,
        solution=sp.solution,
        prediction=sp.prediction,
        baselines=evaluate_baselines(graph, sp.cost, budget),  # the state in HBM
        emitted=sp.emitted,
        verification=ver,
        rounds=sp.rounds,
        timings=tuple(session.timings),
        headroom_bytes=requested - budget,
        choice="planner",
        choice_why="",
        fill_why="no fill rounds: the plan moves optimizer state (planner/_src/planning/state_placement.py)",
        state=state,
        **session.plan_fields(),
    )
    return _with_state_numerics(session, plan, sp.applied if build else None)


def _fresh(args):
    """New buffers for every array of ``args`` (the step donates its inputs), in place."""
    import jax

    return jax.tree.map(
        lambda x: jax.device_put(x, x.sharding, may_alias=False) if isinstance(x, jax.Array) else x,
        args,
    )


def _with_state_numerics(session, plan, applied):
    """The applied step's outputs against the user's step's (numerics.py), where the
    arguments are concrete and ``applied``, the step as applied compiled by the last round
    (``(compiled, args)``), runs here."""

    why = session.numerics_not_checked_why()
    if not why and applied is None:
        why = "no build= was given, and the step that applies the placement is yours"
    if why:
        result = numerics.not_checked(why)
    else:
        compiled, args = applied
        result = session.judge_run(plan, lambda: jax_ready(compiled(*_fresh(args))))
    ver = plan.verification
    if result.checked:
        ver = dataclasses.replace(
            ver,
            checks=ver.checks + (result.check,),
            status=ver.status if result.ok else Status.NUMERICS,
        )
        if not result.ok:
            warnings.warn(result.detail, PlanWarning, stacklevel=5)
    else:
        ver = dataclasses.replace(ver, note=(ver.note + " " if ver.note else "") + result.detail)
    return dataclasses.replace(plan, verification=ver, numerics=result)


def jax_ready(out):
    import jax

    return jax.block_until_ready(out)
