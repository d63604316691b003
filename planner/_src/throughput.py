"""Plan for throughput: the batch size (or the number of micro-batches) chosen together with
the policy, for the most tokens per second the HBM budget allows.

    result = planner.maximize_throughput(make_step, hbm_gb=80, hardware="h200")
    result.batch_size, result.plan.policy, result.tokens_per_s
    print(result.report())

``make_step(batch_size) -> (step_fn, example_args)`` builds the train step for one batch size.
Each batch size is traced once (a :class:`~planner._src.session.Planner` session: the step's
shapes scale with the batch, so every jaxpr and every compile differs; nothing is shared
between batch sizes but the hardware profile), then planned under the budget; the same
session compiles the stock policies, so every row of the table comes from one cost model and
one compiler.

The search (``batch_sizes=None``), per policy (the planner and each applicable stock policy),
is MaxText's estimator procedure (``src/maxtext/utils/estimator.py``: a binary search of the
largest ``per_device_batch_size`` that compiles without OOM) on a shared cache of sessions:
double the batch from 1 while the policy fits, then bisect between the last batch that fits
and the first that does not, down to adjacent batch sizes. "Fits" is the verifying
compiler's figure, ``argument + output - alias + temp`` of ``memory_analysis()``, within what
the budget leaves usable (``session.usable_bytes``). Full remat (``nothing_saveable``, the
session's anchor compile) is searched first: past its limit, only offloading can fit. The
planner is then also planned at every batch size where a stock policy does best, and
``refine`` times between its best batch and the probed neighbours, since tokens per second
need not be largest at the largest batch (more remat to fit).

Figures, per row (batch size b, n micro-batches, policy p):

* predicted step time ``T = n x t(p, b)``, with ``t`` the cost model's predicted time of one
  call of the step (cost.py); with micro-batching the step is one micro-batch's forward and
  backward (and its accumulation), run n times per optimizer step: the optimizer update, if
  the step holds it, is counted n times (an over-estimate of n - 1 updates);
* tokens per step ``N = tokens(b x n)``: the user's ``tokens`` callable, or
  ``tokens_per_example x b x n``, or (neither given) the sequence length read off the example
  batch when that is unambiguous (one integer array of rank 2 led by the batch);
* predicted tokens per second ``N / T``;
* the predicted peak (cost model) and the compiled peak (verifying compiler, the figure that
  decides "fits"); memory does not grow with n: one micro-batch's activations are live at a
  time, and the accumulator is an argument and an output of the step.

The chosen plan is the planner's fastest fitting row. It is never predicted slower than the
best fitting stock row, by the session's guarantee at each batch size (a stock policy
predicted faster than the plan that compiles within the budget is returned as the plan) and
because the planner is planned at every stock policy's best batch size.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from planner._src.budget import io_bytes, usable_bytes
from planner._src.cost import build_cost_model
from planner._src.cost.baselines import evaluate_baselines
from planner._src.errors import (
    InfeasibleBudgetError,
    InvalidArgumentError,
    PlannerError,
    PlanWarning,
)
from planner._src.options import PlanOptions, check_fits_device
from planner._src.plan import Plan
from planner._src.plots import throughput_curve
from planner._src.policies import STOCK
from planner._src.session import (
    Planner,
    _load_hardware,
    _options,
    _validate_budget,
)
from planner._src.units import GB, fmt_bytes

__all__ = ["ThroughputResult", "ThroughputRow", "PolicyLimit", "maximize_throughput"]

PLANNER = "planner"
MAX_BATCH = 1 << 16  # the search's default ceiling (max_batch_size)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ThroughputRow:
    """One batch size (or micro-batch count) under one policy."""

    batch_size: int  # what make_step was called with (the micro-batch size when accumulating)
    microbatches: int  # n: calls of the step per optimizer step
    policy: str  # "planner" or a stock policy's name (planner._src.policies.STOCK)
    # planner rows: what the session returned ("planner", or the stock policy it chose by its
    # never-worse-than-stock guarantee); stock rows: the policy itself
    chosen: str
    tokens_per_step: int  # N, per optimizer step (b x n examples)
    predicted_step_s: float | None  # T = n x the predicted time of one step call
    predicted_peak_bytes: int | None  # cost model
    compiled_peak_bytes: int | None  # the verifying compiler (memory_analysis)
    usable_bytes: int  # what the budget leaves usable at this batch size (session.usable_bytes)
    fits: bool  # compiled_peak_bytes <= usable_bytes
    compiler: str  # which compiler made compiled_peak_bytes
    exact: bool  # False: the compiler's figure is an estimate (another backend)
    note: str = ""

    @property
    def global_batch_size(self) -> int:
        """Examples per optimizer step, ``batch_size x microbatches``."""
        return self.batch_size * self.microbatches

    @property
    def tokens_per_s(self) -> float | None:
        """Predicted tokens per second, ``N / T``."""
        if not self.predicted_step_s:
            return None
        return self.tokens_per_step / self.predicted_step_s


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PolicyLimit:
    """Where one policy stops fitting, and where it does best."""

    policy: str
    largest_fitting: int | None  # batch size (None: not even the smallest probed fits)
    first_over: int | None  # the next probed batch size, which does not fit (None: not reached)
    first_over_compiled_bytes: int | None
    first_over_usable_bytes: int | None
    best_batch_size: int | None  # where its predicted tokens/s is highest among fitting rows
    best_tokens_per_s: float | None
    tokens_per_s_at_largest: float | None  # at largest_fitting (the estimator's pick)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ThroughputResult:
    """The chosen (batch size, plan) and every row the search compiled."""

    batch_size: int  # what make_step was called with for the chosen plan
    microbatches: int
    plan: Plan
    tokens_per_s: float  # predicted
    tokens_per_step: int
    table: tuple[ThroughputRow, ...]
    limits: tuple[PolicyLimit, ...]
    budget_bytes: int
    hardware: str
    compiler: str
    traced_batch_sizes: tuple[int, ...]  # one trace (session) each
    retraced: str  # what was traced again per batch size, and why
    search: str  # how the batch sizes were chosen
    tokens_rule: str  # how tokens per step were counted

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.microbatches

    @property
    def policy(self) -> str:
        """The chosen policy: "planner" or the stock policy the session returned."""
        return self.plan.choice

    def rows(self, policy: str) -> tuple[ThroughputRow, ...]:
        return tuple(r for r in self.table if r.policy == policy)

    def limit(self, policy: str) -> PolicyLimit:
        for lim in self.limits:
            if lim.policy == policy:
                return lim
        raise KeyError(policy)

    def to_dict(self) -> dict:
        return {
            "batch_size": self.batch_size,
            "microbatches": self.microbatches,
            "global_batch": self.global_batch,
            "policy": self.policy,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_step": self.tokens_per_step,
            "predicted_step_s": self.plan.prediction.step_s * self.microbatches,
            "compiled_peak_bytes": self.plan.verification.compiled_device_bytes,
            "budget_bytes": self.budget_bytes,
            "hardware": self.hardware,
            "compiler": self.compiler,
            "traced_batch_sizes": list(self.traced_batch_sizes),
            "retraced": self.retraced,
            "search": self.search,
            "tokens_rule": self.tokens_rule,
            "limits": [dataclasses.asdict(x) for x in self.limits],
            "table": [dict(dataclasses.asdict(r), tokens_per_s=r.tokens_per_s) for r in self.table],
            "decisions": dict(sorted(self.plan.decisions().items())),
        }

    def report(self, fmt: str = "text") -> str:
        """The table and the choice: ``text``, ``markdown`` or ``json``."""
        if fmt == "json":
            return json.dumps(self.to_dict(), indent=2, sort_keys=True)
        if fmt == "markdown":
            return _markdown(self)
        if fmt == "text":
            return _text(self)
        raise ValueError(f"unknown report format {fmt!r}; expected 'text', 'markdown' or 'json'")

    def plot(self, path):
        """Draw predicted tokens/s against batch size per policy (planner.plots)."""
        return throughput_curve(self, path)


# ------------------------------------------------------------------------------ tokens


def _int_batch_leaves(args, batch: int) -> list[tuple[str, tuple[int, ...]]]:
    out = []
    for path, x in jax.tree_util.tree_flatten_with_path(args)[0]:
        shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
        if shape is None or dtype is None or len(shape) != 2 or shape[0] != batch:
            continue
        if np.issubdtype(np.dtype(dtype), np.integer):
            out.append((jax.tree_util.keystr(path), tuple(shape)))
    return out


def _tokens_fn(tokens, tokens_per_example) -> tuple[Callable[[int, Any], int] | None, str]:
    """``(count(examples, example_args) -> tokens per step, the rule in words)``; count is
    None when the sequence length is to be read off the example batch."""
    if tokens is not None and tokens_per_example is not None:
        raise InvalidArgumentError(
            "Both tokens and tokens_per_example were given.\nFix: pass one: "
            "tokens_per_example=SEQ_LEN, or tokens=lambda examples: ... for anything else."
        )
    if tokens is not None:
        if not callable(tokens):
            raise InvalidArgumentError(
                f"tokens must be a callable examples -> tokens per step, got {tokens!r}.\n"
                "Fix: tokens=lambda examples: examples * 4096, or tokens_per_example=4096."
            )
        return (lambda examples, _args: int(tokens(examples))), "tokens(examples per step)"
    if tokens_per_example is not None:
        if (
            isinstance(tokens_per_example, bool)
            or not isinstance(tokens_per_example, (int, np.integer))
            or tokens_per_example < 1
        ):
            raise InvalidArgumentError(
                f"tokens_per_example must be a positive int, got {tokens_per_example!r}.\n"
                "Fix: the sequence length of one example (1 to count examples per second)."
            )
        t = int(tokens_per_example)
        return (lambda examples, _args: examples * t), f"{t} tokens per example (given)"
    return None, "derived"


def _derive_tokens_per_example(args, batch: int) -> int:
    """The sequence length when the example arguments say it unambiguously: every integer
    array of rank 2 whose leading dimension is the batch size has the same second dimension."""
    leaves = _int_batch_leaves(args, batch)
    seqs = {shape[1] for _, shape in leaves}
    if len(seqs) == 1 and batch > 1:
        return seqs.pop()
    found = ", ".join(f"{p}: {s}" for p, s in leaves[:6]) or "none"
    raise InvalidArgumentError(
        f"Cannot tell the tokens per step from the example arguments at batch size {batch}: "
        f"integer arrays of shape (batch, seq) found: {found}.\nWhy: tokens per second is "
        "tokens per step over the step time, and the planner reads the sequence length off "
        "the batch only when exactly one (batch, seq) length is there"
        + (" (at batch size 1 every leading 1 looks like a batch)" if batch == 1 else "")
        + ".\nFix: pass tokens_per_example=SEQ_LEN (1 to count examples), or "
        "tokens=lambda examples: ... for a count that is not proportional."
    )


# ------------------------------------------------------------------------------ the search


class _Probe:
    """One batch size: its session (one trace), and its rows as they are computed."""

    def __init__(self, batch: int, session: Planner, requested: int):
        self.batch = batch
        self.session = session
        tr = session.trace
        self.usable = usable_bytes(
            requested, session.hardware, io_bytes(tr), session.compiler.margin
        )
        self.cost = build_cost_model(
            tr, session.graph, session.hardware, allow_offload=session.offload
        )
        self.baselines = {
            b.name: b for b in evaluate_baselines(session.graph, self.cost, self.usable)
        }
        self.plan: Plan | None = None
        self.plan_error: PlannerError | None = None
        self.plan_warnings: tuple[str, ...] = ()
        self.planned = False

    def stock_bytes(self, name: str) -> int | None:
        s = self.session
        return s._stock_fit_bytes(name, s.trace, s.graph, self.cost)

    def fits(self, policy: str, requested: int) -> bool:
        if policy == PLANNER:
            self.run_plan(requested)
            return self.plan is not None and _plan_fits(self.plan, self.usable)
        got = self.stock_bytes(policy)
        return got is not None and got <= self.usable

    def run_plan(self, requested: int) -> None:
        if self.planned:
            return
        self.planned = True
        full = self.session._stock_bytes.get("nothing_saveable")
        if not self.session.offload and full is not None and full > self.usable:
            # Nothing can keep less than full remat without offloading: no plan fits, and
            # the session would compile every stock policy to say so.
            self.plan_error = InfeasibleBudgetError(
                f"No plan fits at batch size {self.batch}: full remat (nothing_saveable) "
                f"compiles to {fmt_bytes(full)}, over the {fmt_bytes(self.usable)} usable, and "
                "without offloading no plan keeps less.\nFix: a larger hbm_gb, a smaller "
                "batch, or allow_offload (where the backend has host memory).",
                budget_bytes=requested,
                min_feasible_bytes=float(full),
            )
            return
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PlanWarning)
            try:
                self.plan = self.session.plan(requested / GB)
            except InfeasibleBudgetError as e:
                self.plan_error = e
        self.plan_warnings = tuple(str(w.message).splitlines()[0] for w in caught)


def _plan_fits(plan: Plan, usable: int) -> bool:
    got = plan.verification.compiled_device_bytes
    return got is not None and got <= usable


def _boundary(fits: Callable[[int], bool], max_batch: int) -> tuple[int | None, int | None]:
    """``(largest fitting, first not fitting)`` by doubling from 1, then bisecting (MaxText's
    estimator, a binary search over compiles); ``(None, 1)`` when batch 1 does not fit and
    ``(max_batch, None)`` when the ceiling fits."""
    if not fits(1):
        return None, 1
    lo = 1
    hi = None
    while hi is None:
        nxt = min(2 * lo, max_batch)
        if nxt == lo:
            return lo, None
        if fits(nxt):
            lo = nxt
        else:
            hi = nxt
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo, hi


# ------------------------------------------------------------------------------ the verb


def maximize_throughput(
    make_step: Callable[[int], tuple[Callable, Sequence]],
    *,
    hbm_gb: float,
    hardware="h200",
    batch_sizes: Sequence[int] | None = None,
    global_batch: int | None = None,
    microbatches: Sequence[int] | None = None,
    tokens_per_example: int | None = None,
    tokens: Callable[[int], int] | None = None,
    stock: Sequence[str] | None = None,
    max_batch_size: int = MAX_BATCH,
    refine: int = 2,
    options: PlanOptions | None = None,
    progress: Callable[[str], None] | None = None,
    **option_fields,
) -> ThroughputResult:
    """Choose the batch size (or the micro-batch count) and the plan for the most predicted
    tokens per second under ``hbm_gb``.

    Args:
      make_step: ``make_step(batch_size) -> (step_fn, example_args)``. With micro-batching,
        the step of one micro-batch of that size (forward, backward, accumulation; the
        optimizer update once per ``microbatches`` steps belongs outside it: see
        ``examples/accumulate.py``).
      hbm_gb: device memory budget per device, GB (10^9 bytes).
      hardware: a profile name, a JSON file, or a profile.
      batch_sizes: the batch sizes to plan; None: searched (module docstring).
      global_batch, microbatches: plan a fixed global batch as ``n`` micro-batches of
        ``global_batch / n`` for each ``n`` in ``microbatches`` (those dividing it); the
        predicted step is ``n x`` the micro step. Not with ``batch_sizes``.
      tokens_per_example: tokens per example (sequence length); or ``tokens``:
        ``tokens(examples per step) -> tokens per step``. Neither: read off the example
        batch when unambiguous, else an error saying which to pass.
      stock: the stock policies to search and compare (names of ``planner._src.policies.
        STOCK``); None: every one applicable to the step. Each costs a compile per batch
        size probed, except nothing_saveable and everything_saveable (the session's anchors).
      max_batch_size: the search's ceiling.
      refine: probes between the planner's best batch size and its probed neighbours.
      options / option_fields: :class:`planner.PlanOptions` for every session.
      progress: called with a short message per stage; None: silent.
    """
    say = progress or (lambda message: None)
    b = _validate_budget(hbm_gb)
    hw = _load_hardware(hardware)
    check_fits_device(b, hw)
    opts = _options(options, option_fields)
    if not opts.verify_compile or not opts.compare_stock:
        raise InvalidArgumentError(
            "maximize_throughput needs verify_compile=True and compare_stock=True.\nWhy: "
            "whether a batch size fits is the compiler's answer, for the plan and for every "
            "stock policy the search compares it with.\nFix: leave both options at True."
        )
    if not callable(make_step):
        raise InvalidArgumentError(
            f"make_step must be a function batch_size -> (step_fn, example_args), got "
            f"{type(make_step).__name__}.\nFix: e.g. lambda b: make_train_step(replace(cfg, "
            "batch=b))."
        )
    requested = int(b * GB)
    if stock is None:
        stock_names = tuple(STOCK)
    else:
        stock_names = tuple(stock) if not isinstance(stock, str) else (stock,)
        unknown = [x for x in stock_names if x not in STOCK]
        if unknown:
            raise InvalidArgumentError(
                f"Unknown stock polic{'ies' if len(unknown) > 1 else 'y'} {unknown}.\nFix: "
                f"choose among {', '.join(STOCK)}."
            )
    count, rule = _tokens_fn(tokens, tokens_per_example)
    max_batch_size = _positive_int(max_batch_size, "max_batch_size")
    if isinstance(refine, bool) or not isinstance(refine, int) or refine < 0:
        raise InvalidArgumentError(f"refine must be an int >= 0, got {refine!r}.")

    # What is probed: (micro-)batch sizes, and n micro-batches per step for each.
    if global_batch is not None or microbatches is not None:
        if batch_sizes is not None:
            raise InvalidArgumentError(
                "batch_sizes and global_batch/microbatches were both given.\nFix: either "
                "search the batch size (batch_sizes) or split a fixed global_batch into "
                "microbatches, not both."
            )
        if global_batch is None:
            raise InvalidArgumentError(
                "microbatches needs global_batch: the number of examples per optimizer step "
                "that the micro-batches split.\nFix: maximize_throughput(make_step, "
                "global_batch=64, microbatches=(1, 2, 4, 8), hbm_gb=...)."
            )
        g = _positive_int(global_batch, "global_batch")
        counts = sorted(
            {_positive_int(n, "microbatches") for n in (microbatches or (1, 2, 4, 8, 16))}
        )
        counts = [n for n in counts if g % n == 0]
        if not counts:
            raise InvalidArgumentError(
                f"No micro-batch count in {tuple(microbatches or ())} divides "
                f"global_batch={g}.\nFix: give counts that divide it, e.g. (1, 2, 4)."
            )
        n_of = {g // n: n for n in counts}
        fixed = sorted(n_of)
        mode = "microbatch"
    else:
        n_of = {}
        if batch_sizes is not None:
            fixed = sorted({_positive_int(x, "batch_sizes") for x in batch_sizes})
            if not fixed:
                raise InvalidArgumentError("batch_sizes is empty; give at least one size.")
        else:
            fixed = None
        mode = "batch"

    probes: dict[int, _Probe] = {}

    def probe(batch: int) -> _Probe:
        if batch not in probes:
            say(f"batch size {batch}: tracing the step (one session per batch size)")
            made = make_step(batch)
            if not (isinstance(made, tuple) and len(made) == 2 and callable(made[0])):
                raise InvalidArgumentError(
                    f"make_step({batch}) returned {type(made).__name__}; it must return "
                    "(step_fn, example_args) with example_args a tuple of the step's arguments."
                )
            step, args = made
            if count is None and batch > 1 and not probes:
                _derive_tokens_per_example(tuple(args), batch)  # fail before the compiles
            session = Planner(step, *tuple(args), hardware=hw, options=opts, progress=progress)
            probes[batch] = _Probe(batch, session, requested)
        return probes[batch]

    def fits(policy):
        def f(batch):
            p = probe(batch)
            if policy == PLANNER:
                say(f"batch size {batch}: planning for {b:g} GB")
            return p.fits(policy, requested)

        return f

    def applicable(policy) -> bool:
        return policy in stock_names and any(
            p.baselines[policy].applicable for p in probes.values()
        )

    boundaries: dict[str, tuple[int | None, int | None]] = {}
    if fixed is None:
        say("searching the largest batch size under full remat (nothing_saveable)")
        full = _boundary(fits("nothing_saveable"), max_batch_size)
        if "nothing_saveable" in stock_names:
            boundaries["nothing_saveable"] = full
        for name in stock_names:
            if name in boundaries or not applicable(name):
                continue
            say(f"searching the largest batch size under {name}")
            boundaries[name] = _boundary(fits(name), max_batch_size)
        say("searching the largest batch size the planner fits")
        boundaries[PLANNER] = _boundary(fits(PLANNER), max_batch_size)
    else:
        for batch in fixed:
            probe(batch)

    # Every probed batch size under every applicable policy (compiles are per session, cached).
    def stock_rows_all():
        for batch in sorted(probes):
            for name in STOCK:
                if applicable(name):
                    probes[batch].fits(name, requested)

    def planner_all():
        for batch in sorted(probes):
            if not probes[batch].planned:
                say(f"batch size {batch}: planning for {b:g} GB")
            probes[batch].run_plan(requested)

    stock_rows_all()
    planner_all()
    if fixed is None:
        # the planner at every stock policy's best batch (already probed) and between its
        # own best batch and the probed neighbours
        for _ in range(refine):
            if not any(
                p.plan is not None and _plan_fits(p.plan, p.usable) for p in probes.values()
            ):
                break
            rows = _planner_rows(probes, n_of, count, rule)
            best = _best(rows)
            if best is None:
                break
            sizes = sorted(probes)
            i = sizes.index(best.batch_size)
            new = [
                (sizes[j] + best.batch_size) // 2
                for j in (i - 1, i + 1)
                if 0 <= j < len(sizes) and abs(sizes[j] - best.batch_size) > 1
            ]
            new = [x for x in new if x not in probes]
            if not new:
                break
            for x in new:
                say(f"refining around batch size {best.batch_size}: trying {x}")
                probe(x)
            stock_rows_all()
            planner_all()

    if not any(p.plan is not None and _plan_fits(p.plan, p.usable) for p in probes.values()):
        smallest = min(probes)
        err = probes[smallest].plan_error
        raise InfeasibleBudgetError(
            f"No batch size fits {fmt_bytes(requested)}: at batch size {smallest}, the "
            "smallest tried, neither a plan nor a stock policy compiles within the budget."
            + (f"\n{err}" if err else ""),
            budget_bytes=requested,
            min_feasible_bytes=getattr(err, "min_feasible_bytes", float(requested)),
        )
    table = _table(probes, n_of, count, rule, stock_names)
    best = _best([r for r in table if r.policy == PLANNER])
    chosen = probes[best.batch_size].plan
    limits = _limits(table, boundaries, probes)
    # The guarantee, checked: never predicted slower than any stock policy's best.
    for lim in limits:
        if lim.policy != PLANNER and lim.best_tokens_per_s is not None:
            if lim.best_tokens_per_s > best.tokens_per_s * (1 + 1e-9):
                raise AssertionError(
                    f"{lim.policy} at batch {lim.best_batch_size} is predicted faster "
                    f"({lim.best_tokens_per_s:.6g} tokens/s) than the chosen plan "
                    f"({best.tokens_per_s:.6g}): the session's never-worse-than-stock "
                    "guarantee failed; please report it"
                )
    sizes = tuple(sorted(probes))
    if fixed is None:
        search = (
            "searched: per policy, doubling from batch 1 while it fits, then bisection between "
            "the last batch that fits and the first that does not (MaxText estimator's "
            f"procedure), ceiling {max_batch_size}; then {refine} refinement round(s) around "
            "the planner's best batch"
        )
    elif mode == "microbatch":
        search = (
            f"global batch {max(k * n for k, n in n_of.items())} as "
            + ", ".join(f"{n} x {k}" for k, n in sorted(n_of.items(), key=lambda kv: kv[1]))
            + " micro-batches; step time = n x the micro step's"
        )
    else:
        search = "the batch sizes given"
    return ThroughputResult(
        batch_size=best.batch_size,
        microbatches=best.microbatches,
        plan=chosen,
        tokens_per_s=best.tokens_per_s,
        tokens_per_step=best.tokens_per_step,
        table=table,
        limits=limits,
        budget_bytes=requested,
        hardware=hw.name,
        compiler=chosen.compiler,
        traced_batch_sizes=sizes,
        retraced=(
            f"the step was traced once per batch size ({len(sizes)} traces: "
            f"{', '.join(map(str, sizes))}), each with its two anchor compiles (full remat, "
            "save everything): the activations' shapes scale with the batch, so no jaxpr or "
            "compile carries over; within a batch size every policy and budget reuses its trace"
        ),
        search=search,
        tokens_rule=rule if rule != "derived" else _derived_rule(probes),
    )


def _positive_int(x, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1:
        raise InvalidArgumentError(f"{what} must be positive ints, got {x!r}.")
    return int(x)


def _derived_rule(probes) -> str:
    p = probes[max(probes)]
    return (
        f"{_derive_tokens_per_example(p.session._user_args, p.batch)} tokens per example "
        "(the sequence length of the example batch)"
    )


def _planner_rows(probes, n_of, count, rule) -> list[ThroughputRow]:
    return [r for r in _table(probes, n_of, count, rule, ()) if r.policy == PLANNER]


def _best(rows) -> ThroughputRow | None:
    ok = [r for r in rows if r.fits and r.tokens_per_s]
    if not ok:
        return None
    return max(ok, key=lambda r: (r.tokens_per_s, -r.batch_size))


def _table(probes, n_of, count, rule, stock_names) -> tuple[ThroughputRow, ...]:
    rows = []
    ref = max(probes, key=lambda k: (k > 1, k))  # where a derived sequence length is read
    for batch in sorted(probes):
        p = probes[batch]
        n = n_of.get(batch, 1)
        if count is None:  # read at the largest probed batch > 1 (a leading 1 is ambiguous)
            seq = _derive_tokens_per_example(probes[ref].session._user_args, probes[ref].batch)
            tok = batch * n * seq
        else:
            tok = count(batch * n, p.session._user_args)
        comp = p.session.compiler
        if p.planned:
            plan = p.plan
            if plan is not None:
                v = plan.verification
                note = "; ".join(p.plan_warnings)
                if plan.choice != PLANNER:
                    note = (note + "; " if note else "") + f"session returned {plan.choice}"
                rows.append(
                    ThroughputRow(
                        batch_size=batch,
                        microbatches=n,
                        policy=PLANNER,
                        chosen=plan.choice,
                        tokens_per_step=tok,
                        predicted_step_s=n * plan.prediction.step_s,
                        predicted_peak_bytes=plan.prediction.peak_bytes,
                        compiled_peak_bytes=v.compiled_device_bytes,
                        usable_bytes=p.usable,
                        fits=_plan_fits(plan, p.usable),
                        compiler=v.compiler or comp.description,
                        exact=v.exact,
                        note=note,
                    )
                )
            else:
                rows.append(
                    ThroughputRow(
                        batch_size=batch,
                        microbatches=n,
                        policy=PLANNER,
                        chosen="none",
                        tokens_per_step=tok,
                        predicted_step_s=None,
                        predicted_peak_bytes=None,
                        compiled_peak_bytes=None,
                        usable_bytes=p.usable,
                        fits=False,
                        compiler=comp.description,
                        exact=comp.exact,
                        note=str(p.plan_error).splitlines()[0] if p.plan_error else "",
                    )
                )
        # the stock figures the session compared its plan with, where it planned
        compared = {x.name: x for x in p.plan.baselines} if p.plan is not None else {}
        for name in stock_names:
            bl = compared.get(name, p.baselines[name])
            if not bl.applicable or name not in p.session._stock_bytes:
                continue
            got = p.session._stock_bytes[name]
            ver = p.session._stock_ver.get(name)
            rows.append(
                ThroughputRow(
                    batch_size=batch,
                    microbatches=n,
                    policy=name,
                    chosen=name,
                    tokens_per_step=tok,
                    predicted_step_s=n * bl.prediction.step_s,
                    predicted_peak_bytes=bl.prediction.peak_bytes,
                    compiled_peak_bytes=got,
                    usable_bytes=p.usable,
                    fits=got is not None and got <= p.usable,
                    compiler=(ver.compiler if ver is not None and ver.compiler else None)
                    or comp.description,
                    exact=ver.exact if ver is not None else comp.exact,
                )
            )
    return tuple(rows)


def _limits(table, boundaries, probes) -> tuple[PolicyLimit, ...]:
    out = []
    for policy in (PLANNER, *STOCK):
        rows = [r for r in table if r.policy == policy]
        if not rows:
            continue
        fit = [r for r in rows if r.fits]
        if policy in boundaries:
            lo, hi = boundaries[policy]
        else:
            lo = max((r.batch_size for r in fit), default=None)
            hi = min(
                (r.batch_size for r in rows if not r.fits and (lo is None or r.batch_size > lo)),
                default=None,
            )
        over = next((r for r in rows if r.batch_size == hi), None)
        best = _best(rows)
        at_lo = next((r for r in rows if r.batch_size == lo), None)
        out.append(
            PolicyLimit(
                policy=policy,
                largest_fitting=lo,
                first_over=hi,
                first_over_compiled_bytes=over.compiled_peak_bytes if over else None,
                first_over_usable_bytes=over.usable_bytes if over else None,
                best_batch_size=best.batch_size if best else None,
                best_tokens_per_s=best.tokens_per_s if best else None,
                tokens_per_s_at_largest=at_lo.tokens_per_s if at_lo and at_lo.fits else None,
            )
        )
    return tuple(out)


# ------------------------------------------------------------------------------ rendering


def _tps(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.3f}"


def _b(x: int | None) -> str:
    return "-" if x is None else fmt_bytes(x)


def _summary_lines(r: ThroughputResult) -> list[str]:
    plan = r.plan
    lines = [
        f"Chosen: batch size {r.batch_size}"
        + (
            f" x {r.microbatches} micro-batches (global {r.global_batch})"
            if r.microbatches > 1
            else ""
        )
        + f", policy {r.policy}: {_tps(r.tokens_per_s)} tokens/s predicted "
        f"({r.tokens_per_step} tokens per step, {plan.prediction.step_s * r.microbatches * 1e3:.3f} "
        f"ms per step), compiled peak {_b(plan.verification.compiled_device_bytes)} of "
        f"{fmt_bytes(r.budget_bytes)} ({plan.verification.status}; {r.compiler})",
        f"Hardware {r.hardware}; tokens per step: {r.tokens_rule}.",
        f"Batch sizes: {r.search}.",
        f"Traces: {r.retraced}.",
    ]
    return lines


_LIMIT_HEAD = (
    "policy",
    "largest batch that fits",
    "first over",
    "its compiled peak / usable",
    "tokens/s there",
    "best batch",
    "best tokens/s",
)


def _limit_cells(lim: PolicyLimit) -> tuple[str, ...]:
    over = (
        f"{_b(lim.first_over_compiled_bytes)} / {_b(lim.first_over_usable_bytes)}"
        if lim.first_over is not None
        else "-"
    )
    return (
        lim.policy,
        "none" if lim.largest_fitting is None else str(lim.largest_fitting),
        "-" if lim.first_over is None else str(lim.first_over),
        over,
        _tps(lim.tokens_per_s_at_largest),
        "-" if lim.best_batch_size is None else str(lim.best_batch_size),
        _tps(lim.best_tokens_per_s),
    )


_ROW_HEAD = (
    "batch",
    "n",
    "policy",
    "step ms",
    "predicted peak",
    "compiled peak",
    "usable",
    "fits",
    "tokens/s",
)


def _row_cells(x: ThroughputRow) -> tuple[str, ...]:
    pol = x.policy if x.chosen in (x.policy, "none") else f"{x.policy} ({x.chosen})"
    return (
        str(x.batch_size),
        str(x.microbatches),
        pol,
        _ms(x.predicted_step_s),
        _b(x.predicted_peak_bytes),
        _b(x.compiled_peak_bytes),
        fmt_bytes(x.usable_bytes),
        "yes" if x.fits else "no",
        _tps(x.tokens_per_s) if x.fits else f"({_tps(x.tokens_per_s)})",
    )


def _text(r: ThroughputResult) -> str:
    import io

    from rich.console import Console
    from rich.table import Table

    buf = io.StringIO()
    con = Console(file=buf, width=140, force_terminal=False, force_jupyter=False, color_system=None)
    for line in _summary_lines(r):
        con.print(line, highlight=False)
    t = Table(title="Where each policy stops fitting (compiled) and where it does best")
    for c in _LIMIT_HEAD:
        t.add_column(c, overflow="fold")
    for lim in r.limits:
        t.add_row(*_limit_cells(lim))
    con.print(t)
    t = Table(
        title="Every batch size and policy (predicted tokens/s; in parentheses: does not fit)"
    )
    for c in _ROW_HEAD:
        t.add_column(c, overflow="fold")
    for x in r.table:
        t.add_row(*_row_cells(x))
    con.print(t)
    con.print(f"Compiled figures by: {r.compiler}", highlight=False)
    return buf.getvalue()


def _markdown(r: ThroughputResult) -> str:
    def table(head, rows):
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
        return out

    lines = ["# Throughput plan", ""]
    lines += [f"- {x}" for x in _summary_lines(r)]
    lines += ["", "## Where each policy stops fitting", ""]
    lines += table(_LIMIT_HEAD, [_limit_cells(x) for x in r.limits])
    lines += ["", "## Every batch size and policy", ""]
    lines += table(_ROW_HEAD, [_row_cells(x) for x in r.table])
    lines += ["", f"Compiled figures by: {r.compiler}.", ""]
    return "\n".join(lines)


def best_per_policy(result: ThroughputResult) -> dict[str, ThroughputRow]:
    """Each policy's fastest fitting row (predicted tokens/s)."""
    out = {}
    for x in result.table:
        if (
            x.fits
            and x.tokens_per_s
            and (x.policy not in out or x.tokens_per_s > out[x.policy].tokens_per_s)
        ):
            out[x.policy] = x
    return out
