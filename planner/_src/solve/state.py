"""Stage 4, solve: the train state's variables and terms in the CP-SAT model (add_to_model).

Formulas: docs/cost-model.md#the-train-state.
"""

from __future__ import annotations

from planner._src.cost.state import LeafCost

__all__ = ["add_to_model"]


def add_to_model(m, costs: tuple[LeafCost, ...], kib_up, ns):
    """The train state's variables in the CP-SAT model ``m`` (solve/model.py's block).

    Returns ``(on_host, saved_kib, buffer_kib, inflight_kib, host_kib, time_ns)``:
    ``on_host[key]`` is the 0/1 variable h_i (key: :attr:`StateLeaf.key`), and the others
    are linear expressions in them (the sums S, U, V, host bytes, X of
    docs/cost-model.md#the-train-state; bytes in KiB rounded up as solve/model.py does, so
    the saving is rounded *down*). U sums the streamed leaves' buffers and adds the largest
    of the whole leaves' (a variable held above each chosen one's).
    """
    on_host, saved, buf, inflight, host, t = {}, [], [], [], [], []
    # leaves brought in whole (LeafCost.whole): their update buffers combine by the largest
    whole = [c for c in costs if c.whole]
    largest = (
        m.NewIntVar(0, max(kib_up(c.update_buffer_bytes) for c in whole), "U_whole") if whole else 0
    )
    for c in costs:
        h = m.NewBoolVar(f"state_on_host[{c.leaf.key}]")
        on_host[c.leaf.key] = h
        saved.append((c.saved_bytes // 1024) * h)  # down: a plan never saves more than it does
        if c.whole:
            m.Add(largest >= kib_up(c.update_buffer_bytes) * h)
        else:
            buf.append(kib_up(c.update_buffer_bytes) * h)
        inflight.append(kib_up(c.inflight_bytes) * h)
        # resident between steps + written during the step (a host parameter's gradient):
        # both in pinned host memory at the step's host peak, under one cap
        host.append(kib_up(c.host_bytes + c.host_temp_bytes) * h)
        t.append(ns(c.exposed_s) * h)
    return on_host, sum(saved), sum(buf) + largest, sum(inflight), sum(host), sum(t)
