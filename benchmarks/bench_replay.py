"""Replay speed: the jitted lax.scan schedule (one machine, and vmapped over machines) vs a plain-Python event loop.

The 12-layer bundled encoder replayed on ``cerebras_like`` (64 x 64 tiles, layer-pipelined):

* ``replay()``: the whole pipeline (mapping search, scan schedule, events, cube, Datasets), medians after compile,
  and one step of its Dataset assembly beside the composition it replaced;
* ``replay_batch()``: the same program vmapped over ``--machines`` variants of the preset (PE array, SRAM,
  DRAM and NoC bandwidth, clock), reduced to per-machine scalars inside the program;
* the plain-Python event loop (``tests/sim/reference.py``'s ``run``: the same schedule, op by op and tile by tile)
  given the per-op mapping *for free* (computed by the jitted code), so the ratio understates the gap.

Each machine's Python result is checked against the scan (rtol 1e-9).
Run: ``python benchmarks/bench_replay.py [--layers 12 --machines 256 --python-machines 2]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np

import dfit_nb
from dfit_nb import examples
from dfit_nb.sim import Hardware, presets, replay_batch
from dfit_nb.sim._cost import for_jit
from dfit_nb.sim._prepare import padded, pinned_layouts, prepare
from dfit_nb.sim._replay import program
from dfit_nb.sim.schedule import PER_OP, Grid, prefix_counts, tile_order

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the oracle is the tests' (tests/sim/reference.py)
from tests.sim import reference


def variants(base: Hardware, n: int, seed: int = 0) -> Hardware:
    """``n`` machines around ``base`` (same grid): PE array, SRAM, bandwidths and clock varied."""
    rng = np.random.default_rng(seed)
    pe = rng.choice([4, 8, 16], n)
    sram = rng.choice([16, 32, 64], n) * 1024
    return Hardware.stack([
        base.replace(pe_rows=int(pe[i]), pe_cols=int(pe[i]), sram_input_bytes=int(sram[i]),
                     sram_weight_bytes=int(sram[i]), sram_output_bytes=int(sram[i]) // 2,
                     dram_bytes_per_cycle=float(rng.choice([275.0, 550.0, 1100.0, 2200.0])),
                     noc_link_bytes_per_cycle=float(rng.choice([4.0, 8.0, 16.0])),
                     clock_ghz=float(rng.choice([0.9, 1.1, 1.3])))
        for i in range(n)
    ], name=f"{base.name} x{n}")


def python_replay(trace, hw: Hardware) -> tuple[float, dict, dict]:
    """Seconds of the Python event loop on ``hw`` (mapping precomputed by the jitted program), and both results."""
    prep = prepare(trace)
    arrays, preds, pred_bytes, codes, pin = padded(prep, np.zeros(len(prep.op)), pinned_layouts(prep, None))
    grid = Grid(int(hw.tiles), int(hw.tile_rows), int(hw.tile_cols))
    order = tile_order(grid.rows, grid.cols)
    with jax.enable_x64(True):
        out = jax.device_get(program(arrays, preds, pred_bytes, prefix_counts(order, grid.rows, grid.cols),
                                     for_jit(hw), codes, pin, grid, hw.execution == "spatial"))
    out = {k: np.asarray(v) for k, v in out.items()}
    scale = np.where(arrays["itemsize"] > 0, out["word"] / np.maximum(arrays["itemsize"], 1.0), 1.0)
    n = len(prep.op)
    # the reference reads what the scan decided per op (tests/sim/test_replay.py's _records hands it the same)
    per_op = {k: out[k][:n] for k in (*PER_OP, "switch_bytes", "switch_cycles", "stage_lead", "stage_tiles")}
    per_op["count"] = arrays["count"][:n]
    per_op["shared_reads"] = arrays["shared_reads"][:n]
    t0 = time.perf_counter()
    ref = reference.run(per_op, preds[:n], (pred_bytes * scale[:, None])[:n], order, hw, grid,
                        hw.execution == "spatial")
    return time.perf_counter() - t0, ref, {k: v[:n] for k, v in out.items()}


def assembly(run, repeats: int) -> None:
    """The bottleneck-class variables added to the per-op Dataset of ``run``: through xarray's constructor of a
    consistent Dataset (today, ``_bottlenecks._extended``), beside one public ``xr.Dataset`` constructor call
    (before, ``_bottlenecks._extended_public``) and ``assign``, ``assign_coords`` and the text conversion one after
    the other, each rebuilding the Dataset (before that). All give the identical Dataset (checked)."""
    from dfit_nb._files import text_as_objects
    from dfit_nb.sim import _bottlenecks

    added = ("bottleneck", "bottleneck_class", "class_evidence")
    bare = run.ops.drop_vars([*added, "mechanism_class"])
    new = {k: (run.ops[k].dims, run.ops[k].values, dict(run.ops[k].attrs)) for k in added}

    def before():
        coords = {"mechanism_class": list(_bottlenecks.CLASSES)}
        return text_as_objects(bare.assign(new).assign_coords(coords))

    def today():
        return _bottlenecks._extended(bare, new)

    def public():
        return _bottlenecks._extended_public(bare, new)

    assert today().identical(before()) and today().identical(run.ops) and public().identical(run.ops)
    best = {}
    for name, f in (("before", before), ("public", public), ("today", today)):
        times = []
        for _ in range(max(repeats, 5) * 10):
            t0 = time.perf_counter()
            f()
            times.append(time.perf_counter() - t0)
        best[name] = statistics.median(times)
    print(f"Run assembly, bottleneck classes onto the per-op Dataset: xarray's direct constructor "
          f"{best['today'] * 1e3:.2f} ms, its public constructor {best['public'] * 1e3:.2f} ms "
          f"({best['public'] / best['today']:.1f}x), assign + assign_coords + text conversion "
          f"{best['before'] * 1e3:.2f} ms ({best['before'] / best['today']:.1f}x; three such Datasets per replay)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--preset", default="cerebras_like")
    p.add_argument("--machines", type=int, default=256)
    p.add_argument("--python-machines", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    fn, args = examples.get("encoder").build(layers=a.layers)
    trace = dfit_nb.capture(fn, *args)
    base = presets.get(a.preset)
    n_ops = len(prepare(trace).op)
    print(f"{a.layers}-layer encoder: {n_ops} ops replayed on {a.preset} ({int(base.tiles)} tiles, "
          f"{base.execution}); jax {jax.__version__}, {jax.devices()[0].platform}")

    t0 = time.perf_counter()
    run = dfit_nb.replay(trace, base)
    first = time.perf_counter() - t0
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        run = dfit_nb.replay(trace, base)
        times.append(time.perf_counter() - t0)
    one = statistics.median(times)
    print(f"replay(): first call {first:.2f} s (compile), then median {one * 1e3:.1f} ms "
          f"({int(run.summary['n_events'])} events, latency {float(run.summary['latency_s']) * 1e6:.1f} us)")

    assembly(run, a.repeats)

    batch = variants(base, a.machines)
    t0 = time.perf_counter()
    ds = replay_batch(trace, batch)
    first_b = time.perf_counter() - t0
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        ds = replay_batch(trace, batch)
        times.append(time.perf_counter() - t0)
    many = statistics.median(times)
    print(f"replay_batch() over {a.machines} machines: first call {first_b:.2f} s, then median {many:.3f} s = "
          f"{a.machines / many:,.0f} replays/s")

    py_times = []
    for i in range(a.python_machines):
        hw = Hardware(name=f"variant{i}", execution=base.execution,
                      **{f: np.asarray(getattr(batch, f))[i] for f in dfit_nb.sim.hardware.FIELDS})
        seconds, ref, out = python_replay(trace, hw)
        for key in ("start", "end", "t1", "dram_end"):
            np.testing.assert_allclose(out[key], ref[key], rtol=1e-9, atol=1e-6, err_msg=key)
        assert np.isclose(ref["end"].max(), float(ds["latency_cycles"][i]), rtol=1e-9)
        py_times.append(seconds)
        print(f"python event loop, machine {i}: {seconds:.2f} s (equal to the scan and to replay_batch)")
    py = statistics.median(py_times)
    print(f"ratio, one machine: python loop {py:.2f} s / replay() {one:.3f} s = {py / one:,.0f}x "
          "(replay() also builds the events, cube and Datasets)")
    print(f"ratio, vmapped: python loop {py:.2f} s per machine / replay_batch {many / a.machines * 1e3:.2f} ms per "
          f"machine = {py / (many / a.machines):,.0f}x (target >= 50x)")


if __name__ == "__main__":
    main()
