"""Parameters in pinned host memory, streamed per layer slice (planner/_src/params.py): the
wrapped step gives the unwrapped step's numbers (XLA:CPU), and on deviceless XLA:GPU for the
H200 (skipped without the CUDA plugin) its host arguments are the parameter and its device
bytes drop by that parameter against the same step with it in HBM
(benchmarks/param_offload_probe.py: the probe behind it)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import planner
from planner._src.xla import compile as xla_compile
from planner._src.xla import deviceless
from planner._src.xla import targets as tg

L, D, B = 4, 256, 8
HOST = {"['layers']['w']"}


def _params():
    k1, k2 = jax.random.split(jax.random.key(0))
    return {
        "layers": {"w": jax.random.normal(k1, (L, D, D)) / D**0.5, "b": jnp.zeros((L, D))},
        "head": jax.random.normal(k2, (D, D)) / D**0.5,
    }


def _layer(x, layer):
    return jnp.tanh(x @ layer["w"] + layer["b"])


def _step_of(streamed: bool):
    """An SGD step over a scanned model; ``streamed``: ``['layers']['w']`` on the host."""
    fn = planner.state.stream_layer_params(_layer, host={"['w']"}) if streamed else _layer
    body = jax.checkpoint(fn)

    def loss(params, x):
        h, _ = jax.lax.scan(lambda h, lw: (body(h, lw), None), x, params["layers"])
        return jnp.mean((h @ params["head"]) ** 2)

    def step(params, x):
        value, g = jax.value_and_grad(loss)(params, x)
        if streamed:  # the weight's gradient is on the host: SGD per slice on the device
            new = planner.state.streamed_apply_updates(params, g, HOST, L, scale=-0.1)
        else:
            new = jax.tree.map(lambda p, u: (p + -0.1 * u).astype(p.dtype), params, g)
        return new, value

    return step


def _jitted(streamed: bool, device):
    dev = jax.sharding.SingleDeviceSharding(device)
    params = _params()
    psh = planner.state.param_shardings(params, HOST if streamed else set(), dev)
    xsh = dev.with_memory_kind("device")
    return (
        jax.jit(_step_of(streamed), in_shardings=(psh, xsh), donate_argnums=(0,)),
        psh,
        xsh,
    )


def test_streamed_params_give_the_unwrapped_steps_numbers():
    """XLA:CPU: the parameter in pinned host memory, brought in per layer inside the
    checkpointed layer and updated per slice: the new parameters and the loss equal the
    plain step's (same program on the device; bitwise here), and the new stacked weight is
    back in pinned host memory."""
    x = jax.random.normal(jax.random.key(2), (B, D))
    want = jax.jit(_step_of(False))(_params(), x)
    jitted, psh, _ = _jitted(True, jax.devices()[0])
    got = jitted(jax.device_put(_params(), psh), x)
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    assert got[0]["layers"]["w"].sharding.memory_kind == "pinned_host"
    assert got[0]["head"].sharding.memory_kind == "device"
    shardings = jax.tree_util.tree_flatten_with_path(psh)[0]
    on_host = {jax.tree_util.keystr(k) for k, s in shardings if s.memory_kind == "pinned_host"}
    assert on_host == HOST


def test_streamed_params_compile_with_one_slice_on_the_device():
    """Deviceless XLA:GPU for the H200: the compiled step takes the stacked weight as host
    arguments (exactly its bytes), writes it back as host output, and its device bytes are
    at most the all-HBM step's less the weight's and its gradient's bytes (plus one layer
    slice): the forward and the backward read one slice at a time, no L copies kept."""
    target = tg.resolve("h200", num_devices=1)
    if target.kind != "deviceless":
        pytest.skip(f"no deviceless XLA:GPU here: {target.description}")
    x = jax.ShapeDtypeStruct((B, D), jnp.float32)
    figures = {}
    for streamed in (False, True):
        jitted, psh, xsh = _jitted(streamed, jax.devices()[0])
        params = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), _params(), psh
        )
        args = deviceless.args_for(
            target, (params, jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=xsh))
        )
        prog = xla_compile.compile_traced(target, jitted, args)
        m = prog.compiled.memory_analysis()
        figures[streamed] = (
            m.argument_size_in_bytes
            + m.output_size_in_bytes
            - m.alias_size_in_bytes
            + m.temp_size_in_bytes,
            int(getattr(m, "host_argument_size_in_bytes", 0)),
            int(getattr(m, "host_output_size_in_bytes", 0)),
            prog.compiled.as_text(),
        )
    w = L * D * D * 4
    (hbm, hbm_host, _, _), (host, host_args, host_out, hlo) = figures[False], figures[True]
    assert hbm_host == 0
    assert host_args == w and host_out == w
    # The weight and its gradient (on the host too: trainstate/streamed.py) leave HBM; the all-HBM
    # step also holds a gradient-accumulation workspace here (36.26 MB against 5.06 MB on JAX
    # 0.11.2, 2026-12-04), so the drop is at least the two, less one slice in flight.
    assert hbm - host >= 2 * w - w // L, (hbm, host, w)
    assert "S(5)" in hlo
