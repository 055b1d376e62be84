"""A run of more than a million events: build it, save it to Zarr (and netCDF), reopen it, export it; peak memory.

The 12-layer encoder (seq 128, d_model 256) time-multiplexed on ``cerebras_like``'s 4096 tiles: every op
spreads over up to the whole grid, so the run holds millions of (op, tile, kind) events. Peak memory is the
process's maximum resident set (``resource.getrusage``), printed after each stage.

The checksums a save records and a load checks (issue 42: a CRC32 of every variable's values, and of every
attribute's value) are timed on their own over the run's tree, once before the saves (what a save adds) and once
over each tree loaded back (what a load adds), and printed as a share of that save's and that load's time: timed
apart rather than as a save with and one without, whose difference a busy machine's noise would swamp.
Run: ``python benchmarks/bench_large_run.py [--layers 12] [--out /tmp]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

import xarray as xr

import dfit_nb
from dfit_nb import _format, examples
from dfit_nb.sim import presets


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def checksum_s(tree: xr.DataTree) -> float:
    """Seconds to checksum every variable and every attribute of ``tree`` as a save does (a load checks the same
    values again)."""
    t0 = time.perf_counter()
    for _, _, var in _format.own_variables(tree):
        _format.checksum(var.values)
    for node in tree.subtree:
        _format.attrs_checksums(node.attrs)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--out", default=None, help="folder for the files (default: a temporary one, removed)")
    a = p.parse_args()
    out = Path(a.out or tempfile.mkdtemp())
    fn, args = examples.get("encoder").build(layers=a.layers, seq=128, d_model=256, heads=4, d_ff=1024)
    trace = dfit_nb.capture(fn, *args)
    t0 = time.perf_counter()
    run = dfit_nb.replay(trace, presets.get("cerebras_like"), "ws", execution="time")
    n = int(run.summary["n_events"])
    print(f"replay: {n:,} events in {time.perf_counter() - t0:.1f} s (compile included); "
          f"events Dataset {run.events.nbytes / 2**20:,.0f} MiB; peak RSS {peak_mib():,.0f} MiB")
    summing = checksum_s(run.to_datatree())
    for suffix in (".zarr", ".nc"):
        path = out / f"big{suffix}"
        t0 = time.perf_counter()
        run.save(path)
        saved = time.perf_counter() - t0
        size = sum(f.stat().st_size for f in path.rglob("*")) if path.is_dir() else path.stat().st_size
        t0 = time.perf_counter()
        back = dfit_nb.load_run(path)
        loaded = time.perf_counter() - t0
        same = all(getattr(back, part).identical(getattr(run, part))
                   for part in ("events", "cube", "summary", "ops", "regions"))
        checking = checksum_s(back.to_datatree())
        print(f"{suffix}: saved in {saved:.1f} s ({size / 2**20:,.0f} MiB), reopened in {loaded:.1f} s, "
              f"identical={same}; peak RSS {peak_mib():,.0f} MiB; checksums {summing:.2f} s "
              f"({summing / saved:.1%} of the save), checked in {checking:.2f} s ({checking / loaded:.1%} of the "
              "load)")
        del back
    t0 = time.perf_counter()
    path = run.to_perfetto(out / "big.json")
    print(f"perfetto: {path.stat().st_size / 2**20:,.0f} MiB in {time.perf_counter() - t0:.1f} s (aggregated to "
          f"at most 1M slices); peak RSS {peak_mib():,.0f} MiB")
    if a.out is None:
        shutil.rmtree(out, ignore_errors=True)
    print(f"peak RSS of the whole run: {peak_mib():,.0f} MiB (machine: {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
