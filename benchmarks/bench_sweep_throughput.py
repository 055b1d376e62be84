"""Sweep throughput: machines x ops x dataflows per second, JAX (jit + vmap) against NumPy.

All evaluate the same model (``dfit_nb.sim.dataflow.op_cost``, written against an
array namespace): JAX through ``dfit_nb.sim.sweep`` (one jitted vmap over the
machines, float64, including building the grid and the Dataset); NumPy the
straightforward way (a Python loop over machines, each call vectorized over
ops and dataflows; timed on the first ``--loop-machines`` machines and scaled
by throughput); and NumPy at its best (one call broadcasting machines x
dataflows x ops). Timings are medians of alternating repeats after a warm-up.
Run: ``python benchmarks/bench_sweep_throughput.py [--machines 10000 --ops 50]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np

from dfit_nb.sim import presets, sweep
from dfit_nb.sim.cost import ops_arrays
from dfit_nb.sim.dataflow import op_cost
from dfit_nb.sim.grid import machine_grid


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--machines", type=int, default=10_000)
    p.add_argument("--ops", type=int, default=50)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--loop-machines", type=int, default=500)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    ops = {x: rng.integers(1, 4096, a.ops) for x in ("m", "k", "n")}
    side = int(np.ceil(np.sqrt(a.machines / 10)))
    grid = {"pe": [(r, c) for r in range(8, 8 * side + 8, 8) for c in range(8, 8 * side + 8, 8)][: a.machines // 10],
            "dram_bw": [2.0 ** i for i in range(10)]}
    hw = presets.get("scalesim_128")
    n_machines = len(grid["pe"]) * len(grid["dram_bw"])
    evals = n_machines * a.ops * 3

    def run_jax():
        return sweep(ops, hw, dataflow=("ws", "os", "is"), progress=False, **grid)["cycles"].values

    machines, _, _ = machine_grid(hw, grid)
    arrays, _ = ops_arrays(ops)
    codes = np.array([[0], [1], [2]])
    hw_np = jax.tree.map(lambda x: np.asarray(x, np.float64)[:, None, None], machines)

    def run_numpy():
        return op_cost(arrays, hw_np, codes, False, xp=np)["cycles"]

    singles = [jax.tree.map(lambda x, i=i: float(np.asarray(x)[i]), machines) for i in range(a.loop_machines)]

    def run_numpy_loop():
        return [op_cost(arrays, h, codes, False, xp=np)["cycles"] for h in singles]

    t0 = time.perf_counter()
    first = run_jax()
    compile_s = time.perf_counter() - t0
    ref = run_numpy()
    np.testing.assert_allclose(first.reshape(ref.shape), ref, rtol=1e-12)  # same model, same numbers
    np.testing.assert_allclose(np.stack(run_numpy_loop()), ref[: a.loop_machines], rtol=1e-12)
    jax_s, np_s, loop_s = [], [], []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        run_jax()
        jax_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        run_numpy()
        np_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        run_numpy_loop()
        loop_s.append((time.perf_counter() - t0) * n_machines / a.loop_machines)
    j, n, lp = statistics.median(jax_s), statistics.median(np_s), statistics.median(loop_s)
    print(f"{n_machines} machines x {a.ops} ops x 3 dataflows = {evals:,} op-evaluations")
    print(f"JAX sweep (incl. grid build and Dataset): first call {compile_s:.2f} s (compile), then median {j:.3f} s "
          f"= {evals / j:,.0f} op-evals/s")
    print(f"NumPy, loop over machines (scaled from {a.loop_machines}): {lp:.3f} s = {evals / lp:,.0f} op-evals/s")
    print(f"NumPy, one broadcast call:                 {n:.3f} s = {evals / n:,.0f} op-evals/s")
    print(f"throughput ratio JAX / NumPy loop over machines: {lp / j:.1f}x  (target >= 3x)")
    print(f"throughput ratio JAX / NumPy fully broadcast:    {n / j:.2f}x")


if __name__ == "__main__":
    main()
