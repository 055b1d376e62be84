"""The Explorer: controls re-run the replay and redraw the views; state serialises; rendering stays offline."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from dfit_nb.sim.run import Run
from dfit_nb.widgets import Explorer


@pytest.fixture(scope="module")
def explorer(static_traces):
    return Explorer(static_traces["encoder"], "npu_like")


def _rows(chart_widget):
    spec = chart_widget.chart.to_dict()
    return sum(len(v) for v in spec.get("datasets", {}).values())


def test_the_explorer_shows_every_view_and_the_summary(explorer):
    assert set(explorer.charts) == {"timeline", "utilization", "regions", "traffic_mix", "noc_load",
                                    "buffer_pressure", "roofline"}
    assert len(explorer.tabs.children) == 7
    assert "latency" in explorer.summary.value and explorer.status.value.startswith("updated in")
    for chart in explorer.charts.values():
        assert "$schema" in chart.chart.to_dict()


def test_a_slider_change_replays_and_redraws(explorer):
    before = float(explorer.run.summary["latency_s"])
    explorer.tabs.selected_index = 1  # utilization: the visible view redraws at once
    spec_before = explorer.charts["utilization"].chart.to_json()
    roofline_before = explorer.charts["roofline"].chart.to_json()
    explorer.controls["pe"].value = 32
    assert int(explorer.run.attrs["hw_pe_rows"]) == 32
    assert float(explorer.run.summary["latency_s"]) != before
    assert explorer.charts["utilization"].chart.to_json() != spec_before
    assert explorer.charts["roofline"].chart.to_json() == roofline_before  # hidden: redrawn when opened
    explorer.tabs.selected_index = 6
    assert explorer.charts["roofline"].chart.to_json() != roofline_before
    explorer.tabs.selected_index = 0
    explorer.controls["dram_bw"].value = 512.0
    assert float(explorer.run.attrs["hw_dram_bytes_per_cycle"]) == 512.0
    assert explorer.last_update_s > 0


def test_dataflow_hybrid_and_presets(explorer):
    explorer.controls["dataflow"].value = "hybrid"
    assert explorer.policy is not None and explorer.run.attrs["dataflow"].startswith("hybrid")
    explorer.controls["preset"].value = "sambanova_like"
    assert explorer.run.attrs["execution"] == "spatial"
    assert explorer.controls["tile_cols"].value == 20 and explorer.controls["pe"].value == 16
    explorer.controls["dataflow"].value = "ws"


def test_the_region_picker_narrows_the_timeline(explorer):
    everything = _rows(explorer.charts["timeline"])
    explorer.controls["region"].value = "encoder/layer_0/mlp"
    assert _rows(explorer.charts["timeline"]) < everything
    explorer.controls["region"].value = ""


def _title(explorer, name):
    return explorer.charts[name].chart.to_dict()["title"]


def _brush(chart_widget, name, value):
    """What the browser does on a brush or click: JupyterChart syncs Vega's selection signals into Python."""
    chart_widget._vl_selections = {**chart_widget._vl_selections, name: {"value": value, "store": []}}


def test_a_timeline_brush_narrows_the_other_views(explorer):
    explorer.tabs.selected_index = 0
    end_us = float(explorer.run.summary["latency_s"]) * 1e6
    timeline_before = explorer.charts["timeline"].chart.to_json()
    _brush(explorer.charts["timeline"], "window", {"t0": [0.25 * end_us, 0.5 * end_us]})
    assert explorer.window == pytest.approx((0.25e-6 * end_us, 0.5e-6 * end_us))
    assert "narrowed to window" in explorer.focus.value and not explorer.clear.disabled
    # the brushed chart stays under the pointer; the others follow when their tab opens
    assert explorer.charts["timeline"].chart.to_json() == timeline_before
    for i, name in [*list(enumerate(explorer._views))[1:], (0, "timeline")]:
        explorer.tabs.selected_index = i
        if name in ("timeline", "utilization", "noc_load", "buffer_pressure"):
            assert any("window" in line for line in _title(explorer, name)["subtitle"]), name
    explorer.tabs.selected_index = 1  # utilization's own brush (field t_us) narrows too
    _brush(explorer.charts["utilization"], "window", {"t_us": [0.1 * end_us, 0.2 * end_us]})
    assert explorer.window == pytest.approx((0.1e-6 * end_us, 0.2e-6 * end_us))
    _brush(explorer.charts["utilization"], "window", None)  # a cleared brush clears the window
    assert explorer.window is None
    explorer.tabs.selected_index = 0


def test_a_region_click_narrows_the_other_views(explorer):
    explorer.tabs.selected_index = 2  # regions
    _brush(explorer.charts["regions"], "region", {"vlPoint": {"or": [{"region": "encoder/layer_1"}]}})
    assert explorer.region == "encoder/layer_1" == explorer.controls["region"].value
    for i, name in enumerate(explorer._views):
        explorer.tabs.selected_index = i
        lines = " ".join(_title(explorer, name).get("subtitle", []))
        if name in ("timeline", "utilization", "roofline"):
            assert "region encoder/layer_1 only" in lines, name
        elif name == "regions":
            assert "encoder/layer_1 highlighted" in lines
        elif name == "traffic_mix":
            assert _title(explorer, name)["text"].endswith("region encoder/layer_1")
        else:  # the cube has no region axis: the NoC and buffer views get the region's time span
            assert "window" in lines, name
    explorer.tabs.selected_index = 6  # a roofline point picks its region too
    _brush(explorer.charts["roofline"], "region", {"vlPoint": {"or": [{"region": "encoder/layer_0/mlp"}]}})
    assert explorer.region == "encoder/layer_0/mlp"
    explorer.clear.click()
    assert explorer.region == "" and explorer.window is None and explorer.clear.disabled
    explorer.tabs.selected_index = 0
    assert "subtitle" not in _title(explorer, "timeline") or not any(
        "only" in x for x in _title(explorer, "timeline")["subtitle"])


def test_a_replay_clears_the_window_and_keeps_the_region(explorer):
    explorer.narrow(window=(0.0, 1e-7), region="encoder/layer_0")
    explorer.controls["noc_bw"].value = 512.0 if explorer.controls["noc_bw"].value != 512.0 else 256.0
    assert explorer.window is None and explorer.region == "encoder/layer_0"
    explorer.narrow(region="")


def test_a_view_that_cannot_draw_says_why(explorer):
    explorer.tabs.selected_index = 4  # noc_load
    explorer.narrow(window=(10.0, 11.0))  # seconds: far beyond the run
    title = _title(explorer, "noc_load")
    assert title == "noc load could not be drawn"
    text = json.dumps(explorer.charts["noc_load"].chart.to_dict()["datasets"])
    assert "overlaps no time bin" in text and "overlaps no time bin" in explorer.status.value
    with pytest.raises(ValueError, match="end > start"):
        explorer.narrow(window=(2.0, 1.0))
    with pytest.raises(ValueError, match="unknown region 'nope'"):
        explorer.narrow(region="nope")
    explorer.narrow(window=None)
    assert _title(explorer, "noc_load")["text"].startswith("NoC link load")
    # a Run from an older schema (a variable missing): the tab says which, the kernel lives on
    run = explorer.run
    explorer.run = Run(events=run.events, cube=run.cube.drop_vars("link_load"), summary=run.summary, ops=run.ops,
                       regions=run.regions, attrs=run.attrs)
    explorer.narrow(window=None, region="encoder/layer_0")
    assert "noc_load needs [&#x27;link_load&#x27;]" in explorer.status.value
    explorer.run = run
    explorer.narrow(region="")
    explorer.tabs.selected_index = 0


def test_an_extreme_machine_is_kept_valid_and_replays(explorer):
    explorer.controls["pe"].value = 256
    explorer.controls["sram_kb"].value = 8  # the smallest SRAM beside the widest array
    assert explorer.status.value.startswith("updated in"), explorer.status.value
    a = explorer.run.attrs
    assert a["hw_pe_rows"] == 256 and a["hw_sram_input_bytes"] + a["hw_sram_weight_bytes"] \
        + a["hw_sram_output_bytes"] == 8 * 1024
    floor = 2 * 256 * a["hw_word_bytes"]  # each partition holds two array rows at least
    assert min(a["hw_sram_input_bytes"], a["hw_sram_weight_bytes"], a["hw_sram_output_bytes"]) >= floor
    explorer.controls["preset"].value = "npu_like"  # back to the fixture's machine


def test_widget_state_serialises(explorer):
    from ipywidgets.embed import embed_data

    data = embed_data(views=[explorer])
    text = json.dumps(data["manager_state"])
    assert "JupyterChart" in text or "anywidget" in text.lower()
    assert len(text) < 20_000_000


def test_offline_rendering_is_the_default_unless_the_user_chose():
    code = ("import altair as alt\nimport dfit_nb.widgets\nprint(alt.renderers.active, "
            "alt.renderers.options.get('offline'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["jupyter", "True"]
    code = "import altair as alt\nalt.renderers.enable('svg')\nimport dfit_nb.widgets\nprint(alt.renderers.active)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["svg"]


def test_bad_arguments(static_traces):
    with pytest.raises(ValueError, match="unknown view"):
        Explorer(static_traces["mlp"], views_shown=("gantt",))
    with pytest.raises(ValueError, match="unknown dataflow"):
        Explorer(static_traces["mlp"], dataflow="xs")
    with pytest.raises(KeyError, match="no hardware preset"):
        Explorer(static_traces["mlp"], "tpu")
    assert np.isfinite(Explorer(static_traces["mlp"], views_shown=("regions",)).last_update_s)
