"""Hybrid dataflow selection: replayed gains over the best single style on every preset; selection time at scale.

For the bundled encoder and CNN on every preset and for the energy and latency objectives, the exact DP picks a
dataflow per GEMM (switch costs included) and :meth:`Policy.evaluate` replays the hybrid and each single style
through the same pipeline (mapping, movement, schedule). Printed: the best single style, the hybrid's switches and
its replayed gain in energy and latency against that best single style (0 where the hybrid falls back to it).
Then the selection for ``--machines`` machines (variants of ``npu_like``) in one vmapped call.
Run: ``python benchmarks/bench_policy.py [--machines 10000]``.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import dfit_nb
from dfit_nb import examples
from dfit_nb.sim import Hardware, presets, select_dataflows
from dfit_nb.sim.replay import SpillWarning


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--machines", type=int, default=10_000)
    a = p.parse_args()
    warnings.simplefilter("ignore", SpillWarning)
    print(f"{'example':8s} {'preset':15s} {'objective':9s} {'best single':11s} {'switches':>8s} "
          f"{'energy gain':>11s} {'latency gain':>12s}  policy")
    for name in ("encoder", "cnn"):
        fn, args = examples.get(name).build()
        trace = dfit_nb.capture(fn, *args)
        for preset in presets.names():
            for objective in ("energy", "latency"):
                policy = select_dataflows(trace, presets.get(preset), objective)
                b = policy.baselines
                best = b.attrs["best_single"]
                print(f"{name:8s} {preset:15s} {objective:9s} {best:11s} {policy.switches:8d} "
                      f"{float(b['energy_gain'].sel(policy=best)):11.2%} "
                      f"{float(b['latency_gain'].sel(policy=best)):12.2%}  {policy.name}")

    fn, args = examples.get("encoder").build()
    trace = dfit_nb.capture(fn, *args)
    base = presets.get("npu_like")
    rng = np.random.default_rng(0)
    n = a.machines
    pe = rng.choice([8, 16, 32], n).astype(float)
    batch = Hardware(name="variants", tile_rows=np.full(n, 4.0), tile_cols=np.full(n, 5.0), pe_rows=pe, pe_cols=pe,
                     sram_input_bytes=rng.choice([16, 32, 64], n) * 1024.0,
                     sram_weight_bytes=rng.choice([16, 32, 64], n) * 1024.0,
                     sram_output_bytes=rng.choice([16, 32], n) * 1024.0, word_bytes=np.ones(n),
                     dram_bytes_per_cycle=rng.choice([15.0, 30.0, 60.0, 120.0], n),
                     noc_link_bytes_per_cycle=np.full(n, float(base.noc_link_bytes_per_cycle)),
                     vector_lanes=np.full(n, float(base.vector_lanes)))
    t0 = time.perf_counter()
    ds = select_dataflows(trace, batch, "energy")
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    ds = select_dataflows(trace, batch, "energy")
    again = time.perf_counter() - t0
    mixed = int((ds["dataflow"].to_numpy()[:, 1:] != ds["dataflow"].to_numpy()[:, :-1]).any(axis=1).sum())
    print(f"selection for {n:,} machines x {ds.sizes['op']} GEMMs in one call: {first:.2f} s with compile, "
          f"{again:.2f} s again ({n / again:,.0f} machines/s); {mixed:,} machines get a mixed policy")


if __name__ == "__main__":
    main()
