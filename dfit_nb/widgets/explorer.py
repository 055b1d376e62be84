"""``Explorer(trace, hw)``: machine controls, a dataflow choice and a region picker over tabs of linked views.

The Explorer starts from the exact machine it is given (a preset name or a
:class:`~dfit_nb.sim.Hardware`, custom or swept) and replays exactly it until
a control moves: each slider's options hold the machine's own value, so
showing the machine never rounds it. The sliders move fields of that machine
(PE rows and columns apart, tile rows and columns, the SRAM total split in the
machine's proportions, NoC and DRAM bandwidth); every other field is kept.
A machine that differs from the one chosen in the ``machine`` dropdown says
so in its name (``"npu_like (modified: pe_cols=32)"``), so a Run's
``attrs["hardware"]`` never calls a modified machine by a preset's name; the
dropdown resets to a preset (or to the given machine) exactly.

A change of any control replays the trace (and re-selects the hybrid policy
when asked: selected, then replayed against every single style, falling back
to the best single style when the hybrid does not beat it; the status line
names the policy) and redraws the visible view; the other views redraw when
their tab is opened. A status line says when it is running, how long the last
update took, which machine and policy it shows, and when the SRAM was raised
to the floor the PE array needs.

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

Moving a tile-grid slider past a power-of-two bucket (8 to 16 rows, say) needs a replay program compiled for
the larger grid: a few seconds the first time on a machine with an empty compilation cache. So once it is
displayed, and after each update, the Explorer compiles, on one background thread shared by every Explorer, the
programs of the grid buckets next to the one shown that its tile sliders can reach
(:func:`dfit_nb.sim.warm`); one built and never displayed compiles nothing ahead. A warm-up
starts only when no update runs and none has for :data:`IDLE_S` (a second), so it does not slow a slider being
moved; a move into a bucket whose warm-up is compiling waits for that compile instead of starting a second one,
and one whose warm-up has not started compiles the program itself (the warm-up is dropped). Warm-ups still
queued when the interpreter exits are dropped. ``prewarm=False`` turns it off.

Views are Altair ``JupyterChart`` widgets
(offline, see :mod:`dfit_nb.widgets._offline`), so an executed, trusted
notebook keeps them without a kernel (ipywidgets state embeds them).

The controls' menus and the machine they describe are :mod:`dfit_nb.widgets._controls`, the warm-ups
:mod:`dfit_nb.widgets._prewarm`; their public names are importable from here too.
"""

from __future__ import annotations

import time
import warnings
from functools import partial
from typing import Any

import altair as alt
import ipywidgets as w
import numpy as np
import pandas as pd

from .. import views
from .._html import macro
from ..sim import REPLAY_DATAFLOWS, SpillWarning, presets, program_key, replay, select_dataflows
from ..sim.hardware import Hardware, check_hardware
from ..sim.policy import OBJECTIVES
from ..sim.run import Run
from ..views import ViewInputError, check_region, check_window, describe, expect
from ._controls import _MENUS, _SLIDERS, _menu, _number
from ._controls import DRAM_BW as DRAM_BW
from ._controls import GRID as GRID
from ._controls import NOC_BW as NOC_BW
from ._controls import PE as PE
from ._controls import SRAM_KB as SRAM_KB
from ._controls import machine_from_controls as machine_from_controls
from ._controls import modified_name as modified_name
from ._controls import same_machine as same_machine
from ._prewarm import IDLE_S as IDLE_S
from ._prewarm import _await_warm, _busy, _compiled, _submit_warm
from ._prewarm import bucket_neighbours as bucket_neighbours

VIEWS = ("timeline", "utilization", "regions", "traffic_mix", "noc_load", "buffer_pressure", "roofline")


class Explorer(w.VBox):
    """Explore one trace on machines you adjust: preset, PE rows and columns, SRAM, NoC and DRAM bandwidth, tiles.

    Parameters
    ----------
    trace : Trace
        The captured program.
    hw : Hardware or str, optional
        The machine to start from, replayed exactly (a preset name, or any scalar
        :class:`~dfit_nb.sim.Hardware`: a custom or a swept one); ``npu_like`` when omitted.
    dataflow : {"ws", "os", "is", "hybrid"}
        The dataflow to start with.
    objective : {"energy", "latency", "edp"}
        What the hybrid policy minimises.
    views_shown : tuple of str
        The views to show, as tabs (see ``VIEWS``).
    prewarm : bool
        Once displayed, compile the replay programs of the next tile-grid buckets on a background thread after
        each update (see the module docstring), so a tile slider crossing a bucket does not wait for a compile.

    Attributes
    ----------
    run : Run
        The current replay (for ``hybrid``, the selected policy's replay: ``policy.runs["hybrid"]``).
    policy : Policy or None
        The hybrid policy when the dataflow is ``hybrid``, evaluated by replay (its ``name`` says when it
        fell back to a single style).
    controls : dict
        Control name -> widget: ``preset``, ``tile_rows``, ``tile_cols``, ``pe_rows``, ``pe_cols``,
        ``sram_kb`` (SRAM per tile in KiB, all three buffers), ``noc_bw``, ``dram_bw``, ``dataflow``,
        ``objective``, ``region``.
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
    >>> ex = Explorer(t, "sambanova_like", views_shown=("regions",))
    >>> ex.hardware().pe_rows, ex.hardware().pe_cols, ex.run.attrs["hardware"]
    (16, 6, 'sambanova_like')
    >>> ex.controls["pe_cols"].value = 8
    >>> ex.run.attrs["hardware"], int(ex.run.attrs["hw_pe_cols"])
    ('sambanova_like (modified: pe_cols=8)', 8)
    >>> ex.narrow(window=(0.0, 1e-7)); ex.window
    (0.0, 1e-07)
    """

    def __init__(self, trace: Any, hw: Hardware | str | None = None, *, dataflow: str = "ws",
                 objective: str = "energy", views_shown: tuple[str, ...] = VIEWS, prewarm: bool = True) -> None:
        # the wrong object fails here, named, not deep inside the first replay
        expect(trace, "Explorer", "trace", "Trace")
        if isinstance(views_shown, str) or not isinstance(views_shown, (tuple, list)):
            raise ViewInputError(f"Explorer() needs views_shown as a tuple of view names (e.g. ('timeline',); "
                                 f"valid: {', '.join(VIEWS)}), got {describe(views_shown)}")
        unknown = [v for v in views_shown if v not in VIEWS]
        if unknown:
            raise ValueError(f"unknown view(s) {unknown}; valid: {', '.join(VIEWS)}")
        # no view builds a widget with no tabs; a view twice puts its one chart widget in two tabs
        repeated = sorted({v for v in views_shown if list(views_shown).count(v) > 1})
        if not views_shown or repeated:
            twice = f" ({', '.join(repeated)} more than once)" if repeated else ""
            raise ValueError(f"Explorer() needs views_shown as one or more distinct views of {', '.join(VIEWS)}; got "
                             f"{tuple(views_shown)!r}{twice}")
        if dataflow not in REPLAY_DATAFLOWS:
            raise ValueError(f"unknown dataflow {dataflow!r}; valid: {', '.join(REPLAY_DATAFLOWS)}")
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")
        self.trace = trace
        self.prewarm = bool(prewarm)
        self._shown = False  # displayed in a frontend: only then are the next buckets worth compiling ahead
        self._hw: Hardware | None = None  # the machine of the last good update
        if hw is None:
            hw = presets.get("npu_like")
        elif isinstance(hw, str):
            hw = presets.get(hw)
        # a batch is a value it cannot show (ValueError), anything else the wrong kind of object (TypeError)
        check_hardware(hw, "Explorer()", error=ViewInputError, batch_error=ValueError,
                       also_valid=f"or a preset's name ({', '.join(presets.names())})",
                       batch_hint=" (open one of them, e.g. with SweepExplorer.open_machine)")
        # dropdown label -> machine: every preset, and the given machine under its own label unless it is
        # exactly the preset of its name (a machine named like a preset but differing keeps both reachable)
        self._machines: dict[str, Hardware] = {name: presets.get(name) for name in presets.names()}
        label = hw.name
        if label in self._machines and not same_machine(hw, self._machines[label]):
            label = f"{hw.name} (as given)"
        self._machines[label] = hw
        self.run: Run | None = None
        self.policy: Any = None
        self.last_update_s = float("nan")
        self.window: tuple[float, float] | None = None
        self._syncing = False
        self._drawing = False
        self._notes: list[str] = []
        # every node of the region tree, in program order (inner nodes such as "encoder/layer_0" too)
        regions = [str(r) for r in trace.regions["region"].values if str(r)]
        style = {"description_width": "7em"}

        def slider(description: str) -> w.SelectionSlider:
            # options are set from the machine by _set_sliders; a placeholder keeps the widget valid until then
            return w.SelectionSlider(options=[("1", 1)], description=description, style=style)

        c = {
            "preset": w.Dropdown(options=list(self._machines), value=label, description="machine", style=style),
            "tile_rows": slider("tile rows"),
            "tile_cols": slider("tile cols"),
            "pe_rows": slider("PE rows"),
            "pe_cols": slider("PE cols"),
            "sram_kb": slider("SRAM KiB"),
            "noc_bw": slider("NoC B/cyc"),
            "dram_bw": slider("DRAM B/cyc"),
            "dataflow": w.ToggleButtons(options=list(REPLAY_DATAFLOWS), value=dataflow, description="dataflow",
                                        style=style),
            "objective": w.Dropdown(options=list(OBJECTIVES), value=objective, description="objective",
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
        for key in (*_MENUS, "dataflow"):
            c[key].observe(lambda change: self._update(), names="value")
        # the objective only steers the hybrid policy: a single style's replay does not change with it
        c["objective"].observe(lambda change: self._update() if c["dataflow"].value == "hybrid" else None,
                               names="value")
        c["region"].observe(lambda change: self._narrowed(source=None), names="value")
        machine = w.VBox([c[k] for k in ("preset", "tile_rows", "tile_cols", "pe_rows", "pe_cols", "sram_kb",
                                         "noc_bw", "dram_bw")],
                         layout=w.Layout(min_width="390px"))  # room for the sliders' readouts
        policy = w.VBox([c["dataflow"], c["objective"], c["region"], w.HBox([self.focus, self.clear]), self.status,
                         self.summary])
        super().__init__([w.HBox([machine, policy]), tabs])

    # ---- machine from the controls ---------------------------------------------------------------
    @property
    def base(self) -> Hardware:
        """The machine chosen in the ``machine`` dropdown (a preset, or the machine the Explorer was given)."""
        return self._machines[self.controls["preset"].value]

    def _set_sliders(self, hw: Hardware) -> None:
        """Show ``hw`` exactly: each slider's options get the machine's own value, then the slider takes it."""
        c = self.controls
        values = {key: getattr(hw, field) for key, field in _SLIDERS.items()}
        values["sram_kb"] = float(np.asarray(hw.sram_bytes)) / 1024  # exact: bytes / 2**10 is a binary float
        self._syncing = True  # new options reset a slider's value: not a user's move
        try:
            for key, value in values.items():
                c[key].options = _menu(_MENUS[key], value)
                c[key].value = _number(value)
        finally:
            self._syncing = False

    def hardware(self) -> Hardware:
        """The machine the controls describe: the chosen machine with the sliders' values.

        Every field no slider moves is the chosen machine's; the SRAM total is split in its proportions
        (unchanged, it keeps the exact partitions). A partition below the floor the PE array needs
        (``2 x max(pe_rows, pe_cols) x word_bytes`` bytes, one array row double-buffered) is raised to it,
        and the status line says so. The name is the chosen machine's when nothing differs, else it lists
        the changed fields (see :func:`modified_name`).

        Examples
        --------
        >>> import jax.numpy as jnp, dfit_nb
        >>> from dfit_nb.sim import presets
        >>> from dfit_nb.widgets import Explorer
        >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
        >>> ex = Explorer(t, "eyeriss_like", views_shown=("regions",))
        >>> ex.hardware() == presets.get("eyeriss_like")
        True
        >>> ex.controls["sram_kb"].value = 256  # from 108 KiB, split 2:1:1 as Eyeriss' buffer is here
        >>> hw = ex.hardware(); hw.sram_input_bytes, hw.sram_weight_bytes, hw.sram_output_bytes
        (131072, 65536, 65536)
        >>> hw.name
        'eyeriss_like (modified: sram_input_bytes=131072, sram_output_bytes=65536, sram_weight_bytes=65536)'
        """
        hw, _ = self._machine()
        return hw

    def _machine(self) -> tuple[Hardware, list[str]]:
        """The controls' machine and notes for the status line (an SRAM raised to the floor)."""
        return machine_from_controls(self.base, {key: self.controls[key].value for key in (*_SLIDERS, "sram_kb")})

    def _on_preset(self, change: Any) -> None:
        self._set_sliders(self._machines[change["new"]])  # the chosen machine exactly: no slider moves it
        self._update()

    # ---- replay and redraw -----------------------------------------------------------------------
    def _update(self) -> None:
        if self._syncing:
            return
        self.status.value = macro("widgets.html.j2", "running")
        self.window = None  # a new machine has a new time axis
        t0 = time.perf_counter()
        _busy(True)
        try:
            self._replay_and_redraw(t0)
        finally:
            _busy(False)

    def _replay_and_redraw(self, t0: float) -> None:
        c = self.controls
        try:
            hw, self._notes = self._machine()
            key = program_key(self.trace, hw)
            _await_warm(key)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SpillWarning)
                if c["dataflow"].value == "hybrid":
                    # evaluated: replayed against every single style, falling back to the best one when the
                    # hybrid does not beat it, so the Explorer never shows an unverified gain
                    self.policy = select_dataflows(self.trace, hw, c["objective"].value)
                    self.run = self.policy.runs["hybrid"]
                else:
                    self.policy = None
                    self.run = replay(self.trace, hw, c["dataflow"].value)
        except Exception as err:  # a bad combination must not take the widget (or the kernel) down
            self._error = f"{type(err).__name__}: {err}"
            self.status.value = _error_html(err)
            return
        failed = self._redraw()
        self.last_update_s = time.perf_counter() - t0
        self.status.value = failed or self._status()
        self.summary.value = self.run._repr_html_()
        self._show_focus()
        _compiled(key)
        self._hw = hw
        self._prewarm()

    def _prewarm(self) -> None:
        """Queue the warm-ups of the grid buckets next to the shown machine's that the tile sliders offer; only
        for an Explorer someone sees (displayed in a frontend), so one built and dropped compiles nothing."""
        hw = self._hw
        if not (self.prewarm and self._shown) or hw is None:
            return
        grid = [tuple(v for _, v in self.controls[key].options) for key in ("tile_rows", "tile_cols")]
        for near in bucket_neighbours(hw, *grid):
            _submit_warm(self.trace, near)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        """Displayed (what IPython calls to show the widget): from now on the next buckets are compiled ahead."""
        self._displayed()
        return super()._repr_mimebundle_(**kwargs)

    def _displayed(self) -> None:
        """Someone sees this Explorer (displayed itself, or inside a displayed SweepExplorer)."""
        self._shown = True
        self._prewarm()

    def _status(self) -> str:
        """The status line of a good update: time taken, the machine replayed, the policy, any SRAM clamp."""
        return macro("widgets.html.j2", "status", self.last_update_s * 1e3, str(self.run.attrs["hardware"]),
                     None if self.policy is None else self.policy.name, list(self._notes))

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
        # both are checked before either is applied: a bad region must not leave a new window undrawn
        if window is not ...:
            check_window(window, "Explorer.narrow", "window")  # a str, a number or three values: named here
            if window is not None:
                lo, hi = (float(v) for v in window)
                if not hi > lo:
                    raise ValueError(f"window must be (start_s, end_s) with end > start, got {window}")
                window = (lo, hi)
        check_region(region, "Explorer.narrow")  # a list would fail as an unhashable set member below
        new_region = region is not None and region != self.region
        if new_region and region not in {v for _, v in self.controls["region"].options}:
            raise ValueError(f"unknown region {region!r}; valid: the region tree's paths (trace.regions)")
        if window is not ...:
            self.window = window
        if new_region:
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
        self.focus.value = macro("widgets.html.j2", "focus", self.region, self.window)
        self.clear.disabled = not (self.region or self.window is not None)

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
    return macro("widgets.html.j2", "error", f"{prefix}{type(err).__name__}: {err}")


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
