"""Stage 6b, numerics: the planned step computes what the user's step computes.

The memory checks of the verify stage say a plan fits; they cannot say its gradients are
right. Where the example arguments are concrete, the verify stage runs the step twice on the
same inputs: once as the user wrote it (their own policies: the *reference*) and once with
the emitted policy in every checkpoint region (the *planned* step, the program verify
compiled, under the plan's own XLA flags), and compares every output leaf (loss, gradients,
updated state).

Remat and offload reorder nothing in principle, but XLA fuses the two programs differently,
so the comparison allows rounding. For a floating-point leaf with reference ``b`` and planned
``a`` (compared in float64, NaN and infinity positions required to agree)::

    error = max|a - b| / max(max|b|, max|a|, S)       (0 when all three are 0)
    ok    = error <= max(TOLERANCE_ULPS * eps, TOLERANCE_FLOOR,
                         SENSITIVITY_FACTOR * max(error(u), error(r)))

where ``u`` is the user's step run on its inputs moved up by one ulp and ``r`` the step under
JAX's own ``nothing_saveable`` (:func:`run_sensitivity`, ``SENSITIVITY_FACTOR = 2``): how far
rounding alone moves that leaf. A well-conditioned step moves by about 1e-7 there, so the
fixed bound decides; an ill-conditioned one is judged by its own rounding: one ulp of input,
or a softmax's row max saved instead of recomputed, can move its gradients far past the fixed
bound while both policies are equally right in float64 (measured:
`benchmarks/results/jax-remat-bug-2026-12-03.md`, `fuzz-programs-2026-12-03-all500.md`).

where ``S`` is the largest magnitude among the reference's float leaves in the same part of
the output (the leaves sharing the first ``GROUP_DEPTH = 1`` key of their path: for a step
returning ``(state, loss)``, the whole new state, and the loss): a leaf whose exact value
is 0 holds only rounding noise (the gradient of an attention key's bias, which softmax
cancels; Adam then scales that noise to the learning rate), and is judged against the
parameters it sits among (the Flax NNX zoo model: 0.91 of that leaf's own scale, 3.8e-5 of
its part's). The price: a leaf far smaller than the largest of its part (Adam's second
moments beside the parameters) is checked only to that part's scale; a wrong gradient shows
in the parameters it updates. ``eps`` is the machine epsilon of the step's *coarsest* floating
dtype among its inputs, its outputs and every value it computes (a float32 loss computed from
bfloat16 logits differs at bfloat16's rounding, not at float32's; so does a float32 step with a
bfloat16 matmul inside a layer: program fuzzer seeds 125, 173, 184), ``TOLERANCE_ULPS = 32`` and
``TOLERANCE_FLOOR = 1e-4``: float32 1e-4 (the floor), float16 3.1e-2, bfloat16 0.25 of the
leaf's scale, about three times the largest honest differences from the user's own policy on
XLA:CPU (the router's top-k flipping between near-tied experts, a long reduction summed in
another order, XLA fusing a plan's mix of saved and recomputed values differently; measured:
benchmarks/results/library-notes-archive.md, numerics.py).

Mixed precision: with the sensitivity runs measured, the fixed bound is the *leaf's own*
dtype's, not the step's coarsest (else a float32 master weight of a step that computes in
bfloat16 is allowed 0.25 of its scale, and a 5% error in its update passes). What bfloat16
rounding moves a float32 leaf by is measured instead: the one-ulp run moves the inputs by one
ulp of the coarsest dtype the step computes in (a float32 input by ``2^-8`` of itself for a
bfloat16 step, the rounding its cast to bfloat16 makes), so the loss and the updates move as far
as that precision moves them; the plans' float32 differences on bfloat16 steps stay inside that
(measured: benchmarks/results/numerics-mixed-precision-2026-12-05.md).
float64 (measured: benchmarks/results/new-user-2026-12-06b.md, F2): where a leaf fails that bound, the
user's step is run once more with every float in 64 bits (:func:`run_float64`: float arguments
cast up, ``jax.enable_x64``), and the leaf passes when the planned step is no farther from that
answer than ``SENSITIVITY_FACTOR`` times the user's own float32 step is (largest distances), and
is off (more than half the bound from it) in at most ``SENSITIVITY_FACTOR`` times as many
entries: both are float32 approximations of one value, and the plan's is no worse. (Not
entry by entry: two honest roundings are independent, and where the user's step happens to
land on the float64 value the plan's need not.) Never where the user's step is more than
``FLOAT64_CAP = 10`` bounds from the float64 answer (another computation, not rounding), so
at most 20 bounds are excused; never where a value is not finite; never where the float64 run's integer, boolean or key leaves differ from the
reference's (another computation: a loss-scale skip taken the other way), nor where the step
draws random bits (``Trace.draws_random``: a float64 uniform draws other bits, so dropout
masks differ). Adam's first update
is about ``lr g / (|g| + eps)``: a weight whose gradient is near 0 (``|g|`` about Adam's
``eps``, 1e-8) moves by a share of the learning rate set by the gradient's rounding. Measured
on XLA:CPU (JAX 0.12.0.1): a plain-JAX decoder's plan differed from the user's step by 1.26e-4
of a weight's scale in 2 of 147,456 entries (gradients -8.6e-9 vs -5.1e-9, median 5.9e-5),
over the 1e-4 bound, where the user's own float32 step is 1.22e-4 from its float64 answer. A
wrong residual moves the plan far from the float64 answer while the reference stays close:
the planted 1% error below still fails. A step that cannot run in 64 bits is judged without.
Integer, boolean and PRNG-key leaves must be equal. A planted 1% error in one float32
weight update is caught at more than 20 times the tolerance (tests/test_numerics.py).

The check runs on this machine's backend. Where that is a CPU and the target a GPU, it is
still a check of the policy: what a policy saves, recomputes or offloads changes where values
live, not the math, so a gradient the plan gets wrong on XLA:CPU it gets wrong on XLA:GPU.
It cannot run where the arguments are abstract (``jax.ShapeDtypeStruct``) or the verifying
compiler is deviceless (it compiles for a GPU that is not there); the report says so, and
:func:`check_numerics` runs the same check wherever the step can run (on the GPU, with
concrete arguments of the shapes planned).

Inputs are copied before each run: a step jitted with ``donate_argnums`` would otherwise
consume the caller's arrays.
"""

from planner._src.verify.numerics.check import (
    CHECK_NAME,
    HOW_TO_CHECK,
    NumericsResult,
    backend_note,
    check_numerics,
    judge,
    not_checked,
)
from planner._src.verify.numerics.compare import (
    FLOAT64_CAP,
    GROUP_DEPTH,
    SENSITIVITY_FACTOR,
    TOLERANCE_FLOOR,
    TOLERANCE_ULPS,
    LeafCheck,
    coarsest_eps,
    compare,
    tolerance,
)
from planner._src.verify.numerics.isolate import isolate
from planner._src.verify.numerics.runs import (
    is_concrete,
    one_ulp_up,
    reference_runs,
    run_applied,
    run_float64,
    run_planned,
    run_reference,
    run_sensitivity,
    traces_differ,
)

__all__ = [
    "CHECK_NAME",
    "FLOAT64_CAP",
    "GROUP_DEPTH",
    "HOW_TO_CHECK",
    "SENSITIVITY_FACTOR",
    "TOLERANCE_FLOOR",
    "TOLERANCE_ULPS",
    "LeafCheck",
    "NumericsResult",
    "backend_note",
    "check_numerics",
    "coarsest_eps",
    "compare",
    "is_concrete",
    "isolate",
    "judge",
    "not_checked",
    "one_ulp_up",
    "reference_runs",
    "run_float64",
    "run_applied",
    "run_planned",
    "run_reference",
    "run_sensitivity",
    "tolerance",
    "traces_differ",
]
