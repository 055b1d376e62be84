"""The Explorer: controls re-run the replay and redraw the views; state serialises; rendering stays offline."""

from __future__ import annotations

import html
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dfit_nb.sim import DATAFLOWS, Hardware, presets
from dfit_nb.sim.hardware import FIELDS
from dfit_nb.sim.policy import OBJECTIVES
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
    explorer.controls["pe_rows"].value = 32
    assert int(explorer.run.attrs["hw_pe_rows"]) == 32 and int(explorer.run.attrs["hw_pe_cols"]) == 16  # not squared
    assert explorer.run.attrs["hardware"] == "npu_like (modified: pe_rows=32)"
    assert float(explorer.run.summary["latency_s"]) != before
    assert explorer.charts["utilization"].chart.to_json() != spec_before
    assert explorer.charts["roofline"].chart.to_json() == roofline_before  # hidden: redrawn when opened
    explorer.tabs.selected_index = 6
    assert explorer.charts["roofline"].chart.to_json() != roofline_before
    explorer.tabs.selected_index = 0
    explorer.controls["dram_bw"].value = 512.0
    assert float(explorer.run.attrs["hw_dram_bytes_per_cycle"]) == 512.0
    assert explorer.last_update_s > 0


def test_dataflow_hybrid(explorer):
    assert list(explorer.controls["dataflow"].options) == [*DATAFLOWS, "hybrid"]
    assert list(explorer.controls["objective"].options) == list(OBJECTIVES)
    explorer.controls["dataflow"].value = "hybrid"
    policy = explorer.policy
    # the evaluated policy: the Run shown is its replay, and the status names it (a fallback says so)
    assert policy is not None and policy.runs is not None and explorer.run is policy.runs["hybrid"]
    assert policy.baselines is not None and policy.name in html.unescape(explorer.status.value)
    assert float(explorer.run.summary["energy_j"]) <= min(
        float(policy.runs[s].summary["energy_j"]) for s in DATAFLOWS) * (1 + 1e-9)
    explorer.controls["dataflow"].value = "ws"


@pytest.mark.slow  # a large-grid preset (compiles its own grid bucket; tests/conftest.py)
def test_a_preset_resets_the_machine_exactly(explorer):
    explorer.controls["dataflow"].value = "hybrid"
    explorer.controls["preset"].value = "sambanova_like"  # resets to the preset exactly, hybrid kept
    sambanova = presets.get("sambanova_like")
    assert explorer.run.attrs["execution"] == "spatial" and explorer.run.attrs["hardware"] == "sambanova_like"
    assert explorer.controls["tile_cols"].value == 20
    assert (explorer.controls["pe_rows"].value, explorer.controls["pe_cols"].value) == (16, 6)
    assert explorer.hardware() == sambanova
    explorer.controls["dataflow"].value = "ws"
    explorer.controls["preset"].value = "npu_like"
    assert explorer.hardware() == presets.get("npu_like")


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
    assert "noc_load needs ['link_load']" in html.unescape(explorer.status.value)
    explorer.run = run
    explorer.narrow(region="")
    explorer.tabs.selected_index = 0


@pytest.mark.parametrize("kwargs, tokens", [
    ({"window": "0,1e-7"}, ("Explorer.narrow()", "window", "two numbers", "a str ('0,1e-7')")),
    ({"window": 1e-7}, ("Explorer.narrow()", "window", "a float (1e-07)")),
    ({"window": (0.0, 1e-7, 2e-7)}, ("Explorer.narrow()", "window", "two numbers")),
    ({"region": ["encoder"]}, ("Explorer.narrow()", "'region'", "a list (['encoder'])")),
], ids=["window-str", "window-number", "window-three", "region-list"])
def test_narrow_names_a_window_or_region_of_the_wrong_type(explorer, kwargs, tokens):
    """These failed as bare ValueError / TypeError ("could not convert string to float", "'float' object is not
    iterable", "too many values to unpack", "unhashable type: 'list'")."""
    from dfit_nb.views import ViewInputError

    before = explorer.window, explorer.region
    with pytest.raises(ViewInputError) as info:
        explorer.narrow(**kwargs)
    assert all(t in str(info.value) for t in tokens), str(info.value)
    assert (explorer.window, explorer.region) == before


def test_a_refused_region_leaves_the_window_as_it_was(explorer):
    """narrow(window=w, region="nope") set the window, then refused the region: the Explorer reported a window
    that no view had been narrowed to."""
    explorer.narrow(window=None, region="")
    with pytest.raises(ValueError, match="unknown region 'nope'"):
        explorer.narrow(window=(0.0, 1e-7), region="nope")
    assert explorer.window is None and explorer.region == ""


def test_an_extreme_machine_is_kept_valid_and_replays(explorer):
    explorer.controls["pe_rows"].value = 256
    explorer.controls["pe_cols"].value = 256
    explorer.controls["sram_kb"].value = 8  # the smallest SRAM beside the widest array
    assert explorer.status.value.startswith("updated in"), explorer.status.value
    a = explorer.run.attrs
    assert a["hw_pe_rows"] == a["hw_pe_cols"] == 256 and a["hw_sram_input_bytes"] + a["hw_sram_weight_bytes"] \
        + a["hw_sram_output_bytes"] == 8 * 1024
    floor = 2 * 256 * a["hw_word_bytes"]  # each partition holds two array rows at least
    assert min(a["hw_sram_input_bytes"], a["hw_sram_weight_bytes"], a["hw_sram_output_bytes"]) >= floor
    explorer.controls["preset"].value = "scalesim_32"  # the dropdown resets exactly, back to the fixture's machine
    explorer.controls["preset"].value = "npu_like"
    assert explorer.hardware() == presets.get("npu_like")


def test_widget_state_serialises(explorer):
    from ipywidgets.embed import embed_data

    data = embed_data(views=[explorer])
    text = json.dumps(data["manager_state"])
    assert "JupyterChart" in text or "anywidget" in text.lower()
    assert len(text) < 20_000_000


@pytest.mark.slow  # a fresh Python process importing JAX each
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
    with pytest.raises(ValueError, match=r"views_shown as one or more distinct views .*got \(\)"):
        Explorer(static_traces["mlp"], views_shown=())
    with pytest.raises(ValueError, match=r"\(regions more than once\)"):
        Explorer(static_traces["mlp"], views_shown=("regions", "timeline", "regions"))
    with pytest.raises(ValueError, match="unknown dataflow"):
        Explorer(static_traces["mlp"], dataflow="xs")
    with pytest.raises(KeyError, match="no hardware preset"):
        Explorer(static_traces["mlp"], "tpu")
    assert np.isfinite(Explorer(static_traces["mlp"], views_shown=("regions",)).last_update_s)


# ---- the machine shown is the machine given ------------------------------------------------------------------

def _same_fields(hw, expected):
    return {f: float(np.asarray(getattr(hw, f))) for f in FIELDS} == {
        f: float(np.asarray(getattr(expected, f))) for f in FIELDS}


@pytest.mark.parametrize("name", presets.names())
def test_every_preset_is_replayed_exactly(static_traces, name):
    preset = presets.get(name)
    ex = Explorer(static_traces["mlp"], name, views_shown=("regions",))
    hw = ex.hardware()
    assert _same_fields(hw, preset) and hw.execution == preset.execution and hw.name == name
    a = ex.run.attrs
    assert a["hardware"] == name and a["execution"] == preset.execution
    assert {f: a[f"hw_{f}"] for f in FIELDS} == {f: float(getattr(preset, f)) for f in FIELDS}
    assert f"machine <code>{name}</code>" in ex.status.value


@pytest.mark.slow  # a large-grid preset (compiles its own grid bucket; tests/conftest.py)
def test_sambanova_keeps_its_16_by_6_array(static_traces):
    ex = Explorer(static_traces["mlp"], "sambanova_like", views_shown=("regions",))
    assert (ex.run.attrs["hw_pe_rows"], ex.run.attrs["hw_pe_cols"]) == (16.0, 6.0)
    assert ex.controls["pe_cols"].value == 6 and 6 in [v for _, v in ex.controls["pe_cols"].options]


def test_a_custom_machine_round_trips_and_a_control_changes_one_field(static_traces):
    mine = presets.get("npu_like").replace(name="mine", pe_cols=12, dram_bytes_per_cycle=37.5, noc_hop_cycles=3.0,
                                           sram_output_bytes=20 * 1024 + 7)
    ex = Explorer(static_traces["mlp"], mine, views_shown=("regions",))
    assert ex.hardware() == mine and ex.run.attrs["hardware"] == "mine"
    assert ex.controls["preset"].value == "mine" and "mine" in ex.controls["preset"].options
    assert ex.controls["dram_bw"].value == 37.5 and ex.controls["sram_kb"].value == (68 * 1024 + 7) / 1024
    ex.controls["pe_cols"].value = 32
    hw = ex.hardware()
    assert hw.name == "mine (modified: pe_cols=32)" == ex.run.attrs["hardware"]
    assert hw.pe_cols == 32 and _same_fields(hw.replace(pe_cols=12), mine)  # nothing else moved
    ex.controls["tile_rows"].value = 2
    assert ex.run.attrs["hardware"] == "mine (modified: pe_cols=32, tile_rows=2)"
    ex.controls["pe_cols"].value = 12  # back on the given value: only tile_rows differs now
    ex.controls["tile_rows"].value = 4
    assert ex.hardware() == mine and ex.run.attrs["hardware"] == "mine"
    ex.controls["preset"].value = "npu_like"  # another machine, exactly; the given one stays reachable
    assert ex.hardware() == presets.get("npu_like")
    ex.controls["preset"].value = "mine"
    assert ex.hardware() == mine


def test_a_machine_named_like_a_preset_but_different_is_not_the_preset(static_traces):
    given = presets.get("npu_like").replace(pe_cols=8)  # still called npu_like: the user's name is kept
    ex = Explorer(static_traces["mlp"], given, views_shown=("regions",))
    assert ex.hardware() == given and ex.controls["preset"].value == "npu_like (as given)"
    ex.controls["preset"].value = "npu_like"
    assert ex.hardware() == presets.get("npu_like")


def test_the_sram_split_keeps_the_proportions_and_a_too_small_partition_is_raised(static_traces):
    npu = presets.get("npu_like")
    ex = Explorer(static_traces["mlp"], npu, views_shown=("regions",))
    ex.controls["sram_kb"].value = 128  # 32:16:16 KiB doubled
    hw = ex.hardware()
    assert (hw.sram_input_bytes, hw.sram_weight_bytes, hw.sram_output_bytes) == (64 * 1024, 32 * 1024, 32 * 1024)
    assert hw.name == ("npu_like (modified: sram_input_bytes=65536, sram_output_bytes=32768, "
                       "sram_weight_bytes=32768)")
    # a skewed split whose smallest partition cannot hold a 256-wide array row of 4-byte words at 8 KiB
    skewed = Hardware(name="skewed", pe_rows=16, pe_cols=16, word_bytes=4, sram_input_bytes=60 * 1024,
                      sram_weight_bytes=60 * 1024, sram_output_bytes=8 * 1024)
    ex = Explorer(static_traces["mlp"], skewed, views_shown=("regions",))
    ex.controls["sram_kb"].value = 8
    ex.controls["pe_rows"].value = 256
    floor = 2 * 256 * 4
    hw = ex.hardware()
    assert min(hw.sram_input_bytes, hw.sram_weight_bytes, hw.sram_output_bytes) == floor
    assert hw.sram_output_bytes == floor and hw.sram_input_bytes + hw.sram_weight_bytes < 8 * 1024
    status = ex.status.value
    assert status.startswith("updated in") and f"SRAM raised to the floor of {floor} B" in status
    assert ex.run.attrs["hw_sram_output_bytes"] == floor


def test_the_objective_is_a_parameter_and_a_batch_is_refused(static_traces):
    ex = Explorer(static_traces["mlp"], "npu_like", dataflow="hybrid", objective="latency", views_shown=("regions",))
    assert ex.policy.objective == "latency" and ex.run is ex.policy.runs["hybrid"]
    with pytest.raises(ValueError, match="unknown objective"):
        Explorer(static_traces["mlp"], objective="area")
    npu = presets.get("npu_like")
    with pytest.raises(ValueError, match="one machine"):
        Explorer(static_traces["mlp"], Hardware.stack([npu, npu.replace(pe_cols=8)]))


@pytest.mark.slow  # four compiles of grid buckets no other test uses (about 25 s on 2 cores)
def test_a_tile_slider_crossing_a_warmed_bucket_compiles_nothing(static_traces, monkeypatch):
    """After an update, the programs of the next grid buckets compile on the warm-up thread; moving the tile rows
    into one then runs without a compile, while a bucket nobody warmed (prewarm=False) compiles on the move."""
    import jax

    from dfit_nb.widgets import _prewarm
    from dfit_nb.widgets import explorer as module

    monkeypatch.setattr(_prewarm, "IDLE_S", 0.0)
    compiles: list[str] = []

    def listen(event: str, duration: float, **kw) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(kw.get("fun_name", ""))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        trace = static_traces["mlp"]
        # a grid whose neighbours no other test warms: 32 x 8 tiles, the 32 x 8 bucket
        hw = presets.get("npu_like").replace(tile_rows=32, tile_cols=8, name="warm_test")
        cold = Explorer(trace, hw, views_shown=("regions",), prewarm=False)
        compiles.clear()
        cold.controls["tile_cols"].value = 32  # the 32 x 32 bucket: compiled by this move
        assert "jit(call)" in compiles or "jit(program)" in compiles, compiles

        warmed = Explorer(trace, hw, views_shown=("regions",))
        assert not any(k in _prewarm._warming for k in [module.program_key(trace, h) for h in
                                                      module.bucket_neighbours(hw, module.GRID, module.GRID)])
        warmed._repr_mimebundle_()  # displayed (IPython's call): the warm-ups start
        neighbours = [module.program_key(trace, h) for h in module.bucket_neighbours(hw, module.GRID, module.GRID)]
        assert len(neighbours) == 3  # 64 and 16 rows, 16 columns (8 columns is the smallest bucket already)
        for key in neighbours:
            _prewarm._warming[key].result(timeout=300)
        compiles.clear()
        warmed.controls["tile_rows"].value = 64
        assert compiles == [] and int(warmed.run.attrs["hw_tile_rows"]) == 64
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


@pytest.mark.slow  # a fresh Python process importing JAX waiting on idle warm-ups
def test_a_move_never_waits_behind_an_idle_warm_up_and_exit_drops_the_queue():
    """With warm-ups still waiting for idleness, a tile move into one of their buckets compiles the program itself
    (it must not wait for a warm-up that waits for it), and the interpreter's exit drops the queued warm-ups
    instead of compiling each before it returns: none of them runs."""
    script = textwrap.dedent("""
        import dfit_nb
        from dfit_nb.widgets import _prewarm
        from dfit_nb.widgets import explorer as module
        real = _prewarm.warm
        def spy(trace, hw):
            print("warmed", int(hw.tile_rows), int(hw.tile_cols), flush=True)
            return real(trace, hw)
        _prewarm.warm = spy
        _prewarm.IDLE_S = 60.0  # the warm-ups are queued, waiting for an idle minute, through the move and the exit
        fn, args = dfit_nb.examples.get("mlp").build()
        ex = module.Explorer(dfit_nb.capture(fn, *args), "npu_like", views_shown=("regions",))
        ex._repr_mimebundle_()  # displayed: warm-ups of 16 x 8 and 8 x 16 queued
        ex.controls["tile_rows"].value = 16  # the bucket of a queued warm-up
        print("moved", int(ex.run.attrs["hw_tile_rows"]), len(_prewarm._warming), flush=True)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         timeout=300).stdout.split("\n")
    assert [line for line in out if line] == ["moved 16 5"], out  # 8x8 and 16x8 run; 32x8, 8x16, 16x16 queued


SRAM_SIZES_KB = (4, 8, 16, 32, 48, 64, 100, 100.5, 128, 256, 333, 512, 1000, 1024, 2048, 4096, 8192)


@pytest.mark.parametrize("name", presets.names())
def test_sweep_and_the_explorer_build_one_machine_for_every_sram_setting(name):
    from dfit_nb.sim.grid import machine_grid
    from dfit_nb.sim.hardware import HardwareError
    from dfit_nb.widgets.explorer import _SLIDERS, machine_from_controls

    base = presets.get(name)
    sliders = {key: getattr(base, field) for key, field in _SLIDERS.items()}
    for kb in (*SRAM_SIZES_KB, float(base.sram_bytes) / 1024):
        shown, notes = machine_from_controls(base, {**sliders, "sram_kb": kb})
        assert float(shown.sram_bytes) >= kb * 1024 - 0.5, (name, kb)  # whole bytes of the setting, or raised
        if notes:  # a partition below the PE array's floor: the Explorer raises it, a sweep refuses the machine
            with pytest.raises(HardwareError, match="too small"):
                machine_grid(base, {"sram_kb": [kb]})
            continue
        swept = machine_grid(base, {"sram_kb": [kb]})[0]
        assert float(shown.sram_bytes) == round(kb * 1024), (name, kb)
        differ = {f: (float(np.asarray(getattr(swept, f))[0]), float(getattr(shown, f))) for f in FIELDS
                  if float(np.asarray(getattr(swept, f))[0]) != float(getattr(shown, f))}
        assert not differ, (name, kb, differ)
    # the preset's own total gives its own partitions, on both paths
    own = machine_grid(base, {"sram_kb": [float(base.sram_bytes) / 1024]})[0]
    assert [float(np.asarray(getattr(own, f))[0]) for f in FIELDS] == [float(getattr(base, f)) for f in FIELDS]
