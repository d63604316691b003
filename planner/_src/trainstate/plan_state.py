"""The train-state part of a plan as the user applies it (PlanState: ``plan.state``): the
placement, the budget split, the terms, the compiled check, the helpers bound to the
placement, and the snippet that applies it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from planner._src.errors import PlannerError
from planner._src.trainstate.checks import StateCheck
from planner._src.trainstate.records import BudgetPart, StatePlacement, StateTerms
from planner._src.trainstate.shardings import param_shardings, state_shardings
from planner._src.trainstate.streamed import stream_layer_params, streamed_apply, streamed_update

__all__ = ["PlanState"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PlanState:
    """The train-state part of a plan (``plan.state``, where the plan was asked for with
    ``opt_state_argnum``): which optimizer-state leaves and (``stream_params``) stacked
    parameters live in pinned host memory, the budget split, and what to apply.

        shardings = plan.state.shardings(opt_state, device_sharding)        # memory kinds
        pshardings = plan.state.param_shardings(params, device_sharding)    # memory kinds
        layer = plan.state.stream_layer_params(decoder_layer)   # inside jax.checkpoint
        apply = plan.state.streamed_apply(tx.update)   # your optax update + apply_updates
        step = jax.jit(train_step_with(layer, apply),
                       in_shardings=(pshardings, shardings, ...),
                       out_shardings=(pshardings, shardings, ...), donate_argnums=(0, 1))
    """

    opt_state_argnum: int
    params_argnum: int | None
    layers: int  # the slices a stacked leaf is streamed in (the scanned layer count)
    placement: StatePlacement
    parts: tuple[BudgetPart, ...]
    terms: StateTerms  # what the leaves on the host save and cost (the model's)
    compiled: StateCheck | None = None  # the step as applied (build), when compiled
    # The traced step donates its optimizer state (the compiled anchor aliases at least the
    # state's bytes); False: the plan was made from an undonated step (a PlanWarning said so).
    donated: bool = True

    def shardings(self, opt_state: Any, device_sharding: Any) -> Any:
        """:func:`state_shardings` of ``opt_state`` under this placement."""
        return state_shardings(opt_state, self.placement, device_sharding)

    def param_shardings(self, params: Any, device_sharding: Any) -> Any:
        """:func:`param_shardings`: memory kind ``pinned_host`` for the parameters on the
        host, ``device`` for the others."""
        return param_shardings(params, self.placement.param_paths(), device_sharding)

    def layer_paths(self, prefix: str = "['layers']") -> frozenset[str]:
        """The host parameters' paths inside one layer's slice: their paths in the
        parameters' tree less ``prefix``, the path of the stacked layer subtree the scan
        slices (``params["layers"]``: ``"['layers']"``)."""
        return frozenset(
            p[len(prefix) :] for p in self.placement.param_paths() if p.startswith(prefix)
        )

    def stream_layer_params(
        self, layer_fn: Callable, prefix: str = "['layers']", argnum: int = 1
    ) -> Callable:
        """``layer_fn`` with its host parameters brought to HBM a slice at a time
        (:func:`stream_layer_params` with :meth:`layer_paths`); wrap it *before*
        ``jax.checkpoint``. ``argnum``: the layer function's argument holding the slice."""
        return stream_layer_params(layer_fn, host=self.layer_paths(prefix), argnum=argnum)

    def streamed_update(self, update: Callable) -> Callable:
        """:func:`streamed_update` of ``update`` under this placement (parameters in HBM)."""
        if self.placement.param_paths():
            raise PlannerError(
                "plan.state.streamed_update returns updates for parameters in HBM, but this "
                f"plan puts {sorted(self.placement.param_paths())} on the host.\nWhy: a host "
                "parameter is updated slice by slice where it lives, so the update and the "
                "apply are one step.\nFix: params, opt_state = plan.state.streamed_apply("
                "tx.update)(grads, opt_state, params) in place of tx.update + "
                "optax.apply_updates."
            )
        return streamed_update(update, self.placement, self.layers)

    def streamed_apply(self, update: Callable) -> Callable:
        """:func:`streamed_apply` of ``update`` under this placement."""
        return streamed_apply(update, self.placement, self.layers)

    def host_paths(self) -> tuple[str, ...]:
        return tuple(sorted(self.placement.on_host))

    def snippet(self) -> str:
        """The code that applies the placement (the report's "state" snippet)."""
        o, p = self.opt_state_argnum, self.params_argnum
        donate = tuple(sorted({o} | ({p} if p is not None else set())))
        pl = self.placement
        if not pl.on_host:
            return (
                "# The whole train state stays in HBM: nothing to apply but donation:\n"
                f"step = jax.jit(train_step, donate_argnums={donate})\n"
            )
        opt = "\n".join(f"#   opt_state{x}" for x in sorted(pl.opt_paths()))
        head = f"# {len(pl.opt_paths())} optimizer-state leaves in pinned host memory"
        head += f":\n{opt}\n" if opt else "\n"
        if not pl.param_paths():
            return head + (
                "shardings = plan.state.shardings(opt_state, device_sharding)  # memory kinds\n"
                "opt_state = jax.device_put(opt_state, shardings)  # or create it there: "
                "jax.jit(tx.init, out_shardings=shardings)\n"
                f"update = plan.state.streamed_update(tx.update)  # per layer slice "
                f"({self.layers})\n"
                "# train_step calls update(grads, opt_state, params) in place of tx.update\n"
                f"step = jax.jit(train_step, in_shardings=(...),  # argument {o}: shardings\n"
                f"               out_shardings=(...),  # the new state: shardings\n"
                f"               donate_argnums={donate})\n"
            )
        params = "\n".join(f"#   params{x}" for x in sorted(pl.param_paths()))
        return head + (
            f"# {len(pl.param_paths())} stacked parameters in pinned host memory, streamed "
            f"per layer slice ({self.layers}), their gradients with them:\n{params}\n"
            "shardings = plan.state.shardings(opt_state, device_sharding)  # memory kinds\n"
            "pshardings = plan.state.param_shardings(params, device_sharding)\n"
            "params = jax.device_put(params, pshardings)\n"
            "opt_state = jax.device_put(opt_state, shardings)\n"
            "# the scanned layer, its host slices brought in inside the checkpoint:\n"
            "layer = jax.checkpoint(plan.state.stream_layer_params(layer_fn), "
            "policy=plan.policy)\n"
            "apply = plan.state.streamed_apply(tx.update)  # your optax update, per slice\n"
            "# train_step: params, opt_state = apply(grads, opt_state, params)\n"
            "#   in place of tx.update + optax.apply_updates\n"
            f"step = jax.jit(train_step, in_shardings=(...),  # argument {p}: pshardings, "
            f"{o}: shardings\n"
            "               out_shardings=(...),  # the new params and state: the same\n"
            f"               donate_argnums={donate})\n"
        )
