"""Checked against real tiled mesh chips: ``tt_wormhole_n150`` and ``tt_blackhole_p150`` on 351 measured GEMMs.

Reads ``../shared/data/tenstorrent_gemm/tenstorrent_gemm.csv`` (tt-metal's GEMM_FLOPS tech report, transcribed: per
GEMM the device kernel time on a Wormhole n150 or a Blackhole p150, with trace replay; see the README there; never
copied here). The target is ``device_kernel_time_ns_derived`` (the ideal time over the device utilisation the
on-device profiler reported).

Each row is a program choice on a fixed machine, priced with the model as it is:

* the core grid (``8x8`` on Wormhole; ``13x10`` or ``11x10`` on Blackhole): ``tile_cols`` x ``tile_rows``;
* the math fidelity: the matrix engine takes 16 / 32 / 64 cycles per 32x32x32 tile at LoFi / HiFi2 / HiFi4, i.e.
  32 x 32 x 32 / cycles MACs per cycle: ``pe_rows`` = 1,024 / cycles (64 / 32 / 16) beside 32 ``pe_cols``;
* the dtype's bytes per element, shared exponents included (tt-metal ``tt_metal/api/tt-metalium/constants.hpp``:
  a BFLOAT8_B tile is 1,024 + 64 bytes, a BFLOAT4_B tile 512 + 64): 2, 1.0625 and 0.5625. The operands' and the
  result's bytes go in as the op table's ``in_shapes`` (byte arrays) and ``bytes_written``; the word the PE array
  and the SRAM hold is the dtype's (2 bytes for BFLOAT16; 1 byte for both block floats: a word is a whole number of
  bytes in the model, so BFLOAT4_B's half-byte mantissas count as one byte on chip).

The dataflow is output-stationary (``os``), what a Tensix core does: each core accumulates its block of the output
in place while K streams past. What the model cannot say: that an operand or the result already sits in L1
(``in0_storage = L1``, sharded): every row is priced as if each operand came from DRAM and the result went back
to it; the L1-sharded rows are reported apart to show what that costs.

Fit on one part, report on the part not fitted: per board, the default fields of ``dfit_nb.sim.calibrate`` (clock,
DRAM rate and latency, memory overlap, per-op overhead, short-reduction cost) are fitted on a seeded half of the
rows (``stratified_split``, half of each config x placement x size range), by the calibration's own optimiser
(BFGS on the log error through ``dfit_nb.sim.calibration.predictor``) over every row at once: one calibrate() call
fits one machine, and these rows run on machines that differ per row (grid, fidelity), so the loss sums one
predictor per (grid, fidelity) group, each on the fitted machine with that group's grid and PE rows. Reported on
the held-out half: MAPE and Spearman, by config, by placement, by size range, pooled, for the preset, the
calibrated machine, the ideal time as published (the peer the data allows: MKN / 32^3 x cycles per tile / cores /
clock), and that ideal time over one utilisation fitted on the same half (a factor, least squares in log space).

Run: ``python benchmarks/bench_tenstorrent.py [--seed 0]`` (4 minutes on 2 shared cores nearly idle, 7-12 beside
other jobs: Wormhole's calibration 26-186 s, Blackhole's 197-536 s, most of it compiling the loss; no row is
subsampled).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

import dfit_nb
from dfit_nb.sim import presets
from dfit_nb.sim.calibration import DEFAULT_FIELDS, _bounds, _fit, metrics, predict, predictor, stratified_split

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "tenstorrent_gemm" / "tenstorrent_gemm.csv"
PRESETS = {"N150": "tt_wormhole_n150", "P150": "tt_blackhole_p150"}
#: cycles per 32x32x32 tile per core (tt-metal GEMM_FLOPS report); the PE rows of a 32-column array at that rate
CYCLES_PER_TILE = {"LoFi": 16, "HiFi2": 32, "HiFi3": 48, "HiFi4": 64}
#: bytes per element with the shared exponents (tt-metal constants.hpp: BFLOAT8_B_TILE_HW = 1,024 + 64 bytes per
#: 32x32 tile, BFLOAT4_B_TILE_HW = 512 + 64), and the dtype whose word the PE array and SRAM hold
BYTES_PER_ELEMENT = {"BFLOAT16": 2.0, "BFLOAT8_B": 1088 / 1024, "BFLOAT4_B": 576 / 1024}
WORD_DTYPE = {"BFLOAT16": "bfloat16", "BFLOAT8_B": "float8_e4m3fn", "BFLOAT4_B": "float8_e4m3fn"}
#: size ranges by MACs (M x K x N)
SIZES = ((0, 10**9.5, "MACs < 3.2e9"), (10**9.5, 10**10.5, "MACs 3.2e9-3.2e10"), (10**10.5, np.inf, "MACs > 3.2e10"))
DATAFLOW = "os"


def load() -> pd.DataFrame:
    d = pd.read_csv(DATA)
    d["m"], d["k"], d["n"] = d["M"], d["K"], d["N"]
    d["time_s"] = d["device_kernel_time_ns_derived"] * 1e-9
    d["ideal_s"] = d["ideal_time_ns_derived"] * 1e-9
    macs = d["m"].astype(float) * d["k"] * d["n"]
    d["size"] = [next(label for lo, hi, label in SIZES if lo <= x < hi) for x in macs]
    d["placement"] = np.where(d["in0_storage"] == "L1", "L1 (in0, out sharded)", "DRAM")
    cols = d["grid"].str.split("x", expand=True).astype(int)
    d["tile_cols"], d["tile_rows"] = cols[0], cols[1]
    d["pe_rows"] = 1024 // d["math_fidelity"].map(CYCLES_PER_TILE)
    return d.reset_index(drop=True)


def ops_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The model's op table of ``rows``: the GEMM view, the word's dtype, and each operand's and the result's bytes
    in the row's dtype (block floats with their shared exponents)."""
    per = rows["dtype"].map(BYTES_PER_ELEMENT).to_numpy()
    m, k, n = (rows[c].to_numpy(np.int64) for c in ("m", "k", "n"))
    lhs, rhs = np.ceil(m * k * per).astype(np.int64), np.ceil(k * n * per).astype(np.int64)
    return pd.DataFrame({"m": m, "k": k, "n": n, "dtype": rows["dtype"].map(WORD_DTYPE).to_numpy(),
                         "in_shapes": [f"uint8[{a}] uint8[{b}]" for a, b in zip(lhs, rhs, strict=True)],
                         "bytes_written": np.ceil(m * n * per)})


def machine_of(hw, tile_cols: int, tile_rows: int, pe_rows: int):
    """``hw`` on a row's core grid at its fidelity's matrix rate (a program choice: the same chip)."""
    return hw.replace(tile_cols=tile_cols, tile_rows=tile_rows, pe_rows=pe_rows)


def groups(rows: pd.DataFrame) -> list[tuple[tuple[int, int, int], np.ndarray]]:
    keys = rows[["tile_cols", "tile_rows", "pe_rows"]].itertuples(index=False, name=None)
    out: dict[tuple[int, int, int], list[int]] = {}
    for i, key in enumerate(keys):
        out.setdefault(tuple(int(v) for v in key), []).append(i)
    return [(key, np.array(idx)) for key, idx in out.items()]


def predicted(rows: pd.DataFrame, hw) -> np.ndarray:
    """Seconds of every row on ``hw`` set to the row's grid and fidelity."""
    ops, out = ops_table(rows), np.empty(len(rows))
    for (tc, tr, pr), idx in groups(rows):
        out[idx] = predict(ops.iloc[idx], machine_of(hw, tc, tr, pr), DATAFLOW)["seconds"]
    return out


def calibrate_rows(rows: pd.DataFrame, hw, fields=DEFAULT_FIELDS):
    """``hw``'s ``fields`` fitted on ``rows`` (pass the fitted half only: the model then prices no held-out row per
    step), each priced on its own grid and fidelity: the loss of ``dfit_nb.sim.calibrate`` (mean squared log error,
    BFGS, bounds a factor 20 around the preset) over one predictor per (grid, fidelity) group.
    Returns ``(fitted machine, converged, final loss, BFGS status)``."""
    rows = rows.reset_index(drop=True)
    ops = ops_table(rows)
    parts = [(key, idx, predictor(ops.iloc[idx], machine_of(hw, *key), DATAFLOW)) for key, idx in groups(rows)]
    order = np.argsort(np.concatenate([idx for _, idx, _ in parts]))

    def seconds_of(h):
        # the traced machine on each group's grid and PE rows (dataclasses.replace: the fitted fields are traced,
        # which Hardware.replace's checks skip anyway)
        pieces = [f(dataclasses.replace(h, tile_cols=tc, tile_rows=tr, pe_rows=pr))["seconds"]
                  for (tc, tr, pr), _, f in parts]
        return jnp.concatenate(pieces)[order]

    y = np.log(rows["time_s"].to_numpy(np.float64))
    every = np.ones(len(rows), bool)
    return _fit(seconds_of, y, every, hw, tuple(fields), _bounds(hw, fields, None), 200)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if not DATA.is_file():
        raise SystemExit(f"{DATA} is absent: the measured Tenstorrent GEMMs live in the project's shared data folder "
                         "(../shared/data/tenstorrent_gemm, from tt-metal's GEMM_FLOPS tech report)")
    t_start = time.perf_counter()
    data = load()
    print(f"{len(data)} measured GEMMs (tt-metal GEMM_FLOPS, trace replay; target device_kernel_time_ns_derived); "
          f"jax {jax.__version__}, dfit_nb {dfit_nb.__version__}; dataflow {DATAFLOW}; split seed {a.seed}")
    for board, name in PRESETS.items():
        rows = data[data["board"] == board].reset_index(drop=True)
        hw = presets.get(name)
        strata = (rows["config"] + "|" + rows["placement"] + "|" + rows["size"]).to_numpy()
        fit = stratified_split(strata, 0.5, a.seed)
        t0 = time.perf_counter()
        cal_hw, converged, loss, _ = calibrate_rows(rows[fit], hw)
        took = time.perf_counter() - t0
        meas = rows["time_s"].to_numpy()
        ideal = rows["ideal_s"].to_numpy()
        # the peer: the published ideal time, and that time over one utilisation fitted on the same half (the
        # geometric mean of measured / ideal: the least-squares factor in log space, the calibration's loss)
        utilisation = float(np.exp(-np.mean(np.log(meas[fit] / ideal[fit]))))
        preds = {f"{name} preset": predicted(rows, hw), "calibrated": predicted(rows, cal_hw),
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
        selections += [(f"dtype {c}", (rows["dtype"] == c).to_numpy()) for c in BYTES_PER_ELEMENT]
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
            f"{rows['m'][j]}x{rows['k'][j]}x{rows['n'][j]} {rows['dtype'][j]} {rows['math_fidelity'][j]} "
            f"{rows['placement'][j].split()[0]} {rows['grid'][j]} {ratio[j]:.2f}x" for j in worst))
    print(f"\ntotal run time {time.perf_counter() - t_start:.1f} s")


if __name__ == "__main__":
    main()
