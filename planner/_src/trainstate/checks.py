"""The check of a compiled step against a placement: its device and host bytes as
``memory_analysis()`` reports them, per device (check_compiled, StateCheck).
"""

from __future__ import annotations

import dataclasses

from planner._src.trainstate.records import StatePlacement, StateTerms

__all__ = ["StateCheck", "check_compiled"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StateCheck:
    """A compiled step against a placement: ``memory_analysis()`` per device."""

    device_bytes: int  # argument + output - alias + temp, in HBM
    device_argument_bytes: int
    host_argument_bytes: int
    host_temp_bytes: int
    planned_host_bytes: int  # placement.host_bytes()
    output_bytes: int = 0
    alias_bytes: int = 0
    temp_bytes: int = 0
    # None: a compiler that does not report host outputs (only the arguments are checked)
    host_output_bytes: int | None = None
    # the model's host temporaries of the placement (StateTerms.host_temp_bytes; the
    # compile's also hold offloaded activations): for the record, not checked
    planned_host_temp_bytes: int = 0
    # XLA:CPU (no host memory space): its figures keep the "host" leaves in its one memory
    # and add copies for their transfers, so they cannot show the placement's saving (the
    # Planner's CPU path records the compile, and does not hold it to the budget).
    estimated: bool = False

    @property
    def host_matches(self) -> bool:
        """The compiled step takes exactly the planned bytes as host arguments and, where the
        compiler reports host outputs, gives them back as host outputs."""
        # a step whose out-shardings forget pinned_host returns the state in HBM: 0 host
        # output bytes then, which is a mismatch, not a silence
        outputs_ok = self.host_output_bytes in (None, self.planned_host_bytes)
        return self.host_argument_bytes == self.planned_host_bytes and outputs_ok

    @property
    def status(self) -> str:
        """One line: do the compiled step's host bytes match the plan (or why it cannot say)."""
        if self.estimated or (self.host_argument_bytes == 0 and self.planned_host_bytes == 0):
            if self.planned_host_bytes:
                return (
                    "unverified: the compiler reports no host memory space (XLA:CPU); "
                    "XLA:GPU (deviceless too) checks the bytes"
                )
            return "nothing on the host: host bytes 0 as planned"
        if self.host_argument_bytes != self.planned_host_bytes:
            return (
                f"host bytes differ: the step takes {self.host_argument_bytes:,} bytes of host "
                f"arguments, the plan puts {self.planned_host_bytes:,} there"
            )
        if not self.host_matches:
            return (
                f"host bytes differ: the step gives back {self.host_output_bytes:,} bytes of "
                f"host outputs, the plan keeps {self.planned_host_bytes:,} there"
            )
        return (
            f"host bytes as planned: {self.host_argument_bytes:,} in, "
            f"{'unreported' if self.host_output_bytes is None else format(self.host_output_bytes, ',')}"
            f" out; device {self.device_bytes:,}"
        )


def _reported(m, name: str) -> int | None:
    value = getattr(m, name, None)
    return None if value is None else int(value)


def check_compiled(compiled, placement: StatePlacement, terms: StateTerms | None = None):
    """Read a compiled step's device and host bytes (``memory_analysis()``, per device)
    against ``placement`` (:attr:`StateCheck.status` says whether they match).

    Meaningful on a compiler with a host memory space (XLA:GPU, here or deviceless:
    target.py); XLA:CPU reports host arguments as device arguments and ``host_*`` as 0,
    so on CPU only the numerics and the outputs' memory kinds check a placement.
    """
    m = compiled.memory_analysis()
    return StateCheck(
        device_bytes=int(
            m.argument_size_in_bytes
            + m.output_size_in_bytes
            - m.alias_size_in_bytes
            + m.temp_size_in_bytes
        ),
        device_argument_bytes=int(m.argument_size_in_bytes),
        host_argument_bytes=int(getattr(m, "host_argument_size_in_bytes", 0) or 0),
        host_temp_bytes=int(getattr(m, "host_temp_size_in_bytes", 0) or 0),
        planned_host_bytes=placement.host_bytes(),
        output_bytes=int(m.output_size_in_bytes),
        alias_bytes=int(m.alias_size_in_bytes),
        temp_bytes=int(m.temp_size_in_bytes),
        host_output_bytes=_reported(m, "host_output_size_in_bytes"),
        planned_host_temp_bytes=terms.host_temp_bytes if terms is not None else 0,
    )
