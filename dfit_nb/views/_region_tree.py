"""The region tree chart (:func:`regions`, an icicle), and the region-path helpers the other program charts share.

Part of :mod:`dfit_nb.views.program`, which exports :func:`regions`.
"""

from __future__ import annotations

from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from ._common import MAX_ROWS, aggregated, check_count, check_region, expect, in_region, require, titled

_METRICS = ("flops", "bytes", "time", "energy")


def _is_run(obj: Any) -> bool:
    return hasattr(obj, "cube") and hasattr(obj, "summary")


def _tail(path: str) -> str:
    return path.rsplit("/", 1)[-1] if path else "<root>"


def _path_depth(path: str) -> int:
    return 0 if not path else path.count("/") + 1


def _parents(names: list[str], given: np.ndarray | None) -> np.ndarray:
    """Index of each region's parent (the root points at itself); the nearest listed ancestor when one is missing."""
    index = {n: i for i, n in enumerate(names)}
    root = index.get("", 0)
    out = np.empty(len(names), dtype=np.int64)
    for i, name in enumerate(names):
        if name == "":
            out[i] = i
            continue
        p = str(given[i]) if given is not None else name.rsplit("/", 1)[0] if "/" in name else ""
        while p not in index and p:
            p = p.rsplit("/", 1)[0] if "/" in p else ""
        out[i] = index.get(p, root)
        if out[i] == i:
            out[i] = root
    return out


def _region_table(obj: Any, metric: str) -> tuple[pd.DataFrame, str]:
    r = obj.regions
    require(r, ("region", "n_ops") + (("macs", "start", "end", "energy_pj", "bottleneck") if _is_run(obj) else
                                       ("flops", "bytes_read", "bytes_written", "time_s")), "regions", "regions")
    names = [str(v) for v in r["region"].values]
    df = pd.DataFrame({"region": names})
    if _is_run(obj):
        clock_hz = float(obj.attrs.get("clock_ghz", obj.attrs.get("hw_clock_ghz", 1.0))) * 1e9
        df["flops"] = 2.0 * r["macs"].values
        df["bytes"] = sum(r[f"bytes_{k}"].values for k in ("sram", "noc", "dram", "retile"))
        df["time_s"] = np.nan_to_num((r["end"].values - r["start"].values) / clock_hz)
        df["energy_j"] = r["energy_pj"].values * 1e-12
        df["bottleneck"] = [str(v) for v in r["bottleneck"].values]
        parent = None
        unit = {"flops": "FLOP (2 x MACs)", "bytes": "B (all levels)", "time": "s (span)", "energy": "J"}[metric]
    else:
        if metric == "energy":
            raise ValueError("a Trace has no energy: replay it first (metric='energy' needs a Run)")
        df["flops"] = r["flops"].values.astype(np.float64)
        df["bytes"] = (r["bytes_read"].values + r["bytes_written"].values).astype(np.float64)
        df["time_s"] = r["time_s"].values.astype(np.float64)
        if metric == "time" and not np.isfinite(df["time_s"]).any():
            raise ValueError("this trace has no measured time (static mode): capture with mode='profile' or 'eager'")
        df["time_s"] = np.nan_to_num(df["time_s"].values)
        parent = r["parent"].values if "parent" in r else None
        unit = {"flops": "FLOP", "bytes": "B read + written", "time": "s measured"}[metric]
    df["n_ops"] = r["n_ops"].values
    df["parent_index"] = _parents(names, parent)
    df["depth"] = [_path_depth(n) for n in names] if parent is None else r["depth"].values.astype(np.int64)
    column = {"flops": "flops", "bytes": "bytes", "time": "time_s", "energy": "energy_j"}[metric]
    df["value"] = np.maximum(df[column].values.astype(np.float64), 0.0)
    return df, unit


def _icicle_layout(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """x0, x1 of each region: children laid side by side from the parent's start, scaled into the parent if needed."""
    n = len(df)
    par = df["parent_index"].values
    depth = df["depth"].values
    value = df["value"].values
    x0, x1 = np.zeros(n), np.zeros(n)
    is_root = par == np.arange(n)
    x1[is_root] = value[is_root]
    for d in np.unique(depth):
        sel = np.flatnonzero((depth == d) & ~is_root)
        if sel.size == 0:
            continue
        p = par[sel]
        order = np.lexsort((sel, p))  # siblings in tree (row) order
        sel, p = sel[order], p[order]
        v = value[sel]
        # children's sum per parent: scale down where they exceed it (overlapping spans, clipped values)
        uniq, first, inv = np.unique(p, return_index=True, return_inverse=True)
        sums = np.bincount(inv, weights=v, minlength=uniq.size)
        room = x1[uniq] - x0[uniq]
        scale = np.where(sums > room, room / np.where(sums > 0, sums, 1.0), 1.0)
        w = v * scale[inv]
        csum = np.cumsum(w)
        before = csum - w - (csum[first] - w[first])[inv]
        x0[sel] = x0[p] + before
        x1[sel] = x0[sel] + w
    return x0, x1


def regions(trace_or_run: Any, metric: str = "flops", max_depth: int | None = None,
            color: str = "depth", selected: str | None = None) -> alt.LayerChart:
    """The region tree as an icicle: each region's width is its (inclusive) metric, children side by side.

    Parameters
    ----------
    trace_or_run : Trace or Run
        A captured :class:`~dfit_nb.capture.trace.Trace` or a replayed :class:`~dfit_nb.sim.run.Run`.
    metric : {"flops", "bytes", "time", "energy"}
        What sizes a region. A Trace has FLOPs, bytes read + written and measured time (profile/eager modes); a
        Run has 2 x MACs, bytes moved at all levels, the span from first start to last end, and energy.
    max_depth : int, optional
        Deepest level drawn.
    color : {"depth", "metric"}
        Colour bands by depth or by the metric.
    selected : str, optional
        A region to highlight with its subtree (the others are dimmed).

    Returns
    -------
    altair.LayerChart
        Rectangles (x: cumulative extent, y: depth band) with region names on the wide ones. A region's width
        left over by its children is its own (self) share, left empty. Clicking a rectangle sets the point
        selection ``region`` (``[{"region": path}]``), which the Explorer reads to narrow its other views.

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.views import program
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((8, 16)), jnp.ones((16, 4)))
    >>> "$schema" in program.regions(t).to_dict()
    True
    """
    expect(trace_or_run, "regions", "trace_or_run", "Trace", "Run")
    if max_depth is not None:
        check_count(max_depth, "max_depth", "regions", low=0)
    check_region(selected, "regions", "selected")
    if metric not in _METRICS:
        raise ValueError(f"metric must be one of {_METRICS}, got {metric!r}")
    if color not in ("depth", "metric"):
        raise ValueError(f"color must be 'depth' or 'metric', got {color!r}")
    df, unit = _region_table(trace_or_run, metric)
    df["x0"], df["x1"] = _icicle_layout(df)
    total = float(df["x1"].max() - df["x0"].min()) if len(df) else 0.0
    if max_depth is not None:
        df = df[df["depth"] <= max_depth]
    n_before = len(df)
    notes = []
    if n_before > MAX_ROWS:  # drop the deepest levels until the tree fits
        counts = np.cumsum(np.bincount(df["depth"].values))
        keep = int(np.searchsorted(counts, MAX_ROWS, side="right")) - 1
        df = df[df["depth"] <= max(keep, 0)]
        notes.append(aggregated(n_before, len(df), f"levels below depth {max(keep, 0)} folded into their ancestors"))
    df = df.assign(
        name=[_tail(n) for n in df["region"]],
        share=df["value"] / (total if total > 0 else 1.0),
        parent=[str(df_name) for df_name in np.asarray(trace_or_run.regions["region"].values)[
            df["parent_index"].values]],
    )
    df["label"] = np.where(df["share"] > 0.06, df["name"], "")
    df = df.drop(columns=["parent_index"])
    tooltip = [alt.Tooltip("region:N"), alt.Tooltip("depth:O"), alt.Tooltip("n_ops:Q", title="ops"),
               alt.Tooltip("share:Q", format=".1%", title="share of total"),
               alt.Tooltip("flops:Q", format=".4~s"), alt.Tooltip("bytes:Q", format=".4~s"),
               alt.Tooltip("time_s:Q", format=".4~s", title="time (s)")]
    if "energy_j" in df:
        tooltip += [alt.Tooltip("energy_j:Q", format=".4~s", title="energy (J)"), alt.Tooltip("bottleneck:N")]
    fill = (alt.Color("depth:O", scale=alt.Scale(scheme="blues"), legend=None) if color == "depth"
            else alt.Color("value:Q", title=f"{metric} ({unit})", scale=alt.Scale(scheme="viridis")))
    df["focus"] = in_region(df["region"].values, selected)
    if selected:
        if selected not in set(df["region"]):
            raise ValueError(f"selected region {selected!r} is not in the region tree")
        notes.append(f"{selected} highlighted")
    pick = alt.selection_point(name="region", fields=["region"], on="click", clear="dblclick")
    base = alt.Chart(df)
    rects = base.mark_rect(stroke="white", strokeWidth=0.5, cursor="pointer").encode(
        x=alt.X("x0:Q", title=f"{metric} ({unit}), cumulative", axis=alt.Axis(format="~s")),
        x2="x1:Q",
        y=alt.Y("depth:O", title="depth"),
        color=fill,
        opacity=alt.condition("datum.focus", alt.value(1.0), alt.value(0.25)),
        tooltip=tooltip,
    ).add_params(pick)
    text = base.mark_text(align="left", dx=3, fontSize=10, color="black").encode(
        x="x0:Q", y="depth:O", text="label:N", tooltip=tooltip)
    chart = alt.layer(rects, text).properties(width=640, height=max(80, 26 * (int(df["depth"].max()) + 1)))
    notes.append("children sized by the metric; empty width is the region's own (self) share; click to pick")
    return titled(chart, f"Regions by {metric}", [n for n in notes if n])
