"""``SweepExplorer(ds, trace)``: pick the axes of a sweep, see its Pareto front, click a machine to open it."""

from __future__ import annotations

import re
from typing import Any

import altair as alt
import ipywidgets as w
import numpy as np
import pandas as pd
import xarray as xr

from .. import views
from .._html import macro
from ..sim import DATAFLOWS, Design
from ..sim.hardware import FIELDS, Hardware
from ..sim.pareto import pareto_front
from ..sim.run import PROGRAM_ATTRS
from ..views import ViewInputError, describe, expect
from .explorer import Explorer

_AXES = {"latency": "latency_s", "energy": "energy_j"}


class SweepExplorer(w.VBox):
    """A Pareto view over a ``replay_batch`` (or ``sweep``) Dataset; a clicked machine opens in an :class:`Explorer`.

    Parameters
    ----------
    ds : xarray.Dataset
        From :func:`dfit_nb.sim.replay_batch` (per ``machine``, every hardware field a coordinate), or from
        :func:`dfit_nb.sim.sweep` (then points can be viewed, not opened). A lazy one (``chunks=``) is not
        computed whole: the view shows its Pareto front (:func:`dfit_nb.sim.pareto.pareto_front`, a tree
        reduction over its chunks), and a picked machine's fields are read from its coordinates.
    trace : Trace, optional
        The program the machines ran; needed to open a picked machine.
    design : dfit_nb.sim.Design, optional
        A search over the same program (:func:`dfit_nb.sim.design`): on the latency-energy view its path (each
        start's steps, at the search model's blended figures: every kernel alone, summed), its replayed
        candidates (diamonds) and the designed machine (a large cross) are drawn over the sweep's cloud;
        :meth:`open_design` opens the designed machine.

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import Hardware, presets, replay_batch
    >>> from dfit_nb.widgets import SweepExplorer
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> hw = presets.get("npu_like")
    >>> sx = SweepExplorer(replay_batch(t, Hardware.stack([hw, hw.replace(pe_rows=8, pe_cols=8)])), t)
    >>> sx.open_machine(1).run.attrs["hw_pe_rows"]
    8.0
    """

    def __init__(self, ds: xr.Dataset, trace: Any = None, design: Design | None = None) -> None:
        expect(ds, "SweepExplorer", "ds", "Dataset", dataset="from dfit_nb.sim.replay_batch or dfit_nb.sim.sweep")
        if trace is not None:
            expect(trace, "SweepExplorer", "trace", "Trace")
            _check_same_program(ds, trace)
        if design is not None and not isinstance(design, Design):
            raise ViewInputError(f"SweepExplorer() needs design as a dfit_nb.sim.Design (from dfit_nb.sim.design), "
                                 f"got {describe(design)}")
        self.ds, self.trace, self.design = ds, trace, design
        self.explorer: Explorer | None = None
        self._shown = False  # displayed: an Explorer opened in it is seen (its warm-ups may start)
        per_config = [v for v in ds.data_vars if v not in ("op",)]
        # a sweep's totals per call are its latency, energy and MACs (as views.sweep names them)
        options = [a for a in _AXES if _AXES[a] in ds or f"total_{_AXES[a].replace('latency_s', 'cycles')}" in ds]
        options += ["macs"] if "total_macs" in ds else []
        options += [v for v in per_config if v not in _AXES.values() and not str(v).startswith("total_")
                    and ds[v].dims and "op" not in ds[v].dims]
        if not ({"latency_s", "energy_j"} <= set(ds.data_vars) or "total_cycles" in ds) or not options:
            # a Dataset of another kind: no per-configuration figure to put on an axis
            raise ViewInputError("SweepExplorer() needs a Dataset from dfit_nb.sim.replay_batch (latency_s, energy_j "
                                 f"per machine) or dfit_nb.sim.sweep (total_cycles, ...) as 'ds', got {describe(ds)}")
        self.shown = _front_points(ds) if _lazy(ds) else ds  # what the chart draws: all points, or a lazy one's front
        self.x = w.Dropdown(options=options, value="latency" if "latency" in options else options[0], description="x")
        self.y = w.Dropdown(options=options, value="energy" if "energy" in options else options[-1], description="y")
        self.status = w.HTML(f"lazy sweep: its Pareto front, {self.shown.attrs['front_of']}" if _lazy(ds) else "")
        self.chart = alt.JupyterChart(self._chart())
        self.chart.selections.observe(self._on_pick, names="picked")
        for control in (self.x, self.y):
            control.observe(lambda change: self._redraw(), names="value")
        self.detail = w.VBox()
        super().__init__([w.HBox([self.x, self.y, self.status]), self.chart, self.detail])

    def _chart(self) -> Any:
        chart = views.sweep(self.shown, x=self.x.value, y=self.y.value)
        if self.design is None or {self.x.value, self.y.value} != set(_AXES):
            return chart
        return _with_design(chart, self.design, _AXES[self.x.value], _AXES[self.y.value])

    def _redraw(self) -> None:
        try:
            self.chart.chart = self._chart()
            self.status.value = ""
        except Exception as err:  # a meaningless axis pair: say so, keep the widget alive
            self.status.value = macro("widgets.html.j2", "error", str(err))

    def _on_pick(self, change: Any) -> None:
        value = getattr(change["new"], "value", None) or []
        config = value[0].get("config", "") if value else ""
        m = re.match(r"machine=(\d+)", str(config))
        if m:
            self.open_machine(int(m.group(1)))

    def machine(self, index: int) -> Hardware:
        """The exact Hardware of machine ``index`` of a ``replay_batch`` Dataset: every field from its coordinates.

        Named ``"<batch name> (swept machine <index>)"``, so a Run replayed on it says where it came from.

        Examples
        --------
        >>> import jax.numpy as jnp, dfit_nb
        >>> from dfit_nb.sim import Hardware, presets, replay_batch
        >>> from dfit_nb.widgets import SweepExplorer
        >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
        >>> hw = presets.get("npu_like")
        >>> ds = replay_batch(t, Hardware.stack([hw, hw.replace(pe_cols=12)], name="npu_like sweep"))
        >>> m = SweepExplorer(ds).machine(1)
        >>> m.name, m.pe_rows, m.pe_cols
        ('npu_like sweep (swept machine 1)', 16.0, 12.0)
        """
        # a str would fail comparing with the bounds, a float deep inside isel, and True would open machine 1
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise ViewInputError(f"SweepExplorer.machine() needs index as a whole number (the machine's position "
                                 f"in the sweep, as its points' config 'machine=<index>' says), got "
                                 f"{describe(index)}")
        missing = [f for f in FIELDS if f not in self.ds.coords]
        if "machine" not in self.ds.dims or missing:
            raise ValueError("only a dfit_nb.sim.replay_batch Dataset names its machines' hardware fields"
                             + (f" (this one lacks {', '.join(missing)})" if "machine" in self.ds.dims else ""))
        n = self.ds.sizes["machine"]
        if not -n <= index < n:
            raise IndexError(f"machine {index} is not in the sweep: it has machines 0..{n - 1}")
        index = index % n  # a negative index names the machine by its position from the end
        # replay_batch puts every field along "machine"; a field fixed over the sweep may be a scalar
        values = {f: np.asarray((self.ds[f].isel(machine=index) if "machine" in self.ds[f].dims else self.ds[f])
                                .values).item() for f in FIELDS}
        return Hardware(name=f"{self.ds.attrs.get('hardware', 'machine')} (swept machine {index})",
                        execution=str(self.ds.attrs.get("execution", "time")),
                        row_reductions=str(self.ds.attrs.get("row_reductions", "fused")), **values)

    def open_machine(self, index: int) -> Explorer:
        """Open machine ``index`` in an :class:`Explorer` below the front (needs the trace).

        The Explorer replays exactly that machine (:meth:`machine`), with the sweep's dataflow when it
        was one single style.
        """
        if self.trace is None:
            raise ValueError("SweepExplorer was built without the trace: pass it to open machines")
        hw = self.machine(index)
        dataflow = str(self.ds.attrs.get("dataflow", "ws"))
        self.explorer = Explorer(self.trace, hw, dataflow=dataflow if dataflow in DATAFLOWS else "ws")
        self.detail.children = [w.HTML(macro("widgets.html.j2", "machine", int(index), hw.name)),
                                self.explorer]
        if self._shown:  # the Explorer is seen inside this displayed widget: its warm-ups may start
            self.explorer._displayed()
        return self.explorer

    def open_design(self) -> Explorer:
        """Open the designed machine (``design.hardware``, with the dataflow its replay chose) in an
        :class:`Explorer` below the chart (needs the trace and the design)."""
        if self.trace is None or self.design is None:
            raise ValueError("SweepExplorer was built without the trace or the design: pass both to open the "
                             "designed machine")
        hw = self.design.hardware
        self.explorer = Explorer(self.trace, hw, dataflow=self.design.figures["dataflow"])
        self.detail.children = [w.HTML(macro("widgets.html.j2", "machine", "designed", hw.name)), self.explorer]
        if self._shown:
            self.explorer._displayed()
        return self.explorer

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        """Displayed (what IPython calls): an Explorer opened in it from now on is seen too."""
        self._shown = True
        if self.explorer is not None:
            self.explorer._displayed()
        return super()._repr_mimebundle_(**kwargs)


def _check_same_program(ds: xr.Dataset, trace: Any) -> None:
    """Refuse a trace of another program than the sweep's: a picked machine would open replaying it, its charts
    beside a front they do not belong to. Compared as :meth:`dfit_nb.sim.run.Run.comparable` compares two runs
    (function and argument shapes), each only where both name it (a Dataset saved without them passes)."""
    for key in PROGRAM_ATTRS:
        ours, theirs = str(ds.attrs.get(key, "")), str(trace.attrs.get(key, ""))
        if ours and theirs and ours != theirs:
            raise ViewInputError(f"SweepExplorer() needs as 'trace' the Trace the sweep replayed: the sweep's "
                                 f"{key} is {ours!r}, the trace's {theirs!r}")


def _with_design(chart: Any, design: Design, xcol: str, ycol: str) -> Any:
    """``chart`` (a latency-energy sweep view) with a design's path, its replayed candidates and its machine."""
    scale = alt.Scale(type="log", zero=False)
    names = {"latency_s": "latency (s)", "energy_j": "energy (J)"}
    xe = alt.X(f"{xcol}:Q", scale=scale, title=names[xcol], axis=alt.Axis(format="~s"))
    ye = alt.Y(f"{ycol}:Q", scale=scale, title=names[ycol], axis=alt.Axis(format="~s"))
    path = design.path[["latency_s", "energy_j"]].to_dataframe().reset_index()
    path["what"] = "search path (model: kernels alone)"
    tips = [alt.Tooltip("what:N"), alt.Tooltip(f"{xcol}:Q", format=".4~s"), alt.Tooltip(f"{ycol}:Q", format=".4~s")]
    lines = alt.Chart(path).mark_line(point=alt.OverlayMarkDef(color="darkorange"), strokeDash=[4, 2],
                                      color="darkorange", opacity=0.7).encode(
        x=xe, y=ye, detail="start:N", order="step:Q", tooltip=[*tips, alt.Tooltip("start:N"), alt.Tooltip("step:Q")])
    ev = design.evaluated[["latency_s", "energy_j", "area_mm2", "feasible"]].to_dataframe().reset_index()
    ev["what"] = "design candidate (replayed)"
    cands = alt.Chart(ev).mark_point(shape="diamond", color="crimson", filled=True, size=60).encode(
        x=xe, y=ye, tooltip=[*tips, alt.Tooltip("area_mm2:Q", format=".4~s"), alt.Tooltip("feasible:N")])
    f = design.figures
    best = alt.Chart(pd.DataFrame([{"latency_s": f["latency_s"], "energy_j": f["energy_j"],
                                    "what": f"designed: {design.hardware.name}"}])).mark_point(
        shape="cross", color="crimson", filled=True, size=400).encode(x=xe, y=ye, tooltip=tips)
    # the sweep view's layers with what Altair lifted from them to the layered chart: their shared data and
    # their selection; the overlays carry their own data
    return alt.LayerChart(layer=[*chart.layer, lines, cands, best], data=chart.data, params=chart.params,
                          title=chart.title, width=chart.width, height=chart.height)


def _lazy(ds: xr.Dataset) -> bool:
    return bool(ds.chunksizes)  # chunked (Dask-backed) variables; without importing Dask for an eager sweep


def _front_points(ds: xr.Dataset) -> xr.Dataset:
    """The Pareto-front points of a lazy sweep or replay_batch, computed (a tree reduction over its chunks), as a
    Dataset of the same kind: per ``machine`` (their original numbers) or per ``front`` point of a grid."""
    front = pareto_front(ds)
    per_point = [v for v in ds.data_vars if "op" not in ds[v].dims and set(ds[v].dims) <= set(front.coords)]
    if "machine" in ds.dims:
        shown = ds[per_point].isel(machine=front["machine"].values)
    else:
        dims = ds[per_point[0]].dims
        flat = front["flat"].values
        index = np.unravel_index(flat, [ds.sizes[d] for d in dims])
        shown = ds[per_point].isel({d: xr.DataArray(i, dims="front") for d, i in zip(dims, index, strict=True)})
    shown = shown.compute()
    shown.attrs["front_of"] = f"{front.sizes['front']} of {ds[per_point[0]].size:,} points"
    return shown
