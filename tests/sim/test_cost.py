"""The per-op cost model: SCALE-Sim parity, invariants (hypothesis), traces, bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dfit_nb import sim
from dfit_nb.sim import CostInputError, Hardware, cost, presets
from dfit_nb.sim._prepare import prepare
from tests.shared import programs

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "scalesim_reference.csv"
MACHINES = {"scale_32": "scalesim_32", "scale_128": "scalesim_128"}


@pytest.fixture(scope="module")
def reference():
    d = pd.read_csv(FIXTURE)
    return d[d["bandwidth_mode"] == "calc"].reset_index(drop=True)


@pytest.fixture(scope="module")
def ours(reference):
    """Our model on every fixture row, ideal memory, on the matching scalesim preset."""
    parts = []
    for (machine, dataflow), rows in reference.groupby(["machine", "dataflow"]):
        ds = cost(rows[["m", "k", "n"]].reset_index(drop=True), presets.get(MACHINES[machine]), dataflow,
                  memory="ideal")
        parts.append(ds.to_dataframe().set_index(rows.index))
    return pd.concat(parts).sort_index()


def test_fixture_covers_the_required_workloads(reference):
    assert set(reference["dataflow"]) == {"os", "ws", "is"}
    assert set(reference["machine"]) == set(MACHINES)
    assert {"odd_shapes"} <= set(reference["workload"])


def test_cycles_equal_scalesim_on_every_row(reference, ours):
    mismatch = reference.loc[ours["cycles"].values != reference["total_cycles"].values,
                             ["machine", "dataflow", "workload", "layer", "total_cycles"]]
    assert mismatch.empty, mismatch.assign(ours=ours["cycles"]).to_string()


def test_sram_reads_equal_scalesim(reference, ours):
    """SCALE-Sim runs one schedule, every fold streaming all rows past the stationary operand. Where the
    model's compiler blocks the outputs instead (results too large for the output buffer) and so reloads the
    stationary operand (ws's weights, is's inputs) once per further block, from DRAM, the array reads it from
    SRAM that much more: those rows read more, all others exactly as SCALE-Sim."""
    word = reference["machine"].map({m: presets.get(name).word_bytes for m, name in MACHINES.items()})
    stationary_again = np.where(
        reference["dataflow"] == "ws",
        ours["dram_reads_weight"].values > reference["k"] * reference["n"] * word,
        (reference["dataflow"] == "is") & (ours["dram_reads_input"].values > reference["m"] * reference["k"] * word))
    assert 0 < stationary_again.sum() <= 0.05 * len(reference)
    for x, ref in (("input", "sram_ifmap_reads"), ("weight", "sram_filter_reads")):
        mine, theirs = ours[f"sram_reads_{x}"].values, reference[ref].values
        np.testing.assert_array_equal(mine[~stationary_again], theirs[~stationary_again])
        assert (mine[stationary_again] >= theirs[stationary_again]).all()


def test_sram_output_writes_equal_scalesim_for_ws_and_is(reference, ours):
    keep = reference["dataflow"] != "os"
    np.testing.assert_array_equal(ours["sram_writes_output"].values[keep],
                                  reference["sram_ofmap_writes"].values[keep])


def test_cost_takes_a_trace_and_reports_units(static_traces):
    t = static_traces["encoder"]
    ds = cost(t, presets.get("tpu_like"), ["ws", "os", "is"])
    # a Trace is priced as the replay's kernels: the op dim holds the ops the replay prices (live leaf ops)
    replayed = prepare(t, "rules").op
    assert ds["cycles"].dims == ("dataflow", "op") and ds["op"].values.tolist() == replayed.tolist()
    assert ds.attrs["fusion"] == "rules" and set(ds["kernel"].values.tolist()) <= set(replayed.tolist())
    for name, var in ds.data_vars.items():
        assert "units" in var.attrs and var.attrs["description"], name
    dots = t.ops["primitive"].values[replayed] == "dot_general"
    assert (ds["macs"].values[:, dots] > 0).all()
    assert ds.attrs["hardware"] == "tpu_like"
    np.testing.assert_array_equal(ds["count"].values, t.ops["count"].values[replayed])
    np.testing.assert_allclose(ds["total_cycles"].values, (ds["cycles"] * ds["count"]).sum("op").values)
    assert (ds["total_macs"].values == int((t.ops["m"] * t.ops["k"] * t.ops["n"] * t.ops["batch"]
                                            * t.ops["count"]).where(t.ops["m"] > 0, 0).sum())).all()


def test_counts_are_exact_beyond_2_to_the_31(monkeypatch):
    before = jax.config.jax_enable_x64
    ds = cost({"m": [65536], "k": [65536], "n": [65536]}, presets.get("scalesim_32"), "os", memory="ideal")
    # 2048 x 2048 folds x (65536 + 62) cycles - 1, far beyond int32 and float32
    assert int(ds["cycles"][0]) == 2048 * 2048 * (65536 + 32 + 32 - 2) - 1
    assert ds["cycles"].dtype == np.float64
    assert jax.config.jax_enable_x64 == before  # the x64 switch is scoped


def test_an_op_moves_words_of_its_dtype_cast_down_to_the_native_word():
    ops = {"m": [64, 64, 64], "k": [64, 64, 64], "n": [64, 64, 64], "dtype": ["float32", "bfloat16", "int8"]}
    tpu = presets.get("tpu_like")  # bf16 native
    ds = cost(ops, tpu, "ws", memory="ideal")
    assert ds["dram_reads_weight"].values.tolist() == [64 * 64 * 2, 64 * 64 * 2, 64 * 64 * 1]
    macs = 64 ** 3
    assert ds["energy_mac_pj"].values.tolist() == pytest.approx([macs * tpu.mac_pj_2] * 2 + [macs * tpu.mac_pj_1])
    fp32 = tpu.replace(word_bytes=4)
    assert float(cost(ops, fp32, "ws")["dram_reads_weight"][0]) == 64 * 64 * 4


def test_per_op_dataflow_choice():
    ops = {"m": [64, 64], "k": [64, 64], "n": [64, 64]}
    hw = presets.get("scalesim_32")
    mixed = cost(ops, hw, np.array(["os", "ws"]), memory="ideal")["cycles"].values
    both = cost(ops, hw, ["os", "ws"], memory="ideal")["cycles"].values
    assert mixed.tolist() == [both[0, 0], both[1, 1]]


def test_tables_share_a_program_per_power_of_two_and_the_padding_changes_nothing(monkeypatch):
    """cost() pads the op count to a power of two (at least COST_OPS) by repeating the first op: tables of 3 and 5
    ops run one compiled program, and each op's figures equal its own one-op table's, padded or not."""
    from dfit_nb._runtime import exported as _exported
    from dfit_nb.sim import _cost

    monkeypatch.setenv(_exported.ENV, "0")  # count the plain jitted program's compiles
    hw = presets.get("npu_like")
    rows = {"m": [64, 96, 128, 200, 7], "k": [32, 256, 128, 64, 9], "n": [16, 48, 512, 64, 3]}
    def compiled():  # up to COST_OPS ops: the default-emitter program (see _cost._evaluate_small)
        return programs(_cost._evaluate) + programs(_cost._evaluate_small)

    before = compiled()
    five = cost(rows, hw, ["ws", "is"])
    three = cost({k: v[:3] for k, v in rows.items()}, hw, ["ws", "is"])
    assert compiled() - before <= 1 and _cost.COST_OPS >= 5
    for i in range(5):
        alone = cost({k: [v[i]] for k, v in rows.items()}, hw, ["ws", "is"])
        for name in ("cycles", "energy_pj", "dram_reads_weight", "layout"):
            np.testing.assert_array_equal(five[name].values[:, i], alone[name].values[:, 0])
            if i < 3:
                np.testing.assert_array_equal(three[name].values[:, i], alone[name].values[:, 0])
    empty = cost({"m": [], "k": [], "n": []}, hw, ["ws", "is"])  # no op to repeat: an empty table, as before
    assert dict(empty.sizes) == {"dataflow": 2, "op": 0} and float(empty["total_cycles"].sum()) == 0.0
    assert cost({"m": [], "k": [], "n": []}, hw, np.array([], dtype=object)).sizes["op"] == 0
    big = cost({k: v * 4 for k, v in rows.items()}, hw, "os")  # 20 ops: padded to 32 by repeating op 0
    np.testing.assert_array_equal(big["cycles"].values[:5], big["cycles"].values[5:10])
    assert big.sizes["op"] == 20


def test_non_gemm_ops_use_the_vector_path(static_traces):
    ds = cost(static_traces["encoder"], presets.get("npu_like"), "ws", fusion="none")  # each op alone
    ops = static_traces["encoder"].ops
    vec = (ops["m"].values == 0) & (ops["flops"].values > 0)
    assert (ds["compute_cycles"].values[vec] > 0).all() and (ds["macs"].values[vec] == 0).all()


# ---------------------------------------------------------------- invariants
dims = st.integers(1, 3000)
machines = st.fixed_dictionaries({
    "pe_rows": st.sampled_from([4, 8, 16, 32, 128]),
    "pe_cols": st.sampled_from([4, 8, 16, 32, 128]),
    "tile_rows": st.integers(1, 4),
    "tile_cols": st.integers(1, 4),
    "sram_kb": st.sampled_from([4, 16, 64, 256, 2048]),
    "dram": st.sampled_from([1.0, 8.0, 64.0, 512.0]),
    "noc": st.sampled_from([4.0, 32.0, 256.0]),
})


def _hw(p, sram_scale=1.0, bw_scale=1.0):
    kb = int(p["sram_kb"] * 1024 * sram_scale)
    return Hardware(pe_rows=p["pe_rows"], pe_cols=p["pe_cols"], tile_rows=p["tile_rows"], tile_cols=p["tile_cols"],
                    sram_input_bytes=kb, sram_weight_bytes=kb, sram_output_bytes=kb,
                    dram_bytes_per_cycle=p["dram"] * bw_scale, noc_link_bytes_per_cycle=p["noc"] * bw_scale)


# derandomized (tests/conftest.py's profile): the same 60 examples every run; the examples random runs
# (--hypothesis-profile explore) found are kept below (one fixed, one a known limit:
# test_more_sram_can_slow_an_op_that_the_psum_choice_moves_to_noc)
@settings(max_examples=60)
@given(m=dims, k=dims, n=dims, batch=st.integers(1, 8), p=machines, df=st.sampled_from(["ws", "os", "is"]))
# once failed: the search scored ceil(1260 / 420) as 4 (a reciprocal multiply; machine.ceil_div)
@example(m=420, k=206, n=32, batch=3, p={"pe_rows": 32, "pe_cols": 8, "tile_rows": 2, "tile_cols": 2, "sram_kb": 4,
                                          "dram": 64.0, "noc": 32.0}, df="ws")
def test_invariants_of_the_cost_model(m, k, n, batch, p, df):
    ops = {"m": [m], "k": [k], "n": [n], "batch": [batch]}
    hw = _hw(p)
    c = cost(ops, hw, df)
    macs = batch * m * k * n
    peak = hw.tiles * hw.pe_rows * hw.pe_cols
    assert float(c["macs"][0]) == macs
    assert float(c["cycles"][0]) >= macs / peak
    assert 0.0 <= float(c["utilization"][0]) <= 1.0
    assert float(c["energy_pj"][0]) >= macs * hw.mac_pj_1  # no dtype given: the native 1-byte word
    levels = sum(float(c[f"energy_{lv}_pj"][0]) for lv in ("mac", "rf", "sram", "noc", "dram"))
    assert float(c["energy_pj"][0]) == pytest.approx(levels, rel=1e-12)
    operands = sum(float(c[f"energy_{o}_pj"][0]) for o in ("input", "weight", "output"))
    assert operands == pytest.approx(float(c["energy_sram_pj"][0]) + float(c["energy_dram_pj"][0]), rel=1e-12)
    # traffic is conserved between levels: what DRAM supplies passes through SRAM
    for x in ("input", "weight"):
        assert float(c[f"sram_reads_{x}"][0]) >= float(c[f"dram_reads_{x}"][0]) > 0
    assert float(c["sram_writes_output"][0]) >= float(c["dram_writes_output"][0]) >= m * n * batch * hw.word_bytes
    # with one mapping (a single tile), more SRAM or more bandwidth never costs more cycles or DRAM bytes; on a
    # grid the search may trade a few refetched bytes for a faster layout, so only time is bounded there
    dram = lambda d: sum(float(d[v][0]) for v in ("dram_reads_input", "dram_reads_weight",
                                                   "dram_reads_output", "dram_writes_output"))
    for better in (_hw(p, sram_scale=4.0), _hw(p, bw_scale=4.0)):
        b = cost(ops, better, df)
        if hw.tiles == 1:
            assert float(b["cycles"][0]) <= float(c["cycles"][0])
            assert dram(b) <= dram(c)
        else:  # the search keeps the layout with the best penalised time: never slower than that penalty allows
            assert float(b["cycles"][0]) <= float(c["cycles"][0]) * (1 + 0.02 * np.log2(hw.tiles)) * (1 + 1e-12)
    ideal = cost(ops, hw, df, memory="ideal")
    assert float(ideal["stall_cycles"][0]) == 0.0 and float(ideal["cycles"][0]) <= float(c["cycles"][0])


def test_more_sram_can_slow_an_op_that_the_psum_choice_moves_to_noc():
    """Found by a random run of the invariants above (2026-12-02): a 237 x 641 x 2015 GEMM (batch 3, input
    stationary) on a 1 x 3 grid of 128 x 8 arrays. With 4x the SRAM the model's compiler, which spills partial sums
    or re-blocks the rows by whichever moves fewer DRAM bytes, moves fewer DRAM bytes (DRAM 299k -> 234k cycles)
    but loads the busiest NoC link more (344k -> 423k cycles), so the op takes 3.19% longer, past the tile penalty's
    bound (1 + 0.02 log2 3: 3.17%). Since the compiler may also block the outputs (machine.output_blocked_refetch),
    neither machine spills or re-blocks the rows, and more SRAM no longer slows it."""
    p = {"pe_rows": 128, "pe_cols": 8, "tile_rows": 1, "tile_cols": 3, "sram_kb": 64, "dram": 64.0, "noc": 32.0}
    ops = {"m": [237], "k": [641], "n": [2015], "batch": [3]}
    base, more = cost(ops, _hw(p), "is"), cost(ops, _hw(p, sram_scale=4.0), "is")
    assert float(more["cycles"][0]) <= float(base["cycles"][0]) * (1 + 0.02 * np.log2(3)) * (1 + 1e-12)


# ---------------------------------------------------------------- bad input
def test_bad_inputs_are_named():
    hw = presets.get("scalesim_32")
    with pytest.raises(CostInputError, match="no k column"):
        cost({"m": [1], "n": [1]}, hw)
    with pytest.raises(CostInputError, match="'m' must hold finite non-negative whole numbers; row 1 is -3"):
        cost({"m": [1, -3], "k": [1, 1], "n": [1, 1]}, hw)
    with pytest.raises(CostInputError, match=r"row 0 is 2\.5"):
        cost({"m": [1], "k": [2.5], "n": [1]}, hw)
    with pytest.raises(CostInputError, match=r"one value per op; lengths \{'m': 2, 'k': 1, 'n': 2"):
        cost({"m": [1, 2], "k": [1], "n": [1, 2]}, hw)
    with pytest.raises(CostInputError, match="'k' must hold finite non-negative whole numbers; row 1 is -2"):
        cost({"m": [1, 2], "k": [1, -2], "n": [1, 2]}, hw)  # a later column is named, not only the first
    with pytest.raises(CostInputError, match="row 0 is nan"):
        cost({"m": [1], "k": [1], "n": [float("nan")]}, hw)
    with pytest.raises(CostInputError, match="unknown dataflow 'rs'; valid: ws, os, is"):
        cost({"m": [1], "k": [1], "n": [1]}, hw, "rs")
    with pytest.raises(CostInputError, match="one entry per op"):
        cost({"m": [1, 2], "k": [1, 2], "n": [1, 2]}, hw, np.array(["ws"]))
    with pytest.raises(CostInputError, match="unknown memory mode 'infinite'"):
        cost({"m": [1], "k": [1], "n": [1]}, hw, memory="infinite")
    with pytest.raises(CostInputError, match=r"cost\(\): hw must be one dfit_nb\.sim\.Hardware"):
        cost({"m": [1], "k": [1], "n": [1]}, "tpu_like")
    with pytest.raises(CostInputError, match="ops must be"):
        cost(42, hw)


def test_public_surface():
    assert {"Hardware", "cost", "sweep", "presets"} <= set(sim.__all__)


def test_os_output_writes_differ_from_scalesim_by_its_documented_quirk(reference, ours):
    # SCALE-Sim's OS ofmap write count carries R + C extra entries per fold (docs/validation.md);
    # our count is the M x N outputs actually produced
    os_rows = reference["dataflow"] == "os"
    ref = reference[os_rows]
    r, c = ref["array_rows"].values, ref["array_cols"].values
    folds = np.ceil(ref["m"].values / r) * np.ceil(ref["n"].values / c)
    np.testing.assert_array_equal(ours["sram_writes_output"].values[os_rows], ref["m"].values * ref["n"].values)
    np.testing.assert_array_equal(ref["sram_ofmap_writes"].values, ref["m"].values * ref["n"].values + folds * (r + c))


def test_the_model_vmaps_over_machines_of_different_grids():
    """sweep() runs the one model vmapped over machines (grids padded to the largest): each equals cost()."""
    ops = {"m": [64, 300, 7], "k": [64, 128, 4096], "n": [64, 9, 16]}
    base = presets.get("npu_like")
    ds = sim.sweep(ops, base, dataflow=["os", "ws"], tiles=[(1, 1), (4, 5), (2, 8)], progress=False)
    for label, (rows, cols) in zip(ds["tiles"].values, [(1, 1), (4, 5), (2, 8)], strict=True):
        one = cost(ops, base.replace(tile_rows=rows, tile_cols=cols), ["os", "ws"])
        for var in ("cycles", "energy_pj", "dram_reads_weight", "noc_bytes", "gy", "gx"):
            np.testing.assert_allclose(ds[var].sel(tiles=label).values, one[var].values, rtol=1e-12,
                                       err_msg=f"{var} on {label}")


@pytest.mark.parametrize("preset", presets.names())
def test_every_example_costs_on_every_preset(static_traces, preset):
    hw = presets.get(preset)
    for name, trace in static_traces.items():
        for fusion in ("rules", "none"):  # each kernel alone (the default for a Trace), each op alone
            ds = cost(trace, hw, ["ws", "os", "is"], fusion=fusion)
            for var in ("cycles", "energy_pj", "utilization", "dram_reads_input"):
                assert np.isfinite(ds[var].values).all(), (name, fusion, var)
            ops = trace.ops.sel(op=ds["op"].values)
            computes = (ops["m"].values > 0) | (ops["flops"].values > 0)
            # alone, every op that computes takes time; in a kernel, an epilogue may hide under its GEMM
            kernel = ds["kernel"].values if "kernel" in ds.coords else ds["op"].values
            per_kernel = ds["cycles"].groupby(xr.DataArray(kernel, dims="op", name="k")).sum()
            if fusion == "none":
                assert (ds["cycles"].values[:, computes] > 0).all(), name
            else:
                busy = np.isin(per_kernel["k"].values, kernel[computes])
                assert (per_kernel.values[:, busy] > 0).all(), name
            assert (ds["utilization"].values <= 1.0).all() and float(ds["total_energy_j"].min()) > 0, name


@settings(max_examples=40)
@given(m=dims, k=dims, n=dims, p=machines, df=st.sampled_from(["ws", "os", "is"]),
       fold=st.floats(0.0, 1.0), overlap=st.floats(0.0, 1.0))
# found by CI: hiding part of the fill gave 6.000000000000001 compute cycles where hiding none gave 6.0 (one ulp)
@example(m=1, k=1, n=1, p={"pe_rows": 4, "pe_cols": 4, "tile_rows": 1, "tile_cols": 1, "sram_kb": 4, "dram": 1.0,
                           "noc": 4.0}, df="os", fold=0.18058596838791077, overlap=0.0)
def test_invariants_of_the_overlaps(m, k, n, p, df, fold, overlap):
    """Whatever share of the folds' fill and of the memory pipeline hides: an op takes at least its slowest
    demand and at most its on-tile and off-tile demands one after the other; hiding more never costs time."""
    ops = {"m": [m], "k": [k], "n": [n]}
    hw = _hw(p).replace(fold_overlap=fold, memory_overlap=overlap)
    c = cost(ops, hw, df)
    on = max(float(c["compute_cycles"][0]), float(c["sram_cycles"][0]))
    off = max(float(c["noc_cycles"][0]), float(c["dram_cycles"][0]))
    cycles = float(c["cycles"][0])
    assert max(on, off) * (1 - 1e-12) <= cycles <= (on + off) * (1 + 1e-12)
    if hw.tiles == 1:  # one mapping: the comparison is like for like
        assert cycles <= float(cost(ops, hw.replace(memory_overlap=0.0), df)["cycles"][0]) * (1 + 1e-12)
        assert cycles >= float(cost(ops, hw.replace(memory_overlap=1.0), df)["cycles"][0]) * (1 - 1e-12)
        assert float(c["compute_cycles"][0]) <= float(cost(ops, hw.replace(fold_overlap=0.0), df)[
            "compute_cycles"][0]) * (1 + 1e-12)


@settings(max_examples=40)
@given(m=dims, k=dims, n=dims, p=machines, df=st.sampled_from(["ws", "os", "is"]),
       dtype=st.sampled_from(["int8", "bfloat16", "float32"]), acc=st.sampled_from([0, 1, 2, 4, 8]))
def test_invariants_of_the_accumulator_width(m, k, n, p, df, dtype, acc):
    """An accumulator no wider than the op's word changes nothing (partial sums are never narrower than it); a
    wider one never moves fewer output bytes through SRAM and, on one tile (one mapping: like for like), never
    takes less time."""
    ops = {"m": [m], "k": [k], "n": [n], "dtype": [dtype]}
    hw = _hw(p).replace(word_bytes=4)  # the op's own width is its word
    base, wide = cost(ops, hw, df), cost(ops, hw.replace(accumulator_bytes=acc), df)
    if acc <= {"int8": 1, "bfloat16": 2, "float32": 4}[dtype]:
        for key in base.data_vars:
            np.testing.assert_array_equal(wide[key].values, base[key].values, err_msg=key)
    elif hw.tiles == 1:
        out = ("sram_writes_output", "sram_reads_output")
        assert sum(float(wide[o][0]) for o in out) >= sum(float(base[o][0]) for o in out)
        assert float(wide["cycles"][0]) >= float(base["cycles"][0]) * (1 - 1e-12)


def _public_twin(ds):
    """``ds`` rebuilt through xarray's public constructor from the same variables, coordinates and attrs."""
    from dfit_nb._runtime.datasets import assemble_public

    data = {k: (v.dims, v.values, dict(v.attrs)) for k, v in ds.data_vars.items()}
    twin = assemble_public(data, {k: ds[k].values for k in ds.indexes}, dict(ds.attrs))
    for k in ds.indexes:  # sweep() labels its axes' units after building
        twin[k].attrs.update(ds[k].attrs)
    return twin


def test_the_fast_dataset_is_identical_to_the_public_constructors(monkeypatch):
    """cost() and sweep() build their Datasets through xarray's internal constructor (a warm cost() call is
    mostly that); it must give exactly what the public one gives, string coordinates included, and it must be
    the path taken (else the speed silently goes)."""
    from dfit_nb._runtime import datasets as _xarray

    hw = presets.get("npu_like")
    ops = {"m": [64, 0], "k": [32, 0], "n": [16, 0], "flops": [0, 512], "count": [3, 1]}
    single, several = cost(ops, hw), cost(ops, hw, ["ws", "os"])
    swept = sim.sweep(ops, hw, ["os", "is"], pe=[(8, 8), (16, 16)], dram_bytes_per_cycle=[8.0, 64.0],
                      progress=False)
    for ds in (single, several, swept):
        xr.testing.assert_identical(ds, _public_twin(ds))
    assert list(several["total_cycles"].dims) == ["dataflow"]
    assert several["dataflow"].values.tolist() == ["ws", "os"] and swept["pe"].values.tolist() == ["8x8", "16x16"]

    def refuse(*args):
        raise AssertionError("the public constructor was used")

    monkeypatch.setattr(_xarray, "assemble_public", refuse)
    cost(ops, hw, ["ws", "os"])  # the direct path: no fallback needed


@settings(max_examples=40)
@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 5000), st.integers(0, 5000), st.integers(0, 4),
                          st.sampled_from(["float32", "bfloat16", "int8", "float64"]), st.integers(0, 10**7),
                          st.integers(0, 10**7), st.sampled_from(["", "float32[64,32] bfloat16[32,16]", "int8[7]"])),
                min_size=1, max_size=9))
def test_the_model_inputs_are_the_same_derived_on_the_host_or_in_the_program(rows):
    """cost()'s program derives the model's inputs from the table's columns (alone_inputs with jax.numpy); the
    host derives them with NumPy for alone_arrays (the sweep, the predictor): one formula, the same numbers."""
    import jax.numpy as jnp

    from dfit_nb.sim._cost import alone_columns, alone_inputs

    m, k, n, batch, dtype, read, written, shapes = (list(c) for c in zip(*rows, strict=True))
    table = {"m": m, "k": k, "n": n, "batch": batch, "dtype": dtype, "bytes_read": read, "bytes_written": written}
    for with_shapes in (False, True):
        columns, _ = alone_columns({**table, "in_shapes": shapes} if with_shapes else table)
        host = alone_inputs(columns, np)
        with jax.enable_x64(True):
            program = jax.jit(lambda c: alone_inputs(c, jnp))(columns)
        assert set(host) == set(program)
        for key, value in host.items():
            np.testing.assert_array_equal(np.asarray(program[key]), value, err_msg=key)


def test_small_tables_on_small_grids_cost_the_same_on_their_own_grid_as_on_the_bucket(monkeypatch):
    """A table of up to COST_OPS ops on a machine of up to 8 tiles runs a program compiled for 8 tiles (32
    candidate splits per op where the replay's 8 x 8 bucket scores 116): every grid shape of up to 8 tiles, every
    dataflow, both memory modes give the bucket's numbers bit for bit."""
    from dfit_nb.sim import _cost, schedule

    asked = []

    def on_the_bucket(rows, cols, _):
        asked.append((rows, cols))
        grid = schedule.bucket(rows, cols)
        assert grid.tiles == 64
        return grid, _cost.device_tables(rows, cols, grid.rows, grid.cols, grid.tiles)

    rng = np.random.default_rng(7)
    grids = [(r, c) for r in range(1, 9) for c in range(1, 9) if r * c <= _cost.SMALL_GRID_TILES]
    assert len(grids) == 20 and _cost.cost_grid(2, 4, 3).tiles == 8 and _cost.cost_grid(4, 5, 3).tiles == 64
    for i, (r, c) in enumerate(grids):
        hw = presets.get("tpu_like").replace(
            tile_rows=r, tile_cols=c, pe_rows=int(rng.choice([4, 16, 128])), pe_cols=int(rng.choice([4, 16, 128])),
            sram_input_bytes=int(rng.choice([4096, 65536, 2**21])), dram_bytes_per_cycle=float(rng.choice([8, 512])))
        n = 1 + i % _cost.COST_OPS
        ops = {"m": rng.integers(0, 4000, n), "k": rng.integers(0, 4000, n), "n": rng.integers(1, 4000, n),
               "batch": rng.integers(1, 5, n), "dtype": rng.choice(["int8", "bfloat16", "float32"], n),
               "bytes_read": rng.integers(0, 10**7, n), "bytes_written": rng.integers(0, 10**7, n)}
        memory = ("finite", "ideal")[i % 2]
        dataflow = np.array(["ws", "os", "is"])[(np.arange(n) + i) % 3]  # every dataflow, one program
        small = cost(ops, hw, dataflow, memory)
        with monkeypatch.context() as mp:
            mp.setattr(_cost, "_grid_and_tables", on_the_bucket)
            bucket = cost(ops, hw, dataflow, memory)
        assert asked.pop() == (r, c)
        for name in bucket.data_vars:
            np.testing.assert_array_equal(small[name].values, bucket[name].values, err_msg=f"{r}x{c} {name}")


def test_a_machine_is_read_once_only_when_nothing_in_it_can_change():
    """cost() keeps what it reads of a machine (field vector, attrs, grid) when every field is a scalar that
    cannot change in place; a machine holding a NumPy array is read on every call, so changing the array in place
    changes the next result."""
    from dfit_nb.sim import _cost

    ops = {"m": [64, 128], "k": [64, 128], "n": [64, 128]}
    hw = presets.get("tpu_like").replace(dram_bytes_per_cycle=48.0)
    first = cost(ops, hw)
    entry = _cost._machines.get(id(hw))
    assert entry.hw is hw and not entry.fields.flags.writeable and entry.attrs["hw_dram_bytes_per_cycle"] == 48.0
    xr.testing.assert_identical(cost(ops, hw), first)
    bandwidth = np.array(48.0)
    held = presets.get("tpu_like").replace(dram_bytes_per_cycle=bandwidth)
    assert float(cost(ops, held)["dram_cycles"][1]) == float(first["dram_cycles"][1])
    assert _cost._machines.get(id(held)) is None
    bandwidth[...] = 4.0  # a frozen Hardware still holds a mutable array
    slower = cost(ops, held)
    assert float(slower["dram_cycles"][1]) > float(first["dram_cycles"][1])
    assert slower.attrs["hw_dram_bytes_per_cycle"] == 4.0


@pytest.mark.slow  # a fresh process compiles the program
def test_a_small_tables_program_runs_on_the_calling_thread(tmp_path):
    """XLA's CPU runtime runs a program's kernels one after another on the calling thread only when none of its
    buffers is over 512 bytes (dfit_nb._runtime.padding.SEQUENTIAL_BYTES), and logs which it chose; cost()'s program for
    a small table on a small grid is built to be such a program (its inputs and outputs in blocks, the tables as
    int32), which halves it (benchmarks/bench_cost_call.py). One dataflow per op: a list of them vmaps the search,
    whose (ops x candidates) arrays are then kept, and that program runs on the pool."""
    code = ("import dfit_nb\ndfit_nb.setup()\nfrom dfit_nb.sim import cost, presets\n"
            "cost({'m': [64, 128, 256], 'k': [64, 128, 256], 'n': [64, 128, 256]}, presets.get('tpu_like'))\n"
            "cost({'m': [64], 'k': [64], 'n': [64]}, presets.get('scalesim_32'), 'os', memory='ideal')")
    env = {**os.environ, "TF_CPP_VMODULE": "thunk_executor=2", "TF_CPP_MIN_LOG_LEVEL": "0",
           "DFIT_NB_COMPILATION_CACHE": str(tmp_path)}  # an empty cache: the programs are compiled, and logged
    err = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stderr
    built = [line for line in err.splitlines() if "Constructed ThunkExecutor" in line]
    assert len(built) == 2 and all("is_sequential=true" in line for line in built), built


def test_datasets_share_no_mutable_state():
    """The op coordinate's data is built once per op count and shared (xarray never lets it be modified); what a
    user may change (a variable's attrs, the Dataset's attrs) stays each Dataset's own."""
    hw = presets.get("tpu_like")
    ops = {"m": [64, 128, 256], "k": [64, 128, 256], "n": [64, 128, 256]}
    first, second = cost(ops, hw), cost(ops, hw)
    first["op"].attrs["units"] = "op"
    first["cycles"].attrs["note"] = "mine"
    first.attrs["hardware"] = "changed"
    assert dict(second["op"].attrs) == {} and "note" not in second["cycles"].attrs
    assert second.attrs["hardware"] == "tpu_like"
    with pytest.raises(ValueError):  # the shared coordinate data cannot be changed in place
        first["op"].values[0] = 7
    assert cost(ops, hw)["op"].values.tolist() == [0, 1, 2]
    xr.testing.assert_identical(cost(ops, hw), second)


def test_inconsistent_variables_fall_back_to_the_public_constructor_which_refuses_them():
    from dfit_nb._runtime.datasets import assemble

    data = {"a": (("op",), np.arange(3.0), {}), "b": (("op",), np.arange(2.0), {})}
    with pytest.raises(ValueError, match=r"conflicting sizes for dimension 'op'"):  # xarray's own message
        assemble(data, {}, {})


def test_for_jit_copies_the_machine_without_revalidating_it():
    from dfit_nb.sim._cost import for_jit

    hw = presets.get("tpu_like")
    fast = for_jit(hw)
    assert fast.name == "" and fast.execution == "time" and hw.name == "tpu_like"
    for field in sim.hardware.FIELDS:
        assert np.asarray(getattr(fast, field)).dtype == np.float64
        assert float(getattr(fast, field)) == float(getattr(hw, field))
    assert jax.tree.structure(fast) == jax.tree.structure(for_jit(presets.get("npu_like")))  # one compiled shape


# ---------------------------------------------------------------- per-op settings: placement, fidelity, block floats

#: GEMMs whose pieces fit tpu_like's buffers (nothing re-read or spilled): their DRAM bytes are the operands' and
#: the result's alone
SMALL = pd.DataFrame({"m": [128, 256, 512, 96], "k": [256, 128, 512, 200], "n": [128, 512, 256, 64],
                      "dtype": ["bfloat16", "float32", "bfloat16", "float16"]})


@pytest.mark.parametrize(("flag", "operand", "variable"), [("a_on_chip", "lhs", "dram_reads_input"),
                                                            ("b_on_chip", "rhs", "dram_reads_weight"),
                                                            ("out_on_chip", "out", "dram_writes_output")])
def test_an_on_chip_flag_removes_exactly_its_operands_dram_bytes(flag, operand, variable):
    """An operand that sits in SRAM (or a result that stays there) moves no DRAM byte; the other operands' DRAM
    bytes do not change."""
    hw = presets.get("tpu_like")
    base = cost(SMALL, hw, "ws")
    flagged = cost(SMALL.assign(**{flag: [True, False, True, True]}), hw, "ws")
    itemsize = 2.0  # tpu_like's 2-byte word: the float32 op moves its values cast down to it
    m, k, n = (SMALL[c].to_numpy(float) for c in "mkn")
    nbytes = {"lhs": m * k, "rhs": k * n, "out": m * n}[operand] * itemsize
    on = np.array([True, False, True, True])
    assert (base["dram_reads_output"].values == 0).all()  # nothing spilled: the operands' bytes are all there is
    np.testing.assert_array_equal(base[variable].values, nbytes)
    np.testing.assert_array_equal(flagged[variable].values, np.where(on, 0.0, nbytes))
    every = ("dram_reads_input", "dram_reads_weight", "dram_reads_output", "dram_writes_output")
    total = [sum(ds[v].values for v in every) for ds in (base, flagged)]
    np.testing.assert_array_equal(total[0] - total[1], np.where(on, nbytes, 0.0))
    # where the mapping search keeps its choice (fewer DRAM bytes may make another split the fastest), the array's
    # work is the same
    kept = np.all([flagged[v].values == base[v].values for v in ("layout", "gy", "gx")], axis=0)
    assert kept[~on].all() and kept.any()
    for same in ("compute_cycles", "sram_reads_input", "sram_reads_weight", "sram_writes_output"):
        np.testing.assert_array_equal(flagged[same].values[kept], base[same].values[kept], err_msg=same)


def test_math_fidelity_is_passes_through_the_array():
    """LoFi, HiFi2, HiFi3 and HiFi4 are 1-4 passes: each fold of the array streams its operands that many times
    (SCALE-Sim's fold count, one array: scalesim_32, ideal memory); names and numbers give the same figures."""
    from dfit_nb.sim import machine

    hw = presets.get("scalesim_32")
    shapes = {"m": [64, 100, 256, 33], "k": [64, 300, 128, 512], "n": [64, 96, 256, 40]}
    names = cost({**shapes, "math_fidelity": ["LoFi", "HiFi2", "HiFi3", "HiFi4"]}, hw, "os", memory="ideal")
    numbers = cost({**shapes, "math_fidelity": [1, 2, 3, 4]}, hw, "os", memory="ideal")
    np.testing.assert_array_equal(names["cycles"].values, numbers["cycles"].values)
    m, k, n = (np.array(shapes[c], float) for c in "mkn")
    want = machine.fold_cycles(m, k, n, machine.OS, 32.0, 32.0, np, passes=np.arange(1.0, 5.0))[0]
    np.testing.assert_array_equal(names["compute_cycles"].values, want)
    one = cost(shapes, hw, "os", memory="ideal")
    np.testing.assert_array_equal(one["compute_cycles"].values[:1], names["compute_cycles"].values[:1])
    assert (names["compute_cycles"].values[1:] > one["compute_cycles"].values[1:]).all()


def test_block_floats_are_priced_as_their_bytes_with_shared_exponents():
    """bfp8 and bfp4 (Tenstorrent's BFLOAT8_B, BFLOAT4_B) move 1,088 and 576 bytes per 32x32 tile: 1.0625 and
    0.5625 bytes per element, in DRAM and in SRAM (a 2-byte machine keeps them at their own width)."""
    hw = presets.get("tt_wormhole_n150")
    ops = {"m": [512] * 3, "k": [1024] * 3, "n": [256] * 3, "dtype": ["bfp8", "bfp4", "bfloat16"]}
    ds = cost(ops, hw, "os")
    per = np.array([1088 / 1024, 576 / 1024, 2.0])
    np.testing.assert_array_equal(ds["dram_reads_input"].values, 512 * 1024 * per)
    np.testing.assert_array_equal(ds["dram_reads_weight"].values, 1024 * 256 * per)
    np.testing.assert_array_equal(ds["dram_writes_output"].values, 512 * 256 * per)
    np.testing.assert_allclose(ds["sram_reads_input"].values / ds["sram_reads_input"].values[2], per / 2.0)


def test_cost_refuses_a_hardware_field_column_naming_it_and_where_per_row_machines_go():
    with pytest.raises(CostInputError, match=r"\['tile_rows', 'pe_rows'\] name Hardware fields.*one machine.*"
                                             r"hw.replace\(tile_rows=.*sweep\(\).*calibrate\(\)"):
        cost({"m": [64], "k": [64], "n": [64], "pe_rows": [16], "tile_rows": [2]}, presets.get("npu_like"))


@pytest.mark.parametrize(("column", "value", "tokens"), [
    ("math_fidelity", "HiFi5", ("'math_fidelity' row 1", "'HiFi5'", "LoFi (1)", "HiFi4 (4)")),
    ("math_fidelity", 0, ("'math_fidelity' row 1", "0", "1-4")),
    ("a_on_chip", "L1", ("'a_on_chip' row 1", "'L1'", "not a boolean", "True or False")),
    ("out_on_chip", 2, ("'out_on_chip' row 1", "2", "not a boolean")),
    ("dtype", "bfp16", ("'dtype' row 1", "'bfp16'", "bfp8, bfp4")),
])
def test_cost_names_the_row_of_a_bad_per_op_setting(column, value, tokens):
    good = {"math_fidelity": "HiFi2", "a_on_chip": True, "out_on_chip": False, "dtype": "bfp8"}[column]
    table = pd.DataFrame({"m": [64, 64], "k": [64, 64], "n": [64, 64], column: [good, value]})
    with pytest.raises(CostInputError) as info:
        cost(table, presets.get("npu_like"))
    for token in tokens:
        assert token in str(info.value), (token, str(info.value))


@pytest.mark.parametrize("typo, meant", [("math_fidelty", "math_fidelity"), ("a_on_chp", "a_on_chip"),
                                         ("Batch", "batch"), ("dtyp", "dtype")])
def test_a_misspelled_column_is_refused_not_ignored(typo, meant):
    """cost() ignores columns it does not read (a name, a layer, a measured time); one that nearly names a column
    it reads was ignored too, and every op priced as if it were absent (math_fidelty: HiFi4 priced as one pass)."""
    from dfit_nb.sim import CostInputError

    table = {"m": [64], "k": [64], "n": [64], typo: [{"math_fidelty": "HiFi4", "a_on_chp": True, "Batch": 4,
                                                     "dtyp": "bfloat16"}[typo]]}
    with pytest.raises(CostInputError, match=rf"ops column '{typo}' is not a column cost\(\) reads; did you mean "
                                             rf"'{meant}'"):
        cost(table, presets.get("npu_like"), "ws")
    kept = cost({"m": [64], "k": [64], "n": [64], "layer": ["fc1"], "time_s": [1e-6]}, presets.get("npu_like"), "ws")
    assert float(kept["cycles"][0]) == float(cost({"m": [64], "k": [64], "n": [64]}, presets.get("npu_like"),
                                                  "ws")["cycles"][0])


@pytest.mark.parametrize("dataflow", [None, 0, {"": "os"}])
def test_a_dataflow_that_is_no_name_nor_array_is_named(dataflow):
    """None, a number or a dict was read as a per-op array of one entry: "needs one entry per op (2), got 1"."""
    import jax.numpy as jnp

    import dfit_nb
    from dfit_nb.sim import ReplayError

    trace = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((8, 8)), jnp.ones((8, 8)))
    with pytest.raises(ReplayError, match=r"is not a dataflow: give a name \(ws, os, is\)"):
        dfit_nb.replay(trace, presets.get("npu_like"), dataflow)
    with pytest.raises(CostInputError, match=r"is not a dataflow"):
        cost(trace, presets.get("npu_like"), dataflow)


def test_a_dataflow_list_naming_one_twice_is_refused():
    with pytest.raises(CostInputError, match=r"names 'ws' more than once"):
        cost({"m": [8], "k": [8], "n": [8]}, presets.get("npu_like"), ["ws", "ws"])


def test_each_operand_moves_at_its_own_width():
    """On ``tpu_v4`` (2-byte words) a bfloat16 operand reads two bytes per element whatever its result's dtype: a
    matmul into float32 reads what the bfloat16 matmul reads, and a column sum of a bfloat16 tensor through float32
    reads the tensor once and takes at least its bytes over the HBM rate (sized by the float32 result, cast down to
    2 bytes, each would read one byte per element). A float32 operand is cast down to the machine's word."""
    import dfit_nb

    hw = presets.get("tpu_v4")
    x = jax.ShapeDtypeStruct((1024, 1024), jax.numpy.bfloat16)
    f32 = jax.ShapeDtypeStruct((1024, 1024), jax.numpy.float32)

    def dram_reads(fn, *args):
        ops = dfit_nb.replay(dfit_nb.capture(fn, *args), hw, "ws").ops
        return float((ops["dram_reads_input"] + ops["dram_reads_weight"]).sum())

    mixed = dram_reads(lambda a, b: jax.numpy.matmul(a, b, preferred_element_type=jax.numpy.float32), x, x)
    assert mixed == dram_reads(lambda a, b: a @ b, x, x) == 2 * 1024 * 1024 * 2
    assert dram_reads(lambda a: a.astype(jax.numpy.float32).sum(0), x) == 1024 * 1024 * 2
    assert dram_reads(lambda a: a.sum(0), f32) == 1024 * 1024 * 2  # float32 cast down to the 2-byte word
    run = dfit_nb.replay(dfit_nb.capture(lambda a: a.astype(jax.numpy.float32).sum(0), x), hw, "ws")
    hbm = float(hw.dram_bytes_per_cycle) * float(hw.clock_ghz) * 1e9
    assert float(run.summary["latency_s"]) >= 1024 * 1024 * 2 / hbm
