"""Parameters in pinned host memory, brought to HBM one layer slice at a time (issue 21).

A scanned model's stacked layer weights (``[L, ...]``) may live in pinned host memory and
still be read by the forward and the backward pass a layer at a time: the layer's slice is
brought to the device *inside* the checkpointed layer, so the backward pass brings it in
again (a recomputed value) instead of keeping L device copies as residuals.

    layer = planner.stream_layer_params(decoder_layer, host=lambda path: path != "['norm']")
    body = jax.checkpoint(layer, policy=plan.policy)          # the hook inside the checkpoint
    x, _ = jax.lax.scan(lambda x, w: (body(x, w), None), x, params["layers"])
    ...
    step = jax.jit(train_step, in_shardings=(param_shardings(params, host, dev), ...),
                   donate_argnums=(0, ...))
    # the update: planner.streamed_apply_updates(params, updates, host, layers)

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

from planner._src.xla import adapter

__all__ = ["param_shardings", "stream_layer_params", "streamed_apply_updates"]


def _paths(tree) -> list[str]:
    import jax

    return [jax.tree_util.keystr(k) for k, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def _host_mask(tree, host) -> list[bool]:
    """Per leaf of ``tree``: on the host? ``host``: a predicate on the leaf's path, a set of
    paths, or True (every array leaf)."""
    paths = _paths(tree)
    if host is True:
        return [True] * len(paths)
    if callable(host):
        return [bool(host(p)) for p in paths]
    chosen = set(host)
    return [p in chosen for p in paths]


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
        mask = _host_mask(layer, host)
        moved = [adapter.to_memory(x, "device") if m else x for x, m in zip(leaves, mask)]
        args = (*args[:argnum], jax.tree.unflatten(tree, moved), *args[argnum + 1 :])
        return layer_fn(*args, **kwargs)

    return wrapped


def param_shardings(params: Any, host, device_sharding: Any) -> Any:
    """Shardings for ``params`` (jit in / out shardings, ``jax.device_put``): the leaf's own
    sharding (or ``device_sharding``) with memory kind ``pinned_host`` where ``host`` (a set
    of paths in ``params``, or a predicate on them) selects it, ``device`` elsewhere (a
    ``SingleDeviceSharding`` as a one-device ``NamedSharding``: xla.adapter.with_memory_kind)."""
    import jax

    flat, tree = jax.tree_util.tree_flatten_with_path(params)
    mask = _host_mask(params, host)
    out = []
    for (_, x), h in zip(flat, mask):
        base = getattr(x, "sharding", None) or device_sharding
        out.append(adapter.with_memory_kind(base, "pinned_host" if h else "device"))
    return jax.tree.unflatten(tree, out)


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
    mask = _host_mask(params, host)

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
