"""Compiling: a step traced under the planner's policies and lowered (:func:`lower_with`), a
lowered program compiled (:func:`compile_lowered`), both at once (:func:`compile_with`), a
step traced, lowered and compiled for a compiler target (:func:`compile_traced`), compiles run
side by side (xla/jobs.py), and a compiled step's memory figures with the stacked
residuals and host bytes of its jaxpr (:func:`compiled_figures`). The XLA options of each
compile come from xla/compile_options.py.

* :func:`lower` and :func:`compile_lowered` are the lowering and compile every planner compile
  goes through (the anchors, the verify step). Under a deviceless target's scope
  (``deviceless.target_scope``), a step the user jitted with ``out_shardings`` /
  ``in_shardings`` on this machine's mesh lowers with them moved onto the target mesh (the
  outputs are re-sharded as the user asked, on the target's devices), and an XLA:GPU compile
  that calls the CUDA runtime (it needs a device: measured for large sorts on GB200, which
  XLA rewrites to CUB radix sorts) raises :class:`TargetError` saying what, why and what to do.
* :func:`compile_traced` traces, lowers and compiles for the target, once per call. JAX caches
  traces by function identity and argument types, not by the checkpoint policies a caller
  substitutes while tracing, so each call traces under a trace context of its own (a private
  configuration value, ``adapter.isolated_traces``): a second call under other policies
  gets a new program, a program traced under a caller's policies never reaches the user, and
  JAX's caches are never cleared.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax

from planner._src.errors import PlannerError, PlanWarning, TraceError
from planner._src.types import CompiledFigures
from planner._src.xla import (
    adapter,
    compile_options,
    deviceless,
    deviceless_bound,
    gpus,
    hlo,
    targets,
)
from planner._src.xla.gpus import TargetError
from planner._src.xla.memo import active_memo

# ------------------------------------------------------------- lowering and compiling

# What jax.jit says when a step it traces or lowers mixes this machine's devices (or their
# memory kinds) with the target's: a user's jit with in_shardings / out_shardings on a CPU mesh
# that could not be moved onto the target (see lower()).
_FOREIGN_DEVICE_ERRORS = (
    "incompatible devices",
    "Memory kinds passed to jax.jit",
    "device assignment",
)

# What the CUDA runtime says when XLA:GPU, compiling without a device, calls it anyway.
_NEEDS_DEVICE = re.compile(
    r"cudaErrorInvalidDevice|cudaErrorNoDevice|CUDA_ERROR_NO_DEVICE|CUDA_ERROR_INVALID_DEVICE"
    r"|no CUDA-capable device"
)


def lower(traced):
    """``traced.lower()``, for the target in scope (:func:`target_scope`): a step the user
    jitted with ``out_shardings`` / ``in_shardings`` on this machine's mesh lowers with them
    on the target mesh (the outputs re-sharded as the user asked, on the target's devices).
    A placement that cannot be moved raises :class:`TargetError` with the fix. Outside a
    deviceless scope: ``traced.lower()``.

    JAX's "Some donated buffers were not usable" warning is silenced here: the planner
    lowers the step once per anchor, verify and walk compile, and the warning (about the
    step's own donation, e.g. ``eqx.filter_jit(donate="all")`` donating the batch, which
    Equinox itself silences) says nothing about the plan; the step warns as it always did
    when the user runs it."""
    scope = deviceless.active_scope()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
        if scope is None:
            try:
                return traced.lower()
            except NotImplementedError as e:
                if _NO_RULE.search(str(e)) is None:
                    raise
                raise _no_rule_here_error(e) from e
        try:
            return deviceless.traced_on_target(scope, traced).lower()
        except ValueError as e:
            if any(m in str(e) for m in _FOREIGN_DEVICE_ERRORS):
                raise _foreign_device_error(scope.target, e) from e
            raise


# JAX's error where this machine's backend has no lowering of a primitive: a GPU-only one
# (cuDNN attention's dot_product_attention_fwd, written implementation="cudnn") on XLA:CPU.
_NO_RULE = re.compile(r"MLIR translation rule for primitive '([^']+)' not found for platform (\w+)")


def _no_rule_here_error(e: Exception) -> TargetError:
    prim, platform = _NO_RULE.search(str(e)).groups()
    cudnn = "dot_product_attention" in prim
    return TargetError(
        f"The step uses {prim!r}"
        + (
            " (cuDNN attention: jax.nn.dot_product_attention(..., implementation='cudnn'))"
            if cudnn
            else ""
        )
        + f", which this machine's compiler (XLA:{platform.upper()}) cannot compile: {e}.\n"
        "Why: the planner compiles on this machine's backend when it cannot compile for the "
        "GPU without one; XLA:GPU for a GPU without a device needs the CUDA plugin.\n"
        'Fix: pip install -e ".[cuda]" (the CUDA plugin of your jaxlib) and start Python with '
        "JAX_PLATFORMS=cpu: the planner then compiles the step with XLA:GPU for the GPU, no "
        "device needed"
        + (
            "; or, to plan on this backend, write the attention with implementation=None "
            "(XLA's attention here, its bytes not cuDNN's)."
            if cudnn
            else "."
        )
    )


def _foreign_device_error(target: targets.CompilerTarget, e: Exception) -> TargetError:
    return TargetError(
        f"The step names devices of this machine where {target.description} needs its own: "
        f"{str(e)[:400]}\nWhy: a deviceless compile runs on the target's compile-only "
        "devices; the planner moves NamedShardings of this machine's mesh onto the target mesh "
        "of the same shape and axis names, and this placement is not one of those.\nFix: pass "
        "the step un-jitted (or jitted with in_shardings / out_shardings as NamedSharding on "
        "a Mesh of the step's devices, or as PartitionSpecs); args_for() places the arguments."
    )


def compile_lowered(lowered, compiler_options: dict[str, Any] | None = None):
    """``lowered.compile(compiler_options)``; for a deviceless target in scope, an XLA:GPU
    compile that calls the CUDA runtime (which needs a GPU) raises :class:`TargetError`
    saying so, instead of XLA's raw ``cudaErrorInvalidDevice``. On a live GPU, a compile
    whose autotuner ran out of device memory (the program does not fit the free HBM) is
    compiled again without autotuning, with a warning: its bytes are the compiler's, its
    kernels XLA's defaults (as in a deviceless compile). Within :func:`autotune_cache`, a
    live-GPU compile keeps its autotune results in that directory."""
    scope = deviceless.active_scope()
    options = compile_options.for_compile(compiler_options, deviceless_target=scope is not None)
    full = compile_options.with_default_code(options, compiler_options)
    memo = active_memo()
    if memo is None:
        return _compiled(lowered, options, scope, figures_only=full != options)
    text = lowered.as_text()
    key = memo.key(lowered, options, text)
    got = memo.get(key)
    if got is None and full != options:
        # A compile for its figures only: the same program compiled with XLA's default code
        # generation has the same figures (compile_options.COMPILE_ONLY_CPU_OPTIONS).
        got = memo.get(memo.key(lowered, full, text))
    elif got is None and scope is None:
        # ... and the other way: the program compiled for its figures only has the figures;
        # it is marked so, and the numerics check compiles it again where it runs it.
        got = memo.get(memo.key(lowered, compile_options.figures_only_options(options), text))
    if got is None:
        got = _compiled(lowered, options, scope, figures_only=full != options)
        memo.put(key, got)
    return got


def _compiled(lowered, options: dict[str, Any], scope, *, figures_only: bool):
    """:func:`_compile`, its executable marked where it was compiled for its figures only
    (compile_options.is_figures_only: not to be run where its numerics matter)."""
    got = _compile(lowered, options, scope)
    if figures_only:
        compile_options.mark_figures_only(got)
    return got


def _compile(lowered, options: dict[str, Any], scope):
    try:
        return lowered.compile(compiler_options=options or None)
    except RuntimeError as e:  # jax.errors.JaxRuntimeError is one
        known = compile_options.without_unknown(options, e)
        if known is not None:
            return _compile(lowered, known, scope)
        if (
            scope is None
            and compile_options.AUTOTUNE_FAILED.search(str(e))
            and not options.keys() & compile_options.AUTOTUNE_OFF
        ):
            warnings.warn(
                "XLA:GPU's autotuner ran out of device memory while compiling the step (the "
                "program needs more HBM than is free, as a save-everything compile at a large "
                "batch can); compiled again with xla_gpu_autotune_level=0. Its memory figures "
                "are the compiler's; its kernels are XLA's defaults.",
                PlanWarning,
                stacklevel=3,
            )
            return lowered.compile(compiler_options={**options, **compile_options.AUTOTUNE_OFF})
        if scope is not None and _CUDNN_NEEDS_DEVICE.search(str(e)):
            raise _cudnn_needs_device_error(scope.target, e) from e
        if scope is None or not _NEEDS_DEVICE.search(str(e)):
            raise
        raise _needs_device_error(scope.target, lowered, e) from e


# jaxlib 0.12.1's XLA:GPU builds a cuDNN fusion's graph (cuDNN attention: the custom call
# __cudnn$fmha...) at compile time: without a device only in its deviceless cuDNN mode, whose
# runtime-compiled engines load the NVIDIA driver's libcuda.so.1 (measured 2026-12-06 on this
# CPU: "StreamExecutor is null and deviceless cuDNN compilation is not enabled"; with
# xla_gpu_cudnn_deviceless_compilation_mode ALWAYS or AUTO, CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED
# for libcudnn_engines_runtime_compiled, libcuda.so.1 not found). jaxlib 0.11.2 and
# 0.12.0.1 compile the same call deviceless.
_CUDNN_NEEDS_DEVICE = re.compile(
    r"deviceless cuDNN compilation is not enabled|CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED"
)


def _cudnn_needs_device_error(target: targets.CompilerTarget, e: Exception) -> TargetError:
    return TargetError(
        f"{target.description} could not compile the step's cuDNN fusion (cuDNN attention: "
        f"jax.nn.dot_product_attention(..., implementation='cudnn')): "
        f"{str(e).strip().splitlines()[0][:200]}\n"
        f"Why: jaxlib {target.jaxlib_version}'s XLA:GPU builds cuDNN's graph while compiling, "
        "and without a GPU its cuDNN engines need the NVIDIA driver's libcuda.so.1, which "
        "this machine lacks; jaxlib 0.11.2 and 0.12.0.1 compile the same step without a "
        "device.\n"
        'Fix: plan with jax / jaxlib 0.12.0.1 and its plugin (pip install "jax[cuda13]==0.12.0.1" '
        '"jaxlib==0.12.0.1"), or on the GPU itself; or write the attention with '
        "implementation='xla' (or None) for planning: XLA:GPU then compiles it deviceless, "
        "its bytes those of XLA's attention, not cuDNN's."
    )


def _sorts(lowered) -> int:
    """How many sorts the lowered program has (its StableHLO text); -1 when unreadable."""
    try:
        return len(re.findall(r"\bstablehlo\.sort\b|\bmhlo\.sort\b", lowered.as_text()))
    except Exception:  # noqa: BLE001  (only for the message)
        return -1


def _gpu_label(target: targets.CompilerTarget) -> str:
    try:
        return gpus.gpu(target.gpu_name).label if target.gpu_name else "target GPU"
    except TargetError:
        return target.gpu_name or "target GPU"


def _needs_device_error(target: targets.CompilerTarget, lowered, e: Exception) -> TargetError:
    sorts = _sorts(lowered)
    here = (
        f"this step has {sorts} sort(s) in its lowered program (a dropless / ragged MoE "
        "dispatch sorts every token's expert choices: jnp.argsort)"
        if sorts > 0
        else "no sort was found in this step's lowered program, so another pass asked"
        if sorts == 0
        else "the step's program could not be read to say which op"
    )
    return TargetError(
        f"{target.description} could not compile the step: XLA's GPU compiler called the "
        f"CUDA runtime, which needs a GPU, and this machine has none ({str(e).strip()[:200]}).\n"
        "Why: a few XLA:GPU passes ask the device while compiling. The one measured "
        "(benchmarks/results/frontier-deviceless-2026-12-03.md, 'The GB200 error'): a sort "
        "of more than about "
        "4,000 elements is rewritten to a CUB radix sort, and XLA sizes its scratch buffer "
        "from data it records per GPU; where it has none for this GPU it asks CUB, i.e. the "
        f"device (jaxlib 0.12.0: it does so for GB200; for H200 it falls back to its own sort "
        f"kernel). Here {here}.\n"
        f"Fix: compile on the {_gpu_label(target)} itself (plan on that machine: the "
        "figures are then XLA:GPU's own); or avoid the large sort (capacity-limited expert "
        "dispatch: examples/frontier.py's moe_impl='capacity'); or start Python with "
        "XLA_FLAGS=--xla_gpu_enable_cub_radix_sort=false (XLA's own sort kernel: the compile "
        "works without a device, but a compile on the GPU would use CUB and its scratch, so "
        "the sort's bytes are then an estimate); or plan with compiler='local' (this "
        "machine's backend: an estimate)."
    )


# ------------------------------------------------------- a step traced and compiled


class TargetProgram(NamedTuple):
    """One trace and its compile for a target."""

    traced: Any  # jax.stages.Traced (.jaxpr: the traced program)
    compiled: Any  # jax.stages.Compiled


def compile_traced(
    target: targets.CompilerTarget,
    fn_to_trace: Callable,
    target_args: Sequence[Any],
    compiler_options: dict[str, Any] | None = None,
) -> TargetProgram:
    """Trace ``fn_to_trace(*target_args)`` once, lower and compile it for ``target``.

    ``fn_to_trace`` may be a plain function or one the user already ``jax.jit``-ed (its own
    options, donation included, are kept; its in / out shardings on this machine's mesh move
    onto the target's: :func:`lower`). ``target_args``: positional arguments from
    :func:`args_for`. ``compiler_options``: XLA options for this compile only (XLA_FLAGS names
    without ``--``). Each call traces anew under a trace context of its own
    (``xla.adapter.isolated_traces``: a private configuration value in JAX's trace context),
    so a caller substituting checkpoint policies gets their program, never a cached one, and
    no program traced here is ever returned to the user's own calls. JAX's caches are not
    cleared: the user's compiled programs stay (tests/test_numerics.py).
    """
    with deviceless.target_scope(target), adapter.isolated_traces():
        try:
            traced = adapter.jit_trace(fn_to_trace, target_args)
        except ValueError as e:
            if any(m in str(e) for m in _FOREIGN_DEVICE_ERRORS):
                raise _foreign_device_error(target, e) from e
            raise
        compiled = compile_lowered(lower(traced), compiler_options)
    return TargetProgram(traced=traced, compiled=compiled)


def again_error(e: Exception, which: str) -> TraceError:
    """The teaching error of a step that raised on one of the planner's later traces."""
    return TraceError(
        f"The train step raised {type(e).__name__} on {which}: {e}\n"
        "Why: the planner traces step_fn(*example_args) several times (the candidates, the "
        "anchors, the verify compile, plan-file checks); a step that traced once must trace "
        "again the same way, so it must not depend on Python state it changes (a counter, a "
        "generator, an iterator it consumes, a global it sets).\n"
        "Fix: make the step a pure function of its arguments (keep mutable state out of it, "
        "or pass it in as an argument), and check that calling jax.jit(step_fn).lower(*args) "
        "twice works. (If it does, the policy of this trace made JAX fail: please report it "
        "with this message.)"
    )


def compile_with(
    step_fn: Callable,
    args: Sequence[Any],
    make_policy,
    compiler_options: Sequence[tuple[str, Any]] = (),
    *,
    bound_out: list | None = None,
    lowered_out: list | None = None,
    which: str = "a later trace (a compile under the plan's or a stock policy)",
):
    """Trace and compile the step with ``make_policy(rid, region)`` in every region.

    ``compiler_options``: XLA debug options for this compile only (``(name, value)`` pairs,
    the same names as XLA_FLAGS without ``--``), e.g. a plan's flags: the latency-hiding
    scheduler changes the schedule and with it the peak. Returns ``(step_jaxpr, compiled)``;
    ``bound_out``, when given, receives the regions the trace bound (the verify stage replays
    JAX's residual choice on them); ``lowered_out`` the lowered program (to compile it again
    with other options). ``which`` names this trace in the TraceError of a step that raises
    here after tracing once.
    """

    step_jaxpr, lowered, bound = lower_with(step_fn, args, make_policy, which=which)
    if bound_out is not None:
        bound_out.extend(bound)
    if lowered_out is not None:
        lowered_out.append(lowered)
    compiled = compile_lowered(lowered, dict(compiler_options))
    return step_jaxpr, compiled


def lower_with(
    step_fn: Callable,
    args: Sequence[Any],
    make_policy,
    *,
    which: str = "a later trace (a compile under the plan's or a stock policy)",
):
    """The first half of :func:`compile_with`: ``(step_jaxpr, lowered, bound regions)``,
    traced and lowered on this thread (the planner's policies are bound per thread); the
    compile of ``lowered`` may then run on another (verify.precompile)."""

    try:
        traced, bound = adapter.trace_step_with(step_fn, args, enum_policies(make_policy))
    except PlannerError:
        raise
    except Exception as e:  # noqa: BLE001  (the user's step traced before: it changed)
        raise again_error(e, which) from e
    return traced.jaxpr, lower(traced), bound


def enum_policies(make_policy):
    """``make_policy`` with each policy's decisions as JAX's enum (:func:`as_enum`). Regions
    given the same policy object get the same wrapped policy: JAX then partially evaluates
    identical layers under it once (adapter.RegionPolicy)."""
    wrapped: dict[int, tuple[Any, Callable]] = {}  # id(policy) -> (policy, its wrapper)

    def wrap(rid, r):
        pol = make_policy(rid, r)
        if id(pol) not in wrapped:
            wrapped[id(pol)] = (pol, lambda prim, *a, **p: as_enum(pol(prim, *a, **p)))
        return wrapped[id(pol)][1]

    return wrap


def as_enum(decision):
    if decision is True:
        return adapter.Saveable
    if decision is False:
        return adapter.Recompute
    return decision


# ------------------------------------------------------------------ compiled figures


def compiled_figures(
    compiled,
    step_jaxpr=None,
    text: str | None = None,
    *,
    backend: str | None = None,
    compiler: str = "",
    module: hlo.Module | None = None,
) -> CompiledFigures:
    """Read the compiler's memory figures and host-memory markers from a compiled step
    (``text``: its ``as_text()``, ``module``: that text parsed, when the caller has them
    already: a long program's text takes a while to parse)."""
    m = compiled.memory_analysis()
    if module is None:
        module = hlo.parse((compiled.as_text() if text is None else text) or "")
    host_lines = hlo.host_memory_instructions(module)
    async_host = hlo.async_host_copies(module)
    unseen = deviceless_bound.unseen_workspaces(module)
    stacks = (
        stacked_residuals(adapter.open_jaxpr(step_jaxpr))
        if step_jaxpr is not None
        else (0, 0, 0, 0)
    )
    return CompiledFigures(
        stacked_device_bytes=stacks[0],
        stacked_host_bytes=stacks[1],
        stacked_host_arrays=stacks[3],
        argument_bytes=int(m.argument_size_in_bytes),
        output_bytes=int(m.output_size_in_bytes),
        alias_bytes=int(m.alias_size_in_bytes),
        temp_bytes=int(m.temp_size_in_bytes),
        host_temp_bytes=int(getattr(m, "host_temp_size_in_bytes", 0) or 0),
        host_buffers_in_hlo=len(host_lines),
        async_host_copies_in_hlo=len(async_host),
        jaxpr_host_bytes=host_bytes_in_jaxpr(adapter.open_jaxpr(step_jaxpr))
        if step_jaxpr is not None
        else 0,
        backend=backend or jax.default_backend(),
        compiler=compiler,
        loop_copy_bytes=hlo.loop_slice_copy_bytes(module),
        loop_slice_bytes=hlo.loop_slice_bytes(module, in_line=_slices_in_line(backend)),
        unseen_workspace_bytes=unseen.bytes,
        unseen_workspace_note=unseen.note(),
    )


def _slices_in_line(backend: str | None) -> bool:
    """XLA:GPU of jaxlib 0.10 copies a loop's slices of its stacked operands in line; from
    0.11 on asynchronously (hlo.loop_slice_bytes). XLA:CPU's are not held at once."""
    gpu = (backend or jax.default_backend()) in ("gpu", "cuda", "rocm")
    return gpu and gpus._version_number(targets.jaxlib_version()) < gpus._version_number("0.11")


def host_bytes_in_jaxpr(jaxpr) -> int:
    """Bytes of values placed in host memory by top-level or scan-stacked outputs.

    Counts the outputs of equations whose abstract value lives in a host memory space,
    once per trip of enclosing loops for values made inside them and not stacked. Values
    that leave a scan as stacked outputs are counted once at their full stacked size.
    """
    total = 0
    inside_scan_outputs = set()
    for site in adapter.walk(jaxpr):
        e = site.eqn
        if any(id(s) in inside_scan_outputs for s, _ in site.scans):
            continue  # inside a scan already counted by its stacked outputs
        if e.primitive.name == "scan":
            n_carry = adapter.scan_layout(e)[1]
            total += sum(
                adapter.nbytes(v.aval)
                for v in e.outvars[n_carry:]
                if adapter.memory_space_is_host(v.aval)
            )
            inside_scan_outputs.add(id(e))
            continue
        if not list(adapter.subjaxprs(e)):
            total += site.mult * sum(
                adapter.nbytes(v.aval) for v in e.outvars if adapter.memory_space_is_host(v.aval)
            )
    return total


def stacked_residuals(jaxpr) -> tuple[int, int, int, int]:
    """(device bytes, host bytes, device count, host count) of arrays one scan stacks for another.

    These are the residuals a scanned region hands from its forward loop to its backward
    loop: extensive outputs of a scan that a later scan in the same jaxpr reads.
    """
    dev_b = host_b = dev_n = host_n = 0
    scan_reads: dict[int, set] = {}
    for site in adapter.walk(jaxpr):
        e = site.eqn
        if e.primitive.name != "scan":
            continue
        reads = scan_reads.get(id(site.jaxpr))
        if reads is None:
            reads = scan_reads[id(site.jaxpr)] = {
                v
                for q in site.jaxpr.eqns
                if q.primitive.name == "scan"
                for v in q.invars
                if adapter.is_var(v)
            }
        for v in e.outvars[adapter.scan_layout(e)[1] :]:
            if v not in reads:
                continue
            if adapter.memory_space_is_host(v.aval):
                host_b, host_n = host_b + adapter.nbytes(v.aval), host_n + 1
            else:
                dev_b, dev_n = dev_b + adapter.nbytes(v.aval), dev_n + 1
    return dev_b, host_b, dev_n, host_n
