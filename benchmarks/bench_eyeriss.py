"""Checked against a fabricated dataflow chip: the uncalibrated ``eyeriss`` preset on Eyeriss' 18 measured conv layers.

Reads ``../shared/data/eyeriss_jssc2017/eyeriss_layers.csv`` (Chen, Krishna, Emer, Sze, JSSC 2017, Tables V and VI:
AlexNet CONV1-5 at batch 4, VGG-16 CONV1-1 ... CONV5-3 at batch 3, transcribed; see the README there; never copied
here): per layer the measured latency, chip power, global-buffer and DRAM traffic, all per batch of ``batch_N``
images.

Each layer is priced the way a user would: its convolution, ``jax.lax.conv_general_dilated`` on 16-bit integers
(the padded input, stride, groups), captured statically (``jax.ShapeDtypeStruct``: nothing is allocated), its op
rows (the conv's GEMM view, M = N x E x F output pixels, K = C x R x S, N = filters per group, a batch of
``groups``; the operands' real shapes in ``in_shapes``) priced by ``dfit_nb.sim.cost`` on the preset, each layer
alone (its input from DRAM, its result back there), for each of the model's three dataflows. The chip runs row
stationary, which the model does not have; the headline takes per layer the fastest of ``ws``, ``os``, ``is`` (what a
mapper choosing among them would run).

Compared, like with like:

* latency: the model's seconds against ``total_latency_ms`` (with the DRAM stalls: the model's time includes its
  DRAM transfers);
* DRAM traffic: the model's DRAM bytes read and written against ``DRAM_accesses_MB`` (MB read as 10^6 bytes);
* energy: the model's energy without its DRAM level (MACs, register files, SRAM, NoC) against
  ``energy_total_mJ_derived``, the measured chip power x the total latency (the chip alone; the README says DRAM
  energy is not included).

The peer is the ideal time at the PEs the chip's mapping used (MACs / (``active_PEs_of_168`` x 200 MHz)). The
diagnostics say why the model misses: the chip's measured global-buffer bytes per processing cycle, and the model's
SRAM bytes and DRAM bytes against the measured buffer traffic and against the layer's compulsory traffic (input,
filters and output once, 2 bytes each). ``zeros_in_ifmaps`` is printed, not priced: the chip clock-gates the MACs of
zero inputs and run-length-compresses feature maps to and from DRAM; the model has neither.

Run: ``python benchmarks/bench_eyeriss.py`` (4.5-8.6 s on 2 shared cores, 2026-12-04).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import xarray as xr

import dfit_nb
from dfit_nb.sim import cost, presets
from dfit_nb.sim.calibration import metrics

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "eyeriss_jssc2017" / "eyeriss_layers.csv"
DATAFLOWS = ("ws", "os", "is")
WORD = 2  # bytes: 16-bit fixed point
#: issue 39's targets for the uncalibrated preset
TARGETS = {"latency": 0.25, "DRAM traffic": 0.25}
SPEARMAN_TARGET = 0.8


def conv_ops(row: pd.Series) -> pd.DataFrame:
    """The op rows of one layer's convolution, captured statically (16-bit integers, NHWC / HWIO)."""
    groups, stride = int(row["groups"]), int(row["stride_U"])

    def conv(x, w):
        return jax.lax.conv_general_dilated(x, w, (stride, stride), "VALID", feature_group_count=groups,
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"))

    x = jax.ShapeDtypeStruct((int(row["batch_N"]), int(row["H_in_padded"]), int(row["W_in_padded"]),
                              int(row["C_in_per_group"]) * groups), jnp.int16)
    w = jax.ShapeDtypeStruct((int(row["R"]), int(row["S"]), int(row["C_in_per_group"]), int(row["M_out_total"])),
                             jnp.int16)
    ops = dfit_nb.capture(conv, x, w).ops.to_dataframe()
    return ops[["m", "k", "n", "batch", "dtype", "in_shapes"]]


def layer_ops(data: pd.DataFrame) -> pd.DataFrame:
    """One op row per layer: each layer's captured convolution."""
    table = pd.concat([conv_ops(r) for _, r in data.iterrows()], ignore_index=True)
    if len(table) != len(data):
        raise SystemExit(f"expected one conv op per layer, captured {len(table)} for {len(data)} layers")
    return table


def compare(data: pd.DataFrame, ds: xr.Dataset, hw_name: str = "eyeriss") -> pd.DataFrame:
    """Per layer: the model's latency, DRAM bytes and chip energy (``ds``: ``cost`` of :func:`layer_ops` on
    ``hw_name`` for :data:`DATAFLOWS`; per layer the fastest), beside the measurements."""
    seconds = ds["seconds"].values  # (dataflow, op)
    best = np.argmin(seconds, axis=0)
    pick = lambda name: np.take_along_axis(ds[name].values, best[None], axis=0)[0]
    dram = sum(pick(f"dram_{x}") for x in ("reads_input", "reads_weight", "reads_output", "writes_output"))
    sram = sum(pick(f"sram_{x}") for x in ("reads_input", "reads_weight", "reads_output", "writes_output"))
    macs = pick("macs")
    compulsory = WORD * (data["batch_N"] * data["H_in_padded"] * data["W_in_padded"] * data["C_in_per_group"]
                         * data["groups"] + data["R"] * data["S"] * data["C_in_per_group"] * data["M_out_total"]
                         + data["batch_N"] * data["E_out"] * data["F_out"] * data["M_out_total"])
    clock_hz = float(presets.get(hw_name).clock_ghz) * 1e9
    return pd.DataFrame({
        "layer": data["network"] + " " + data["layer"], "N": data["batch_N"], "GMACs": macs / 1e9,
        "dataflow": [DATAFLOWS[i] for i in best],
        "model_ms": pick("seconds") * 1e3, "measured_ms": data["total_latency_ms"],
        "processing_ms": data["processing_latency_ms"],
        "ideal_ms": macs / (data["active_PEs_of_168"] * clock_hz) * 1e3,
        "model_dram_MB": dram / 1e6, "measured_dram_MB": data["DRAM_accesses_MB"],
        "compulsory_MB": compulsory / 1e6,
        "model_chip_mJ": (pick("energy_pj") - pick("energy_dram_pj")) * 1e-9,
        "measured_chip_mJ": data["energy_total_mJ_derived"],
        "model_sram_MB": sram / 1e6, "measured_glb_MB": data["global_buffer_accesses_MB"],
        "glb_B_per_cycle": data["global_buffer_accesses_MB"] * 1e6 / (data["processing_latency_ms"] * 1e-3
                                                                       * clock_hz),
        "zeros_in_ifmaps": data["zeros_in_ifmaps"], "active_PEs": data["active_PEs_of_168"],
    })


def price_layers(preset: str = "eyeriss") -> tuple[xr.Dataset, pd.DataFrame]:
    """``cost`` of the measured layers' convolutions on ``preset`` for each of :data:`DATAFLOWS`, and
    :func:`compare`'s per-layer frame."""
    data = pd.read_csv(DATA)
    ds = cost(layer_ops(data), presets.get(preset), list(DATAFLOWS))
    return ds, compare(data, ds, preset)


def summary(c: pd.DataFrame) -> dict[str, dict[str, float]]:
    """MAPE and Spearman per compared metric (and the peer's, for latency)."""
    return {
        "latency": metrics(c["model_ms"].to_numpy(), c["measured_ms"].to_numpy()),
        "DRAM traffic": metrics(c["model_dram_MB"].to_numpy(), c["measured_dram_MB"].to_numpy()),
        "chip energy": metrics(c["model_chip_mJ"].to_numpy(), c["measured_chip_mJ"].to_numpy()),
        "latency, peer (ideal at the active PEs)": metrics(c["ideal_ms"].to_numpy(), c["measured_ms"].to_numpy()),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="eyeriss", help="the preset to price the layers on (default eyeriss)")
    a = p.parse_args()
    if not DATA.is_file():
        raise SystemExit(f"{DATA} is absent: the measured Eyeriss layers live in the project's shared data folder "
                         "(../shared/data/eyeriss_jssc2017, from the JSSC 2017 paper's Tables V and VI)")
    t0 = time.perf_counter()
    ds, c = price_layers(a.preset)
    print(f"{len(c)} measured Eyeriss conv layers (JSSC 2017 Tables V-VI); preset {a.preset}, uncalibrated; "
          f"jax {jax.__version__}, dfit_nb {dfit_nb.__version__}; per layer the fastest of {', '.join(DATAFLOWS)}")
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        shown = c.drop(columns=["N", "active_PEs"]).round(2)
        print(shown.to_string(index=False))
    print("\nper metric (all 18 layers):            MAPE  Spearman  target")
    for name, m in summary(c).items():
        target = f"<= {TARGETS[name]:.0%}, >= {SPEARMAN_TARGET}" if name in TARGETS else ""
        print(f"  {name:40s} {m['mape']:6.1%}  {m['spearman']:8.3f}  {target}")
    print("one dataflow for every layer:           latency MAPE / Spearman   DRAM MAPE / Spearman")
    for df in DATAFLOWS:
        s = ds.sel(dataflow=df)
        dram = sum(s[f"dram_{x}"].values for x in ("reads_input", "reads_weight", "reads_output", "writes_output"))
        lat = metrics(s["seconds"].values * 1e3, c["measured_ms"].to_numpy())
        dm = metrics(dram / 1e6, c["measured_dram_MB"].to_numpy())
        print(f"  {df:38s} {lat['mape']:6.1%} / {lat['spearman']:.3f}          "
              f"{dm['mape']:6.1%} / {dm['spearman']:.3f}")
    print(f"\ntotal run time {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
