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
    return fingerprint_of(traced.jaxpr, args)
