"""Applying a plan that places train state: ``plan.apply(step)`` for such a plan, the step
with the plan's policies (apply.py) and its optimizer-state leaves in pinned host memory.

What the returned step does, per call: puts the state's leaves in the memory kinds the plan
gives them (``jax.device_put``: at the first call only, since the step returns them there),
and runs the step jitted with those shardings as in-shardings and the state donated. How the
host leaves reach the update (:class:`StateApply` ``.mode``):

- ``"streamed"``: the optimizer sits in a Flax ``TrainState`` (``.tx``), so the planner
  swaps it, for the step's trace only, for one whose update is
  ``trainstate.streamed_update(tx.update, placement, layers)``: a host leaf's layer slices
  come in one at a time and go back into its own host buffer (the returned state carries
  your ``tx`` again).
- ``"whole"``: the optimizer is out of the planner's reach (closed over by the step, or in a
  graph definition as an ``nnx.Optimizer`` is), so each host leaf is brought in whole, as
  MaxText's ``optimizer_memory_host_offload`` does, but at its first use rather than at the
  step's start, and its new value goes back to pinned host memory as soon as it is made
  (``xla.first_use``: the update is streamed leaf by leaf, each leaf's just after its
  gradient, so it holds about one leaf's state at a time); the plan prices such leaves
  whole (one slice).

The verify stage compiles exactly this step for a plan's candidate (planning/train_state.py),
so what was verified is what runs. A plan whose parameters move (``stream_params``) needs the
user's layer to stream them, which only ``build`` can give: :func:`apply_state` refuses it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax

from planner._src.emit.apply import Binding
from planner._src.emit.apply import apply as apply_policies
from planner._src.errors import PlannerError
from planner._src.trainstate.records import StateApply, StatePlacement, under
from planner._src.trainstate.select import is_train_state
from planner._src.trainstate.streamed import streamed_update
from planner._src.xla import adapter, deviceless, first_use

__all__ = ["AppliedStep", "StateApply", "apply_state"]


def _unjitted(step_fn: Callable) -> Callable:
    """The function under a ``jax.jit`` (the applied step is jitted anew, with the state's
    shardings and donation); any other callable as it is."""
    inner = getattr(step_fn, "__wrapped__", None)
    if inner is not None and hasattr(step_fn, "lower") and callable(inner):
        return inner
    return step_fn


def _map_args(args: tuple, fn) -> tuple:
    """``fn(path, leaf)`` over every leaf of ``args`` (keystr paths)."""
    return jax.tree_util.tree_map_with_path(
        lambda k, x: fn(jax.tree_util.keystr(k), x), tuple(args)
    )


class AppliedStep:
    """The user's step with a plan's policies and train-state placement (module docstring).
    Call it as the step; ``lower`` / ``trace`` take the step's arguments too (abstract ones
    included: ``jax.ShapeDtypeStruct``s are given the plan's memory kinds)."""

    def __init__(
        self, step_fn: Callable, binding: Binding, sa: StateApply, guard: Callable | None = None
    ):
        if sa.mode not in ("streamed", "whole"):
            raise PlannerError(
                f"This plan's train state is applied by your build() (mode {sa.mode!r}): "
                f"{sa.mode_why}\nFix: run build(plan.policy, plan.state.placement) as you "
                "gave it to the planner."
            )
        if sa.param_keys():
            raise PlannerError(
                "This plan puts parameters in pinned host memory, which only your step can "
                "stream into its layers (plan.state.stream_layer_params inside the "
                "checkpoint).\nFix: apply it with the build() you planned with: "
                "build(plan.policy, plan.state.placement)."
            )
        self.state = sa
        self._guard = guard  # checks the step against the plan's before its first call
        self.binding = binding
        self.step_fn = step_fn
        self._policied = apply_policies(_unjitted(step_fn), binding)
        self._jits: dict = {}
        functools.update_wrapper(self, _unjitted(step_fn))

    # ------------------------------------------------------------------ the traced step

    def _inner(self, *args):
        sa = self.state
        if sa.mode == "whole":
            return first_use.call_moving_at_first_use(
                self._policied,
                args,
                on_host=sa.host_leaf,
                out_to_host=lambda out: _host_outputs(out, args, sa),
            )
        # streamed: the TrainState's optimizer, swapped for the trace
        placement = StatePlacement(leaves=(), on_host=sa.opt_keys())
        swapped = {}

        def swap(k, x):
            if is_train_state(x) and jax.tree_util.keystr(k) == sa.container:
                import optax

                tx = x.tx
                new = optax.GradientTransformation(
                    tx.init, streamed_update(tx.update, placement, sa.layers)
                )
                swapped[id(new)] = tx
                return x.replace(tx=new)
            return x

        args = jax.tree_util.tree_map_with_path(swap, tuple(args), is_leaf=is_train_state)
        out = self._policied(*args)
        return jax.tree.map(
            lambda x: (
                x.replace(tx=swapped[id(x.tx)]) if is_train_state(x) and id(x.tx) in swapped else x
            ),
            out,
            is_leaf=is_train_state,
        )

    # ------------------------------------------------------------------ placing the arguments

    def placed(self, args) -> tuple:
        """``args`` with the state's host leaves in pinned host memory: arrays put there
        (``jax.device_put``: a no-op for one already there), ``ShapeDtypeStruct``s given
        that memory kind (and its memory space, as JAX traces an array there)."""
        sa = self.state

        def one(path, x):
            if not sa.host_leaf(path) or not getattr(x, "shape", ()):
                return x
            sharding = _host_sharding(x)
            if isinstance(x, jax.ShapeDtypeStruct):
                return adapter.shape_dtype_struct(
                    tuple(x.shape),
                    x.dtype,
                    host=True,
                    sharding=sharding,
                    weak_type=bool(getattr(x, "weak_type", False)),
                )
            return jax.device_put(x, sharding)

        return _map_args(args, one)

    def jitted(self, placed_args) -> Callable:
        """The ``jax.jit`` of the step for arguments placed as ``placed_args`` (one per set
        of shardings): their shardings as in-shardings, the state's arguments donated."""
        shardings = jax.tree.map(lambda x: getattr(x, "sharding", None), tuple(placed_args))
        flat, tree = jax.tree.flatten(shardings, is_leaf=lambda x: x is None)
        key = (tree, tuple(flat))
        if key not in self._jits:
            self._jits[key] = jax.jit(
                self._inner, in_shardings=shardings, donate_argnums=self.state.argnums()
            )
        return self._jits[key]

    def __call__(self, *args):
        if self._guard is not None:
            self._guard(args, {})
        placed = self.placed(args)
        return self.jitted(placed)(*placed)

    def lower(self, *args):
        if self._guard is not None:
            self._guard(args, {})
        placed = self.placed(args)
        return self.jitted(placed).lower(*placed)

    def trace(self, *args):
        if self._guard is not None:
            self._guard(args, {})
        placed = self.placed(args)
        return self.jitted(placed).trace(*placed)


def _host_sharding(x):
    base = getattr(x, "sharding", None)
    if base is None:
        base = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    return deviceless.with_memory_kind(base, "pinned_host")  # kept on a deviceless target


def _host_outputs(out, args, sa: StateApply):
    """Which of the step's outputs (``out``: values or shapes) go back to pinned host
    memory, as a pytree of bools shaped as ``out``: the new optimizer state's host leaves,
    in the output subtree shaped as the state argument (at the same path, else the one
    subtree of that shape; none where no subtree matches, and the compile's host outputs
    then say the state came back in HBM)."""
    want = [
        (p[len(sa.opt_path) :], tuple(x.shape), x.dtype)
        for p, x in _paths(args)
        if under(p, sa.opt_path)
    ]
    flat = [(k, x) for k, x in jax.tree_util.tree_flatten_with_path(out)[0] if hasattr(x, "shape")]
    prefixes: dict[str, list[int]] = {}
    for i, (k, _) in enumerate(flat):
        for n in range(len(k) + 1):
            prefixes.setdefault(jax.tree_util.keystr(k[:n]), []).append(i)

    def matches(prefix):
        got = [
            (
                jax.tree_util.keystr(flat[i][0])[len(prefix) :],
                tuple(flat[i][1].shape),
                flat[i][1].dtype,
            )
            for i in prefixes.get(prefix, [])
        ]
        return got == want

    out_path = sa.opt_path if matches(sa.opt_path) else None
    if out_path is None:
        hits = [p for p in prefixes if matches(p)]
        out_path = hits[0] if len(hits) == 1 else None

    def one(k, x):
        p = jax.tree_util.keystr(k)
        return bool(
            out_path is not None
            and len(getattr(x, "shape", ())) > 0  # scalars never move
            and under(p, out_path)
            and p[len(out_path) :] in sa.opt_keys()
        )

    return jax.tree_util.tree_map_with_path(one, out)


def _paths(tree) -> list[tuple[str, Any]]:
    return [
        (jax.tree_util.keystr(k), x)
        for k, x in jax.tree_util.tree_flatten_with_path(tree)[0]
        if hasattr(x, "shape")
    ]


def apply_state(
    step_fn: Callable, binding: Binding, sa: StateApply, guard: Callable | None = None
) -> AppliedStep:
    """``step_fn`` with ``binding``'s policies and the placement ``sa`` (module docstring);
    ``guard(args, kwargs)`` runs before the first call, ``lower`` or ``trace``."""
    return AppliedStep(step_fn, binding, sa, guard)
