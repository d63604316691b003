"""Cost rules of one device's array work (importing this module registers them): free
annotations, elementwise arithmetic, data movement and host-link transfers, reductions,
windows and sorting, random numbers. Conventions: cost_models/_rules.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from ._cost import Cost, aval_bytes, aval_size, in_bytes, local_shape, out_bytes, register_rule
from ._rules import THREEFRY_OPS_PER_WORD, TRANSCENDENTAL_FLOPS, _avals_in, _register

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
