"""XLA flags that a plan needs on its target hardware, kept as a data table.

Each flag is checked against XLA's source (xla/debug_options_flags.cc) before it goes in the table:
an unknown flag in XLA_FLAGS aborts the program. Update the table, not the code, after an
experiment on the device.
"""

from __future__ import annotations

import re
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
_PROBE = "benchmarks/results/h200-2026-11-30-shared-probe/h200-probe-2026-11-30.md"
_OVERLAP = "benchmarks/results/h200-2026-12-02.md, section 1"

# Not in the table: --xla_gpu_enable_host_memory_offloading=true. It does not change how JAX's
# offloads are lowered; it only hands XLA's own HloRematerialization a host-memory config, so
# that the pass may offload on its own (docs/xla-flags-research.md, finding 3). With it, a
# verified plan run capped at its budget can abort at compile ("hlo_rematerialization.cc:2181
# Check failed: !place_before_list.empty()", in OffloadInstruction), and the same plan runs
# without it (measured on the H200: benchmarks/results/h200-2026-12-02-zoo/capped-probe).
FLAG_TABLE: tuple[_FlagRow, ...] = (
    _FlagRow(
        flag=XlaFlag(
            name="xla_gpu_enable_latency_hiding_scheduler",
            value="true",
            why=(
                "Lets XLA schedule asynchronous work (host copies, collectives) away from its "
                "consumers so it can overlap compute. Alone it changed nothing on our H200 "
                f"({_PROBE}: the copies ran on the compute stream, see the next flag); with "
                f"command buffers off it gave the fastest offloading step of the sets we traced "
                f"({_OVERLAP}: 716.7 ms vs 720.0 ms without it, 749.2 ms with neither)."
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
    _FlagRow(
        flag=XlaFlag(
            name="xla_gpu_enable_command_buffer",
            value="",  # an empty list: no command type is captured into CUDA graphs
            why=(
                "Turns off CUDA-graph capture. XLA emits the host offload copies (dynamic-"
                "(update-)slice fusions into pinned host memory) as async ops for their own "
                "stream, but by default it captures DYNAMIC_SLICE_FUSION into command buffers, "
                "and a captured graph runs on the launching compute stream, so every copy "
                "waited for the kernels before it. On our H200 (JAX 0.11.2, 8 scanned Llama "
                "layers offloading the layer input) the trace showed all copies on the compute "
                "stream and 0 of 81.4 ms hidden with the defaults; with this flag the copies "
                "ran on four copy streams, 69% of the copy time hid behind kernels and the "
                f"offloading step's cost over saving fell from 48.6 to 17.0 ms ({_OVERLAP}). "
                "The step that saves instead ran 703.0 vs 700.6 ms without graphs: launch "
                "overhead the graphs saved is small next to layer-sized kernels. MaxText's GPU "
                "scripts set the same value."
            ),
            source=(
                f"{_DEBUG_OPTIONS}: flag 'xla_gpu_enable_command_buffer' (a list of command "
                "types, default includes DYNAMIC_SLICE_FUSION; an empty value disables command "
                "buffers), openxla/xla@753e5e56 xla/debug_options_flags.cc:304-310,2137; "
                "AI-Hypercomputer/maxtext src/maxtext/configs/gpu/a3/llama_2_7b/1vm.sh:22-23"
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


# XLA:GPU compiles each program against a memory limit and rematerializes (recomputes, a
# slower program than the plan) when the scheduled peak exceeds it:
#   limit = (device_memory_size - parameters - outputs + aliased) * slop / 100,
# with slop = xla_gpu_memory_limit_slop_factor, default 95 (xla/debug_options_flags.cc;
# xla/service/gpu/gpu_hlo_schedule.cc GetSchedulerMemoryLimit, used by the latency-hiding
# scheduler and by HloRematerialization in gpu_compiler.cc's remat pipeline). JAX passes the
# allocator's bytes_limit as device_memory_size (jaxlib/py_client.cc, CompileAndLoadIfrtProgram),
# i.e. XLA_PYTHON_CLIENT_MEM_FRACTION x HBM (default 0.75). A plan whose temporaries come
# near (cap - I/O) runs far slower than a plan one budget up that is not near its cap
# (measured: benchmarks/results/h200-2026-12-02.md).
XLA_GPU_MEMORY_LIMIT_SLOP = 0.95


def compiler_temp_fraction(hw: HardwareProfile) -> float:
    """The fraction of (budget - program inputs/outputs) that XLA lets temporaries use on
    ``hw``'s platform before it recomputes on its own: 0.95 on GPU (above), 1 elsewhere."""
    return XLA_GPU_MEMORY_LIMIT_SLOP if hw.platform == "gpu" else 1.0


def flags_to_compiler_options(flags: str) -> dict[str, object]:
    """``"--a=true --b=7 --c=x"`` -> ``{"a": True, "b": 7, "c": "x"}`` for ``compile()``.

    "true"/"false" (any case) become bools, whole numbers ints; everything else stays a string
    ("" is an empty list, e.g. no command buffers): XLA's option setter, unlike the XLA_FLAGS
    parser, rejects "'true' is not a valid bool value". A flag without ``=`` means true.
    """
    out: dict[str, object] = {}
    for tok in (flags or "").split():
        if not tok.startswith("--"):
            raise ValueError(f"XLA flag {tok!r} does not start with '--' (in {flags!r}).")
        name, sep, value = tok[2:].partition("=")
        if not sep:
            out[name] = True
            continue
        low = value.lower()
        if low in ("true", "false"):
            out[name] = low == "true"
        elif re.fullmatch(r"-?\d+", value):
            out[name] = int(value)
        else:
            out[name] = value
    return out
