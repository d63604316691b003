"""An independent simulator: replays a plan step by step and checks it.

The solver is never its own judge. This module shares no code with ``cost.evaluate`` or the
CP-SAT model: it executes one training step as a sequence of events (every region's forward
trips, then the backward trips in reverse), allocates and frees device and host bytes as
they happen, recomputes on demand by walking the dependency graph, runs the host copies as a
queue on one link, and raises :class:`PlanViolation` when a plan reads a value that is
neither kept nor recomputable, runs past the HBM budget or the host cap, or overrides an
equation JAX always keeps.

It follows the same accounting conventions as the cost model (documented in docs/cost-model.md):
the fixed bytes are resident throughout, a backward trip holds its recomputed and reloaded
tensors until it ends, and copies move at ``eta`` of the link speed while compute runs, at
most ``capacity`` of a trip's copy time per direction moves while compute runs, and a share
``floor`` of each trip's copy time is exposed whatever (the profile's calibrated hiding
model per direction, read here as three numbers, or its single overlap efficiency as eta).
"""

from __future__ import annotations

import dataclasses
import math

from cost_models import FUSIBLE
from planner._src.graph import VIEWS, LivenessGraph, class_key
from planner._src.types import Assignment, CostModel

# Reductions, by name (written out here so the replay shares no code with the model).
_REDUCING = frozenset(("reduce_max", "reduce_min", "reduce_sum", "reduce_prod", "argmax", "argmin"))


def _kept_for_recompute_only(rg, kept) -> int:
    """Bytes of one trip's saved values that only a recompute reads: the backward pass reads
    neither them nor a view of them (written out here, not shared with cost/predict.py)."""
    cands = rg.region.candidates
    return sum(
        cands[i].nbytes
        for i, d in kept.items()
        if d == "save"
        and not cands[i].needed
        and not cands[i].loop_invariant
        and not any(rg.view_of(w) == ("candidate", i) for w in rg.readers(i))
    )


def _own_buffers(rg) -> list[bool]:
    """Per candidate: recomputed and read by the backward pass, it gets a buffer: a kernel
    or a reduction reads it, or it is not elementwise-fusible, or it is a view of a value
    that does (written out here, not shared with cost/predict.py); in a Python loop of layers
    (not under lax.scan) every such value gets one."""
    if not rg.region.in_scan:
        return [True] * len(rg.region.candidates)
    out: list[bool] = []
    for c in rg.region.candidates:
        if c.primitive not in FUSIBLE or c.read_by_kernel or c.read_by_reduction:
            out.append(True)
        elif c.primitive in VIEWS:
            src = rg.reads(c.index)
            out.append(not src or bool(rg.reads_inputs(c.index)) or any(out[u] for u in src))
        else:
            out.append(False)
    return out


class PlanViolation(AssertionError):
    """A replayed plan broke memory, a dependency, or a rule of JAX's partial evaluation."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SimulationResult:
    peak_bytes: int
    host_peak_bytes: int
    step_s: float
    recomputed: int  # equations recomputed in one step
    events: int


def _link(cost: CostModel, model) -> tuple[float, float, float]:
    """(eta, capacity_s, floor) of one direction: its calibrated model's three numbers, or
    the single overlap efficiency as eta with no capacity and no floor."""
    if model is None:
        return cost.overlap_efficiency, math.inf, 0.0
    return model.eta, model.capacity_s, model.floor


def _copy_queue_exposure(jobs, eta: float, compute_s: float, budget: float = math.inf) -> float:
    """Run copies (ready_time, duration) through one link; return time past ``compute_s``.

    While compute runs (t < compute_s) the link progresses at rate ``eta``, after it at 1;
    at most ``budget`` seconds of copying progress while compute runs (the trip's capacity:
    once spent, the link waits for compute to end).
    """
    t = 0.0
    for ready, dur in sorted(jobs):
        t = max(t, ready)
        remaining = dur
        if t < compute_s and eta > 0 and budget > 0:
            can = min((compute_s - t) * eta, budget)
            if can >= remaining:
                t += remaining / eta
                budget -= remaining
                remaining = 0.0
            else:
                remaining -= can
                budget -= can
                t = compute_s
        t = max(t, compute_s) + remaining if remaining > 0 else t
    return max(0.0, t - compute_s)


def _fresh(rg, kept, order) -> set[int]:
    """The recomputed values that take a buffer of their own: all but a recomputed view
    (graph.VIEWS) of a value that is there anyway (kept, a region input, or such a view
    itself), which is that buffer."""
    aliased: set[int] = set()
    for i in order:  # in recompute order: a view's source comes first
        src = rg.view_of(i)
        if src is not None and (src[0] == "input" or src[1] in kept or src[1] in aliased):
            aliased.add(i)
    return {i for i in order if i not in aliased}


def simulate(
    graph: LivenessGraph,
    cost: CostModel,
    assignment: Assignment,
    *,
    usable_bytes: float | None = None,
) -> SimulationResult:
    decisions = assignment.as_dict()
    # Per direction: the link's share of its speed while compute runs, the copy time one
    # trip can hide, the share always exposed.
    eta_d, cap_d, floor_d = _link(cost, cost.d2h_hiding)
    eta_h, cap_h, floor_h = _link(cost, cost.h2d_hiding)
    device = cost.fixed_bytes
    peak = device
    host = 0
    host_peak = 0
    time_s = cost.base_step_s
    events = 0
    recomputed = 0

    def alloc(n):
        nonlocal device, peak, events
        device += n
        peak = max(peak, device)
        events += 1
        if usable_bytes is not None and device > usable_bytes:
            raise PlanViolation(f"device memory {device} bytes exceeds the budget {usable_bytes}")

    def decision(region, c):
        key = class_key(region, c)
        d = decisions.get(key, "remat")
        if d == "offload" and not cost.allow_offload:
            raise PlanViolation(f"{key} is offloaded but offloading is not allowed")
        if d == "offload" and key in cost.no_offload_classes:
            raise PlanViolation(
                f"{key} is offloaded under lax.scan(unroll > 1), which XLA cannot compile"
            )
        if c.effectful and d != "save":
            # JAX keeps effectful equations in the forward pass whatever the policy says.
            return "save"
        if not c.decidable:
            # A higher-order equation: the policy decides what is inside it; JAX recomputes
            # the equation itself from its operands.
            return "remat"
        return d

    # What each region's backward trip reads: the candidates marked needed by the trace.
    plans = []
    for rg, rc in zip(graph.regions, cost.regions):
        cands = rg.region.candidates
        kept: dict[int, str] = {}  # forward: values kept as residuals, and where
        order: list[int] = []  # recompute order of one backward trip

        done: set[int] = set()

        def ensure(root, rg=rg, cands=cands, kept=kept, order=order, done=done):
            """Make value ``root`` available in the backward trip: kept, or recomputed after
            its inputs (a depth-first walk with an explicit stack: chains can be long)."""
            stack = [(root, False)]
            on_path: set[int] = set()
            while stack:
                i, expanded = stack.pop()
                if expanded:  # all inputs are available: recompute i
                    on_path.discard(i)
                    done.add(i)
                    order.append(i)
                    continue
                if i in kept or i in done:
                    continue
                if i in on_path:
                    raise PlanViolation(f"region {rg.region.id}: cyclic recompute at {i}")
                c = cands[i]
                d = decision(rg.region, c)
                if d in ("save", "offload"):
                    kept[i] = d
                    continue
                on_path.add(i)
                stack.append((i, True))
                stack.extend((u, False) for u in reversed(rg.reads(i)))

        for c in cands:
            if c.needed:
                ensure(c.index)
        # Region inputs the backward trip reads: directly, or to recompute something.
        inputs_read = {i.index for i in rg.region.inputs if i.needed}
        for i in order:
            inputs_read.update(rg.reads_inputs(i))
        stacked_inputs = sum(
            i.nbytes for i in rg.region.inputs if i.stacked and i.index in inputs_read
        )
        # Check every recomputed equation has its inputs: kept, recomputed, or region inputs.
        for i in order:
            for u in rg.reads(i):
                if u not in kept and u not in done:
                    raise PlanViolation(f"region {rg.region.id}: recompute of {i} lacks input {u}")
        # Held twice (docs/cost-model.md, D_r): outside lax.scan, a saved value XLA does not
        # duplicate, read in the backward trip by a kernel and by a fusion: the traced backward's
        # reads (read_by_kernel, read_by_fusion) or the recomputed equations that read it.
        twice_b = 0
        if rc.twice_held:
            for i, d in kept.items():
                if d != "save" or not rc.twice_held[i] or cands[i].loop_invariant:
                    continue
                rereaders = [cands[j].primitive for j in order if i in rg.reads(j)]
                by_kernel = (
                    cands[i].read_by_kernel
                    or cands[i].read_by_reduction
                    or any(p not in FUSIBLE for p in rereaders)
                )
                by_fusion = cands[i].read_by_fusion or any(
                    p in FUSIBLE and p not in VIEWS for p in rereaders
                )
                if by_kernel and by_fusion:
                    twice_b += cands[i].nbytes
        # Hoisted (docs/cost-model.md, E_r): where the compiler runs this region's recompute in the
        # forward pass, the recomputed values the backward trip reads are made there and held
        # until that trip, like saved ones (loop-invariant ones once); none is made in the
        # backward trip.
        # A value kept only for that recompute (the backward does not read it) is read by it
        # in the forward pass and freed there.
        hoisted_b = hoisted_inv = 0
        if rc.hoists_recompute:
            for i in _fresh(rg, kept, order):
                if cands[i].needed:
                    if cands[i].loop_invariant:
                        hoisted_inv += cands[i].nbytes
                    else:
                        hoisted_b += cands[i].nbytes
            hoisted_b -= _kept_for_recompute_only(rg, kept)
        plans.append((rg, rc, kept, order, stacked_inputs + twice_b + hoisted_b, hoisted_inv))

    # Forward: every trip of every region stores its residuals; loop-invariant ones are
    # computed before the loop and stored once.
    for rg, rc, kept, _, stacked_inputs, hoisted_inv in plans:  # + twice-held, hoisted bytes
        cands = rg.region.candidates
        alloc(
            sum(cands[i].nbytes for i, d in kept.items() if d == "save" and cands[i].loop_invariant)
            + hoisted_inv
        )
        dev_b = stacked_inputs + sum(
            cands[i].nbytes for i, d in kept.items() if d == "save" and not cands[i].loop_invariant
        )
        host_b = sum(
            cands[i].nbytes
            for i, d in kept.items()
            if d == "offload" and not cands[i].loop_invariant
        )
        host += sum(
            cands[i].nbytes
            for i, d in kept.items()  # hoisted: one host copy
            if d == "offload" and cands[i].loop_invariant
        )
        # Each copy starts when its tensor is made: forward time elapsed at that point.
        jobs = [
            (rc.fwd_s - rc.fwd_after_s[i], rc.d2h_s[i]) for i, d in kept.items() if d == "offload"
        ]
        exposure = _copy_queue_exposure(jobs, eta_d, rc.fwd_s, cap_d)
        # The floor: that share of the trip's stores waits at their done, hidden or not.
        exposure = max(exposure, floor_d * sum(d for _, d in jobs))
        # Saving or offloading a value the forward would keep in a fusion costs its write to
        # HBM, every trip (an offload copies it from there).
        exposure += sum(
            rc.materialize_s[i]
            for i, d in kept.items()
            if d in ("save", "offload") and not cands[i].loop_invariant
        )
        # Saving (not offloading) a value in HBM under lax.scan: its copy into the stack.
        if rc.stack_copy_s:
            exposure += sum(
                rc.stack_copy_s[i]
                for i, d in kept.items()
                if d == "save" and not cands[i].loop_invariant
            )
        # Every execution runs (time); the residuals of ``rc.live`` of them are held at once
        # (a region whose forward and backward share a loop trip frees them each trip).
        for j in range(rc.multiplicity):
            if j >= rc.live:
                time_s += exposure
                continue
            alloc(dev_b)
            host += host_b
            host_peak = max(host_peak, host)
            if host > cost.host_cap_bytes and host_b:
                raise PlanViolation(
                    f"host memory {host} bytes exceeds the cap {cost.host_cap_bytes}"
                )
            time_s += exposure

    # Backward: trips in reverse; each reloads, recomputes, runs, then frees.
    in_order = len(plans) <= 1 or all(rg.region.call_sites == 1 for rg, *_ in plans)
    deferred = 0
    for rg, rc, kept, order, stacked_inputs, hoisted_inv in reversed(plans):
        cands = rg.region.candidates
        dev_b = stacked_inputs + sum(
            cands[i].nbytes for i, d in kept.items() if d == "save" and not cands[i].loop_invariant
        )
        reload_b = sum(cands[i].nbytes for i, d in kept.items() if d == "offload")
        host_b = sum(
            cands[i].nbytes
            for i, d in kept.items()
            if d == "offload" and not cands[i].loop_invariant
        )
        # Recomputed tensors the gradient reads stay for the trip; intermediates of the
        # recompute are freed once their readers ran (one at a time at most).
        # A recomputed view (graph.VIEWS) of a value that is there anyway (kept, a region
        # input, or such a view itself) is that buffer: no bytes of its own.
        # Hoisted (E_r): the recompute ran in the forward pass; nothing is made here.
        fresh = set() if rc.hoists_recompute else _fresh(rg, kept, order)
        # An intermediate a recomputed reduction reads exists whole before the reduction's
        # result does and is read again after it (softmax): it stays for the trip too
        # (docs/cost-model.md, W_r).
        reduced = {
            u for j in fresh if cands[j].primitive in _REDUCING for u in rg.reads(j) if u in fresh
        }
        # A fusible value that only fusions of the backward pass read is recomputed inside them: no
        # buffer of its own, it is an intermediate like the others (docs/cost-model.md, W_r).
        own = _own_buffers(rg)
        live = [i for i in fresh if (cands[i].needed and own[i]) or i in reduced]
        rec_b = max((cands[i].nbytes for i in fresh if i not in live), default=0)
        # Parallel branches (graph.parallel_branches) run backward one after another: the
        # trip recomputes a branch, runs its backward, frees it, then takes the next.
        branch = rg.branch or (-1,) * len(cands)
        rec_b += sum(cands[i].nbytes for i in live if branch[i] < 0)
        trip, trip_peak = rec_b, rec_b
        for k in sorted({branch[i] for i in live} - {-1}):
            held_k = sum(cands[i].nbytes for i in live if branch[i] == k)
            trip += held_k
            trip_peak = max(trip_peak, trip)
            trip -= held_k
        rec_b = trip_peak
        rec_s = sum(rc.recompute_s[i] for i in order)
        # Reloads are issued at the trip start in first-use order (latest produced first);
        # the deadline of each is the backward compute ahead of its first use.
        reloads = sorted(
            ((i, rc.h2d_s[i]) for i, d in kept.items() if d == "offload"), key=lambda p: -p[0]
        )
        stall, link_t, budget = 0.0, 0.0, cap_h
        for i, dur in reloads:
            deadline = rc.bwd_before_s[i] + stall  # compute is late by the stalls so far
            remaining = dur
            if link_t < deadline and eta_h > 0 and budget > 0:
                # the link runs at eta while compute runs, until the trip's capacity is spent
                used = min((deadline - link_t) * eta_h, remaining, budget)
                link_t += used / eta_h
                remaining -= used
                budget -= used
            if remaining > 0:  # compute waits for the copy: full link speed
                link_t = max(link_t, deadline) + remaining
            stall += max(0.0, link_t - deadline)
        # The floor: that share of the trip's reloads waits at their done, hidden or not.
        stall = max(stall, floor_h * sum(d for _, d in reloads))
        # The working set as the cost model scales it (omega, measured from two compiles).
        ws = math.ceil(cost.working_set_scale * (reload_b + rec_b))
        # A scan's backward trip copies a measured share of its saved residuals out of the
        # stacked buffers (docs/cost-model.md, K_r), beside the working set, unscaled.
        if rg.region.in_scan:
            ws += math.ceil(
                cost.slice_copy_share
                * sum(
                    cands[i].nbytes
                    for i, d in kept.items()
                    if d == "save" and not cands[i].loop_invariant
                )
            )
        # Outside lax.scan, where the recompute runs in the backward trip: a value saved only
        # for that recompute (the trip reads it nowhere else, nor a view of it) is read by it
        # at the top of the trip and freed there, before the trip's tensors are all live.
        own_b = 0
        if rc.frees_sources_in_trip and not rc.hoists_recompute:
            own_b = _kept_for_recompute_only(rg, kept)
        for j in range(rc.multiplicity):
            held = j < rc.live  # the executions whose residuals were held (see above)
            device -= own_b if held else 0
            alloc(ws)
            recomputed += len(order)
            time_s += rec_s + stall
            device -= ws
            host -= host_b if held else 0
            events += 1
        # The region's residuals die with its backward trips, when the program order is known
        # (one place per region); merged regions may interleave, so theirs wait to the end.
        freed = (
            rc.live * (dev_b - own_b)
            + sum(
                cands[i].nbytes for i, d in kept.items() if d == "save" and cands[i].loop_invariant
            )
            + hoisted_inv
        )
        if in_order:
            device -= freed
        else:
            deferred += freed
    return SimulationResult(
        peak_bytes=int(peak),
        host_peak_bytes=int(host_peak),
        step_s=time_s,
        recomputed=recomputed,
        events=events,
    )
