"""The numerics check's verdict: its result record, the judgement of the planned step's
outputs against the user's (``judge``) and its words, and :func:`check_numerics`, the public
verb that runs both steps and judges them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import jax

from planner._src.errors import InvalidArgumentError
from planner._src.types import Check
from planner._src.verify.numerics.compare import (
    SENSITIVITY_FACTOR,
    TOLERANCE_FLOOR,
    TOLERANCE_ULPS,
    LeafCheck,
    coarsest_eps,
    compare,
    tolerance,
)
from planner._src.verify.numerics.runs import (
    is_concrete,
    reference_runs,
    run_float64,
    run_planned,
)
from planner._src.verify.sites import policy_maker

CHECK_NAME = "the planned step computes what your step computes"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NumericsResult:
    """The numerics check of a plan: ``checked`` False says why not (``detail``) and how to
    check (``how_to_check``); otherwise ``ok`` and every leaf's error and tolerance."""

    checked: bool
    ok: bool
    detail: str
    leaves: tuple[LeafCheck, ...] = ()
    ran_on: str = ""
    tolerance: float = 0.0
    how_to_check: str = ""

    @property
    def check(self) -> Check | None:
        """The verification check (None when not checked)."""
        return Check(name=CHECK_NAME, ok=self.ok, detail=self.detail) if self.checked else None

    @property
    def mismatched(self) -> tuple[LeafCheck, ...]:
        return tuple(leaf for leaf in self.leaves if not leaf.ok)


HOW_TO_CHECK = (
    "pass concrete arrays as the example arguments (the planner then runs both steps once), "
    "or run planner.check_numerics(plan, step_fn, *args) where the step can run (on the GPU), "
    "with concrete arguments of the shapes planned"
)


def _decisions_text(decisions: dict[str, str], limit: int = 8) -> str:
    parts = []
    for what, verb in (("offload", "offloaded"), ("remat", "recomputed")):
        names = sorted(k for k, d in decisions.items() if d == what)
        if names:
            more = f" and {len(names) - limit} more" if len(names) > limit else ""
            parts.append(f"{verb} {names[:limit]}{more}")
    return "; ".join(parts) if parts else "every tensor saved"


def judge(
    planned,
    reference,
    eps: float,
    *,
    decisions: dict[str, str],
    ran_on: str,
    args_note: str = "",
    sensitivity=None,
    float64=None,
) -> NumericsResult:
    """The check's result from the two runs' outputs (and the step's own sensitivity run,
    :func:`run_sensitivity`, and its float64 run, :func:`run_float64`, when given)."""
    leaves = compare(planned, reference, eps, sensitivity, float64)
    tol = tolerance(eps)
    bad = [leaf for leaf in leaves if not leaf.ok]
    worst = max(leaves, key=lambda leaf: leaf.error / (leaf.tolerance or 1.0), default=None)
    where = f"ran on {ran_on}" + (f" ({args_note})" if args_note else "")
    if not bad:
        detail = (
            f"{len(leaves)} output leaves (loss, gradients, updated state) of the planned step "
            f"match the step under your own policies on the example arguments; {where}; the "
            f"largest difference {worst.error:.3g} of a leaf's scale ({worst.path}), allowed "
            f"{worst.tolerance:.3g} (the larger of {TOLERANCE_ULPS} x eps of "
            + ("the leaf's own float dtype" if sensitivity else "the step's coarsest float dtype")
            + f", {TOLERANCE_FLOOR:g}"
            + (
                f", and {SENSITIVITY_FACTOR:g} x what rounding alone moves that leaf by: the "
                "step on its inputs moved by one ulp of the precision it computes in, and "
                "under JAX's full remat"
                if sensitivity is not None
                else ""
            )
            + ")"
            + _float64_note(leaves)
            if worst is not None
            else f"the step has no outputs to compare; {where}"
        )
        return NumericsResult(
            checked=True, ok=True, detail=detail, leaves=leaves, ran_on=ran_on, tolerance=tol
        )
    shown = ", ".join(
        f"{leaf.path} ({leaf.what}) differs by "
        + ("a different value" if leaf.tolerance == 0.0 else f"{leaf.error:.3g} of its scale")
        + (f", allowed {leaf.tolerance:.3g}" if leaf.tolerance else "")
        for leaf in bad[:6]
    ) + (f" and {len(bad) - 6} more leaves" if len(bad) > 6 else "")
    detail = (
        f"NUMERICS DIFFER: {len(bad)} of {len(leaves)} output leaves of the planned step differ "
        f"from the step under your own policies on the same inputs: {shown}; {where}. The "
        f"plan's decisions involved: {_decisions_text(decisions)}. Why: saving, recomputing or "
        "offloading a residual must not change the math; a difference beyond rounding means a "
        "residual the backward pass reads was not what the forward pass made (a step whose "
        "region is impure, e.g. a callback or a stateful RNG inside jax.checkpoint, or a "
        "planner/JAX bug). Fix: do not train with this plan; plan with allow_offload=False "
        "to see whether the offloads are involved, and report the step."
    )
    return NumericsResult(
        checked=True, ok=False, detail=detail, leaves=leaves, ran_on=ran_on, tolerance=tol
    )


def _float64_note(leaves: Sequence[LeafCheck]) -> str:
    """Words for the leaves that passed only against the float64 answer (compare)."""
    rescued = [leaf for leaf in leaves if leaf.against == "float64"]
    if not rescued:
        return ""
    return (
        f"; {len(rescued)} "
        + ("leaf differs" if len(rescued) == 1 else "leaves differ")
        + " from your step by more than that ("
        + ", ".join(leaf.path for leaf in rescued[:4])
        + (" ..." if len(rescued) > 4 else "")
        + "), but the planned step is no farther from the step computed in float64 than "
        f"{SENSITIVITY_FACTOR:g} x your own float32 step is, and off in no more entries: "
        "rounding the step amplifies on its own (Adam on gradients near 0 turns their "
        "rounding into a sizeable share of the learning rate), not a wrong residual"
    )


def not_checked(why: str) -> NumericsResult:
    return NumericsResult(
        checked=False,
        ok=False,
        detail=f"Numerics not checked: {why}. To check that the planned step computes the same "
        f"loss, gradients and state as yours: {HOW_TO_CHECK}.",
        how_to_check=HOW_TO_CHECK,
    )


def backend_note() -> str:
    """Which backend the runs used, and why that checks a plan for a GPU too."""
    b = jax.default_backend()
    name = {"cpu": "XLA:CPU", "gpu": "XLA:GPU", "cuda": "XLA:GPU", "tpu": "XLA:TPU"}.get(b, b)
    return name + (
        ", this machine's backend: a valid check of the policy for a GPU too (what a policy "
        "saves, recomputes or offloads changes where values live, not the math)"
        if b == "cpu"
        else ", this machine's device"
    )


def _computed_dtypes(plan) -> tuple[str, ...]:
    """The floating dtypes the planned step computes in (``Trace.float_dtypes``)."""
    trace = getattr(plan, "trace", None)
    return tuple(getattr(trace, "float_dtypes", ()))


def _draws_random(plan) -> bool:
    """``Trace.draws_random`` of the plan's trace; True (no float64 run) where unknown."""
    return bool(getattr(getattr(plan, "trace", None), "draws_random", True))


def check_numerics(plan, step_fn: Callable, *args) -> NumericsResult:
    """Run ``step_fn(*args)`` under ``plan``'s policies and as written, and compare every
    output leaf (package docstring: the tolerance). ``args`` must be concrete arrays of the
    shapes planned (a plan's policy decides by shapes and names). Runs on this machine's
    default backend, e.g. on the GPU after planning on a CPU::

        result = planner.check_numerics(plan, train_step, state, batch)
        assert result.ok, result.detail
    """

    if not args:
        raise InvalidArgumentError(
            "check_numerics needs the step's arguments: check_numerics(plan, step_fn, *args)."
        )
    if not is_concrete(args):
        raise InvalidArgumentError(
            "check_numerics runs the step, so its arguments must be concrete arrays, not "
            "jax.ShapeDtypeStruct.\nFix: pass real arrays of the shapes planned (e.g. the "
            "first batch and the initial state), on a machine where they fit."
        )
    make = policy_maker(plan.graph, plan.emitted.policy, plan.emitted.policies)
    reference, sensitivity, differ = reference_runs(step_fn, args, _computed_dtypes(plan))
    if differ:
        return not_checked(differ)
    planned = run_planned(step_fn, args, make)
    eps = coarsest_eps(args, reference, computed=_computed_dtypes(plan))

    def judged(float64=None):
        return judge(
            planned,
            reference,
            eps,
            decisions=plan.decisions(),
            ran_on=backend_note(),
            sensitivity=sensitivity,
            float64=float64,
        )

    result = judged()
    if result.ok or (wide := run_float64(step_fn, args, draws_random=_draws_random(plan))) is None:
        return result
    return judged(wide)  # again with the step's own float32 error measured (run_float64)
