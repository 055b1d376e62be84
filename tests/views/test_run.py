"""The run views: schema-valid Vega-Lite, render to PNG offline, and stay small on runs of a million events."""

from __future__ import annotations

import json
import struct
import time
import warnings

import numpy as np
import pytest

import dfit_nb
from dfit_nb.sim import compare as ab_compare
from dfit_nb.sim import presets
from dfit_nb.views import _common
from dfit_nb.views import run as views

PRESETS = ("npu_like", "cerebras_like")
VIEWS = {
    "timeline": views.timeline,
    "timeline_region": lambda r: views.timeline(r, by="region", color="region"),
    "utilization": views.utilization,
    "noc_load": views.noc_load,
    "buffer_pressure": views.buffer_pressure,
}


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _rows(spec: dict) -> int:
    """Rows embedded in a spec (all inline datasets together)."""
    return sum(len(v) for v in spec.get("datasets", {}).values())


@pytest.mark.parametrize("scale, error, tokens", [
    (0, ValueError, ("png()", "scale", "> 0", "got 0")),
    (-2.0, ValueError, ("png()", "scale", "got -2.0")),
    (float("nan"), ValueError, ("png()", "scale", "got nan")),
    (float("inf"), ValueError, ("png()", "scale", "got inf")),
    (1e6, ValueError, ("png()", "scale=1000000.0", "pixels", "at most")),
    ("2", _common.ViewInputError, ("png()", "scale", "a str ('2')")),
], ids=["zero", "negative", "nan", "inf", "huge", "str"])
def test_png_refuses_a_scale_vl_convert_cannot_draw_naming_it(scale, error, tokens):
    """0, a negative number or NaN made vl-convert panic (a Rust backtrace, then a bare 'conversion failed'); 1e6
    asked it for 78 PB at once, which aborted the process (the kernel). Each is now refused before drawing."""
    import altair as alt
    import pandas as pd

    chart = alt.Chart(pd.DataFrame({"a": [1, 2]})).mark_point().encode(x="a")
    with pytest.raises(error) as info:
        _common.png(chart, scale=scale)
    assert all(t in str(info.value) for t in tokens), str(info.value)
    assert _png_size(_common.png(chart, scale=2))[0] > _png_size(_common.png(chart))[0]  # valid scales still draw


@pytest.fixture(scope="module")
def encoder_trace(static_traces):
    """The session's encoder capture (the same build and mode: one capture and compile per test run)."""
    return static_traces["encoder"]


@pytest.fixture(scope="module")
def large_run():
    """The 4-layer encoder time-multiplexed on the 64 x 64 grid, one kernel per primitive (kernels fold reshapes and
    broadcasts away, leaving some 400,000 events): about a million events."""
    fn, args = dfit_nb.examples.get("encoder").build(layers=4)
    return dfit_nb.replay(dfit_nb.capture(fn, *args), presets.get("cerebras_like"), execution="time", fusion="none")


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("view", list(VIEWS))
def test_view_is_valid_and_renders(all_runs, preset, view):
    chart = VIEWS[view](all_runs[("encoder", preset)])
    spec = chart.to_dict()  # validates against the Vega-Lite schema
    assert spec["title"]["text"]
    assert _rows(spec) <= _common.MAX_ROWS + 300  # + the small lookup tables
    w, h = _png_size(_common.png(chart))
    assert w > 100 and h > 50


@pytest.mark.parametrize("preset", PRESETS)
def test_compare_view(encoder_trace, preset):
    hw = presets.get(preset)
    ab = ab_compare(dfit_nb.replay(encoder_trace, hw, "ws"), dfit_nb.replay(encoder_trace, hw, "os"))
    chart = views.compare(ab, top=10)
    spec = chart.to_dict()
    assert len(spec["hconcat"]) == 2  # regions and tiles (one grid)
    assert "10 of" in " ".join(spec["title"]["subtitle"])
    w, h = _png_size(_common.png(chart))
    assert w > 100 and h > 50


def test_small_timeline_is_not_aggregated():
    import jax.numpy as jnp

    t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    run = dfit_nb.replay(t, presets.get("npu_like"))
    spec = views.timeline(run, color="region").to_dict()
    assert "subtitle" not in spec["title"]
    assert _rows(spec) >= int(run.summary["n_events"])


def test_utilization_time_window(all_runs):
    run = all_runs[("encoder", "npu_like")]
    latency = float(run.summary["latency_s"])
    spec = views.utilization(run, time_window=(0.0, latency / 2)).to_dict()
    assert any("window" in line for line in spec["title"]["subtitle"])
    with pytest.raises(ValueError, match="overlaps no time bin"):
        views.utilization(run, time_window=(2 * latency, 3 * latency))


@pytest.mark.parametrize("view, dim", [("utilization", "time"), ("utilization", "tile_x"), ("noc_load", "time"),
                                       ("noc_load", "link"), ("buffer_pressure", "tile_y")])
def test_a_cube_sliced_to_nothing_is_named(all_runs, view, dim):
    """utilization of a cube with no time bins or tiles raised ZeroDivisionError, noc_load's an IndexError;
    buffer_pressure drew the mean and maximum of no tiles (NaN) as if they were occupancies."""
    cube = all_runs[("encoder", "npu_like")].cube.isel({dim: slice(0, 0)})
    with pytest.raises(ValueError, match=f"{view} needs at least one '{dim}' in the run's cube"):
        getattr(views, view)(cube)


def test_a_run_without_simulated_events_is_named_by_the_timeline(all_runs):
    """A Run whose events are all measured (or none) raised numpy's 'zero-size array to reduction operation'."""
    from dfit_nb.sim.run import Run

    run = all_runs[("encoder", "npu_like")]
    parts = {"cube": run.cube, "summary": run.summary, "ops": run.ops, "regions": run.regions, "attrs": run.attrs}
    with pytest.raises(ValueError, match="timeline needs simulated events; this run has no events at all"):
        views.timeline(Run(events=run.events.isel(event=slice(0, 0)), **parts))
    measured = run.events.isel(event=slice(0, 3)).assign(source=("event", ["measured"] * 3))
    with pytest.raises(ValueError, match=r"this run has none \(of its 3 events, every one measured"):
        views.timeline(Run(events=measured, **parts))


def test_buffer_pressure_of_a_policy():
    import jax.numpy as jnp

    t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b) @ b.T, jnp.ones((64, 128)), jnp.ones((128, 32)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        policy = dfit_nb.sim.select_dataflows(t, presets.get("npu_like"), "energy")
    ds = policy.artifacts["buffer_pressure"]
    chart = views.buffer_pressure(ds)
    spec = chart.to_dict()
    assert spec["encoding"]["color"]["field"] == "policy"
    assert _png_size(_common.png(chart))[0] > 100
    with pytest.raises(TypeError):
        views.buffer_pressure(run_or_dataset=ds[["mean"]])
    # sliced to no policy or no bin: the merge divided by zero (ZeroDivisionError)
    for dim in ("policy", "bin"):
        with pytest.raises(ValueError, match=f"buffer_pressure needs at least one '{dim}' in the run's policy"):
            views.buffer_pressure(ds.isel({dim: slice(0, 0)}))
    # a row budget is kept: each policy draws two lines of at least one point, so fewer rows are refused
    n = ds.sizes["policy"]
    rows = lambda chart: len(next(iter(chart.to_dict()["datasets"].values())))
    assert rows(views.buffer_pressure(ds, max_rows=2 * n)) == 2 * n
    assert rows(views.buffer_pressure(ds, max_rows=2 * n + 5)) <= 2 * n + 5
    with pytest.raises(ValueError, match=rf"buffer_pressure\(\) needs max_rows >= {2 * n}, got 1"):
        views.buffer_pressure(ds, max_rows=1)


@pytest.mark.slow  # a million events replayed on the 64 x 64 grid
def test_large_run_stays_small(large_run):
    n = int(large_run.summary["n_events"])
    assert n > 500_000
    t0 = time.perf_counter()
    chart = views.timeline(large_run)
    text = chart.to_json()
    seconds = time.perf_counter() - t0
    print(f"timeline of {n:,} events: {len(text):,} B of JSON in {seconds:.2f} s")
    assert len(text) < 1_000_000
    spec = json.loads(text)
    assert "aggregated" in " ".join(spec["title"]["subtitle"])
    assert _rows(spec) <= _common.MAX_ROWS + 300
    for view in (views.utilization, views.noc_load, views.buffer_pressure,
                 lambda r: views.timeline(r, by="region", color="kind")):
        assert len(view(large_run).to_json()) < 1_000_000
    assert np.isfinite(seconds)
