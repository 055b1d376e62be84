"""Time binning of intervals: how much of each interval's weight falls into each time bin, per group.

Everything here is vectorized and needs O(N + n_bins × n_groups) memory: an
interval touches at most two bins partially (its first and last), and the
bins it covers fully get its rate through a difference array summed along
time. A million intervals over 256 bins × 4096 groups never allocate an
N × n_bins array.

>>> import numpy as np
>>> from dfit_nb.events.binning import bin_intervals, busy_fraction, time_edges
>>> edges = time_edges(4.0, 4)
>>> bin_intervals(np.array([0.5]), np.array([2.5]), np.array([4.0]), np.array([0]), 1, edges)[:, 0]
array([1., 2., 1., 0.])
>>> busy_fraction(np.array([0.5]), np.array([2.5]), np.array([0]), 1, edges)[:, 0]
array([0.5, 1. , 0.5, 0. ])
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ..errors import DfitError

__all__ = ["BinningError", "bin_intervals", "busy_fraction", "time_edges"]


class BinningError(DfitError, ValueError):
    """Bad input to the binning functions (edges, intervals or groups)."""


def time_edges(t_end: float, n_bins: int) -> np.ndarray:
    """``n_bins`` equal bins over ``[0, t_end]``: the ``n_bins + 1`` edges.

    ``t_end == 0`` (nothing happened) gives a single bin ``[0, 1]``.

    Parameters
    ----------
    t_end : float
        End of the time axis, finite and ``>= 0``.
    n_bins : int
        Number of bins, ``>= 1``.

    Returns
    -------
    numpy.ndarray
        float64 edges, strictly increasing.

    Examples
    --------
    >>> time_edges(10.0, 4)
    array([ 0. ,  2.5,  5. ,  7.5, 10. ])
    >>> time_edges(0.0, 256)
    array([0., 1.])
    """
    t_end = float(t_end)
    if int(n_bins) != n_bins or n_bins < 1:
        raise BinningError(f"n_bins must be a whole number >= 1, got {n_bins!r}")
    if not np.isfinite(t_end) or t_end < 0:
        raise BinningError(f"t_end must be finite and >= 0, got {t_end!r}")
    if t_end == 0:
        return np.array([0.0, 1.0])
    return np.linspace(0.0, t_end, int(n_bins) + 1)


def _check_edges(edges: ArrayLike) -> np.ndarray:
    edges = np.asarray(edges, dtype=np.float64)
    if edges.ndim != 1 or edges.size < 2:
        raise BinningError(f"edges must be a 1-D array of at least 2 values, got shape {edges.shape}")
    if not np.all(np.isfinite(edges)):
        raise BinningError("edges must be finite")
    if not np.all(np.diff(edges) > 0):
        raise BinningError("edges must be strictly increasing")
    return edges


def bin_intervals(start: ArrayLike, end: ArrayLike, weight: ArrayLike, group: ArrayLike, n_groups: int,
                  edges: ArrayLike) -> np.ndarray:
    """Spread each interval's weight uniformly over ``[start, end)`` and sum it per (time bin, group).

    Parameters
    ----------
    start, end : array_like of float, shape (N,)
        Interval bounds, finite, ``end >= start``.
    weight : array_like of float, shape (N,) or scalar
        Total weight of each interval (e.g. bytes), spread uniformly over it.
    group : array_like of int, shape (N,)
        Group index of each interval, in ``[0, n_groups)``.
    n_groups : int
        Number of groups (columns of the result).
    edges : array_like of float, shape (n_bins + 1,)
        Strictly increasing bin edges; bin ``b`` is ``[edges[b], edges[b+1])``.

    Returns
    -------
    numpy.ndarray
        float64, shape ``(n_bins, n_groups)``: the weight falling into each bin.

    Notes
    -----
    A zero-length interval puts its whole weight into the bin holding its
    start (the last bin when ``start == edges[-1]``). The part of an
    interval outside ``[edges[0], edges[-1]]`` is dropped (its share of the
    weight with it), so the total is conserved only for intervals inside the
    edges. Memory is O(N + n_bins × n_groups): partial first and last bins
    are summed with ``np.bincount``; fully covered bins get the interval's
    rate through a difference array cumulated along time.

    Examples
    --------
    >>> import numpy as np
    >>> edges = np.array([0.0, 1.0, 2.0, 3.0])
    >>> bin_intervals([0.0, 1.5, 3.0], [3.0, 1.5, 3.0], [3.0, 7.0, 5.0], [0, 1, 1], 2, edges)
    array([[1., 0.],
           [1., 7.],
           [1., 5.]])
    """
    edges = _check_edges(edges)
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    if start.ndim != 1 or end.shape != start.shape:
        raise BinningError(f"start and end must be 1-D arrays of one shape, got {start.shape} and {end.shape}")
    n = start.size
    weight = np.broadcast_to(np.asarray(weight, dtype=np.float64), (n,))
    group = np.asarray(group)
    if group.shape != (n,):
        raise BinningError(f"group must have shape ({n},), got {group.shape}")
    if n and not np.issubdtype(group.dtype, np.integer):
        raise BinningError(f"group must hold integers, got dtype {group.dtype}")
    group = group.astype(np.int64, copy=False)
    n_groups = int(n_groups)
    if n_groups < 1:
        raise BinningError(f"n_groups must be >= 1, got {n_groups}")
    if n and (group.min() < 0 or group.max() >= n_groups):
        raise BinningError(f"group indices must lie in [0, {n_groups}), got [{group.min()}, {group.max()}]")
    if not (np.all(np.isfinite(start)) and np.all(np.isfinite(end))):
        raise BinningError("interval starts and ends must be finite")
    if np.any(end < start):
        i = int(np.flatnonzero(end < start)[0])
        raise BinningError(f"interval {i} ends before it starts ({start[i]} > {end[i]})")

    n_bins = edges.size - 1
    size = n_bins * n_groups
    lo, hi = edges[0], edges[-1]
    points = end == start
    s = np.clip(start, lo, hi)
    e = np.clip(end, lo, hi)
    spans = ~points & (e > s)

    out = None  # the first sum is the array (0 + x is x: the sums are the ones np.zeros + ... gave)
    # zero-length intervals: all the weight in the bin holding start
    zp = points & (start >= lo) & (start <= hi)
    if zp.any():
        b = np.minimum(np.searchsorted(edges, start[zp], side="right") - 1, n_bins - 1)
        out = np.bincount(b * n_groups + group[zp], weights=weight[zp], minlength=size)

    if spans.any():
        s, e, g = s[spans], e[spans], group[spans]
        rate = weight[spans] / (end[spans] - start[spans])
        bs = np.minimum(np.searchsorted(edges, s, side="right") - 1, n_bins - 1)  # edges[bs] <= s < edges[bs+1]
        be = np.maximum(np.searchsorted(edges, e, side="left") - 1, 0)  # edges[be] < e <= edges[be+1]
        same = bs == be
        # one bin: the whole clipped part; otherwise the partial first and last bins
        first = np.where(same, e, edges[bs + 1]) - s
        idx = np.concatenate([bs * n_groups + g, (be * n_groups + g)[~same]])
        w = np.concatenate([rate * first, (rate * (e - edges[be]))[~same]])
        part = np.bincount(idx, weights=w, minlength=size)
        if out is None:
            out = part
        else:
            out += part
        # fully covered bins bs+1 .. be-1: +rate at bs+1, -rate at be, cumulated along time
        full = be - bs >= 2
        if full.any():
            r, gf = rate[full], g[full]
            diff = np.bincount(np.concatenate([(bs[full] + 1) * n_groups + gf, be[full] * n_groups + gf]),
                               weights=np.concatenate([r, -r]), minlength=size)
            rates = _cumulate_bins(diff.reshape(n_bins, n_groups))
            rates *= np.diff(edges)[:, None]
            out += rates.ravel()
    if out is None:  # only intervals outside the edges
        out = np.zeros(size)
    return out.reshape(n_bins, n_groups)


def _cumulate_bins(rates: np.ndarray) -> np.ndarray:
    """``np.cumsum(rates, axis=0)``, in place, the same sums in the same order.

    NumPy accumulates along the first axis of a C-ordered array element by element down each column; adding each
    bin's row to the next is one vectorised add per bin, much faster on wide rows (``python
    benchmarks/bench_binning.py``; identical bit for bit). Few groups (a narrow row) keep ``np.cumsum``."""
    n_bins, n_groups = rates.shape
    if n_groups < _ROWWISE_GROUPS:
        return np.cumsum(rates, axis=0, out=rates)
    for b in range(1, n_bins):
        rates[b] += rates[b - 1]
    return rates


#: from this many groups per bin, :func:`_cumulate_bins` adds row by row
_ROWWISE_GROUPS = 64


def busy_fraction(start: ArrayLike, end: ArrayLike, group: ArrayLike, n_groups: int, edges: ArrayLike) -> np.ndarray:
    """Fraction of each time bin that each group spends inside its intervals.

    :func:`bin_intervals` with ``weight = end - start`` divided by the bin
    width. It stays ``<= 1`` when a group's intervals do not overlap;
    overlapping intervals of one group add up (a group running two things at
    once is "200 % busy").

    Parameters
    ----------
    start, end : array_like of float, shape (N,)
        Interval bounds.
    group : array_like of int, shape (N,)
        Group index of each interval, in ``[0, n_groups)``.
    n_groups : int
        Number of groups.
    edges : array_like of float, shape (n_bins + 1,)
        Strictly increasing bin edges.

    Returns
    -------
    numpy.ndarray
        float64, shape ``(n_bins, n_groups)``.

    Examples
    --------
    >>> busy_fraction([0.0, 3.0], [1.5, 4.0], [0, 1], 2, [0.0, 2.0, 4.0])
    array([[0.75, 0.  ],
           [0.  , 0.5 ]])
    """
    edges = _check_edges(edges)
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    return bin_intervals(start, end, end - start, group, n_groups, edges) / np.diff(edges)[:, None]
