"""The command line of jax-offload-planner, all of it (``python -m planner``, also installed
as ``jax-offload-planner``).

    python -m planner solve MODULE:FACTORY --hbm-gb 80 [--hardware h200] [--save plan.json]
    python -m planner report plan.json [--format text|markdown|json]
    python -m planner pareto MODULE:FACTORY --hbm-gb 60,80,100 [--png pareto.png]
    python -m planner calibrate [--out my-gpu.json] [--base h200]
    python -m planner profile examples.llama:profile_quickstart --hbm-gb 0.42 [--png t.png]
    python -m planner throughput examples.accumulate:make_tiny_step --hbm-gb 0.003 --hardware cpu
    python -m planner maxtext [CONFIG.yml] key=value ... --hbm-gb 80 [--hardware h200]

The factory is a function of no arguments returning ``(step_fn, example_args)``, for
example ``examples.llama:quickstart`` (throughput: of the batch size, ``make_step(b)``). Every command takes ``--json`` for machine-readable
output on stdout; progress messages go to stderr, so stdout stays clean for pipes.
Exit status: 0 success; 1 a plan that failed its checks (pareto: no budget was feasible;
profile: nothing was measured); 2 an error the planner found (bad input, an infeasible
budget, a file that cannot be read or written: the message on stderr says what happened,
why, and the fix), also argparse's usage errors; 3 your MODULE:FACTORY raised (its traceback,
then what to check); 4 profile on a machine without a GPU (nothing to measure; the message
says where to run it instead).
"""

# The package's docstring above is the text of ``python -m planner --help`` (parser.py).
# parser.py builds argparse; main.py runs one command; common.py holds what the commands
# share; one module per command or pair: solve.py (solve, report), pareto.py, throughput.py,
# maxtext.py, measure.py (calibrate, profile). Imports of the project inside functions are
# allowed here only, each with "# deferred: <reason>" on its line (tests/test_layering.py),
# so that --help and --version answer without importing JAX.
