"""What the user gave, checked and resolved before any work: the step and its arguments,
the budget, the hardware profile, the options, the verifying compiler, and whether plans may
offload. Every check raises a teaching error (what, why, how to fix)."""

from __future__ import annotations

import dataclasses
import math
import warnings

import jax

import cost_models as cm
from planner._src.errors import InvalidArgumentError, PlanWarning, UnsupportedError
from planner._src.options import PlanOptions, check_fits_device, real_scalar
from planner._src.units import GB
from planner._src.xla import adapter, gpus, targets


def validate_step(step_fn, example_args) -> None:
    if not callable(step_fn):
        raise InvalidArgumentError(
            f"step_fn must be a callable train step, got {type(step_fn).__name__}.\n"
            "Fix: pass the function itself, e.g. planner.solve(train_step, state, batch, hbm_gb=80)."
        )
    if not example_args:
        raise InvalidArgumentError(
            "No example arguments were given.\nWhy: the planner traces step_fn(*example_args) "
            "to see the shapes of every activation.\nFix: pass the arguments the step takes, "
            "as arrays or jax.ShapeDtypeStruct: planner.solve(step, state, batch, hbm_gb=...)."
        )


def validate_budget(hbm_gb) -> float:
    hbm_gb = real_scalar(hbm_gb)  # np.float32(40), jnp.array(40.) are numbers too (options.py)
    if isinstance(hbm_gb, bool) or not isinstance(hbm_gb, (int, float)):
        raise InvalidArgumentError(
            f"hbm_gb must be a number of gigabytes (10^9 bytes), got {hbm_gb!r}.\n"
            "Fix: e.g. hbm_gb=141 for a whole H200, or less to leave room for other buffers."
        )
    if not math.isfinite(hbm_gb) or hbm_gb <= 0:
        raise InvalidArgumentError(
            f"hbm_gb must be a positive, finite number of gigabytes, got {hbm_gb!r}.\n"
            "Fix: pass the device memory the step may use, e.g. hbm_gb=80."
        )
    if hbm_gb > 100_000:
        raise InvalidArgumentError(
            f"hbm_gb={hbm_gb!r} is over 100 TB for one device: the budget is per device, in GB "
            "(10^9 bytes), not in bytes or MB.\nFix: e.g. hbm_gb=141 for an H200."
        )
    return float(hbm_gb)


def budget_list(hbm_gb) -> list[float]:
    """Several budgets (GB): a number, or any iterable of numbers (a list, a tuple, a range,
    a generator, a 1-d NumPy or JAX array), each checked by :func:`validate_budget`."""
    if isinstance(hbm_gb, (str, bytes, dict)) or (
        getattr(hbm_gb, "shape", None) is not None and len(hbm_gb.shape) > 1
    ):
        raise InvalidArgumentError(
            f"hbm_gb must be a number of GB or a sequence of them, got {type(hbm_gb).__name__}."
            "\nFix: e.g. hbm_gb=[60, 80, 100]."
        )
    if getattr(hbm_gb, "shape", None) == () or not hasattr(hbm_gb, "__iter__"):
        budgets = [hbm_gb]
    else:
        budgets = list(hbm_gb)
    if not budgets:
        raise InvalidArgumentError("hbm_gb is an empty list; give at least one budget in GB.")
    return [validate_budget(b) for b in budgets]


def load_hardware(hardware):
    try:
        return cm.load_profile(hardware)
    except cm.ProfileError as e:
        raise InvalidArgumentError(str(e)) from e


def host_memory_available() -> bool:
    try:
        kinds = {m.kind for m in jax.devices()[0].addressable_memories()}
    except Exception:  # noqa: BLE001  (backends without the memories API)
        return False
    return adapter.HOST_KIND in kinds


def step_devices(example_args) -> int:
    """How many devices the step is partitioned over: the largest mesh among the example
    arguments' NamedShardings (1 when none is sharded)."""
    n = 1
    for x in jax.tree.leaves(example_args):
        mesh = getattr(getattr(x, "sharding", None), "mesh", None)
        size = getattr(mesh, "size", None)
        if isinstance(size, int) and not getattr(mesh, "empty", False):
            n = max(n, size)
    return n


def resolve_compiler(hw, example_args, choice: str) -> targets.CompilerTarget:
    """The verifying compiler for ``hw`` (PlanOptions.compiler): the target GPU's XLA, on this
    device or deviceless, where it can be had ("auto", "target"), else this machine's
    backend, labelled an estimate where it is not the target's ("local")."""
    gpu = None
    if hw.platform == "gpu":
        try:
            gpu = gpus.gpu(hw.name).name
        except gpus.TargetError:
            gpu = None  # a GPU profile without a target config (a calibrated one, say)
    n = step_devices(example_args)
    if choice == "local" or gpu is None:
        local = targets.resolve(None, num_devices=n)
        if gpu is None and hw.platform == "gpu" and jax.default_backend() == "cpu":
            return dataclasses.replace(
                local,
                description="XLA:CPU (another backend: an estimate)",
                exact=False,
                how_to_get_exact=f"the {hw.name} profile names no GPU the planner has a "
                f"target config for; plan with one of {', '.join(gpus.names())}, or on that GPU",
            )
        if choice == "local" and hw.platform == "gpu" and jax.default_backend() == "cpu":
            return dataclasses.replace(
                local,
                description="XLA:CPU (another backend: an estimate)",
                exact=False,
                how_to_get_exact="compiler='auto'",
            )
        return local
    got = targets.resolve(gpu, num_devices=n)
    if choice == "target" and not got.exact:
        raise UnsupportedError(
            f"compiler='target', but {got.how_to_get_exact or 'the target compiler is not here'}"
        )
    return got


def merge_options(options: PlanOptions | None, overrides: dict) -> PlanOptions:
    options = options or PlanOptions()
    if not overrides:
        return options
    names = {f.name for f in dataclasses.fields(PlanOptions)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise InvalidArgumentError(
            f"Unknown option(s) {', '.join(unknown)}.\nFix: use the fields of "
            f"planner.PlanOptions: {', '.join(sorted(names))}."
        )
    return dataclasses.replace(options, **overrides)


def allocator_limit_bytes() -> int | None:
    """This process's device allocator limit (``memory_stats()["bytes_limit"]``), or None
    where the backend does not say (XLA:CPU)."""
    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:  # noqa: BLE001  (a backend without memory statistics)
        return None
    limit = (stats or {}).get("bytes_limit")
    return int(limit) if limit else None


def warn_above_allocator_limit(budget_gb: float, hw) -> None:
    """A GPU budget above what this process's allocator may use: XLA compiles against the
    allocator's limit, not hbm_gb, so say so before the plan is trusted."""
    check_fits_device(budget_gb, hw)  # above the device's HBM: an error (options.py)
    limit = allocator_limit_bytes() if hw.platform == "gpu" else None
    if limit is None or budget_gb * GB <= limit:
        return
    warnings.warn(
        f"hbm_gb={budget_gb:g} is above this process's device allocator limit of "
        f"{limit / GB:.2f} GB (memory_stats()['bytes_limit'] = XLA_PYTHON_CLIENT_MEM_FRACTION "
        "x HBM; JAX's default fraction is 0.75).\nWhy: XLA compiles the step against the "
        "allocator's limit, not against hbm_gb; a training process with this limit would "
        "rematerialize on its own or run out of memory with a plan for hbm_gb.\nFix: plan for "
        f"hbm_gb <= {limit / GB:.2f}, or start the training (and planning) process with an "
        f"XLA_PYTHON_CLIENT_MEM_FRACTION whose share of HBM is at least {budget_gb:g} GB.",
        PlanWarning,
        stacklevel=4,
    )


CPU_OFFLOAD_WHY = "offload off: the target is a CPU; host memory is the same memory"


def offload_choice(allow_offload, host_ok: bool, platform: str) -> tuple[bool, str]:
    """Whether plans may offload, and the report's line where the session turned it off.

    On a CPU target pinned_host is the same DRAM as the "device": an offloaded tensor still
    occupies the memory the budget is about, so offloading saves nothing there and XLA:CPU
    counts it in temp (the status can only be "unverified"), so an offloading policy can
    compile over a budget full remat meets. Off by default there;
    an explicit allow_offload=True is kept (a CPU profile standing in for a target with host
    memory, as the tests' fake devices do) with a warning."""
    if allow_offload is None:
        if platform == "cpu":
            return False, CPU_OFFLOAD_WHY
        return host_ok, ""
    if allow_offload and platform == "cpu":
        warnings.warn(
            "allow_offload=True for a CPU target: offloaded tensors stay in the same memory.\n"
            "Why: on a CPU, pinned_host and the device are one DRAM, so offloading frees none "
            "of the budget, and XLA:CPU counts the offloaded bytes in temp, so such a plan can "
            "only be 'unverified' (it may compile over the budget).\n"
            "Fix: leave allow_offload unset (None) for a CPU target, or plan for the target "
            "that has host memory (hardware='h200', which compiles deviceless for the GPU).",
            PlanWarning,
            stacklevel=4,
        )
    return bool(allow_offload), ""
