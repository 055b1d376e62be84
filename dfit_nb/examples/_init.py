"""Example parameters and inputs drawn on the host with NumPy, then placed on the device.

Why not ``jax.random``: each ``jax.random.normal`` shape (and each ``jnp.zeros`` / ``jnp.ones`` shape) compiles
a small XLA program, 20-150 ms each on 2 cores, paid again in every fresh process; the default example's
parameters cost about 1 s of compiling before anything is captured. A NumPy draw compiles nothing, and what
the examples are for (their shapes, dtypes and ops) does not depend on how the numbers were drawn.

>>> import numpy as np
>>> from dfit_nb.examples._init import normal
>>> w = normal(np.random.default_rng(0), (3, 4), scale=0.5)
>>> w.shape, str(w.dtype)
((3, 4), 'float32')
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def rng(seed: int) -> np.random.Generator:
    """The generator every example draws from, seeded by its ``seed`` argument."""
    return np.random.default_rng(seed)


def normal(gen: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0, dtype: Any = np.float32
           ) -> jax.Array:
    """Standard-normal draws times ``scale``, as a device array of ``dtype``."""
    return jnp.asarray((gen.standard_normal(shape) * scale).astype(dtype))


def zeros(shape: int | tuple[int, ...], dtype: Any = np.float32) -> jax.Array:
    """Zeros as a device array (placed, not computed: no program to compile)."""
    return jnp.asarray(np.zeros(shape, dtype))


def ones(shape: int | tuple[int, ...], dtype: Any = np.float32) -> jax.Array:
    """Ones as a device array (placed, not computed: no program to compile)."""
    return jnp.asarray(np.ones(shape, dtype))
