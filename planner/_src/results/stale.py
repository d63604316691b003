"""A plan applied to the step it was made for, and to no other: ``plan.apply(step)`` and
``load_plan(path).apply(step)`` compare the step, at its first call (or ``.trace`` /
``.lower``) with that call's arguments, with the plan's ``StepFingerprint``, and refuse
another step naming what differs. A plan for batch 256 called at batch 1024 matched nothing
there: the step ran as full remat while its user believed it planned.

The comparison is of the traced program (its operations, shapes and dtypes): the argument
lines and the JAX versions are named in the refusal, but a step traced to the same program
under another JAX, or with a Python scalar where the plan had a weakly typed array, is the
same step. ``check=False`` (``plan.apply(step, check=False)``) skips it, for a user who
knows the plan fits the step though its program changed.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax

from planner._src.errors import PlanFileError, PlanWarning
from planner._src.fingerprints import StepFingerprint
from planner._src.xla.fingerprint import step_fingerprint_and_bodies

__all__ = ["first_call_check", "refuse_another_step"]


_HOST_KINDS = ("pinned_host", "unpinned_host")


def _shape_of(x) -> jax.ShapeDtypeStruct:
    """``x``'s shape, dtype and weak type, with no sharding or memory kind."""
    return jax.ShapeDtypeStruct(
        tuple(x.shape), x.dtype, weak_type=bool(getattr(x, "weak_type", False))
    )


def _abstract(args: Sequence[Any]) -> tuple:
    """The call's arguments with every tracer (the applied step called inside the user's own
    ``jax.jit`` or ``grad``) as a ``ShapeDtypeStruct``: the step is traced on its own. So is
    an array in host memory (train state a plan placed there, or that the user created
    there): the user's step, traced unplanned, would mix host and device values, and the
    plan was made for the values themselves, wherever they live."""

    def leaf(x):
        if isinstance(x, jax.core.Tracer):
            return _shape_of(x.aval)
        if getattr(getattr(x, "sharding", None), "memory_kind", None) in _HOST_KINDS:
            return _shape_of(x)
        return x

    return tuple(jax.tree.map(leaf, tuple(args)))


def _unsharded(args: Sequence[Any]) -> tuple:
    """Every array argument as a ``ShapeDtypeStruct`` with no sharding. JAX traces an array
    committed to a mesh's ``NamedSharding`` into another program text than the same shapes
    unsharded (JAX 0.11.2: one more scalar operand into the checkpointed layer), so a plan
    made from ``jax.eval_shape`` arguments would otherwise refuse the very step it was
    made for, called with sharded arrays."""

    def leaf(x):
        return _shape_of(x) if hasattr(x, "shape") and hasattr(x, "dtype") else x

    return tuple(jax.tree.map(leaf, tuple(args)))


def fingerprint_for_check(step_fn: Callable, args: tuple, planned: StepFingerprint):
    """``step_fn``'s fingerprint and wrapped bodies for ``args``, traced again with the
    arguments unsharded where the first trace is not the planned program (_unsharded)."""
    here, bodies = step_fingerprint_and_bodies(step_fn, _abstract(args))
    if planned.program in (here.program, *bodies):
        return here, bodies
    alt, alt_bodies = step_fingerprint_and_bodies(step_fn, _unsharded(args))
    if planned.program in (alt.program, *alt_bodies):
        return alt, alt_bodies
    return here, bodies


def refuse_another_step(
    here: StepFingerprint,
    planned: StepFingerprint,
    where: str,
    note: str = "",
    bodies: tuple[str, ...] = (),
) -> None:
    """Raise PlanFileError (with ``.differences``) unless ``here`` is the planned program
    or wraps it (``bodies``: the jit bodies it calls, ``xla.fingerprint.wrapped_bodies``);
    ``note``: more to say before the fix (a plan file's versions)."""
    if planned.program in (here.program, *bodies):
        return
    diffs = tuple(here.differences(planned)) or (
        f"the program: {here.program} here, {planned.program} for the plan",
    )
    listed = "\n".join(f"  - {d}" for d in diffs)
    err = PlanFileError(
        f"{where} was made for another step, so its decisions would match nothing or the "
        f"wrong tensors of this one (a plan of another batch size runs as full remat with no "
        f"word). What differs:\n{listed}{note}\n"
        "Fix: plan again for this step (planner.solve(step, *args, hbm_gb=...)) and apply "
        "that plan; if you know this plan fits the step, apply it with check=False."
    )
    err.differences = diffs
    raise err


def first_call_check(
    step_fn: Callable, planned: StepFingerprint, where: str
) -> Callable[[tuple, dict], None]:
    """A check run once, before the applied step's first call, ``trace`` or ``lower``: the
    step traced with that call's arguments against ``planned``. It stays armed while it
    refuses (every call of another step refuses); after a pass it costs nothing."""
    lock = threading.Lock()
    done = [False]

    def check(args: tuple, kwargs: dict) -> None:
        if done[0]:
            return
        with lock:
            if done[0]:
                return
            if kwargs:
                warnings.warn(
                    f"{where} was not compared with the step: it was called with keyword "
                    f"arguments ({', '.join(sorted(kwargs))}), and a plan's fingerprint is of "
                    "the positional arguments it was planned with.\nWhy: a plan for another "
                    "step applies with no word (its decisions match nothing).\nFix: call the "
                    "applied step with positional arguments, as it was planned, or check it "
                    "once with load_plan(path).check(step, *args).",
                    PlanWarning,
                    stacklevel=4,
                )
            else:
                here, bodies = fingerprint_for_check(step_fn, args, planned)
                refuse_another_step(here, planned, where, bodies=bodies)
            done[0] = True

    return check
