"""Reductions of a sweep that stay cheap on a lazy one: the Pareto front (a tree reduction), the best machine per
objective, quantiles.

Each works on an eager Dataset (from :func:`dfit_nb.sim.sweep` or :func:`dfit_nb.sim.replay_batch`) and on a lazy
one (``chunks=``, :mod:`dfit_nb.sim.scale`) alike; on a lazy one only the objectives' chunks are computed, each
chunk reduced where it was computed (its front, its minimum) and only those small parts are gathered.

>>> from dfit_nb.sim import presets, sweep
>>> ds = sweep({"m": [64], "k": [64], "n": [64]}, presets.get("scalesim_32"), ["os", "ws"], chunks=2,
...            per_op=False, pe=[(8, 8), (16, 16), (32, 32)], dram_bw=[4.0, 64.0])
>>> front = pareto_front(ds)
>>> front.sizes["front"] >= 1, sorted(front.coords)[:2]
(True, ['dataflow', 'dram_bw'])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import xarray as xr

from ..errors import DfitError
from . import memory as _memory

#: the objectives of a front when none are named: the first of each pair a Dataset has (sweep, replay_batch)
DEFAULT_OBJECTIVES = (("total_cycles", "latency_cycles"), ("total_energy_j", "energy_j"))

#: fronts merged per step of the tree
SPLIT_EVERY = 8


class ReductionError(DfitError, ValueError):
    """A reduction was asked of variables the Dataset does not have, or of incompatible ones."""


def pareto_mask(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Points no other point beats on both ``x`` and ``y`` (lower is better; of equal points the first is kept;
    points with a non-finite value are never on the front).

    >>> pareto_mask(np.array([1.0, 2.0, 3.0, 2.0]), np.array([3.0, 1.0, 2.0, 2.0])).tolist()
    [True, True, False, False]
    """
    x, y = np.asarray(x, np.float64).reshape(-1), np.asarray(y, np.float64).reshape(-1)
    finite = np.isfinite(x) & np.isfinite(y)
    order = np.lexsort((y, x))  # stable: equal points keep their order, so the first one wins
    order = order[finite[order]]
    ys = y[order]
    prev = np.concatenate([[np.inf], np.minimum.accumulate(ys)[:-1]])
    mask = np.zeros(x.size, bool)
    mask[order] = ys < prev
    return mask


def _check_dataset(ds: Any, who: str) -> None:
    """Refuse anything but a Dataset: its ``data_vars`` are read first, which a DataArray or None lacks."""
    if not isinstance(ds, xr.Dataset):
        raise ReductionError(f"{who} needs an xarray.Dataset (a sweep or replay_batch result), got "
                             f"{type(ds).__name__}")


def _objectives(ds: xr.Dataset, objectives: Sequence[str] | None) -> tuple[str, str]:
    if objectives is None:
        found = [next((v for v in pair if v in ds.data_vars), None) for pair in DEFAULT_OBJECTIVES]
        if None in found:
            raise ReductionError("pareto_front() needs objectives=(x, y) for this Dataset: it has none of "
                                 f"{DEFAULT_OBJECTIVES}; data variables: {', '.join(map(str, ds.data_vars))}")
        return found[0], found[1]  # type: ignore[return-value]
    # a number has no len(), a dict's keys are not indexable as [0], a list of lists is unhashable as a name
    if not isinstance(objectives, (Sequence, np.ndarray)) or isinstance(objectives, str) or len(objectives) != 2 \
            or not all(isinstance(v, str) for v in objectives):
        raise ReductionError(f"objectives must be two variable names (x, y), e.g. ('total_cycles', "
                             f"'total_energy_j'), got {objectives!r:.80}")
    missing = [v for v in objectives if v not in ds.data_vars]
    if missing:
        raise ReductionError(f"objectives {missing} are not variables of the Dataset; have "
                             f"{', '.join(map(str, ds.data_vars))}")
    text = [v for v in objectives if ds[v].dtype.kind not in "biuf"]
    if text:  # lower is better needs numbers: text would fail in the float conversion of every block
        raise ReductionError(f"objectives {text} are not numeric ({', '.join(str(ds[v].dtype) for v in text)}): "
                             "a front needs two numeric variables, lower is better")
    if ds[objectives[0]].dims != ds[objectives[1]].dims:
        raise ReductionError(f"objectives {objectives[0]!r} {ds[objectives[0]].dims} and {objectives[1]!r} "
                             f"{ds[objectives[1]].dims} must have the same dims")
    return objectives[0], objectives[1]


def _block_front(x: np.ndarray, y: np.ndarray, start: tuple[int, ...], shape: tuple[int, ...]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A block's front: the flat positions (in the whole array) and objectives of its front points."""
    keep = np.flatnonzero(pareto_mask(x, y))
    if not shape:  # one point (0-d objectives, e.g. one machine's totals): no index to unravel
        return keep.astype(np.int64), x.reshape(-1)[keep], y.reshape(-1)[keep]
    local = np.unravel_index(keep, x.shape)
    flat = np.ravel_multi_index(tuple(i + s for i, s in zip(local, start, strict=True)), shape)
    return flat.astype(np.int64), x.reshape(-1)[keep], y.reshape(-1)[keep]


def _merge(*fronts: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The front of fronts; in flat order first, so equal points keep the one a single front over all would."""
    flat, x, y = (np.concatenate([f[i] for f in fronts]) for i in range(3))
    order = np.argsort(flat, kind="stable")
    flat, x, y = flat[order], x[order], y[order]
    keep = pareto_mask(x, y)
    return flat[keep], x[keep], y[keep]


def pareto_front(ds: xr.Dataset, objectives: Sequence[str] | None = None) -> xr.Dataset:
    """The points of ``ds`` no other point beats on both objectives (lower is better), as a tree reduction.

    Parameters
    ----------
    ds : xarray.Dataset
        A sweep (eager or lazy, per-op results summed first: use its totals) or a ``replay_batch`` Dataset.
    objectives : (str, str), optional
        Two variables with the same dims (default ``total_cycles``/``latency_cycles`` and
        ``total_energy_j``/``energy_j``). Every position over their dims is a point (e.g. machine x dataflow).

    Returns
    -------
    xarray.Dataset
        Dim ``front`` (sorted by the first objective), the two objectives and, per dim, the point's coordinate;
        ``flat`` is its position in C order over the dims. Per-chunk fronts are merged :data:`SPLIT_EVERY` at a
        time, so only fronts are ever gathered; equal to the front of all points at once.

    Examples
    --------
    >>> import xarray as xr, numpy as np
    >>> ds = xr.Dataset({"latency_cycles": ("machine", [3.0, 1.0, 2.0]), "energy_j": ("machine", [1.0, 3.0, 2.0])},
    ...                 coords={"machine": [10, 11, 12]})
    >>> pareto_front(ds)["machine"].values.tolist()
    [11, 12, 10]
    """
    _check_dataset(ds, "pareto_front()")
    xname, yname = _objectives(ds, objectives)
    xa, ya = ds[xname], ds[yname].transpose(*ds[xname].dims)
    dims, shape = xa.dims, xa.shape
    if xa.chunks is None and ya.chunks is None:  # eager: one block, and no Dask (an extra: dfit_nb[cluster])
        flat, x, y = _block_front(np.asarray(xa.values), np.asarray(ya.values), (0,) * len(shape), shape)
    else:
        flat, x, y = _lazy_front(xa, ya, shape)
    order = np.lexsort((flat, x))
    flat, x, y = flat[order], x[order], y[order]
    index = np.unravel_index(flat, shape) if shape else ()
    coords: dict[str, Any] = {"flat": ("front", flat)}
    for d, i in zip(dims, index, strict=True):
        coords[d] = ("front", ds[d].values[i] if d in ds.coords else i)
    return xr.Dataset({xname: ("front", x, xa.attrs), yname: ("front", y, ya.attrs)}, coords=coords,
                      attrs={k: v for k, v in ds.attrs.items() if k in ("hardware", "memory", "swept")})


def _lazy_front(xa: xr.DataArray, ya: xr.DataArray, shape: tuple[int, ...]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The front of Dask-backed objectives as a tree of block fronts, computed by Dask."""
    import dask
    import dask.array as da

    xd, yd = (v.data if isinstance(v.data, da.Array) else da.from_array(np.asarray(v.data), chunks=-1)
              for v in (xa, ya))
    yd = yd.rechunk(xd.chunks)
    starts = [np.concatenate([[0], np.cumsum(c)[:-1]]).astype(int) for c in xd.chunks]
    xb, yb = xd.to_delayed(), yd.to_delayed()
    parts = [dask.delayed(_block_front)(xb[i], yb[i], tuple(int(s[j]) for s, j in zip(starts, i, strict=True)),
                                        shape)
             for i in np.ndindex(*xd.numblocks)]
    while len(parts) > 1:  # the tree: fronts of SPLIT_EVERY fronts until one is left
        parts = [dask.delayed(_merge)(*parts[i:i + SPLIT_EVERY]) for i in range(0, len(parts), SPLIT_EVERY)]
    return dask.compute(parts[0])[0]


def best(ds: xr.Dataset, objective: str, keep: Sequence[str] = ()) -> xr.Dataset:
    """The point minimising ``objective``, per value of the ``keep`` dims (e.g. ``("dataflow",)``): its
    coordinates and every variable with the objective's dims there (computed: a lazy Dataset reduces chunk by
    chunk, then gathers the small result).

    Examples
    --------
    >>> from dfit_nb.sim import presets, sweep
    >>> ds = sweep({"m": [64], "k": [64], "n": [64]}, presets.get("scalesim_32"), ["os", "ws"], chunks=2,
    ...            per_op=False, pe=[(8, 8), (32, 32)], dram_bw=[4.0, 64.0])
    >>> b = best(ds, "total_cycles", keep=["dataflow"])
    >>> b["pe"].values.tolist(), b["dram_bw"].values.tolist()
    (['32x32', '32x32'], [64.0, 64.0])
    """
    _check_dataset(ds, "best()")
    if isinstance(keep, str):  # one dim named as a string: its characters are not dims
        keep = (keep,)
    if objective not in ds.data_vars:
        raise ReductionError(f"best() objective {objective!r} is not a variable; have "
                             f"{', '.join(map(str, ds.data_vars))}")
    bad = [d for d in keep if d not in ds[objective].dims]
    if bad:
        raise ReductionError(f"best() keep dims {bad} are not dims of {objective!r}: {ds[objective].dims}")
    over = [d for d in ds[objective].dims if d not in keep]
    try:
        where = ds[objective].argmin(dim=over)
        if ds[objective].chunks is not None:  # lazy: the small argmin computed by Dask
            import dask

            where = dict(zip(over, dask.compute(*where.values()), strict=True))
    except ValueError as err:  # NumPy's "All-NaN slice" or "argmin of an empty sequence": nothing to pick
        raise ReductionError(f"best() objective {objective!r} has no value to minimise over {over} (every value "
                             f"NaN, or no points{' for some value of ' + str(list(keep)) if keep else ''}): "
                             f"{err}") from None
    same = [v for v in ds.data_vars if set(ds[v].dims) == set(ds[objective].dims)]
    return ds[same].isel(where).compute()


def quantiles(ds: xr.Dataset, variable: str, q: Sequence[float] | float = (0.05, 0.5, 0.95)) -> xr.DataArray:
    """Exact quantiles of ``variable`` over all its points (a lazy variable is gathered after a memory check:
    per-machine totals of 10^7 machines x 3 dataflows are 240 MB).

    >>> import xarray as xr
    >>> quantiles(xr.Dataset({"v": ("m", [1.0, 2.0, 3.0])}), "v", [0.5]).values.tolist()
    [2.0]
    """
    _check_dataset(ds, "quantiles()")
    if variable not in ds.data_vars:
        raise ReductionError(f"quantiles() variable {variable!r} is not in the Dataset; have "
                             f"{', '.join(map(str, ds.data_vars))}")
    var = ds[variable]
    _memory.Estimate(f"quantiles of {variable!r}", {"values": 8.0 * var.size * 3}, {"points": var.size}).check(
        "reduce the variable first (e.g. per-machine totals: per_op=False) or take quantiles of a slice")
    try:
        qs = np.atleast_1d(np.asarray(q, np.float64))
    except (TypeError, ValueError):
        qs = np.array([np.nan])  # not numbers ("a", None): refused below with the same message
    if qs.size == 0 or not np.all((qs >= 0) & (qs <= 1)):  # NaN fails both comparisons, so it is refused too
        raise ReductionError(f"quantiles q must be one or more numbers in [0, 1], got {q!r}")
    if var.size == 0 or var.dtype.kind not in "biuf":  # NumPy's IndexError on no points, ValueError on text
        raise ReductionError(f"quantiles() variable {variable!r} has no numeric points to take quantiles of "
                             f"(size {var.size}, dtype {var.dtype})")
    values = np.asarray(var.values, np.float64).reshape(-1)
    return xr.DataArray(np.quantile(values, qs), dims=("quantile",), coords={"quantile": qs}, attrs=var.attrs)


__all__ = ("ReductionError", "best", "pareto_front", "pareto_mask", "quantiles")
