"""The Verification of a plan that moves train state, from the compile of the step as
applied (``plan.apply``'s or the user's ``build``; planning/attempt.py): the traced step
cannot show such a plan's bytes."""

from __future__ import annotations

from planner._src.types import Check, CompiledFigures, Status, Verification
from planner._src.units import fmt_bytes


def applied_step_verification(
    check, predicted_peak_bytes: int, usable_bytes: int, *, backend: str, compiler
) -> Verification:
    """The Verification of a plan that moves train state, from the compile of the step as
    applied: ``check``, a ``trainstate.StateCheck`` (None where it was not compiled: host
    parameters without ``build``, or ``verify_compile=False``). ``compiler``: the
    session's ``CompilerTarget``.

    The traced step cannot verify such a plan: the placement is applied by the step as
    applied (the memory kinds, the update), so only that step's compile shows its bytes.
    XLA:CPU's compile of it (``check.estimated``) keeps the host leaves in its one memory:
    recorded, not held to the budget."""
    if check is None:
        return Verification(
            status=Status.NOT_COMPILED,
            compiled=None,
            compiled_device_bytes=None,
            predicted_peak_bytes=predicted_peak_bytes,
            usable_bytes=usable_bytes,
            checks=(),
            backend=backend,
            note=(
                "Not compiled: the plan puts parameters in pinned host memory, which only "
                "your step can stream into its layers (plan.state.stream_layer_params), so "
                "neither the traced step's compile nor plan.apply's would show the plan's "
                "bytes. Pass build=(policy, placement) -> (jitted step, args) to "
                "Planner.plan to compile the step as applied and hold it to the budget "
                "(verify_compile=False also leaves it uncompiled)."
            ),
            exact=compiler.exact,
            compiler=compiler.description,
        )
    over = check.device_bytes > usable_bytes and not check.estimated
    exact = compiler.exact and not check.estimated
    # state.StateCheck.status: the compiled host bytes against the plan's, or why the
    # compiler cannot say (an unverified check on XLA:CPU, never "within budget")
    host_detail = check.status
    if check.estimated:
        host_detail = host_detail.removeprefix("unverified: ") + (
            f" (XLA:CPU's compile of the step as applied, {fmt_bytes(check.device_bytes)}, "
            f"keeps the {fmt_bytes(check.planned_host_bytes)} the plan puts on the host in "
            "its one memory and copies them)"
        )
    return Verification(
        status=Status.OVER if over else (Status.OK if exact else Status.UNVERIFIED),
        compiled=CompiledFigures(
            argument_bytes=check.device_argument_bytes,
            output_bytes=check.output_bytes,
            alias_bytes=check.alias_bytes,
            temp_bytes=check.temp_bytes,
            host_temp_bytes=check.host_temp_bytes,
            host_buffers_in_hlo=0,  # (the applied step's HLO is not read)
            async_host_copies_in_hlo=0,
            jaxpr_host_bytes=0,
            stacked_device_bytes=0,
            stacked_host_bytes=0,
            stacked_host_arrays=0,
            backend=backend,
            compiler=compiler.description,
        ),
        compiled_device_bytes=None if check.estimated else check.device_bytes,
        predicted_peak_bytes=predicted_peak_bytes,
        usable_bytes=usable_bytes,
        checks=(
            Check(
                name="train state on the host",
                ok=check.host_matches or check.estimated,
                detail=host_detail,
                unverified=check.estimated,
            ),
        ),
        backend=backend,
        note="The compiled figures are the step as applied (plan.apply's, or your build's: "
        "the plan's policy, the state's memory kinds, the update).",
        exact=exact,
        compiler=compiler.description,
    )
