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

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from planner._src.errors import InvalidArgumentError
from planner._src.types import Check
from planner._src.verify import policy_maker
from planner._src.xla import adapter
from planner._src.xla.compile import as_enum

__all__ = ["TOLERANCE_ULPS", "NumericsResult", "check_numerics", "compare", "is_concrete"]

TOLERANCE_ULPS = 32
TOLERANCE_FLOOR = 1e-4
SENSITIVITY_FACTOR = 2.0
FLOAT64_CAP = 10.0  # bounds the user's step may be from its float64 run (module docstring)
GROUP_DEPTH = 1


def tolerance(eps: float) -> float:
    """The largest difference allowed, relative to a leaf's scale (module docstring)."""
    return max(TOLERANCE_ULPS * eps, TOLERANCE_FLOOR)


CHECK_NAME = "the planned step computes what your step computes"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LeafCheck:
    """One output leaf of the step, planned against the reference."""

    path: str
    what: str  # dtype[shape]
    error: float  # max|a - b| over the leaf's scale (float leaves); 0 or inf (exact leaves)
    tolerance: float
    ok: bool
    # "": judged against the reference; "float64": judged beside the step computed in
    # float64 (error, tolerance: the plan's and 2x the reference's distances from it,
    # _float64_verdict; compare)
    against: str = ""


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


def is_concrete(args) -> bool:
    """Whether every array leaf of ``args`` holds values, none abstract
    (``jax.ShapeDtypeStruct``); the other leaves (Python scalars, functions: an Equinox
    model's activation) are constants of the step (``xla.adapter.is_array_leaf``)."""
    return not any(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(args))


def _copy(args):
    """Fresh buffers for every array leaf (a donating step consumes its inputs)."""

    def one(x):
        if isinstance(x, jax.Array):
            return x.copy()
        if isinstance(x, np.ndarray):
            return x.copy()
        return x

    return jax.tree.map(one, args)


def _ready(out):
    return jax.block_until_ready(out)


def _jitted(step_fn):
    return adapter.runnable(step_fn)


def run_reference(step_fn: Callable, args: Sequence[Any]):
    """The user's step as they wrote it (their policies), on copies of ``args``; traced in a
    context of its own, so it neither reuses nor fills the user's jit cache entries."""
    with adapter.isolated_traces(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*donated buffers.*")
        return _ready(_jitted(step_fn)(*_copy(args)))


def run_planned(step_fn: Callable, args: Sequence[Any], make_policy, compiled=None):
    """The step with ``make_policy(region_id, region)`` in every checkpoint region, on copies
    of ``args``: ``compiled`` (verify's program, under the plan's flags) where it takes the
    arguments as given, else traced, compiled and run here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*donated buffers.*")
        if compiled is not None:
            try:
                return _ready(compiled(*_copy(args)))
            except TypeError:  # static arguments: the compiled program takes the others only
                pass

        def wrap(rid, r):
            pol = make_policy(rid, r)
            return lambda prim, *a, **p: as_enum(pol(prim, *a, **p))

        with adapter.controlled_policies(wrap):
            return _ready(_jitted(step_fn)(*_copy(args)))


def _float_kind(dtype) -> bool:
    return jax.numpy.issubdtype(dtype, jax.numpy.inexact)


def _is_key(x) -> bool:
    return hasattr(x, "dtype") and jax.numpy.issubdtype(x.dtype, jax.dtypes.prng_key)


def coarsest_eps(*trees, computed: Sequence[str] = ()) -> float:
    """Machine epsilon of the coarsest floating dtype among the leaves and the dtypes named
    in ``computed`` (what the step computes in: ``Trace.float_dtypes``); float32's if none."""
    eps = [
        float(jax.numpy.finfo(x.dtype).eps)
        for t in trees
        for x in jax.tree.leaves(t)
        if hasattr(x, "dtype") and not _is_key(x) and _float_kind(x.dtype)
    ]
    eps += [float(jax.numpy.finfo(jax.numpy.dtype(d)).eps) for d in computed]
    return max(eps, default=float(np.finfo(np.float32).eps))


def _scale(x) -> float:
    """The largest finite magnitude of a float leaf (0 for other leaves)."""
    if _is_key(x) or not (hasattr(x, "dtype") and _float_kind(x.dtype)):
        return 0.0
    a = np.abs(np.asarray(x).astype(np.complex128 if np.iscomplexobj(x) else np.float64))
    a = a[np.isfinite(a)]
    return float(np.max(a)) if a.size else 0.0


def _leaf_error(a, b, group_scale: float = 0.0) -> float:
    if _is_key(a) or _is_key(b):
        if not (_is_key(a) and _is_key(b)):
            return float("inf")
        a, b = jax.random.key_data(a), jax.random.key_data(b)
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return float("inf")
    if not (_float_kind(a.dtype) and _float_kind(b.dtype)):
        return 0.0 if np.array_equal(a, b) else float("inf")
    a = a.astype(np.complex128 if np.iscomplexobj(a) else np.float64)
    b = b.astype(np.complex128 if np.iscomplexobj(b) else np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return float("inf")
    inf_a = np.isinf(a)
    if not np.array_equal(inf_a, np.isinf(b)) or not np.array_equal(a[inf_a], b[inf_a]):
        return float("inf")  # the same infinities in the same places (NaNs agree already)
    finite = np.isfinite(a)
    a, b = a[finite], b[finite]
    if a.size == 0:
        return 0.0
    scale = max(float(np.max(np.abs(b))), float(np.max(np.abs(a))), group_scale)
    if scale == 0.0:
        return 0.0
    return float(np.max(np.abs(a - b))) / scale


def compare(
    planned, reference, eps: float, sensitivity=None, float64=None
) -> tuple[LeafCheck, ...]:
    """Every output leaf of ``planned`` against ``reference`` (module docstring's formula).
    ``sensitivity``: runs of the user's step that differ from ``reference`` by rounding only
    (:func:`run_sensitivity`); a leaf is then also allowed ``SENSITIVITY_FACTOR`` times what
    the farthest of them moved it by (an ill-conditioned step amplifies rounding that far on
    its own). ``float64``: the step computed in float64 (:func:`run_float64`); a float leaf
    beyond that bound still passes when the plan is no farther from the float64 answer than
    ``SENSITIVITY_FACTOR`` times the reference is (module docstring, "float64")."""
    tol = tolerance(eps)
    ref_leaves, ref_tree = jax.tree_util.tree_flatten_with_path(reference)
    got_leaves, got_tree = jax.tree_util.tree_flatten_with_path(planned)
    if ref_tree != got_tree:
        return (
            LeafCheck(
                path="(the output's structure)",
                what=f"{got_tree} vs {ref_tree}",
                error=float("inf"),
                tolerance=tol,
                ok=False,
            ),
        )
    # A leaf's scale is at least that of its part of the output (its first GROUP_DEPTH path
    # keys: for (state, loss), the new state and the loss; module docstring).
    groups: dict[tuple, float] = {}
    for path, b in ref_leaves:
        key = tuple(path[:GROUP_DEPTH])
        groups[key] = max(groups.get(key, 0.0), _scale(b))
    ref_tree_def = jax.tree_util.tree_structure(reference)
    spreads = [
        leaves
        for leaves, tree in (jax.tree_util.tree_flatten(t) for t in (sensitivity or ()))
        if tree == ref_tree_def
    ]
    wide = None
    if float64 is not None:
        wide_leaves, wide_tree = jax.tree_util.tree_flatten(float64)
        wide = wide_leaves if wide_tree == ref_tree_def else None
        # The same computation or none: its integer, boolean and key leaves equal the
        # reference's (a skipped update, a step counter, a key split), else it is not used.
        if wide is not None and any(
            _is_key(b) or not (hasattr(b, "dtype") and _float_kind(b.dtype))
            for (_, b) in ref_leaves
        ):
            exact_same = all(
                _leaf_error(w, b) == 0.0
                for (_, b), w in zip(ref_leaves, wide)
                if _is_key(b) or not (hasattr(b, "dtype") and _float_kind(b.dtype))
            )
            wide = wide if exact_same else None
    out = []
    for i, ((path, b), (_, a)) in enumerate(zip(ref_leaves, got_leaves)):
        group = groups[tuple(path[:GROUP_DEPTH])]
        err = _leaf_error(a, b, group)
        dtype = getattr(b, "dtype", type(b).__name__)
        shape = list(getattr(b, "shape", ()))
        exact = _is_key(b) or not (hasattr(b, "dtype") and _float_kind(b.dtype))
        # With the step's own rounding measured (spreads), a leaf's fixed bound is its own
        # dtype's: what rounding at the coarser dtypes the step computes in moves it by, the
        # sensitivity runs measure (module docstring, "mixed precision"). Without them, the
        # coarsest dtype's bound for every leaf.
        allowed = 0.0 if exact else (tolerance(_own_eps(b)) if spreads else tol)
        for leaves in spreads:
            # what rounding alone moves this leaf by (inf: an exact leaf that changed)
            allowed = max(allowed, SENSITIVITY_FACTOR * _leaf_error(leaves[i], b, group))
        against = ""
        if err > allowed and wide is not None and not exact:
            # Entry by entry, the plan's distance from the float64 answer against the float32
            # step's own (module docstring, "float64").
            verdict = _float64_verdict(a, b, wide[i], group, allowed)
            if verdict is not None and verdict[0] <= verdict[1]:
                (err, allowed), against = verdict, "float64"
        out.append(
            LeafCheck(
                path=f"out{jax.tree_util.keystr(path)}",
                what=f"{getattr(dtype, 'name', dtype)}{shape}",
                error=err,
                tolerance=allowed,
                ok=err <= allowed,
                against=against,
            )
        )
    return tuple(out)


def _float64_verdict(a, b, w, group_scale: float, allowed: float) -> tuple[float, float] | None:
    """``(error, tolerance)`` of a float leaf judged beside the float64 answer ``w`` (module
    docstring, "float64"): the planned ``a``'s largest distance from ``w`` against
    ``SENSITIVITY_FACTOR`` times the float32 reference ``b``'s, as shares of the leaf's scale
    (``_leaf_error``'s). None (not judged so) where a value is not finite or the shapes
    differ, where the reference is more than ``FLOAT64_CAP`` bounds from ``w`` (another
    computation, not rounding), or where the plan is off (more than half the bound from
    ``w``) in more than ``SENSITIVITY_FACTOR`` times as many entries as the reference: a wrong
    residual spreads over entries the reference gets right."""
    a, b, w = (np.asarray(x) for x in (a, b, w))
    if not (a.shape == b.shape == w.shape):
        return None
    a, b, w = (x.astype(np.complex128 if np.iscomplexobj(x) else np.float64) for x in (a, b, w))
    if not (np.isfinite(a).all() and np.isfinite(b).all() and np.isfinite(w).all()):
        return None
    scale = max(float(np.max(np.abs(b), initial=0)), float(np.max(np.abs(a), initial=0)))
    scale = max(scale, group_scale)
    if a.size == 0 or scale == 0.0:
        return 0.0, allowed
    mine, own = np.abs(a - w) / scale, np.abs(b - w) / scale
    if float(np.max(own)) > FLOAT64_CAP * allowed:
        return None
    off = 0.5 * allowed
    if np.count_nonzero(mine > off) > SENSITIVITY_FACTOR * np.count_nonzero(own > off):
        return None
    return float(np.max(mine)), SENSITIVITY_FACTOR * float(np.max(own))


def _own_eps(x) -> float:
    return float(jax.numpy.finfo(x.dtype).eps)


def reference_runs(step_fn: Callable, args: Sequence[Any], computed: Sequence[str]):
    """``(reference, sensitivity)``: the user's step as written (:func:`run_reference`) and
    its rounding-only runs (:func:`run_sensitivity`, the inputs moved at the precision of the
    coarsest dtype among its arguments, its outputs and ``computed``: ``Trace.float_dtypes``).
    Run once per session; every plan's outputs are judged against them."""
    reference = run_reference(step_fn, args)
    eps = coarsest_eps(args, reference, computed=computed)
    return reference, run_sensitivity(step_fn, args, eps)


def one_ulp_up(args, eps: float = 0.0):
    """``args`` with every floating leaf moved up by one ulp (``nextafter``), or, where
    ``eps`` (the machine epsilon of the coarsest dtype the step computes in) is coarser than
    the leaf's own, by that relative amount (``x + |x| eps``; zeros by one ulp): one ulp of
    the precision the step rounds its inputs to. Integers, booleans and keys as given."""

    def one(x):
        if _is_key(x) or not (hasattr(x, "dtype") and _float_kind(x.dtype)):
            return x
        xp = np if isinstance(x, np.ndarray | np.generic) else jax.numpy
        up = xp.nextafter(x, xp.array(np.inf, x.dtype))
        if eps <= _own_eps(x):
            return up
        moved = (x + xp.abs(x) * xp.array(eps, x.dtype)).astype(x.dtype)
        return xp.where(x == 0, up, moved)

    return jax.tree.map(one, args)


def run_float64(step_fn: Callable, args: Sequence[Any], draws_random: bool = False):
    """The user's step computed in 64 bits: every floating argument cast to float64 (complex
    to complex128) and 64-bit floats on (``jax.enable_x64``), so every value the step does
    not cast down itself is computed in float64. Its outputs differ from the float32
    reference by the reference's own rounding error: an ill-conditioned leaf (Adam's update
    of a weight whose gradient is near 0: ``g / (|g| + eps)`` turns the gradient's rounding
    into a sizeable fraction of the learning rate) shows that error here. None where the step
    cannot run so (a dtype it insists on), or where it draws random bits (``draws_random``:
    ``Trace.draws_random``; with 64-bit floats on, a float64 uniform draws other bits, so the
    dropout masks differ and the run computes something else): the check then stands
    without it."""
    if draws_random:
        return None

    def up(x):
        if _is_key(x) or not (hasattr(x, "dtype") and _float_kind(x.dtype)):
            return x
        wide = np.complex128 if np.iscomplexobj(x) else np.float64
        return np.asarray(x).astype(wide)

    try:
        with adapter.float64():
            return _ready(run_reference(step_fn, jax.tree.map(up, args)))
    except Exception:  # noqa: BLE001  (a step that cannot run in 64 bits: no such run)
        return None


def run_sensitivity(step_fn: Callable, args: Sequence[Any], eps: float = 0.0) -> tuple:
    """How far rounding alone moves the step's outputs: the user's step on ``args`` moved by
    one ulp at the precision it computes in (:func:`one_ulp_up` with ``eps``, the coarsest
    dtype's epsilon: :func:`coarsest_eps`), and the step with JAX's own ``nothing_saveable``
    in every region (full remat: every value recomputed, so XLA fuses it differently, which
    can move an Adam-updated weight as far from the user's ``everything_saveable`` as a plan
    does; measured: benchmarks/results/fuzz-programs-2026-12-03-all500.md)."""
    moved = run_reference(step_fn, one_ulp_up(args, eps))
    remat = run_planned(step_fn, args, lambda rid, r: jax.checkpoint_policies.nothing_saveable)
    return (moved, remat)


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


def isolate(differs: Callable[[tuple[str, ...]], bool], keys: Sequence[str]) -> tuple[str, ...]:
    """The decisions behind a mismatch: a small subset of ``keys`` (the plan's kept
    classes) that alone still makes the step's outputs differ, by bisection. ``differs(sub)``
    runs the step keeping only ``sub`` (everything else recomputed, which is JAX's own default
    and never changes the math) and says whether it differs beyond the tolerance. One culprit
    costs about ``2 log2(len(keys))`` runs; culprits that only differ together are returned
    as the smallest half-set that still differs. ``()`` when ``keys`` alone does not differ
    (the mismatch lies elsewhere, e.g. an impure step)."""
    keys = tuple(keys)
    if not keys or not differs(keys):
        return ()
    while len(keys) > 1:
        half = len(keys) // 2
        a, b = keys[:half], keys[half:]
        if differs(a):
            keys = a
        elif differs(b):
            keys = b
        else:  # neither half alone: they differ only together
            break
    return keys


def _computed_dtypes(plan) -> tuple[str, ...]:
    """The floating dtypes the planned step computes in (``Trace.float_dtypes``)."""
    trace = getattr(plan, "trace", None)
    return tuple(getattr(trace, "float_dtypes", ()))


def _draws_random(plan) -> bool:
    """``Trace.draws_random`` of the plan's trace; True (no float64 run) where unknown."""
    return bool(getattr(getattr(plan, "trace", None), "draws_random", True))


def check_numerics(plan, step_fn: Callable, *args) -> NumericsResult:
    """Run ``step_fn(*args)`` under ``plan``'s policies and as written, and compare every
    output leaf (module docstring: the tolerance). ``args`` must be concrete arrays of the
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
    reference, sensitivity = reference_runs(step_fn, args, _computed_dtypes(plan))
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
