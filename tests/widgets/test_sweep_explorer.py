"""The SweepExplorer: axes, the Pareto view, a clicked machine opened in an Explorer."""

from __future__ import annotations

import types
import warnings

import numpy as np
import pytest

from dfit_nb.sim import Hardware, SpillWarning, presets, replay, replay_batch, sweep
from dfit_nb.sim.hardware import FIELDS
from dfit_nb.views import ViewInputError
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
    assert sx.explorer.run.attrs["hardware"] == "batch (swept machine 1)"


def test_an_explorer_opened_in_a_displayed_sweep_explorer_counts_as_seen(static_traces, batch, monkeypatch):
    """The nested Explorer is drawn by the frontend, never through its own _repr_mimebundle_: the SweepExplorer
    tells it when it is seen, so its warm-ups start only then (see dfit_nb.widgets.explorer)."""
    from dfit_nb.widgets import explorer as module

    queued = []
    monkeypatch.setattr(module, "_submit_warm", lambda trace, hw: queued.append(hw))
    sx = SweepExplorer(batch, static_traces["mlp"])
    assert not sx.open_machine(0)._shown and queued == []  # built, never displayed
    sx._repr_mimebundle_()
    assert sx.explorer._shown and len(queued) == 2  # the 16-row and 16-column buckets of npu_like's 4 x 5 grid
    assert sx.open_machine(1)._shown  # opened inside the displayed widget


@pytest.mark.slow  # a large-grid preset (compiles its own grid bucket; tests/conftest.py)
def test_an_opened_machine_is_the_swept_machine_exactly(static_traces):
    hw = presets.get("sambanova_like")  # spatial, a 16x6 array: nothing the old square PE slider could show
    machines = [hw, hw.replace(pe_cols=12, tile_rows=3, dram_bytes_per_cycle=37.5, noc_hop_cycles=2.0,
                               sram_output_bytes=100_000, clock_ghz=1.2)]
    ds = replay_batch(static_traces["mlp"], Hardware.stack(machines, name="sn sweep"))
    sx = SweepExplorer(ds, static_traces["mlp"])
    for i, machine in enumerate(machines):
        ex = sx.open_machine(i)
        got = ex.hardware()
        assert got.name == f"sn sweep (swept machine {i})" == ex.run.attrs["hardware"]
        assert got.execution == "spatial" == ex.run.attrs["execution"]
        assert {f: float(getattr(got, f)) for f in FIELDS} == {f: float(getattr(machine, f)) for f in FIELDS}
        assert {f: ex.run.attrs[f"hw_{f}"] for f in FIELDS} == {f: float(getattr(machine, f)) for f in FIELDS}
        # the Explorer's Run is the replay of exactly that machine
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SpillWarning)
            alone = replay(static_traces["mlp"], machine)
        assert float(ex.run.summary["latency_s"]) == float(alone.summary["latency_s"])
        assert float(ex.run.summary["energy_j"]) == float(alone.summary["energy_j"])
    with pytest.raises(IndexError, match=r"machines 0\.\.1"):
        sx.machine(2)


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


@pytest.mark.parametrize("index", ["1", 1.5, True, None])
def test_a_machine_index_that_is_not_a_whole_number_is_named(batch, index):
    """"1" failed comparing with the bounds (TypeError '<=' not supported), 1.5 deep inside xarray's isel, and
    True opened machine 1."""
    sx = SweepExplorer(batch, None)
    with pytest.raises(ViewInputError, match=r"SweepExplorer\.machine\(\) needs index as a whole number"):
        sx.machine(index)
    assert sx.machine(np.int64(1)).name == sx.machine(-2).name == "batch (swept machine 1)"


def test_a_trace_of_another_program_is_refused_before_a_machine_opens_it(static_traces, batch):
    """The sweep replayed mlp; given the encoder's trace, a picked machine opened replaying the encoder beside
    mlp's front, with nothing said."""
    with pytest.raises(ViewInputError) as info:
        SweepExplorer(batch, static_traces["encoder"])
    assert "'trace'" in str(info.value) and "function is 'mlp'" in str(info.value)
    SweepExplorer(batch, static_traces["mlp"])  # its own trace is still taken


def test_a_design_is_drawn_over_the_cloud_and_opens(static_traces, batch):
    from dfit_nb.sim import design
    from dfit_nb.views import ViewInputError

    trace = static_traces["mlp"]
    d = design(trace, presets.get("npu_like"), fields={"pe_rows": (8, 32), "pe_cols": (8, 32)}, starts=2, replays=3,
               max_steps=2, budget_s=600)
    sx = SweepExplorer(batch, trace, d)
    spec = sx.chart.chart.to_dict()
    layers = spec["layer"]
    assert len(layers) == 6  # the sweep's front line, points and rings; the path, the candidates, the design
    # the sweep's layers keep the data and the selection Altair lifted from them to the layered chart
    assert "data" in spec and [p["name"] for p in spec["params"]] == ["picked"]
    assert all("data" in layer for layer in layers[3:])
    sx.y.value = "utilization"  # another view: the sweep alone
    assert len(sx.chart.chart.to_dict()["layer"]) == 3
    ex = sx.open_design()
    assert float(ex.run.summary["latency_s"]) == pytest.approx(d.figures["latency_s"], rel=1e-9)
    assert ex.run.attrs["hardware"] == d.hardware.name
    with pytest.raises(ViewInputError, match=r"design as a dfit_nb\.sim\.Design"):
        SweepExplorer(batch, trace, "designed")
    with pytest.raises(ValueError, match="without the trace or the design"):
        SweepExplorer(batch, trace).open_design()
