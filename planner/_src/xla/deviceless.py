"""A deviceless target's devices standing in for this machine's: the step's arguments placed on
them (:func:`args_for`), and, while a step traces and lowers for the target
(:func:`target_scope`), the shardings and checks inside the step answering for it.

* :func:`args_for` turns example arguments (arrays, ``ShapeDtypeStruct``s, ``NamedSharding`` on
  this machine's devices, pytrees) into ``ShapeDtypeStruct``s on the target's devices: the same
  mesh shape, axis names and partition specs (and host memory kinds, which the target's
  compile-only devices would otherwise drop).
* :func:`target_scope`, for a deviceless target only and only in the calling context (a
  ``ContextVar``: other threads are untouched):

  - JAX's cuDNN attention checks answer for the target's compute capability
    (``jax.nn.dot_product_attention(..., implementation="cudnn")`` asks the *default* backend,
    XLA:CPU here, whether the GPU is Hopper or later, and refuses head dims above 128);
  - shardings inside the step that name this machine's devices
    (``with_sharding_constraint(x, NamedSharding(cpu_mesh, spec))``, ``jax.device_put`` inside
    the step, ``shard_map(mesh=cpu_mesh)``) are moved onto the target mesh of the same shape and
    axis names; without this the lowering refuses the mix of CPU and GPU devices;
  - :func:`traced_on_target` moves a jitted step's own ``in_shardings`` / ``out_shardings``
    (``compile.lower`` calls it).

The JAX internals this patches are the adapter's (``adapter.patch_capability_checks``,
``adapter.patch_sharding_binds``, ``adapter.traced_shardings``), listed in its guard.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from planner._src.xla import adapter, targets
from planner._src.xla.adapter import SingleDeviceSharding
from planner._src.xla.gpus import TargetError

# ------------------------------------------------------- the arguments on the target

# A host memory kind on the target's compile-only devices. Those devices list no memories
# (``addressable_memories()`` is empty, JAX 0.11.2 and 0.12.0.1), so JAX's sharding
# constructors drop the kind: ``SingleDeviceSharding(d, memory_kind="pinned_host")
# .memory_kind`` is None, and an argument placed in pinned host memory lowered as a device
# argument (0 host argument bytes; measured:
# benchmarks/results/state-offload-config-2026-12-04.md). These subclasses answer the kind
# JAX's lowering reads (``memory_kind``: the entry parameter's ``mhlo.memory_kind``, hence
# XLA's ``S(5)`` layout and its host argument bytes). Used for *arguments* only (args_for,
# a jit's in_shardings): for outputs JAX checks the compiled executable's memory kinds
# (None on these devices) against the user's, so an output's host kind comes from its value
# (``jax.device_put(x, jax.memory.Space.Host)`` in the step), as the lowering propagates it.
_HOST_KINDS = ("pinned_host", "unpinned_host")


class _HostSingleDeviceSharding(SingleDeviceSharding):
    def __init__(self, device, memory_kind: str):
        super().__init__(device)
        self.__dict__["_host_kind"] = memory_kind

    memory_kind = property(lambda self: self._host_kind)
    _memory_kind = memory_kind

    def with_memory_kind(self, kind):
        return _with_kind(SingleDeviceSharding(self._device), kind)

    def __eq__(self, other):
        return (
            isinstance(other, SingleDeviceSharding)
            and other._device == self._device
            and other.memory_kind == self.memory_kind
        )

    def __hash__(self):
        return hash((self._device, self._host_kind))

    def __repr__(self):
        return f"SingleDeviceSharding(device={self._device!r}, memory_kind={self._host_kind})"


class _HostNamedSharding(NamedSharding):
    def __init__(self, mesh, spec, memory_kind: str):
        super().__init__(mesh, spec)
        self.__dict__["_host_kind"] = memory_kind

    memory_kind = property(lambda self: self._host_kind)
    _memory_kind = memory_kind

    def with_memory_kind(self, kind):
        return _with_kind(NamedSharding(self.mesh, self.spec), kind)

    def __eq__(self, other):
        return (
            isinstance(other, NamedSharding)
            and other.mesh == self.mesh
            and other.spec == self.spec
            and other.memory_kind == self.memory_kind
        )

    def __hash__(self):
        return hash((self.mesh, self.spec, self._host_kind))

    def __repr__(self):
        return (
            f"NamedSharding(mesh={self.mesh!r}, spec={self.spec!r}, memory_kind={self._host_kind})"
        )


def _with_kind(sharding, memory_kind: str | None):
    """``sharding`` (on the target's devices) with ``memory_kind``, kept where a host kind
    would be dropped (above); a device kind is the devices' default (None here)."""
    if memory_kind not in _HOST_KINDS or sharding.memory_kind == memory_kind:
        return sharding
    if isinstance(sharding, SingleDeviceSharding):
        return _HostSingleDeviceSharding(next(iter(sharding.device_set)), memory_kind)
    if isinstance(sharding, NamedSharding):
        return _HostNamedSharding(sharding.mesh, sharding.spec, memory_kind)
    return sharding


def with_memory_kind(sharding, kind: str):
    """``sharding`` with memory ``kind`` as ``adapter.with_memory_kind`` gives it (a
    ``SingleDeviceSharding`` as a one-device ``NamedSharding``), the kind kept where the
    devices drop it: on a deviceless target's devices JAX's ``with_memory_kind`` answers
    None for ``pinned_host`` (above), so an argument placed there would trace in device
    memory and lower as a device argument, though the GPU's trace sees it on the host."""
    return _with_kind(adapter.with_memory_kind(sharding, kind), kind)


def _replicated(
    target: targets.CompilerTarget, memory_kind: str | None, *, keep_host: bool = False
):
    devices = targets.devices(target)
    if len(devices) == 1:
        out = SingleDeviceSharding(devices[0], memory_kind=memory_kind)
    else:
        mesh = targets.mesh_of(target, (len(devices),), ("devices",), None, "An unsharded argument")
        out = NamedSharding(mesh, PartitionSpec(), memory_kind=memory_kind)
    return _with_kind(out, memory_kind) if keep_host else out


def _on_target(target: targets.CompilerTarget, sharding, what: str):
    """``sharding`` (this machine's, or None) as the same placement on the target."""
    memory_kind = getattr(sharding, "memory_kind", None)
    if (
        sharding is None
        or isinstance(sharding, SingleDeviceSharding)
        or (isinstance(sharding, NamedSharding) and getattr(sharding.mesh, "empty", False))
    ):
        # no placement (an aval's sharding on JAX 0.12 names the empty mesh): replicated
        return _replicated(target, memory_kind, keep_host=True)
    if isinstance(sharding, NamedSharding):
        return _with_kind(
            NamedSharding(
                targets.target_mesh(target, sharding.mesh), sharding.spec, memory_kind=memory_kind
            ),
            memory_kind,
        )
    raise TargetError(
        f"{what} has a {type(sharding).__name__}, which cannot be moved onto "
        f"{target.description}.\nFix: give it a jax.sharding.NamedSharding (a mesh and a "
        f"PartitionSpec), or no sharding."
    )


def args_for(target: targets.CompilerTarget, example_args: Any) -> Any:
    """The example arguments (a pytree of arrays, ``ShapeDtypeStruct``s, scalars) as
    ``ShapeDtypeStruct``s on the target: single-device arguments on its one device, a
    ``NamedSharding`` on the same mesh shape and axis names over its devices, with the same
    ``PartitionSpec`` and memory kind. Identity for a local target."""
    if target.kind == "local":
        return example_args
    with_paths, tree = jax.tree_util.tree_flatten_with_path(example_args)
    out = []
    for key, x in with_paths:
        path = jax.tree_util.keystr(key)
        if not adapter.is_array_leaf(x):  # static, as in the local trace (adapter)
            out.append(x)
            continue
        if not (hasattr(x, "shape") and hasattr(x, "dtype")):
            x = jax.typeof(x) if hasattr(jax, "typeof") else jax.numpy.asarray(x)
        sharding = _on_target(target, getattr(x, "sharding", None), f"argument {path or '0'}")
        out.append(_struct(x, sharding))
    return jax.tree.unflatten(tree, out)


def _struct(x, sharding):
    """A ShapeDtypeStruct of ``x`` on the target. An argument in host memory also gets the
    aval's memory space (adapter.shape_dtype_struct): JAX takes an array's memory space from
    its aval, not from a SingleDeviceSharding's memory kind, so without it the step traced
    here sees the argument in HBM where on the GPU it sees it on the host (a
    ``jax.device_put`` to the device is then no op, and its transpose, which puts a host
    parameter's gradient on the host, is lost)."""
    kw = {"weak_type": bool(getattr(x, "weak_type", False)), "sharding": sharding}
    host = getattr(sharding, "memory_kind", None) in _HOST_KINDS
    return adapter.shape_dtype_struct(tuple(x.shape), x.dtype, host=host, **kw)


# --------------------------------------------------- the scope of a deviceless compile


class _Scope(NamedTuple):
    target: targets.CompilerTarget
    capability: tuple[int, int]


_active: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar(
    "planner_compiler_target", default=None
)


def active_target() -> targets.CompilerTarget | None:
    """The deviceless target in scope (:func:`target_scope`), or None."""
    scope = _active.get()
    return scope.target if scope is not None else None


def active_scope() -> _Scope | None:
    """The deviceless target in scope with its compute capability (:func:`target_scope`), or
    None."""
    return _active.get()


def _capability(text: str) -> tuple[int, int]:
    return tuple(int(p) for p in text.split("."))[:2]  # type: ignore[return-value]


def _make_capability_check(name: str, original: Callable[[str], bool]) -> Callable[[str], bool]:
    def check(capability: str) -> bool:
        scope = _active.get()
        if scope is None:
            return original(capability)
        wanted = _capability(capability)
        return (
            scope.capability >= wanted
            if name == "check_compute_capability"
            else scope.capability == wanted
        )

    check.__name__ = name
    check._planner_original = original  # type: ignore[attr-defined]
    return check


def _translate(scope: _Scope, value, keep_host: bool = False):
    """``value`` with every sharding / mesh of this machine's devices moved onto the target.
    ``keep_host``: a host memory kind is kept (arguments only: see _HOST_KINDS)."""
    target = scope.target
    if (
        isinstance(value, NamedSharding)
        and isinstance(value.mesh, Mesh)
        and _foreign(value.mesh.devices.flat[0])
    ):
        out = NamedSharding(
            targets.target_mesh(target, value.mesh), value.spec, memory_kind=value.memory_kind
        )
        return _with_kind(out, value.memory_kind) if keep_host else out
    if isinstance(value, SingleDeviceSharding) and _foreign(next(iter(value.device_set))):
        return _replicated(target, value.memory_kind, keep_host=keep_host)
    if isinstance(value, Mesh) and value.devices.size and _foreign(value.devices.flat[0]):
        return targets.target_mesh(target, value)
    if isinstance(value, tuple) and value and not hasattr(value, "_fields"):
        return tuple(_translate(scope, v, keep_host) for v in value)
    return value


def _foreign(device) -> bool:
    return getattr(device, "platform", "gpu") != "gpu"


def _make_bind(original: Callable) -> Callable:
    def bind(*args, **params):
        scope = _active.get()
        if scope is not None:
            params = {k: _translate(scope, v) for k, v in params.items()}
        return original(*args, **params)

    bind._planner_original = original  # type: ignore[attr-defined]
    return bind


_install_lock = threading.Lock()

_installed = 0

_restore: list[Callable[[], None]] = []


def _install() -> None:
    global _installed
    with _install_lock:
        _installed += 1
        if _installed > 1:
            return
        try:
            adapter.patch_capability_checks(_make_capability_check, _restore)
            adapter.patch_sharding_binds(_make_bind, _restore)
        except BaseException:
            _installed -= 1
            _undo()
            raise


def _undo() -> None:
    while _restore:
        _restore.pop()()


def _uninstall() -> None:
    global _installed
    with _install_lock:
        _installed -= 1
        if _installed == 0:
            _undo()


@contextlib.contextmanager
def target_scope(target: targets.CompilerTarget) -> Iterator[None]:
    """While tracing / lowering for ``target``: JAX's cuDNN checks answer for its compute
    capability and shardings of this machine's devices move onto its mesh. Scoped to the
    calling context (other threads are untouched) and undone on exit; re-entrant. A no-op for
    a local target."""
    if target.kind != "deviceless":
        yield
        return
    _install()
    token = _active.set(_Scope(target, _capability(target.compute_capability or "0.0")))
    try:
        yield
    finally:
        _active.reset(token)
        _uninstall()


def traced_on_target(scope: _Scope, traced):
    """``traced`` with the jit's own in / out shardings of this machine's devices moved onto
    the target mesh of the same shape and axis names (the same partition specs and memory
    kinds); ``traced`` itself when it names none."""
    params = adapter.traced_shardings(traced)
    if params is None:
        return traced
    moved = {k: _translate(scope, v, keep_host=k == "in_shardings") for k, v in params.items()}
    if all(
        all(a is b for a, b in zip(moved[k], params[k], strict=True))
        if isinstance(params[k], tuple)
        else moved[k] is params[k]
        for k in moved
    ):
        return traced
    return adapter.with_traced_shardings(traced, moved)
