"""MaxText's GPU settings (the allocator's memory fraction, XLA_FLAGS, the config's
compile_xla_flags) and the budget they allow."""

from __future__ import annotations

import dataclasses
import os

from planner._src.errors import InvalidArgumentError
from planner._src.units import GB

# JAX's default allocator fraction of device memory (XLA_PYTHON_CLIENT_MEM_FRACTION unset):
# https://docs.jax.dev/en/latest/gpu_memory_allocation.html
DEFAULT_MEM_FRACTION = 0.75


@dataclasses.dataclass(frozen=True)
class GpuSettings:
    """MaxText's GPU settings read from the environment and the config (the package
    docstring)."""

    mem_fraction: float | None  # XLA_PYTHON_CLIENT_MEM_FRACTION, None where unset
    xla_flags: str  # XLA_FLAGS of this process
    compile_xla_flags: str  # the config's compile_xla_flags (compiler options)

    @property
    def remat_pass_disabled(self) -> bool:
        flags = f"{self.xla_flags} {self.compile_xla_flags}"
        for tok in flags.split():
            name, _, value = tok.partition("=")
            if name == "--xla_disable_hlo_passes" and "rematerialization" in value.split(","):
                return True
        return False

    def lines(self) -> list[str]:
        frac = (
            f"XLA_PYTHON_CLIENT_MEM_FRACTION={self.mem_fraction:g}"
            if self.mem_fraction is not None
            else f"XLA_PYTHON_CLIENT_MEM_FRACTION unset (JAX's default {DEFAULT_MEM_FRACTION:g})"
        )
        out = [frac]
        out.append(f"XLA_FLAGS={self.xla_flags!r}" if self.xla_flags else "XLA_FLAGS unset")
        if self.compile_xla_flags:
            out.append(
                f"compile_xla_flags={self.compile_xla_flags!r}: compiler options of MaxText's "
                "compile of the overrides (as train_compile passes them), not of the planner's "
                "own compiles; put them in XLA_FLAGS to have every compile see them"
            )
        if self.remat_pass_disabled:
            out.append(
                "XLA's rematerialization pass is disabled (--xla_disable_hlo_passes="
                "rematerialization): XLA will not shrink an over-budget program on its own, so "
                "the verified figure is the program MaxText runs"
            )
        return out


def read_settings_env() -> GpuSettings:
    """The settings of this process's environment (``compile_xla_flags`` comes later, from
    the config)."""
    raw = os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")
    frac = None
    if raw:
        try:
            frac = float(raw)
        except ValueError:
            raise InvalidArgumentError(
                f"XLA_PYTHON_CLIENT_MEM_FRACTION={raw!r} is not a number.\nFix: set it as "
                "JAX reads it, a fraction such as 0.9."
            ) from None
        if not 0 < frac <= 1:
            raise InvalidArgumentError(
                f"XLA_PYTHON_CLIENT_MEM_FRACTION={raw} is outside (0, 1].\nFix: a fraction of "
                "device memory such as 0.9."
            )
    return GpuSettings(
        mem_fraction=frac,
        xla_flags=os.environ.get("XLA_FLAGS", "").strip(),
        compile_xla_flags="",
    )


def budget_gb(hbm_gb: float | None, hw, settings: GpuSettings) -> tuple[float, str]:
    """The budget to plan for, and why: ``hbm_gb`` capped at what JAX's allocator may take
    on a GPU (the memory fraction x the profile's HBM); the allocator's share where
    ``hbm_gb`` is None."""
    if hw.platform != "gpu":
        if hbm_gb is None:
            raise InvalidArgumentError(
                f"hbm_gb is needed for the {hw.name} profile (a {hw.platform} target has no "
                "allocator fraction to default to).\nFix: pass hbm_gb=..."
            )
        return float(hbm_gb), f"hbm_gb={hbm_gb:g}"
    frac = DEFAULT_MEM_FRACTION if settings.mem_fraction is None else settings.mem_fraction
    cap = frac * hw.hbm_bytes / GB
    src = (
        "XLA_PYTHON_CLIENT_MEM_FRACTION"
        if settings.mem_fraction is not None
        else "JAX's default memory fraction"
    )
    if hbm_gb is None:
        return cap, f"{src} {frac:g} x {hw.hbm_bytes / GB:.4g} GB ({hw.name}) = {cap:.4g} GB"
    if hbm_gb > cap:
        return cap, (
            f"hbm_gb={hbm_gb:g} capped at {src} {frac:g} x {hw.hbm_bytes / GB:.4g} GB = "
            f"{cap:.4g} GB: JAX's allocator gives the training process no more"
        )
    return float(hbm_gb), f"hbm_gb={hbm_gb:g} (within {src} {frac:g} x HBM = {cap:.4g} GB)"
