"""The one place that touches JAX internals.

Everything the planner needs from JAX's private modules goes through this file, so that a
JAX upgrade breaks one small, tested adapter and nothing else. It provides:

* :func:`controlled_policies`: a context manager under which every ``jax.checkpoint`` /
  ``jax.remat`` region the user's code binds gets the planner's policy instead of its own
  (Flax's ``nn.remat`` and ``nnx.remat`` call ``jax.checkpoint`` and are covered too). It
  works by wrapping ``remat_p.bind``: the user's code fixes the policy at trace time by
  passing it as a parameter of the checkpoint primitive, and this is the point where that
  parameter can be replaced without editing the user's code.
* :func:`replay_partial_eval`: JAX's own residual selection (``partial_eval_jaxpr_custom``
  on the JVP of a region body), replayed on a region so the planner knows, per equation,
  what the backward pass needs.
* :func:`residual_label`: what ``jax.ad_checkpoint.print_saved_residuals`` prints for an
  equation's output when the backward pass keeps it (the report's labels, string for string).
* :func:`signature_key`: the identity a policy can see of an equation. A policy is called as
  ``policy(prim, *avals, **params)`` and has no other handle on a tensor, so equations with
  the same signature necessarily share a decision.

Pitfall handled here: ``jax.jit`` and ``lax.scan`` cache traces keyed on the function and
the argument types, not on the policy. Tracing the same step under a second policy would
silently return the first program. :func:`controlled_policies` therefore traces under a
private JAX configuration value that is part of JAX's trace context (``_TRACE_EPOCH``, a new
value per controlled trace, set for the planner's thread only): every JAX cache keyed on the
trace context (jit's, scan's, the lowering caches) misses, so the planner never sees a
program traced under another policy, and the user's own cached programs are neither cleared
nor replaced. A user thread tracing at the same time sees JAX as it is: the patched bind
passes through whenever the calling thread is not the planner's.

* the hooks of a deviceless compile (``xla/deviceless.py`` decides what they answer): JAX's
  cuDNN fused-attention capability checks replaced (:func:`patch_capability_checks`), the
  ``bind`` of the primitives whose parameters carry shardings wrapped
  (:func:`patch_sharding_binds`), a traced jit's own in / out shardings read and replaced
  (:func:`traced_shardings`, :func:`with_traced_shardings`), and an argument's aval placed in
  host memory (:func:`shape_dtype_struct`).

Every JAX internal the planner uses is listed in :data:`INTERNALS` (and the private keyword
arguments in :data:`INTERNAL_KEYWORDS`) and checked by :func:`check_internals`
(tests/test_adapter.py), which names what moved when JAX changes. This module is over 600
lines on purpose: every JAX internal in one place, so that a JAX upgrade is adapted here and
nowhere else.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import hashlib
import importlib
import inspect
import itertools
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np
from jax._src import ad_checkpoint as _adc
from jax._src import config as _config
from jax._src import core as _core
from jax._src import mesh as _mesh
from jax._src import source_info_util as _siu
from jax._src.interpreters import ad as _ad
from jax._src.interpreters import partial_eval as _pe
from jax._src.sharding_impls import SingleDeviceSharding

from planner._src.errors import PlannerError, PlanWarning, TraceError

remat_p = _adc.remat_p

# Source lines reported to users should point at their code, not at this adapter, nor at
# the libraries that bind checkpoint regions for them (Flax's nn.remat / nn.scan lifting,
# Equinox, penzai: a region "at flax/core/axes_scan.py" says nothing to the user). Found
# without importing them. The planner's own frames: all of planner/_src (this file's parent
# folder's parent), not only xla/.
_siu.register_exclusion(__file__.rsplit("/", 2)[0])


def _exclude_libraries(names=("flax", "equinox", "penzai")) -> None:
    import importlib.util

    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for where in (spec.submodule_search_locations or []) if spec else []:
            _siu.register_exclusion(str(where))


_exclude_libraries()
Var = _core.Var
# shard_map: jax.shard_map from JAX 0.7 (0.10-0.12 here), jax.experimental.shard_map before.
shard_map = (
    getattr(jax, "shard_map", None)
    or importlib.import_module("jax.experimental.shard_map").shard_map
)

# JAX <= 0.11 has two classes, Jaxpr and ClosedJaxpr (a Jaxpr with its constants); JAX 0.12
# merged them into Jaxpr (jax._src.core has no ClosedJaxpr; jax.extend.core.ClosedJaxpr is
# an alias of Jaxpr).
_CLOSED = getattr(_core, "ClosedJaxpr", None)
JAXPR_TYPES = (_core.Jaxpr,) if _CLOSED is None else (_core.Jaxpr, _CLOSED)


def is_closed_jaxpr(j) -> bool:
    """Whether ``j`` carries its constants (a ClosedJaxpr; every Jaxpr on JAX 0.12)."""
    return isinstance(j, _CLOSED) if _CLOSED is not None else isinstance(j, _core.Jaxpr)


name_p = _adc.name_p
Saveable = _pe.Saveable
Recompute = _pe.Recompute
Offloadable = _pe.Offloadable

# Memory kinds used by JAX for host offloading (jax.ad_checkpoint docs, `offload_dst`).
DEVICE_KIND = "device"
HOST_KIND = "pinned_host"


# --------------------------------------------------------------------------- signatures


def _param_repr(value: Any) -> str | None:
    """A stable text for a policy-visible parameter, or None for values a key must skip.

    Jaxprs and callables have no stable text across traces (their reprs carry addresses),
    so they are left out of the key; the primitive name and the avals still separate them
    (a custom_jvp_call's body is keyed by :func:`_call_body_text`).
    """
    if isinstance(value, JAXPR_TYPES) or callable(value) or type(value).__name__ == "WrappedFun":
        return None
    if isinstance(value, (tuple, list)):
        parts = [_param_repr(v) for v in value]
        if any(p is None for p in parts):
            return None
        return "(" + ",".join(parts) + ")"
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))  # np.int64(1) and 1 are the same parameter
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return np.dtype(value).name
    text = repr(value)
    if " at 0x" in text:  # an object without a value repr: unstable across runs
        return None
    return text


def aval_text(aval: Any) -> str:
    """``bf16[8,4096,14336]``-style text of an abstract value, with host memory marked."""
    short = aval.str_short(short_dtypes=True) if hasattr(aval, "str_short") else str(aval)
    return short


# Calls JAX's partial evaluation keeps as one equation and asks the policy about as a whole:
# JAX 0.12.1 keeps a custom_jvp function's primal (jax.nn.softmax, jax.nn.relu) as one
# custom_jvp_call of the differentiated program, where earlier JAX inlined its rule's equations.
# Their jaxpr parameter is what tells one from another of the same operand types (a softmax
# from a relu), so the key holds the body's function name and a digest of its text.
OPAQUE_CALLS = ("custom_jvp_call",)


def _call_body_text(params: dict) -> str:
    body = params.get("call_jaxpr")
    if body is None:
        return "?"
    info = getattr(body, "debug_info", None) or getattr(
        getattr(body, "jaxpr", None), "debug_info", None
    )
    name = getattr(info, "func_name", None) or "?"
    digest = hashlib.sha1(str(body).encode()).hexdigest()[:12]
    return f"{name}:{digest}"


def signature_key(prim: Any, *avals: Any, **params: Any) -> str:
    """The text a policy can compute for an equation: primitive, operand types, parameters.

    Two equations with the same key are indistinguishable to a checkpoint policy. For
    ``checkpoint_name`` equations the name alone is the key, as in JAX's name-based policies.
    """
    if prim is name_p:
        return f"name:{params['name']}"
    ops = ",".join(aval_text(a) for a in avals)
    ps = [] if prim.name not in OPAQUE_CALLS else [f"body={_call_body_text(params)}"]
    for k in sorted(params):
        r = _param_repr(params[k])
        if r is not None:
            ps.append(f"{k}={r}")
    return f"{prim.name}({ops})" + (("{" + ";".join(ps) + "}") if ps else "")


# ------------------------------------------------------------------ policy substitution


@dataclasses.dataclass(frozen=True, eq=False)
class RegionPolicy:
    """The policy the planner installs in region ``region_id`` while it traces.

    ``decide(prim, *avals, **params)`` returns JAX's Saveable / Recompute / Offloadable.
    Two regions' policies are equal (and hash alike) when they call the same ``decide``
    object: JAX keys its partial evaluation of a checkpoint body on the body and the policy
    (``_partial_eval_jaxpr_custom_cached``, then the transpose on the staged body), so N
    identical layers under one decision are partially evaluated and transposed once, as in
    the user's own trace, not N times (a Python loop of 200 layers traced 3-4x slower). This
    is JAX's own contract for a policy (a pure function of the equation, cached by JAX);
    ``decide`` objects made per region stay apart. ``region_id`` is read from each bound
    equation's own policy, never through a cache.
    """

    region_id: int
    decide: Callable[..., Any]

    def __call__(self, prim, *avals, **params):
        return self.decide(prim, *avals, **params)

    def __eq__(self, other):
        return isinstance(other, RegionPolicy) and self.decide is other.decide

    def __hash__(self):
        return hash((RegionPolicy, id(self.decide)))


@dataclasses.dataclass(frozen=True)
class BoundRegion:
    """What the adapter saw when the user's code bound a checkpoint region (live JAX objects:
    it never leaves the trace stage and the verify stage)."""

    region_id: int
    jaxpr: Any  # core.Jaxpr of the region body, consts converted to leading invars
    user_policy: Any
    prevent_cse: Any
    source: str
    in_nonzeros: tuple[bool, ...] | None = None  # which inputs had tangents (from the JVP)
    # Where the region was bound: the named axes in scope (shard_map's mesh axes, pmap's
    # axis), shard_map's check_vma and abstract mesh. Its collectives (psum, axis_index)
    # name those axes, so it is retraced inside them (axes_of).
    scope: Any = None


_state = threading.local()


def _active() -> _Controller | None:
    return getattr(_state, "controller", None)


class _Controller:
    def __init__(self, make_policy: Callable[[int, BoundRegion], Callable[..., Any]]):
        self.make_policy = make_policy
        self.regions: list[BoundRegion] = []


_orig_bind = remat_p.bind
_orig_jvp = _ad.primitive_jvps[remat_p]


def _patched_bind(*args, jaxpr, prevent_cse, differentiated, policy):
    ctl = _active()
    if ctl is not None and not isinstance(policy, RegionPolicy):
        # A region bound by the user's code (or a library it calls): take control of it.
        rid = len(ctl.regions)
        region = BoundRegion(
            region_id=rid,
            jaxpr=jaxpr,
            user_policy=policy,
            prevent_cse=prevent_cse,
            source=_siu.summarize(_siu.current()),
            scope=_scope_here(),
        )
        ctl.regions.append(region)
        policy = RegionPolicy(rid, ctl.make_policy(rid, region))
    elif ctl is not None and not differentiated and policy.region_id < len(ctl.regions):
        # jax.vmap re-binds the region with batched operands (remat_vmap): the batched body
        # is what runs, so it is the one to plan.
        region = ctl.regions[policy.region_id]
        if (
            region.jaxpr is not jaxpr
            and len(jaxpr.invars) == len(region.jaxpr.invars)
            and [v.aval.shape for v in jaxpr.invars] != [v.aval.shape for v in region.jaxpr.invars]
        ):
            ctl.regions[policy.region_id] = dataclasses.replace(
                region, jaxpr=jaxpr, in_nonzeros=None
            )
    return _orig_bind(
        *args, jaxpr=jaxpr, prevent_cse=prevent_cse, differentiated=differentiated, policy=policy
    )


def _patched_jvp(primals, tangents, jaxpr, prevent_cse, differentiated, policy):
    ctl = _active()
    if ctl is not None and isinstance(policy, RegionPolicy) and not differentiated:
        region = ctl.regions[policy.region_id] if policy.region_id < len(ctl.regions) else None
        if region is not None and len(tangents) == len(region.jaxpr.invars):
            nz = tuple(not isinstance(t, _ad.Zero) for t in tangents)
            # lax.scan's JVP runs its body to a fixpoint: a carry that starts without a
            # tangent (the data) gains one on the next pass. Keep the union.
            old = region.in_nonzeros
            ctl.regions[policy.region_id] = dataclasses.replace(
                region, in_nonzeros=nz if old is None else tuple(a or b for a, b in zip(old, nz))
            )
    return _orig_jvp(primals, tangents, jaxpr, prevent_cse, differentiated, policy)


# A private JAX configuration value in the trace context (module docstring): a new value per
# controlled trace keeps the planner's traces apart from every other in JAX's caches.
_TRACE_EPOCH = _config.string_or_object_state(
    name="jax_offload_planner_trace_epoch",
    default=None,
    help="Private to jax-offload-planner: set while the planner traces under its own "
    "checkpoint policies, so that JAX's trace caches keep those traces apart.",
    include_in_jit_key=True,
    include_in_trace_context=True,
)
_epochs = itertools.count(1)

_patch_lock = threading.Lock()
_patch_users = 0


@contextlib.contextmanager
def _patched() -> Iterator[None]:
    """The remat bind and JVP rule replaced while at least one planner trace runs (any
    thread); restored exactly when the last one ends."""
    global _patch_users
    with _patch_lock:
        if _patch_users == 0:
            remat_p.bind = _patched_bind
            _ad.primitive_jvps[remat_p] = _patched_jvp
        _patch_users += 1
    try:
        yield
    finally:
        with _patch_lock:
            _patch_users -= 1
            if _patch_users == 0:
                remat_p.bind = _orig_bind
                _ad.primitive_jvps[remat_p] = _orig_jvp


@contextlib.contextmanager
def controlled_policies(
    make_policy: Callable[[int, BoundRegion], Callable[..., Any]],
) -> Iterator[list[BoundRegion]]:
    """Trace with the planner's policies in every checkpoint region the code binds.

    ``make_policy(region_id, bound_region)`` returns the decision function for a region.
    Yields the list of regions seen, filled in as tracing proceeds. Only traces made on this
    thread inside the block are controlled; JAX's caches are left as they were (see the
    module docstring).
    """
    if _active() is not None:
        raise RuntimeError("controlled_policies is not re-entrant on one thread")
    ctl = _Controller(make_policy)
    with _patched():
        _state.controller = ctl
        try:
            with _TRACE_EPOCH(("planner", next(_epochs))):
                yield ctl.regions
        finally:
            _state.controller = None


def new_epoch(kind: str) -> tuple[str, int]:
    """A fresh private trace-context value (module docstring), e.g. for one applied plan."""
    return (kind, next(_epochs))


@contextlib.contextmanager
def applied_policies(
    make_policy: Callable[[int, BoundRegion], Callable[..., Any]], epoch: tuple[str, int]
) -> Iterator[list[BoundRegion]]:
    """:func:`controlled_policies` under a fixed ``epoch`` (:func:`new_epoch`): the policies
    a user's step runs with after ``plan.apply``. The same epoch on every call keeps JAX's
    caches working for the applied step (traced and compiled once, like any jitted step),
    apart from the entries of the step as the user wrote it. Inside a planner trace on this
    thread (its own controlled block) the planner's policies win and this does nothing."""
    if _active() is not None:
        yield []
        return
    ctl = _Controller(make_policy)
    with _patched():
        _state.controller = ctl
        try:
            with _TRACE_EPOCH(epoch):
                yield ctl.regions
        finally:
            _state.controller = None


def saved_residuals(f: Callable, *args) -> list[tuple[str, str]]:
    """JAX's own list of what ``jax.grad(f)`` keeps from the forward pass, as
    ``jax.ad_checkpoint.print_saved_residuals`` prints it: ``(aval text, where)`` pairs."""
    return [
        (aval.str_short(short_dtypes=True), src) for aval, src in _adc.saved_residuals(f, *args)
    ]


@contextlib.contextmanager
def isolated_traces() -> Iterator[None]:
    """Traces made on this thread inside the block get a trace context of their own (a new
    ``_TRACE_EPOCH`` value), without policy substitution: they neither hit nor fill the
    entries of JAX's caches that the user's own traces use, so nothing has to be cleared
    (the numerics check runs the user's step this way; target.compile_traced traces so)."""
    with _TRACE_EPOCH(("planner-isolated", next(_epochs))):
        yield


@contextlib.contextmanager
def float64() -> Iterator[None]:
    """64-bit floats inside the block (``jax.enable_x64(True)``, a config context on JAX
    0.10-0.12; tests/test_adapter.py guards it)."""
    with jax.enable_x64(True):
        yield


def live_jaxpr(j):
    """The open jaxpr of ``j`` with the equations its outputs do not need removed (JAX's own
    dead-code elimination, which keeps effectful equations): what XLA will run."""
    jx = open_jaxpr(j)
    out, _ = _pe.dce_jaxpr(jx, [True] * len(jx.outvars))
    return out


# ---------------------------------------------------------------- replay of partial eval


@dataclasses.dataclass(frozen=True)
class Replay:
    """JAX's residual selection replayed on one region under one policy."""

    known_eqns: tuple  # equations of jvp_jaxpr run in the forward pass
    staged_jaxpr: Any  # what the backward pass runs (recompute + tangent equations)
    residuals: tuple  # vars of jvp_jaxpr the backward pass receives
    staged_inputs_used: tuple  # per jvp input: the backward pass reads it (primal inputs: kept)
    primal_outvars: tuple = ()  # what the forward pass returns besides the residuals


def _scope_here() -> tuple | None:
    """The named-axis scope of the trace now (BoundRegion.scope); None at the top level."""
    env = _core.trace_ctx.axis_env
    if not env.axis_sizes:
        return None
    return env, _config._check_vma.value, _mesh.get_abstract_mesh()


@contextlib.contextmanager
def axes_of(region: BoundRegion) -> Iterator[None]:
    """Inside the block, the named axes that were in scope where ``region`` was bound (a
    shard_map body's mesh axes and its check_vma, a pmap's axis name): retracing the
    region's collectives (psum, axis_index, pvary) outside them fails with JAX's "unbound
    axis name"."""
    if region.scope is None:
        yield
        return
    env, check_vma, mesh = region.scope
    before = _core.trace_ctx.axis_env
    _core.trace_ctx.set_axis_env(env)
    try:
        with _config._check_vma(check_vma), _mesh.use_abstract_mesh(mesh):
            yield
    finally:
        _core.trace_ctx.set_axis_env(before)


def region_jvp(region: BoundRegion):
    """The JVP jaxpr JAX builds for a region (``remat_jvp`` in jax/_src/ad_checkpoint.py),
    nested jit calls inlined: ``(jaxpr, number of known inputs, number of hoisted consts)``.
    Traced inside the axes the region was bound in (:func:`axes_of`)."""
    with axes_of(region):
        return _region_jvp(region)


def _region_jvp(region: BoundRegion):
    jaxpr = region.jaxpr
    nonzeros = region.in_nonzeros
    if nonzeros is None:  # never differentiated in the trace: assume every float input is
        nonzeros = tuple(
            jax.numpy.issubdtype(v.aval.dtype, jax.numpy.inexact) for v in jaxpr.invars
        )
    jvp_closed, _ = _ad.jvp_jaxpr(_pe.close_jaxpr(jaxpr), list(nonzeros), False)
    jvp = _pe.convert_constvars_jaxpr(jvp_closed.jaxpr)
    n_primal = len(jvp_closed.consts) + len(jaxpr.invars)
    inlined, n_new_consts = inline_calls(jvp)
    # make_jaxpr may hoist array constants to new leading invars: known, like primals, but
    # in the real program they stay constants of the region (never residuals or operands).
    return inlined, n_new_consts + n_primal, n_new_consts


_INLINED = ("pjit", "jit", "closed_call", "core_call")


def inline_calls(jaxpr, n_consts: int = 0):
    """``jaxpr`` with nested jit / closed_call equations inlined, source lines kept.

    JAX's partial evaluation recurses into nested jit calls with the same policy (their
    ``partial_eval_jaxpr_custom_rules``), so the policy decides on the inner equations.
    Inlining makes those inner equations the planner's candidates, as the policy sees them.
    """

    def run(jx, args, call=None):
        env: dict[Any, Any] = {}
        read = lambda v: v.val if isinstance(v, _core.Literal) else env[v]
        for v, a in zip(jx.invars, args):
            env[v] = a
        for eqn in jx.eqns:
            if eqn.primitive.name in _INLINED:
                inner = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
                closed = inner if is_closed_jaxpr(inner) else _pe.close_jaxpr(inner)
                outs = run_closed(closed, [read(v) for v in eqn.invars], call or _call_mark(eqn))
            else:
                params = eqn.primitive.get_bind_params(eqn.params)
                stack = eqn.source_info.name_stack
                if call is not None:  # remember the outermost call (residual_label)
                    stack = _siu.NameStack((call,)) + stack
                with (
                    _siu.user_context(eqn.source_info.traceback, name_stack=stack),
                    eqn.ctx.manager,
                ):
                    outs = eqn.primitive.bind(*[read(v) for v in eqn.invars], **params)
                if not eqn.primitive.multiple_results:
                    outs = [outs]
            for v, o in zip(eqn.outvars, outs):
                env[v] = o
        return [read(v) for v in jx.outvars]

    def run_closed(closed, args, call):
        consts = list(closed.consts)
        inner = _pe.convert_constvars_jaxpr(closed.jaxpr)
        return run(inner, consts + list(args), call)

    avals = [v.aval for v in jaxpr.invars]
    flat = jax.make_jaxpr(lambda *a: run(jaxpr, a))(*avals)
    return _pe.convert_constvars_jaxpr(flat.jaxpr), len(flat.consts)


def constvars_as_invars(closed) -> tuple[list, Any]:
    """(constants, open jaxpr taking them first) of a closed jaxpr (``make_jaxpr``'s)."""
    return list(closed.consts), _pe.convert_constvars_jaxpr(closed.jaxpr)


def call_body(eqn) -> tuple[list, Any] | None:
    """:func:`constvars_as_invars` of the jaxpr a nested jit / closed_call equation runs,
    else None."""
    if eqn.primitive.name not in _INLINED:
        return None
    inner = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
    if inner is None:
        return None
    return constvars_as_invars(inner if is_closed_jaxpr(inner) else _pe.close_jaxpr(inner))


def bind_equation(eqn, ins: list) -> list:
    """``eqn`` bound again on ``ins`` in the current trace, with its own parameters, source
    line and name stack: its outputs, as a list."""
    params = eqn.primitive.get_bind_params(eqn.params)
    with (
        _siu.user_context(eqn.source_info.traceback, name_stack=eqn.source_info.name_stack),
        eqn.ctx.manager,
    ):
        outs = eqn.primitive.bind(*ins, **params)
    return list(outs) if eqn.primitive.multiple_results else [outs]


# How print_saved_residuals names what an inlined call made: JAX keeps the call (a jit of
# the user's, or of JAX's own: jnp.where, jax.nn.silu) as one equation of the forward pass,
# and a residual made inside it is an "output of jitted function 'silu' from <the call's
# line>". inline_calls marks the equations it inlines with the outermost call, as the first
# scope of their name stack (name stacks only name HLO ops; the inlined jaxpr is analysed,
# never lowered).
_CALL_MARK = "planner-inlined-call\x00"


def _call_mark(eqn):
    """The scope inline_calls puts first in the name stack of what ``eqn`` (a call) holds:
    the text print_saved_residuals gives the call's outputs, and the call's source line."""
    name = eqn.primitive.name
    what = f"jitted function '{eqn.params['name']}'" if name == "jit" else name
    return _siu.Scope(f"{_CALL_MARK}output of {what}\x00{eqn_source(eqn)}")


def _inlined_call(eqn) -> tuple[str, str] | None:
    """``(what, source)`` of the outermost call ``eqn`` was inlined from (None: none)."""
    stack = eqn.source_info.name_stack.stack
    if stack and isinstance(stack[0], _siu.Scope) and stack[0].name.startswith(_CALL_MARK):
        what, source = stack[0].name[len(_CALL_MARK) :].split("\x00", 1)
        return what, source
    return None


def _checkpoint_name(eqn) -> str | None:
    """The ``checkpoint_name`` an equation applies, as print_saved_residuals finds it
    (``get_name`` in jax/_src/ad_checkpoint.py: ``name_p``, or JAX 0.12's remat3
    ``CheckpointName`` calls)."""
    if eqn.primitive is name_p:
        return eqn.params["name"]
    prim = eqn.params.get("_prim") if eqn.primitive.name == "call_hi_primitive" else None
    name = getattr(prim, "name", None)
    return name if type(prim).__name__ in ("CheckpointName", "CheckpointNameFwd") else None


def residual_label(eqn) -> str:
    """What ``jax.ad_checkpoint.print_saved_residuals`` prints for the first output of
    ``eqn`` (an equation of a region's forward pass as :func:`region_jvp` made it) when the
    backward pass keeps it: ``f32[4,256] output of dot_general from model.py:12:8 (layer)``,
    ``... named 'x' from ...``, ``... output of jitted function 'silu' from ...`` (the
    formatting of ``_saved_residuals`` in jax/_src/ad_checkpoint.py, whose source line is
    that of the region's own equation, the outermost call where inline_calls inlined one)."""
    out = next((v for v in eqn.outvars if is_var(v)), eqn.outvars[0])
    aval = out.aval.str_short(short_dtypes=True)
    call = _inlined_call(eqn)
    if call is not None:
        what, source = call
    else:
        source = eqn_source(eqn)
        name = _checkpoint_name(eqn)
        what = f"named '{name}'" if name else f"output of {eqn.primitive.name}"
    return f"{aval} {what} from {source}"


def call_source(eqn) -> str:
    """The source line of the outermost call ``eqn`` was inlined from ("" if none): the
    user's line where JAX's own function (jnp.where, jax.nn.silu) made the equation."""
    call = _inlined_call(eqn)
    return call[1] if call is not None else ""


def replay_partial_eval(jvp_jaxpr, n_primal_in: int, policy: Callable[..., Any]) -> Replay:
    """Split ``jvp_jaxpr`` into forward and backward parts exactly as JAX's remat rule does."""
    n_in = len(jvp_jaxpr.invars)
    in_unknowns = [False] * n_primal_in + [True] * (n_in - n_primal_in)
    known, staged, out_unknowns, out_inst, num_res = _pe.partial_eval_jaxpr_custom(
        jvp_jaxpr, in_unknowns, [True] * n_in, False, False, policy
    )
    # As remat_partial_eval does (jax/_src/ad_checkpoint.py): keep only the staged work that
    # computes unknown (tangent) outputs, and only the residuals that work reads.
    keep = [
        u for u, i in zip(out_unknowns, out_inst) if i
    ]  # staged outputs are the instantiated ones
    staged_dce, used = _pe.dce_jaxpr(staged, keep)
    res_all = known.outvars[len(known.outvars) - num_res :]
    residuals = tuple(v for v, u in zip(res_all, used[:num_res]) if u)
    # The staged jaxpr also reads the inputs themselves (all instantiated), after the residuals.
    return Replay(
        known_eqns=tuple(known.eqns),
        staged_jaxpr=staged_dce,
        residuals=residuals,
        staged_inputs_used=tuple(bool(u) for u in used[num_res:]),
        primal_outvars=tuple(known.outvars[: len(known.outvars) - num_res]),
    )


def eqn_source(eqn) -> str:
    return _siu.summarize(eqn.source_info)


def eqn_where(eqn) -> tuple[str, int] | None:
    """(file basename, line) of the innermost user frame of ``eqn``: what the compiled HLO's
    metadata names (``source_file``/``source_line`` or its stack frame), used by trace/shard.py
    to find the equation's partitioned instructions."""
    for frame in _siu.user_frames(eqn.source_info.traceback):
        return frame.file_name.rsplit("/", 1)[-1], int(frame.start_line)
    return None


def is_differentiated_remat(eqn) -> bool:
    return eqn.primitive is remat_p and bool(eqn.params.get("differentiated"))


def everything_saveable(prim=None, *avals, **params):
    """Save every value a policy can save: all but complex ones. JAX cannot keep a complex
    residual under any policy that saves (``jax/_src/ad_checkpoint.py``,
    ``_insert_reduce_precision``, applies ``reduce_precision`` to every inexact residual and
    ``reduce_precision`` refuses complex dtypes: "reduce_precision does not accept dtype
    complex64", JAX 0.12.0.1; MaxText's YaRN rotary embedding of DeepSeek makes them), so they
    are recomputed, as under every stock policy."""
    return Recompute if _makes_complex(prim, avals, params) else Saveable


def _makes_complex(prim, avals, params) -> bool:
    """Whether an equation may output a complex value, from what a policy sees: a complex
    operand, the ``complex`` primitive, or a conversion to a complex dtype."""
    if prim is not None and getattr(prim, "name", "") == "complex":
        return True
    dtypes = [params.get("new_dtype")] + [getattr(a, "dtype", None) for a in avals]
    return any(_is_complex(dt) for dt in dtypes if dt is not None)


def _is_complex(dt) -> bool:
    try:
        return bool(np.issubdtype(dt, np.complexfloating))
    except TypeError:  # JAX's extended dtypes (PRNG keys) are not NumPy dtypes
        return False


def to_memory(x, kind: str):
    """``x`` moved to HBM (``kind="device"``) or pinned host memory (``"pinned_host"``)
    inside a jitted function: ``jax.device_put`` to a ``jax.memory.Space`` (public since
    JAX 0.6; the same in 0.10.2 and 0.12.0.1), which keeps the value's sharding."""
    space = jax.memory.Space.Device if kind == "device" else jax.memory.Space.Host
    return jax.device_put(x, space)


def with_memory_kind(sharding, kind: str):
    """``sharding`` with memory ``kind``, as a sharding whose kind reaches the traced value.

    JAX sets an array's ``aval.memory_space`` from its sharding's memory kind only for a
    ``NamedSharding`` (``core.update_aval_with_sharding``, JAX 0.10.2 to 0.12.0.1): an array
    made by ``jax.jit(f, out_shardings=SingleDeviceSharding(d, memory_kind="pinned_host"))``
    lives in pinned host memory but traces as device memory, and a step that writes a host
    value into it in place fails ("memory_space of all inputs passed to
    dynamic_update_slice must be the same"). A ``SingleDeviceSharding`` therefore becomes the
    same placement as a ``NamedSharding`` over a one-device mesh."""
    from jax.sharding import NamedSharding, PartitionSpec

    if isinstance(sharding, SingleDeviceSharding):
        (device,) = sharding.device_set
        sharding = NamedSharding(one_device_mesh(device), PartitionSpec())
    return sharding.with_memory_kind(kind)


@functools.cache
def one_device_mesh(device):
    """The one-device mesh of ``device`` (axis ``_planner_device``), built once per device:
    every leaf of a state or parameter tree on that device shares it (was one Mesh per leaf;
    Meshes of the same devices and axis names are equal, so shardings compare the same)."""
    from jax.sharding import Mesh

    return Mesh(np.array([device]), ("_planner_device",))


def memory_space_is_host(aval) -> bool:
    space = getattr(aval, "memory_space", None)
    return space is not None and "host" in str(space).lower()


def subjaxprs(eqn) -> Iterator[tuple[Any, int]]:
    """(jaxpr, trip count) for each jaxpr nested in ``eqn``'s parameters."""
    trips = int(eqn.params["length"]) if eqn.primitive.name == "scan" else 1
    for value in eqn.params.values():
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(v, JAXPR_TYPES):
                yield open_jaxpr(v), trips


def to_jax_decision(decision: str):
    """Planner decision text -> the value a JAX policy returns."""
    if decision == "save":
        return Saveable
    if decision == "remat":
        return Recompute
    if decision == "offload":
        return Offloadable(src=DEVICE_KIND, dst=HOST_KIND)
    raise ValueError(f"unknown decision {decision!r}; expected save, remat or offload")


def decision_text(result) -> str:
    """What a JAX policy returned, as the planner's decision text."""
    if result is True or isinstance(result, _pe.SaveableType):
        return "save"
    if result is False or result is None or isinstance(result, _pe.RecomputeType):
        return "remat"
    if isinstance(result, _pe.Offloadable):
        return "offload"
    raise ValueError(
        f"a checkpoint policy returned {result!r}; expected a bool, "
        "Saveable, Recompute or Offloadable"
    )


def scan_layout(eqn) -> tuple[int, int]:
    """(number of constants, number of carries) of a ``scan`` equation.

    JAX <= 0.10 stores them as ``num_consts`` / ``num_carry``; JAX 0.11 packs the operands
    as a flat tree ``ft_in = (consts, carry, xs)`` (jax/_src/lax/control_flow/loops.py).
    """
    p = eqn.params
    if "num_consts" in p:
        return int(p["num_consts"]), int(p["num_carry"])
    consts, carry, _ = p["ft_in"].unpack()
    return len(consts), len(carry)


def open_jaxpr(j):
    """The open ``Jaxpr`` of a ClosedJaxpr (JAX <= 0.10), or ``j`` itself where JAX 0.11
    merged the two classes."""
    inner = getattr(j, "jaxpr", j)
    return inner if hasattr(inner, "eqns") else j


# ------------------------------------------------------------------------ values and bytes


def nbytes(aval) -> int:
    """Bytes of an abstract value at its (global) shape; 0 for tokens and other non-arrays.
    Extended dtypes (typed PRNG keys, ``key<fry>``) carry their own itemsize: numpy cannot
    interpret them."""
    dtype = getattr(aval, "dtype", None)
    if dtype is None:
        return 0
    itemsize = getattr(dtype, "itemsize", None)
    if itemsize is None:
        itemsize = np.dtype(dtype).itemsize
    return int(np.prod(getattr(aval, "shape", ()), dtype=np.int64)) * int(itemsize)


def dtype_name(aval) -> str:
    """``float32``, ``bfloat16``, ``key<fry>``: the dtype's own name, numpy or extended."""
    dtype = getattr(aval, "dtype", None)
    if dtype is None:
        return ""
    try:
        return np.dtype(dtype).name
    except TypeError:  # an extended dtype (typed PRNG keys): numpy does not know it
        return str(dtype)


def is_var(v) -> bool:
    """A jaxpr variable (not a literal constant): what can be a residual or a dict key."""
    return isinstance(v, Var)


def decidable(eqn) -> bool:
    """Whether JAX's partial evaluation asks the checkpoint policy about ``eqn`` itself.

    ``partial_eval_jaxpr_custom`` (jax/_src/interpreters/partial_eval.py) calls the policy for
    an equation with known inputs only when its primitive has no rule of its own in
    ``partial_eval_jaxpr_custom_rules``; effectful equations are kept whatever it says.
    Higher-order primitives (cond, while, scan, custom_vjp) have such rules: they split
    their bodies with the same policy, so the policy decides the equations inside them, never
    their outputs. A policy cannot save a cond's result: JAX recomputes it from its operands.
    """
    return eqn.primitive not in _pe.partial_eval_jaxpr_custom_rules and not eqn.effects


@dataclasses.dataclass(frozen=True, slots=True)
class Site:
    """Where :func:`walk` found an equation."""

    eqn: Any
    mult: int  # executions per run of the outermost jaxpr (scan trip counts multiplied)
    jaxpr: Any  # the (open) jaxpr that holds it
    scans: tuple  # enclosing scans, outermost first: (scan equation, jaxpr holding it)


def walk(jaxpr, mult: int = 1, scans: tuple = ()) -> Iterator[Site]:
    """Every equation of ``jaxpr`` and of the jaxprs nested in it, depth first, with where it
    sits. The one walker over nested jaxprs of the planner's trace and verify stages."""
    jx = open_jaxpr(jaxpr)
    for eqn in jx.eqns:
        yield Site(eqn, mult, jx, scans)
        inner = scans + ((eqn, jx),) if eqn.primitive.name == "scan" else scans
        for sub, trips in subjaxprs(eqn):
            yield from walk(sub, mult * trips, inner)


# Primitives whose float results change with 64-bit floats on: random bits drawn for a
# float64 uniform are 64 bits wide, so dropout masks and noise differ (raw uint32 keys draw
# and split through threefry2x32).
RANDOM_DRAWS = frozenset({"random_bits", "threefry2x32"})


def draws_random(jaxpr) -> bool:
    """Whether ``jaxpr`` (nested jaxprs included) draws random bits (:data:`RANDOM_DRAWS`)."""
    return any(site.eqn.primitive.name in RANDOM_DRAWS for site in walk(jaxpr))


def float_dtypes(jaxpr) -> tuple[str, ...]:
    """The floating dtypes of every value ``jaxpr`` computes (nested jaxprs included), by
    name, sorted: what the numerics check's tolerance is set from."""
    seen = set()
    for site in walk(jaxpr):
        for v in site.eqn.outvars:
            dt = getattr(getattr(v, "aval", None), "dtype", None)
            if dt is not None and jax.numpy.issubdtype(dt, jax.numpy.inexact):
                seen.add(np.dtype(dt).name)
    return tuple(sorted(seen))


# ------------------------------------------------------------- what a policy really keeps


@dataclasses.dataclass(frozen=True, slots=True)
class Kept:
    """What JAX's partial evaluation keeps for one region under one policy (global sizes)."""

    device_bytes: int  # residuals in device memory, one trip
    host_bytes: int  # residuals placed in pinned_host, one trip
    inputs_read: tuple[int, ...]  # primal inputs the backward pass reads
    residuals: tuple[tuple[tuple[int, ...], str, bool], ...]  # (shape, dtype, in host memory)


def kept_by_policy(region: BoundRegion, policy: Callable[..., Any]) -> Kept:
    """Replay JAX's residual selection on ``region`` with ``policy`` (what the emitted policy
    really keeps: the verify stage compares it with the plan). Hoisted array constants are
    constants of the region in the real program, not residuals, and are left out."""
    jvp, n_primal, n_hoisted = region_jvp(region)
    with axes_of(region):
        replay = replay_partial_eval(jvp, n_primal, policy)
    hoisted = set(jvp.invars[:n_hoisted])
    dev = host = 0
    res = []
    for v in replay.residuals:
        if v in hoisted:
            continue
        on_host = memory_space_is_host(v.aval)
        b = nbytes(v.aval)
        host += b if on_host else 0
        dev += 0 if on_host else b
        res.append((tuple(getattr(v.aval, "shape", ())), dtype_name(v.aval), on_host))
    used = tuple(
        k - n_hoisted
        for k, u in enumerate(replay.staged_inputs_used)
        if u and n_hoisted <= k < n_primal
    )
    return Kept(device_bytes=dev, host_bytes=host, inputs_read=used, residuals=tuple(res))


def trace_step_with(step_fn: Callable, args, make_policy) -> tuple[Any, list[BoundRegion]]:
    """``jax.jit(step_fn).trace(*args)`` under ``make_policy`` (see controlled_policies):
    ``(traced, bound regions)``. A step the user already jitted keeps its own options."""
    with controlled_policies(make_policy) as bound:
        traced = jit_trace(step_fn, args, bound)
        return traced, list(bound)


NOT_TRACEABLE_FIX = """Fix: hand the planner a pure function of arrays, e.g. for Flax NNX the split/merge form:

    graphdef, state = nnx.split((model, optimizer))

    @jax.jit
    def train_step(state, batch):
        model, optimizer = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(loss_fn)(model, batch)
        optimizer.update(model, grads)  # optimizer.update(grads) before Flax 0.11
        return nnx.state((model, optimizer)), loss

    planner.Planner(train_step, state, batch, hardware=...)"""


def is_array_leaf(x) -> bool:
    """Whether the planner passes a leaf of the step's arguments to the step as a traced
    argument: a JAX or NumPy array or scalar, or a ``jax.ShapeDtypeStruct``. Every other leaf
    (Python scalars and strings, functions, an Equinox model's activation or its Dropout's
    ``inference`` flag) is closed over as a constant, as ``eqx.filter_jit`` does (it
    partitions by ``eqx.is_array``): traced, a Python bool in an ``if`` raises
    TracerBoolConversionError, and a function leaf is no JAX type at all."""
    return isinstance(x, (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct))


class StaticLeavesJit:
    """``jax.jit(step_fn)`` with the non-array leaves of its arguments static
    (:func:`is_array_leaf`): ``trace`` and calls take the step's own arguments. Where every
    leaf is an array the step takes its arguments as given; otherwise each positional argument
    is passed as the list of its array leaves and the rest is closed over, in a function made per call (a trace
    of its own; the planner traces a step a few times, not every step). ``donate``: the
    positional arguments whose array leaves are donated (:func:`wrapper_donation`: what the
    step's own wrapper donates, ``eqx.filter_jit(donate="all")``'s or ``nnx.jit``'s), so the
    compiled figures alias them as the step runs."""

    def __init__(self, step_fn: Callable, donate: tuple[int, ...] = ()):
        self.step_fn = step_fn
        self.donate = tuple(donate)
        self.__name__ = getattr(step_fn, "__name__", type(step_fn).__name__)

    def _split(self, args) -> tuple[Callable, tuple]:
        flat = [jax.tree.flatten(a) for a in args]
        if all(is_array_leaf(x) for leaves, _ in flat for x in leaves):
            return self.step_fn, tuple(args)
        step_fn = self.step_fn
        dyn = tuple([x for x in leaves if is_array_leaf(x)] for leaves, _ in flat)

        def with_static(*arrays):
            full = []
            for (leaves, tree), arr in zip(flat, arrays, strict=True):
                it = iter(arr)
                full.append(
                    jax.tree.unflatten(tree, [next(it) if is_array_leaf(x) else x for x in leaves])
                )
            return step_fn(*full)

        with_static.__name__ = self.__name__
        return with_static, dyn

    def _jit(self, fn, box: dict):
        # The outputs too: non-array leaves (an Equinox model returned with its activation
        # functions) are no JAX type; they come back as they are, beside the arrays.
        def arrays_out(*a):
            leaves, tree = jax.tree.flatten(fn(*a))
            if all(isinstance(x, jax.Array) for x in leaves):
                return jax.tree.unflatten(tree, leaves)
            box["out"] = (tree, leaves)
            return [x for x in leaves if isinstance(x, jax.Array)]

        arrays_out.__name__ = self.__name__
        return jax.jit(arrays_out, donate_argnums=self.donate)

    def trace(self, *args):
        fn, dyn = self._split(args)
        return self._jit(fn, {}).trace(*dyn)

    def __call__(self, *args):
        fn, dyn = self._split(args)
        box: dict = {}
        return _rebuilt(self._jit(fn, box)(*dyn), box)

    def compiled(self, *args, compile: Callable | None = None) -> Callable:
        """The step traced, lowered and compiled once for ``args``: a function that runs that
        executable on argument sets of the same structure, shapes and dtypes, and the same
        non-array leaves (a call compiles anew: each makes its own jit). ``compile``: how
        the lowering is compiled (``lowered.compile()`` by default)."""
        fn, dyn = self._split(args)
        box: dict = {}
        lowered = self._jit(fn, box).trace(*dyn).lower()
        exe = lowered.compile() if compile is None else compile(lowered)

        def run(*same):
            return _rebuilt(exe(*self._split(same)[1]), box)

        run.program = lowered_program(lowered)
        return run

    def program(self, *args) -> str | None:
        """The step traced and lowered again for ``args``: :func:`lowered_program`."""
        fn, dyn = self._split(args)
        return lowered_program(self._jit(fn, {}).trace(*dyn).lower())


def lowered_program(lowered) -> str | None:
    """The whole program of a lowering as text, constants included, or None where it is not
    all in the text: JAX's ``jax_use_simplified_jaxpr_constants`` passes closed-over arrays
    as arguments of the executable (``const_args``), whose values the text does not show.
    Two lowerings with the same program compute the same outputs from the same arguments."""
    inner = getattr(lowered, "_lowering", None)
    if inner is None or getattr(inner, "const_args", ()):
        return None
    return lowered.as_text()


def _rebuilt(out, box: dict):
    """A step's outputs with the non-array leaves its trace set aside (``box``) put back."""
    if "out" not in box:
        return out
    tree, leaves = box["out"]
    it = iter(out)
    return jax.tree.unflatten(tree, [next(it) if isinstance(x, jax.Array) else x for x in leaves])


def wrapper_donation(step_fn: Callable, n_args: int, traced=None) -> tuple[int, ...]:
    """The positional arguments a step's own wrapper donates, where the planner jits the step
    itself (its wrapper has no JAX ``.trace``), so that the plan is made from the step as it
    runs: ``eqx.filter_jit(donate="all" | "all-except-first" | "warn" | ...)`` (its
    ``donate_first`` / ``donate_rest`` flags: the first argument, the others) and
    ``nnx.jit(donate_argnums=...)`` (``traced``: its own trace, whose ``donate_argnums`` index
    the flattened leaves of its arguments; an argument is donated when every one of its leaves
    is). Before, both were traced undonated: the compiled figures counted the donated train
    state twice (argument and output)."""
    first, rest = getattr(step_fn, "donate_first", None), getattr(step_fn, "donate_rest", None)
    if (
        isinstance(first, bool)
        and isinstance(rest, bool)
        and callable(getattr(step_fn, "lower", None))
    ):
        return tuple(i for i in range(n_args) if (first if i == 0 else rest))
    flat = getattr(traced, "donate_argnums", None)
    tree = getattr(traced, "in_tree", None)
    if not flat or tree is None:
        return ()
    try:
        args_tree = tree.children()[0]  # in_tree is ((args...), {kwargs})
        counts = [c.num_leaves for c in args_tree.children()]
    except (AttributeError, IndexError):
        return ()
    if len(counts) != n_args:
        return ()
    donated, out, start = set(flat), [], 0
    for i, n in enumerate(counts):
        if n and all(k in donated for k in range(start, start + n)):
            out.append(i)
        start += n
    return tuple(out)


def runnable(step_fn: Callable, n_args: int | None = None) -> Callable:
    """The step as the planner runs it (numerics): a step with its own ``.trace`` (a
    ``jax.jit``-ed or ``nnx.jit``-ed step) as given, anything else jitted with its non-array
    leaves static (:class:`StaticLeavesJit`; an ``eqx.filter_jit`` step plans as it runs,
    with its donation when ``n_args`` is given)."""
    if hasattr(step_fn, "trace"):
        return step_fn
    donate = wrapper_donation(step_fn, n_args) if n_args is not None else ()
    return StaticLeavesJit(step_fn, donate)


def jit_trace(step_fn: Callable, args, regions: list | None = None):
    """``step_fn.trace(*args)`` where that is JAX's (a ``jax.jit``-ed step keeps its own
    options, donation included); else ``jax.jit(step_fn).trace(*args)`` with the non-array
    leaves of ``args`` static (:class:`StaticLeavesJit`). Duck-typed on the result: other
    wrappers have a ``.trace`` that is not JAX's (``flax.nnx.jit``'s returns an object
    without ``.jaxpr``), and those are traced as a plain function, which calls them (a
    PlanWarning where that drops the wrapper's donation or shardings). ``regions``: the
    controlled regions list, emptied before tracing again so each region is bound once. A
    ``.trace`` that raises is a :class:`TraceError` with the cause."""
    if not hasattr(step_fn, "trace"):
        return _plain_trace(step_fn, args)

    try:
        traced = step_fn.trace(*args)
    except PlannerError:
        raise
    except Exception as e:
        raise TraceError(
            f"Tracing the step with its own .trace ({type(step_fn).__module__}."
            f"{type(step_fn).__qualname__}.trace) failed with {type(e).__name__}: "
            f"{str(e)[:300]}\n"
            "Why: the planner traces a step that has a .trace method (jax.jit's, nnx.jit's) "
            "the way it runs: with that method, on the example arguments.\n"
            "Fix: check that step.trace(*example_args) (or step.lower) works on its own with "
            "these arguments, and pass arrays or jax.ShapeDtypeStruct of the shapes the step "
            "expects."
        ) from e
    if hasattr(traced, "jaxpr") and hasattr(traced, "lower"):
        return traced
    if regions is not None:
        del regions[:]
    donate = wrapper_donation(step_fn, len(args), traced)
    _warn_wrapper_options(step_fn, traced, donate)
    # A new trace-context value: the wrapper's inner jit traced above is cached under the
    # current one and would bind no region on the second trace.
    with _TRACE_EPOCH(("planner", next(_epochs))):
        return _plain_trace(step_fn, args, donate)


def _warn_wrapper_options(step_fn, traced, donate: tuple[int, ...]) -> None:
    """A PlanWarning where the plain trace of a wrapper drops what the wrapper was asked
    for: its donation where it does not map back onto whole positional arguments
    (:func:`wrapper_donation`; part of one argument donated) or its ``in_shardings`` /
    ``out_shardings``. The plan is then made from the step without them, on the arguments'
    own shardings."""
    dropped = []
    if getattr(traced, "donate_argnums", None) and not donate:
        dropped.append("donation (donate_argnums)")
    for name in ("in_shardings", "out_shardings"):
        if getattr(step_fn, name, None) is not None:
            dropped.append(name)
    if not dropped:
        return
    import warnings

    warnings.warn(
        f"The step's wrapper ({type(step_fn).__module__}.{type(step_fn).__qualname__}) has a "
        f".trace that is not jax.jit's, so the planner traced it as a plain function under "
        f"jax.jit, without the wrapper's {' and '.join(dropped)}: the plan is made from the "
        "step without them, on the example arguments' own shardings, and its compiled figures "
        "(aliasing, the optimizer state's placement) may differ from the step as it runs.\n"
        "Fix: plan the split/merge form under jax.jit with the same options, e.g. "
        "jax.jit(train_step, donate_argnums=0, in_shardings=..., out_shardings=...).",
        PlanWarning,
        stacklevel=4,
    )


def _plain_trace(step_fn: Callable, args, donate: tuple[int, ...] | None = None):
    if donate is None:
        donate = wrapper_donation(step_fn, len(args))
    try:
        traced = StaticLeavesJit(step_fn, donate).trace(*args)
    except PlannerError:
        raise
    except Exception as e:
        if not hasattr(step_fn, "trace"):
            raise
        raise TraceError(
            f"The step ({type(step_fn).__module__}.{type(step_fn).__qualname__}) could not be "
            f"traced: {type(e).__name__}: {str(e)[:300]}\n"
            "Why: it has a .trace method that is not jax.jit's (it returns no jaxpr), and "
            "wrapping it in jax.jit failed too; the planner needs the step's jaxpr.\n"
            + NOT_TRACEABLE_FIX
        ) from e
    return traced


# ------------------------------------------------------ the hooks of a deviceless compile

# JAX internal: jax/_src/cudnn/fused_attention_stablehlo.py (0.10.0 to 0.12.0.1).
# check_is_flash_attention calls these module globals to decide head-dim limits (128 below
# Hopper, 256 from 9.0), packed layouts, MLA and cc 10.3 rules; both ask the default backend
# (XLA:CPU here) and answer False. While a deviceless compile runs they answer for the target
# (xla/deviceless.py).
FUSED_ATTENTION = "jax._src.cudnn.fused_attention_stablehlo"
CAPABILITY_CHECKS = ("check_compute_capability", "is_cuda_compute_capability_equal")

# JAX internal: primitives whose parameters carry shardings or meshes of this machine's
# devices when the user's step names them (jax/_src/pjit.py sharding_constraint_p, from
# with_sharding_constraint; jax/_src/dispatch.py device_put_p, from jax.device_put inside a
# step; jax/_src/shard_map.py shard_map_p's mesh). Wrapping the instance's ``bind`` (as this
# module does for remat_p) lets the parameters be moved onto the target mesh.
SHARDING_PRIMITIVES = (
    ("jax._src.pjit", "sharding_constraint_p"),
    ("jax._src.dispatch", "device_put_p"),
    ("jax._src.shard_map", "shard_map_p"),
)

# JAX internal: jax.stages.Traced keeps the jit's own shardings in ``_params`` (jax/_src/
# stages.py, the same keys in JAX 0.10.2 and 0.12.0.1): a tuple per flattened argument /
# output, UnspecifiedValue where the user gave none; ``_lojax``, its low-level form, is
# derived from them.
TRACED_SHARDINGS = ("in_shardings", "out_shardings")


def internal(module: str, name: str):
    """A JAX internal of :data:`INTERNALS` this module patches, or a clear error naming what
    moved."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise RuntimeError(
            f"planner/_src/xla/adapter.py needs the JAX internal {module}.{name}, which JAX "
            f"{jax.__version__} does not have ({e}); see tests/test_adapter.py::"
            f"test_every_jax_internal_the_adapter_uses_is_there"
        ) from e


def patch_capability_checks(
    make_check: Callable[[str, Callable[[str], bool]], Callable[[str], bool]],
    undo: list[Callable[[], None]],
) -> None:
    """Replace each of JAX's cuDNN capability checks (:data:`CAPABILITY_CHECKS`) by
    ``make_check(name, original)``; ``undo`` receives, one per check replaced, the call that
    puts the original back."""
    fa = importlib.import_module(FUSED_ATTENTION)
    for name in CAPABILITY_CHECKS:
        original = internal(FUSED_ATTENTION, name)
        setattr(fa, name, make_check(name, original))
        undo.append(functools.partial(setattr, fa, name, original))


def patch_sharding_binds(
    make_bind: Callable[[Callable], Callable], undo: list[Callable[[], None]]
) -> None:
    """Wrap the ``bind`` of each primitive of :data:`SHARDING_PRIMITIVES` by
    ``make_bind(bind)``; ``undo`` receives, one per primitive, the call that restores it."""
    for module, name in SHARDING_PRIMITIVES:
        prim = internal(module, name)
        had = "bind" in vars(prim)
        before = vars(prim).get("bind")
        prim.bind = make_bind(prim.bind)
        undo.append(functools.partial(_restore_bind, prim, had, before))


def _restore_bind(prim, had: bool, before) -> None:
    if had:
        prim.bind = before
    else:
        del prim.bind


def traced_shardings(traced) -> dict[str, Any] | None:
    """The jit's own shardings of a ``jax.stages.Traced``, ``{key: value}`` for the keys of
    :data:`TRACED_SHARDINGS` it has; None where it keeps no ``_params``."""
    params = getattr(traced, "_params", None)
    if not isinstance(params, dict):
        return None
    return {k: params[k] for k in TRACED_SHARDINGS if k in params}


def with_traced_shardings(traced, moved: dict[str, Any]):
    """A copy of ``traced`` that lowers with the shardings ``moved`` (keys of
    :data:`TRACED_SHARDINGS`) in place of its own."""
    out = copy.copy(traced)
    out._params = {**traced._params, **moved}
    if hasattr(out, "_lojax"):
        out._lojax = None  # the low-level form is derived from _params: derive it again
    return out


def shape_dtype_struct(shape, dtype, *, host: bool = False, **kw):
    """``jax.ShapeDtypeStruct(shape, dtype, **kw)``; ``host``: its aval in host memory too
    (JAX internal: ShapeDtypeStruct's ``_memory_space``, JAX 0.11.2 and 0.12.0.1): JAX takes
    an array's memory space from its aval, not from a SingleDeviceSharding's memory kind. A
    JAX without the private argument gets the sharding's kind alone."""
    if host:
        try:
            return jax.ShapeDtypeStruct(shape, dtype, _memory_space=jax.memory.Space.Host, **kw)
        except TypeError:  # a JAX without the private argument: the kind alone
            pass
    return jax.ShapeDtypeStruct(shape, dtype, **kw)


# --------------------------------------------------------------------------- the guard

# Every JAX internal this module uses: (module, attribute). check_internals() names what a
# JAX upgrade moved, instead of failing somewhere inside a trace.
INTERNALS = (
    ("jax._src.ad_checkpoint", "remat_p"),
    ("jax._src.ad_checkpoint", "name_p"),
    ("jax._src.ad_checkpoint", "saved_residuals"),
    ("jax._src.core", "Var"),
    ("jax._src.core", "Jaxpr"),
    ("jax._src.core", "Literal"),
    ("jax._src.config", "string_or_object_state"),
    ("jax._src.source_info_util", "register_exclusion"),
    ("jax._src.source_info_util", "summarize"),
    ("jax._src.source_info_util", "current"),
    ("jax._src.source_info_util", "user_frames"),
    ("jax._src.source_info_util", "user_context"),
    ("jax._src.source_info_util", "NameStack"),
    ("jax._src.source_info_util", "Scope"),
    ("jax._src.interpreters.ad", "primitive_jvps"),
    ("jax._src.interpreters.ad", "jvp_jaxpr"),
    ("jax._src.interpreters.ad", "Zero"),
    ("jax._src.interpreters.partial_eval", "partial_eval_jaxpr_custom"),
    ("jax._src.interpreters.partial_eval", "partial_eval_jaxpr_custom_rules"),
    ("jax._src.interpreters.partial_eval", "dce_jaxpr"),
    ("jax._src.interpreters.partial_eval", "close_jaxpr"),
    ("jax._src.interpreters.partial_eval", "convert_constvars_jaxpr"),
    ("jax._src.interpreters.partial_eval", "Saveable"),
    ("jax._src.interpreters.partial_eval", "Recompute"),
    ("jax._src.interpreters.partial_eval", "Offloadable"),
    ("jax._src.interpreters.partial_eval", "SaveableType"),
    ("jax._src.interpreters.partial_eval", "RecomputeType"),
    ("jax", "enable_x64"),  # float64(): a public config context, checked as the others
    # axes_of(): the named-axis scope a region was bound in, entered again
    ("jax._src.core", "trace_ctx"),
    ("jax._src.config", "_check_vma"),
    ("jax._src.mesh", "get_abstract_mesh"),
    ("jax._src.mesh", "use_abstract_mesh"),
    # the class itself: jax.sharding's name for it warns of its deprecation from JAX 0.12.1
    ("jax._src.sharding_impls", "SingleDeviceSharding"),
    # the hooks of a deviceless compile (a dotted name: an attribute of an attribute)
    (FUSED_ATTENTION, "check_compute_capability"),
    (FUSED_ATTENTION, "is_cuda_compute_capability_equal"),
    (FUSED_ATTENTION, "check_is_flash_attention"),  # the caller of the two above
    ("jax._src.pjit", "sharding_constraint_p"),
    ("jax._src.dispatch", "device_put_p"),
    ("jax._src.shard_map", "shard_map_p"),
    ("jax._src.stages", "Traced._params"),
    ("jax._src.stages", "Traced._lojax"),
)

# Private keyword arguments used where the installed JAX takes them, with a fallback where it
# does not: (module, callable, keyword, the first JAX version that takes it).
INTERNAL_KEYWORDS = (("jax", "ShapeDtypeStruct", "_memory_space", "0.11.2"),)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def check_internals() -> list[str]:
    """The JAX internals of :data:`INTERNALS` missing from the installed JAX (empty: all
    there), each as ``module.attribute``, and the keywords of :data:`INTERNAL_KEYWORDS` a JAX
    of their version or later does not take, as ``module.callable(keyword=)``."""
    missing = []
    for mod, attr in INTERNALS:
        try:
            obj = importlib.import_module(mod)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            missing.append(f"{mod}.{attr}")
    for mod, name, keyword, since in INTERNAL_KEYWORDS:
        if _version(jax.__version__) < _version(since):
            continue
        try:
            fn = getattr(importlib.import_module(mod), name)
            takes = keyword in inspect.signature(fn).parameters
        except (ImportError, AttributeError, TypeError, ValueError):
            takes = False
        if not takes:
            missing.append(f"{mod}.{name}({keyword}=)")
    return missing


def decisions_of(step_fn: Callable, args, policy: Callable[..., Any]) -> dict[str, str]:
    """What ``policy`` decides for every equation JAX asks it about when the step is traced
    with it in every checkpoint region: policy signature -> ``save`` / ``remat`` /
    ``offload``. (How a user's or a stock policy is read: by the calls JAX makes.)"""
    seen: dict[str, str] = {}

    def make(rid, region):
        def decide(prim, *avals, **params):
            d = policy(prim, *avals, **params)
            seen[signature_key(prim, *avals, **params)] = decision_text(d)
            return Saveable if d is True else Recompute if d is False else d

        return decide

    trace_step_with(step_fn, args, make)
    return seen
