"""Sweeps: one vmapped call over a grid of machines and dataflows, chunked and sharded."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dfit_nb.sim import CostInputError, cost, presets, sweep
from dfit_nb.sim import grid as sweep_mod

OPS = {"m": [64, 197, 1], "k": [64, 300, 512], "n": [64, 33, 512], "batch": [1, 2, 1]}


def test_grid_dims_coords_and_agreement_with_cost():
    hw = presets.get("scalesim_32")
    ds = sweep(OPS, hw, dataflow=["ws", "os"], pe=[(8, 8), (16, 32)], sram_kb=[64, 640], dram_bw=[4.0, 64.0])
    assert ds["cycles"].dims == ("pe", "sram_kb", "dram_bw", "dataflow", "op")
    assert ds["cycles"].shape == (2, 2, 2, 2, 3)
    assert list(ds["pe"].values) == ["8x8", "16x32"] and ds["dram_bw"].attrs["units"] == "B/cycle"
    one = sweep_mod.machine_grid(hw, {"pe": [(16, 32)], "sram_kb": [640], "dram_bw": [64.0]})[0]
    single = hw.replace(**{f: float(np.asarray(getattr(one, f))[0]) for f in (
        "pe_rows", "pe_cols", "sram_input_bytes", "sram_weight_bytes", "sram_output_bytes", "dram_bytes_per_cycle")})
    ref = cost(OPS, single, ["ws", "os"])
    got = ds.sel(pe="16x32", sram_kb=640, dram_bw=64.0)
    for var in ("cycles", "energy_pj", "dram_reads_input", "utilization", "seconds"):
        np.testing.assert_allclose(got[var].values, ref[var].values, rtol=1e-12)


def test_chunked_evaluation_matches_one_shot(monkeypatch):
    hw = presets.get("npu_like")
    grid = {"tiles": [(1, 1), (2, 2), (4, 5)], "noc_bw": [8.0, 64.0], "dram_bw": [16.0, 60.0, 200.0]}
    whole = sweep(OPS, hw, **grid)
    monkeypatch.setattr(sweep_mod, "CHUNK_EVALS", 20)  # 2 machines per chunk: 9 chunks
    chunked = sweep(OPS, hw, progress=False, **grid)
    for var in whole.data_vars:
        np.testing.assert_array_equal(whole[var].values, chunked[var].values)


def test_bad_sweep_axes_are_named():
    hw = presets.get("scalesim_32")
    with pytest.raises(CostInputError, match="cannot sweep 'pes'; sweepable: pe, tiles"):
        sweep(OPS, hw, pes=[(8, 8)])
    with pytest.raises(CostInputError, match="'pe' takes \\(rows, cols\\) pairs"):
        sweep(OPS, hw, pe=[(8, 8, 8)])
    with pytest.raises(CostInputError, match="has no values"):
        sweep(OPS, hw, dram_bw=[])
    from dfit_nb.sim import HardwareError

    with pytest.raises(HardwareError, match=r"pe_rows = 0 \(element 0 of a batch of 1\) is out of range"):
        sweep(OPS, hw, pe=[(0, 8)])


@pytest.mark.slow  # a fresh Python process importing JAX with several host devices
def test_sweep_is_sharded_over_several_devices():
    code = textwrap.dedent("""
        import jax, numpy as np
        from dfit_nb.sim import presets, sweep
        from dfit_nb.sim import grid as mod
        assert jax.local_device_count() == 2
        ops = {"m": [64, 197], "k": [64, 300], "n": [64, 33]}
        hw = presets.get("scalesim_32")
        ds = sweep(ops, hw, pe=[(8, 8), (16, 16), (32, 32)], dram_bw=[4.0, 16.0, 64.0])
        seen = []
        real = mod._evaluate_batch
        def spy(ops, part, df, tables, index, ideal):
            seen.append(len(part.pe_rows.sharding.device_set))
            return real(ops, part, df, tables, index, ideal)
        mod._evaluate_batch = spy
        again = sweep(ops, hw, pe=[(8, 8), (16, 16), (32, 32)], dram_bw=[4.0, 16.0, 64.0])
        assert seen == [2], seen
        np.testing.assert_array_equal(ds["cycles"].values, again["cycles"].values)
        print("sharded ok")
    """)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "sharded ok" in out.stdout
