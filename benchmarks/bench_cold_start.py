"""The first minutes: what compiling costs a fresh process, with grid buckets and the selection's reuse of the
replay's program, each beside what it replaces, in one run.

In a fresh process (JAX's persistent compilation cache off, so every compile is paid):

1. every preset replayed once, in registry order: wall time per preset and the number of replay programs
   compiled (``program``'s jit cache), next to the compiles the exact grids would need (one per distinct
   (rows, cols, execution)); and the compile of one exact-grid program timed beside the bucketed one;
2. ``select_dataflows`` right after a replay on the same machine: it runs the replay's compiled program once
   per style, beside the vmapped pricing program the selection compiled before (``_styles_program``, still
   the path for batches of machines), called on the same inputs;
3. a new model after those replays (issue 17: <= 1 s for programs up to 1,000 ops, and ``select_dataflows`` on
   a 1,000-op trace <= 1 s after the first replay on that machine): ``--layers`` dense layers
   (``tanh(x @ w + b)``, about 4 replayed ops each) captured, replayed first on ``tpu_like``, then on
   ``npu_like``, then selected on ``tpu_like``. Its op-count bucket may be one no earlier replay compiled: that
   first replay then pays a compile, which this prints rather than hides.

Run: ``python benchmarks/bench_cold_start.py [--example encoder]``.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

os.environ.setdefault("DFIT_NB_COMPILATION_CACHE", "0")  # every compile paid, as on a first run

import jax
import numpy as np

import dfit_nb
from dfit_nb import examples
from dfit_nb.sim import presets, select_dataflows
from dfit_nb.sim import schedule as sch
from dfit_nb.sim._batch import _styles_program
from dfit_nb.sim._cost import for_jit
from dfit_nb.sim._prepare import padded, pinned_layouts, prepare
from dfit_nb.sim._replay import program
from dfit_nb.sim.machine import DATAFLOWS


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--example", default="encoder")
    p.add_argument("--layers", type=int, default=250, help="dense layers of section 3's new model")
    a = p.parse_args()
    warnings.simplefilter("ignore")
    fn, args = examples.get(a.example).build()
    trace = dfit_nb.capture(fn, *args)
    prep = prepare(trace)
    print(f"{a.example}: {len(prep.op)} replayed ops; persistent cache: {os.environ['DFIT_NB_COMPILATION_CACHE']}")

    print("\n1. every preset, first replay in a fresh process")
    exact = set()
    total = 0.0
    for name in presets.names():
        hw = presets.get(name)
        _, took = _timed(lambda hw=hw: dfit_nb.replay(trace, hw))
        total += took
        exact.add((int(hw.tile_rows), int(hw.tile_cols), hw.execution))
        print(f"   {name:16s} {int(hw.tile_rows):3d}x{int(hw.tile_cols):<3d} -> bucket "
              f"{'x'.join(map(str, sch.bucket(hw.tile_rows, hw.tile_cols)[1:]))} {hw.execution:8s} {took:6.2f} s")
    print(f"   total {total:.1f} s; replay programs compiled: {program._cache_size()} (grid buckets) vs "
          f"{len(exact)} (one per exact grid and style)")

    # the compile a bucket saves: npu_like's program for its exact 4 x 5 grid (its 8 x 8 bucket was compiled by
    # the first replay above and served every time-multiplexed preset)
    hw = presets.get("npu_like")
    arrays, preds, pred_bytes, codes_p, pin = padded(prep, np.zeros(len(prep.op)),
                                                     pinned_layouts(prep, None, int(hw.tiles)))
    r, c = int(hw.tile_rows), int(hw.tile_cols)
    with jax.enable_x64(True):
        exact_grid = sch.Grid(r * c, r, c)
        lowered = program.lower(arrays, preds, pred_bytes, sch.grid_tables(r, c, exact_grid), for_jit(hw), codes_p,
                                pin, exact_grid, False, np.zeros(2))
        _, took = _timed(lowered.compile)
    print(f"   the compile an exact grid would add for npu_like (4x5): {took:.2f} s; with buckets: 0 "
          f"(the 8x8 program above, {program._cache_size()} compiled in all)")

    print("\n2. select_dataflows right after a replay on the same machine")
    for name in ("tpu_like", "sambanova_like"):
        hw = presets.get(name)
        dfit_nb.replay(trace, hw)
        _, took = _timed(lambda hw=hw: select_dataflows(trace, hw, "energy", evaluate=False))
        # what the selection ran before: its own vmapped program over the styles
        n = len(prep.op)
        dfs = np.array([[DATAFLOWS.index(d)] * n for d in ("ws", "os", "is")], np.float64)
        size = arrays["m"].shape[0]
        dfs = np.concatenate([dfs, np.zeros((3, size - n))], axis=1)
        grid = sch.bucket(int(hw.tile_rows), int(hw.tile_cols))
        tables = sch.grid_tables(int(hw.tile_rows), int(hw.tile_cols), grid)
        pin = pinned_layouts(prep, None)
        pin = {k: np.concatenate([v, np.full(size - n, -1.0 if k == "layout" else 0.0)]) for k, v in pin.items()}
        with jax.enable_x64(True):
            t0 = time.perf_counter()
            jax.device_get(_styles_program(arrays, preds, pred_bytes, tables, for_jit(hw), dfs, pin, grid,
                                           hw.execution == "spatial", True))
            before = time.perf_counter() - t0
        print(f"   {name:16s} select after replay {took:6.2f} s   (its former pricing program, compiled and run: "
              f"{before:6.2f} s)")
    new_model(a.layers)


def deep(layers: int, width: int = 64):
    """``layers`` dense layers: ``x = tanh(x @ w_i + b_i)``."""
    import jax.numpy as jnp

    def fn(x, ws, bs):
        for w, b in zip(ws, bs, strict=True):
            x = jnp.tanh(x @ w + b)
        return x

    return fn, (jnp.ones((32, width)), [jnp.full((width, width), 0.01)] * layers, [jnp.zeros(width)] * layers)


def new_model(layers: int) -> None:
    fn, args = deep(layers)
    trace = dfit_nb.capture(fn, *args)
    n = len(prepare(trace).op)
    print(f"\n3. a new model after the replays above: {layers} dense layers, {n} replayed ops")
    for name in ("tpu_like", "npu_like"):
        compiled = program._cache_size()
        _, took = _timed(lambda name=name: dfit_nb.replay(trace, presets.get(name)))
        print(f"   first replay on {name:12s} {took:6.2f} s (replay programs compiled by it: "
              f"{program._cache_size() - compiled})")
    _, took = _timed(lambda: select_dataflows(trace, presets.get("tpu_like"), "energy", evaluate=False))
    print(f"   select_dataflows on tpu_like after that replay: {took:6.2f} s")
    _, took = _timed(lambda: dfit_nb.replay(trace, presets.get("tpu_like")))
    print(f"   the same replay again: {took:6.2f} s")


if __name__ == "__main__":
    main()
