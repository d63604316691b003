"""Measure the live device's figures, and how much a host copy hides behind compute.

Every timing is the median of `repeats` timed runs, after a compiling call and a warm-up, each
ended by `jax.block_until_ready`.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from ._gpus import for_device_kind
from ._profile_files import load_profile_file as load_profile
from ._profiles import HardwareProfile


class CalibrationError(RuntimeError):
    """A measurement that could not be made on this device or in this environment."""


# Matmul size: 8192^3 on accelerators, the size of the bf16 measurement in the device pool's
# machine notes (KINDS.md, outside this repository: 788 TFLOP/s on an H200, about 1.4 ms per
# product); 512^3 on CPU keeps it ~10 ms.
_ACCELERATOR_MATMUL_N = 8192
_CPU_MATMUL_N = 512
# Matmul classes measured, with the precision that selects them. TF32 exists only on NVIDIA
# GPUs (Ampere and later); "fp8" keeps the base profile's figure.
_MATMUL_CASES: Mapping[str, tuple[Any, Any]] = {
    "bf16": (jnp.bfloat16, None),
    "fp16": (jnp.float16, None),
    "tf32": (jnp.float32, lax.DotAlgorithmPreset.TF32_TF32_F32),
    "fp32": (jnp.float32, lax.Precision.HIGHEST),
}
_GPU_ONLY_CASES = ("tf32",)
# Dependent FMAs per element for the vector rate: 2 * 256 FLOPs per 8 bytes moved is 64 FLOP/B,
# above the fp32 ridge point of every shipped profile (H200: 67 TFLOP/s / 4.8 TB/s = 14 FLOP/B),
# so the chain is compute-bound. The coefficients only keep values bounded (|a| < 1).
_VECTOR_FMAS = 256
_FMA_A, _FMA_B = 0.999, 0.001
# Kernel launch overhead: a chain of dependent tiny matmuls (XLA does not fuse dots with each
# other), timed at two lengths so that the per-call dispatch cost cancels.
_LAUNCH_CHAIN = 64
_LAUNCH_N = 8
# Longest matmul chain the overlap probe builds to match the copy time.
_MAX_OVERLAP_MATMULS = 256
# GPUs idle at low clocks (the device pool's machine notes, KINDS.md, outside this repository:
# SM 345 MHz idle, 1980 MHz just after a matmul burst) and need sustained work to reach boost clocks: 0.2 s of back-to-back calls before timing.
_WARMUP_S = 0.2
# A batched repeat runs the call back to back for at least 20 ms and waits once, so that Python
# dispatch and the final sync (tens of microseconds) stay under a percent of the time measured.
_REPEAT_S = 0.02
_MAX_CALLS_PER_REPEAT = 64
_MIB = 2**20


def _seconds_per_call(
    step: Callable[[], Any],
    *,
    repeats: int,
    batched: bool = False,
    warmup_s: float = _WARMUP_S,
    fastest: bool = False,
) -> float:
    """Median seconds per `step()` call (`fastest`: the fastest repeat's).

    `batched`: each repeat runs enough calls back to back to last _REPEAT_S and waits once (for
    throughput measurements, where dispatch would otherwise count). Unbatched: one call per repeat
    (for transfers, which could overlap across calls, and for the differential chains).
    `warmup_s`: back-to-back calls before timing (a CPU has no idle clocks to wake: shorter).
    `fastest`: on a machine shared with other work, which only ever slows a repeat down.
    """
    jax.block_until_ready(step())  # compiles
    calls, start = 0, time.perf_counter()
    while calls == 0 or time.perf_counter() - start < warmup_s:
        jax.block_until_ready(step())
        calls += 1
    per_call = (time.perf_counter() - start) / calls
    batch = min(_MAX_CALLS_PER_REPEAT, math.ceil(_REPEAT_S / per_call)) if batched else 1
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(batch):
            out = step()
        jax.block_until_ready(out)
        times.append((time.perf_counter() - start) / batch)
    return min(times) if fastest else statistics.median(times)


def _default_matmul_n(device: Any) -> int:
    return _CPU_MATMUL_N if device.platform == "cpu" else _ACCELERATOR_MATMUL_N


def _has_pinned_host(device: Any) -> bool:
    return "pinned_host" in {memory.kind for memory in device.addressable_memories()}


def _random(device: Any, shape: tuple[int, ...], dtype: Any, seed: int = 0) -> jax.Array:
    # Random data: tensor cores run faster on zeros (the device pool's machine notes, KINDS.md,
    # outside this repository: 894 vs 788 TFLOP/s).
    x = jax.random.normal(jax.random.key(seed), shape, dtype)
    return jax.device_put(x, device)


def _matmul_seconds(
    device: Any, n: int, dtype: Any, precision: Any, repeats: int, **timing: Any
) -> float:
    a, b = _random(device, (n, n), dtype, 0), _random(device, (n, n), dtype, 1)
    product = jax.jit(lambda a, b: lax.dot(a, b, precision=precision))
    return _seconds_per_call(lambda: product(a, b), repeats=repeats, batched=True, **timing)


def _in_place_seconds(
    device: Any,
    nbytes: int,
    fn: Callable[[jax.Array], jax.Array],
    repeats: int,
    **timing: Any,
) -> float:
    """Seconds per call of `fn` applied in place (donated) to `nbytes` of fp32, call after call."""
    state = {"x": _random(device, (nbytes // 4,), jnp.float32)}
    update = jax.jit(fn, donate_argnums=0)

    def step() -> jax.Array:
        state["x"] = update(state["x"])
        return state["x"]

    return _seconds_per_call(step, repeats=repeats, batched=True, **timing)


def _fma_chain(x: jax.Array) -> jax.Array:
    for _ in range(_VECTOR_FMAS):
        x = x * _FMA_A + _FMA_B
    return x


def _vector_rate(device: Any, nbytes: int, repeats: int) -> float:
    return 2 * _VECTOR_FMAS * (nbytes // 4) / _in_place_seconds(device, nbytes, _fma_chain, repeats)


# Fused attention (cuDNN flash attention, causal, bf16, BTNH) measured at these key lengths,
# 32768 tokens each (batch = 32768 / length), 32 query heads, 8 KV heads, head dim 128: the
# shapes of the Llama example and the long-context decoder (benchmarks/compute_rates.py).
_ATTENTION_LENGTHS = (4096, 16384)
_ATTENTION_TOKENS = 32768
_ATTENTION_HEADS, _ATTENTION_KV_HEADS, _ATTENTION_HEAD_DIM = 32, 8, 128


def causal_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """The fused attention measured: cuDNN's, causal (BTNH operands)."""
    return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn")


def causal_attention_fwd_bwd(q: jax.Array, k: jax.Array, v: jax.Array) -> tuple:
    """Forward and backward of `causal_attention` (the output as its own cotangent)."""
    out, vjp = jax.vjp(causal_attention, q, k, v)
    return vjp(out)


def attention_seconds(
    device: Any, batch: int, length: int, repeats: int, *, heads: tuple[int, int] = (32, 8)
) -> tuple[float, float]:
    """(forward, forward and backward) seconds of `causal_attention` at `batch` x `length`,
    `heads` = (query, KV) heads of _ATTENTION_HEAD_DIM, bf16, back-to-back calls."""
    d = _ATTENTION_HEAD_DIM
    q, k, v = (
        _random(device, (batch, length, h, d), jnp.bfloat16, seed)
        for seed, h in enumerate((heads[0], heads[1], heads[1]))
    )
    fwd_s = _seconds_per_call(functools.partial(_FWD, q, k, v), repeats=repeats, batched=True)
    both_s = _seconds_per_call(functools.partial(_FWD_BWD, q, k, v), repeats=repeats, batched=True)
    return fwd_s, both_s


_FWD, _FWD_BWD = jax.jit(causal_attention), jax.jit(causal_attention_fwd_bwd)


def _attention_rates(device: Any, repeats: int) -> dict[str, dict[int, float]]:
    """{"fwd": {length: FLOP/s}, "bwd": {...}} of `causal_attention`, FLOPs by
    cost_models/_rules_matrix.py's formulas (forward 4 b h t s d x 0.5 for causal, backward 2.5x);
    the backward is the forward-and-backward time minus the forward's."""
    rates: dict[str, dict[int, float]] = {"fwd": {}, "bwd": {}}
    heads = (_ATTENTION_HEADS, _ATTENTION_KV_HEADS)
    for length in _ATTENTION_LENGTHS:
        b = max(1, _ATTENTION_TOKENS // length)
        fwd_s, both_s = attention_seconds(device, b, length, repeats, heads=heads)
        fwd_flops = 2 * (b * heads[0] * length * length * 0.5) * 2 * _ATTENTION_HEAD_DIM
        rates["fwd"][length] = fwd_flops / fwd_s
        rates["bwd"][length] = 2.5 * fwd_flops / max(both_s - fwd_s, 1e-9)
    return rates


def _hbm_rate(device: Any, nbytes: int, repeats: int) -> float:
    """Bytes read plus bytes written per second by an elementwise pass over `nbytes`."""
    return 2 * (nbytes // 4 * 4) / _in_place_seconds(device, nbytes, jnp.negative, repeats)


def _launch_seconds(device: Any, repeats: int, **timing: Any) -> float:
    """Fixed time per kernel: (t(chain of _LAUNCH_CHAIN tiny matmuls) - t(chain of 1)) / (n - 1)."""
    w = _random(device, (_LAUNCH_N, _LAUNCH_N), jnp.float32)

    def timed(length: int) -> float:
        def run(x: jax.Array) -> jax.Array:
            for _ in range(length):
                x = x @ w
            return x

        program = jax.jit(run)
        return _seconds_per_call(lambda: program(w), repeats=repeats, **timing)

    return max(0.0, (timed(_LAUNCH_CHAIN) - timed(1)) / (_LAUNCH_CHAIN - 1))


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkMeasurement:
    """Host link bandwidth per direction, from jax.device_put of the largest size."""

    d2h_bytes_per_s: float
    h2d_bytes_per_s: float
    detail: str  # per-size rates, for the source citation


def _measure_link(device: Any, sizes_bytes: Sequence[int], repeats: int) -> LinkMeasurement:
    to_host = jax.sharding.SingleDeviceSharding(device, memory_kind="pinned_host")
    to_device = jax.sharding.SingleDeviceSharding(device, memory_kind="device")

    def times(nbytes: int) -> tuple[float, float]:
        x = _random(device, (nbytes // 4,), jnp.float32)
        on_host = jax.device_put(x, to_host)
        d2h = _seconds_per_call(lambda: jax.device_put(x, to_host), repeats=repeats)
        h2d = _seconds_per_call(lambda: jax.device_put(on_host, to_device), repeats=repeats)
        return d2h, h2d

    rates = {n: times(n) for n in sorted(sizes_bytes)}
    largest = max(rates)
    detail = "; ".join(
        f"{n / _MIB:g} MiB: d2h {n / d / 1e9:.1f} GB/s, h2d {n / h / 1e9:.1f} GB/s"
        for n, (d, h) in rates.items()
    )
    return LinkMeasurement(
        d2h_bytes_per_s=largest / rates[largest][0],
        h2d_bytes_per_s=largest / rates[largest][1],
        detail=detail,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class OverlapMeasurement:
    """Times of a matmul chain, a device-to-host copy, and both in one jitted program."""

    matmul_s: float
    copy_s: float
    both_s: float
    matmuls: int  # length of the chain, chosen so that matmul_s is close to copy_s
    copy_bytes: int

    @property
    def overlap(self) -> float:
        """(t_matmul + t_copy - t_both) / min(t_matmul, t_copy), clamped to [0, 1]: the share
        of the shorter activity that ran concurrently with the other."""
        hidden = self.matmul_s + self.copy_s - self.both_s
        return min(1.0, max(0.0, hidden / min(self.matmul_s, self.copy_s)))

    def to_json(self) -> dict[str, float]:
        return {**dataclasses.asdict(self), "overlap": self.overlap}


def measure_overlap(
    *, size_mb: float = 256, repeats: int = 5, matmul_n: int | None = None
) -> OverlapMeasurement:
    """Time, in jitted programs on the default device: a chain of bf16 matmuls, a copy of
    `size_mb` MiB to pinned host memory (`jax.device_put` to a pinned_host sharding inside jit),
    and both together, with no data dependence between them.

    XLA_FLAGS must be set before JAX starts its backend; to compare flag sets, use
    `calibrate_overlap_with_flags`, which runs this in fresh processes.
    """
    device = jax.devices()[0]
    if not _has_pinned_host(device):
        raise CalibrationError(
            f"{device.device_kind} has no 'pinned_host' memory kind (memories: "
            f"{[m.kind for m in device.addressable_memories()]}), so nothing can be offloaded to "
            "host and there is no overlap to measure."
        )
    n = matmul_n or _default_matmul_n(device)
    to_host = jax.sharding.SingleDeviceSharding(device, memory_kind="pinned_host")
    x = _random(device, (int(size_mb * _MIB) // 4,), jnp.float32)
    a = _random(device, (n, n), jnp.bfloat16, 1)
    w = _random(device, (n, n), jnp.bfloat16, 2) * n**-0.5  # keeps the chain's values bounded

    copy = jax.jit(lambda x: jax.device_put(x, to_host))
    copy_s = _seconds_per_call(lambda: copy(x), repeats=repeats)
    one = jax.jit(lambda a, w: a @ w)
    one_s = _seconds_per_call(lambda: one(a, w), repeats=repeats)
    matmuls = min(_MAX_OVERLAP_MATMULS, max(1, round(copy_s / one_s)))

    def chain(a: jax.Array, w: jax.Array) -> jax.Array:
        for _ in range(matmuls):
            a = a @ w
        return a

    matmuls_only = jax.jit(chain)
    matmul_s = _seconds_per_call(lambda: matmuls_only(a, w), repeats=repeats)
    both = jax.jit(lambda a, w, x: (chain(a, w), jax.device_put(x, to_host)))
    both_s = _seconds_per_call(lambda: both(a, w, x), repeats=repeats)
    return OverlapMeasurement(
        matmul_s=matmul_s, copy_s=copy_s, both_s=both_s, matmuls=matmuls, copy_bytes=x.nbytes
    )


def _default_base(device: Any) -> str:
    if device.platform == "cpu":
        return "cpu"
    gpu = for_device_kind(device.device_kind)  # the shipped profile of the same GPU
    if gpu is not None:
        return gpu.name
    raise CalibrationError(
        f"no shipped profile matches device kind {device.device_kind!r}; pass base= (a profile "
        "name or path) for the figures calibrate does not measure (HBM size, ici, copy engines)."
    )


def _host_memory_per_device() -> float | None:
    """Physical RAM divided by the local devices that share it, or None where unknown."""
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # sysconf names are platform-specific
        return None
    return ram / jax.local_device_count()


def calibrate(
    *,
    out_path: str | os.PathLike[str] | None = None,
    base: str | os.PathLike[str] | HardwareProfile | None = None,
    sizes_mb: Sequence[float] = (256, 1024),
    repeats: int = 5,
    matmul_n: int | None = None,
) -> HardwareProfile:
    """Measure the default JAX device and return `base` with the measured figures replaced.

    Measured: matmul rates (bf16, fp16, fp32, and tf32 on GPU) on `matmul_n`^3 products (8192 on
    accelerators, 512 on CPU), on GPUs the fused (cuDNN) attention rates forward and backward at
    key lengths 4096 and 16384, the vector rate, HBM bandwidth (read + write of the largest size),
    kernel launch overhead, the host link both ways at each of `sizes_mb` (MiB; bandwidth from
    the largest), and the overlap of a host copy with matmuls. The link's per-transfer latency
    is set to the kernel launch time: inside a compiled program XLA moves offloaded tensors with
    kernels on pinned host memory, and a device-to-host-to-device round trip inside jit is
    optimised away, so it cannot be timed on its own. HBM size, the
    device-to-device bandwidth, copy engines and the fp8 rate stay as in `base` (default: the
    shipped profile matching the device kind); the pinned host cap becomes at most this host's
    RAM per local device. Without a 'pinned_host' memory kind, link and overlap stay as in
    `base`, with a warning. Writes the profile as JSON to `out_path` if given.
    """
    device = jax.devices()[0]
    base_profile = load_profile(base if base is not None else _default_base(device))
    n = matmul_n or _default_matmul_n(device)
    largest = int(max(sizes_mb) * _MIB)
    today = datetime.date.today().isoformat()
    stamp = (
        f"measured by cost_models.calibrate on {device.device_kind} ({device.platform}, "
        f"jax {jax.__version__}) {today}"
    )
    sources: dict[str, str] = {}

    rates = dict(base_profile.matmul_flops_per_s)
    for key, (dtype, precision) in _MATMUL_CASES.items():
        if key in _GPU_ONLY_CASES and device.platform != "gpu":
            continue
        seconds = _matmul_seconds(device, n, dtype, precision, repeats)
        rates[key] = 2 * n**3 / seconds
        sources[f"matmul_flops_per_s.{key}"] = (
            f"{stamp}: {n}x{n}x{n} {jnp.dtype(dtype).name} matmul ({precision or 'default'} "
            f"precision), random data, median of {repeats}"
        )
    if device.platform == "gpu":
        try:
            attention = _attention_rates(device, repeats)
        except Exception as err:  # noqa: BLE001  (no cuDNN attention on this GPU or jaxlib)
            warnings.warn(
                f"fused attention (cuDNN) could not be measured ({type(err).__name__}: "
                f"{str(err)[:200]}); its rates stay as in profile {base_profile.name!r}.",
                RuntimeWarning,
                stacklevel=2,
            )
        else:
            rates_by_direction = {d: dict(t) for d, t in attention.items()}
            for direction in rates_by_direction:
                sources[f"attention_flops_per_s.{direction}"] = (
                    f"{stamp}: jax.nn.dot_product_attention(implementation='cudnn'), causal, "
                    f"bf16, {_ATTENTION_HEADS} query / {_ATTENTION_KV_HEADS} KV heads of "
                    f"{_ATTENTION_HEAD_DIM}, {_ATTENTION_TOKENS} tokens at key lengths "
                    f"{_ATTENTION_LENGTHS}, median of {repeats}"
                    + (
                        "; backward = forward and backward minus forward"
                        if direction == "bwd"
                        else ""
                    )
                )
    changes: dict[str, Any] = {
        "matmul_flops_per_s": rates,
        "vector_flops_per_s": _vector_rate(device, largest, repeats),
        "hbm_bytes_per_s": _hbm_rate(device, largest, repeats),
        "kernel_launch_s": _launch_seconds(device, repeats),
    }
    if device.platform == "gpu" and sources.get("attention_flops_per_s.fwd"):
        changes["attention_flops_per_s"] = rates_by_direction
    sources["vector_flops_per_s"] = (
        f"{stamp}: chain of {_VECTOR_FMAS} fp32 FMAs per element over {largest / _MIB:g} MiB"
    )
    sources["hbm_bytes_per_s"] = (
        f"{stamp}: in-place negation of {largest / _MIB:g} MiB fp32, bytes read plus written"
    )
    sources["kernel_launch_s"] = (
        f"{stamp}: chain of {_LAUNCH_CHAIN} dependent {_LAUNCH_N}x{_LAUNCH_N} matmuls minus a "
        "chain of 1, per matmul"
    )

    link = base_profile.link
    host_ram = _host_memory_per_device()
    if host_ram is not None and host_ram < link.host_pinned_bytes:
        link = dataclasses.replace(link, host_pinned_bytes=host_ram)
        sources["link.host_pinned_bytes"] = f"{stamp}: physical RAM / local devices (sysconf)"
    if _has_pinned_host(device):
        measured = _measure_link(device, [int(s * _MIB) for s in sizes_mb], repeats)
        link = dataclasses.replace(
            link,
            d2h_bytes_per_s=measured.d2h_bytes_per_s,
            h2d_bytes_per_s=measured.h2d_bytes_per_s,
            latency_s=changes["kernel_launch_s"],
        )
        sources["link.d2h_bytes_per_s"] = sources["link.h2d_bytes_per_s"] = (
            f"{stamp}: jax.device_put between 'device' and 'pinned_host', median of {repeats}; "
            f"{measured.detail}"
        )
        sources["link.latency_s"] = (
            f"{stamp}: the kernel launch time, since XLA moves offloaded activations with kernels "
            "(async dynamic-(update-)slice fusions on pinned host memory, "
            "benchmarks/results/h200-2026-11-30-shared-probe/h200-probe-2026-11-30.md)"
        )
        overlap = measure_overlap(size_mb=max(sizes_mb), repeats=repeats, matmul_n=matmul_n)
        changes["overlap_efficiency"] = overlap.overlap
        sources["overlap_efficiency"] = (
            f"{stamp}: jitted {overlap.matmuls} bf16 {n}^3 matmuls {overlap.matmul_s * 1e3:.2f} "
            f"ms, device_put of {overlap.copy_bytes / _MIB:g} MiB to pinned_host "
            f"{overlap.copy_s * 1e3:.2f} ms, both {overlap.both_s * 1e3:.2f} ms; XLA_FLAGS="
            f"{os.environ.get('XLA_FLAGS', '')!r}"
        )
    else:
        warnings.warn(
            f"{device.device_kind} has no 'pinned_host' memory kind, so the host link and the "
            f"overlap were not measured; they stay as in profile {base_profile.name!r}.",
            RuntimeWarning,
            stacklevel=2,
        )
    profile = base_profile.replace(
        name=f"{base_profile.name}-calibrated",
        description=f"{base_profile.name} with figures {stamp}.",
        link=link,
        sources=sources,
        **changes,
    )
    if out_path is not None:
        Path(out_path).write_text(json.dumps(profile.to_json(), indent=2) + "\n", encoding="utf-8")
    return profile


# The directory holding the cost_models package, so that child processes can import it.
_PACKAGE_PARENT = Path(__file__).resolve().parent.parent


def calibrate_overlap_with_flags(
    flag_sets: Mapping[str, str],
    *,
    size_mb: float = 256,
    repeats: int = 5,
    matmul_n: int | None = None,
    timeout_s: float = 600,
) -> dict[str, float]:
    """Overlap (as `measure_overlap`) under each named set of XLA flags, e.g.
    {"default": "", "lhs": "--xla_gpu_enable_latency_hiding_scheduler=true"}.

    XLA reads XLA_FLAGS once, when the backend starts, so each set runs in a fresh
    `python -m cost_models overlap-probe` process, with the set appended to this process's
    XLA_FLAGS. An unknown flag aborts that process; the error names the set.
    """
    results = {}
    for label, flags in flag_sets.items():
        env = dict(os.environ)
        env["XLA_FLAGS"] = " ".join(f for f in (os.environ.get("XLA_FLAGS", ""), flags) if f)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_PACKAGE_PARENT), os.environ.get("PYTHONPATH", "")) if p
        )
        command = [
            sys.executable,
            "-m",
            "cost_models",
            "overlap-probe",
            "--size-mb",
            str(size_mb),
            "--repeats",
            str(repeats),
        ]
        if matmul_n:
            command += ["--matmul-n", str(matmul_n)]
        try:
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            raise CalibrationError(
                f"overlap probe for flag set {label!r} ({flags!r}) took over {timeout_s} s; "
                "pass a smaller size_mb or a larger timeout_s."
            ) from None
        if done.returncode != 0:
            raise CalibrationError(
                f"overlap probe for flag set {label!r} ({flags!r}) exited with code "
                f"{done.returncode}. An unknown XLA flag aborts the process: check each flag "
                f"against xla/debug_options_flags.cc. Its stderr ended with:\n{done.stderr[-2000:]}"
            )
        results[label] = float(json.loads(done.stdout.strip().splitlines()[-1])["overlap"])
    return results
