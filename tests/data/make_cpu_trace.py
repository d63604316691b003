"""Regenerate tests/data/cpu_tiny.xplane.pb: a real JAX CPU trace of a tiny jitted scan.

    python tests/data/make_cpu_trace.py

Two steps, each inside ``jax.profiler.StepTraceAnnotation("planner_profile_step")`` as
``planner.profile`` runs them. A CPU trace has no ``/device:*`` plane (XLA CPU runs its
thunks on host threads), which is what the test of the CPU path reads.
"""

import glob
import os
import shutil
import tempfile

import jax
import jax.numpy as jnp

HERE = os.path.dirname(os.path.abspath(__file__))


@jax.jit
def tiny(x):
    def body(c, _):
        return jnp.tanh(c @ c), None

    return jax.lax.scan(body, x, None, length=3)[0]


def main():
    jax.config.update("jax_platforms", "cpu")
    x = jnp.ones((32, 32))
    tiny(x).block_until_ready()
    logdir = tempfile.mkdtemp()
    with jax.profiler.trace(logdir):
        for i in range(2):
            with jax.profiler.StepTraceAnnotation("planner_profile_step", step_num=i):
                tiny(x).block_until_ready()
    (path,) = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
    shutil.copy(path, os.path.join(HERE, "cpu_tiny.xplane.pb"))
    shutil.rmtree(logdir)
    print(os.path.getsize(os.path.join(HERE, "cpu_tiny.xplane.pb")), "bytes")


if __name__ == "__main__":
    main()
