"""The planner's options, in one frozen record (``planner.PlanOptions``)."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

from planner._src.errors import InvalidArgumentError
from planner._src.types import SolverOptions
from planner._src.units import GB, fmt_bytes


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PlanOptions:
    """How to plan. Every field has a default; ``planner.solve(..., **fields)`` takes them as
    keyword arguments too.

    Attributes:
      allow_offload: None (default) offloads when the local backend has a ``pinned_host``
        memory kind and the hardware has a host link; False never offloads; True insists
        (an error where the backend has no host memory kind).
      verify_compile: compile the step with the emitted policy and hold the plan to the
        compiler's figure (``argument + output - alias + temp`` of ``memory_analysis()``).
        Without it no plan is called "within budget" and the stock policies are compared by
        the model only.
      max_rounds: with ``fill_rounds``, how many distinct plans the frontier walk may compile
        for one budget (planner/_src/planning/walk.py): the walk solves the model at one
        fixed grid of caps (1% apart), from a little over the budget down, and compiles each
        new plan until one compiles within the budget. Default 3.
      fill_rounds: the walk's compiles beyond ``max_rounds``, spent where the budget's reach
        (2% over it: the memory model errs both ways) holds faster plans
        that compile over. 0: the walk starts at the budget itself, never at a plan
        predicted over it. Default 3.
      layer_groups: decide each checkpoint call site separately, with one policy per call
        site (``plan.policies``). True: always, where the step has several call sites. False:
        one decision for all identical regions (``plan.policy``). None (default): per call
        site only where the user's code can give the call sites different policies (they are
        bound from different source lines, or the code already passes them different policy
        objects) and the model predicts a step faster by more than ``group_gain``.
      group_gain: the relative predicted gain per-call-site decisions must bring (0.001).
      compare_stock: compile the stock policies (JAX's and MaxText's) the model predicts
        faster than the plan, on the verifying compiler, and return the fastest that fits
        instead of a slower plan; also before raising InfeasibleBudgetError. True (default).
      solver_time_limit_s: CP-SAT deterministic seconds per solver phase (four phases per
        solve; one is 1-4 wall seconds on one core at linearization level 2).
      linearization_level: CP-SAT's linear relaxation (2: the LP of every constraint, which
        proves the plans of our examples optimal; 1: CP-SAT's default).
      solver_workers: CP-SAT search workers (1: deterministic).
      seed: CP-SAT's random seed.
      compiler: which compiler verifies. "auto" (default): the target GPU's XLA (on that GPU,
        or deviceless where the CUDA plugin is installed: ``pip install -e ".[cuda]"``), else
        this machine's backend, whose figures are then labelled an estimate; "target": the
        target's or an error saying how to get it; "local": this machine's backend.
      check_numerics: run the planned step and the step under your own policies once on the
        example arguments and compare every output leaf (loss, gradients, updated state)
        within a dtype-aware tolerance (planner/_src/verify/numerics/); a mismatch fails the plan.
        None (default): check where the example arguments are concrete arrays and this
        machine can run the step (not on a deviceless target), else the report says the
        numerics were not checked and how to check them (``planner.check_numerics``). True:
        insist (an error where it cannot run). False: never run the step.
      decide_names: None (default): decide every tensor the backward pass can keep. A tuple
        of ``checkpoint_name``s: decide only tensors carrying one of these names and recompute
        every other one (unnamed, or named otherwise), as JAX's ``save_only_these_names`` /
        ``save_and_offload_only_these_names`` and MaxText's ``remat_policy: custom`` do with
        what they do not list; the emitted policy is then JAX's own name policy, and only the
        stock policies that keep nothing outside these names are compared
        (``planner.plan_maxtext`` passes MaxText's custom keys).
      opt_state: where the optimizer state is in the step's arguments, so that the plan also
        decides which of its leaves live in pinned host memory, in the same CP-SAT model as
        the activations (docs/guide/train-state.md). An argument index (``1``), a path
        (``"args[0].opt_state"``, as ``jax.tree_util.keystr`` writes it) or a selector
        (``lambda args: args[0].opt_state``). None (default): found where the step keeps it
        in a common idiom (a Flax ``TrainState``, an ``nnx.Optimizer``'s state, an optax
        state in a tuple or dict) and placed only where the budget is refused with it in
        HBM (the report says so); False: never placed. A selection that cannot be optimizer
        state (the parameters, the batch, no optax state) is refused before the trace.
        ``plan.apply(step)`` applies the placement (shardings with memory kinds, donation,
        the update streamed per layer slice where it can be).
      params: the parameters, named as ``opt_state`` is (found beside a named or found
        optimizer state where they can be: ``TrainState.params``, the tree shaped like
        Adam's moments); for the budget split, and with ``stream_params``.
      opt_state_argnum: ``opt_state`` as an argument index (the older spelling).
      params_argnum: ``params`` as an argument index (the older spelling).
      stream_params: with the parameters named or found, the step streams its stacked layer
        parameters into the checkpointed layers (``plan.state.stream_layer_params``), so the
        plan may put them in pinned host memory too, their gradients with them
        (docs/cost-model.md#the-train-state); such a plan is compiled through ``build``.
      schedule_exposure: on an XLA:GPU target, for a plan that offloads, read the exposed
        copy time per direction from the compiled schedule after the verify compile
        (``plan.verification.schedule``; the report shows it beside the model's). On a
        deviceless target this compiles the plan once more, with Triton GEMMs on (the
        device's GEMM emitter: the verify compile keeps them off for its memory figures).
      parallel_compiles: how many compiles run at once on the session's compile threads:
        the trace stage's two anchors and compiler probes, and the stock policies' verify
        compiles, which start after the first solve (those predicted faster than it) and
        run beside the plan's own verify compiles (each traced on the planning thread,
        compiled on a thread). None (default): a quarter of the machine's cores, at most 4
        (4 on a 16-core GPU host, none on a 2-core machine), and at least two of the trace
        stage's compiles at once from 2 cores (the planning thread only waits for them);
        0 or 1: one at a time, each when it is needed.
      autotune_cache_dir: None (default), or a directory where the planner's compiles on a
        live GPU keep XLA's autotune results (``--xla_gpu_per_fusion_autotune_cache_dir``),
        read by later processes. The first compile of a step on a GPU is mostly the
        autotuner timing every GEMM's candidate kernels (H200, the 8-layer loop Llama: 29.1
        s of the first anchor compile; 2.3 s in a second process with this directory, the
        same memory figures). Give the training run the same flag (``XLA_FLAGS``) and its
        first compile reuses the planner's results. Ignored for deviceless and CPU
        compiles (no autotuner runs).
      session_cache: how many Planners ``planner.solve`` and ``planner.pareto`` keep in this
        process (least recently used out first), each found again by the step's fingerprint
        (program, arguments' shapes and dtypes, JAX), its arguments' shardings, the hardware,
        this machine's devices, the other options and, where the numerics check runs, the
        arguments' values: a later call on the same step pays one trace (the fingerprint)
        and reuses the trace stage, the stock-policy compiles, the numerics reference and
        the plans of budgets planned before, with the same answers. Each kept Planner
        holds its step, its example arguments (concrete arrays stay alive), traces, graphs
        and compiled executables. Default 2; 0 keeps none.
    """

    allow_offload: bool | None = None
    verify_compile: bool = True
    max_rounds: int = 3
    fill_rounds: int = 3
    layer_groups: bool | None = None
    group_gain: float = 1e-3
    compare_stock: bool = True
    solver_time_limit_s: float = 30.0
    linearization_level: int = 2
    solver_workers: int = 1
    seed: int = 0
    compiler: str = "auto"
    check_numerics: bool | None = None
    decide_names: tuple[str, ...] | None = None
    opt_state: Any = None
    params: Any = None
    opt_state_argnum: int | None = None
    params_argnum: int | None = None
    stream_params: bool = False
    schedule_exposure: bool = True
    parallel_compiles: int | None = None
    autotune_cache_dir: str | os.PathLike | None = None
    session_cache: int = 2

    def __post_init__(self):
        d = self.autotune_cache_dir
        if d is not None and not isinstance(d, (str, os.PathLike)):
            raise InvalidArgumentError(
                f"autotune_cache_dir must be None or a directory path, got {d!r}.\n"
                "Fix: PlanOptions(autotune_cache_dir='~/.cache/xla-autotune')."
            )
        n = self.parallel_compiles
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise InvalidArgumentError(
                f"parallel_compiles must be None or an int >= 0, got {n!r}.\n"
                "Fix: PlanOptions(parallel_compiles=4) on a many-core machine, or leave it None."
            )
        c = self.session_cache
        if isinstance(c, bool) or not isinstance(c, int) or c < 0:
            raise InvalidArgumentError(
                f"session_cache must be an int >= 0, got {c!r}.\n"
                "Fix: PlanOptions(session_cache=0) to keep no Planner between calls, or leave it."
            )
        for name in ("opt_state_argnum", "params_argnum"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise InvalidArgumentError(
                    f"{name} must be None or the index (an int >= 0) of one of the step's "
                    f"positional arguments, got {v!r}.\nFix: e.g. opt_state_argnum=1, "
                    "params_argnum=0 for train_step(params, opt_state, batch)."
                )
        for name in ("opt_state", "params"):
            v = getattr(self, name)
            if getattr(self, name + "_argnum") is not None and v is not None:
                raise InvalidArgumentError(
                    f"{name}={v!r} and {name}_argnum={getattr(self, name + '_argnum')!r} "
                    f"both given.\nWhy: {name}_argnum is the older spelling of {name}=.\n"
                    f"Fix: pass one of them ({name}=...)."
                )
            ok = v is None or callable(v) or isinstance(v, str)
            ok = ok or (isinstance(v, int) and not isinstance(v, bool) and v >= 0)
            ok = ok or (v is False and name == "opt_state")
            if not ok:
                raise InvalidArgumentError(
                    f"{name} must be an argument index (an int >= 0), a path "
                    f"('args[0].{name}') or a selector (lambda args: args[0].{name})"
                    + (", False (never place the optimizer state)" if name == "opt_state" else "")
                    + f" or None, got {v!r}."
                )
        opt = self.opt_state if self.opt_state_argnum is None else self.opt_state_argnum
        par = self.params if self.params_argnum is None else self.params_argnum
        if par is not None and opt in (None, False):
            name = "params_argnum" if self.params_argnum is not None else "params"
            raise InvalidArgumentError(
                f"{name}={par!r} without opt_state.\nWhy: the parameters are named for the "
                "train state's placement, which is planned with the optimizer state.\nFix: "
                "pass opt_state= too (e.g. opt_state=1, params=0), or neither."
            )
        if self.stream_params and opt in (None, False):
            raise InvalidArgumentError(
                "stream_params=True without opt_state.\nWhy: the parameters the plan may put "
                "on the host are planned with the optimizer state's placement.\nFix: pass "
                "opt_state= too (e.g. opt_state=1, params=0, stream_params=True)."
            )
        if self.decide_names is not None:
            names = self.decide_names
            if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
                raise InvalidArgumentError(
                    "decide_names must be None or a tuple of checkpoint names (non-empty "
                    f"strings), got {names!r}."
                )
            object.__setattr__(self, "decide_names", tuple(names))
        if self.compiler not in ("auto", "target", "local"):
            raise InvalidArgumentError(
                f"compiler must be 'auto', 'target' or 'local', got {self.compiler!r}."
            )
        if self.allow_offload is not None and not isinstance(self.allow_offload, bool):
            raise InvalidArgumentError(
                f"allow_offload must be True, False or None (decide), got {self.allow_offload!r}."
            )
        if self.check_numerics is not None and not isinstance(self.check_numerics, bool):
            raise InvalidArgumentError(
                "check_numerics must be True, False or None (check where the arguments are "
                f"concrete), got {self.check_numerics!r}."
            )
        if self.layer_groups is not None and not isinstance(self.layer_groups, bool):
            raise InvalidArgumentError(
                f"layer_groups must be True, False or None (decide), got {self.layer_groups!r}."
            )
        t = self.solver_time_limit_s
        if (
            isinstance(t, bool)
            or not isinstance(t, (int, float))
            or not (t > 0 and math.isfinite(t))
        ):
            raise InvalidArgumentError(f"solver_time_limit_s must be > 0 seconds, got {t!r}.")
        if (
            isinstance(self.max_rounds, bool)
            or not isinstance(self.max_rounds, int)
            or (self.max_rounds < 1)
        ):
            raise InvalidArgumentError(f"max_rounds must be an int >= 1, got {self.max_rounds!r}.")
        if (
            isinstance(self.fill_rounds, bool)
            or not isinstance(self.fill_rounds, int)
            or self.fill_rounds < 0
        ):
            raise InvalidArgumentError(
                f"fill_rounds must be an int >= 0 (0: never), got {self.fill_rounds!r}."
            )
        g = self.group_gain
        if isinstance(g, bool) or not isinstance(g, (int, float)) or not 0 <= g < 1:
            raise InvalidArgumentError(f"group_gain must be a fraction in [0, 1), got {g!r}.")
        if self.linearization_level not in (0, 1, 2):
            raise InvalidArgumentError(
                f"linearization_level must be 0, 1 or 2, got {self.linearization_level!r}."
            )
        if (
            isinstance(self.solver_workers, bool)
            or not isinstance(self.solver_workers, int)
            or (self.solver_workers < 1)
        ):
            raise InvalidArgumentError(
                f"solver_workers must be an int >= 1, got {self.solver_workers!r}."
            )

    @property
    def state_selection(self) -> tuple[Any, Any]:
        """``(opt_state, params)`` as asked for, the argnum spellings folded in."""
        opt = self.opt_state if self.opt_state_argnum is None else self.opt_state_argnum
        par = self.params if self.params_argnum is None else self.params_argnum
        return opt, par

    @property
    def solver(self) -> SolverOptions:
        return SolverOptions(
            time_limit_s=float(self.solver_time_limit_s),
            workers=self.solver_workers,
            seed=self.seed,
            linearization_level=self.linearization_level,
        )


# ------------------------------------------------------------------------------ budgets


def real_scalar(x):
    """``x`` as a Python float where it is a real scalar of another kind (``np.float32(40)``,
    ``np.int64(40)``, a 0-d NumPy or JAX array such as ``jnp.array(40.)``); else ``x`` as it
    is, for the budget's own checks to refuse. Booleans stay booleans (refused)."""
    import decimal
    import numbers

    if isinstance(x, bool) or isinstance(x, (int, float)):
        return x
    dtype = getattr(x, "dtype", None)
    if dtype is not None:
        if getattr(x, "shape", None) != () or getattr(dtype, "kind", "") not in "iuf":
            return x
        try:
            return float(x)
        except Exception:  # noqa: BLE001  (an abstract value: a tracer, a ShapeDtypeStruct)
            return x
    if isinstance(x, (numbers.Real, decimal.Decimal)):  # Fraction, Decimal
        try:
            return float(x)
        except (ValueError, OverflowError):  # Decimal("sNaN")
            return x
    return x


def check_fits_device(budget_gb: float, hw) -> None:
    """Refuse a budget above the profile's HBM capacity per device: no plan for more memory
    than the device has can run on it, and "within budget" would then mean nothing."""
    cap = float(hw.hbm_bytes)
    if budget_gb * GB <= cap * (1 + 1e-9) + 1:  # (auto budgets end at the capacity itself)
        return
    fraction = (
        f" (JAX's allocator takes 0.75 of it by default: hbm_gb={0.75 * cap / GB:.4g})"
        if hw.platform == "gpu"
        else ""
    )
    raise InvalidArgumentError(
        f"hbm_gb={budget_gb:g} is more than the device has: the {hw.name} profile's device "
        f"has {cap / GB:.4g} GB of HBM{'' if cap >= 0.1 * GB else f' ({fmt_bytes(cap)})'}."
        "\nWhy: the budget is per device, "
        "in GB (10^9 bytes); a plan for more memory than the device has cannot run on it.\n"
        f"Fix: pass hbm_gb <= {cap / GB:.4g}{fraction}; or name the device you train on "
        "(hardware=..., planner.hardware.list_profiles()); or give a profile its real capacity: "
        f"planner.hardware.load_profile({hw.name!r}).replace(hbm_bytes=...)."
    )
