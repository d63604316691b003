"""The report's data model: Report, its Row per decision class and PolicyLine per policy,
and report_from_dict (a plan file's report back into the model).

build.py fills it from a Plan; the renderers (text.py, markdown.py, json.py) only format it.
"""

from __future__ import annotations

import dataclasses

from planner._src.units import fmt_gb


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    label: str
    decision: str  # save / remat / offload
    nbytes_per_step: int  # all members, the trips held at once, that the backward pass reads
    members: int
    recompute_ms: float  # per step, if rematerialized
    transfer_ms: float  # per step, both directions, if offloaded
    source: str
    reason: str
    shard: str = ""  # sharded steps: "1/8 (hlo)", how the per-device bytes were found
    group: int | None = None  # the layer group, when the plan decides groups separately
    # What jax.ad_checkpoint.print_saved_residuals prints for the member whose source the row
    # shows, when kept: "f32[4,256] output of dot_general from /path/model.py:12:8 (layer)"
    # (string for string; the renderers show the path relative to the working directory).
    jax_label: str = ""
    name: str | None = None  # the class's checkpoint_name (a MaxText key), if any
    # the class key the row decides (plan files: a decision edited by hand shows in its row);
    # "" in plan files written before it was recorded
    key: str = ""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PolicyLine:
    name: str
    peak_gb: float  # the cost model's prediction
    host_gb: float
    step_ms: float
    fits: bool  # the compiled figure within the budget where compiled, else the prediction
    applicable: bool
    compiled_gb: float | None = None  # the verifying compiler's figure (None: not compiled)
    # False: read from a plan file written by a version that did not record compiled_gb
    compiled_recorded: bool = True
    # which compiler made compiled_gb (the verifying compiler, in short: "XLA:CPU"); "" in
    # plan files written before it was recorded
    compiler: str = ""
    # the answer's row where its status is "compiled, unverified": compiled, but by a figure
    # that cannot say whether it fits (fits: the prediction, or the estimate the status block
    # shows)
    unverified: bool = False

    @property
    def fits_text(self) -> str:
        """``fits`` and what it rests on: "yes, compiled" or "no, predicted" (or "n/a")."""
        if not self.applicable:
            return "n/a"
        yes = "yes" if self.fits else "no"
        if not self.compiled_recorded:
            return yes
        by = f" by {self.compiler}" if self.compiler else ""
        if self.unverified and self.compiled_gb is not None:
            return f"{yes}, unverified (compiled{by})"
        if self.compiled_gb is None:
            return yes + ", predicted (not compiled)"
        return yes + ", compiled" + by

    @property
    def compiled_text(self) -> str:
        if not self.compiled_recorded:
            return "not recorded"
        return "not compiled" if self.compiled_gb is None else fmt_gb(self.compiled_gb)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    status: str
    checks: tuple[tuple[str, bool, str], ...]
    hardware: str
    backend: str
    compiler: str = ""  # which compiler made the compiled figures
    compiler_exact: bool = True  # the target's own compiler (else an estimate)
    compiler_note: str = ""  # how to get the target's figures, or the compiler's caveats
    budget_gb: float
    headroom_gb: float  # of the budget, left free (allocator headroom, XLA's limit)
    predicted_peak_gb: float
    compiled_gb: float | None
    host_gb: float
    step_ms: float
    base_ms: float
    recompute_ms: float
    saving_ms: float  # forward writes that saving fusible values forces (cost.py M)
    transfer_ms: float
    exposed_ms: float
    fixed_gb: float
    residual_gb: float
    working_set_gb: float
    solver: str
    regions: tuple[str, ...]
    rows: tuple[Row, ...]
    small_rows: tuple[int, int]  # (count, bytes) of classes too small to list
    # The same model's figures for the planner's answer and the stock policies (named so in
    # JSON too: plan.policies is something else, the per-group policies).
    stock_policies: tuple[PolicyLine, ...]
    policy_source: str
    xla_flags: str
    flag_notes: tuple[tuple[str, str, str], ...]
    maxtext_yaml: str
    notes: tuple[str, ...]
    # One dict per compiled round of the verify loop (build._round_dict: purpose, the
    # correction and the budget the uncorrected model was held to, predicted and compiled
    # bytes, predicted step, outcome); plan files written before them: (round, correction,
    # compiled, status).
    rounds: tuple[dict | tuple, ...]
    layer_groups: int = 0  # groups decided separately (0: one decision for all layers)
    headroom_why: str = ""  # why headroom_gb of the budget is left free
    # The status block: (what, text) lines saying what was checked where (build._status_lines).
    status_lines: tuple[tuple[str, str], ...] = ()
    # What users paste (planner._src.emit.paste): {"python", "xla_flags", "maxtext", "apply"}, and
    # "state" where the plan places the optimizer state (state.PlanState.snippet).
    snippets: dict = dataclasses.field(default_factory=dict)
    # Where the plan places the optimizer state too (plan.state): per part (parameters,
    # gradients, optimizer state, activations) {"part", "hbm_bytes", "host_bytes",
    # "moved_bytes"} per device; () otherwise.
    budget_split: tuple = ()
    # the train-state leaves in pinned host memory (state.StateLeaf.key: "params" + path for
    # a parameter)
    state_host_leaves: tuple[str, ...] = ()
    # On an XLA:GPU target, for a plan that offloads: the exposed copy time per direction the
    # compiled schedule predicts (dataclasses.asdict of types.ScheduleExposure); None elsewhere
    schedule_exposure: dict | None = None
    # Where the cost model's recompute seconds came from (CostModel.recompute_priced_from):
    # the library's roofline, or the compiled HLO of the full-remat anchor (cost.py).
    recompute_priced_from: str = ""
    # Where the planning time went (build.planning_time): (what, seconds, how many) per stage of
    # this plan, in order; the trace stage's parts follow it, their names indented.
    planning_time: tuple[tuple[str, float, int], ...] = ()
    # What JAX's persistent compilation cache does for these compiles, or offers
    # (results/report/timing.persistent_cache_note); "" where there is nothing to say.
    compile_cache: str = ""


NOT_READ = (
    "not a residual under this plan (nor with everything saved): the backward pass never "
    "reads it, so its decision changes no memory or time"
)

REGION_LINE = "the region's line: JAX made this tensor, no line of yours"


def report_from_dict(d: dict) -> Report:
    """The inverse of ``dataclasses.asdict(report)`` (JSON lists back to tuples)."""
    d = dict(d)
    # Figures later versions added (plan files written before them read as zero).
    d.setdefault("headroom_gb", 0.0)
    d.setdefault("headroom_why", "the profile's allocator_headroom" if d["headroom_gb"] else "")
    d.setdefault("saving_ms", 0.0)
    d["status_lines"] = tuple(tuple(x) for x in d.get("status_lines", ()))
    d.setdefault("snippets", {})
    d["budget_split"] = tuple(dict(x) for x in d.get("budget_split", ()))
    d["state_host_leaves"] = tuple(d.get("state_host_leaves", ()))
    d["planning_time"] = tuple(tuple(x) for x in d.get("planning_time", ()))
    d["rows"] = tuple(Row(**r) for r in d["rows"])
    if "policies" in d:  # plan files written before the rename
        d["stock_policies"] = d.pop("policies")
    d["stock_policies"] = tuple(
        PolicyLine(**p) if "compiled_gb" in p else PolicyLine(**p, compiled_recorded=False)
        for p in d["stock_policies"]
    )
    for k in ("checks", "flag_notes"):
        d[k] = tuple(tuple(x) for x in d[k])
    d["rounds"] = tuple(x if isinstance(x, dict) else tuple(x) for x in d["rounds"])
    for k in ("regions", "notes", "small_rows"):
        d[k] = tuple(d[k])
    return Report(**d)
