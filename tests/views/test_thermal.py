"""The thermal view: schema-valid Vega-Lite that renders through vl-convert, marks hotspots and throttled steps,
stays within its row budget on a 64 x 64 grid, and names bad input."""

from __future__ import annotations

import json
import struct

import jax.numpy as jnp
import numpy as np
import pytest

import dfit_nb
from dfit_nb.sim import presets
from dfit_nb.views import _common
from dfit_nb.views.thermal import temperature


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _rows(spec: dict) -> int:
    return sum(len(v) for v in spec.get("datasets", {}).values())


@pytest.fixture(scope="module")
def gemm():
    return dfit_nb.capture(lambda a: jnp.tanh(a @ a), jnp.ones((64, 64)))


@pytest.fixture(scope="module")
def hot(gemm):
    """The NPU made to overheat (a toy cooling path): throttled steps and one hottest tile to mark."""
    run = dfit_nb.replay(gemm, presets.get("npu_like"))
    hw = presets.get("npu_like").replace(thermal_resistance_k_per_w=1e3, heat_capacity_j_per_k=1e-6)
    return run.thermal(10**5, steps=48, hw=hw)


def test_the_view_is_valid_renders_and_marks_hotspots_and_throttling(hot):
    chart = temperature(hot)
    spec = chart.to_dict()  # validates against the Vega-Lite schema
    text = json.dumps(spec)
    assert '"window"' in text and "inferno" in text
    rows = [r for rows in spec["datasets"].values() for r in rows]
    n_hot = int(hot["hotspot"].sum())
    assert n_hot >= 1
    assert sum(1 for r in rows if set(r) == {"tile_y", "tile_x"}) == n_hot  # the rings
    grid_rows = [r for r in rows if "temperature_c" in r]
    assert len(grid_rows) == hot.sizes["time"] * 4 * 5
    assert any(r["throttled"] for r in grid_rows) and not all(r["throttled"] for r in grid_rows)
    assert max(r["temperature_c"] for r in grid_rows) == pytest.approx(float(hot["peak_temperature_c"]), rel=1e-4)
    assert "throttled" in spec["title"]["subtitle"][0]
    w, h = _png_size(_common.png(chart))
    assert w > 300 and h > 150


@pytest.mark.slow  # a large-grid preset (compiles its own grid bucket; tests/conftest.py)
def test_a_large_grid_is_pooled_by_its_maximum(gemm):
    run = dfit_nb.replay(gemm, presets.get("cerebras_like"))
    th = run.thermal(1000, steps=64)
    spec = temperature(th, max_rows=2000).to_dict()
    grid_rows = [r for rows in spec["datasets"].values() for r in rows if "temperature_c" in r]
    assert len(grid_rows) <= 2000
    assert "pooled" in " ".join(spec["title"]["subtitle"])
    # pooling keeps the hottest tile's temperature (max, not mean)
    assert max(r["temperature_c"] for r in grid_rows) == pytest.approx(float(th["temperature"].max()), rel=1e-4)
    assert _png_size(_common.png(temperature(th, max_rows=2000)))[0] > 300


def test_bad_input_is_named(hot):
    with pytest.raises(_common.ViewInputError, match=r"dfit_nb\.sim\.thermal"):
        temperature(np.zeros(3))
    with pytest.raises(ValueError, match="hotspot"):
        temperature(hot.drop_vars("hotspot"))
    with pytest.raises(_common.ViewInputError, match="max_rows"):
        temperature(hot, max_rows="many")



@pytest.mark.parametrize("dim", ["time", "tile_y"])
def test_an_analysis_sliced_to_nothing_is_named(hot, dim):
    """An empty slice of steps or tiles ended in ZeroDivisionError inside the pooling."""
    with pytest.raises(ValueError, match=f"temperature needs at least one '{dim}' in the run's thermal analysis"):
        temperature(hot.isel({dim: slice(0, 0)}))
