"""The data that crosses the pipeline's stages, in one place.

trace -> graph -> cost -> solve -> emit -> verify -> report: each stage is a function of the
previous stages' outputs, and those outputs are the frozen dataclasses below (tuples and
frozensets inside). None holds a live JAX object: the trace stage reads everything later
stages need off the jaxpr (bytes, shapes, hardware-independent work, what each stock
policy decides) and the verify stage traces the step again when it needs JAX. So each stage
can be tested from a golden input, and a plan's data round-trips through JSON.

Units: bytes are per device (see trace/per_device.py on sharded steps); times are seconds.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

import cost_models as cm
from planner._src.fingerprints import StepFingerprint

DECISIONS = ("save", "remat", "offload")


class Status(enum.StrEnum):
    """What the verifying compiler said of a plan. A ``str``: each member equals, prints and
    serialises as its text, which reports and plan files carry."""

    OK = "compiled, within budget"
    OVER = "compiled, over budget"
    UNVERIFIED = "compiled, unverified"  # fits only by an estimate (host bytes subtracted)
    NOT_COMPILED = "not compiled"
    INVALID = "compiled, figure invalid"  # a negative memory_analysis() figure: never fits
    NUMERICS = "compiled, numerics differ"  # the planned step computes something else


_frozen = dataclasses.dataclass(frozen=True, slots=True, kw_only=True)


# ------------------------------------------------------------------------------ stage 1: trace


@_frozen
class Candidate:
    """One equation of a region's forward pass whose outputs the backward pass could keep."""

    index: int  # position in the region's forward equations
    signature: str  # what a policy sees: equations with equal signatures share a decision
    primitive: str
    name: str | None  # checkpoint_name, if the equation is one
    shape: tuple[int, ...]  # of the (first) output
    dtype: str
    nbytes: int  # its live outputs, per device, one trip of the region
    # (global bytes / shard_divisor, see trace/per_device.py)
    source: str  # file:line of the user's code
    inputs: tuple[int, ...]  # candidates whose outputs it reads (the graph stage's edges)
    needed: bool  # the backward pass reads an output (residual when all is saved)
    # and the compiled program keeps it (trace.loops.residuals_xla_drops)
    effectful: bool  # JAX always runs effectful equations forward; never recomputed
    loop_invariant: bool  # depends only on loop constants: JAX hoists it out of the scan,
    # so as a residual it is stored once, not once per trip
    input_reads: tuple[int, ...] = ()  # region inputs it reads (the graph stage's edges)
    # Whether a checkpoint policy decides this equation: JAX's partial evaluation asks the
    # policy about first-order equations only; a higher-order one (cond, while, a scan inside
    # the region) is split by its own rule, which asks the policy about the equations inside
    # it, so the policy cannot keep its outputs: it is recomputed from its inputs (trace/candidates.py).
    decidable: bool = True
    # Positions of the outputs that can be residuals: read by the backward pass or by a forward
    # equation that may be recomputed for it. None (a candidate built by hand): every output.
    live_outputs: tuple[int, ...] | None = None
    n_outputs: int = 1  # outputs the equation has (live or not)
    # The backward pass reads it with a kernel (a matmul, a custom call, a loop: an equation
    # XLA does not fuse into), directly or through views, or returns it: recomputed, it is
    # materialized; a fusible value read only by fusible backward equations is recomputed
    # inside the fusion that reads it and takes no buffer of its own (docs/cost-model.md).
    read_by_kernel: bool = True
    # The backward pass reads it with a fusible equation, directly or through views (outside
    # lax.scan XLA then holds the value twice when kept: docs/cost-model.md's twice-held term).
    read_by_fusion: bool = False
    # A reduction of the backward pass reads it, directly or through fusible equations (on XLA:CPU
    # of jaxlib 0.10.2 a library kernel with its elementwise producers: docs/cost-model.md D_r).
    read_by_reduction: bool = False
    # The equation's forward work (fusion-aware, global avals): cost_models.Work of one kernel.
    work: cm.Work = cm.Work()
    # Of ``work``'s HBM bytes (global avals), those the forward writes only because the backward
    # pass reads the value as a residual: a fusible value whose forward readers are all fused into
    # the same kernel stays in registers when it is not kept (docs/cost-model.md, M_v). None (a
    # candidate built by hand): all of its bytes.
    residual_write_bytes: float | None = None
    local_elements: int = 0  # elements of its first output as cost_models counts them
    # (per device under Explicit sharding), for time divisors
    # What the stock policies (planner._src.policies.STOCK) and the user's own policy decide
    # for it, recorded while the equation was at hand.
    stock: tuple[tuple[str, str], ...] = ()
    user_decision: str = "remat"
    # What jax.ad_checkpoint.print_saved_residuals prints for it when it is kept
    # (xla.adapter.residual_label); "" for candidates built by hand.
    jax_label: str = ""
    # Sharded steps (see trace/per_device.py and trace/shard.py):
    global_nbytes: int = 0  # its live outputs at their global (jaxpr) shapes
    shard_divisor: int = 1  # global elements / per-device elements of its outputs
    # hlo | hlo (reshaped) | hlo (ambiguous) | sharding-constraint | input-sharding |
    # reader-sharding | same-shape | unsharded (conservative) | single device
    shard_source: str = "single device"
    flop_divisor: int = 1  # global work / per-device work of the equation
    collective_bytes: float = 0.0  # per device per run: collectives the partitioner inserted
    collectives: tuple[str, ...] = ()  # those collectives, e.g. "all-gather f32[32,32]"

    def stock_decision(self, policy: str) -> str:
        return dict(self.stock).get(policy, "remat")


@_frozen
class RegionInput:
    """An input of the region. The backward pass keeps it when it or a recompute reads it."""

    index: int
    nbytes: int  # per device (global_nbytes / shard_divisor)
    stacked: bool  # kept per trip (a scan stacks it: the layer's input activation); else
    # the program holds it anyway (weights, loop constants): no extra bytes
    needed: bool  # the backward pass reads it directly when everything is saved
    global_nbytes: int = 0
    shard_divisor: int = 1
    shard_source: str = "single device"


@_frozen
class Region:
    """A checkpointed region (one ``jax.checkpoint`` call site, or several identical ones)."""

    id: int
    source: str
    multiplicity: int  # executions per step
    call_sites: int  # identical regions merged into this one
    candidates: tuple[Candidate, ...]
    user_policy: str  # the policy the user's code passed (overridden while planning)
    prevent_cse: bool
    in_scan: bool  # runs inside lax.scan (the loop form matters)
    # The largest lax.scan unroll around it; above 1 the planner does not offload there (XLA's
    # host offloader cannot compile compute on host data between the offload and its store).
    scan_unroll: int = 1
    # Trips of the loops whose ONE trip runs both the region's forward and its backward pass
    # (gradient accumulation: ``jax.grad`` inside ``lax.scan`` over microbatches); 1 where
    # the backward pass runs after the whole forward pass. Its residuals die within a trip,
    # so only ``multiplicity // in_trip`` executions' residuals are live at once
    # (``live_multiplicity``); the time terms still count every execution.
    in_trip: int = 1
    inputs: tuple[RegionInput, ...] = ()
    backward_work: cm.Work = cm.Work()  # one backward trip without recompute (global avals)
    group: int | None = None  # layer groups: its call-site position; merged regions: None
    bind_ids: tuple[int, ...] = ()  # the region ids the adapter gave its call sites (bind order)
    body: str = ""  # hash of the body: equal bodies are identical regions
    # Where the user's code can give this call site a policy of its own: the source line of
    # the jax.checkpoint call and the identity of the policy it passed (trace.site_key).
    # Call sites with equal keys take one policy whatever the planner decides.
    site_key: str = ""
    # Signatures of the equations inside the region's higher-order equations (cond branches,
    # loop bodies): the policy decides those too, so a class with such a signature would keep
    # bytes the model does not see (graph.py forces it to be recomputed).
    inner_signatures: frozenset[str] = frozenset()
    # The candidates as the traced (jaxpr) program keeps them, where they differ from
    # ``candidates`` (residuals the compiled program drops); None: the same. Verify reads it.
    traced_candidates: tuple[Candidate, ...] | None = dataclasses.field(
        default=None, repr=False, compare=False
    )
    # Per candidate, seconds per trip of its recompute as the full-remat anchor's compiled
    # XLA:GPU HLO prices it (recompute_shares.region_recompute_seconds: the share of the backward
    # loop's kernels that recomputes it), None where no kernel share went to it; the whole
    # field None where the region was not priced from HLO (XLA:CPU, outside lax.scan, a loop
    # the anchor's HLO does not identify). Priced with the profile ``Trace.hlo_priced_with``.
    hlo_recompute_s: tuple[float | None, ...] | None = None

    @property
    def live(self) -> int:
        """Executions whose residuals are held at once: ``multiplicity // in_trip`` (the
        memory terms' multiplier; the time terms count every execution)."""
        return max(1, self.multiplicity // max(1, self.in_trip))


@_frozen
class CompiledFigures:
    """``compiled.memory_analysis()`` of one compile, plus what the HLO says about host memory."""

    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int
    host_temp_bytes: int
    host_buffers_in_hlo: int  # instructions with a host memory space S(5) in the HLO
    async_host_copies_in_hlo: int  # copy-start / async fusions touching host memory
    jaxpr_host_bytes: int  # bytes the traced program places in pinned_host (all trips)
    stacked_device_bytes: int  # arrays forward scans stack for backward scans, in HBM
    stacked_host_bytes: int  # ... and in pinned_host
    stacked_host_arrays: int
    backend: str
    compiler: str = ""  # which compiler made these figures (target.CompilerTarget)
    # Bytes the program copies device-to-device per run to slice its loops' stacked operands
    # (hlo.loop_slice_copy_bytes; XLA:GPU only, 0 elsewhere).
    loop_copy_bytes: int = 0
    # Bytes the while-loop bodies allocate per run for copies of their operands' slices,
    # summed over the bodies (hlo.loop_slice_bytes; the cost model's K_r, docs/cost-model.md).
    loop_slice_bytes: int = 0
    # Bytes the GPU's own compile of this program can add that a deviceless compile leaves
    # out (its cuDNN workspaces; xla.deviceless_bound.unseen_workspaces), and what they are.
    unseen_workspace_bytes: int = 0
    unseen_workspace_note: str = ""

    @property
    def device_bytes(self) -> int:
        """Device memory the program needs, as users count it:
        arguments + outputs - aliased + temporaries."""
        return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes


@_frozen
class ScaleCheck:
    """A plan between the anchors compiled to judge the small working-set scale they measured
    (planning/scale_check.py): predicted by the model with that scale and with scale 1."""

    scale: float  # the small scale (clamped at 0)
    cap_bytes: int  # the predicted peak the plan was solved for (the anchors' midpoint)
    compiled_bytes: int  # its compile, as users count it
    predicted_small: int
    predicted_one: int
    compiler: str = ""

    @property
    def accepted(self) -> bool:
        """Whether the small scale predicted the compile closer (then every model uses it)."""
        small, one, c = self.predicted_small, self.predicted_one, self.compiled_bytes
        return abs(small - c) < abs(one - c)


@_frozen
class Trace:
    """Everything stage 1 learned about the step."""

    regions: tuple[Region, ...]
    anchor: CompiledFigures  # the step compiled with every region fully rematerialized
    argument_bytes: int  # per device (each argument's shard shape)
    backend: str
    fingerprint: StepFingerprint  # program, arguments, JAX: stale plans, caches
    undifferentiated_regions: int  # checkpoint regions the gradient never reached
    anchor_saved: CompiledFigures | None = None  # ... and with everything saved
    scale_check: ScaleCheck | None = None  # the plan that judged a small working-set scale
    num_partitions: int = 1  # devices the step is partitioned over (SPMD)
    step_collective_bytes: float = 0.0  # per device per step: the partitioner's collectives
    step_work: cm.Work = cm.Work()  # the whole step with nothing recomputed (global avals)
    jax_version: str = ""
    # every floating dtype the step computes in (its equations' outputs, nested jaxprs
    # included): the numerics check's tolerance follows the coarsest (verify/numerics/)
    float_dtypes: tuple[str, ...] = ()
    # the step draws random bits (dropout, noise): its float64 run draws others, so the
    # numerics check never judges it against that run (numerics.run_float64)
    draws_random: bool = False
    # The compiler holds a kept value twice outside lax.scan when the backward pass reads it with a
    # kernel and a fusion (a probe compile, trace.holds_rereads_twice; docs/cost-model.md, D_r).
    holds_rereads_twice: bool = False
    # The compiler runs a region's recompute outside lax.scan in the forward pass and holds
    # its outputs until the backward pass (a probe, trace.hoists_recompute; cost-model.md E_r).
    hoists_recompute: bool = False
    # The profile (its name) and the compile the regions' ``hlo_recompute_s`` were priced with, e.g.
    # "h200" and "XLA:GPU deviceless for the H200 ..., Triton GEMMs on"; "" where no region was
    # priced from HLO (docs/cost-model.md then prices every recompute from the library).
    hlo_priced_with: str = ""
    hlo_priced_from: str = ""
    # Where the stage's time went: (what, wall seconds) in order; compiles run at once each
    # give their own seconds, then one line with their wall time together (trace_step).
    timings: tuple[tuple[str, float], ...] = ()


# ------------------------------------------------------------------------------ stage 2: graph


@_frozen
class TensorClass:
    """A set of candidates the policy cannot tell apart, so one decision covers them all."""

    key: str  # the policy signature (g<group>|signature per group)
    label: str  # for people: checkpoint name or primitive[shape]
    name: str | None  # checkpoint_name when the class is a name
    members: tuple[tuple[int, int], ...]  # (region id, candidate index)
    nbytes_per_trip: int  # bytes of all members in one trip of their regions
    needed_members: int  # members the backward pass reads
    group: int | None = None  # the layer group (call site) it belongs to
    signature: str = ""  # what the policy sees (the key without its group)
    # A decision the class cannot escape, and why (e.g. "remat": a higher-order equation the
    # policy cannot keep, or a signature that also occurs inside one): None if free.
    forced: str | None = None
    forced_why: str = ""


# ------------------------------------------------------------------------------ stage 3: cost


@_frozen
class Assignment:
    """A decision per class key. Keys not present default to ``remat`` (JAX's default)."""

    decisions: tuple[tuple[str, str], ...]

    @staticmethod
    def of(mapping: Mapping[str, str]) -> Assignment:
        for k, d in mapping.items():
            if d not in DECISIONS:
                raise ValueError(f"decision for {k!r} is {d!r}; expected one of {DECISIONS}")
        return Assignment(decisions=tuple(sorted(mapping.items())))

    def as_dict(self) -> dict[str, str]:
        return dict(self.decisions)

    def get(self, key: str) -> str:
        return self.as_dict().get(key, "remat")


@_frozen
class RegionCost:
    region_id: int
    multiplicity: int  # executions per step: the time terms
    # executions whose residuals are live at once: the memory terms (Region.in_trip)
    live_multiplicity: int = 0  # 0: multiplicity
    recompute_s: tuple[float, ...]  # per candidate: its recompute in the backward pass
    materialize_s: tuple[float, ...]  # per candidate: the forward write saving it forces
    # per candidate: the copy into the scan's stacked residual that saving it (not offloading
    # it) forces, where XLA cannot fuse that write into the producer (see docs/cost-model.md)
    stack_copy_s: tuple[float, ...] = ()
    # per candidate: kept, its buffer is held twice when the backward pass reads it with both
    # a kernel and a fusion (outside lax.scan; docs/cost-model.md, the twice-held term D_r)
    twice_held: tuple[bool, ...] = ()
    # the compiler runs this region's recompute in the forward pass and holds the recomputed
    # values the backward pass reads from there on (outside lax.scan, on a compiler whose
    # probe says so: trace.hoists_recompute; docs/cost-model.md, the hoisted term E_r)
    hoists_recompute: bool = False
    # per candidate: recomputed, XLA recomputes it inside the backward fusions that read it
    # and gives it no buffer (a fusible value no kernel and no reduction of the backward pass
    # reads; docs/cost-model.md, W_r)
    fused_away: tuple[bool, ...] = ()
    # a backward trip frees its residuals kept only to recompute others once that recompute
    # has read them, before the trip's working set peaks (outside lax.scan, where the
    # recompute waits for the backward pass; docs/cost-model.md, the trip-freed term Q_r)
    frees_sources_in_trip: bool = False
    d2h_s: tuple[float, ...]  # per candidate: device->host copy of its outputs
    h2d_s: tuple[float, ...]  # per candidate: host->device copy back
    fwd_after_s: tuple[float, ...]  # forward compute after the candidate is made
    bwd_before_s: tuple[float, ...]  # backward compute before its first use
    fwd_s: float  # one forward trip of the region
    bwd_s: float  # one backward trip (without recompute)

    @property
    def live(self) -> int:
        """Executions whose residuals are held at once (the memory terms' multiplier)."""
        return self.live_multiplicity or self.multiplicity


@_frozen
class CostModel:
    hardware: Any  # cost_models.HardwareProfile (frozen data)
    regions: tuple[RegionCost, ...]
    base_step_s: float  # the step with nothing recomputed
    fixed_bytes: int  # bytes no plan changes (measured, see docs/cost-model.md)
    correction_bytes: int  # verify's measured error: compiled - predicted (either sign)
    working_set_scale: float = 1.0  # measured, see cost.build_cost_model
    # a small scale the anchors measured that no compile has judged yet (the model keeps 1)
    unconfirmed_scale: float | None = None
    # Where the per-candidate recompute seconds came from, in words (the report says it):
    # the cost library's roofline, or the compiled HLO for some regions (docs/cost-model.md).
    recompute_priced_from: str = ""
    # Share of a scanned region's saved per-trip residuals its backward trip copies out of
    # the stacked buffers (K_r, measured from the anchors' HLO, see cost.build_cost_model)
    slice_copy_share: float = 0.0
    host_cap_bytes: float
    overlap_efficiency: float  # fraction of the link's speed while compute runs
    allow_offload: bool
    unknown_primitives: tuple[str, ...]
    # Classes never offloaded although offloading is allowed (a region under
    # lax.scan(unroll > 1), whose offloads XLA cannot compile).
    no_offload_classes: frozenset = frozenset()
    # Train state (issue 21): per movable optimizer-state leaf, what placing it in pinned host
    # memory saves and costs (cost.state.LeafCost; formulas: docs/cost-model.md#the-train-state).
    # Empty: no state placement is planned and nothing below changes.
    state: tuple = ()
    # Per direction, the profile's calibrated hiding model (cost_models.HidingModel: eta, capacity,
    # floor; docs/cost-model.md's X terms). None: the profile has none, and overlap_efficiency is
    # the eta of both directions, with no capacity and no floor (cost.hiding_models).
    d2h_hiding: Any = None
    h2d_hiding: Any = None


@_frozen
class RegionPrediction:
    region_id: int
    device_residual_bytes: int  # one trip: saved values made anew each trip
    invariant_residual_bytes: int  # loop-invariant saved values, stored once
    input_residual_bytes: int  # region inputs a scan stacks for the backward pass
    host_residual_bytes: int  # one trip: offloaded values, stacked in pinned_host
    invariant_host_bytes: int = 0  # offloaded loop-invariant values, stored once
    working_set_bytes: int  # one backward trip: recomputed and reloaded values, slice copies
    recompute_s: float  # one trip
    materialize_s: float  # one trip
    d2h_s: float
    h2d_s: float
    exposed_fwd_s: float
    exposed_bwd_s: float
    needed: tuple[bool, ...]  # per candidate: the backward pass needs it
    # one trip: the second copy of kept values the compiler holds twice (docs/cost-model.md, D_r);
    # part of the peak, not of what JAX keeps (verify compares device_residual_bytes with that)
    twice_held_bytes: int = 0
    # recomputed values the backward pass reads, held from the forward pass on where the compiler
    # hoists the recompute (docs/cost-model.md, E_r): one trip, and loop-invariant ones once; part
    # of the peak, not of what JAX keeps
    hoisted_bytes: int = 0
    invariant_hoisted_bytes: int = 0
    # one trip: kept values the backward pass does not read, kept only for a hoisted recompute,
    # which reads them in the forward pass: JAX keeps them, the compiler frees them there
    # (docs/cost-model.md, E_r); subtracted from the peak, not from what JAX keeps
    released_bytes: int = 0
    # one backward trip of a scanned region: the copies of its saved residuals' slices out of
    # the stacked buffers (docs/cost-model.md, K_r); part of the peak, not of the scaled working set
    slice_copy_bytes: int = 0
    # one trip: kept values the backward pass does not read, kept only for a recompute that runs in
    # the backward trip and frees them before the trip's working set peaks (docs/cost-model.md,
    # Q_r): held while later trips run, not at this trip's own peak; not part of what JAX keeps
    trip_freed_bytes: int = 0


@_frozen
class Prediction:
    peak_bytes: int
    host_bytes: int
    step_s: float
    base_step_s: float
    recompute_s: float  # whole step
    materialize_s: float  # whole step
    transfer_s: float  # whole step, both directions
    exposed_transfer_s: float  # whole step
    fixed_bytes: int
    residual_bytes: int  # every region's kept bytes, all trips
    working_set_bytes: int  # of the region where the peak falls
    # of which the copies of that region's saved residuals' slices (docs/cost-model.md, K_r)
    slice_copy_bytes: int = 0
    regions: tuple[RegionPrediction, ...]


# ------------------------------------------------------------------------------ stage 4: solve


@_frozen
class SolverOptions:
    # CP-SAT deterministic seconds per phase: work counted, not time elapsed; one is 1-4 wall
    # seconds on one core with linearization_level 2 (benchmarks/solver_scale.py)
    time_limit_s: float = 30.0
    workers: int = 1  # 1 keeps the search deterministic (CP-SAT's parallel portfolio is not)
    seed: int = 0
    # CP-SAT's linear relaxation: 2 adds the LP of every constraint (default 1). At 2 the MoE
    # example's trace and a synthetic 1,000-candidate graph are proved optimal in 1.5 and 2.0
    # s; at 1 they stop at the limit with gaps of 56% and 39%, with worse plans
    # (measured: benchmarks/results/solver-2026-12-02.md).
    linearization_level: int = 2


@_frozen
class Solution:
    assignment: Assignment
    status: str  # OPTIMAL or FEASIBLE (time limit hit: see gap)
    objective_s: float  # predicted step time as the solver scored it
    bound_s: float  # best lower bound CP-SAT proved
    gap: float  # (objective - bound) / objective
    wall_s: float
    num_classes: int
    num_variables: int
    usable_bytes: int  # the usable budget it was solved for (budget.Budget.usable)
    # False: the wall-clock guard, not deterministic time, stopped a phase
    reproducible: bool = True
    state_on_host: frozenset = frozenset()  # paths of the train-state leaves in pinned host


# ------------------------------------------------------------------------------ stage 5: emit


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Emitted:
    policy: Any  # pass to jax.checkpoint(..., policy=...); None: groups differ
    policy_source: str  # Python text of the policy
    names_only: bool  # policy is JAX's own name-based policy
    xla_flags: str  # value for the XLA_FLAGS environment variable
    xla_flag_notes: tuple[tuple[str, str, str], ...]  # (flag, why, source)
    maxtext_yaml: str
    policies: tuple = ()  # per layer group (call order); () when the plan is uniform
    policy_sources: tuple[str, ...] = ()
    stock: str | None = None  # the plan is this stock policy (planner._src.policies)

    @property
    def compiler_options(self) -> tuple[tuple[str, Any], ...]:
        """``xla_flags`` as JAX compiler options ((name, value) pairs, e.g. for
        ``lowered.compile(compiler_options=dict(...))``): the verify stage compiles with them,
        so the compiled figures are those of the program that runs under ``xla_flags``."""
        return tuple(cm.flags_to_compiler_options(self.xla_flags).items())


# ------------------------------------------------------------------------------ stage 6: verify


@_frozen
class Check:
    name: str
    ok: bool
    detail: str
    # the compiler cannot say (XLA:CPU's one memory for a placement's host bytes): neither
    # failed nor passed ("check unverified"; the plan's status "compiled, unverified")
    unverified: bool = False

    @property
    def word(self) -> str:
        """The report's word for it: ok, FAILED, or unverified."""
        return "unverified" if self.unverified else ("ok" if self.ok else "FAILED")


@_frozen
class ScheduleExposure:
    """Exposed host-copy time per step, per direction, read from a compiled XLA:GPU schedule
    (planner/_src/verify/schedule/: the copies' starts and dones in the scheduled loop bodies, the
    kernels between them priced by planner/_src/xla/kernels.py, the copy streams and one link per
    direction replayed), beside the cost model's figure for the same plan. ``step_s`` takes
    the schedule's reloads and the model's stores: a deviceless compile does not reproduce
    how XLA deals the stores to copy streams (benchmarks/results/schedule-exposure-2026-12-05.md)."""

    d2h_copy_s: float
    d2h_exposed_s: float
    h2d_copy_s: float
    h2d_exposed_s: float
    model_d2h_exposed_s: float  # the cost model's, for the same plan
    model_h2d_exposed_s: float
    step_s: float  # the model's step with the schedule's reload exposure in place of its own
    copies: int  # host copies found in the schedule (per trip of their loop)
    compiler: str  # who scheduled the module
    source: str  # which compile's schedule ("the verify compile", "a Triton-GEMM compile")


@_frozen
class Verification:
    status: str
    compiled: CompiledFigures | None
    compiled_device_bytes: int | None  # what counts against the budget on this backend
    predicted_peak_bytes: int
    usable_bytes: int  # the usable budget it was judged against (budget.Budget.usable)
    checks: tuple[Check, ...]
    backend: str
    note: str = ""
    # False when compiled_device_bytes is an estimate (a backend that keeps host arrays in
    # device memory: the traced program's host bytes were subtracted).
    exact: bool = True
    compiler: str = ""  # which compiler made the figures (target.CompilerTarget.description)
    # On an XLA:GPU target, for a plan that offloads: the exposed copy time the compiled
    # schedule predicts (None elsewhere: XLA:CPU has no asynchronous host copies)
    schedule: ScheduleExposure | None = None

    @property
    def ok(self) -> bool:
        return self.status == Status.OK and all(c.ok for c in self.checks)

    @property
    def error_bytes(self) -> int | None:
        if self.compiled_device_bytes is None:
            return None
        return self.compiled_device_bytes - self.predicted_peak_bytes


# ------------------------------------------------------------------------- the stock policies


@_frozen
class Baseline:
    name: str
    assignment: Assignment
    prediction: Prediction
    fits: bool  # predicted (or compiled, where compiled) within the budget
    applicable: bool  # False: offload not allowed here, or the model has no such names
    compiled_device_bytes: int | None = None  # the verifying compiler's figure, when compiled


@_frozen
class Round:
    """One solve-and-compile round of the verify loop.

    ``purpose``: "walk" (a plan of the frontier walk, planning/walk.py: the model's plan at
    one cap of its fixed grid, ``budget - correction_bytes``), "stock" (a stock policy's
    compile), "probe" (before a refusal, the model's plan for a larger budget, compiled:
    planning/probes.py); plan files written before the walk also say "fit" (a first solve
    or one after a compile exceeded the budget) and "fill" (a faster plan tried where the
    compile left the budget well unused). ``outcome`` says what became of the round's plan
    ("within budget", "over budget", "JAX does not keep ...", ...)."""

    correction_bytes: int
    predicted_peak_bytes: int
    compiled_device_bytes: int | None
    status: str
    purpose: str = "fit"
    predicted_step_s: float | None = None
    outcome: str = ""
