"""MaxText's own train step, planned: from a MaxText config to ``remat_policy: custom``.

    mt = planner.plan_maxtext("my.yml", ["per_device_batch_size=4"], hbm_gb=80, hardware="h200")
    print(mt.report())          # the planner's report, then MaxText's own verify compile
    mt.override_args()          # ["remat_policy=custom", "mlpwi_0=device", ...]
    mt.yaml()                   # the same as a YAML block

What it does, in order:

1. **Build** MaxText's train step from its config the way MaxText's AOT compile does
   (``maxtext/trainers/pre_train/train_compile.py``: ``get_shaped_inputs`` and
   ``jit_and_compile``): ``pyconfig.initialize`` on the config and the overrides, the mesh from
   ``maxtext_utils.get_mesh_from_config`` (MaxText's own sharding from its ``ici_*`` /
   ``dcn_*`` settings: every figure is per device), the abstract ``TrainStateNNX`` and its
   shardings from ``maxtext_utils.get_abstract_state``, the batch from ``get_shaped_batch``,
   and ``jax.jit(train_step, in_shardings, out_shardings, donate_argnums=0)`` from
   ``get_functional_train_with_signature``, traced inside the mesh and MaxText's logical-axis
   rules. No array is allocated. The step is built with ``remat_policy=full``, so every
   decoder layer (scanned or not, dense and MoE scans of DeepSeek alike) is one MaxText
   ``jax.checkpoint`` call site, whose policy the planner controls while it traces.
2. **Plan** it with ``PlanOptions(decide_names=<MaxText's custom keys>, layer_groups=False)``:
   the planner decides only the tensors MaxText's ``remat_policy: custom`` can name; every
   other tensor (unnamed, or named with a name MaxText's custom list does not carry) is
   forced to be recomputed, because MaxText's custom policy is
   ``save_and_offload_only_these_names(tensors_on_device, tensors_to_offload)`` and saves
   nothing else (``layers/nnx_decoders.py``, ``get_remat_policy``). The keys are read from
   the installed MaxText, not copied: the names its config validator turns into
   ``tensors_on_device`` when set to ``device`` (``configs/types.py``). MaxText applies one
   policy to every decoder layer, hence one decision for all layers.
3. **Write** the overrides: ``remat_policy=custom`` and every key as ``remat`` / ``device`` /
   ``offload`` (``decoder_layer_input`` never ``remat``: base.yml says it "cannot be
   rematerialized"; the layer input is kept by the checkpoint anyway, so ``device`` costs
   nothing more).
4. **Verify** them through MaxText: the step is built again from the config with those
   overrides applied by ``pyconfig`` (MaxText's own ``get_remat_policy`` builds the policy;
   the planner's policy object plays no part) and compiled on the planner's verifying
   compiler with ``compile_xla_flags`` as compiler options, as ``train_compile`` does. The
   verified figure is ``argument + output - alias + temp`` of ``memory_analysis()``; it must
   be within the budget the plan was held to.

MaxText's GPU settings are inputs: ``XLA_PYTHON_CLIENT_MEM_FRACTION`` (JAX's allocator takes
that fraction of HBM, 0.75 where unset) caps the budget at fraction x the profile's HBM, and
``XLA_FLAGS`` (MaxText's GPU scripts set ``--xla_disable_hlo_passes=rematerialization``) is
read by every compile of this process, the planner's anchors, its verify compiles and the
MaxText compile alike, so the plan is budgeted and verified under the same flags; both are
listed in the report. Start the process with the environment MaxText's training runs in.

Needs ``pip install "jax-offload-planner[maxtext]"`` (MaxText 0.2.5 and its dependencies,
Python >= 3.12).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import cost_models as cm
from planner._src.emit import _MAXTEXT_VALUE, yaml_key
from planner._src.errors import InvalidArgumentError, UnsupportedError
from planner._src.options import PlanOptions, check_fits_device
from planner._src.session import Planner
from planner._src.units import GB
from planner._src.xla import compile as xla_compile
from planner._src.xla import deviceless, targets

MAXTEXT_VERSION = "0.2.5"
_INSTALL = (
    'pip install "jax-offload-planner[maxtext]" (maxtext==0.2.5 with its CPU requirements, '
    "Python >= 3.12; tests/zoo/__init__.py lists the exact pins)"
)

# Keys every planning run sets unless the user does: nothing here changes the model, the
# batch or the sharding; they keep MaxText from writing files, starting JAX's distributed
# runtime or its persistent compilation cache while the planner only traces and compiles.
QUIET = {
    "run_name": "planner",
    "base_output_directory": os.path.join(os.sep, "tmp", "maxtext-planner"),
    "enable_checkpointing": "False",
    "enable_tensorboard": "False",
    "enable_goodput_recording": "False",
    "monitor_goodput": "False",
    "skip_jax_distributed_system": "True",
    "dataset_type": "synthetic",
    "jax_cache_dir": "",
}

# JAX's default allocator fraction of device memory (XLA_PYTHON_CLIENT_MEM_FRACTION unset):
# https://docs.jax.dev/en/latest/gpu_memory_allocation.html
DEFAULT_MEM_FRACTION = 0.75


def _import():
    """MaxText's modules, or an UnsupportedError saying how to install them."""
    if sys.version_info < (3, 12):
        raise UnsupportedError(
            f"MaxText {MAXTEXT_VERSION} needs Python >= 3.12; this is "
            f"{sys.version_info.major}.{sys.version_info.minor}.\nFix: make a Python 3.12 venv "
            f"and {_INSTALL}."
        )
    try:
        import maxtext
        from maxtext.configs import pyconfig
        from maxtext.trainers.pre_train import train
    except Exception as e:  # ImportError, or one of its dependencies failing at import
        raise UnsupportedError(
            f"MaxText is not importable here ({type(e).__name__}: {e}).\nWhy: planning "
            "MaxText's own train step needs MaxText itself, which the planner does not "
            f"install by default.\nFix: {_INSTALL}."
        ) from e
    version = getattr(maxtext, "__version__", None)
    if version is None:
        from importlib.metadata import version as _v

        version = _v("maxtext")
    return maxtext, pyconfig, train, version


def base_config_path() -> str:
    """MaxText's ``configs/base.yml`` in the installed package."""
    maxtext, *_ = _import()
    return os.path.join(os.path.dirname(maxtext.__file__), "configs", "base.yml")


def parse_overrides(overrides) -> dict[str, str]:
    """``key=value`` strings (MaxText's command line) or a mapping -> ``{key: value}``."""
    if overrides is None:
        return {}
    if isinstance(overrides, Mapping):
        return {str(k): str(v) for k, v in overrides.items()}
    if isinstance(overrides, str):
        overrides = overrides.split()
    out = {}
    for item in overrides:
        k, sep, v = str(item).partition("=")
        if not sep or not k:
            raise InvalidArgumentError(
                f"MaxText override {item!r} is not key=value.\nFix: write each override as "
                "MaxText's command line takes it, e.g. per_device_batch_size=4."
            )
        out[k.strip()] = v.strip()
    return out


def _config(config_path: str | None, overrides: Mapping[str, str]):
    _, pyconfig, _, _ = _import()
    path = config_path or base_config_path()
    if not os.path.exists(path):
        raise InvalidArgumentError(
            f"MaxText config {path!r} does not exist.\nFix: pass a MaxText YAML config (its "
            f"configs/base.yml: {base_config_path()}), or none for base.yml."
        )
    argv = ["", path] + [f"{k}={v}" for k, v in {**QUIET, **overrides}.items()]
    # MaxText's validator sets XLA_FLAGS where it is unset (its HLO dump flags,
    # configs/types.py); the planner changes no environment variable: put it back.
    had = os.environ.get("XLA_FLAGS")
    try:
        return pyconfig.initialize(argv)
    except Exception as e:  # noqa: BLE001  (MaxText's validators raise many kinds)
        raise InvalidArgumentError(
            f"MaxText refused the config ({type(e).__name__}: {e}).\nWhy: the planner builds "
            "the step with MaxText's own pyconfig.initialize, which validates every key.\n"
            f"Fix: check the overrides; `python -m maxtext.trainers.pre_train.train {path} "
            "...` would refuse them the same way."
        ) from e
    finally:
        if had is None:
            os.environ.pop("XLA_FLAGS", None)
        else:
            os.environ["XLA_FLAGS"] = had


def custom_keys(config_path: str | None = None, overrides=None) -> tuple[str, ...]:
    """The tensor names MaxText's ``remat_policy: custom`` honours for this config, in
    MaxText's order: the keys its config turns into ``tensors_on_device`` when set to
    ``device``. A key MaxText's validator refuses to set for this config (``indexer_cutoff_
    threshold`` without ``use_indexer``) is left out: the config cannot carry it."""
    _import()
    from maxtext.configs import types

    fields = getattr(types.MaxTextConfig, "model_fields", {})
    remat_location = getattr(types, "RematLocation", None)
    cands = [
        n
        for n, f in fields.items()
        if remat_location is not None and f.annotation is remat_location
    ]
    if not cands:
        raise UnsupportedError(
            "Cannot find MaxText's remat_policy: custom keys (fields typed RematLocation in "
            "maxtext.configs.types.MaxTextConfig).\nWhy: this MaxText is not the one the "
            f"planner reads ({MAXTEXT_VERSION}).\nFix: {_INSTALL}."
        )
    base = {k: v for k, v in parse_overrides(overrides).items() if k not in cands}
    for _ in range(len(cands)):
        try:
            with _absl_quiet():  # MaxText logs each refusal before raising it
                cfg = _config(
                    config_path,
                    {**base, "remat_policy": "custom", **dict.fromkeys(cands, "device")},
                )
        except InvalidArgumentError as e:
            refused = [k for k in cands if f"`{k}=" in str(e) or f"'{k}'" in str(e)]
            if not refused:
                raise
            cands = [k for k in cands if k not in refused]
            continue
        return tuple(cfg.tensors_on_device)
    return ()


@contextlib.contextmanager
def _absl_quiet():
    import logging

    log = logging.getLogger("absl")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


# ------------------------------------------------------------------------------ the step


@dataclasses.dataclass(frozen=True)
class Built:
    """MaxText's train step as ``train_compile`` builds it (abstract arguments)."""

    step: Callable  # jax.jit(train_step, in/out shardings, donate_argnums=0)
    args: tuple  # (abstract state, shaped batch), ShapeDtypeStructs with shardings
    config: Any
    mesh: Any
    # () -> the concrete train state, initialised as MaxText's setup_initial_state does it
    # (jit of the model and optimizer factory), placed with the step's input shardings: for
    # running the step (benchmarks/maxtext_step.py), not needed to plan it
    init: Callable | None = None


def _devices_needed(config) -> int:
    n = 1
    for prefix in ("ici", "dcn"):
        for k in dir(config):
            if k.startswith(prefix + "_") and k.endswith("_parallelism"):
                v = getattr(config, k, 1)
                if isinstance(v, int) and v > 1:
                    n *= v
    return n


def build(config_path: str | None, overrides: Mapping[str, str]) -> Built:
    """MaxText's train step from the config, with abstract state (module docstring, 1)."""
    import jax
    from flax import nnx
    from flax.core.spmd import logical_axis_rules as axis_rules
    from maxtext.common import train_state_nnx
    from maxtext.optimizers import optimizers
    from maxtext.utils import maxtext_utils, model_creation_utils, sharding

    _, _, train, _ = _import()
    config = _config(config_path, overrides)
    try:
        mesh = maxtext_utils.get_mesh_from_config(config, jax.devices())
    except Exception as e:  # noqa: BLE001
        need = _devices_needed(config)
        raise InvalidArgumentError(
            f"MaxText could not build its mesh here ({type(e).__name__}: {e}).\nWhy: the "
            f"config's ici_* / dcn_* parallelism asks for {need} devices and this process has "
            f"{jax.device_count()} ({jax.default_backend()}); the planner builds MaxText's own "
            "sharding, so the per-device figures need the mesh.\nFix: on a CPU, start Python "
            f"with XLA_FLAGS=--xla_force_host_platform_device_count={need} (the command "
            "`python -m planner maxtext ... --host-devices N` does it), or lower the "
            "parallelism."
        ) from e
    create_model, model = model_creation_utils.create_nnx_abstract_model(config, mesh)
    schedule = maxtext_utils.create_learning_rate_schedule(config)
    tx = optimizers.get_optimizer(config, schedule, model, mesh=mesh)

    def create_train_state_fn():
        nnx_model = create_model()
        return train_state_nnx.TrainStateNNX(nnx_model, nnx.Optimizer(nnx_model, tx, wrt=nnx.Param))

    abstract_state, _, state_mesh_shardings = maxtext_utils.get_abstract_state(
        config, mesh, create_train_state_fn, True
    )
    with axis_rules(config.logical_axis_rules):
        graphdef, _ = nnx.split(nnx.eval_shape(create_train_state_fn))
    data_sharding = sharding.get_input_data_sharding(config, mesh)
    shaped_batch = maxtext_utils.get_shaped_batch(config, batch_sharding=data_sharding)
    params_shardings, state_mesh_shardings = sharding.maybe_update_params_sharding_with_opt(
        config, state_mesh_shardings
    )
    input_shardings = sharding.build_zero1_input_state_mesh_shardings(
        config, state_mesh_shardings, params_shardings
    )
    functional, in_sh, out_sh, _, donate = maxtext_utils.get_functional_train_with_signature(
        train.train_step, data_sharding, input_shardings, graphdef, config, params_shardings
    )

    def train_step(state, batch):
        # train_compile.jit_and_compile traces inside the mesh and the logical-axis rules.
        with (
            jax.sharding.use_abstract_mesh(mesh.abstract_mesh),
            axis_rules(config.logical_axis_rules),
        ):
            return functional(state, batch)

    train_step.__name__ = "train_step"
    step = jax.jit(train_step, in_shardings=in_sh, out_shardings=out_sh, donate_argnums=donate)

    def init():
        with axis_rules(config.logical_axis_rules):
            return jax.jit(lambda: nnx.state(create_train_state_fn()), out_shardings=in_sh[0])()

    return Built(
        step=step, args=(abstract_state, shaped_batch), config=config, mesh=mesh, init=init
    )


def synthetic_batch(shaped, vocab: int, seed: int = 0) -> dict:
    """A concrete batch of the shapes and shardings ``shaped`` (``Built.args[1]``): random
    tokens in [1, vocab), positions 0..L-1, one segment per row."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {}
    for k, s in shaped.items():
        if k in ("inputs", "targets"):
            a = rng.integers(1, vocab, size=s.shape, dtype=np.int32)
        elif k.endswith("_position"):
            a = np.broadcast_to(np.arange(s.shape[-1], dtype=np.int32), s.shape).copy()
        else:  # segmentation: one segment per row
            a = np.ones(s.shape, dtype=np.int32)
        out[k] = jax.device_put(jnp.asarray(a, dtype=s.dtype), s.sharding)
    return out


# ------------------------------------------------------------------------------ settings


@dataclasses.dataclass(frozen=True)
class GpuSettings:
    """MaxText's GPU settings read from the environment and the config (module docstring)."""

    mem_fraction: float | None  # XLA_PYTHON_CLIENT_MEM_FRACTION, None where unset
    xla_flags: str  # XLA_FLAGS of this process
    compile_xla_flags: str  # the config's compile_xla_flags (compiler options)

    @property
    def remat_pass_disabled(self) -> bool:
        flags = f"{self.xla_flags} {self.compile_xla_flags}"
        for tok in flags.split():
            name, _, value = tok.partition("=")
            if name == "--xla_disable_hlo_passes" and "rematerialization" in value.split(","):
                return True
        return False

    def lines(self) -> list[str]:
        frac = (
            f"XLA_PYTHON_CLIENT_MEM_FRACTION={self.mem_fraction:g}"
            if self.mem_fraction is not None
            else f"XLA_PYTHON_CLIENT_MEM_FRACTION unset (JAX's default {DEFAULT_MEM_FRACTION:g})"
        )
        out = [frac]
        out.append(f"XLA_FLAGS={self.xla_flags!r}" if self.xla_flags else "XLA_FLAGS unset")
        if self.compile_xla_flags:
            out.append(
                f"compile_xla_flags={self.compile_xla_flags!r}: compiler options of MaxText's "
                "compile of the overrides (as train_compile passes them), not of the planner's "
                "own compiles; put them in XLA_FLAGS to have every compile see them"
            )
        if self.remat_pass_disabled:
            out.append(
                "XLA's rematerialization pass is disabled (--xla_disable_hlo_passes="
                "rematerialization): XLA will not shrink an over-budget program on its own, so "
                "the verified figure is the program MaxText runs"
            )
        return out


def read_settings_env() -> GpuSettings:
    """The settings of this process's environment (``compile_xla_flags`` comes later, from
    the config)."""
    raw = os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")
    frac = None
    if raw:
        try:
            frac = float(raw)
        except ValueError:
            raise InvalidArgumentError(
                f"XLA_PYTHON_CLIENT_MEM_FRACTION={raw!r} is not a number.\nFix: set it as "
                "JAX reads it, a fraction such as 0.9."
            ) from None
        if not 0 < frac <= 1:
            raise InvalidArgumentError(
                f"XLA_PYTHON_CLIENT_MEM_FRACTION={raw} is outside (0, 1].\nFix: a fraction of "
                "device memory such as 0.9."
            )
    return GpuSettings(
        mem_fraction=frac,
        xla_flags=os.environ.get("XLA_FLAGS", "").strip(),
        compile_xla_flags="",
    )


def budget_gb(hbm_gb: float | None, hw, settings: GpuSettings) -> tuple[float, str]:
    """The budget to plan for, and why: ``hbm_gb`` capped at what JAX's allocator may take
    on a GPU (the memory fraction x the profile's HBM); the allocator's share where
    ``hbm_gb`` is None."""
    if hw.platform != "gpu":
        if hbm_gb is None:
            raise InvalidArgumentError(
                f"hbm_gb is needed for the {hw.name} profile (a {hw.platform} target has no "
                "allocator fraction to default to).\nFix: pass hbm_gb=..."
            )
        return float(hbm_gb), f"hbm_gb={hbm_gb:g}"
    frac = DEFAULT_MEM_FRACTION if settings.mem_fraction is None else settings.mem_fraction
    cap = frac * hw.hbm_bytes / GB
    src = (
        "XLA_PYTHON_CLIENT_MEM_FRACTION"
        if settings.mem_fraction is not None
        else "JAX's default memory fraction"
    )
    if hbm_gb is None:
        return cap, f"{src} {frac:g} x {hw.hbm_bytes / GB:.4g} GB ({hw.name}) = {cap:.4g} GB"
    if hbm_gb > cap:
        return cap, (
            f"hbm_gb={hbm_gb:g} capped at {src} {frac:g} x {hw.hbm_bytes / GB:.4g} GB = "
            f"{cap:.4g} GB: JAX's allocator gives the training process no more"
        )
    return float(hbm_gb), f"hbm_gb={hbm_gb:g} (within {src} {frac:g} x HBM = {cap:.4g} GB)"


# ------------------------------------------------------------------------------ the result


@dataclasses.dataclass(frozen=True)
class MaxTextVerification:
    """MaxText's train step compiled with the overrides applied through its own config."""

    compiler: str
    exact: bool
    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int
    host_temp_bytes: int
    usable_bytes: int  # what the plan was held to (the usable budget)
    plan_device_bytes: int | None  # the planner's own verify compile of its policy
    compiler_options: tuple[tuple[str, Any], ...]
    wall_s: float

    @property
    def device_bytes(self) -> int:
        """``argument + output - alias + temp`` (per device)."""
        return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes

    @property
    def within_budget(self) -> bool:
        return 0 <= self.device_bytes <= self.usable_bytes


@dataclasses.dataclass(frozen=True)
class MaxTextPlan:
    """A plan of MaxText's train step and its verification through MaxText's config."""

    plan: Any  # planner.Plan
    config_path: str
    overrides: tuple[tuple[str, str], ...]  # the user's overrides, as given
    custom: tuple[tuple[str, str], ...]  # every custom key -> remat | device | offload
    settings: GpuSettings
    budget_why: str
    mesh: tuple[tuple[str, int], ...]  # MaxText's mesh axes (name, size)
    verification: MaxTextVerification | None
    timings: tuple[tuple[str, float], ...]

    @property
    def ok(self) -> bool:
        """The overrides compiled through MaxText's config within the planned-to budget."""
        return self.verification is not None and self.verification.within_budget

    def override_args(self) -> list[str]:
        """MaxText command-line ``key=value`` pairs: ``remat_policy=custom`` and every key."""
        return ["remat_policy=custom"] + [f"{k}={v}" for k, v in self.custom]

    def command_line(self) -> str:
        return " ".join(self.override_args())

    def yaml(self) -> str:
        """The same overrides as a YAML block for the config file."""
        lines = ["remat_policy: custom"] + [f"{yaml_key(k)}: '{v}'" for k, v in self.custom]
        return "\n".join(lines) + "\n"

    def report(self, fmt: str = "text") -> str:
        """The planner's report, then the MaxText section (settings, overrides, verify);
        ``json``: one document, ``{"plan": <the plan's JSON report>, "maxtext": ...}``."""
        if fmt == "json":
            import json

            doc = {"plan": json.loads(self.plan.report("json")), "maxtext": self.to_json()}
            return json.dumps(doc, indent=1)
        section = self.maxtext_section()
        if fmt == "markdown":
            section = "## MaxText\n\n```\n" + section + "```\n"
        return self.plan.report(fmt) + "\n" + section

    def maxtext_section(self) -> str:
        out = ["MaxText", "-------"]
        out.append(f"config: {self.config_path}")
        if self.overrides:
            out.append("overrides: " + " ".join(f"{k}={v}" for k, v in self.overrides))
        axes = " x ".join(f"{n}={s}" for n, s in self.mesh if s > 1) or "one device"
        out.append(f"mesh (MaxText's ici_*/dcn_* sharding; every figure is per device): {axes}")
        out.append(f"budget: {self.budget_why}")
        out.append("settings read (XLA_FLAGS: every compile of this process runs under them):")
        out += [f"  {line}" for line in self.settings.lines()]
        out.append(
            "decided: only MaxText's custom keys; every other tensor is recomputed under "
            "remat_policy=custom (MaxText saves nothing it does not list), and the plan was "
            "solved with them forced to remat, so the overrides below are the plan verified."
        )
        if self.plan.choice != "planner":
            out.append(f"the plan is the stock policy {self.plan.choice}, as custom keys")
        out.append("command line:")
        out.append("  " + self.command_line())
        out.append("YAML:")
        out += ["  " + ln for ln in self.yaml().splitlines()]
        v = self.verification
        if v is None:
            out.append("verified through MaxText's config: not run (verify=False)")
        else:
            status = "within budget" if v.within_budget else "OVER BUDGET"
            out.append(
                f"verified through MaxText's config ({v.compiler}{'' if v.exact else ', an estimate'}):"
                f" {status}: {v.device_bytes / GB:.4f} GB = argument {v.argument_bytes / GB:.4f}"
                f" + output {v.output_bytes / GB:.4f} - alias {v.alias_bytes / GB:.4f} + temp "
                f"{v.temp_bytes / GB:.4f}, budget {v.usable_bytes / GB:.4f} GB"
                f" (compile {v.wall_s:.1f} s)"
            )
            if v.plan_device_bytes is not None:
                same = "the same" if v.plan_device_bytes == v.device_bytes else "differs from"
                out.append(
                    f"  {same} as the planner's own verify compile of its policy: "
                    f"{v.plan_device_bytes / GB:.4f} GB"
                )
            if v.host_temp_bytes:
                out.append(f"  host temp (offloaded): {v.host_temp_bytes / GB:.4f} GB")
        return "\n".join(out) + "\n"

    def to_json(self) -> dict:
        v = self.verification
        return {
            "config": self.config_path,
            "overrides": dict(self.overrides),
            "override_args": self.override_args(),
            "yaml": self.yaml(),
            "budget_why": self.budget_why,
            "mesh": dict(self.mesh),
            "settings": dataclasses.asdict(self.settings),
            "choice": self.plan.choice,
            "verification": None
            if v is None
            else {
                "compiler": v.compiler,
                "exact": v.exact,
                "device_bytes": v.device_bytes,
                "argument_bytes": v.argument_bytes,
                "output_bytes": v.output_bytes,
                "alias_bytes": v.alias_bytes,
                "temp_bytes": v.temp_bytes,
                "host_temp_bytes": v.host_temp_bytes,
                "usable_bytes": v.usable_bytes,
                "plan_device_bytes": v.plan_device_bytes,
                "within_budget": v.within_budget,
                "wall_s": v.wall_s,
            },
            "timings": dict(self.timings),
        }


def custom_values(plan, keys: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """Every custom key's value from the plan's decisions (MaxText's words)."""
    decided: dict[str, str] = {}
    for c in plan.graph.classes:
        if c.name in keys:
            d = plan.assignment.get(c.key)
            # several classes may carry one name (shapes differ per layer kind): keep the most
            if _RANK[d] > _RANK[decided.get(c.name, "remat")]:
                decided[c.name] = d
    out = []
    for k in keys:
        v = _MAXTEXT_VALUE[decided.get(k, "remat")]
        if k == "decoder_layer_input" and v == "remat":
            v = "device"  # base.yml: it cannot be rematerialized; the layer input is kept anyway
        out.append((k, v))
    return tuple(out)


_RANK = {"remat": 0, "offload": 1, "save": 2}


# ------------------------------------------------------------------------------ the verb


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
        """MaxText's step built from the config with the overrides, compiled (docstring, 4).
        The same overrides and flags compile to the same program: compiled once."""
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
        the allocator's share; module docstring).
      hardware: a profile name (``planner.list_profiles()``), a JSON file, or a profile.
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
