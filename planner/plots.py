"""Pictures of plans (matplotlib, PNG or SVG by the file's suffix).

    import planner

    planner.plots.hbm_timeline(plan, "hbm.png")   # device memory over one step, the budget
    planner.plots.pareto_curve(planner.pareto(step, *args, hbm_gb=[40, 60, 80]), "pareto.png")
    planner.plots.throughput_curve(planner.maximize_throughput(make_step, hbm_gb=80), "t.png")

The command line draws the same pictures (``solve --timeline``, ``pareto --png``,
``throughput --png``).
"""

from planner._src.results.plots import hbm_timeline as hbm_timeline
from planner._src.results.plots import pareto_curve as pareto_curve
from planner._src.results.plots import throughput_curve as throughput_curve

__all__ = ["hbm_timeline", "pareto_curve", "throughput_curve"]
