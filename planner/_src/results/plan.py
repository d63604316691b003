"""The result of planning one budget: :class:`Plan`, and the warning it may come with.

A Plan holds what each stage produced for this budget (the trace, the liveness graph, the
cost model: internal types), the solver's answer, the emitted policy, flags and MaxText
block, the verification, and the stock policies on the same model. Read it through its
methods (``report``, ``candidates``, ``decisions``, ``policy``, ``policies``, ``save``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from planner._src.budget import Budget, headroom_why
from planner._src.emit.apply import apply as apply_to_step
from planner._src.emit.apply import binding
from planner._src.emit.apply_state import apply_state
from planner._src.emit.emit import differing_groups_error
from planner._src.errors import PlanWarning
from planner._src.graph import LivenessGraph, class_key
from planner._src.results import planfile
from planner._src.results.report import build_report, render
from planner._src.results.stale import first_call_check
from planner._src.types import (
    Assignment,
    Baseline,
    CostModel,
    Emitted,
    Prediction,
    Round,
    Solution,
    Trace,
    Verification,
)

__all__ = ["Plan", "PlanWarning", "UNIFORM"]

UNIFORM = "planner, one policy for all groups"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    budget_bytes: int
    hardware: Any  # cost_models.HardwareProfile
    # The stage outputs the plan was made from (internal types: read them through the
    # methods below; their fields may change between versions).
    trace: Trace = dataclasses.field(repr=False)
    graph: LivenessGraph = dataclasses.field(repr=False)
    cost: CostModel = dataclasses.field(repr=False)
    solution: Solution
    prediction: Prediction
    baselines: tuple[Baseline, ...]
    emitted: Emitted
    verification: Verification
    rounds: tuple[Round, ...]
    timings: tuple[tuple[str, float], ...]
    # Bytes of the budget left free (_usable: the hardware profile's allocator_headroom and,
    # on GPU, XLA's own compile-time limit; headroom_why() says which): the plan, its verify
    # compile and the stock policies' "fits" are held to budget_bytes - headroom_bytes.
    headroom_bytes: int = 0
    # What was chosen: "planner" (the solver's plan) or the name of the stock policy
    # (planner._src.policies.STOCK) returned instead, and why (the session's guarantees).
    choice: str = "planner"
    choice_why: str = ""
    # Why the returned plan leaves what it leaves of the planned-to budget (the frontier
    # walk, planning/walk.py); "" where it was not asked (no compile, a stock policy, a plan
    # not verified within budget).
    fill_why: str = ""
    # Where this budget's walk does not carry the guarantee that a larger budget gets no
    # slower answer (walk.Standing.walk_note); "" where it does.
    walk_note: str = ""
    # Why the session planned without offloading though it was not told to ("" otherwise):
    # session.CPU_OFFLOAD_WHY on a CPU target.
    offload_why: str = ""
    # Which compiler verified it (target.CompilerTarget.description), whether that is the
    # target's own, and what to know about it (how to get the target's, its caveats).
    compiler: str = ""
    compiler_exact: bool = True
    compiler_note: str = ""
    # What the budget leaves free because the compiler is not the device's own (budget.Margin:
    # the cuDNN workspaces it cannot size and a share of the temporaries; part of
    # headroom_bytes); 0 where the compiler is the device's own.
    compiler_margin: Any = 0.0
    # The numerics check (planner._src.verify.numerics.NumericsResult): the planned step against the
    # step under the user's own policies on the example arguments; None: not attempted.
    numerics: Any = None
    # The train state's part (state.PlanState), where the plan was asked to place the
    # optimizer state too (opt_state_argnum): the leaves in pinned host memory, the budget
    # split, what to apply (plan.state.shardings, plan.state.streamed_update). None: the
    # optimizer state was fixed bytes in HBM.
    state: Any = None

    @property
    def policy(self):
        """Pass to ``jax.checkpoint(fn, policy=plan.policy)`` in your code.

        A plan whose layer groups decide differently has no single policy: this raises
        ``LayerGroupsError`` (use ``plan.policies[g]`` for the g-th group)."""
        if self.emitted.policy is None:
            raise differing_groups_error(
                self.assignment, {c.key: c.name for c in self.graph.classes}
            )
        return self.emitted.policy

    @property
    def policies(self) -> tuple:
        """One policy per checkpoint call site (layer group), in call order:
        ``jax.checkpoint(layer, policy=plan.policies[g])`` for the g-th group. A uniform plan
        gives the same policy for every call site."""
        if self.emitted.policies:
            return self.emitted.policies
        return (self.emitted.policy,) * sum(rg.region.call_sites for rg in self.graph.regions)

    def bind_groups(self) -> dict[int, int | None]:
        """Bind order of the step's checkpoint call sites -> their layer group (None: the one
        policy): how ``apply`` and the plan file know which call site gets which policy."""
        return {b: rg.region.group for rg in self.graph.regions for b in rg.region.bind_ids}

    def apply(self, step_fn, *, check: bool = True):
        """``step_fn`` with every checkpoint region under this plan's policy, per call site
        where the plan decides per layer group, without editing the model: use the result as
        your step (``step = plan.apply(train_step)``; jit it as you would the step).

        Its first call compares the step, with that call's arguments, with the step this plan
        was made for, and raises PlanFileError naming what differs (``.differences``) for
        another one (another batch size, model or dtype); ``check=False`` skips that.
        Where the plan puts train state in pinned host memory (``plan.state``), the result
        is also jitted with the state's memory kinds and donation, its update streamed per
        layer slice where the plan says (emit/apply_state.py): call it as the step; it is
        the step the plan was compiled as."""
        b = binding(self.bind_groups(), self.emitted.policy, self.emitted.policies)
        guard = first_call_check(step_fn, self.trace.fingerprint, "This plan") if check else None
        if self.state is not None and self.state.placement.on_host:
            return apply_state(step_fn, b, self.state.applies, guard)
        return apply_to_step(step_fn, b, guard)

    @property
    def layer_groups(self) -> int:
        """How many layer groups the plan decides separately (0: one decision for all)."""
        return len(self.emitted.policies)

    @property
    def xla_flags(self) -> str:
        """Set ``os.environ["XLA_FLAGS"] = plan.xla_flags`` before JAX starts."""
        return self.emitted.xla_flags

    @property
    def maxtext_yaml(self) -> str:
        return self.emitted.maxtext_yaml

    @property
    def assignment(self) -> Assignment:
        return self.solution.assignment

    @property
    def budget(self) -> Budget:
        """The budget: ``requested`` (``budget_bytes``) and ``usable`` (what the plan, its
        verify compile and the stock policies' "fits" are held to)."""
        return Budget(
            requested=self.budget_bytes,
            usable=self.budget_bytes - self.headroom_bytes,
            hardware=self.hardware,
            margin=self.compiler_margin,
        )

    def headroom_why(self, short: bool = False) -> str:
        """Why ``headroom_bytes`` of the budget is left free (allocator, XLA's own limit);
        ``short``: in one line."""
        return headroom_why(self.hardware, short=short, margin=self.compiler_margin)

    def decisions(self) -> dict[str, str]:
        """Decision per tensor label for the classes the backward pass reads."""
        return {row.label: row.decision for row in build_report(self).rows}

    def report(self, fmt: str = "text", plan_file: str | None = None) -> str:
        """The report: ``text`` (rich console), ``markdown`` or ``json``; ``plan_file``: where
        the plan was saved, which the printed snippets load."""
        return render(build_report(self, plan_file), fmt)

    def save(self, path) -> None:
        """Write a versioned JSON plan file; ``planner.load_plan(path)`` reads it back."""
        planfile.save(self, path)

    @staticmethod
    def load(path):
        """Read a plan file: a ``SavedPlan`` with ``policy``, ``xla_flags``, ``check(step, *args)``."""
        return planfile.load(path)

    def candidates(self) -> list[dict]:
        """Every candidate tensor of every region, with its class's decision."""
        out = []
        for rg, rp in zip(self.graph.regions, self.prediction.regions):
            r = rg.region
            for c in r.candidates:
                out.append(
                    {
                        "region": r.id,
                        "index": c.index,
                        "name": c.name,
                        "primitive": c.primitive,
                        "shape": c.shape,
                        "dtype": c.dtype,
                        "bytes_per_trip": c.nbytes,
                        # Sharded steps: bytes_per_trip is per device = global / shard_divisor;
                        # shard_source says how the divisor was found (planner/_src/trace/shard.py).
                        "global_bytes_per_trip": c.global_nbytes,
                        "shard_divisor": c.shard_divisor,
                        "shard_source": c.shard_source,
                        "collectives": list(c.collectives),
                        "multiplicity": r.multiplicity,
                        "source": c.source,
                        "needed_by_backward": rp.needed[c.index],
                        "class": class_key(r, c),
                        "group": r.group,
                        # JAX keeps effectful equations whatever the policy says.
                        "decision": "save" if c.effectful else self.assignment.get(class_key(r, c)),
                    }
                )
        return out
