"""p50/p95/p99 under batch variance: one vmapped replay over (size x assignment) against a loop of scalar replays.

``Policy.with_batch_variance`` (``dfit_nb.sim.memo.batch_variance``) rescales the trace's op table to each batch
size of the mix (``dfit_nb.sim.shapes``) and replays the policy and its baseline at every size in one vmapped
call. The peer is what ``dfit_nb.sim.shapes.tail_latency`` does per size: ``summarize`` (the same scalar replay,
one machine) called once per (size, assignment). Both are timed side by side in this process, cold (first call,
compiles included: the loop compiles once, the vmapped call once) and warm (best of 3), on the same rescaled
tables; the results are checked equal. The shape exponents (one extra capture, which ``batch_variance`` makes
before either) are measured once, outside both: the timed vmapped part is ``memo.replay_sizes``.
Run: ``python benchmarks/bench_batch_variance.py [--example encoder] [--preset eyeriss_like] [--sizes 9]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import dfit_nb
from dfit_nb.sim import presets, select_dataflows
from dfit_nb.sim._batch import summarize
from dfit_nb.sim._prepare import prepare
from dfit_nb.sim._rescale import _codes, exponents, scaled
from dfit_nb.sim.memo import replay_sizes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--example", default="encoder")
    p.add_argument("--preset", default="eyeriss_like")
    p.add_argument("--sizes", type=int, default=9, help="batch sizes in the mix: 1, 2, 3, ... x the base batch")
    a = p.parse_args()
    ex = dfit_nb.examples.get(a.example)
    base = int(ex.defaults["batch"])

    def make_args(batch: int) -> tuple:
        return ex.build(batch=batch)[1]

    trace = dfit_nb.capture(ex.build()[0], *make_args(base))
    hw = presets.get(a.preset)
    policy = select_dataflows(trace, hw, "energy")
    mix = {base * k: 1.0 for k in range(1, a.sizes + 1)}
    exps = exponents(trace, make_args, {"batch": base})  # warms the capture path both sides share
    prep = prepare(trace)
    per_op = np.asarray(policy.per_op, dtype=object)
    codes = [_codes(np.where(per_op == "", "ws", per_op)),
             _codes(np.full(len(prep.op), policy.baselines.attrs["best_single"]))]

    def loop() -> np.ndarray:
        out = np.zeros((len(mix), 2))
        for i, size in enumerate(mix):  # the per-size loop of shapes.tail_latency
            sp = scaled(prep, exps, {"batch": size / base})
            for j, c in enumerate(codes):
                out[i, j] = summarize(sp, hw, c, reconfig=(policy.reconfig_cycles, policy.reconfig_pj))["latency_s"]
        return out

    def vmapped() -> np.ndarray:
        return replay_sizes(policy, exps, {"batch": np.array(list(mix), float) / base})[0]

    timings = {}
    for name, fn in (("loop of summarize", loop), ("vmapped replay_sizes", vmapped)):
        t0 = time.perf_counter()
        result = fn()
        cold = time.perf_counter() - t0
        warm = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            warm.append(time.perf_counter() - t0)
        timings[name] = (cold, min(warm), result)
    (lc, lw, lr), (vc, vw, vr) = timings.values()
    print(f"{a.example} on {a.preset}: {len(prep.op)} ops, {len(mix)} batch sizes x 2 assignments "
          f"({', '.join(str(s) for s in mix)})")
    print(f"{'':24s} {'cold (s)':>9s} {'warm (s)':>9s}")
    for name, (cold, warm, _) in timings.items():
        print(f"{name:24s} {cold:9.3f} {warm:9.3f}")
    print(f"ratio loop / vmapped: cold {lc / vc:.2f}x, warm {lw / vw:.2f}x; "
          f"largest relative difference of the latencies {float(np.max(np.abs(vr - lr) / lr)):.2e}")


if __name__ == "__main__":
    main()
