"""The JAX adapter: every internal it uses is there, traces under planner policies are kept
apart from the user's (no cache cleared, no program swapped), and a concurrent user thread
sees JAX as it is."""

import importlib
import inspect
import threading

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_policies as cp

from planner._src.xla import adapter
from planner._src.xla.compile import compile_with, compiled_figures


def test_every_jax_internal_the_adapter_uses_is_there():
    missing = adapter.check_internals()
    assert missing == [], (
        f"JAX {jax.__version__} moved these internals the planner uses: {missing}; "
        "planner/_src/xla/adapter.py is the one place to adapt"
    )
    assert len(adapter.INTERNALS) >= 20


def test_check_internals_names_what_moved(monkeypatch):
    """A module, an attribute, an attribute of an attribute (``Traced._params``) and a private
    keyword argument that JAX no longer has are each named, as module.attribute."""
    monkeypatch.setattr(
        adapter,
        "INTERNALS",
        (
            ("jax._src.core", "Var"),
            ("jax._src.no_such_module", "x"),
            ("jax._src.core", "NoSuchThing"),
            ("jax._src.stages", "Traced._no_such_slot"),
        ),
    )
    monkeypatch.setattr(
        adapter, "INTERNAL_KEYWORDS", (("jax", "ShapeDtypeStruct", "_no_such_keyword", "0.0.1"),)
    )
    assert adapter.check_internals() == [
        "jax._src.no_such_module.x",
        "jax._src.core.NoSuchThing",
        "jax._src.stages.Traced._no_such_slot",
        "jax.ShapeDtypeStruct(_no_such_keyword=)",
    ]


def test_the_deviceless_hooks_find_what_they_patch():
    """What the hooks of a deviceless compile wrap (xla/deviceless.py through the adapter) is
    there, does what they expect, and is not left wrapped; if JAX moves one, this names it."""
    for name in adapter.CAPABILITY_CHECKS:
        fn = adapter.internal(adapter.FUSED_ATTENTION, name)
        assert callable(fn), f"{adapter.FUSED_ATTENTION}.{name} is no longer a function"
        assert not hasattr(fn, "_planner_original"), f"{name} was left wrapped"
    fa = importlib.import_module(adapter.FUSED_ATTENTION)
    source = inspect.getsource(fa.check_is_flash_attention)
    assert "check_compute_capability(" in source, (
        "check_is_flash_attention no longer calls check_compute_capability: the cuDNN scope "
        "in planner/_src/xla/adapter.py needs updating"
    )
    traced = jax.jit(lambda x: x, out_shardings=None).trace(jnp.zeros(2))
    params = getattr(traced, "_params", None)
    assert isinstance(params, dict) and set(adapter.TRACED_SHARDINGS) <= set(params), (
        "jax.stages.Traced no longer keeps in_shardings / out_shardings in _params: "
        "planner/_src/xla/adapter.py's traced_shardings needs updating"
    )
    assert hasattr(traced, "_lojax"), "jax.stages.Traced no longer caches _lojax"
    for module, name in adapter.SHARDING_PRIMITIVES:
        prim = adapter.internal(module, name)
        assert isinstance(prim, jax.extend.core.Primitive), f"{module}.{name} is not a Primitive"
        assert "bind" not in vars(prim), f"{module}.{name}.bind was left wrapped"


def test_float64_computes_in_64_bits_inside_the_block_only():
    with adapter.float64():
        inside = jax.jit(lambda x: x * 2)(jnp.ones(3, jnp.float64))
    assert inside.dtype == jnp.float64
    assert jnp.ones(3).dtype == jnp.float32  # the user's default is back


def _step():
    def layer(w, x):
        return jnp.sin(jnp.tanh(x @ w) @ w)

    @jax.jit
    def step(w, x):
        def body(x, w):
            return jax.checkpoint(layer)(w, x), None

        return jax.grad(lambda w: jax.lax.scan(body, x, w)[0].sum())(w)

    return step, (jnp.ones((4, 64, 64)), jnp.ones((8, 64)))


def _temp(step, args):
    return step.lower(*args).compile().memory_analysis().temp_size_in_bytes


def test_planner_traces_neither_clear_nor_poison_the_users_caches():
    step, args = _step()
    users = _temp(step, args)
    size_before = step._cache_size()
    saved = compiled_figures(compile_with(step, args, lambda rid, r: cp.everything_saveable)[1])
    remat = compiled_figures(compile_with(step, args, lambda rid, r: cp.nothing_saveable)[1])
    # The planner's two programs differ (a second policy really gives a second program) ...
    assert saved.temp_bytes > remat.temp_bytes
    # ... and the user's own program, from the user's own cache entry, is what it was.
    assert step._cache_size() >= size_before
    assert _temp(step, args) == users
    assert adapter.remat_p.bind is adapter._orig_bind
    assert adapter._ad.primitive_jvps[adapter.remat_p] is adapter._orig_jvp


def test_a_concurrent_user_trace_sees_its_own_policy():
    """While the planner traces under its policies on one thread, a user thread tracing the
    same step gets its own (default) program, every time."""
    step, args = _step()
    want = str(jax.make_jaxpr(step)(*args))
    stop = threading.Event()
    seen = []

    def user():
        while not stop.is_set():
            seen.append(str(jax.make_jaxpr(step)(*args)) == want)

    t = threading.Thread(target=user)
    t.start()
    try:
        for _ in range(5):
            compile_with(step, args, lambda rid, r: cp.everything_saveable)
    finally:
        stop.set()
        t.join()
    assert seen and all(seen)


def test_typed_prng_keys_are_counted_by_their_key_data():
    key = jax.random.key(0)
    assert adapter.nbytes(jax.typeof(key) if hasattr(jax, "typeof") else key.aval) == 8
    assert adapter.dtype_name(key) == str(key.dtype)


def test_higher_order_equations_are_not_decided_by_the_policy():
    def f(x):
        y = jax.lax.cond(x.sum() > 0, jnp.sin, jnp.cos, x)
        return jnp.tanh(y)

    eqns = jax.make_jaxpr(f)(jnp.ones(3)).jaxpr.eqns
    by_name = {e.primitive.name: e for e in eqns}
    assert not adapter.decidable(by_name["cond"])
    assert adapter.decidable(by_name["tanh"])


def test_residual_labels_are_the_lines_print_saved_residuals_prints():
    """Every residual the replay keeps (everything saveable) is labelled as JAX prints it,
    and they are all the lines JAX prints for the region's own outputs: a tensor made
    inside jax.nn.silu (a jitted function the adapter inlines) reads "output of jitted
    function 'silu'" at the user's line, a named one "named 'h'"."""
    import contextlib
    import io

    from jax.ad_checkpoint import checkpoint_name, print_saved_residuals

    def layer(w, x):
        return jnp.sin(checkpoint_name(jax.nn.silu(x @ w), "h") @ w)

    def step(w, x):
        return jax.grad(lambda w: jax.checkpoint(layer)(w, x).sum())(w)

    w, x = jnp.ones((64, 64)), jnp.ones((8, 64))
    _, (region,) = adapter.trace_step_with(step, (w, x), lambda *_: adapter.everything_saveable)
    jvp, n_primal, _ = adapter.region_jvp(region)
    replay = adapter.replay_partial_eval(jvp, n_primal, adapter.everything_saveable)
    kept = set(replay.residuals)
    ours = {
        adapter.residual_label(e)
        for e in replay.known_eqns
        if any(adapter.is_var(v) and v in kept for v in e.outvars)
    }
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_saved_residuals(jax.checkpoint(layer, policy=cp.everything_saveable), w, x)
    printed = {line for line in out.getvalue().splitlines() if " from the argument " not in line}
    assert ours == printed, (sorted(ours), sorted(printed))
    assert any("output of jitted function 'silu' from " in s and ".layer)" in s for s in ours), (
        sorted(ours)
    )
    assert any("named 'h' from " in s for s in ours), sorted(ours)


def test_leaves_on_one_device_share_one_mesh(monkeypatch):
    """with_memory_kind turns a SingleDeviceSharding into a NamedSharding over a one-device
    mesh: built once per device, not once per leaf (planner.state.param_shardings of a tree of
    three leaves on one device constructs one Mesh). JAX interns equal Meshes (the same
    object came back before too), so the count of constructions is what tells."""
    import planner

    built = []
    real = jax.sharding.Mesh

    def counting(*args, **kwargs):
        built.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(jax.sharding, "Mesh", counting)
    adapter.one_device_mesh.cache_clear()
    dev = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    tree = {"a": jnp.zeros(4), "b": jnp.ones(3), "c": jnp.ones(2)}
    out = planner.state.param_shardings(tree, {"['a']", "['c']"}, dev)
    assert [s.memory_kind for s in (out["a"], out["b"], out["c"])] == [
        "pinned_host",
        "device",
        "pinned_host",
    ]
    assert out["a"].mesh is out["b"].mesh is out["c"].mesh
    assert adapter.with_memory_kind(dev, "device") == out["b"]
    assert len(built) == 1, built


def _loop_step(depth):
    def layer(w, x):
        return jnp.tanh(x @ w) + x

    def loss(ws, x):
        for w in ws:
            x = jax.checkpoint(layer)(w, x)
        return jnp.sum(x**2)

    ws = [jnp.eye(8) * (i + 1) for i in range(depth)]
    return jax.grad(loss), (ws, jnp.ones((4, 8)))


def _backward_remats(jaxpr):
    return [
        e
        for e in adapter.open_jaxpr(jaxpr).eqns
        if e.primitive is adapter.remat_p and e.params["differentiated"]
    ]


def test_identical_layers_under_one_policy_share_jaxs_partial_evaluation():
    """N identical layers under one policy object are partially evaluated and transposed
    once (one backward body shared by the layers' equations, as in the user's own trace;
    the first layer's is its own: its input carries no tangent),
    and each layer's equation still names its own region; per-region policy objects stay
    apart (each region its own body)."""
    step, args = _loop_step(6)
    traced, bound = adapter.trace_step_with(step, args, lambda rid, r: adapter.everything_saveable)
    back = _backward_remats(traced.jaxpr)
    assert len(bound) == 6 and len(back) == 6
    assert len({id(e.params["jaxpr"]) for e in back}) == 2
    assert sorted(e.params["policy"].region_id for e in back) == list(range(6))

    def own(rid, r):
        return lambda prim, *a, **p: adapter.everything_saveable(prim, *a, **p)

    traced, _ = adapter.trace_step_with(step, args, own)
    back = _backward_remats(traced.jaxpr)
    assert len({id(e.params["jaxpr"]) for e in back}) == 6
    a, b = (e.params["policy"] for e in back[:2])
    assert a != b and adapter.RegionPolicy(0, a.decide) == adapter.RegionPolicy(5, a.decide)
