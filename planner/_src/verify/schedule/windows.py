"""Reading a compiled module's copy windows: every host copy of the schedule (both
directions, in while bodies too) with the compute the schedule puts between its start and
done and its exposed time, replayed (the package docstring says how)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import cost_models as cm
from cost_models._transfer import DIRECTIONS
from planner._src.verify.schedule.deal import copy_starts, stream_assignment
from planner._src.verify.schedule.pricing import Pricer
from planner._src.verify.schedule.replay import LINK_ORDERS, HostCopy, replay
from planner._src.xla import hlo, kernels


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduleWindows:
    """Per direction, per step: copy time, compute in the copies' windows, exposed time."""

    copies: tuple[HostCopy, ...]
    compiler: str = ""  # who scheduled the module (target.CompilerTarget.description)
    streams: int = 0  # copy streams modelled (0: loop-slice copies free, no stream queues)
    stream_order: str = ""  # how the streams were dealt ("post" | "schedule" | "mean")
    pricing: str = "profile"  # "profile" (Pricer) | "kernels" (kernels.kernel_times)
    host_streams: str = ""  # where the host copies ran ("compute" | "memcpy"), "" without streams

    def copy_s(self, direction: str) -> float:
        return sum(c.trips * c.copy_s for c in self.copies if c.direction == direction)

    def window_s(self, direction: str) -> float:
        return sum(c.trips * c.window_s for c in self.copies if c.direction == direction)

    def exposed_s(self, direction: str) -> float:
        return sum(c.trips * c.exposed_s for c in self.copies if c.direction == direction)

    def by_direction(self) -> dict[str, tuple[float, float, float]]:
        """``{"d2h": (copy, window compute, exposed), "h2d": (...)}``, seconds per step."""
        return {d: (self.copy_s(d), self.window_s(d), self.exposed_s(d)) for d in ("d2h", "h2d")}


def read_windows(
    text_or_module,
    hardware,
    *,
    compiler: str = "",
    streams: int = 4,
    stream_order: str = "post",
    pricing: str = "profile",
    link_rates: dict[str, float] | None = None,
    host_streams: str = "compute",
    assignment: Mapping[str, int] | None = None,
    link_order: str = "ready",
) -> ScheduleWindows:
    """The host copies of a compiled module with their schedule windows (package docstring).

    ``hardware``: a cost_models profile or its name (link rates, matmul / attention / HBM
    rates, kernel launch time, loop-copy rate). ``compiler``: who scheduled it, for the
    report. ``streams``: copy streams the async copies are dealt over (0: the replay without
    streams, loop-slice copies free). ``stream_order``: ``"post"`` or ``"schedule"``.
    ``pricing``: ``"profile"`` (this module's pricer) or ``"kernels"`` (planner/_src/xla/kernels.py,
    the per-kernel pricing checked against H200 kernels: benchmarks/results/hlo-kernel-time-2026-12-05.md).
    ``link_rates``: bytes/s per direction in place of the profile's link rates (e.g. the
    in-step store rate measured on the H200, which is below the profile's device_put rate).
    ``host_streams``: ``"compute"`` or ``"memcpy"``, where XLA puts the host copies
    (:func:`stream_assignment`; :func:`host_streams_of` gives it for a jaxlib version).
    ``assignment``: the stream of each async start in place of :func:`stream_assignment`'s
    (e.g. read from an XLA dump by planner/_src/verify/schedule/dump.py; dedicated host streams numbered
    ``streams`` and ``streams + 1``). ``link_order``: which waiting host copy takes a freed
    link (:data:`LINK_ORDERS`; ``"ready"``, the default, as the H200 traces show).
    """
    if stream_order not in ("post", "schedule", "mean"):
        raise ValueError(f"stream_order must be 'post', 'schedule' or 'mean', got {stream_order!r}")
    if pricing not in ("profile", "kernels"):
        raise ValueError(f"pricing must be 'profile' or 'kernels', got {pricing!r}")
    if link_order not in LINK_ORDERS:
        raise ValueError(f"link_order must be one of {LINK_ORDERS}, got {link_order!r}")
    module = hlo.parse(text_or_module) if isinstance(text_or_module, str) else text_or_module
    hw = cm.load_profile(hardware)
    directions = hlo.host_transfer_ops(module)
    pricer = Pricer(module, hw)
    if pricing == "kernels":
        pricer.leaf = {k.name: k.seconds for k in kernels.kernel_times(module, hw)}
    trips = hlo.while_trips(module)
    starts = copy_starts(module)
    if assignment is None:
        deal_order = "schedule" if stream_order == "schedule" else "post"
        assignment = stream_assignment(module, streams, order=deal_order, host_streams=host_streams)
    copies: list[HostCopy] = []
    for comp, body in module.computations().items():
        if not any(
            i.opcode.endswith("-start") and directions.get(i.name) in DIRECTIONS for i in body
        ):
            continue
        copies.extend(
            replay(
                body,
                directions,
                pricer,
                hw,
                trips.get(comp, 1),
                streams,
                stream_order,
                dict(link_rates or {}),
                starts,
                assignment,
                link_order,
            )
        )
    return ScheduleWindows(
        copies=tuple(copies),
        compiler=compiler,
        streams=streams,
        stream_order=stream_order if streams else "",
        pricing=pricing,
        host_streams=host_streams if streams else "",
    )
