"""MaxTextPlanner: MaxText's train step built from its config and traced once, then planned
per budget and the plan's custom block verified through MaxText's config; plan_maxtext, the
one-budget verb."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import cost_models as cm
from planner._src.errors import InvalidArgumentError
from planner._src.options import PlanOptions, check_fits_device
from planner._src.planning.maxtext.config import base_config_path, custom_keys, parse_overrides
from planner._src.planning.maxtext.result import MaxTextPlan, MaxTextVerification, custom_values
from planner._src.planning.maxtext.settings import budget_gb, read_settings_env
from planner._src.planning.maxtext.step import build
from planner._src.planning.planner import Planner
from planner._src.xla import compile as xla_compile
from planner._src.xla import deviceless, targets


class MaxTextPlanner:
    """MaxText's train step built from its config and traced once; plan any number of
    budgets (``plan``), each verified through MaxText's config. Arguments as
    :func:`plan_maxtext`."""

    def __init__(
        self,
        config_path: str | None = None,
        overrides=None,
        *,
        hardware="h200",
        options=None,
        progress: Callable[[str], None] | None = None,
        **option_fields,
    ):
        import time

        self.timings: list[tuple[str, float]] = []
        self._say = progress or (lambda m: None)
        self.settings = read_settings_env()  # before MaxText's config sees the environment
        self.config_path = config_path
        self.user = parse_overrides(overrides)
        t0 = time.perf_counter()
        self.keys = custom_keys(config_path, self.user)
        taken = sorted(k for k in self.user if k in self.keys or k == "remat_policy")
        if taken:
            raise InvalidArgumentError(
                f"The overrides set {', '.join(taken)}, which the plan decides.\nWhy: the "
                "planner writes remat_policy=custom and every custom key, and verifies exactly "
                "those.\nFix: leave them out."
            )
        built = build(config_path, {**self.user, "remat_policy": "full"})
        self.settings = dataclasses.replace(
            self.settings,
            compile_xla_flags=str(getattr(built.config, "compile_xla_flags", "") or "").strip(),
        )
        self.mesh = tuple((str(n), int(s)) for n, s in built.mesh.shape.items())
        self.timings.append(("MaxText config + abstract state", time.perf_counter() - t0))
        self.hardware = cm.load_profile(hardware)
        opts = options or PlanOptions()
        opts = dataclasses.replace(
            opts, **{**option_fields, "decide_names": self.keys, "layer_groups": False}
        )
        self._say("tracing MaxText's train step and compiling its anchors")
        t0 = time.perf_counter()
        self.session = Planner(
            built.step, *built.args, hardware=self.hardware, options=opts, progress=progress
        )
        self.timings.append(("planner: trace + anchors", time.perf_counter() - t0))
        self._verified: dict[tuple, MaxTextVerification] = {}

    def plan(self, hbm_gb: float | None = None, *, verify: bool = True) -> MaxTextPlan:
        import time

        timings = list(self.timings)
        planned_gb, why = budget_gb(hbm_gb, self.hardware, self.settings)
        check_fits_device(planned_gb, self.hardware)
        t0 = time.perf_counter()
        plan = self.session.plan(hbm_gb=planned_gb)
        timings.append(("planner: solve + verify", time.perf_counter() - t0))
        custom = custom_values(plan, self.keys)
        verification = None
        if verify:
            verification = self._verify(plan, custom)
            timings.append(("MaxText verify compile", verification.wall_s))
        return MaxTextPlan(
            plan=plan,
            config_path=self.config_path or base_config_path(),
            overrides=tuple(self.user.items()),
            custom=custom,
            settings=self.settings,
            budget_why=why,
            mesh=self.mesh,
            verification=verification,
            timings=tuple(timings),
        )

    def _verify(self, plan, custom) -> MaxTextVerification:
        """MaxText's step built from the config with the overrides, compiled (the package
        docstring, 4). The same overrides and flags compile to the same program: compiled
        once."""
        import time

        budget = plan.budget.usable
        v = plan.verification
        plan_bytes = v.compiled_device_bytes if v is not None else None
        options: dict[str, Any] = {}
        if self.settings.compile_xla_flags:  # as train_compile.jit_and_compile passes them
            options.update(cm.flags_to_compiler_options(self.settings.compile_xla_flags))
        if plan.xla_flags:  # the flags the report tells the user to export
            options.update(plan.emitted.compiler_options)
        key = (custom, tuple(sorted(options.items())))
        if key in self._verified:
            got = self._verified[key]
            return dataclasses.replace(got, usable_bytes=budget, plan_device_bytes=plan_bytes)
        self._say("compiling MaxText's train step with the overrides applied through its config")
        t0 = time.perf_counter()
        mt = build(self.config_path, {**self.user, "remat_policy": "custom", **dict(custom)})
        compiler = self.session.compiler
        args = deviceless.args_for(compiler, mt.args) if compiler.kind == "deviceless" else mt.args
        program = xla_compile.compile_traced(compiler, mt.step, args, options or None)
        fig = targets.read_figures(compiler, program.compiled)
        got = MaxTextVerification(
            compiler=fig.compiler,
            exact=fig.exact,
            argument_bytes=fig.argument_bytes,
            output_bytes=fig.output_bytes,
            alias_bytes=fig.alias_bytes,
            temp_bytes=fig.temp_bytes,
            host_temp_bytes=fig.host_temp_bytes,
            usable_bytes=budget,
            plan_device_bytes=plan_bytes,
            compiler_options=key[1],
            wall_s=time.perf_counter() - t0,
        )
        self._verified[key] = got
        return got


def plan_maxtext(
    config_path: str | None = None,
    overrides=None,
    *,
    hbm_gb: float | None = None,
    hardware="h200",
    verify: bool = True,
    options=None,
    progress: Callable[[str], None] | None = None,
    **option_fields,
) -> MaxTextPlan:
    """Plan MaxText's own train step from its config; verify the overrides through it.

    Args:
      config_path: a MaxText YAML config; None: MaxText's ``configs/base.yml``.
      overrides: MaxText ``key=value`` overrides (a list of strings, one string, or a dict),
        as its command line takes them. ``remat_policy`` and the custom keys are the
        planner's to set and are refused.
      hbm_gb: the budget per device, in GB; on a GPU capped by the memory fraction (None:
        the allocator's share; the package docstring).
      hardware: a profile name (``planner.hardware.list_profiles()``), a JSON file, or a profile.
      verify: compile MaxText's step with the overrides applied through its config.
      options / option_fields: ``planner.PlanOptions``; ``decide_names`` and
        ``layer_groups`` are set here (MaxText's custom keys, one policy for every layer).

    Returns a :class:`MaxTextPlan`: ``report()``, ``override_args()``, ``yaml()``, ``ok``.
    Several budgets of one config: ``planner.MaxTextPlanner(...).plan(hbm_gb)`` traces once.
    """
    session = MaxTextPlanner(
        config_path,
        overrides,
        hardware=hardware,
        options=options,
        progress=progress,
        **option_fields,
    )
    return session.plan(hbm_gb, verify=verify)
