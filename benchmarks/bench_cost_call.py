"""A warm ``cost()`` call on a small table, and the pure-array entry point of the model, each part side by side.

``cost()`` on a 3-op table is mostly fixed overhead around one jitted call of the model. This prints, in one
run on the same machine and table: the whole call; the model's jitted call with its inputs packed (the op table
as one array, the machine as its field vector, the grid tables kept on the device) and its outputs copied to the
host in one packed array (today), beside the same call with one input per op column and machine field and the
tables sent from the host (before), and with one output copy per variable too (before that); the Dataset built
through xarray's direct constructor (today) and its public one (before); the machine copied for ``jit`` without
and with revalidation; and the pure-array entry point (:func:`dfit_nb.sim.calibration.predictor`, jitted, what
``jax.grad`` goes through): every output, the machine sent from the host or already on the device, and the
seconds alone (what a calibration's loss reads). Each figure is the best of ``--rounds`` rounds of ``--calls``
calls (the minimum is the least disturbed by other work on a shared machine).

Run: ``python benchmarks/bench_cost_call.py [--preset tpu_like --calls 300 --rounds 7]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dfit_nb.sim import _cost as C
from dfit_nb.sim import cost, presets, schedule
from dfit_nb.sim.calibration import predictor
from dfit_nb.sim.hardware import field_vector

MODEL = "the model's jitted call, packed inputs and outputs"
MODEL_BEFORE = "  ... one input per column and field (before)"
MODEL_BEFORE_THAT = "  ... and one output copy per variable (before that)"
DATASET, DATASET_BEFORE = "Dataset, direct constructor", "  ... public constructor (before)"
COPY, COPY_BEFORE = "machine copied for jit, no revalidation", "  ... revalidated (before)"


def best_us(fn: Callable[[], Any], calls: int, rounds: int) -> float:
    for _ in range(20):
        fn()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t) / calls * 1e6)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="tpu_like")
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--rounds", type=int, default=7)
    a = p.parse_args()
    hw = presets.get(a.preset)
    ops = {"m": [64, 128, 256], "k": [64, 128, 256], "n": [64, 128, 256]}
    arrays, _ = C.alone_arrays(ops)
    codes = C.dataflow_codes("ws", 3)[0].astype(np.float64)
    fast_hw = C.for_jit(hw)
    n, r = a.calls, a.rounds
    with jax.enable_x64(True):
        grid = schedule.bucket(int(hw.tile_rows), int(hw.tile_cols))  # as cost() pads the grid
        sizes = (int(hw.tile_rows), int(hw.tile_cols), grid.rows, grid.cols, grid.tiles)
        tables, on_device = C.grid_tables(*sizes), C.device_tables(*sizes)
        keys = tuple(arrays)

        def packed() -> Any:
            return np.asarray(C._evaluate(np.stack([arrays[k] for k in keys]), keys, field_vector(hw), codes,
                                          on_device, False))

        @functools.partial(jax.jit, static_argnames="ideal")
        def stacked(ops: Any, h: Any, df: Any, t: Any, ideal: bool) -> Any:  # before: one input per leaf
            out = C.alone(ops, h, df, t, ideal)
            return jnp.stack([jnp.asarray(out[k], jnp.float64) for k in C.MODEL_OUTPUTS])

        def unpacked() -> Any:
            return np.asarray(stacked(arrays, C.for_jit(hw), codes, tables, ideal=False))

        as_dict = jax.jit(C.alone, static_argnames="ideal")  # before that: the model's outputs as a dict

        def per_variable() -> Any:  # ... copied to the host one array per variable (jax.device_get of the dict)
            return jax.device_get(as_dict(arrays, C.for_jit(hw), codes, tables, ideal=False))

        f = predictor(ops, hw)
        pure, seconds = jax.jit(f), jax.jit(lambda h: f(h)["seconds"])
        device_hw = jax.device_put(fast_hw)
        rows = {
            "cost() on 3 ops, with its Dataset": best_us(lambda: cost(ops, hw), n, r),
            MODEL: best_us(packed, n, r),
            MODEL_BEFORE: best_us(unpacked, n, r),
            MODEL_BEFORE_THAT: best_us(per_variable, n, r),
            "pure-array entry point (predictor, jitted), every output, machine from the host": best_us(
                lambda: jax.block_until_ready(pure(fast_hw)), n, r),
            "  ... machine on the device": best_us(lambda: jax.block_until_ready(pure(device_hw)), n, r),
            "  ... seconds alone, machine on the device": best_us(
                lambda: jax.block_until_ready(seconds(device_hw)), n, r),
        }
    ds = cost(ops, hw)
    data = {k: (v.dims, v.values, dict(v.attrs)) for k, v in ds.data_vars.items()}
    index = {k: ds[k].values for k in ds.indexes}
    rows[DATASET] = best_us(lambda: C.assemble(data, index, dict(ds.attrs)), n, r)
    rows[DATASET_BEFORE] = best_us(lambda: C.assemble_public(data, index, dict(ds.attrs)), n, r)
    rows[COPY] = best_us(lambda: C.for_jit(hw), n, r)
    rows[COPY_BEFORE] = best_us(lambda: dataclasses.replace(
        jax.tree.map(lambda x: np.asarray(x, np.float64), hw), name="", execution="time"), n, r)
    print(f"{a.preset}, 3 ops, best of {r} rounds of {n} calls (microseconds per call)")
    for name, us in rows.items():
        print(f"  {name:60s} {us:9.1f}")
    print(f"  speed-ups: Dataset {rows[DATASET_BEFORE] / rows[DATASET]:.1f}x, model call "
          f"{rows[MODEL_BEFORE] / rows[MODEL]:.2f}x ({rows[MODEL_BEFORE_THAT] / rows[MODEL]:.2f}x over the one "
          f"before that), machine copy {rows[COPY_BEFORE] / rows[COPY]:.1f}x")


if __name__ == "__main__":
    main()
