"""replay(): mapping, schedule and the event cube, held to conservation laws and to a plain-Python oracle."""

from __future__ import annotations

import json
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import dfit_nb
from dfit_nb.errors import DfitError
from dfit_nb.events.schema import KINDS
from dfit_nb.sim import Hardware, HardwareError, cost, presets, replay_batch
from dfit_nb.sim._cost import for_jit
from dfit_nb.sim._prepare import ReplayError, padded, pinned_layouts, prepare
from dfit_nb.sim._replay import SpillWarning, program
from dfit_nb.sim.schedule import PER_OP, Grid, prefix_counts, tile_order
from tests.shared import programs
from tests.sim import reference

PARTS = ("events", "cube", "summary", "ops", "regions")
LEVEL_OF_KIND = {"sram": "sram", "noc": "noc", "dram": "dram", "retile": "retile"}


def _kind_sum(run, kind, var):
    ev = run.events
    sel = (ev["kind"].values == kind) & (ev["source"].values == "simulated")
    return float(ev[var].values[sel].sum())


def _runs_on(all_runs, preset):
    """(example, Run) for every bundled example on ``preset``."""
    return [((name, preset), all_runs[(name, preset)]) for name, p in all_runs if p == preset]


# every check of this kind runs per preset: the inner loop (-m "not slow") takes the presets of the 8 x 8 grid
# bucket, the full run all of them (tests/conftest.py marks the large grids slow)
@pytest.mark.parametrize("preset", presets.names())
def test_every_example_replays_on_every_preset(all_runs, static_traces, preset):
    assert len(all_runs) == len(static_traces) * len(presets.names())
    for (name, _), run in _runs_on(all_runs, preset):
        s = run.summary
        assert float(s["latency_cycles"]) > 0 and float(s["energy_j"]) > 0, (name, preset)
        assert set(run.events["kind"].values) <= set(KINDS)
        assert run.attrs["hardware"] == preset and run.attrs["function"]
        assert 0 < float(s["utilization"]) <= 1
        assert s["bottleneck"].item() in run.ops["mechanism"].values


@pytest.mark.parametrize("preset", presets.names())
def test_macs_are_conserved_against_the_cost_model(all_runs, static_traces, preset):
    for (name, _), run in _runs_on(all_runs, preset):
        expected = float(cost(static_traces[name], presets.get(preset), "ws")["total_macs"])
        assert _kind_sum(run, "compute", "macs") == pytest.approx(expected, rel=1e-12), (name, preset)
        assert float(run.summary["macs"]) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("preset", presets.names())
def test_bytes_and_energy_of_events_sum_to_the_op_totals(all_runs, preset):
    for key, run in _runs_on(all_runs, preset):
        ops = run.ops
        for kind, level in LEVEL_OF_KIND.items():
            assert _kind_sum(run, kind, "bytes") == pytest.approx(float(ops[f"bytes_{level}"].sum()), rel=1e-9,
                                                                  abs=1e-6), (key, kind)
        for kind in KINDS:
            assert _kind_sum(run, kind, "energy_pj") == pytest.approx(float(ops[f"energy_{kind}_pj"].sum()),
                                                                      rel=1e-9, abs=1e-9), (key, kind)
        assert float(run.events["energy_pj"].sum()) * 1e-12 == pytest.approx(float(run.summary["energy_j"]),
                                                                             rel=1e-9)


@pytest.mark.parametrize("preset", presets.names())
def test_traffic_mix_totals_match_the_summary(all_runs, preset):
    for key, run in _runs_on(all_runs, preset):
        root = run.cube["traffic"].sel(region="").sum("tensor")
        s = run.summary
        assert float(root.sel(level="sram")) == pytest.approx(float(s["sram_bytes"]), rel=1e-9), key
        assert float(root.sel(level="noc")) == pytest.approx(float(s["noc_bytes"] + s["retile_bytes"]), rel=1e-9,
                                                             abs=1e-6), key
        assert float(root.sel(level="dram")) == pytest.approx(float(s["dram_bytes"]), rel=1e-9), key


@pytest.mark.parametrize("preset", presets.names())
def test_no_two_compute_events_overlap_on_a_tile_and_no_tile_is_busier_than_its_bin(all_runs, preset):
    for key, run in _runs_on(all_runs, preset):
        ev = run.events
        sel = ev["kind"].values == "compute"
        tile = ev["tile_y"].values[sel].astype(np.int64) * 100_000 + ev["tile_x"].values[sel]
        start, end = ev["start"].values[sel], ev["end"].values[sel]
        order = np.lexsort((start, tile))
        same = tile[order][1:] == tile[order][:-1]
        overlap = start[order][1:] < end[order][:-1] - 1e-6 * np.maximum(end[order][:-1], 1.0)
        assert not (same & overlap).any(), key
        assert float(run.cube["busy"].max()) <= 1 + 1e-9, key
        assert float(run.cube["sram_occupancy"].max()) <= 1 + 1e-9, key
        assert float(run.cube["busy"].min()) >= 0 and float(run.cube["link_load"].min()) >= 0


@pytest.mark.parametrize("preset", presets.names())
def test_power_integrates_to_the_energy(all_runs, preset):
    for key, run in _runs_on(all_runs, preset):
        c = run.cube
        seconds = (c["time_end"] - c["time"]) / (run.attrs["clock_ghz"] * 1e9)
        assert float((c["power_w"] * seconds).sum()) == pytest.approx(float(run.summary["energy_j"]), rel=1e-9), key


def test_every_variable_has_units_and_description_and_provenance(all_runs):
    run = all_runs[("encoder", "tpu_like")]
    for part in PARTS:
        ds = getattr(run, part)
        for name in ds.data_vars:
            assert "units" in ds[name].attrs and ds[name].attrs.get("description"), (part, name)
        for key in ("dfit_nb_version", "jax_version", "function", "arg_shapes", "hardware", "dataflow",
                    "execution", "hw_pe_rows", "clock_ghz"):
            assert key in ds.attrs, (part, key)


def _records(trace, hw, execution, codes=None, reconfig=None):
    prep = prepare(trace)
    codes = np.zeros(len(prep.op)) if codes is None else codes
    arrays, preds, pred_bytes, codes_p, pin = padded(prep, codes, pinned_layouts(prep, None))
    grid = Grid(int(hw.tiles), int(hw.tile_rows), int(hw.tile_cols))
    order = tile_order(grid.rows, grid.cols)
    with jax.enable_x64(True):
        out = jax.device_get(program(arrays, preds, pred_bytes, prefix_counts(order, grid.rows, grid.cols),
                                     for_jit(hw), codes_p, pin,
                                     grid, execution == "spatial", reconfig))
    out = {k: np.asarray(v) for k, v in out.items()}
    word = out["word"]
    scale = np.where(arrays["itemsize"] > 0, word / np.maximum(arrays["itemsize"], 1.0), 1.0)
    per_op = {k: out[k] for k in (*PER_OP, "switch_bytes", "switch_cycles", "stage_lead", "stage_tiles")}
    per_op["count"] = arrays["count"]
    per_op["shared_reads"] = arrays["shared_reads"]
    n = len(prep.op)
    ref = reference.run({k: v[:n] for k, v in per_op.items()}, preds[:n], (pred_bytes * scale[:, None])[:n], order,
                        hw, grid, execution == "spatial")
    return out, ref, n


@pytest.mark.parametrize("switches", [False, True])
@pytest.mark.parametrize("preset,execution", [("npu_like", "time"), ("npu_like", "spatial"),
                                              ("sambanova_like", "spatial")])
def test_the_scan_matches_a_plain_python_event_loop(static_traces, preset, execution, switches):
    hw = presets.get(preset)
    t = static_traces["encoder"]
    codes, reconfig = None, None
    if switches:  # GEMMs cycling through ws, os, is: a dataflow switch before every GEMM but the first
        gemm = prepare(t).arrays["gemm"] > 0
        codes = np.where(gemm, np.cumsum(gemm) % 3, 0).astype(np.float64)
        reconfig = np.array([300.0, 1e4])
    out, ref, n = _records(t, hw, execution, codes, reconfig)
    if switches:
        assert (out["switch_cycles"][:n] > 300).sum() == gemm.sum() - 1
        assert (out["switch_bytes"][:n] > 0).sum() == gemm.sum() - 1
    for key in ("start", "t1", "end", "ready", "prev_free", "offset", "retile_cycles", "retile_bytes", "noc_cycles",
                "dram_end"):
        np.testing.assert_allclose(out[key][:n], ref[key], rtol=1e-9, atol=1e-6, err_msg=key)


@pytest.mark.parametrize("preset", ["tpu_v4", "sambanova_like"])
def test_the_scan_matches_the_event_loop_when_the_pipeline_fill_shows(static_traces, preset):
    """Partly hidden folds and memory pipelines (the overlaps the real-chip check added) in both schedules."""
    hw = presets.get(preset).replace(fold_overlap=0.5, memory_overlap=0.3, op_overhead_cycles=40.0)
    out, ref, n = _records(static_traces["encoder"], hw, hw.execution)
    for key in ("start", "t1", "end", "ready", "prev_free", "offset", "retile_cycles", "noc_cycles", "dram_end"):
        np.testing.assert_allclose(out[key][:n], ref[key], rtol=1e-9, atol=1e-6, err_msg=key)


def test_execution_styles(static_traces):
    t = static_traces["encoder"]
    # one machine, both styles (a spatial preset replayed time-multiplexed is the same switch)
    pipelined = dfit_nb.replay(t, presets.get("npu_like"), "ws", execution="spatial")
    multiplexed = dfit_nb.replay(t, presets.get("npu_like"), "ws", execution="time")
    assert pipelined.attrs["execution"] == "spatial" and multiplexed.attrs["execution"] == "time"
    assert (multiplexed.ops["tile_offset"].values == 0).all()
    assert len(np.unique(pipelined.ops["tile_offset"].values)) > 1
    # layer-pipelined ops overlap in time on disjoint tiles
    ops = pipelined.ops
    order = np.argsort(ops["start"].values)
    assert (ops["start"].values[order][1:] < ops["end"].values[order][:-1]).any()
    with pytest.raises(ReplayError, match="execution style"):
        dfit_nb.replay(t, presets.get("npu_like"), execution="dataflow")


def _two_matmuls():
    def f(x, w1, w2):
        with jax.named_scope("first"):
            h = x @ w1
        with jax.named_scope("second"):
            return h @ w2
    return dfit_nb.capture(f, jnp.ones((256, 128)), jnp.ones((128, 256)), jnp.ones((256, 64)))


def test_layouts_pin_and_a_layout_change_costs_a_retile():
    """Between kernels a layout change moves the result across the mesh. (Under the default rules these two
    products chain into one kernel, whose intermediate never leaves its tiles: no retile; so one kernel each.)"""
    t = _two_matmuls()
    hw = presets.get("npu_like")
    chained = dfit_nb.replay(t, hw, layouts={"first": "mn:4x4", "second": "mk:2x8"})
    assert len(set(chained.ops["kernel"].values)) == 1 and float(chained.summary["retile_bytes"]) == 0
    same = dfit_nb.replay(t, hw, layouts={"": "mn:4x4"}, fusion="none")
    changed = dfit_nb.replay(t, hw, layouts={"first": "mn:4x4", "second": "mk:2x8"}, fusion="none")
    gemm = changed.ops["primitive"].values == "dot_general"
    assert changed.ops["layout"].values[gemm].tolist() == ["mn", "mk"]
    assert changed.ops["transform"].values[gemm][1].startswith("mk 2x8 -> 16 tiles")
    second = changed.ops.isel(op=np.flatnonzero(gemm)[1])
    assert float(second["bytes_retile"]) == 256 * 256 * 1  # npu_like moves 1-byte words
    assert float(same.ops.isel(op=np.flatnonzero(gemm)[1])["bytes_retile"]) == 0
    assert _kind_sum(changed, "retile", "bytes") == float(changed.summary["retile_bytes"]) > 0
    with pytest.raises(ReplayError, match="not valid"):
        dfit_nb.replay(t, hw, layouts={"first": "nm"})
    with pytest.raises(ReplayError, match="powers of two"):
        dfit_nb.replay(t, hw, layouts={"first": "mn:3x2"})
    with pytest.raises(ReplayError, match="no op in region 'third'"):
        dfit_nb.replay(t, hw, layouts={"third": "mn"})
    for bad in ("mk", ["mk"], {1: "mk"}):
        with pytest.raises(ReplayError, match=r"layouts must be a dict \{region: layout\}"):
            dfit_nb.replay(t, hw, layouts=bad)


def test_the_mapping_search_spreads_big_gemms_and_keeps_small_ops_small(static_traces):
    run = dfit_nb.replay(static_traces["encoder"], presets.get("tpu_like"))
    ops = run.ops
    gemm = ops["primitive"].values == "dot_general"
    assert ops["tiles"].values[gemm].max() > 1
    assert (ops["tiles"].values <= 8).all() and (ops["fold"].values >= 1).all()
    m = run.mapping
    assert {"transform", "virtual_tiles", "tiles", "fold", "spilled_bytes"} <= set(m.data_vars)


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_save_and_load_round_trip_exactly(all_runs, tmp_path, suffix):
    run = all_runs[("scan_model", "npu_like")]
    back = dfit_nb.load_run(run.save(tmp_path / f"run{suffix}"))
    for part in PARTS:
        assert getattr(back, part).identical(getattr(run, part)), part
    assert back.attrs == run.attrs and back.comparable(run)
    assert [p.name for p in tmp_path.iterdir()] == [f"run{suffix}"]  # no temporary left behind


def test_a_failed_save_writes_nothing(all_runs, tmp_path, monkeypatch):
    run = all_runs[("mlp", "npu_like")]
    target = tmp_path / "r.nc"
    run.save(target)
    before = target.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("xarray.DataTree.to_netcdf", boom)
    with pytest.raises(OSError, match="disk full"):
        run.save(target)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["r.nc"]


def test_load_run_rejects_foreign_and_corrupted_files(static_traces, tmp_path):
    trace_file = static_traces["mlp"].save(tmp_path / "trace.nc")
    with pytest.raises(DfitError, match="looks like a trace"):
        dfit_nb.load_run(trace_file)
    junk = tmp_path / "junk.nc"
    junk.write_bytes(b"not a netcdf file at all")
    with pytest.raises(DfitError, match="not a dfit_nb run file"):
        dfit_nb.load_run(junk)
    with pytest.raises(FileNotFoundError):
        dfit_nb.load_run(tmp_path / "missing.nc")


def test_bad_inputs_get_clear_errors(static_traces):
    t = static_traces["mlp"]
    with pytest.raises(ReplayError, match="no ops to replay"):
        dfit_nb.replay(dfit_nb.capture(lambda x: x, jnp.ones(3)), presets.get("npu_like"))
    with pytest.raises(HardwareError, match="tile_rows"):
        Hardware(tile_rows=0)
    with pytest.raises(ReplayError, match=r"unknown dataflow 'xs'.*hybrid"):
        dfit_nb.replay(t, presets.get("npu_like"), "xs")
    with pytest.raises(ReplayError, match="Hardware"):
        dfit_nb.replay(t, "npu_like")
    with pytest.raises(ReplayError, match="time_bins"):
        dfit_nb.replay(t, presets.get("npu_like"), time_bins=0)
    with pytest.raises(ReplayError, match="needs a dfit_nb Trace"):
        dfit_nb.replay(object(), presets.get("npu_like"))


def test_an_op_larger_than_the_chip_maps_through_dram_with_a_warning():
    t = dfit_nb.capture(lambda a, b: a @ b, jax.ShapeDtypeStruct((4096, 2048), jnp.float32),
                        jax.ShapeDtypeStruct((2048, 2048), jnp.float32))
    with pytest.warns(SpillWarning, match=r"1 op\(s\) move data through DRAM more than once.*#\d+ dot_general"):
        run = dfit_nb.replay(t, presets.get("eyeriss_like"))
    assert float(run.ops["spilled_bytes"].sum()) > 0
    # an elementwise op of tensors larger than the chip streams them once: no warning
    big = dfit_nb.capture(lambda a: jnp.tanh(a) * 2.0, jax.ShapeDtypeStruct((4096, 2048), jnp.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error", SpillWarning)
        dfit_nb.replay(big, presets.get("eyeriss_like"))
    # a softmax whose rows do not fit a tile loops over them, and says so
    rows = dfit_nb.capture(lambda a: jax.nn.softmax(a, axis=-1), jax.ShapeDtypeStruct((4, 50_000), jnp.float32))
    with pytest.warns(SpillWarning, match=r"1 kernel\(s\) cannot keep the rows.*again for each reduction.*reduce_max"):
        dfit_nb.replay(rows, presets.get("eyeriss_like"))
    assert float(run.summary["dram_bytes"]) > (4096 * 2048 + 2048 * 2048) * 2
    assert _kind_sum(run, "compute", "macs") == pytest.approx(4096 * 2048 * 2048, rel=1e-12)


def test_hybrid_and_per_op_dataflows(static_traces):
    t = static_traces["encoder"]
    hw = presets.get("npu_like")
    hybrid = dfit_nb.replay(t, hw, "hybrid")
    gemm = hybrid.ops["primitive"].values == "dot_general"
    used = set(hybrid.ops["dataflow"].values[gemm])
    assert used <= {"ws", "os", "is"}
    # a hybrid is named so only when it mixes styles; one style everywhere is named after it
    assert hybrid.attrs["dataflow"].startswith("hybrid") == (len(used) > 1)
    assert len(used) > 1 or hybrid.attrs["dataflow"].startswith(used.pop())

    class Policy:
        name = "all-os"
        per_op = np.where(t.ops["primitive"].values == "dot_general", "os", "ws")

    run = dfit_nb.replay(t, hw, Policy())
    assert run.attrs["dataflow"] == "all-os"
    assert set(run.ops["dataflow"].values[gemm]) == {"os"}


def test_measured_events_join_the_cube(eager_scan_trace):
    run = dfit_nb.replay(eager_scan_trace, presets.get("npu_like"))
    sources = set(run.events["source"].values)
    assert sources == {"simulated", "measured"}
    cmp = run.events.dfit.compare()
    assert {"simulated_s", "measured_s", "ratio"} <= set(cmp.data_vars)
    assert (cmp["measured_s"] > 0).any() and (cmp["simulated_s"] > 0).any()
    whole = run.events.dfit.compare(depth=0)
    assert whole.sizes["region"] == 1 and float(whole["measured_s"][0]) > 0


def test_perfetto_export_of_a_run(all_runs, tmp_path):
    run = all_runs[("encoder", "npu_like")]
    path = run.to_perfetto(tmp_path / "run.json")
    doc = json.loads(path.read_text())
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == int((run.events["end"] > run.events["start"]).sum()) or slices
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert any(n.startswith("tile 0,0") for n in names)
    assert any(e["ph"] == "C" for e in doc["traceEvents"])  # NoC link-group load counters
    assert os.path.getsize(path) > 0


def test_a_runs_perfetto_export_takes_its_own_chip_name_and_names_a_wrong_clock(all_runs, tmp_path):
    """run.to_perfetto(path, chip="...") raised TypeError "got multiple values for keyword argument 'chip'"."""
    from dfit_nb.events.perfetto import PerfettoExportError

    run = all_runs[("encoder", "npu_like")]
    doc = json.loads(run.to_perfetto(tmp_path / "mine.json", chip="my npu").read_text())
    assert doc["otherData"]["chip"] == "my npu"
    with pytest.raises(PerfettoExportError, match=r"clock_ghz=7 does not match the events"):
        run.to_perfetto(tmp_path / "clock.json", clock_ghz=7)


@pytest.mark.filterwarnings("ignore::dfit_nb.sim.SpillWarning")  # small SRAM spills: expected here
@settings(max_examples=12)
@given(m=st.integers(1, 300), k=st.integers(1, 300), n=st.integers(1, 300), pe=st.sampled_from([4, 8, 16]),
       sram_kb=st.sampled_from([8, 64, 512]), spatial=st.booleans())
def test_conservation_holds_for_random_gemm_chains(m, k, n, pe, sram_kb, spatial):
    t = dfit_nb.capture(lambda a, b, c: jnp.tanh(a @ b) @ c, jax.ShapeDtypeStruct((m, k), jnp.float32),
                        jax.ShapeDtypeStruct((k, n), jnp.float32), jax.ShapeDtypeStruct((n, k), jnp.float32))
    kb = sram_kb * 1024
    hw = Hardware(tile_rows=2, tile_cols=3, pe_rows=pe, pe_cols=pe, sram_input_bytes=kb, sram_weight_bytes=kb,
                  sram_output_bytes=kb, word_bytes=2, execution="spatial" if spatial else "time")
    run = dfit_nb.replay(t, hw, "os")
    # per-tile shares of a split over 3 or 6 tiles are not exact binary fractions: equal to rounding
    assert _kind_sum(run, "compute", "macs") == pytest.approx(m * k * n + m * n * k, rel=1e-12)
    for kind, level in LEVEL_OF_KIND.items():
        assert _kind_sum(run, kind, "bytes") == pytest.approx(float(run.ops[f"bytes_{level}"].sum()), rel=1e-9,
                                                              abs=1e-6)
    assert float(run.events["energy_pj"].sum()) == pytest.approx(float(run.ops["energy_pj"].sum()), rel=1e-9)
    assert float(run.cube["busy"].max()) <= 1 + 1e-9
    ops = run.ops
    assert (ops["end"].values >= ops["start"].values).all()
    assert (ops["start"].values >= ops["ready"].values - 1e-9).all()


# npu_like in the inner loop; the 16 x 20 and 64 x 64 grids (one more compile each, ~18 s loaded) in the full run
@pytest.mark.parametrize("preset", ["npu_like", pytest.param("sambanova_like", marks=pytest.mark.slow),
                                    pytest.param("cerebras_like", marks=pytest.mark.slow)])
def test_replay_batch_matches_replay_machine_by_machine(static_traces, preset):
    t = static_traces["encoder"]
    base = presets.get(preset)
    machines = [base, base.replace(dram_bytes_per_cycle=300.0, pe_rows=8, pe_cols=8),
                base.replace(tile_rows=2, tile_cols=3, noc_link_bytes_per_cycle=4.0)]
    ds = replay_batch(t, Hardware.stack(machines))
    assert ds.sizes["machine"] == 3 and ds["tile_cols"].values.tolist() == [base.tile_cols, base.tile_cols, 3]
    for i, hw in enumerate(machines):
        run = dfit_nb.replay(t, hw)
        for var in ("latency_cycles", "latency_s", "energy_j", "utilization", "dram_bytes", "retile_bytes"):
            assert float(ds[var][i]) == pytest.approx(float(run.summary[var]), rel=1e-9, abs=1e-12), (i, var)
    with pytest.raises(ReplayError, match="1-D batch"):
        replay_batch(t, base)


def _dense_chain(x, ws):
    for w in ws:
        x = jnp.tanh(x @ w)
    return x


def test_a_new_model_replays_on_the_program_an_earlier_one_compiled():
    """Programs up to ONE_MACHINE_OPS ops share one compiled replay per grid bucket and style: a second model of
    another size compiles nothing, and its results equal a replay padded only to its own size's bucket."""
    from dfit_nb.sim._prepare import ONE_MACHINE_OPS

    hw = presets.get("npu_like")
    small = dfit_nb.capture(_dense_chain, jnp.ones((8, 16)), [jnp.ones((16, 16))] * 2)
    large = dfit_nb.capture(_dense_chain, jnp.ones((8, 16)), [jnp.ones((16, 16))] * 150)
    sizes = [len(prepare(t).op) for t in (small, large)]
    assert sizes[0] < 32 < 256 < sizes[1] < ONE_MACHINE_OPS  # buckets of 32 and 512 at the batch paths' minimum
    dfit_nb.replay(small, hw)
    compiled = programs(program)
    run = dfit_nb.replay(large, hw)
    assert programs(program) == compiled >= 1
    # the padding changes nothing: the same latency as the batch path's program, padded to 512 ops
    [latency] = replay_batch(large, hw.replace(clock_ghz=np.array([float(hw.clock_ghz)])))["latency_s"].values
    np.testing.assert_allclose(float(run.summary["latency_s"]), latency, rtol=1e-12)


def test_the_bottleneck_classes_join_through_the_direct_constructor_identically(static_traces, monkeypatch):
    """A replay adds its bottleneck classes to ops, regions and summary through xarray's constructor of a
    consistent Dataset (a third of a warm replay's host time went to the public one aligning every variable again).
    It must give exactly what the public constructor gives (variable order and text dtypes included: the saved
    files and the notebooks' reprs show both), and it must be the path taken."""
    from dfit_nb.sim import _bottlenecks

    built = []
    direct, public = _bottlenecks._extended_direct, _bottlenecks._extended_public

    def both(ds, new):
        fast = direct(ds, new)
        built.append((fast, public(ds, new)))
        return fast

    monkeypatch.setattr(_bottlenecks, "_extended_direct", both)
    monkeypatch.setattr(_bottlenecks, "_extended_public", lambda *a: pytest.fail("the public constructor was used"))
    run = dfit_nb.replay(static_traces["mlp"], presets.get("npu_like"), "ws")
    assert len(built) == 3
    for fast, slow in built:
        xr.testing.assert_identical(fast, slow)
        assert list(fast.variables) == list(slow.variables)
        assert {k: v.dtype for k, v in fast.variables.items()} == {k: v.dtype for k, v in slow.variables.items()}
        assert fast["mechanism_class"].values.tolist() == list(_bottlenecks.CLASSES)
    assert run.regions["region"].dtype == object and run.ops["bottleneck"].dtype == object


def test_a_new_variable_that_does_not_fit_the_dataset_falls_back_to_the_public_constructor_which_refuses_it():
    from dfit_nb.sim import _bottlenecks

    ds = xr.Dataset({"a": ("op", np.arange(3.0))}, coords={"op": np.arange(3)})
    with pytest.raises(ValueError, match=r"conflicting sizes for dimension 'op'"):  # xarray's own message
        _bottlenecks._extended(ds, {"b": (("op",), np.arange(2.0), {})})
