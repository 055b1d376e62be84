"""The vectorised building blocks ``ds.dfit`` groups events with (:mod:`dfit_nb.events.accessor`): text codes
by hashing, a region path's ancestors, the length of the union of each group's intervals.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def _strings(values: np.ndarray) -> np.ndarray:
    """Fixed-width unicode (netCDF round trips may give object arrays)."""
    return values if values.dtype.kind == "U" else values.astype(str)


def _factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, sorted uniques) of a string array, hash-based (much faster than np.unique on strings)."""
    codes, uniques = pd.factorize(_strings(values), sort=True)
    return codes.astype(np.int64), np.asarray(uniques, dtype=str)


def _ancestors(name: str) -> list[str]:
    """'' and every prefix path of ``name`` on '/' boundaries, itself included."""
    if not name:
        return [""]
    parts = name.split("/")
    return ["", *("/".join(parts[: i + 1]) for i in range(len(parts)))]


def _union_length(codes: np.ndarray, start: np.ndarray, end: np.ndarray, n: int) -> np.ndarray:
    """Per group, the length of the union of its intervals (sorted sweep with a per-group running max)."""
    if codes.size == 0:
        return np.zeros(n)
    order = np.lexsort((start, codes))
    c, s, e = codes[order], start[order], end[order]
    reach = pd.Series(e).groupby(c).cummax().to_numpy()
    prev = np.empty_like(reach)
    prev[0] = -np.inf
    prev[1:] = reach[:-1]
    prev[np.r_[True, c[1:] != c[:-1]]] = -np.inf
    return np.bincount(c, weights=np.maximum(0.0, e - np.maximum(s, prev)), minlength=n)
