"""Which compiler makes a plan's figures: XLA:GPU for the target GPU, on any machine.

A plan for ``hardware="h200"`` is only as good as the compiled figures that check it, and
XLA:CPU compiles a different program than XLA:GPU (its attention materializes the scores, it
has no cuDNN, no host memory space). XLA can compile for an NVIDIA GPU that is not there
("deviceless" ahead-of-time compilation): the CUDA PJRT plugin builds a topology of
compile-only devices from a ``GpuTargetConfigProto`` text (XLA's own specs, copied with their
sources into ``cost_models/targets/``, looked up by ``gpus.py``), and a step traced with
``ShapeDtypeStruct`` arguments placed on those devices lowers and compiles as it would on the
GPU.

    target = resolve("h200", num_devices=8)        # what compiles, and how the figures are labelled
    args = deviceless.args_for(target, example_args)   # the user's arguments, placed on the target
    program = compile.compile_traced(target, step, args, compiler_options)
    figures = read_figures(target, program.compiled)

:func:`resolve` picks the compiler: this machine's backend when it *is* the GPU, else XLA:GPU
for the GPU without a device when the CUDA plugin is installed and a target config is
recorded for the installed jaxlib, else this machine's backend marked inexact, with what to
install (``CompilerTarget.how_to_get_exact``). A missing plugin is an expected situation and
never raises; a GPU name with no target config at all does. The target's compile-only devices
and meshes (:func:`devices`, :func:`target_mesh`) are made here, once per config and topology;
:func:`read_figures` reads ``memory_analysis()`` and the HLO text, labelled with the compiler.

Known gaps of deviceless compiles (``CompilerTarget.caveats``): XLA does not autotune without a
device (GEMM backends and fusion configurations are its defaults), and cuDNN workspaces are not
sized without a device. ``deviceless_bound`` bounds both per program (cuDNN workspaces by
cuDNN's formula, read from the compiled HLO; the rest as a measured share of the
temporaries, ``DEVICELESS_TEMP_FRACTION``; measured:
``benchmarks/results/deviceless-bound-2026-12-06.md``).

On a machine without an NVIDIA driver, start Python with ``JAX_PLATFORMS=cpu``: otherwise the
CUDA plugin checks its libraries against a driver, fails, and JAX does not register it
(:func:`resolve` then says so and falls back to the local backend).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import threading
from typing import Any, Literal

import jax
import numpy as np
from jax.sharding import Mesh

from cost_models._gpus import Gpu
from planner._src.xla import gpus
from planner._src.xla.gpus import TargetError

# ----------------------------------------------------------------------- the target


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CompilerTarget:
    """Which compiler makes the figures, and how every figure is labelled.

    Plain data (no live JAX objects): topologies and meshes live in this module's caches,
    keyed by ``target_config`` and ``topology``.
    """

    kind: Literal["deviceless", "local"]
    platform: str  # "cuda" for a GPU target; the local backend's otherwise
    description: str  # the label of every figure
    exact: bool  # the compiler is the target's own
    gpu_name: str | None  # the profile's GPU ("h200"), None for a CPU profile
    how_to_get_exact: str = ""  # for the report when not exact
    num_devices: int = 1
    topology: str | None = None  # "<partitions>x<hosts per partition>x<devices per host>"
    device_kind: str | None = None  # "NVIDIA H200 141GB HBM3e"
    compute_capability: str | None = None  # "9.0"
    jaxlib_version: str = ""
    spec_path: str | None = None  # the target config file, relative to the repository
    spec_source: str | None = None  # where that text comes from (commit and path)
    caveats: tuple[str, ...] = ()  # what this compiler does not model
    target_config: str | None = dataclasses.field(default=None, repr=False)
    # The share of a program's temporaries the target's own compile may add beyond the
    # workspaces deviceless_bound reads from the HLO: DEVICELESS_TEMP_FRACTION for a
    # deviceless compile, 0 where the compiler is the device's own (budget.Margin).
    margin: float = 0.0


# What the GPU's own compile of a program can add beyond what a deviceless compile shows and
# beyond the cuDNN workspaces deviceless_bound sizes from the HLO (budget.Margin), as a share of
# the program's temporaries (arguments and outputs measured identical on both sides). Without
# a device XLA does not autotune: deviceless compiles turn Triton GEMMs off
# (DEVICELESS_COMPILE_OPTIONS), so their matmuls are cuBLAS calls, and the device keeps some
# GEMMs as Triton fusions; the schedule and buffer assignment follow. Over 35 programs (12
# plans, 23 stock-policy programs; Llama, long-context and MoE steps) measured on the H200 at
# the same jaxlib (0.11.2), the device's bytes less the deviceless bytes less the cuDNN bound
# reached 4.31% of the temporaries (an MoE plan with no cuDNN call; 2.29% at most where the
# program has cuDNN attention), rounded up to the next half percent
# (benchmarks/results/deviceless-bound-2026-12-06.md).
DEVICELESS_TEMP_FRACTION = 0.045

_DEVICELESS_CAVEATS = (
    "no autotuning without a device: GEMM and fusion configurations are XLA's defaults "
    "(the GPU's own compile may keep some GEMMs as Triton fusions, with another schedule)",
    "cuDNN workspaces are not sized without a device: the planner adds them by cuDNN's "
    "formula, read from the compiled HLO (planner/_src/xla/deviceless_bound.py)",
    "measured on the H200 at the same jaxlib with the deviceless compile's matmuls as cuBLAS "
    "calls: beyond the cuDNN workspaces the device's own compile took up to 4.31% more "
    "temporaries over 35 programs (benchmarks/results/deviceless-bound-2026-12-06.md), so "
    "plans leave 4.5% of their temporaries free (xla.targets.DEVICELESS_TEMP_FRACTION)",
)


def jaxlib_version() -> str:
    import jaxlib

    return str(jaxlib.__version__)


_PLUGIN_MODULES = ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12")  # the PJRT plugins


def cuda_plugin() -> str | None:
    """The importable CUDA PJRT plugin's module name, or None (without importing it)."""
    for mod in _PLUGIN_MODULES:
        try:
            if importlib.util.find_spec(mod) is not None:
                return mod
        except (ImportError, ValueError):
            continue
    return None


def plugin_binary() -> str | None:
    """The installed CUDA plugin's binary (``xla_cuda_plugin.so``), or None."""
    mod = cuda_plugin()
    if mod is None:
        return None
    try:
        spec = importlib.util.find_spec(mod)
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, "xla_cuda_plugin.so")
        if os.path.isfile(path):
            return path
    return None


def _how_to_install(g: Gpu, version: str) -> str:
    return (
        f'pip install -e ".[cuda]" (the CUDA PJRT plugin matching jaxlib {version}, '
        f"jax-cuda13-plugin[with-cuda]=={version}: XLA:GPU and NVIDIA's CUDA, cuDNN and NCCL "
        f"wheels, 656 MB to download and 1.3 GB on disk, measured 2026-12-06; no GPU or driver "
        f"needed), then plan again under JAX_PLATFORMS=cpu: the figures then come from XLA:GPU "
        f"for {g.label} (deviceless)"
    )


def _local_devices():
    try:
        return jax.devices()
    except RuntimeError:  # pragma: no cover - no backend at all
        return []


def _local_description(devices, g: Gpu | None) -> str:
    if not devices or devices[0].platform == "cpu":
        return "XLA:CPU" if g is None else "XLA:CPU (another backend: an estimate)"
    kind = devices[0].device_kind
    if g is None:
        platform = devices[0].platform.upper()
        return f"XLA:{platform} on this device ({kind}; a CPU profile: an estimate)"
    if re.search(g.device_kind, kind):
        return f"XLA:GPU on this device ({kind})"
    return f"XLA:GPU on this device ({kind}, not a {g.label}: an estimate)"


def resolve(
    gpu: str | None, *, num_devices: int = 1, topology: str | None = None
) -> CompilerTarget:
    """The compiler for a hardware profile's GPU ``gpu`` ("h200", ...; None for CPU profiles).

    * this machine's backend, exact, when it has ``num_devices`` devices that are that GPU;
    * else XLA:GPU for it without a device, when the CUDA plugin is installed and a target
      config is recorded for the installed jaxlib (``cost_models/targets/index.json``);
    * else this machine's backend, ``exact=False``, ``how_to_get_exact`` saying what to do.

    ``topology`` overrides the default ``"PxHxD"`` topology of ``num_devices`` GPUs. Raises
    :class:`TargetError` only for a GPU with no target config at all, or a bad count.
    """
    if isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 1:
        raise TargetError(
            f"num_devices must be an int >= 1 (the devices the step is "
            f"partitioned over), got {num_devices!r}."
        )
    devices = _local_devices()
    local_platform = devices[0].platform if devices else "cpu"
    version = jaxlib_version()
    if gpu is None:
        return CompilerTarget(
            kind="local",
            platform=local_platform,
            description=_local_description(devices, None),
            exact=local_platform == "cpu",
            gpu_name=None,
            num_devices=num_devices,
            jaxlib_version=version,
            how_to_get_exact=""
            if local_platform == "cpu"
            else "plan a CPU profile on a CPU backend (JAX_PLATFORMS=cpu)",
        )
    g = gpus.gpu(gpu)
    # best first: the plugin's own, then the recorded ones, nearest jaxlib first; raises only
    # when no jaxlib has a config for g
    specs = gpus.spec_candidates(g, version, plugin_binary())

    def inexact(why: str, fix: str) -> CompilerTarget:
        return CompilerTarget(
            kind="local",
            platform=local_platform,
            description=_local_description(devices, g),
            exact=False,
            gpu_name=g.name,
            num_devices=num_devices,
            jaxlib_version=version,
            how_to_get_exact=f"{why}. Fix: {fix}",
        )

    if (
        devices
        and devices[0].platform == "gpu"
        and len(devices) >= num_devices
        and re.search(g.device_kind, devices[0].device_kind)
    ):
        return CompilerTarget(
            kind="local",
            platform=local_platform,
            description=_local_description(devices, g),
            exact=True,
            gpu_name=g.name,
            num_devices=num_devices,
            jaxlib_version=version,
            device_kind=devices[0].device_kind,
            compute_capability=getattr(devices[0], "compute_capability", None),
        )
    if cuda_plugin() is None:
        return inexact(
            f"The figures come from {_local_description(devices, g).split(' (')[0]}, "
            f"not XLA:GPU for {g.label}: the CUDA plugin is not installed",
            _how_to_install(g, version),
        )
    topo = topology or gpus.default_topology(g, num_devices)
    refused: list[str] = []
    chosen = None
    for spec in specs:
        try:
            topology_desc(spec.text, topo)
        except NotImplementedError as e:  # "topology not implemented for cuda": not registered
            return inexact(
                f"The CUDA plugin ({cuda_plugin()}) is installed but JAX did not register it "
                f"({str(e)[:200]}): without JAX_PLATFORMS=cpu the plugin first checks the CUDA "
                f"libraries against an NVIDIA driver, and on a machine without one that check "
                f"fails",
                "start Python with JAX_PLATFORMS=cpu (the plugin then registers for compiling "
                "only): `JAX_PLATFORMS=cpu python your_script.py`, or "
                "os.environ['JAX_PLATFORMS'] = 'cpu' before the first `import jax`",
            )
        except Exception as e:  # a parser that refuses the text (a field it does not know)
            if "parse" not in str(e).lower():  # the plugin cannot make the topology: say why
                return inexact(
                    f"The CUDA plugin ({cuda_plugin()}) could not build a {g.label} topology "
                    f"{topo}: {type(e).__name__}: {str(e)[:300]}",
                    f"check that the plugin matches jaxlib {version} "
                    f"({_how_to_install(g, version)})",
                )
            refused.append(spec.path)
            continue
        chosen = spec
        break
    if chosen is None:
        return inexact(
            f"No {g.label} target config that jaxlib {version}'s parser reads: its CUDA "
            f"plugin embeds none, and its parser refused the recorded ones ("
            f"{'; '.join(refused) or 'none'}; recorded for jaxlib "
            f"{', '.join(gpus.recorded_versions(g))}) for fields it does not know",
            f"install JAX 0.10.2, 0.11.2 or 0.12 with its CUDA plugin "
            f"({_how_to_install(g, version)}), "
            f"or add XLA's specs at jaxlib {version}'s XLA commit under cost_models/targets/ "
            f"(its README says how)",
        )
    text, spec_path, spec_source = chosen
    kind = gpus.field(text, "device_description_str") or gpus.field(text, "name")
    return CompilerTarget(
        kind="deviceless",
        platform="cuda",
        description=f"XLA:GPU for {g.label} (deviceless)",
        exact=True,
        gpu_name=g.name,
        num_devices=num_devices,
        topology=topo,
        device_kind=kind,
        compute_capability=gpus.compute_capability(text),
        jaxlib_version=version,
        spec_path=spec_path,
        spec_source=spec_source,
        caveats=_DEVICELESS_CAVEATS,
        target_config=text,
        margin=DEVICELESS_TEMP_FRACTION,
    )


# -------------------------------------------------------------- topologies and meshes

_cache_lock = threading.Lock()

_topologies: dict[tuple[str, str], Any] = {}

_meshes: dict[tuple, Mesh] = {}


def topology_desc(text: str, topology: str):
    """The compile-only devices of ``topology`` for the target config ``text`` (cached)."""
    key = (text, topology)
    with _cache_lock:
        if key not in _topologies:
            from jax.experimental import topologies

            _topologies[key] = topologies.get_topology_desc(
                platform="cuda", target_config=text, topology=topology
            )
        return _topologies[key]


def devices(target: CompilerTarget) -> list:
    if target.kind != "deviceless":
        raise TargetError("only a deviceless target has compile-only devices")
    return list(topology_desc(target.target_config, target.topology).devices)


def target_mesh(target: CompilerTarget, mesh) -> Mesh:
    """``mesh`` (a ``Mesh`` of this machine's devices or an ``AbstractMesh``) on the target's
    devices: the same axis names, sizes and axis types."""
    shape, names = tuple(mesh.shape.values()), tuple(mesh.shape.keys())
    return mesh_of(
        target,
        shape,
        names,
        getattr(mesh, "axis_types", None),
        f"The step's mesh {dict(mesh.shape)}",
    )


def mesh_of(target: CompilerTarget, shape: tuple, names: tuple, axis_types, what: str) -> Mesh:
    size = int(np.prod(shape)) if shape else 1
    if size != target.num_devices:
        raise TargetError(
            f"{what} has {size} devices, the target ({target.description}) "
            f"{target.num_devices}.\nFix: resolve the target with num_devices={size}."
        )
    key = (target.target_config, target.topology, shape, names, tuple(axis_types or ()))
    with _cache_lock:
        if key in _meshes:
            return _meshes[key]
    from jax.experimental import topologies

    devices = topologies.make_mesh(
        topology_desc(target.target_config, target.topology), shape, names
    ).devices
    out = Mesh(devices, names, axis_types=tuple(axis_types)) if axis_types else Mesh(devices, names)
    with _cache_lock:
        return _meshes.setdefault(key, out)


# ---------------------------------------------------------------------- the figures


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TargetFigures:
    """``memory_analysis()`` of one compile (per device) and its HLO, with the compiler."""

    compiler: str  # CompilerTarget.description
    exact: bool
    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int
    host_temp_bytes: int
    hlo_text: str = dataclasses.field(repr=False, compare=False)

    @property
    def device_bytes(self) -> int:
        """Device memory the program needs: arguments + outputs - aliased + temporaries."""
        return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes

    @property
    def host_buffers_in_hlo(self) -> int:
        """HLO instructions with a value in host memory (memory space ``S(5)``)."""
        return sum(1 for line in self.hlo_text.splitlines() if "S(5)" in line)


def read_figures(target: CompilerTarget, compiled) -> TargetFigures:
    """The compiled figures the planner reads, labelled with the compiler that made them."""
    m = compiled.memory_analysis()
    return TargetFigures(
        compiler=target.description,
        exact=target.exact,
        argument_bytes=int(m.argument_size_in_bytes),
        output_bytes=int(m.output_size_in_bytes),
        alias_bytes=int(m.alias_size_in_bytes),
        temp_bytes=int(m.temp_size_in_bytes),
        host_temp_bytes=int(getattr(m, "host_temp_size_in_bytes", 0) or 0),
        hlo_text=compiled.as_text() or "",
    )
