"""What plan_maxtext returns: :class:`MaxTextPlan`, the ``remat_policy: custom`` block
written from a plan's decisions (its values, its command line, its YAML, its report), and
:class:`MaxTextVerification`, the record of MaxText's compile of that block."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from planner._src.emit.emit import _MAXTEXT_VALUE, yaml_key
from planner._src.planning.maxtext.settings import GpuSettings
from planner._src.units import GB


@dataclasses.dataclass(frozen=True)
class MaxTextVerification:
    """MaxText's train step compiled with the overrides applied through its own config."""

    compiler: str
    exact: bool
    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int
    host_temp_bytes: int
    usable_bytes: int  # what the plan was held to (the usable budget)
    plan_device_bytes: int | None  # the planner's own verify compile of its policy
    compiler_options: tuple[tuple[str, Any], ...]
    wall_s: float

    @property
    def device_bytes(self) -> int:
        """``argument + output - alias + temp`` (per device)."""
        return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes

    @property
    def within_budget(self) -> bool:
        return 0 <= self.device_bytes <= self.usable_bytes


@dataclasses.dataclass(frozen=True)
class MaxTextPlan:
    """A plan of MaxText's train step and its verification through MaxText's config."""

    plan: Any  # planner.Plan
    config_path: str
    overrides: tuple[tuple[str, str], ...]  # the user's overrides, as given
    custom: tuple[tuple[str, str], ...]  # every custom key -> remat | device | offload
    settings: GpuSettings
    budget_why: str
    mesh: tuple[tuple[str, int], ...]  # MaxText's mesh axes (name, size)
    verification: MaxTextVerification | None
    timings: tuple[tuple[str, float], ...]

    @property
    def ok(self) -> bool:
        """The overrides compiled through MaxText's config within the planned-to budget."""
        return self.verification is not None and self.verification.within_budget

    def override_args(self) -> list[str]:
        """MaxText command-line ``key=value`` pairs: ``remat_policy=custom`` and every key."""
        return ["remat_policy=custom"] + [f"{k}={v}" for k, v in self.custom]

    def command_line(self) -> str:
        return " ".join(self.override_args())

    def yaml(self) -> str:
        """The same overrides as a YAML block for the config file."""
        lines = ["remat_policy: custom"] + [f"{yaml_key(k)}: '{v}'" for k, v in self.custom]
        return "\n".join(lines) + "\n"

    def report(self, fmt: str = "text") -> str:
        """The planner's report, then the MaxText section (settings, overrides, verify);
        ``json``: one document, ``{"plan": <the plan's JSON report>, "maxtext": ...}``."""
        if fmt == "json":
            import json

            doc = {"plan": json.loads(self.plan.report("json")), "maxtext": self.to_json()}
            return json.dumps(doc, indent=1)
        section = self.maxtext_section()
        if fmt == "markdown":
            section = "## MaxText\n\n```\n" + section + "```\n"
        return self.plan.report(fmt) + "\n" + section

    def maxtext_section(self) -> str:
        out = ["MaxText", "-------"]
        out.append(f"config: {self.config_path}")
        if self.overrides:
            out.append("overrides: " + " ".join(f"{k}={v}" for k, v in self.overrides))
        axes = " x ".join(f"{n}={s}" for n, s in self.mesh if s > 1) or "one device"
        out.append(f"mesh (MaxText's ici_*/dcn_* sharding; every figure is per device): {axes}")
        out.append(f"budget: {self.budget_why}")
        out.append("settings read (XLA_FLAGS: every compile of this process runs under them):")
        out += [f"  {line}" for line in self.settings.lines()]
        out.append(
            "decided: only MaxText's custom keys; every other tensor is recomputed under "
            "remat_policy=custom (MaxText saves nothing it does not list), and the plan was "
            "solved with them forced to remat, so the overrides below are the plan verified."
        )
        if self.plan.choice != "planner":
            out.append(f"the plan is the stock policy {self.plan.choice}, as custom keys")
        out.append("command line:")
        out.append("  " + self.command_line())
        out.append("YAML:")
        out += ["  " + ln for ln in self.yaml().splitlines()]
        v = self.verification
        if v is None:
            out.append("verified through MaxText's config: not run (verify=False)")
        else:
            status = "within budget" if v.within_budget else "OVER BUDGET"
            out.append(
                f"verified through MaxText's config ({v.compiler}{'' if v.exact else ', an estimate'}):"
                f" {status}: {v.device_bytes / GB:.4f} GB = argument {v.argument_bytes / GB:.4f}"
                f" + output {v.output_bytes / GB:.4f} - alias {v.alias_bytes / GB:.4f} + temp "
                f"{v.temp_bytes / GB:.4f}, budget {v.usable_bytes / GB:.4f} GB"
                f" (compile {v.wall_s:.1f} s)"
            )
            if v.plan_device_bytes is not None:
                same = "the same" if v.plan_device_bytes == v.device_bytes else "differs from"
                out.append(
                    f"  {same} as the planner's own verify compile of its policy: "
                    f"{v.plan_device_bytes / GB:.4f} GB"
                )
            if v.host_temp_bytes:
                out.append(f"  host temp (offloaded): {v.host_temp_bytes / GB:.4f} GB")
        return "\n".join(out) + "\n"

    def to_json(self) -> dict:
        v = self.verification
        return {
            "config": self.config_path,
            "overrides": dict(self.overrides),
            "override_args": self.override_args(),
            "yaml": self.yaml(),
            "budget_why": self.budget_why,
            "mesh": dict(self.mesh),
            "settings": dataclasses.asdict(self.settings),
            "choice": self.plan.choice,
            "verification": None
            if v is None
            else {
                "compiler": v.compiler,
                "exact": v.exact,
                "device_bytes": v.device_bytes,
                "argument_bytes": v.argument_bytes,
                "output_bytes": v.output_bytes,
                "alias_bytes": v.alias_bytes,
                "temp_bytes": v.temp_bytes,
                "host_temp_bytes": v.host_temp_bytes,
                "usable_bytes": v.usable_bytes,
                "plan_device_bytes": v.plan_device_bytes,
                "within_budget": v.within_budget,
                "wall_s": v.wall_s,
            },
            "timings": dict(self.timings),
        }


def custom_values(plan, keys: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """Every custom key's value from the plan's decisions (MaxText's words)."""
    decided: dict[str, str] = {}
    for c in plan.graph.classes:
        if c.name in keys:
            d = plan.assignment.get(c.key)
            # several classes may carry one name (shapes differ per layer kind): keep the most
            if _RANK[d] > _RANK[decided.get(c.name, "remat")]:
                decided[c.name] = d
    out = []
    for k in keys:
        v = _MAXTEXT_VALUE[decided.get(k, "remat")]
        if k == "decoder_layer_input" and v == "remat":
            v = "device"  # base.yml: it cannot be rematerialized; the layer input is kept anyway
        out.append((k, v))
    return tuple(out)


_RANK = {"remat": 0, "offload": 1, "save": 2}
