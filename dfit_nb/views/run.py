"""Charts of one replay (or an A/B comparison): pure functions from a :class:`~dfit_nb.sim.run.Run` to Altair charts.

Every chart embeds at most ``max_rows`` rows (:data:`dfit_nb.views._common.MAX_ROWS` by default): large runs are
binned or pooled with NumPy/xarray first, and the subtitle says so. No widgets: the charts are Vega-Lite specs
(zoom, brushes and sliders are Vega-Lite parameters).
"""

from __future__ import annotations

from typing import Any

import altair as alt
import numpy as np
import pandas as pd
import xarray as xr

from ..events import binning
from ._common import (
    MAX_ROWS,
    ViewInputError,
    aggregated,
    check_count,
    check_region,
    check_window,
    describe,
    expect,
    in_region,
    require,
    titled,
    window_mask,
)

__all__ = ["buffer_pressure", "compare", "noc_load", "timeline", "utilization"]

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


# ---------------------------------------------------------------------------------------------------- timeline


def timeline(run: Any, by: str = "tile", color: str = "kind", max_rows: int = MAX_ROWS,
             time_window: tuple[float, float] | None = None, region: str | None = None) -> alt.Chart:
    """Gantt of the run's simulated events: one track per tile (``"y,x"``) or region, bars over time in us.

    Drag to brush a time window (the selection parameter ``window``, ``{"t0": [start_us, end_us]}``, which the
    Explorer reads to narrow its other views), scroll to zoom, shift-drag to pan. When there are more events than
    ``max_rows``, events are merged into equal time bins per (track, colour): one bar per non-empty bin, its
    opacity the busy fraction (event time over bin time x tiles of the track); on large grids tiles are
    pooled into blocks of tracks first. The subtitle says what was aggregated. Measured (host) events are
    not drawn.

    Parameters
    ----------
    run : Run
        A replay (:func:`dfit_nb.replay`).
    by : {"tile", "region", "kernel"}
        Tracks on the y axis (``"kernel"``: one per kernel the chip ran, ``run.kernels``).
    color : {"kind", "region", "kernel"}
        What the colour encodes.
    max_rows : int
        Rows the chart may embed.
    time_window : (float, float), optional
        ``(start_s, end_s)``: only events overlapping it, clipped to it.
    region : str, optional
        Only events of ops in this region's subtree.

    Returns
    -------
    altair.Chart

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import presets
    >>> from dfit_nb.views import run as views
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> chart = views.timeline(dfit_nb.replay(t, presets.get("npu_like")))
    >>> spec = chart.to_dict()
    >>> spec["mark"]["type"], spec["title"]["text"].startswith("Timeline")
    ('bar', True)
    """
    expect(run, "timeline", "run", "Run")
    check_count(max_rows, "max_rows", "timeline")
    check_window(time_window, "timeline")
    check_region(region, "timeline")
    if by not in ("tile", "region", "kernel"):
        raise ValueError(f"by must be 'tile', 'region' or 'kernel', got {by!r}")
    if color not in ("kind", "region", "kernel"):
        raise ValueError(f"color must be 'kind', 'region' or 'kernel', got {color!r}")
    ev = run.events
    if "kernel" in (by, color):  # each event labelled with its op's kernel (a run saved before kernels: its op)
        ops = run.ops
        names = ops["kernel_name"].values.astype(str) if "kernel_name" in ops else ops["primitive"].values.astype(str)
        lookup = pd.Series(names, index=ops["op"].values)
        ev = ev.assign(kernel=("event", lookup.reindex(ev["op"].values).fillna("").values.astype(object)))
    require(ev, ("source", "start_s", "end_s", "tile_y", "tile_x", "op", "region", "kind"), "timeline", "events")
    keep = ev["source"].values == "simulated"
    notes: list[str] = []
    if region:
        keep &= in_region(ev["region"].values, region)
        if not keep.any():
            raise ValueError(f"region {region!r} has no simulated events in this run")
        notes.append(f"region {region} only")
    if time_window is not None:
        keep &= window_mask(ev["start_s"].values, ev["end_s"].values, time_window, "event (in s)")
        notes.append(_window_note(time_window))
    sim = np.flatnonzero(keep)
    n = sim.size
    s_us = ev["start_s"].values[sim] * _US
    e_us = ev["end_s"].values[sim] * _US
    origin = 0.0
    if time_window is not None:  # clip to the window; bins start at its left edge
        origin = float(time_window[0]) * _US
        s_us, e_us = np.maximum(s_us, origin), np.minimum(e_us, float(time_window[1]) * _US)
    ty = ev["tile_y"].values[sim].astype(np.int64)
    tx = ev["tile_x"].values[sim].astype(np.int64)
    color_names, color_idx = _factorize(ev[color].values[sim])
    color_idx = color_idx.reshape(-1)
    n_measured = int((ev["source"].values != "simulated").sum())
    if n_measured:
        notes.append(f"{n_measured:,} measured (host) events not drawn")
    # rows carry small integers (track, colour) and times; the labels come from two lookup tables (small specs)
    if n <= max_rows:
        if by == "tile":
            labels, track_idx = _tile_tracks(ty, tx, 1)[:2]
        else:
            labels, track_idx = np.unique(ev[by].values[sim].astype(str), return_inverse=True)
        df = pd.DataFrame({"g": track_idx.reshape(-1), "c": color_idx, "t0": _round(s_us, 7), "t1": _round(e_us, 7),
                           "op": ev["op"].values[sim]})
        tooltip: list[Any] = ["track:N", f"{color}:N", "op:Q"]
        if color == "region":
            df["k"] = ev["kind"].values[sim].astype(str)
            tooltip.append(alt.Tooltip("k:N", title="kind"))
        tooltip += [alt.Tooltip("t0:Q", format=".4g", title="start (us)"),
                    alt.Tooltip("t1:Q", format=".4g", title="end (us)")]
        opacity: Any = alt.value(0.9)
        x2: Any = alt.X2("t1:Q")
        transforms: list[tuple[str, str]] = []
    else:
        df, labels, how, width = _binned_tracks(ev, sim, s_us, e_us, ty, tx, color_idx, len(color_names), by,
                                                max_rows, origin)
        notes.append(aggregated(n, len(df), how))
        tooltip = ["track:N", f"{color}:N", alt.Tooltip("t0:Q", format=".4g", title="bin start (us)"),
                   alt.Tooltip("b:Q", format=".1%", title="busy"), alt.Tooltip("n:Q", format=",", title="events")]
        opacity = alt.Opacity("b:Q", scale=alt.Scale(domain=[0, 1], range=[0.15, 1]), title="busy")
        x2 = alt.X2("t1:Q")
        transforms = [("t1", f"datum.t0 + {width!r}")]
    tracks = pd.DataFrame({"g": np.arange(len(labels)), "track": np.asarray(labels, dtype=object)})
    colors = pd.DataFrame({"c": np.arange(len(color_names)), color: color_names.astype(object)})
    order = _track_order(np.asarray(labels), by)
    if by == "kernel":  # kernels in the order they ran (their first event)
        first = pd.Series(df["t0"].values).groupby(df["g"].values).min()
        order = [str(labels[g]) for g in first.sort_values(kind="stable").index]
    # plain drag brushes the window the Explorer links on; the wheel zooms and shift-drag pans the x scale
    zoom = alt.selection_interval(encodings=["x"], bind="scales", zoom="wheel!",
                                  translate="[pointerdown[event.shiftKey], window:pointerup] > window:pointermove!")
    brush = alt.selection_interval(encodings=["x"], name="window", zoom=False)
    enc: dict[str, Any] = {
        "x": alt.X("t0:Q", title="time (us)"),
        "x2": x2,
        "y": alt.Y("track:N", sort=order, title="tile (y,x)" if by == "tile" else by,
                   axis=alt.Axis(labelLimit=200)),
        "color": alt.Color(f"{color}:N", title=color, legend=alt.Legend(labelLimit=200)),
        "opacity": opacity,
        "tooltip": tooltip,
    }
    if color == "kind":
        enc["yOffset"] = alt.YOffset("kind:N")
    height = int(min(600, max(120, 14 * len(order))))
    chart = alt.Chart(df).transform_lookup(lookup="g", from_=alt.LookupData(tracks, "g", ["track"])).transform_lookup(
        lookup="c", from_=alt.LookupData(colors, "c", [color]))
    for name, expr in transforms:
        chart = chart.transform_calculate(**{name: expr})
    chart = chart.mark_bar(clip=True).encode(**enc).add_params(zoom, brush).properties(width=700, height=height)
    notes = [x for x in notes if x]
    return titled(chart, f"Timeline by {by} ({run.attrs.get('hardware', '?')}, {n:,} events)", notes or None)


def _tile_tracks(ty: np.ndarray, tx: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Track labels (``"y,x"``, or ``"y0-y1,x0-x1"`` for ``p x p`` blocks), each event's track, tiles per track."""
    rows, cols = int(ty.max()) + 1, int(tx.max()) + 1
    nbx = -(-cols // p)
    used, track_idx = _dense((ty // p) * nbx + tx // p, -(-rows // p) * nbx)
    yy, xx = used // nbx * p, used % nbx * p
    if p > 1:
        y1, x1 = np.minimum(yy + p, rows) - 1, np.minimum(xx + p, cols) - 1
        labels = np.array([f"{a}-{b},{c}-{d}" for a, b, c, d in zip(yy, y1, xx, x1, strict=True)], dtype=object)
        tiles = ((y1 - yy + 1) * (x1 - xx + 1)).astype(np.float64)
    else:
        labels = np.array([f"{a},{c}" for a, c in zip(yy, xx, strict=True)], dtype=object)
        tiles = np.ones(len(used))
    return labels, track_idx.reshape(-1), tiles


def _track_order(tracks: np.ndarray, by: str) -> list[str]:
    uniq = pd.unique(tracks).tolist()
    if by == "tile":
        def key(t: str) -> tuple[int, ...]:
            return tuple(int(v.split("-")[0]) for v in t.split(","))
        return sorted(uniq, key=key)
    return sorted(uniq)


def _binned_tracks(ev: xr.Dataset, sim: np.ndarray, s_us: np.ndarray, e_us: np.ndarray, ty: np.ndarray,
                   tx: np.ndarray, color_idx: np.ndarray, n_colors: int, by: str,
                   max_rows: int, origin: float = 0.0) -> tuple[pd.DataFrame, np.ndarray, str, float]:
    """Events merged into equal time bins per (track, colour): at most ``max_rows`` non-empty cells."""
    what = []
    if by == "tile":
        # pool tiles into blocks until every (track, colour) pair can get _MIN_BINS bins
        p = _pool_factor(int(ty.max()) + 1, int(tx.max()) + 1, max_rows // (_MIN_BINS * n_colors))
        labels, track_idx, tiles = _tile_tracks(ty, tx, p)
        if p > 1:
            what.append(f"tiles pooled into {p}x{p} blocks")
    else:
        labels, track_idx = _factorize(ev[by].values[sim])
        # tiles each region's (or kernel's) events touch (the denominator of its busy fraction)
        n_tiles = (int(ty.max()) + 1) * (int(tx.max()) + 1)
        key = track_idx * n_tiles + ty * (int(tx.max()) + 1) + tx
        pairs = _dense(key, len(labels) * n_tiles)[0] if len(labels) * n_tiles <= 1 << 24 else np.unique(key)
        tiles = np.bincount(pairs // n_tiles, minlength=len(labels)).astype(np.float64)
    group = track_idx * n_colors + color_idx
    n_groups = len(labels) * n_colors
    t_end = float(e_us.max()) if e_us.size else 0.0
    dur = e_us - s_us
    n_bins = max(1, min(1024, max_rows // max(1, np.count_nonzero(np.bincount(group, minlength=n_groups)))))
    while True:  # the non-empty cells decide; halve the bins until they fit
        edges = origin + binning.time_edges(t_end - origin, n_bins)
        busy = binning.bin_intervals(s_us, e_us, dur, group, n_groups, edges)
        count = binning.bin_intervals(s_us, e_us, np.ones(dur.size), group, n_groups, edges)
        cell_b, cell_g = np.nonzero((busy > 0) | (count > 0))
        if cell_b.size <= max_rows or n_bins == 1:
            break
        n_bins = max(1, n_bins // 2)
    if cell_b.size > max_rows:  # a single bin and still too many tracks: keep the busiest
        keep = np.argsort(-busy[cell_b, cell_g], kind="stable")[:max_rows]
        cell_b, cell_g = cell_b[keep], cell_g[keep]
        what.append(f"busiest {max_rows:,} (track, colour) pairs kept")
    width = float(edges[1] - edges[0])
    tr, co = cell_g // n_colors, cell_g % n_colors
    df = pd.DataFrame({
        "g": tr, "c": co, "t0": _round(edges[cell_b], 7),
        "b": _round(np.clip(busy[cell_b, cell_g] / (width * tiles[tr]), 0.0, 1.0), 3),
        "n": np.rint(count[cell_b, cell_g]).astype(np.int64),
    })
    what.insert(0, f"{n_bins} time bins of {width:.3g} us per track and colour, opacity = busy fraction")
    return df, labels, "; ".join(what), float(_round(width, 7))


# ------------------------------------------------------------------------------------------------- utilization


def utilization(run: Any, time_window: tuple[float, float] | None = None, max_rows: int = MAX_ROWS,
                region: str | None = None) -> alt.VConcatChart:
    """Tile-grid heatmap of the compute-busy fraction, with a brushable per-time busy line above it.

    Brush the line (mean busy over tiles per time bin) to average the heatmap over that time window only;
    with no brush the heatmap averages the whole run (or ``time_window``). Large grids are pooled into
    blocks and time bins merged so that (time bins x tiles) stays within ``max_rows``; the subtitle says so.

    Parameters
    ----------
    run : Run or xarray.Dataset
        A replay, or its ``cube``.
    time_window : (float, float), optional
        ``(start_s, end_s)``: only the cube's time bins that overlap it.
    max_rows : int
        Rows the chart may embed.
    region : str, optional
        Busy from this region's subtree only: its compute events binned on the cube's time bins (needs a Run).

    Returns
    -------
    altair.VConcatChart

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import presets
    >>> from dfit_nb.views import run as views
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> spec = views.utilization(dfit_nb.replay(t, presets.get("npu_like"))).to_dict()
    >>> "vconcat" in spec, spec["title"]["text"]
    (True, 'Tile utilization (npu_like)')
    """
    expect(run, "utilization", "run", "Run", "Dataset", dataset="a Run's cube")
    check_count(max_rows, "max_rows", "utilization")
    check_window(time_window, "utilization")
    check_region(region, "utilization")
    cube = _cube_of(run)
    require(cube, ("busy", "time_end"), "utilization", "cube")
    hz = _hz(cube.attrs)
    busy = _bins_in_window(_region_busy(run, cube, region) if region else cube["busy"], hz, time_window)
    n_t, rows, cols = busy.sizes["time"], busy.sizes["tile_y"], busy.sizes["tile_x"]
    n_before = n_t * rows * cols
    p = _pool_factor(rows, cols, max_rows // min(n_t, _MIN_BINS))
    pooled = _pool_grid(busy, p)
    n_blocks = pooled.sizes["tile_y"] * pooled.sizes["tile_x"]
    factor = -(-n_t // max(1, max_rows // n_blocks))
    pooled = _coarsen_time(pooled, factor)
    t_us = pooled["time"].values / hz * _US
    tt, yy, xx = np.meshgrid(np.arange(pooled.sizes["time"]), pooled["tile_y"].values, pooled["tile_x"].values,
                             indexing="ij")
    df = pd.DataFrame({"t_us": _round(t_us[tt.reshape(-1)], 6), "tile_y": yy.reshape(-1), "tile_x": xx.reshape(-1),
                       "busy": _round(np.nan_to_num(pooled.values.reshape(-1)), 4)})
    how = []
    if p > 1:
        how.append(f"tiles pooled into {p}x{p} blocks (mean)")
    if factor > 1:
        how.append(f"{factor} time bins merged (mean)")
    notes = [aggregated(n_before, len(df), ", ".join(how))]
    if region:
        notes.append(f"region {region} only")
    notes.append(_window_note(time_window))
    notes.append("brush the line to average the grid over a time window")
    brush = alt.selection_interval(encodings=["x"], name="window")
    base = alt.Chart(df)
    line = base.mark_line(point=False).encode(
        x=alt.X("t_us:Q", title="time (us)"),
        y=alt.Y("mean(busy):Q", title="mean busy", scale=alt.Scale(domain=[0, 1])),
        tooltip=[alt.Tooltip("t_us:Q", format=".4g", title="bin start (us)"),
                 alt.Tooltip("mean(busy):Q", format=".1%", title="mean busy")],
    ).add_params(brush).properties(width=420, height=80)
    label = "block" if p > 1 else "tile"
    heat = base.mark_rect().encode(
        x=alt.X("tile_x:O", title=f"tile x ({label} start)" if p > 1 else "tile x"),
        y=alt.Y("tile_y:O", title=f"tile y ({label} start)" if p > 1 else "tile y"),
        color=alt.Color("mean(busy):Q", title="busy", scale=alt.Scale(domain=[0, 1], scheme="viridis")),
        tooltip=["tile_y:O", "tile_x:O", alt.Tooltip("mean(busy):Q", format=".1%", title="busy")],
    ).transform_filter(brush).properties(width=420, height=max(60, min(420, 420 * pooled.sizes["tile_y"]
                                                                        // max(1, pooled.sizes["tile_x"]))))
    chart = alt.vconcat(line, heat)
    return titled(chart, f"Tile utilization ({cube.attrs.get('hardware', '?')})", [x for x in notes if x])


def _region_busy(run: Any, cube: xr.Dataset, region: str) -> xr.DataArray:
    """Compute-busy fraction of one region's subtree on the cube's (time, tile) bins, from the run's events."""
    if not hasattr(run, "events"):
        raise ValueError("utilization(region=...) needs a Run (its events), not only the cube")
    ev = run.events
    require(ev, ("region", "kind", "source", "start", "end", "tile_y", "tile_x"), "utilization", "events")
    keep = (in_region(ev["region"].values, region) & (ev["kind"].values == "compute")
            & (ev["source"].values == "simulated"))
    if not keep.any():
        raise ValueError(f"region {region!r} has no compute events in this run")
    rows, cols = cube.sizes["tile_y"], cube.sizes["tile_x"]
    s, e = ev["start"].values[keep], ev["end"].values[keep]
    tile = ev["tile_y"].values[keep].astype(np.int64) * cols + ev["tile_x"].values[keep]
    edges = np.append(cube["time"].values, cube["time_end"].values[-1])
    busy = binning.bin_intervals(s, e, e - s, tile, rows * cols, edges) / np.diff(edges)[:, None]
    return cube["busy"].copy(data=np.clip(busy, 0.0, 1.0).reshape(-1, rows, cols))


# ----------------------------------------------------------------------------------------------------- noc_load


def noc_load(run: Any, max_rows: int = MAX_ROWS, time_window: tuple[float, float] | None = None) -> alt.Chart:
    """Heatmap of NoC load over (time bin, link group): each group's busiest link, bytes over capacity.

    When (bins x link groups) exceeds ``max_rows``, link groups of neighbouring rows/columns are pooled
    (maximum) and time bins merged (mean); the subtitle says so.

    Parameters
    ----------
    run : Run or xarray.Dataset
        A replay, or its ``cube``.
    max_rows : int
        Rows the chart may embed.
    time_window : (float, float), optional
        ``(start_s, end_s)``: only the time bins that overlap it.

    Returns
    -------
    altair.Chart

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import presets
    >>> from dfit_nb.views import run as views
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> spec = views.noc_load(dfit_nb.replay(t, presets.get("npu_like"))).to_dict()
    >>> spec["mark"]["type"], spec["title"]["text"]
    ('rect', 'NoC link load (npu_like)')
    """
    expect(run, "noc_load", "run", "Run", "Dataset", dataset="a Run's cube")
    check_count(max_rows, "max_rows", "noc_load")
    check_window(time_window, "noc_load")
    cube = _cube_of(run)
    require(cube, ("link_load", "time_end"), "noc_load", "cube")
    hz = _hz(cube.attrs)
    cube = _bins_in_window(cube, hz, time_window)
    load = cube["link_load"]
    n_t, n_links = load.sizes["time"], load.sizes["link"]
    n_before = n_t * n_links
    names = [str(v) for v in load["link"].values]
    # link groups: row{r}.east, row{r}.west, col{c}.south, col{c}.north; pool neighbours within a direction
    p = 1
    while n_links > 4 * p and -(-n_links // p) * min(n_t, _MIN_BINS) > max_rows:
        p *= 2
    if p > 1:
        dirs = [name.split(".")[1] if "." in name else name for name in names]
        idx = [int("".join(ch for ch in name.split(".")[0] if ch.isdigit()) or 0) for name in names]
        kinds = [name.split(".")[0].rstrip("0123456789") for name in names]
        key = [f"{k}{i // p * p}-{i // p * p + p - 1}.{d}" for k, i, d in zip(kinds, idx, dirs, strict=True)]
        order = list(dict.fromkeys(key))
        load = load.assign_coords(pool=("link", key)).groupby("pool").max().sel(pool=order).rename(pool="link")
        load = load.assign_coords(time_end=cube["time_end"])
    n_groups = load.sizes["link"]
    factor = -(-n_t // max(1, max_rows // n_groups))
    load = _coarsen_time(load.transpose("time", "link"), factor)
    t0 = load["time"].values / hz * _US
    t1 = load["time_end"].values / hz * _US
    links = [str(v) for v in load["link"].values]
    tt, ll = np.meshgrid(np.arange(load.sizes["time"]), np.arange(n_groups), indexing="ij")
    width, t_max = float(_round(t0[1] - t0[0], 7)) if t0.size > 1 else float(t1[0] - t0[0]), float(t1[-1])
    df = pd.DataFrame({"t0_us": _round(t0[tt.reshape(-1)], 6), "g": ll.reshape(-1),
                       "load": _round(np.nan_to_num(load.values.reshape(-1)), 4)})
    how = []
    if p > 1:
        how.append(f"link groups of {p} neighbouring rows/columns pooled (max)")
    if factor > 1:
        how.append(f"{factor} time bins merged (mean)")
    groups = pd.DataFrame({"g": np.arange(n_groups), "link": np.asarray(links, dtype=object)})
    chart = alt.Chart(df).transform_lookup(lookup="g", from_=alt.LookupData(groups, "g", ["link"])).transform_calculate(
        t1_us=f"min(datum.t0_us + {width!r}, {t_max!r})").mark_rect().encode(
        x=alt.X("t0_us:Q", title="time (us)"), x2="t1_us:Q",
        y=alt.Y("link:N", sort=links, title="link group", axis=alt.Axis(labelLimit=200)),
        color=alt.Color("load:Q", title="load", scale=alt.Scale(scheme="inferno", reverse=True, domainMin=0)),
        tooltip=["link:N", alt.Tooltip("t0_us:Q", format=".4g", title="bin start (us)"),
                 alt.Tooltip("t1_us:Q", format=".4g", title="bin end (us)"), alt.Tooltip("load:Q", format=".1%")],
    ).properties(width=600, height=int(min(600, max(100, 10 * n_groups))))
    notes = [x for x in (aggregated(n_before, len(df), ", ".join(how)), _window_note(time_window)) if x]
    return titled(chart, f"NoC link load ({cube.attrs.get('hardware', '?')})", notes or None)


# ---------------------------------------------------------------------------------------------- buffer_pressure


def buffer_pressure(run_or_dataset: Any, max_rows: int = MAX_ROWS,
                    time_window: tuple[float, float] | None = None) -> alt.Chart:
    """SRAM occupancy over time: the mean over tiles and the busiest tile (one pair of lines per policy).

    Parameters
    ----------
    run_or_dataset : Run or xarray.Dataset
        A replay, its ``cube``, or a policy's ``artifacts["buffer_pressure"]`` (``mean``, ``busiest`` and
        ``bin_start_s`` over ``policy`` x ``bin``).
    max_rows : int
        Rows the chart may embed (time bins are merged beyond it; the subtitle says so).
    time_window : (float, float), optional
        ``(start_s, end_s)``: only the time bins that overlap it.

    Returns
    -------
    altair.Chart

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import presets
    >>> from dfit_nb.views import run as views
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> spec = views.buffer_pressure(dfit_nb.replay(t, presets.get("npu_like"))).to_dict()
    >>> spec["mark"]["type"], spec["title"]["text"]
    ('line', 'Buffer pressure (npu_like)')
    """
    ds = run_or_dataset
    expect(ds, "buffer_pressure", "run_or_dataset", "Run", "Dataset",
           dataset="a Run's cube, or a policy's artifacts['buffer_pressure']")
    check_count(max_rows, "max_rows", "buffer_pressure")
    check_window(time_window, "buffer_pressure")
    if hasattr(ds, "cube") or (isinstance(ds, xr.Dataset) and "sram_occupancy" in ds):
        cube = _cube_of(ds)
        require(cube, ("sram_occupancy",), "buffer_pressure", "cube")
        hz = _hz(cube.attrs)
        cube = _bins_in_window(cube, hz, time_window)
        occ = cube["sram_occupancy"]
        policies = [""]
        mean = occ.mean(("tile_y", "tile_x")).values[None]
        busiest = occ.max(("tile_y", "tile_x")).values[None]
        t_s = (cube["time"].values / hz)[None]
        name = cube.attrs.get("hardware", "?")
    elif isinstance(ds, xr.Dataset) and {"mean", "busiest", "bin_start_s"} <= set(ds.data_vars):
        policies = [str(p) for p in ds["policy"].values]
        mean, busiest = ds["mean"].values, ds["busiest"].values
        t_s = ds["bin_start_s"].values
        if time_window is not None:
            raise ValueError("buffer_pressure(time_window=...) takes a Run or its cube, not a policy artifact")
        name = "per policy"
    else:
        raise ViewInputError("buffer_pressure() takes a Run, its cube, or a policy's artifacts['buffer_pressure'] "
                             f"Dataset (mean, busiest, bin_start_s); got {describe(ds)}")
    n_p, n_t = mean.shape
    n_before = 2 * n_p * n_t
    factor = -(-n_t // max(1, max_rows // (2 * n_p)))
    if factor > 1:
        pad = (-n_t) % factor
        def merge(a: np.ndarray, how: Any) -> np.ndarray:
            a = np.pad(a, ((0, 0), (0, pad)), constant_values=np.nan).reshape(n_p, -1, factor)
            return how(a, axis=2)
        mean, busiest = merge(mean, np.nanmean), merge(busiest, np.nanmax)
        t_s = t_s[:, ::factor]
    frames = []
    for i, pol in enumerate(policies):
        for stat, values in (("mean over tiles", mean[i]), ("busiest tile", busiest[i])):
            frames.append(pd.DataFrame({"policy": pol, "stat": stat, "t_us": _round(t_s[i] * _US, 6),
                                        "occupancy": _round(values, 4)}))
    df = pd.concat(frames, ignore_index=True)
    enc: dict[str, Any] = {
        "x": alt.X("t_us:Q", title="time (us)"),
        "y": alt.Y("occupancy:Q", title="SRAM occupancy", axis=alt.Axis(format="%")),
        "strokeDash": alt.StrokeDash("stat:N", title=""),
        "tooltip": ["stat:N", alt.Tooltip("t_us:Q", format=".4g", title="bin start (us)"),
                    alt.Tooltip("occupancy:Q", format=".1%")],
    }
    if len(policies) > 1 or policies[0]:
        enc["color"] = alt.Color("policy:N", title="policy")
        enc["tooltip"] = ["policy:N", *enc["tooltip"]]
    chart = alt.Chart(df).mark_line().encode(**enc).properties(width=600, height=200)
    notes = [aggregated(n_before, len(df), f"{factor} time bins merged: mean of the mean, max of the busiest"),
             _window_note(time_window)]
    notes = [x for x in notes if x]
    return titled(chart, f"Buffer pressure ({name})", notes or None)


# ------------------------------------------------------------------------------------------------------- compare


def compare(ab: xr.Dataset, top: int = 15, max_rows: int = MAX_ROWS) -> alt.Chart | alt.HConcatChart:
    """A/B chart of :func:`dfit_nb.sim._compare`: region energy deltas (B - A) and, on one grid, tile busy deltas.

    Parameters
    ----------
    ab : xarray.Dataset
        The result of ``dfit_nb.sim.compare(run_a, run_b)``.
    top : int
        Regions shown: the ``top`` largest by ``|delta_energy_pj|`` (the subtitle says when some are left out).
    max_rows : int
        Rows a part may embed (large grids are pooled into blocks).

    Returns
    -------
    altair.Chart or altair.HConcatChart

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import compare, presets
    >>> from dfit_nb.views import run as views
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> hw = presets.get("npu_like")
    >>> spec = views.compare(compare(dfit_nb.replay(t, hw, "ws"), dfit_nb.replay(t, hw, "os"))).to_dict()
    >>> len(spec["hconcat"]), spec["title"]["text"].startswith("A/B")
    (2, True)
    """
    expect(ab, "compare", "ab", "Dataset", dataset="from dfit_nb.sim.compare(run_a, run_b)")
    if not {"region", "delta_energy_pj", "energy_pj_a", "energy_pj_b"} <= set(ab.variables):
        raise ViewInputError("compare() needs the Dataset of dfit_nb.sim.compare(run_a, run_b) (region, "
                             f"delta_energy_pj, energy_pj_a, energy_pj_b) as 'ab', got {describe(ab)}")
    check_count(top, "top", "compare")
    check_count(max_rows, "max_rows", "compare")
    regions = np.asarray([str(r) for r in ab["region"].values], dtype=object)
    delta = np.nan_to_num(ab["delta_energy_pj"].values)
    top = max(1, min(top, max_rows))
    keep = np.argsort(-np.abs(delta), kind="stable")[:top]
    df = pd.DataFrame({"region": np.where(regions[keep] == "", "(whole program)", regions[keep]),
                       "delta_pj": _round(delta[keep], 5),
                       "a_pj": _round(np.nan_to_num(ab["energy_pj_a"].values[keep]), 5),
                       "b_pj": _round(np.nan_to_num(ab["energy_pj_b"].values[keep]), 5)})
    bars = alt.Chart(df).mark_bar().encode(
        x=alt.X("delta_pj:Q", title="energy B - A (pJ)"),
        y=alt.Y("region:N", sort=alt.EncodingSortField("delta_pj", op="sum", order="ascending"), title="region",
                axis=alt.Axis(labelLimit=260)),
        color=alt.condition("datum.delta_pj > 0", alt.value("#d6604d"), alt.value("#4393c3")),
        tooltip=["region:N", alt.Tooltip("a_pj:Q", format=".4s", title="A (pJ)"),
                 alt.Tooltip("b_pj:Q", format=".4s", title="B (pJ)"),
                 alt.Tooltip("delta_pj:Q", format=".4s", title="B - A (pJ)")],
    ).properties(width=320, height=int(max(80, 18 * len(df))), title="region energy, B - A")
    notes = [f"A: {ab.attrs.get('a', '?')}; B: {ab.attrs.get('b', '?')}"]
    if len(regions) > len(keep):
        notes.append(f"{len(keep)} of {len(regions)} regions shown (largest |delta|)")
    chart: Any = bars
    if "delta_busy_s" in ab:
        d = ab["delta_busy_s"]
        rows, cols = d.sizes["tile_y"], d.sizes["tile_x"]
        p = _pool_factor(rows, cols, max_rows)
        pooled = _pool_grid(d, p, "sum")
        yy, xx = np.meshgrid(pooled["tile_y"].values, pooled["tile_x"].values, indexing="ij")
        tdf = pd.DataFrame({"tile_y": yy.reshape(-1), "tile_x": xx.reshape(-1),
                            "delta_busy_us": _round(np.nan_to_num(pooled.values.reshape(-1)) * _US, 4)})
        lim = float(np.abs(tdf["delta_busy_us"]).max()) or 1.0
        heat = alt.Chart(tdf).mark_rect().encode(
            x=alt.X("tile_x:O", title="tile x" + (" (block start)" if p > 1 else "")),
            y=alt.Y("tile_y:O", title="tile y" + (" (block start)" if p > 1 else "")),
            color=alt.Color("delta_busy_us:Q", title="busy B - A (us)",
                            scale=alt.Scale(scheme="redblue", reverse=True, domain=[-lim, lim])),
            tooltip=["tile_y:O", "tile_x:O", alt.Tooltip("delta_busy_us:Q", format=".4g", title="B - A (us)")],
        ).properties(width=320, height=320, title="compute-busy time per tile, B - A")
        if p > 1:
            notes.append(aggregated(rows * cols, len(tdf), f"tiles pooled into {p}x{p} blocks (sum)"))
        chart = alt.hconcat(bars, heat).resolve_scale(color="independent")
    return titled(chart, f"A/B: {ab.attrs.get('function', '')}".rstrip(": "), notes)
