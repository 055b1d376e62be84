"""Writing and reading a replayed run: netCDF through the netCDF4 library (what dfit_nb uses) beside h5netcdf,
and a Zarr store encoded in memory then written (what dfit_nb does) beside Zarr's local store.

A ``Run`` saves as one netCDF4 file of six groups and ~150 variables (the event cube, per-op and per-region
results, the summary); ``dfit-nb report`` writes one per preset and the tests load many. Almost all of the time
is per-variable overhead in the engine, not bytes. This prints, in one run on the same machine and the same
tree (the default example ``bert_block`` replayed on ``--preset``): ``to_netcdf(None)`` (the in-memory write
:func:`dfit_nb._files.save_tree` does) and ``open_datatree(...).load()`` with each engine, best of ``--rounds``,
then their ratios; and ``Run.save`` / ``dfit_nb.load_run`` end to end (what a user waits for), for a ``.nc`` path
and for a ``.zarr`` path, the latter as saved today (the store encoded in memory, then its files written:
:func:`dfit_nb._files._write_zarr`) and through Zarr's local store (before; what a tree over
``ZARR_IN_MEMORY_BYTES`` still takes), alternating. h5netcdf is a test extra: without it only the netCDF4 rows
print.

Run: ``python benchmarks/bench_saves.py [--preset tpu_like --rounds 7]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import xarray as xr

import dfit_nb
from dfit_nb import _files
from dfit_nb.sim import presets


def best(fn: Callable[[], object], rounds: int) -> float:
    """Least seconds of ``rounds`` calls (the least disturbed by other work on a shared machine)."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="tpu_like")
    p.add_argument("--rounds", type=int, default=7)
    a = p.parse_args()
    fn, args = dfit_nb.examples.get("bert_block").build()
    run = dfit_nb.replay(dfit_nb.capture(fn, *args), presets.get(a.preset), "ws")
    tree = run.to_datatree()
    n_vars = sum(len(node.dataset.variables) for node in tree.subtree)
    engines = ["netcdf4"] + (["h5netcdf"] if importlib.util.find_spec("h5netcdf") else [])
    print(f"bert_block replayed on {a.preset}: {len(tree.children)} groups, {n_vars} variables; "
          f"best of {a.rounds}")
    write, read = {}, {}
    with tempfile.TemporaryDirectory(prefix="bench_saves-") as tmp:
        for eng in engines:
            path = Path(tmp) / f"{eng}.nc"
            data = bytes(tree.to_netcdf(None, engine=eng))
            path.write_bytes(data)
            write[eng] = best(lambda eng=eng: tree.to_netcdf(None, engine=eng), a.rounds)
            read[eng] = best(lambda eng=eng, path=path: xr.open_datatree(path, engine=eng).load().close(), a.rounds)
            print(f"  {eng:9s} write {write[eng] * 1e3:7.1f} ms   read {read[eng] * 1e3:7.1f} ms   "
                  f"{len(data) / 1e6:.2f} MB")
        if "h5netcdf" in write:
            print(f"  netcdf4 vs h5netcdf: write {write['h5netcdf'] / write['netcdf4']:.1f}x faster, "
                  f"read {read['h5netcdf'] / read['netcdf4']:.1f}x faster")
        path = Path(tmp) / "run.nc"
        save = best(lambda: run.save(path), a.rounds)
        load = best(lambda: dfit_nb.load_run(path), a.rounds)
        print(f"  Run.save {save * 1e3:.1f} ms, dfit_nb.load_run {load * 1e3:.1f} ms (checks and atomic rename "
              "included)")
        store = Path(tmp) / "run.zarr"
        in_memory = _files.ZARR_IN_MEMORY_BYTES
        zarr_save = {"in memory": [], "local store (before)": []}
        for _ in range(a.rounds):
            for label, limit in (("in memory", in_memory), ("local store (before)", 0)):
                _files.ZARR_IN_MEMORY_BYTES = limit
                t0 = time.perf_counter()
                run.save(store)
                zarr_save[label].append(time.perf_counter() - t0)
        _files.ZARR_IN_MEMORY_BYTES = in_memory
        load = best(lambda: dfit_nb.load_run(store), a.rounds)
        fast, slow = min(zarr_save["in memory"]), min(zarr_save["local store (before)"])
        print(f"  Run.save to .zarr {fast * 1e3:.1f} ms encoded in memory, {slow * 1e3:.1f} ms through Zarr's local "
              f"store (before): {slow / fast:.1f}x faster; dfit_nb.load_run {load * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
