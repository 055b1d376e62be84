"""ResNet-18's convolutions at ImageNet size, for static capture (not in the registry).

A 224x224 ResNet is captured from shape specs (``jax.ShapeDtypeStruct``: no
weights are made, nothing runs) and replayed; it stays out of
:func:`dfit_nb.examples.names` so that the test suite, which replays every
registered example on every preset, stays small. Batch norm is left out: it
does not change the GEMMs.

>>> import dfit_nb
>>> from dfit_nb.examples import resnet18
>>> trace = dfit_nb.capture(resnet18.forward, *resnet18.specs(size=64))
>>> int((trace.ops["m"] > 0).sum())   # 20 convolutions and the classifier
21
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def _conv(x: Any, w: Any, stride: int) -> Any:
    return jax.lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def forward(params: dict[str, Any], x: Any) -> Any:
    """ResNet-18: the 7x7 stem, max pooling, eight basic blocks (1x1 projections where the width changes), global
    average pooling and the classifier; regions ``stem``, ``block0`` ... ``block7``."""
    with jax.named_scope("stem"):
        x = jax.nn.relu(_conv(x, params["stem"], 2))
        x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    for i, (w1, w2, proj) in enumerate(params["blocks"]):
        stride = 2 if proj is not None else 1
        with jax.named_scope(f"block{i}"):
            y = _conv(jax.nn.relu(_conv(x, w1, stride)), w2, 1)
            x = jax.nn.relu(y + (_conv(x, proj, stride) if proj is not None else x))
    return x.mean(axis=(1, 2)) @ params["fc"]


def specs(batch: int = 1, size: int = 224) -> tuple[dict[str, Any], Any]:
    """``(params, x)`` as float32 shape specs for :func:`forward` (images ``batch x size x size x 3``)."""
    spec = lambda *s: jax.ShapeDtypeStruct(s, jnp.float32)
    blocks, cin = [], 64
    for cout in (64, 64, 128, 128, 256, 256, 512, 512):
        down = cout != cin
        blocks.append((spec(3, 3, cin, cout), spec(3, 3, cout, cout), spec(1, 1, cin, cout) if down else None))
        cin = cout
    return {"stem": spec(7, 7, 3, 64), "blocks": blocks, "fc": spec(512, 1000)}, spec(batch, size, size, 3)
