"""Which part of the step's arguments is the optimizer state, and which the parameters: named
by the user (an argument index, a path, a selector) or found in the common idioms (a Flax
linen ``TrainState``, an ``nnx.Optimizer``'s state, an optax state in a tuple or dict), and
refused before any trace where it cannot be optimizer state (:func:`resolve`).

A selection is a path into the step's positional arguments, as ``jax.tree_util.keystr``
writes it (``"[0].opt_state"``: ``args[0].opt_state``); a leaf's key in a placement is its
path inside the selected subtree (``"[0].mu['layers']['w1']"``), as flattening the subtree
itself gives it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from planner._src.errors import InvalidArgumentError
from planner._src.trainstate.records import under
from planner._src.units import fmt_bytes
from planner._src.xla import adapter

__all__ = ["StateSelection", "detect", "resolve", "subtree"]

# How an optimizer state is recognized: an optax state (a NamedTuple of an optax module:
# ScaleByAdamState, EmptyState, MultiStepsState, ...), or Flax NNX's variables that hold an
# optax state inside an nnx.Optimizer (OptState, OptArray, OptVariable).
NNX_OPT_TYPES = ("OptState", "OptArray", "OptVariable")
# The fields of an optax state that hold one tree like the parameters (Adam's moments, SGD's
# momentum trace): what the parameters are matched against, and what the report names.
MOMENT_FIELDS = ("mu", "nu", "trace", "ema", "exp_avg", "exp_avg_sq")


def is_optax_state(x) -> bool:
    t = type(x)
    return t.__module__.startswith("optax") and isinstance(x, tuple)


def is_nnx_opt_variable(x) -> bool:
    t = type(x)
    return t.__module__.startswith("flax.nnx") and t.__name__ in NNX_OPT_TYPES


def is_opt_node(x) -> bool:
    return is_optax_state(x) or is_nnx_opt_variable(x)


def is_train_state(x) -> bool:
    """A Flax linen ``TrainState`` (or a subclass): ``.params``, ``.opt_state``, ``.tx``."""
    return any(
        c.__name__ == "TrainState" and c.__module__.startswith("flax.training")
        for c in type(x).__mro__
    )


def _is_array(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype")


def _flat(args) -> list[tuple[tuple, Any]]:
    return [(k, x) for k, x in jax.tree_util.tree_flatten_with_path(tuple(args))[0] if _is_array(x)]


def _by_prefix(flat) -> dict[tuple, list[int]]:
    """Every key-path prefix of ``flat``'s leaves -> the indices of the leaves under it (one
    pass: a model's thousand leaves are read once per level, not once per prefix)."""
    out: dict[tuple, list[int]] = {}
    for j, (k, _) in enumerate(flat):
        for i in range(len(k) + 1):
            out.setdefault(k[:i], []).append(j)
    return out


def subtree(args, prefix: str) -> list[tuple[str, Any]]:
    """``(path inside the subtree, leaf)`` of every array leaf of ``args`` under ``prefix``."""
    out = []
    for k, x in _flat(args):
        s = jax.tree_util.keystr(k)
        if under(s, prefix):
            out.append((s[len(prefix) :], x))
    return out


def _is_float(x) -> bool:
    """A float array (bfloat16 and the other ml_dtypes floats too, which numpy does not
    count as np.floating)."""
    return bool(jax.numpy.issubdtype(x.dtype, jax.numpy.floating))


def _name(key) -> str | None:
    for attr in ("name", "key"):
        v = getattr(key, attr, None)
        if isinstance(v, str):
            return v
    return None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StateSelection:
    """The optimizer state (and the parameters) inside the step's arguments.

    ``opt_path`` / ``params_path``: keystr paths into the positional arguments;
    ``container``: the path of the Flax ``TrainState`` that holds them, where one does (its
    ``tx`` can then be swapped for a streamed one); ``found_by``: how it was named or found,
    for the report; ``auto``: found without being named."""

    opt_path: str
    params_path: str | None = None
    container: str | None = None
    found_by: str = ""
    auto: bool = False
    description: str = ""  # "2 x 1.2 GB of Adam moments, f32"

    @property
    def opt_text(self) -> str:
        return "args" + self.opt_path

    @property
    def params_text(self) -> str | None:
        return None if self.params_path is None else "args" + self.params_path

    def argnums(self) -> tuple[int, ...]:
        """The positional arguments holding the state (donated by ``plan.apply``)."""
        out = set()
        for p in (self.opt_path, self.params_path):
            if p is not None and p.startswith("["):
                out.add(int(p[1 : p.index("]")]))
        return tuple(sorted(out))

    def argnum_of(self, path: str | None) -> int | None:
        """The argument index where ``path`` is a whole argument (``"[1]"``), else None."""
        if (
            path is not None
            and path.startswith("[")
            and path.endswith("]")
            and path[1:-1].isdigit()
        ):
            return int(path[1:-1])
        return None

    def line(self) -> str:
        """The report's line: ``optimizer state: `args[0].opt_state`, 2 x 1.2 GB of Adam
        moments, f32 (found: a Flax TrainState)``."""
        out = f"optimizer state: `{self.opt_text}`"
        if self.description:
            out += f", {self.description}"
        if self.found_by:
            out += f" ({self.found_by})"
        if self.params_path is not None:
            out += f"; parameters: `{self.params_text}`"
        return out

    def opt_leaves(self, args) -> list[tuple[str, Any]]:
        return subtree(args, self.opt_path)

    def params_leaves(self, args) -> list[tuple[str, Any]] | None:
        return None if self.params_path is None else subtree(args, self.params_path)


# ------------------------------------------------------------------------------ what is where


def _markers(args) -> list[tuple[tuple, Any]]:
    """``(key path, node)`` of every optax state and NNX optimizer variable in ``args``."""
    flat = jax.tree_util.tree_flatten_with_path(tuple(args), is_leaf=is_opt_node)[0]
    return [(k, x) for k, x in flat if is_opt_node(x)]


def _under_marker(path: tuple, markers) -> bool:
    return any(path[: len(m)] == m for m, _ in markers)


def _qualifying_roots(args, markers) -> list[tuple]:
    """The largest subtrees every array leaf of which is inside an optimizer-state node, and
    that hold one (the candidates for "the optimizer state")."""
    flat = _flat(args)
    index = _by_prefix(flat)
    marked = [_under_marker(k, markers) for k, _ in flat]
    prefixes = {m[:i] for m, _ in markers for i in range(len(m) + 1)}
    ok = {p for p in prefixes if index.get(p) and all(marked[j] for j in index[p])}
    roots = [p for p in ok if not any(p[:i] in ok for i in range(len(p)))]
    out = []
    for r in roots:
        # inside an nnx.Optimizer's state, its "opt_state" (not the step counter beside it)
        named = sorted(
            (p for p in ok if p[: len(r)] == r and p and _name(p[-1]) == "opt_state"), key=len
        )
        out.append(named[0] if named else r)
    return sorted(out, key=lambda p: (len(p), jax.tree_util.keystr(p)))


def _describe(pairs: list[tuple[str, Any]], opt_key_paths=None) -> str:
    """``2 x 1.2 GB of Adam moments, f32``, or the bytes and leaves where no moments are."""
    arrays = [(p, x) for p, x in pairs if len(x.shape) > 0]
    dtypes = sorted({_short_dtype(x.dtype) for _, x in arrays})
    fields: dict[str, int] = {}
    for p, x in arrays:
        f = next((m for m in MOMENT_FIELDS if f".{m}" in p or f"['{m}']" in p), None)
        if f is not None:
            fields[f] = fields.get(f, 0) + adapter.nbytes(x)
    total = sum(adapter.nbytes(x) for _, x in arrays)
    kinds = ", ".join(dtypes)
    if set(fields) == {"mu", "nu"} and fields["mu"] == fields["nu"]:
        return f"2 x {fmt_bytes(fields['mu'])} of Adam moments, {kinds}"
    if len(fields) == 1:
        ((f, b),) = fields.items()
        what = "momentum" if f == "trace" else f"'{f}'"
        return (
            f"{fmt_bytes(b)} of {what}"
            + (f" ({fmt_bytes(total)} in all)" if total > b else "")
            + f", {kinds}"
        )
    return f"{fmt_bytes(total)} in {len(arrays)} arrays, {kinds}"


def _short_dtype(dtype) -> str:
    d = np.dtype(dtype)
    return {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "float64": "f64"}.get(
        d.name, d.name
    )


def _moments(args, opt_path: str) -> list[tuple[str, tuple]]:
    """``(path inside the moment tree, shape)`` of the first moment field of the optimizer
    state (Adam's ``mu``): a tree like the parameters."""
    for field in MOMENT_FIELDS:
        got = {}
        for p, x in subtree(args, opt_path):
            for tag in (f".{field}", f"['{field}']"):
                i = p.find(tag)
                if i >= 0:
                    head = p[: i + len(tag)]
                    got.setdefault(head, []).append((p[len(head) :], tuple(x.shape)))
                    break
        if got:
            return min(got.values(), key=len)
    return []


def _params_like(args, opt_path: str) -> str | None:
    """The subtree outside the optimizer state whose leaves are the moments' (same paths
    inside, same shapes): the parameters; None where none or several are."""
    want = _moments(args, opt_path)
    if not want:
        return None
    flat = _flat(args)
    hits = []
    for p, inside in _by_prefix(flat).items():
        if len(inside) != len(want):
            continue
        s = jax.tree_util.keystr(p)
        if under(opt_path, s) or under(s, opt_path):
            continue
        got = [
            (jax.tree_util.keystr(flat[j][0][len(p) :]), tuple(flat[j][1].shape)) for j in inside
        ]
        if got == want:
            hits.append(s)
    # the outermost of nested hits (a tuple of one tree is the tree)
    hits = [h for h in hits if not any(h != o and under(h, o) for o in hits)]
    return hits[0] if len(hits) == 1 else None


def _container(args, opt_path: str) -> str | None:
    """The path of the Flax TrainState whose ``.opt_state`` is ``opt_path``, if any."""
    if not opt_path.endswith(".opt_state"):
        return None
    parent = opt_path[: -len(".opt_state")]
    flat = jax.tree_util.tree_flatten_with_path(tuple(args), is_leaf=is_train_state)[0]
    for k, x in flat:
        if is_train_state(x) and jax.tree_util.keystr(k) == parent:
            return parent
    return None


def detect(args) -> StateSelection | None:
    """The optimizer state of the common idioms, found in ``args``: a Flax ``TrainState``'s
    ``.opt_state`` (its ``.params`` beside it), an ``nnx.Optimizer``'s ``opt_state`` in an
    ``nnx.state((model, optimizer))``, an optax state in a tuple or dict (the parameters:
    the subtree shaped like its first moment). None where there is none, or several."""
    markers = _markers(args)
    if not markers:
        return None
    roots = _qualifying_roots(args, markers)
    if len(roots) != 1:
        return None
    opt = jax.tree_util.keystr(roots[0])
    container = _container(args, opt)
    if container is not None:
        params = container + ".params"
        found = "found: a Flax TrainState"
    else:
        params = _params_like(args, opt)
        nnx = any(is_nnx_opt_variable(x) for _, x in markers)
        found = "found: an nnx.Optimizer's state" if nnx else "found: an optax state"
    if params is not None and not subtree(args, params):
        params = None
    return StateSelection(
        opt_path=opt,
        params_path=params,
        container=container,
        found_by=found,
        auto=True,
        description=_describe(subtree(args, opt)),
    )


# ------------------------------------------------------------------------------ named by the user


def _path_of(args, spec, what: str) -> str:
    """The keystr path a user's ``opt_state=`` / ``params=`` names: an argument index, a
    path (``"args[0].opt_state"``, ``"[0].opt_state"``), or a selector ``lambda args: ...``
    (its result found in ``args`` by the identity of its leaves)."""
    n = len(args)
    if isinstance(spec, bool):
        raise InvalidArgumentError(
            f"{what}={spec!r} is not a selection.\nFix: an argument index ({what}=1), a path "
            f"({what}='args[0].opt_state'), or a selector ({what}=lambda args: "
            "args[0].opt_state)."
        )
    if isinstance(spec, (int, np.integer)):
        i = int(spec)
        if not 0 <= i < n:
            raise InvalidArgumentError(
                f"{what}={i} does not name one of the step's {n} positional arguments.\nFix: "
                f"pass the index of the argument that holds it (e.g. {what}=1 for "
                "train_step(params, opt_state, batch)), a path, or a selector."
            )
        return f"[{i}]"
    if isinstance(spec, str):
        path = spec.strip()
        path = path[len("args") :] if path.startswith("args") else path
        known = {jax.tree_util.keystr(k[:i]) for k, _ in _flat(args) for i in range(len(k) + 1)}
        if path not in known:
            tops = sorted({jax.tree_util.keystr(k[:2]) for k, _ in _flat(args)})[:8]
            raise InvalidArgumentError(
                f"{what}={spec!r} names nothing in the step's arguments.\nWhy: a path is "
                "read as jax.tree_util.keystr writes the arguments' paths.\nFix: one of "
                + ", ".join(f"'args{t}'" for t in tops)
                + ", ... (or a selector: lambda args: args[0].opt_state)."
            )
        return path
    if callable(spec):
        try:
            got = spec(tuple(args))
        except Exception as e:  # noqa: BLE001  (the user's selector: say what it did)
            raise InvalidArgumentError(
                f"The {what}= selector raised {type(e).__name__}: {e}\nWhy: it is called "
                "with the step's positional arguments as a tuple.\nFix: e.g. "
                f"{what}=lambda args: args[0].opt_state."
            ) from e
        return _found(args, got, what)
    raise InvalidArgumentError(
        f"{what}={spec!r} is not a selection.\nFix: an argument index, a path "
        f"('args[0].opt_state') or a selector (lambda args: args[0].opt_state)."
    )


def _found(args, got, what: str) -> str:
    """The path in ``args`` of the subtree ``got`` (a selector's result): the node whose
    array leaves are exactly ``got``'s, in order (found by identity)."""
    for k, x in jax.tree_util.tree_flatten_with_path(tuple(args), is_leaf=lambda y: y is got)[0]:
        if x is got and not _is_array(got):
            return jax.tree_util.keystr(k)  # the selector's node itself
    mine = [id(x) for _, x in jax.tree_util.tree_flatten_with_path(got)[0] if _is_array(x)]
    if not mine:
        raise InvalidArgumentError(
            f"The {what}= selector returned {type(got).__name__}, which holds no arrays.\n"
            "Fix: return the subtree of the arguments that holds the optimizer state (e.g. "
            "lambda args: args[0].opt_state)."
        )
    flat = _flat(args)
    ids = [id(x) for _, x in flat]
    hits = []
    for p, inside in sorted(_by_prefix(flat).items(), key=lambda kv: len(kv[0])):
        if len(inside) == len(mine) and [ids[j] for j in inside] == mine:
            hits.append(jax.tree_util.keystr(p))
    if not set(mine) <= set(ids):
        raise InvalidArgumentError(
            f"The {what}= selector returned arrays that are not among the step's arguments.\n"
            "Why: the selection is found by the identity of its arrays, so it must return a "
            "part of the arguments, not a copy or a new tree.\nFix: return the subtree itself "
            "(lambda args: args[0].opt_state)."
        )
    if not hits:
        raise InvalidArgumentError(
            f"The {what}= selector returned arrays of the arguments that are not one subtree "
            "of them.\nFix: return one subtree (lambda args: args[0].opt_state), or pass a "
            "path."
        )
    # the outermost node with exactly these leaves, short of the whole argument tuple (a
    # selector's result is not found by identity where indexing makes a new node, as an
    # nnx.State does)
    return next((h for h in hits if h), hits[-1])


def _refuse(what: str, text: str, why: str, fix: str):
    raise InvalidArgumentError(f"{what}: `{text}` {why}\nFix: {fix}")


def _check_opt(args, path: str, params: str | None, auto: StateSelection | None) -> None:
    """Refuse an optimizer-state selection that cannot be one (module docstring)."""
    text = "args" + path
    pairs = subtree(args, path)
    hint = (
        f"the optimizer state found in the arguments is `{auto.opt_text}`: "
        f"opt_state={auto.opt_text!r}"
        if auto is not None and auto.opt_path != path
        else "name the optax state your optimizer's update reads and returns (e.g. "
        "opt_state=lambda args: args[0].opt_state)"
    )
    if not pairs:
        _refuse("opt_state", text, "holds no arrays.", hint + ".")
    if path == "":
        _refuse(
            "opt_state", text, "is every argument of the step, not its optimizer state.", hint + "."
        )
    if params is not None and (under(path, params) or under(params, path)):
        same = "is" if path == params else "overlaps"
        _refuse(
            "opt_state",
            text,
            f"{same} the parameters (params=`args{params}`): the optimizer state and the "
            "parameters are different parts of the arguments.",
            hint + ".",
        )
    if not any(_is_float(x) for _, x in pairs):
        _refuse(
            "opt_state",
            text,
            f"has no float arrays ({len(pairs)} array{'s' if len(pairs) > 1 else ''} of "
            f"{', '.join(sorted({np.dtype(x.dtype).name for _, x in pairs}))}): it is the "
            "batch or another input, not optimizer state (moments are floats).",
            hint + ".",
        )
    markers = _markers(args)
    inside = [m for m, _ in markers if under(jax.tree_util.keystr(m), path)]
    if not inside:
        looks = auto is not None and auto.params_path is not None and auto.params_path == path
        why = (
            "is the parameters, not the optimizer state (its leaves are shaped like the "
            "optimizer's moments)."
            if looks
            else "is not an optax state: none of its parts is an optax optimizer state "
            "(ScaleByAdamState, EmptyState, ...) or an nnx.Optimizer's state, which is what "
            "the streamed update and the placement's shardings are made for."
        )
        _refuse("opt_state", text, why, hint + ".")
    outside = [
        p for p, _ in pairs if not any(under(path + p, jax.tree_util.keystr(m)) for m in inside)
    ]
    if outside:
        shown = ", ".join(f"`{text}{p}`" for p in outside[:3])
        _refuse(
            "opt_state",
            text,
            f"holds more than the optimizer state: {shown}"
            + (f" and {len(outside) - 3} more arrays" if len(outside) > 3 else "")
            + " are not part of an optax state (the parameters, a step counter, ...).",
            hint + ".",
        )


def _check_params(args, path: str) -> None:
    text = "args" + path
    pairs = subtree(args, path)
    if not pairs:
        _refuse("params", text, "holds no arrays.", "name the parameters' subtree.")
    if not any(_is_float(x) for _, x in pairs):
        _refuse(
            "params",
            text,
            "has no float arrays: it is the batch or another input, not the parameters.",
            "name the parameters' subtree (e.g. params=lambda args: args[0].params).",
        )
    if any(under(jax.tree_util.keystr(m), path) for m, _ in _markers(args)):
        _refuse(
            "params",
            text,
            "holds an optimizer state: it is not the parameters alone.",
            "name the parameters' subtree (e.g. params=lambda args: args[0].params).",
        )


def resolve(
    args,
    opt_state=None,
    params=None,
    *,
    stream_params: bool = False,
    names: tuple[str, str] = ("opt_state", "params"),
) -> StateSelection | None:
    """The selection ``opt_state=`` / ``params=`` name in ``args`` (each an argument index,
    a path or a selector; module docstring; ``opt_state="auto"``: what :func:`detect`
    finds), checked; None where neither is given. Raises InvalidArgumentError, before any
    trace, where a selection cannot be what it names. ``names``: the option names the user
    gave them by (``opt_state_argnum``, ...), for the messages."""
    args = tuple(args)
    o_name, p_name = names
    if opt_state is None or opt_state is False:
        if params is not None:
            raise InvalidArgumentError(
                f"{p_name}= was given without {o_name}=.\nWhy: the parameters are named for "
                "the train state's placement, which is planned with the optimizer state.\n"
                f"Fix: pass {o_name}= too (e.g. opt_state=1, params=0), or neither."
            )
        return None
    auto = detect(args)
    if isinstance(opt_state, str) and opt_state == "auto":
        if auto is None:
            raise InvalidArgumentError(
                "opt_state='auto' found no optimizer state in the step's arguments.\nWhy: "
                "it looks for a Flax TrainState, an nnx.Optimizer's state (nnx.state((model, "
                "optimizer))) or one optax state in a tuple or dict; none is there, or "
                "several are.\nFix: name it: opt_state=1, opt_state='args[0].opt_state' or "
                "opt_state=lambda args: args[0].opt_state."
            )
        opt = auto.opt_path
        found = auto.found_by
    else:
        opt = _path_of(args, opt_state, o_name)
        if isinstance(opt_state, (int, np.integer)):
            found = f"named: {o_name}={int(opt_state)}"
        else:
            found = "named: " + (
                f"{o_name}={opt_state!r}" if isinstance(opt_state, str) else "a selector"
            )
    par = None if params is None else _path_of(args, params, p_name)
    _check_opt(args, opt, par, auto)
    if par is not None:
        _check_params(args, par)
    elif auto is not None and auto.opt_path == opt:
        par = auto.params_path
    else:
        par = _params_like(args, opt)
    if stream_params and par is None:
        raise InvalidArgumentError(
            "stream_params=True, but the parameters are not named and not found.\nWhy: the "
            "parameters the plan may put on the host are found by their place in the "
            "arguments.\nFix: pass params= too (e.g. params=0, or params=lambda args: "
            "args[0].params)."
        )
    return StateSelection(
        opt_path=opt,
        params_path=par,
        container=_container(args, opt),
        found_by=found,
        auto=isinstance(opt_state, str) and opt_state == "auto",
        description=_describe(subtree(args, opt)),
    )
