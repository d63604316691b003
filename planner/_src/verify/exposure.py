"""The exposed host-copy time of a verified plan, read from its compiled XLA:GPU schedule
(planner/_src/verify/schedule/'s replay), beside the cost model's figure for the same plan."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from planner._src.types import Prediction, ScheduleExposure
from planner._src.verify import schedule as sched
from planner._src.xla import compile_options, targets


def schedule_exposure_of(
    compiled,
    cost,
    prediction: Prediction,
    compiler: str,
    *,
    recompile: Callable[[tuple], Any] | None = None,
    compiler_options: Sequence[tuple[str, Any]] = (),
) -> ScheduleExposure:
    """The exposed host-copy time the compiled schedule predicts, per direction
    (planner/_src/verify/schedule/), beside the cost model's for the same plan.

    On a live GPU the verify compile is the device's own program: its schedule is read. On
    a deviceless target ``recompile(options)`` compiles the plan again with Triton GEMMs on
    (``target.pricing_compile_options``: the device's kernels, as the recompute pricing
    compiles the anchor; with them off XLA folds the loop slices into cuBLAS calls and
    schedules the reloads otherwise, further from the device's; measured:
    benchmarks/results/schedule-exposure-2026-12-05.md),
    and that schedule is read. ``step_s``: the model's step with the schedule's reload (h2d) exposure in place of
    the model's; the stores keep the model's figure (``ScheduleExposure``'s docstring says
    why)."""
    pricing = (
        compile_options.pricing_compile_options()
    )  # None on a live GPU: its compile is the device's
    source = "the verify compile"
    if pricing is not None and recompile is not None:
        options = {**dict(compiler_options), **pricing}
        compiled = recompile(tuple(options.items()))
        source = "a second compile with Triton GEMMs on (the device's GEMM emitter)"
    w = sched.read_windows(
        compiled.as_text(),
        cost.hardware,
        compiler=compiler,
        pricing="kernels",
        # (the module was compiled by this process's XLA: its streams are this jaxlib's)
        host_streams=sched.host_streams_of(targets.jaxlib_version()),
    )
    by = w.by_direction()
    regions = list(zip(cost.regions, prediction.regions))
    model_d2h = sum(rc.multiplicity * p.exposed_fwd_s for rc, p in regions)
    model_h2d = sum(rc.multiplicity * p.exposed_bwd_s for rc, p in regions)
    return ScheduleExposure(
        d2h_copy_s=by["d2h"][0],
        d2h_exposed_s=by["d2h"][2],
        h2d_copy_s=by["h2d"][0],
        h2d_exposed_s=by["h2d"][2],
        model_d2h_exposed_s=model_d2h,
        model_h2d_exposed_s=model_h2d,
        step_s=prediction.step_s - model_h2d + by["h2d"][2],
        copies=len(w.copies),
        compiler=compiler,
        source=source,
    )
