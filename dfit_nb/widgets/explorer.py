"""``Explorer(trace, hw)``: machine controls, a dataflow choice and a region picker over tabs of linked views.

A change of any control replays the trace (and re-selects the hybrid policy
when asked) and redraws the visible view; the other views redraw when their
tab is opened. A status line says when it is running and how long the last
update took. Views are Altair ``JupyterChart`` widgets
(offline, see :mod:`dfit_nb.widgets._offline`), so an executed, trusted
notebook keeps them without a kernel (ipywidgets state embeds them).
"""

from __future__ import annotations

import html
import time
import warnings
from typing import Any

import altair as alt
import ipywidgets as w

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

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.widgets import Explorer
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> ex = Explorer(t, "npu_like")
    >>> ex.controls["pe"].value = 8
    >>> int(ex.run.attrs["hw_pe_rows"])
    8
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
        self._syncing = False
        names = list(presets.names())
        if hw.name not in names:
            names.append(hw.name)
        regions = sorted({str(r) for r in trace.ops["region"].values if str(r)})
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
        self.charts: dict[str, alt.JupyterChart] = {}
        self._views = views_shown
        self._update()
        tabs = w.Tab(children=[self.charts[v] for v in views_shown])
        for i, v in enumerate(views_shown):
            tabs.set_title(i, v.replace("_", " "))
        self.tabs = tabs
        self._stale: set[str] = set()
        tabs.observe(self._on_tab, names="selected_index")
        c["preset"].observe(self._on_preset, names="value")
        for key in ("tile_rows", "tile_cols", "pe", "sram_kb", "noc_bw", "dram_bw", "dataflow", "objective"):
            c[key].observe(lambda change: self._update(), names="value")
        c["region"].observe(lambda change: self._redraw(), names="value")
        machine = w.VBox([c["preset"], c["tile_rows"], c["tile_cols"], c["pe"], c["sram_kb"], c["noc_bw"],
                          c["dram_bw"]])
        policy = w.VBox([c["dataflow"], c["objective"], c["region"], self.status, self.summary])
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
            self._redraw()
        except Exception as err:  # a bad combination must not take the widget (or the kernel) down
            self.status.value = f"<b style='color:#b00'>{html.escape(type(err).__name__)}: {html.escape(str(err))}</b>"
            return
        self.last_update_s = time.perf_counter() - t0
        self.status.value = f"updated in {self.last_update_s * 1e3:.0f} ms"
        self.summary.value = self.run._repr_html_()

    def _view(self, name: str) -> Any:
        run, region = self.run, self.controls["region"].value
        if name == "timeline":
            if region:
                narrowed = Run(events=run.events.dfit.select(region=region), cube=run.cube, summary=run.summary,
                               ops=run.ops, regions=run.regions, attrs=run.attrs)
                return views.timeline(narrowed, by="tile")
            return views.timeline(run)
        if name == "regions":
            return views.regions(run, metric="energy")
        if name == "roofline":
            return views.roofline(run, trace=self.trace)
        return getattr(views, name)(run)

    def _redraw(self) -> None:
        """Redraw the visible view now; the others when their tab is opened (a spec costs tens of ms)."""
        if not self.charts:  # first build: every view
            for name in self._views:
                self.charts[name] = alt.JupyterChart(self._view(name))
            return
        active = self._views[self.tabs.selected_index or 0] if hasattr(self, "tabs") else self._views[0]
        self.charts[active].chart = self._view(active)
        self._stale = set(self._views) - {active}

    def _on_tab(self, change: Any) -> None:
        name = self._views[change["new"] or 0]
        if name in self._stale:
            self.charts[name].chart = self._view(name)
            self._stale.discard(name)
