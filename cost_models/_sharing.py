"""The host link when several GPUs copy at once: per-GPU bandwidth by how many GPUs share it.

On an 8-GPU host the GPUs' host copies share PCIe switches, the CPU's root complex and its
memory bandwidth; on a GB200 superchip two GPUs share one Grace CPU's memory. In a sharded
(SPMD) step every device offloads at the same moment, so each may see less than one GPU's
link alone. A profile's optional ``link.shared`` table gives the per-GPU rate per direction
when 1, 2, 4, 8 (any counts) GPUs copy at once:

    "shared": {"value": {"1": {"d2h": "52.65 GB/s", "h2d": "52.31 GB/s"},
                         "8": {"d2h": "26.3 GB/s", "h2d": "26.2 GB/s"}},
               "source": "<how each row was measured, or the published figures it assumes>"}

The 1-GPU row must equal the link's own ``d2h_bytes_per_s`` / ``h2d_bytes_per_s`` (one GPU
copying alone). :meth:`LinkSharing.per_gpu` answers a count the table does not list with the
next larger listed count (more sharing: conservative), and a count beyond the largest with
the largest's rate: the largest listed count is the GPUs of one host (or tray), and further
GPUs of a larger mesh copy over other hosts' links.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ._profile_figures import ProfileError
from ._units import BANDWIDTH, UnitError, format_quantity, parse_quantity

__all__ = ["LinkSharing"]

_FORM = (
    '{"value": {"1": {"d2h": "52.65 GB/s", "h2d": "52.31 GB/s"}, "8": {"d2h": "26.3 GB/s", '
    '"h2d": "26.2 GB/s"}}, "source": "<measurement file, or the published figures assumed>"}'
)


@dataclass(frozen=True, slots=True)
class LinkSharing:
    """Per-GPU host-link bandwidth by the number of GPUs copying at once (module docstring).

    ``rows``: ((gpus, d2h bytes/s per GPU, h2d bytes/s per GPU), ...) sorted by gpus, the
    first row for 1 GPU."""

    rows: tuple[tuple[int, float, float], ...]

    def __post_init__(self) -> None:
        rows = tuple(sorted((int(n), float(d), float(h)) for n, d, h in self.rows))
        object.__setattr__(self, "rows", rows)
        if not rows or rows[0][0] != 1:
            raise ProfileError(
                "link.shared needs a row for 1 GPU (one GPU copying alone: the link's own "
                f"d2h and h2d rates), then rows for more GPUs; like {_FORM}."
            )
        counts = [n for n, _, _ in rows]
        if len(set(counts)) != len(counts) or counts[0] < 1:
            raise ProfileError(f"link.shared: GPU counts must be distinct and >= 1; got {counts}.")
        for n, d, h in rows:
            for what, v in (("d2h", d), ("h2d", h)):
                if not 1e6 <= v <= 1e15:
                    raise ProfileError(
                        f"link.shared: {n} GPUs, {what} is {v:.3g} B/s, outside 1 MB/s to "
                        f"1 PB/s: a typo in its unit? Write it like {_FORM}."
                    )

    def per_gpu(self, direction: str, gpus: int) -> float:
        """Bytes per second one GPU sees in ``direction`` ("d2h", "h2d") while ``gpus`` GPUs
        copy at once (module docstring: between rows, the next larger count's rate)."""
        col = 1 if direction == "d2h" else 2
        if direction not in ("d2h", "h2d"):
            raise ValueError(f"direction must be 'd2h' or 'h2d', got {direction!r}.")
        for row in self.rows:
            if row[0] >= gpus:
                return row[col]
        return self.rows[-1][col]

    def to_json(self) -> dict[str, dict[str, str]]:
        return {
            str(n): {
                "d2h": format_quantity(d, BANDWIDTH),
                "h2d": format_quantity(h, BANDWIDTH),
            }
            for n, d, h in self.rows
        }

    @classmethod
    def from_json(cls, raw: object, where: str) -> LinkSharing:
        """Parse the ``value`` of ``link.shared``; errors name ``where`` and show the form."""
        if not isinstance(raw, Mapping) or not raw:
            raise ProfileError(
                f"{where}: field 'link.shared' must map GPU counts to per-GPU rates, like "
                f"{_FORM}; got {raw!r:.80}."
            )
        rows = []
        for count, rates in raw.items():
            if not isinstance(rates, Mapping) or set(rates) != {"d2h", "h2d"}:
                raise ProfileError(
                    f"{where}: field 'link.shared', {count!r} GPUs: give both directions, "
                    f"like {_FORM}; got {rates!r:.80}."
                )
            try:
                n = int(count)
                d = parse_quantity(rates["d2h"], BANDWIDTH)
                h = parse_quantity(rates["h2d"], BANDWIDTH)
            except (UnitError, ValueError) as err:
                raise ProfileError(
                    f"{where}: field 'link.shared', {count!r} GPUs: {err}. Write it like {_FORM}."
                ) from None
            rows.append((n, d, h))
        try:
            return cls(rows=tuple(rows))
        except ProfileError as err:
            raise ProfileError(f"{where}: {err}") from None
