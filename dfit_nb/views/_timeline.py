"""The timeline of a replay (:func:`timeline`): one row per tile, op or region, a bar per event or per merged
time bin when the run is larger than the chart's rows. Importable from :mod:`dfit_nb.views.run`.
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
    aggregated,
    check_count,
    check_region,
    check_window,
    expect,
    in_region,
    require,
    titled,
    window_mask,
)
from ._pooling import _MIN_BINS, _US, _dense, _factorize, _pool_factor, _round, _window_note


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
    if not keep.any():  # nothing to draw: the tracks' grid would be sized by the max of no tiles
        raise ValueError(f"timeline needs simulated events; this run has none (of its {ev.sizes['event']:,} "
                         "events, every one measured on the host)" if ev.sizes["event"] else
                         "timeline needs simulated events; this run has no events at all")
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
