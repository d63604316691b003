"""Running the steps the numerics check compares: the user's step as written, the step under
the plan's policies, the user's step on inputs moved by one ulp, under full remat, and in
float64; each on copies of the inputs (a donating step consumes them)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from planner._src.verify.numerics.compare import (
    coarsest_eps,
    compare,
    float_kind,
    is_key,
    own_eps,
)
from planner._src.xla import adapter
from planner._src.xla.compile import compile_lowered, enum_policies


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


def run_planned(step_fn: Callable, args: Sequence[Any], make_policy, compiled=None, like=None):
    """The step with ``make_policy(region_id, region)`` in every checkpoint region, on copies
    of ``args``: ``compiled`` (verify's program, under the plan's flags) where it takes the
    arguments as given and returns outputs of ``like``'s structure (the reference's), else
    traced, compiled and run here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*donated buffers.*")
        if compiled is not None:
            try:
                out = _ready(compiled(*_copy(args)))
            except TypeError:  # static arguments: the compiled program takes the others only
                out = None
            # a compiled program returns the array outputs only: a step that also returns
            # non-array leaves (a str, a Python number, an object) runs traced, as written
            if out is not None and (
                like is None
                or jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(like)
            ):
                return out

        with adapter.controlled_policies(enum_policies(make_policy)):
            return _ready(_jitted(step_fn)(*_copy(args)))


def run_applied(fn: Callable, args: Sequence[Any]):
    """A step as applied (a plan that places train state: its compile, on arguments placed
    in their memory kinds), on fresh buffers of ``args`` in the same memory kinds."""

    def fresh(x):
        if isinstance(x, jax.Array):
            return jax.device_put(x, x.sharding, may_alias=False)
        return x

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*donated buffers.*")
        return _ready(fn(*jax.tree.map(fresh, tuple(args))))


def reference_runs(
    step_fn: Callable, args: Sequence[Any], computed: Sequence[str], full_remat=None
):
    """``(reference, sensitivity, traces_differ)``: the user's step as written
    (:func:`run_reference`), its rounding-only runs (the inputs moved at the precision of the
    coarsest dtype among its arguments, its outputs and ``computed``: ``Trace.float_dtypes``;
    and full remat, as :func:`run_sensitivity`), and why the step computes something else each
    time it is traced ('' when it does not: :func:`traces_differ`; then ``sensitivity`` is
    None, since its runs would measure that, not rounding, and no plan can be judged). Run
    once per session; every plan's outputs are judged against them. The reference and the run
    on moved inputs are one program: compiled once, run twice, where the planner jits the step
    itself (a step with its own jit is run through it, compiling each time); the trace check
    lowers the step again and compares the program with the reference's, and runs a trace of
    its own only where they differ or the text cannot tell (:func:`_same_program_again`).
    ``full_remat``: the step compiled under ``nothing_saveable`` in
    every region (the trace stage's anchor), run for the full-remat run instead of compiling
    it again."""
    exe = _compiled_reference(step_fn, args)
    reference = run_reference(step_fn, args) if exe is None else exe(args)
    eps = coarsest_eps(args, reference, computed=computed)
    why = (
        ""
        if _same_program_again(step_fn, args, exe)
        else traces_differ(step_fn, args, reference, eps)
    )
    if why:
        return reference, None, why
    moved = (
        run_reference(step_fn, one_ulp_up(args, eps)) if exe is None else exe(one_ulp_up(args, eps))
    )
    remat = run_planned(step_fn, args, _full_remat, full_remat)
    return reference, (moved, remat), ""


def traces_differ(step_fn: Callable, args: Sequence[Any], reference, eps: float) -> str:
    """Why the user's step, traced again on the same arguments, computes other outputs than
    ``reference`` ('' when it computes the same, within the check's tolerance): a step that
    reads a Python global, a NumPy random draw or the clock while it is traced bakes another
    constant into each trace. Every run the check makes is a trace of its own, so such a
    step's differences are no plan's doing, and measuring "rounding" with it would widen the
    tolerance to whatever the constants change (issue 45: to 67% of a leaf's scale)."""
    again = run_reference(step_fn, args)
    bad = [leaf for leaf in compare(again, reference, eps) if not leaf.ok]
    if not bad:
        return ""
    shown = ", ".join(
        f"{leaf.path} by {'a different value' if leaf.tolerance == 0.0 else f'{leaf.error:.3g} of its scale'}"
        for leaf in bad[:4]
    )
    return (
        f"your step computes other outputs each time it is traced: traced twice on the same "
        f"arguments, {len(bad)} output leaves differ ({shown}). Why: it reads something while "
        "JAX traces it that changes between traces (a Python global it also writes, NumPy's "
        "random numbers, the clock), which becomes a constant of each trace, so no run can be "
        "compared with another and the plan's numerics cannot be judged (nor will your "
        "applied or re-jitted step compute what this one did). Fix: pass such values as "
        "arguments of the step (a jax.random key, an array), or draw them once outside it"
    )


def _same_program_again(step_fn: Callable, args: Sequence[Any], exe) -> bool:
    """Whether the user's step, traced and lowered again on ``args``, is the very program
    ``exe`` (:func:`_compiled_reference`) runs, constants included: then it computes the
    same outputs, and :func:`traces_differ` need not compile and run it. False where that
    cannot be told from the text (then the check runs it)."""
    program = getattr(exe, "program", None)
    if program is None:
        return False
    with adapter.isolated_traces():
        return _jitted(step_fn).program(*args) == program


def _full_remat(rid, region):
    return jax.checkpoint_policies.nothing_saveable


def _compiled_reference(step_fn: Callable, args: Sequence[Any]):
    """A function running the user's step as :func:`run_reference` does (its own context,
    copies of the arguments), compiled once for ``args``' shapes; None where the step has its
    own jit (then each run compiles as the user's wrapper does)."""
    runner = _jitted(step_fn)
    if not isinstance(runner, adapter.StaticLeavesJit):
        return None
    with adapter.isolated_traces(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*donated buffers.*")
        compiled = runner.compiled(*args, compile=_compile_reusing)

    def run(some_args):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*donated buffers.*")
            return _ready(compiled(*_copy(some_args)))

    run.program = compiled.program
    return run


def _compile_reusing(lowered):
    """``lowered`` compiled with XLA's defaults, or, within a Planner's scope, the same
    program it compiled before (xla/memo.py: the same text, so the same executable; the
    user's step under its own policies is often the full-remat anchor) where that takes and
    returns the same structures."""
    got = compile_lowered(lowered)
    if got.in_tree == lowered.in_tree and got.out_tree == lowered.out_tree:
        return got
    return lowered.compile()


def one_ulp_up(args, eps: float = 0.0):
    """``args`` with every floating leaf moved up by one ulp (``nextafter``), or, where
    ``eps`` (the machine epsilon of the coarsest dtype the step computes in) is coarser than
    the leaf's own, by that relative amount (``x + |x| eps``; zeros by one ulp): one ulp of
    the precision the step rounds its inputs to. Integers, booleans and keys as given."""

    def one(x):
        if is_key(x) or not (hasattr(x, "dtype") and float_kind(x.dtype)):
            return x
        xp = np if isinstance(x, np.ndarray | np.generic) else jax.numpy
        up = xp.nextafter(x, xp.array(np.inf, x.dtype))
        if eps <= own_eps(x):
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
        if is_key(x) or not (hasattr(x, "dtype") and float_kind(x.dtype)):
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
