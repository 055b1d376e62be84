"""Inferences streamed through every preset: latency of one, throughput of many, the steady state.

Issue 41's target: ResNet-18 (224x224, batch 1 per inference), 64 inferences streamed on ``cerebras_like``, a
steady-state utilisation of at least 25%. Every preset replays the same trace (weight-stationary, the default
fusion) with ``inferences=64``; the table shows the one-inference latency and utilisation beside the stream's
throughput, steady-state utilisation and the stage that sets its pace.
On the layer-pipelined presets a second table compares the model's tile allocation (``"balanced"``: the tiles per
stage that minimise the slowest stage's time, corrected by a first replay, kept when its replayed period is
shorter) with tiles in proportion to work (``"proportional"``), both through the same replay program.
Run: ``python benchmarks/bench_streaming.py [--size 224] [--inferences 64] [--presets a,b,...] [--model NAME]``
(``--model``: one of ``benchmarks/real_models.py``'s eight, at its own input size, instead of the ResNet-18).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import dfit_nb
from dfit_nb.examples import resnet18
from dfit_nb.sim import presets
from dfit_nb.sim._replay import allocation_period


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--inferences", type=int, default=64)
    p.add_argument("--presets", default=",".join(presets.names()))
    p.add_argument("--dataflow", default="ws")
    p.add_argument("--model", default=None, help="a model of benchmarks/real_models.py instead of ResNet-18")
    a = p.parse_args()
    dfit_nb.setup()
    if a.model:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import real_models

        fn, args = real_models.build(a.model)
        trace = dfit_nb.capture(fn, *args)
        print(f"{a.model}, {a.inferences} inferences streamed, {a.dataflow}")
    else:
        trace = dfit_nb.capture(resnet18.forward, *resnet18.specs(size=a.size))
        print(f"ResNet-18 at {a.size}x{a.size}, batch 1, {a.inferences} inferences streamed, {a.dataflow}")
    print(f"{'preset':17s} {'exec':7s} {'latency us':>10s} {'util 1':>7s} {'inf/s':>10s} {'steady util':>11s} "
          f"{'period us':>9s} {'sections':>8s}  bottleneck stage (class)   replay s")
    for name in a.presets.split(","):
        t0 = time.perf_counter()
        run = dfit_nb.replay(trace, presets.get(name), a.dataflow, time_bins=8, inferences=a.inferences)
        took = time.perf_counter() - t0
        s = run.summary
        stage = s["bottleneck_stage_region"].item() or "-"
        print(f"{name:17s} {run.attrs['execution']:7s} {float(s['latency_s']) * 1e6:10.1f} "
              f"{float(s['utilization']):7.1%} {float(s['throughput_inferences_per_s']):10.0f} "
              f"{float(s['steady_state_utilization']):11.1%} {float(s['steady_state_period_s']) * 1e6:9.2f} "
              f"{int(s['sections']):8d}  {stage} ({s['bottleneck_stage_class'].item()}){'':6s} {took:6.1f}")
    spatial = [n for n in a.presets.split(",") if presets.get(n).execution == "spatial"]
    if spatial:
        print("\nlayer-pipelined tile allocation: period (us) and sections, proportional -> balanced (the model's)")
        for name in spatial:
            hw = presets.get(name)
            (p0, s0), (p1, s1) = (allocation_period(trace, hw, al) for al in ("proportional", "balanced"))
            us = 1e-3 / hw.clock_ghz
            print(f"{name:17s} {p0 * us:9.2f} ({s0}) -> {p1 * us:9.2f} ({s1}): period x{p1 / p0:.3f}")


if __name__ == "__main__":
    main()
