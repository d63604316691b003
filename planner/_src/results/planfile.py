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
import tempfile
from pathlib import Path
from typing import Any

from planner._src.emit.apply import apply, binding
from planner._src.emit.apply_state import apply_state
from planner._src.emit.emit import differing_groups_error, policies_for
from planner._src.errors import PlanFileError
from planner._src.fingerprints import StepFingerprint
from planner._src.graph import num_groups
from planner._src.results.files import as_path, target_of, write_text_atomically
from planner._src.results.report import Report, build_report, render, report_from_dict
from planner._src.results.stale import (
    fingerprint_for_check,
    first_call_check,
    refuse_another_step,
)
from planner._src.trainstate.records import StateApply
from planner._src.types import DECISIONS, Assignment
from planner._version import __version__

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
    # jax / jaxlib / planner versions the plan was made with ({} for files written before)
    versions: dict = dataclasses.field(default_factory=dict, compare=False)
    # bind order of the checkpoint call sites -> layer group (Plan.bind_groups); () for files
    # written before it was recorded (apply then needs a uniform plan)
    bind_group_pairs: tuple[tuple[int, int | None], ...] = ()
    # Plan.candidates() as saved (JSON: shapes are lists); () for files written before
    candidates_data: tuple = dataclasses.field(default=(), compare=False)
    # The step's whole fingerprint (program, arguments, JAX); files written before it was
    # recorded give the program hash and the recorded JAX only.
    step: StepFingerprint | None = dataclasses.field(default=None, compare=False)

    @property
    def step_fingerprint(self) -> StepFingerprint:
        """The fingerprint of the step the plan was made for (``StepFingerprint``)."""
        if self.step is not None:
            return self.step
        v = self.versions or {}
        return StepFingerprint(
            program=self.fingerprint, jax=str(v.get("jax", "")), jaxlib=str(v.get("jaxlib", ""))
        )

    # how the plan's train-state placement is applied (plan.state.applies); None: the plan
    # places no train state
    state: StateApply | None = None

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

    def apply(self, step_fn, *, check: bool = True):
        """``step_fn`` with every checkpoint region under this plan's policy, per call site
        where it decides per layer group (``Plan.apply``): its first call refuses a step that
        is not the one the plan was made for (PlanFileError, ``.differences``) unless
        ``check=False``."""
        policy, _, _, policies, _ = policies_for(self.assignment, dict(self.class_names))
        if policies and not self.bind_group_pairs and policy is None:
            raise PlanFileError(
                f"The plan in {self.path or 'this file'} decides per layer group but does not "
                "record which call site is which group (it was written by an older planner).\n"
                "Fix: save the plan again with plan.save(path), then load_plan(path).apply(step)."
            )
        where = f"The plan in {self.path or 'this file'}"
        guard = first_call_check(step_fn, self.step_fingerprint, where) if check else None
        b = binding(self.bind_groups(), policy, policies)
        if self.state is not None and self.state.on_host:
            return apply_state(step_fn, b, self.state, guard)  # the train state's placement too
        return apply(step_fn, b, guard)

    def bind_groups(self) -> dict[int, int | None]:
        """Bind order of the step's checkpoint call sites -> layer group (``Plan.bind_groups``)."""
        return dict(self.bind_group_pairs)

    def decisions(self) -> dict[str, str]:
        """Decision per tensor label, as ``Plan.decisions()``: the file's decisions, which
        ``apply`` applies (a decision edited by hand shows here)."""
        return {row.label: row.decision for row in self._report().rows}

    def candidates(self) -> list[dict]:
        """Every candidate tensor with its decision, as ``Plan.candidates()`` (shapes as
        lists, as JSON keeps them; empty for files written before they were recorded)."""
        return [dict(c) for c in self.candidates_data]

    def report(self, fmt: str = "text") -> str:
        """The plan's report as it was made: ``text`` (as the CLI prints it), ``markdown``
        or ``json`` (``Plan.report``)."""
        return render(self._report(), fmt)

    def _report(self) -> Report:
        """The saved report with the file's decisions in its rows: a plan file's decisions
        are its truth (``apply`` applies them), so a decision edited by hand shows in its
        row, marked, and a note says the figures are of the plan as it was made."""
        r = report_from_dict(self.report_data)
        assert isinstance(r, Report)
        decided = dict(self.assignment.decisions)
        rows, edited = [], []
        for row in r.rows:
            d = decided.get(row.key, row.decision) if row.key else row.decision
            if d != row.decision:
                edited.append(f"{row.label}: {row.decision} -> {d}")
                row = dataclasses.replace(
                    row,
                    decision=d,
                    reason=f"edited in the plan file (planned: {row.decision}); {row.reason}",
                )
            rows.append(row)
        saved = {c.get("class"): c.get("decision") for c in self.candidates_data}
        if not any(row.key for row in r.rows) and any(
            k in decided and decided[k] != d for k, d in saved.items() if d is not None
        ):
            edited.append("(rows of this file do not name their classes: see decisions)")
        if not edited:
            return r
        note = (
            f"{len(edited)} decision(s) of this plan file differ from the plan as it was made "
            f"({'; '.join(edited[:5])}{' ...' if len(edited) > 5 else ''}): apply applies the "
            "file's decisions; the memory and time figures are of the plan as it was made, "
            "not verified for these. Plan again to get figures the compiler checked."
        )
        return dataclasses.replace(r, rows=tuple(rows), notes=(note, *r.notes))

    def check(self, step_fn, *example_args) -> None:
        """Raise PlanFileError unless ``step_fn(*example_args)`` is the step this plan is for."""
        here, bodies = fingerprint_for_check(step_fn, example_args, self.step_fingerprint)
        refuse_another_step(
            here,
            self.step_fingerprint,
            f"The plan in {self.path or 'this file'}",
            note=_version_note(self.versions),
            bodies=bodies,
        )


def versions() -> dict[str, str]:
    """The versions a plan file records: a plan traced by another JAX is another program."""
    import jax
    import jaxlib

    return {
        "jax": jax.__version__,
        "jaxlib": getattr(jaxlib, "__version__", "?"),
        "planner": __version__,
    }


def _version_note(recorded: dict | None) -> str:
    """Why a fingerprint may differ when the plan was made on other versions ('' if not)."""
    if not recorded:
        return ""
    now = versions()
    differ = [f"{k} {recorded.get(k)} (here {v})" for k, v in now.items() if recorded.get(k) != v]
    if not differ:
        return ""
    return (
        f"\nNote: the plan was made with {', '.join(differ)}. Another JAX (or planner) version "
        "traces the same step into another program, so its fingerprint differs even when "
        "your model did not change."
    )


def check_writable(path: str | os.PathLike, what: str = "the plan file") -> Path:
    """Raise PlanFileError unless a plan file can be written at ``path`` (checked before a
    slow solve, so a typo costs a second, not the solve). Leaves nothing behind. A symlink is
    checked at its target (saving writes through it); a FIFO or device is refused
    (results/files.py)."""
    path = as_path(path, what, "plan.save" if what == "the plan file" else "save")
    why = None
    if path.is_dir():
        why = "it is a directory"
    elif not path.parent.exists():
        why = f"its folder {path.parent} does not exist"
    elif not path.parent.is_dir():
        why = f"{path.parent} is not a folder"
    else:
        real = target_of(path, what)
        try:
            fd, probe = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".probe", dir=real.parent)
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            why = e.strerror or str(e)
    if why is not None:
        raise PlanFileError(
            f"Cannot write {what} {path}: {why}.\nFix: pass a file path in an existing "
            "folder you may write to, e.g. plan.save('plan.json') or --save plan.json."
        )
    return path


def save(plan, path: str | os.PathLike) -> None:
    path = check_writable(path)
    data = {
        "format": FORMAT,
        "version": VERSION,
        "versions": versions(),
        "fingerprint": plan.trace.fingerprint.program,
        "step": plan.trace.fingerprint.to_json(),
        "budget_bytes": plan.budget_bytes,
        "hardware": plan.hardware.name,
        "decisions": [list(x) for x in plan.assignment.decisions],
        "class_names": {c.key: c.name for c in plan.graph.classes},
        "xla_flags": plan.xla_flags,
        "maxtext_yaml": plan.maxtext_yaml,
        "call_sites": len(plan.policies),
        "bind_groups": [[b, g] for b, g in sorted(plan.bind_groups().items())],
        "candidates": plan.candidates(),
        "report": dataclasses.asdict(build_report(plan, str(path))),
    }
    if plan.state is not None:
        a = plan.state.applies
        data["state"] = {**dataclasses.asdict(a), "on_host": sorted(a.on_host)}
    write_text_atomically(path, json.dumps(data, indent=1, sort_keys=True))


def _damaged(path, what: str) -> PlanFileError:
    return PlanFileError(
        f"{path} is a damaged plan file: {what}.\n"
        "Fix: save the plan again with plan.save(path) (or solve --save) and do not edit it "
        "by hand."
    )


def _field(data: dict, path, key: str, kinds, what: str):
    if key not in data:
        raise _damaged(path, f"it has no {key!r} field ({what})")
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise _damaged(path, f"{key!r} is {value!r:.80}, not {what}")
    return value


def load(path: str | os.PathLike) -> SavedPlan:
    path = as_path(path, "the plan file", "planner.load_plan")
    if path.exists() and not (path.is_file() or path.is_dir()):
        # a FIFO would block the read forever; a device streams without end
        raise PlanFileError(
            f"{path} is not a plan file: it is not a regular file (a FIFO, device or "
            "socket).\nFix: pass the file plan.save(path) wrote."
        )
    try:
        data: Any = json.loads(path.read_text())
    except RecursionError:
        raise PlanFileError(
            f"{path} is not a plan file: its JSON is nested deeper than Python's parser "
            "goes (a plan file is a few levels deep).\nFix: pass a file written by "
            "plan.save(path)."
        ) from None
    except FileNotFoundError:
        raise PlanFileError(
            f"No plan file at {path}. Fix: save one with plan.save(path)."
        ) from None
    except IsADirectoryError:
        raise PlanFileError(
            f"{path} is a directory, not a plan file.\nFix: pass the file plan.save(path) "
            "wrote, e.g. planner.load_plan('plan.json')."
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PlanFileError(
            f"{path} is not a plan file: it is not valid JSON ({e}).\nFix: "
            "write plans with plan.save(path) and do not edit them by hand."
        ) from e
    except OSError as e:
        raise PlanFileError(
            f"Cannot read the plan file {path}: {e.strerror or e}.\nFix: check the path and "
            "its permissions."
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise PlanFileError(
            f'{path} is not a jax-offload-planner plan (no \'"format": '
            f'"{FORMAT}"\' field).\nFix: pass a file written by plan.save().'
        )
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise _damaged(
            path,
            f"its 'version' is {version!r} ({type(version).__name__}), not a version "
            f'number (this planner writes "version": {VERSION}, a JSON number)',
        )
    if version != VERSION:
        raise PlanFileError(
            f"{path} is a plan file of version {data.get('version')!r}; this "
            f"planner reads version {VERSION}.\nFix: plan again with this version."
        )
    return _parse(data, path)


def _parse(data: dict, path: Path) -> SavedPlan:
    """The whole file's schema, checked: every field present with its type, every decision
    for a class the plan has, the report readable. Anything else is a damaged file."""

    fingerprint = _field(data, path, "fingerprint", str, "the step's program fingerprint")
    budget = _field(data, path, "budget_bytes", int, "the budget in bytes (an integer)")
    if budget <= 0:
        raise _damaged(path, f"'budget_bytes' is {budget}, not a positive number of bytes")
    hardware = _field(data, path, "hardware", str, "a hardware profile name")
    names = _field(data, path, "class_names", dict, "a mapping of class key to tensor name")
    if not names:
        raise _damaged(path, "'class_names' is empty: a plan decides at least one class")
    for k, v in names.items():
        if v is not None and not isinstance(v, str):
            raise _damaged(path, f"class {k!r} has the name {v!r}, not a string or null")
    raw = _field(data, path, "decisions", list, "a list of [class key, decision] pairs")
    decisions: dict[str, str] = {}
    for pair in raw:
        if not (
            isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)
        ):
            raise _damaged(path, f"the decision {pair!r:.80} is not a [class key, decision] pair")
        key, d = pair
        if d not in DECISIONS:
            raise _damaged(path, f"the decision for {key!r} is {d!r}, not one of {DECISIONS}")
        if key not in names:
            raise _damaged(
                path,
                f"it decides {d!r} for the class {key!r}, which is not one of its "
                f"{len(names)} classes ('class_names'), so its policy would match nothing there",
            )
        decisions[key] = d
    xla_flags = _field(data, path, "xla_flags", str, "the XLA_FLAGS text")
    yaml = _field(data, path, "maxtext_yaml", str, "the MaxText block")
    call_sites = data.get("call_sites", 1)
    if isinstance(call_sites, bool) or not isinstance(call_sites, int) or call_sites < 1:
        raise _damaged(path, f"'call_sites' is {call_sites!r}, not a count >= 1")
    recorded = data.get("versions")
    if recorded is not None and not isinstance(recorded, dict):
        raise _damaged(path, f"'versions' is {recorded!r:.80}, not a mapping")
    bind_groups = _bind_groups(data.get("bind_groups", []), path)
    report = _field(data, path, "report", dict, "the plan's report")
    try:
        report_from_dict(report)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        missing = f"no {e}" if isinstance(e, KeyError) else f"{type(e).__name__}: {e}"
        raise _damaged(path, f"its 'report' cannot be read ({missing})") from None
    return SavedPlan(
        fingerprint=fingerprint,
        budget_bytes=budget,
        hardware=hardware,
        assignment=Assignment.of(decisions),
        class_names=tuple(sorted(names.items())),
        xla_flags=xla_flags,
        maxtext_yaml=yaml,
        report_data=dict(report),
        path=str(path),
        call_sites=call_sites,
        versions=dict(recorded or {}),
        bind_group_pairs=bind_groups,
        candidates_data=_candidates(data.get("candidates", []), path),
        step=_step(data.get("step"), fingerprint, path),
        state=_state(data.get("state"), path),
    )


def _step(raw, program: str, path) -> StepFingerprint | None:
    """The recorded ``StepFingerprint`` (None for files written before it was recorded)."""
    if raw is None:
        return None
    ok = (
        isinstance(raw, dict)
        and isinstance(raw.get("program"), str)
        and isinstance(raw.get("arguments", []), list)
        and all(isinstance(a, str) for a in raw.get("arguments", []))
        and all(isinstance(raw.get(k, ""), str) for k in ("jax", "jaxlib"))
    )
    if not ok:
        raise _damaged(path, f"'step' is {raw!r:.80}, not the step's fingerprint record")
    if raw["program"] != program:
        raise _damaged(
            path,
            f"'step' records the program {raw['program']!r}, 'fingerprint' {program!r}: one "
            "of them was edited",
        )
    return StepFingerprint.from_json(raw)


def _state(raw, path) -> StateApply | None:
    """The train state's placement as recorded (``plan.state.applies``), checked."""
    if raw is None:
        return None
    fields = {f.name for f in dataclasses.fields(StateApply)}
    if not isinstance(raw, dict) or set(raw) != fields:
        raise _damaged(path, f"'state' is {raw!r:.80}, not the train state's placement")
    if not isinstance(raw["on_host"], list) or not all(isinstance(x, str) for x in raw["on_host"]):
        raise _damaged(path, "'state' names its host leaves by anything but their paths")
    if raw["mode"] not in ("streamed", "whole", "build") or not isinstance(raw["layers"], int):
        raise _damaged(path, f"'state' has the mode {raw['mode']!r} or layers {raw['layers']!r}")
    return StateApply(**{**raw, "on_host": frozenset(raw["on_host"])})


def _candidates(raw, path) -> tuple:
    if not isinstance(raw, list) or not all(isinstance(c, dict) for c in raw):
        raise _damaged(path, f"'candidates' is {raw!r:.80}, not a list of mappings")
    return tuple(raw)


def _bind_groups(raw, path) -> tuple[tuple[int, int | None], ...]:
    """``[[bind id, group or null], ...]`` checked."""

    def ok(pair):
        return (
            isinstance(pair, list)
            and len(pair) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) for x in pair[:1])
            and (pair[1] is None or (isinstance(pair[1], int) and not isinstance(pair[1], bool)))
        )

    if not isinstance(raw, list) or not all(ok(p) for p in raw):
        raise _damaged(path, f"'bind_groups' is {raw!r:.80}, not [[bind id, group], ...] pairs")
    return tuple((b, g) for b, g in raw)
