"""The ``ds.dfit`` accessor on small synthetic events Datasets, checked against plain numpy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import xarray as xr

import dfit_nb.events.accessor  # noqa: F401  (registers ds.dfit)
from dfit_nb.events import events_dataset
from dfit_nb.events.accessor import EventQueryError, demo_events
from dfit_nb.events.schema import KINDS, EventSchemaError, concat

REGIONS = np.array(["encoder/layer_0/attn", "encoder/layer_0/mlp", "encoder/layer_1/attn", "encoder", "decoder",
                    "", "encoderx/y"])


@pytest.fixture(scope="module")
def events():
    """200 simulated events on a 3 x 4 grid (some off-tile), clock 2 GHz."""
    rng = np.random.default_rng(0)
    n = 200
    start = rng.uniform(0, 1000, n).round()
    end = start + rng.integers(0, 200, n) * (rng.uniform(size=n) > 0.1)
    ty, tx = rng.integers(0, 3, n), rng.integers(0, 4, n)
    off = rng.uniform(size=n) < 0.05
    ty[off], tx[off] = -1, -1
    return events_dataset({
        "op": rng.integers(0, 20, n), "region": REGIONS[rng.integers(0, len(REGIONS), n)],
        "tile_y": ty, "tile_x": tx, "kind": np.array(KINDS[:4])[rng.integers(0, 4, n)],
        "start": start, "end": end, "bytes": rng.uniform(0, 1e4, n), "macs": rng.uniform(0, 1e5, n),
        "energy_pj": rng.uniform(0, 1e3, n), "dataflow": np.full(n, "ws"),
    }, clock_ghz=2.0)


def test_duration_in_both_units(events):
    d = events.dfit.duration()
    np.testing.assert_array_equal(d.values, events["end"].values - events["start"].values)
    assert d.attrs["units"] == "cycle" and d.dims == ("event",)
    ds = events.dfit.duration(unit="s")
    np.testing.assert_allclose(ds.values, d.values / 2e9)
    assert ds.attrs["units"] == "s"


def test_by_region_sums_match_numpy(events):
    out = events.dfit.by_region()
    regions = events["region"].values
    assert sorted(out["region"].values.tolist()) == out["region"].values.tolist() == sorted(set(regions))
    for r in out["region"].values:
        m = regions == r
        assert out["bytes"].sel(region=r) == pytest.approx(events["bytes"].values[m].sum())
        assert out["duration"].sel(region=r) == pytest.approx((events["end"] - events["start"]).values[m].sum())
    assert out["bytes"].attrs["units"] == "B" and out["duration"].attrs["units"] == "cycle"
    assert out["macs"].attrs["units"] == "MAC" and out["energy_pj"].attrs["units"] == "pJ"
    assert all("description" in out[v].attrs for v in out.variables)


def test_by_region_depth_rolls_up_to_leading_segments(events):
    out = events.dfit.by_region(depth=1, var="macs")
    assert out["region"].values.tolist() == ["", "decoder", "encoder", "encoderx"]
    regions = events["region"].values
    enc = (regions == "encoder") | np.char.startswith(regions.astype(str), "encoder/")
    assert out["macs"].sel(region="encoder") == pytest.approx(events["macs"].values[enc].sum())
    assert float(out["macs"].sum()) == pytest.approx(events["macs"].values.sum())
    two = events.dfit.by_region(depth=2, var="macs")
    assert "encoder/layer_0" in two["region"].values and "encoder/layer_0/attn" not in two["region"].values
    everything = events.dfit.by_region(depth=0, var="macs")
    assert everything["region"].values.tolist() == [""]


def test_inclusive_rollup_gives_every_ancestor_its_descendants(events):
    out = events.dfit.by_region(var=("bytes", "duration"), inclusive=True)
    names = out["region"].values.tolist()
    assert {"", "encoder", "encoder/layer_0", "encoder/layer_1", "encoderx"} <= set(names)
    regions = events["region"].values.astype(str)
    for r in names:
        m = np.ones(regions.size, bool) if r == "" else (regions == r) | np.char.startswith(regions, r + "/")
        assert out["bytes"].sel(region=r) == pytest.approx(events["bytes"].values[m].sum()), r
    assert out["bytes"].sel(region="").item() == pytest.approx(events["bytes"].values.sum())
    # inclusive on top of a depth cut
    cut = events.dfit.by_region(depth=1, var="bytes", inclusive=True)
    assert cut["bytes"].sel(region="").item() == pytest.approx(events["bytes"].values.sum())


def test_by_tile_matches_numpy_and_skips_off_tile_events(events):
    out = events.dfit.by_tile(var=("bytes", "duration"))
    assert out["bytes"].dims == ("tile_y", "tile_x") and out["bytes"].shape == (3, 4)
    y, x = events["tile_y"].values, events["tile_x"].values
    for ty in range(3):
        for tx in range(4):
            m = (y == ty) & (x == tx)
            assert out["bytes"].values[ty, tx] == pytest.approx(events["bytes"].values[m].sum())
    assert float(out["bytes"].sum()) == pytest.approx(events["bytes"].values[y >= 0].sum())
    dram = events.dfit.by_tile(kind="dram", var="bytes")
    m = (y >= 0) & (events["kind"].values == "dram")
    assert float(dram["bytes"].sum()) == pytest.approx(events["bytes"].values[m].sum())
    assert dram["bytes"].shape == (3, 4)


def test_by_kind_lists_every_kind(events):
    out = events.dfit.by_kind(var="energy_pj")
    assert out["kind"].values.tolist() == list(KINDS)
    for k in KINDS:
        m = events["kind"].values == k
        assert out["energy_pj"].sel(kind=k) == pytest.approx(events["energy_pj"].values[m].sum())
    assert out["energy_pj"].sel(kind="retile").item() == 0.0


@pytest.mark.parametrize("unit", ["cycle", "s"])
def test_by_kernel_matches_numpy_and_leaves_out_events_without_one(events, unit):
    rng = np.random.default_rng(1)
    kernel = rng.integers(-1, 6, events.sizes["event"])  # -1: no kernel (a measured event)
    ev = events.assign(kernel=("event", kernel))
    out = ev.dfit.by_kernel(var=["duration", "bytes"], unit=unit)
    assert out["kernel"].values.tolist() == sorted(set(kernel.tolist()) - {-1})
    a, b = ("start", "end") if unit == "cycle" else ("start_s", "end_s")
    for k in out["kernel"].values:
        m = kernel == k
        assert out["bytes"].sel(kernel=k) == pytest.approx(ev["bytes"].values[m].sum())
        assert out["duration"].sel(kernel=k) == pytest.approx((ev[b].values - ev[a].values)[m].sum())
        assert out["start"].sel(kernel=k) == ev[a].values[m].min()
        assert out["end"].sel(kernel=k) == ev[b].values[m].max()
        assert out["n_ops"].sel(kernel=k) == len(set(ev["op"].values[m].tolist()))


def test_events_saved_before_kernels_still_read_but_cannot_group_by_kernel(events):
    old = events.drop_vars("kernel")
    assert old.dfit.by_kind(var="bytes")["bytes"].sum() == pytest.approx(events["bytes"].values.sum())
    with pytest.raises(EventSchemaError, match="no 'kernel' variable"):
        old.dfit.by_kernel()
    assert events_dataset({"op": [0], "kind": ["compute"], "start": [0.0], "end": [1.0]},
                          clock_ghz=1.0)["kernel"].values.tolist() == [-1]


@pytest.mark.parametrize("unit", ["cycle", "s"])
def test_windows_that_tile_the_timeline_conserve_everything(events, unit):
    scale = 1.0 if unit == "cycle" else 1 / 2e9
    cuts = np.array([0.0, 137.0, 500.0, 501.0, 900.0, 1300.0]) * scale
    parts = [events.dfit.window(a, b, unit=unit) for a, b in itertools.pairwise(cuts)]
    for v in ("bytes", "macs", "energy_pj"):
        assert sum(float(p[v].sum()) for p in parts) == pytest.approx(float(events[v].sum()), rel=1e-12)
    dur = sum(float(p.dfit.duration().sum()) for p in parts)
    assert dur == pytest.approx(float(events.dfit.duration().sum()))
    # every zero-length event lands in exactly one window
    n_points = sum(int((p.dfit.duration() == 0).sum()) for p in parts)
    assert n_points == int((events.dfit.duration() == 0).sum())


def test_window_clips_times_in_both_units(events):
    w = events.dfit.window(200, 400)
    assert w.attrs["window_start"] == 200 and w.attrs["window_unit"] == "cycle"
    assert (w["start"] >= 200).all() and (w["end"] <= 400).all()
    np.testing.assert_allclose(w["start_s"].values, w["start"].values / 2e9)
    np.testing.assert_allclose(w["end_s"].values, w["end"].values / 2e9)
    s, e = events["start"].values, events["end"].values
    inside = np.where(e == s, (s >= 200) & (s < 400), (s < 400) & (e > 200))
    assert w.sizes["event"] == inside.sum()
    np.testing.assert_array_equal(w["event"].values, np.flatnonzero(inside))  # original event ids kept
    frac = (np.minimum(e, 400) - np.maximum(s, 200))[inside] / np.where(e > s, e - s, 1)[inside]
    frac[(e == s)[inside]] = 1.0
    np.testing.assert_allclose(w["bytes"].values, events["bytes"].values[inside] * frac)
    assert events["bytes"].values[0] == events.dfit.window(0, 2000)["bytes"].values[0]  # events not mutated


def test_window_in_cycles_drops_measured_events_and_rejects_bad_bounds():
    meas = events_dataset({"op": [0], "kind": ["compute"], "source": ["measured"], "start_s": [0.0],
                           "end_s": [1.0]})
    assert meas.dfit.window(0, 10).sizes["event"] == 0
    assert meas.dfit.window(0.5, 2.0, unit="s")["end_s"].item() == 1.0
    with pytest.raises(EventQueryError, match="t0 <= t1"):
        meas.dfit.window(2, 1)
    with pytest.raises(EventQueryError, match="unit"):
        meas.dfit.window(0, 1, unit="ms")


def test_select_filters_and_region_prefix_on_path_boundaries(events):
    enc = events.dfit.select(region="encoder")
    regions = set(enc["region"].values.tolist())
    assert regions == {"encoder", "encoder/layer_0/attn", "encoder/layer_0/mlp", "encoder/layer_1/attn"}
    assert "encoderx/y" not in regions
    assert events.dfit.select(region="").sizes["event"] == events.sizes["event"]
    assert set(events.dfit.select(region=["decoder", "encoder/layer_1"])["region"].values.tolist()) == {
        "decoder", "encoder/layer_1/attn"}
    sub = events.dfit.select(op=[1, 2], kind="dram", source="simulated")
    m = np.isin(events["op"].values, [1, 2]) & (events["kind"].values == "dram")
    np.testing.assert_array_equal(sub["event"].values, np.flatnonzero(m))
    assert events.dfit.select(op=3)["op"].values.tolist() == [3] * int((events["op"].values == 3).sum())
    assert events.dfit.select(source="measured").sizes["event"] == 0
    with pytest.raises(EventQueryError, match="unknown kind"):
        events.dfit.select(kind="alu")
    with pytest.raises(EventQueryError, match="unknown source"):
        events.dfit.select(source="guessed")


@pytest.mark.parametrize("call, tokens", [
    (lambda ev: ev.dfit.select(op=1.5), ("op must be an op id", "float (1.5)")),
    (lambda ev: ev.dfit.select(op="3"), ("op must be an op id", "str ('3')")),
    (lambda ev: ev.dfit.select(op=[[1], [2, 3]]), ("op must be an op id",)),
    (lambda ev: ev.dfit.select(region=3), ("region must be a str or a sequence of str", "int (3)")),
    (lambda ev: ev.dfit.select(kind=[None]), ("kind must be a str", "NoneType (None) among them")),
    (lambda ev: ev.dfit.by_tile(kind=3), ("kind must be a str", "int (3)")),
    (lambda ev: ev.dfit.by_region(var=3), ("var must be a str", "int (3)")),
    (lambda ev: ev.dfit.by_kind(var={"bytes": 1}), ("var must be a str", "dict")),
    (lambda ev: ev.dfit.busy(kind=b"compute"), ("kind must be a str", "bytes")),
], ids=["op-float", "op-str", "op-ragged", "region-int", "kind-None-in-list", "by_tile-kind-int",
        "by_region-var-int", "var-dict", "busy-kind-bytes"])
def test_a_filter_or_variable_of_the_wrong_type_is_named(events, call, tokens):
    """op=1.5 selected op 1 (an integer cast) and op="3" op 3; an int where names go failed deep inside with
    "'int' object is not iterable"."""
    with pytest.raises(EventQueryError) as info:
        call(events)
    assert all(t in str(info.value) for t in tokens), str(info.value)
    # whole numbers of any integer type, and an empty list, still select
    assert events.dfit.select(op=np.int64(3)).sizes["event"] == events.dfit.select(op=[3]).sizes["event"] > 0
    assert events.dfit.select(op=[]).sizes["event"] == 0


@pytest.mark.parametrize("depth", ["2", float("nan"), float("inf"), [1], True, -1, 1.5])
def test_a_depth_that_is_not_a_whole_number_is_named(events, depth):
    """"2" and NaN raised int()'s ValueError, inf an OverflowError, [1] a TypeError, and True was depth 1."""
    with pytest.raises(EventQueryError, match="depth must be a whole number >= 0 or None"):
        events.dfit.by_region(depth=depth)
    assert events.dfit.by_region(depth=np.int64(1)).sizes["region"] == events.dfit.by_region(depth=1.0).sizes["region"]


@pytest.mark.parametrize("t0, t1", [("start", 10.0), (None, 10.0), (0.0, [10.0])])
def test_a_window_bound_that_is_not_a_number_is_named(events, t0, t1):
    """float() raised its own ValueError ("could not convert string to float") or TypeError, naming no bound."""
    with pytest.raises(EventQueryError, match="a window needs t0 and t1 as numbers"):
        events.dfit.window(t0, t1)


def _measured(regions, durations):
    end = np.cumsum(durations)
    return events_dataset({"op": np.arange(len(regions)), "kind": ["compute"] * len(regions),
                           "source": ["measured"] * len(regions), "region": regions,
                           "start_s": end - np.asarray(durations), "end_s": end})


def test_compare_simulated_union_against_measured_sum():
    # simulated: 'a' has overlapping events [0, 10) and [5, 20) on two tiles plus [30, 40): union 30 cycles
    sim = events_dataset({"op": [0, 0, 1, 2], "kind": ["compute", "dram", "compute", "compute"],
                          "region": ["a", "a", "a", "b/c"], "tile_y": [0, 1, 0, 0], "tile_x": [0, 0, 0, 0],
                          "start": [0.0, 5.0, 30.0, 40.0], "end": [10.0, 20.0, 40.0, 45.0]}, clock_ghz=1.0)
    meas = _measured(["a", "a", "b/c", "d"], [20e-9, 30e-9, 10e-9, 1e-9])
    out = sim.dfit.compare(meas)
    assert out["region"].values.tolist() == ["a", "b/c", "d"]
    np.testing.assert_allclose(out["simulated_s"].values, [30e-9, 5e-9, 0.0])
    np.testing.assert_allclose(out["measured_s"].values, [50e-9, 10e-9, 1e-9])
    np.testing.assert_allclose(out["ratio"].values, [0.6, 0.5, 0.0])
    assert out["ratio"].attrs["units"] == "1" and out["simulated_s"].attrs["units"] == "s"
    # the same from one Dataset holding both sources
    both = concat(sim, meas).dfit.compare()
    xr.testing.assert_identical(both, out)
    # measured missing for a region: NaN ratio; depth=1 cut
    out1 = _measured(["a"], [10e-9]).dfit.compare(sim, depth=1)
    assert out1["region"].values.tolist() == ["a", "b"]
    assert out1["ratio"].sel(region="a").item() == pytest.approx(3.0)
    assert np.isnan(out1["ratio"].sel(region="b").item())
    assert sim.dfit.compare(meas, depth=0)["simulated_s"].item() == pytest.approx(35e-9)  # [0, 20) + [30, 45)


def test_compare_needs_both_sources(events):
    with pytest.raises(EventQueryError, match="no measured"):
        events.dfit.compare()


@pytest.mark.parametrize("other", ["run.json", xr.DataArray([1.0]), 3])
def test_compare_names_an_other_that_is_not_an_events_dataset(events, other):
    """A str or a DataArray as other ended in AttributeError: "... has no attribute 'dfit'"."""
    with pytest.raises(EventQueryError, match="compare\\(\\) needs other as an events Dataset"):
        events.dfit.compare(other)


def test_busy_cube_matches_busy_time(events):
    b = events.dfit.busy(n_bins=16)
    assert b.dims == ("time", "tile_y", "tile_x") and b.shape == (16, 3, 4)
    t_end = float(events["end"].where(events["tile_y"] >= 0).max())
    assert b.attrs["bin_cycles"] == pytest.approx(t_end / 16) and b["time"].values[0] == 0.0
    assert b.attrs["units"] == "1" and b["time"].attrs["units"] == "cycle"
    busy_cycles = (b * b.attrs["bin_cycles"]).sum("time")
    compute = events.dfit.select(kind="compute")
    expected = compute.dfit.by_tile(var="duration")["duration"]
    np.testing.assert_allclose(busy_cycles.values, expected.values)
    every = events.dfit.busy(n_bins=16, kind=None)
    np.testing.assert_allclose((every * every.attrs["bin_cycles"]).sum("time").values,
                               events.dfit.by_tile(var="duration")["duration"].values)


def test_busy_on_a_window_spans_the_window():
    b = demo_events().dfit.window(10, 30).dfit.busy(n_bins=4)
    np.testing.assert_array_equal(b["time"].values, [10.0, 15.0, 20.0, 25.0])
    np.testing.assert_allclose(b.sel(tile_y=0, tile_x=1).values, 1.0)


def test_units_are_checked(events):
    with pytest.raises(EventQueryError, match="unknown unit"):
        events.dfit.duration(unit="ns")
    with pytest.raises(EventQueryError, match="cannot sum 'region'"):
        events.dfit.by_region(var="region")


def test_other_datasets_get_a_clear_error():
    ops = xr.Dataset({"primitive": ("op", ["dot_general"]), "flops": ("op", [1])})
    with pytest.raises(EventSchemaError, match="no 'op', 'region', 'tile_y'"):
        ops.dfit.by_region()
    no_dim = events_dataset({"op": [0], "kind": ["compute"], "start": [0.0], "end": [1.0]}, clock_ghz=1.0)
    with pytest.raises(EventSchemaError, match="dimension 'event'"):
        no_dim.rename(event="e").dfit.by_kind()


def test_empty_events_dataset():
    empty = events_dataset({"op": np.zeros(0, int), "kind": np.zeros(0, str), "start": np.zeros(0),
                            "end": np.zeros(0)}, clock_ghz=1.0)
    assert empty.dfit.by_region()["region"].size == 0
    assert empty.dfit.by_region(inclusive=True)["region"].size == 0
    assert empty.dfit.by_kind()["duration"].values.tolist() == [0.0] * len(KINDS)
    assert empty.dfit.by_tile()["bytes"].shape == (0, 0)
    assert empty.dfit.busy(n_bins=8).shape == (1, 0, 0)
    assert empty.dfit.window(0, 10).sizes["event"] == 0
