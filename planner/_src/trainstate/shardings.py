"""The shardings that place the train state: memory kind ``pinned_host`` for the leaves a
placement puts on the host, ``device`` for the others (state_shardings for the optimizer
state, param_shardings for the parameters).
"""

from __future__ import annotations

from typing import Any

from planner._src.trainstate.records import StatePlacement
from planner._src.xla import deviceless

__all__ = ["host_mask", "param_shardings", "state_shardings"]


def _paths(tree) -> list[str]:
    import jax

    return [jax.tree_util.keystr(k) for k, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def host_mask(tree, host) -> list[bool]:
    """Per leaf of ``tree``: on the host? ``host``: a predicate on the leaf's path, a set of
    paths, or True (every array leaf)."""
    paths = _paths(tree)
    if host is True:
        return [True] * len(paths)
    if callable(host):
        return [bool(host(p)) for p in paths]
    chosen = set(host)
    return [p in chosen for p in paths]


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
    :func:`streamed_update` needs to write it in place (xla.adapter.with_memory_kind; on a
    deviceless target's devices, which drop a host kind, xla.deviceless.with_memory_kind
    keeps it)."""
    import jax

    def one(x, host):
        base = getattr(x, "sharding", None) or device_sharding
        return deviceless.with_memory_kind(base, "pinned_host" if host else "device")

    return jax.tree.map(one, opt_state, _mask(opt_state, placement))


def param_shardings(params: Any, host, device_sharding: Any) -> Any:
    """Shardings for ``params`` (jit in / out shardings, ``jax.device_put``): the leaf's own
    sharding (or ``device_sharding``) with memory kind ``pinned_host`` where ``host`` (a set
    of paths in ``params``, or a predicate on them) selects it, ``device`` elsewhere (a
    ``SingleDeviceSharding`` as a one-device ``NamedSharding``: xla.adapter.with_memory_kind)."""
    import jax

    flat, tree = jax.tree_util.tree_flatten_with_path(params)
    mask = host_mask(params, host)
    out = []
    for (_, x), h in zip(flat, mask):
        base = getattr(x, "sharding", None) or device_sharding
        out.append(deviceless.with_memory_kind(base, "pinned_host" if h else "device"))
    return jax.tree.unflatten(tree, out)
