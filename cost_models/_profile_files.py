"""The shipped hardware profiles (cost_models/profiles/*.json): listing them, and loading a
profile by name, by path to a JSON file, or passed through as is.
"""

from __future__ import annotations

import difflib
import importlib.resources
import json
import os
from pathlib import Path

from ._profile_figures import ProfileError
from ._profiles import HardwareProfile


def _profiles_dir() -> importlib.resources.abc.Traversable:
    return importlib.resources.files(__package__) / "profiles"


def list_profiles() -> tuple[str, ...]:
    """Names of the profiles shipped in cost_models/profiles/, sorted."""
    return tuple(
        sorted(
            p.name.removesuffix(".json")
            for p in _profiles_dir().iterdir()
            if p.name.endswith(".json")
        )
    )


def _load_file(path: Path, display: str) -> HardwareProfile:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ProfileError(
            f"{display}: cannot read the profile file ({err.strerror}). Pass the path of an "
            f"existing JSON file, or a shipped profile name: {', '.join(list_profiles())}."
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ProfileError(
            f"{display}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno}). "
            "Compare with a shipped profile, e.g. cost_models/profiles/h100-sxm.json."
        ) from None
    return HardwareProfile.from_json(data, where=display)


def load_profile_file(name_or_path: str | os.PathLike[str] | HardwareProfile) -> HardwareProfile:
    """A profile by shipped name ("h200"), by path to a JSON file, or passed through as is."""
    if isinstance(name_or_path, HardwareProfile):
        return name_or_path
    if isinstance(name_or_path, str) and name_or_path in list_profiles():
        shipped = _profiles_dir() / f"{name_or_path}.json"
        with importlib.resources.as_file(shipped) as path:
            return _load_file(Path(path), f"{name_or_path}.json")
    if isinstance(name_or_path, os.PathLike) or (
        isinstance(name_or_path, str)
        and (
            name_or_path.endswith(".json") or os.sep in name_or_path or Path(name_or_path).is_file()
        )
    ):
        return _load_file(Path(name_or_path), os.fspath(name_or_path))
    if not isinstance(name_or_path, str):
        raise ProfileError(
            f"hardware must be a profile name, a path or a HardwareProfile, got "
            f"{type(name_or_path).__name__}."
        )
    names = list_profiles()
    close = difflib.get_close_matches(name_or_path, names, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ProfileError(
        f"unknown hardware profile {name_or_path!r}.{hint} Shipped profiles: {', '.join(names)}. "
        "Pass one of these names, the path of a profile JSON file, or a HardwareProfile (for "
        "example the one cost_models.calibrate() measures on the live device)."
    )
