"""See the overlap: measure exposed host-copy time from a real device trace.

    step, args = examples.llama.make_train_step(
        dataclasses.replace(cfg, remat_policy=plan.policy), concrete=True)
    result = planner.profile(plan, step, *args, steps=5)
    print(result.summary())
    result.timeline_png("timeline.png")
    hw = cost_models.overlap_from_trace(result, plan.hardware)   # feed the measurement back

API choice: ``profile(plan, step_fn, *args)`` takes a step **already built with
``plan.policy``** (the README's flow: ``jax.checkpoint(layer, policy=plan.policy)`` in your
code), the same shape as ``planner.solve(step_fn, *args)``. It cannot see which policy your
code used, so it checks the compiled program instead: when the plan offloads and the backend
has host memory, the compiled HLO must hold host-memory (``S(5)``) transfers, else the
result says the step was probably not built with ``plan.policy``.

What it does: compiles ``jax.jit(step_fn).lower(*args).compile(compiler_options=...)`` with
``plan.xla_flags`` parsed into per-compile options (no process-global ``XLA_FLAGS``), runs
``warmup`` steps, then ``steps`` steps under ``jax.profiler.trace(logdir)``, each inside a
``jax.profiler.StepTraceAnnotation``, and reads the ``.xplane.pb`` back with
``jax.profiler.ProfileData`` (no GUI). Device events (lines ``Stream #N(...)`` of the
``/device:GPU:N`` planes, as XLA's CUPTI collector names them) are classified:

* ``d2h`` / ``h2d``: memcpys whose ``memcpy_details`` stat says device -> host memory
  (pinned / pageable) or back; memcpys named ``MemcpyD2H`` / ``MemcpyH2D``; and any event whose
  ``hlo_op`` is one of the compiled program's host transfers. Those are read from the HLO
  text: an instruction whose result is in host memory space ``S(5)`` is a device->host
  transfer (under ``lax.scan`` XLA's async ``dynamic-update-slice`` fusion into the stacked host
  buffer), one that reads an ``S(5)`` operand into device memory is host->device (the async
  ``dynamic-slice`` reload); instructions of the computations they call count too. Names
  alone are not used: the scan also slices its stacked weights with device ``dynamic-slice``
  fusions, which are compute.
* ``copy_other``: other memcpys (device->device, peer): neither compute nor a host copy.
* ``compute``: every other event on a stream line (kernels).

Per step (the device plane's ``XLA Modules`` event of the step's module when present, else
the host's ``StepTraceAnnotation`` window), with ``U(x)`` the union of intervals:
``compute_s = |U(compute)|``, ``d2h_s = |U(d2h)|``, ``d2h_hidden_s = |U(d2h) & U(compute)|``,
``d2h_exposed_s = d2h_s - d2h_hidden_s`` (same for h2d), and for both directions together
``copy_s = |U(d2h + h2d)|``, ``hidden_s``, ``exposed_s``. ``overlap_efficiency`` here is the
hidden fraction of the copies, ``hidden_s / copy_s``; the cost model's figure, which
``cost_models.overlap_from_trace`` writes, is ``hidden_s / compute_s``. Per trip of the layer loop: a copy
instruction in a while body runs once per trip, so its k-th execution in a step is trip k
(forward trips run layers 0..L-1, backward trips L-1..0); given when every copy event carries
an ``hlo_op`` stat, else ``per_trip`` is empty and ``per_trip_note`` says why.

On a backend without separate device memory (CPU) there are no device->host copies to see:
``profile`` returns a result with ``measured=False`` and a ``status`` that says so; its
figures are ``None``, never zeros. ``overlap_from_trace`` refuses such a result.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
import time
from collections.abc import Callable

from planner._src.emit.emit import flags_to_compiler_options
from planner._src.errors import InvalidArgumentError
from planner._src.profiling.overlap import ProfileResult, analyze_trace
from planner._src.profiling.xplane import STEP_ANNOTATION, find_xplane
from planner._src.xla.hlo import host_transfer_ops


def _device_description(dev) -> str:
    kind = getattr(dev, "device_kind", "") or ""
    return f"{kind} ({dev.platform})" if kind and kind != dev.platform else str(dev.platform)


def profile(
    plan,
    step_fn: Callable,
    *args,
    steps: int = 5,
    warmup: int = 1,
    logdir: str | None = None,
    donate_argnums: tuple[int, ...] = (),
) -> ProfileResult:
    """Run ``step_fn(*args)`` (built with ``plan.policy``) under the profiler; read the overlap.

    Args:
      plan: a ``planner.Plan`` (or ``SavedPlan``): its ``xla_flags`` are applied per compile;
        a Plan's prediction is reported next to the measurement.
      step_fn: the train step, already using ``plan.policy`` in its ``jax.checkpoint``s.
      args: concrete arguments (arrays, not ShapeDtypeStructs).
      steps / warmup: traced steps, and untraced calls before them (compile and warm-up).
      logdir: where ``jax.profiler.trace`` writes; a new temporary directory if None.
      donate_argnums: donated arguments; each step then feeds ``out[i]`` back as argument ``i``
        (the ``step(state, batch) -> (state, metrics)`` convention; use ``(0,)`` for it).
    Returns a ``ProfileResult``; on CPU ``measured=False`` and ``status`` says why.
    """
    import jax

    if steps < 1 or warmup < 0:
        raise ValueError(f"steps must be >= 1 and warmup >= 0, got steps={steps}, warmup={warmup}.")
    flags = getattr(plan, "xla_flags", "") or ""
    opts = flags_to_compiler_options(flags)
    backend = jax.default_backend()
    lowered = jax.jit(step_fn, donate_argnums=donate_argnums).lower(*args)
    try:
        compiled = lowered.compile(compiler_options=opts) if opts else lowered.compile()
    except Exception as e:
        if not opts or "compile option" not in str(e):
            raise

        raise InvalidArgumentError(
            f"XLA rejected a flag of plan.xla_flags ({flags!r}) on the {backend} backend: "
            f"{e}.\nWhy: each flag is passed as a per-compile option, and this jaxlib does "
            "not know it.\nFix: drop that flag from the plan's flags (or profile on the "
            "platform the plan was made for)."
        ) from e
    hlo = compiled.as_text() or ""
    host_ops = host_transfer_ops(hlo)
    module = None
    mm = re.search(r"^HloModule\s+([\w.\-]+)", hlo, re.MULTILINE)
    if mm:
        module = mm.group(1)
    assignment = getattr(plan, "assignment", None)
    offloads = None
    if assignment is not None:
        offloads = any(d == "offload" for _, d in assignment.decisions)
    pred = getattr(plan, "prediction", None)
    args = list(args)

    def call():
        out = compiled(*args)
        jax.block_until_ready(out)
        for i in donate_argnums:
            args[i] = out[i]
        return out

    for _ in range(warmup):
        call()
    logdir = logdir or tempfile.mkdtemp(prefix="planner-profile-")
    t_start = time.time()
    walls = []
    with jax.profiler.trace(logdir):
        for i in range(steps):
            with jax.profiler.StepTraceAnnotation(STEP_ANNOTATION, step_num=i):
                t = time.perf_counter()
                call()
                walls.append(time.perf_counter() - t)
    path = find_xplane(logdir, newer_than=t_start)
    result = analyze_trace(
        path,
        host_ops=host_ops,
        module=module,
        backend=backend,
        device=_device_description(jax.devices()[0]),
        step_name=getattr(step_fn, "__name__", type(step_fn).__name__),
        xla_flags=flags,
        expect_offload=offloads,
        wall_step_s=walls,
        predicted_exposed_s=getattr(pred, "exposed_transfer_s", None),
        predicted_transfer_s=getattr(pred, "transfer_s", None),
    )
    if result.measured and offloads and not host_ops:
        result = dataclasses.replace(
            result,
            status=result.status
            + (
                "; warning: the compiled HLO has no host-memory (S(5)) transfers although the plan "
                "offloads: was the step built with plan.policy?"
            ),
        )
    return result
