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
from tests.shared import programs

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
    with pytest.raises(CostInputError, match=r"'sram_kb' takes a 1-D list or array of values, got an array of "
                                             r"shape \(2, 1\)"):
        sweep(OPS, hw, sram_kb=np.array([[64], [128]]))
    for axes, field in ((dict(pe=[(16, 16)], pe_rows=[8]), "pe_rows"),
                        (dict(tiles=[(2, 2)], tile_rows=[1]), "tile_rows"),
                        (dict(sram_kb=[64], sram_input_bytes=[1024]), "sram_input_bytes")):
        first, second = axes
        with pytest.raises(CostInputError, match=f"axes '{first}' and '{second}' both set Hardware.{field}"):
            sweep(OPS, hw, **axes)
    with pytest.raises(CostInputError, match=r"'sram_kb' takes numbers, not booleans or text; got \[True\]"):
        sweep(OPS, hw, sram_kb=[True])
    # a 1-D JAX array is an axis as a 1-D NumPy array is
    import jax.numpy as jnp

    on_jax = sweep(OPS, hw, progress=False, sram_kb=jnp.array([64, 128]))
    on_numpy = sweep(OPS, hw, progress=False, sram_kb=np.array([64, 128]))
    assert on_jax["cycles"].dims == on_numpy["cycles"].dims == ("sram_kb", "dataflow", "op")
    np.testing.assert_array_equal(on_jax["cycles"].values, on_numpy["cycles"].values)
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
        def spying(real):
            def spy(ops, part, df, tables, index, ideal):
                seen.append(len(part.pe_rows.sharding.device_set))
                return real(ops, part, df, tables, index, ideal)
            return spy
        mod._evaluate_batch = spying(mod._evaluate_batch)  # and its compile for calls of little work
        mod._evaluate_batch_fast_compile = spying(mod._evaluate_batch_fast_compile)
        again = sweep(ops, hw, pe=[(8, 8), (16, 16), (32, 32)], dram_bw=[4.0, 16.0, 64.0])
        assert seen == [2], seen
        np.testing.assert_array_equal(ds["cycles"].values, again["cycles"].values)
        print("sharded ok")
    """)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "sharded ok" in out.stdout


def test_sweeps_of_similar_size_share_one_program_and_the_padding_changes_nothing(static_traces):
    """Ops, machines and grids are padded to powers of two (a lone chunk): sweeps of 3 and 5 ops, 2 to 6 machines
    and 1 to 3 grids run one compiled program, each figure equal to cost()'s; replay_batch of 3 and 4 machines
    shares one too, each equal to its own replay."""
    from dfit_nb import replay
    from dfit_nb.sim import Hardware, replay_batch
    from dfit_nb.sim import _batch as replay_mod

    hw = presets.get("npu_like")
    five = {"m": [64, 300, 7, 5, 96], "k": [64, 128, 4096, 5, 8], "n": [64, 9, 16, 5, 40]}
    calls = [({k: v[:3] for k, v in five.items()}, {"dram_bw": [8.0, 64.0]}),
             (five, {"tiles": [(1, 1), (4, 5), (2, 8)], "dram_bw": [16.0, 60.0]}),
             (five, {"pe": [(8, 8), (16, 16)], "tiles": [(2, 2), (4, 4)]})]
    both = (sweep_mod._evaluate_batch, sweep_mod._evaluate_batch_fast_compile)  # whichever by_work picks
    before = programs(*both)
    for ops, grid in calls:
        ds = sweep(ops, hw, dataflow=["ws", "is"], progress=False, **grid)
        flat = ds.stack(machine=[d for d in ds["cycles"].dims if d not in ("dataflow", "op")])
        machines = sweep_mod.machine_grid(hw, grid)[0]
        for i in range(flat.sizes["machine"]):
            one = Hardware(name="", **{f: float(np.asarray(getattr(machines, f))[i]) for f in sweep_mod.FIELDS})
            ref = cost(ops, one, ["ws", "is"])
            for var in ("cycles", "energy_pj", "dram_reads_weight", "noc_bytes"):
                np.testing.assert_array_equal(flat[var].isel(machine=i).transpose("dataflow", "op").values,
                                              ref[var].values, err_msg=f"{var}, machine {i} of {grid}")
    assert programs(*both) - before <= 1 <= programs(*both)

    trace = static_traces["mlp"]
    both = (replay_mod._batch_program, replay_mod._batch_program_fast_compile)
    before = programs(*both)
    for bandwidths in ([16.0, 32.0, 64.0], [16.0, 32.0, 64.0, 128.0]):
        machines = [hw.replace(dram_bytes_per_cycle=b) for b in bandwidths]
        ds = replay_batch(trace, Hardware.stack(machines))
        assert ds.sizes["machine"] == len(machines)
        for i, m in enumerate(machines):
            assert float(ds["latency_cycles"][i]) == pytest.approx(float(replay(trace, m).summary["latency_cycles"]),
                                                                    rel=1e-9)
    assert programs(*both) - before <= 1 <= programs(*both)
