"""Plan for throughput: the batch size (or the number of micro-batches) chosen together with
the policy, for the most tokens per second the HBM budget allows.

    result = planner.maximize_throughput(make_step, hbm_gb=80, hardware="h200")
    result.batch_size, result.plan.policy, result.tokens_per_s
    print(result.report())

``make_step(batch_size) -> (step_fn, example_args)`` builds the train step for one batch size.
Each batch size is traced once (a :class:`~planner._src.planning.planner.Planner`: the step's
shapes scale with the batch, so every jaxpr and every compile differs; nothing is shared
between batch sizes but the hardware profile), then planned under the budget; the same
session compiles the stock policies, so every row of the table comes from one cost model and
one compiler.

The search (``batch_sizes=None``), per policy (the planner and each applicable stock policy),
is MaxText's estimator procedure (``src/maxtext/utils/estimator.py``: a binary search of the
largest ``per_device_batch_size`` that compiles without OOM) on a shared cache of sessions:
double the batch from 1 while the policy fits, then bisect between the last batch that fits
and the first that does not, down to adjacent batch sizes. "Fits" is the verifying
compiler's figure, ``argument + output - alias + temp`` of ``memory_analysis()``, within what
the budget leaves usable (``Planner.usable``). Full remat (``nothing_saveable``, the
session's anchor compile) is searched first: past its limit, only offloading can fit. The
planner is then also planned at every batch size where a stock policy does best, and
``refine`` times between its best batch and the probed neighbours, since tokens per second
need not be largest at the largest batch (more remat to fit).

Figures, per row (batch size b, n micro-batches, policy p):

* predicted step time ``T = n x t(p, b)``, with ``t`` the cost model's predicted time of one
  call of the step (cost.py); with micro-batching the step is one micro-batch's forward and
  backward (and its accumulation), run n times per optimizer step: the optimizer update, if
  the step holds it, is counted n times (an over-estimate of n - 1 updates);
* tokens per step ``N = tokens(b x n)``: the user's ``tokens`` callable, or
  ``tokens_per_example x b x n``, or (neither given) the sequence length read off the example
  batch when that is unambiguous (one integer array of rank 2 led by the batch);
* predicted tokens per second ``N / T``;
* the predicted peak (cost model) and the compiled peak (verifying compiler, the figure that
  decides "fits"); memory does not grow with n: one micro-batch's activations are live at a
  time, and the accumulator is an argument and an output of the step.

The chosen plan is the planner's fastest fitting row. It is never predicted slower than the
best fitting stock row, by the session's guarantee at each batch size (a stock policy
predicted faster than the plan that compiles within the budget is returned as the plan) and
because the planner is planned at every stock policy's best batch size.

The package, one job a module:

* ``result.py``: the records (:class:`ThroughputRow`, :class:`PolicyLimit`,
  :class:`ThroughputResult`) and the result's renderings (text, Markdown, JSON);
* ``tokens.py``: tokens per step (``tokens``, ``tokens_per_example``, or read off the batch);
* ``probe.py``: one batch size's session, whether a policy fits there;
* ``table.py``: the rows and each policy's limits from the probed batch sizes;
* ``search.py``: :func:`maximize_throughput`, the search over batch sizes.
"""

from planner._src.planning.throughput.result import PolicyLimit, ThroughputResult, ThroughputRow
from planner._src.planning.throughput.search import maximize_throughput

__all__ = ["ThroughputResult", "ThroughputRow", "PolicyLimit", "maximize_throughput"]
