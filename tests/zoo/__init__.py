"""A zoo of real models, written as each library's users write them, as planner fixtures.

Every module exposes ``make(**overrides) -> (step_fn, example_args)`` and
``make_with_policy(policy, **overrides)``. ``step_fn(*example_args)`` is a whole train step
(forward, loss, gradient, optimizer update) returning ``(*new_state, loss)``: the new values
of the leading ``len(result) - 1`` arguments, in order, then the scalar loss.
``example_args`` are small concrete arrays. ``make_with_policy`` builds the same step with a
``jax.checkpoint`` policy passed at the model's own checkpoint call site(s), the way a user
of that library passes it (``nn.remat(Block, policy=...)``, ``nnx.remat(policy=...)``,
``eqx.filter_checkpoint(f, policy=...)``, penzai's ``Checkpointed(block, policy=...)``,
``jax.checkpoint(f, policy=...)``; MaxText: see ``maxtext_model``). Nothing in the models
knows about the planner.

``MODELS`` maps a name to a ``ZooEntry``: the module, the variant's fixed overrides, what it
needs, and ``skip_reason()`` (``None`` when it runs in this interpreter).

Versions used (all checks of ``benchmarks/results/zoo-anchors-2026-12-02.md`` passed with
these; the pins to turn into a ``zoo`` extra):

    # Python 3.11 (/work/venv311) and Python 3.12 (/work/venv312)
    jax==0.10.2; python_version < "3.12"      # oldest supported JAX
    jax==0.12.0.1; python_version >= "3.12"
    flax==0.12.8; python_version < "3.12"     # the last flax for Python 3.11
    flax==0.12.12; python_version >= "3.12"
    equinox==0.13.8
    optax==0.2.8
    penzai==0.2.5                             # pulls treescope==0.1.10, ordered-set==4.1.0
    # MaxText: the `maxtext` extra of pyproject.toml pins what its train step imports
    # (pip install -e ".[maxtext]", Python >= 3.12); it was first installed as:
    #   pip install maxtext==0.2.5 jax==0.12.0.1 jaxlib==0.12.0.1 \
    #     -r <site-packages>/dependencies/requirements/generated_requirements/decoupled-requirements.txt
    #   (maxtext 0.2.5 declares no install requirements of its own; that file is its CPU /
    #   DECOUPLE_GCLOUD set; it resolved flax==0.12.12, optax==0.2.8, orbax-checkpoint==0.12.8,
    #   qwix==0.1.8, tokamax==0.0.12, grain==0.2.18, transformers==5.24.0)
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["MODELS", "ZooEntry", "runnable"]


def _version_tuple(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split("."):
        digits = "".join(c for c in part if c.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class ZooEntry:
    """One zoo model (a module, possibly with fixed overrides selecting a variant)."""

    name: str
    module: str  # under tests.zoo
    overrides: dict = dataclasses.field(default_factory=dict)
    libraries: tuple[str, ...] = ("optax",)  # importable top-level packages it needs
    min_jax: str = "0.10"
    min_python: tuple[int, int] = (3, 10)
    note: str = ""

    def _mod(self):
        return importlib.import_module(f"{__name__}.{self.module}")

    def make(self, **overrides) -> tuple[Callable, tuple[Any, ...]]:
        return self._mod().make(**{**self.overrides, **overrides})

    def make_with_policy(self, policy, **overrides) -> tuple[Callable, tuple[Any, ...]]:
        return self._mod().make_with_policy(policy, **{**self.overrides, **overrides})

    def skip_reason(self) -> str | None:
        if sys.version_info[:2] < self.min_python:
            return (
                f"needs Python >= {'.'.join(map(str, self.min_python))}, this is "
                f"{sys.version_info.major}.{sys.version_info.minor}"
            )
        for lib in self.libraries:
            if importlib.util.find_spec(lib) is None:
                return f"needs the {lib!r} package, which is not installed here"
        import jax

        if _version_tuple(jax.__version__) < _version_tuple(self.min_jax):
            return f"needs jax >= {self.min_jax}, this is {jax.__version__}"
        hook = getattr(self._mod(), "skip_reason", None)
        return hook() if hook is not None else None


def _entries():
    flax = ("optax", "flax")
    eqx = ("optax", "equinox")
    pz = ("optax", "penzai")
    mt = ("maxtext",)
    yield ZooEntry(
        "flax_linen",
        "flax_linen",
        libraries=flax,
        note="nn.scan(nn.remat(Block)), TrainState + optax.adamw",
    )
    yield ZooEntry(
        "flax_nnx",
        "flax_nnx",
        {"layers": "scan"},
        libraries=flax,
        note="nnx.vmap-created blocks, nnx.scan over nnx.remat, nnx.Optimizer",
    )
    yield ZooEntry(
        "flax_nnx_loop",
        "flax_nnx",
        {"layers": "loop"},
        libraries=flax,
        note="nnx.List of blocks, nnx.remat per call in a Python loop",
    )
    yield ZooEntry(
        "mamba_linen",
        "mamba_linen",
        libraries=flax,
        note="selective SSM (lax.associative_scan), nn.remat blocks in a Python loop, TrainState",
    )
    yield ZooEntry(
        "unet_nnx",
        "unet_nnx",
        libraries=flax,
        note="DDPM U-Net: GroupNorm ResBlocks with time embedding, skips, nnx.remat per block",
    )
    yield ZooEntry(
        "equinox_list",
        "equinox_model",
        {"layers": "list"},
        libraries=eqx,
        note="list of blocks, eqx.filter_checkpoint in a Python loop",
    )
    yield ZooEntry(
        "equinox_scan",
        "equinox_model",
        {"layers": "scan"},
        libraries=eqx,
        note="eqx.filter_vmap-stacked blocks under lax.scan",
    )
    yield ZooEntry(
        "penzai_stack",
        "penzai_model",
        {"layers": "stack"},
        libraries=pz,
        note="llamalike, pz.nn.LayerStack (lax.scan with unroll=True), Checkpointed",
    )
    yield ZooEntry(
        "penzai_unrolled",
        "penzai_model",
        {"layers": "unrolled"},
        libraries=pz,
        note="llamalike, one block per layer, Checkpointed",
    )
    yield ZooEntry(
        "gpt2_loop", "gpt2_loop", note="Python loop, no checkpoint_name, tied embeddings"
    )
    yield ZooEntry(
        "parallel_residual",
        "parallel_residual",
        note="GPT-J/PaLM x + attn(h) + mlp(h), scan, MaxText names",
    )
    yield ZooEntry(
        "moe_ragged",
        "moe",
        {"dispatch": "ragged"},
        note="top-2 of 8 experts, jax.lax.ragged_dot, scan",
    )
    yield ZooEntry(
        "moe_dense",
        "moe",
        {"dispatch": "dense"},
        note="top-2 of 8 experts, dense einsum dispatch, scan",
    )
    yield ZooEntry("dropout", "dropout", note="typed jax.random.key in the state, split per layer")
    yield ZooEntry("long_context", "long_context", note="seq 2048, d_model 64, batch 1")
    for kind in ("cond", "switch", "fori_loop", "while_loop"):
        yield ZooEntry(
            f"control_flow_{kind}",
            "control_flow",
            {"kind": kind},
            note=f"lax.{kind} inside the checkpointed layer",
        )
    yield ZooEntry("scalar_region", "scalar_region", note="every activation is f32[]")
    yield ZooEntry(
        "maxtext",
        "maxtext_model",
        {"scan_layers": True},
        libraries=mt,
        min_jax="0.11.1",
        min_python=(3, 12),
        note="MaxText's own train_step, scan_layers=True",
    )
    yield ZooEntry(
        "maxtext_unscanned",
        "maxtext_model",
        {"scan_layers": False},
        libraries=mt,
        min_jax="0.11.1",
        min_python=(3, 12),
        note="MaxText's own train_step, scan_layers=False",
    )


MODELS: dict[str, ZooEntry] = {e.name: e for e in _entries()}


def runnable() -> dict[str, ZooEntry]:
    """The entries whose ``skip_reason()`` is ``None`` in this interpreter."""
    return {k: e for k, e in MODELS.items() if e.skip_reason() is None}
