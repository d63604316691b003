"""Cost rules of the matrix units (importing this module registers them): dot_general,
ragged_dot_general, convolutions, cuDNN fused attention, Pallas kernels. Conventions:
cost_models/_rules.py.
"""

from __future__ import annotations

import math
from typing import Any

from ._cost import Cost, aval_size, in_bytes, local_shape, out_bytes, register_rule
from ._rules import CAUSAL_FRACTION, FMA_FLOPS, TRANSCENDENTAL_FLOPS, _avals_in, _register

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
            "cuDNN attention primitives changed. Update "
            "cost_models/_rules_matrix.py:_attention_scores."
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
