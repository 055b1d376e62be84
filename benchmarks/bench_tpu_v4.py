"""Checked against a real chip: the ``tpu_v4`` preset and a calibrated machine against 1,198 measured TPU v4 matmuls.

Reads ``../shared/data/tpu_v4_matmul/`` (measured float16 ``jnp.matmul`` fusion times on a Cloud TPU v4, from the
public SCALE-Sim-validation project; see the README there). Prints, per size range (the data's three files: 32-128,
128-1024, 1024-4096 per dimension) and pooled, on the held-out half of a stratified split (seeded, printed):
Pearson, Spearman and MAPE for (1) the uncalibrated ``tpu_v4`` preset, (2) the machine calibrated by gradient
through the model on the other half (``dfit_nb.sim.calibrate``), (3) the peer's ``scale_sim_cycles`` after its own
least-squares line (time = a x cycles + b) fitted on the same half, and (4), for reference, a least-squares line
of time on min(M, N), max(M, N) and K per range on the same half: how much of a range's order a smooth function of
the shape captures at all. Then the calibrated machine on the 100 unaligned large matmuls it never saw.
Run: ``python benchmarks/bench_tpu_v4.py [--seed 0]``.
"""

from __future__ import annotations

import argparse
import ast
import time
from pathlib import Path

import numpy as np
import pandas as pd

from dfit_nb.sim import presets
from dfit_nb.sim.calibration import DEFAULT_FIELDS, DEFAULT_LOSS, calibrate, metrics, predict, stratified_split

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "tpu_v4_matmul"
RANGES = {"128": "32-128", "1024": "128-1024", "4096": "1024-4096"}


def load() -> pd.DataFrame:
    parts = []
    for key, label in RANGES.items():
        d = pd.read_csv(DATA / f"fusion_statistics_report_with_scale_sim_{key}.csv")
        parts.append(pd.DataFrame({"m": d["dim_m"], "k": d["dim_k"], "n": d["dim_n"], "dtype": "float16",
                                   "time_us": d["fusion_avg"], "bucket": label,
                                   "scale_sim_cycles": d["scale_sim_cycles"]}))
    return pd.concat(parts, ignore_index=True)


def calibrate_grid(rows: pd.DataFrame, hw, fields, dataflow, seed: int, loss: str = DEFAULT_LOSS
                   ) -> tuple[object, float]:
    """``calibrate`` on a seeded half of the grid's matmuls (half of each size range), ``loss`` minimised; and its
    seconds."""
    t0 = time.perf_counter()
    cal = calibrate(rows.drop(columns=["scale_sim_cycles"]), hw, list(fields), dataflow, seed=seed, loss=loss)
    return cal, time.perf_counter() - t0


def load_unaligned() -> tuple[pd.DataFrame, np.ndarray, float]:
    """The 100 unaligned large matmuls as op rows, their measured seconds, and the peer's own fitted model's MAPE
    on them (its figure, from the data)."""
    big = pd.read_csv(DATA / "large_unaligned_verification.csv")
    shapes = [ast.literal_eval(s) for s in big["Input_Shapes"]]
    ops = pd.DataFrame({"m": [s[0][0] for s in shapes], "k": [s[0][1] for s in shapes],
                        "n": [s[1][1] for s in shapes], "dtype": ["float16"] * len(shapes)})
    return ops, big["Actual_Duration_us"].to_numpy() * 1e-6, float(np.mean(np.abs(big["Error_Percentage"]))) / 100


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fields", default=",".join(DEFAULT_FIELDS))
    p.add_argument("--dataflow", default="ws,is", help="one dataflow, or several: per op the fastest")
    a = p.parse_args()
    if not DATA.is_dir():
        raise SystemExit(f"{DATA} is absent: the measured TPU v4 matmuls live in the project's shared data folder")
    rows = load()
    hw = presets.get("tpu_v4")
    dataflow = a.dataflow.split(",") if "," in a.dataflow else a.dataflow
    cal, took = calibrate_grid(rows, hw, a.fields.split(","), dataflow, a.seed)
    fit = cal.rows["fitted"].values
    assert (fit == stratified_split(rows["bucket"].to_numpy(), 0.5, a.seed)).all()
    measured = rows["time_us"].to_numpy() * 1e-6
    # the peer's own metric: a least-squares line of time against its cycles, fitted on the same rows
    cyc = rows["scale_sim_cycles"].to_numpy(np.float64)
    slope, intercept = np.polyfit(cyc[fit], measured[fit], 1)
    peer = slope * cyc + intercept
    # a reference for how much of each range's order any smooth function of the shape captures: a least-squares
    # line of time on min(M, N), max(M, N) and K, fitted per range on the same rows (not a model of the chip)
    m, n, k = (rows[c].to_numpy(np.float64) for c in ("m", "n", "k"))
    features = np.column_stack([np.ones_like(m), np.minimum(m, n), np.maximum(m, n), k])
    ceiling = np.empty_like(measured)
    for bucket in RANGES.values():
        inside = rows["bucket"].to_numpy() == bucket
        coef = np.linalg.lstsq(features[inside & fit], measured[inside & fit], rcond=None)[0]
        ceiling[inside] = features[inside] @ coef
    preds = {"tpu_v4 preset": cal.rows["base_predicted_s"].values, "calibrated": cal.rows["predicted_s"].values,
             "SCALE-Sim cycles + LS line": peer, "shape LS line (reference)": ceiling}
    print(f"{len(rows)} measured matmuls; split seed {a.seed}: {int(fit.sum())} fitted, {int((~fit).sum())} held out "
          f"(half of each size range); calibration {took:.1f} s (compile included), converged {cal.converged}")
    print("fitted: " + ", ".join(f"{f} {float(np.asarray(getattr(hw, f))):.5g} -> "
                                 f"{float(np.asarray(getattr(cal.hw, f))):.5g}" for f in cal.fields))
    print(f"{'held-out rows':14s} {'model':28s} {'Pearson':>8s} {'Spearman':>9s} {'MAPE':>8s}")
    for bucket in [*RANGES.values(), "pooled"]:
        sel = ~fit & ((rows["bucket"].to_numpy() == bucket) if bucket != "pooled" else True)
        for name, pred in preds.items():
            m = metrics(pred[sel], measured[sel])
            print(f"{bucket:14s} {name:28s} {m['pearson']:8.3f} {m['spearman']:9.3f} {m['mape']:8.1%}")
    ops, y, peer_mape = load_unaligned()
    for name, machine in (("tpu_v4 preset", hw), ("calibrated", cal.hw)):
        m = metrics(predict(ops, machine, dataflow)["seconds"], y)
        print(f"{'unaligned 100':14s} {name:28s} {m['pearson']:8.3f} {m['spearman']:9.3f} {m['mape']:8.1%}")
    print(f"{'unaligned 100':14s} {'peer unified model (theirs)':28s} {'':>8s} {'':>9s} {peer_mape:8.1%}")


if __name__ == "__main__":
    main()
