"""One machine model: cost() of each op alone vs a one-op replay, and Σ per-op energy vs the replayed energy.

1. For every op of the bundled examples (its GEMM view and operand sizes), on every preset and dataflow: the
   op captured alone as a one-op program and replayed, against ``cost`` of that op: the largest relative
   difference in cycles and energy (target 0: they read the same model).
2. Every example on every preset (weight-stationary): Σ over ops of energy alone x count against the replayed
   energy, and the remainder named level by level (``dfit_nb.sim._reconcile``): it closes exactly.
Run: ``python benchmarks/bench_one_model.py`` (a few minutes on 2 cores).
"""

from __future__ import annotations

import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

import dfit_nb
from dfit_nb.sim import cost, presets, reconcile
from dfit_nb.sim._prepare import prepare
from dfit_nb.sim._replay import SpillWarning


def one_op_programs(trace):
    """A one-op program for each distinct GEMM shape (dot_general) of ``trace``, plus its elementwise ops."""
    out = {}
    prep = prepare(trace)
    for i in np.flatnonzero(prep.arrays["gemm"] > 0):
        if prep.primitive[i] != "dot_general":
            continue
        b, m, k, n = (int(prep.arrays[x][i]) for x in ("batch", "m", "k", "n"))
        key = (b, m, k, n)
        if key not in out:
            out[key] = dfit_nb.capture(lambda a, w: jnp.einsum("bmk,bkn->bmn", a, w),
                                       jax.ShapeDtypeStruct((b, m, k), jnp.float32),
                                       jax.ShapeDtypeStruct((b, k, n), jnp.float32))
    return list(out.values())


def main() -> None:
    warnings.simplefilter("ignore", SpillWarning)
    t0 = time.perf_counter()
    traces = {}
    for name in dfit_nb.examples.names():
        fn, args = dfit_nb.examples.get(name).build()
        traces[name] = dfit_nb.capture(fn, *args)
    programs = [p for t in traces.values() for p in one_op_programs(t)]
    programs.append(dfit_nb.capture(jnp.tanh, jax.ShapeDtypeStruct((128, 256), jnp.float32)))
    worst_c = worst_e = 0.0
    pairs = 0
    for preset in presets.names():
        hw = presets.get(preset)
        for t in programs:
            (op,) = prepare(t).op
            c = cost(t, hw, ["ws", "os", "is"]).sel(op=op)
            for df in ("ws", "os", "is"):
                run = dfit_nb.replay(t, hw, df)
                cc, ce = float(c["cycles"].sel(dataflow=df)), float(c["energy_pj"].sel(dataflow=df))
                rc, re_ = float(run.summary["latency_cycles"]), float(run.summary["energy_j"]) * 1e12
                worst_c = max(worst_c, abs(cc - rc) / rc)
                worst_e = max(worst_e, abs(ce - re_) / re_)
                pairs += 1
    print(f"1. cost() vs one-op replay: {pairs} (op, preset, dataflow) pairs from {len(programs)} one-op programs; "
          f"max relative difference: cycles {worst_c:.2e}, energy {worst_e:.2e} (target 0)")
    print("2. Σ per-op energy alone vs the replayed energy (ws), and the remainder by level (mJ):")
    print(f"   {'example':11s} {'preset':15s} {'alone':>9s} {'replayed':>9s} {'d compute':>9s} {'d sram':>9s} "
          f"{'d noc':>9s} {'d dram':>9s} {'d retile':>9s} {'closes to':>9s}")
    for name, t in traces.items():
        for preset in presets.names():
            hw = presets.get(preset)
            run = dfit_nb.replay(t, hw, "ws")
            r = reconcile(t, hw, run)
            a, rep = float(r["alone_energy_j"]) * 1e3, float(run.summary["energy_j"]) * 1e3
            closes = abs(a + float(r["difference_j"].sum()) * 1e3 - rep) / rep
            print(f"   {name:11s} {preset:15s} {a:9.4f} {rep:9.4f} "
                  + " ".join(f"{float(v) * 1e3:+9.4f}" for v in r["difference_j"].values) + f" {closes:9.1e}")
    print(f"done in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
