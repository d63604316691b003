"""Stage 1, trace: the checkpointed regions of a train step and every tensor in them that the
backward pass could keep (a :class:`~planner._src.types.Trace`).

The stage's entry points, which later stages use: :func:`trace_step` (step.py), and the
merging of identical call sites into one region (:func:`merge_call_sites`,
:func:`merge_regions`, :func:`site_key`; regions.py). Its modules, by job: ``step``
(trace_step), ``candidates`` (a region's candidates), ``loops`` (where a region sits in the
program's scans and what they stack), ``per_device`` and ``shard`` (sharded steps' per-device
bytes), ``regions`` (call sites merged), ``prices`` (HLO recompute prices), ``probes``
(compiler probes).
"""

from planner._src.trace.regions import merge_call_sites, merge_regions, site_key
from planner._src.trace.step import trace_step

__all__ = ["merge_call_sites", "merge_regions", "site_key", "trace_step"]
