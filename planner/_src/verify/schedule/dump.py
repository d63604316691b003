"""The streams XLA:GPU gave the async starts of a compiled module, read from an XLA dump.

``XLA_FLAGS=--xla_dump_to=DIR`` (or the compile option ``xla_dump_to``) makes XLA:GPU write,
per module, ``*.thunk_sequence.txt``: the thunks it runs, an ``kAsyncStart`` line naming the
stream it starts on, e.g. ::

    022: kAsyncStart   [source | next=034 (6)] stream=computation_stream[2], async_id=22

and ``*.thunk_metadata.txt``, which names each thunk id's instruction (``profile_annotation``).
:func:`read_dump` joins the two: per module, the async start's instruction name -> the
stream's label. The labels are ``computation_stream[k]`` (the compute streams XLA deals the
async starts over) and, from jaxlib 0.12 on, ``memcpy_d2h_stream`` / ``memcpy_h2d_stream``
(dedicated host-copy streams). :meth:`DumpedStreams.assignment` numbers them as
planner/_src/verify/schedule/ does (``k``; ``streams`` and ``streams + 1`` for the dedicated
ones), so a dump checks ``schedule.stream_assignment`` or stands in for it
(``schedule.read_windows(..., assignment=...)``). Text in, nothing compiled here.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

_START = re.compile(r"^\s*(\d+):\s+kAsyncStart\b.*?\bstream=([\w\[\]]+)")
_META = re.compile(r'profile_annotation:\s*"([^"]*)"\s*thunk_id:\s*(\d+)')
_COMPUTE = re.compile(r"computation_stream\[(\d+)\]")
_DEDICATED = {"memcpy_d2h_stream": 0, "memcpy_h2d_stream": 1}  # (past the compute streams)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DumpedStreams:
    """One dumped module's async starts and the stream labels XLA gave them."""

    module: str  # the dump's file prefix, e.g. "module_0001.jit_train_step"
    starts: tuple[tuple[str, str], ...]  # (instruction name, stream label), in thunk order

    def labels(self) -> dict[str, str]:
        return dict(self.starts)

    def assignment(self, streams: int = 4) -> dict[str, int]:
        """Instruction name -> stream index as schedule.stream_assignment numbers them."""
        return {name: stream_index(label, streams) for name, label in self.starts}


def stream_index(label: str, streams: int = 4) -> int:
    """``computation_stream[k]`` -> k; ``memcpy_d2h_stream`` -> ``streams``,
    ``memcpy_h2d_stream`` -> ``streams + 1``."""
    m = _COMPUTE.fullmatch(label)
    if m:
        return int(m.group(1))
    if label in _DEDICATED:
        return streams + _DEDICATED[label]
    raise ValueError(
        f"unknown stream label {label!r}: expected computation_stream[k], "
        f"{' or '.join(_DEDICATED)} (a newer XLA's dump? extend planner/_src/verify/schedule/dump.py)"
    )


def read_dump(path: str | Path) -> tuple[DumpedStreams, ...]:
    """Every module of an XLA dump directory with a thunk sequence, in file-name order.

    Raises FileNotFoundError when the directory holds no ``*thunk_sequence*.txt`` (XLA:GPU
    writes it for each module it compiles; XLA:CPU does not)."""
    root = Path(path)
    seqs = sorted(root.glob("*thunk_sequence*.txt"))
    if not seqs:
        raise FileNotFoundError(
            f"no *thunk_sequence*.txt in {root}: compile for a GPU with "
            f"XLA_FLAGS=--xla_dump_to={root} (or the compile option xla_dump_to)"
        )
    # jaxlib 0.10.2's XLA also writes <module>.thunk_sequence_after_thunk_passes.txt: the
    # same thunk ids and async starts (command buffers formed around them), no metadata file
    # of its own. Each module is read once, from its plain sequence (it sorts first).
    first: dict[str, Path] = {}
    for seq in seqs:
        first.setdefault(seq.name.split(".thunk_sequence")[0], seq)
    out = []
    for module, seq in first.items():
        meta = seq.with_name(f"{module}.thunk_metadata.txt")
        names = {int(i): n for n, i in _META.findall(meta.read_text())} if meta.exists() else {}
        starts = []
        for line in seq.read_text().splitlines():
            m = _START.match(line)
            if m:
                # (without the metadata file the thunk id stands in for the name)
                starts.append((names.get(int(m.group(1)), m.group(1)), m.group(2)))
        out.append(DumpedStreams(module=module, starts=tuple(starts)))
    return tuple(out)


def read_module(path: str | Path, name: str = "") -> DumpedStreams:
    """The dumped module whose file prefix contains ``name`` (the last one when several do:
    a later compile of the same function), or the only one with async starts."""
    mods = read_dump(path)
    if name:
        hits = [m for m in mods if name in m.module]
    else:
        hits = [m for m in mods if m.starts] or list(mods)
    if not hits or (not name and len(hits) > 1):
        raise ValueError(
            f"{'no' if not hits else len(hits)} dumped modules in {path} match "
            f"{name!r}: {[m.module for m in mods]}; pass one's name"
        )
    return hits[-1]
