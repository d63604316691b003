"""Fusion-aware memory traffic: what XLA's fusion passes leave of the unfused byte counts.

The per-primitive rules (``_rules*.py``) count every equation as reading its inputs from and
writing its outputs to HBM. XLA fuses chains of elementwise and layout operations, and a
reduction with the elementwise work that feeds it, into one kernel; values inside a fusion
never touch HBM. Counting them anyway overstates a transformer layer's memory time several
times over (one Llama layer's forward on the H200: 386 GB unfused against about 60 GB once
fused; measured: benchmarks/results/h200-2026-11-30-probe/).

The model here is XLA's basic rule (xla/service/gpu/transforms/*fusion*, "producer-consumer
fusion of elementwise ops"): a *fusible* equation's input costs HBM bytes only when its
producer is not fusible (a matmul, a custom call, a collective, a loop, or the jaxpr's own
inputs), and its output only when a non-fusible equation or the jaxpr's outputs read it.
Non-fusible equations keep their rule's cost. FLOPs are unchanged; a fused chain launches one
kernel, which the rules already reflect by giving fusible operations no launch.

Broadcasts are never read at their broadcast size. XLA fuses a broadcast (and iota, and
elementwise work on broadcasts only) into every fusion that reads it, so that fusion reads the
broadcast's *source*. This holds across a loop boundary too: the causal mask and the -inf
filler of XLA attention (``jnp.where(mask, scores, -inf)`` over [batch, heads, seq, seq]) are
loop invariants JAX hoists out of the layer scan, yet on the H200 the softmax fusions inside
the loop read the [seq, seq] comparison, not a [batch, heads, seq, seq] buffer
(measured: benchmarks/results/cost-model-other-2026-12-04.md: ``fusion_165`` of the Llama step reads
the mask as ``pred[4096,4096]``-sized ``loop_compare_fusion``). Counted at full size they
cost 2 x (8.6 GB + 2.1 GB) per layer of the MoE example. A fusible equation therefore pays
for an input that is broadcast-derived (``expanded_sources``; for a loop or call body, the
body inputs bound to such values outside) the bytes of its sources.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jax.extend.core import ClosedJaxpr, Jaxpr, Literal

from ._cost import Cost, aval_bytes, eqn_cost, fusible_primitives, sub_jaxprs

# Elementwise arithmetic, comparisons, casts, layout changes and reductions: the operations
# XLA's GPU and CPU backends fuse (loop and input fusions). The registry is the one table:
# each rule says whether its primitive is fusible (cost_models._rules_*, register_rule).
FUSIBLE: frozenset[str] = fusible_primitives()

_CALLS = (
    "pjit",
    "jit",
    "closed_call",
    "core_call",
    "remat2",
    "checkpoint",
    "custom_jvp_call",
    "custom_vjp_call",
    "custom_vjp_call_jaxpr",
    "shard_map",
)


def _inner(j) -> Jaxpr:
    return j.jaxpr if isinstance(j, ClosedJaxpr) else j


def _subjaxprs(eqn) -> list[Jaxpr]:
    return [_inner(j) for j in sub_jaxprs(eqn.params)]


# Equations whose output is a broadcast of its inputs' data (XLA regenerates it in any fusion
# that reads it) and fusible equations that keep a broadcast a broadcast when every input is one.
_BROADCASTS = frozenset({"broadcast_in_dim", "iota"})


def expanded_sources(eqns, given: dict | None = None) -> dict:
    """Values that are broadcasts of smaller data, mapped to the bytes a fusion reading them
    reads (the sources'): ``given`` (inputs known to be such), the outputs of broadcast_in_dim
    and iota, and the outputs of fusible equations all of whose array inputs are such."""
    src = dict(given or {})
    for e in eqns:
        name = e.primitive.name
        ins = [v for v in e.invars if not isinstance(v, Literal)]
        if name in _BROADCASTS:
            read = sum(src.get(v, aval_bytes(v.aval)) for v in ins)
        elif name in FUSIBLE and ins and all(v in src for v in ins):
            read = sum(src[v] for v in ins)
        elif name in _CALLS and _subjaxprs(e):  # jnp.where's jit: its outputs' sources
            body = _subjaxprs(e)[0]
            inner = expanded_sources(body.eqns, body_sources(e, body, src))
            for out, v in zip(e.outvars, body.outvars, strict=False):
                if not isinstance(v, Literal) and v in inner:
                    src[out] = inner[v]
            continue
        else:
            continue
        for v in e.outvars:
            if read < aval_bytes(v.aval):
                src[v] = float(read)
    return src


def _scan_consts(params) -> int:
    """Number of constant operands of a scan: ``num_consts`` (JAX <= 0.10), or the first part
    of the flat tree ``ft_in = (consts, carry, xs)`` (JAX 0.11)."""
    if "num_consts" in params:
        return int(params["num_consts"])
    consts, _, _ = params["ft_in"].unpack()
    return len(consts)


def body_sources(eqn, body, src: dict) -> dict:
    """``src`` (expanded_sources outside) carried to the inputs of ``eqn``'s body ``body``:
    a scan's constants, or a call's inputs bound one to one."""
    if not src:
        return {}
    invars = _inner(body).invars
    if eqn.primitive.name == "scan":
        pairs = list(zip(eqn.invars[: _scan_consts(eqn.params)], invars, strict=False))
    elif eqn.primitive.name in _CALLS and len(invars) == len(eqn.invars):
        pairs = list(zip(eqn.invars, invars, strict=True))
    else:
        return {}
    return {b: src[o] for o, b in pairs if not isinstance(o, Literal) and o in src}


def fused_eqn_costs(jaxpr: Any, expanded: dict | None = None) -> list[Cost]:
    """Per equation of ``jaxpr``, its cost with HBM bytes counted at fusion boundaries;
    ``expanded``: inputs of ``jaxpr`` that are broadcasts made outside it (expanded_sources)."""
    jx = _inner(jaxpr)
    return fused_costs(jx.eqns, [v for v in jx.outvars if not isinstance(v, Literal)], expanded)


def fused_costs(
    eqns, escaping, expanded: dict | None = None, *, calls: bool = True
) -> list[Cost | None]:
    """Per equation, fusion-aware cost; ``escaping`` are values read after these equations;
    ``expanded``: inputs that are broadcasts made before them (read at their sources' bytes).
    ``calls=False``: None in place of each call, loop or cond with a body (:func:`work_of`
    walks those bodies itself; costing them here too walked every body twice)."""
    src = expanded_sources(eqns, expanded)
    producer_fusible: dict[Any, bool] = {}
    consumers: dict[Any, list[bool]] = {}
    for e in eqns:
        fus = e.primitive.name in FUSIBLE
        for v in e.invars:
            if not isinstance(v, Literal):
                consumers.setdefault(v, []).append(fus)
        for v in e.outvars:
            producer_fusible[v] = fus
    escaping = set(escaping)
    costs = []
    for e in eqns:
        if e.primitive.name not in FUSIBLE:
            costs.append(fused_call_cost(e, src) if calls or not _walked(e) else None)
            continue
        base = eqn_cost(e)
        read = sum(
            src.get(v, aval_bytes(v.aval))
            for v in e.invars
            if not isinstance(v, Literal) and not producer_fusible.get(v, False)
        )
        written = sum(
            aval_bytes(v.aval)
            for v in e.outvars
            if v in escaping or not all(consumers.get(v, [True]))
        )
        costs.append(dataclasses.replace(base, hbm_bytes=float(read + written)))
    return costs


def fused_call_cost(eqn, expanded: dict | None = None) -> Cost:
    """A non-fusible equation; calls and loops are costed from their fused bodies
    (``expanded``: expanded_sources of the equations around it)."""
    name = eqn.primitive.name
    subs = _subjaxprs(eqn)
    src = expanded or {}
    if not subs or name not in _CALLS + ("scan", "while", "cond"):
        return eqn_cost(eqn)
    if name == "cond":
        costs = [fused_jaxpr_cost(s) for s in subs]
        out = costs[0]
        for c in costs[1:]:
            out = out.elementwise_max(c)
        return out
    if name == "scan":
        body = fused_jaxpr_cost(subs[0], body_sources(eqn, subs[0], src))
        return body.scale(int(eqn.params["length"]))
    if name == "while":  # trip count unknown statically: one trip, as the unfused rule does
        total = Cost()
        for s in subs:
            total = total + fused_jaxpr_cost(s)
        return dataclasses.replace(total, notes=total.notes + ("while loop counted once",))
    total = Cost()
    for s in subs[:1]:
        total = total + fused_jaxpr_cost(s, body_sources(eqn, s, src))
    return total


def fused_jaxpr_cost(jaxpr: Any, expanded: dict | None = None) -> Cost:
    """``jaxpr_cost`` with fusion-aware memory traffic (see the module docstring)."""
    total = Cost()
    for c in fused_eqn_costs(jaxpr, expanded):
        total = total + c
    return total


def matmul_dtype(eqn, hw) -> str:
    """The matrix-rate key for an equation's matmul FLOPs, from its operand dtype.

    float32 matmuls run in TF32 on GPUs at JAX's default precision (jax.default_matmul_precision
    docs: DEFAULT allows tensorfloat32 on GPU) and in true fp32 elsewhere or at HIGHEST.
    """
    dtypes = [getattr(v.aval, "dtype", None) for v in eqn.invars if hasattr(v, "aval")]
    name = next((str(d) for d in dtypes if d is not None and "float" in str(d)), "bfloat16")
    if name == "float32":
        precision = str(eqn.params.get("precision", ""))
        if hw.platform == "gpu" and "HIGHEST" not in precision:
            return "tf32"
    return name


def eqn_seconds(eqn, cost: Cost, hw) -> float:
    """``cost.seconds`` at the matrix rate of the equation's operand dtype."""
    return cost.seconds(hw, matmul_dtype(eqn, hw))


def fused_seconds(jaxpr: Any, hw, dtype: str | None = None, expanded: dict | None = None) -> float:
    """Time of ``jaxpr`` on ``hw`` as a sequence of kernels: the sum of each equation's
    roofline time (compute and memory overlap inside a kernel, not across kernels), with
    calls and loops summed over their bodies and trips. Matmuls run at the rate of their
    operand dtype unless ``dtype`` forces one."""
    jx = _inner(jaxpr)
    total = 0.0
    src = expanded_sources(jx.eqns, expanded)
    for e, c in zip(jx.eqns, fused_eqn_costs(jx, expanded)):
        name = e.primitive.name
        subs = _subjaxprs(e)
        if subs and name == "scan":
            inner = fused_seconds(subs[0], hw, dtype, body_sources(e, subs[0], src))
            total += int(e.params["length"]) * inner
        elif subs and name == "cond":
            total += max(fused_seconds(s, hw, dtype) for s in subs)
        elif subs and name in _CALLS + ("while",):
            total += sum(
                fused_seconds(s, hw, dtype, body_sources(e, s, src) if name != "while" else None)
                for s in (subs if name == "while" else subs[:1])
            )
        else:
            total += c.seconds(hw, dtype) if dtype else eqn_seconds(e, c, hw)
    return total


# --------------------------------------------------------------------------------------------
# Hardware-independent work: what the planner's trace stage records, so that the cost stage
# needs no jaxpr (only a hardware profile) to turn it into time.


def matmul_key(eqn) -> str:
    """The hardware-independent part of :func:`matmul_dtype`: the operand float dtype's name,
    with ``":highest"`` when the equation asks for HIGHEST precision."""
    dtypes = [getattr(v.aval, "dtype", None) for v in eqn.invars if hasattr(v, "aval")]
    name = next((str(d) for d in dtypes if d is not None and "float" in str(d)), "bfloat16")
    if name == "float32" and "HIGHEST" in str(eqn.params.get("precision", "")):
        return "float32:highest"
    return name


def rate_key(key: str, hw) -> str:
    """The matrix-rate key of ``hw`` for a :func:`matmul_key`: float32 matmuls run in TF32 on
    GPUs at JAX's default precision (jax.default_matmul_precision docs), in true fp32
    elsewhere or at HIGHEST."""
    if key == "float32:highest":
        return "float32"
    if key == "float32" and hw.platform == "gpu":
        return "tf32"
    return key


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Work:
    """The roofline inputs of a run of kernels, free of any jaxpr and of any hardware.

    ``kernels``: one ``(matmul key, Cost)`` per equation, fusion-aware (:func:`fused_costs`),
    loops already multiplied by their trip counts; ``alternatives``: per ``cond``, the work of
    each branch (one of them runs). ``seconds(hw)`` is what :func:`fused_seconds` computes
    from the jaxpr itself.
    """

    kernels: tuple[tuple[str, Cost], ...] = ()
    alternatives: tuple[tuple[Work, ...], ...] = ()

    def seconds(self, hw) -> float:
        return sum(c.seconds(hw, rate_key(k, hw)) for k, c in self.kernels) + sum(
            max((w.seconds(hw) for w in alts), default=0.0) for alts in self.alternatives
        )

    def total(self) -> Cost:
        """Every kernel's cost summed (for the branches: their elementwise maximum)."""
        out = Cost()
        for _, c in self.kernels:
            out = out + c
        for alts in self.alternatives:
            if alts:
                m = alts[0].total()
                for w in alts[1:]:
                    m = m.elementwise_max(w.total())
                out = out + m
        return out

    def scale(self, k: float) -> Work:
        return Work(
            kernels=tuple((key, c.scale(k)) for key, c in self.kernels),
            alternatives=tuple(tuple(w.scale(k) for w in alts) for alts in self.alternatives),
        )

    def __add__(self, other: Work) -> Work:
        return Work(
            kernels=self.kernels + other.kernels,
            alternatives=self.alternatives + other.alternatives,
        )


def eqn_work(eqn, cost: Cost) -> tuple[str, Cost]:
    """One equation's ``(matmul key, cost)``."""
    return matmul_key(eqn), cost


def eqns_work(eqns, escaping, expanded: dict | None = None) -> Work:
    """:func:`fused_costs` of a run of equations, as :class:`Work`."""
    costs = fused_costs(eqns, escaping, expanded)
    return Work(kernels=tuple(eqn_work(e, c) for e, c in zip(eqns, costs)))


def _walked(eqn) -> bool:
    """Whether :func:`work_of` walks ``eqn``'s body instead of costing the equation."""
    return eqn.primitive.name in _CALLS + ("scan", "while", "cond") and bool(_subjaxprs(eqn))


def work_of(jaxpr: Any, expanded: dict | None = None) -> Work:
    """The :class:`Work` of a jaxpr, nested loops, conds and calls as :func:`fused_seconds`
    walks them (scans times their length, a while loop's body once, calls inlined)."""
    return _work_of(jaxpr, expanded, {})


def _work_of(jaxpr: Any, expanded: dict | None, memo: dict) -> Work:
    """:func:`work_of`; ``memo``: the Work of each body already walked with the same
    broadcast inputs (N identical layers' backward bodies are one jaxpr: walked once)."""
    key = (id(jaxpr), tuple((expanded or {}).items()))
    if key in memo:
        return memo[key][1]
    jx = _inner(jaxpr)
    kernels: list[tuple[str, Cost]] = []
    alternatives: list[tuple[Work, ...]] = []
    src = expanded_sources(jx.eqns, expanded)
    outs = [v for v in jx.outvars if not isinstance(v, Literal)]
    for e, c in zip(jx.eqns, fused_costs(jx.eqns, outs, expanded, calls=False)):
        name = e.primitive.name
        subs = _subjaxprs(e)
        if subs and name == "scan":
            inner = _work_of(subs[0], body_sources(e, subs[0], src), memo)
            inner = inner.scale(int(e.params["length"]))
        elif subs and name == "cond":
            alternatives.append(tuple(_work_of(s, None, memo) for s in subs))
            continue
        elif subs and name in _CALLS + ("while",):
            inner = Work()
            for s in subs if name == "while" else subs[:1]:
                inner = inner + _work_of(
                    s, body_sources(e, s, src) if name != "while" else None, memo
                )
        else:
            kernels.append(eqn_work(e, c))
            continue
        kernels.extend(inner.kernels)
        alternatives.extend(inner.alternatives)
    out = Work(kernels=tuple(kernels), alternatives=tuple(alternatives))
    memo[key] = (jaxpr, out)  # the jaxpr held: its id stays its own while the memo lives
    return out
