"""The numerics check's tolerances and the comparison of the planned step's outputs with the
user's, leaf by leaf: the formula, the sensitivity runs' allowance and the float64 verdict of
the package docstring."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import numpy as np

TOLERANCE_ULPS = 32
TOLERANCE_FLOOR = 1e-4
SENSITIVITY_FACTOR = 2.0
FLOAT64_CAP = 10.0  # bounds the user's step may be from its float64 run (package docstring)
GROUP_DEPTH = 1


def tolerance(eps: float) -> float:
    """The largest difference allowed, relative to a leaf's scale (package docstring)."""
    return max(TOLERANCE_ULPS * eps, TOLERANCE_FLOOR)


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


def float_kind(dtype) -> bool:
    return jax.numpy.issubdtype(dtype, jax.numpy.inexact)


def is_key(x) -> bool:
    return hasattr(x, "dtype") and jax.numpy.issubdtype(x.dtype, jax.dtypes.prng_key)


def coarsest_eps(*trees, computed: Sequence[str] = ()) -> float:
    """Machine epsilon of the coarsest floating dtype among the leaves and the dtypes named
    in ``computed`` (what the step computes in: ``Trace.float_dtypes``); float32's if none."""
    eps = [
        float(jax.numpy.finfo(x.dtype).eps)
        for t in trees
        for x in jax.tree.leaves(t)
        if hasattr(x, "dtype") and not is_key(x) and float_kind(x.dtype)
    ]
    eps += [float(jax.numpy.finfo(jax.numpy.dtype(d)).eps) for d in computed]
    return max(eps, default=float(np.finfo(np.float32).eps))


def _scale(x) -> float:
    """The largest finite magnitude of a float leaf (0 for other leaves)."""
    if is_key(x) or not (hasattr(x, "dtype") and float_kind(x.dtype)):
        return 0.0
    a = np.abs(np.asarray(x).astype(np.complex128 if np.iscomplexobj(x) else np.float64))
    a = a[np.isfinite(a)]
    return float(np.max(a)) if a.size else 0.0


def is_value(x) -> bool:
    """A leaf that is no array (a str, a Python number, an object the step returns): the
    same in both runs or not, compared as a value."""
    return not (hasattr(x, "dtype") and hasattr(x, "shape"))


def _same_value(a, b) -> bool:
    """Non-array leaves: equal as values; objects of a class without its own ``==`` (each
    run makes its own instance) by their type."""
    if type(a) is not type(b):
        return False
    if type(a).__eq__ is object.__eq__:
        return True
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001  (an == that cannot answer a bool: compare the types)
        return True


def _leaf_error(a, b, group_scale: float = 0.0) -> float:
    if is_value(a) or is_value(b):
        if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
            return 0.0  # NaN and NaN
        return 0.0 if is_value(a) and is_value(b) and _same_value(a, b) else float("inf")
    if is_key(a) or is_key(b):
        if not (is_key(a) and is_key(b)):
            return float("inf")
        a, b = jax.random.key_data(a), jax.random.key_data(b)
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return float("inf")
    if not (float_kind(a.dtype) and float_kind(b.dtype)):
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
    """Every output leaf of ``planned`` against ``reference`` (package docstring's formula).
    ``sensitivity``: runs of the user's step that differ from ``reference`` by rounding only
    (:func:`run_sensitivity`); a leaf is then also allowed ``SENSITIVITY_FACTOR`` times what
    the farthest of them moved it by (an ill-conditioned step amplifies rounding that far on
    its own). ``float64``: the step computed in float64 (:func:`run_float64`); a float leaf
    beyond that bound still passes when the plan is no farther from the float64 answer than
    ``SENSITIVITY_FACTOR`` times the reference is (package docstring, "float64")."""
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
    # keys: for (state, loss), the new state and the loss; package docstring).
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
            is_key(b) or not (hasattr(b, "dtype") and float_kind(b.dtype)) for (_, b) in ref_leaves
        ):
            exact_same = all(
                _leaf_error(w, b) == 0.0
                for (_, b), w in zip(ref_leaves, wide)
                if is_key(b) or not (hasattr(b, "dtype") and float_kind(b.dtype))
            )
            wide = wide if exact_same else None
    out = []
    for i, ((path, b), (_, a)) in enumerate(zip(ref_leaves, got_leaves)):
        group = groups[tuple(path[:GROUP_DEPTH])]
        err = _leaf_error(a, b, group)
        dtype = getattr(b, "dtype", type(b).__name__)
        shape = list(getattr(b, "shape", ()))
        exact = is_key(b) or not (hasattr(b, "dtype") and float_kind(b.dtype))
        # With the step's own rounding measured (spreads), a leaf's fixed bound is its own
        # dtype's: what rounding at the coarser dtypes the step computes in moves it by, the
        # sensitivity runs measure (package docstring, "mixed precision"). Without them, the
        # coarsest dtype's bound for every leaf.
        allowed = 0.0 if exact else (tolerance(own_eps(b)) if spreads else tol)
        for leaves in spreads:
            # what rounding alone moves this leaf by (inf: an exact leaf that changed)
            allowed = max(allowed, SENSITIVITY_FACTOR * _leaf_error(leaves[i], b, group))
        against = ""
        if err > allowed and wide is not None and not exact:
            # Entry by entry, the plan's distance from the float64 answer against the float32
            # step's own (package docstring, "float64").
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


def own_eps(x) -> float:
    return float(jax.numpy.finfo(x.dtype).eps)
