"""The streamed update: host leaves of the train state brought to HBM one layer slice at a
time inside the jitted step (streamed_update for optimizer state, streamed_apply where
parameters move too, streamed_apply_updates for an SGD-like update), and the hook that
brings a host parameter's slice in inside the checkpointed layer (stream_layer_params).

Parameters in pinned host memory (issue 21). A scanned model's stacked layer weights (``[L, ...]``)
may live in pinned host memory and still be read by the forward and the backward pass a layer at a
time: the layer's slice is brought to the device *inside* the checkpointed layer, so the backward
pass brings it in again (a recomputed value) instead of keeping L device copies as residuals.

    layer = planner.state.stream_layer_params(decoder_layer, host=lambda path: path != "['norm']")
    body = jax.checkpoint(layer, policy=plan.policy)          # the hook inside the checkpoint
    x, _ = jax.lax.scan(lambda x, w: (body(x, w), None), x, params["layers"])
    ...
    step = jax.jit(train_step, in_shardings=(param_shardings(params, host, dev), ...),
                   donate_argnums=(0, ...))
    # the update: planner.state.streamed_apply_updates(params, updates, host, layers)

What the compiler does (deviceless XLA:GPU for the H200, JAX 0.11.2 and 0.12.0.1; measured:
benchmarks/results/param-offload-probe-2026-12-04/): the stacked parameter is an ``S(5)``
entry parameter; each forward and backward trip of the ``while`` loop reads its slice with
an asynchronous ``dynamic-slice`` from host memory (``fusion-start`` / ``fusion-done``); the
compiled device bytes drop by exactly the parameter's bytes against the same program with the
parameter in HBM. The hook must sit inside ``jax.checkpoint``: without it (``device_put`` in
a plain scan body) XLA keeps every layer's device copy as a residual for the backward pass and
nothing is saved (the same device bytes as in HBM); ``jax.device_put`` of the whole leaf
before the scan (MaxText's ``parameter_memory_host_offload``) saves nothing at the peak either.

Checkpoint policies: the slice brought in is not a named value, so a policy that saves by
name (``save_only_these_names``, the planner's emitted policies) or saves dots' outputs
recomputes it; ``everything_saveable`` would save it (the L copies come back).

Gradients of a host parameter are on the host too: the transpose of ``device_put(w_l,
Device)`` puts the slice's cotangent back in host memory, so the backward scan writes the
gradient slice by slice to pinned host memory (its ys; the compile's host output or host
temporary), and neither the parameter nor its gradient holds HBM. The update must bring both
in per slice: :func:`streamed_apply_updates` does (SGD-like: ``p + scale * g``); an optax
update over a host gradient is not streamed yet (``streamed_update`` brings in the optimizer
state's slices, not the gradient's). A closed-over stacked parameter indexed in the body
(``dynamic_index(W, l)`` instead of scanning it as ``xs``) fails to differentiate: JAX's
scan transpose accumulates its cotangent in a device buffer and the host slice does not add
in (``memory_space of all inputs passed to dynamic_update_slice must be the same``); scan
it as ``xs``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from planner._src.errors import PlannerError, PlanWarning
from planner._src.trainstate.records import StatePlacement
from planner._src.trainstate.shardings import host_mask
from planner._src.xla import adapter

__all__ = ["stream_layer_params", "streamed_apply", "streamed_apply_updates", "streamed_update"]


def stream_layer_params(
    layer_fn: Callable, host: Callable[[str], bool] | Iterable[str] | bool = True, argnum: int = 1
) -> Callable:
    """``layer_fn`` with the leaves of its argument ``argnum`` (the layer's parameter slice,
    a pytree) that ``host`` selects brought to HBM first (``jax.device_put(w, Space.Device)``).
    ``host``: a predicate on the leaf's path inside that argument (``"['wq']"``), a set of
    such paths, or True for every leaf. Wrap *before* ``jax.checkpoint`` (module docstring)."""
    import jax

    def wrapped(*args, **kwargs):
        layer = args[argnum]
        leaves, tree = jax.tree.flatten(layer)
        mask = host_mask(layer, host)
        moved = [adapter.to_memory(x, "device") if m else x for x, m in zip(leaves, mask)]
        args = (*args[:argnum], jax.tree.unflatten(tree, moved), *args[argnum + 1 :])
        return layer_fn(*args, **kwargs)

    return wrapped


def streamed_apply_updates(params: Any, updates: Any, host, layers: int, scale=None) -> Any:
    """``optax.apply_updates(params, updates)`` (``p + u`` in ``p``'s dtype; ``p + scale * u``
    with ``scale``, e.g. SGD's ``-lr`` on the gradients) with the host leaves (``host``: paths
    in ``params`` or a predicate) updated one layer slice at a time: a stacked host leaf
    (leading axis ``layers``) under a ``lax.scan`` that brings the parameter's slice and the
    update's slice to HBM (the update of a host parameter may be on the host: its gradient
    is, module docstring) and puts the new slice back in pinned host memory (the scan's ys);
    an unstacked host leaf whole. The other leaves as optax does."""
    import jax
    import jax.numpy as jnp

    p, tree = jax.tree.flatten(params)
    u = jax.tree.leaves(updates)
    mask = host_mask(params, host)

    def add(a, b):
        b = b if scale is None else scale * b
        return jnp.asarray(a + b).astype(jnp.asarray(a).dtype)

    def one(x, d):
        dev = lambda v: adapter.to_memory(v, "device")  # noqa: E731
        return adapter.to_memory(add(dev(x), dev(d)), "pinned_host")

    out = []
    for x, d, h in zip(p, u, mask):
        if not h:
            out.append(add(x, d))
        elif getattr(x, "ndim", 0) >= 1 and layers > 1 and x.shape[0] == layers:
            _, new = jax.lax.scan(lambda c, xd: (c, one(*xd)), None, (x, d))
            out.append(new)
        else:
            out.append(one(x, d))
    return jax.tree.unflatten(tree, out)


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
    (which the backward pass left on the host slice by slice, module docstring); HBM gradients are
    read. The user's optimizer is called per slice with the other leaves empty, and once
    for every other leaf whole (the streamed ones empty; scalars such as Adam's ``count``
    whole in both, taken from the second): exact for updates elementwise per leaf (SGD,
    Adam, AdamW, Lion, ...), not for one reading across leaves (global-norm clipping); the
    numerics check says which. Memory per slice on the device: the parameter's, the
    gradient's, the new parameter's, and two per host state leaf (``U``: docs/cost-model.md#the-train-state).
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
