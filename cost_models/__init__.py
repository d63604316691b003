"""Cost models for jax-offload-planner: hardware profiles, per-primitive roofline costs,
host-link transfer times, XLA flags, and calibration on a live device.

    import cost_models as cm
    hw = cm.load_profile("h200")
    cost = cm.jaxpr_cost(jax.make_jaxpr(step)(*args))
    cost.seconds(hw), cm.transfer_seconds(cost_bytes, hw, "d2h")
"""

from . import (  # noqa: F401  (registers the cost rules)
    _rules_arrays,
    _rules_calls,
    _rules_collectives,
    _rules_matrix,
)
from ._calibrate import (
    CalibrationError,
    OverlapMeasurement,
    calibrate,
    calibrate_overlap_with_flags,
    measure_overlap,
)
from ._cost import (
    Cost,
    aval_bytes,
    eqn_cost,
    fusible_primitives,
    jaxpr_cost,
    register_rule,
    registered_primitives,
)
from ._cpu_profile import CALIBRATED as CPU_CALIBRATED
from ._cpu_profile import MADE_UP as CPU_MADE_UP
from ._cpu_profile import calibrate_cpu, calibration_note, this_cpu_profile
from ._flags import (
    XLA_GPU_MEMORY_LIMIT_SLOP,
    XlaFlag,
    compiler_temp_fraction,
    flags_to_compiler_options,
    format_xla_flags,
    xla_flags_for,
)
from ._fusion import (
    FUSIBLE,
    Work,
    eqn_seconds,
    eqn_work,
    eqns_work,
    fused_costs,
    fused_eqn_costs,
    fused_jaxpr_cost,
    fused_seconds,
    matmul_dtype,
    matmul_key,
    rate_key,
    work_of,
)
from ._hiding import FORMS as HIDING_FORMS
from ._hiding import HidingError, HidingFit, HidingModel, HidingPoint, fit_hiding
from ._load import load_profile
from ._profile_figures import ProfileError
from ._profile_files import list_profiles
from ._profiles import HardwareProfile, LinkProfile
from ._trace_overlap import hiding_from_sweep, measured_overlap_efficiency, overlap_from_trace
from ._transfer import exposed_seconds, transfer_seconds

__all__ = [
    "FUSIBLE",
    "Work",
    "eqn_work",
    "eqns_work",
    "matmul_key",
    "rate_key",
    "work_of",
    "CalibrationError",
    "Cost",
    "HardwareProfile",
    "LinkProfile",
    "OverlapMeasurement",
    "ProfileError",
    "XlaFlag",
    "aval_bytes",
    "calibrate",
    "calibrate_cpu",
    "calibration_note",
    "CPU_CALIBRATED",
    "CPU_MADE_UP",
    "this_cpu_profile",
    "calibrate_overlap_with_flags",
    "eqn_cost",
    "fusible_primitives",
    "exposed_seconds",
    "flags_to_compiler_options",
    "format_xla_flags",
    "compiler_temp_fraction",
    "XLA_GPU_MEMORY_LIMIT_SLOP",
    "fused_costs",
    "fused_eqn_costs",
    "fused_jaxpr_cost",
    "fused_seconds",
    "eqn_seconds",
    "matmul_dtype",
    "jaxpr_cost",
    "list_profiles",
    "load_profile",
    "measure_overlap",
    "register_rule",
    "registered_primitives",
    "transfer_seconds",
    "measured_overlap_efficiency",
    "overlap_from_trace",
    "HIDING_FORMS",
    "HidingError",
    "HidingFit",
    "HidingModel",
    "HidingPoint",
    "fit_hiding",
    "hiding_from_sweep",
    "xla_flags_for",
]
