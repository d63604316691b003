"""The checkpoint policies users run today: JAX's stock policies and MaxText's presets.

One registry, read by the trace stage (which records what each policy decides for every
candidate while the equation is at hand), the baselines (the same cost model and result type
as the planner's answer), the session (which compiles them on the verifying compiler and
never returns a plan slower than the fastest that fits) and emit (which hands a stock
policy back as plain JAX when it is the answer).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from jax.ad_checkpoint import checkpoint_policies as cp

from planner._src.xla import adapter


def _names(saved=(), offloaded=()):
    return cp.save_and_offload_only_these_names(
        names_which_can_be_saved=list(saved),
        names_which_can_be_offloaded=list(offloaded),
        offload_src=adapter.DEVICE_KIND,
        offload_dst=adapter.HOST_KIND,
    )


# MaxText's tensor names (MaxText layers/decoders.py, remat_policy presets).
QKV = ("query_proj", "key_proj", "value_proj", "qkv_proj")
DOTS = QKV + ("out_proj", "mlpwi", "mlpwi_0", "mlpwi_1", "mlpwo")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StockPolicy:
    name: str
    make: Callable[[], Callable]  # the policy object, as JAX or MaxText builds it
    offloads: bool  # uses host offload
    needs_names: bool  # means something only where the model names its tensors
    source: str  # the Python (or MaxText config) text a user writes

    def policy(self) -> Callable:
        return self.make()


def _stock(name, make, offloads, needs_names, source):
    return StockPolicy(
        name=name, make=make, offloads=offloads, needs_names=needs_names, source=source
    )


_H = f"offload_src={adapter.DEVICE_KIND!r}, offload_dst={adapter.HOST_KIND!r}"

STOCK: dict[str, StockPolicy] = {
    s.name: s
    for s in (
        _stock(
            "nothing_saveable",
            lambda: cp.nothing_saveable,
            False,
            False,
            "jax.checkpoint_policies.nothing_saveable",
        ),
        _stock(
            "dots_with_no_batch_dims_saveable",
            lambda: cp.dots_with_no_batch_dims_saveable,
            False,
            False,
            "jax.checkpoint_policies.dots_with_no_batch_dims_saveable",
        ),
        _stock(
            "dots_saveable",
            lambda: cp.dots_saveable,
            False,
            False,
            "jax.checkpoint_policies.dots_saveable",
        ),
        _stock(
            "everything_saveable",
            lambda: cp.everything_saveable,
            False,
            False,
            "jax.checkpoint_policies.everything_saveable",
        ),
        _stock(
            "offload_dot_with_no_batch_dims",
            lambda: cp.offload_dot_with_no_batch_dims(adapter.DEVICE_KIND, adapter.HOST_KIND),
            True,
            False,
            f"jax.checkpoint_policies.offload_dot_with_no_batch_dims({adapter.DEVICE_KIND!r}, "
            f"{adapter.HOST_KIND!r})",
        ),
        # MaxText presets written with names (MaxText decoders.py, remat_policy).
        _stock(
            "maxtext:minimal",
            lambda: _names(saved=DOTS),
            False,
            True,
            f"jax.checkpoint_policies.save_only_these_names(*{list(DOTS)!r})",
        ),
        _stock(
            "maxtext:save_qkv_proj",
            lambda: _names(saved=QKV),
            False,
            True,
            f"jax.checkpoint_policies.save_only_these_names(*{list(QKV)!r})",
        ),
        _stock(
            "maxtext:save_dot_except_mlp",
            lambda: _names(saved=QKV + ("out_proj",)),
            False,
            True,
            f"jax.checkpoint_policies.save_only_these_names(*{list(QKV + ('out_proj',))!r})",
        ),
        _stock(
            "maxtext:qkv_proj_offloaded",
            lambda: _names(offloaded=QKV),
            True,
            True,
            "jax.checkpoint_policies.save_and_offload_only_these_names(\n"
            f"    names_which_can_be_saved=[], names_which_can_be_offloaded={list(QKV)!r},\n"
            f"    {_H})",
        ),
        _stock(
            "maxtext:minimal_offloaded",
            lambda: _names(offloaded=DOTS),
            True,
            True,
            "jax.checkpoint_policies.save_and_offload_only_these_names(\n"
            f"    names_which_can_be_saved=[], names_which_can_be_offloaded={list(DOTS)!r},\n"
            f"    {_H})",
        ),
    )
}


def decide_all(prim, avals, params) -> tuple[tuple[str, str], ...]:
    """What every stock policy decides for one equation, as ``(name, decision)`` pairs."""
    out = []
    for name, s in STOCK.items():
        out.append((name, adapter.decision_text(s.policy()(prim, *avals, **params))))
    return tuple(out)
