"""Isolating the decisions behind a numerics mismatch: a small subset of the plan's kept
classes that alone still makes the step's outputs differ, by bisection."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def isolate(differs: Callable[[tuple[str, ...]], bool], keys: Sequence[str]) -> tuple[str, ...]:
    """The decisions behind a mismatch: a small subset of ``keys`` (the plan's kept
    classes) that alone still makes the step's outputs differ, by bisection. ``differs(sub)``
    runs the step keeping only ``sub`` (everything else recomputed, which is JAX's own default
    and never changes the math) and says whether it differs beyond the tolerance. One culprit
    costs about ``2 log2(len(keys))`` runs; culprits that only differ together are returned
    as the smallest half-set that still differs. ``()`` when ``keys`` alone does not differ
    (the mismatch lies elsewhere, e.g. an impure step)."""
    keys = tuple(keys)
    if not keys or not differs(keys):
        return ()
    while len(keys) > 1:
        half = len(keys) // 2
        a, b = keys[:half], keys[half:]
        if differs(a):
            keys = a
        elif differs(b):
            keys = b
        else:  # neither half alone: they differ only together
            break
    return keys
