"""The tracks of a Perfetto trace, as lines of trace-event JSON: one thread per (tile, kind) with its slices
(exact, or merged into time bins), the kernels' track, one counter track per NoC link group, and the processes'
and threads' names. :func:`dfit_nb.events.perfetto.to_perfetto` checks its inputs and writes these lines.
"""

from __future__ import annotations

import heapq
import itertools
import json
import warnings
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from ..errors import DfitError, DfitWarning
from .schema import KINDS

CHIP_PID = 1
HOST_PID = 2
# Thread ids stay clear of the pids (Perfetto takes tid == pid for the process's main thread) and are unique
# across both processes (Perfetto's JSON importer keys threads by tid).
_TID_BASE = 10
# When merging, a tile block grows until every (block, kind) track gets at least this many time bins.
_MIN_BINS = 200


class PerfettoExportError(DfitError, ValueError):
    """The events (or the export options) cannot be written as a Perfetto trace."""


class _Null:
    """Formats as JSON ``null`` through ``%r`` (stands in for NaN/inf, which JSON cannot hold)."""

    def __repr__(self) -> str:
        return "null"


_NULL = _Null()

#: the thread of the kernels track (sorts before every tile's)
KERNEL_TID = _TID_BASE - 1


def _kernel_lines(kernels: Any, clock: float) -> list[str]:
    """One slice per kernel on the kernels track (see :func:`to_perfetto`'s ``kernels``)."""
    if not isinstance(kernels, xr.Dataset) or "kernel" not in kernels.dims:
        raise PerfettoExportError(f"kernels must be a Run's kernels Dataset (dim 'kernel'), got "
                                  f"{type(kernels).__name__}")
    start = kernels["start"].values.astype(np.float64)
    end = kernels["end"].values.astype(np.float64)
    ok = np.isfinite(start) & np.isfinite(end) & (end >= start)
    extra = [k for k in ("members", "region", "n_ops", "bytes_dram", "energy_pj", "launch_cycles", "bottleneck")
             if k in kernels]
    lines = []
    for i in np.flatnonzero(ok):
        args = {k: _plain(kernels[k].values[i]) for k in extra}
        args.update(kernel=int(kernels["kernel"].values[i]), start_cycle=float(start[i]), end_cycle=float(end[i]))
        lines.append(json.dumps({"ph": "X", "pid": CHIP_PID, "tid": KERNEL_TID, "cat": "kernel",
                                 "name": str(kernels["name"].values[i]), "ts": round(start[i] / clock) / 1000.0,
                                 "dur": (round(end[i] / clock) - round(start[i] / clock)) / 1000.0, "args": args},
                                ensure_ascii=False, separators=(",", ":"), allow_nan=False))
    return lines


def _plain(value: Any) -> Any:
    """A NumPy scalar as a JSON value (non-finite numbers as strings)."""
    item = value.item() if hasattr(value, "item") else value
    if isinstance(item, float) and not np.isfinite(item):
        return str(item)
    return item if isinstance(item, (int, float, bool)) else str(item)


class _Events:
    """The kept events: their rows in the Dataset and the columns the layout needs, times in whole ns."""

    def __init__(self, ds: xr.Dataset, clock: float) -> None:
        start_s = ds["start_s"].values.astype(np.float64)
        end_s = ds["end_s"].values.astype(np.float64)
        measured = ds["source"].values == "measured"
        # simulated seconds must be the cycles at this clock, else the process label and the counters would lie
        cyc = ds["start"].values.astype(np.float64)
        sim = ~measured & np.isfinite(cyc) & np.isfinite(start_s)
        bad = ~np.isclose(start_s[sim] * clock * 1e9, cyc[sim], rtol=1e-6, atol=1e-3)
        if bad.any():
            i = int(np.flatnonzero(sim)[np.flatnonzero(bad)[0]])
            raise PerfettoExportError(
                f"clock_ghz={clock:g} does not match the events: event {i} starts at cycle {cyc[i]:g} and at "
                f"{start_s[i]:g} s, i.e. at {cyc[i] / start_s[i] / 1e9:g} GHz")
        finite = np.isfinite(start_s) & np.isfinite(end_s)
        self.skipped_nonfinite = int((~finite).sum())
        if self.skipped_nonfinite:
            warnings.warn(f"{self.skipped_nonfinite} event(s) without a finite start_s/end_s were left out of the "
                          f"Perfetto trace", DfitWarning, stacklevel=4)
        payload = (ds["bytes"].values != 0) | (ds["macs"].values != 0) | (ds["energy_pj"].values != 0)
        keep = finite & ((end_s > start_s) | payload)
        self.skipped_empty = int((finite & ~keep).sum())
        self.measured_offset_s = float(start_s[measured & finite].min()) if (measured & finite).any() else 0.0
        shift = np.where(measured, self.measured_offset_s, 0.0)
        self.rows = np.flatnonzero(keep)
        self.size = int(self.rows.size)
        r = self.rows
        self.s_ns = np.rint((start_s[r] - shift[r]) * 1e9).astype(np.int64)
        self.e_ns = np.rint((end_s[r] - shift[r]) * 1e9).astype(np.int64)
        self.proc = measured[r].astype(np.int64)  # 0: simulated (chip), 1: measured (host)
        self.tile_y = ds["tile_y"].values[r].astype(np.int64)
        self.tile_x = ds["tile_x"].values[r].astype(np.int64)
        kinds = ds["kind"].values[r]
        self.kind = np.zeros(r.size, np.int64)  # index into KINDS
        for i, k in enumerate(KINDS[1:], 1):
            self.kind[kinds == k] = i
        self.ds = ds

    def column(self, name: str, rows: np.ndarray) -> np.ndarray:
        """Variable ``name`` at kept events ``rows`` (positions among the kept events)."""
        return self.ds[name].values[self.rows[rows]]


class _Slices:
    def __init__(self, lines: list[str], threads: list[tuple[int, int, str]]) -> None:
        self.lines = lines
        self.threads = threads  # (pid, tid, name), in sort order
        self.has_chip = any(pid == CHIP_PID for pid, _, _ in threads)
        self.has_host = any(pid == HOST_PID for pid, _, _ in threads)


class _LineFormat:
    """Builds one ``%``-format and its columns, so a million JSON lines format in one ``map``.

    Floats are slow to print (``repr``), so whole-valued columns print as ints and times as
    ``<int>.<3 digits>`` microseconds from whole nanoseconds.
    """

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.cols: list[list[Any]] = []

    def lit(self, text: str) -> None:
        self.parts.append(text.replace("%", "%%"))

    def _col(self, spec: str, values: np.ndarray, as_list: list[Any] | None = None) -> None:
        if values.size and (values == values[0]).all():  # a constant column is a literal
            first = as_list[0] if as_list is not None else values[0]
            self.lit(spec % (first.item() if isinstance(first, np.generic) else first))
        else:
            self.parts.append(spec)
            self.cols.append(as_list if as_list is not None else values.tolist())

    def int(self, values: np.ndarray) -> None:
        self._col("%d", np.asarray(values, np.int64))

    def text(self, escaped: np.ndarray) -> None:
        """Strings already escaped for JSON (an object array)."""
        self._col("%s", escaped)

    def num(self, values: np.ndarray) -> None:
        a = np.asarray(values, np.float64)
        if np.isfinite(a).all() and (np.abs(a) < 2**53).all() and (a == np.rint(a)).all():
            self.int(a.astype(np.int64))
        else:
            self._col("%r", a, _nums(a))

    def us(self, ns: np.ndarray) -> None:
        """Whole nanoseconds as microseconds."""
        if (ns >= 0).all():
            q, r = np.divmod(ns, 1000)
            self.parts.append("%d.%03d")
            self.cols += [q.tolist(), r.tolist()]
        else:
            self._col("%r", ns / 1000.0)

    def lines(self, n: int) -> list[str]:
        fmt = "".join(self.parts)
        if not self.cols:
            return [fmt % ()] * n
        return list(map(fmt.__mod__, zip(*self.cols, strict=True)))


def _track_keys(proc: np.ndarray, ty: np.ndarray, tx: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """One int64 per (process, tile row, tile column, kind) that sorts in that order (tiles may be -1)."""
    ny = int(ty.max()) + 2 if ty.size else 1
    nx = int(tx.max()) + 2 if tx.size else 1
    return ((proc * ny + (ty + 1)) * nx + (tx + 1)) * len(KINDS) + kind


def _segmented_cummax(values: np.ndarray, seg_start: np.ndarray) -> np.ndarray:
    """Running max of ``values`` restarting wherever ``seg_start`` is True (``seg_start[0]`` must be True)."""
    seg = np.cumsum(seg_start) - 1
    lo, hi = int(values.min()), int(values.max())
    span = hi - lo + 1
    if span * (int(seg[-1]) + 1) < 2**62:
        lifted = (values - lo) + seg * span  # later segments sit above earlier ones, so one cummax does it
        return np.maximum.accumulate(lifted) - seg * span + lo
    out = np.empty_like(values)
    bounds = [*np.flatnonzero(seg_start).tolist(), values.size]
    for a, b in itertools.pairwise(bounds):
        out[a:b] = np.maximum.accumulate(values[a:b])
    return out


def _lanes(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Greedy lane per interval (sorted by start) so that the intervals of a lane never overlap.

    Zero-length intervals stay on lane 0: they nest inside, or sit between, whatever is there.
    """
    lanes = np.zeros(s.size, np.int64)
    busy: list[tuple[int, int]] = []  # (end, lane)
    free: list[int] = []
    n_lanes = 0
    for i, (a, b) in enumerate(zip(s.tolist(), e.tolist(), strict=True)):
        if b == a:
            continue
        while busy and busy[0][0] <= a:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane, n_lanes = n_lanes, n_lanes + 1
        lanes[i] = lane
        heapq.heappush(busy, (b, lane))
    return lanes


def _tile_label(proc: int, ty: int, tx: int) -> str:
    if proc == 1:
        return "host" if ty < 0 and tx < 0 else f"host tile {ty},{tx}"
    return "off-tile" if ty < 0 and tx < 0 else f"tile {ty},{tx}"


def _esc(s: str) -> str:
    """``s`` as the inside of a JSON string literal."""
    return json.dumps(s, ensure_ascii=False)[1:-1]


def _escaped(values: np.ndarray, *transforms: Any) -> list[np.ndarray]:
    """Each string JSON-escaped after each of ``transforms``, as object arrays; one escape per distinct value."""
    codes, uniq = pd.factorize(values)
    uniq = uniq.tolist() or [""]
    return [np.array([_esc(t(u)) for u in uniq], dtype=object)[codes] for t in transforms]


_KIND_ESC = np.array([_esc(k) for k in KINDS], dtype=object)


def _exact_slices(ev: _Events) -> _Slices:
    """One slice per event; lanes where events of one (tile, kind) overlap."""
    if ev.size == 0:
        return _Slices([], [])
    key = _track_keys(ev.proc, ev.tile_y, ev.tile_x, ev.kind)
    order = np.lexsort((-ev.e_ns, ev.s_ns, key))
    key, s, e = key[order], ev.s_ns[order], ev.e_ns[order]
    first = np.ones(key.size, bool)
    first[1:] = key[1:] != key[:-1]
    reach = _segmented_cummax(e, first)
    clash = np.zeros(key.size, bool)  # zero-length slices nest wherever they fall: they never clash
    clash[1:] = ~first[1:] & (s[1:] < reach[:-1]) & (e[1:] > s[1:])
    lane = np.zeros(key.size, np.int64)
    if clash.any():
        bounds = np.append(np.flatnonzero(first), key.size)
        track = np.cumsum(first) - 1
        for t in np.unique(track[clash]).tolist():
            a, b = int(bounds[t]), int(bounds[t + 1])
            lane[a:b] = _lanes(s[a:b], e[a:b])
    thread_key = key * (int(lane.max()) + 1) + lane
    _, rows, tidx = np.unique(thread_key, return_index=True, return_inverse=True)
    tid = tidx + _TID_BASE
    threads = []
    for r in rows.tolist():  # the first event of each thread, in thread order
        i = order[r]
        proc, ty, tx = int(ev.proc[i]), int(ev.tile_y[i]), int(ev.tile_x[i])
        name = f"{_tile_label(proc, ty, tx)} · {KINDS[int(ev.kind[i])]}"
        if lane[r]:
            name += f" · {int(lane[r]) + 1}"
        threads.append((HOST_PID if proc else CHIP_PID, int(tid[r]), name))

    kind = _KIND_ESC[ev.kind[order]]
    region, segment = _escaped(ev.column("region", order), str, lambda r: r.rsplit("/", 1)[-1])
    segment = np.where(segment == "", kind, segment)  # a region without a name is named by its kind
    op = ev.column("op", order)
    f = _LineFormat()
    f.lit('{"ph":"X","pid":')
    f.int(np.where(ev.proc[order] == 1, HOST_PID, CHIP_PID))
    f.lit(',"tid":')
    f.int(tid)
    f.lit(',"ts":')
    f.us(s)
    f.lit(',"dur":')
    f.us(e - s)
    f.lit(',"name":"')
    f.text(segment)
    f.lit(" #")
    f.int(op)
    f.lit('","cat":"')
    f.text(kind)
    f.lit('","args":{"op":')
    f.int(op)
    f.lit(',"region":"')
    f.text(region)
    for name in ("bytes", "macs", "energy_pj"):
        f.lit(f'","{name}":' if name == "bytes" else f',"{name}":')
        f.num(ev.column(name, order))
    f.lit(',"dataflow":"')
    f.text(_escaped(ev.column("dataflow", order), str)[0])
    f.lit('","start_cycle":')
    f.num(ev.column("start", order))
    f.lit(',"end_cycle":')
    f.num(ev.column("end", order))
    f.lit("}}")
    return _Slices(f.lines(ev.size), threads)


def _merged_slices(ev: _Events, max_events: int, bins: int | None) -> tuple[_Slices, dict[str, Any]]:
    """Events merged per (process, tile block, kind, time bin); picks bins and block size to fit max_events."""
    if ev.size == 0:
        return _Slices([], []), {"aggregated": True, "bins": bins or 1, "tiles_per_block": [1, 1]}
    on_tile = (ev.tile_y >= 0) & (ev.tile_x >= 0)
    grid_y = int(ev.tile_y.max()) + 1 if on_tile.any() else 1
    grid_x = int(ev.tile_x.max()) + 1 if on_tile.any() else 1
    # each process gets its own bins (simulated and measured times are different clocks)
    t0 = np.zeros(2, np.int64)
    t1 = np.ones(2, np.int64)
    for p in (0, 1):
        m = ev.proc == p
        if m.any():
            t0[p] = ev.s_ns[m].min()
            t1[p] = max(int(ev.e_ns[m].max()), int(t0[p]) + 1)

    def layout(b: int, n_bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        ky = np.where(on_tile, ev.tile_y // min(b, grid_y), -1)
        kx = np.where(on_tile, ev.tile_x // min(b, grid_x), -1)
        width = -(-(t1 - t0) // n_bins)  # ceil, >= 1 ns
        tbin = np.minimum((ev.s_ns - t0[ev.proc]) // width[ev.proc], n_bins - 1)
        return _track_keys(ev.proc, ky, kx, ev.kind) * n_bins + tbin, width, ky, kx

    def n_tracks(b: int) -> int:
        return int(np.unique(layout(b, 1)[0]).size)

    block = 1
    if bins is None:  # grow the tile block until each track gets _MIN_BINS bins, then use all the bins that fit
        while n_tracks(block) * _MIN_BINS > max_events and (block < grid_y or block < grid_x):
            block *= 2
        tracks = n_tracks(block)
        if tracks > max_events:
            raise PerfettoExportError(f"max_events={max_events} is too small: even one slice per "
                                      f"(process, kind) track takes {tracks}")
        bins = max(1, max_events // tracks)
    cell_key, width, ky, kx = layout(block, bins)
    cells, cinv = np.unique(cell_key, return_inverse=True)
    while cells.size > max_events:  # an explicit bin count: grow the block until it fits
        if block >= grid_y and block >= grid_x:
            raise PerfettoExportError(f"aggregate={bins} time bins give {cells.size} slices even with one block "
                                      f"of all tiles, more than max_events={max_events}: use fewer bins")
        block *= 2
        cell_key, width, ky, kx = layout(block, bins)
        cells, cinv = np.unique(cell_key, return_inverse=True)
    by, bx = min(block, grid_y), min(block, grid_x)

    order = np.argsort(cinv, kind="stable")
    starts = np.searchsorted(cinv[order], np.arange(cells.size))
    first = order[starts]  # one member event per cell
    s_min = np.minimum.reduceat(ev.s_ns[order], starts)
    e_max = np.maximum.reduceat(ev.e_ns[order], starts)
    op = ev.column("op", order)
    count = np.bincount(cinv, minlength=cells.size)
    busy = np.bincount(cinv, weights=(ev.e_ns - ev.s_ns).astype(np.float64), minlength=cells.size)
    cell_track = cells // bins
    e_cut = e_max.copy()  # cut at the next slice of the same track
    same = cell_track[1:] == cell_track[:-1]
    e_cut[:-1] = np.where(same, np.minimum(e_max[:-1], s_min[1:]), e_max[:-1])

    uniq_tracks, tinv = np.unique(cell_track, return_inverse=True)
    threads = []
    for t, r in enumerate(np.searchsorted(cell_track, uniq_tracks).tolist()):
        i = first[r]
        proc, k = int(ev.proc[i]), KINDS[int(ev.kind[i])]
        if ky[i] < 0 or (by == 1 and bx == 1):
            label = _tile_label(proc, int(ev.tile_y[i]), int(ev.tile_x[i]))
        else:
            y0, x0 = int(ky[i]) * by, int(kx[i]) * bx
            label = (f"{'host ' if proc else ''}tiles {y0}-{min(y0 + by, grid_y) - 1},"
                     f"{x0}-{min(x0 + bx, grid_x) - 1}")
        threads.append((HOST_PID if proc else CHIP_PID, t + _TID_BASE, f"{label} · {k}"))

    kind = _KIND_ESC[ev.kind[first]]
    f = _LineFormat()
    f.lit('{"ph":"X","pid":')
    f.int(np.where(ev.proc[first] == 1, HOST_PID, CHIP_PID))
    f.lit(',"tid":')
    f.int(tinv + _TID_BASE)
    f.lit(',"ts":')
    f.us(s_min)
    f.lit(',"dur":')
    f.us(e_cut - s_min)
    f.lit(',"name":"')
    f.text(kind)
    f.lit(" ×")
    f.int(count)
    f.lit('","cat":"')
    f.text(kind)
    f.lit('","args":{"events":')
    f.int(count)
    for name in ("bytes", "macs", "energy_pj"):
        f.lit(f',"{name}":')
        f.num(np.bincount(cinv, weights=ev.column(name, np.arange(ev.size)).astype(np.float64),
                          minlength=cells.size))
    f.lit(',"busy_us":')
    f.num(busy / 1000.0)
    f.lit(',"op_first":')
    f.int(np.minimum.reduceat(op, starts))
    f.lit(',"op_last":')
    f.int(np.maximum.reduceat(op, starts))
    f.lit("}}")
    info = {"aggregated": True, "bins": int(bins), "tiles_per_block": [by, bx],
            "bin_us": {src: float(width[p]) / 1000.0 for p, src in enumerate(("simulated", "measured"))
                       if (ev.proc == p).any()}}
    return _Slices(f.lines(cells.size), threads), info


def _counter_lines(link_load: Any, clock: float) -> list[str]:
    if not isinstance(link_load, xr.DataArray):
        raise PerfettoExportError(f"link_load must be an xarray.DataArray over ('time', 'link'), "
                                  f"got {type(link_load).__name__}")
    if set(link_load.dims) != {"time", "link"}:
        raise PerfettoExportError(f"link_load must have dims ('time', 'link'), got {link_load.dims}")
    if "time" not in link_load.coords or "link" not in link_load.coords:
        missing = [c for c in ("time", "link") if c not in link_load.coords]
        raise PerfettoExportError(f"link_load lacks coordinate(s) {missing}: 'time' holds each bin's start in "
                                  f"cycles, 'link' the link group names")
    da = link_load.transpose("time", "link")
    t = np.asarray(da["time"].values, np.float64)
    if t.size and (not np.isfinite(t).all() or (np.diff(t) <= 0).any()):
        raise PerfettoExportError("link_load's 'time' coordinate must be finite and increasing (bin starts, cycles)")
    # where the last bin ends: coordinate time_end, else attr bin_cycles, else the usual bin width
    if "time_end" in da.coords and t.size:
        t_end: float | None = float(np.asarray(da["time_end"].values, np.float64)[-1])
    elif "bin_cycles" in da.attrs and t.size:
        t_end = t[-1] + float(da.attrs["bin_cycles"])
    else:
        t_end = t[-1] + float(np.median(np.diff(t))) if t.size > 1 else None
    ts_ns = np.rint(t / clock)  # cycles / GHz = ns
    if t_end is not None and np.isfinite(t_end) and t_end > t[-1]:
        ts_ns = np.append(ts_ns, np.rint(t_end / clock))  # a last sample at 0 closes the last bin
    raw = np.asarray(da.values, np.float64)
    infinite = np.isinf(raw)
    if infinite.any():  # NaN is "no data" (written as 0); an infinite fraction is a broken input, not a load
        link = str(da["link"].values[np.argwhere(infinite)[0][1]])
        raise PerfettoExportError(f"link_load holds {int(infinite.sum())} infinite load(s) (the first on link "
                                  f"{link!r}): loads are fractions of a link's bandwidth, finite, NaN where unknown")
    vals = np.nan_to_num(raw, nan=0.0)
    if vals.shape[0] < ts_ns.size:
        vals = np.vstack([vals, np.zeros((1, vals.shape[1]))])
    ts_us = (ts_ns / 1000.0).tolist()
    lines = []
    for j, link in enumerate(da["link"].values.tolist()):
        # the constant parts of a link's lines go into its format once (a 64x64-tile run: 66,000 lines)
        name = _esc(str(link)).replace("%", "%%")
        fmt = f'{{"ph":"C","pid":{CHIP_PID},"name":"noc {name}","ts":%r,"args":{{"load":%r}}}}'
        lines.extend(map(fmt.__mod__, zip(ts_us, vals[:, j].tolist(), strict=True)))
    return lines


def _nums(a: np.ndarray) -> list[Any]:
    """Python numbers that ``%r`` writes as JSON (non-finite values as null)."""
    a = np.asarray(a, np.float64)
    values = a.tolist()
    bad = ~np.isfinite(a)
    if bad.any():
        obj = np.array(values, dtype=object)
        obj[bad] = _NULL
        values = obj.tolist()
    return values


def _fmt_clock(clock: float) -> str:
    return f"{clock:g} GHz clock; 1 us = {clock * 1000:g} cycles"


def _metadata_lines(threads: list[tuple[int, int, str]], chip: str, clock: float, *, has_chip: bool,
                    has_host: bool) -> list[str]:
    events: list[dict[str, Any]] = []
    if has_chip:
        events += [
            {"ph": "M", "pid": CHIP_PID, "ts": 0, "name": "process_name",
             "args": {"name": f"{chip} (simulated, {_fmt_clock(clock)})"}},
            {"ph": "M", "pid": CHIP_PID, "ts": 0, "name": "process_sort_index", "args": {"sort_index": 0}},
        ]
    if has_host:
        events += [
            {"ph": "M", "pid": HOST_PID, "ts": 0, "name": "process_name", "args": {"name": "host (measured)"}},
            {"ph": "M", "pid": HOST_PID, "ts": 0, "name": "process_sort_index", "args": {"sort_index": 1}},
        ]
    lines = [json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in events]
    # two lines per thread, formatted from one template rather than a json.dumps of a dict each: a 64x64-tile
    # run has about 20,000 threads (the same text json.dumps writes, keys in the same order)
    name_fmt = '{"ph":"M","pid":%d,"tid":%d,"ts":0,"name":"thread_name","args":{"name":"%s"}}'
    sort_fmt = '{"ph":"M","pid":%d,"tid":%d,"ts":0,"name":"thread_sort_index","args":{"sort_index":%d}}'
    for pid, tid, name in threads:
        lines.append(name_fmt % (pid, tid, _esc_name(name)))
        lines.append(sort_fmt % (pid, tid, tid - _TID_BASE))
    return lines


def _esc_name(s: str) -> str:
    """:func:`_esc` without the encoder for the common case: JSON (``ensure_ascii=False``) escapes only quotes,
    backslashes and control characters, which a printable string without quotes or backslashes lacks."""
    return s if s.isprintable() and '"' not in s and "\\" not in s else _esc(s)
