"""Export an events Dataset to Chrome trace-event JSON, which Perfetto and chrome://tracing open.

The file is the trace-event *JSON Object Format*: ``{"traceEvents": [...],
"displayTimeUnit": "ns", "otherData": {...}}``. Its layout:

- process 1 is the simulated chip (its name states the clock, so the reader can
  turn microseconds back into cycles); process 2, ``host (measured)``, holds
  measured events, shifted so that the first one starts at 0;
- one thread per (tile, kind), named ``tile 3,7 · compute`` and sorted so that a
  tile's kinds sit together in tile order. Kinds overlap in time on a tile and
  Perfetto needs the slices of one thread to nest, so each kind has its own
  thread; should two events of one (tile, kind) overlap, the later one goes to
  an extra lane (``tile 3,7 · dram · 2``): slices on a thread never overlap,
  except zero-length ones, which nest inside whatever slice they fall in;
- every event is a complete slice (``"ph": "X"``) with ``ts``/``dur`` in
  microseconds of *simulated* time, rounded to whole nanoseconds (Perfetto's
  resolution) so that the reader sees exactly the order written here;
- an optional NoC link-load cube becomes one counter track per link group.

Runs larger than ``max_events`` slices are merged into time bins per (tile
block, kind) instead of failing (``aggregate="auto"``); the merged slices carry
the summed bytes, MACs and energy and the number of events merged, so totals
are kept.

The tracks' lines are built in :mod:`dfit_nb.events._perfetto_tracks`; this module checks the inputs and
writes the file.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import xarray as xr

from .._atomic import atomic_file
from .._files import foreign_file, local_path, special_file
from .._version import __version__
from ..errors import DfitWarning, SaveRefusedError
from ._perfetto_tracks import CHIP_PID as CHIP_PID
from ._perfetto_tracks import HOST_PID as HOST_PID
from ._perfetto_tracks import KERNEL_TID as KERNEL_TID
from ._perfetto_tracks import PerfettoExportError as PerfettoExportError
from ._perfetto_tracks import _counter_lines, _Events, _exact_slices, _kernel_lines, _merged_slices, _metadata_lines
from .schema import check

__all__ = ["PerfettoAggregationWarning", "PerfettoExportError", "to_perfetto"]

_CHUNK = 65536  # lines per write
_UNITS = "ts and dur in microseconds of simulated time (measured events: of host time, first one at 0)"


class PerfettoAggregationWarning(DfitWarning):
    """A run had more slices than ``max_events``; events were merged into time bins."""


def to_perfetto(events: xr.Dataset, path: str | os.PathLike[str], *, clock_ghz: float, chip: str = "chip",
                link_load: xr.DataArray | None = None, max_events: int = 1_000_000,
                aggregate: Literal["auto", "none"] | int = "auto", kernels: xr.Dataset | None = None,
                overwrite: bool = False) -> Path:
    """Write ``events`` as a Chrome trace-event JSON file that Perfetto (ui.perfetto.dev) opens.

    Parameters
    ----------
    events : xarray.Dataset
        Events following :mod:`dfit_nb.events.schema` (dim ``event``).
    path : str or os.PathLike
        Output file (conventionally ``*.json``); written to a temporary file
        beside it and moved into place, so a reader never sees half a file.
        A file already there is replaced only when dfit_nb wrote it (a trace
        whose ``otherData`` names dfit_nb's version:
        :func:`dfit_nb._files.written_by_dfit`), as a report replaces its own.
    clock_ghz : float
        The simulated machine's clock. It labels the chip's process (``1 us =
        N cycles``), places the link-load bins (given in cycles) on the time
        axis, and must agree with the events' ``start``/``start_s``.
    chip : str
        Name of the simulated machine, shown as the process name.
    link_load : xarray.DataArray, optional
        Load fraction of each NoC link group per time bin, over dims ``time``
        (coordinate: bin start in cycles; the last bin ends at coordinate
        ``time_end``, else after attr ``bin_cycles``, else after the usual bin width) and
        ``link`` (string names such as ``row3.east``). Each link group becomes
        a counter track ``noc <link> load`` in the chip's process; NaN loads
        are written as 0, an infinite one is refused.
    max_events : int
        Most slices to write. Larger runs are merged (see ``aggregate``).
        Metadata and counter events do not count.
    aggregate : {"auto", "none"} or int
        What to do with more than ``max_events`` slices: ``"auto"`` warns
        (:class:`PerfettoAggregationWarning`) and merges events into time bins
        per (tile block, kind), choosing the bin count and block size to fit;
        ``"none"`` raises :class:`PerfettoExportError`. An int always merges,
        into that many time bins (tile blocks grow if needed to fit
        ``max_events``). An event counts in the bin where it starts; a merged
        slice runs from its first event's start to its last event's end, cut
        at the next merged slice of its track; its args hold the summed
        ``bytes``, ``macs``, ``energy_pj``, busy time and the count of events.
    kernels : xarray.Dataset, optional
        A Run's ``kernels`` (:func:`dfit_nb.sim._kernel_table.kernels_dataset`): one ``kernels`` track in the
        chip's process, first, with a slice per kernel from its first op's start to its last op's end, named
        after the kernel, its member ops, region, bytes, energy, launch cycles and bottleneck in ``args``.
    overwrite : bool
        Replace whatever file is at ``path``, even one dfit_nb did not write (default ``False``: refused).

    Returns
    -------
    pathlib.Path
        The written file.

    Raises
    ------
    SaveRefusedError
        ``path`` holds a file dfit_nb did not write (a user's trace, notes), a link to nothing or a FIFO, and
        ``overwrite`` is not ``True``; or ``path`` is a URL other than ``file://`` or holds a NUL character.
        Refused before any work, nothing is written.
    SaveError
        The write failed (a missing folder, no permission, a full disk), naming ``path`` (not the temporary the
        OS named) and what to do; nothing is left at ``path`` or beside it. ``errno`` is the cause's.
    PerfettoExportError
        Events or options that cannot be exported, or ``path`` a folder.

    Notes
    -----
    Slice names are the region's last path segment and the op id (``qk #23``);
    ``cat`` is the kind; ``args`` hold ``op``, ``region``, ``bytes``,
    ``macs``, ``energy_pj``, ``dataflow`` and the start/end cycles. Events
    with zero duration are kept (``dur`` 0) when they carry bytes, MACs or
    energy, and skipped otherwise. ``otherData`` records the clock, the chip,
    the units, the dfit_nb version, the Dataset's scalar attrs and what was
    skipped or merged. ``displayTimeUnit`` comes after ``traceEvents``: old
    Perfetto versions read ``"ns"`` there as the unit of ``ts`` unless it
    came too late; current ones, like chrome://tracing, use it for display
    only.

    Examples
    --------
    >>> import json, os, tempfile
    >>> from dfit_nb.events import schema
    >>> from dfit_nb.events.perfetto import to_perfetto
    >>> ds = schema.events_dataset({
    ...     "op": [3, 3, 4], "region": ["enc/attn/qk", "enc/attn/qk", "enc/mlp"],
    ...     "tile_y": [0, 0, 0], "tile_x": [1, 1, 1], "kind": ["compute", "dram", "compute"],
    ...     "start": [0.0, 0.0, 2100.0], "end": [2100.0, 1050.0, 3150.0], "bytes": [0.0, 4096.0, 0.0],
    ...     "macs": [65536.0, 0.0, 8192.0]}, clock_ghz=1.05)
    >>> p = to_perfetto(ds, os.path.join(tempfile.mkdtemp(), "run.json"), clock_ghz=1.05, chip="tpu_like")
    >>> trace = json.loads(p.read_text())
    >>> [(e["name"], e["ts"], e["dur"]) for e in trace["traceEvents"] if e["ph"] == "X"]
    [('qk #3', 0.0, 2.0), ('mlp #4', 2.0, 1.0), ('qk #3', 0.0, 1.0)]
    >>> sorted(e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name")
    ['tile 0,1 · compute', 'tile 0,1 · dram']
    >>> next(e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name")
    'tpu_like (simulated, 1.05 GHz clock; 1 us = 1050 cycles)'
    """
    target = local_path(path, saving=True)  # a URL is refused, named as given (Path would make 's3:/...')
    if "\x00" in str(target):  # else a bare ValueError("embedded null byte"), naming nothing
        raise SaveRefusedError(f"refusing to write a trace to {str(target)!r}: a path cannot hold a NUL character "
                               "('\\x00'); give a path without it")
    if target.is_dir():
        raise PerfettoExportError(f"{target} is a directory; give a file name such as run.json")
    given = os.fspath(path) if isinstance(path, (str, os.PathLike)) else ""
    if isinstance(given, str) and given.endswith(("/", os.sep)):  # Path drops a trailing '/': it names a folder
        raise PerfettoExportError(f"{given!r} names a folder (it ends with '/'), and a Perfetto trace is one file; "
                                  f"give a file name such as {str(target / 'run.json')!r}")
    special = special_file(target)
    if special:  # even with overwrite=True: the write renames over its path, which replaced /dev/null itself
        raise SaveRefusedError(f"refusing to replace {target}: it is {special}, a special file (not a regular "
                               "file), which dfit_nb never replaces, overwrite=True or not; give the path of a new "
                               ".json file")
    if not isinstance(overwrite, bool):
        raise PerfettoExportError(f"overwrite must be True or False, got {overwrite!r}")
    if not overwrite and foreign_file(target):  # the report's and the CLI's test: never replace a user's file
        raise SaveRefusedError(f"refusing to replace {target}: it is a file that dfit_nb did not write (no dfit_nb "
                               "mark in it); give a new path, move or delete it, or pass overwrite=True to replace "
                               "it (a trace dfit_nb wrote is replaced without asking)")
    ds = _check_events(events)
    clock = _check_clock(clock_ghz)
    if not isinstance(chip, str):
        raise PerfettoExportError(f"chip must be a string, got {type(chip).__name__}")
    try:
        whole = not isinstance(max_events, bool) and int(max_events) == max_events >= 1
    except (TypeError, ValueError, OverflowError):
        whole = False
    if not whole:
        raise PerfettoExportError(f"max_events must be a whole number >= 1, got {max_events!r}")
    max_events = int(max_events)
    if isinstance(aggregate, str):
        if aggregate not in ("auto", "none"):
            raise PerfettoExportError(f"aggregate must be 'auto', 'none' or a number of time bins, got {aggregate!r}")
    elif isinstance(aggregate, bool) or not isinstance(aggregate, int | np.integer) or aggregate < 1:
        raise PerfettoExportError(f"aggregate must be 'auto', 'none' or a number of time bins >= 1, got {aggregate!r}")
    counters = _counter_lines(link_load, clock) if link_load is not None else []
    kernel_lines = _kernel_lines(kernels, clock) if kernels is not None else []

    ev = _Events(ds, clock)
    other: dict[str, Any] = {**_plain_attrs(ds.attrs), "clock_ghz": clock, "chip": chip, "units": _UNITS,
                             "dfit_nb_version": __version__, "events_in": int(ds.sizes["event"]),
                             "skipped_empty": ev.skipped_empty, "skipped_nonfinite": ev.skipped_nonfinite,
                             "measured_offset_s": ev.measured_offset_s}
    n = ev.size
    if isinstance(aggregate, str) and n <= max_events:
        slices = _exact_slices(ev)
        other["aggregated"] = False
    elif aggregate == "none":
        raise PerfettoExportError(
            f"{n} events exceed max_events={max_events}: pass aggregate='auto' to merge them into time bins per "
            f"(tile block, kind), aggregate=<number of bins> to choose the bins, or a larger max_events")
    else:
        slices, info = _merged_slices(ev, max_events, None if isinstance(aggregate, str) else int(aggregate))
        other.update(info)
        if isinstance(aggregate, str):
            warnings.warn(
                f"{n} events exceed max_events={max_events}: merged into {info['bins']} time bins per "
                f"({info['tiles_per_block'][0]}x{info['tiles_per_block'][1]}-tile block, kind), "
                f"{len(slices.lines)} slices; pass aggregate='none' to fail instead, or raise max_events",
                PerfettoAggregationWarning, stacklevel=2)
    other["slices"] = len(slices.lines)
    other["counters"] = len(counters)
    other["kernels"] = len(kernel_lines)
    threads = ([(CHIP_PID, KERNEL_TID, "kernels")] if kernel_lines else []) + slices.threads
    meta = _metadata_lines(threads, chip, clock, has_chip=bool(counters) or bool(kernel_lines) or slices.has_chip,
                           has_host=slices.has_host)
    return _write(target, [meta, kernel_lines, slices.lines, counters], other)


# ---------------------------------------------------------------------------------------------------- input checks


def _check_events(events: Any) -> xr.Dataset:
    """The events Dataset the export needs (:func:`schema.check`)."""
    if not isinstance(events, xr.Dataset):
        raise PerfettoExportError(f"events must be an xarray.Dataset following dfit_nb.events.schema, "
                                  f"got {type(events).__name__}")
    check(events)
    return events


def _check_clock(clock_ghz: Any) -> float:
    try:
        clock = float(clock_ghz)
    except (TypeError, ValueError):
        raise PerfettoExportError(f"clock_ghz must be a number, got {clock_ghz!r}") from None
    if not math.isfinite(clock) or clock <= 0:
        raise PerfettoExportError(f"clock_ghz must be finite and > 0, got {clock_ghz!r}")
    return clock


def _plain_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The attrs that are plain strings or finite scalars (provenance), as JSON values."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, str | bool | int) or (isinstance(value, float) and math.isfinite(value)):
            out[str(key)] = value
    return out


# ---------------------------------------------------------------------------------------------------- writing


def _chunks(parts: Iterable[list[str]]) -> Iterator[str]:
    first = True
    for lines in parts:
        for i in range(0, len(lines), _CHUNK):
            block = ",\n".join(lines[i:i + _CHUNK])
            yield block if first else ",\n" + block
            first = False


def _write(path: Path, parts: list[list[str]], other: dict[str, Any]) -> Path:
    path = Path(os.fspath(path))
    with atomic_file(path, "w", permissions=0o644) as f:  # a failed write names path (SaveError), not a temporary
        f.write('{"traceEvents":[\n')
        for chunk in _chunks(parts):
            f.write(chunk)
        # displayTimeUnit after traceEvents on purpose (see to_perfetto's Notes)
        f.write('\n],\n"displayTimeUnit":"ns",\n"otherData":')
        f.write(json.dumps(other, ensure_ascii=False, allow_nan=False))
        f.write("}\n")
    return path
