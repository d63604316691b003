"""HLO recompute prices: per scanned region, each candidate's recompute seconds per trip from
the full-remat anchor's compiled XLA:GPU HLO (``xla.recompute_shares``), where the program's
loops say which loop is whose."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import jax

from planner._src.types import Candidate, Region
from planner._src.xla import compile_options, hlo, recompute_shares


def _recomputed_in_full_remat(cands: Sequence[Candidate]) -> set[int]:
    """The candidates full remat recomputes: those the backward pass reads and, transitively,
    the candidates they read (inputs come earlier in the forward order)."""
    out = {c.index for c in cands if c.needed}
    for c in reversed(cands):
        if c.index in out:
            out.update(c.inputs)
    return out


def prices_hlo(hardware, backend: str | None) -> bool:
    return (
        hardware is not None
        and getattr(hardware, "platform", "") == "gpu"
        and (backend or jax.default_backend()) in compile_options.XLA_GPU_BACKENDS
    )


def hlo_recompute_prices(
    text: str, hardware, sites: Sequence[Region]
) -> list[tuple[float | None, ...] | None]:
    """Per call-site region, its candidates' recompute seconds per trip from the full-remat
    anchor's compiled HLO ``text`` (recompute_shares.region_recompute_seconds), None per candidate no
    share went to; None for a region that cannot be priced so:

    * outside lax.scan, or under a scan with unroll > 1: no loop body that is one trip of it;
    * a backward loop of its trip count is not in the HLO, or several are and the regions of
      that trip count are not one body (which loop is whose is not known): the shares of k
      loops of one body are divided by k (each site gets one loop's worth per trip).
    """
    module = hlo.parse(text)
    loops = Counter(lp.trips for lp in recompute_shares.loop_times(module, hardware) if lp.backward)
    out: list[tuple[float | None, ...] | None] = []
    for r in sites:
        n = r.multiplicity
        same = [x for x in sites if x.in_scan and x.multiplicity == n]
        if not r.in_scan or r.scan_unroll != 1 or not loops[n]:
            out.append(None)
            continue
        if loops[n] > 1 and len({x.body for x in same}) > 1:
            out.append(None)
            continue
        # Only what full remat recomputes can take a share: what the backward pass reads and
        # what that is computed from (graph.py's possibly_needed). Another candidate of the
        # same primitive and size (a layer's last matmul, which no backward reads) took a
        # third of the Llama example's attention projections' shares before.
        recomputed = _recomputed_in_full_remat(r.candidates)
        got, _left = recompute_shares.region_recompute_seconds(
            module, hardware, n, [c for c in r.candidates if c.index in recomputed]
        )
        k = loops[n]
        out.append(tuple(got[c.index] / k if c.index in got else None for c in r.candidates))
    return out
