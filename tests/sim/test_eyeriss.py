"""The ``eyeriss`` preset: built from the JSSC 2017 paper's figures, and how far it gets on the chip's 18 measured
conv layers (benchmarks/bench_eyeriss.py prints the per-layer table; docs/validation.md, "Real hardware: Eyeriss")."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import dfit_nb
from dfit_nb.sim import Hardware, cost, presets
from dfit_nb.sim.calibration import metrics

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "eyeriss_jssc2017" / "eyeriss_layers.csv"


def test_the_eyeriss_preset_is_the_papers_chip():
    """12x14 PEs, a 108 KB global buffer, 16-bit words, 200 MHz, DRAM over a 64-bit link at 90 MHz (720 MB/s);
    listed, valid (rebuilt through the constructor's checks), its sources saying which figures are the paper's and
    which are assumptions; ``eyeriss_like`` is left as it was."""
    assert "eyeriss" in presets.names()
    hw = presets.get("eyeriss")
    assert Hardware(**{f.name: getattr(hw, f.name) for f in dataclasses.fields(hw)}) == hw
    assert (hw.tile_rows, hw.tile_cols, hw.pe_rows, hw.pe_cols) == (1, 1, 12, 14)
    assert hw.sram_bytes == 108 * 1024
    assert hw.word_bytes == 2 and hw.accumulator_bytes == 0
    assert hw.clock_ghz == pytest.approx(0.2)
    assert hw.dram_bytes_per_cycle * hw.clock_ghz * 1e3 == pytest.approx(720.0)  # MB/s: 8 bytes x 90 MHz
    assert hw.memory_overlap == 0.0 and hw.vector_overlap == 0.0
    info = presets.info("eyeriss")
    assert "JSSC 52(1), 2017" in info.sources and "Paper figures" in info.sources
    assert "Assumptions" in info.sources and "eyeriss_like is kept unchanged" in info.sources
    like = presets.get("eyeriss_like")
    assert (like.dram_bytes_per_cycle, like.memory_overlap) == (4.0, 1.0)
    with pytest.raises(KeyError, match=r"eyeriss_like, .*eyeriss"):
        presets.get("eyeris")


def layer_table(d: pd.DataFrame) -> pd.DataFrame:
    """Each conv layer's GEMM view with its operands' real shapes (what capturing the conv gives, see below)."""
    g = d["groups"]
    return pd.DataFrame({
        "m": d["batch_N"] * d["E_out"] * d["F_out"], "k": d["C_in_per_group"] * d["R"] * d["S"],
        "n": d["M_out_total"] // g, "batch": g, "dtype": "int16",
        "in_shapes": [f"int16[{r.batch_N},{r.H_in_padded},{r.W_in_padded},{r.C_in_per_group * r.groups}] "
                      f"int16[{r.R},{r.S},{r.C_in_per_group},{r.M_out_total}]" for r in d.itertuples()],
    })


@pytest.fixture(scope="module")
def layers():
    if not DATA.is_file():
        pytest.skip(f"{DATA} is absent: the measured Eyeriss layers live in the project's shared data folder "
                    "(../shared/data/eyeriss_jssc2017, from the JSSC 2017 paper's Tables V and VI)")
    return pd.read_csv(DATA)


def test_a_captured_conv_is_the_layer_table_row(layers):
    """AlexNet CONV2 (5x5, two groups, batch 4) captured as jax.lax.conv_general_dilated gives the table's row."""
    row = layers.iloc[1]
    assert row["layer"] == "CONV2" and row["groups"] == 2

    def conv(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "VALID", feature_group_count=2,
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"))

    t = dfit_nb.capture(conv, jax.ShapeDtypeStruct((4, 31, 31, 96), jnp.int16),
                        jax.ShapeDtypeStruct((5, 5, 48, 256), jnp.int16))
    ops = t.ops.to_dataframe()
    want = layer_table(layers.iloc[[1]]).iloc[0]
    for column in ("m", "k", "n", "batch"):
        assert float(ops[column].iloc[0]) == float(want[column]), column
    assert ops["in_shapes"].iloc[0] == want["in_shapes"]


@pytest.fixture(scope="module")
def comparison(layers):
    ds = cost(layer_table(layers), presets.get("eyeriss"), ["ws", "os", "is"])
    best = np.argmin(ds["seconds"].values, axis=0)
    pick = lambda name: np.take_along_axis(ds[name].values, best[None], axis=0)[0]
    dram = sum(pick(f"dram_{x}") for x in ("reads_input", "reads_weight", "reads_output", "writes_output"))
    return {
        "best": best,
        "latency": metrics(pick("seconds"), layers["total_latency_ms"].to_numpy() * 1e-3),
        "dram": metrics(dram, layers["DRAM_accesses_MB"].to_numpy() * 1e6),
        "energy": metrics((pick("energy_pj") - pick("energy_dram_pj")) * 1e-12,
                          layers["energy_total_mJ_derived"].to_numpy() * 1e-3),
    }


def test_the_uncalibrated_preset_on_the_measured_layers(comparison):
    """Measured 2026-12-04 (benchmarks/bench_eyeriss.py): weight-stationary is the fastest of the three styles on
    every layer; latency MAPE 42.1% / Spearman 0.952, DRAM traffic 39.1% / 0.922, chip energy (the model's without
    its DRAM level against power x latency) 76.4% / 0.890. Issue 39's 25% MAPE targets are missed (the chip's row
    stationary runs VGG-16's large feature maps at its buffer's rate, compresses feature maps in DRAM and re-reads
    what its 108 KB cannot hold: docs/validation.md); its Spearman target of 0.8 is met. Each bound is the figure
    with a small margin."""
    assert (comparison["best"] == 0).all()  # ws
    lat, dram, energy = comparison["latency"], comparison["dram"], comparison["energy"]
    assert lat["mape"] < 0.44 and lat["spearman"] > 0.94, lat
    assert dram["mape"] < 0.41 and dram["spearman"] > 0.91, dram
    assert energy["mape"] < 0.78 and energy["spearman"] > 0.88, energy
