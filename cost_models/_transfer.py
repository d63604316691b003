"""Host-link transfer time, and how much of it a window of compute hides."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._profiles import HardwareProfile

DIRECTIONS = ("d2h", "h2d")


def transfer_seconds(nbytes: float, hw: HardwareProfile, direction: str) -> float:
    """Time to move `nbytes` over `hw`'s host link: latency + nbytes / per-direction bandwidth.

    `direction` is "d2h" (device to host: an offload) or "h2d" (host to device: a reload).
    Zero bytes take zero time (no transfer is issued).
    """
    if direction not in DIRECTIONS:
        raise ValueError(
            f"direction must be 'd2h' (device to host, an offload) or 'h2d' (host to device, a "
            f"reload); got {direction!r}."
        )
    if not nbytes >= 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes!r}.")
    if nbytes == 0:
        return 0.0
    link = hw.link
    bandwidth = link.d2h_bytes_per_s if direction == "d2h" else link.h2d_bytes_per_s
    if bandwidth == 0:
        raise ValueError(
            f"profile {hw.name!r} has no host link (link kind {link.kind!r}), so nothing can be "
            "offloaded to host memory on it. Plan without offload, or use a profile whose link "
            "has a bandwidth (see cost_models.list_profiles())."
        )
    return link.latency_s + nbytes / bandwidth


def exposed_seconds(copy_s: float, window_s: float, efficiency: float) -> float:
    """Part of a copy that compute does not hide: max(0, copy_s - efficiency * window_s).

    `window_s` is the compute that runs while the copy may be in flight (under lax.scan XLA
    confines it to the rest of the layer's iteration; measured:
    benchmarks/results/h200-2026-11-30-shared-probe/).
    `efficiency` (HardwareProfile.overlap_efficiency) is the fraction of that window which
    actually hides copy time: 0 means copies are fully exposed, 1 means perfect overlap.
    """
    if not copy_s >= 0 or not window_s >= 0:
        raise ValueError(
            f"copy_s and window_s are durations and must be >= 0; got {copy_s!r}, {window_s!r}."
        )
    if not 0 <= efficiency <= 1:
        raise ValueError(
            f"efficiency is a fraction of the window (0 to 1), got {efficiency!r}; "
            "take it from HardwareProfile.overlap_efficiency."
        )
    return max(0.0, copy_s - efficiency * window_s)
