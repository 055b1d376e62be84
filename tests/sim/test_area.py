"""The area and power model: hand-computed parts, how each part scales with its fields, its gradient in the
continuous fields, batches, the published die it is compared with, and bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr

from dfit_nb.sim import AreaError, Hardware, area, power, presets
from dfit_nb.sim._area import AREA_FIGURES, DIE_AREAS, area_mm2

MTR = 96.3e6  # transistors per mm^2 at 7 nm
STACK = 10.45 + 552.743e6 / MTR  # one HBM2e PHY and controller, mm^2


def _one_tile(**changes: object) -> Hardware:
    fields = dict(pe_rows=16, pe_cols=8, word_bytes=2, sram_input_bytes=2**19, sram_weight_bytes=2**18,
                  sram_output_bytes=2**18, vector_lanes=4, noc_link_bytes_per_cycle=94.8, dram_bytes_per_cycle=204.8,
                  clock_ghz=2.0)
    fields.update(changes)
    return Hardware(**fields)  # type: ignore[arg-type]


def test_parts_by_hand() -> None:
    parts = area(_one_tile(), breakdown=True)
    assert parts["pe"] == pytest.approx(16 * 8 * 25_345 / MTR)
    assert parts["vector"] == pytest.approx(4 * 134_070 / MTR)
    assert parts["sram"] == pytest.approx(1.3325)  # 1 MiB
    assert parts["noc"] == pytest.approx(44.3e6 / MTR * 2.0)  # twice the reference link width
    assert parts["dram"] == pytest.approx(STACK)  # 204.8 B/cycle x 2 GHz = one 409.6 GB/s stack
    assert parts["total"] == pytest.approx(sum(parts[k] for k in ("pe", "vector", "sram", "noc", "dram")))
    assert area(_one_tile()) == pytest.approx(parts["total"])


def test_word_sizes_and_tiles_scale_their_parts() -> None:
    base = area(_one_tile(), breakdown=True)
    assert area(_one_tile(word_bytes=1), breakdown=True)["pe"] == pytest.approx(base["pe"] * 11_106 / 25_345)
    assert area(_one_tile(word_bytes=4), breakdown=True)["pe"] == pytest.approx(base["pe"] * 134_070 / 25_345)
    grid = area(_one_tile(tile_rows=2, tile_cols=3), breakdown=True)
    for part in ("pe", "vector", "sram", "noc"):
        assert grid[part] == pytest.approx(6 * base[part])
    assert grid["dram"] == pytest.approx(base["dram"])  # one chip's DRAM, however many tiles


def test_gradient_in_continuous_fields() -> None:
    hw = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), _one_tile())
    g = jax.grad(area_mm2)(hw)
    assert float(g.dram_bytes_per_cycle) == pytest.approx(2.0 / 409.6 * STACK, rel=1e-5)
    assert float(g.clock_ghz) == pytest.approx(204.8 / 409.6 * STACK, rel=1e-5)
    assert float(g.noc_link_bytes_per_cycle) == pytest.approx(44.3e6 / MTR / 47.4, rel=1e-5)
    assert float(g.pe_rows) == pytest.approx(8 * 25_345 / MTR, rel=1e-5)  # the relaxation the search reads


def test_batch_and_presets() -> None:
    batch = Hardware.stack([presets.get("npu_like"), presets.get("tpu_v4")])
    totals = area(batch)
    assert totals.shape == (2,)
    assert totals[1] == pytest.approx(area(presets.get("tpu_v4")))
    # the one preset whose chip has a published die area at the model's node lands below it, as it should: the
    # model leaves out pads, PCIe and chip-to-chip links, the scalar core and the SparseCores
    bound = DIE_AREAS["tpu_v4"][0]
    assert 0.5 * bound < area(presets.get("tpu_v4")) < bound
    assert all(len(v) == 3 and v[0] > 0 for v in AREA_FIGURES.values())


def test_power() -> None:
    assert power(energy_j=2e-3, latency_s=1e-4) == pytest.approx(20.0)
    ds = xr.Dataset({"energy_j": ("machine", [1.0, 2.0]), "latency_s": ("machine", [0.5, 0.5])})
    np.testing.assert_allclose(power(ds).values, [2.0, 4.0])


def test_bad_input() -> None:
    with pytest.raises(AreaError, match="hw must be"):
        area("tpu_v4")  # type: ignore[arg-type]
    with pytest.raises(AreaError, match="latency_s must be finite and > 0"):
        power(energy_j=1.0, latency_s=0.0)
    with pytest.raises(AreaError, match="needs a Run, a replay_batch Dataset"):
        power(energy_j=1.0)
    with pytest.raises(AreaError, match="lacks latency_s"):
        power(xr.Dataset({"energy_j": 1.0}))
    for bad in (-1.0, float("nan"), [1.0, -2.0]):
        with pytest.raises(AreaError, match="energy_j must be finite and >= 0 J"):
            power(energy_j=bad, latency_s=1.0)
    with pytest.raises(AreaError, match="energy_j and latency_s must be numbers"):
        power(energy_j="a", latency_s=1.0)
    with pytest.raises(AreaError, match="Dataset's latency_s must be finite and > 0"):  # a run of no work: not nan W
        power(xr.Dataset({"energy_j": 0.0, "latency_s": 0.0}))
