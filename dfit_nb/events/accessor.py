"""The ``ds.dfit`` accessor: group, clip, filter and compare an events Dataset.

Importing this module registers the accessor (``xr.register_dataset_accessor("dfit")``)
and does nothing else. The accessor works on any Dataset that follows
:mod:`dfit_nb.events.schema` (dim ``event``); on another Dataset each method
raises :class:`~dfit_nb.events.schema.EventSchemaError` naming the missing
variables. Every result carries ``units`` and ``description`` attrs.

Everything is vectorized over events (``pandas.factorize`` and
``numpy.bincount``); the only Python loops run over distinct region names.
Its building blocks are :mod:`dfit_nb.events._grouping`; the made-up events of the examples,
:func:`demo_events` and :func:`synthetic_events`, are :mod:`dfit_nb.events._synthetic` (importable from here).

>>> from dfit_nb.events.accessor import demo_events
>>> ds = demo_events()
>>> ds.dfit.by_kind()["bytes"].sel(kind="dram").item()
64.0
>>> ds.dfit.by_region(depth=1)["duration"].to_series().to_dict()
{'dec': 5.0, 'enc': 50.0}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from ..errors import DfitError
from ._grouping import _ancestors, _factorize, _strings, _union_length
from ._synthetic import demo_events as demo_events
from ._synthetic import synthetic_events as synthetic_events
from .binning import busy_fraction, time_edges
from .schema import EVENT_VARS, KINDS, OPTIONAL_VARS, SOURCES, EventSchemaError

__all__ = ["EventQueryError", "EventsAccessor", "demo_events"]

DEFAULT_VARS = ("duration", "bytes", "energy_pj", "macs")
UNITS = ("cycle", "s")
# quantities spread uniformly over an event (scaled by the fraction kept by window())
SCALED_VARS = ("bytes", "macs", "energy_pj")


class EventQueryError(DfitError, ValueError):
    """A bad argument to a ``ds.dfit`` method (unknown unit, kind, source or variable)."""


def _truncate(names: np.ndarray, depth: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Map region names to their first ``depth`` segments: (index into new names, new sorted names)."""
    if depth is None:
        return np.arange(names.size), names
    try:  # int() of text, NaN, inf or a list raised its own ValueError/OverflowError/TypeError; True is no depth
        whole = not isinstance(depth, bool) and int(depth) == depth >= 0
    except (TypeError, ValueError, OverflowError):
        whole = False
    if not whole:
        raise EventQueryError(f"depth must be a whole number >= 0 or None, got {depth!r}")
    cut = np.array(["/".join(n.split("/")[: int(depth)]) if n else "" for n in names.tolist()], dtype=str)
    return _factorize(cut) if cut.size else (np.zeros(0, np.int64), cut)


def _check_unit(unit: str) -> None:
    if unit not in UNITS:
        raise EventQueryError(f"unknown unit {unit!r}; valid: {', '.join(UNITS)}")


def _names(arg: Any, what: str) -> list[str] | None:
    """``arg`` (the parameter ``what``: one name, a sequence of names, or None) as a list of names.

    A number, a dict or None inside a list would be iterated (or turned into text) and fail far from the call with
    a bare ``TypeError``, or match nothing: each is named here.
    """
    if arg is None:
        return None
    if isinstance(arg, str):
        return [arg]
    if isinstance(arg, (bytes, Mapping)) or not isinstance(arg, Iterable):
        raise EventQueryError(f"{what} must be a str or a sequence of str, got {_shown(arg)}")
    names = list(arg)
    bad = [a for a in names if not isinstance(a, str)]
    if bad:
        raise EventQueryError(f"{what} must be a str or a sequence of str, got {_shown(bad[0])} among them")
    return names


def _op_ids(op: Any) -> np.ndarray:
    """``select``'s ``op`` as int64 ids: an int (or several). A float such as 1.5 would be truncated to op 1 by
    an integer cast, and text such as "3" read as op 3, each silently selecting an op not asked for."""
    try:
        ids = np.atleast_1d(np.asarray(op))
    except (TypeError, ValueError):  # ragged nesting
        ids = np.asarray([object()])
    if ids.ndim != 1 or not (ids.dtype.kind in "iu" or (ids.size == 0 and ids.dtype.kind == "f")):
        raise EventQueryError(f"op must be an op id (an int, as in trace.ops['op']) or a sequence of them, got "
                              f"{_shown(op)}")
    return ids.astype(np.int64)


def _shown(value: Any) -> str:
    """What a message says it was given: the type and a short repr."""
    text = repr(value)
    return f"{type(value).__name__} ({text[:60] + '...' if len(text) > 60 else text})"


def _check_choice(values: list[str] | None, valid: Sequence[str], what: str) -> None:
    bad = sorted(set(values or ()) - set(valid))
    if bad:
        raise EventQueryError(f"unknown {what}(s) {bad}; valid: {', '.join(valid)}")


@xr.register_dataset_accessor("dfit")
class EventsAccessor:
    """``ds.dfit``: queries over an events Dataset (dim ``event``, see :mod:`dfit_nb.events.schema`).

    Parameters
    ----------
    ds : xarray.Dataset
        The events Dataset; checked when a method is called.

    Examples
    --------
    >>> ds = demo_events()
    >>> ds.dfit.duration().values
    array([10., 20., 20.,  5.])
    >>> import xarray as xr
    >>> xr.Dataset({"x": ("op", [1])}).dfit.duration()
    Traceback (most recent call last):
    ...
    dfit_nb.events.schema.EventSchemaError: ds.dfit needs an events Dataset (see dfit_nb.events.schema); \
this one has no 'op', 'region', ... variable(s)
    """

    def __init__(self, ds: xr.Dataset) -> None:
        self._obj = ds

    # ---- helpers ------------------------------------------------------------------
    def _events(self) -> xr.Dataset:
        ds = self._obj
        missing = [name for name in EVENT_VARS if name not in ds.variables and name not in OPTIONAL_VARS]
        if missing:
            raise EventSchemaError("ds.dfit needs an events Dataset (see dfit_nb.events.schema); this one has no "
                                   + ", ".join(repr(m) for m in missing) + " variable(s)")
        if "event" not in ds.dims:
            raise EventSchemaError("ds.dfit needs an events Dataset with the dimension 'event'")
        return ds

    def _values(self, var: str, unit: str) -> tuple[np.ndarray, dict[str, Any]]:
        """float64 values of ``var`` (or of the event durations) and the attrs of its sum."""
        ds = self._obj
        if var == "duration":
            a, b = ("start", "end") if unit == "cycle" else ("start_s", "end_s")
            return (ds[b].values - ds[a].values).astype(np.float64), {
                "units": unit, "description": f"summed event durations ({unit}; busy time, not elapsed time)"}
        if var not in ds.variables or ds[var].dims != ("event",) or ds[var].dtype.kind not in "biuf":
            valid = ["duration", *(n for n, v in ds.data_vars.items() if v.dims == ("event",) and v.dtype.kind in "f")]
            raise EventQueryError(f"cannot sum {var!r}: not a numeric per-event variable; valid: {', '.join(valid)}")
        attrs = ds[var].attrs
        return ds[var].values.astype(np.float64), {
            "units": attrs.get("units", ""), "description": f"sum of: {attrs.get('description', var)}"}

    def _sums(self, codes: np.ndarray, n: int, var: str | Sequence[str], unit: str,
              mask: np.ndarray | None = None) -> dict[str, tuple[np.ndarray, dict[str, Any]]]:
        _check_unit(unit)
        out = {}
        for v in _names(var, "var") or []:
            vals, attrs = self._values(v, unit)
            if mask is not None:
                vals = vals[mask]
            out[v] = (np.bincount(codes, weights=vals, minlength=n), attrs)
        return out

    def _grid(self) -> tuple[np.ndarray, int, int]:
        """(on-tile mask, rows, columns): the grid is sized by the largest tile index of any event."""
        y, x = self._obj["tile_y"].values, self._obj["tile_x"].values
        on = (y >= 0) & (x >= 0)
        if not on.any():
            return on, 0, 0
        return on, int(y[on].max()) + 1, int(x[on].max()) + 1

    # ---- per-event ----------------------------------------------------------------
    def duration(self, unit: str = "cycle") -> xr.DataArray:
        """Each event's duration, ``end - start``.

        Parameters
        ----------
        unit : {"cycle", "s"}
            Cycles of the machine's clock (NaN for measured events) or seconds.

        Returns
        -------
        xarray.DataArray
            Dim ``event``, named ``duration``.

        Examples
        --------
        >>> d = demo_events().dfit.duration("s")
        >>> d.attrs["units"], (d.values * 1e9).round(6).tolist()
        ('s', [10.0, 20.0, 20.0, 5.0])
        """
        self._events()
        _check_unit(unit)
        vals, _ = self._values("duration", unit)
        return xr.DataArray(vals, dims=("event",), coords={"event": self._obj["event"]}, name="duration",
                            attrs={"units": unit, "description": f"event duration, end - start ({unit})"})

    # ---- group-bys ----------------------------------------------------------------
    def by_region(self, depth: int | None = None, var: str | Sequence[str] = DEFAULT_VARS, unit: str = "cycle",
                  *, inclusive: bool = False) -> xr.Dataset:
        """Sum per-event variables per region.

        Parameters
        ----------
        depth : int, optional
            Truncate region paths to their first ``depth`` segments before
            grouping (a roll-up: with ``depth=1``, ``encoder/layer_0/attn``
            counts for ``encoder``; ``depth=0`` puts everything in ``''``).
        var : str or sequence of str
            Variables to sum: ``"duration"`` (event durations in ``unit``; a
            sum of busy time over tiles and kinds, not elapsed time) or any
            numeric per-event variable (``bytes``, ``energy_pj``, ``macs``).
        unit : {"cycle", "s"}
            Unit of ``duration``. Measured events have no cycles (NaN); use
            ``"s"`` or :meth:`select` ``(source="simulated")``.
        inclusive : bool
            If true, every ancestor path (the root ``''`` included) gets the
            sum of all its descendants, and appears even if no event sits
            directly in it.

        Returns
        -------
        xarray.Dataset
            Dim ``region`` (sorted paths), one variable per ``var``.

        Examples
        --------
        >>> ds = demo_events()
        >>> ds.dfit.by_region(var="macs")["macs"].to_series().to_dict()
        {'dec': 50.0, 'enc/attn': 100.0, 'enc/mlp': 200.0}
        >>> ds.dfit.by_region(var="macs", inclusive=True)["macs"].to_series().to_dict()
        {'': 350.0, 'dec': 50.0, 'enc': 300.0, 'enc/attn': 100.0, 'enc/mlp': 200.0}
        """
        ds = self._events()
        codes, names = _factorize(ds["region"].values)
        to_cut, names = _truncate(names, depth)
        codes = to_cut[codes]
        sums = self._sums(codes, names.size, var, unit)
        if inclusive:
            pairs = [(path, i) for i, name in enumerate(names.tolist()) for path in _ancestors(name)]
            paths = np.array(sorted({p for p, _ in pairs}), dtype=str)
            src = np.array([i for _, i in pairs], dtype=np.int64)
            dst = np.searchsorted(paths, np.array([p for p, _ in pairs], dtype=str))
            sums = {v: (np.bincount(dst, weights=s[src], minlength=paths.size), a) for v, (s, a) in sums.items()}
            names = paths
        return xr.Dataset(
            {v: (("region",), s, a) for v, (s, a) in sums.items()},
            coords={"region": ("region", names, {"units": "", "description": "region path ('' = root)"})},
            attrs={"depth": -1 if depth is None else int(depth), "inclusive": int(inclusive)},
        )

    def by_tile(self, kind: str | Sequence[str] | None = None, var: str | Sequence[str] = DEFAULT_VARS,
                unit: str = "cycle") -> xr.Dataset:
        """Sum per-event variables per tile.

        Parameters
        ----------
        kind : str or sequence of str, optional
            Only events of these kinds (default: all).
        var : str or sequence of str
            As in :meth:`by_region`.
        unit : {"cycle", "s"}
            Unit of ``duration``.

        Returns
        -------
        xarray.Dataset
            Dims ``(tile_y, tile_x)``, sized by the largest tile index of any
            event + 1. Events off the tiles (``-1``, e.g. measured) are left out.

        Examples
        --------
        >>> demo_events().dfit.by_tile(kind="compute", var="macs")["macs"].values
        array([[100., 200.],
               [  0.,  50.]])
        """
        ds = self._events()
        kinds = _names(kind, "kind")
        _check_choice(kinds, KINDS, "kind")
        on, ny, nx = self._grid()
        if kinds is not None:
            on = on & np.isin(_strings(ds["kind"].values), kinds)
        codes = (ds["tile_y"].values[on].astype(np.int64) * nx + ds["tile_x"].values[on])
        sums = self._sums(codes, ny * nx, var, unit, mask=on)
        return xr.Dataset(
            {v: (("tile_y", "tile_x"), s.reshape(ny, nx), a) for v, (s, a) in sums.items()},
            coords={"tile_y": ("tile_y", np.arange(ny), {"units": "1", "description": "tile row"}),
                    "tile_x": ("tile_x", np.arange(nx), {"units": "1", "description": "tile column"})},
            attrs={"kind": ",".join(kinds) if kinds else "all"},
        )

    def by_kind(self, var: str | Sequence[str] = DEFAULT_VARS, unit: str = "cycle") -> xr.Dataset:
        """Sum per-event variables per kind of work.

        Parameters
        ----------
        var : str or sequence of str
            As in :meth:`by_region`.
        unit : {"cycle", "s"}
            Unit of ``duration``.

        Returns
        -------
        xarray.Dataset
            Dim ``kind`` holding all of ``compute, sram, noc, dram, retile``
            (zeros for kinds without events).

        Examples
        --------
        >>> demo_events().dfit.by_kind(var="energy_pj")["energy_pj"].values
        array([35.,  0.,  0., 30.,  0.])
        """
        ds = self._events()
        codes, names = _factorize(ds["kind"].values)
        _check_choice(names.tolist(), KINDS, "event kind")
        codes = np.array([KINDS.index(k) for k in names.tolist()], dtype=np.int64)[codes]
        sums = self._sums(codes, len(KINDS), var, unit)
        return xr.Dataset(
            {v: (("kind",), s, a) for v, (s, a) in sums.items()},
            coords={"kind": ("kind", np.array(KINDS), {"units": "", "description": "kind of work"})},
        )

    def by_kernel(self, var: str | Sequence[str] = DEFAULT_VARS, unit: str = "cycle") -> xr.Dataset:
        """Sum per-event variables per kernel the chip ran (``run.kernels``), with each kernel's span.

        Parameters
        ----------
        var : str or sequence of str
            As in :meth:`by_region`.
        unit : {"cycle", "s"}
            Unit of ``duration`` and of the span.

        Returns
        -------
        xarray.Dataset
            Dim ``kernel`` (the kernel ids the events carry, ascending; events without one, ``-1`` such as
            measured ones, are left out), one variable per ``var``, plus ``start`` and ``end`` (its first
            event's start and its last event's end) and ``n_ops`` (distinct ops among its events).

        Examples
        --------
        >>> k = demo_events().dfit.by_kernel(var="macs")
        >>> k["macs"].to_series().to_dict(), k["end"].values.tolist(), k["n_ops"].values.tolist()
        ({0: 300.0, 1: 50.0}, [30.0, 35.0], [2, 1])
        """
        ds = self._events()
        if "kernel" not in ds.variables:
            raise EventSchemaError("these events carry no 'kernel' variable (saved before kernels were "
                                   "recorded); replay the trace again, or group by op with select()")
        _check_unit(unit)
        kernel = ds["kernel"].values.astype(np.int64)
        on = kernel >= 0
        ids, codes = np.unique(kernel[on], return_inverse=True)
        codes = codes.reshape(-1)
        sums = self._sums(codes, ids.size, var, unit, mask=on)
        a, b = ("start", "end") if unit == "cycle" else ("start_s", "end_s")
        start = np.full(ids.size, np.inf)
        np.minimum.at(start, codes, ds[a].values[on].astype(np.float64))
        end = np.full(ids.size, -np.inf)
        np.maximum.at(end, codes, ds[b].values[on].astype(np.float64))
        pairs = np.unique(np.stack([codes, ds["op"].values[on].astype(np.int64)]), axis=1)
        n_ops = np.bincount(pairs[0], minlength=ids.size)
        span = {"units": unit, "description": f"its first event's start ({unit})"}
        data = {v: (("kernel",), s, at) for v, (s, at) in sums.items()}
        data.update(start=(("kernel",), start, span),
                    end=(("kernel",), end, {"units": unit, "description": f"its last event's end ({unit})"}),
                    n_ops=(("kernel",), n_ops, {"units": "1", "description": "distinct ops among its events"}))
        return xr.Dataset(data, coords={"kernel": ("kernel", ids, {
            "units": "1", "description": "kernel id (run.kernels)"})})

    # ---- subsets ------------------------------------------------------------------
    def window(self, t0: float, t1: float, unit: str = "cycle") -> xr.Dataset:
        """The events inside the time window ``[t0, t1)``, clipped to it.

        Events overlapping the window are kept (a zero-length event when
        ``t0 <= start < t1``); their start and end are clipped to the window,
        in both units (the other unit is interpolated linearly within each
        event). ``bytes``, ``macs`` and ``energy_pj`` are assumed spread
        uniformly over an event and are scaled by the fraction of the event
        inside the window, so windows that tile the timeline add up to the
        whole. Windowing in cycles drops measured events (they have none).

        Parameters
        ----------
        t0, t1 : float
            Window bounds, ``t0 <= t1``.
        unit : {"cycle", "s"}
            Unit of ``t0`` and ``t1``.

        Returns
        -------
        xarray.Dataset
            An events Dataset (the ``event`` coordinate keeps the original
            event ids) with attrs ``window_start``, ``window_end``,
            ``window_unit``.

        Examples
        --------
        >>> w = demo_events().dfit.window(5, 15)
        >>> w["start"].values, w["end"].values, w["bytes"].values
        (array([ 5., 10.,  5.]), array([10., 15., 15.]), array([ 0.,  0., 32.]))
        """
        ds = self._events()
        _check_unit(unit)
        try:  # else float()'s own ValueError ('a') or TypeError (None), naming neither bound
            t0, t1 = float(t0), float(t1)
        except (TypeError, ValueError) as err:
            units = "cycles" if unit == "cycle" else "seconds"
            raise EventQueryError(f"a window needs t0 and t1 as numbers (in {units}), got {t0!r} and {t1!r}") from err
        if np.isnan(t0) or np.isnan(t1) or t1 < t0:
            raise EventQueryError(f"a window needs t0 <= t1, got [{t0}, {t1})")
        cols = ("start", "end"), ("start_s", "end_s")
        (a, b), (oa, ob) = cols if unit == "cycle" else cols[::-1]
        s, e = ds[a].values, ds[b].values
        point = e == s
        keep = np.flatnonzero(np.where(point, (s >= t0) & (s < t1), (s < t1) & (e > t0)))
        out = ds.isel(event=keep)
        s, e, os_, oe = s[keep], e[keep], out[oa].values, out[ob].values
        length = e - s
        span = length > 0
        safe = np.where(span, length, 1.0)
        f0 = np.where(span, (np.clip(s, t0, t1) - s) / safe, 0.0)
        f1 = np.where(span, (np.clip(e, t0, t1) - s) / safe, 1.0)
        new = {a: np.clip(s, t0, t1), b: np.clip(e, t0, t1),
               oa: os_ + f0 * (oe - os_), ob: os_ + f1 * (oe - os_)}
        new.update({v: out[v].values * (f1 - f0) for v in SCALED_VARS})
        for name, vals in new.items():
            out[name] = out[name].copy(data=vals)
        out.attrs = {**ds.attrs, "window_start": t0, "window_end": t1, "window_unit": unit}
        return out

    def select(self, op: int | Sequence[int] | None = None, region: str | Sequence[str] | None = None,
               kind: str | Sequence[str] | None = None, source: str | Sequence[str] | None = None) -> xr.Dataset:
        """The events matching every given filter (each accepts one value or a list: any of them).

        Parameters
        ----------
        op : int or sequence of int, optional
            Op ids.
        region : str or sequence of str, optional
            Region paths; a path matches itself and everything below it
            (``"enc"`` matches ``enc`` and ``enc/attn`` but not ``encoder``;
            ``""`` matches everything).
        kind : str or sequence of str, optional
            Kinds of work (``compute, sram, noc, dram, retile``).
        source : str or sequence of str, optional
            ``simulated`` or ``measured``.

        Returns
        -------
        xarray.Dataset
            An events Dataset (the ``event`` coordinate keeps the original ids).

        Examples
        --------
        >>> demo_events().dfit.select(region="enc", kind="compute")["op"].values
        array([0, 1])
        """
        ds = self._events()
        mask = np.ones(ds.sizes["event"], dtype=bool)
        if op is not None:
            mask &= np.isin(ds["op"].values, _op_ids(op))
        if region is not None:
            regions = _strings(ds["region"].values)
            hit = np.zeros_like(mask)
            for r in _names(region, "region") or []:
                r = r.strip("/")
                if not r:
                    hit[:] = True
                    break
                hit |= (regions == r) | np.strings.startswith(regions, r + "/")
            mask &= hit
        for name, arg, valid in (("kind", kind, KINDS), ("source", source, SOURCES)):
            values = _names(arg, name)
            if values is not None:
                _check_choice(values, valid, name)
                mask &= np.isin(_strings(ds[name].values), values)
        return ds.isel(event=np.flatnonzero(mask))

    # ---- comparisons and cubes ----------------------------------------------------
    def compare(self, other: xr.Dataset | None = None, *, depth: int | None = None) -> xr.Dataset:
        """Region by region, simulated against measured time.

        The simulated time of a region is the length of the union of its
        simulated events' ``[start_s, end_s)`` (the elapsed time during which
        any of its events is active, however many tiles and kinds overlap).
        The measured time is the sum of its measured events' durations (they
        are host-sequential, so that is also their union; it matches the
        trace's own ``time_s × count`` totals).

        Parameters
        ----------
        other : xarray.Dataset, optional
            Events of the other source; without it this Dataset must hold
            both simulated and measured events (e.g. from
            :func:`dfit_nb.events.schema.concat`).
        depth : int, optional
            Compare regions truncated to their first ``depth`` segments
            (``depth=0``: the whole program).

        Returns
        -------
        xarray.Dataset
            Dim ``region`` (every region of either source): ``simulated_s``,
            ``measured_s`` (0 where a source has no event) and ``ratio``
            = simulated / measured (NaN where measured is 0).

        Examples
        --------
        >>> from dfit_nb.events import events_dataset
        >>> meas = events_dataset({"op": [0, 1, 2], "kind": ["compute"] * 3, "source": ["measured"] * 3,
        ...                        "region": ["enc/attn", "enc/mlp", "dec"],
        ...                        "start_s": [0.0, 2e-8, 6e-8], "end_s": [2e-8, 6e-8, 7e-8]})
        >>> demo_events().dfit.compare(meas, depth=1)["ratio"].to_series().round(3).to_dict()
        {'dec': 0.5, 'enc': 0.5}
        """
        parts = [self._events()]
        if other is not None:
            if not isinstance(other, xr.Dataset):  # a Run, a path or a DataArray has no events to read
                raise EventQueryError(f"compare() needs other as an events Dataset (e.g. run.events or "
                                      f"dfit_nb.events.measured_events(trace)) or None, got {_shown(other)}")
            parts.append(other.dfit._events())
        region = np.concatenate([_strings(p["region"].values) for p in parts])
        source = np.concatenate([_strings(p["source"].values) for p in parts])
        start = np.concatenate([p["start_s"].values for p in parts])
        end = np.concatenate([p["end_s"].values for p in parts])
        sim, meas = source == "simulated", source == "measured"
        for name, m in (("simulated", sim), ("measured", meas)):
            if not m.any():
                raise EventQueryError(f"compare() needs simulated and measured events; there are no {name} ones "
                                      "(pass the other events as compare(other) or concatenate both)")
        codes, names = _factorize(region)
        to_cut, names = _truncate(names, depth)
        codes = to_cut[codes]
        sim_s = _union_length(codes[sim], start[sim], end[sim], names.size)
        meas_s = np.bincount(codes[meas], weights=(end - start)[meas], minlength=names.size)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(meas_s > 0, sim_s / np.where(meas_s > 0, meas_s, 1.0), np.nan)
        return xr.Dataset(
            {"simulated_s": ("region", sim_s, {"units": "s", "description": "simulated time: union of the "
                                                "region's simulated event intervals"}),
             "measured_s": ("region", meas_s, {"units": "s", "description": "measured time: sum of the region's "
                                               "measured event durations"}),
             "ratio": ("region", ratio, {"units": "1", "description": "simulated_s / measured_s (NaN where "
                                         "measured_s is 0)"})},
            coords={"region": ("region", names, {"units": "", "description": "region path ('' = root)"})},
            attrs={"depth": -1 if depth is None else int(depth)},
        )

    def busy(self, n_bins: int = 256, kind: str | Sequence[str] | None = "compute") -> xr.DataArray:
        """Busy fraction per time bin and tile: the tile × time cube.

        The time axis is ``n_bins`` equal bins over ``[0, latest event end]``
        in cycles (over the window for a Dataset from :meth:`window` in
        cycles); the grid is sized as in :meth:`by_tile`. Only events on a
        tile with finite cycle times count (simulated events).

        Parameters
        ----------
        n_bins : int
            Number of time bins.
        kind : str or sequence of str, optional
            Kinds of work that count as busy (``None``: all; overlapping
            events of several kinds on one tile can then exceed 1).

        Returns
        -------
        xarray.DataArray
            Dims ``(time, tile_y, tile_x)``, named ``busy``; ``time`` is each
            bin's start in cycles; attr ``bin_cycles`` is the bin width.

        Examples
        --------
        >>> b = demo_events().dfit.busy(n_bins=7)
        >>> b.attrs["bin_cycles"], b.sel(tile_y=0, tile_x=1).values
        (5.0, array([0., 0., 1., 1., 1., 1., 0.]))
        """
        ds = self._events()
        kinds = _names(kind, "kind")
        _check_choice(kinds, KINDS, "kind")
        on, ny, nx = self._grid()
        s, e = ds["start"].values, ds["end"].values
        on &= np.isfinite(s) & np.isfinite(e)
        if ds.attrs.get("window_unit") == "cycle":
            lo, hi = float(ds.attrs["window_start"]), float(ds.attrs["window_end"])
        else:
            lo, hi = 0.0, float(e[on].max()) if on.any() else 0.0
        edges = lo + time_edges(hi - lo, n_bins)
        if kinds is not None:
            on &= np.isin(_strings(ds["kind"].values), kinds)
        if ny * nx:
            group = ds["tile_y"].values[on].astype(np.int64) * nx + ds["tile_x"].values[on]
            frac = busy_fraction(s[on], e[on], group, ny * nx, edges).reshape(-1, ny, nx)
        else:
            frac = np.zeros((edges.size - 1, ny, nx))
        width = float(edges[1] - edges[0])
        return xr.DataArray(
            frac, dims=("time", "tile_y", "tile_x"), name="busy",
            coords={"time": ("time", edges[:-1], {"units": "cycle", "description": "bin start"}),
                    "tile_y": ("tile_y", np.arange(ny), {"units": "1", "description": "tile row"}),
                    "tile_x": ("tile_x", np.arange(nx), {"units": "1", "description": "tile column"})},
            attrs={"units": "1", "description": "fraction of the time bin the tile is busy",
                   "bin_cycles": width, "kind": ",".join(kinds) if kinds else "all"},
        )
