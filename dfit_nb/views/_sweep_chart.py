"""A sweep's chart: two of its metrics against each other, the Pareto front marked (:func:`sweep`).

Part of :mod:`dfit_nb.views.program`, which exports :func:`sweep` and :func:`pareto_mask`.
"""

from __future__ import annotations

from typing import Any

import altair as alt
import numpy as np
import pandas as pd
import xarray as xr

from ..sim.pareto import pareto_mask as front_mask
from ._common import MAX_ROWS, ViewInputError, aggregated, describe, expect, titled


def _sweep_frame(ds: xr.Dataset) -> tuple[pd.DataFrame, list[str]]:
    """One row per configuration: latency_s, energy_j and the swept coordinates (as labels)."""
    if "total_cycles" in ds:  # dfit_nb.sim.sweep: totals over every dim but op
        clock = ds["clock_ghz"] if "clock_ghz" in ds.coords and "clock_ghz" in ds.dims else float(
            ds.attrs.get("hw_clock_ghz", 1.0))
        flat = xr.Dataset({"latency_s": ds["total_cycles"] / (clock * 1e9), "energy_j": ds["total_energy_j"],
                           "total_cycles": ds["total_cycles"]})
        if "total_macs" in ds:
            flat["macs"] = ds["total_macs"]
        dims = [d for d in flat.dims]
        df = flat.to_dataframe().reset_index()
    elif "latency_s" in ds and "energy_j" in ds:  # replay_batch
        keep = [v for v in ds.data_vars if ds[v].dims == ("machine",)]
        df = ds[keep].to_dataframe().reset_index()
        dims = ["machine"]
        varying = [c for c in ds.coords if c != "machine" and ds[c].dims == ("machine",)
                   and np.unique(ds[c].values).size > 1]
        dims += varying
    else:
        raise ValueError("expected a dfit_nb.sim.sweep Dataset (total_cycles, total_energy_j) or a replay_batch "
                         f"Dataset (latency_s, energy_j); got {describe(ds)}")
    for d in dims:
        df[d] = df[d].map(lambda v: v if isinstance(v, str) else f"{v:g}" if isinstance(v, float) else str(v))
    df["config"] = [", ".join(f"{d}={row[d]}" for d in dims) for _, row in df[dims].iterrows()]
    return df, dims


def pareto_mask(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Points no other point beats on both ``x`` and ``y`` (lower is better; duplicates keep one): the front of
    :func:`dfit_nb.sim.pareto_front` (one computation of it), after naming an argument that is not numbers.

    >>> pareto_mask(np.array([1.0, 2.0, 3.0, 2.0]), np.array([3.0, 1.0, 2.0, 2.0])).tolist()
    [True, True, False, False]
    """
    arrays = []
    for name, values in (("x", x), ("y", y)):
        try:
            arrays.append(np.asarray(values, np.float64).reshape(-1))
        except (TypeError, ValueError) as err:
            raise ViewInputError(f"pareto_mask() needs {name} as numbers (an array), got {describe(values)}") from err
    x, y = arrays
    if x.size != y.size:
        raise ValueError(f"pareto_mask() needs x and y of one length, got {x.size} and {y.size}")
    return front_mask(x, y)


_ALIASES = {"latency": "latency_s", "energy": "energy_j", "cycles": "total_cycles"}


def sweep(ds: xr.Dataset, x: str = "latency", y: str = "energy", color: str | None = None) -> alt.LayerChart:
    """Every configuration of a sweep as a point, the Pareto front (lower is better on both) highlighted.

    Parameters
    ----------
    ds : xarray.Dataset
        From :func:`dfit_nb.sim.sweep` (totals per machine x dataflow; the ``op`` dim is summed) or
        :func:`dfit_nb.sim.replay_batch` (per ``machine``).
    x, y : str
        ``"latency"`` (seconds), ``"energy"`` (joules) or another per-configuration variable.
    color : str, optional
        A swept dim to colour by (default: ``dataflow`` when swept).

    Returns
    -------
    altair.LayerChart
        With a point selection named ``picked`` (click a point; ``config`` identifies it) for widgets to read.

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import presets
    >>> from dfit_nb.views import program
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> ds = dfit_nb.sim.sweep(t, presets.get("npu_like"), ["ws", "os"], pe=[(8, 8), (16, 16)])
    >>> "$schema" in program.sweep(ds).to_dict()
    True
    """
    expect(ds, "sweep", "ds", "Dataset", dataset="from dfit_nb.sim.sweep or dfit_nb.sim.replay_batch")
    for name, value in (("x", x), ("y", y), ("color", color)):
        if not isinstance(value, str) and not (name == "color" and value is None):
            raise ViewInputError(f"sweep() needs {name} as a variable name (str{', or None' if name == 'color' else ''}"
                                 f"), got {describe(value)}")
    df, dims = _sweep_frame(ds)
    xcol, ycol = _ALIASES.get(x, x), _ALIASES.get(y, y)
    # the swept dims are labels in the frame (and "config" their text): numbers only go on an axis
    values = [c for c in df if c not in dims and c != "config" and df[c].dtype.kind in "biuf"]
    for name, col in (("x", xcol), ("y", ycol)):
        if col in dims or col == "config":
            what = "the points' labels" if col == "config" else f"a swept dim: colour by it (color={col!r}) instead"
            raise ValueError(f"sweep() needs {name} as a per-configuration value, not {col!r}, {what}; values: "
                             f"{values}")
        if col not in values:
            raise ValueError(f"{col!r} is not a per-configuration value; have {values}")
    if color is None and "dataflow" in dims:
        color = "dataflow"
    if color is not None and color not in df:
        raise ValueError(f"color {color!r} is not a swept dim; have {dims}")
    notes = []
    finite = np.isfinite(df[xcol].to_numpy(np.float64)) & np.isfinite(df[ycol].to_numpy(np.float64))
    if not finite.all():  # not drawable: said, not dropped unseen
        notes.append(f"{int((~finite).sum())} of {len(df)} configurations not drawn: {xcol} or {ycol} is not "
                     "finite (NaN or inf)")
    df = df[finite].reset_index(drop=True)
    front = pareto_mask(df[xcol].values, df[ycol].values)
    df["pareto"] = front
    df["n"] = 1
    n_before = len(df)
    if n_before > MAX_ROWS:  # the front stays; other points are binned on a log grid (mean position, count)
        rest, pf = df[~front], df[front].head(MAX_ROWS // 2)
        bins = int(np.sqrt(MAX_ROWS // 2))
        keys = []
        for col in (xcol, ycol):
            v = np.log10(np.maximum(rest[col].values.astype(np.float64), 1e-300))
            edges = np.linspace(v.min(), v.max() + 1e-12, bins + 1)
            keys.append(np.clip(np.digitize(v, edges) - 1, 0, bins - 1))
        group_cols = ["_bx", "_by"] + ([color] if color else [])
        rest = rest.assign(_bx=keys[0], _by=keys[1])
        binned = rest.groupby(group_cols, as_index=False).agg(
            **{xcol: (xcol, "mean"), ycol: (ycol, "mean"), "n": ("n", "sum"), "config": ("config", "first")})
        binned["config"] = binned["config"] + np.where(binned["n"] > 1, " (+ more in bin)", "")
        binned["pareto"] = False
        df = pd.concat([pf, binned.drop(columns=["_bx", "_by"])], ignore_index=True)
        notes.append(aggregated(n_before, len(df), "non-Pareto points binned on a log grid"))
    n_front = int(df["pareto"].sum())
    keep_cols = [c for c in dict.fromkeys([xcol, ycol, "config", "pareto", "n", *dims]) if c in df]
    df = df[keep_cols]
    picked = alt.selection_point(name="picked", fields=["config"], on="click", clear="dblclick")
    names = {"latency_s": "latency (s)", "energy_j": "energy (J)", "total_cycles": "latency (cycles)"}
    # a log axis cannot place 0 or a negative value (Vega leaves such a point out, even a Pareto one): linear then
    kinds = {col: "log" if (df[col] > 0).all() else "linear" for col in (xcol, ycol)}
    notes += [f"{col} on a linear axis: it has values <= 0" for col in dict.fromkeys((xcol, ycol))
              if kinds[col] == "linear"]
    xe = alt.X(f"{xcol}:Q", scale=alt.Scale(type=kinds[xcol], zero=False), title=names.get(xcol, xcol),
               axis=alt.Axis(format="~s"))
    ye = alt.Y(f"{ycol}:Q", scale=alt.Scale(type=kinds[ycol], zero=False), title=names.get(ycol, ycol),
               axis=alt.Axis(format="~s"))
    tooltip = [alt.Tooltip("config:N"), alt.Tooltip(f"{xcol}:Q", format=".4~s"),
               alt.Tooltip(f"{ycol}:Q", format=".4~s"), alt.Tooltip("pareto:N"), alt.Tooltip("n:Q", title="points")]
    base = alt.Chart(df)
    front_line = base.transform_filter(alt.datum.pareto).mark_line(color="black", strokeWidth=1.5).encode(
        x=xe, y=ye, order=f"{xcol}:Q")
    front_ring = base.transform_filter(alt.datum.pareto).mark_point(
        size=160, color="black", strokeWidth=2, filled=False).encode(x=xe, y=ye, tooltip=tooltip)
    enc: dict[str, Any] = {"x": xe, "y": ye, "tooltip": tooltip,
                           "opacity": alt.condition(picked, alt.value(0.85), alt.value(0.25))}
    if (df["n"] > 1).any():  # binned: the marker's area says how many configurations it stands for
        enc["size"] = alt.Size("n:Q", title="points", scale=alt.Scale(range=[30, 300]))
    if color:
        enc["color"] = alt.Color(f"{color}:N", title=color)
    points = base.mark_circle(size=60).encode(**enc).add_params(picked)
    chart = alt.layer(front_line, points, front_ring).properties(width=420, height=300)
    notes.insert(0, f"{n_before} configurations, {n_front} Pareto-optimal (ringed, lower is better)")
    return titled(chart, f"Sweep: {ycol} vs {xcol}", [n for n in notes if n])
