"""Every runnable zoo model builds, and one concrete train step gives a finite loss and moves the state.

The zoo (``tests/zoo``) holds models written as each library's users write them; this only
checks that they are sound fixtures (the compile-under-each-policy figures are
``python -m tests.zoo.anchors``). Entries that cannot run in this interpreter (a library
missing, JAX or Python too old) are skipped with the entry's reason.
"""

import os
import sys

import jax
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.zoo import MODELS  # noqa: E402
from tests.zoo import _util as u  # noqa: E402

pytestmark = pytest.mark.slow  # compiles whole models (the fast tier is -m "not slow")


@pytest.mark.parametrize("name", list(MODELS))
def test_zoo_model_builds_and_steps(name):
    entry = MODELS[name]
    reason = entry.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    step, args = entry.make()
    result = jax.jit(step)(*args)
    loss, new_state = u.loss_of(result), u.state_of(result)
    assert np.ndim(loss) == 0
    assert np.isfinite(float(loss)), f"{name}: loss {loss}"
    assert u.all_finite(new_state), f"{name}: a non-finite value in the new state"
    assert u.tree_changed(args[: len(new_state)], new_state), f"{name}: the step changed nothing"
