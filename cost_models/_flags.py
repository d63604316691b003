"""XLA flags that a plan needs on its target hardware, kept as a data table.

Each flag is checked against XLA's source (xla/debug_options_flags.cc) before it goes in the table:
an unknown flag in XLA_FLAGS aborts the program. Update the table, not the code, after an
experiment on the device.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ._profiles import HardwareProfile


@dataclass(frozen=True, slots=True, kw_only=True)
class XlaFlag:
    """One XLA flag, why the plan sets it and where it is defined."""

    name: str  # without the leading "--"
    value: str
    why: str
    source: str

    def __str__(self) -> str:
        return f"--{self.name}={self.value}"


@dataclass(frozen=True, slots=True, kw_only=True)
class _FlagRow:
    """When a flag applies: the profile's platform, and whether the plan offloads anything."""

    flag: XlaFlag
    platform: str
    only_when_offloading: bool


_DEBUG_OPTIONS = "openxla/xla xla/debug_options_flags.cc"
_PROBE = "shared/measurements/h200-probe-2026-11-30.md"

FLAG_TABLE: tuple[_FlagRow, ...] = (
    _FlagRow(
        flag=XlaFlag(
            name="xla_gpu_enable_host_memory_offloading",
            value="true",
            why=(
                "With it the GPU compiler hands XLA's HloRematerialization pass a host-memory "
                "offload configuration (xla/service/gpu/gpu_compiler.cc, CreateHloAnalysisOpts), "
                "so the pass knows the host memory space; without it pinned-host buffers are "
                "counted as device memory and offloaded activations still weigh on the HBM limit."
            ),
            source=(
                f"{_DEBUG_OPTIONS}: flag 'xla_gpu_enable_host_memory_offloading' ('Whether to "
                "trigger host memory offloading on a device.'), default "
                "set_xla_gpu_enable_host_memory_offloading(false); present in jaxlib 0.10.2"
            ),
        ),
        platform="gpu",
        only_when_offloading=True,
    ),
    _FlagRow(
        flag=XlaFlag(
            name="xla_gpu_enable_latency_hiding_scheduler",
            value="true",
            why=(
                "Lets XLA schedule asynchronous work (host copies, collectives) away from its "
                "consumers so it can overlap compute. On our H200 it did not change step time "
                f"with offloads under lax.scan ({_PROBE}), so the planner still assumes the "
                "profile's overlap_efficiency; kept so that a calibrated overlap can be used."
            ),
            source=(
                f"{_DEBUG_OPTIONS}: flag 'xla_gpu_enable_latency_hiding_scheduler' ('Enable "
                "latency-hiding scheduler for XLA:GPU'), default "
                "set_xla_gpu_enable_latency_hiding_scheduler(false); present in jaxlib 0.10.2; "
                "recommended for training by NVIDIA/JAX-Toolbox rosetta/docs/GPU_performance.md"
            ),
        ),
        platform="gpu",
        only_when_offloading=True,
    ),
)


def xla_flags_for(hw: HardwareProfile, *, offloading: bool) -> tuple[XlaFlag, ...]:
    """Flags a plan for `hw` should run with; `offloading`: whether the plan offloads anything."""
    return tuple(
        row.flag
        for row in FLAG_TABLE
        if row.platform == hw.platform and (offloading or not row.only_when_offloading)
    )


def format_xla_flags(flags: Iterable[XlaFlag]) -> str:
    """The XLA_FLAGS string: "--a=b --c=d"."""
    return " ".join(str(flag) for flag in flags)
