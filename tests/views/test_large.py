"""Run views of a large synthetic run: every spec stays under 1 MB and its subtitle says the data were aggregated.

The run is built directly from the event schema (200k events on a 32 x 32 grid, a 4096-bin cube, 500 regions)
rather than replayed, so the test stays fast; ``benchmarks/bench_views_large.py`` measures a real 1M-event run.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import xarray as xr

from dfit_nb.events import binning, schema
from dfit_nb.sim.run import Run, link_names
from dfit_nb.views import _common
from dfit_nb.views import run as views

N_EVENTS = 200_000
ROWS = COLS = 32
N_BINS = 4096
N_REGIONS = 500
LIMIT = 1_000_000  # bytes of JSON


@pytest.fixture(scope="module")
def big_run() -> Run:
    rng = np.random.default_rng(0)
    names = np.array([f"layer{i // 20}/block{i % 20}/op" for i in range(N_REGIONS)], dtype=object)
    op = np.sort(rng.integers(0, 2000, N_EVENTS))
    start = op * 100.0 + rng.uniform(0, 50, N_EVENTS)
    end = start + rng.uniform(1, 60, N_EVENTS)
    ty, tx = rng.integers(0, ROWS, N_EVENTS), rng.integers(0, COLS, N_EVENTS)
    attrs = {"hardware": "synthetic", "clock_ghz": 1.0, "function": "big"}
    events = schema.events_dataset({
        "op": op, "region": names[op % N_REGIONS], "tile_y": ty, "tile_x": tx,
        "kind": np.array(schema.KINDS, dtype=object)[rng.integers(0, len(schema.KINDS), N_EVENTS)],
        "start": start, "end": end,
    }, clock_ghz=1.0, attrs=attrs)
    edges = binning.time_edges(float(end.max()), N_BINS)
    comp = np.flatnonzero(events["kind"].values == "compute")
    busy = binning.busy_fraction(start[comp], end[comp], (ty * COLS + tx)[comp], ROWS * COLS, edges)
    grid = ("time", "tile_y", "tile_x")
    links = link_names(ROWS, COLS)
    cube = xr.Dataset(
        {"busy": (grid, np.clip(busy, 0, 1).reshape(N_BINS, ROWS, COLS)),
         "sram_occupancy": (grid, rng.uniform(0, 1, (N_BINS, ROWS, COLS))),
         "link_load": (("time", "link"), rng.uniform(0, 1, (N_BINS, len(links))))},
        coords={"time": edges[:-1], "time_end": ("time", edges[1:]), "tile_y": np.arange(ROWS),
                "tile_x": np.arange(COLS), "link": links},
        attrs=attrs)
    return Run(events=events, cube=cube, summary=xr.Dataset(attrs=attrs), ops=xr.Dataset(attrs=attrs),
               regions=xr.Dataset(attrs=attrs), attrs=attrs)


def _ab() -> xr.Dataset:
    rng = np.random.default_rng(1)
    e_a, e_b = rng.uniform(1e6, 1e9, N_REGIONS), rng.uniform(1e6, 1e9, N_REGIONS)
    return xr.Dataset(
        {"energy_pj_a": ("region", e_a), "energy_pj_b": ("region", e_b), "delta_energy_pj": ("region", e_b - e_a),
         "delta_busy_s": (("tile_y", "tile_x"), rng.normal(0, 1e-6, (128, 128)))},
        coords={"region": [f"r{i}" for i in range(N_REGIONS)], "tile_y": np.arange(128), "tile_x": np.arange(128)},
        attrs={"a": "ws", "b": "os", "function": "big"})


VIEWS = {
    "timeline": views.timeline,
    "timeline_region": lambda r: views.timeline(r, by="region", color="region"),
    "timeline_region_kind": lambda r: views.timeline(r, by="region", color="kind"),
    "utilization": views.utilization,
    "noc_load": views.noc_load,
    "buffer_pressure": views.buffer_pressure,
    "compare": lambda r: views.compare(_ab()),
}


@pytest.mark.parametrize("view", list(VIEWS))
def test_large_run_views_are_aggregated_and_small(big_run, view):
    t0 = time.perf_counter()
    spec = VIEWS[view](big_run).to_dict()  # validates against the Vega-Lite schema
    seconds = time.perf_counter() - t0
    size = len(json.dumps(spec))
    assert size < LIMIT, f"{view}: {size:,} B"
    assert sum(len(v) for v in spec["datasets"].values()) <= _common.MAX_ROWS + 600  # + the lookup tables
    subtitle = spec["title"]["subtitle"]
    subtitle = " ".join(subtitle) if isinstance(subtitle, list) else subtitle
    assert "aggregated" in subtitle, subtitle
    assert seconds < 10.0, f"{view}: {seconds:.2f} s"  # generous: a shared CI core; about 0.2 s here


def test_timeline_busy_is_a_fraction(big_run):
    spec = views.timeline(big_run, by="region", color="kind").to_dict()
    rows = [r for v in spec["datasets"].values() for r in v if "b" in r]
    busy = np.array([r["b"] for r in rows])
    events = np.array([r["n"] for r in rows])
    assert ((busy >= 0) & (busy <= 1)).all()
    assert events.sum() >= N_EVENTS  # an event spanning several bins counts in each
    tracks = next(v for v in spec["datasets"].values() if v and "track" in v[0])
    assert {t["track"] for t in tracks} == set(big_run.events["region"].values.tolist())
