"""The train state's records: its leaves (state_leaves), a placement of them on the host
(StatePlacement, placement_of), the sums of what a placement saves and costs (StateTerms),
and the budget split (budget_split, BudgetPart).

The leaves are the pytrees the user names as the optimizer state and the parameters
(``plan_state(..., opt_state_argnum=, params_argnum=)``), flattened with JAX's tree paths; a
placement names a leaf by :attr:`StateLeaf.key`. Which leaves may move, and the formulas of
their terms (priced by cost/state.py): docs/cost-model.md#the-train-state.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from planner._src.errors import PlannerError

PARAM_PREFIX = "params"

__all__ = [
    "PARAM_PREFIX",
    "BudgetPart",
    "StateLeaf",
    "StateApply",
    "StatePlacement",
    "StateTerms",
    "budget_parts",
    "budget_split",
    "leaves_of",
    "placement_of",
    "state_leaves",
    "under",
]


def under(path: str, prefix: str) -> bool:
    """Whether ``path`` (a keystr) is ``prefix`` or inside it (a keystr's keys start with
    ``[`` or ``.``, so ``"[0].opt"`` does not contain ``"[0].opt_state"``)."""
    return path.startswith(prefix) and (len(path) == len(prefix) or path[len(prefix)] in "[.")


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
        streamable stacked parameter (docs/cost-model.md#the-train-state: why not the others)."""
        if self.role == "param":
            return self.streamable and self.layers > 1
        return len(self.shape) > 0


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

    pairs = {
        role: [
            (jax.tree_util.keystr(k), x)
            for k, x in jax.tree_util.tree_flatten_with_path(tree)[0]
            if hasattr(x, "shape")
        ]
        for role, tree in (("param", params), ("opt", opt_state))
        if tree is not None
    }
    return leaves_of(
        pairs.get("opt", []), pairs.get("param"), layers=layers, stream_params=stream_params
    )


def leaves_of(
    opt_pairs, param_pairs=None, *, layers: int, stream_params: bool = False
) -> tuple[StateLeaf, ...]:
    """:func:`state_leaves` from ``(path, array)`` pairs: the leaves of the optimizer state
    and of the parameters with their paths inside each tree (trainstate.select.subtree)."""
    import numpy as np

    if layers < 1:
        raise PlannerError(
            f"state_leaves got layers={layers}.\nWhy: the layer count is how many slices a "
            "stacked leaf is streamed in.\nFix: pass the scanned model's layer count (>= 1)."
        )
    out = []
    for role, pairs in (("param", param_pairs), ("opt", opt_pairs)):
        for path, x in pairs or ():
            shape = tuple(int(d) for d in x.shape)
            nbytes = math.prod(shape) * np.dtype(x.dtype).itemsize // _shard_count(x)
            stacked = len(shape) >= 1 and shape[0] == layers and layers > 1
            out.append(
                StateLeaf(
                    path=path,
                    role=role,
                    nbytes=int(nbytes),
                    layers=layers if stacked else 1,
                    shape=shape,
                    dtype=str(np.dtype(x.dtype)),
                    streamable=role == "param" and stream_params and stacked,
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
            f"other parameters stay in HBM; see docs/cost-model.md#the-train-state).\nFix: pick keys among "
            f"{sorted(movable)}."
        )
    return StatePlacement(leaves=leaves, on_host=frozenset(on_host))


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StateTerms:
    """The sums of the train state's terms (docs/cost-model.md#the-train-state) over the
    leaves on the host."""

    saved_bytes: int  # S = sum s_i h_i, out of F
    update_buffer_bytes: int  # U = sum U_i h_i
    host_bytes: int  # sum b_i h_i, in pinned host memory
    exposed_s: float  # sum X_i h_i
    moved_bytes: int  # per step over the host link
    inflight_bytes: int = 0  # V = sum V_i h_i, on the device while the layers run
    host_temp_bytes: int = 0  # the step's host temporaries (the compile's host temp)


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
    parameter's gradient to the host slice by slice, trainstate/streamed.py). Moved per step: an
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
class StateApply:
    """How a plan's train-state placement is applied (what a plan file records of it):
    where the optimizer state and the parameters are in the arguments (keystr paths), the
    Flax ``TrainState`` holding them (None: none does), the leaves on the host (keys as in
    a placement), the layer count a stacked leaf is streamed in, and the mode (module
    docstring; ``"build"``: the user's ``build`` applies it)."""

    opt_path: str
    params_path: str | None
    container: str | None
    on_host: frozenset[str]
    layers: int
    mode: str
    mode_why: str = ""

    def opt_keys(self) -> frozenset[str]:
        return frozenset(k for k in self.on_host if not k.startswith(PARAM_PREFIX))

    def param_keys(self) -> frozenset[str]:
        return frozenset(k[len(PARAM_PREFIX) :] for k in self.on_host if k.startswith(PARAM_PREFIX))

    def host_leaf(self, path: str) -> bool:
        """Whether the argument leaf at ``path`` (a keystr into the arguments) is on the host."""
        if under(path, self.opt_path) and path[len(self.opt_path) :] in self.opt_keys():
            return True
        p = self.params_path
        return p is not None and under(path, p) and path[len(p) :] in self.param_keys()

    def argnums(self) -> tuple[int, ...]:
        out = set()
        for p in (self.opt_path, self.params_path):
            if p:
                out.add(int(p[1 : p.index("]")]))
        return tuple(sorted(out))
