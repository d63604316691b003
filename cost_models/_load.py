"""load_profile: a hardware profile by name, by path, or passed through; the name "cpu" is
this machine's calibrated CPU profile (cost_models/_cpu_profile.py) unless
PLANNER_CPU_PROFILE=made-up says the shipped made-up one."""

from __future__ import annotations

import os

from ._calibrate import CalibrationError
from ._cpu_profile import CALIBRATED, MADE_UP, this_cpu_profile, wanted
from ._profile_figures import ProfileError
from ._profile_files import load_profile_file
from ._profiles import HardwareProfile


def load_profile(name_or_path: str | os.PathLike[str] | HardwareProfile) -> HardwareProfile:
    """A profile by shipped name ("h200"), by path to a JSON file, or passed through as is.

    "cpu": this machine's CPU, calibrated once (a few seconds) and cached
    (:func:`cost_models.this_cpu_profile`), or the shipped made-up figures where the
    environment sets PLANNER_CPU_PROFILE=made-up; "cpu-calibrated" and "cpu-made-up" name
    one of the two whatever the environment says.
    """
    if isinstance(name_or_path, str) and name_or_path in ("cpu", CALIBRATED, MADE_UP):
        if name_or_path == MADE_UP or (name_or_path == "cpu" and wanted() == "made-up"):
            return load_profile_file("cpu")
        try:
            return this_cpu_profile()
        except CalibrationError as err:
            raise ProfileError(str(err)) from None
    return load_profile_file(name_or_path)
