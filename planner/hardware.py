"""Hardware profiles: the device and host-link figures a plan is costed with (cited JSON
files bundled with ``cost_models``).

    import planner

    planner.hardware.list_profiles()                  # ("b200", "cpu", ..., "h200")
    hw = planner.hardware.load_profile("h200").replace(hbm_bytes=96 * 10**9)
    plan = planner.solve(step, *args, hbm_gb=80, hardware=hw)  # or hardware="h200"

The cost models themselves (per-primitive costs, transfers, calibration) are the
``cost_models`` package.
"""

from cost_models import HardwareProfile as HardwareProfile
from cost_models import list_profiles as list_profiles
from cost_models import load_profile as load_profile

__all__ = ["HardwareProfile", "list_profiles", "load_profile"]
