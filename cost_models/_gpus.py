"""The one table of the GPUs the project knows, by name.

Each GPU here has a shipped hardware profile of the same name (``profiles/<name>.json``) and,
where XLA describes it, a target config (``targets/<set>/<spec_file>``, listed in
``targets/index.json``) that the planner compiles deviceless for. Everything that asks which
GPU a name or a device is reads this table: the planner's compiler targets
(``planner/_src/xla/gpus.py``, ``targets.py``), the planner's messages that list the GPUs it
compiles for, and :func:`cost_models.calibrate` (the shipped profile a live device starts
from, :func:`for_device_kind`).

Adding a GPU: its profile JSON, its row here, and (for deviceless compiles) its ``.txtpb``
with its ``index.json`` entry (``targets/README.md`` says where XLA's specs come from).
"""

from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Gpu:
    name: str  # the hardware profile's name (cost_models/profiles/<name>.json)
    label: str  # how figures name it: "XLA:GPU for <label> (deviceless)"
    spec_file: str | None  # cost_models/targets/<set>/<spec_file>; None: derived
    device_kind: str  # regex matched against a local device's device_kind
    devices_per_host: int  # default topology: hosts of this many GPUs
    hosts_per_partition: int = 1  # ... and NVLink partitions of this many hosts
    aliases: tuple[str, ...] = ()
    derived_from: str | None = None  # a spec of another GPU with this GPU's memory (see README)
    # A derived GPU's target config: the base GPU's, with these fields and this name.
    derived_fields: tuple[tuple[str, int], ...] = ()
    derived_name: str | None = None


GPUS: tuple[Gpu, ...] = (
    Gpu(
        name="h100-sxm",
        label="H100 SXM",
        spec_file="h100_sxm.txtpb",
        device_kind=r"(?<![A-Z])H100\b(?!.*\b(PCIe|NVL)\b)",
        devices_per_host=8,
        aliases=("h100", "h100_sxm", "h100sxm"),
    ),
    Gpu(
        name="h100-pcie",
        label="H100 PCIe",
        spec_file="h100_pcie.txtpb",
        device_kind=r"(?<![A-Z])H100\b.*\bPCIe\b",
        devices_per_host=8,
        aliases=("h100_pcie", "h100pcie"),
    ),
    Gpu(
        name="h200",
        label="H200",
        spec_file="h200.txtpb",
        device_kind=r"(?<![A-Z])H200\b",
        devices_per_host=8,
        aliases=("h200-sxm", "h200_sxm"),
    ),
    Gpu(
        name="b200",
        label="B200",
        spec_file="b200.txtpb",
        device_kind=r"(?<![A-Z])B200\b",
        devices_per_host=8,
    ),
    Gpu(
        name="gb200",
        label="GB200",
        spec_file="gb200.txtpb",
        device_kind=r"\bGB200\b",
        devices_per_host=4,
        hosts_per_partition=18,
    ),
    # XLA has no GH200 spec: its GPU is an H100 (GH100, 132 SMs, sm_90a) with 96 GB of HBM3;
    # the H100 SXM spec with that memory (cost_models/targets/README.md, "GH200"). The
    # figures cost_models/profiles/gh200.json cites (NVIDIA GH200 datasheet: "96GB HBM3,
    # 4 TB/s"). Bytes as 10^9: the H100 SXM spec reports 84942979072 B for "80 GB", so this
    # is below what a GH200 reports, i.e. XLA's memory limit errs low.
    Gpu(
        name="gh200",
        label="GH200",
        spec_file=None,
        derived_from="h100-sxm",
        device_kind=r"\bGH200\b",
        devices_per_host=1,
        derived_fields=(
            ("device_memory_size", 96_000_000_000),
            ("memory_bandwidth", 4_000_000_000_000),
        ),
        derived_name="NVIDIA GH200 480GB",
    ),
)


def for_device_kind(device_kind: str) -> Gpu | None:
    """The GPU of the table a device's ``device_kind`` ("NVIDIA H200 141GB HBM3e") names, or
    None. The rows' patterns exclude each other ("GH200" is no H200, "GB200" no B200, an
    "H100 PCIe" no H100 SXM)."""
    for g in GPUS:
        if re.search(g.device_kind, device_kind):
            return g
    return None
