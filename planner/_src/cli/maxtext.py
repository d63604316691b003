"""The maxtext command: plan MaxText's own train step from its config."""

from __future__ import annotations

import sys

from planner._src.cli.common import Progress, emit_text


def cmd_maxtext(a) -> int:
    import os

    from planner._src.errors import (
        InvalidArgumentError,
    )  # deferred: --help answers without importing JAX

    config, overrides = None, []
    for i, item in enumerate(a.args):
        if i == 0 and "=" not in item:
            config = item
        elif "=" in item:
            overrides.append(item)
        else:
            raise InvalidArgumentError(
                f"{item!r} is neither the config file (first, without '=') nor key=value.\n"
                "Fix: python -m planner maxtext [CONFIG.yml] key=value ... --hbm-gb N"
            )
    if a.host_devices:
        # XLA reads it when the CPU backend starts, which has not happened yet in this process.
        flag = f"--xla_force_host_platform_device_count={a.host_devices}"
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
    import contextlib

    from planner._src.planning.maxtext import (
        plan_maxtext,  # deferred: --help answers without importing JAX
    )

    # MaxText prints to stdout as it imports and configures; stdout is the report's.
    with Progress(a.quiet) as progress, contextlib.redirect_stdout(sys.stderr):
        progress(f"planning MaxText {config or 'base.yml'} for {a.hardware}")
        mt = plan_maxtext(
            config,
            overrides,
            hbm_gb=a.hbm_gb,
            hardware=a.hardware,
            verify=not a.no_verify,
            progress=progress,
            allow_offload=False if a.no_offload else None,
            solver_time_limit_s=a.time_limit,
        )
    emit_text(mt.report("json" if a.json else a.format), a.out)
    return 0 if (mt.ok or a.no_verify) and mt.plan.verification.ok else 1
