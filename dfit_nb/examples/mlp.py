"""A plain multi-layer perceptron with a named scope per layer."""

from __future__ import annotations

import itertools

import jax
import numpy as np

from ._init import normal, rng, zeros
from ._registry import Example, register


def mlp(params: list[dict[str, jax.Array]], x: jax.Array) -> jax.Array:
    """Dense -> relu for every layer but the last, which is linear."""
    with jax.named_scope("mlp"):
        for i, p in enumerate(params):
            with jax.named_scope(f"dense_{i}"):
                x = x @ p["w"] + p["b"]
                if i < len(params) - 1:
                    x = jax.nn.relu(x)
        return x


def make(*, batch: int, widths: tuple[int, ...], seed: int = 0):
    """``(mlp, (params, x))`` for layer widths ``widths`` (input first)."""
    gen = rng(seed)
    params = [{"w": normal(gen, (a, b), 1 / np.sqrt(a)), "b": zeros(b)}
              for a, b in itertools.pairwise(widths)]
    x = normal(gen, (batch, widths[0]))
    return mlp, (params, x)


EXAMPLE = register(Example(
    name="mlp",
    description="4-layer MLP with relu",
    make=make,
    defaults={"batch": 8, "widths": (32, 128, 128, 64, 10)},
))
