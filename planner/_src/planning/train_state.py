"""Train-state placement, a step of one budget: the optimizer state (and, streamed, the stacked
parameters) decided with the activations in one CP-SAT model, over the budget's
:class:`~planner._src.planning.context.Context`.

Where a budget places train state (``Context.state``: a :class:`StateSpec`), every step of
``one_budget.py`` runs on the model with the state's leaves priced (``Context.cost_model``:
cost/state.py), and a candidate that puts leaves on the host is compiled as applied
(attempt.py: the step ``plan.apply`` returns, or the user's ``build``). This module makes the
spec (:func:`state_spec`: how the placement can be applied, and so how its leaves are
priced), the plan's state part (:func:`state_part`), the refusal's word on a state left in
HBM (:func:`offer_note`), and the warning for an undonated step (:func:`warn_if_not_donated`).

How it is applied (emit/apply_state.py), and so priced: where the optimizer is a Flax
``TrainState``'s ``tx``, its update is streamed one layer slice at a time ("streamed": a
stacked leaf is priced per slice); where the planner cannot reach the optimizer (closed over,
or in an nnx graph definition), host leaves come in whole for the update ("whole": priced
as one slice, as MaxText's ``optimizer_memory_host_offload`` moves them); with ``build``, the
user's step applies it ("build": priced per slice, as ``streamed_update`` does).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable

from planner._src.cost import evaluate
from planner._src.cost.baselines import stock_assignment
from planner._src.cost.state import evaluate_state, with_state
from planner._src.errors import InvalidArgumentError, PlanWarning, user_stacklevel
from planner._src.planning.attempt import attempt
from planner._src.planning.context import Attempt, Context, StateSpec, Subject, normalize
from planner._src.policies import STOCK
from planner._src.trainstate import PlanState, budget_parts, budget_split, placement_of
from planner._src.trainstate.records import leaves_of
from planner._src.trainstate.select import StateSelection, subtree
from planner._src.types import Baseline, Trace
from planner._src.units import fmt_bytes

__all__ = [
    "MAXTEXT_FLAG",
    "check_flag_row",
    "is_state_baseline",
    "layers_of",
    "offer_note",
    "state_baseline_attempt",
    "state_baselines",
    "state_part",
    "state_spec",
    "warn_if_not_donated",
]

STREAMED_WHY = "the optimizer is the TrainState's tx, which the planner can swap"
WHOLE_WHY = (
    "the optimizer is out of the planner's reach (closed over by the step, or in an nnx graph "
    "definition), so each host leaf comes in whole for the update and is priced so; pass "
    "build= to stream it per layer slice"
)
BUILD_WHY = "build= was given"
# MaxText's all-or-nothing optimizer offload, a baseline: the whole optimizer state in pinned
# host memory, brought back whole for the update, with a stock policy's activations.
MAXTEXT_FLAG = "optimizer_memory_host_offload"
MAXTEXT_WHY = (
    f"MaxText's {MAXTEXT_FLAG}: the whole optimizer state on the host, brought back whole "
    "for the update"
)


def layers_of(trace: Trace) -> int:
    """The layer count: the largest trip count of a region under lax.scan (a scanned layer
    stack; merged Python-loop call sites also have a multiplicity, but no stacked leaves)."""
    return max((r.multiplicity for r in trace.regions if r.in_scan), default=1)


def state_spec(
    subject: Subject,
    trace: Trace,
    selection: StateSelection,
    *,
    build: Callable | None = None,
    stream_params: bool = False,
    planned_because: str = "",
) -> StateSpec:
    """The train state a budget places: its leaves from the example arguments, priced as
    the placement can be applied (module docstring)."""
    if build is not None:
        mode, why = "build", BUILD_WHY
    elif selection.container is not None:
        mode, why = "streamed", STREAMED_WHY
    else:
        mode, why = "whole", WHOLE_WHY
    layers = layers_of(trace) if mode != "whole" else 1
    args = subject.user_args
    params = None if selection.params_path is None else subtree(args, selection.params_path)
    leaves = leaves_of(
        subtree(args, selection.opt_path),
        params,
        layers=max(1, layers_of(trace)) if stream_params else layers,
        stream_params=stream_params,
    )
    if stream_params and not any(x.movable and x.role == "param" for x in leaves):
        raise InvalidArgumentError(
            f"stream_params=True, but no parameter at `{selection.params_text}` is stacked "
            f"over the scanned layers ({layers_of(trace)}).\nWhy: only a stacked layer "
            "parameter can be streamed one slice at a time.\nFix: scan the layers over "
            "stacked parameters, or leave stream_params off."
        )
    donated = warn_if_not_donated(trace, leaves, selection)
    return StateSpec(
        selection=selection,
        leaves=leaves,
        layers=layers,
        mode=mode,
        mode_why=why,
        build=build,
        donated=donated,
        planned_because=planned_because,
    )


def is_donated(trace: Trace, leaves) -> bool:
    """Whether the traced step donates its optimizer state: its compiled anchor (full remat)
    aliases at least the state's bytes of outputs to inputs (``memory_analysis()``'s alias
    bytes; the parameters may be donated too, and count)."""
    opt = sum(x.nbytes for x in leaves if x.role == "opt")
    return trace.anchor.alias_bytes >= opt


def warn_if_not_donated(trace: Trace, leaves, selection: StateSelection) -> bool:
    """A PlanWarning where the traced step does not donate its optimizer state, pointing at
    the user's call of the planner (errors.user_stacklevel); returns :func:`is_donated`.
    (``plan.apply`` donates it: the plan is made for that step, but the fixed bytes measured
    from the step as traced count the state twice.)"""
    if is_donated(trace, leaves):
        return True
    opt = sum(x.nbytes for x in leaves if x.role == "opt")
    donate = selection.argnums()
    warnings.warn(
        f"The traced step does not donate its optimizer state: its compile aliases "
        f"{fmt_bytes(trace.anchor.alias_bytes)} of outputs to inputs, less than the "
        f"{fmt_bytes(opt)} of optimizer state (`{selection.opt_text}`).\n"
        "Why: without donation the step holds the old state and the new one side by side, so "
        "the plan's fixed bytes count the state (and the parameters) twice and the plan moves "
        "more state to the host than the step as it runs needs (a 7.2 B Adam step: 86.9 GB "
        "undonated against 58.0 GB donated, benchmarks/results/"
        "state-offload-config-2026-12-04.md).\n"
        f"Fix: plan the step as it runs, donated: planner.Planner(jax.jit(train_step, "
        f"donate_argnums={donate}), *args, ...), and run it donated too (plan.apply does).",
        PlanWarning,
        stacklevel=user_stacklevel(),
    )
    return False


def state_part(ctx: Context, graph, cost, assignment, on_host: frozenset, check=None) -> PlanState:
    """The plan's train-state part (``plan.state``) for ``assignment`` with the leaves
    ``on_host``: the placement, the budget split, the terms, how it is applied."""
    spec = ctx.state
    placement = placement_of(spec.leaves, on_host)
    terms = evaluate_state(cost.state, on_host)
    pred = evaluate(cost, graph, assignment, state_on_host=on_host)
    act = evaluate(cost, graph, assignment)  # the activations' own peak above F
    split = budget_split(
        spec.leaves,
        placement,
        activation_bytes=act.peak_bytes - act.fixed_bytes,
        activation_host_bytes=pred.host_bytes - terms.host_bytes - terms.host_temp_bytes,
    )
    return PlanState(
        selection=spec.selection,
        layers=spec.layers,
        placement=placement,
        parts=budget_parts(split),
        terms=terms,
        compiled=check,
        donated=spec.donated,
        mode=spec.mode,
        mode_why=spec.mode_why,
        planned_because=spec.planned_because,
    )


def offer_note(ctx: Context) -> str:
    """For a refusal with an optimizer state found in the arguments and left in HBM
    (``Context.offer``): how much placing it could free, and the one argument that asks for
    it ('' where there is nothing to say)."""
    sel = ctx.offer
    if sel is None:
        return ""
    leaves = leaves_of(subtree(ctx.subject.user_args, sel.opt_path), layers=1)
    movable = sum(x.nbytes for x in leaves if x.movable)
    if not movable:
        return ""
    return (
        f"\nOr place the optimizer state: `{sel.opt_text}` ({sel.description}) is in HBM "
        f"here; the plan may move its arrays to pinned host memory, up to "
        f"{fmt_bytes(movable)} out of the fixed bytes (each comes back for its update): ask "
        f'for it with opt_state={sel.opt_text!r} (or opt_state="auto").'
    )


# ------------------------------------------------------------------ MaxText's flag, a baseline


def is_state_baseline(name: str) -> bool:
    return name.endswith(" + " + MAXTEXT_FLAG)


def _whole(spec: StateSpec) -> tuple[StateSpec, frozenset]:
    """``spec`` as MaxText's flag applies it: every optimizer-state array on the host, each
    brought in whole (priced as one slice), the parameters in HBM; and those leaves."""
    leaves = tuple(dataclasses.replace(x, layers=1, streamable=False) for x in spec.leaves)
    whole = dataclasses.replace(
        spec, leaves=leaves, layers=1, mode="whole", mode_why=MAXTEXT_WHY, build=None
    )
    return whole, frozenset(x.key for x in leaves if x.movable and x.role == "opt")


def state_baselines(ctx: Context, graph, cost, baselines) -> tuple[Baseline, ...]:
    """Where the budget places train state: each distinct stock policy's activations with
    the whole optimizer state on the host (MaxText's ``optimizer_memory_host_offload``),
    through the model (its leaves priced whole), judged by its compile where it was made."""
    if ctx.state is None:
        return ()
    whole, on_host = _whole(ctx.state)
    if not on_host:
        return ()
    wcost = with_state(cost, whole.leaves, whole=True)
    out, seen = [], set()
    for b in baselines:
        if b.name not in STOCK or not b.applicable:
            continue
        key = normalize(graph, cost, b.assignment)
        if key in seen:
            continue  # the same program as a policy listed already
        seen.add(key)
        name = f"{b.name} + {MAXTEXT_FLAG}"
        p = evaluate(wcost, graph, b.assignment, state_on_host=on_host)
        got = ctx.stock.applied_bytes((name, ctx.state.selection.opt_path))
        peak = p.peak_bytes if got is None else got
        out.append(
            Baseline(
                name=name,
                assignment=b.assignment,
                prediction=p,
                fits=peak <= ctx.usable and p.host_bytes <= wcost.host_cap_bytes,
                applicable=True,
                compiled_device_bytes=got,
            )
        )
    return tuple(out)


def state_baseline_attempt(ctx: Context, name: str, graph, cost) -> tuple[Attempt, StateSpec]:
    """The compile, as applied, of the state baseline ``name`` (once per Planner and
    selection; budget-free: held to a budget by its figure), and its spec."""
    whole, on_host = _whole(ctx.state)
    stock = name[: -len(" + " + MAXTEXT_FLAG)]
    wcost = with_state(cost, whole.leaves, whole=True)

    def make():
        return attempt(
            ctx.subject,
            ctx.timings,
            ctx.trace,
            graph,
            wcost,
            stock_assignment(graph, stock),
            0,
            stock=stock,
            label=name,
            state=whole,
            state_on_host=on_host,
        )

    return ctx.stock.applied((name, ctx.state.selection.opt_path), make), whole


def check_flag_row(ctx: Context, graph, cost, baselines, answer_on_host: frozenset) -> bool:
    """Where the answer moves train state, the MaxText row it is compared against (what a
    MaxText user would run at this budget: the fastest stock policy with the whole
    optimizer state on the host that fits, ``baselines``' fits) compiled as applied where
    it was not (once per Planner, budget-free: :func:`state_baseline_attempt`), so that its
    "fits" is the compiler's; returns whether it compiled one. The rows predicted faster
    than the answer are compiled by the choice (choose.py: never worse than stock); no
    other row is compiled for the table (one compile at most: planning time). On XLA:CPU
    (no host memory space) a compile cannot check such a row, so none is made there."""
    opts = ctx.options
    if not (answer_on_host and opts.verify_compile and opts.compare_stock):
        return False
    if ctx.subject.backend == "cpu":
        return False
    rows = [b for b in baselines if is_state_baseline(b.name) and b.fits]
    if not rows:
        return False
    row = min(rows, key=lambda b: b.prediction.step_s)
    if row.compiled_device_bytes is not None:
        return False
    state_baseline_attempt(ctx, row.name, graph, cost)
    return True
