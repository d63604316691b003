"""The setup benchmarks/param_state_probe.py (deviceless) and benchmarks/param_state_h200.py
(on the GPU) share: examples/llama.py's Adam step with the leaves of one variant in pinned
host memory. ``cfg.layer_wrap = stream_layer_params`` for the host parameters,
``state.streamed_apply`` around ``tx.update``, params and state donated, shardings with
memory kinds on ``device``."""

from __future__ import annotations

import dataclasses
from typing import Any

# The leaves on the host per variant: (parameters under ['layers'], parameters under
# ['layers'] whose two Adam moments go too). ``none`` is the reference.
VARIANTS = {
    "none": ((), ()),
    "w1": (("w1",), ()),
    "w1+mom": (("w1",), ("w1",)),
    "mom": ((), ("w1",)),
    "3p": (("w1", "w2", "w3"), ()),
}


@dataclasses.dataclass(frozen=True)
class Setup:
    """One variant, ready to compile: ``jitted(params, opt, batch)`` with the arguments
    placed by ``param_shardings`` / ``opt_shardings`` / ``batch_shardings``."""

    cfg: Any  # llama.LlamaConfig
    leaves: tuple  # state.StateLeaf of the optimizer state and the streamable parameters
    host: frozenset  # StateLeaf.key of the leaves on the host
    placement: Any  # state.Placement
    jitted: Any
    params: Any
    opt: Any
    batch: Any
    param_shardings: Any
    opt_shardings: Any
    batch_shardings: Any

    def placed_args(self):
        """(params, opt, batch) on ``device``, the host leaves in pinned host memory."""
        import jax

        return (
            jax.device_put(self.params, self.param_shardings),
            jax.device_put(self.opt, self.opt_shardings),
            jax.device_put(self.batch, self.batch_shardings),
        )


def host_keys(leaves, variant: str) -> frozenset:
    """The ``StateLeaf.key`` of the leaves ``variant`` puts on the host."""
    ps, ms = VARIANTS[variant]
    host = {f"params['layers']['{w}']" for w in ps}
    host |= {
        x.key
        for x in leaves
        if x.role == "opt" and any(x.path.endswith(f"['layers']['{w}']") for w in ms)
    }
    return frozenset(host)


def build(cfg, variant: str, device) -> Setup:
    """The Adam Llama step of ``cfg`` with ``variant``'s leaves on the host of ``device``."""
    import jax

    import planner
    from examples import llama
    from planner._src import trainstate as st

    _, (params, opt, batch) = llama.make_adam_step(cfg)
    leaves = st.state_leaves(opt, layers=cfg.n_layers, params=params, stream_params=True)
    dev = jax.sharding.SingleDeviceSharding(device)
    host = host_keys(leaves, variant)
    pl = st.placement_of(leaves, host)
    inner = {p[len("['layers']") :] for p in pl.param_paths()}
    c = dataclasses.replace(
        cfg, layer_wrap=lambda f, inner=inner: planner.state.stream_layer_params(f, host=inner)
    )
    step, _ = llama.make_adam_step(c, apply=lambda u, pl=pl: st.streamed_apply(u, pl, cfg.n_layers))
    osh = st.state_shardings(opt, pl, dev)
    psh = planner.state.param_shardings(params, pl.param_paths(), dev)
    bsh = jax.tree.map(lambda _: dev, batch)
    jitted = jax.jit(
        step, in_shardings=(psh, osh, bsh), out_shardings=(psh, osh, dev), donate_argnums=(0, 1)
    )
    return Setup(
        cfg=cfg,
        leaves=tuple(leaves),
        host=host,
        placement=pl,
        jitted=jitted,
        params=params,
        opt=opt,
        batch=batch,
        param_shardings=psh,
        opt_shardings=osh,
        batch_shardings=bsh,
    )
