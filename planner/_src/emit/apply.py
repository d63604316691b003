"""Applying a plan without editing the model: ``plan.apply(step_fn)``.

The returned function is the user's step with every checkpoint region it binds under the
plan's policy: each call site (in bind order, as the trace stage numbered them) gets its layer
group's policy where the plan decides per group, else the one policy. It works the way the
planner's own traces do (``xla.adapter.applied_policies``: the policy parameter of each
``remat`` equation is replaced where the user's code binds it), so a Python loop over one
``jax.checkpoint(layer)`` gets one policy per layer, and Flax ``nn.remat`` / ``nn.scan``
regions are covered. The applied step has a trace context of its own, fixed for its lifetime:
it is traced and compiled once and then hits JAX's caches like any jitted step, while the
step as written keeps its own cache entries.

``Binding`` is the plan's side, the same for a :class:`planner.Plan` and for a
:class:`planner.SavedPlan` read from a file (which records the bind order of its groups).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

from planner._src.errors import InvalidArgumentError
from planner._src.xla import adapter
from planner._src.xla.compile import enum_policies

__all__ = ["Binding", "apply", "binding"]


@dataclasses.dataclass(frozen=True, slots=True)
class Binding:
    """The policy of every checkpoint call site, by bind order.

    ``by_bind[i]``: the policy of the i-th region the step binds (None: the trace stage did
    not plan that region); ``fallback``: what unplanned or further regions get (the one
    policy, or the first group's, as the verify stage compiles them)."""

    by_bind: tuple[Any, ...]
    fallback: Any
    groups: int = 0  # layer groups decided separately (0: one policy for every call site)

    def policy_of(self, bind_id: int):
        pol = self.by_bind[bind_id] if bind_id < len(self.by_bind) else None
        return self.fallback if pol is None else pol


def binding(bind_groups: Mapping[int, int | None], policy, policies: tuple = ()) -> Binding:
    """``bind_groups``: bind id -> layer group (None: the region is not decided per group)."""

    def of(group):
        return policies[group] if policies and group is not None else policy

    n = max(bind_groups, default=-1) + 1
    by_bind = tuple(of(bind_groups[i]) if i in bind_groups else None for i in range(n))
    fallback = policy if policy is not None else (policies[0] if policies else None)
    return Binding(by_bind=by_bind, fallback=fallback, groups=len(policies))


def apply(step_fn: Callable, b: Binding, before_first: Callable | None = None) -> Callable:
    """``step_fn`` with every checkpoint region under ``b``'s policy (module docstring).

    Use the result as the step: call it, ``jax.jit`` it, differentiate it. A step the user
    jitted (``jax.jit(step, donate_argnums=..., in_shardings=...)``) stays jitted with the
    same options: call it, or ``.lower`` / ``.trace`` it, as is (another ``jax.jit`` around
    it has the new jit's options). Each
    ``apply`` call gives a step with its own trace context: keep the returned function rather
    than calling ``apply`` every step (a new one is traced and compiled again).

    ``before_first(args, kwargs)``: run before each call, ``trace`` and ``lower`` (the plan's
    check that this is its step, results/stale.py; it returns at once after a pass)."""
    if not callable(step_fn):
        raise InvalidArgumentError(
            f"plan.apply takes the step function, not {type(step_fn).__name__}.\n"
            "Fix: pass the function you planned, e.g. step = plan.apply(train_step)."
        )
    epoch = adapter.new_epoch("planner-apply")
    # One decide object per distinct policy (enum_policies): call sites under the same policy
    # then bind equal policies, and JAX partially evaluates and transposes identical layers
    # once (adapter.RegionPolicy), as in the step as written.
    make = enum_policies(lambda rid, region: b.policy_of(rid))

    @functools.wraps(step_fn)
    def applied(*args, **kwargs):
        if before_first is not None:
            before_first(args, kwargs)
        with adapter.applied_policies(make, epoch):
            return step_fn(*args, **kwargs)

    # A step the user jitted keeps its jit (else the applied step of a jax.jit(step,
    # donate_argnums=...) step is a plain function without .lower): calls, .trace and .lower
    # run the user's own jax.jit, with its donation, shardings and static arguments, under
    # the plan's policies.
    for name in ("trace", "lower", "eval_shape"):
        method = getattr(step_fn, name, None)
        if callable(method):
            setattr(applied, name, _under(method, make, epoch, before_first))
    applied.__wrapped_plan__ = b  # what it applies (tests, debugging)
    return applied


def _under(method: Callable, make, epoch, before_first) -> Callable:
    """``method`` (the jitted step's ``trace`` / ``lower``) traced under the plan's policies."""

    @functools.wraps(method)
    def under(*args, **kwargs):
        if before_first is not None:
            before_first(args, kwargs)
        with adapter.applied_policies(make, epoch):
            return method(*args, **kwargs)

    return under
