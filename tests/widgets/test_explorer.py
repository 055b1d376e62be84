"""The Explorer: controls re-run the replay and redraw the views; state serialises; rendering stays offline."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

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


def test_a_bad_machine_shows_an_error_instead_of_crashing(explorer):
    explorer.controls["pe"].value = 256
    explorer.controls["sram_kb"].value = 8  # too small for a 256-wide array's rows: clamped to the minimum
    assert explorer.status.value.startswith("updated in") or "Error" in explorer.status.value


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
