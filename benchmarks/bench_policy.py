"""The hybrid dataflow policy, checked by replay: how often the selection's choice is what the replay confirms.

The selection prices every GEMM x candidate dataflow with the replay's own per-op records (mapping, refetch,
movement, scheduling; switches with the shared ``switch_cost``), so the hybrid it picks should replay as
priced. ``Policy.evaluate`` replays the hybrid and every single style and falls back to the best single style
when the hybrid does not beat it; this prints, per (example, preset, objective), the replayed gain of the
policy against the best single style and whether it fell back, then the fallback count (target: at most 1 case
in 10). Last, a ResNet-18-like CNN at 224x224 (batch 1) on a one-array 32x32 TPU-like machine, latency
objective, where early layers (large M) and late layers (large K) favour different styles. Then the selection
for ``--machines`` machines (variants of ``npu_like``) in one vmapped call: each machine's three single styles
replayed, then the DP.
Run: ``python benchmarks/bench_policy.py [--machines 1000]`` (a few minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import dfit_nb
from dfit_nb.examples import resnet18
from dfit_nb.sim import Hardware, SpillWarning, presets, select_dataflows
from dfit_nb.sim.policy import OBJECTIVES


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--machines", type=int, default=1_000)
    a = p.parse_args()
    warnings.simplefilter("ignore", SpillWarning)
    t_start = time.perf_counter()
    cases = fallbacks = 0
    print(f"{'example':12s} {'preset':15s} {'objective':9s} {'policy':28s} {'switches':>8s} {'gain vs best':>12s}")
    for name in ("mlp", "cnn", "encoder", "scan_model"):
        fn, args = dfit_nb.examples.get(name).build()
        trace = dfit_nb.capture(fn, *args)
        for preset in presets.names():
            for objective in OBJECTIVES:
                policy = select_dataflows(trace, presets.get(preset), objective)
                cases += 1
                fallbacks += bool(policy.fallback)
                print(f"{name:12s} {preset:15s} {objective:9s} {policy.name[:28]:28s} {policy.switches:8d} "
                      f"{policy.replayed_gain():+12.2%}")
    print(f"fallbacks: {fallbacks} of {cases} (example x preset x objective) cases = {fallbacks / cases:.1%} "
          "(target <= 10%)")

    trace = dfit_nb.capture(resnet18.forward, *resnet18.specs())
    hw = presets.get("tpu_like").replace(name="tpu_like 1x(32x32)", tile_rows=1, tile_cols=1, pe_rows=32, pe_cols=32)
    policy = select_dataflows(trace, hw, "latency")
    b = policy.baselines
    print(f"ResNet-18 224x224 (batch 1, {policy.choices.sizes['op']} GEMMs) on {hw.name}, latency objective:")
    for style in b["policy"].values:
        print(f"  {style:7s} {float(b['latency_s'].sel(policy=style)) * 1e3:8.3f} ms")
    print(f"  choices: {' '.join(policy.choices['dataflow'].values)}")
    print(f"  replayed latency gain of the hybrid vs the best single style ({b.attrs['best_single']}): "
          f"{policy.replayed_gain():+.2%}")
    batch_selection(a.machines)
    print(f"done in {time.perf_counter() - t_start:.0f} s")


def batch_selection(n: int) -> None:
    """The selection for ``n`` machines in one vmapped call (the encoder's 12 GEMMs)."""
    fn, args = dfit_nb.examples.get("encoder").build()
    trace = dfit_nb.capture(fn, *args)
    base = presets.get("npu_like")
    rng = np.random.default_rng(0)
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
    print(f"selection for {n:,} machines x {ds.sizes['op']} GEMMs in one call (3 replays per machine, then the DP): "
          f"{first:.2f} s with compile, {again:.2f} s again ({n / again:,.0f} machines/s); {mixed:,} machines get a "
          "mixed policy")


if __name__ == "__main__":
    main()
