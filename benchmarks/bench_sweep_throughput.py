"""Sweep throughput: machines x ops x dataflows per second, one vmapped call against a loop over machines.

Both evaluate the one machine model (:mod:`dfit_nb.sim.machine`) exactly as :func:`dfit_nb.sim._cost` does
(each op alone: the mapping search over every layout candidate, the model, the body time): ``dfit_nb.sim.sweep``
runs every machine in one jitted ``vmap`` (float64, grid build and Dataset included); the baseline is the
straightforward loop a user would write, ``cost(ops, machine, dataflows)`` per machine (each call jitted and
vectorized over ops and dataflows), timed on the first ``--loop-machines`` machines and scaled by throughput.
The two agree to 1e-12. Timings are medians of alternating repeats after a warm-up.
Run: ``python benchmarks/bench_sweep_throughput.py [--machines 2000 --ops 20]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np

from dfit_nb.sim import cost, presets, sweep
from dfit_nb.sim.grid import machine_grid


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--machines", type=int, default=2_000)
    p.add_argument("--ops", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--loop-machines", type=int, default=50)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    ops = {x: rng.integers(1, 4096, a.ops) for x in ("m", "k", "n")}
    side = int(np.ceil(np.sqrt(a.machines / 10)))
    grid = {"pe": [(r, c) for r in range(8, 8 * side + 8, 8) for c in range(8, 8 * side + 8, 8)][: a.machines // 10],
            "dram_bw": [2.0 ** i for i in range(10)]}
    hw = presets.get("npu_like")
    n_machines = len(grid["pe"]) * len(grid["dram_bw"])
    evals = n_machines * a.ops * 3
    dataflows = ["ws", "os", "is"]

    def run_jax():
        return sweep(ops, hw, dataflow=dataflows, progress=False, **grid)["cycles"].values

    machines, _, _ = machine_grid(hw, grid)
    singles = [hw.replace(**{f: float(np.asarray(getattr(machines, f))[i]) for f in ("pe_rows", "pe_cols",
                                                                                     "dram_bytes_per_cycle")})
               for i in range(a.loop_machines)]

    def run_loop():
        return [cost(ops, h, dataflows)["cycles"].values for h in singles]

    t0 = time.perf_counter()
    first = run_jax()
    compile_s = time.perf_counter() - t0
    loop = np.stack(run_loop())
    np.testing.assert_allclose(first.reshape(n_machines, 3, a.ops)[: a.loop_machines], loop, rtol=1e-12)
    jax_s, loop_s = [], []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        run_jax()
        jax_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        run_loop()
        loop_s.append((time.perf_counter() - t0) * n_machines / a.loop_machines)
    j, lp = statistics.median(jax_s), statistics.median(loop_s)
    print(f"{n_machines} machines x {a.ops} ops x 3 dataflows = {evals:,} op-evaluations "
          f"(JAX {jax.__version__}, {jax.default_backend()})")
    print(f"JAX sweep (incl. grid build and Dataset): first call {compile_s:.2f} s (compile), then median {j:.3f} s "
          f"= {evals / j:,.0f} op-evals/s")
    print(f"cost() per machine in a loop (scaled from {a.loop_machines}): {lp:.3f} s = {evals / lp:,.0f} op-evals/s")
    print(f"throughput ratio sweep / loop over machines: {lp / j:.1f}x")


if __name__ == "__main__":
    main()
