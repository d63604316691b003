"""Plan files: a versioned JSON record of a plan that round-trips, with the step's fingerprint.

``plan.save(path)`` writes it; ``load_plan(path)`` reads it back as a :class:`SavedPlan` whose
``policy``, ``xla_flags`` and ``maxtext_yaml`` are the plan's, and whose ``check(step, *args)``
refuses a step that is not the one the plan was made for. A plan decided per layer group keeps
its group in each class key (``g<group>|<signature>``), so ``policies`` round-trips too.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from planner._src.emit import differing_groups_error, policies_for
from planner._src.errors import PlanFileError
from planner._src.graph import num_groups
from planner._src.types import Assignment

FORMAT = "jax-offload-planner/plan"
VERSION = 1


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SavedPlan:
    fingerprint: str
    budget_bytes: int
    hardware: str
    assignment: Assignment
    class_names: tuple[tuple[str, str | None], ...]
    xla_flags: str
    maxtext_yaml: str
    report_data: dict = dataclasses.field(compare=False)
    path: str = ""
    call_sites: int = 1  # checkpoint call sites of the step (plan.policies' length)

    @property
    def policy(self):
        """The plan's policy; raises LayerGroupsError when its layer groups decide differently."""
        policy = policies_for(self.assignment, dict(self.class_names))[0]
        if policy is None:
            raise differing_groups_error(self.assignment, dict(self.class_names))
        return policy

    @property
    def policies(self) -> tuple:
        """One policy per layer group (call site, call order), as ``Plan.policies``; a uniform
        plan repeats its one policy for every call site."""
        policy, _, _, policies, _ = policies_for(self.assignment, dict(self.class_names))
        return policies or (policy,) * self.call_sites

    @property
    def layer_groups(self) -> int:
        """How many layer groups the plan decides separately (0: one decision for all)."""
        return num_groups(dict(self.class_names))

    def report(self, fmt: str = "markdown") -> str:
        from planner._src.report import Report, render, report_from_dict

        r = report_from_dict(self.report_data)
        assert isinstance(r, Report)
        return render(r, fmt)

    def check(self, step_fn, *example_args) -> None:
        """Raise PlanFileError unless ``step_fn(*example_args)`` is the step this plan is for."""
        from planner._src.trace import step_fingerprint

        got = step_fingerprint(step_fn, example_args)
        if got != self.fingerprint:
            raise PlanFileError(
                f"The plan in {self.path or 'this file'} was made for another step (its program "
                f"fingerprint is {self.fingerprint}, this step's is {got}).\nWhy: the model, its "
                "shapes, dtypes or the step's code changed since the plan was made, so its "
                "decisions may not fit.\nFix: plan again with planner.solve on this step."
            )


def save(plan, path: str | os.PathLike) -> None:
    from planner._src.report import build_report

    data = {
        "format": FORMAT,
        "version": VERSION,
        "fingerprint": plan.trace.fingerprint,
        "budget_bytes": plan.budget_bytes,
        "hardware": plan.hardware.name,
        "decisions": [list(x) for x in plan.assignment.decisions],
        "class_names": {c.key: c.name for c in plan.graph.classes},
        "xla_flags": plan.xla_flags,
        "maxtext_yaml": plan.maxtext_yaml,
        "call_sites": len(plan.policies),
        "report": dataclasses.asdict(build_report(plan)),
    }
    text = json.dumps(data, indent=1, sort_keys=True)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # never a half-written plan file


def load(path: str | os.PathLike) -> SavedPlan:
    path = Path(path)
    try:
        data: Any = json.loads(path.read_text())
    except FileNotFoundError:
        raise PlanFileError(
            f"No plan file at {path}. Fix: save one with plan.save(path)."
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PlanFileError(
            f"{path} is not a plan file: it is not valid JSON ({e}).\nFix: "
            "write plans with plan.save(path) and do not edit them by hand."
        ) from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise PlanFileError(
            f'{path} is not a jax-offload-planner plan (no \'"format": '
            f'"{FORMAT}"\' field).\nFix: pass a file written by plan.save().'
        )
    if data.get("version") != VERSION:
        raise PlanFileError(
            f"{path} is a plan file of version {data.get('version')!r}; this "
            f"planner reads version {VERSION}.\nFix: plan again with this version."
        )
    try:
        decisions = {str(k): str(d) for k, d in data["decisions"]}
        return SavedPlan(
            fingerprint=str(data["fingerprint"]),
            budget_bytes=int(data["budget_bytes"]),
            hardware=str(data["hardware"]),
            assignment=Assignment.of(decisions),
            class_names=tuple(sorted((str(k), v) for k, v in data["class_names"].items())),
            xla_flags=str(data["xla_flags"]),
            maxtext_yaml=str(data["maxtext_yaml"]),
            report_data=dict(data["report"]),
            path=str(path),
            call_sites=int(data.get("call_sites", 1)),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise PlanFileError(
            f"{path} is a damaged plan file ({type(e).__name__}: {e}).\n"
            "Fix: save the plan again with plan.save(path)."
        ) from e
