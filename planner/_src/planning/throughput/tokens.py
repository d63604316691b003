"""Tokens per step: the user's ``tokens`` callable, ``tokens_per_example``, or the sequence
length read off the example batch when that is unambiguous."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from planner._src.errors import InvalidArgumentError


def _int_batch_leaves(args, batch: int) -> list[tuple[str, tuple[int, ...]]]:
    out = []
    for path, x in jax.tree_util.tree_flatten_with_path(args)[0]:
        shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
        if shape is None or dtype is None or len(shape) != 2 or shape[0] != batch:
            continue
        if np.issubdtype(np.dtype(dtype), np.integer):
            out.append((jax.tree_util.keystr(path), tuple(shape)))
    return out


def tokens_fn(tokens, tokens_per_example) -> tuple[Callable[[int, Any], int] | None, str]:
    """``(count(examples, example_args) -> tokens per step, the rule in words)``; count is
    None when the sequence length is to be read off the example batch."""
    if tokens is not None and tokens_per_example is not None:
        raise InvalidArgumentError(
            "Both tokens and tokens_per_example were given.\nFix: pass one: "
            "tokens_per_example=SEQ_LEN, or tokens=lambda examples: ... for anything else."
        )
    if tokens is not None:
        if not callable(tokens):
            raise InvalidArgumentError(
                f"tokens must be a callable examples -> tokens per step, got {tokens!r}.\n"
                "Fix: tokens=lambda examples: examples * 4096, or tokens_per_example=4096."
            )
        return (lambda examples, _args: int(tokens(examples))), "tokens(examples per step)"
    if tokens_per_example is not None:
        if (
            isinstance(tokens_per_example, bool)
            or not isinstance(tokens_per_example, (int, np.integer))
            or tokens_per_example < 1
        ):
            raise InvalidArgumentError(
                f"tokens_per_example must be a positive int, got {tokens_per_example!r}.\n"
                "Fix: the sequence length of one example (1 to count examples per second)."
            )
        t = int(tokens_per_example)
        return (lambda examples, _args: examples * t), f"{t} tokens per example (given)"
    return None, "derived"


def derive_tokens_per_example(args, batch: int) -> int:
    """The sequence length when the example arguments say it unambiguously: every integer
    array of rank 2 whose leading dimension is the batch size has the same second dimension."""
    leaves = _int_batch_leaves(args, batch)
    seqs = {shape[1] for _, shape in leaves}
    if len(seqs) == 1 and batch > 1:
        return seqs.pop()
    found = ", ".join(f"{p}: {s}" for p, s in leaves[:6]) or "none"
    raise InvalidArgumentError(
        f"Cannot tell the tokens per step from the example arguments at batch size {batch}: "
        f"integer arrays of shape (batch, seq) found: {found}.\nWhy: tokens per second is "
        "tokens per step over the step time, and the planner reads the sequence length off "
        "the batch only when exactly one (batch, seq) length is there"
        + (" (at batch size 1 every leading 1 looks like a batch)" if batch == 1 else "")
        + ".\nFix: pass tokens_per_example=SEQ_LEN (1 to count examples), or "
        "tokens=lambda examples: ... for a count that is not proportional."
    )


def derived_rule(probes) -> str:
    p = probes[max(probes)]
    return (
        f"{derive_tokens_per_example(p.session.example_args, p.batch)} tokens per example "
        "(the sequence length of the example batch)"
    )
