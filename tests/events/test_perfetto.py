"""to_perfetto: the trace-event JSON's structure, nesting, conservation, aggregation, errors; the real Perfetto UI."""

from __future__ import annotations

import itertools
import json
import math
import os
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import dfit_nb
from dfit_nb.errors import DfitError, DfitWarning
from dfit_nb.events import _perfetto_tracks, perfetto, schema
from dfit_nb.events.accessor import synthetic_events
from dfit_nb.events.perfetto import PerfettoAggregationWarning, PerfettoExportError, to_perfetto

from . import perfetto_ui

CLOCK = 1.05  # GHz


# ---------------------------------------------------------------------------------------------------- fixtures


def small_events() -> xr.Dataset:
    """2x2 tiles, every kind, kinds overlapping on a tile, two overlapping DRAM events, zero-length events, and
    measured host events."""
    rows = []

    def ev(op, region, ty, tx, kind, s, e, b=0.0, m=0.0, en=0.0, df="ws"):
        rows.append(dict(op=op, region=region, tile_y=ty, tile_x=tx, kind=kind, start=float(s), end=float(e),
                         bytes=b, macs=m, energy_pj=en, dataflow=df))

    for t in range(4):
        ty, tx = divmod(t, 2)
        ev(23, "enc/layer_0/attn/qk", ty, tx, "dram", 0, 420, 4096, en=80.0)
        ev(23, "enc/layer_0/attn/qk", ty, tx, "sram", 105, 945, 8192, en=12.5)
        ev(23, "enc/layer_0/attn/qk", ty, tx, "compute", 210, 1050, 0, 65536, 31.25)
        ev(24, "enc/layer_0/attn/pv", ty, tx, "dram", 315, 840, 2048, en=40.0)  # overlaps op 23's DRAM
        ev(24, "enc/layer_0/attn/pv", ty, tx, "noc", 1050, 1260, 512, en=1.5)
        ev(24, "enc/layer_0/attn/pv", ty, tx, "compute", 1050, 1890, 0, 32768, 15.625)
        ev(25, "enc/layer_0/mlp", ty, tx, "retile", 1890, 1890, 256, en=0.5, df="")  # zero length, has bytes
    ev(26, "", 1, 1, "noc", 1900, 1900, 0.0, df="")  # zero length and empty: skipped
    cols = {k: np.array([r[k] for r in rows]) for k in rows[0]}
    sim = schema.events_dataset(cols, clock_ghz=CLOCK,
                                attrs={"hardware": "tpu_like", "n_ops": 3, "ratio": 0.5, "shape": [1, 2]})
    measured = schema.events_dataset({
        "op": [23, 24], "region": ["enc/layer_0/attn/qk", "enc/layer_0/attn/pv"], "kind": ["compute", "compute"],
        "start_s": [5.0, 5.0 + 2e-6], "end_s": [5.0 + 2e-6, 5.0 + 3.5e-6], "bytes": [1e6, 5e5],
        "source": ["measured", "measured"]})
    return schema.concat(sim, measured)


def link_load() -> xr.DataArray:
    rng = np.random.default_rng(1)
    t = np.arange(8) * 250.0
    return xr.DataArray(rng.random((8, 3)), dims=("time", "link"),
                        coords={"time": t, "time_end": ("time", t + 250.0),
                                "link": ["row0.east", "row1.east", "col0.south"]})


def big_events(n: int, grid: int = 8, seed: int = 0) -> xr.Dataset:
    """``n`` events on a grid x grid machine: sequential ops per (tile, kind), some DRAM overlap."""
    return synthetic_events(n, grid, seed, clock_ghz=CLOCK)


# ---------------------------------------------------------------------------------------------------- checker


def to_ns(us: float) -> int:
    """Microseconds as Perfetto's JSON importer reads them (llround(us * 1000))."""
    return math.floor(us * 1000 + 0.5)


def is_num(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def check_trace(path: Path) -> dict:
    """Trace-event format rules as Perfetto and chrome://tracing apply them; returns the parsed trace."""
    raw = path.read_text(encoding="utf-8")
    trace = json.loads(raw)
    assert isinstance(trace, dict) and isinstance(trace["traceEvents"], list)
    assert trace["displayTimeUnit"] == "ns" and isinstance(trace["otherData"], dict)
    # displayTimeUnit after traceEvents: old Perfetto versions would otherwise read ts as nanoseconds
    assert raw.index('"traceEvents"') < raw.index('"displayTimeUnit"')
    process_names, thread_names, thread_sort = {}, {}, {}
    used_pids, used_threads = set(), set()
    slices = defaultdict(list)
    for ev in trace["traceEvents"]:
        assert {"ph", "pid", "ts", "name"} <= set(ev), ev
        assert isinstance(ev["pid"], int) and is_num(ev["ts"]) and isinstance(ev["name"], str) and ev["name"], ev
        ph = ev["ph"]
        assert ph in ("X", "M", "C"), ev
        if ph == "M":
            name = ev["name"]
            assert name in ("process_name", "process_sort_index", "thread_name", "thread_sort_index"), ev
            if name == "process_name":
                assert ev["pid"] not in process_names
                process_names[ev["pid"]] = ev["args"]["name"]
            elif name.startswith("thread_"):
                assert isinstance(ev["tid"], int)
                table = thread_names if name == "thread_name" else thread_sort
                assert (ev["pid"], ev["tid"]) not in table, f"duplicate {name} for {ev}"
                table[(ev["pid"], ev["tid"])] = ev["args"]["name" if name == "thread_name" else "sort_index"]
            else:
                assert isinstance(ev["args"]["sort_index"], int)
        elif ph == "X":
            assert isinstance(ev["tid"], int) and is_num(ev["dur"]) and ev["dur"] >= 0, ev
            assert isinstance(ev["cat"], str) and isinstance(ev["args"], dict)
            used_pids.add(ev["pid"])
            used_threads.add((ev["pid"], ev["tid"]))
            start = to_ns(ev["ts"])
            slices[(ev["pid"], ev["tid"])].append((start, start + to_ns(ev["dur"]), ev["name"]))
        else:  # counter
            assert ev["args"] and all(is_num(v) for v in ev["args"].values()), ev
            used_pids.add(ev["pid"])
    assert used_pids <= set(process_names), "a pid without process_name"
    assert set(thread_names) == used_threads, "thread_name metadata must cover exactly the threads in use"
    assert set(thread_sort) == used_threads, "thread_sort_index metadata must cover exactly the threads in use"
    tids = [tid for _, tid in used_threads]
    assert len(set(tids)) == len(tids), "a tid reused across processes"
    assert not set(tids) & set(process_names), "a tid equal to a pid"
    for thread, items in slices.items():
        assert_nested(items, thread)
    return trace


def assert_nested(items: list[tuple[int, int, str]], thread) -> None:
    """Slices of one thread must nest: each one ends before or with every slice it starts inside."""
    stack: list[tuple[int, int, str]] = []
    for s, e, name in sorted(items, key=lambda x: (x[0], -x[1])):
        while stack and stack[-1][1] <= s:
            stack.pop()
        if stack:
            assert e <= stack[-1][1], f"{name} [{s}, {e}) partially overlaps {stack[-1]} on {thread}"
        stack.append((s, e, name))


def assert_disjoint(trace: dict) -> None:
    """The exporter's stronger promise: slices of a thread do not overlap at all (they may touch); only zero-length
    ones may sit inside another."""
    by_thread = defaultdict(list)
    for ev in trace["traceEvents"]:
        if ev["ph"] == "X" and to_ns(ev["dur"]) > 0:
            s = to_ns(ev["ts"])
            by_thread[(ev["pid"], ev["tid"])].append((s, s + to_ns(ev["dur"])))
    for thread, items in by_thread.items():
        items.sort()
        for (_, e0), (s1, _) in itertools.pairwise(items):
            assert s1 >= e0, f"overlap on {thread}: {e0} > {s1}"


def xs(trace: dict) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def meta(trace: dict, name: str) -> dict:
    return {(e["pid"], e.get("tid")): e["args"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == name}


def total(trace: dict, key: str) -> float:
    return math.fsum(e["args"][key] for e in xs(trace))


# ---------------------------------------------------------------------------------------------------- tests


def test_structure_processes_threads_and_slices(tmp_path):
    ds = small_events()
    path = to_perfetto(ds, tmp_path / "run.json", clock_ghz=CLOCK, chip="tpu_like")
    assert path == tmp_path / "run.json"
    trace = check_trace(path)
    assert_disjoint(trace)
    procs = {pid: a["name"] for (pid, _), a in meta(trace, "process_name").items()}
    assert procs == {1: "tpu_like (simulated, 1.05 GHz clock; 1 us = 1050 cycles)", 2: "host (measured)"}
    names = meta(trace, "thread_name")
    order = [names[k]["name"] for k in sorted(names, key=lambda k: meta(trace, "thread_sort_index")[k]["sort_index"])]
    # a tile's kinds together, tiles in order, the overlapping DRAM event on a second lane; only kinds with events
    assert order[:6] == ["tile 0,0 · compute", "tile 0,0 · sram", "tile 0,0 · noc", "tile 0,0 · dram",
                         "tile 0,0 · dram · 2", "tile 0,0 · retile"]
    assert order[6] == "tile 0,1 · compute" and order[-2] == "tile 1,1 · retile" and order[-1] == "host · compute"
    assert len(order) == 4 * 6 + 1
    assert {pid for pid, _ in names} == {1, 2}
    ev = xs(trace)
    assert len(ev) == 4 * 7 + 2  # the empty zero-length event is skipped
    qk = next(e for e in ev if e["pid"] == 1 and e["cat"] == "compute" and e["args"]["op"] == 23)
    assert qk["name"] == "qk #23"
    assert qk["ts"] == pytest.approx(210 / CLOCK / 1e3, abs=1e-3)  # whole ns
    assert qk["dur"] == pytest.approx(840 / CLOCK / 1e3, abs=1e-3)
    assert qk["args"] == {"op": 23, "region": "enc/layer_0/attn/qk", "bytes": 0, "macs": 65536, "energy_pj": 31.25,
                          "dataflow": "ws", "start_cycle": 210, "end_cycle": 1050}
    retile = [e for e in ev if e["cat"] == "retile"]
    assert len(retile) == 4 and all(e["dur"] == 0 and e["args"]["bytes"] == 256 for e in retile)
    host = [e for e in ev if e["pid"] == 2]
    assert [(e["name"], e["ts"], e["dur"]) for e in host] == [("qk #23", 0.0, 2.0), ("pv #24", 2.0, 1.5)]
    assert all(e["args"]["start_cycle"] is None for e in host)
    other = trace["otherData"]
    assert other["clock_ghz"] == CLOCK and other["chip"] == "tpu_like" and "microseconds" in other["units"]
    assert other["dfit_nb_version"] == dfit_nb.__version__ and other["aggregated"] is False
    assert other["hardware"] == "tpu_like" and other["n_ops"] == 3 and "shape" not in other  # scalar attrs only
    assert other["skipped_empty"] == 1 and other["measured_offset_s"] == 5.0 and other["slices"] == len(ev)


def test_zero_length_events_nest_instead_of_opening_a_lane(tmp_path):
    ds = schema.events_dataset({"op": [1, 2, 3], "tile_y": [0, 0, 0], "tile_x": [0, 0, 0], "kind": ["compute"] * 3,
                                "start": [0.0, 50.0, 0.0], "end": [100.0, 50.0, 0.0], "bytes": [0.0, 64.0, 8.0]},
                               clock_ghz=CLOCK)
    trace = check_trace(to_perfetto(ds, tmp_path / "z.json", clock_ghz=CLOCK))
    assert [a["name"] for a in meta(trace, "thread_name").values()] == ["tile 0,0 · compute"]
    assert len(xs(trace)) == 3


def test_totals_are_conserved(tmp_path):
    ds = small_events()
    trace = check_trace(to_perfetto(ds, tmp_path / "t.json", clock_ghz=CLOCK))
    for key in ("bytes", "macs", "energy_pj"):
        assert total(trace, key) == pytest.approx(float(ds[key].sum()), rel=1e-12)


def test_link_load_becomes_one_counter_track_per_link(tmp_path):
    ll = link_load()
    ll[2, 1] = np.nan
    trace = check_trace(to_perfetto(small_events(), tmp_path / "t.json", clock_ghz=CLOCK, link_load=ll))
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert {e["name"] for e in counters} == {"noc row0.east", "noc row1.east", "noc col0.south"}
    assert all(e["pid"] == 1 and set(e["args"]) == {"load"} for e in counters)
    row1 = [e for e in counters if e["name"] == "noc row1.east"]
    assert [e["ts"] for e in row1] == pytest.approx([t / CLOCK / 1e3 for t in range(0, 2001, 250)], abs=1e-3)
    loads = [e["args"]["load"] for e in row1]
    assert loads[:-1] == pytest.approx(np.nan_to_num(ll.sel(link="row1.east").values).tolist())
    assert loads[2] == 0.0 and loads[-1] == 0.0  # NaN written as 0; a last sample closes the last bin
    assert trace["otherData"]["counters"] == len(counters)
    # without time_end: attr bin_cycles, else the usual width, closes the last bin
    ll2 = ll.drop_vars("time_end").assign_attrs(bin_cycles=500.0)
    trace = check_trace(to_perfetto(small_events(), tmp_path / "t2.json", clock_ghz=CLOCK, link_load=ll2))
    last = [e["ts"] for e in trace["traceEvents"] if e["name"] == "noc row0.east"][-1]
    assert last == pytest.approx((1750 + 500) / CLOCK / 1e3, abs=1e-3)


def test_link_names_with_percent_signs_quotes_and_control_characters_stay_exact(tmp_path):
    # each link's constant text goes into its line format once: a % or an escape there must not leak
    names = ['row0.east 50%', 'say "hi" \\ %d', "tab\tand\nnewline"]
    ll = link_load().assign_coords(link=names)
    trace = check_trace(to_perfetto(small_events(), tmp_path / "t.json", clock_ghz=CLOCK, link_load=ll))
    assert {e["name"] for e in trace["traceEvents"] if e["ph"] == "C"} == {f"noc {n}" for n in names}


@settings(max_examples=300)
@given(st.text())
def test_thread_names_are_escaped_as_the_json_encoder_escapes_them(name):
    assert _perfetto_tracks._esc_name(name) == _perfetto_tracks._esc(name)
    line = _perfetto_tracks._metadata_lines([(1, 7, name)], "chip", 1.0, has_chip=False, has_host=False)[0]
    assert json.loads(line) == {"ph": "M", "pid": 1, "tid": 7, "ts": 0, "name": "thread_name", "args": {"name": name}}


def test_many_events_are_merged_within_max_events_and_totals_kept(tmp_path):
    ds = big_events(20_000, grid=8)
    with pytest.warns(PerfettoAggregationWarning, match=r"exceed max_events=2000.*aggregate='none'"):
        path = to_perfetto(ds, tmp_path / "agg.json", clock_ghz=CLOCK, max_events=2000)
    trace = check_trace(path)
    assert_disjoint(trace)
    ev = xs(trace)
    assert 0 < len(ev) <= 2000
    other = trace["otherData"]
    assert other["aggregated"] is True and other["bins"] >= 1 and other["slices"] == len(ev)
    by, bx = other["tiles_per_block"]
    assert by == bx and by > 1  # 256 (tile, kind) tracks x 200 bins > 2000: tiles are grouped
    assert sum(e["args"]["events"] for e in ev) == ds.sizes["event"]
    for key in ("bytes", "macs", "energy_pj"):
        assert total(trace, key) == pytest.approx(float(ds[key].sum()), rel=1e-9)
    names = {a["name"] for a in meta(trace, "thread_name").values()}
    assert f"tiles 0-{by - 1},0-{bx - 1} · compute" in names
    first = ev[0]
    assert first["name"] == f"{first['cat']} ×{first['args']['events']}"
    assert set(first["args"]) == {"events", "bytes", "macs", "energy_pj", "busy_us", "op_first", "op_last"}


def test_aggregate_none_raises_and_an_int_chooses_the_bins(tmp_path):
    ds = big_events(4000, grid=2)
    with pytest.raises(PerfettoExportError, match=r"max_events=100.*aggregate='auto'") as info:
        to_perfetto(ds, tmp_path / "x.json", clock_ghz=CLOCK, max_events=100, aggregate="none")
    assert isinstance(info.value, DfitError)
    assert not (tmp_path / "x.json").exists()
    # an int always merges, into that many bins, keeping single tiles while it fits
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = check_trace(to_perfetto(ds, tmp_path / "b.json", clock_ghz=CLOCK, aggregate=10))
    assert trace["otherData"]["bins"] == 10 and trace["otherData"]["tiles_per_block"] == [1, 1]
    assert len(xs(trace)) <= 10 * 16
    assert total(trace, "bytes") == pytest.approx(float(ds["bytes"].sum()), rel=1e-9)
    # ... and grows the tile block when the bins would not fit
    trace = check_trace(to_perfetto(ds, tmp_path / "c.json", clock_ghz=CLOCK, aggregate=10, max_events=50))
    assert len(xs(trace)) <= 50 and trace["otherData"]["tiles_per_block"] == [2, 2]
    with pytest.raises(PerfettoExportError, match="use fewer bins"):
        to_perfetto(ds, tmp_path / "d.json", clock_ghz=CLOCK, aggregate=100, max_events=50)


def test_measured_events_are_merged_on_their_own_clock(tmp_path):
    ds = small_events()
    with pytest.warns(PerfettoAggregationWarning):
        trace = check_trace(to_perfetto(ds, tmp_path / "m.json", clock_ghz=CLOCK, max_events=20))
    host = [e for e in xs(trace) if e["pid"] == 2]
    assert host and sum(e["args"]["events"] for e in host) == 2
    assert set(trace["otherData"]["bin_us"]) == {"simulated", "measured"}
    assert total(trace, "energy_pj") == pytest.approx(float(ds["energy_pj"].sum()))


@settings(max_examples=30)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1), st.sampled_from(schema.KINDS),
                          st.integers(0, 60), st.integers(0, 25), st.integers(0, 3)), min_size=1, max_size=40),
       st.sampled_from([None, 7]))
def test_random_events_always_nest_and_conserve(tmp_path_factory, rows, max_events):
    ty, tx, kind, start, dur, b = map(np.array, zip(*rows, strict=True))
    ds = schema.events_dataset({"op": np.arange(len(rows)), "tile_y": ty, "tile_x": tx, "kind": kind,
                                "start": start.astype(float), "end": (start + dur).astype(float),
                                "bytes": b.astype(float), "energy_pj": b * 0.5}, clock_ghz=CLOCK)
    path = tmp_path_factory.mktemp("h") / "r.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PerfettoAggregationWarning)
        trace = check_trace(to_perfetto(ds, path, clock_ghz=CLOCK, max_events=max_events or 1000))
    assert_disjoint(trace)
    kept = (dur > 0) | (b > 0)
    if max_events is None:
        assert len(xs(trace)) == kept.sum()
    else:
        assert len(xs(trace)) <= max_events
    assert total(trace, "bytes") == pytest.approx(float(b.sum()))


def test_bad_input_names_the_problem(tmp_path):
    ds = small_events()
    out = tmp_path / "x.json"
    with pytest.raises(PerfettoExportError, match=r"xarray\.Dataset"):
        to_perfetto(ds.to_dataframe(), out, clock_ghz=CLOCK)
    with pytest.raises(schema.EventSchemaError, match="'energy_pj'"):
        to_perfetto(ds.drop_vars("energy_pj"), out, clock_ghz=CLOCK)
    with pytest.raises(schema.EventSchemaError, match="'bogus'"):
        kind = np.where(ds["kind"].values == "noc", "bogus", ds["kind"].values)
        to_perfetto(ds.assign(kind=ds["kind"].copy(data=kind)), out, clock_ghz=CLOCK)
    with pytest.raises(PerfettoExportError, match="clock_ghz"):
        to_perfetto(ds, out, clock_ghz=0)
    with pytest.raises(PerfettoExportError, match=r"clock_ghz=2 does not match.*1.05 GHz"):
        to_perfetto(ds, out, clock_ghz=2.0)
    for bad in ("fast", 0, True):
        with pytest.raises(PerfettoExportError, match="aggregate"):
            to_perfetto(ds, out, clock_ghz=CLOCK, aggregate=bad)
    for bad in (0, 2.5, "many"):
        with pytest.raises(PerfettoExportError, match="max_events"):
            to_perfetto(ds, out, clock_ghz=CLOCK, max_events=bad)
    with pytest.raises(PerfettoExportError, match=r"dims \('time', 'link'\)"):
        to_perfetto(ds, out, clock_ghz=CLOCK, link_load=link_load().rename(link="group"))
    with pytest.raises(PerfettoExportError, match="DataArray"):
        to_perfetto(ds, out, clock_ghz=CLOCK, link_load=link_load().values)
    broken = link_load()
    broken[2, 1] = -np.inf  # a load that is not finite is refused, not written as 0
    with pytest.raises(PerfettoExportError, match=r"1 infinite load\(s\) \(the first on link 'row1.east'\)"):
        to_perfetto(ds, out, clock_ghz=CLOCK, link_load=broken)
    with pytest.raises(PerfettoExportError, match="directory"):
        to_perfetto(ds, tmp_path, clock_ghz=CLOCK)
    assert not out.exists()


def test_a_path_ending_in_a_slash_is_a_folder_not_a_file_of_its_name(tmp_path):
    """to_perfetto(ds, "traces/") wrote a file named 'traces' (pathlib drops the slash)."""
    given = f"{tmp_path}/traces/"
    with pytest.raises(PerfettoExportError, match=r"'.*/traces/' names a folder .*traces/run\.json"):
        to_perfetto(small_events(), given, clock_ghz=CLOCK)
    assert not (tmp_path / "traces").exists()


def test_non_finite_times_are_left_out_with_a_warning(tmp_path):
    ds = small_events()
    ds["start_s"][0] = np.nan
    with pytest.warns(DfitWarning, match="1 event"):
        trace = check_trace(to_perfetto(ds, tmp_path / "n.json", clock_ghz=CLOCK))
    assert trace["otherData"]["skipped_nonfinite"] == 1 and len(xs(trace)) == 4 * 7 + 1


def test_write_is_atomic(tmp_path, monkeypatch):
    path = to_perfetto(small_events(), tmp_path / "run.json", clock_ghz=CLOCK)
    before = path.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full")
        yield ""

    monkeypatch.setattr(perfetto, "_chunks", boom)
    with pytest.raises(OSError, match="disk full"):
        to_perfetto(big_events(1000, grid=2), path, clock_ghz=CLOCK)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["run.json"]  # no temporary file left behind


def test_empty_events(tmp_path):
    ds = small_events().isel(event=slice(0, 0))
    trace = check_trace(to_perfetto(ds, tmp_path / "e.json", clock_ghz=CLOCK, link_load=link_load()))
    assert xs(trace) == [] and trace["otherData"]["counters"] == 3 * 9
    assert check_trace(to_perfetto(ds, tmp_path / "f.json", clock_ghz=CLOCK))["traceEvents"] == []


def test_measured_events_alone_make_only_the_host_process(tmp_path):
    ds = small_events()
    ds = ds.isel(event=np.flatnonzero(ds["source"].values == "measured"))
    trace = check_trace(to_perfetto(ds, tmp_path / "h.json", clock_ghz=CLOCK))
    assert [a["name"] for a in meta(trace, "process_name").values()] == ["host (measured)"]
    assert {e["pid"] for e in trace["traceEvents"]} == {2}


# ---------------------------------------------------------------------------------------------------- the real UI

_MISSING = perfetto_ui.missing()


@pytest.mark.slow
@pytest.mark.skipif(_MISSING is not None and not os.environ.get("CI"),
                    reason=f"Perfetto UI check {_MISSING} (CI installs them)")
def test_perfetto_ui_loads_the_traces(tmp_path):
    """The real Perfetto UI imports both traces with no error stats and sees every slice, counter and thread."""
    assert _MISSING is None, f"CI must run the Perfetto UI check: it {_MISSING}"
    small = check_trace(to_perfetto(small_events(), tmp_path / "small.json", clock_ghz=CLOCK, chip="tpu_like",
                                    link_load=link_load()))
    with pytest.warns(PerfettoAggregationWarning):
        path = to_perfetto(big_events(50_000, grid=8), tmp_path / "big.json", clock_ghz=CLOCK, max_events=5000)
    big = check_trace(path)
    shots = os.environ.get("DFIT_PERFETTO_SHOTS")  # keep screenshots there when set
    results = perfetto_ui.open_in_perfetto([tmp_path / "small.json", path], screenshot_dir=shots)
    for trace, got in zip((small, big), results, strict=True):
        assert got.loaded and not got.import_error, got.text[-2000:]
        assert got.errors == "", f"Perfetto counted import errors: {got.errors}"
        assert got.slices == len(xs(trace)), got.text[-2000:]
        assert got.dur_ns == sum(to_ns(e["dur"]) for e in xs(trace))
        assert got.counters == sum(e["ph"] == "C" for e in trace["traceEvents"])
        assert got.threads == len(meta(trace, "thread_name"))
