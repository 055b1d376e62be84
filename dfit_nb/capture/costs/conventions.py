"""XLA's counting conventions that span two ops: what its algebraic simplifier merges before it counts.

The per-primitive rules count each op of the program once. Two common patterns are merged by XLA into one
instruction before its cost analysis counts them, and are counted here the way XLA counts the merged one:

* **clip**: ``min(max(x, lo), hi)`` (or ``max(min(x, hi), lo)``) with literal bounds ``lo <= hi`` is one
  ``clamp`` (``jnp.clip``, ``jax.nn.relu6``): one flop per element, not two. The inner op then costs no flops.
* **pad into a convolution**: an explicit ``jnp.pad`` / ``lax.pad`` with zero padding value and no interior
  padding feeding a convolution's input is folded into the convolution's own padding, whose taps are not
  counted: the convolution is costed by its rule as if the padding were its own.

Both need the producer op's output to have no other consumer (else XLA keeps it); the caller (the walk) checks
that, and knows scalars passed as literals into a nested jit and converted there (``jnp.clip``'s bounds).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax.extend.core as jcore

from ._registry import OpCost, cost_of

_PAIR = {"min": "max", "max": "min"}


def literal(v: Any) -> float | None:
    """The value of a scalar literal, else ``None``."""
    if isinstance(v, jcore.Literal) and getattr(v.aval, "shape", None) == ():
        try:
            return float(v.val)
        except (TypeError, ValueError):
            return None
    return None


def clamp_inner(outer: Any, inner: Any, outer_values: Sequence[float | None] | None = None,
                inner_values: Sequence[float | None] | None = None) -> bool:
    """Whether ``outer(inner(x, a), b)`` is a clamp XLA merges, given that ``inner`` produces ``outer``'s array
    operand: both have one known scalar bound (``*_values``: each operand's value where known; by default the
    literals'), ordered (``lo <= hi``).

    >>> import jax, jax.numpy as jnp
    >>> eqns = jax.make_jaxpr(lambda x: jnp.minimum(jnp.maximum(x, 0.0), 6.0))(jnp.ones(3)).eqns
    >>> clamp_inner(eqns[1], eqns[0])
    True
    """
    o, i = outer.primitive.name, inner.primitive.name
    if _PAIR.get(o) != i or len(outer.invars) != 2 or len(inner.invars) != 2:
        return False
    b_out = list(outer_values) if outer_values is not None else [literal(v) for v in outer.invars]
    b_in = list(inner_values) if inner_values is not None else [literal(v) for v in inner.invars]
    if sum(b is not None for b in b_out) != 1 or sum(b is not None for b in b_in) != 1:
        return False
    hi_lo = (next(b for b in b_out if b is not None), next(b for b in b_in if b is not None))
    hi, lo = hi_lo if o == "min" else hi_lo[::-1]
    return lo <= hi


def without_flops(cost: OpCost) -> OpCost:
    """The inner op of a merged clamp: its bytes stay (the unfused view), its flops are the clamp's."""
    return dataclasses.replace(cost, flops=0)


def conv_through_pad(conv: Any, pad: Any, pad_values: Sequence[float | None] | None = None) -> OpCost | None:
    """The convolution's cost with ``pad`` (the op producing its input) folded into its padding, or ``None`` when
    XLA would not fold it (a non-zero padding value, interior or negative padding, padding of the batch or
    feature dimension).

    >>> import jax, jax.numpy as jnp
    >>> def f(x, w):
    ...     x = jnp.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ...     return jax.lax.conv(x, w, (1, 1), "VALID")
    >>> pad = jax.make_jaxpr(lambda x: jax.lax.pad(x, 0.0, [(0, 0, 0), (0, 0, 0), (1, 1, 0), (1, 1, 0)]))(
    ...     jnp.ones((1, 1, 4, 4))).eqns[0]
    >>> conv = jax.make_jaxpr(lambda x, w: jax.lax.conv(x, w, (1, 1), "VALID"))(
    ...     jnp.ones((1, 1, 6, 6)), jnp.ones((1, 1, 3, 3))).eqns[0]
    >>> conv.params["padding"], conv_through_pad(conv, pad).flops  # 4 x 4 outputs: 2 + 3 + 3 + 2 taps per axis
    (((0, 0), (0, 0)), 200)
    """
    if conv.primitive.name != "conv_general_dilated" or pad.primitive.name != "pad":
        return None
    pad_value = pad_values[1] if pad_values is not None else literal(pad.invars[1])
    if pad_value != 0.0:
        return None
    config = pad.params["padding_config"]
    p = conv.params
    lhs_spec = p["dimension_numbers"].lhs_spec
    if any(interior != 0 or lo < 0 or hi < 0 for lo, hi, interior in config):
        return None
    if any(config[d][0] or config[d][1] for d in lhs_spec[:2]):
        return None
    nsp = len(lhs_spec) - 2
    if any(d != 1 for d in (p.get("lhs_dilation") or (1,) * nsp)):
        return None  # padding before dilation is not padding after it
    own = tuple(p.get("padding") or ((0, 0),) * nsp)
    padding = tuple((lo + config[lhs_spec[2 + i]][0], hi + config[lhs_spec[2 + i]][1])
                    for i, (lo, hi) in enumerate(own))
    in_avals = [pad.invars[0].aval, *(v.aval for v in conv.invars[1:])]
    return cost_of("conv_general_dilated", {**p, "padding": padding}, in_avals, [v.aval for v in conv.outvars])
