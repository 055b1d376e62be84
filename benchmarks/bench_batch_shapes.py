"""Sweeps and batch replays of different sizes sharing compiled programs: padded shapes beside exact ones.

A notebook session sweeps a few machines, then a few more, on one table and then another; ``replay_batch``
replays 3 machines, then 5. Each distinct shape of the vmapped program (op count, machine count, distinct tile
grids) used to compile again (1.5-3.5 s each on 2 cores). ``sweep`` now pads the op table to cost()'s sizes (a
power of two, at least 8), a lone chunk's machines to a power of two (at least 8) and the distinct grids to a
power of two (at least 4); ``replay_batch`` pads a lone chunk's machines to a power of two. The copies repeat a
real op, machine or grid and are sliced off, so no figure changes (``tests/sim/test_cost.py`` and
``tests/sim/test_sweep.py`` compare sweeps with cost() and replay_batch with replay()).

This runs the same sequence of calls in two fresh processes (JAX's persistent compilation cache off, so every
compile is paid): as the library does it today, and with the padding switched off (the sizes made exact again,
as before; the grid tables stay padded to their bucket in both). It prints each call's seconds, the number of
programs compiled, and the total, side by side, and checks that both give the same numbers.

Run: ``python benchmarks/bench_batch_shapes.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

CHILD = r"""
import json, os, sys, time, warnings
import numpy as np
import dfit_nb
from dfit_nb import examples
from dfit_nb.sim import Hardware, SpillWarning, presets, replay_batch, sweep
from dfit_nb._runtime import padding as _padding
from dfit_nb.sim import _batch, _cost, grid

if sys.argv[1] == "exact":  # before: every size as it comes
    exact = lambda n, at_least=1: n  # noqa: E731
    grid.padded_count = _cost.padded_count = _batch.padded_count = _padding.padded_count = exact
    grid.padded_index = lambda n, size: np.arange(n)
hw = presets.get("npu_like")
fn, args = examples.get("mlp").build()
mlp = dfit_nb.capture(fn, *args)
fn, args = examples.get("encoder").build()
encoder = dfit_nb.capture(fn, *args)
small = {"m": [64, 32, 7], "k": [64, 16, 9], "n": [64, 8, 3]}
wide = {"m": [64, 300, 7, 5, 6], "k": [64, 128, 4096, 5, 6], "n": [64, 9, 16, 5, 6]}
calls = [
    ("sweep, 3 ops, dram_bw x 3", lambda: sweep(small, hw, progress=False, dram_bw=[8.0, 16.0, 32.0])),
    ("sweep, 3 ops, dram_bw x 5", lambda: sweep(small, hw, progress=False, dram_bw=[8.0, 16.0, 32.0, 64.0, 128.0])),
    ("sweep, 5 ops, tiles x 3", lambda: sweep(wide, hw, progress=False, tiles=[(1, 1), (4, 5), (2, 8)])),
    ("sweep, 5 ops, tiles x 2, pe x 2", lambda: sweep(wide, hw, progress=False, tiles=[(2, 2), (4, 4)],
                                                      pe=[(8, 8), (16, 16)])),
    ("sweep, mlp, pe x 3", lambda: sweep(mlp, hw, progress=False, pe=[(8, 8), (16, 16), (32, 32)])),
    ("sweep, mlp, pe x 2, tiles x 2", lambda: sweep(mlp, hw, progress=False, pe=[(8, 8), (16, 16)],
                                                    tiles=[(2, 2), (4, 5)])),
    ("replay_batch, encoder, 3 machines", lambda: replay_batch(encoder, Hardware.stack(
        [hw.replace(dram_bytes_per_cycle=b) for b in (16.0, 32.0, 64.0)]))),
    ("replay_batch, encoder, 4 machines", lambda: replay_batch(encoder, Hardware.stack(
        [hw.replace(dram_bytes_per_cycle=b) for b in (16.0, 32.0, 64.0, 128.0)]))),
]
rows, figures = [], []
t0 = time.perf_counter()
with warnings.catch_warnings():
    warnings.simplefilter("ignore", SpillWarning)
    for name, call in calls:
        t = time.perf_counter()
        ds = call()
        rows.append((name, time.perf_counter() - t))
        figures.append([float(np.nansum(ds[v].values)) for v in ("total_cycles", "latency_cycles") if v in ds])
total = time.perf_counter() - t0
compiles = sum(f._cache_size() for f in (grid._evaluate_batch, grid._evaluate_batch_fast_compile,
                                        _batch._batch_program, _batch._batch_program_fast_compile))
print(json.dumps({"rows": rows, "total": total, "compiles": compiles, "figures": figures}))
"""


def run(mode: str) -> dict:
    env = {**os.environ, "DFIT_NB_COMPILATION_CACHE": "0"}
    out = subprocess.run([sys.executable, "-c", CHILD, mode], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    today, before = run("padded"), run("exact")
    if today["figures"] != before["figures"]:
        raise SystemExit(f"the padded calls changed a figure: {today['figures']} against {before['figures']}")
    print(f"{'call (fresh process, no persistent cache)':44s} {'padded (today)':>15s} {'exact (before)':>15s}")
    for (name, t), (_, b) in zip(today["rows"], before["rows"], strict=True):
        print(f"  {name:42s} {t:13.2f} s {b:13.2f} s")
    print(f"  {'total':42s} {today['total']:13.2f} s {before['total']:13.2f} s   "
          f"({before['total'] / today['total']:.1f}x)")
    print(f"  {'programs compiled (sweep + replay_batch)':42s} {today['compiles']:15d} {before['compiles']:15d}")
    print("  every call's totals are equal in both processes")


if __name__ == "__main__":
    main()
