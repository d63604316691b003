"""The compiler a plan's figures come from: XLA:GPU for the target GPU, on any machine.

A plan for ``hardware="h200"`` is only as good as the compiled figures that check it, and
XLA:CPU compiles a different program than XLA:GPU (its attention materializes the scores, it
has no cuDNN, no host memory space). XLA can compile for an NVIDIA GPU that is not there
("deviceless" ahead-of-time compilation): the CUDA PJRT plugin builds a topology of
compile-only devices from a ``GpuTargetConfigProto`` text (XLA's own specs, copied with their
sources into ``cost_models/targets/``), and a step traced with ``ShapeDtypeStruct`` arguments
placed on those devices lowers and compiles as it would on the GPU.

    target = resolve("h200", num_devices=8)        # what compiles, and how the figures are labelled
    args = args_for(target, example_args)          # the user's arguments, placed on the target
    program = compile_traced(target, step, args, compiler_options)
    figures = read_figures(target, program.compiled)

* :func:`resolve` picks the compiler: this machine's backend when it *is* the GPU, else XLA:GPU
  for the GPU without a device when the CUDA plugin is installed and a target config is
  recorded for the installed jaxlib, else this machine's backend marked inexact, with what to
  install (``CompilerTarget.how_to_get_exact``). A missing plugin is an expected situation and
  never raises; a GPU name with no target config at all does.
* :func:`args_for` turns example arguments (arrays, ``ShapeDtypeStruct``s, ``NamedSharding`` on
  this machine's devices, pytrees) into ``ShapeDtypeStruct``s on the target's devices: the same
  mesh shape, axis names and partition specs.
* :func:`compile_traced` traces, lowers and compiles for the target, once per call. JAX caches
  traces by function identity and argument types, not by the checkpoint policies a caller
  substitutes while tracing, so each call traces under a trace context of its own (a private
  configuration value, ``xla.adapter.isolated_traces``): a second call under other policies
  gets a new program, a program traced under a caller's policies never reaches the user, and
  JAX's caches are never cleared. While it runs, for a deviceless target only and only in the calling
  context (a ``ContextVar``: other threads are untouched):

  - JAX's cuDNN attention checks answer for the target's compute capability
    (``jax.nn.dot_product_attention(..., implementation="cudnn")`` asks the *default* backend,
    XLA:CPU here, whether the GPU is Hopper or later, and refuses head dims above 128);
  - shardings inside the step that name this machine's devices
    (``with_sharding_constraint(x, NamedSharding(cpu_mesh, spec))``, ``jax.device_put`` inside
    the step, ``shard_map(mesh=cpu_mesh)``) are moved onto the target mesh of the same shape and
    axis names; without this the lowering refuses the mix of CPU and GPU devices.

* :func:`lower` and :func:`compile_lowered` are the lowering and compile every planner compile
  goes through (the anchors, the verify step: ``trace.compile_with``). Under a deviceless
  target's scope, a step the user jitted with ``out_shardings`` / ``in_shardings`` on this
  machine's mesh lowers with them moved onto the target mesh (the outputs are re-sharded as
  the user asked, on the target's devices), and an XLA:GPU compile that calls the CUDA
  runtime (it needs a device: measured for large sorts on GB200, which XLA rewrites to CUB
  radix sorts) raises :class:`TargetError` saying what, why and what to do.
* :func:`read_figures` reads ``memory_analysis()`` and the HLO text, labelled with the compiler.

JAX internals touched (each marked ``# JAX internal`` below and guarded by a test in
``tests/test_target.py`` that names what moved): ``jax._src.cudnn.fused_attention_stablehlo``'s
``check_compute_capability`` / ``is_cuda_compute_capability_equal`` (the same in JAX 0.10.0,
0.10.2, 0.11.2 and 0.12.0.1), and the ``bind`` of ``sharding_constraint_p`` (``jax._src.pjit``),
``device_put_p`` (``jax._src.dispatch``) and ``shard_map_p`` (``jax._src.shard_map``), and the
``_params`` of ``jax.stages.Traced`` (its ``in_shardings`` / ``out_shardings``, and ``_lojax``,
derived from them: ``jax/_src/stages.py``, the same in 0.10.2 and 0.12.0.1).

Known gaps of deviceless compiles (``CompilerTarget.caveats``): XLA does not autotune without a
device (GEMM and fusion configurations are its defaults; a device compile may choose cuBLAS
kernels whose workspaces it then allocates), and cuDNN workspaces are not sized without a device.
For the H200-sized Llama step the deviceless device bytes measure 1.9-2.1% below the H200's
(measured: ``benchmarks/results/deviceless-2026-12-02.md``).

On a machine without an NVIDIA driver, start Python with ``JAX_PLATFORMS=cpu``: otherwise the
CUDA plugin checks its libraries against a driver, fails, and JAX does not register it
(:func:`resolve` then says so and falls back to the local backend).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
import functools
import importlib
import importlib.util
import json
import re
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

from planner._src.errors import PlanWarning  # here: plan imports this module
from planner._src.xla import adapter

try:  # the planner's error base, where the package layout puts it; ValueError otherwise
    from planner._src.errors import InvalidArgumentError as _ErrorBase
except ImportError:  # pragma: no cover - older layout
    try:
        from planner.errors import InvalidArgumentError as _ErrorBase
    except ImportError:
        _ErrorBase = ValueError


class TargetError(_ErrorBase):
    """A compiler target that cannot be had: unknown GPU name, wrong device count, a sharding
    that cannot be moved onto the target. The message says what to do."""


# ------------------------------------------------------------------------------ the GPUs


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Gpu:
    name: str  # the hardware profile's name (cost_models/profiles/<name>.json)
    label: str  # how figures name it: "XLA:GPU for <label> (deviceless)"
    spec_file: str | None  # cost_models/targets/<set>/<spec_file>; None: derived
    device_kind: str  # regex matched against a local device's device_kind
    devices_per_host: int  # default topology: hosts of this many GPUs
    hosts_per_partition: int = 1  # ... and NVLink partitions of this many hosts
    aliases: tuple[str, ...] = ()
    derived_from: str | None = None  # a spec of another GPU with this GPU's memory (see README)


_GPUS: tuple[_Gpu, ...] = (
    _Gpu(
        name="h100-sxm",
        label="H100 SXM",
        spec_file="h100_sxm.txtpb",
        device_kind=r"(?<![A-Z])H100\b(?!.*\b(PCIe|NVL)\b)",
        devices_per_host=8,
        aliases=("h100", "h100_sxm", "h100sxm"),
    ),
    _Gpu(
        name="h100-pcie",
        label="H100 PCIe",
        spec_file="h100_pcie.txtpb",
        device_kind=r"(?<![A-Z])H100\b.*\bPCIe\b",
        devices_per_host=8,
        aliases=("h100_pcie", "h100pcie"),
    ),
    _Gpu(
        name="h200",
        label="H200",
        spec_file="h200.txtpb",
        device_kind=r"(?<![A-Z])H200\b",
        devices_per_host=8,
        aliases=("h200-sxm", "h200_sxm"),
    ),
    _Gpu(
        name="b200",
        label="B200",
        spec_file="b200.txtpb",
        device_kind=r"(?<![A-Z])B200\b",
        devices_per_host=8,
    ),
    _Gpu(
        name="gb200",
        label="GB200",
        spec_file="gb200.txtpb",
        device_kind=r"\bGB200\b",
        devices_per_host=4,
        hosts_per_partition=18,
    ),
    # XLA has no GH200 spec: its GPU is an H100 (GH100, 132 SMs, sm_90a) with 96 GB of HBM3;
    # the H100 SXM spec with that memory (cost_models/targets/README.md, "GH200").
    _Gpu(
        name="gh200",
        label="GH200",
        spec_file=None,
        derived_from="h100-sxm",
        device_kind=r"\bGH200\b",
        devices_per_host=1,
    ),
)

# GH200, 96 GB HBM3 version: the figures cost_models/profiles/gh200.json cites (NVIDIA GH200
# datasheet: "96GB HBM3, 4 TB/s"). Bytes as 10^9: the H100 SXM spec reports 84942979072 B for
# "80 GB", so this is below what a GH200 reports, i.e. XLA's memory limit errs low.
_GH200_MEMORY = {"device_memory_size": 96_000_000_000, "memory_bandwidth": 4_000_000_000_000}
_GH200_NAME = "NVIDIA GH200 480GB"


def _gpu(name: str) -> _Gpu:
    key = name.strip().lower()
    for g in _GPUS:
        if key == g.name or key in g.aliases:
            return g
    known = ", ".join(g.name for g in _GPUS)
    raise TargetError(
        f"No GPU target config is known for {name!r}.\n"
        f"Why: deviceless compiles need XLA's description of the GPU (a GpuTargetConfigProto); "
        f"the planner carries them for {known} (cost_models/targets/README.md).\n"
        f"Fix: pass one of those names, or None for a CPU profile."
    )


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
    # The target's own compile may need up to (1 + margin) x this compiler's device bytes:
    # DEVICELESS_MARGIN for a deviceless compile, 0 where the compiler is the device's own.
    # The planner leaves that fraction of the usable budget free (session.usable_bytes).
    margin: float = 0.0


# How much more the GPU's own compile can need than the deviceless one, same jaxlib and
# program. Without a device XLA neither autotunes (GEMM backends: cuBLAS calls with 32 MiB
# workspaces against Triton fusions; the latency-hiding schedule follows) nor sizes cuDNN
# workspaces (the fused attention backward's u8[B*H*S*D*4 + ...] is u8[0]). Deviceless
# compiles turn Triton GEMMs off (DEVICELESS_COMPILE_OPTIONS), so their matmuls are cuBLAS
# calls, as the device picks most of them; device / deviceless is then 0.938-1.030 over 12
# plans of 3 models and 0.940-1.023 over 23 stock-policy programs of 5 models (measured:
# benchmarks/results/deviceless-plans-2026-12-04.md; with Triton GEMMs on: deviceless-2026-12-03.md,
# h200-2026-12-04-offload-must-show.md).
# The margin is the largest ratio measured, rounded up to the next half percent.
DEVICELESS_MARGIN = 0.035


_DEVICELESS_CAVEATS = (
    "no autotuning without a device: GEMM and fusion configurations are XLA's defaults "
    "(a compile on the GPU may pick cuBLAS kernels and allocate their workspaces)",
    "cuDNN workspaces are not sized without a device",
    "measured on the H200 at the same jaxlib, with the deviceless compile's matmuls as cuBLAS "
    "calls (as the device picks most of them): the device's own compile took 0.938-1.030x the "
    "deviceless device bytes on 12 plans of 3 models and 0.940-1.023x on 23 stock-policy "
    "programs of 5 models (benchmarks/results/deviceless-plans-2026-12-04.md), so plans leave "
    "a 3.5% margin (target.DEVICELESS_MARGIN)",
)


def _jaxlib_version() -> str:
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


def _how_to_install(g: _Gpu, version: str) -> str:
    return (
        f'pip install -e ".[cuda]" (the CUDA PJRT plugin matching jaxlib {version}, '
        f"jax-cuda13-plugin[with-cuda]=={version}: XLA:GPU and NVIDIA's CUDA, cuDNN and NCCL "
        f"wheels, about 4 GB; no GPU or driver needed), then plan again: the figures then come "
        f"from XLA:GPU for {g.label} (deviceless)"
    )


def _local_devices():
    try:
        return jax.devices()
    except RuntimeError:  # pragma: no cover - no backend at all
        return []


def _local_description(devices, g: _Gpu | None) -> str:
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
    version = _jaxlib_version()
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
    g = _gpu(gpu)
    spec = _spec_for(g, version)  # raises only when no jaxlib has a config for g

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
    if spec is None:
        recorded = ", ".join(_recorded_versions(g)) or "none"
        return inexact(
            f"No {g.label} target config is recorded for jaxlib {version} (recorded for: "
            f"{recorded}); an unknown field in a target config is a hard error, so a config of "
            f"another jaxlib is not used",
            f"install one of those jaxlib versions with its CUDA plugin, or add XLA's specs at "
            f"jaxlib {version}'s XLA commit under cost_models/targets/ (its README says how)",
        )
    topo = topology or _default_topology(g, num_devices)
    text, spec_path, spec_source = spec
    try:
        _topology(text, topo)
    except NotImplementedError as e:  # "topology not implemented for cuda": not registered
        return inexact(
            f"The CUDA plugin ({cuda_plugin()}) is installed but JAX did not register it "
            f"({str(e)[:200]}): without JAX_PLATFORMS=cpu the plugin first checks the CUDA "
            f"libraries against an NVIDIA driver, and on a machine without one that check fails",
            "start Python with JAX_PLATFORMS=cpu (the plugin then registers for compiling "
            "only), or with JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1; both before JAX starts",
        )
    except Exception as e:  # the plugin is there but cannot make the topology: say why
        return inexact(
            f"The CUDA plugin ({cuda_plugin()}) could not build a {g.label} topology "
            f"{topo}: {type(e).__name__}: {str(e)[:300]}",
            f"check that the plugin matches jaxlib {version} ({_how_to_install(g, version)})",
        )
    kind = _field(text, "device_description_str") or _field(text, "name")
    return CompilerTarget(
        kind="deviceless",
        platform="cuda",
        description=f"XLA:GPU for {g.label} (deviceless)",
        exact=True,
        gpu_name=g.name,
        num_devices=num_devices,
        topology=topo,
        device_kind=kind,
        compute_capability=_compute_capability(text),
        jaxlib_version=version,
        spec_path=spec_path,
        spec_source=spec_source,
        caveats=_DEVICELESS_CAVEATS,
        target_config=text,
        margin=DEVICELESS_MARGIN,
    )


def _default_topology(g: _Gpu, n: int) -> str:
    per_host = g.devices_per_host
    if n <= per_host:
        return f"1x1x{n}"
    if n % per_host:
        raise TargetError(
            f"{n} devices do not fill whole {g.label} hosts of {per_host} GPUs.\n"
            f"Fix: use a multiple of {per_host} devices, or pass topology="
            f"'<partitions>x<hosts per partition>x<devices per host>' to resolve()."
        )
    hosts = n // per_host
    hpp = g.hosts_per_partition if hosts % g.hosts_per_partition == 0 else 1
    return f"{hosts // hpp}x{hpp}x{per_host}"


# ------------------------------------------------------------------- target config files


def _targets_dir() -> Path:
    try:
        from importlib import resources

        path = Path(str(resources.files("cost_models") / "targets"))
        if path.is_dir():
            return path
    except (ImportError, ModuleNotFoundError, TypeError):  # pragma: no cover
        pass
    return Path(__file__).resolve().parents[2] / "cost_models" / "targets"


@functools.lru_cache(maxsize=1)
def _index() -> dict:
    with open(_targets_dir() / "index.json", encoding="utf-8") as f:
        return json.load(f)


def _sets_for(version: str) -> list[dict]:
    return [s for s in _index()["sets"] if version in s["jaxlib"]]


def _recorded_versions(g: _Gpu) -> list[str]:
    base = _gpu(g.derived_from) if g.derived_from else g
    return [v for s in _index()["sets"] if base.spec_file in s["files"] for v in s["jaxlib"]]


def _spec_for(g: _Gpu, version: str) -> tuple[str, str, str] | None:
    """(text, path relative to the repository, source) of ``g``'s target config for jaxlib
    ``version``; None when it is recorded for other jaxlib versions only. Raises when no
    version has one (which the GPU table makes impossible unless the files are missing)."""
    if not _recorded_versions(g):
        raise TargetError(
            f"cost_models/targets/index.json lists no target config for "
            f"{g.name}; the files are missing from this install."
        )
    base = _gpu(g.derived_from) if g.derived_from else g
    for s in _sets_for(version):
        if base.spec_file in s["files"]:
            rel = f"cost_models/targets/{s['dir']}/{base.spec_file}"
            text = (_targets_dir() / s["dir"] / base.spec_file).read_text(encoding="utf-8")
            source = s["files"][base.spec_file]
            if g.derived_from:  # the base GPU's file, with this GPU's memory (README: GH200)
                return (
                    _derive_gh200(text),
                    rel,
                    f"{source}, with GH200's memory "
                    "(cost_models/profiles/gh200.json; cost_models/targets/README.md)",
                )
            return text, rel, source
    return None


def _derive_gh200(text: str) -> str:
    for field, value in _GH200_MEMORY.items():
        text, n = re.subn(rf"(\n\s*{field}: )\d+", rf"\g<1>{value}", text, count=1)
        if n != 1:
            raise TargetError(f"the H100 SXM target config has no {field}: cannot derive GH200")
    for field in ("name", "device_description_str"):
        text = re.sub(rf'(\n\s*{field}: )"[^"]*"', rf'\g<1>"{_GH200_NAME}"', text, count=1)
    return text


def _field(text: str, name: str) -> str | None:
    m = re.search(rf'\n\s*{name}: "([^"]*)"', text)
    return m.group(1) if m else None


def _compute_capability(text: str) -> str | None:
    m = re.search(r"cuda_compute_capability\s*\{([^}]*)\}", text)
    if not m:
        return None
    major = re.search(r"major:\s*(\d+)", m.group(1))
    minor = re.search(r"minor:\s*(\d+)", m.group(1))
    return f"{major.group(1) if major else 0}.{minor.group(1) if minor else 0}"


# -------------------------------------------------------------- topologies and meshes

_cache_lock = threading.Lock()
_topologies: dict[tuple[str, str], Any] = {}
_meshes: dict[tuple, Mesh] = {}


def _topology(text: str, topology: str):
    """The compile-only devices of ``topology`` for the target config ``text`` (cached)."""
    key = (text, topology)
    with _cache_lock:
        if key not in _topologies:
            from jax.experimental import topologies

            _topologies[key] = topologies.get_topology_desc(
                platform="cuda", target_config=text, topology=topology
            )
        return _topologies[key]


def _devices(target: CompilerTarget) -> list:
    if target.kind != "deviceless":
        raise TargetError("only a deviceless target has compile-only devices")
    return list(_topology(target.target_config, target.topology).devices)


def target_mesh(target: CompilerTarget, mesh) -> Mesh:
    """``mesh`` (a ``Mesh`` of this machine's devices or an ``AbstractMesh``) on the target's
    devices: the same axis names, sizes and axis types."""
    shape, names = tuple(mesh.shape.values()), tuple(mesh.shape.keys())
    return _mesh(
        target,
        shape,
        names,
        getattr(mesh, "axis_types", None),
        f"The step's mesh {dict(mesh.shape)}",
    )


def _mesh(target: CompilerTarget, shape: tuple, names: tuple, axis_types, what: str) -> Mesh:
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
        _topology(target.target_config, target.topology), shape, names
    ).devices
    out = Mesh(devices, names, axis_types=tuple(axis_types)) if axis_types else Mesh(devices, names)
    with _cache_lock:
        return _meshes.setdefault(key, out)


# A host memory kind on the target's compile-only devices. Those devices list no memories
# (``addressable_memories()`` is empty, JAX 0.11.2 and 0.12.0.1), so JAX's sharding
# constructors drop the kind: ``SingleDeviceSharding(d, memory_kind="pinned_host")
# .memory_kind`` is None, and an argument placed in pinned host memory lowered as a device
# argument (0 host argument bytes; measured:
# benchmarks/results/state-offload-config-2026-12-04.md). These subclasses answer the kind
# JAX's lowering reads (``memory_kind``: the entry parameter's ``mhlo.memory_kind``, hence
# XLA's ``S(5)`` layout and its host argument bytes). Used for *arguments* only (args_for,
# a jit's in_shardings): for outputs JAX checks the compiled executable's memory kinds
# (None on these devices) against the user's, so an output's host kind comes from its value
# (``jax.device_put(x, jax.memory.Space.Host)`` in the step), as the lowering propagates it.
_HOST_KINDS = ("pinned_host", "unpinned_host")


class _HostSingleDeviceSharding(SingleDeviceSharding):
    def __init__(self, device, memory_kind: str):
        super().__init__(device)
        self.__dict__["_host_kind"] = memory_kind

    memory_kind = property(lambda self: self._host_kind)
    _memory_kind = memory_kind

    def with_memory_kind(self, kind):
        return _with_kind(SingleDeviceSharding(self._device), kind)

    def __eq__(self, other):
        return (
            isinstance(other, SingleDeviceSharding)
            and other._device == self._device
            and other.memory_kind == self.memory_kind
        )

    def __hash__(self):
        return hash((self._device, self._host_kind))

    def __repr__(self):
        return f"SingleDeviceSharding(device={self._device!r}, memory_kind={self._host_kind})"


class _HostNamedSharding(NamedSharding):
    def __init__(self, mesh, spec, memory_kind: str):
        super().__init__(mesh, spec)
        self.__dict__["_host_kind"] = memory_kind

    memory_kind = property(lambda self: self._host_kind)
    _memory_kind = memory_kind

    def with_memory_kind(self, kind):
        return _with_kind(NamedSharding(self.mesh, self.spec), kind)

    def __eq__(self, other):
        return (
            isinstance(other, NamedSharding)
            and other.mesh == self.mesh
            and other.spec == self.spec
            and other.memory_kind == self.memory_kind
        )

    def __hash__(self):
        return hash((self.mesh, self.spec, self._host_kind))

    def __repr__(self):
        return (
            f"NamedSharding(mesh={self.mesh!r}, spec={self.spec!r}, memory_kind={self._host_kind})"
        )


def _with_kind(sharding, memory_kind: str | None):
    """``sharding`` (on the target's devices) with ``memory_kind``, kept where a host kind
    would be dropped (above); a device kind is the devices' default (None here)."""
    if memory_kind not in _HOST_KINDS or sharding.memory_kind == memory_kind:
        return sharding
    if isinstance(sharding, SingleDeviceSharding):
        return _HostSingleDeviceSharding(next(iter(sharding.device_set)), memory_kind)
    if isinstance(sharding, NamedSharding):
        return _HostNamedSharding(sharding.mesh, sharding.spec, memory_kind)
    return sharding


def _replicated(target: CompilerTarget, memory_kind: str | None, *, keep_host: bool = False):
    devices = _devices(target)
    if len(devices) == 1:
        out = SingleDeviceSharding(devices[0], memory_kind=memory_kind)
    else:
        mesh = _mesh(target, (len(devices),), ("devices",), None, "An unsharded argument")
        out = NamedSharding(mesh, PartitionSpec(), memory_kind=memory_kind)
    return _with_kind(out, memory_kind) if keep_host else out


def _on_target(target: CompilerTarget, sharding, what: str):
    """``sharding`` (this machine's, or None) as the same placement on the target."""
    memory_kind = getattr(sharding, "memory_kind", None)
    if (
        sharding is None
        or isinstance(sharding, SingleDeviceSharding)
        or (isinstance(sharding, NamedSharding) and getattr(sharding.mesh, "empty", False))
    ):
        # no placement (an aval's sharding on JAX 0.12 names the empty mesh): replicated
        return _replicated(target, memory_kind, keep_host=True)
    if isinstance(sharding, NamedSharding):
        return _with_kind(
            NamedSharding(
                target_mesh(target, sharding.mesh), sharding.spec, memory_kind=memory_kind
            ),
            memory_kind,
        )
    raise TargetError(
        f"{what} has a {type(sharding).__name__}, which cannot be moved onto "
        f"{target.description}.\nFix: give it a jax.sharding.NamedSharding (a mesh and a "
        f"PartitionSpec), or no sharding."
    )


def args_for(target: CompilerTarget, example_args: Any) -> Any:
    """The example arguments (a pytree of arrays, ``ShapeDtypeStruct``s, scalars) as
    ``ShapeDtypeStruct``s on the target: single-device arguments on its one device, a
    ``NamedSharding`` on the same mesh shape and axis names over its devices, with the same
    ``PartitionSpec`` and memory kind. Identity for a local target."""
    if target.kind == "local":
        return example_args
    with_paths, tree = jax.tree_util.tree_flatten_with_path(example_args)
    out = []
    for key, x in with_paths:
        path = jax.tree_util.keystr(key)
        if not adapter.is_array_leaf(x):  # static, as in the local trace (jax_adapter)
            out.append(x)
            continue
        if not (hasattr(x, "shape") and hasattr(x, "dtype")):
            x = jax.typeof(x) if hasattr(jax, "typeof") else jax.numpy.asarray(x)
        sharding = _on_target(target, getattr(x, "sharding", None), f"argument {path or '0'}")
        out.append(_struct(x, sharding))
    return jax.tree.unflatten(tree, out)


def _struct(x, sharding):
    """A ShapeDtypeStruct of ``x`` on the target. An argument in host memory also gets the
    aval's memory space (JAX internal: ShapeDtypeStruct's ``_memory_space``, JAX 0.11.2 and
    0.12.0.1): JAX takes an array's memory space from its aval, not from a
    SingleDeviceSharding's memory kind, so without it the step traced here sees the
    argument in HBM where on the GPU it sees it on the host (a ``jax.device_put`` to the
    device is then no op, and its transpose, which puts a host parameter's gradient on the
    host, is lost)."""
    kw = {"weak_type": bool(getattr(x, "weak_type", False)), "sharding": sharding}
    if getattr(sharding, "memory_kind", None) in _HOST_KINDS:
        try:
            return jax.ShapeDtypeStruct(
                tuple(x.shape), x.dtype, _memory_space=jax.memory.Space.Host, **kw
            )
        except TypeError:  # a JAX without the private argument: the kind alone
            pass
    return jax.ShapeDtypeStruct(tuple(x.shape), x.dtype, **kw)


# --------------------------------------------------- the scope of a deviceless compile


class _Scope(NamedTuple):
    target: CompilerTarget
    capability: tuple[int, int]


_active: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar(
    "planner_compiler_target", default=None
)


def active_target() -> CompilerTarget | None:
    """The deviceless target in scope (:func:`target_scope`), or None."""
    scope = _active.get()
    return scope.target if scope is not None else None


def _capability(text: str) -> tuple[int, int]:
    return tuple(int(p) for p in text.split("."))[:2]  # type: ignore[return-value]


# JAX internal: jax/_src/cudnn/fused_attention_stablehlo.py (0.10.0 to 0.12.0.1).
# check_is_flash_attention calls these module globals to decide head-dim limits (128 below
# Hopper, 256 from 9.0), packed layouts, MLA and cc 10.3 rules; both ask the default backend
# (XLA:CPU here) and answer False. While a deviceless compile runs they answer for the target.
_FUSED_ATTENTION = "jax._src.cudnn.fused_attention_stablehlo"
_CAPABILITY_CHECKS = ("check_compute_capability", "is_cuda_compute_capability_equal")


def _make_capability_check(name: str, original: Callable[[str], bool]) -> Callable[[str], bool]:
    def check(capability: str) -> bool:
        scope = _active.get()
        if scope is None:
            return original(capability)
        wanted = _capability(capability)
        return (
            scope.capability >= wanted
            if name == "check_compute_capability"
            else scope.capability == wanted
        )

    check.__name__ = name
    check._planner_original = original  # type: ignore[attr-defined]
    return check


# JAX internal: primitives whose parameters carry shardings or meshes of this machine's
# devices when the user's step names them (jax/_src/pjit.py sharding_constraint_p, from
# with_sharding_constraint; jax/_src/dispatch.py device_put_p, from jax.device_put inside a
# step; jax/_src/shard_map.py shard_map_p's mesh). Wrapping the instance's ``bind`` (as the
# planner's JAX adapter does for remat_p) lets the parameters be moved onto the target mesh.
_SHARDING_PRIMITIVES = (
    ("jax._src.pjit", "sharding_constraint_p"),
    ("jax._src.dispatch", "device_put_p"),
    ("jax._src.shard_map", "shard_map_p"),
)


def _internal(module: str, name: str):
    """A JAX internal this module wraps, or a clear error naming what moved."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise RuntimeError(
            f"planner/_src/target.py needs the JAX internal {module}.{name}, which JAX "
            f"{jax.__version__} does not have ({e}); see tests/test_target.py::"
            f"test_jax_internals_are_where_the_module_expects_them"
        ) from e


def _translate(scope: _Scope, value, keep_host: bool = False):
    """``value`` with every sharding / mesh of this machine's devices moved onto the target.
    ``keep_host``: a host memory kind is kept (arguments only: see _HOST_KINDS)."""
    target = scope.target
    if (
        isinstance(value, NamedSharding)
        and isinstance(value.mesh, Mesh)
        and _foreign(value.mesh.devices.flat[0])
    ):
        out = NamedSharding(
            target_mesh(target, value.mesh), value.spec, memory_kind=value.memory_kind
        )
        return _with_kind(out, value.memory_kind) if keep_host else out
    if isinstance(value, SingleDeviceSharding) and _foreign(next(iter(value.device_set))):
        return _replicated(target, value.memory_kind, keep_host=keep_host)
    if isinstance(value, Mesh) and value.devices.size and _foreign(value.devices.flat[0]):
        return target_mesh(target, value)
    if isinstance(value, tuple) and value and not hasattr(value, "_fields"):
        return tuple(_translate(scope, v, keep_host) for v in value)
    return value


def _foreign(device) -> bool:
    return getattr(device, "platform", "gpu") != "gpu"


def _make_bind(original: Callable) -> Callable:
    def bind(*args, **params):
        scope = _active.get()
        if scope is not None:
            params = {k: _translate(scope, v) for k, v in params.items()}
        return original(*args, **params)

    bind._planner_original = original  # type: ignore[attr-defined]
    return bind


_install_lock = threading.Lock()
_installed = 0
_restore: list[Callable[[], None]] = []


def _install() -> None:
    global _installed
    with _install_lock:
        _installed += 1
        if _installed > 1:
            return
        try:
            fa = importlib.import_module(_FUSED_ATTENTION)
            for name in _CAPABILITY_CHECKS:
                original = _internal(_FUSED_ATTENTION, name)
                setattr(fa, name, _make_capability_check(name, original))
                _restore.append(functools.partial(setattr, fa, name, original))
            for module, name in _SHARDING_PRIMITIVES:
                prim = _internal(module, name)
                had = "bind" in vars(prim)
                before = vars(prim).get("bind")
                prim.bind = _make_bind(prim.bind)
                _restore.append(functools.partial(_restore_bind, prim, had, before))
        except BaseException:
            _installed -= 1
            _undo()
            raise


def _restore_bind(prim, had: bool, before) -> None:
    if had:
        prim.bind = before
    else:
        del prim.bind


def _undo() -> None:
    while _restore:
        _restore.pop()()


def _uninstall() -> None:
    global _installed
    with _install_lock:
        _installed -= 1
        if _installed == 0:
            _undo()


@contextlib.contextmanager
def target_scope(target: CompilerTarget) -> Iterator[None]:
    """While tracing / lowering for ``target``: JAX's cuDNN checks answer for its compute
    capability and shardings of this machine's devices move onto its mesh. Scoped to the
    calling context (other threads are untouched) and undone on exit; re-entrant. A no-op for
    a local target."""
    if target.kind != "deviceless":
        yield
        return
    _install()
    token = _active.set(_Scope(target, _capability(target.compute_capability or "0.0")))
    try:
        yield
    finally:
        _active.reset(token)
        _uninstall()


# ---------------------------------------------------------------------- compiling

# What jax.jit says when a step it traces or lowers mixes this machine's devices (or their
# memory kinds) with the target's: a user's jit with in_shardings / out_shardings on a CPU mesh
# that could not be moved onto the target (see lower()).
_FOREIGN_DEVICE_ERRORS = (
    "incompatible devices",
    "Memory kinds passed to jax.jit",
    "device assignment",
)

# JAX internal: jax.stages.Traced keeps the jit's own shardings in ``_params`` (jax/_src/
# stages.py, the same keys in JAX 0.10.2 and 0.12.0.1): a tuple per flattened argument /
# output, UnspecifiedValue where the user gave none. A step jitted with ``out_shardings`` (or
# ``in_shardings``) on this machine's mesh keeps them there; lower() moves them onto the target.
_TRACED_SHARDINGS = ("in_shardings", "out_shardings")

# What the CUDA runtime says when XLA:GPU, compiling without a device, calls it anyway.
_NEEDS_DEVICE = re.compile(
    r"cudaErrorInvalidDevice|cudaErrorNoDevice|CUDA_ERROR_NO_DEVICE|CUDA_ERROR_INVALID_DEVICE"
    r"|no CUDA-capable device"
)


def _traced_on_target(scope: _Scope, traced):
    """``traced`` with the jit's own in / out shardings of this machine's devices moved onto
    the target mesh of the same shape and axis names (the same partition specs and memory
    kinds); ``traced`` itself when it names none."""
    params = getattr(traced, "_params", None)
    if not isinstance(params, dict):
        return traced
    moved = {
        k: _translate(scope, params[k], keep_host=k == "in_shardings")
        for k in _TRACED_SHARDINGS
        if k in params
    }
    if all(
        all(a is b for a, b in zip(moved[k], params[k], strict=True))
        if isinstance(params[k], tuple)
        else moved[k] is params[k]
        for k in moved
    ):
        return traced
    out = copy.copy(traced)
    out._params = {**params, **moved}
    if hasattr(out, "_lojax"):
        out._lojax = None  # the low-level form is derived from _params: derive it again
    return out


def lower(traced):
    """``traced.lower()``, for the target in scope (:func:`target_scope`): a step the user
    jitted with ``out_shardings`` / ``in_shardings`` on this machine's mesh lowers with them
    on the target mesh (the outputs re-sharded as the user asked, on the target's devices).
    A placement that cannot be moved raises :class:`TargetError` with the fix. Outside a
    deviceless scope: ``traced.lower()``.

    JAX's "Some donated buffers were not usable" warning is silenced here: the planner
    lowers the step once per anchor, verify and fill round, and the warning (about the
    step's own donation, e.g. ``eqx.filter_jit(donate="all")`` donating the batch, which
    Equinox itself silences) says nothing about the plan; the step warns as it always did
    when the user runs it."""
    scope = _active.get()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
        if scope is None:
            return traced.lower()
        try:
            return _traced_on_target(scope, traced).lower()
        except ValueError as e:
            if any(m in str(e) for m in _FOREIGN_DEVICE_ERRORS):
                raise _foreign_device_error(scope.target, e) from e
            raise


def at_once(calls: Sequence[Callable[[], Any]], workers: int) -> list[tuple[Any, float]]:
    """Run ``calls`` (compiles: XLA compiles without holding the GIL) on ``workers`` threads,
    each in a copy of the caller's context (a deviceless target's scope, a ``ContextVar``,
    travels with it), and return each call's result with its own wall seconds, in order.
    Fewer than two workers or calls: one after the other on this thread. A call that raises
    raises here, after the others have finished."""
    import concurrent.futures
    import time

    def timed(call):
        t = time.perf_counter()
        return call(), time.perf_counter() - t

    if workers < 2 or len(calls) < 2:
        return [timed(c) for c in calls]
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(contextvars.copy_context().run, timed, c) for c in calls]
        concurrent.futures.wait(futures)
    return [f.result() for f in futures]


def _foreign_device_error(target: CompilerTarget, e: Exception) -> TargetError:
    return TargetError(
        f"The step names devices of this machine where {target.description} needs its own: "
        f"{str(e)[:400]}\nWhy: a deviceless compile runs on the target's compile-only "
        "devices; the planner moves NamedShardings of this machine's mesh onto the target mesh "
        "of the same shape and axis names, and this placement is not one of those.\nFix: pass "
        "the step un-jitted (or jitted with in_shardings / out_shardings as NamedSharding on "
        "a Mesh of the step's devices, or as PartitionSpecs); args_for() places the arguments."
    )


# What XLA:GPU says when its autotuner, compiling on a live GPU, cannot allocate the buffers to
# time a kernel's candidates: the program is bigger than the free HBM (e.g. a save-everything
# anchor at a large batch: "All configs failed during profiling"). The compile itself needs no
# such memory.
_AUTOTUNE_FAILED = re.compile(
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
DEVICELESS_COMPILE_OPTIONS = {"xla_gpu_enable_triton_gemm": False}
# ... but the *kernels* of that program are not the device's: with Triton GEMMs off XLA splits
# the masked score matmul from its epilogue and runs a saved matmul twice to write it into a
# scan's stacked residual. With them on, the deviceless program's fusions are the device's
# kernels (instruction names and per-kind device time within 1.5 ms a step of the H200's own
# compile of the MoE example; measured: benchmarks/results/hlo-kernel-time-2026-12-05.md, section 3).
# So the compile whose HLO prices the recompute kernel by kernel (trace.py,
# recompute_shares.region_recompute_seconds) keeps XLA:GPU's default.
PRICING_COMPILE_OPTIONS = {"xla_gpu_enable_triton_gemm": True}
# The JAX backends whose compiled programs are XLA:GPU's (CUDA), deviceless ("cuda") or live:
# what kernels.py prices and schedule.py replays.
XLA_GPU_BACKENDS = frozenset({"cuda", "gpu"})


def pricing_compile_options() -> dict[str, Any] | None:
    """The options of the compile whose HLO prices kernels, where that is not the compile
    already made: a deviceless target in scope -> :data:`PRICING_COMPILE_OPTIONS` (one more
    compile); a live GPU (no target in scope) -> None: its own compile is the device's program."""
    return dict(PRICING_COMPILE_OPTIONS) if _active.get() is not None else None


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
    session's pool copy the context), live-GPU compiles of :func:`compile_lowered` read and
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
    if _active.get() is None and jax.default_backend() == "gpu":
        return dict(PROBE_COMPILE_OPTIONS)
    return {}


def compile_lowered(lowered, compiler_options: dict[str, Any] | None = None):
    """``lowered.compile(compiler_options)``; for a deviceless target in scope, an XLA:GPU
    compile that calls the CUDA runtime (which needs a GPU) raises :class:`TargetError`
    saying so, instead of XLA's raw ``cudaErrorInvalidDevice``. On a live GPU, a compile
    whose autotuner ran out of device memory (the program does not fit the free HBM) is
    compiled again without autotuning, with a warning: its bytes are the compiler's, its
    kernels XLA's defaults (as in a deviceless compile). Within :func:`autotune_cache`, a
    live-GPU compile keeps its autotune results in that directory."""
    scope = _active.get()
    options = dict(compiler_options or {})
    if scope is not None:  # deviceless: see DEVICELESS_COMPILE_OPTIONS (the caller's win)
        options = {**DEVICELESS_COMPILE_OPTIONS, **options}
    elif _autotune_cache.get() is not None and jax.default_backend() == "gpu":
        Path(_autotune_cache.get()).mkdir(parents=True, exist_ok=True)
        options.setdefault(AUTOTUNE_CACHE_FLAG, _autotune_cache.get())
    try:
        return lowered.compile(compiler_options=options or None)
    except RuntimeError as e:  # jax.errors.JaxRuntimeError is one
        if scope is None and _AUTOTUNE_FAILED.search(str(e)) and not options.keys() & AUTOTUNE_OFF:
            warnings.warn(
                "XLA:GPU's autotuner ran out of device memory while compiling the step (the "
                "program needs more HBM than is free, as a save-everything compile at a large "
                "batch can); compiled again with xla_gpu_autotune_level=0. Its memory figures "
                "are the compiler's; its kernels are XLA's defaults.",
                PlanWarning,
                stacklevel=2,
            )
            return lowered.compile(compiler_options={**options, **AUTOTUNE_OFF})
        if scope is None or not _NEEDS_DEVICE.search(str(e)):
            raise
        raise _needs_device_error(scope.target, lowered, e) from e


def _sorts(lowered) -> int:
    """How many sorts the lowered program has (its StableHLO text); -1 when unreadable."""
    try:
        return len(re.findall(r"\bstablehlo\.sort\b|\bmhlo\.sort\b", lowered.as_text()))
    except Exception:  # noqa: BLE001  (only for the message)
        return -1


def _gpu_label(target: CompilerTarget) -> str:
    try:
        return _gpu(target.gpu_name).label if target.gpu_name else "target GPU"
    except TargetError:
        return target.gpu_name or "target GPU"


def _needs_device_error(target: CompilerTarget, lowered, e: Exception) -> TargetError:
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


class TargetProgram(NamedTuple):
    """One trace and its compile for a target."""

    traced: Any  # jax.stages.Traced (.jaxpr: the traced program)
    compiled: Any  # jax.stages.Compiled


def compile_traced(
    target: CompilerTarget,
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
    with target_scope(target), adapter.isolated_traces():
        try:
            traced = adapter.jit_trace(fn_to_trace, target_args)
        except ValueError as e:
            if any(m in str(e) for m in _FOREIGN_DEVICE_ERRORS):
                raise _foreign_device_error(target, e) from e
            raise
        compiled = compile_lowered(lower(traced), compiler_options)
    return TargetProgram(traced=traced, compiled=compiled)


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
