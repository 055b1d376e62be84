"""A small CNN: strided and padded convolutions, a depthwise conv, max and average pooling."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from ._init import normal, rng, zeros
from ._registry import Example, register

_DN = ("NHWC", "HWIO", "NHWC")


def conv(x: jax.Array, w: jax.Array, *, stride: int = 1, padding: str = "SAME", groups: int = 1) -> jax.Array:
    """2-D convolution in NHWC / HWIO layout."""
    return lax.conv_general_dilated(
        x, w, window_strides=(stride, stride), padding=padding,
        dimension_numbers=_DN, feature_group_count=groups,
    )


def max_pool(x: jax.Array, size: int = 2) -> jax.Array:
    """Non-overlapping max pooling."""
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, size, size, 1), (1, size, size, 1), "VALID")


def avg_pool(x: jax.Array, size: int = 2) -> jax.Array:
    """Non-overlapping average pooling."""
    s = lax.reduce_window(x, 0.0, lax.add, (1, size, size, 1), (1, size, size, 1), "VALID")
    return s / (size * size)


def cnn(params: dict[str, Any], x: jax.Array) -> jax.Array:
    """conv3x3 -> relu -> maxpool -> depthwise 3x3 -> conv1x1 stride 2 -> avgpool -> global mean -> dense."""
    with jax.named_scope("cnn"):
        with jax.named_scope("conv1"):
            x = jax.nn.relu(conv(x, params["w1"]) + params["b1"])
        with jax.named_scope("pool1"):
            x = max_pool(x)
        with jax.named_scope("dwconv"):
            x = jax.nn.relu(conv(x, params["wdw"], groups=x.shape[-1]))
        with jax.named_scope("conv2"):
            x = jax.nn.relu(conv(x, params["w2"], stride=2, padding="VALID"))
        with jax.named_scope("pool2"):
            x = avg_pool(x)
        with jax.named_scope("head"):
            return jnp.mean(x, axis=(1, 2)) @ params["wd"]


def make(*, batch: int, size: int, channels: int, width: int, classes: int, seed: int = 0):
    """``(cnn, (params, images))`` for NHWC images of ``size`` x ``size`` x ``channels``."""
    gen = rng(seed)
    params = {
        "w1": normal(gen, (3, 3, channels, width), 0.1),
        "b1": zeros(width),
        "wdw": normal(gen, (3, 3, 1, width), 0.1),
        "w2": normal(gen, (1, 1, width, 2 * width), 0.1),
        "wd": normal(gen, (2 * width, classes), 0.1),
    }
    x = normal(gen, (batch, size, size, channels))
    return cnn, (params, x)


EXAMPLE = register(Example(
    name="cnn",
    description="small CNN with padded/strided/depthwise convs and pooling",
    make=make,
    defaults={"batch": 2, "size": 32, "channels": 3, "width": 16, "classes": 10},
))
