"""The budget of one plan: the bytes a user asked for, and the bytes a plan may use of them.

A user asks for ``hbm_gb`` per device (the *requested* budget). A plan is held to less, the
*usable* budget (:func:`usable_bytes`): the hardware profile's allocator headroom, and on
GPU what XLA's own compile-time limit leaves, and where the verifying compiler is not the
device's own, a margin for what it cannot see. Every stage and the report read both
quantities from one :class:`Budget` record, so that no name holds two quantities.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import cost_models as cm
from planner._src.types import Trace

__all__ = [
    "Budget",
    "headroom_legend",
    "headroom_short",
    "headroom_why",
    "io_bytes",
    "requested_for",
    "usable_bytes",
]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """One plan's budget, per device: ``requested`` (what the user asked for) and ``usable``
    (what a plan may use of it); ``headroom`` is the difference, and :meth:`why` says why."""

    requested: int
    usable: int
    hardware: Any  # cost_models.HardwareProfile
    margin: float = 0.0  # the verifying compiler's margin (target.CompilerTarget.margin)

    @classmethod
    def of(cls, requested: int, hardware, io: int, margin: float = 0.0) -> Budget:
        """The budget for ``requested`` bytes of a step with ``io`` bytes of arguments and
        outputs (:func:`io_bytes`)."""
        return cls(
            requested=requested,
            usable=usable_bytes(requested, hardware, io, margin),
            hardware=hardware,
            margin=margin,
        )

    @property
    def headroom(self) -> int:
        """Bytes of the requested budget a plan leaves free."""
        return self.requested - self.usable

    def why(self, short: bool = False) -> str:
        """Why :attr:`headroom` is left free (``short``: in one line)."""
        return headroom_why(self.hardware, short=short, margin=self.margin)


def io_bytes(tr: Trace) -> int:
    """The step's arguments and outputs on the device (aliased outputs once): what XLA's
    compile-time memory limit subtracts before it limits the temporaries."""
    a = tr.anchor
    return a.argument_bytes + a.output_bytes - a.alias_bytes


def usable_bytes(requested: int, hw, io: int, margin: float = 0.0) -> int:
    """The bytes a plan may use of ``requested``, the least of

    * ``requested`` less the profile's allocator headroom (fragmentation room), and
    * on GPU, what XLA itself lets the program use when the allocator is capped at
      ``requested``: inputs/outputs plus ``slop`` (0.95) of the rest for temporaries
      (cost_models.compiler_temp_fraction). Above that XLA rematerializes on its own, a
      program slower than the plan: on the H200 every plan whose temporaries reached that
      limit ran slower than the plan one budget below it (benchmarks/results/h200-2026-12-02.md),

    divided by ``1 + margin`` where the verifying compiler is not the device's own
    (``CompilerTarget.margin``: a deviceless XLA:GPU compile with its matmuls as cuBLAS calls
    read up to 3.0% below the GPU's; ``xla.targets.DEVICELESS_MARGIN`` rounds that up to 3.5%),
    so that a plan verified deviceless fits on the GPU.
    """
    alloc = requested - int(requested * hw.allocator_headroom)
    f = cm.compiler_temp_fraction(hw)
    usable = alloc if f >= 1.0 or requested <= io else min(alloc, io + int(f * (requested - io)))
    return int(usable / (1 + margin)) if margin else usable


def requested_for(usable: float, hw, io: int, margin: float = 0.0) -> float:
    """The smallest budget whose ``usable_bytes`` is at least ``usable`` (its inverse)."""
    usable = usable * (1 + margin)
    need = usable / (1 - hw.allocator_headroom)
    f = cm.compiler_temp_fraction(hw)
    if f < 1.0 and usable > io:
        need = max(need, io + (usable - io) / f)
    return need


def headroom_why(hw, short: bool = False, margin: float = 0.0) -> str:
    """Why a plan leaves part of its budget free, for error messages and the report
    (``short``: one line for the report's status block)."""
    if short:
        return headroom_short(hw, margin)
    why = []
    if hw.allocator_headroom:
        why.append(
            f"the {hw.name} profile's allocator headroom of {hw.allocator_headroom:.0%} "
            f"for the device allocator ({hw.source('allocator_headroom')[:120]}...)"
        )
    f = cm.compiler_temp_fraction(hw)
    if f < 1.0:
        why.append(
            f"XLA:GPU compiles against {f:.0%} of the budget left after the step's "
            "inputs and outputs and recomputes on its own above it (a slower program "
            "than the plan; cost_models.compiler_temp_fraction)"
        )
    if margin:
        why.append(
            f"a {margin:.1%} margin because the figures come from a deviceless compile: the "
            f"GPU's own compile autotunes and sizes cuDNN workspaces, and measured up to "
            f"{margin:.1%} more device bytes (planner/_src/xla/targets.py DEVICELESS_MARGIN)"
        )
    return " and ".join(why)


def headroom_short(hw, margin: float = 0.0) -> str:
    """``headroom_why`` in one short line."""
    why = []
    if hw.allocator_headroom:
        why.append(f"{hw.allocator_headroom:.0%} allocator headroom ({hw.name} profile)")
    f = cm.compiler_temp_fraction(hw)
    if f < 1.0:
        why.append(f"XLA:GPU's {f:.0%} limit after inputs and outputs")
    if margin:
        why.append(f"{margin:.1%} deviceless margin")
    return " + ".join(why) or "nothing left free"


def headroom_legend(hw, margin: float = 0.0) -> str:
    """Why the plan was made for less than the budget, in a legend's words (the whole reason:
    :func:`headroom_why`)."""
    why = []
    if hw.allocator_headroom:
        why.append(f"{hw.allocator_headroom:.0%} allocator headroom")
    f = cm.compiler_temp_fraction(hw)
    if f < 1.0:
        why.append(f"XLA:GPU's {f:.0%} limit")
    if margin:
        why.append(f"{margin:.1%} deviceless margin")
    return ", ".join(why) or "headroom"
