"""Fingerprinting a step: trace it once and record its program hash, arguments and JAX
(the record is planner/_src/fingerprints.py's ``StepFingerprint``)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jaxlib

from planner._src.errors import PlannerError, TraceError
from planner._src.fingerprints import StepFingerprint, argument_signature
from planner._src.xla import adapter


def jaxpr_fingerprint(step_jaxpr) -> str:
    """Hash of the step's program text (shapes, dtypes, operations), without source lines."""
    return hashlib.sha256(str(adapter.open_jaxpr(step_jaxpr)).encode()).hexdigest()[:16]


def fingerprint_of(step_jaxpr, args: Sequence[Any]) -> StepFingerprint:
    """The fingerprint of a step already traced to ``step_jaxpr`` with ``args``."""
    return StepFingerprint(
        program=jaxpr_fingerprint(step_jaxpr),
        arguments=argument_signature(args),
        jax=jax.__version__,
        jaxlib=getattr(jaxlib, "__version__", "?"),
    )


def step_fingerprint(step_fn: Callable, args: Sequence[Any]) -> StepFingerprint:
    """The fingerprint ``trace_step`` records, without the rest of the trace (one trace)."""
    return step_fingerprint_and_bodies(step_fn, args)[0]


def wrapped_bodies(step_jaxpr) -> tuple[str, ...]:
    """Program hashes of what a wrapper jit holds: a step whose program is one ``jit`` call
    of all its inputs (``eqx.filter_jit(step)``, a ``jax.jit`` inside a plain function) is
    the same step as that call's body, traced plain. Outermost first; () for other steps."""
    out = []
    j = adapter.open_jaxpr(step_jaxpr)
    while len(j.eqns) == 1:
        inner = j.eqns[0].params.get("jaxpr")
        if inner is None or not hasattr(adapter.open_jaxpr(inner), "eqns"):
            break
        out.append(jaxpr_fingerprint(inner))
        j = adapter.open_jaxpr(inner)
    return tuple(out)


def step_fingerprint_and_bodies(
    step_fn: Callable, args: Sequence[Any]
) -> tuple[StepFingerprint, tuple[str, ...]]:
    """``step_fingerprint`` and the program hashes of the jit bodies it wraps
    (:func:`wrapped_bodies`), from one trace."""
    try:
        traced, _ = adapter.trace_step_with(
            step_fn, args, lambda rid, r: adapter.everything_saveable
        )
    except PlannerError:
        raise
    except Exception as e:  # noqa: BLE001  (the user's step, traced for plan.check)
        raise TraceError(
            f"Tracing the train step for the plan file's check failed with "
            f"{type(e).__name__}: {e}\nFix: check that jax.jit(step_fn).lower(*example_args) "
            "works on its own with the arguments passed to check()."
        ) from e
    return fingerprint_of(traced.jaxpr, args), wrapped_bodies(traced.jaxpr)
