"""Issue 41, day one: a GPU plan made without the GPU's compiler is honest (no refusal on
another compiler's figures; a cuDNN step gets a teaching error, never a raw one), and JAX
0.12.1's custom_jvp calls are told apart by the policy's key."""

from __future__ import annotations

import json
import warnings

import jax
import jax.numpy as jnp
import pytest

import cost_models
import planner
from examples import llama
from planner._src.results.report.build import made_up_times
from planner._src.types import Status
from planner._src.xla import adapter
from planner._src.xla import targets as T

SMALL = llama.LlamaConfig(
    vocab=256, d_model=128, n_heads=4, n_kv_heads=2, d_ff=256, n_layers=2, batch=2, seq=64
)


@pytest.fixture
def no_plugin(monkeypatch):
    """hardware="h200" verified by this machine's XLA:CPU: the CUDA plugin not installed."""
    monkeypatch.setattr(T, "cuda_plugin", lambda: None)


def test_no_refusal_on_the_figures_of_a_compiler_that_is_not_the_gpus(no_plugin):
    step, args = llama.make_train_step(SMALL)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = planner.Planner(step, *args, hardware="h200")
        tiny = session.trace.anchor.device_bytes / 2 / 1e9  # below full remat on XLA:CPU
        p = session.plan(tiny)
    assert p.choice == "nothing_saveable"
    assert p.verification.status == Status.UNVERIFIED and not p.verification.ok
    note = p.verification.note
    assert "not verified for the GPU: the figures are XLA:CPU" in note
    assert "not the GPU's own compiler's" in note and "No plan fits" in note
    assert 'pip install -e ".[cuda]"' in note  # the one command that gets the GPU's
    said = [str(w.message) for w in caught if issubclass(w.category, planner.PlanWarning)]
    unverified = [m for m in said if m.startswith("The plan is compiled but not verified")]
    assert len(unverified) == 1, said  # one warning: what, why, how to get the GPU's figures
    assert "not verified for the GPU: the figures are XLA:CPU" in unverified[0]
    assert "Why:" in unverified[0] and "Fix:" in unverified[0]
    report = " ".join(p.report("text").split())
    assert "PLAN STATUS: COMPILED, UNVERIFIED compiled by XLA:CPU" in report
    # The same budget on the CPU profile, whose compiler XLA:CPU is, is refused.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        cpu = planner.Planner(step, *args, hardware="cpu")
        with pytest.raises(planner.InfeasibleBudgetError, match="No plan fits"):
            cpu.plan(cpu.trace.anchor.device_bytes / 2 / 1e9)
        # The cpu profile's times are made up (its JSON says so): the report says it, and
        # its "predicted faster" is no speed claim.
        fits = cpu.plan(cpu.trace.anchor_saved.device_bytes * 1.5 / 1e9)
    text = " ".join(fits.report("text").split())
    assert "times from the made-up cpu profile: not a measurement" in text
    assert "python -m cost_models calibrate" in text
    (line,) = [v for k, v in json.loads(fits.report("json"))["status_lines"] if k == "times"]
    assert "matmul_flops_per_s.bf16" in line and "hbm_bytes_per_s" in line
    assert made_up_times(cost_models.load_profile("h200")) == ""  # cited figures
    if "predicted faster" in fits.choice_why:
        assert "by the made-up cpu profile's times: not a measurement" in fits.choice_why


def _cudnn_step(w, x):
    def loss(w):
        q = x @ w
        h = jax.checkpoint(lambda q: jax.nn.dot_product_attention(q, q, q, implementation="cudnn"))(
            q
        )
        return jnp.mean(h.astype(jnp.float32) ** 2)

    value, grad = jax.value_and_grad(loss)(w)
    return w - 1e-3 * grad, value


def test_a_cudnn_step_on_xla_cpu_gets_a_teaching_error_not_a_raw_one(no_plugin):
    w = jax.ShapeDtypeStruct((64, 64), jnp.bfloat16)
    x = jax.ShapeDtypeStruct((2, 128, 1, 64), jnp.bfloat16)
    with pytest.raises(planner.PlannerError) as got:
        planner.Planner(_cudnn_step, w, x, hardware="h200")
    text = str(got.value)
    if "cuDNN is not detected" in text:  # JAX 0.10: refused while tracing
        assert "Fix:" in text
        return
    assert "'dot_product_attention_fwd' (cuDNN attention" in text
    assert "XLA:CPU" in text and "Why:" in text
    assert 'Fix: pip install -e ".[cuda]"' in text and "JAX_PLATFORMS=cpu" in text
    assert "implementation=None" in text


def _keys_of_calls(fn, x):
    """The policy keys of the custom_jvp_call / custom_vjp_call equations of fn's jaxpr."""
    keys = []
    for eqn in jax.make_jaxpr(fn)(x).jaxpr.eqns:
        if eqn.primitive.name in adapter.OPAQUE_CALLS:
            avals = [v.aval for v in eqn.invars]
            keys.append(adapter.signature_key(eqn.primitive, *avals, **eqn.params))
    return keys


def test_a_softmax_and_a_relu_of_one_shape_have_different_policy_keys():
    """JAX 0.12.1's policy is asked about jax.nn.softmax and jax.nn.relu as custom_jvp_call
    equations; of one shape, only their bodies tell them apart, and the key holds the body's
    name and a digest of its text (the same for the same function, across traces)."""
    x = jnp.ones((4, 8))
    keys = _keys_of_calls(lambda x: (jax.nn.softmax(x), jax.nn.relu(x), jax.nn.softmax(x)), x)
    if len(keys) != 3:  # JAX 0.10: the softmax is plain equations, the relu a custom_jvp
        pytest.skip(f"JAX {jax.__version__}'s softmax is not a custom_jvp function")
    softmax, relu, again = keys
    assert softmax != relu and softmax == again
    assert "body=_softmax:" in softmax and "body=relu:" in relu
    assert "Wrapped function" not in softmax  # no unstable repr in the key
    assert _keys_of_calls(lambda x: jax.nn.softmax(x), x) == [softmax]
