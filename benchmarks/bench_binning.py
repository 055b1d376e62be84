"""The event cube's time binning on a large grid: bins cumulated row by row against ``np.cumsum`` down the columns.

A run's cube spreads its compute events over (time bin, tile) cells with :func:`dfit_nb.events.binning.bin_intervals`
(busy fraction and SRAM occupancy: two calls; the NoC and energy: two more). Fully covered bins are filled by a
difference array cumulated along time; on ``cerebras_like``'s 64 x 64 tiles and the default 256 bins that is a
(256, 4,096) array, which NumPy's ``cumsum(axis=0)`` walks down each column. This replays the default
``bert_block`` there, then times, alternating, best of ``--repeats``: ``bin_intervals`` on its compute events as
today (row by row) and with NumPy's cumsum (before), and the whole Run assembled from the replay's outputs
(:func:`dfit_nb.sim.run.build_run`) both ways; the results are checked identical bit for bit.

Run: ``python benchmarks/bench_binning.py [--preset cerebras_like] [--repeats 9]``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np
from bench_saves import best  # the least disturbed of several calls (run from any folder: sys.path[0])

import dfit_nb
from dfit_nb import examples
from dfit_nb.events import binning
from dfit_nb.sim import _replay as replay_mod
from dfit_nb.sim import presets


def best_ms(fn: Callable[[], Any], repeats: int) -> float:
    return best(fn, repeats) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="cerebras_like")
    p.add_argument("--repeats", type=int, default=9)
    a = p.parse_args()
    hw = presets.get(a.preset)
    fn, args = examples.get("bert_block").build()
    trace = dfit_nb.capture(fn, *args)
    run = dfit_nb.replay(trace, hw, "ws")
    ev = run.events
    comp = np.flatnonzero((ev["source"].values == "simulated") & (ev["kind"].values == "compute"))
    tiles = int(hw.tile_rows) * int(hw.tile_cols)
    s, e = ev["start"].values[comp], ev["end"].values[comp]
    group = (ev["tile_y"].values[comp].astype(np.int64) * int(hw.tile_cols)
             + ev["tile_x"].values[comp].astype(np.int64))
    edges = binning.time_edges(float(run.summary["latency_cycles"]), 256)

    # the replay's outputs, to assemble the Run from (what replay() hands build_run)
    captured: dict[str, Any] = {}
    real_build = replay_mod.build_run

    def keep(*args_: Any, **kwargs: Any) -> Any:
        captured.update(args=args_, kwargs=kwargs)
        return real_build(*args_, **kwargs)

    replay_mod.build_run = keep  # the name replay() calls
    try:
        dfit_nb.replay(trace, hw, "ws")
    finally:
        replay_mod.build_run = real_build
    if "args" not in captured:
        raise SystemExit("replay() did not call dfit_nb.sim._replay.build_run: this benchmark needs updating")

    rowwise = binning._ROWWISE_GROUPS
    ways = {"row by row (today)": rowwise, "np.cumsum down the columns (before)": 1 << 62}
    bins: dict[str, list[float]] = {k: [] for k in ways}
    builds: dict[str, list[float]] = {k: [] for k in ways}
    results = {}
    for _ in range(3):  # rounds, alternating
        for label, threshold in ways.items():
            binning._ROWWISE_GROUPS = threshold
            try:
                results[label] = binning.bin_intervals(s, e, e - s, group, tiles, edges)
                bins[label].append(best_ms(lambda: binning.bin_intervals(s, e, e - s, group, tiles, edges),
                                           a.repeats))
                builds[label].append(best_ms(lambda: real_build(*captured["args"], **captured["kwargs"]),
                                             max(1, a.repeats // 3)))
            finally:
                binning._ROWWISE_GROUPS = rowwise
    a_, b_ = results.values()
    assert np.array_equal(a_, b_), "the two ways differ"
    print(f"bert_block on {a.preset}: {len(comp):,} compute events over 256 bins x {tiles:,} tiles "
          f"(best of {a.repeats} per round, best round; results identical bit for bit)")
    first, other = list(ways)
    for label in ways:
        print(f"  bin_intervals, {label:38s} {min(bins[label]):7.2f} ms   "
              f"build_run {min(builds[label]):7.1f} ms")
    print(f"  speed-up: bin_intervals {min(bins[other]) / min(bins[first]):.2f}x, "
          f"build_run {min(builds[other]) / min(builds[first]):.2f}x")


if __name__ == "__main__":
    main()
