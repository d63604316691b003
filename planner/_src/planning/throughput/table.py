"""The search's table: a row per probed batch size and policy (the planner's plan, the stock
policies' compiles), and where each policy stops fitting and does best."""

from __future__ import annotations

from planner._src.planning.throughput.probe import plan_fits
from planner._src.planning.throughput.result import PLANNER, PolicyLimit, ThroughputRow
from planner._src.planning.throughput.tokens import derive_tokens_per_example
from planner._src.policies import STOCK


def planner_rows(probes, n_of, count, rule) -> list[ThroughputRow]:
    return [r for r in table_of(probes, n_of, count, rule, ()) if r.policy == PLANNER]


def best_row(rows) -> ThroughputRow | None:
    ok = [r for r in rows if r.fits and r.tokens_per_s]
    if not ok:
        return None
    return max(ok, key=lambda r: (r.tokens_per_s, -r.batch_size))


def table_of(probes, n_of, count, rule, stock_names) -> tuple[ThroughputRow, ...]:
    rows = []
    ref = max(probes, key=lambda k: (k > 1, k))  # where a derived sequence length is read
    for batch in sorted(probes):
        p = probes[batch]
        n = n_of.get(batch, 1)
        if count is None:  # read at the largest probed batch > 1 (a leading 1 is ambiguous)
            seq = derive_tokens_per_example(probes[ref].session.example_args, probes[ref].batch)
            tok = batch * n * seq
        else:
            tok = count(batch * n, p.session.example_args)
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
                        fits=plan_fits(plan, p.usable),
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
            if not bl.applicable or name not in p.session.stock.figures:
                continue
            got = p.session.stock.figures[name]
            ver = p.session.stock.verification(name)
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


def limits_of(table, boundaries, probes) -> tuple[PolicyLimit, ...]:
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
        best = best_row(rows)
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
