"""Standalone repro: a valid jax.checkpoint policy changes float32 gradients (and the loss).

Policy: save only `broadcast_in_dim` eqns with a 3-D operand and output shape ending in 1
(inside jax.nn.softmax: the broadcast of the row max / row sum).  Compared against
nothing_saveable and dots_saveable (which are bit-identical to each other).

Also prints: the float64 reference error of each float32 gradient, the float64 policy
difference (~1e-12: the policy itself is correct), and the float32 gradient change from a
1-ulp input perturbation (the program is ill-conditioned).  Exit 1 when the float32
policy difference exceeds 1e-5 relative.

Run: JAX_PLATFORMS=cpu python benchmarks/archive/jax_remat_bug_repro.py   (about a minute on CPU)
Plain JAX only.  See benchmarks/results/jax-remat-bug-2026-12-03.md.
"""

import math
import sys

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)  # for the float64 reference; all f32 arrays are explicit
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

B, T, D, H, L, V = 4, 32, 16, 2, 4, 16
cp = jax.checkpoint_policies


def bcast_policy(prim, *avals, **params):
    return prim.name == "broadcast_in_dim" and params["shape"][-1] == 1 and avals[0].ndim == 3


rs = np.random.RandomState(329)


def w(*s):
    return rs.standard_normal(s) / math.sqrt(s[0])


P = [
    dict(
        w0=w(D, 3 * D),
        o0=w(D, D),
        hs=1 + 0.1 * rs.standard_normal((H, 1)),
        w2=w(D, 3 * D),
        o2=w(D, D),
    )
    for _ in range(L)
]
HEAD = rs.standard_normal((D, V)) / math.sqrt(D)
X = rs.standard_normal((B, T, D))
TGT = rs.randint(0, V, (B, T))


def attn(h, wqkv, wo, dpa):
    q, k, v = jnp.split(h @ wqkv, 3, -1)
    sh = lambda a: a.reshape(B, T, H, D // H)  # noqa: E731
    if dpa:
        o = jax.nn.dot_product_attention(sh(q), sh(k), sh(v), is_causal=True)
    else:
        sc = jnp.einsum("bqhd,bkhd->bhqk", sh(q), sh(k)) / math.sqrt(D // H)
        sc = jnp.where(jnp.tril(jnp.ones((T, T), bool)), sc, -1e9)
        o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(sc, -1), sh(v))
    return h + o.reshape(B, T, D) @ wo


def layer(h, p):
    h = attn(h, p["w0"], p["o0"], True)  # dot_product_attention block
    x = h.reshape(B, T, H, D // H) * p["hs"]  # heads_reshape block
    y = jnp.transpose(x, (0, 2, 1, 3)).reshape(B, H, T * (D // H))
    h = h + jnp.tanh(y).reshape(B, H, T, D // H).transpose(0, 2, 1, 3).reshape(B, T, D)
    return attn(h, p["w2"], p["o2"], False)  # einsum + jax.nn.softmax block


def make(policy):
    lay = jax.checkpoint(layer, policy=policy, prevent_cse=True)

    def loss(params, x):
        h, _ = lax.scan(lambda c, p: (lay(c, p), None), x, params["layers"], unroll=True)
        lp = jax.nn.log_softmax(h @ params["head"], -1)
        return -jnp.mean(jnp.take_along_axis(lp, jnp.asarray(TGT)[..., None], -1))

    return jax.jit(jax.value_and_grad(loss))


def params(dt):
    lay = jax.tree.map(lambda *a: jnp.asarray(np.stack(a), dt), *P)
    return dict(layers=lay, head=jnp.asarray(HEAD, dt)), jnp.asarray(X, dt)


def rel(a, b):
    return max(
        float(
            np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)))
            / np.max(np.abs(np.asarray(x, np.float64)))
        )
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))
    )


def main():
    print("jax", jax.__version__, "backend", jax.default_backend())
    p32, x32 = params(jnp.float32)
    p64, x64 = params(jnp.float64)
    ref = make(cp.nothing_saveable)(p64, x64)
    ref_b = make(bcast_policy)(p64, x64)
    res = {
        n: make(po)(p32, x32)
        for n, po in [
            ("nothing", cp.nothing_saveable),
            ("dots", cp.dots_saveable),
            ("bcast", bcast_policy),
        ]
    }
    for n, (loss, g) in res.items():
        print(
            f"f32 {n:8s} loss={float(loss):.9g}  |dloss| vs nothing={abs(float(loss) - float(res['nothing'][0])):.3g}"
            f"  grad rel vs nothing={rel(res['nothing'][1], g):.3g}  grad rel vs f64={rel(ref[1], g):.3g}"
        )
    print(
        f"f64 loss={float(ref[0]):.12g}  f64 grad rel bcast vs nothing={rel(ref[1], ref_b[1]):.3g}"
    )
    x_ulp = jnp.nextafter(x32, jnp.float32(np.inf))  # every input moved by 1 ulp
    g_ulp = make(cp.nothing_saveable)(p32, x_ulp)[1]
    print(
        f"f32 nothing, inputs +1 ulp: grad rel vs unperturbed={rel(res['nothing'][1], g_ulp):.3g}"
    )
    d = rel(res["nothing"][1], res["bcast"][1])
    print("DIFFERENCE SHOWS" if d > 1e-5 else "no difference", f"(bcast vs nothing {d:.3g})")
    return 1 if d > 1e-5 else 0


if __name__ == "__main__":
    sys.exit(main())
