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

from dfit_nb.events.accessor import synthetic_events
from dfit_nb.events.perfetto import PerfettoAggregationWarning, to_perfetto


def bench_events(n: int, grid: int = 16, seed: int = 0):
    return synthetic_events(n, grid, seed, regions=[f"encoder/layer_{i}/attn/qk" for i in range(24)],
                            overlap_p=0.01, overlap_cycles=60.0, dataflow="ws", clock_ghz=1.05)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--merged-max", type=int, default=100_000, help="max_events of the merged export")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    ds = bench_events(a.events)
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
