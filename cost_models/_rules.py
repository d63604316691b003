"""The conventions every cost rule follows, and the helpers the rule families register with.

The rules, one per primitive name, are in the family modules (importing one registers its
rules; cost_models/__init__.py imports them all): `_rules_arrays` (one device's array work),
`_rules_matrix` (the matrix units), `_rules_collectives` (the collectives) and `_rules_calls`
(calls and control flow).

Conventions, following jax/experimental/roofline/rooflines.py unless a comment says otherwise:
- one multiply-add is FMA_FLOPS = 2 FLOPs, as vendor datasheets count them;
- bytes are unfused: every input read and every output written once, per device;
- ops XLA fuses into their neighbours (elementwise, layout) launch no kernel of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._cost import Cost, register_rule

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
