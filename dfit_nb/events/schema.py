"""The event schema shared by simulated and measured events.

An *event* is one activity of one op on one tile (or, for measured events, on
the host): a ``kind`` of work (``compute``, ``sram``, ``noc``, ``dram``,
``retile``) over ``[start, end)``, moving ``bytes`` and spending
``energy_pj``. Simulated events come from :func:`dfit_nb.replay`; measured
events (:func:`dfit_nb.events.measured_events`) from a trace captured in
``profile`` or ``eager`` mode, with ``source="measured"``, no tile (-1) and
times in seconds only.

Every variable carries ``units`` and ``description`` attrs; strings are
variable-length (object arrays of shared Python strings).

>>> from dfit_nb.events import schema
>>> ds = schema.events_dataset({"op": [0], "kind": ["compute"], "start": [0.0], "end": [10.0]}, clock_ghz=1.0)
>>> float(ds["end_s"][0])
1e-08
>>> ds["region"].values.tolist(), ds["source"].values.tolist()
([''], ['simulated'])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import xarray as xr

from ..errors import DfitError

KINDS = ("compute", "sram", "noc", "dram", "retile")
SOURCES = ("simulated", "measured")

# name -> (numpy dtype or "str", units, description, default)
EVENT_VARS: dict[str, tuple[Any, str, str, Any]] = {
    "op": (np.int64, "", "op id in the trace (trace.ops)", None),
    "region": ("str", "", "the op's region path (named scopes and nested jit), '/'-joined", ""),
    "tile_y": (np.int32, "1", "tile row in the grid (-1: not on a tile, e.g. a host-measured event)", -1),
    "tile_x": (np.int32, "1", "tile column in the grid (-1: not on a tile)", -1),
    "kind": ("str", "", "compute | sram | noc | dram | retile", None),
    "start": (np.float64, "cycle", "start, in cycles of the machine's clock (NaN for measured events)", None),
    "end": (np.float64, "cycle", "end (exclusive), in cycles of the machine's clock (NaN for measured events)", None),
    "start_s": (np.float64, "s", "start in seconds (cycles / clock for simulated events)", None),
    "end_s": (np.float64, "s", "end in seconds", None),
    "bytes": (np.float64, "B", "bytes moved by the event (SRAM accessed, NoC delivered, DRAM transferred)", 0.0),
    "macs": (np.float64, "MAC", "multiply-accumulates done (compute events; 0 otherwise)", 0.0),
    "energy_pj": (np.float64, "pJ", "energy spent by the event", 0.0),
    "dataflow": ("str", "", "ws | os | is (the op's dataflow), '' for measured or non-GEMM events", ""),
    "source": ("str", "", "simulated | measured", "simulated"),
    "kernel": (np.int64, "1", "the kernel the event's op ran in (run.kernels; -1: not known, as for a measured "
               "event or events saved before kernels)", -1),
}
#: variables an events Dataset may lack (saved before they existed): readers treat them as their default
OPTIONAL_VARS = frozenset({"kernel"})


class EventSchemaError(DfitError, ValueError):
    """An events table does not follow the schema."""


def events_dataset(columns: Mapping[str, Any], *, clock_ghz: float | None = None,
                   attrs: Mapping[str, Any] | None = None) -> xr.Dataset:
    """Build an events Dataset (dim ``event``) from column arrays, checking the schema.

    Missing optional columns get their defaults; ``start_s``/``end_s`` are
    derived from ``start``/``end`` and ``clock_ghz`` when not given.
    """
    cols = dict(columns)
    if "op" not in cols or "kind" not in cols:
        raise EventSchemaError("an events table needs at least the 'op' and 'kind' columns")
    size = len(np.asarray(cols["op"]))
    if clock_ghz is not None:
        for a, b in (("start", "start_s"), ("end", "end_s")):
            if a in cols and b not in cols:
                cols[b] = np.asarray(cols[a], np.float64) / (clock_ghz * 1e9)
    for a, b in (("start_s", "start"), ("end_s", "end")):
        if a in cols and b not in cols:
            cols[b] = np.full(size, np.nan)
    unknown = sorted(set(cols) - set(EVENT_VARS))
    if unknown:
        raise EventSchemaError(f"unknown event column(s) {unknown}; valid: {', '.join(EVENT_VARS)}")
    data = {}
    for name, (dtype, units, description, default) in EVENT_VARS.items():
        if name in cols:
            arr = np.asarray(cols[name])
            if arr.shape != (size,):
                raise EventSchemaError(f"event column {name!r} has shape {arr.shape}, expected ({size},)")
        elif default is not None:
            arr = np.full(size, default, dtype=object if dtype == "str" else None)
        else:
            raise EventSchemaError(f"the events table has no {name!r} column (nor 'start'/'end' with a clock)")
        # strings as Python objects: variable-length on disk (netCDF4 and Zarr v3 alike), and a million
        # events share a few hundred region strings instead of each holding a fixed-width copy
        arr = _strings(arr) if dtype == "str" else arr.astype(dtype)
        data[name] = (("event",), arr, {"units": units, "description": description})
    ds = xr.Dataset(data, coords={"event": np.arange(size, dtype=np.int64)}, attrs=dict(attrs or {}))
    check(ds)
    return ds


def _strings(arr: np.ndarray) -> np.ndarray:
    """An object array of ``str``: object arrays pass through, others convert each distinct value once."""
    if arr.dtype == object:
        return arr
    if not arr.size:
        return arr.astype(object)
    values, inverse = np.unique(arr.astype(str), return_inverse=True)
    return np.array([str(v) for v in values], dtype=object)[inverse.reshape(-1)]


def check(ds: xr.Dataset) -> None:
    """Raise :class:`EventSchemaError` naming the first problem of an events Dataset."""
    missing = [name for name in EVENT_VARS if name not in ds.variables and name not in OPTIONAL_VARS]
    if missing:
        raise EventSchemaError(f"events Dataset lacks variable(s) {', '.join(map(repr, missing))} "
                               f"(see dfit_nb.events.schema.EVENT_VARS)")
    for name in EVENT_VARS:
        if name in ds.variables and ds[name].dims != ("event",):
            raise EventSchemaError(f"events variable {name!r} has dims {ds[name].dims}, expected ('event',)")
    for name, valid in (("kind", KINDS), ("source", SOURCES)):
        values = ds[name].values
        known = np.zeros(values.shape, bool)
        for v in valid:  # a few vectorized compares beat sorting or hashing a million strings
            known |= values == v
        if not known.all():
            found = sorted(set(values[~known].tolist()))
            raise EventSchemaError(f"unknown event {name}(s) {found[:10]}; valid: {', '.join(valid)}")
    bad = ds["end_s"].values < ds["start_s"].values
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise EventSchemaError(f"event {i} ends before it starts (start_s {ds['start_s'].values[i]}, "
                               f"end_s {ds['end_s'].values[i]})")


def concat(*parts: xr.Dataset) -> xr.Dataset:
    """Events of several sources (e.g. simulated and measured) in one Dataset."""
    ds = xr.concat(parts, dim="event", combine_attrs="drop_conflicts")
    return ds.assign_coords(event=np.arange(ds.sizes["event"], dtype=np.int64))
