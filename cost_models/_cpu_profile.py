"""This machine's CPU profile: a short measured calibration of XLA:CPU through JAX (matmul
rates per dtype, memory bandwidth, the vector rate and the per-kernel launch cost, each over a
range of sizes), cached per machine in the user's cache directory.

``hardware="cpu"`` plans with it (cost_models/_load.py); the shipped ``cpu`` profile, whose
figures are made up for tests, stays available as ``"cpu-made-up"``, or for ``"cpu"`` too
where ``PLANNER_CPU_PROFILE=made-up`` (the test suite sets it, so that its figures do not
depend on the machine that runs it).

Cache: ``$PLANNER_CACHE_DIR``, else ``$XDG_CACHE_HOME/jax-offload-planner``, else
``~/.cache/jax-offload-planner``; one file per machine key (CPU model, cores this process may
use, jax and jaxlib versions, XLA_FLAGS, which change XLA:CPU's code and its device count).
A file that cannot be read, parsed or validated, or that holds another key, is measured again
and replaced; a cache that cannot be written is said once in a warning, never an error.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import platform
import statistics
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from ._calibrate import (
    _FMA_A,
    _FMA_B,
    _LAUNCH_CHAIN,
    _LAUNCH_N,
    _VECTOR_FMAS,
    CalibrationError,
    _fma_chain,
    _in_place_seconds,
    _launch_seconds,
    _matmul_seconds,
)
from ._profile_figures import ProfileError
from ._profile_files import load_profile_file
from ._profiles import HardwareProfile, LinkProfile

CALIBRATED = "cpu-calibrated"  # the calibrated profile's name (and a name load_profile takes)
MADE_UP = "cpu-made-up"  # the shipped made-up profile, whatever PLANNER_CPU_PROFILE says
PROFILE_ENV = "PLANNER_CPU_PROFILE"  # what "cpu" means: "calibrated" (default) or "made-up"
CACHE_ENV = "PLANNER_CACHE_DIR"
_CHOICES = ("calibrated", "made-up")
# The cache file's layout; a file of another version is measured again.
_FORMAT = 1
# The sizes measured: square matmuls of these sides per dtype class (a train step's matmuls on
# a CPU: 64 to 1024 wide), in-place negations of these MiB of fp32 (L2-resident to beyond this
# machine's L2), and one FMA chain. The profile holds one rate per figure: the geometric mean
# of the rates over the sizes, so that no size's relative error is favoured (each size's rate
# is in the figure's source).
_MATMUL_SIZES: Mapping[str, tuple[int, ...]] = {
    "fp32": (128, 256, 512, 1024),
    "bf16": (128, 256, 512, 1024),
    "fp16": (128, 512),
}
_DTYPES = {"fp32": jnp.float32, "bf16": jnp.bfloat16, "fp16": jnp.float16}
_BANDWIDTH_MIB = (1.0, 4.0, 16.0, 64.0)
_VECTOR_MIB = 4.0
_REPEATS = 5
# XLA:CPU has no idle clocks to wake (a GPU's calibration warms up 0.2 s per measurement);
# the fastest repeat, not the median: a CPU is shared with other work, which only slows a
# repeat down, and the profile describes the machine, not its load at one moment.
_TIMING = {"warmup_s": 0.02, "fastest": True}
_NOTE = "this machine's calibration"
_MIB = 2**20

_loaded: dict[str, HardwareProfile] = {}  # cache file -> profile, for this process


def wanted() -> str:
    """What ``hardware="cpu"`` means here: "calibrated" (default) or "made-up"
    (``PLANNER_CPU_PROFILE``)."""
    got = os.environ.get(PROFILE_ENV, "").strip().lower() or "calibrated"
    if got not in _CHOICES:
        raise ProfileError(
            f"{PROFILE_ENV}={os.environ[PROFILE_ENV]!r} is not one of {_CHOICES}. It says what "
            "hardware='cpu' plans with: 'calibrated' (this machine, measured once and cached) "
            "or 'made-up' (the shipped test figures). Unset it for the default."
        )
    return got


def cache_dir() -> Path:
    """Where calibrations are cached: $PLANNER_CACHE_DIR, else $XDG_CACHE_HOME/
    jax-offload-planner, else ~/.cache/jax-offload-planner."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "jax-offload-planner"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def machine() -> dict[str, object]:
    """The cache key: what the figures depend on."""
    import jaxlib

    return {
        "format": _FORMAT,
        "cpu": _cpu_model(),
        "cores": _cores(),
        "jax": jax.__version__,
        "jaxlib": getattr(jaxlib, "__version__", "?"),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


def cache_path(key: Mapping[str, object] | None = None) -> Path:
    """The cache file of ``key`` (default: this machine's)."""
    key = machine() if key is None else key
    digest = hashlib.sha256(json.dumps(dict(key), sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / "cpu-profiles" / f"{digest}.json"


def _cpu_device() -> Any:
    try:
        return jax.devices("cpu")[0]
    except RuntimeError as err:
        raise CalibrationError(
            f"hardware='cpu' calibrates this machine's CPU through JAX, but JAX has no CPU "
            f"backend here ({err}). Fix: allow it (JAX_PLATFORMS='cpu' or unset), or plan with "
            f"the made-up figures: hardware='{MADE_UP}' (or {PROFILE_ENV}=made-up)."
        ) from None


def _geomean(rates: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(r) for r in rates))


def _rate(work: float, seconds: float, dispatch_s: float) -> float:
    """``work`` per second of one call, less the call's fixed cost (JAX's dispatch of a
    one-element program, which the cost model does not count per kernel); never above twice
    the rate of the call as timed (a size so small that the dispatch is most of it)."""
    return work / max(seconds - dispatch_s, seconds / 2)


def _ram_per_device(devices: int) -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / devices
    except (ValueError, OSError, AttributeError):  # sysconf names are platform-specific
        return 16e9 / devices


def calibrate_cpu(
    *,
    repeats: int = _REPEATS,
    matmul_sizes: Mapping[str, Sequence[int]] = _MATMUL_SIZES,
    bandwidth_mib: Sequence[float] = _BANDWIDTH_MIB,
    vector_mib: float = _VECTOR_MIB,
) -> HardwareProfile:
    """Measure this machine's CPU (JAX's first CPU device) into a profile named
    "cpu-calibrated"; every figure's source says how it was measured or derived."""
    device = _cpu_device()
    try:  # other work on the machine slows the measurement: the description says how much
        load = f", load average {os.getloadavg()[0]:.1f} at the start"
    except (AttributeError, OSError):  # no getloadavg (Windows)
        load = ""
    started = time.perf_counter()
    when = datetime.datetime.now(datetime.UTC)
    key = machine()
    stamp = (
        f"measured by cost_models' CPU calibration on {key['cpu']} ({key['cores']} cores, "
        f"jax {key['jax']}) {when:%Y-%m-%d}"
    )

    def seconds(fn, nbytes: int) -> float:
        return _in_place_seconds(device, nbytes, fn, repeats, **_TIMING)

    dispatch_s = seconds(jnp.negative, 4)
    sources: dict[str, str] = {}
    rates: dict[str, float] = {}
    for cls, sides in matmul_sizes.items():
        per = {
            n: _rate(
                2 * n**3,
                _matmul_seconds(device, n, _DTYPES[cls], None, repeats, **_TIMING),
                dispatch_s,
            )
            for n in sides
        }
        rates[cls] = _geomean(list(per.values()))
        sources[f"matmul_flops_per_s.{cls}"] = (
            f"{stamp}: geometric mean over square {jnp.dtype(_DTYPES[cls]).name} matmuls, "
            f"random data, fastest of {repeats} (dispatch of {dispatch_s * 1e6:.1f} us per call "
            "taken off): " + ", ".join(f"{n}^3 {r / 1e9:.1f} GFLOP/s" for n, r in per.items())
        )
    bandwidth = {
        mib: _rate(2 * int(mib * _MIB) // 4 * 4, seconds(jnp.negative, int(mib * _MIB)), dispatch_s)
        for mib in bandwidth_mib
    }
    hbm = _geomean(list(bandwidth.values()))
    sources["hbm_bytes_per_s"] = (
        f"{stamp}: geometric mean over in-place fp32 negations, bytes read plus written, "
        f"fastest of {repeats}: "
        + ", ".join(f"{m:g} MiB {r / 1e9:.1f} GB/s" for m, r in bandwidth.items())
    )
    vbytes = int(vector_mib * _MIB)
    vector = _rate(2 * _VECTOR_FMAS * (vbytes // 4), seconds(_fma_chain, vbytes), dispatch_s)
    sources["vector_flops_per_s"] = (
        f"{stamp}: a chain of {_VECTOR_FMAS} fp32 FMAs (x * {_FMA_A} + {_FMA_B}) per element "
        f"over {vector_mib:g} MiB, fastest of {repeats}"
    )
    launch = _launch_seconds(device, repeats, **_TIMING)
    sources["kernel_launch_s"] = (
        f"{stamp}: a chain of {_LAUNCH_CHAIN} dependent {_LAUNCH_N}x{_LAUNCH_N} matmuls minus "
        f"a chain of 1, per matmul (XLA:CPU runs each as its own thunk), fastest of {repeats}"
    )
    devices = len(jax.devices("cpu"))
    ram = _ram_per_device(devices)
    ram_src = f"physical RAM (sysconf) / {devices} JAX CPU device(s) sharing it"
    memcpy = hbm / 2  # a copy reads each byte and writes it: half the read + write rate
    memcpy_src = (
        f"derived: half the measured read + write bandwidth ({hbm / 1e9:.1f} GB/s), as a "
        "copy reads and writes each byte"
    )
    no_offload = (
        "XLA:CPU's pinned_host is the same DRAM as the 'device', so offloading frees none of "
        "the budget and the planner turns offload off for a CPU target (planner/_src/planning/"
        "inputs.py, offload_choice); priced only under an explicit allow_offload=True"
    )
    sources |= {
        "hbm_bytes": ram_src,
        "ici_bytes_per_s": f"{memcpy_src}: JAX's CPU devices share one DRAM",
        "overlap_efficiency": f"0: not measured; {no_offload}",
        "link.d2h_bytes_per_s": f"{memcpy_src}; {no_offload}",
        "link.h2d_bytes_per_s": f"{memcpy_src}; {no_offload}",
        "link.latency_s": "the measured kernel launch time (a copy inside a program is a thunk)",
        "link.copy_engines": "one memcpy at a time (a CPU has no copy engines)",
        "link.host_pinned_bytes": ram_src,
        "loop_copy_bytes_per_s": "none: loop-slice copies are priced on XLA:GPU only",
    }
    base = load_profile_file("cpu")
    link = LinkProfile(
        kind="host-memory",
        d2h_bytes_per_s=memcpy,
        h2d_bytes_per_s=memcpy,
        latency_s=launch,
        copy_engines=1,
        host_pinned_bytes=ram,
    )
    took = time.perf_counter() - started
    return base.replace(
        name=CALIBRATED,
        description=(
            f"{_NOTE} ({key['cpu']}, {key['cores']} cores, jax {key['jax']}, measured "
            f"{when:%Y-%m-%d %H:%M} UTC in {took:.1f} s{load})"
        ),
        hbm_bytes=ram,
        hbm_bytes_per_s=hbm,
        matmul_flops_per_s=rates,
        vector_flops_per_s=vector,
        ici_bytes_per_s=memcpy,
        overlap_efficiency=0.0,
        kernel_launch_s=launch,
        link=link,
        sources=sources,
    )


def calibration_note(hw: object) -> str:
    """ "this machine's calibration (CPU, cores, jax, when measured, cached at ...)" for a
    profile from :func:`this_cpu_profile`; "" for any other."""
    desc = str(getattr(hw, "description", ""))
    return desc if getattr(hw, "name", "") == CALIBRATED and desc.startswith(_NOTE) else ""


def _read(path: Path, key: Mapping[str, object]) -> HardwareProfile:
    """The cached profile at ``path``; ValueError where it is not one of ``key``."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("machine") != dict(key):
        raise ValueError("it was measured for another machine key")
    profile = HardwareProfile.from_json(data["profile"], where=str(path))
    if profile.name != CALIBRATED or not profile.description.startswith(_NOTE):
        raise ValueError(f"it holds profile {profile.name!r}, not a calibration")
    return profile


def _write(path: Path, key: Mapping[str, object], profile: HardwareProfile) -> bool:
    """Write atomically (a temporary file renamed); False where the cache is not writable."""
    body = {"machine": dict(key), "profile": profile.to_json()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(body, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except OSError as err:
        warnings.warn(
            f"this CPU's calibration could not be cached at {path} ({err.strerror or err}); "
            f"it is measured again in each process. Fix: set {CACHE_ENV} to a writable "
            "directory.",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    return True


def this_cpu_profile(*, refresh: bool = False) -> HardwareProfile:
    """This machine's calibrated CPU profile: from the cache, else measured (a few seconds)
    and cached. ``refresh``: measure again whatever the cache holds."""
    key = machine()
    path = cache_path(key)
    if not refresh and str(path) in _loaded:
        return _loaded[str(path)]
    profile = None
    if not refresh and path.exists():
        try:
            profile = _read(path, key)
        except (OSError, ValueError, KeyError, TypeError, AttributeError, ProfileError) as err:
            warnings.warn(
                f"the cached CPU calibration {path} is unusable ({str(err)[:200]}); this "
                "machine is measured again and the file replaced.",
                RuntimeWarning,
                stacklevel=3,
            )
    if profile is None:
        profile = calibrate_cpu()
        if not _write(path, key, profile):
            _loaded[str(path)] = profile
            return profile
    profile = profile.replace(
        description=f"{profile.description.removesuffix(')')}, cached at {path})"
    )
    _loaded[str(path)] = profile
    return profile
