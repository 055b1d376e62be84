"""A plain multi-layer perceptron with a named scope per layer."""

from __future__ import annotations

import jax
import jax.numpy as jnp

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
    keys = jax.random.split(jax.random.PRNGKey(seed), len(widths))
    params = [
        {"w": jax.random.normal(k, (a, b), jnp.float32) / jnp.sqrt(a), "b": jnp.zeros(b, jnp.float32)}
        for k, a, b in zip(keys[1:], widths[:-1], widths[1:], strict=True)
    ]
    x = jax.random.normal(keys[0], (batch, widths[0]), jnp.float32)
    return mlp, (params, x)


EXAMPLE = register(Example(
    name="mlp",
    description="4-layer MLP with relu",
    make=make,
    defaults={"batch": 8, "widths": (32, 128, 128, 64, 10)},
))
