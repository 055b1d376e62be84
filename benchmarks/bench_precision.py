"""Precision with quality evidence: drift and price of bf16 / fp8_e4m3 / int8 GEMM inputs on the bundled examples.

For the bundled encoder and CNN (and the MLP): every GEMM reduced at once and one region at a time, the worst
output's relative error, cosine and top-1 agreement against the float32 run, and the replayed energy and latency
against float32 on a float32 datapath (``npu_like`` with ``word_bytes=4``) and on ``tpu_like`` (2-byte words: bf16
costs what float32 does there). Then the verdict at a 1% relative-error tolerance.
Run: ``python benchmarks/bench_precision.py [--examples encoder cnn] [--tolerance 0.01]`` (about a minute on
2 cores).
"""

from __future__ import annotations

import argparse
import time
import warnings

import dfit_nb
from dfit_nb.precision_study import ALL
from dfit_nb.sim import SpillWarning, presets

MACHINES = {"npu_like@fp32": presets.get("npu_like").replace(word_bytes=4), "tpu_like": presets.get("tpu_like")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", nargs="+", default=["encoder", "cnn", "mlp"])
    parser.add_argument("--tolerance", type=float, default=0.01)
    args = parser.parse_args()
    warnings.simplefilter("ignore", SpillWarning)
    for name in args.examples:
        fn, fargs = dfit_nb.examples.get(name).build()
        trace = dfit_nb.capture(fn, *fargs)
        for label, hw in MACHINES.items():
            t0 = time.perf_counter()
            study = dfit_nb.precision(trace, *fargs, hw=hw)
            took = time.perf_counter() - t0
            d = study.data
            print(f"\n== {name} on {label} ({d.sizes['region'] - 1} regions, {took:.1f} s; float32: "
                  f"{float(d['float32_joules_per_inference']) * 1e6:.4g} uJ/inference, "
                  f"{float(d['float32_latency_s']) * 1e6:.4g} us; interpreter vs program "
                  f"{d.attrs['interpreter_max_abs_diff']:g})")
            for f in d["format"].values.tolist():
                s = d.sel(format=f, region=ALL)
                top1 = float(s["top1_agreement"].min())
                print(f"  {f:9s} rel {float(s['rel_error'].max()):.3g}  cos {float(s['cosine'].min()):.6f}  "
                      f"top1 {top1:.3f}  energy x{float(s['energy_ratio']):.3f}  "
                      f"latency x{float(s['latency_ratio']):.3f}")
                if label == next(iter(MACHINES)):  # the drift does not depend on the machine: shown once
                    per = d["rel_error"].sel(format=f).drop_sel(region=ALL).max("output")
                    worst = per.sortby(per, ascending=False)
                    energy = d["energy_ratio"].sel(format=f)
                    print("            by region (alone): " + ", ".join(
                        f"{r or '<root>'} {float(v):.3g} (energy x{float(energy.sel(region=r)):.3f})"
                        for r, v in zip(worst["region"].values.tolist()[:6], worst.values[:6], strict=True)))
            for reason in study.verdict(args.tolerance)["reason"].values.tolist():
                print("   ", reason)


if __name__ == "__main__":
    main()
