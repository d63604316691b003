"""The throughput command: the batch size (or micro-batch count) and plan for the most
tokens/s."""

from __future__ import annotations

from planner._src.cli.common import (
    LAYER_GROUPS,
    FactoryError,
    Progress,
    call_factory,
    emit_text,
    image_path,
    import_factory,
)


def _ints(text: str, flag: str) -> tuple[int, ...] | None:
    from planner._src.errors import (
        InvalidArgumentError,
    )  # deferred: --help answers without importing JAX

    if text is None:
        return None
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        out = ()
    if not out or min(out) < 1:
        raise InvalidArgumentError(
            f"{flag} {text!r} is not a comma-separated list of positive ints.\nFix: e.g. "
            f"{flag} 1,2,4,8."
        )
    return out


def cmd_throughput(a) -> int:
    from planner._src.planning.throughput import (
        maximize_throughput,
    )  # deferred: --help answers without importing JAX
    from planner._src.results.planfile import (
        check_writable,
    )  # deferred: --help answers without importing JAX

    for path, suffixes, flag in ((a.png, (".png",), "--png"), (a.svg, (".svg",), "--svg")):
        image_path(path, suffixes, flag)
    for path, what in ((a.png, "the plot"), (a.svg, "the plot"), (a.out, "the report file")):
        if path:
            check_writable(path, what)  # before the compiles
    if a.save:
        check_writable(a.save, "the plan file")
    factory = import_factory(a.factory, "(step_fn, example_args) for a batch size")

    def make_step(batch_size):
        try:
            return call_factory(a.factory, factory, batch_size)
        except FactoryError as e:
            if isinstance(e.error, MemoryError):
                raise e.error from None  # one batch size too large: the search goes on
            raise

    fmt = "json" if a.json else a.format
    with Progress(a.quiet) as progress:
        progress(
            f"planning {a.factory} for throughput on {a.hardware} under {a.hbm_gb:g} GB "
            "(one trace per batch size)"
        )
        result = maximize_throughput(
            make_step,
            hbm_gb=a.hbm_gb,
            hardware=a.hardware,
            batch_sizes=_ints(a.batch_sizes, "--batch-sizes"),
            global_batch=a.global_batch,
            microbatches=_ints(a.microbatches, "--microbatches"),
            tokens_per_example=a.tokens_per_example,
            stock=tuple(x for x in a.stock.split(",") if x) if a.stock else None,
            max_batch_size=a.max_batch_size,
            allow_offload=False if a.no_offload else None,
            solver_time_limit_s=a.time_limit,
            layer_groups=LAYER_GROUPS[a.layer_groups],
            progress=progress,
        )
        for path in (a.png, a.svg):
            if path:
                progress(f"drawing tokens/s against batch size to {path}")
                result.plot(path)
        if a.save:
            progress(f"writing the chosen plan to {a.save}")
            result.plan.save(a.save)
    emit_text(result.report(fmt), a.out)
    return 0 if result.plan.verification.ok else 1
