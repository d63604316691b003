"""Stage 4, solve: one CP-SAT model choosing save / remat / offload per class."""

from planner._src.solve.model import (
    check_solution,
    min_feasible_bytes,
    min_peak_assignment,
    solve_assignment,
)
from planner._src.types import Solution, SolverOptions

__all__ = [
    "Solution",
    "SolverOptions",
    "check_solution",
    "min_feasible_bytes",
    "min_peak_assignment",
    "solve_assignment",
]
