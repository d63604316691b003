"""What a deviceless XLA:GPU compile cannot see of the GPU's own compile of the same program,
read from the deviceless program's optimized HLO.

Without a device XLA neither sizes cuDNN workspaces nor autotunes. The parts, each named:

* **cuDNN fused attention** (``__cudnn$fmha*`` custom calls): the call's last tuple element is
  its workspace, ``u8[0]`` deviceless; on the GPU XLA asks cuDNN for the graph's size
  (``CudnnWorkspaceRewriter``). cuDNN frontend's SDPA backward node allocates, in its
  workspace, ``dQ_accum`` (float32, ``b * h_q * s_q * d_qk``), ``softmax_sum`` (float32,
  ``b * h_q * s_q``) and, for grouped-query attention (``h_k < h_q``), full-head ``dK`` and
  ``dV`` in the data type (``b * h_q * s_kv * d``, each); a deterministic backward takes a dP
  workspace (``b * h_q * s_q * s_kv * 2``, the sequences rounded up to 64) instead of
  ``dQ_accum``. The engine adds its own bytes: 256 B on every call measured. Measured on the
  H200 (jaxlib 0.11.2) the formula gives the device's workspace to the byte for all four
  shapes recorded (forward and backward, multi-head and grouped-query;
  benchmarks/results/deviceless-bound-2026-12-06.md); the engine's part is bounded here at
  :data:`ENGINE_BYTES` a call. Newer cuDNN frontends keep the full-head ``dK``/``dV``
  inside the engine; the formula keeps them, so it bounds both.
* **cuBLAS GEMM workspaces** (``__cublas$gemm``, ``__cublas$lt$matmul``): deviceless, each
  call already carries XLA's default workspace (32 MiB on Hopper); on the GPU the autotuner
  picks an algorithm and XLA shrinks the workspace to what it needs, never more
  (``GemmWorkspaceRewriter``). Nothing to add; counted for the report.
* what the workspaces do not explain (the device's choice of Triton or cuBLAS per GEMM, and
  the schedule and buffer assignment that follow) is a share of the temporaries sized from
  the measurements: ``targets.DEVICELESS_TEMP_FRACTION``.

Liveness: a workspace is an output nothing reads, live only while its call runs. XLA runs a
computation's instructions in one sequence (on one stream: ``operation_queue_id`` 0), so at
most one call's workspace is live at any instant and the peak grows by at most the largest
one; calls XLA put on other streams may overlap, so their workspaces are summed.
"""

from __future__ import annotations

import dataclasses
import json
import re

from planner._src.xla import hlo

__all__ = ["ENGINE_BYTES", "UnseenWorkspaces", "unseen_workspaces"]

# Bytes cuDNN's engine adds to a fused-attention call's workspace beyond the frontend's
# tensors: 256 B on each call measured (4 shapes, H200, jaxlib 0.11.2), bounded at 1 MiB.
ENGINE_BYTES = 1 << 20

_TARGET = re.compile(r'custom_call_target="(?P<target>[^"]+)"')


@dataclasses.dataclass(frozen=True, slots=True)
class UnseenWorkspaces:
    """The workspace bytes one deviceless program's GPU compile can add, itemized."""

    bytes: int  # the bound on the peak's growth: the largest workspace live at once
    cudnn_calls: int
    cudnn_largest: int  # the largest one call's bound
    cudnn_shapes: tuple[str, ...]  # the distinct calls, as "backward b=2 h_q=32 ..."
    cublas_calls: int
    cublas_workspace_bytes: int  # the largest cuBLAS workspace, already in the figures

    def note(self) -> str:
        """One line for the report."""
        if not self.cudnn_calls:
            return ""
        shapes = "; ".join(self.cudnn_shapes[:3]) + ("; ..." if len(self.cudnn_shapes) > 3 else "")
        return (
            f"{self.cudnn_calls} cuDNN attention call{'s' if self.cudnn_calls > 1 else ''} "
            f"({shapes}), one workspace live at a time"
        )


def _config(line: str) -> dict:
    """The custom call's ``backend_config`` JSON ({} when absent or unreadable)."""
    at = line.find("backend_config=")
    if at < 0:
        return {}
    text = line[at + len("backend_config=") :]
    try:
        return json.JSONDecoder().raw_decode(text)[0]
    except ValueError:
        return {}


def _round64(n: int) -> int:
    return (n + 63) // 64 * 64


def cudnn_attention_workspace(target: str, shapes, config: dict) -> tuple[int, str]:
    """The bound on one ``__cudnn$fmha*`` call's workspace on the GPU, and a description.

    ``shapes``: the call's output tuple as (dtype, dims), workspace last; ``config``: its
    backend_config. Forward calls: the engine's bytes only (their frontend node allocates no
    workspace tensor). Backward: ``dQ, dK, dV`` lead the tuple, each ``[b, h, s, d]``, and the
    ``intermediate_tensor_shape`` is ``[b, h_q, s_q, s_kv]``."""
    fmha = config.get("cudnn_fmha_backend_config", {})
    if "Backward" not in target:
        return ENGINE_BYTES, "forward"
    dq, dk, dv = shapes[0], shapes[1], shapes[2]
    dims = [int(d) for d in fmha.get("intermediate_tensor_shape", {}).get("dimensions", [])]
    b, h_q, s_q, d_qk = dq[1]
    s_kv = dims[3] if len(dims) == 4 else dk[1][2]
    h_k, d_v = dk[1][1], dv[1][3]
    esize = hlo.ITEMSIZE.get(dq[0], 2)
    softmax_sum = b * h_q * s_q * 4
    dq_accum = b * h_q * s_q * d_qk * 4
    full_heads = b * h_q * s_kv * (d_qk + d_v) * esize if h_k != h_q else 0
    dp = b * h_q * _round64(s_q) * _round64(s_kv) * 2 if fmha.get("force_deterministic") else 0
    total = dq_accum + softmax_sum + full_heads + dp + ENGINE_BYTES
    what = f"backward b={b} h_q={h_q} h_k={h_k} s_q={s_q} s_kv={s_kv} d={d_qk}"
    return total, what


def unseen_workspaces(module: hlo.Module | str) -> UnseenWorkspaces:
    """The workspace bytes the GPU's own compile of this deviceless program can add to its
    peak (module docstring), read from the program's optimized HLO (``hlo.parse``'s module,
    or its text)."""
    if isinstance(module, str):
        module = hlo.parse(module)
    same_stream: list[int] = []
    other_streams = 0
    shapes: dict[str, None] = {}
    largest = 0
    cudnn = cublas = cublas_ws = 0
    for ins in module.instructions:
        if ins.opcode != "custom-call":
            continue
        target = _TARGET.search(ins.attrs)
        if target is None:
            continue
        name = target["target"]
        outs = hlo.array_shapes(ins.shape)
        if name.startswith("__cublas$"):
            cublas += 1
            if outs and outs[-1][0] in ("s8", "u8"):
                cublas_ws = max(cublas_ws, hlo.array_bytes(*outs[-1]))
            continue
        if not name.startswith("__cudnn$fmha") or len(outs) < 2:
            continue
        cudnn += 1
        config = _config(ins.attrs)
        bound, what = cudnn_attention_workspace(name, outs, config)
        bound = max(
            0, bound - hlo.array_bytes(*outs[-1])
        )  # what the deviceless figure already holds
        shapes.setdefault(what)
        largest = max(largest, bound)
        if str(config.get("operation_queue_id", "0")) in ("0", ""):
            same_stream.append(bound)
        else:
            other_streams += bound
    return UnseenWorkspaces(
        bytes=max(same_stream, default=0) + other_streams,
        cudnn_calls=cudnn,
        cudnn_largest=largest,
        cudnn_shapes=tuple(shapes),
        cublas_calls=cublas,
        cublas_workspace_bytes=cublas_ws,
    )
