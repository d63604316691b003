"""benchmarks/_param_state_setup.py: the one setup (Adam Llama step, a variant's leaves in
pinned host memory) that benchmarks/param_state_probe.py and param_state_h200.py share."""

import dataclasses

import jax
import pytest

from benchmarks import _param_state_setup as setup
from benchmarks import param_state_h200, param_state_probe
from examples import llama

CFG = dataclasses.replace(llama.QUICKSTART, d_model=64, n_heads=4, d_ff=128, seq=16, batch=2)


def test_both_benchmarks_use_the_shared_setup():
    assert param_state_probe.build is param_state_h200.build is setup.build
    assert param_state_probe.VARIANTS is param_state_h200.VARIANTS is setup.VARIANTS


@pytest.mark.parametrize("variant", list(setup.VARIANTS))
def test_a_variant_puts_its_leaves_on_the_host(variant):
    """Each variant's named parameters (and, where it says so, their two Adam moments) and
    nothing else are on the host: in the placement and in the shardings' memory kinds."""
    s = setup.build(CFG, variant, jax.devices()[0])
    params, moments = setup.VARIANTS[variant]
    want = {f"params['layers']['{w}']" for w in params}
    assert {k for k in s.host if k.startswith("params")} == want
    opt_host = [x for x in s.leaves if x.key in s.host and x.role == "opt"]
    assert len(opt_host) == 2 * len(moments)  # mu and nu of each
    assert all(any(x.path.endswith(f"['layers']['{w}']") for w in moments) for x in opt_host)
    assert set(s.placement.param_paths()) == {k[len("params") :] for k in want}
    kinds = [
        sh.memory_kind
        for sh in jax.tree.leaves((s.param_shardings, s.opt_shardings))
        if sh.memory_kind == "pinned_host"
    ]
    assert len(kinds) == len(s.host)
