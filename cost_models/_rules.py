"""Cost rules, one per primitive name (importing this module registers them).

Conventions, following jax/experimental/roofline/rooflines.py unless a comment says otherwise:
- one multiply-add is FMA_FLOPS = 2 FLOPs, as vendor datasheets count them;
- bytes are unfused: every input read and every output written once, per device;
- ops XLA fuses into their neighbours (elementwise, layout) launch no kernel of their own.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from typing import Any

from ._cost import (
    Cost,
    aval_bytes,
    aval_size,
    axis_sizes_in,
    in_bytes,
    jaxpr_cost,
    known_axis_sizes,
    local_shape,
    out_bytes,
    register_rule,
)

# One fused multiply-add counts as 2 FLOPs (datasheets; rooflines.py `_FMA_FLOPS_FACTOR`).
FMA_FLOPS = 2
# Vector FLOPs per transcendental (exp, log, tanh, erf, sqrt, ...). 1, as rooflines.py
# `_unary_p_roofline` counts every unary op (unfused_flops = x.size). GPUs evaluate these on
# special-function units at a lower rate than FMAs; calibrate's vector rate (an FMA chain) does
# not see that, so transcendental-heavy code is under-costed by this weight.
TRANSCENDENTAL_FLOPS = 1
# Integer ops per 32-bit output word of the threefry2x32 hash, from jax/_src/random/threefry2x32.py
# `_threefry2x32_lowering`: per pair of words, 2 key adds, 20 rounds of `apply_round` (add,
# rotate = 2 shifts + or, xor: 5 ops) and 5 key injections of 3 adds; two words per pair.
THREEFRY_OPS_PER_WORD = (2 + 20 * 5 + 5 * 3) / 2
# Fraction of the score matrix a causal mask keeps: (s + 1) / (2 s) of the s x s pairs, about
# one half, the factor by which Dao-AILab/flash-attention benchmarks/benchmark_flash_attention.py
# `flops()` divides for causal attention (its backward is 2.5x the forward).
CAUSAL_FRACTION = 0.5


def _register(names: str, rule: Callable[[Any], Cost], *, fusible: bool = False) -> None:
    """Register `rule` for each primitive in the whitespace-separated `names`."""
    for name in names.split():
        register_rule(name, fusible=fusible)(rule)


def _avals_in(eqn: Any) -> list[Any]:
    return [v.aval for v in eqn.invars]


# --------------------------------------------------------------------------------------------
# Free: names, barriers, sharding annotations, key reinterpretation


def _free(eqn: Any) -> Cost:
    """No work: annotations and reinterpretations that XLA compiles to nothing."""
    return Cost()


_register(
    # checkpoint_name is "name"; row-major reshapes (the last four) are bitcasts in XLA.
    """
    name pvary optimization_barrier stop_gradient sharding_constraint layout_constraint
    axis_index create_token after_all random_wrap random_unwrap random_clone platform_index
    dce_sink shard_alike reshape squeeze expand_dims bitcast_convert_type
    """,
    _free,
    fusible=True,
)


# --------------------------------------------------------------------------------------------
# Elementwise


def _elementwise(flops_per_element: float) -> Callable[[Any], Cost]:
    def rule(eqn: Any) -> Cost:
        return Cost(
            vector_flops=flops_per_element * aval_size(eqn.outvars[0].aval),
            hbm_bytes=in_bytes(eqn) + out_bytes(eqn),
        )

    return rule


_register(
    """
    neg abs sign floor ceil round is_finite not real imag conj square reduce_precision
    population_count clz add add_any sub mul div rem max min and or xor eq ne lt le gt ge
    shift_left shift_right_arithmetic shift_right_logical nextafter complex mulhi
    """,
    _elementwise(1),
    fusible=True,
)
_register(
    """
    exp exp2 expm1 log log1p tanh logistic sin cos tan asin acos atan sinh cosh asinh acosh
    atanh atan2 sqrt rsqrt cbrt pow erf erfc erf_inv lgamma digamma igamma igammac
    igamma_grad_a random_gamma_grad polygamma zeta bessel_i0e bessel_i1e
    regularized_incomplete_beta
    """,
    _elementwise(TRANSCENDENTAL_FLOPS),
    fusible=True,
)
register_rule("clamp", fusible=True)(_elementwise(2))  # a max and a min per element
# 1 - x*x (tanh's derivative, JAX >= 0.11)
register_rule("one_minus_square", fusible=True)(_elementwise(2))


@register_rule("integer_pow", fusible=True)
def _integer_pow(eqn: Any) -> Cost:
    """x ** y by square-and-multiply: (bit_length - 1) squarings + (popcount - 1) multiplies,
    plus one division for negative y."""
    y = int(eqn.params["y"])
    magnitude = abs(y)
    multiplies = max(magnitude.bit_length() - 1, 0) + max(bin(magnitude).count("1") - 1, 0)
    return _elementwise(multiplies + (y < 0))(eqn)


# --------------------------------------------------------------------------------------------
# Data movement: bytes only


def _moves(eqn: Any) -> Cost:
    """Reads every input and writes every output; fused by XLA into neighbours (no kernel)."""
    return Cost(hbm_bytes=in_bytes(eqn) + out_bytes(eqn))


_register(
    """
    convert_element_type broadcast_in_dim transpose rev pad concatenate select_n split tile
    """,
    _moves,
    fusible=True,
)


@register_rule("copy")
def _copy(eqn: Any) -> Cost:
    """A materialised copy: its own kernel."""
    return Cost(hbm_bytes=in_bytes(eqn) + out_bytes(eqn), kernel_launches=1)


@register_rule("iota", fusible=True)
def _iota(eqn: Any) -> Cost:
    return Cost(hbm_bytes=out_bytes(eqn))


def _index_bytes(avals: Iterable[Any]) -> float:
    return sum(aval_bytes(a) for a in avals)


@register_rule("slice", fusible=True)
@register_rule("dynamic_slice")
def _slice(eqn: Any) -> Cost:
    """Reads the slice (not the whole operand) and writes it, plus any start indices."""
    return Cost(hbm_bytes=2 * out_bytes(eqn) + _index_bytes(_avals_in(eqn)[1:]))


@register_rule("dynamic_update_slice")
def _dynamic_update_slice(eqn: Any) -> Cost:
    """In place (the operand buffer is reused): reads the update, writes it into the operand."""
    _, update, *indices = _avals_in(eqn)
    return Cost(hbm_bytes=2 * aval_bytes(update) + _index_bytes(indices))


@register_rule("gather")
def _gather(eqn: Any) -> Cost:
    """Reads the indices and the gathered slices, writes the output."""
    _, indices = _avals_in(eqn)
    return Cost(hbm_bytes=2 * out_bytes(eqn) + aval_bytes(indices), kernel_launches=1)


def _scatter(combines: bool) -> Callable[[Any], Cost]:
    def rule(eqn: Any) -> Cost:
        """In place: reads indices and updates, reads and writes the updated slots of the operand;
        a combining scatter (add, mul, min, max) does one op per update element."""
        _, indices, updates = _avals_in(eqn)[:3]
        return Cost(
            vector_flops=aval_size(updates) if combines else 0.0,
            hbm_bytes=3 * aval_bytes(updates) + aval_bytes(indices),
            kernel_launches=1,
        )

    return rule


register_rule("scatter")(_scatter(combines=False))
_register("scatter-add scatter-mul scatter-min scatter-max scatter-sub", _scatter(combines=True))


def _memory_space(aval: Any) -> str | None:
    """'host' or 'device' from the aval's memory space (JAX records it on avals), else None."""
    space = getattr(aval, "memory_space", None)
    name = str(getattr(space, "name", space)).lower()
    return "host" if "host" in name else "device" if "device" in name else None


@register_rule("device_put")
def _device_put(eqn: Any) -> Cost:
    """A move between memory spaces is a host-link transfer (d2h: offload, h2d: reload);
    within one space it is an HBM copy if its copy semantics say ALWAYS_COPY, else free."""
    total = Cost()
    semantics = eqn.params.get("copy_semantics") or ((),) * len(eqn.outvars)
    for src, dst, how in zip(eqn.invars, eqn.outvars, semantics, strict=False):
        nbytes = aval_bytes(dst.aval)
        route = (_memory_space(src.aval), _memory_space(dst.aval))
        if route == ("device", "host"):
            total = total + Cost(d2h_bytes=nbytes, kernel_launches=1)
        elif route == ("host", "device"):
            total = total + Cost(h2d_bytes=nbytes, kernel_launches=1)
        elif "ALWAYS_COPY" in str(how):
            total = total + Cost(hbm_bytes=2 * nbytes, kernel_launches=1)
    return total


# --------------------------------------------------------------------------------------------
# Reductions, scans along an axis, windows, sorting


def _reduction(ops_per_combine: float, launches: int = 0) -> Callable[[Any], Cost]:
    def rule(eqn: Any) -> Cost:
        """Combining n inputs into m outputs takes n - m steps. The named reductions fuse
        with their elementwise producers and consumers (XLA's input and loop fusions): no
        kernel of their own."""
        combines = aval_size(eqn.invars[0].aval) - aval_size(eqn.outvars[0].aval)
        return Cost(
            vector_flops=ops_per_combine * combines,
            hbm_bytes=in_bytes(eqn) + out_bytes(eqn),
            kernel_launches=launches,
        )

    return rule


_register(
    """
    reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or reduce_xor
    argmax argmin
    """,
    _reduction(1),
    fusible=True,
)


@register_rule("reduce")
def _reduce(eqn: Any) -> Cost:
    """Generic reduce: each combine step runs the computation jaxpr, one op per equation."""
    computation = eqn.params["jaxpr"]
    ops = len(getattr(computation, "jaxpr", computation).eqns)
    return _reduction(max(ops, 1), launches=1)(eqn)


def _cumulative(ops_per_element: float) -> Callable[[Any], Cost]:
    def rule(eqn: Any) -> Cost:
        return Cost(
            vector_flops=ops_per_element * aval_size(eqn.invars[0].aval),
            hbm_bytes=in_bytes(eqn) + out_bytes(eqn),
            kernel_launches=1,
        )

    return rule


_register("cumsum cumprod cummax cummin", _cumulative(1))
# logaddexp per element: exp and log1p (transcendentals) plus max, sub and add.
register_rule("cumlogsumexp")(_cumulative(2 * TRANSCENDENTAL_FLOPS + 3))


def _windowed(eqn: Any) -> Cost:
    """Windowed reductions (pooling and their gradients): one op per window element, applied
    over the largest array involved (an upper bound for the select-and-scatter gradients)."""
    window = math.prod(eqn.params["window_dimensions"])
    largest = max(aval_size(v.aval) for v in (*eqn.invars, *eqn.outvars))
    return Cost(
        vector_flops=window * largest,
        hbm_bytes=in_bytes(eqn) + out_bytes(eqn),
        kernel_launches=1,
    )


_register(
    """
    reduce_window_sum reduce_window_max reduce_window_min reduce_window
    select_and_gather_add select_and_scatter_add select_and_scatter
    """,
    _windowed,
)


@register_rule("sort")
def _sort(eqn: Any) -> Cost:
    """A comparison sort along `dimension`: ceil(log2 n) comparisons per element and key."""
    shape = local_shape(eqn.invars[0].aval)
    n = shape[eqn.params["dimension"]]
    comparisons = math.ceil(math.log2(n)) if n > 1 else 0
    keys = eqn.params.get("num_keys", 1)
    return Cost(
        vector_flops=comparisons * keys * math.prod(shape),
        hbm_bytes=in_bytes(eqn) + out_bytes(eqn),
        kernel_launches=1,
    )


@register_rule("top_k")
def _top_k(eqn: Any) -> Cost:
    """Selecting k of n: a size-k heap per row, ceil(log2 k) comparisons per input element."""
    k = int(eqn.params["k"])
    comparisons = math.ceil(math.log2(k)) if k > 1 else 1
    return Cost(
        vector_flops=comparisons * aval_size(eqn.invars[0].aval),
        hbm_bytes=in_bytes(eqn) + out_bytes(eqn),
        kernel_launches=1,
    )


# --------------------------------------------------------------------------------------------
# Random numbers


def _threefry_words(words: float) -> Cost:
    return Cost(vector_flops=THREEFRY_OPS_PER_WORD * words)


@register_rule("random_bits")
def _random_bits(eqn: Any) -> Cost:
    """Bits from a key: costed as the default implementation, threefry2x32, per 32-bit word."""
    nbytes = out_bytes(eqn)
    return _threefry_words(nbytes / 4) + Cost(hbm_bytes=in_bytes(eqn) + nbytes)


@register_rule("threefry2x32")
def _threefry(eqn: Any) -> Cost:
    return _threefry_words(sum(aval_size(v.aval) for v in eqn.outvars)) + _moves(eqn)


def _key_derivation(eqn: Any) -> Cost:
    """random_seed / split / fold_in hash key words with threefry."""
    return _threefry_words(out_bytes(eqn) / 4) + _moves(eqn)


_register("random_seed random_split random_fold_in", _key_derivation)
# XLA's counter-based generators (Philox on GPU and CPU): memory-bound, costed by bytes written.
_register("rng_bit_generator rng_uniform", _moves)


# --------------------------------------------------------------------------------------------
# Matrix units: dot_general, ragged_dot_general, conv, fused attention


@register_rule("dot_general")
@register_rule("scaled_dot")  # block-scaled (fp8 / mx) dot: lhs, rhs, then their scales
def _dot_general(eqn: Any) -> Cost:
    """2 * (output elements) * (contracted size) = 2 * batch * M * N * K."""
    (lhs_contract, _), _ = eqn.params["dimension_numbers"]
    lhs_shape = local_shape(eqn.invars[0].aval)
    k = math.prod(lhs_shape[d] for d in lhs_contract)
    return Cost(
        matmul_flops=FMA_FLOPS * aval_size(eqn.outvars[0].aval) * k,
        hbm_bytes=in_bytes(eqn) + out_bytes(eqn),
        kernel_launches=1,
    )


@register_rule("ragged_dot_general")
def _ragged_dot_general(eqn: Any) -> Cost:
    """Grouped matmul (MoE): each row of lhs meets one group, so 2 * out * K as for dot_general;
    when the ragged dimension is contracted, the output has a group axis that no row spans."""
    numbers = eqn.params["ragged_dot_dimension_numbers"]
    (lhs_contract, _), _ = numbers.dot_dimension_numbers
    lhs_shape = local_shape(eqn.invars[0].aval)
    k = math.prod(lhs_shape[d] for d in lhs_contract)
    groups = local_shape(eqn.invars[2].aval)[0]
    ragged_contracted = set(numbers.lhs_ragged_dimensions) & set(lhs_contract)
    flops = FMA_FLOPS * aval_size(eqn.outvars[0].aval) * k
    return Cost(
        matmul_flops=flops / groups if ragged_contracted else flops,
        hbm_bytes=in_bytes(eqn) + out_bytes(eqn),
        kernel_launches=1,
    )


@register_rule("conv_general_dilated")
def _conv(eqn: Any) -> Cost:
    """2 * (output elements) * (kernel input features per group) * (kernel window).

    Padding positions are counted as work (cuDNN computes them); feature groups are already in
    the kernel's input-feature dimension, which is C_in / feature_group_count.
    """
    rhs_spec = eqn.params["dimension_numbers"].rhs_spec
    rhs_shape = local_shape(eqn.invars[1].aval)
    per_output = rhs_shape[rhs_spec[1]] * math.prod(rhs_shape[d] for d in rhs_spec[2:])
    return Cost(
        matmul_flops=FMA_FLOPS * aval_size(eqn.outvars[0].aval) * per_output,
        hbm_bytes=in_bytes(eqn) + out_bytes(eqn),
        kernel_launches=1,
    )


# cuDNN fused attention (jax.nn.dot_product_attention(implementation="cudnn")), primitives of
# jax/_src/cudnn/fused_attention_stablehlo.py. Operands start with query, key, value; `layout` is
# AttentionLayout.BTNH (0) or BNTH (1): B batch, T query length, S key length, N heads, H head dim.
_BTNH, _BNTH = 0, 1


def _attention_scores(eqn: Any) -> tuple[float, int, int, int]:
    """(score elements computed, query/key head dim, value head dim, key length) of an
    attention call."""
    query, key, value = (local_shape(a) for a in _avals_in(eqn)[:3])
    layout = getattr(eqn.params["layout"], "value", eqn.params["layout"])
    if layout == _BTNH:
        (batch, t, heads, h_qk), s = query, key[1]
    elif layout == _BNTH:
        (batch, heads, t, h_qk), s = query, key[2]
    else:
        raise ValueError(
            f"{eqn.primitive.name}: layout {layout!r} is neither BTNH (0) nor BNTH (1); the "
            "cuDNN attention primitives changed. Update cost_models/_rules.py:_attention_scores."
        )
    mask = eqn.params.get("mask_type")
    causal = bool(eqn.params.get("use_causal_mask")) or "CAUSAL" in str(getattr(mask, "name", mask))
    window = eqn.params.get("sliding_window_length")
    if window:
        kept = min(window, s) / s  # each query sees at most `window` keys
    else:
        kept = CAUSAL_FRACTION if causal else 1.0
    return batch * heads * t * s * kept, h_qk, value[-1], s


def _attention_fwd(eqn: Any) -> Cost:
    """Two matmuls (Q K^T and P V) over the kept scores, one exp per score; the scores never
    reach HBM (flash attention), so bytes are the operands and results only. With equal head
    dims this is FlashAttention-2's 4 * b * h * s_q * s_kv * d (x 0.5 if causal)."""
    scores, h_qk, h_v, length = _attention_scores(eqn)
    flops = FMA_FLOPS * scores * (h_qk + h_v)
    return Cost(
        matmul_flops=flops,
        attention=(("fwd", length, flops),),
        vector_flops=TRANSCENDENTAL_FLOPS * scores,
        hbm_bytes=in_bytes(eqn) + out_bytes(eqn),
        kernel_launches=1,
    )


def _attention_bwd(eqn: Any) -> Cost:
    """Five matmuls: recompute S = Q K^T, then dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q;
    with equal head dims 2.5x the forward, FlashAttention-2's backward factor."""
    scores, h_qk, h_v, length = _attention_scores(eqn)
    flops = FMA_FLOPS * scores * (3 * h_qk + 2 * h_v)
    return Cost(
        matmul_flops=flops,
        attention=(("bwd", length, flops),),
        vector_flops=TRANSCENDENTAL_FLOPS * scores,
        hbm_bytes=in_bytes(eqn) + out_bytes(eqn),
        kernel_launches=1,
    )


_register(
    """
    dot_product_attention_fwd dot_product_attention_fwd_wrapper
    dot_product_attention_fp8_fwd dot_product_attention_fp8_fwd_wrapper
    """,
    _attention_fwd,
)
_register(
    """
    dot_product_attention_bwd dot_product_attention_bwd_wrapper
    dot_product_attention_fp8_bwd dot_product_attention_fp8_bwd_wrapper
    """,
    _attention_bwd,
)


@register_rule("pallas_call")
def _pallas_call(eqn: Any) -> Cost:
    """A Pallas kernel's own `cost_estimate` (flops counted as matrix work, transcendentals as
    vector work); without one, its bytes, listed as unknown. Its kernel jaxpr works on refs and
    is not costed (the generic fallback would sum it)."""
    estimate = eqn.params.get("cost_estimate")
    if estimate is None:
        return Cost(
            hbm_bytes=in_bytes(eqn) + out_bytes(eqn),
            kernel_launches=1,
            unknown_primitives=("pallas_call",),
            notes=("pallas_call without cost_estimate: costed by its bytes only",),
        )
    return Cost(
        matmul_flops=estimate.flops,
        vector_flops=TRANSCENDENTAL_FLOPS * estimate.transcendentals,
        hbm_bytes=estimate.bytes_accessed,
        kernel_launches=1,
    )


# --------------------------------------------------------------------------------------------
# Collectives: bytes each device sends on a ring of n devices


def _ring_fraction(eqn: Any) -> tuple[float, tuple[str, ...]]:
    """(n - 1) / n for the n devices of the collective, from its axis_index_groups, its
    axis_size param or the known axis sizes; if n is unknown, 1 (the large-n limit) and a note."""
    params = eqn.params
    groups = params.get("axis_index_groups")
    names = params.get("axes", params.get("axis_name"))
    names = tuple(names) if isinstance(names, tuple | list) else (names,)
    sizes = known_axis_sizes()
    if groups:
        n = len(groups[0])
    elif params.get("axis_size"):
        n = int(params["axis_size"])
    elif all(name in sizes for name in names):
        n = math.prod(sizes[name] for name in names)
    else:
        note = (
            f"{eqn.primitive.name}: size of axes {names} unknown; ring factor (n-1)/n taken as 1 "
            "(pass axis_sizes= to jaxpr_cost)"
        )
        return 1.0, (note,)
    return (n - 1) / n, ()


def _collective(payload: Callable[[Any], float], passes: int) -> Callable[[Any], Cost]:
    def rule(eqn: Any) -> Cost:
        fraction, notes = _ring_fraction(eqn)
        return Cost(
            collective_bytes=passes * fraction * payload(eqn),
            kernel_launches=1,
            notes=notes,
        )

    return rule


# All-reduce on a ring = reduce-scatter + all-gather: 2 (n-1)/n of the buffer (NCCL's
# PERFORMANCE.md "bus bandwidth" factors: allreduce 2(n-1)/n, allgather and reducescatter
# (n-1)/n, alltoall (n-1)/n).
_register("psum psum_invariant pmax pmin unreduced_psum", _collective(in_bytes, 2))
# All-gather: each device receives (n-1)/n of the gathered (output) buffer.
_register("all_gather all_gather_invariant", _collective(out_bytes, 1))
_register("reduce_scatter psum_scatter unreduced_reduce_scatter", _collective(in_bytes, 1))
# All-to-all: each device keeps 1/n of its buffer and sends the rest (ragged: the operand).
_register("all_to_all ragged_all_to_all", _collective(lambda e: aval_bytes(e.invars[0].aval), 1))


@register_rule("ppermute")
def _ppermute(eqn: Any) -> Cost:
    """Each device sends its buffer once, unless the permutation keeps it in place."""
    moves = any(src != dst for src, dst in eqn.params["perm"])
    return Cost(collective_bytes=in_bytes(eqn) if moves else 0.0, kernel_launches=1)


@register_rule("pbroadcast")
def _pbroadcast(eqn: Any) -> Cost:
    """Collective broadcast from one source: every other device receives the buffer once."""
    return Cost(collective_bytes=in_bytes(eqn), kernel_launches=1)


# --------------------------------------------------------------------------------------------
# Calls and control flow: cost of the sub-jaxprs


def _call(eqn: Any) -> Cost:
    """A call runs its body once. The body is params['jaxpr'] (jit, named pjit in older JAX;
    remat2, which is jax.checkpoint; xla_metadata_call), params['call_jaxpr'] (call, closed_call,
    custom_jvp_call, custom_vjp_call) or params['fun_jaxpr'] (custom_jvp_call_jaxpr)."""
    for key in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        if key in eqn.params:
            return jaxpr_cost(eqn.params[key])
    raise ValueError(
        f"{eqn.primitive.name}: no 'jaxpr', 'call_jaxpr' or 'fun_jaxpr' param (params: "
        f"{sorted(eqn.params)}); this call primitive changed. Update cost_models/_rules.py:_call."
    )


_register(
    """
    jit pjit closed_call call remat2 custom_jvp_call custom_vjp_call custom_jvp_call_jaxpr
    xla_metadata_call
    """,
    _call,
)


@register_rule("scan")
def _scan(eqn: Any) -> Cost:
    """The body `length` times."""
    return jaxpr_cost(eqn.params["jaxpr"]).scale(eqn.params["length"])


@register_rule("while")
def _while(eqn: Any) -> Cost:
    """The trip count is a runtime value: condition and body are counted once, with a note.
    (fori_loop with static bounds traces to scan, which is counted exactly.)"""
    once = jaxpr_cost(eqn.params["cond_jaxpr"]) + jaxpr_cost(eqn.params["body_jaxpr"])
    return once + Cost(notes=("while: trip count unknown at trace time; body counted once",))


@register_rule("cond")
def _cond(eqn: Any) -> Cost:
    """One branch runs: the largest of each figure over the branches (an upper bound)."""
    return functools.reduce(Cost.elementwise_max, (jaxpr_cost(b) for b in eqn.params["branches"]))


@register_rule("shard_map")
def _shard_map(eqn: Any) -> Cost:
    """The per-device body, with the mesh's axis sizes known to its collectives."""
    with axis_sizes_in(dict(eqn.params["mesh"].shape)):
        return jaxpr_cost(eqn.params["jaxpr"])


@register_rule("xla_pmap")
def _pmap(eqn: Any) -> Cost:
    """The per-device body, with the mapped axis size known to its collectives."""
    with axis_sizes_in({eqn.params["axis_name"]: eqn.params["axis_size"]}):
        return jaxpr_cost(eqn.params["call_jaxpr"])
