"""The candidates of one region: each equation the forward pass runs inside it, with its
bytes, dtype, producer, ``checkpoint_name``, source line, policy signature, what the user's
and every stock policy decide for it, whether the backward pass reads it (and how: a kernel,
a fusion, a reduction), its loop invariance and work, and the region's inputs; from JAX's own
residual selection replayed on the region body (``xla.adapter.replay_partial_eval``)."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import cost_models as cm
from cost_models._cost import aval_size  # per-device elements, as cost_models counts them
from planner._src import policies
from planner._src.trace import loops, per_device, shard
from planner._src.types import Candidate, RegionInput
from planner._src.xla import adapter


def can_be_needed(cands: Sequence[Candidate]) -> set[int]:
    """Indices of the candidates the backward pass can ever need: those it reads and,
    transitively, their inputs (which a recompute would read). Used while the trace stage
    builds candidates; later stages read it off the liveness graph."""
    possible = {c.index for c in cands if c.needed}
    for c in reversed(cands):
        if c.index in possible:
            possible.update(c.inputs)
    return possible


def _reading(cands: Sequence[Candidate], eqns: Sequence[Any], needed_vars) -> list[Candidate]:
    """``cands`` with ``needed``, ``live_outputs`` and ``nbytes`` for a backward pass that
    reads ``needed_vars``."""
    cands = [
        dataclasses.replace(
            c, needed=any(v in needed_vars for v in eqns[c.index].outvars if adapter.is_var(v))
        )
        for c in cands
    ]
    # Outputs that can be residuals: read by the backward pass, or by an equation that may
    # be recomputed for it (can_be_needed); the rest are never kept and weigh nothing.
    possible = can_be_needed(cands)
    read = {
        v for c in cands if c.index in possible for v in eqns[c.index].invars if adapter.is_var(v)
    }
    out = []
    for c in cands:
        outs = eqns[c.index].outvars
        live = tuple(
            k for k, v in enumerate(outs) if adapter.is_var(v) and (v in needed_vars or v in read)
        ) or (tuple(range(len(outs))) if c.effectful else ())
        out.append(
            dataclasses.replace(
                c, live_outputs=live, nbytes=sum(adapter.nbytes(outs[k].aval) for k in live)
            )
        )
    return out


def _inner_signatures(eqn) -> frozenset[str]:
    """The policy signatures of the first-order equations inside a higher-order equation
    (a cond's branches, a loop's body), which the policy decides when JAX splits it."""
    out = set()
    for sub, _ in adapter.subjaxprs(eqn):
        for site in adapter.walk(sub):
            e = site.eqn
            if adapter.decidable(e):
                out.add(adapter.signature_key(e.primitive, *[v.aval for v in e.invars], **e.params))
    return frozenset(out)


SUM_DEPTH = 32  # fusible equations between a residual and the reduction that reads it


def backward_reads(replay) -> tuple[set, set, set]:
    """``(by_kernel, by_fusion, by_reduction)``: the residuals (vars of the forward jaxpr) the
    backward pass reads with a non-fusible equation (or returns), and those it reads with a
    fusible one, directly or through views; and those a reduction of the backward pass reads
    directly or through fusible equations (a product summed for a gradient). XLA must
    materialize the first; the second and third matter outside ``lax.scan`` (cost.py, the
    twice-held term: XLA:CPU of jaxlib 0.10.2 runs a reduction and the elementwise chain
    that feeds it as one library kernel, which reads the residual's copy)."""
    staged = replay.staged_jaxpr
    to_known = dict(zip(staged.invars[: len(replay.residuals)], replay.residuals))
    readers: dict[Any, list] = {}
    for e in staged.eqns:
        for v in e.invars:
            if adapter.is_var(v):
                readers.setdefault(v, []).append(e)
    outs = {v for v in staged.outvars if adapter.is_var(v)}
    views = {"name", "reshape", "squeeze", "expand_dims", "copy", "copy_p"}

    def read(v, kernel: bool, depth=0) -> bool:
        if v in outs or depth > 32:
            return kernel
        for e in readers.get(v, ()):
            name = e.primitive.name
            if name in views:
                if any(read(o, kernel, depth + 1) for o in e.outvars if adapter.is_var(o)):
                    return True
            elif (name not in cm.FUSIBLE) == kernel:
                return True
        return False

    reductions = {"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin"}
    # The fewest fusible equations from each value to an operand of a reduction, for every
    # value at once: the equations are in dependency order, so one backward pass sees every
    # reader's outputs first. A residual counts when that is at most SUM_DEPTH. (This was a
    # depth-first search from each residual that memoized what it found under the depth
    # bound: a value first reached deep, where the bound cut the search, kept False for a
    # residual reaching it shallow, and the answer depended on the residuals' order;
    # tests/test_trace.py, test_residuals_read_by_a_reduction_do_not_depend_on_visit_order.)
    to_reduction: dict[Any, float] = {}
    for e in reversed(staged.eqns):
        name = e.primitive.name
        if name in reductions:
            d = 0.0
        elif name in cm.FUSIBLE:
            d = 1 + min(
                (to_reduction.get(o, math.inf) for o in e.outvars if adapter.is_var(o)),
                default=math.inf,
            )
        else:
            continue
        for v in e.invars:
            if adapter.is_var(v) and d < to_reduction.get(v, math.inf):
                to_reduction[v] = d

    def summed(v) -> bool:
        return to_reduction.get(v, math.inf) <= SUM_DEPTH

    by_kernel = {known for staged_v, known in to_known.items() if read(staged_v, True)}
    by_fusion = {known for staged_v, known in to_known.items() if read(staged_v, False)}
    by_reduction = {known for staged_v, known in to_known.items() if summed(staged_v)}
    return by_kernel, by_fusion, by_reduction


@dataclasses.dataclass(frozen=True, slots=True)
class Analysed:
    """One region body's candidates, inputs and work (shared by identical call sites)."""

    candidates: tuple[Candidate, ...]
    inputs: tuple[RegionInput, ...]
    backward_work: cm.Work
    traced: tuple[Candidate, ...] | None
    inner_signatures: frozenset[str]  # decided inside higher-order equations (see graph.py)


def region_candidates(
    region: adapter.BoundRegion,
    step_site: adapter.Site | None,
    anchor_site: adapter.Site | None,
    index: shard.HloIndex | None = None,
    loop_stacks: Counter | None = None,
) -> Analysed:
    """The candidates of one region (module docstring), whose backward remat equation is at
    ``step_site`` in the traced step and at ``anchor_site`` in the full-remat anchor's trace.
    ``loop_stacks``: for a region in a
    scan of a single-device step, what the compiled everything-saveable program's loops
    stack (compiled_loop_stacks): a per-trip residual XLA drops there is not counted as read
    by the backward pass (residuals_xla_drops)."""
    jvp, n_primal, n_hoisted = adapter.region_jvp(region)
    replay = adapter.replay_partial_eval(jvp, n_primal, adapter.everything_saveable)
    needed_vars = set(replay.residuals)
    hoisted = set(jvp.invars[:n_hoisted])  # constants of the region in the real program
    # Loop invariance: observed for the residuals of the everything-saveable trace, then
    # spread backwards (what an invariant value reads is invariant) and forwards (what
    # reads only invariant values is invariant).
    real_res = [v for v in replay.residuals if v not in hoisted]
    observed = loops.observe_residual_sources(step_site, len(real_res))
    invariant = {v for v, src in zip(real_res, observed) if src == "const"} | hoisted
    eqns = list(replay.known_eqns)
    for eqn in reversed(eqns):
        if any(adapter.is_var(v) and v in invariant for v in eqn.outvars):
            invariant.update(v for v in eqn.invars if adapter.is_var(v))
    for eqn in eqns:
        ins = [v for v in eqn.invars if adapter.is_var(v)]
        if all(v in invariant for v in ins) and (ins or not eqn.effects):
            invariant.update(v for v in eqn.outvars if adapter.is_var(v))
    if loop_stacks is not None:
        # Residuals made in the loop body, stacked per trip (not loop constants, and not
        # the loop's own inputs, which the program stacks anyway).
        kinds = dict(zip(real_res, observed)) if observed else {}
        per_trip = [
            v
            for v in real_res
            if v not in invariant
            and hasattr(v.aval, "shape")
            and kinds.get(v, "stacked") == "stacked"
        ]
        dead_vars = {
            per_trip[i] for i in loops.residuals_xla_drops([v.aval for v in per_trip], loop_stacks)
        }
    else:
        dead_vars = set()

    user_policy = region.user_policy
    producer: dict[Any, int] = {}
    cands: list[Candidate] = []
    inner: set[str] = set()
    for i, eqn in enumerate(eqns):
        outs = [v for v in eqn.outvars if adapter.is_var(v)]
        first = outs[0].aval if outs else None
        in_vars = [v for v in eqn.invars if adapter.is_var(v)]
        ins = tuple(sorted({producer[v] for v in in_vars if v in producer}))
        avals = [v.aval for v in eqn.invars]
        decidable = adapter.decidable(eqn)
        if not decidable and not eqn.effects:
            inner |= _inner_signatures(eqn)
        user = (
            adapter.decision_text(user_policy(eqn.primitive, *avals, **eqn.params))
            if user_policy is not None and decidable
            else "remat"
        )
        cands.append(
            Candidate(
                index=i,
                signature=adapter.signature_key(eqn.primitive, *avals, **eqn.params),
                primitive=eqn.primitive.name,
                name=eqn.params.get("name") if eqn.primitive is adapter.name_p else None,
                shape=tuple(getattr(first, "shape", ())),
                dtype=adapter.dtype_name(first) if first is not None else "",
                nbytes=sum(adapter.nbytes(v.aval) for v in outs),
                # the user's line; JAX's own functions (jnp.where, jax.nn.silu): the call's
                source=adapter.eqn_source(eqn) or adapter.call_source(eqn),
                jax_label=adapter.residual_label(eqn) if outs else "",
                inputs=ins,
                n_outputs=len(eqn.outvars),
                needed=False,  # set by _reading below
                effectful=bool(eqn.effects),
                decidable=decidable,
                loop_invariant=bool(outs) and all(v in invariant for v in outs),
                local_elements=int(aval_size(first)) if first is not None else 0,
                stock=(
                    policies.decide_all(eqn.primitive, avals, eqn.params)
                    if decidable
                    else tuple((n, "remat") for n in policies.STOCK)
                ),
                user_decision=user,
            )
        )
        for v in outs:
            producer[v] = i
    cands = _reading(cands, eqns, needed_vars - dead_vars)
    kernel_read, fusion_read, reduction_read = backward_reads(replay)
    cands = [
        dataclasses.replace(
            c,
            read_by_kernel=any(
                adapter.is_var(v) and v in kernel_read for v in eqns[c.index].outvars
            ),
            read_by_fusion=any(
                adapter.is_var(v) and v in fusion_read for v in eqns[c.index].outvars
            ),
            read_by_reduction=any(
                adapter.is_var(v) and v in reduction_read for v in eqns[c.index].outvars
            ),
        )
        for c in cands
    ]
    # Forward work, fusion-aware: values the backward pass reads are materialized; the rest of
    # a fusible chain stays in registers (cost_models._fusion).
    escaping = [v for c in cands if c.needed for v in eqns[c.index].outvars if adapter.is_var(v)]
    works = cm.eqns_work(eqns, escaping).kernels
    # The same forward with no residual kept (full remat): what it writes only for the
    # backward pass is the difference (cost.py: T0 leaves it out, M_v adds it for a kept v).
    own_outs = [v for v in replay.primal_outvars if adapter.is_var(v)]
    bare = cm.eqns_work(eqns, own_outs).kernels
    cands = [
        dataclasses.replace(
            c,
            work=cm.Work(kernels=(k,)),
            residual_write_bytes=max(0.0, k[1].hbm_bytes - b[1].hbm_bytes),
        )
        for c, k, b in zip(cands, works, bare)
    ]
    # Region inputs: under full remat every input the backward pass reads is a residual;
    # the anchor program shows which of them a scan stacks per trip (the layer's input
    # activation) and which it had anyway (weights, loop constants).
    # The backward remat equation reads [*residuals, *inputs it uses] (remat_partial_eval).
    full = adapter.replay_partial_eval(jvp, n_primal, lambda *_, **__: adapter.Recompute)
    src = loops.observe_residual_sources(anchor_site)
    n_real_res = sum(1 for v in full.residuals if v not in hoisted)
    used_idx = [k for k, u in enumerate(full.staged_inputs_used) if u and k >= n_hoisted]
    in_src = dict(zip(used_idx, src[n_real_res:]))
    inputs = tuple(
        RegionInput(
            index=k,
            nbytes=adapter.nbytes(v.aval),
            stacked=in_src.get(k) in ("stacked", "unscanned"),
            needed=k < len(replay.staged_inputs_used) and replay.staged_inputs_used[k],
        )
        for k, v in enumerate(jvp.invars[:n_primal])
    )
    in_pos = {v: k for k, v in enumerate(jvp.invars[:n_primal])}
    cands = [
        dataclasses.replace(
            c,
            input_reads=tuple(
                sorted(
                    {in_pos[v] for v in eqns[c.index].invars if adapter.is_var(v) and v in in_pos}
                )
            ),
        )
        for c in cands
    ]
    cands, inputs = per_device.per_device(cands, eqns, inputs, jvp.invars[:n_primal], index)
    # The traced program's view (JAX stacks what its backward jaxpr reads, dead or not), for
    # the verify stage. Residuals are matched only on one device (trace_step), where the
    # per-device bytes _reading recomputes are the global ones.
    traced = tuple(_reading(cands, eqns, needed_vars)) if dead_vars else None
    staged = replay.staged_jaxpr
    backward = cm.eqns_work(staged.eqns, [])
    return Analysed(
        candidates=tuple(cands),
        inputs=inputs,
        backward_work=backward,
        traced=traced,
        inner_signatures=frozenset(inner),
    )
