"""Charts of one replay (or an A/B comparison): pure functions from a :class:`~dfit_nb.sim.run.Run` to Altair charts.

Every chart embeds at most ``max_rows`` rows (:data:`dfit_nb.views._common.MAX_ROWS` by default): large runs are
binned or pooled with NumPy/xarray first, and the subtitle says so. No widgets: the charts are Vega-Lite specs
(zoom, brushes and sliders are Vega-Lite parameters).

The timeline is :mod:`dfit_nb.views._timeline` (importable from here), the binning and pooling the charts share
:mod:`dfit_nb.views._pooling`.
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
)
from ._pooling import (
    _MIN_BINS,
    _US,
    _bins_in_window,
    _coarsen_time,
    _cube_of,
    _hz,
    _pool_factor,
    _pool_grid,
    _round,
    _window_note,
)
from ._timeline import timeline as timeline

__all__ = ["buffer_pressure", "compare", "noc_load", "timeline", "utilization"]


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
    require(cube, ("busy", "time_end"), "utilization", "cube", nonempty=("time", "tile_y", "tile_x"))
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
    require(cube, ("link_load", "time_end"), "noc_load", "cube", nonempty=("time", "link"))
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
        Rows the chart may embed (time bins are merged beyond it; the subtitle says so): at least two per policy,
        one point of each line.
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
        require(cube, ("sram_occupancy",), "buffer_pressure", "cube", nonempty=("time", "tile_y", "tile_x"))
        hz = _hz(cube.attrs)
        cube = _bins_in_window(cube, hz, time_window)
        occ = cube["sram_occupancy"]
        policies = [""]
        mean = occ.mean(("tile_y", "tile_x")).values[None]
        busiest = occ.max(("tile_y", "tile_x")).values[None]
        t_s = (cube["time"].values / hz)[None]
        name = cube.attrs.get("hardware", "?")
    elif isinstance(ds, xr.Dataset) and {"mean", "busiest", "bin_start_s"} <= set(ds.data_vars):
        require(ds, ("policy",), "buffer_pressure", "policy artifact", nonempty=("policy", "bin"))
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
    # two lines per policy (the mean and the busiest tile), each at least one point
    check_count(max_rows, "max_rows", "buffer_pressure", low=2 * n_p)
    n_before = 2 * n_p * n_t
    factor = -(-n_t // (max_rows // (2 * n_p)))
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
    """A/B chart of :func:`dfit_nb.sim.compare`: region energy deltas (B - A) and, on one grid, tile busy deltas.

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
