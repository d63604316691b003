"""MaxText's config: MaxText imported (or how to install it), a config read with MaxText's
own ``pyconfig.initialize`` on the overrides, and the ``remat_policy: custom`` keys that
config honours."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping

from planner._src.errors import InvalidArgumentError, UnsupportedError

MAXTEXT_VERSION = "0.2.5"
_INSTALL = (
    'pip install "jax-offload-planner[maxtext]" (maxtext==0.2.5 with its CPU requirements, '
    "Python >= 3.12; tests/zoo/__init__.py lists the exact pins)"
)

# Keys every planning run sets unless the user does: nothing here changes the model, the
# batch or the sharding; they keep MaxText from writing files, starting JAX's distributed
# runtime or its persistent compilation cache while the planner only traces and compiles.
QUIET = {
    "run_name": "planner",
    "base_output_directory": os.path.join(os.sep, "tmp", "maxtext-planner"),
    "enable_checkpointing": "False",
    "enable_tensorboard": "False",
    "enable_goodput_recording": "False",
    "monitor_goodput": "False",
    "skip_jax_distributed_system": "True",
    "dataset_type": "synthetic",
    "jax_cache_dir": "",
}


def import_maxtext():
    """MaxText's modules, or an UnsupportedError saying how to install them."""
    if sys.version_info < (3, 12):
        raise UnsupportedError(
            f"MaxText {MAXTEXT_VERSION} needs Python >= 3.12; this is "
            f"{sys.version_info.major}.{sys.version_info.minor}.\nFix: make a Python 3.12 venv "
            f"and {_INSTALL}."
        )
    try:
        import maxtext
        from maxtext.configs import pyconfig
        from maxtext.trainers.pre_train import train
    except Exception as e:  # ImportError, or one of its dependencies failing at import
        raise UnsupportedError(
            f"MaxText is not importable here ({type(e).__name__}: {e}).\nWhy: planning "
            "MaxText's own train step needs MaxText itself, which the planner does not "
            f"install by default.\nFix: {_INSTALL}."
        ) from e
    version = getattr(maxtext, "__version__", None)
    if version is None:
        from importlib.metadata import version as _v

        version = _v("maxtext")
    return maxtext, pyconfig, train, version


def base_config_path() -> str:
    """MaxText's ``configs/base.yml`` in the installed package."""
    maxtext, *_ = import_maxtext()
    return os.path.join(os.path.dirname(maxtext.__file__), "configs", "base.yml")


def parse_overrides(overrides) -> dict[str, str]:
    """``key=value`` strings (MaxText's command line) or a mapping -> ``{key: value}``."""
    if overrides is None:
        return {}
    if isinstance(overrides, Mapping):
        return {str(k): str(v) for k, v in overrides.items()}
    if isinstance(overrides, str):
        overrides = overrides.split()
    out = {}
    for item in overrides:
        k, sep, v = str(item).partition("=")
        if not sep or not k:
            raise InvalidArgumentError(
                f"MaxText override {item!r} is not key=value.\nFix: write each override as "
                "MaxText's command line takes it, e.g. per_device_batch_size=4."
            )
        out[k.strip()] = v.strip()
    return out


def load_config(config_path: str | None, overrides: Mapping[str, str]):
    _, pyconfig, _, _ = import_maxtext()
    path = config_path or base_config_path()
    if not os.path.exists(path):
        raise InvalidArgumentError(
            f"MaxText config {path!r} does not exist.\nFix: pass a MaxText YAML config (its "
            f"configs/base.yml: {base_config_path()}), or none for base.yml."
        )
    argv = ["", path] + [f"{k}={v}" for k, v in {**QUIET, **overrides}.items()]
    # MaxText's validator sets XLA_FLAGS where it is unset (its HLO dump flags,
    # configs/types.py); the planner changes no environment variable: put it back.
    had = os.environ.get("XLA_FLAGS")
    try:
        return pyconfig.initialize(argv)
    except Exception as e:  # noqa: BLE001  (MaxText's validators raise many kinds)
        raise InvalidArgumentError(
            f"MaxText refused the config ({type(e).__name__}: {e}).\nWhy: the planner builds "
            "the step with MaxText's own pyconfig.initialize, which validates every key.\n"
            f"Fix: check the overrides; `python -m maxtext.trainers.pre_train.train {path} "
            "...` would refuse them the same way."
        ) from e
    finally:
        if had is None:
            os.environ.pop("XLA_FLAGS", None)
        else:
            os.environ["XLA_FLAGS"] = had


def custom_keys(config_path: str | None = None, overrides=None) -> tuple[str, ...]:
    """The tensor names MaxText's ``remat_policy: custom`` honours for this config, in
    MaxText's order: the keys its config turns into ``tensors_on_device`` when set to
    ``device``. A key MaxText's validator refuses to set for this config (``indexer_cutoff_
    threshold`` without ``use_indexer``) is left out: the config cannot carry it."""
    import_maxtext()
    from maxtext.configs import types

    fields = getattr(types.MaxTextConfig, "model_fields", {})
    remat_location = getattr(types, "RematLocation", None)
    cands = [
        n
        for n, f in fields.items()
        if remat_location is not None and f.annotation is remat_location
    ]
    if not cands:
        raise UnsupportedError(
            "Cannot find MaxText's remat_policy: custom keys (fields typed RematLocation in "
            "maxtext.configs.types.MaxTextConfig).\nWhy: this MaxText is not the one the "
            f"planner reads ({MAXTEXT_VERSION}).\nFix: {_INSTALL}."
        )
    base = {k: v for k, v in parse_overrides(overrides).items() if k not in cands}
    for _ in range(len(cands)):
        try:
            with _absl_quiet():  # MaxText logs each refusal before raising it
                cfg = load_config(
                    config_path,
                    {**base, "remat_policy": "custom", **dict.fromkeys(cands, "device")},
                )
        except InvalidArgumentError as e:
            refused = [k for k in cands if f"`{k}=" in str(e) or f"'{k}'" in str(e)]
            if not refused:
                raise
            cands = [k for k in cands if k not in refused]
            continue
        return tuple(cfg.tensors_on_device)
    return ()


@contextlib.contextmanager
def _absl_quiet():
    import logging

    log = logging.getLogger("absl")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)
