"""Layers under ``lax.scan``, with a ``cond``, a ``while_loop``, remat and custom derivatives inside.

Each scanned layer: a remat'ed dense block with a custom_vjp activation; a
data-dependent ``cond`` (on the sign of the layer weight's mean, which :func:`make`
alternates: half the layers take each branch) choosing a gated or a residual update; a
``while_loop`` that scales the activations up by 8, then halves them until their
RMS falls below 0.1 (a data-dependent trip count: 15 iterations over the 4
layers at the default sizes, as eager mode measures).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._init import normal, rng
from ._registry import Example, register


@jax.custom_vjp
def soft_clip(x: jax.Array) -> jax.Array:
    """tanh-based clipping with a hand-written backward pass."""
    return 4.0 * jnp.tanh(x / 4.0)


def _soft_clip_fwd(x):
    y = soft_clip(x)
    return y, y


def _soft_clip_bwd(y, g):
    return (g * (1.0 - jnp.square(y / 4.0)),)


soft_clip.defvjp(_soft_clip_fwd, _soft_clip_bwd)


def _dense_block(w: jax.Array, h: jax.Array) -> jax.Array:
    with jax.named_scope("dense"):
        return soft_clip(h @ w)


def scan_model(params: dict[str, Any], x: jax.Array, *, unroll: bool | int = 1) -> jax.Array:
    """Run the stacked layers in ``params`` over ``x`` (batch, width)."""
    def layer(carry, inputs):
        h, step = carry
        w, gate = inputs
        with jax.named_scope("block"):
            y = jax.checkpoint(_dense_block)(w, h)
        with jax.named_scope("mix"):
            y = lax.cond(jnp.mean(w) > 0.0,
                         lambda a, b: a + b,
                         lambda a, b: a * jax.nn.sigmoid(b @ gate),
                         h, y)
        with jax.named_scope("renorm"):
            def too_big(c):
                return jnp.sqrt(jnp.mean(jnp.square(c))) > 0.1
            y = lax.while_loop(too_big, lambda c: c * 0.5, 8.0 * y)
        return (y, step + 1), jnp.mean(y)

    with jax.named_scope("stack"):
        (h, _), means = lax.scan(layer, (x, jnp.int32(0)), (params["w"], params["gate"]), unroll=unroll)
    with jax.named_scope("readout"):
        return h @ params["w_out"] + means.sum()


def make(*, layers: int, batch: int, width: int, seed: int = 0, unroll: bool | int = 1):
    """``(fn, (params, x))``; ``unroll=True`` unrolls the scan completely."""
    gen = rng(seed)
    w = gen.standard_normal((layers, width, width)) / np.sqrt(width)
    # each layer's matrix signed so its mean alternates +, -, +, ...: the cond takes each branch for half the
    # layers whatever the seed (a sign flip leaves the draw's distribution unchanged)
    w *= (np.sign(w.mean(axis=(1, 2))) * np.where(np.arange(layers) % 2 == 0, 1.0, -1.0))[:, None, None]
    params = {
        "w": jnp.asarray(w.astype(np.float32)),
        "gate": normal(gen, (layers, width, width), 1 / np.sqrt(width)),
        "w_out": normal(gen, (width, width), 1 / np.sqrt(width)),
    }
    x = normal(gen, (batch, width))

    def fn(params, x):
        return scan_model(params, x, unroll=unroll)

    fn.__name__ = "scan_model"
    return fn, (params, x)


EXAMPLE = register(Example(
    name="scan_model",
    description="layers under lax.scan with cond, while_loop, remat and custom_vjp inside",
    make=make,
    defaults={"layers": 4, "batch": 8, "width": 64, "unroll": 1},
))
