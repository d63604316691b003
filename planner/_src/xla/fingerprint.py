"""A step's fingerprint: a hash of its traced program's text (shapes, dtypes, operations),
without source lines. The trace stage records it; a plan file is checked against it."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from planner._src.errors import PlannerError, TraceError
from planner._src.xla import adapter


def jaxpr_fingerprint(step_jaxpr) -> str:
    """Hash of the step's program text (shapes, dtypes, operations), without source lines."""
    return hashlib.sha256(str(adapter.open_jaxpr(step_jaxpr)).encode()).hexdigest()[:16]


def step_fingerprint(step_fn: Callable, args: Sequence[Any]) -> str:
    """The fingerprint ``trace_step`` records, without the rest of the trace."""
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
    return jaxpr_fingerprint(traced.jaxpr)
