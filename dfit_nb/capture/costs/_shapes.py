"""Shape and dtype helpers shared by the cost rules.

Element counts, item sizes and byte sizes of avals (0 for anything without a static shape
or a dtype), the dtype *family* that keys the per-element tables of
:mod:`~dfit_nb.capture.costs.elementwise`, and integer base-2 logarithms.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import numpy as np


def _numel(aval: Any) -> int:
    shape = getattr(aval, "shape", None)
    if shape is None:
        return 0
    try:
        return math.prod(int(d) for d in shape)
    except Exception:  # symbolic (shape-polymorphic) dimensions have no static size
        return 0


def _shape(aval: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in getattr(aval, "shape", ()))


@functools.cache
def _itemsize(dtype: Any) -> int:
    # cached: issubdtype is slow and a program has few distinct dtypes
    try:
        if jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
            size = getattr(dtype, "itemsize", None)
            return int(size) if size is not None else 0
        return int(np.dtype(dtype).itemsize)
    except Exception:
        return int(getattr(dtype, "itemsize", 0) or 0)


def aval_nbytes(aval: Any) -> int:
    """Size in bytes of an aval: ``size * itemsize``; 0 for non-arrays.

    Extended dtypes (PRNG key arrays) use ``dtype.itemsize`` when it exists, else 0.

    Examples
    --------
    >>> import jax, numpy as np, jax.numpy as jnp
    >>> aval_nbytes(jax.ShapeDtypeStruct((4, 8), jnp.bfloat16))
    64
    >>> aval_nbytes(jax.ShapeDtypeStruct((3,), np.bool_)), aval_nbytes(object())
    (3, 0)
    """
    dtype = getattr(aval, "dtype", None)
    if dtype is None or getattr(aval, "shape", None) is None:
        return 0
    return _numel(aval) * _itemsize(dtype)


def _family(dtype: Any) -> str:
    """Dtype family used by the per-element tables: f16, f32, f64, c, int, uint, bool, other."""
    try:
        if jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
            return "other"
        if jax.dtypes.issubdtype(dtype, np.bool_):
            return "bool"
        if jax.dtypes.issubdtype(dtype, np.complexfloating):
            return "c"
        if jax.dtypes.issubdtype(dtype, np.floating):
            size = np.dtype(dtype).itemsize
            return "f16" if size <= 2 else ("f32" if size == 4 else "f64")
        if jax.dtypes.issubdtype(dtype, np.unsignedinteger):
            return "uint"
        if jax.dtypes.issubdtype(dtype, np.integer):
            return "int"
    except Exception:
        pass
    return "other"


def _dtype_of(aval: Any) -> Any:
    return getattr(aval, "dtype", None)


def _is_inexact(dtype: Any) -> bool:
    return _family(dtype) in ("f16", "f32", "f64", "c")


def _floor_log2(x: int) -> int:
    return x.bit_length() - 1 if x > 0 else 0


def _ceil_log2(x: int) -> int:
    return (x - 1).bit_length() if x > 1 else 0
