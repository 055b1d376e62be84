"""The thermal view: a tile-grid temperature heatmap under a time brush, hotspot tiles marked.

A pure function from the Dataset of :func:`dfit_nb.sim.thermal` to an Altair chart (Vega-Lite: the brush is a
selection parameter, no widget). Large grids are pooled into blocks and steps merged, by their maximum (a
hotspot must not average away), so that (steps x tiles) stays within ``max_rows``; the subtitle says so.
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd
import xarray as xr

from ._common import MAX_ROWS, ViewInputError, aggregated, check_count, describe, require, titled
from ._pooling import _pool_factor, _pool_grid, _round

__all__ = ["temperature"]

_MIN_STEPS = 16  # time resolution a pooled chart keeps at least (when the analysis has that many steps)


def temperature(analysis: xr.Dataset, max_rows: int = MAX_ROWS) -> alt.VConcatChart:
    """Peak tile temperature over time (brushable, throttled steps marked, the limit as a rule) above a heatmap of
    each tile's hottest temperature within the brushed window (the whole run with no brush), hotspot tiles ringed.

    Parameters
    ----------
    analysis : xarray.Dataset
        From :func:`dfit_nb.sim.thermal` or :meth:`dfit_nb.sim.Run.thermal`.
    max_rows : int
        Rows the chart may embed.

    Returns
    -------
    altair.VConcatChart

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import presets
    >>> from dfit_nb.views.thermal import temperature
    >>> run = dfit_nb.replay(dfit_nb.capture(lambda a: a @ a, jnp.ones((64, 64))), presets.get("npu_like"))
    >>> spec = temperature(run.thermal(1000, steps=32)).to_dict()
    >>> "vconcat" in spec, spec["title"]["text"]
    (True, 'Tile temperature (npu_like, 1000 inferences)')
    """
    if not isinstance(analysis, xr.Dataset):
        raise ViewInputError(f"temperature() needs the Dataset of dfit_nb.sim.thermal (or Run.thermal) as "
                             f"'analysis', got {describe(analysis)}")
    check_count(max_rows, "max_rows", "temperature")
    require(analysis, ("temperature", "throttled", "hotspot", "time"), "temperature", "thermal analysis",
            nonempty=("time", "tile_y", "tile_x"))
    temp = analysis["temperature"]
    n_t, rows, cols = temp.sizes["time"], temp.sizes["tile_y"], temp.sizes["tile_x"]
    n_before = n_t * rows * cols
    p = _pool_factor(rows, cols, max_rows // min(n_t, _MIN_STEPS))
    pooled = _pool_grid(temp, p, "max")
    hot = _pool_grid(analysis["hotspot"].astype(np.float64), p, "max")
    n_blocks = pooled.sizes["tile_y"] * pooled.sizes["tile_x"]
    factor = -(-n_t // max(1, max_rows // n_blocks))
    throttled = analysis["throttled"].astype(np.float64)
    if factor > 1:  # merge steps by their maximum; a merged step is throttled when any of its steps was
        pooled = pooled.coarsen(time=factor, boundary="pad").max()
        throttled = throttled.coarsen(time=factor, boundary="pad").max()
    t_s = pooled["time"].values
    tt, yy, xx = np.meshgrid(np.arange(pooled.sizes["time"]), pooled["tile_y"].values, pooled["tile_x"].values,
                             indexing="ij")
    df = pd.DataFrame({"t_s": _round(t_s[tt.reshape(-1)], 6), "tile_y": yy.reshape(-1), "tile_x": xx.reshape(-1),
                       "temperature_c": _round(pooled.values.reshape(-1), 5),
                       "throttled": throttled.values[tt.reshape(-1)] > 0})
    hy, hx = np.nonzero(hot.values > 0)
    spots = pd.DataFrame({"tile_y": hot["tile_y"].values[hy], "tile_x": hot["tile_x"].values[hx]})
    limit = float(analysis.attrs.get("thermal_limit_c", np.nan))
    how = []
    if p > 1:
        how.append(f"tiles pooled into {p}x{p} blocks (max)")
    if factor > 1:
        how.append(f"{factor} steps merged (max)")
    summary = ""
    if {"peak_temperature_c", "throttle_fraction", "slowdown"} <= set(analysis.data_vars):
        summary = (f"peak {float(analysis['peak_temperature_c']):.4g} degC, throttled "
                   f"{float(analysis['throttle_fraction']):.0%} of the time, slowdown "
                   f"{float(analysis['slowdown']):.3g}x")
    notes = [aggregated(n_before, len(df), ", ".join(how)), summary,
             "brush the line to show the hottest temperature of each tile in a time window; rings: hotspot tiles"]
    brush = alt.selection_interval(encodings=["x"], name="window")
    base = alt.Chart(df)
    line = base.mark_line(color="firebrick").encode(
        x=alt.X("t_s:Q", title="time (s, throttling included)"),
        y=alt.Y("max(temperature_c):Q", title="peak tile (degC)", scale=alt.Scale(zero=False)),
        tooltip=[alt.Tooltip("t_s:Q", format=".4g", title="step end (s)"),
                 alt.Tooltip("max(temperature_c):Q", format=".4g", title="peak (degC)")],
    ).add_params(brush)
    marks = base.transform_filter(alt.datum.throttled).mark_tick(color="orange", thickness=1).encode(
        x="t_s:Q", tooltip=[alt.Tooltip("t_s:Q", format=".4g", title="throttled step end (s)")])
    layers = [line, marks]
    if np.isfinite(limit):
        layers.append(alt.Chart(pd.DataFrame({"limit": [limit]})).mark_rule(strokeDash=[4, 3], color="gray")
                      .encode(y="limit:Q", tooltip=[alt.Tooltip("limit:Q", title="thermal limit (degC)")]))
    top = alt.layer(*layers).properties(width=420, height=90)
    label = "block" if p > 1 else "tile"
    height = max(60, min(420, 420 * pooled.sizes["tile_y"] // max(1, pooled.sizes["tile_x"])))
    x = alt.X("tile_x:O", title=f"tile x ({label} start)" if p > 1 else "tile x")
    y = alt.Y("tile_y:O", title=f"tile y ({label} start)" if p > 1 else "tile y")
    heat = base.mark_rect().encode(
        x=x, y=y, color=alt.Color("max(temperature_c):Q", title="degC", scale=alt.Scale(scheme="inferno")),
        tooltip=["tile_y:O", "tile_x:O", alt.Tooltip("max(temperature_c):Q", format=".4g", title="hottest (degC)")],
    ).transform_filter(brush)
    ring = alt.Chart(spots).mark_point(shape="circle", size=160, color="cyan", strokeWidth=2, filled=False).encode(
        x=x, y=y, tooltip=["tile_y:O", "tile_x:O"])
    bottom = alt.layer(heat, ring).properties(width=420, height=height)
    title = (f"Tile temperature ({analysis.attrs.get('hardware', '?')}, "
             f"{int(analysis.attrs.get('inferences', 0))} inferences)")
    return titled(alt.vconcat(top, bottom), title, [x for x in notes if x])
