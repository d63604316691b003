"""The GPUs the planner compiles for: a name looked up in the one GPU table
(``cost_models/_gpus.py``), and the GPU's target config for the installed jaxlib
(``cost_models/targets/``: XLA's ``GpuTargetConfigProto`` texts, by jaxlib version, with how
a GPU without one of its own is derived from another's), and its default topology.

The planner's messages that list the GPUs it has target configs for read :func:`names`.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

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


def spec_for(g: Gpu, version: str) -> tuple[str, str, str] | None:
    """(text, path relative to the repository, source) of ``g``'s target config for jaxlib
    ``version``; None when it is recorded for other jaxlib versions only. Raises when no
    version has one (which the GPU table makes impossible unless the files are missing)."""
    if not recorded_versions(g):
        raise TargetError(
            f"cost_models/targets/index.json lists no target config for "
            f"{g.name}; the files are missing from this install."
        )
    base = gpu(g.derived_from) if g.derived_from else g
    for s in sets_for(version):
        if base.spec_file in s["files"]:
            rel = f"cost_models/targets/{s['dir']}/{base.spec_file}"
            text = (targets_dir() / s["dir"] / base.spec_file).read_text(encoding="utf-8")
            source = s["files"][base.spec_file]
            if g.derived_from:  # the base GPU's file, with this GPU's memory (README: GH200)
                return (
                    _derive(text, g, base),
                    rel,
                    f"{source}, with {g.label}'s memory "
                    f"(cost_models/profiles/{g.name}.json; cost_models/targets/README.md)",
                )
            return text, rel, source
    return None


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
