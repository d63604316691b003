"""Stage 4, solve: one CP-SAT model choosing save / remat / offload per class.

model.py builds the model by named pieces (regions.py: one region's terms; state.py: the
train state's), phases.py solves it in four lexicographic phases and checks the answer
against the direct formulas. Formulas: docs/cost-model.md#the-memory-and-time-model-term-by-term.
"""

from planner._src.solve.phases import (
    check_solution,
    min_feasible_bytes,
    min_peak_assignment,
    min_peak_plan,
    solve_assignment,
)
from planner._src.types import Solution, SolverOptions

__all__ = [
    "Solution",
    "SolverOptions",
    "check_solution",
    "min_feasible_bytes",
    "min_peak_assignment",
    "min_peak_plan",
    "solve_assignment",
]
