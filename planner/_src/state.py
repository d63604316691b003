"""The train state's placement: which optimizer-state leaves, and which stacked parameters,
live in pinned host memory.

Activations are not the only bytes a plan can move. With Adam the two f32 moments hold
twice the parameters' f32 bytes, and MaxText's ``optimizer_memory_host_offload`` moves all
of them or none, bringing the whole state back to HBM before the update. Here each
optimizer-state leaf, and each stacked parameter where the step streams it, is a decision
of the same CP-SAT model as the activations (solve.py, the block marked "train state"); a
leaf on the host is updated one layer slice at a time (:func:`streamed_update`, or
:func:`streamed_apply` where parameters move too), so the whole state never comes back at
once.

The leaves (:func:`state_leaves`): the pytrees the user names as the optimizer state and
the parameters (``plan_state(..., opt_state_argnum=, params_argnum=)``, state_plan.py),
flattened with JAX's tree paths (a placement names a leaf by :attr:`StateLeaf.key`: its
path, ``"params" + path`` for a parameter). Per leaf: per-device bytes (``size *
itemsize`` divided by its sharding's shard count), and its layer stacking: a leaf whose
leading axis is the scanned model's layer count ``L`` is *stacked* and is streamed one slice
(``b / L``) at a time; any other leaf is updated in one piece. Scalars (Adam's ``count``)
never move (a few bytes).

For an optimizer-state leaf ``i`` with ``h_i = 1`` (on the host), per step (``b_i`` its
bytes, ``n_i`` its slices: ``L`` when stacked, else 1; ``t_d2h``, ``t_h2d`` from
``cost_models.transfer_seconds``, the same calibrated link model as activation offload,
latency included per transfer):

* HBM: its bytes leave the fixed bytes ``F`` for the whole step: ``s_i = b_i``,
  ``F' = F - S`` with ``S = sum_i s_i h_i``.
* HBM during the update: the slices of every host leaf being updated at once are on the
  device, read in and written back: ``U_i = 2 b_i / n_i`` (the slice brought in, and its
  updated value before it is written back). The update runs after the backward pass has
  freed the activations, so the peak is ``max(F' + V + activation peak, F' + U)``.
* Host: ``b_i`` in pinned host memory, counted against the same host cap as offloaded
  activations. No host temporary: :func:`streamed_update` writes each new slice into the
  leaf's own (donated) buffer in place.
* Time: ``X_i = n_i (t_h2d(b_i / n_i) + t_d2h(b_i / n_i))``, all of it *exposed*: the
  update of one slice is a few elementwise passes over HBM, far shorter than the slice's
  copy over the host link (H200: 4.8 TB/s HBM against ~55 GB/s per direction), so there is
  no compute to hide the copies behind. This is conservative: XLA may overlap the copy of
  slice ``l + 1`` with the update of slice ``l``; a measurement on the GPU would show it.
* Bytes moved per step: ``2 b_i``.

For a stacked parameter ``i`` on the host (``plan_state(..., stream_params=True)``: the step
wraps its layer with :meth:`PlanState.stream_layer_params` inside ``jax.checkpoint``, so the
forward and the backward read one slice at a time from the host, params.py). What the
compiler does, read from deviceless XLA:GPU compiles of the Adam Llama step (measured:
benchmarks/results/param-state-probe-2026-12-04.md):

* HBM: the parameter leaves ``F`` and so does its gradient, which the backward pass writes
  to the host slice by slice (the transpose of the device_put): ``s_i = 2 b_i`` (the
  gradient has the parameter's dtype).
* HBM while the layers run: ``V_i = 3 b_i / L`` (:data:`INFLIGHT_SLICES`): the slice in use,
  the next one prefetched, the gradient slice before it goes out. It joins every region's
  peak: ``F' + V + residuals + working set``. Measured 2.88 slices for one leaf (2.50 on
  JAX 0.12.0.1) and 2.13 for three leaves together, so the sum over leaves is an upper bound.
* HBM during the update: the parameter's slice, its gradient's and the new slice:
  ``U_i = 3 b_i / L`` (with its moments' own ``U`` where they are on the host too).
* Host: ``b_i`` resident (the host arguments; host outputs the same), plus a host temporary
  of ``b_i``, the gradient (the new parameter is written in place into the donated buffer):
  ``b_i + b_i`` under the host cap, since both are in pinned host memory at the step's host
  peak (LeafCost.host_bytes + host_temp_bytes).
* Time: per slice, in for the forward, in again for the backward (the checkpointed layer
  recomputes from it), the gradient slice out, and for the update the parameter and the
  gradient in and the new parameter out: ``X_i = L (4 t_h2d(b_i / L) + 2 t_d2h(b_i / L))``,
  counted *exposed*. Conservative: the forward and backward copies can overlap the layer's
  compute (XLA issues them as asynchronous dynamic slices), but cost.py's hiding model
  prices a region's whole copy queue together (not additive per leaf, so not a linear term
  of the CP-SAT model); a copy that hides is time the plan did not promise. Where a
  parameter's moments are on the host too, :func:`streamed_apply` streams all of them in
  the same scan and each leaf's terms add.
* Bytes moved per step: ``6 b_i`` (parameter 4 b_i, gradient 2 b_i).

Parameters that are not stacked (the embedding, the final norm, the unembedding) stay in
HBM: one is used whole (not per layer), so on the host it would be brought in whole for
its use and its gradient with it, saving nothing at the peak of the pass that reads it
(MaxText's ``parameter_memory_host_offload``: the probe's ``host_whole`` saved 0 bytes).
Parameters move only with ``stream_params=True``: the planner cannot see whether the layer
function will be wrapped, and a host parameter read outside the checkpoint comes back whole.

Why per leaf and not per fraction of a leaf: the helper keeps the user's state tree as it is
(one array per leaf, one memory kind per array), so the placement the user applies is a
tree of shardings. A finer split would change the user's pytree.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import cost_models as cm
from planner._src.errors import PlannerError, PlanWarning
from planner._src.params import param_shardings, stream_layer_params
from planner._src.xla import adapter

PARAM_PREFIX = "params"

__all__ = [
    "BudgetPart",
    "LeafCost",
    "PlanState",
    "StateLeaf",
    "StatePlacement",
    "StateCheck",
    "StateTerms",
    "add_to_model",
    "budget_split",
    "check_compiled",
    "evaluate_state",
    "leaf_costs",
    "placement_of",
    "state_leaves",
    "state_shardings",
    "streamed_apply",
    "streamed_update",
    "with_state",
]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StateLeaf:
    """One leaf of the train state, as the trace sees it."""

    path: str  # jax.tree_util.keystr of the leaf inside the named state tree
    role: str  # "opt" (optimizer state) or "param"
    nbytes: int  # per device
    layers: int  # slices it is streamed in: the layer count when stacked, else 1
    shape: tuple[int, ...]
    dtype: str
    # A stacked parameter the step streams per layer slice (stream_layer_params inside the
    # checkpointed layer): the planning call said so (stream_params=True) and it is stacked.
    streamable: bool = False

    @property
    def key(self) -> str:
        """The leaf's name in a placement: its path for optimizer state, ``"params" + path``
        for a parameter (a keystr starts with ``[`` or ``.``, so the two never collide)."""
        return self.path if self.role == "opt" else PARAM_PREFIX + self.path

    @property
    def movable(self) -> bool:
        """May the solver place it on the host: an optimizer-state array (not a scalar), or a
        streamable stacked parameter (module docstring: why not the others)."""
        if self.role == "param":
            return self.streamable and self.layers > 1
        return len(self.shape) > 0


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LeafCost:
    """What placing one leaf on the host saves and costs per step (formulas: module doc)."""

    leaf: StateLeaf
    saved_bytes: int  # b_i (a parameter: b_i + its gradient's bytes)
    update_buffer_bytes: int  # U_i: 2 b_i / n_i (a parameter: 3 b_i / n_i)
    exposed_s: float  # X_i
    moved_bytes: int  # over the host link per step: 2 b_i (a parameter: 6 b_i)
    host_bytes: int = 0  # b_i, resident in pinned host memory between steps
    inflight_bytes: int = 0  # V_i: a parameter's slices on the device in its layers' passes
    # the step's host temporaries: a parameter's gradient, b_i, written to the host slice by
    # slice in the backward pass; a state leaf 0 (updated in place in its own buffer)
    host_temp_bytes: int = 0


# Slices of a streamed parameter on the device while its layer runs backward, counted from
# the compile (measured: benchmarks/results/param-state-probe-2026-12-04.md): the slice brought in,
# the next one prefetched, the gradient slice before it goes out. Measured 2.88 slices for
# one leaf alone (deviceless H200, JAX 0.11.2; 2.50 on 0.12.0.1) and 2.13 for three together
# (their slices are not all live at the peak): 3 per leaf is an upper bound, conservative
# for several leaves.
INFLIGHT_SLICES = 3


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StatePlacement:
    """The solver's answer for the train state: the paths of the leaves on the host."""

    leaves: tuple[StateLeaf, ...]
    on_host: frozenset[str]

    def host_bytes(self) -> int:
        """Bytes of the leaves on the host (what the step takes as host arguments)."""
        return sum(x.nbytes for x in self.leaves if x.key in self.on_host)

    def param_paths(self) -> frozenset[str]:
        """Paths (in the parameters' tree) of the parameters on the host."""
        return frozenset(x.path for x in self.leaves if x.role == "param" and x.key in self.on_host)

    def opt_paths(self) -> frozenset[str]:
        """Paths (in the optimizer state's tree) of the optimizer-state leaves on the host."""
        return frozenset(x.path for x in self.leaves if x.role == "opt" and x.key in self.on_host)


def _shard_count(x) -> int:
    sharding = getattr(x, "sharding", None)
    if sharding is None or not hasattr(sharding, "shard_shape"):
        return 1
    shard = sharding.shard_shape(tuple(x.shape))
    return max(1, math.prod(x.shape) // max(1, math.prod(shard)))


def state_leaves(
    opt_state: Any, *, layers: int, params: Any = None, stream_params: bool = False
) -> tuple[StateLeaf, ...]:
    """The leaves of ``opt_state`` (role ``opt``) and of ``params`` (role ``param``).

    ``layers``: the scanned model's layer count (the trace's region multiplicity); a leaf
    whose leading axis has that length is streamed per layer slice. ``stream_params``: the
    step streams its stacked parameters into the layers (``stream_layer_params``), so they
    may be placed on the host. Arrays or ``ShapeDtypeStruct``s; bytes are per device.
    """
    import jax
    import numpy as np

    if layers < 1:
        raise PlannerError(
            f"state_leaves got layers={layers}.\nWhy: the layer count is how many slices a "
            "stacked leaf is streamed in.\nFix: pass the scanned model's layer count (>= 1)."
        )
    out = []
    for role, tree in (("param", params), ("opt", opt_state)):
        if tree is None:
            continue
        for key, x in jax.tree_util.tree_flatten_with_path(tree)[0]:
            if not hasattr(x, "shape"):
                continue
            shape = tuple(int(d) for d in x.shape)
            nbytes = math.prod(shape) * np.dtype(x.dtype).itemsize // _shard_count(x)
            stacked = len(shape) >= 1 and shape[0] == layers and layers > 1
            out.append(
                StateLeaf(
                    path=jax.tree_util.keystr(key),
                    role=role,
                    nbytes=int(nbytes),
                    layers=layers if stacked else 1,
                    shape=shape,
                    dtype=str(np.dtype(x.dtype)),
                    streamable=role == "param" and stream_params and stacked,
                )
            )
    return tuple(out)


def leaf_costs(leaves: tuple[StateLeaf, ...], hardware) -> tuple[LeafCost, ...]:
    """:class:`LeafCost` of every movable leaf on ``hardware`` (a cost_models profile)."""
    out = []
    for leaf in leaves:
        if not leaf.movable:
            continue
        piece = math.ceil(leaf.nbytes / leaf.layers)
        h2d = cm.transfer_seconds(piece, hardware, "h2d")
        d2h = cm.transfer_seconds(piece, hardware, "d2h")
        if leaf.role == "param":
            # per slice: in for the forward, in again for the backward (the checkpointed
            # layer recomputes), its gradient out, and the update's parameter and gradient
            # in and new parameter out: 4 h2d + 2 d2h (the gradient has the param's dtype)
            out.append(
                LeafCost(
                    leaf=leaf,
                    saved_bytes=2 * leaf.nbytes,
                    update_buffer_bytes=3 * piece,
                    exposed_s=float(leaf.layers * (4 * h2d + 2 * d2h)),
                    moved_bytes=6 * leaf.nbytes,
                    host_bytes=leaf.nbytes,
                    inflight_bytes=INFLIGHT_SLICES * piece,
                    host_temp_bytes=leaf.nbytes,
                )
            )
            continue
        out.append(
            LeafCost(
                leaf=leaf,
                saved_bytes=leaf.nbytes,
                update_buffer_bytes=2 * piece,
                exposed_s=float(leaf.layers * (h2d + d2h)),
                moved_bytes=2 * leaf.nbytes,
                host_bytes=leaf.nbytes,
            )
        )
    return tuple(out)


def placement_of(
    leaves: tuple[StateLeaf, ...], on_host: frozenset[str] | set[str]
) -> StatePlacement:
    """A placement by leaf keys (:attr:`StateLeaf.key`: an optimizer-state leaf's path,
    ``"params" + path`` for a parameter); raises for a key that is not a movable leaf."""
    movable = {x.key for x in leaves if x.movable}
    bad = sorted(set(on_host) - movable)
    if bad:
        raise PlannerError(
            f"Cannot place {bad} on the host.\nWhy: only optimizer-state arrays and, where the "
            "step streams them (stream_params=True), stacked parameters move (scalars and "
            f"other parameters stay in HBM; see planner/_src/state.py).\nFix: pick keys among "
            f"{sorted(movable)}."
        )
    return StatePlacement(leaves=leaves, on_host=frozenset(on_host))


def _mask(opt_state: Any, placement: StatePlacement) -> Any:
    """A tree like ``opt_state`` of booleans: True where the leaf is on the host."""
    import jax

    flat, tree = jax.tree_util.tree_flatten_with_path(opt_state)
    return jax.tree.unflatten(tree, [jax.tree_util.keystr(k) in placement.on_host for k, _ in flat])


def state_shardings(opt_state: Any, placement: StatePlacement, device_sharding: Any) -> Any:
    """The shardings the user passes for ``opt_state`` (jit in / out shardings,
    ``jax.device_put``): ``device_sharding`` (or the leaf's own sharding) with memory kind
    ``pinned_host`` for the leaves on the host, ``device`` for the others.

    Create the state in them (``jax.jit(tx.init, out_shardings=state_shardings(...)) (params)``)
    rather than building it in HBM and moving it: a state built whole in HBM and then partly
    moved leaves HBM fragmented, so the plan's largest temporary can find no block under the
    budget (measured: ``benchmarks/results/h200-2026-12-04-state-offload.md``). A
    ``SingleDeviceSharding`` comes back as the same placement over a one-device mesh
    (``NamedSharding``): only then does JAX trace an array made in it as host memory, which
    :func:`streamed_update` needs to write it in place (xla.adapter.with_memory_kind)."""
    import jax

    def one(x, host):
        base = getattr(x, "sharding", None) or device_sharding
        return adapter.with_memory_kind(base, "pinned_host" if host else "device")

    return jax.tree.map(one, opt_state, _mask(opt_state, placement))


def _warn_copied_whole(paths: list[str]) -> None:
    """The host leaves a streamed update cannot write in place (their traced values are in
    device memory): a PlanWarning, since the step still runs, with the right numbers, but
    copies each such leaf whole from host to host every step."""
    if not paths:
        return
    import warnings

    shown = ", ".join(paths[:4]) + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")
    warnings.warn(
        PlanWarning(
            f"The streamed update copies {len(paths)} host leaves whole every step: {shown}.\n"
            "Why: the step traces them in device memory although the plan puts them in "
            "pinned host memory (placed without a NamedSharding, or not placed at all), so "
            "their new slices cannot be written into their own buffers; they "
            "go to a new host buffer that XLA copies into the output (on the H200 a 537 MB "
            "moment cost 105.7 ms a step this way against 20.2 ms in place; benchmarks/"
            "results/h200-2026-12-04-param-state.md). JAX records an array's host memory in "
            "its traced type only for a NamedSharding: an array made by jax.jit(..., "
            "out_shardings=SingleDeviceSharding(d, memory_kind='pinned_host')) traces as "
            "device memory (JAX 0.10.2 to 0.12.0.1).\nFix: create or place the state with "
            "plan.state.shardings / plan.state.param_shardings (NamedShardings: "
            "jax.jit(tx.init, out_shardings=...) or jax.device_put), or a NamedSharding of "
            "your own with memory_kind='pinned_host'."
        ),
        stacklevel=4,
    )


def _new_state(whole: list, carried: dict, ys: dict, on_host: list) -> list:
    """The new optimizer-state leaves of a streamed update: a streamed leaf as the scan left
    it (``carried``, written in place, or its ``ys``), any other from the update of the
    whole leaves (``whole``), put back in pinned host memory where ``on_host`` says (an
    unstacked host leaf: brought in whole for the update; scalars never move)."""
    return [
        carried[j]
        if j in carried
        else ys[j]
        if j in ys
        else (adapter.to_memory(x, "pinned_host") if on_host[j] and getattr(x, "ndim", 0) else x)
        for j, x in enumerate(whole)
    ]


def streamed_update(update: Callable, placement: StatePlacement, layers: int) -> Callable:
    """Wrap an optax ``update(grads, opt_state, params) -> (updates, opt_state)`` so that the
    optimizer-state leaves ``placement`` puts on the host are brought to HBM, updated and
    written back one layer slice at a time, inside the jitted step.

    The user's optimizer is called as it is, twice: once per layer slice inside a
    ``lax.scan`` over the layers, for the *streamed* parameters (a stacked parameter, leading
    axis ``layers``, with at least one stacked state leaf on the host; its state leaves are
    found by path: a state leaf belongs to the parameter whose path ends its own, as optax's
    ``mu['layers']['w1']`` belongs to ``['layers']['w1']``), the other leaves empty arrays;
    and once for all other leaves whole (the streamed ones empty). Scalars (Adam's ``count``)
    are passed whole to both calls and taken from the second. This is exact for optimizers
    whose update is elementwise per leaf (SGD, momentum, Adam, AdamW, Lion, ...); an update
    that reads across leaves (global-norm clipping) is not, and verify's numerics comparison
    says so.

    Memory: a host leaf's slice comes in through ``jax.device_put(slice, memory_kind=
    "device")`` and its new value goes back with ``"pinned_host"`` into the leaf's own host
    buffer (the scan carries it and overwrites slice ``l``: donated, in place), so one slice
    per host leaf is on the device at a time. (As the scan's ys, the new slices would go to
    a new host buffer that XLA then copies whole into the donated output, a host-to-host copy
    far slower than the link; measured: benchmarks/results/h200-2026-12-04-param-state.md.) Everything
    the scan writes in HBM is written in place: the updates over the gradients' buffer (the scan
    carries the gradients and overwrites slice ``l`` with its update), and a streamed
    parameter's state leaves that stay in HBM over their own buffers (donated). Passing every
    stacked leaf through the scan's inputs and outputs instead would hold a second copy of
    the whole HBM state and of the updates.
    """
    import jax
    import jax.numpy as jnp

    def stacked(x) -> bool:
        return hasattr(x, "ndim") and x.ndim >= 1 and layers > 1 and x.shape[0] == layers

    def empty(x):
        return jnp.zeros((0, *x.shape[1:]), x.dtype)

    def wrapped(grads, opt_state, params=None):
        gk, gtree = jax.tree_util.tree_flatten_with_path(grads)
        gpaths = [jax.tree_util.keystr(k) for k, _ in gk]
        g = [x for _, x in gk]
        sk, stree = jax.tree_util.tree_flatten_with_path(opt_state)
        spaths = [jax.tree_util.keystr(k) for k, _ in sk]
        s = [x for _, x in sk]
        p = None if params is None else jax.tree.leaves(params)
        if p is not None and len(p) != len(g):
            p = None  # not the gradients' structure: the optimizer is not given params

        def owner(path: str) -> int | None:  # the parameter a state leaf belongs to
            hits = [i for i, q in enumerate(gpaths) if q and path.endswith(q)]
            return max(hits, key=lambda i: len(gpaths[i])) if hits else None

        own = [owner(q) for q in spaths]
        on_host = [q in placement.on_host for q in spaths]
        streamed = sorted(
            {
                own[j]
                for j in range(len(s))
                if on_host[j] and stacked(s[j]) and own[j] is not None and stacked(g[own[j]])
            }
        )
        sset = set(streamed)
        s_str = [j for j in range(len(s)) if stacked(s[j]) and own[j] in sset]
        # Host leaves the trace sees in host memory are carried and written in place; one
        # whose traced value does not say so (a DUS needs one memory space) goes through
        # the scan's xs / ys instead (a new host buffer, copied whole into the output).
        s_host = [j for j in s_str if on_host[j]]
        s_hc = [j for j in s_host if adapter.memory_space_is_host(getattr(s[j], "aval", None))]
        s_hy = [j for j in s_host if j not in s_hc]
        _warn_copied_whole([spaths[j] for j in s_hy])
        s_dev = [j for j in s_str if not on_host[j]]  # carried, updated in place
        bare = lambda v: [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in v]  # noqa: E731
        upd_like = jax.eval_shape(  # the updates' dtypes (the memory kinds left out)
            lambda *a: update(*a)[0],
            jax.tree.unflatten(gtree, bare(g)),
            jax.tree.unflatten(stree, bare(s)),
            None if p is None else jax.tree.unflatten(gtree, bare(p)),
        )
        u_avals = jax.tree.leaves(upd_like)
        in_place = {i for i in streamed if u_avals[i].dtype == g[i].dtype}

        def call_tree(vals, sel, sliced):  # sliced leaves, scalars whole, the rest empty
            return [
                sliced[i] if i in sel else (x if getattr(x, "ndim", 0) == 0 else empty(x))
                for i, x in enumerate(vals)
            ]

        def body(carry, xs):
            gc, sc, uc = carry
            layer, sh = xs
            at = lambda x: jax.lax.dynamic_index_in_dim(x, layer, 0, keepdims=False)  # noqa: E731
            g_l = {i: at(gc[i]) for i in streamed}
            s_l = {j: at(sc[j]) for j in s_dev}
            s_l.update({j: adapter.to_memory(at(sc[j]), "device") for j in s_hc})
            s_l.update({j: adapter.to_memory(sh[j], "device") for j in s_hy})
            p_l = None if p is None else {i: at(p[i]) for i in streamed}
            u, ns = update(
                jax.tree.unflatten(gtree, call_tree(g, sset, g_l)),
                jax.tree.unflatten(stree, call_tree(s, set(s_str), s_l)),
                None if p is None else jax.tree.unflatten(gtree, call_tree(p, sset, p_l)),
            )
            u, ns = jax.tree.leaves(u), jax.tree.leaves(ns)
            put = lambda x, v: jax.lax.dynamic_update_index_in_dim(x, v, layer, 0)  # noqa: E731
            gc = {i: put(gc[i], u[i]) if i in in_place else gc[i] for i in streamed}
            uc = {i: put(uc[i], u[i]) for i in uc}
            sc = {
                **{j: put(sc[j], ns[j]) for j in s_dev},
                **{j: put(sc[j], adapter.to_memory(ns[j], "pinned_host")) for j in s_hc},
            }
            ys = {j: adapter.to_memory(ns[j], "pinned_host") for j in s_hy}
            return (gc, sc, uc), ys

        gc0 = {i: g[i] for i in streamed}
        sc0 = {j: s[j] for j in s_dev + s_hc}
        uc0 = {
            i: jnp.zeros(u_avals[i].shape, u_avals[i].dtype) for i in streamed if i not in in_place
        }
        xs = (jnp.arange(layers), {j: s[j] for j in s_hy})
        if streamed:
            (gc, sc, uc), ys = jax.lax.scan(body, (gc0, sc0, uc0), xs, length=layers)
        else:
            gc, sc, uc, ys = {}, {}, {}, {}
        # Everything else whole; an unstacked leaf on the host comes in whole and goes back.
        rest_s = [
            empty(x)
            if j in set(s_str)
            else (adapter.to_memory(x, "device") if on_host[j] and getattr(x, "ndim", 0) else x)
            for j, x in enumerate(s)
        ]
        rest_g = [empty(x) if i in sset else x for i, x in enumerate(g)]
        rest_p = None if p is None else [empty(x) if i in sset else x for i, x in enumerate(p)]
        u_rest, s_rest = update(
            jax.tree.unflatten(gtree, rest_g),
            jax.tree.unflatten(stree, rest_s),
            None if rest_p is None else jax.tree.unflatten(gtree, rest_p),
        )
        u_rest, s_rest = jax.tree.leaves(u_rest), jax.tree.leaves(s_rest)
        updates = [
            (gc[i] if i in in_place else uc[i]) if i in sset else u_rest[i] for i in range(len(g))
        ]
        new_s = _new_state(s_rest, sc, ys, on_host)
        return jax.tree.unflatten(jax.tree.structure(upd_like), updates), jax.tree.unflatten(
            stree, new_s
        )

    return wrapped


def streamed_apply(update: Callable, placement: StatePlacement, layers: int) -> Callable:
    """Wrap an optax ``update(grads, opt_state, params) -> (updates, opt_state)`` into
    ``apply(grads, opt_state, params) -> (new_params, new_opt_state)``: the update and
    ``optax.apply_updates`` (``p + u`` in ``p``'s dtype), with every leaf ``placement`` puts
    in pinned host memory (parameters, their gradients, optimizer state) brought to HBM,
    updated and written back one layer slice at a time, inside the jitted step. Use it in
    place of ``tx.update`` + ``optax.apply_updates`` where parameters are on the host; with
    the parameters all in HBM it gives :func:`streamed_update`'s numbers.

    Streamed: every stacked parameter (leading axis ``layers``) on the host or with a
    stacked optimizer-state leaf on the host (a state leaf belongs to the parameter whose
    path ends its own, as in :func:`streamed_update`). One ``lax.scan`` over the layers
    carries every leaf of a streamed parameter (the parameter and its state, on the host or
    in HBM) and overwrites slice ``l`` in place (donated); a host slice is brought in with
    ``jax.device_put(., Space.Device)`` and its new value put back with ``Space.Host`` into
    the same host buffer (not as the scan's ys: those are a new host buffer XLA copies whole
    into the donated output, see :func:`streamed_update`). Its xs are the host gradients
    (which the backward pass left on the host slice by slice, params.py); HBM gradients are
    read. The user's optimizer is called per slice with the other leaves empty, and once
    for every other leaf whole (the streamed ones empty; scalars such as Adam's ``count``
    whole in both, taken from the second): exact for updates elementwise per leaf (SGD,
    Adam, AdamW, Lion, ...), not for one reading across leaves (global-norm clipping); the
    numerics check says which. Memory per slice on the device: the parameter's, the
    gradient's, the new parameter's, and two per host state leaf (state.py's ``U``).
    """
    import jax
    import jax.numpy as jnp

    host_params = placement.param_paths()

    def stacked(x) -> bool:
        return hasattr(x, "ndim") and x.ndim >= 1 and layers > 1 and x.shape[0] == layers

    def empty(x):
        return jnp.zeros((0, *x.shape[1:]), x.dtype)

    def dev(x):
        return adapter.to_memory(x, "device")

    def host(x):
        return adapter.to_memory(x, "pinned_host")

    def add(p, u):  # optax.apply_updates, one leaf
        return jnp.asarray(p + u).astype(jnp.asarray(p).dtype)

    def wrapped(grads, opt_state, params):
        pk, ptree = jax.tree_util.tree_flatten_with_path(params)
        ppaths = [jax.tree_util.keystr(k) for k, _ in pk]
        p = [x for _, x in pk]
        g = jax.tree.leaves(grads)
        if len(g) != len(p):
            raise PlannerError(
                f"streamed_apply got {len(g)} gradient leaves for {len(p)} parameters.\nWhy: "
                "the gradients are the parameters' tree (jax.grad of the loss in params).\n"
                "Fix: call it as apply(grads, opt_state, params)."
            )
        sk, stree = jax.tree_util.tree_flatten_with_path(opt_state)
        spaths = [jax.tree_util.keystr(k) for k, _ in sk]
        s = [x for _, x in sk]

        def owner(path: str) -> int | None:  # the parameter a state leaf belongs to
            hits = [i for i, q in enumerate(ppaths) if q and path.endswith(q)]
            return max(hits, key=lambda i: len(ppaths[i])) if hits else None

        own = [owner(q) for q in spaths]
        p_host = [q in host_params and getattr(x, "ndim", 0) > 0 for q, x in zip(ppaths, p)]
        s_host = [q in placement.on_host and getattr(x, "ndim", 0) > 0 for q, x in zip(spaths, s)]
        streamed = sorted(
            {i for i in range(len(p)) if p_host[i] and stacked(p[i])}
            | {
                own[j]
                for j in range(len(s))
                if s_host[j] and stacked(s[j]) and own[j] is not None and stacked(p[own[j]])
            }
        )
        sset = set(streamed)
        s_str = [j for j in range(len(s)) if stacked(s[j]) and own[j] in sset]
        sstr = set(s_str)

        def call_tree(vals, sel, sliced):  # sliced leaves, scalars whole, the rest empty
            return [
                sliced[i] if i in sel else (x if getattr(x, "ndim", 0) == 0 else empty(x))
                for i, x in enumerate(vals)
            ]

        # Host leaves the trace sees in host memory are carried and written in place; one
        # whose traced value does not say so (a DUS needs one memory space) goes through the
        # scan's xs / ys (a new host buffer, copied whole into the output).
        def inplace(x) -> bool:
            return adapter.memory_space_is_host(getattr(x, "aval", None))

        p_hc = {i for i in streamed if p_host[i] and inplace(p[i])}
        s_hc = {j for j in s_str if s_host[j] and inplace(s[j])}
        _warn_copied_whole(
            [f"params{ppaths[i]}" for i in streamed if p_host[i] and i not in p_hc]
            + [spaths[j] for j in s_str if s_host[j] and j not in s_hc]
        )

        def body(carry, xs):
            pc, sc = carry
            layer, hp, hg, hs = xs
            at = lambda x: jax.lax.dynamic_index_in_dim(x, layer, 0, keepdims=False)  # noqa: E731
            p_l = {i: dev(hp[i]) if i in hp else at(pc[i]) for i in streamed}
            p_l.update({i: dev(at(pc[i])) for i in p_hc})
            g_l = {i: dev(hg[i]) if i in hg else at(g[i]) for i in streamed}
            s_l = {j: dev(hs[j]) if j in hs else at(sc[j]) for j in s_str}
            s_l.update({j: dev(at(sc[j])) for j in s_hc})
            u, ns = update(
                jax.tree.unflatten(ptree, call_tree(g, sset, g_l)),
                jax.tree.unflatten(stree, call_tree(s, sstr, s_l)),
                jax.tree.unflatten(ptree, call_tree(p, sset, p_l)),
            )
            u, ns = jax.tree.leaves(u), jax.tree.leaves(ns)
            new_p = {i: add(p_l[i], u[i]) for i in streamed}
            put = lambda x, v: jax.lax.dynamic_update_index_in_dim(x, v, layer, 0)  # noqa: E731
            pc = {i: put(pc[i], host(new_p[i]) if i in p_hc else new_p[i]) for i in pc}
            sc = {j: put(sc[j], host(ns[j]) if j in s_hc else ns[j]) for j in sc}
            ys = ({i: host(new_p[i]) for i in hp}, {j: host(ns[j]) for j in hs})
            return (pc, sc), ys

        if streamed:
            carry0 = (
                {i: p[i] for i in streamed if not p_host[i] or i in p_hc},
                {j: s[j] for j in s_str if not s_host[j] or j in s_hc},
            )
            xs = (
                jnp.arange(layers),
                {i: p[i] for i in streamed if p_host[i] and i not in p_hc},
                {i: g[i] for i in streamed if p_host[i]},
                {j: s[j] for j in s_str if s_host[j] and j not in s_hc},
            )
            (pc, sc), (yp, ys) = jax.lax.scan(body, carry0, xs, length=layers)
        else:
            pc, sc, yp, ys = {}, {}, {}, {}
        # Everything else whole; an unstacked host leaf comes in whole and goes back.
        rest_p = [empty(x) if i in sset else (dev(x) if p_host[i] else x) for i, x in enumerate(p)]
        rest_g = [empty(x) if i in sset else (dev(x) if p_host[i] else x) for i, x in enumerate(g)]
        rest_s = [empty(x) if j in sstr else (dev(x) if s_host[j] else x) for j, x in enumerate(s)]
        u_rest, s_rest = update(
            jax.tree.unflatten(ptree, rest_g),
            jax.tree.unflatten(stree, rest_s),
            jax.tree.unflatten(ptree, rest_p),
        )
        u_rest, s_rest = jax.tree.leaves(u_rest), jax.tree.leaves(s_rest)
        new_params = []
        for i in range(len(p)):
            if i in sset:
                new_params.append(yp[i] if i in yp else pc[i])
            else:
                v = add(rest_p[i], u_rest[i])
                new_params.append(host(v) if p_host[i] else v)
        new_s = _new_state(s_rest, sc, ys, s_host)
        return jax.tree.unflatten(ptree, new_params), jax.tree.unflatten(stree, new_s)

    return wrapped


def budget_split(
    leaves: tuple[StateLeaf, ...],
    placement: StatePlacement | None,
    *,
    activation_bytes: int,
    activation_host_bytes: int,
) -> dict[str, dict[str, int]]:
    """Bytes per part of the budget, in HBM and on the host, and what moves per step.

    Gradients: one per parameter, the parameter's bytes (the dtype JAX differentiates in),
    in HBM, or on the host where the parameter is (the backward pass writes a host
    parameter's gradient to the host slice by slice, params.py). Moved per step: an
    optimizer-state leaf on the host 2 b (in and out for its update); a parameter 4 b (in for
    the forward, again for the backward, in and out for the update) and its gradient 2 b
    (out in the backward, in for the update). Activations: the plan's residual peak on the
    device and its offloaded bytes on the host.
    """
    on_host = placement.on_host if placement else frozenset()
    split = {
        k: {"hbm": 0, "host": 0, "moved": 0}
        for k in ("parameters", "gradients", "optimizer state", "activations")
    }
    for x in leaves:
        host = x.key in on_host
        where = "host" if host else "hbm"
        if x.role == "param":
            split["parameters"][where] += x.nbytes
            split["gradients"][where] += x.nbytes
            if host:
                split["parameters"]["moved"] += 4 * x.nbytes
                split["gradients"]["moved"] += 2 * x.nbytes
        else:
            split["optimizer state"][where] += x.nbytes
            if host:
                split["optimizer state"]["moved"] += 2 * x.nbytes
    split["activations"]["hbm"] = int(activation_bytes)
    split["activations"]["host"] = int(activation_host_bytes)
    split["activations"]["moved"] = 2 * int(activation_host_bytes)
    return split


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StateTerms:
    """The sums of the module docstring's terms over the leaves on the host."""

    saved_bytes: int  # S = sum s_i h_i, out of F
    update_buffer_bytes: int  # U = sum U_i h_i
    host_bytes: int  # sum b_i h_i, in pinned host memory
    exposed_s: float  # sum X_i h_i
    moved_bytes: int  # per step over the host link
    inflight_bytes: int = 0  # V = sum V_i h_i, on the device while the layers run
    host_temp_bytes: int = 0  # the step's host temporaries (the compile's host temp)


def evaluate_state(costs: tuple[LeafCost, ...], on_host: frozenset[str]) -> StateTerms:
    """The terms for the leaves ``on_host`` (cost.evaluate adds them to its prediction)."""
    by_path = {c.leaf.key: c for c in costs}
    unknown = sorted(set(on_host) - set(by_path))
    if unknown:
        raise PlannerError(
            f"The plan puts {unknown} on the host, but the cost model has no such movable "
            "leaf.\nWhy: a placement is only priced for the optimizer-state leaves traced with "
            "this cost model.\nFix: plan and evaluate with the same Planner."
        )
    chosen = [by_path[p] for p in sorted(on_host)]
    return StateTerms(
        saved_bytes=sum(c.saved_bytes for c in chosen),
        update_buffer_bytes=sum(c.update_buffer_bytes for c in chosen),
        host_bytes=sum(c.host_bytes for c in chosen),
        exposed_s=sum(c.exposed_s for c in chosen),
        moved_bytes=sum(c.moved_bytes for c in chosen),
        inflight_bytes=sum(c.inflight_bytes for c in chosen),
        host_temp_bytes=sum(c.host_temp_bytes for c in chosen),
    )


def add_to_model(m, costs: tuple[LeafCost, ...], kib_up, ns):
    """The train state's variables in the CP-SAT model ``m`` (solve.py's block).

    Returns ``(on_host, saved_kib, buffer_kib, inflight_kib, host_kib, time_ns)``:
    ``on_host[key]`` is the 0/1 variable h_i (key: :attr:`StateLeaf.key`), and the others
    are linear expressions in them (the module docstring's sums S, U, V, host bytes, X;
    bytes in KiB rounded up as solve.py does, so the saving is rounded *down*).
    """
    on_host, saved, buf, inflight, host, t = {}, [], [], [], [], []
    for c in costs:
        h = m.NewBoolVar(f"state_on_host[{c.leaf.key}]")
        on_host[c.leaf.key] = h
        saved.append((c.saved_bytes // 1024) * h)  # down: a plan never saves more than it does
        buf.append(kib_up(c.update_buffer_bytes) * h)
        inflight.append(kib_up(c.inflight_bytes) * h)
        # resident between steps + written during the step (a host parameter's gradient):
        # both in pinned host memory at the step's host peak, under one cap
        host.append(kib_up(c.host_bytes + c.host_temp_bytes) * h)
        t.append(ns(c.exposed_s) * h)
    return on_host, sum(saved), sum(buf), sum(inflight), sum(host), sum(t)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StateCheck:
    """A compiled step against a placement: ``memory_analysis()`` per device."""

    device_bytes: int  # argument + output - alias + temp, in HBM
    device_argument_bytes: int
    host_argument_bytes: int
    host_temp_bytes: int
    planned_host_bytes: int  # placement.host_bytes()
    output_bytes: int = 0
    alias_bytes: int = 0
    temp_bytes: int = 0
    # None: a compiler that does not report host outputs (only the arguments are checked)
    host_output_bytes: int | None = None
    # the model's host temporaries of the placement (StateTerms.host_temp_bytes; the
    # compile's also hold offloaded activations): for the record, not checked
    planned_host_temp_bytes: int = 0
    # XLA:CPU (no host memory space): its figures keep the "host" leaves in its one memory
    # and add copies for their transfers, so they cannot show the placement's saving (the
    # Planner's CPU path records the compile, and does not hold it to the budget).
    estimated: bool = False

    @property
    def host_matches(self) -> bool:
        """The compiled step takes exactly the planned bytes as host arguments and, where the
        compiler reports host outputs, gives them back as host outputs."""
        # a step whose out-shardings forget pinned_host returns the state in HBM: 0 host
        # output bytes then, which is a mismatch, not a silence
        outputs_ok = self.host_output_bytes in (None, self.planned_host_bytes)
        return self.host_argument_bytes == self.planned_host_bytes and outputs_ok

    @property
    def status(self) -> str:
        """One line: do the compiled step's host bytes match the plan (or why it cannot say)."""
        if self.estimated or (self.host_argument_bytes == 0 and self.planned_host_bytes == 0):
            if self.planned_host_bytes:
                return (
                    "unverified: the compiler reports no host memory space (XLA:CPU); "
                    "XLA:GPU (deviceless too) checks the bytes"
                )
            return "nothing on the host: host bytes 0 as planned"
        if self.host_argument_bytes != self.planned_host_bytes:
            return (
                f"host bytes differ: the step takes {self.host_argument_bytes:,} bytes of host "
                f"arguments, the plan puts {self.planned_host_bytes:,} there"
            )
        if not self.host_matches:
            return (
                f"host bytes differ: the step gives back {self.host_output_bytes:,} bytes of "
                f"host outputs, the plan keeps {self.planned_host_bytes:,} there"
            )
        return (
            f"host bytes as planned: {self.host_argument_bytes:,} in, "
            f"{'unreported' if self.host_output_bytes is None else format(self.host_output_bytes, ',')}"
            f" out; device {self.device_bytes:,}"
        )


def _reported(m, name: str) -> int | None:
    value = getattr(m, name, None)
    return None if value is None else int(value)


def check_compiled(compiled, placement: StatePlacement, terms: StateTerms | None = None):
    """Read a compiled step's device and host bytes (``memory_analysis()``, per device)
    against ``placement`` (:attr:`StateCheck.status` says whether they match).

    Meaningful on a compiler with a host memory space (XLA:GPU, here or deviceless:
    target.py); XLA:CPU reports host arguments as device arguments and ``host_*`` as 0,
    so on CPU only the numerics and the outputs' memory kinds check a placement.
    """
    m = compiled.memory_analysis()
    return StateCheck(
        device_bytes=int(
            m.argument_size_in_bytes
            + m.output_size_in_bytes
            - m.alias_size_in_bytes
            + m.temp_size_in_bytes
        ),
        device_argument_bytes=int(m.argument_size_in_bytes),
        host_argument_bytes=int(getattr(m, "host_argument_size_in_bytes", 0) or 0),
        host_temp_bytes=int(getattr(m, "host_temp_size_in_bytes", 0) or 0),
        planned_host_bytes=placement.host_bytes(),
        output_bytes=int(m.output_size_in_bytes),
        alias_bytes=int(m.alias_size_in_bytes),
        temp_bytes=int(m.temp_size_in_bytes),
        host_output_bytes=_reported(m, "host_output_size_in_bytes"),
        planned_host_temp_bytes=terms.host_temp_bytes if terms is not None else 0,
    )


def with_state(cost, leaves: tuple[StateLeaf, ...]):
    """``cost`` (a CostModel) with the train state's leaves priced on its hardware, so that
    solve.solve_assignment decides their placement with the activations'."""
    return dataclasses.replace(cost, state=leaf_costs(leaves, cost.hardware))


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BudgetPart:
    """One row of the budget split (:func:`budget_split`), bytes per device."""

    part: str  # parameters, gradients, optimizer state, activations
    hbm_bytes: int
    host_bytes: int
    moved_bytes: int  # over the host link per step, both directions


def budget_parts(split: dict[str, dict[str, int]]) -> tuple[BudgetPart, ...]:
    """:func:`budget_split`'s dict as rows."""
    return tuple(
        BudgetPart(part=k, hbm_bytes=v["hbm"], host_bytes=v["host"], moved_bytes=v["moved"])
        for k, v in split.items()
    )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PlanState:
    """The train-state part of a plan (``plan.state``, where the plan was asked for with
    ``opt_state_argnum``): which optimizer-state leaves and (``stream_params``) stacked
    parameters live in pinned host memory, the budget split, and what to apply.

        shardings = plan.state.shardings(opt_state, device_sharding)        # memory kinds
        pshardings = plan.state.param_shardings(params, device_sharding)    # memory kinds
        layer = plan.state.stream_layer_params(decoder_layer)   # inside jax.checkpoint
        apply = plan.state.streamed_apply(tx.update)   # your optax update + apply_updates
        step = jax.jit(train_step_with(layer, apply),
                       in_shardings=(pshardings, shardings, ...),
                       out_shardings=(pshardings, shardings, ...), donate_argnums=(0, 1))
    """

    opt_state_argnum: int
    params_argnum: int | None
    layers: int  # the slices a stacked leaf is streamed in (the scanned layer count)
    placement: StatePlacement
    parts: tuple[BudgetPart, ...]
    terms: StateTerms  # what the leaves on the host save and cost (the model's)
    compiled: StateCheck | None = None  # the step as applied (build), when compiled
    # The traced step donates its optimizer state (the compiled anchor aliases at least the
    # state's bytes); False: the plan was made from an undonated step (a PlanWarning said so).
    donated: bool = True

    def shardings(self, opt_state: Any, device_sharding: Any) -> Any:
        """:func:`state_shardings` of ``opt_state`` under this placement."""
        return state_shardings(opt_state, self.placement, device_sharding)

    def param_shardings(self, params: Any, device_sharding: Any) -> Any:
        """``params.param_shardings``: memory kind ``pinned_host`` for the parameters on the
        host, ``device`` for the others."""
        return param_shardings(params, self.placement.param_paths(), device_sharding)

    def layer_paths(self, prefix: str = "['layers']") -> frozenset[str]:
        """The host parameters' paths inside one layer's slice: their paths in the
        parameters' tree less ``prefix``, the path of the stacked layer subtree the scan
        slices (``params["layers"]``: ``"['layers']"``)."""
        return frozenset(
            p[len(prefix) :] for p in self.placement.param_paths() if p.startswith(prefix)
        )

    def stream_layer_params(
        self, layer_fn: Callable, prefix: str = "['layers']", argnum: int = 1
    ) -> Callable:
        """``layer_fn`` with its host parameters brought to HBM a slice at a time
        (``params.stream_layer_params`` with :meth:`layer_paths`); wrap it *before*
        ``jax.checkpoint``. ``argnum``: the layer function's argument holding the slice."""
        return stream_layer_params(layer_fn, host=self.layer_paths(prefix), argnum=argnum)

    def streamed_update(self, update: Callable) -> Callable:
        """:func:`streamed_update` of ``update`` under this placement (parameters in HBM)."""
        if self.placement.param_paths():
            raise PlannerError(
                "plan.state.streamed_update returns updates for parameters in HBM, but this "
                f"plan puts {sorted(self.placement.param_paths())} on the host.\nWhy: a host "
                "parameter is updated slice by slice where it lives, so the update and the "
                "apply are one step.\nFix: params, opt_state = plan.state.streamed_apply("
                "tx.update)(grads, opt_state, params) in place of tx.update + "
                "optax.apply_updates."
            )
        return streamed_update(update, self.placement, self.layers)

    def streamed_apply(self, update: Callable) -> Callable:
        """:func:`streamed_apply` of ``update`` under this placement."""
        return streamed_apply(update, self.placement, self.layers)

    def host_paths(self) -> tuple[str, ...]:
        return tuple(sorted(self.placement.on_host))

    def snippet(self) -> str:
        """The code that applies the placement (the report's "state" snippet)."""
        o, p = self.opt_state_argnum, self.params_argnum
        donate = tuple(sorted({o} | ({p} if p is not None else set())))
        pl = self.placement
        if not pl.on_host:
            return (
                "# The whole train state stays in HBM: nothing to apply but donation:\n"
                f"step = jax.jit(train_step, donate_argnums={donate})\n"
            )
        opt = "\n".join(f"#   opt_state{x}" for x in sorted(pl.opt_paths()))
        head = f"# {len(pl.opt_paths())} optimizer-state leaves in pinned host memory"
        head += f":\n{opt}\n" if opt else "\n"
        if not pl.param_paths():
            return head + (
                "shardings = plan.state.shardings(opt_state, device_sharding)  # memory kinds\n"
                "opt_state = jax.device_put(opt_state, shardings)  # or create it there: "
                "jax.jit(tx.init, out_shardings=shardings)\n"
                f"update = plan.state.streamed_update(tx.update)  # per layer slice "
                f"({self.layers})\n"
                "# train_step calls update(grads, opt_state, params) in place of tx.update\n"
                f"step = jax.jit(train_step, in_shardings=(...),  # argument {o}: shardings\n"
                f"               out_shardings=(...),  # the new state: shardings\n"
                f"               donate_argnums={donate})\n"
            )
        params = "\n".join(f"#   params{x}" for x in sorted(pl.param_paths()))
        return head + (
            f"# {len(pl.param_paths())} stacked parameters in pinned host memory, streamed "
            f"per layer slice ({self.layers}), their gradients with them:\n{params}\n"
            "shardings = plan.state.shardings(opt_state, device_sharding)  # memory kinds\n"
            "pshardings = plan.state.param_shardings(params, device_sharding)\n"
            "params = jax.device_put(params, pshardings)\n"
            "opt_state = jax.device_put(opt_state, shardings)\n"
            "# the scanned layer, its host slices brought in inside the checkpoint:\n"
            "layer = jax.checkpoint(plan.state.stream_layer_params(layer_fn), "
            "policy=plan.policy)\n"
            "apply = plan.state.streamed_apply(tx.update)  # your optax update, per slice\n"
            "# train_step: params, opt_state = apply(grads, opt_state, params)\n"
            "#   in place of tx.update + optax.apply_updates\n"
            f"step = jax.jit(train_step, in_shardings=(...),  # argument {p}: pshardings, "
            f"{o}: shardings\n"
            "               out_shardings=(...),  # the new params and state: the same\n"
            f"               donate_argnums={donate})\n"
        )
