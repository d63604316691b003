"""Stage 6, verify: compile the step with the emitted policy and hold the plan to it.

- ``verify.py``: the three levels for one plan (JAX's residuals, the traced step, the
  compiled program against the budget), and the verify compiles started ahead on threads;
- ``kept.py``: level 1, JAX's residual choice under the emitted policy against the plan's;
- ``sites.py``: which emitted policy each checkpoint call site gets;
- ``exposure.py``: the compiled schedule's exposed host-copy time for a verified plan;
- ``applied.py``: the Verification of a plan that moves train state (the step as applied);
- ``numerics/``: the numerics check, the planned step's outputs against the user's step's;
- ``schedule/``: the compiled XLA:GPU schedule's host-copy windows, replayed (HLO text in,
  no JAX).
"""
