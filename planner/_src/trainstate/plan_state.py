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
from planner._src.trainstate.records import BudgetPart, StateApply, StatePlacement, StateTerms
from planner._src.trainstate.select import StateSelection
from planner._src.trainstate.shardings import param_shardings, state_shardings
from planner._src.trainstate.streamed import stream_layer_params, streamed_apply, streamed_update

__all__ = ["PlanState"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PlanState:
    """The train-state part of a plan (``plan.state``, where the plan places the optimizer
    state: ``opt_state=`` named it, or it was found and the budget needed it): which
    optimizer-state leaves and (``stream_params``) stacked parameters live in pinned host
    memory, the budget split, and how it is applied.

        step = plan.apply(train_step)   # the policies, the state's memory kinds, donation,
                                        # the update streamed where it can be
        state, loss = step(state, batch)

    Where the plan was compiled through your ``build`` (``mode == "build"``), apply it with
    the helpers below, as ``build`` does:

        shardings = plan.state.shardings(opt_state, device_sharding)        # memory kinds
        pshardings = plan.state.param_shardings(params, device_sharding)    # memory kinds
        layer = plan.state.stream_layer_params(decoder_layer)   # inside jax.checkpoint
        apply = plan.state.streamed_apply(tx.update)   # your optax update + apply_updates
    """

    selection: StateSelection
    layers: int  # the slices a stacked leaf is streamed in (1: host leaves come in whole)
    placement: StatePlacement
    parts: tuple[BudgetPart, ...]
    terms: StateTerms  # what the leaves on the host save and cost (the model's)
    compiled: StateCheck | None = None  # the step as applied, when compiled
    # The traced step donates its optimizer state (the compiled anchor aliases at least the
    # state's bytes); False: the plan was made from an undonated step (a PlanWarning said so).
    donated: bool = True
    mode: str = "build"  # how it is applied: "streamed", "whole", "build" (apply_state.py)
    mode_why: str = ""
    # where the placement was found, not named: why it was planned (the budget was refused
    # with the state in HBM)
    planned_because: str = ""

    @property
    def opt_state_argnum(self) -> int | None:
        """The argument that is the optimizer state, where it is a whole argument."""
        return self.selection.argnum_of(self.selection.opt_path)

    @property
    def params_argnum(self) -> int | None:
        return self.selection.argnum_of(self.selection.params_path)

    @property
    def applies(self) -> StateApply:
        """How ``plan.apply`` applies the placement (emit/apply_state.py)."""
        sel = self.selection
        return StateApply(
            opt_path=sel.opt_path,
            params_path=sel.params_path,
            container=sel.container,
            on_host=self.placement.on_host,
            layers=self.layers,
            mode=self.mode,
            mode_why=self.mode_why,
        )

    def lines(self) -> tuple[str, ...]:
        """What the report says of the train state: where it is, how it was found or named,
        and how the placement is applied."""
        out = [self.selection.line()]
        if self.planned_because:
            out.append(f"placed because {self.planned_because}")
        if self.placement.on_host:
            how = {
                "streamed": f"plan.apply swaps the TrainState's tx for one whose update streams "
                f"the host leaves per layer slice ({self.layers})",
                "whole": "plan.apply brings each host leaf in whole for the update and puts it "
                "back (as MaxText's optimizer_memory_host_offload does)",
                "build": "your build() applies it",
            }[self.mode]
            out.append(f"applied: {how}" + (f"; {self.mode_why}" if self.mode_why else ""))
        return tuple(out)

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
        pl = self.placement
        donate = self.selection.argnums()
        if not pl.on_host:
            return (
                "# The whole train state stays in HBM: nothing to apply but donation:\n"
                f"step = jax.jit(train_step, donate_argnums={donate})\n"
            )
        opt = "\n".join(f"#   {self.selection.opt_text}{x}" for x in sorted(pl.opt_paths()))
        head = f"# {len(pl.opt_paths())} optimizer-state leaves in pinned host memory"
        head += f":\n{opt}\n" if opt else "\n"
        if self.mode != "build":
            how = (
                f"the update streamed per layer slice ({self.layers})"
                if self.mode == "streamed"
                else "each host leaf brought in whole for the update"
            )
            return head + (
                "step = plan.apply(train_step)  # the policies, the state's memory kinds, "
                f"donation, {how}\n"
                "out = step(*args)  # as train_step; the state comes back where it lives\n"
            )
        o, p = self.opt_state_argnum, self.params_argnum
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
