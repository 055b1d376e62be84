"""Time ``to_perfetto`` on a synthetic million-event run, one slice per event and merged.

The events: a 16 x 16 tile grid, four kinds per tile (compute, sram, noc, dram),
ops back to back on each (tile, kind) with random lengths and gaps, 1% of the
DRAM events stretched over the next one (so the lane assignment runs), bytes,
MACs and fractional energies. The first export writes every event (the
default ``max_events`` of 1,000,000 holds them); the second merges them into
time bins under ``--merged-max`` slices. Median of ``--repeats`` runs each.
Run: ``python benchmarks/bench_perfetto_export.py [--events N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings

import numpy as np

from dfit_nb.events import schema
from dfit_nb.events.perfetto import PerfettoAggregationWarning, to_perfetto


def synthetic_events(n: int, grid: int = 16, seed: int = 0):
    rng = np.random.default_rng(seed)
    kinds = np.array(["compute", "sram", "noc", "dram"])
    tracks = grid * grid * len(kinds)
    per = max(1, n // tracks)
    tile = np.repeat(np.arange(grid * grid), len(kinds) * per)
    kind = np.tile(np.repeat(kinds, per), grid * grid)
    dur = rng.integers(1, 50, tile.size).astype(float)
    step = (dur + rng.integers(0, 10, tile.size)).reshape(-1, per)
    start = (np.cumsum(step, axis=1) - step).ravel()
    end = start + dur + np.where((kind == "dram") & (rng.random(tile.size) < 0.01), 60.0, 0.0)
    op = np.tile(np.arange(per), tracks)
    regions = np.array([f"encoder/layer_{i}/attn/qk" for i in range(24)])
    return schema.events_dataset({
        "op": op, "region": regions[op % 24], "tile_y": tile // grid, "tile_x": tile % grid, "kind": kind,
        "start": start, "end": end, "bytes": rng.integers(0, 4096, tile.size).astype(float),
        "macs": np.where(kind == "compute", 1024.0, 0.0), "energy_pj": dur * 0.37,
        "dataflow": np.full(tile.size, "ws")}, clock_ghz=1.05)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--merged-max", type=int, default=100_000, help="max_events of the merged export")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    ds = synthetic_events(a.events)
    print(f"{ds.sizes['event']:,} events")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.json")
        for label, options in (("one slice per event", {}), ("merged", {"max_events": a.merged_max})):
            times = []
            for _ in range(a.repeats):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", PerfettoAggregationWarning)
                    t0 = time.perf_counter()
                    to_perfetto(ds, path, clock_ghz=1.05, chip="tpu_like", **options)
                    times.append(time.perf_counter() - t0)
            print(f"{label:>20}: {statistics.median(times):.2f} s (median of {a.repeats}; "
                  f"runs {', '.join(f'{t:.2f}' for t in times)}), {os.path.getsize(path) / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
