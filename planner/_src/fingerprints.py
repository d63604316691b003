"""A step's fingerprint, the record: what identifies a train step for its plans. Its program
(a hash of the traced program's text: operations, shapes, dtypes, without source lines), its
arguments (one ``path: dtype[shape]`` line per leaf) and the JAX that traced it.

One record serves every use: a plan file and ``plan.apply`` compare the step they are given
with the plan's (``differences`` names what changed), and a cache of planning work keys on
``key`` (the same step, arguments and JAX give the same key in any process). Made from a
traced step by planner/_src/xla/fingerprint.py."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StepFingerprint:
    """The step's program hash, its argument signature and the JAX versions that traced it.

    ``arguments`` is empty where it was not recorded (plan files of older planners, synthetic
    traces); ``differences`` then compares only what both sides have."""

    program: str
    arguments: tuple[str, ...] = ()
    jax: str = ""
    jaxlib: str = ""

    @property
    def key(self) -> str:
        """A hash of every field: equal keys mean the same program, arguments and JAX."""
        text = "\n".join((self.program, *self.arguments, self.jax, self.jaxlib))
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def differences(self, other: StepFingerprint) -> list[str]:
        """What differs from ``other`` (the plan's), one readable line each; empty when the
        two are the same step. Argument lines name the first few leaves that differ."""
        out = []
        if self.arguments and other.arguments and self.arguments != other.arguments:
            out.append(_argument_difference(self.arguments, other.arguments))
        if self.jax and other.jax and (self.jax, self.jaxlib) != (other.jax, other.jaxlib):
            out.append(
                f"JAX: jax {self.jax}, jaxlib {self.jaxlib} here; jax {other.jax}, "
                f"jaxlib {other.jaxlib} for the plan (another JAX may trace the same step "
                "into another program)"
            )
        if self.program != other.program:
            out.append(
                f"the program: {self.program} here, {other.program} for the plan (the model's "
                "operations, shapes or dtypes, or the step's code, changed)"
            )
        return out

    def to_json(self) -> dict:
        return dataclasses.asdict(self) | {"arguments": list(self.arguments)}

    @classmethod
    def from_json(cls, data: dict) -> StepFingerprint:
        return cls(
            program=str(data["program"]),
            arguments=tuple(str(a) for a in data.get("arguments", ())),
            jax=str(data.get("jax", "")),
            jaxlib=str(data.get("jaxlib", "")),
        )


def _argument_difference(here: tuple[str, ...], plan: tuple[str, ...], shown: int = 3) -> str:
    if len(here) != len(plan):
        return (
            f"the arguments: {len(here)} array leaves here, {len(plan)} for the plan "
            f"(first here: {here[0] if here else 'none'}; for the plan: "
            f"{plan[0] if plan else 'none'})"
        )
    pairs = [(a, b) for a, b in zip(here, plan) if a != b]
    listed = "; ".join(f"{a} here, {b.split(': ', 1)[-1]} for the plan" for a, b in pairs[:shown])
    more = f" (and {len(pairs) - shown} more)" if len(pairs) > shown else ""
    return f"the arguments: {listed}{more}"


def leaf_signature(x: Any) -> str:
    """``dtype[shape]`` of an array-like leaf (an array, a ``ShapeDtypeStruct``, a NumPy or
    Python scalar); a Python scalar is weakly typed, so its type name stands for it."""
    if isinstance(x, bool | int | float | complex):
        return f"python {type(x).__name__}"
    shape = getattr(x, "shape", None)
    dtype = getattr(x, "dtype", None)
    if shape is None or dtype is None:
        return type(x).__name__
    try:
        name = np.dtype(dtype).name
    except TypeError:  # an extended dtype NumPy does not know (a typed PRNG key: key<fry>)
        name = str(dtype)
    return f"{name}[{','.join(str(d) for d in shape)}]"


def argument_signature(args: Sequence[Any]) -> tuple[str, ...]:
    """One ``args[i]...: dtype[shape]`` line per leaf of the step's arguments."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(tuple(args))
    return tuple(f"args{jax.tree_util.keystr(path)}: {leaf_signature(x)}" for path, x in leaves)
