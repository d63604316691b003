"""The GPUs the planner compiles for: a name looked up in the one GPU table
(``cost_models/_gpus.py``), and the GPU's target config for the installed jaxlib
(``cost_models/targets/``: XLA's ``GpuTargetConfigProto`` texts, by jaxlib version, with how
a GPU without one of its own is derived from another's), and its default topology.

The planner's messages that list the GPUs it has target configs for read :func:`names`.
"""

from __future__ import annotations

import functools
import json
import mmap
import re
from pathlib import Path
from typing import NamedTuple

from cost_models._gpus import GPUS, Gpu
from planner._src.errors import InvalidArgumentError


class TargetError(InvalidArgumentError):
    """A compiler target that cannot be had: unknown GPU name, wrong device count, a sharding
    that cannot be moved onto the target. The message says what to do."""


def names() -> tuple[str, ...]:
    """The GPUs the planner carries target configs for, by profile name, in table order:
    ``h100-sxm``, ``h100-pcie``, ``h200``, ...; ``", ".join(names())`` is how messages list
    them."""
    return tuple(g.name for g in GPUS)


def gpu(name: str) -> Gpu:
    """The GPU of the table named ``name`` (a profile name or an alias, any case); raises
    :class:`TargetError` naming the GPUs there are."""
    key = name.strip().lower()
    for g in GPUS:
        if key == g.name or key in g.aliases:
            return g
    known = ", ".join(names())
    raise TargetError(
        f"No GPU target config is known for {name!r}.\n"
        f"Why: deviceless compiles need XLA's description of the GPU (a GpuTargetConfigProto); "
        f"the planner carries them for {known} (cost_models/targets/README.md).\n"
        f"Fix: pass one of those names, or None for a CPU profile."
    )


def default_topology(g: Gpu, n: int) -> str:
    """The ``"<partitions>x<hosts per partition>x<devices per host>"`` topology of ``n`` GPUs
    ``g``: one host when they fit on one, else whole hosts in the GPU's NVLink partitions."""
    per_host = g.devices_per_host
    if n <= per_host:
        return f"1x1x{n}"
    if n % per_host:
        raise TargetError(
            f"{n} devices do not fill whole {g.label} hosts of {per_host} GPUs.\n"
            f"Fix: use a multiple of {per_host} devices, or pass topology="
            f"'<partitions>x<hosts per partition>x<devices per host>' to resolve()."
        )
    hosts = n // per_host
    hpp = g.hosts_per_partition if hosts % g.hosts_per_partition == 0 else 1
    return f"{hosts // hpp}x{hpp}x{per_host}"


# ------------------------------------------------------------------- target config files


def targets_dir() -> Path:
    """cost_models/targets/, where the target configs and their index.json are."""
    try:
        from importlib import resources

        path = Path(str(resources.files("cost_models") / "targets"))
        if path.is_dir():
            return path
    except (ImportError, ModuleNotFoundError, TypeError):  # pragma: no cover
        pass
    return Path(__file__).resolve().parents[3] / "cost_models" / "targets"


@functools.lru_cache(maxsize=1)
def _index() -> dict:
    with open(targets_dir() / "index.json", encoding="utf-8") as f:
        return json.load(f)


def sets_for(version: str) -> list[dict]:
    """The sets of index.json recorded for jaxlib ``version``."""
    return [s for s in _index()["sets"] if version in s["jaxlib"]]


def recorded_versions(g: Gpu) -> list[str]:
    """The jaxlib versions index.json records a target config of ``g`` for."""
    base = gpu(g.derived_from) if g.derived_from else g
    return [v for s in _index()["sets"] if base.spec_file in s["files"] for v in s["jaxlib"]]


class Spec(NamedTuple):
    """One target config text a jaxlib might read, and where it comes from."""

    text: str
    path: str  # the file: relative to the repository, or the installed plugin's binary
    source: str  # where the text comes from, for the report


def _version_number(version: str) -> int:
    """``"0.12.0.1"`` -> 12000001: jaxlib versions as numbers, for "nearest"."""
    parts = [int(p) for p in re.findall(r"\d+", version)[:4]]
    parts += [0] * (4 - len(parts))
    return sum(p * 1000 ** (3 - i) for i, p in enumerate(parts))


def spec_candidates(g: Gpu, version: str, plugin_binary: str | None = None) -> list[Spec]:
    """The target configs of ``g`` a jaxlib ``version`` might read, best first: the one
    recorded here for that jaxlib (``index.json``), the one its CUDA plugin's binary embeds
    (XLA's own specs, compiled into ``plugin_binary`` from jaxlib 0.12), then those recorded
    for other jaxlibs, nearest first. Which of
    them the installed parser reads is checked by parsing (targets.resolve): XLA's text
    parser refuses a field it does not know, so a text of another jaxlib is used only when it
    parses. Raises when none is recorded at all (the files are missing from this install)."""
    if not recorded_versions(g):
        raise TargetError(
            f"cost_models/targets/index.json lists no target config for "
            f"{g.name}; the files are missing from this install."
        )
    base = gpu(g.derived_from) if g.derived_from else g
    recorded: list[tuple[int, Spec]] = []
    kinds: set[str] = set()
    for s in _index()["sets"]:
        if base.spec_file not in s["files"]:
            continue
        rel = f"cost_models/targets/{s['dir']}/{base.spec_file}"
        text = (targets_dir() / s["dir"] / base.spec_file).read_text(encoding="utf-8")
        kinds.add(field(text, "device_description_str") or "")
        source = s["files"][base.spec_file]
        if version not in s["jaxlib"]:
            source = f"recorded for jaxlib {', '.join(s['jaxlib'])}: {source}"
        distance = min(abs(_version_number(v) - _version_number(version)) for v in s["jaxlib"])
        recorded.append((distance, Spec(text, rel, source)))
    recorded.sort(key=lambda pair: pair[0])
    out = [spec for distance, spec in recorded if distance == 0]  # recorded for this jaxlib
    embedded = plugin_specs(plugin_binary) if plugin_binary else {}
    for kind in sorted(kinds):
        if kind in embedded:
            source = f"embedded in the installed CUDA plugin ({plugin_binary}): XLA's own spec"
            if embedded[kind] not in {o.text for o in out}:
                out.append(Spec(embedded[kind], plugin_binary, source))
    for _, spec in recorded:  # one text in two sets (0.11.2 reads 0.12.0's): tried once
        if spec.text not in {o.text for o in out}:
            out.append(spec)
    if g.derived_from:  # the base GPU's text, with this GPU's memory (README: GH200)
        why = f", with {g.label}'s memory (cost_models/profiles/{g.name}.json; cost_models/targets/README.md)"
        out = [Spec(_derive(o.text, g, base), o.path, o.source + why) for o in out]
    return out


@functools.lru_cache(maxsize=4)
def plugin_specs(plugin_binary: str) -> dict[str, str]:
    """The GpuTargetConfigProto texts a CUDA plugin's binary embeds (XLA's specs, compiled in
    from jaxlib 0.12 on: NUL-terminated strings holding ``gpu_device_info {``), by
    ``device_description_str``; empty when it embeds none (jaxlib 0.11.2's) or cannot be read.
    Scanning the 370 MB binary took 0.65 s on this CPU (2026-12-06)."""
    out: dict[str, str] = {}
    try:
        with open(plugin_binary, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            i = m.find(b"gpu_device_info {")
            while i != -1:
                start, end = m.rfind(b"\0", 0, i) + 1, m.find(b"\0", i)
                text = bytes(m[start:end]).decode("utf-8", "replace")
                kind = field(text, "device_description_str")
                if kind:
                    out.setdefault(kind, text)
                i = m.find(b"gpu_device_info {", end)
    except (OSError, ValueError):
        return {}
    return out


def _derive(text: str, g: Gpu, base: Gpu) -> str:
    """``base``'s target config ``text`` with ``g``'s own fields and name (cost_models/_gpus.py)."""
    for key, value in g.derived_fields:
        text, n = re.subn(rf"(\n\s*{key}: )\d+", rf"\g<1>{value}", text, count=1)
        if n != 1:
            raise TargetError(
                f"the {base.label} target config has no {key}: cannot derive {g.label}"
            )
    for key in ("name", "device_description_str"):
        text = re.sub(rf'(\n\s*{key}: )"[^"]*"', rf'\g<1>"{g.derived_name}"', text, count=1)
    return text


def field(text: str, name: str) -> str | None:
    """The string field ``name`` of a target config text."""
    m = re.search(rf'\n\s*{name}: "([^"]*)"', text)
    return m.group(1) if m else None


def compute_capability(text: str) -> str | None:
    """``"9.0"``: the CUDA compute capability a target config text gives."""
    m = re.search(r"cuda_compute_capability\s*\{([^}]*)\}", text)
    if not m:
        return None
    major = re.search(r"major:\s*(\d+)", m.group(1))
    minor = re.search(r"minor:\s*(\d+)", m.group(1))
    return f"{major.group(1) if major else 0}.{minor.group(1) if minor else 0}"
