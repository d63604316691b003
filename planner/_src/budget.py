"""The budget of one plan: the bytes a user asked for, and the bytes a plan may use of them.

A user asks for ``hbm_gb`` per device (the *requested* budget). A plan is held to less, the
*usable* budget (:func:`usable_bytes`): the hardware profile's allocator headroom, and on
GPU what XLA's own compile-time limit leaves, and where the verifying compiler is not the
device's own, a bound on what it cannot see (:class:`Margin`). Every stage and the report read
both quantities from one :class:`Budget` record, so that no name holds two quantities.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import cost_models as cm
from planner._src.types import Trace

__all__ = [
    "Budget",
    "Margin",
    "headroom_legend",
    "headroom_short",
    "headroom_why",
    "io_bytes",
    "margin_of",
    "program_usable",
    "requested_for",
    "usable_bytes",
]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Margin:
    """What a deviceless compile cannot see of the GPU's own compile of the same program,
    bounded per program (planner/_src/xla/deviceless_bound.py): ``workspace_bytes`` (the
    cuDNN workspaces the GPU's compile sizes and the deviceless one leaves at 0 bytes, read
    from the compiled HLO) and ``temp_fraction`` of the program's temporaries (the GPU's own
    choice of GEMM backends and the schedule and buffer assignment that follow; measured).
    A program is within the budget when ``device_bytes + workspace_bytes + temp_fraction *
    temp`` is within what the budget leaves without the bound; :func:`usable_bytes` folds that
    into one usable figure for programs with the step's inputs and outputs, and
    :func:`program_usable` adjusts it for a program with others."""

    workspace_bytes: int = 0
    temp_fraction: float = 0.0
    workspace_note: str = ""  # what the workspace bytes are (calls, shapes), for the report

    def __bool__(self) -> bool:
        return bool(self.workspace_bytes or self.temp_fraction)

    def bytes_for(self, temp_bytes: int) -> int:
        """The bound for one program with ``temp_bytes`` of temporaries."""
        return self.workspace_bytes + int(self.temp_fraction * temp_bytes)


def margin_of(compiler, tr: Trace) -> Margin | float:
    """The :class:`Margin` of a step's programs compiled by ``compiler`` (an
    xla.targets.CompilerTarget): for a deviceless compile, the cuDNN workspaces read from the
    compiled anchors' HLO (every program of the step runs the same attention calls; the
    larger anchor's) and the target's share of the temporaries; the target's ``margin`` (0)
    where the compiler is the device's own."""
    if compiler.kind != "deviceless":
        return compiler.margin
    anchors = [a for a in (tr.anchor, tr.anchor_saved) if a is not None]
    top = max(anchors, key=lambda a: a.unseen_workspace_bytes)
    return Margin(
        workspace_bytes=top.unseen_workspace_bytes,
        temp_fraction=compiler.margin,
        workspace_note=top.unseen_workspace_note,
    )


def as_margin(margin: Margin | float | None) -> Margin:
    """``margin`` as a :class:`Margin` (a number: a fraction of the temporaries)."""
    if isinstance(margin, Margin):
        return margin
    return Margin(temp_fraction=float(margin or 0.0))


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """One plan's budget, per device: ``requested`` (what the user asked for) and ``usable``
    (what a plan may use of it); ``headroom`` is the difference, and :meth:`why` says why."""

    requested: int
    usable: int
    hardware: Any  # cost_models.HardwareProfile
    margin: Margin | float = 0.0  # the verifying compiler's bound (Margin; 0: the device's own)

    @classmethod
    def of(cls, requested: int, hardware, io: int, margin: Margin | float = 0.0) -> Budget:
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


def usable_bytes(requested: int, hw, io: int, margin: Margin | float = 0.0) -> int:
    """The bytes a plan may use of ``requested``: the least of

    * ``requested`` less the profile's allocator headroom (fragmentation room), and
    * on GPU, what XLA itself lets the program use when the allocator is capped at
      ``requested``: inputs/outputs plus ``slop`` (0.95) of the rest for temporaries
      (cost_models.compiler_temp_fraction). Above that XLA rematerializes on its own, a
      program slower than the plan: on the H200 every plan whose temporaries reached that
      limit ran slower than the plan one budget below it (benchmarks/results/h200-2026-12-02.md),

    less, where the verifying compiler is not the device's own, the :class:`Margin`: a
    program of ``io`` input/output bytes and ``t`` temporary bytes fits the returned figure
    exactly when ``io + t + workspace_bytes + temp_fraction * t`` fits the figure above, so
    that a plan verified deviceless fits on the GPU (planner/_src/xla/deviceless_bound.py
    says what the bound is made of and what it was measured against).
    """
    alloc = requested - int(requested * hw.allocator_headroom)
    f = cm.compiler_temp_fraction(hw)
    usable = alloc if f >= 1.0 or requested <= io else min(alloc, io + int(f * (requested - io)))
    m = as_margin(margin)
    if not m:
        return usable
    return io + int((usable - io - m.workspace_bytes) / (1 + m.temp_fraction))


def program_usable(
    usable: int,
    io: int,
    program_io: int,
    margin: Margin | float = 0.0,
    program_workspace: int | None = None,
) -> int:
    """What one program may use of ``usable`` (folded by :func:`usable_bytes` for programs
    of ``io`` input/output bytes) when its own inputs and outputs are ``program_io`` bytes
    (a plan that moves train state to the host) and its own cuDNN workspaces
    ``program_workspace`` (None: the margin's): the same rule, ``io + t + workspace +
    temp_fraction * t`` within the budget without the bound."""
    m = as_margin(margin)
    if not m:
        return usable
    r = m.temp_fraction
    extra = 0 if program_workspace is None else program_workspace - m.workspace_bytes
    return usable - int((r * (io - program_io) + extra) / (1 + r))


def requested_for(usable: float, hw, io: int, margin: Margin | float = 0.0) -> float:
    """The smallest budget whose ``usable_bytes`` is at least ``usable`` (its inverse)."""
    m = as_margin(margin)
    if m:
        usable = io + (usable - io) * (1 + m.temp_fraction) + m.workspace_bytes
    need = usable / (1 - hw.allocator_headroom)
    f = cm.compiler_temp_fraction(hw)
    if f < 1.0 and usable > io:
        need = max(need, io + (usable - io) / f)
    return need


def headroom_why(hw, short: bool = False, margin: Margin | float = 0.0) -> str:
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
    m = as_margin(margin)
    if m:
        why.append(
            "a bound on what the deviceless compile cannot see of the GPU's own: "
            + _margin_parts(m)
            + " (planner/_src/xla/deviceless_bound.py; measured: "
            "benchmarks/results/deviceless-bound-2026-12-06.md)"
        )
    return " and ".join(why)


def _margin_parts(m: Margin) -> str:
    parts = []
    if m.workspace_bytes:
        note = f" ({m.workspace_note})" if m.workspace_note else ""
        parts.append(
            f"{m.workspace_bytes / 1e9:.3f} GB of cuDNN workspaces the deviceless compile "
            f"leaves at 0 bytes{note}"
        )
    if m.temp_fraction:
        parts.append(
            f"{m.temp_fraction:.1%} of each program's temporaries for the GPU's own choice of "
            "GEMM backends and the schedule that follows (the largest share measured on the "
            "H200, rounded up: xla.targets.DEVICELESS_TEMP_FRACTION)"
        )
    return " plus ".join(parts)


def headroom_short(hw, margin: Margin | float = 0.0) -> str:
    """``headroom_why`` in one short line."""
    why = []
    if hw.allocator_headroom:
        why.append(f"{hw.allocator_headroom:.0%} allocator headroom ({hw.name} profile)")
    f = cm.compiler_temp_fraction(hw)
    m = as_margin(margin)
    if f < 1.0:  # with a deviceless bound too, the line is kept short of the status block's width
        why.append(f"XLA:GPU's {f:.0%} limit" + ("" if m else " after inputs and outputs"))
    if m:
        why.append(f"deviceless bound ({_short_parts(m)})")
    return " + ".join(why) or "nothing left free"


def _short_parts(m: Margin) -> str:
    parts = [f"{m.workspace_bytes / 1e9:.3f} GB cuDNN workspaces"] if m.workspace_bytes else []
    if m.temp_fraction:
        parts.append(f"{m.temp_fraction:.1%} of temporaries")
    return " + ".join(parts)


def headroom_legend(hw, margin: Margin | float = 0.0) -> str:
    """Why the plan was made for less than the budget, in a legend's words (the whole reason:
    :func:`headroom_why`)."""
    why = []
    if hw.allocator_headroom:
        why.append(f"{hw.allocator_headroom:.0%} allocator headroom")
    f = cm.compiler_temp_fraction(hw)
    if f < 1.0:
        why.append(f"XLA:GPU's {f:.0%} limit")
    if as_margin(margin):
        why.append("deviceless bound")
    return ", ".join(why) or "headroom"
