"""Checked against a real chip's fused programs: the ``tpu_v6e`` preset on 454 TPU v6e GEMMs and 89 fused FFNs.

Reads ``../shared/data/tpu_v6e/tpu_v6e_gemm_ffn.csv`` (measured device time per program on a Cloud TPU v6e, from
the PyTorchSim project's validation set; see the README there; never copied here). Two kinds of programs:

* ``gemm_MxKxN``: one bf16 linear layer [M, K] x [K, N] (M = 1 ... 98,304 tokens, K and N from real LLM and
  encoder weights): one kernel;
* ``ffn_gated_SxHxI``: a decoder FFN as one program, ``(silu(x @ w_gate) * (x @ w_up)) @ w_down`` with the gate
  and up projections as one [H, 2I] GEMM, and ``ffn_erf_SxHxI``: an encoder FFN, ``gelu_erf(x @ w1 + b1) @ w2 +
  b2``. Each is several kernels, so these rows check what the kernels (``dfit_nb.sim.kernels``) do to the time:
  an epilogue hidden under its GEMM, intermediates that stay on chip, one launch per kernel.

Each FFN is captured statically (``jax.ShapeDtypeStruct``, bf16, nothing allocated) and replayed per
``fusion=`` mode; the GEMMs are priced alone (``dfit_nb.sim.calibration.predict``, as ``cost`` prices them).
The dataflow is the faster of ``ws`` and ``is`` (a compiler picks which operand stays in the array by
transposing the product) per GEMM, and per FFN program the faster replay of the two.

Fit on one part, report on the part not fitted: ``calibrate`` fits the default fields (clock, DRAM rate and
latency, memory overlap, per-kernel overhead) on a seeded half of the GEMMs (stratified by M range), and the
calibrated machine is reported on the held-out GEMMs and on every FFN program (none of which it saw). Then the
vector unit's fields (``vector_rate``, ``transcendental_cycles``, ``vector_overlap``) are fitted on a seeded half of
the FFN programs, from the GEMM-calibrated machine, and reported on the other half. Printed:
MAPE, Spearman and the worst rows, per part, for the preset and the calibrated machine, and per fusion mode for
the FFNs; the FFNs' kernels and launch share.

Run: ``python benchmarks/bench_tpu_v6e.py [--seed 0]`` (4.5-9 minutes on 2 shared cores: 270 s alone, 537 s beside a
test run).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from bench_kernels import tpu_device  # one way to reach a TPU topology for both scripts
from scipy.stats import spearmanr

import dfit_nb
from dfit_nb.sim import presets
from dfit_nb.sim.calibration import DEFAULT_FIELDS, DEFAULT_LOSS, calibrate, predict

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "tpu_v6e" / "tpu_v6e_gemm_ffn.csv"
BF16 = jnp.bfloat16
# M ranges the split is stratified by: decode (1-32), short prefill, long prefill
#: the vector unit's fields, fitted on the FFN programs
VECTOR_FIELDS = ("vector_rate", "transcendental_cycles", "vector_overlap")
RANGES = ((0, 32, "M 1-32"), (33, 4096, "M 33-4096"), (4097, 10**9, "M > 4096"))  # the groups issue 39 names


def load() -> tuple[pd.DataFrame, pd.DataFrame]:
    d = pd.read_csv(DATA)
    d["time_s"] = d["latency_ns"] * 1e-9
    gemm = d[d["workload"].str.startswith("gemm_")].copy()
    dims = gemm["workload"].str.extract(r"gemm_(\d+)x(\d+)x(\d+)").astype(int)
    gemm["m"], gemm["k"], gemm["n"] = dims[0], dims[1], dims[2]
    gemm["dtype"] = "bfloat16"  # the README: labelled float16, run in bfloat16
    gemm["bucket"] = [next(label for lo, hi, label in RANGES if lo <= m <= hi) for m in gemm["m"]]
    ffn = d[d["workload"].str.startswith("ffn_")].copy()
    parts = ffn["workload"].str.extract(r"ffn_(gated|erf)_(\d+)x(\d+)x(\d+)")
    ffn["kind"], ffn["s"], ffn["h"], ffn["i"] = parts[0], parts[1].astype(int), parts[2].astype(int), \
        parts[3].astype(int)
    return gemm.reset_index(drop=True), ffn.reset_index(drop=True)


def gated_ffn(x, w_gate_up, w_down):
    gate, up = jnp.split(x @ w_gate_up, 2, axis=-1)
    return (jax.nn.silu(gate) * up) @ w_down


def erf_ffn(x, w1, b1, w2, b2):
    # the measured programs are PyTorch's: torch.nn.GELU is x * (1 + erf(x / sqrt 2)) / 2, an erf (one polynomial
    # per element in XLA). jax.nn.gelu(approximate=False) is the same function written with erfc, which XLA expands
    # into a longer chain (its cost analysis: 60 flops and a transcendental per element against erf's one
    # transcendental), so it is not the program the chip ran.
    h = x @ w1 + b1
    return (h * (1 + jax.lax.erf(h * jnp.asarray(0.5**0.5, h.dtype))) / 2) @ w2 + b2


def ffn_program(kind: str, s: int, h: int, i: int) -> tuple[object, tuple[object, ...]]:
    spec = lambda *shape: jax.ShapeDtypeStruct(shape, BF16)
    if kind == "gated":
        return gated_ffn, (spec(s, h), spec(h, 2 * i), spec(i, h))
    return erf_ffn, (spec(s, h), spec(h, i), spec(i), spec(i, h), spec(h))


def scores(pred: np.ndarray, meas: np.ndarray) -> tuple[float, float]:
    return float(np.mean(np.abs(pred - meas) / meas)), float(spearmanr(pred, meas).statistic)


def calibrate_gemms(gemm: pd.DataFrame, hw, seed: int, loss: str = DEFAULT_LOSS) -> tuple[object, float]:
    """``calibrate`` on a seeded half of the GEMMs (half of each M range), the default fields, the faster of ``ws``
    and ``is`` per GEMM, ``loss`` minimised; and its seconds."""
    t0 = time.perf_counter()
    cal = calibrate(gemm[["m", "k", "n", "dtype", "bucket", "time_s"]], hw, list(DEFAULT_FIELDS), ["ws", "is"],
                    seed=seed, loss=loss)
    return cal, time.perf_counter() - t0


def capture_ffns(ffn: pd.DataFrame, device=None) -> list:
    """Each FFN program captured statically (bf16, nothing allocated); lowered for ``device`` where one is given
    (its XLA fusions then are that compiler's)."""
    traces = []
    for r in ffn.itertuples():
        fn, args = ffn_program(r.kind, r.s, r.h, r.i)
        traces.append(dfit_nb.capture(fn, *args) if device is None else dfit_nb.capture(fn, *args, lower_for=device))
    return traces


def replay_ffns(traces: list, hw, fusion: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per FFN program: the faster replayed latency of ws and is, its launching kernels and launch share."""
    secs, kernels, share = [], [], []
    for t in traces:
        runs = [dfit_nb.replay(t, hw, df, fusion=fusion) for df in ("ws", "is")]
        run = min(runs, key=lambda r: float(r.summary["latency_s"]))
        ops = run.ops
        secs.append(float(run.summary["latency_s"]))
        launching = ops["kernel"].values[ops["launch_cycles"].values > 0]
        kernels.append(len(np.unique(launching)))
        share.append(float(ops["launch_cycles"].sum()) / float(run.summary["latency_cycles"]))
    return np.array(secs), np.array(kernels), np.array(share)


def report(label: str, pred: np.ndarray, meas: np.ndarray, names: pd.Series, worst: int = 3) -> None:
    mape, rho = scores(pred, meas)
    ratio = pred / meas
    order = np.argsort(-np.abs(np.log(ratio)))[:worst]
    far = ", ".join(f"{names.iloc[j]} {ratio[j]:.2f}x" for j in order)
    print(f"  {label:38s} rows {len(meas):4d}  MAPE {mape:7.1%}  Spearman {rho:6.3f}  worst: {far}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tpu", metavar="TOPOLOGY", default=None,
                   help="also lower each FFN for this TPU topology (v6e:2x2) with libtpu and replay it with XLA:TPU's "
                        "own fusions (fusion='compiler'); see bench_kernels.py --tpu")
    a = p.parse_args()
    device = tpu_device(a.tpu) if a.tpu else None
    if not DATA.is_file():
        raise SystemExit(f"{DATA} is absent: the measured TPU v6e programs live in the project's shared data folder")
    t_start = time.perf_counter()
    gemm, ffn = load()
    hw = presets.get("tpu_v6e")
    print(f"tpu_v6e preset vs {len(gemm)} measured GEMMs and {len(ffn)} fused FFN programs "
          f"({(ffn['kind'] == 'gated').sum()} gated SiLU, {(ffn['kind'] == 'erf').sum()} erf-GELU); jax "
          f"{jax.__version__}, dfit_nb {dfit_nb.__version__}")
    cal, took = calibrate_gemms(gemm, hw, a.seed)
    print(f"calibrated on {int(cal.rows['fitted'].sum())} GEMMs (seed {a.seed}, half of each M range) in "
          f"{took:.1f} s, converged {cal.converged}")
    print("fitted: " + ", ".join(f"{f} {float(np.asarray(getattr(hw, f))):.5g} -> "
                                 f"{float(np.asarray(getattr(cal.hw, f))):.5g}" for f in cal.fields))
    fit = cal.rows["fitted"].values
    meas = gemm["time_s"].to_numpy()
    print("\nGEMMs (one kernel each), held out:")
    for bucket in [label for _, _, label in RANGES] + ["pooled"]:
        sel = ~fit & ((gemm["bucket"] == bucket).to_numpy() if bucket != "pooled" else True)
        for name, machine in (("preset", hw), ("calibrated on GEMMs", cal.hw)):
            pred = predict(gemm[sel], machine, ["ws", "is"])["seconds"]
            report(f"{bucket}, {name}", pred, meas[sel], gemm["workload"][sel])

    t0 = time.perf_counter()
    traces = capture_ffns(ffn)
    tpu_traces = capture_ffns(ffn, device) if device is not None else []
    print(f"\nFFN programs: captured {len(traces)} in {time.perf_counter() - t0:.1f} s; "
          f"none was fitted (the calibration saw GEMMs only)")
    f_meas = ffn["time_s"].to_numpy()
    for kind in ("gated", "erf", "all"):
        sel = (ffn["kind"] == kind).to_numpy() if kind != "all" else np.ones(len(ffn), bool)
        print(f" {kind}:")
        for fusion in ("rules", "compiler", "none"):
            for name, machine in (("preset", hw), ("calibrated on GEMMs", cal.hw)):
                t0 = time.perf_counter()
                secs, kern, share = replay_ffns([t for t, s in zip(traces, sel, strict=True) if s], machine, fusion)
                report(f"fusion={fusion}, {name}", secs, f_meas[sel], ffn["workload"][sel])
                if name == "preset":
                    print(f"  {'':38s} kernels per program {np.median(kern):.0f} (median), launch share "
                          f"{np.median(share):.1%} (median), replays {time.perf_counter() - t0:.1f} s")
        if tpu_traces:  # the same programs grouped as XLA:TPU compiled them
            chosen = [t for t, s in zip(tpu_traces, sel, strict=True) if s]
            for name, machine in (("preset", hw), ("calibrated on GEMMs", cal.hw)):
                secs, kern, _ = replay_ffns(chosen, machine, "compiler")
                report(f"fusion=compiler (XLA:TPU), {name}", secs, f_meas[sel], ffn["workload"][sel])
            print(f"  {'':38s} kernels per program {np.median(kern):.0f} (median), lowered for "
                  f"{chosen[0].attrs['device_kind']}")

    # the vector unit on the FFNs: fit its fields on half of them (seeded, half of each kind), from the machine
    # calibrated on GEMMs, and report the other half
    rows = pd.DataFrame({"trace": traces, "time_s": f_meas, "name": ffn["workload"], "bucket": ffn["kind"]})
    t0 = time.perf_counter()
    vec = calibrate(rows, cal.hw, list(VECTOR_FIELDS), "ws", seed=a.seed, fusion="rules")
    held = ~vec.rows["fitted"].values
    print(f"\nvector unit fitted on {int((~held).sum())} FFN programs (seed {a.seed}, half of each kind, dataflow "
          f"ws, fusion rules) from the GEMM-calibrated machine in {time.perf_counter() - t0:.1f} s, converged "
          f"{vec.converged}")
    print("fitted: " + ", ".join(f"{f} {float(np.asarray(getattr(cal.hw, f))):.5g} -> "
                                 f"{float(np.asarray(getattr(vec.hw, f))):.5g}" for f in vec.fields))
    for kind in ("gated", "erf", "all"):
        sel = held & ((ffn["kind"] == kind).to_numpy() if kind != "all" else True)
        for name, machine in (("calibrated on GEMMs", cal.hw), ("and its vector unit on FFNs", vec.hw)):
            secs, _, _ = replay_ffns([t for t, s in zip(traces, sel, strict=True) if s], machine, "rules")
            report(f"held-out {kind}, {name}", secs, f_meas[sel], ffn["workload"][sel])
    print(f"\ntotal run time {time.perf_counter() - t_start:.1f} s")


if __name__ == "__main__":
    main()
