"""Dtype names as the ops tables hold them, and their bytes per element (read by the cost model, the operands
table :mod:`dfit_nb._operands` and the precision study)."""

from __future__ import annotations

import functools
import re
from typing import Any

import numpy as np

#: what an ops table's ``dtype`` column may hold besides array types: "" (an op without an array output) and
#: JAX's non-array dtypes (``float0``, tokens, PRNG keys such as ``key<fry>``); the model uses the machine's word
NON_ARRAY_DTYPE = re.compile(r"|float0|token|key<\w+>")
#: block floats, bytes per element with their shared exponents: Tenstorrent's BFLOAT8_B and BFLOAT4_B hold a
#: 32x32 tile in 1,024 or 512 bytes of signs and mantissas plus 64 bytes of exponents, one per 16 elements
#: (tt-metal, ``tt_metal/api/tt-metalium/constants.hpp``: ``BFLOAT8_B_TILE_HW``, ``BFLOAT4_B_TILE_HW``)
BLOCK_FLOATS = {"bfp8": 1088 / 1024, "bfp4": 576 / 1024}


def itemsize(dtype: Any) -> float:
    """Bytes per element of ``dtype`` (0 when it is not a known array dtype: :func:`known_itemsize`, lenient).

    >>> itemsize("bfloat16"), itemsize("float32"), itemsize("float33"), itemsize("bfp8")
    (2.0, 4.0, 0.0, 1.0625)
    """
    return known_itemsize(str(dtype)) or 0.0


@functools.lru_cache(maxsize=256)
def known_itemsize(name: str) -> float | None:
    """Bytes per element of the dtype named ``name``; 0 for a non-array dtype (:data:`NON_ARRAY_DTYPE`); None
    when it names none: an unknown name (``float33``), or a NumPy type that is not numbers (object, text,
    dates). A block float (:data:`BLOCK_FLOATS`) counts its shared exponents, so its size is not a whole number."""
    if name in BLOCK_FLOATS:
        return BLOCK_FLOATS[name]
    if NON_ARRAY_DTYPE.fullmatch(name):
        return 0.0
    try:
        dtype = np.dtype(name)
    except TypeError:
        dtype = None
    if dtype is not None and dtype.kind in "biufc":
        return float(dtype.itemsize)
    import ml_dtypes  # bfloat16, int4, float8 kinds (NumPy kind "V"): ml_dtypes' types, a JAX dependency

    kind = getattr(ml_dtypes, name, None)
    if not isinstance(kind, type) or name.startswith("_"):
        return None
    try:
        dtype = np.dtype(kind)
    except TypeError:
        return None
    return float(dtype.itemsize) if dtype.kind == "V" and dtype.itemsize > 0 else None
