"""maximize_throughput: the batch sizes probed (searched per policy, given, or a global batch
split into micro-batches), then the planner's fastest fitting row chosen (the package
docstring says how)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np

from planner._src.errors import InfeasibleBudgetError, InvalidArgumentError, PlanWarning
from planner._src.fingerprints import argument_signature
from planner._src.options import PlanOptions, check_fits_device
from planner._src.planning.inputs import load_hardware, merge_options, validate_budget
from planner._src.planning.planner import Planner
from planner._src.planning.throughput.probe import Probe, plan_fits
from planner._src.planning.throughput.result import PLANNER, ThroughputResult
from planner._src.planning.throughput.table import best_row, limits_of, planner_rows, table_of
from planner._src.planning.throughput.tokens import (
    derive_tokens_per_example,
    derived_rule,
    tokens_fn,
)
from planner._src.policies import STOCK
from planner._src.units import GB, fmt_bytes

__all__ = ["maximize_throughput"]

MAX_BATCH = 1 << 16  # the search's default ceiling (max_batch_size)


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
      batch_sizes: the batch sizes to plan; None: searched (the package docstring,
        ``planner._src.planning.throughput``).
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
    b = validate_budget(hbm_gb)
    hw = load_hardware(hardware)
    check_fits_device(b, hw)
    opts = merge_options(options, option_fields)
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
    count, rule = tokens_fn(tokens, tokens_per_example)
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

    probes: dict[int, Probe] = {}
    # batch sizes whose make_step raised MemoryError: counted as not fitting, the others kept
    out_of_memory: dict[int, str] = {}

    def made_at(batch: int):
        made = make_step(batch)
        if not (isinstance(made, tuple | list) and len(made) == 2 and callable(made[0])):
            raise InvalidArgumentError(
                f"make_step({batch}) returned {type(made).__name__}; it must return "
                "(step_fn, example_args) with example_args a tuple of the step's arguments."
            )
        return made[0], tuple(made[1])

    def first_checks(batch: int, args: tuple) -> None:
        """Before the first compile: make_step uses its batch size (its arguments at another
        size differ), and the tokens per step can be read off the batch where not given."""
        other = batch * 2
        _, other_args = made_at(other)
        if argument_signature(other_args) == argument_signature(args):
            raise InvalidArgumentError(
                f"make_step ignores its batch size: make_step({batch}) and make_step({other}) "
                f"return arguments of the same shapes ({argument_signature(args)[:2]} ...).\n"
                "Why: the search plans the step at each batch size and counts its tokens per "
                "step from the size; a step that does not change would be counted as more "
                "tokens for the same work.\nFix: build the example batch from the batch size "
                "make_step is given, e.g. jnp.zeros((batch_size, seq), jnp.int32)."
            )
        if count is None:
            derive_tokens_per_example(other_args, other)  # fail before the compiles

    def probe(batch: int) -> Probe:
        if batch not in probes:
            say(f"batch size {batch}: tracing the step (one session per batch size)")
            step, args = made_at(batch)
            if not probes:
                first_checks(batch, args)
            session = Planner(step, *args, hardware=hw, options=opts, progress=progress)
            probes[batch] = Probe(batch, session, requested)
        return probes[batch]

    def probed(batch: int) -> Probe | None:
        """``probe(batch)``, or None where make_step raised MemoryError at that size."""
        if batch in out_of_memory:
            return None
        try:
            return probe(batch)
        except MemoryError as e:
            out_of_memory[batch] = f"{type(e).__name__}: {e}"[:200]
            warnings.warn(
                f"make_step({batch}) raised MemoryError: batch size {batch} is counted as not "
                "fitting, and the search keeps the results of the other sizes.\nWhy: building "
                "the step's example arguments at that size needs more host memory than there "
                "is.\nFix: build them as jax.ShapeDtypeStruct (no memory), or pass "
                "max_batch_size / batch_sizes below it.",
                PlanWarning,
                stacklevel=4,
            )
            return None

    def fits(policy):
        def f(batch):
            p = probed(batch)
            if p is None:
                return False
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
            probed(batch)

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
            if not any(p.plan is not None and plan_fits(p.plan, p.usable) for p in probes.values()):
                break
            rows = planner_rows(probes, n_of, count, rule)
            best = best_row(rows)
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
                probed(x)
            stock_rows_all()
            planner_all()

    if not probes:
        raise InfeasibleBudgetError(
            f"No batch size could be tried: make_step raised MemoryError at every size "
            f"({', '.join(f'{k}: {v}' for k, v in sorted(out_of_memory.items())[:4])}).\n"
            "Fix: build the example arguments as jax.ShapeDtypeStruct, or pass smaller "
            "batch_sizes.",
            budget_bytes=requested,
            min_feasible_bytes=float(requested),
        )
    if not any(p.plan is not None and plan_fits(p.plan, p.usable) for p in probes.values()):
        smallest = min(probes)
        err = probes[smallest].plan_error
        raise InfeasibleBudgetError(
            f"No batch size fits {fmt_bytes(requested)}: at batch size {smallest}, the "
            "smallest tried, neither a plan nor a stock policy compiles within the budget."
            + (f"\n{err}" if err else ""),
            budget_bytes=requested,
            min_feasible_bytes=getattr(err, "min_feasible_bytes", float(requested)),
        )
    table = table_of(probes, n_of, count, rule, stock_names)
    best = best_row([r for r in table if r.policy == PLANNER])
    chosen = probes[best.batch_size].plan
    limits = limits_of(table, boundaries, probes)
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
        tokens_rule=rule if rule != "derived" else derived_rule(probes),
    )


def _positive_int(x, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1:
        raise InvalidArgumentError(f"{what} must be positive ints, got {x!r}.")
    return int(x)
