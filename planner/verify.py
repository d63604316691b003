"""Stage 6, verify: compile the step with the emitted policy and hold the plan to it.

Three levels, as JAX's own memories tests do:

1. the policy: JAX's partial evaluation, replayed on every region with the *emitted* policy
   object, keeps exactly the tensors the plan keeps, where the plan keeps them;
2. the traced step: the arrays the forward scans stack for the backward scans grow, relative
   to the full-remat anchor, by exactly the plan's device bytes, and its host-memory arrays
   are the plan's offloaded bytes;
3. the compiled step: ``memory_analysis()`` against the predicted peak and the budget, and
   the HLO's host-memory markers (``S(5)``) when the plan offloads on a backend that places
   buffers in host memory. We saw XLA drop offloads silently (../shared/measurements):
   that is reported as a failed check, never as success.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import jax

from planner import _jax_adapter as adapter
from planner.cost import Assignment, Prediction
from planner.graph import LivenessGraph, class_key
from planner.trace import CompiledFigures, Trace, compile_with, compiled_figures

# Backends whose compiler keeps pinned_host buffers apart from device memory in
# memory_analysis (host_temp_size_in_bytes). On the CPU backend both kinds are the same
# RAM and the compiler counts host-placed arrays in temp_size_in_bytes.
_SEPARATE_HOST_MEMORY = ("gpu", "cuda", "rocm", "tpu")

STATUS_OK = "compiled, within budget"
STATUS_OVER = "compiled, over budget"
STATUS_NOT_COMPILED = "not compiled"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Verification:
    status: str
    compiled: CompiledFigures | None
    compiled_device_bytes: int | None     # what counts against the budget on this backend
    predicted_peak_bytes: int
    budget_bytes: int
    checks: tuple[Check, ...]
    backend: str
    note: str = ""
    # False when compiled_device_bytes is an estimate: on a backend that keeps host arrays in
    # device memory the traced program's host bytes were subtracted, and the compiler's
    # buffer sharing can make that subtraction too large.
    exact: bool = True

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK and all(c.ok for c in self.checks)

    @property
    def error_bytes(self) -> int | None:
        if self.compiled_device_bytes is None:
            return None
        return self.compiled_device_bytes - self.predicted_peak_bytes


def _region_policy(region, policy, policies):
    """The policy a region's call site gets: its layer group's, else the one policy."""
    return policies[region.group] if policies and region.group is not None else policy


def _policy_checks(graph: LivenessGraph, assignment: Assignment, policy, prediction: Prediction,
                   policies=()):
    """Level 1: replay JAX's residual choice with the emitted policy on every region."""
    checks = []
    for rg, rp in zip(graph.regions, prediction.regions):
        r = rg.region
        cands = r.candidates
        want = {}
        region_policy = _region_policy(r, policy, policies)
        for c in cands:
            if rp.needed[c.index]:
                d = "save" if c.effectful else assignment.get(class_key(r, c))
                if d in ("save", "offload"):
                    want[c.index] = d
        # Replay on the region's forward equations in the order the trace recorded them.
        got = {}
        for c in cands:
            e = c.eqn
            d = adapter.decision_text(region_policy(e.primitive, *[v.aval for v in e.invars],
                                                    **e.params))
            if c.effectful:
                d = "save"
            if rp.needed[c.index] and d in ("save", "offload"):
                got[c.index] = d
        missing = {i: d for i, d in want.items() if got.get(i) != d}
        extra = {i: d for i, d in got.items() if i not in want}
        label = lambda i: cands[i].name or f"{cands[i].primitive}{list(cands[i].shape)}"
        ok = not missing and not extra
        where = f"region {r.id}" + ("" if r.group is None else f" (layer group {r.group})")
        detail = (f"{where}: the emitted policy keeps the {len(want)} planned residuals"
                  if ok else
                  f"{where}: emitted policy differs from the plan; planned but not kept: "
                  f"{[label(i) for i in missing]}, kept but not planned: {[label(i) for i in extra]}")
        checks.append(Check(name="policy keeps the planned tensors", ok=ok, detail=detail))
    return checks


def _as_traced(graph: LivenessGraph) -> LivenessGraph:
    """``graph`` with each region's candidates as the traced program keeps them
    (``Region.traced_candidates``); ``graph`` itself where no region has another view."""
    if all(rg.region.traced_candidates is None for rg in graph.regions):
        return graph
    regions = tuple(rg if rg.region.traced_candidates is None else dataclasses.replace(
        rg, region=dataclasses.replace(rg.region, candidates=rg.region.traced_candidates))
        for rg in graph.regions)
    return dataclasses.replace(graph, regions=regions)


def _at_global_sizes(graph: LivenessGraph) -> LivenessGraph:
    """``graph`` with every candidate and region input at its global (jaxpr) size, for
    checks against the traced jaxpr of a sharded step (see trace.py on sharded steps)."""
    regions = tuple(dataclasses.replace(rg, region=dataclasses.replace(
        rg.region,
        candidates=tuple(dataclasses.replace(c, nbytes=c.global_nbytes or c.nbytes)
                         for c in rg.region.candidates),
        inputs=tuple(dataclasses.replace(i, nbytes=i.global_nbytes or i.nbytes)
                     for i in rg.region.inputs)))
        for rg in graph.regions)
    return dataclasses.replace(graph, regions=regions)


def verify(step_fn: Callable, args: Sequence[Any], trace: Trace, graph: LivenessGraph,
           cost, assignment: Assignment, policy, prediction: Prediction, budget_bytes: int,
           *, compile: bool = True, policies: tuple = (),
           compiler_options: Sequence[tuple[str, Any]] = ()) -> Verification:
    """``policy``: the one emitted policy; ``policies``: one per layer group (call site, in
    call order) when the plan decides groups separately (then ``policy`` may be None).
    ``compiler_options``: the plan's XLA flags as compiler options (``Emitted``); the step is
    compiled with them, because they change the schedule and so the peak: on the H200
    (benchmarks/results/h200-2026-12-02.md) two plans verified under the default flags
    compiled under their own flags to 33.13 GB (Llama, 32.87 GB usable) and 53.70 GB (MoE,
    52.97 GB usable) and ran out of memory at their budgets."""
    checks = list(_policy_checks(graph, assignment, policy, prediction, policies))
    backend = jax.default_backend()
    if not compile:
        return Verification(status=STATUS_NOT_COMPILED, compiled=None, compiled_device_bytes=None,
                            predicted_peak_bytes=prediction.peak_bytes, budget_bytes=budget_bytes,
                            checks=tuple(checks), backend=backend,
                            note="compilation skipped (verify=False)")
    # Each call site gets its group's policy, as the user's code would pass it; the trace
    # stage recorded which adapter region ids (bind order) each region's call sites had.
    by_bind = {b: _region_policy(rg.region, policy, policies)
               for rg in graph.regions for b in rg.region.bind_ids}
    fallback = policy if policy is not None else policies[0]
    step_jaxpr, compiled = compile_with(step_fn, args, lambda rid, r: by_bind.get(rid, fallback),
                                        compiler_options)
    figs = compiled_figures(compiled, step_jaxpr)

    # Level 2: stacked residuals of the traced step against the full-remat anchor.
    scanned = [(rg, rp) for rg, rp in zip(graph.regions, prediction.regions) if rg.region.in_scan]
    if scanned:
        from planner.cost import Assignment, evaluate
        # The plan as the traced program keeps it (residuals XLA drops later still stacked).
        g = _as_traced(graph)
        if trace.num_partitions > 1:
            # The traced step's avals are global (the jaxpr is not partitioned): compare it
            # with the plan at global sizes, not with the per-device prediction.
            g = _at_global_sizes(g)
        if g is not graph:
            scanned = [(rg, rp) for rg, rp in zip(g.regions, evaluate(cost, g, assignment).regions)
                       if rg.region.in_scan]
        full = {p.region_id: p for p in evaluate(cost, g, Assignment.of({})).regions}
        want_dev = sum(rg.region.multiplicity * (rp.device_residual_bytes + rp.input_residual_bytes
                                                 - full[rg.region.id].input_residual_bytes)
                       for rg, rp in scanned)
        # Stacked host arrays: per-trip offloads (loop-invariant ones are hoisted, not stacked).
        want_host = sum(rg.region.multiplicity * rp.host_residual_bytes for rg, rp in scanned)
        grown = figs.stacked_device_bytes - trace.anchor.stacked_device_bytes
        checks.append(Check(
            name="traced step stacks the planned device residuals",
            ok=grown == want_dev,
            detail=f"forward scans stack {grown:,} more device bytes than under full remat; "
                   f"the plan keeps {want_dev:,} per-trip bytes (loop-invariant ones are "
                   "hoisted, not stacked)"))
        checks.append(Check(
            name="offloaded residuals live in host memory",
            ok=figs.stacked_host_bytes == want_host,
            detail=f"{figs.stacked_host_arrays} stacked arrays, {figs.stacked_host_bytes:,} bytes "
                   f"in {adapter.HOST_KIND}; the plan offloads {want_host:,} bytes"))

    # Level 3: the compiled program.
    separate_host = backend in _SEPARATE_HOST_MEMORY
    device_bytes = figs.device_bytes
    note = ""
    estimated = not separate_host and bool(figs.jaxpr_host_bytes)
    if estimated:
        # Same RAM for both memory kinds: the compiler counts host arrays in temp.
        device_bytes -= figs.jaxpr_host_bytes
        note = (f"The {backend} backend keeps {adapter.HOST_KIND} arrays in the same memory as "
                f"device arrays; {figs.jaxpr_host_bytes:,} host-placed bytes (from the traced "
                "program) were subtracted from the compiler's temp size.")
    planned_host = prediction.host_bytes > 0
    if planned_host and separate_host:
        checks.append(Check(
            name="compiled program places offloads in host memory",
            ok=figs.host_buffers_in_hlo > 0 and figs.host_temp_bytes > 0,
            detail=f"{figs.host_buffers_in_hlo} HLO instructions in host memory space S(5), "
                   f"host temp {figs.host_temp_bytes:,} bytes; an offload the compiler dropped "
                   "shows as 0 here"))
    status = STATUS_OK if device_bytes <= budget_bytes else STATUS_OVER
    return Verification(
        status=status, compiled=figs, compiled_device_bytes=int(device_bytes),
        predicted_peak_bytes=prediction.peak_bytes, budget_bytes=budget_bytes,
        checks=tuple(checks), backend=backend, note=note, exact=not estimated,
    )
