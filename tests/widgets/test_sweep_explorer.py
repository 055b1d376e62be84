"""The SweepExplorer: axes, the Pareto view, a clicked machine opened in an Explorer."""

from __future__ import annotations

import types

import pytest

from dfit_nb.sim import Hardware, presets, replay_batch, sweep
from dfit_nb.widgets import SweepExplorer


@pytest.fixture(scope="module")
def batch(static_traces):
    hw = presets.get("npu_like")
    machines = [hw, hw.replace(pe_rows=8, pe_cols=8), hw.replace(dram_bytes_per_cycle=240.0)]
    return replay_batch(static_traces["mlp"], Hardware.stack(machines))


def test_a_click_opens_the_machine_in_an_explorer(static_traces, batch):
    sx = SweepExplorer(batch, static_traces["mlp"])
    assert "$schema" in sx.chart.chart.to_dict()
    point = types.SimpleNamespace(value=[{"config": "machine=1, pe_cols=8, pe_rows=8"}])
    sx._on_pick({"new": point})
    assert sx.explorer is not None and int(sx.explorer.run.attrs["hw_pe_rows"]) == 8
    assert float(sx.explorer.run.summary["latency_s"]) == pytest.approx(float(batch["latency_s"][1]), rel=1e-9)
    assert len(sx.detail.children) == 2


def test_axes_redraw_and_bad_uses(static_traces, batch):
    sx = SweepExplorer(batch, None)
    before = sx.chart.chart.to_json()
    sx.y.value = "utilization"
    assert sx.chart.chart.to_json() != before and sx.status.value == ""
    with pytest.raises(ValueError, match="without the trace"):
        sx.open_machine(0)
    grid = sweep(static_traces["mlp"], presets.get("npu_like"), ["ws", "os"], pe=[(8, 8), (16, 16)])
    view_only = SweepExplorer(grid)
    assert "$schema" in view_only.chart.chart.to_dict()
    with pytest.raises(ValueError, match="replay_batch"):
        view_only.machine(0)
