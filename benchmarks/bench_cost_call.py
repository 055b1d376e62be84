"""A warm ``cost()`` call on a small table, and the pure-array entry point of the model, each part side by side.

``cost()`` on a 3-op table is mostly fixed overhead around one jitted call of the model. This prints, in one run on
the same machine and table: the whole call; the model's jitted call with its inputs packed (the op table's columns
in row blocks, the machine's field vector and the dataflow codes in one vector; the grid tables kept on the device)
and its outputs copied to the host in packed blocks (today), beside the same call with one input per op column and
machine field and the tables sent from the host (before), and with one output copy per variable too (before that);
the Dataset built through xarray's direct constructor (today) and its public one (before); the machine copied for
``jit`` without and with revalidation; and the pure-array entry point (:func:`dfit_nb.sim.calibration.predictor`,
jitted, what ``jax.grad`` goes through): every output, the machine sent from the host or already on the device, and
the seconds alone (what a calibration's loss reads), and the same over the machine's fields as one vector
(:func:`dfit_nb.sim.calibration.vector_predictor`). Each figure is the best of ``--rounds`` rounds of ``--calls``
calls (the minimum is the least disturbed by other work on a shared machine).

Then where a warm call's time goes beyond its parts measured alone: the host work of a call (the op table and the
Dataset) timed alone back to back, then timed in the same loop but each time right after something else: a
trivial jitted call, the model's program, or a write over 4 MB of memory (more than a core's L2 cache); cost()'s
own program as cost() calls it (on the grid it compiles for, ``_cost.cost_grid``, its inputs and outputs in
blocks: the rows above use the 8 x 8 bucket and 3 unpadded ops to compare the packings), and the same program
with float64 grid tables (576 bytes each, past XLA's threshold for running kernels in order on the calling
thread, ``dfit_nb._runtime.padding.SEQUENTIAL_BYTES``: it runs on the pool); and the floor: that
program and the Dataset of its outputs and nothing else (no op table, no checks), what a ``cost()`` of 3 ops
could take on this machine if every other step were free.

JAX fixes a process's CPU dispatch when it creates its CPU client, so ``--dispatch both`` (the default) runs the
whole table twice in two fresh processes, alternating: synchronous dispatch (what ``import dfit_nb`` asks for,
:mod:`dfit_nb._runtime.dispatch`) and JAX's asynchronous default (``DFIT_NB_SYNC_CPU_DISPATCH=0``), and prints them side
by side with the better of ``--repeats`` processes of each.

``--first``: instead, the first call of each of three presets in a fresh process with an empty compilation cache,
then in another with that cache (what compiling for the 8-tile grid costs a session).

Run: ``python benchmarks/bench_cost_call.py [--preset tpu_like --calls 300 --rounds 7 --dispatch both]``,
``python benchmarks/bench_cost_call.py --first``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dfit_nb._runtime import datasets as _xarray
from dfit_nb._runtime.padding import padding
from dfit_nb.sim import _cost as C
from dfit_nb.sim import cost, presets, schedule
from dfit_nb.sim._optable import alone_arrays
from dfit_nb.sim.calibration import predictor, vector_predictor
from dfit_nb.sim.hardware import field_vector

MODEL = "the model's jitted call (8 x 8 bucket), packed inputs and outputs"
MODEL_BEFORE = "  ... one input per column and field (before)"
MODEL_BEFORE_THAT = "  ... and one output copy per variable (before that)"
DATASET, DATASET_BEFORE = "Dataset, direct constructor", "  ... public constructor (before)"
COPY, COPY_BEFORE = "machine copied for jit, no revalidation", "  ... revalidated (before)"
HOST = "host work of a call (op table, Dataset), back to back"
HOST_AFTER = {"trivial": "  ... each right after a trivial jitted call",
              "program": "  ... each right after the model's program",
              "touch": "  ... each right after writing 4 MB of memory"}
OWN = "cost()'s own program, as cost() calls it (its grid, in blocks)"
OWN_POOL = "  ... with the grid tables as float64 (a buffer past 512 B: on XLA's pool)"
FLOOR = "the model's program and its Dataset, nothing else (the floor)"


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
    p.add_argument("--dispatch", choices=("both", "sync", "async"), default="both")
    p.add_argument("--repeats", type=int, default=2, help="processes per dispatch mode with --dispatch both")
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # a child's rows, for --dispatch both
    p.add_argument("--first", action="store_true", help="time first calls in fresh processes instead (see below)")
    p.add_argument("--first-child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    import dfit_nb

    dfit_nb.setup()  # the compilation cache (DFIT_NB_COMPILATION_CACHE) and dispatch (DFIT_NB_SYNC_CPU_DISPATCH)
    if a.first_child:
        first_calls_here()
        return
    if a.first:
        first_calls()
        return
    if a.dispatch == "both":
        side_by_side(a)
        return
    rows = measure(a)
    if a.json:
        print(json.dumps(rows))
        return
    print(f"{a.preset}, 3 ops, {a.dispatch} CPU dispatch, best of {a.rounds} rounds of {a.calls} calls "
          "(microseconds per call)")
    for name, us in rows.items():
        print(f"  {name:60s} {us:9.1f}")
    print_speedups(rows)


def side_by_side(a: argparse.Namespace) -> None:
    """Each dispatch mode in fresh processes, alternating, ``a.repeats`` of each; the best per row."""
    best: dict[str, dict[str, float]] = {"sync": {}, "async": {}}
    for _ in range(a.repeats):
        for mode in best:
            env = {**os.environ, "DFIT_NB_SYNC_CPU_DISPATCH": "1" if mode == "sync" else "0"}
            out = subprocess.run([sys.executable, __file__, "--preset", a.preset, "--calls", str(a.calls),
                                  "--rounds", str(a.rounds), "--dispatch", mode, "--json"],
                                 env=env, check=True, capture_output=True, text=True).stdout
            for name, us in json.loads(out.strip().splitlines()[-1]).items():
                best[mode][name] = min(us, best[mode].get(name, float("inf")))
    print(f"{a.preset}, 3 ops, best of {a.repeats} processes x {a.rounds} rounds of {a.calls} calls "
          "(microseconds per call)")
    print(f"  {'':60s} {'sync':>9s} {'async':>9s}  (sync: import dfit_nb's default; async: JAX's)")
    for name, us in best["sync"].items():
        print(f"  {name:60s} {us:9.1f} {best['async'][name]:9.1f}")
    print_speedups(best["sync"])
    call = "cost() on 3 ops, with its Dataset"
    print(f"  synchronous dispatch: cost() {best['async'][call] / best['sync'][call]:.2f}x, pure-array seconds "
          f"{best['async'][SECONDS] / best['sync'][SECONDS]:.2f}x (field vector "
          f"{best['async'][VECTOR] / best['sync'][VECTOR]:.2f}x); the field vector over the Hardware pytree "
          f"{best['sync'][SECONDS] / best['sync'][VECTOR]:.2f}x (sync)")


SECONDS = "  ... seconds alone, machine on the device"
VECTOR = "  ... seconds alone, the fields as one vector (vector_predictor)"


def print_speedups(rows: dict[str, float]) -> None:
    print(f"  speed-ups: Dataset {rows[DATASET_BEFORE] / rows[DATASET]:.1f}x, model call "
          f"{rows[MODEL_BEFORE] / rows[MODEL]:.2f}x ({rows[MODEL_BEFORE_THAT] / rows[MODEL]:.2f}x over the one "
          f"before that), machine copy {rows[COPY_BEFORE] / rows[COPY]:.1f}x")


def measure(a: argparse.Namespace) -> dict[str, float]:
    """Every row of the table, in this process (its CPU dispatch chosen by ``DFIT_NB_SYNC_CPU_DISPATCH``)."""
    from dfit_nb._runtime import dispatch as _dispatch

    want = a.dispatch == "sync"
    if _dispatch.synchronous() != want:
        raise SystemExit(f"this process dispatches {'synchronously' if _dispatch.synchronous() else 'async'}; "
                         f"run it with DFIT_NB_SYNC_CPU_DISPATCH={'1' if want else '0'}")
    hw = presets.get(a.preset)
    ops = {"m": [64, 128, 256], "k": [64, 128, 256], "n": [64, 128, 256]}
    arrays, _ = alone_arrays(ops)
    codes = C.dataflow_codes("ws", 3)[0].astype(np.float64)
    fast_hw = C.for_jit(hw)
    n, r = a.calls, a.rounds
    with jax.enable_x64(True):
        grid = schedule.bucket(int(hw.tile_rows), int(hw.tile_cols))  # as cost() pads the grid
        sizes = (int(hw.tile_rows), int(hw.tile_cols), grid.rows, grid.cols, grid.tiles)
        tables, on_device = C.grid_tables(*sizes), C.device_tables(*sizes)
        columns, _ = C.alone_columns(ops)  # what cost()'s program takes (it derives the model's inputs)
        keys = tuple(columns)

        def packed() -> Any:
            table = np.stack([columns[k] for k in keys])
            blocks = C._evaluate(C.pack(table, field_vector(hw), codes), keys, 0, C.rows_per_block(3), on_device,
                                 False)
            return [np.asarray(b) for b in blocks]

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
        vf = vector_predictor(ops, hw)
        vector_seconds = jax.jit(lambda v: vf(v)["seconds"])
        device_fields = jax.device_put(field_vector(hw))
        rows = {
            "cost() on 3 ops, with its Dataset": best_us(lambda: cost(ops, hw), n, r),
            MODEL: best_us(packed, n, r),
            MODEL_BEFORE: best_us(unpacked, n, r),
            MODEL_BEFORE_THAT: best_us(per_variable, n, r),
            "pure-array entry point (predictor, jitted), every output, machine from the host": best_us(
                lambda: jax.block_until_ready(pure(fast_hw)), n, r),
            "  ... machine on the device": best_us(lambda: jax.block_until_ready(pure(device_hw)), n, r),
            SECONDS: best_us(
                lambda: jax.block_until_ready(seconds(device_hw)), n, r),
            VECTOR: best_us(lambda: jax.block_until_ready(vector_seconds(device_fields)), n, r),
        }
    ds = cost(ops, hw)
    data = {k: (v.dims, v.values, dict(v.attrs)) for k, v in ds.data_vars.items()}
    index = {k: ds[k].values for k in ds.indexes}
    rows[DATASET] = best_us(lambda: _xarray.assemble(data, index, dict(ds.attrs)), n, r)
    rows[DATASET_BEFORE] = best_us(lambda: _xarray.assemble_public(data, index, dict(ds.attrs)), n, r)
    rows.update(host_in_situ(ops, hw, ds, n, r))
    rows[COPY] = best_us(lambda: C.for_jit(hw), n, r)
    rows[COPY_BEFORE] = best_us(lambda: dataclasses.replace(
        jax.tree.map(lambda x: np.asarray(x, np.float64), hw), name="", execution="time"), n, r)
    return rows


def host_in_situ(ops: Any, hw: Any, ds: Any, n: int, rounds: int) -> dict[str, float]:
    """The host work of a ``cost()`` call (its op table and its Dataset, from the outputs ``ds`` holds) timed alone
    and right after other work (:data:`HOST_AFTER`), and the floor (:data:`FLOOR`): the best of ``rounds`` rounds
    of ``n`` calls, counting only the host work's own time in the ``HOST_AFTER`` rows."""
    outputs = {k: ds[k].values for k in (*C.MODEL_OUTPUTS, "seconds", "energy_j")}
    coord, attrs, count = ds["op"].values, dict(ds.attrs), ds["count"].values
    columns, _ = C.alone_columns(ops)
    keys = tuple(columns)
    codes = C.dataflow_codes("ws", 3)[0].astype(np.float64)
    index = padding(3, C.COST_OPS)  # as cost() pads 3 ops

    def host() -> Any:
        C.alone_columns(ops)
        return C.to_dataset(outputs, ("op",), {"op": coord}, attrs, count)

    with jax.enable_x64(True):
        _, tables = C._grid_and_tables(int(hw.tile_rows), int(hw.tile_cols), 3)  # as cost() compiles for it
        table, fields, df = np.stack([columns[k] for k in keys])[:, index], field_vector(hw), codes[index]
        trivial = jax.jit(lambda t, f, d: t.sum() + f.sum() + d.sum())
        memory = np.zeros(4 * 2**20 // 8)

        def program() -> Any:  # cost()'s own compiled program, as cost() calls it
            blocks = C._evaluate_small(C.pack(table, fields, df), keys=keys, dataflows=0,
                                       block_rows=C.rows_per_block(len(df)), tables=tables, ideal=False)
            return [row for block in blocks for row in np.asarray(block)]

        def touch() -> None:
            memory.__iadd__(1.0)

        def floor() -> Any:
            out = dict(zip(C.MODEL_OUTPUTS, (row[:3] for row in program()), strict=True))
            out["seconds"], out["energy_j"] = out["cycles"], out["energy_pj"]  # placeholders: the same variables
            return C.to_dataset(out, ("op",), {"op": coord}, attrs, count)

        befores = {"trivial": lambda: np.asarray(trivial(table, fields, df)), "program": program, "touch": touch}
        rows = {HOST: best_us(host, n, rounds)}
        for name, before in befores.items():
            rows[HOST_AFTER[name]] = best_host_us(before, host, n, rounds)
        rows[OWN] = best_us(program, n, rounds)
        wide = jax.device_put(tuple(np.asarray(t, np.float64) for t in tables))  # the same counts, 576 B each

        def pooled() -> Any:
            blocks = C._evaluate_small(C.pack(table, fields, df), keys=keys, dataflows=0,
                                       block_rows=C.rows_per_block(len(df)), tables=wide, ideal=False)
            return [row for block in blocks for row in np.asarray(block)]

        rows[OWN_POOL] = best_us(pooled, n, rounds)
        rows[FLOOR] = best_us(floor, n, rounds)
    return rows


def best_host_us(before: Callable[[], Any], host: Callable[[], Any], calls: int, rounds: int) -> float:
    """``host``'s own time per call when each call comes right after ``before`` (not timed): best of ``rounds``."""
    for _ in range(20):
        before()
        host()
    times = []
    for _ in range(rounds):
        total = 0.0
        for _ in range(calls):
            before()
            t = time.perf_counter()
            host()
            total += time.perf_counter() - t
        times.append(total / calls * 1e6)
    return min(times)


FIRST_PRESETS = ("tpu_like", "npu_like", "scalesim_32")


def first_calls() -> None:
    """The first ``cost()`` of 3 ops on each of :data:`FIRST_PRESETS`, in that order, in a fresh process with an
    empty compilation cache, then in a second fresh process with that cache (what a user's next session finds):
    ``tpu_like`` and ``scalesim_32`` share the 8-tile program, ``npu_like`` (20 tiles) runs the 8 x 8 bucket's."""
    with tempfile.TemporaryDirectory() as cache:
        env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
        env["DFIT_NB_COMPILATION_CACHE"] = cache
        for label in ("empty compilation cache", "warm compilation cache"):
            out = subprocess.run([sys.executable, __file__, "--first-child"], env=env, check=True,
                                 capture_output=True, text=True).stdout.strip().splitlines()[-1]
            print(f"first cost() of 3 ops, fresh process, {label}: {out}")


def first_calls_here() -> None:
    ops = {"m": [64, 128, 256], "k": [64, 128, 256], "n": [64, 128, 256]}
    times = []
    for name in FIRST_PRESETS:
        t = time.perf_counter()
        cost(ops, presets.get(name))
        times.append(f"{name} {time.perf_counter() - t:.3f} s")
    print(", then ".join(times))


if __name__ == "__main__":
    main()
