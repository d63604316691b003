"""The numerics check of a Planner's answers: the planned step against the user's own step on
the example arguments (numerics.py), with the reference run once per Planner; where the
planner's own plan changes the outputs beyond rounding, the kept classes behind it are
isolated and recomputed in every later plan (a JAX/XLA bug: a valid policy must not change
the math; benchmarks/results/jax-remat-bug-2026-12-03.md)."""

from __future__ import annotations

import dataclasses
import time
import warnings
from typing import Any

import jax

from planner._src.emit.emit import emit
from planner._src.errors import PlanWarning
from planner._src.planning.context import AppliedRun, Subject, Timings
from planner._src.types import Assignment, Status
from planner._src.verify import numerics
from planner._src.verify.sites import policy_maker
from planner._src.xla import compile_options

MAX_NUMERICS_REPLANS = 3  # re-plans per Planner after a numerics mismatch
NUMERICS_FORCED_WHY = (
    "keeping it changed the step's outputs beyond rounding (a JAX/XLA bug, isolated by the "
    "numerics check)"
)


def impossible_why(user_args, compiler) -> str:
    """Why the numerics check cannot run the step on ``user_args`` with ``compiler`` (an xla
    target) here ('' when it can)."""
    if not numerics.is_concrete(user_args):
        return (
            "the example arguments are abstract (jax.ShapeDtypeStruct): there are no "
            "values to run the step on"
        )
    if compiler.kind == "deviceless":
        return (
            f"the verifying compiler, {compiler.description}, compiles for a "
            "GPU that is not here and cannot run the step"
        )
    return ""


def not_checked_why(options, user_args, compiler) -> str:
    """Why plans made with ``options`` get no numerics check ('' when they do): then nothing
    the planner compiles is run here."""
    if options.check_numerics is False:
        return "check_numerics=False"
    return impossible_why(user_args, compiler)


class NumericsJudge:
    """The numerics check for one Planner: the reference outputs (the step under the user's
    own policies) and its rounding-only runs, computed once; the float64 run, at most once;
    the classes found to change the math, recomputed in every later plan."""

    def __init__(self, subject: Subject):
        self.subject = subject
        self._reference = None
        self._sensitivity = None
        self._traces_differ = ""  # why the step's traces compute other outputs ('' if not)
        self._float64_tried = False
        self._float64 = None
        # classes whose saving changed the step's outputs: key -> what was measured
        self.forced: dict[str, str] = {}
        self._replans = 0
        # The trace stage's full-remat anchor, compiled on this machine: the reference's
        # full-remat run runs it instead of compiling the same program again.
        self.full_remat = None

    def impossible_why(self) -> str:
        """Why the check cannot run here ('' when it can)."""
        return impossible_why(self.subject.user_args, self.subject.compiler)

    def not_checked_why(self) -> str:
        """Why this Planner's plans get no numerics check ('' when they do)."""
        return not_checked_why(self.subject.options, self.subject.user_args, self.subject.compiler)

    def _ensure_reference(self, float_dtypes) -> None:
        if self._reference is None:
            # in the Planner's scope: a reference program it compiled already is not compiled
            # again (xla/memo.py)
            with self.subject.scope():
                self._reference, self._sensitivity, self._traces_differ = numerics.reference_runs(
                    self.subject.fn, self.subject.args, float_dtypes, full_remat=self.full_remat
                )
            if self._traces_differ:
                warnings.warn(
                    f"The numerics check cannot judge this step's plans: {self._traces_differ}.",
                    PlanWarning,
                    stacklevel=2,
                )

    def judge_run(self, plan, run, timings: Timings):
        """The outputs of ``run()`` (a step that applies ``plan``) judged against the
        reference: numerics.judge's result."""
        self._ensure_reference(plan.trace.float_dtypes)
        return self.judged(run(), plan, timings)

    def judged(self, planned, plan, timings: Timings):
        """numerics.judge of ``planned`` (the outputs of a step applying ``plan``); where it
        fails, once per Planner the step is run in float64 (numerics.run_float64): a leaf
        the float32 step computes no better than the plan does passes when the plan is no
        farther from the float64 answer than twice the user's own step is."""

        def judged():
            return numerics.judge(
                planned,
                self._reference,
                numerics.coarsest_eps(
                    self.subject.args, self._reference, computed=plan.trace.float_dtypes
                ),
                decisions=plan.decisions(),
                ran_on=numerics.backend_note(),
                sensitivity=self._sensitivity,
                float64=self._float64,
            )

        if self._traces_differ:
            return numerics.not_checked(self._traces_differ)
        result = judged()
        if result.ok or self._float64_tried:
            return result
        self._float64_tried = True
        t = time.perf_counter()
        self._float64 = numerics.run_float64(
            self.subject.fn, self.subject.args, draws_random=plan.trace.draws_random
        )
        timings.timed("numerics: the step in float64", t)
        return result if self._float64 is None else judged()

    def check(self, plan, compiled: Any, timings: Timings):
        """``plan`` with the numerics check in its verification (``compiled``: its verify
        compile, which runs the planned step): a check where it ran (a mismatch is the
        status), a note saying why not and how to check where not."""
        why = self.not_checked_why()
        if why:
            result = numerics.not_checked(why)
        else:
            self.subject.say("running the planned step and yours once to compare their outputs")
            t = time.perf_counter()
            try:
                self._ensure_reference(plan.trace.float_dtypes)
                if self._traces_differ:
                    return with_result(plan, numerics.not_checked(self._traces_differ), timings)
                if isinstance(compiled, AppliedRun):  # the step as applied (train state)
                    planned = numerics.run_applied(compiled.fn, compiled.args)
                else:
                    if compile_options.is_figures_only(compiled):
                        compiled = None  # its code is not XLA's default: compiled again
                    planned = numerics.run_planned(
                        self.subject.fn,
                        self.subject.args,
                        policy_maker(plan.graph, plan.emitted.policy, plan.emitted.policies),
                        compiled,
                        like=self._reference,
                    )
            except Exception as e:  # noqa: BLE001  (a step that cannot run here, e.g. OOM)
                if self.subject.options.check_numerics:
                    raise
                result = numerics.not_checked(
                    f"running the step here failed with {type(e).__name__}: {str(e)[:300]}"
                )
            else:
                result = self.judged(planned, plan, timings)
            timings.timed("numerics check", t)
        return with_result(plan, result, timings)

    def isolate_culprits(self, plan, timings: Timings) -> bool:
        """Where the planner's own plan changed the step's outputs beyond rounding: find the
        kept classes behind it (numerics.isolate: each probe runs the step keeping only a
        subset) and record them in :attr:`forced`, to be recomputed in every later plan.
        True when the budget must be planned again; at most ``MAX_NUMERICS_REPLANS`` times
        per Planner."""
        res = plan.numerics
        if plan.choice != "planner" or res is None or not res.checked or res.ok:
            return False
        if self._replans >= MAX_NUMERICS_REPLANS:
            return False
        subject = self.subject
        kept = tuple(
            k for k, d in plan.assignment.decisions if d != "remat" and k not in self.forced
        )
        names = {c.key: c.name for c in plan.graph.classes}
        eps = numerics.coarsest_eps(subject.args, self._reference, computed=plan.trace.float_dtypes)
        probes: list[tuple[tuple[str, ...], bool]] = []

        def differs(sub: tuple[str, ...]) -> bool:
            keep = {k: d for k, d in plan.assignment.decisions if k in set(sub)}
            em = emit(Assignment.of(keep), names, subject.hardware)
            out = numerics.run_planned(
                subject.fn, subject.args, policy_maker(plan.graph, em.policy, em.policies)
            )
            checks = numerics.compare(out, self._reference, eps, self._sensitivity, self._float64)
            bad = any(not leaf.ok for leaf in checks)
            probes.append((sub, bad))
            return bad

        subject.say(
            f"the plan changes the step's outputs: isolating which of {len(kept)} kept classes"
        )
        t = time.perf_counter()
        try:
            culprits = numerics.isolate(differs, kept)
        except Exception:  # noqa: BLE001  (a probe that cannot run: keep the plan as checked)
            culprits = ()
        timings.timed(f"numerics isolation ({len(probes)} runs)", t)
        if not culprits:
            return False
        labels = {c.key: c.label for c in plan.graph.classes}
        for k in culprits:
            self.forced[k] = (
                f"keeping {labels.get(k, k)} {plan.assignment.get(k)}d changed the step's "
                f"outputs beyond rounding ({len(probes)} probe runs, JAX {jax.__version__})"
            )
        self._replans += 1
        return True

    def noting_forced(self, plan):
        """The verification note names the classes recomputed because keeping them changed
        the math (they are not the plan's choice: JAX/XLA computes them wrongly when kept)."""
        used = {c.key for c in plan.graph.classes}
        hit = [why for k, why in self.forced.items() if k in used]
        if not hit:
            return plan
        note = (
            "Recomputed, not kept, because keeping them changed the step's outputs beyond "
            "rounding on this JAX/XLA (a compiler bug: a checkpoint policy must not change the "
            "math; the classes were isolated by running the step keeping subsets): "
            + "; ".join(hit)
            + "."
        )
        ver = plan.verification
        ver = dataclasses.replace(ver, note=(ver.note + " " if ver.note else "") + note)
        return dataclasses.replace(plan, verification=ver)


def with_result(plan, result, timings: Timings):
    """``plan`` with a numerics result in its verification (a failed check is the status)
    and its planning time."""
    ver = plan.verification
    if result.checked:
        ver = dataclasses.replace(
            ver,
            checks=ver.checks + (result.check,),
            status=ver.status if result.ok else Status.NUMERICS,
        )
    else:
        ver = dataclasses.replace(ver, note=(ver.note + " " if ver.note else "") + result.detail)
    return dataclasses.replace(plan, verification=ver, numerics=result, timings=tuple(timings))
