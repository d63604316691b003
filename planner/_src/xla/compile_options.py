"""The XLA options of the planner's compiles, and where each applies.

* Deviceless XLA:GPU (:data:`DEVICELESS_COMPILE_OPTIONS`): cuBLAS matmuls, as the device
  picks them; the fusion autotuner off (it has no GPU to time on).
* The compile whose HLO prices kernels (:func:`pricing_compile_options`), the compiler probes
  (:func:`probe_compile_options`).
* On a live GPU, XLA's per-fusion autotune cache (:func:`autotune_cache`).
* On XLA:CPU, programs compiled for their figures only (:func:`compile_only`): LLVM at level 0.
* JAX's persistent compilation cache: where the user keeps it (:func:`persistent_cache_dir`;
  read, never set; the report's line is results/report/timing.py's).

:func:`for_compile` assembles them for one compile (xla/compile.py's ``compile_lowered``).
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax

from planner._src.xla import deviceless

# What XLA:GPU says when its autotuner, compiling on a live GPU, cannot allocate the buffers to
# time a kernel's candidates: the program is bigger than the free HBM (e.g. a save-everything
# anchor at a large batch: "All configs failed during profiling"). The compile itself needs no
# such memory.
AUTOTUNE_FAILED = re.compile(
    r"All configs failed during profiling|[Aa]utotun\w*[^\n]*(RESOURCE_EXHAUSTED|out of memory)"
)

AUTOTUNE_OFF = {"xla_gpu_autotune_level": 0}

# A deviceless compile cannot autotune, and left alone XLA keeps every matmul as a Triton GEMM
# fusion, which fuses its operands' converts and transposes; the GPU's own compile picks
# cuBLAS for most matmuls (34 of 48 in the MoE plan below, with or without autotuning) and
# materializes those operands, so the deviceless compile with Triton GEMMs left on
# under-counts the device's bytes far more than with them off (measured:
# benchmarks/results/deviceless-plans-2026-12-04.md). So the deviceless compile measures with every
# matmul as a cuBLAS call.
#
# XLA:GPU's fusion autotuner has no GPU to time candidates on in a deviceless compile: it only
# stamps each fusion with an empty native-emitter config. With it off the program is the same
# (fusions, schedule, buffers; Triton GEMMs on or off) and the compile takes 40-53% less time
# (jaxlib 0.11.2, 0.12.0.1, 0.12.1; measured: benchmarks/results/compile-options-2026-12-07.md).
DEVICELESS_COMPILE_OPTIONS = {
    "xla_gpu_enable_triton_gemm": False,
    "xla_gpu_experimental_enable_fusion_autotuner": False,
}

# Options that only make a compile faster, never its program: where the installed XLA does not
# know one ("No such compile option"), the compile is made again without it.
SPEED_ONLY_OPTIONS = frozenset(
    {"xla_gpu_experimental_enable_fusion_autotuner", "xla_backend_optimization_level"}
)

# A program that is compiled only to be measured (never run here: abstract arguments, a
# deviceless target, the numerics check off) needs no optimized machine code. XLA:CPU's
# buffer assignment is made on the HLO before LLVM runs, so LLVM's level 0 gives the same
# memory figures (argument, output, alias, temp: 60 of 60 zoo programs) in about two thirds of
# the compile time; its code runs slower and rounds differently (FMA contraction), which is
# why a program the numerics check runs keeps XLA's default (measured:
# benchmarks/results/compile-options-2026-12-07.md). The stock policies are compiled so even
# where the check runs (planning/stock.py): one is run only where it is the answer, and then
# compiled again at the default (is_figures_only). Not the scale check's plan, near the
# anchors' midpoint: often a mid budget's answer, run from the memo (flax_nnx's second zoo
# budget: its check 2.5 s with a compile again, 0.07 s without; planning-time-2026-12-08.md).
COMPILE_ONLY_CPU_OPTIONS = {"xla_backend_optimization_level": 0}
_UNKNOWN_OPTION = re.compile(r"No such compile option: '([\w.]+)'")

# ... but the *kernels* of that program are not the device's: with Triton GEMMs off XLA splits
# the masked score matmul from its epilogue and runs a saved matmul twice to write it into a
# scan's stacked residual. With them on, the deviceless program's fusions are the device's
# kernels (instruction names and per-kind device time within 1.5 ms a step of the H200's own
# compile of the MoE example; measured: benchmarks/results/hlo-kernel-time-2026-12-05.md, section 3).
# So the compile whose HLO prices the recompute kernel by kernel (trace/prices.py,
# recompute_shares.region_recompute_seconds) keeps XLA:GPU's default.
PRICING_COMPILE_OPTIONS = {"xla_gpu_enable_triton_gemm": True}

# The JAX backends whose compiled programs are XLA:GPU's (CUDA), deviceless ("cuda") or live:
# what kernels.py prices and schedule.py replays.
XLA_GPU_BACKENDS = frozenset({"cuda", "gpu"})


def pricing_compile_options() -> dict[str, Any] | None:
    """The options of the compile whose HLO prices kernels, where that is not the compile
    already made: a deviceless target in scope -> :data:`PRICING_COMPILE_OPTIONS` (one more
    compile); a live GPU (no target in scope) -> None: its own compile is the device's program."""
    return dict(PRICING_COMPILE_OPTIONS) if deviceless.active_scope() is not None else None


# XLA:GPU's per-fusion autotune cache on disk (PlanOptions.autotune_cache_dir): the first
# compile of a step on a live GPU spends most of its time in the autotuner, whose results XLA
# keeps for the process only. With this directory a later process reads them: its first
# compile is about ten times faster, with equal memory figures (measured:
# benchmarks/results/planning-time-2026-12-05.md).
AUTOTUNE_CACHE_FLAG = "xla_gpu_per_fusion_autotune_cache_dir"

_autotune_cache: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "planner_autotune_cache", default=None
)


@contextlib.contextmanager
def autotune_cache(path: str | None) -> Iterator[None]:
    """Within this context (and the compile threads started from it: ``at_once`` and the
    session's pool copy the context), live-GPU compiles of xla/compile.py's ``compile_lowered`` read and
    write XLA's autotune results in ``path`` (created at the first such compile). None:
    nothing changes. (JAX's persistent compilation cache, where enabled, already points XLA
    at ``<its directory>/xla_gpu_per_fusion_autotune_cache_dir``:
    ``jax_persistent_cache_enable_xla_caches``.)"""
    if path is None:
        yield
        return
    token = _autotune_cache.set(str(Path(path).expanduser()))
    try:
        yield
    finally:
        _autotune_cache.reset(token)


# The compiler probes (trace.holds_rereads_twice, trace.hoists_recompute) read the structure of
# XLA's buffer assignment from the temporary bytes of a few small programs, differences of one
# 16.8 MB tensor. On a live GPU the autotuner picks each matmul's kernel by timing it, and a
# Triton GEMM fusion can take the tanh into its epilogue where cuBLAS cannot: the bytes, and so
# the answer, can then depend on timing noise (the probes compile beside the anchors, four at
# once on one GPU): a wrong answer puts the memory model off by a factor of three (measured:
# benchmarks/results/planning-time-2026-12-05b.md). The probes compile as a deviceless target
# does: no autotuning, cuBLAS matmuls (deterministic kernels; also no waiting for the GPU
# the anchors' autotuning holds).
PROBE_COMPILE_OPTIONS = {**AUTOTUNE_OFF, **DEVICELESS_COMPILE_OPTIONS}


def probe_compile_options() -> dict[str, Any]:
    """XLA options for a compiler probe's compile: :data:`PROBE_COMPILE_OPTIONS` on a live
    GPU, none elsewhere (a deviceless target adds its own; XLA:CPU does not autotune)."""
    if deviceless.active_scope() is None and jax.default_backend() == "gpu":
        return dict(PROBE_COMPILE_OPTIONS)
    return {}


_compile_only: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "planner_compile_only", default=False
)


@contextlib.contextmanager
def compile_only(on: bool = True) -> Iterator[None]:
    """Within this context (and the compile threads started from it), XLA:CPU compiles of
    xla/compile.py's ``compile_lowered`` are made for their figures only: :data:`COMPILE_ONLY_CPU_OPTIONS`
    (the same program and memory figures, a faster compile; its code must not be run where
    its numerics matter). ``on=False``: nothing changes."""
    token = _compile_only.set(on)
    try:
        yield
    finally:
        _compile_only.reset(token)


# The executables compiled for their figures only (by object; dropped with them).
_FIGURES_ONLY: weakref.WeakSet = weakref.WeakSet()


def mark_figures_only(compiled) -> None:
    """Record that ``compiled`` was compiled for its figures only."""
    try:
        _FIGURES_ONLY.add(compiled)
    except TypeError:  # not weakly referable (a test's stand-in): nothing to run anyway
        pass


def is_figures_only(compiled) -> bool:
    """Whether ``compiled`` was compiled for its figures only (:func:`compile_only`): its code
    is not XLA's default, so a numerics check compiles the program again instead of running
    it."""
    try:
        return compiled in _FIGURES_ONLY
    except TypeError:
        return False


def compiling_for_figures_only() -> bool:
    """Whether this context is within :func:`compile_only` (on)."""
    return _compile_only.get()


def for_compile(compiler_options: dict[str, Any] | None, deviceless_target: bool) -> dict[str, Any]:
    """The XLA options of one compile: the caller's, over :data:`DEVICELESS_COMPILE_OPTIONS`
    for a deviceless target; on a live GPU within :func:`autotune_cache`, the cache's
    directory (created here); on XLA:CPU within :func:`compile_only`,
    :data:`COMPILE_ONLY_CPU_OPTIONS`."""
    options = dict(compiler_options or {})
    if deviceless_target:  # the caller's win
        return {**DEVICELESS_COMPILE_OPTIONS, **options}
    backend = jax.default_backend()
    if _autotune_cache.get() is not None and backend == "gpu":
        Path(_autotune_cache.get()).mkdir(parents=True, exist_ok=True)
        options.setdefault(AUTOTUNE_CACHE_FLAG, _autotune_cache.get())
    if _compile_only.get() and backend == "cpu":
        options = {**COMPILE_ONLY_CPU_OPTIONS, **options}
    return options


def figures_only_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options :func:`for_compile` gives the same compile within :func:`compile_only` on
    XLA:CPU (``options`` as they are elsewhere)."""
    if jax.default_backend() != "cpu":
        return options
    return {**COMPILE_ONLY_CPU_OPTIONS, **options}


def with_default_code(options: dict[str, Any], asked: dict[str, Any] | None) -> dict[str, Any]:
    """``options`` (:func:`for_compile`'s) less what :func:`compile_only` added to those the
    caller ``asked`` for: the options of the same program compiled with XLA's default code
    generation (equal where the compile is not one for its figures only)."""
    asked = asked or {}
    return {
        k: v
        for k, v in options.items()
        if k in asked or COMPILE_ONLY_CPU_OPTIONS.get(k, object()) != v
    }


def without_unknown(options: dict[str, Any], error: Exception) -> dict[str, Any] | None:
    """``options`` less the speed-only option the installed XLA does not know, where
    ``error`` (a compile's) says so; None for any other error."""
    unknown = _UNKNOWN_OPTION.search(str(error))
    if unknown is None or unknown.group(1) not in SPEED_ONLY_OPTIONS:
        return None
    return {k: v for k, v in options.items() if k != unknown.group(1)}


def persistent_cache_dir() -> str | None:
    """The directory of JAX's persistent compilation cache in this process (the user's
    ``jax_compilation_cache_dir``, or its environment variable), None where none is set."""
    d = getattr(jax.config, "jax_compilation_cache_dir", None)
    return str(d) if d else None
