"""Events Datasets made up for examples, tests and benchmarks: :func:`demo_events` (four events) and
:func:`synthetic_events` (about ``n``, on a grid of tiles). Importable from :mod:`dfit_nb.events.accessor`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xarray as xr

from .schema import events_dataset


def demo_events() -> xr.Dataset:
    """A tiny simulated events Dataset (4 events, 2×2 tiles, clock 1 GHz) for examples.

    Examples
    --------
    >>> demo_events().sizes["event"]
    4
    """
    return events_dataset({
        "op": [0, 1, 1, 2],
        "kind": ["compute", "compute", "dram", "compute"],
        "region": ["enc/attn", "enc/mlp", "enc/mlp", "dec"],
        "tile_y": [0, 0, 1, 1],
        "tile_x": [0, 1, 0, 1],
        "start": [0.0, 10.0, 0.0, 30.0],
        "end": [10.0, 30.0, 20.0, 35.0],
        "bytes": [0.0, 0.0, 64.0, 0.0],
        "macs": [100.0, 200.0, 0.0, 50.0],
        "energy_pj": [10.0, 20.0, 30.0, 5.0],
        "kernel": [0, 0, 0, 1],
    }, clock_ghz=1.0)


def synthetic_events(n: int, grid: int = 8, seed: int = 0, *, regions: Sequence[str] | None = None,
                     overlap_p: float = 0.05, overlap_cycles: float = 40.0, dataflow: str | None = None,
                     clock_ghz: float = 1.0) -> xr.Dataset:
    """About ``n`` simulated events for tests and benchmarks: ops back to back on each (tile, kind) of a grid.

    Four kinds per tile (compute, sram, noc, dram), random lengths (1-49 cycles) and gaps (0-9), and a fraction
    ``overlap_p`` of the DRAM events stretched by ``overlap_cycles`` over the next one; op ``i`` is in
    ``regions[i % len(regions)]`` (default: four ``enc/layer_k/attn/qk`` regions).

    >>> ds = synthetic_events(1000, grid=2)
    >>> ds.sizes["event"], sorted(set(ds["kind"].values))
    (992, ['compute', 'dram', 'noc', 'sram'])
    """
    rng = np.random.default_rng(seed)
    kinds = np.array(["compute", "sram", "noc", "dram"])
    tracks = grid * grid * len(kinds)
    per = max(1, n // tracks)
    tile = np.repeat(np.arange(grid * grid), len(kinds) * per)
    kind = np.tile(np.repeat(kinds, per), grid * grid)
    dur = rng.integers(1, 50, tile.size).astype(float)
    step = (dur + rng.integers(0, 10, tile.size)).reshape(-1, per)
    start = (np.cumsum(step, axis=1) - step).ravel()
    end = start + dur + np.where((kind == "dram") & (rng.random(tile.size) < overlap_p), overlap_cycles, 0.0)
    op = np.tile(np.arange(per), tracks)
    names = np.asarray(regions if regions is not None else [f"enc/layer_{i}/attn/qk" for i in range(4)], dtype=object)
    cols = {"op": op, "region": names[op % len(names)], "tile_y": tile // grid, "tile_x": tile % grid,
            "kind": kind, "start": start, "end": end, "bytes": rng.integers(0, 4096, tile.size).astype(float),
            "macs": np.where(kind == "compute", 1024.0, 0.0), "energy_pj": dur * 0.37}
    if dataflow is not None:
        cols["dataflow"] = np.full(tile.size, dataflow)
    return events_dataset(cols, clock_ghz=clock_ghz)
