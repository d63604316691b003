"""The planner's errors. Each says what happened, why, and what to do about it."""

from __future__ import annotations


class PlannerError(Exception):
    """Base class of every error the planner raises on purpose."""


class InvalidArgumentError(PlannerError, ValueError):
    """An argument to the planner is malformed (budget, hardware, options, example args)."""


class TraceError(PlannerError):
    """The train step could not be traced or differentiated with the example arguments.

    ``first_trace``: the planner's first trace of the step failed (no trace of it worked)."""

    first_trace: bool = False


class NoCheckpointRegionError(PlannerError):
    """The train step has no ``jax.checkpoint`` region whose residuals the planner can choose."""


class InfeasibleBudgetError(PlannerError):
    """No assignment of save / remat / offload fits the budget.

    ``min_feasible_bytes`` is the smallest budget the model says any plan can reach.
    """

    def __init__(self, message: str, *, budget_bytes: float, min_feasible_bytes: float):
        super().__init__(message)
        self.budget_bytes = budget_bytes
        self.min_feasible_bytes = min_feasible_bytes


class SolverError(PlannerError):
    """CP-SAT returned no usable answer (time limit before any solution, or model invalid)."""


class PlanFileError(PlannerError, ValueError):
    """A plan file is corrupt, of another version, or was made for a different step.

    ``differences``: where the plan was made for another step (``apply`` / ``check``), what
    differs, one readable line each (``StepFingerprint.differences``); empty otherwise."""

    differences: tuple[str, ...] = ()


class UnsupportedError(PlannerError):
    """The program uses a feature the planner cannot plan for yet (message says which)."""


class LayerGroupsError(PlannerError):
    """``plan.policy`` of a plan whose layer groups decide differently: use ``plan.policies``."""


class PlanWarning(UserWarning):
    """The plan was returned but its compiled program does not meet the budget, or one of its
    checks failed (the warning says which)."""


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` issued by the caller of this
    function point at the first frame outside the ``planner`` package: the user's line that
    called the planner, however deep the call path (``planner.solve`` goes through more of
    the planner's frames than ``Planner.plan``; a fixed stacklevel pointed into planner.py
    for one of them). 1 where every frame is the planner's (a compile thread)."""
    import os
    import sys

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame, level = sys._getframe(1), 1  # level 1: the frame that calls warnings.warn
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 1
