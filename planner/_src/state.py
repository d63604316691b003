"""The train state's placement: which optimizer-state leaves live in pinned host memory.

Activations are not the only bytes a plan can move. With Adam the two f32 moments hold
twice the parameters' f32 bytes, and MaxText's ``optimizer_memory_host_offload`` moves all
of them or none, bringing the whole state back to HBM before the update. Here each
optimizer-state leaf is a decision of the same CP-SAT model as the activations
(solve.py, the block marked "train state"), and a leaf on the host is updated one layer
slice at a time (:func:`streamed_update`), so the whole state never comes back at once.

The leaves (:func:`state_leaves`): the pytree the user names as the optimizer state
(``plan_state(..., opt_state_argnum=)``, state_plan.py), flattened with JAX's tree paths. Per leaf: per-device bytes (``size * itemsize`` divided by its sharding's
shard count), and its layer stacking: a leaf whose leading axis is the scanned model's
layer count ``L`` is *stacked* and is streamed one slice (``nbytes / L``) at a time; any
other leaf is updated in one piece. Scalars (Adam's ``count``) never move (a few bytes).

For a leaf ``i`` with ``h_i = 1`` (on the host), per step (``b_i`` its bytes, ``n_i`` its
slices: ``L`` when stacked, else 1; ``t_d2h``, ``t_h2d`` from ``cost_models.transfer_seconds``,
the same calibrated link model as activation offload, latency included per transfer):

* HBM: its bytes leave the fixed bytes ``F`` for the whole step: ``F' = F - sum_i b_i h_i``.
* HBM during the update: the slices of every host leaf being updated at once are on the
  device, read in and written back: ``U = sum_i 2 (b_i / n_i) h_i`` (the slice brought in,
  and its updated value before it is written back). The update runs after the backward
  pass has freed the activations, so the peak is ``max(F' + activation peak, F' + U)``.
* Host: ``b_i`` in pinned host memory, counted against the same host cap as offloaded
  activations.
* Time: ``X_i = n_i (t_h2d(b_i / n_i) + t_d2h(b_i / n_i))``, all of it *exposed*: the
  update of one slice is a few elementwise passes over HBM, far shorter than the slice's
  copy over the host link (H200: 4.8 TB/s HBM against ~55 GB/s per direction), so there is
  no compute to hide the copies behind. This is conservative: XLA may overlap the copy of
  slice ``l + 1`` with the update of slice ``l``; a measurement on the GPU would show it.
* Bytes moved per step: ``2 b_i``.

Parameters are recorded and reported (role ``param``) but stay in HBM in this version: a
parameter on the host is read by the forward and backward pass of its layer, which brings
the whole stacked leaf to the device unless the layer loop itself reads its slice from the
host (a change to the model's scan), so its cost is not the update's alone.

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
from planner._src.errors import PlannerError

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
    saved_bytes: int  # b_i
    update_buffer_bytes: int  # 2 b_i / n_i
    exposed_s: float  # X_i
    moved_bytes: int  # 2 b_i over the host link


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
        return frozenset(
            x.path for x in self.leaves if x.role == "param" and x.key in self.on_host
        )

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
        x = leaf.layers * (
            cm.transfer_seconds(piece, hardware, "h2d")
            + cm.transfer_seconds(piece, hardware, "d2h")
        )
        out.append(
            LeafCost(
                leaf=leaf,
                saved_bytes=leaf.nbytes,
                update_buffer_bytes=2 * piece,
                exposed_s=float(x),
                moved_bytes=2 * leaf.nbytes,
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

    Create the state in them (``jax.jit(tx.init, out_shardings=state_shardings(...))
    (params)``) rather than building it in HBM and moving it: on the H200 (2026-12-04) a
    state built whole in HBM and then half moved left HBM fragmented, and the plan's largest
    temporary found no block under the budget (``benchmarks/results/
    h200-2026-12-04-state-offload.md``)."""
    import jax

    def one(x, host):
        base = getattr(x, "sharding", None) or device_sharding
        return base.with_memory_kind("pinned_host" if host else "device")

    return jax.tree.map(one, opt_state, _mask(opt_state, placement))


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
    "device")`` and its new value goes back with ``"pinned_host"`` (the scan's output, a new
    host buffer), so one slice per host leaf is on the device at a time. Everything the
    scan writes in HBM is written in place: the updates over the gradients' buffer (the scan
    carries the gradients and overwrites slice ``l`` with its update), and a streamed
    parameter's state leaves that stay in HBM over their own buffers (donated). An earlier
    version passed every stacked leaf through the scan's inputs and outputs, which held a
    second copy of the whole HBM state and of the updates (+41 GB compiled on a 7.2 B Adam
    step, 2026-12-04: the 36 GiB temporary of the H200 run).
    """
    import jax
    import jax.numpy as jnp

    from planner._src import jax_adapter as adapter

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
        s_host = [j for j in s_str if on_host[j]]  # the scan's xs / ys (host buffers)
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
            s_l.update({j: adapter.to_memory(sh[j], "device") for j in s_host})
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
            sc = {j: put(sc[j], ns[j]) for j in s_dev}
            ys = {j: adapter.to_memory(ns[j], "pinned_host") for j in s_host}
            return (gc, sc, uc), ys

        gc0 = {i: g[i] for i in streamed}
        sc0 = {j: s[j] for j in s_dev}
        uc0 = {
            i: jnp.zeros(u_avals[i].shape, u_avals[i].dtype) for i in streamed if i not in in_place
        }
        xs = (jnp.arange(layers), {j: s[j] for j in s_host})
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
        new_s = []
        for j, x in enumerate(s_rest):
            if j in sc:
                new_s.append(sc[j])
            elif j in ys:
                new_s.append(ys[j])
            elif on_host[j] and getattr(x, "ndim", 0):
                new_s.append(adapter.to_memory(x, "pinned_host"))
            else:
                new_s.append(x)
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
    path ends its own, as in :func:`streamed_update`). One ``lax.scan`` over the layers: its
    xs are the host leaves (parameter, its gradient, which the backward pass left on the host
    slice by slice, params.py, and host state), each slice brought in with
    ``jax.device_put(., Space.Device)``; its ys the new host slices, put back with
    ``Space.Host`` (new host buffers). HBM leaves of a streamed parameter (the parameter,
    its state) are carried and overwritten slice by slice in place (donated); HBM gradients
    are read. The user's optimizer is called per slice with the other leaves empty, and once
    for every other leaf whole (the streamed ones empty; scalars such as Adam's ``count``
    whole in both, taken from the second): exact for updates elementwise per leaf (SGD,
    Adam, AdamW, Lion, ...), not for one reading across leaves (global-norm clipping); the
    numerics check says which. Memory per slice on the device: the parameter's, the
    gradient's, the new parameter's, and two per host state leaf (state.py's ``U``).
    """
    import jax
    import jax.numpy as jnp

    from planner._src import jax_adapter as adapter

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

        def body(carry, xs):
            pc, sc = carry
            layer, hp, hg, hs = xs
            at = lambda x: jax.lax.dynamic_index_in_dim(x, layer, 0, keepdims=False)  # noqa: E731
            p_l = {i: dev(hp[i]) if i in hp else at(pc[i]) for i in streamed}
            g_l = {i: dev(hg[i]) if i in hg else at(g[i]) for i in streamed}
            s_l = {j: dev(hs[j]) if j in hs else at(sc[j]) for j in s_str}
            u, ns = update(
                jax.tree.unflatten(ptree, call_tree(g, sset, g_l)),
                jax.tree.unflatten(stree, call_tree(s, sstr, s_l)),
                jax.tree.unflatten(ptree, call_tree(p, sset, p_l)),
            )
            u, ns = jax.tree.leaves(u), jax.tree.leaves(ns)
            new_p = {i: add(p_l[i], u[i]) for i in streamed}
            put = lambda x, v: jax.lax.dynamic_update_index_in_dim(x, v, layer, 0)  # noqa: E731
            pc = {i: put(pc[i], new_p[i]) for i in pc}
            sc = {j: put(sc[j], ns[j]) for j in sc}
            ys = ({i: host(new_p[i]) for i in hp}, {j: host(ns[j]) for j in hs})
            return (pc, sc), ys

        if streamed:
            carry0 = (
                {i: p[i] for i in streamed if not p_host[i]},
                {j: s[j] for j in s_str if not s_host[j]},
            )
            xs = (
                jnp.arange(layers),
                {i: p[i] for i in streamed if p_host[i]},
                {i: g[i] for i in streamed if p_host[i]},
                {j: s[j] for j in s_str if s_host[j]},
            )
            (pc, sc), (yp, ys) = jax.lax.scan(body, carry0, xs, length=layers)
        else:
            pc, sc, yp, ys = {}, {}, {}, {}
        # Everything else whole; an unstacked host leaf comes in whole and goes back.
        rest_p = [empty(x) if i in sset else (dev(x) if p_host[i] else x) for i, x in enumerate(p)]
        rest_g = [empty(x) if i in sset else (dev(x) if p_host[i] else x) for i, x in enumerate(g)]
        rest_s = [
            empty(x) if j in sstr else (dev(x) if s_host[j] else x) for j, x in enumerate(s)
        ]
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
        new_s = []
        for j, x in enumerate(s_rest):
            if j in sc:
                new_s.append(sc[j])
            elif j in ys:
                new_s.append(ys[j])
            else:
                new_s.append(host(x) if s_host[j] else x)
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

    Gradients: one per parameter, the parameter's bytes (the dtype JAX differentiates in), in
    HBM (they are produced and consumed inside the step). Activations: the plan's residual
    peak on the device and its offloaded bytes on the host.
    """
    on_host = placement.on_host if placement else frozenset()
    split = {
        k: {"hbm": 0, "host": 0, "moved": 0}
        for k in ("parameters", "gradients", "optimizer state", "activations")
    }
    for x in leaves:
        part = "parameters" if x.role == "param" else "optimizer state"
        where = "host" if x.path in on_host else "hbm"
        split[part][where] += x.nbytes
        if x.path in on_host:
            split[part]["moved"] += 2 * x.nbytes
        if x.role == "param":
            split["gradients"]["hbm"] += x.nbytes
    split["activations"]["hbm"] = int(activation_bytes)
    split["activations"]["host"] = int(activation_host_bytes)
    split["activations"]["moved"] = 2 * int(activation_host_bytes)
    return split


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StateTerms:
    """The sums of the module docstring's terms over the leaves on the host."""

    saved_bytes: int  # sum b_i h_i, out of F
    update_buffer_bytes: int  # U = sum 2 b_i / n_i h_i
    host_bytes: int  # sum b_i h_i, in pinned host memory
    exposed_s: float  # sum X_i h_i
    moved_bytes: int  # sum 2 b_i h_i per step


def evaluate_state(costs: tuple[LeafCost, ...], on_host: frozenset[str]) -> StateTerms:
    """The terms for the leaves ``on_host`` (cost.evaluate adds them to its prediction)."""
    by_path = {c.leaf.path: c for c in costs}
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
        host_bytes=sum(c.saved_bytes for c in chosen),
        exposed_s=sum(c.exposed_s for c in chosen),
        moved_bytes=sum(c.moved_bytes for c in chosen),
    )


def add_to_model(m, costs: tuple[LeafCost, ...], kib_up, ns):
    """The train state's variables in the CP-SAT model ``m`` (solve.py's block).

    Returns ``(on_host, saved_kib, buffer_kib, host_kib, time_ns)``: ``on_host[path]`` is the
    0/1 variable h_i, and the others are linear expressions in them (the module docstring's
    sums, bytes in KiB rounded up as solve.py does, so the saving is rounded *down*).
    """
    on_host, saved, buf, host, t = {}, [], [], [], []
    for c in costs:
        h = m.NewBoolVar(f"state_on_host[{c.leaf.path}]")
        on_host[c.leaf.path] = h
        saved.append((c.saved_bytes // 1024) * h)  # down: a plan never saves more than it does
        buf.append(kib_up(c.update_buffer_bytes) * h)
        host.append(kib_up(c.saved_bytes) * h)
        t.append(ns(c.exposed_s) * h)
    return on_host, sum(saved), sum(buf), sum(host), sum(t)


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
    # XLA:CPU (no host memory space): its figures keep the "host" leaves in its one memory
    # and add copies for their transfers, so they cannot show the placement's saving (the
    # Planner's CPU path records the compile, and does not hold it to the budget).
    estimated: bool = False

    @property
    def host_matches(self) -> bool:
        """The compiled step takes exactly the planned bytes as host arguments."""
        return self.host_argument_bytes == self.planned_host_bytes


def check_compiled(compiled, placement: StatePlacement) -> StateCheck:
    """Read a compiled step's device and host bytes (``memory_analysis()``, per device).

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
    ``opt_state_argnum``): which optimizer-state leaves live in pinned host memory, the
    budget split, and what to apply.

        shardings = plan.state.shardings(opt_state, device_sharding)   # memory kinds
        update = plan.state.streamed_update(tx.update)                 # your optax update
        step = jax.jit(train_step_with(update), in_shardings=(..., shardings, ...),
                       out_shardings=(..., shardings, ...), donate_argnums=(0, 1))
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

    def streamed_update(self, update: Callable) -> Callable:
        """:func:`streamed_update` of ``update`` under this placement."""
        return streamed_update(update, self.placement, self.layers)

    def host_paths(self) -> tuple[str, ...]:
        return tuple(sorted(self.placement.on_host))

    def snippet(self) -> str:
        """The code that applies the placement (the report's "state" snippet)."""
        o, p = self.opt_state_argnum, self.params_argnum
        donate = tuple(sorted({o} | ({p} if p is not None else set())))
        if not self.placement.on_host:
            return (
                "# The whole optimizer state stays in HBM: nothing to apply but donation:\n"
                f"step = jax.jit(train_step, donate_argnums={donate})\n"
            )
        paths = "\n".join(f"#   opt_state{x}" for x in self.host_paths())
        return (
            f"# {len(self.placement.on_host)} optimizer-state leaves in pinned host memory:\n"
            f"{paths}\n"
            "shardings = plan.state.shardings(opt_state, device_sharding)  # memory kinds\n"
            "opt_state = jax.device_put(opt_state, shardings)  # or create it there: "
            "jax.jit(tx.init, out_shardings=shardings)\n"
            f"update = plan.state.streamed_update(tx.update)  # per layer slice ({self.layers})\n"
            "# train_step calls update(grads, opt_state, params) in place of tx.update\n"
            f"step = jax.jit(train_step, in_shardings=(...),  # argument {o}: shardings\n"
            f"               out_shardings=(...),  # the new state: shardings\n"
            f"               donate_argnums={donate})\n"
        )
