"""Stage 1, trace: find the checkpointed regions of a train step and every tensor in them
that the backward pass could keep.

``trace_step(step_fn, args)`` traces the step once with the planner in control of every
checkpoint region's policy (see ``xla.adapter.controlled_policies``), then replays JAX's own
residual selection on each region body to list its candidates (trace/candidates.py): each
equation the forward pass runs inside the region, with its bytes, dtype, producer,
``checkpoint_name``, source line, policy signature, and multiplicity (how many times the
region runs per step: the product of the trip counts of the scans around it, summed over
identical regions).

It also compiles the step once with every region fully rematerialized (JAX's default
``nothing_saveable``), the *anchor*: the compiler's memory figures for the smallest-residual
program, which the cost stage uses for the bytes that do not depend on the policy.

Sharded steps (SPMD over a ``jax.sharding.Mesh``): every byte figure here is *per device*
(trace/per_device.py says where each divisor comes from).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax

import cost_models as cm
from planner._src.errors import NoCheckpointRegionError, PlannerError, TraceError, UnsupportedError
from planner._src.trace import candidates, loops, probes, shard
from planner._src.trace.per_device import shard_nbytes
from planner._src.trace.prices import hlo_recompute_prices, prices_hlo
from planner._src.trace.regions import merge_regions, policy_text, region_structure_key, site_key
from planner._src.types import Region, Trace
from planner._src.xla import adapter, compile_options, hlo
from planner._src.xla import compile as xla_compile
from planner._src.xla.fingerprint import fingerprint_of
from planner._src.xla.jobs import CompileJobs


def trace_step(
    step_fn: Callable,
    args: Sequence[Any],
    *,
    split_call_sites: bool = False,
    backend: str | None = None,
    compiler: str = "",
    hardware=None,
    workers: int = 1,
    anchor_out: list | None = None,
) -> Trace:
    """Trace ``step_fn(*args)`` and list the candidates of every checkpointed region.

    By default identical regions at several call sites are merged into one region (one
    decision per class for all). With ``split_call_sites=True`` every call site stays its own
    region with its own ``group`` (layer groups: per-group decisions, one policy per call site).

    ``hardware`` (a cost_models profile of a GPU), on an XLA:GPU backend (deviceless or this
    GPU): the scanned regions' recompute is priced kernel by kernel from the full-remat
    anchor's compiled HLO (``Region.hlo_recompute_s``, :func:`hlo_recompute_prices`); on a
    deviceless target that is one more compile of the anchor, with XLA:GPU's default Triton
    GEMMs (xla.compile_options.PRICING_COMPILE_OPTIONS). None, or any other backend: no such pricing and
    no extra compile.

    ``workers``: how many of the stage's compiles (the two anchors, the pricing compile, the
    compiler probes) run at once (xla.jobs.CompileJobs: each starts as soon as its program
    is lowered; 1: one after the other). ``Trace.timings`` says where the stage's time went.

    ``anchor_out``, when given, receives the full-remat anchor's compiled executable (the
    numerics check runs it: the step under full remat, planning/numerics_check.py).
    """
    t_start = time.perf_counter()
    timings: list[tuple[str, float]] = []
    try:
        traced, bound = adapter.trace_step_with(
            step_fn, args, lambda rid, r: adapter.everything_saveable
        )
        step_jaxpr = traced.jaxpr
    except PlannerError:  # already says what, why and how (the adapter's TraceError)
        raise
    except Exception as e:  # the user's code failed to trace: say so, keep the cause
        err = TraceError(
            f"Tracing the train step failed with {type(e).__name__}: {e}\n"
            "Why: the planner traces step_fn(*example_args) with jax.jit(...).trace; the step "
            "must be traceable by jax.jit with these arguments.\n"
            "Fix: check that `jax.jit(step_fn).lower(*example_args)` works on its own, and "
            "pass arrays or jax.ShapeDtypeStruct with the shapes the step expects."
        )
        err.first_trace = True
        raise err from e

    _refuse_nested(bound)
    backward = loops.backward_sites(step_jaxpr)
    differentiated = {rid: b.executions for rid, b in backward.items()}
    # What XLA runs: a backward pass the step's outputs do not need is deleted whole (a step
    # that forgets `return` compiled to 0 bytes and was planned as if it ran), and a region
    # under a scan of length 0 never runs (its working set made the fixed bytes negative).
    live = loops.backward_sites(adapter.live_jaxpr(step_jaxpr)) if differentiated else {}
    mult = {rid: n for rid, n in differentiated.items() if n > 0}
    if not bound or not differentiated:
        why = (
            "it binds no jax.checkpoint / jax.remat region"
            if not bound
            else f"its {len(bound)} checkpoint region(s) are never differentiated "
            "(no gradient flows through them)"
        )
        raise NoCheckpointRegionError(
            f"The train step has nothing to plan: {why}.\n"
            "Why: the planner chooses what the backward pass keeps from inside "
            "jax.checkpoint regions; other activations are kept by JAX's autodiff as they are.\n"
            "Fix: wrap each repeated layer in jax.checkpoint (or flax.linen.remat / nnx.remat "
            "/ eqx.filter_checkpoint), e.g. `layer = jax.checkpoint(layer)` before "
            "`jax.lax.scan`, and take the gradient inside the step (jax.grad / "
            "jax.value_and_grad)."
        )
    if not live:
        n_out = len(adapter.open_jaxpr(step_jaxpr).outvars)
        returns = (
            "returns nothing (None: is a `return` missing?)"
            if n_out == 0
            else f"returns {n_out} value(s), none of which depends on the gradient"
        )
        raise NoCheckpointRegionError(
            f"The train step has nothing to plan: it {returns}, so the backward pass through "
            f"its {len(differentiated)} checkpoint region(s) is dead code.\n"
            "Why: XLA deletes computations whose results the step does not return; the "
            "compiled step keeps no residuals at all, and its memory figure would say nothing "
            "about the training step you will run.\n"
            "Fix: return what training needs from the step, e.g. `return new_state, loss` "
            "(the updated parameters and optimizer state, or the gradients). A step that "
            "updates a Flax NNX model in place (@nnx.jit, optimizer.update) returns its "
            "updates only through nnx.jit, which the planner cannot see: return "
            "nnx.state((model, optimizer)) too, or use the split/merge form "
            "(graphdef, state = nnx.split((model, optimizer)); merge inside a jax.jit step)."
        )
    if not mult:
        raise NoCheckpointRegionError(
            f"The train step has nothing to plan: its {len(differentiated)} checkpoint "
            "region(s) run 0 times per step (a jax.lax.scan over a stack of 0 layers?).\n"
            "Why: a region under a loop of length 0 keeps no residuals; there is no memory to "
            "trade for recompute.\n"
            "Fix: build the model with at least one layer (check the leading dimension of "
            "the stacked layer parameters the scan runs over)."
        )

    timings.append(("trace the step", time.perf_counter() - t_start))

    # The anchor: every region fully rematerialized, compiled. Region ids follow bind order,
    # so the anchor trace's ids match this trace's. The second anchor is the
    # everything-saveable program traced above: compiled as is. Both are lowered here (the
    # planner's policies are bound per thread) and compiled beside each other and the
    # compiles that do not need them (xla.jobs.CompileJobs): with two workers or more the
    # save-everything anchor compiles while the full-remat one is traced and lowered.
    from jax.ad_checkpoint import checkpoint_policies as cp

    in_scan = {
        br.region_id: loops.loop_form(backward[br.region_id].site)[0]
        for br in bound
        if br.region_id in mult
    }
    # Deviceless, the scanned regions' recompute is priced from a second compile of the
    # full-remat anchor with Triton GEMMs on (a live GPU's anchor is the device's program).
    pricing = (
        compile_options.pricing_compile_options()
        if prices_hlo(hardware, backend) and any(in_scan.values())
        else None
    )
    # Regions outside lax.scan: two facts of the compiler, probed once per compiler and JAX.
    outside = not all(in_scan.values())
    name = compiler or backend or ""
    full = "compile the full-remat anchor" + (
        "" if pricing is None else " (twice: then with Triton GEMMs on, for recompute prices)"
    )
    saved = "compile the save-everything anchor"

    def parsed(c):
        # Each program's text parsed once, in its compile's job (beside the other compile):
        # its figures, the sharding index and the loop stacks read the same instructions.
        text = c.as_text() or ""
        return c, text, hlo.parse(text)

    t = time.perf_counter()
    with CompileJobs(workers) as jobs:
        saved_lowered = xla_compile.lower(traced)
        jobs.add(saved, lambda: parsed(xla_compile.compile_lowered(saved_lowered)))
        t_jobs = time.perf_counter()
        anchor_jaxpr, anchor_lowered, _ = xla_compile.lower_with(
            step_fn,
            args,
            lambda rid, r: cp.nothing_saveable,
            which="the full-remat anchor's trace (after a first trace that worked)",
        )
        timings.append(("lower the two anchors", time.perf_counter() - t))

        def full_remat():
            c = parsed(xla_compile.compile_lowered(anchor_lowered))
            # Again in the same job, not at once: two compiles of one lowered program at
            # once would share its MLIR module between threads. Single device only: a
            # partitioned program's HLO shapes are per device, the candidates' global, so its
            # prices would match nothing by size.
            if pricing is None or c[2].num_partitions != 1:
                return *c, None
            return *c, xla_compile.compile_lowered(anchor_lowered, pricing)

        jobs.add(full, full_remat)
        if outside:
            jobs.add(
                "compiler probe: twice-held re-reads", lambda: probes.holds_rereads_twice(name)
            )
            jobs.add("compiler probe: hoisted recompute", lambda: probes.hoists_recompute(name))
        # What the jaxprs alone say, while the compiles run
        fingerprint = fingerprint_of(step_jaxpr, args)
        step_work = cm.work_of(step_jaxpr)
        float_dtypes = adapter.float_dtypes(step_jaxpr)
        draws_random = adapter.draws_random(step_jaxpr)
        anchor_sites = loops.backward_sites(anchor_jaxpr)
        done = jobs.results()
    wall = time.perf_counter() - t_jobs  # from the first job's start
    timings += [(what, s) for what, (_, s) in done.items()]
    if workers > 1 and len(done) > 1:
        timings.append((f"the {len(done)} jobs above, {min(workers, len(done))} at once", wall))
    t = time.perf_counter()
    compiled, anchor_text, anchor_module, compiled_pricing = done[full][0]
    if anchor_out is not None:
        anchor_out.append(compiled)
    anchor = xla_compile.compiled_figures(
        compiled, anchor_jaxpr, backend=backend, compiler=compiler, module=anchor_module
    )
    compiled_saved, saved_text, saved_module = done[saved][0]
    anchor_saved = xla_compile.compiled_figures(
        compiled_saved, step_jaxpr, backend=backend, compiler=compiler, module=saved_module
    )
    # Sharded steps: the partitioned programs give per-device sizes (trace/shard.py). The
    # everything-saveable compile runs every forward equation; the full-remat one adds the
    # recompute's instructions.
    index = shard.parse_hlo([saved_module, anchor_module])

    # One region per differentiated call site, in bind order (a scan's trips are one call
    # site, multiplicity = trip count). Identical bodies share one candidate analysis.
    # What the compiled everything-saveable program's loops really stack (single device:
    # a partitioned program's shapes are per device, the jaxpr's global).
    stacks = loops.compiled_loop_stacks(saved_module) if index.num_partitions == 1 else None
    sites: list[Region] = []
    analysed: dict[tuple, candidates.Analysed] = {}
    # N layers of one function bind one body jaxpr: its text (the structure key) made once
    body_texts: dict[int, str] = {}
    for br in bound:
        if br.region_id not in mult:
            continue
        in_scan, unroll, in_trip = loops.loop_form(backward[br.region_id].site)
        # Only a scan with one layer per loop trip stacks [trips, ...] residuals that can be
        # matched (scan(unroll=u) stacks [trips/u, u, ...]).
        trip_stacks = (
            loops.stacks_of_trip_count(stacks, mult[br.region_id])
            if stacks is not None and in_scan and unroll == 1
            else None
        )
        if id(br.jaxpr) not in body_texts:
            body_texts[id(br.jaxpr)] = region_structure_key(br.jaxpr)
        key = (body_texts[id(br.jaxpr)], in_scan, trip_stacks is not None)
        cache_key = key + (id(br.user_policy),)  # the user's own decisions are per policy
        if cache_key not in analysed:
            analysed[cache_key] = candidates.region_candidates(
                br,
                backward[br.region_id].site,
                anchor_sites[br.region_id].site if br.region_id in anchor_sites else None,
                index,
                trip_stacks,
            )
        a = analysed[cache_key]
        sites.append(
            Region(
                id=len(sites),
                source=loops.region_source(backward[br.region_id].site, br),
                multiplicity=mult[br.region_id],
                call_sites=1,
                candidates=a.candidates,
                user_policy=policy_text(br.user_policy),
                prevent_cse=bool(br.prevent_cse) if isinstance(br.prevent_cse, bool) else True,
                in_scan=in_scan,
                scan_unroll=unroll,
                in_trip=in_trip,
                backward_work=a.backward_work,
                traced_candidates=a.traced,
                inputs=a.inputs,
                group=len(sites),
                bind_ids=(br.region_id,),
                site_key=site_key(br),
                inner_signatures=a.inner_signatures,
                body=hashlib.sha256(repr(key).encode()).hexdigest()[:16],
            )
        )
    priced_with = priced_from = ""
    # (Single device only: a partitioned program's HLO shapes are per device, the
    # candidates' global, so its shares would match nothing by size.)
    if (
        prices_hlo(hardware, backend)
        and index.num_partitions == 1
        and any(r.in_scan for r in sites)
    ):
        text = anchor_text if compiled_pricing is None else (compiled_pricing.as_text() or "")
        prices = hlo_recompute_prices(text, hardware, sites)
        if any(p is not None for p in prices):
            sites = [dataclasses.replace(r, hlo_recompute_s=p) for r, p in zip(sites, prices)]
            priced_with = hardware.name
            priced_from = (compiler or backend or "XLA:GPU") + (
                "" if compiled_pricing is None else ", Triton GEMMs on"
            )
    regions = tuple(sites) if split_call_sites else merge_regions(sites)
    arg_bytes = sum(shard_nbytes(x) for x in jax.tree.leaves(args))
    twice = bool(outside and done["compiler probe: twice-held re-reads"][0])
    hoists = bool(outside and done["compiler probe: hoisted recompute"][0])
    timings.append(("candidates, HLO matching and prices", time.perf_counter() - t))
    return Trace(
        regions=regions,
        anchor=anchor,
        argument_bytes=arg_bytes,
        backend=backend or jax.default_backend(),
        fingerprint=fingerprint,
        undifferentiated_regions=sum(1 for br in bound if br.region_id not in mult),
        anchor_saved=anchor_saved,
        num_partitions=index.num_partitions,
        step_collective_bytes=shard.program_collective_bytes(saved_text)
        if index.num_partitions > 1
        else 0.0,
        step_work=step_work,
        jax_version=jax.__version__,
        float_dtypes=float_dtypes,
        draws_random=draws_random,
        holds_rereads_twice=twice,
        hoists_recompute=hoists,
        hlo_priced_with=priced_with,
        hlo_priced_from=priced_from,
        timings=tuple(timings),
    )


def _refuse_nested(bound) -> None:
    """Nested checkpoints: JAX applies the outer region's policy inside the inner one, so
    the two cannot be decided separately; say so instead of planning something else."""

    def inner(jx):
        for e in jx.eqns:
            if e.primitive is adapter.remat_p and isinstance(
                e.params.get("policy"), adapter.RegionPolicy
            ):
                return e
            for sub, _ in adapter.subjaxprs(e):
                found = inner(sub)
                if found is not None:
                    return found
        return None

    for br in bound:
        e = inner(br.jaxpr)
        if e is not None:
            raise UnsupportedError(
                f"The checkpoint region at {br.source} contains another jax.checkpoint (at "
                f"{adapter.eqn_source(e)}).\nWhy: when regions nest, JAX's partial evaluation "
                "applies the outer region's policy inside the inner one too, so the planner "
                "cannot decide them separately, and one emitted policy could not express two "
                "levels.\nFix: keep one level of jax.checkpoint per repeated block (remove the "
                "inner or the outer one; MaxText wraps each decoder layer once). Nested "
                "lax.scan loops around one checkpoint level are fine."
            )
