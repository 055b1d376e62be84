"""The binning and pooling that keep a run's charts under their row budget (:mod:`dfit_nb.views.run`, the
timeline, :mod:`dfit_nb.views.thermal`): tile grids pooled into blocks, time bins coarsened, a cube cut to a
time window.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from ._common import window_mask

_US = 1e6  # seconds -> microseconds
_MIN_BINS = 16  # time resolution a pooled chart keeps at least (when the run has that many bins)


def _hz(attrs: Any) -> float:
    return float(attrs.get("clock_ghz", 1.0)) * 1e9


def _round(a: Any, digits: int = 5) -> np.ndarray:
    """Floats rounded to ``digits`` significant digits (smaller specs, same picture)."""
    a = np.asarray(a, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        mag = np.where(np.isfinite(a) & (a != 0), np.floor(np.log10(np.abs(a))), 0.0)
    scale = 10.0 ** (digits - 1 - mag)
    return np.round(a * scale) / scale


def _factorize(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values.astype(str), return_inverse=True)`` by hashing: O(n), not a sort of a million strings.

    >>> names, idx = _factorize(np.array(["b", "a", "b"], dtype=object))
    >>> names.tolist(), idx.tolist()
    (['a', 'b'], [1, 0, 1])
    """
    codes, uniq = pd.factorize(np.asarray(values, dtype=object))
    uniq = np.asarray([str(u) for u in uniq], dtype=str)
    order = np.argsort(uniq, kind="stable")
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    return uniq[order], rank[codes]


def _dense(keys: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` for integer keys in ``[0, size)``, by counting (no sort)."""
    present = np.bincount(keys, minlength=size) > 0
    return np.flatnonzero(present), (np.cumsum(present) - 1)[keys]


def _pool_factor(rows: int, cols: int, budget: int) -> int:
    """The smallest power of two ``p`` with ``ceil(rows / p) * ceil(cols / p) <= budget``."""
    p = 1
    while -(-rows // p) * -(-cols // p) > max(budget, 1) and p < max(rows, cols):
        p *= 2
    return p


def _pool_grid(da: xr.DataArray, p: int, how: str = "mean") -> xr.DataArray:
    """Pool ``tile_y``/``tile_x`` into ``p x p`` blocks (coordinates: each block's first tile)."""
    if p <= 1:
        return da
    pooled = getattr(da.coarsen(tile_y=p, tile_x=p, boundary="pad"), how)()
    return pooled.assign_coords(tile_y=np.arange(pooled.sizes["tile_y"]) * p,
                                tile_x=np.arange(pooled.sizes["tile_x"]) * p)


def _coarsen_time(da: xr.DataArray, factor: int, how: str = "mean") -> xr.DataArray:
    """Merge ``factor`` consecutive time bins (the start of each merged bin is its first bin's start)."""
    if factor <= 1:
        return da
    starts = da["time"].values[::factor]
    ends = da["time_end"].values[np.minimum(np.arange(factor - 1, da.sizes["time"] + factor - 1, factor),
                                            da.sizes["time"] - 1)] if "time_end" in da.coords else None
    plain = da.drop_vars([c for c in ("time_end",) if c in da.coords])
    out = getattr(plain.coarsen(time=factor, boundary="pad"), how)()
    out = out.assign_coords(time=starts)
    if ends is not None:
        out = out.assign_coords(time_end=("time", ends))
    return out


def _cube_of(run: Any) -> xr.Dataset:
    return run.cube if hasattr(run, "cube") else run


def _bins_in_window(obj: Any, hz: float, time_window: tuple[float, float] | None) -> Any:
    """``obj`` (a cube or one of its variables) on the time bins that overlap ``time_window`` (seconds)."""
    if time_window is None:
        return obj
    start = obj["time"].values
    end = obj["time_end"].values if "time_end" in obj.coords else start + 1
    return obj.isel(time=np.flatnonzero(window_mask(start / hz, end / hz, time_window, "time bin (in s)")))


def _window_note(time_window: tuple[float, float] | None) -> str:
    return "" if time_window is None else f"window {time_window[0] * _US:.4g}-{time_window[1] * _US:.4g} us"
