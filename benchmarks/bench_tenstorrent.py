"""Checked against real tiled mesh chips: ``tt_wormhole_n150`` and ``tt_blackhole_p150`` on 351 measured GEMMs.

Reads ``../shared/data/tenstorrent_gemm/tenstorrent_gemm.csv`` (tt-metal's GEMM_FLOPS tech report, transcribed: per
GEMM the device kernel time on a Wormhole n150 or a Blackhole p150, with trace replay; see the README there; never
copied here). The target is ``device_kernel_time_ns_derived`` (the ideal time over the device utilisation the
on-device profiler reported).

Each row's settings are columns of one ``dfit_nb.sim.calibrate`` call per board (issue 39's per-row columns):

* the core grid (``8x8`` on Wormhole; ``13x10`` or ``11x10`` on Blackhole): ``tile_cols`` and ``tile_rows``,
  Hardware fields set per row (each grid's rows priced on the machine with that grid);
* the math fidelity (LoFi, HiFi2, HiFi4): ``math_fidelity``, passes through the matrix engine (the presets' 64x32
  array is the one-pass rate, 16 cycles per 32x32x32 tile);
* the dtype: ``bfloat16``, ``bfp8``, ``bfp4`` (BFLOAT8_B, BFLOAT4_B: 1.0625 and 0.5625 bytes per element with
  their shared exponents, tt-metal ``tt_metal/api/tt-metalium/constants.hpp``);
* where the operands live: ``a_on_chip`` and ``out_on_chip`` for the rows whose in0 and output are sharded in L1
  (``in0_storage = L1``), ``b_on_chip`` for in1 in L1 (no row has it): no DRAM traffic for them.
  ``--dram-only`` drops those columns, pricing every row as if each operand came from DRAM and the result went
  back to it, to show what the placement changes.

The dataflow is output-stationary (``os``), what a Tensix core does: each core accumulates its block of the output
in place while K streams past.

Fit on one part, report on the part not fitted: per board, the default fields of ``dfit_nb.sim.calibrate`` (clock,
DRAM rate and latency, memory overlap, per-op overhead, short-reduction cost) are fitted on a seeded half of the
rows (``bucket`` = config x placement x size range: ``calibrate`` fits half of each), every row on its own grid.
Reported on the held-out half: MAPE and Spearman, by config, by placement, by size range, pooled, for the preset,
the calibrated machine, the ideal time as published (the peer the data allows: MKN / 32^3 x cycles per tile /
cores / clock), and that ideal time over one utilisation fitted on the same half (a factor, least squares in log
space).

Run: ``python benchmarks/bench_tenstorrent.py [--seed 0] [--dram-only]`` (41 s on 2 shared cores at a load average
of about 7: Wormhole's calibration 27 s, Blackhole's 14 s; no row is subsampled).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pandas as pd

import dfit_nb
from dfit_nb.sim import presets
from dfit_nb.sim.calibration import DEFAULT_FIELDS, DEFAULT_LOSS, calibrate, metrics

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "tenstorrent_gemm" / "tenstorrent_gemm.csv"
PRESETS = {"N150": "tt_wormhole_n150", "P150": "tt_blackhole_p150"}
#: the report's dtypes as dfit_nb names them
DTYPES = {"BFLOAT16": "bfloat16", "BFLOAT8_B": "bfp8", "BFLOAT4_B": "bfp4"}
#: cycles per 32x32x32 tile per core at each fidelity (the report's; the ideal time's)
CYCLES_PER_TILE = {"LoFi": 16, "HiFi2": 32, "HiFi3": 48, "HiFi4": 64}
#: size ranges by MACs (M x K x N)
SIZES = ((0, 10**9.5, "MACs < 3.2e9"), (10**9.5, 10**10.5, "MACs 3.2e9-3.2e10"), (10**10.5, np.inf, "MACs > 3.2e10"))
DATAFLOW = "os"


def load() -> pd.DataFrame:
    d = pd.read_csv(DATA)
    d["time_s"] = d["device_kernel_time_ns_derived"] * 1e-9
    d["ideal_s"] = d["ideal_time_ns_derived"] * 1e-9
    macs = d["M"].astype(float) * d["K"] * d["N"]
    d["size"] = [next(label for lo, hi, label in SIZES if lo <= x < hi) for x in macs]
    d["placement"] = np.where(d["in0_storage"] == "L1", "L1 (in0, out sharded)", "DRAM")
    return d.reset_index(drop=True)


def measured(rows: pd.DataFrame, dram_only: bool = False) -> pd.DataFrame:
    """``rows`` as ``calibrate`` reads them: shapes, time, and each row's settings as columns."""
    cols = rows["grid"].str.split("x", expand=True).astype(int)
    out = pd.DataFrame({"m": rows["M"], "k": rows["K"], "n": rows["N"], "dtype": rows["dtype"].map(DTYPES),
                        "math_fidelity": rows["math_fidelity"], "tile_cols": cols[0], "tile_rows": cols[1],
                        "time_s": rows["time_s"],
                        "bucket": rows["config"] + "|" + rows["placement"] + "|" + rows["size"]})
    if not dram_only:
        for column, storage in (("a_on_chip", "in0_storage"), ("b_on_chip", "in1_storage"),
                                ("out_on_chip", "out_storage")):
            out[column] = (rows[storage] == "L1").to_numpy()
    return out.reset_index(drop=True)


def calibrate_board(data: pd.DataFrame, board: str, seed: int, dram_only: bool = False, loss: str = DEFAULT_LOSS
                    ) -> tuple[pd.DataFrame, Any, Any, float]:
    """One board's rows of ``data``, its preset, ``calibrate``'s result on a seeded half (every row on its own grid,
    fidelity, dtype and placement; ``loss`` minimised) and the calibration's seconds."""
    rows = data[data["board"] == board].reset_index(drop=True)
    hw = presets.get(PRESETS[board])
    t0 = time.perf_counter()
    cal = calibrate(measured(rows, dram_only), hw, DEFAULT_FIELDS, DATAFLOW, seed=seed, loss=loss)
    return rows, hw, cal, time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dram-only", action="store_true",
                   help="price every row as if its operands came from DRAM and its result went back (no placement)")
    a = p.parse_args()
    if not DATA.is_file():
        raise SystemExit(f"{DATA} is absent: the measured Tenstorrent GEMMs live in the project's shared data folder "
                         "(../shared/data/tenstorrent_gemm, from tt-metal's GEMM_FLOPS tech report)")
    t_start = time.perf_counter()
    data = load()
    print(f"{len(data)} measured GEMMs (tt-metal GEMM_FLOPS, trace replay; target device_kernel_time_ns_derived); "
          f"jax {jax.__version__}, dfit_nb {dfit_nb.__version__}; dataflow {DATAFLOW}; split seed {a.seed}"
          + ("; placement ignored (--dram-only)" if a.dram_only else ""))
    for board, name in PRESETS.items():
        rows, hw, cal, took = calibrate_board(data, board, a.seed, a.dram_only)
        cal_hw, converged, loss = cal.hw, cal.converged, cal.loss
        fit = cal.rows["fitted"].values.astype(bool)
        meas = rows["time_s"].to_numpy()
        ideal = rows["ideal_s"].to_numpy()
        # the peer: the published ideal time, and that time over one utilisation fitted on the same half (the
        # geometric mean of measured / ideal: the least-squares factor in log space, the calibration's loss)
        utilisation = float(np.exp(-np.mean(np.log(meas[fit] / ideal[fit]))))
        preds = {f"{name} preset": cal.rows["base_predicted_s"].values, "calibrated": cal.rows["predicted_s"].values,
                 "ideal time (published)": ideal, f"ideal / {utilisation:.3f} (fitted)": ideal / utilisation}
        every = metrics(preds[f"{name} preset"], meas)
        print(f"\n{board} ({rows['chip'].iloc[0]}, grids {', '.join(sorted(rows['grid'].unique()))}): {len(rows)} "
              f"rows, {int(fit.sum())} fitted, {int((~fit).sum())} held out; calibration {took:.1f} s, converged "
              f"{converged}, loss {loss:.4f}")
        print(f"uncalibrated {name} on all {len(rows)} rows: MAPE {every['mape']:.1%}, Spearman "
              f"{every['spearman']:.3f}")
        print("fitted: " + ", ".join(f"{f} {float(np.asarray(getattr(hw, f))):.5g} -> "
                                     f"{float(np.asarray(getattr(cal_hw, f))):.5g}" for f in DEFAULT_FIELDS))
        print(f"  {'held-out rows':34s} {'rows':>4s}  " + "  ".join(f"{k[:24]:>24s}" for k in preds))
        print(f"  {'':34s} {'':>4s}  " + "  ".join(f"{'MAPE':>16s} {'Spearman':>7s}" for _ in preds))
        selections = [("pooled", np.ones(len(rows), bool))]
        selections += [(f"config {c}", (rows["config"] == c).to_numpy()) for c in ("out_of_box", "manually_tuned")]
        selections += [(f"placement {c}", (rows["placement"] == c).to_numpy())
                       for c in sorted(rows["placement"].unique())]
        selections += [(label, (rows["size"] == label).to_numpy()) for _, _, label in SIZES]
        selections += [(f"dtype {c}", (rows["dtype"] == c).to_numpy()) for c in DTYPES]
        selections += [(f"fidelity {c}", (rows["math_fidelity"] == c).to_numpy())
                       for c in CYCLES_PER_TILE if (rows["math_fidelity"] == c).any()]
        selections += [(f"grid {c}", (rows["grid"] == c).to_numpy()) for c in sorted(rows["grid"].unique())]
        for label, sel in selections:
            sel = sel & ~fit
            cells = []
            for pred in preds.values():
                m = metrics(pred[sel], meas[sel])
                cells.append(f"{m['mape']:16.1%} {m['spearman']:7.3f}")
            print(f"  {label:34s} {int(sel.sum()):4d}  " + "  ".join(cells))
        ratio = preds["calibrated"] / meas
        worst = np.argsort(-np.abs(np.log(ratio)) * ~fit)[:5]
        print("  worst held-out rows, calibrated: " + "; ".join(
            f"{rows['M'][j]}x{rows['K'][j]}x{rows['N'][j]} {rows['dtype'][j]} {rows['math_fidelity'][j]} "
            f"{rows['placement'][j].split()[0]} {rows['grid'][j]} {ratio[j]:.2f}x" for j in worst))
    print(f"\ntotal run time {time.perf_counter() - t_start:.1f} s")


if __name__ == "__main__":
    main()
