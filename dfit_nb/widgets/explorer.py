"""``Explorer(trace, hw)``: machine controls, a dataflow choice and a region picker over tabs of linked views.

A change of any control replays the trace (and re-selects the hybrid policy
when asked) and redraws the visible view; the other views redraw when their
tab is opened. A status line says when it is running and how long the last
update took.

Views are linked through Python: brushing a time window on the timeline (or
on the utilization line) narrows the utilization heatmap, the NoC load, the
buffer pressure and the timeline itself to that window; picking a region (the
dropdown, or a click on the region icicle or on a roofline point) narrows the
timeline, utilization, roofline and traffic mix to that subtree, highlights it
in the icicle, and gives the NoC and buffer views the region's time span. The
view a selection came from is not redrawn under the pointer; it follows when
its tab is opened again. A replay (any machine control) clears the time
window, whose axis it changes, and keeps the region. A view that cannot draw
(a window that overlaps nothing, a Run lacking what the view needs) shows the
reason in its tab and in the status line instead of a blank chart.

Views are Altair ``JupyterChart`` widgets
(offline, see :mod:`dfit_nb.widgets._offline`), so an executed, trusted
notebook keeps them without a kernel (ipywidgets state embeds them).
"""

from __future__ import annotations

import html
import time
import warnings
from functools import partial
from typing import Any

import altair as alt
import ipywidgets as w
import numpy as np
import pandas as pd

from .. import views
from ..sim import presets, replay, select_dataflows
from ..sim.hardware import Hardware
from ..sim.replay import SpillWarning
from ..sim.run import Run

VIEWS = ("timeline", "utilization", "regions", "traffic_mix", "noc_load", "buffer_pressure", "roofline")
PE = (4, 8, 12, 16, 32, 64, 128, 256)
SRAM_KB = (8, 16, 32, 48, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
GRID = (1, 2, 4, 5, 8, 16, 20, 32, 64)


def _nearest(options: tuple[int, ...], value: float) -> int:
    return min(options, key=lambda o: abs(o - value))


class Explorer(w.VBox):
    """Explore one trace on machines you adjust: preset, PE array, SRAM, NoC and DRAM bandwidth, tile grid.

    Attributes
    ----------
    run : Run
        The current replay.
    policy : Policy or None
        The hybrid policy when the dataflow is ``hybrid``.
    charts : dict
        View name -> ``alt.JupyterChart``.
    last_update_s : float
        Seconds the last update took (replay and chart specs, Python side).
    window : (float, float) or None
        The time window (seconds) brushed on the timeline or the utilization line.
    region : str
        The picked region ("" for all).

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.widgets import Explorer
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> ex = Explorer(t, "npu_like")
    >>> ex.controls["pe"].value = 8
    >>> int(ex.run.attrs["hw_pe_rows"])
    8
    >>> ex.narrow(window=(0.0, 1e-7)); ex.window
    (0.0, 1e-07)
    """

    def __init__(self, trace: Any, hw: Hardware | str | None = None, *, dataflow: str = "ws",
                 views_shown: tuple[str, ...] = VIEWS) -> None:
        unknown = [v for v in views_shown if v not in VIEWS]
        if unknown:
            raise ValueError(f"unknown view(s) {unknown}; valid: {', '.join(VIEWS)}")
        if dataflow not in ("ws", "os", "is", "hybrid"):
            raise ValueError(f"unknown dataflow {dataflow!r}; valid: ws, os, is, hybrid")
        self.trace = trace
        if hw is None:
            hw = presets.get("npu_like")
        elif isinstance(hw, str):
            hw = presets.get(hw)
        if not isinstance(hw, Hardware):
            raise TypeError(f"hw must be a Hardware or a preset name, got {type(hw).__name__}")
        self._base = hw
        self.run: Run | None = None
        self.policy: Any = None
        self.last_update_s = float("nan")
        self.window: tuple[float, float] | None = None
        self._syncing = False
        self._drawing = False
        names = list(presets.names())
        if hw.name not in names:
            names.append(hw.name)
        # every node of the region tree, in program order (inner nodes such as "encoder/layer_0" too)
        regions = [str(r) for r in trace.regions["region"].values if str(r)]
        style = {"description_width": "7em"}
        c = {
            "preset": w.Dropdown(options=names, value=hw.name, description="machine", style=style),
            "tile_rows": w.SelectionSlider(options=GRID, description="tile rows", style=style),
            "tile_cols": w.SelectionSlider(options=GRID, description="tile cols", style=style),
            "pe": w.SelectionSlider(options=PE, description="PE array", style=style),
            "sram_kb": w.SelectionSlider(options=SRAM_KB, description="SRAM KiB", style=style),
            "noc_bw": w.FloatLogSlider(base=2, min=0, max=10, step=1, description="NoC B/cyc", style=style),
            "dram_bw": w.FloatLogSlider(base=2, min=0, max=12, step=0.5, description="DRAM B/cyc", style=style),
            "dataflow": w.ToggleButtons(options=["ws", "os", "is", "hybrid"], value=dataflow, description="dataflow",
                                        style=style),
            "objective": w.Dropdown(options=["energy", "latency", "edp"], value="energy", description="objective",
                                    style=style),
            "region": w.Dropdown(options=[("all regions", "")] + [(r, r) for r in regions], value="",
                                 description="region", style=style),
        }
        self.controls = c
        self._set_sliders(hw)
        self.status = w.HTML()
        self.summary = w.HTML()
        self.focus = w.HTML()
        self.clear = w.Button(description="clear selection", tooltip="drop the time window and the region",
                              layout=w.Layout(width="auto"))
        self.charts: dict[str, alt.JupyterChart] = {}
        self._views = views_shown
        self._stale: set[str] = set()
        self._update()
        if self.run is None:  # the first replay failed: nothing to show, so fail loudly here
            raise ValueError(f"cannot replay {getattr(trace, 'name', 'the trace')} on {hw.name}: {self._error}")
        tabs = w.Tab(children=[self.charts[v] for v in views_shown])
        for i, v in enumerate(views_shown):
            tabs.set_title(i, v.replace("_", " "))
        self.tabs = tabs
        tabs.observe(self._on_tab, names="selected_index")
        for name, chart in self.charts.items():
            chart.observe(partial(self._on_selection, name), names="_vl_selections")
        self.clear.on_click(lambda _: self.narrow(window=None, region=""))
        c["preset"].observe(self._on_preset, names="value")
        for key in ("tile_rows", "tile_cols", "pe", "sram_kb", "noc_bw", "dram_bw", "dataflow", "objective"):
            c[key].observe(lambda change: self._update(), names="value")
        c["region"].observe(lambda change: self._narrowed(source=None), names="value")
        machine = w.VBox([c["preset"], c["tile_rows"], c["tile_cols"], c["pe"], c["sram_kb"], c["noc_bw"],
                          c["dram_bw"]], layout=w.Layout(min_width="390px"))  # room for the sliders' readouts
        policy = w.VBox([c["dataflow"], c["objective"], c["region"], w.HBox([self.focus, self.clear]), self.status,
                         self.summary])
        super().__init__([w.HBox([machine, policy]), tabs])

    # ---- machine from the controls ---------------------------------------------------------------
    def _set_sliders(self, hw: Hardware) -> None:
        c = self.controls
        self._syncing = True
        try:
            c["tile_rows"].value = _nearest(GRID, float(hw.tile_rows))
            c["tile_cols"].value = _nearest(GRID, float(hw.tile_cols))
            c["pe"].value = _nearest(PE, float(hw.pe_rows))
            c["sram_kb"].value = _nearest(SRAM_KB, float(hw.sram_bytes) / 1024)
            c["noc_bw"].value = float(hw.noc_link_bytes_per_cycle)
            c["dram_bw"].value = float(hw.dram_bytes_per_cycle)
        finally:
            self._syncing = False

    def hardware(self) -> Hardware:
        """The machine the controls describe: the chosen preset with the sliders' values."""
        c = self.controls
        base = self._base if c["preset"].value == self._base.name else presets.get(c["preset"].value)
        total = float(base.sram_bytes)
        share = {f: float(getattr(base, f)) / total for f in ("sram_input_bytes", "sram_weight_bytes",
                                                               "sram_output_bytes")}
        kb = c["sram_kb"].value * 1024
        pe = c["pe"].value
        word = float(base.word_bytes)
        floor = 2 * pe * word  # each partition holds one array row, double-buffered
        return base.replace(
            tile_rows=c["tile_rows"].value, tile_cols=c["tile_cols"].value, pe_rows=pe, pe_cols=pe,
            noc_link_bytes_per_cycle=float(c["noc_bw"].value), dram_bytes_per_cycle=float(c["dram_bw"].value),
            **{f: max(int(kb * s), int(floor)) for f, s in share.items()})

    def _on_preset(self, change: Any) -> None:
        hw = self._base if change["new"] == self._base.name else presets.get(change["new"])
        self._set_sliders(hw)
        self._update()

    # ---- replay and redraw -----------------------------------------------------------------------
    def _update(self) -> None:
        if self._syncing:
            return
        c = self.controls
        self.status.value = "<i>running...</i>"
        self.window = None  # a new machine has a new time axis
        t0 = time.perf_counter()
        try:
            hw = self.hardware()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SpillWarning)
                if c["dataflow"].value == "hybrid":
                    self.policy = select_dataflows(self.trace, hw, c["objective"].value, evaluate=False)
                    self.run = replay(self.trace, hw, self.policy)
                else:
                    self.policy = None
                    self.run = replay(self.trace, hw, c["dataflow"].value)
        except Exception as err:  # a bad combination must not take the widget (or the kernel) down
            self._error = f"{type(err).__name__}: {err}"
            self.status.value = _error_html(err)
            return
        failed = self._redraw()
        self.last_update_s = time.perf_counter() - t0
        self.status.value = failed or f"updated in {self.last_update_s * 1e3:.0f} ms"
        self.summary.value = self.run._repr_html_()
        self._show_focus()

    @property
    def region(self) -> str:
        return str(self.controls["region"].value)

    def _span(self) -> tuple[float, float] | None:
        """The time the narrowing covers: the brushed window, else the picked region's span, else None."""
        if self.window is not None or not self.region:
            return self.window
        ev = self.run.events
        inside = (ev["source"].values == "simulated") & views.in_region(ev["region"].values, self.region)
        if not inside.any():
            return None
        return float(ev["start_s"].values[inside].min()), float(ev["end_s"].values[inside].max())

    def _view(self, name: str) -> Any:
        run, region, window = self.run, self.region or None, self.window
        if name == "timeline":
            return views.timeline(run, time_window=window, region=region)
        if name == "utilization":
            return views.utilization(run, time_window=window, region=region)
        if name in ("noc_load", "buffer_pressure"):
            return getattr(views, name)(run, time_window=self._span())
        if name == "regions":
            return views.regions(run, metric="energy", selected=region)
        if name == "roofline":
            return views.roofline(run, trace=self.trace, region=region)
        if name == "traffic_mix":
            return views.traffic_mix(run, region=region)
        raise ValueError(f"unknown view {name!r}; valid: {', '.join(VIEWS)}")

    def _draw(self, name: str) -> str:
        """Draw one view; a view that cannot draw shows why (in its tab) and returns the message."""
        try:
            chart, failed = self._view(name), ""
        except Exception as err:  # a bad window or a Run lacking variables: say so, never a blank chart
            chart, failed = _error_chart(name, err), _error_html(err, f"{name}: ")
        self._drawing = True  # a new spec resets the chart's selections: not a user's selection
        try:
            if name in self.charts:
                self.charts[name].chart = chart
            else:
                self.charts[name] = alt.JupyterChart(chart)
        finally:
            self._drawing = False
        return failed

    def _active(self) -> str:
        return self._views[self.tabs.selected_index or 0] if hasattr(self, "tabs") else self._views[0]

    def _redraw(self, source: str | None = None) -> str:
        """Redraw the visible view now (unless a selection on it caused this); the others when their tab opens."""
        if not self.charts:  # first build: every view
            return next((m for m in (self._draw(name) for name in self._views) if m), "")
        active = self._active()
        self._stale = set(self._views) - {active}
        if active == source:  # keep the chart under the user's pointer; it follows when its tab reopens
            self._stale.add(active)
            return ""
        return self._draw(active)

    def _on_tab(self, change: Any) -> None:
        name = self._views[change["new"] or 0]
        if name in self._stale:
            self._stale.discard(name)
            failed = self._draw(name)
            if failed:
                self.status.value = failed

    # ---- linked selections -----------------------------------------------------------------------
    def narrow(self, window: Any = ..., region: str | None = None, source: str | None = None) -> None:
        """Narrow the views to a time window (seconds; ``None`` clears it) and/or a region (``""`` clears it).

        This is what brushing the timeline or clicking a region does; it can be called from code too.
        """
        if window is not ...:
            if window is not None:
                lo, hi = (float(v) for v in window)
                if not hi > lo:
                    raise ValueError(f"window must be (start_s, end_s) with end > start, got {window}")
                window = (lo, hi)
            self.window = window
        if region is not None and region != self.region:
            options = {v for _, v in self.controls["region"].options}
            if region not in options:
                raise ValueError(f"unknown region {region!r}; valid: the region tree's paths (trace.regions)")
            self._syncing = True  # the dropdown's own observer would redraw a second time
            try:
                self.controls["region"].value = region
            finally:
                self._syncing = False
        self._narrowed(source)

    def _narrowed(self, source: str | None) -> None:
        if self._syncing or self.run is None:
            return
        failed = self._redraw(source)
        self._show_focus()
        if failed:
            self.status.value = failed

    def _show_focus(self) -> None:
        parts = []
        if self.region:
            parts.append(f"region <code>{html.escape(self.region)}</code>")
        if self.window is not None:
            parts.append(f"window {self.window[0] * 1e6:.4g}-{self.window[1] * 1e6:.4g} us")
        self.focus.value = "narrowed to " + ", ".join(parts) if parts else "<i>no selection</i>"
        self.clear.disabled = not parts

    def _on_selection(self, name: str, change: Any) -> None:
        """A selection made in the browser (JupyterChart syncs ``_vl_selections`` from Vega's signals)."""
        if self._drawing:
            return
        for sel, state in (change["new"] or {}).items():
            value = (state or {}).get("value")
            if sel == "window":  # interval over time in us: {"t0": [a, b]} (timeline) or {"t_us": [a, b]}
                span = next(iter(value.values()), None) if isinstance(value, dict) and value else None
                window = None if not span else (float(min(span)) * 1e-6, float(max(span)) * 1e-6)
                if window != self.window:
                    self.narrow(window=window, source=name)
            elif sel == "region":  # point selection: {"vlPoint": {"or": [{"region": path}]}} or None
                points = value.get("vlPoint", {}).get("or", []) if isinstance(value, dict) else []
                picked = str(points[0].get("region", "")) if points else ""
                if picked != self.region:
                    self.narrow(region=picked, source=name)


def _error_html(err: BaseException, prefix: str = "") -> str:
    return f"<b style='color:#b00'>{html.escape(prefix + type(err).__name__)}: {html.escape(str(err))}</b>"


def _error_chart(name: str, err: BaseException) -> alt.Chart:
    """A chart that says why a view could not be drawn (shown in the view's tab)."""
    words, lines, line = f"{type(err).__name__}: {err}".split(), [], ""
    for word in words:  # wrap at ~90 characters: Vega text marks do not wrap
        if len(line) + len(word) > 90:
            lines.append(line)
            line = ""
        line = f"{line} {word}".strip()
    lines.append(line)
    df = pd.DataFrame({"y": np.arange(len(lines)), "text": lines})
    return alt.Chart(df).mark_text(align="left", color="#b00", fontSize=12).encode(
        x=alt.value(5), y=alt.Y("y:O", axis=None), text="text:N").properties(
        width=640, height=20 * len(lines) + 10, title=f"{name.replace('_', ' ')} could not be drawn")
