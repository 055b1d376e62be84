"""Refuse work that cannot fit, before starting it: memory estimates of the simulator's big arrays.

Every entry point that allocates in proportion to a size the user chooses
(the tile grid, the number of machines, time bins, events) estimates its peak
from those sizes before it compiles or allocates anything, and raises
:class:`MemoryGuardError` when the estimate exceeds the memory available to
this process: a clear message instead of the operating system's OOM killer or
XLA's ``RESOURCE_EXHAUSTED`` after minutes. Where the API returns something
small (``replay_batch``'s per-machine scalars) the work is chunked instead. A lazy sweep or batch
(``chunks=``, :mod:`dfit_nb.sim.scale`) checks one chunk's estimate, times the chunks that run at once, against
a worker's memory before it builds its graph.

The estimates are upper bounds built from what each stage holds (float64
arrays and the copies NumPy and XLA make of them), checked against the peak
resident memory of real runs in ``tests/sim/test_memory_guard.py``. The
memory available (:func:`dfit_nb._memory.available_bytes`) is the operating
system's figure (``psutil``), capped by a cgroup limit when the process runs in
one; set ``DFIT_NB_MEMORY_LIMIT`` (bytes, or ``"8GB"``, ``"512MiB"``) to use
another budget (lower to keep headroom for other work, higher to accept the
risk).

>>> from dfit_nb.sim import memory
>>> est = memory.Estimate("replay", {"cube": 3 * 2**30}, {"tiles": 10**6})
>>> est.check(available=2**30, advice="use fewer time bins")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
dfit_nb._memory.MemoryGuardError: replay needs about 3.0 GiB (cube 3.0 GiB; tiles=1000000), more than ...
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

# the memory figure and the error are shared with capture and the CLI (one figure for every floor)
from .._memory import LIMIT_ENV, MemoryGuardError, available_bytes, human, parse_bytes

#: what compiling and running a replay program costs whatever its sizes (JAX's runtime, the executable, XLA's
#: buffers): measured as the peak resident growth of a replay of the encoder on a 64 x 64 grid, about 0.35 GiB,
#: rounded up
COMPILED_BYTES = 512 * 2**20

#: bytes per replay event through its expansion (float64 columns, object strings, the per-kind parts, the time
#: sort and the Dataset): about 12 columns, three copies at the peak
EVENT_BYTES = 400

#: float64 results per (machine, dataflow, op) of a sweep: the variables of :func:`dfit_nb.sim.cost` and the
#: derived ones (41 today; the test suite checks the bound), held three times at the peak (the chunks' results,
#: their concatenation, the Dataset)
SWEEP_VALUES = 48
SWEEP_COPIES = 3

#: per-op float64 values a replay's scan keeps per op besides its link loads (records, carry, model outputs)
RECORD_VALUES = 64


@dataclasses.dataclass(frozen=True)
class Estimate:
    """The peak memory of some work: named parts (bytes) and the sizes they come from."""

    what: str
    parts: Mapping[str, float]
    sizes: Mapping[str, Any]

    @property
    def total(self) -> float:
        return float(sum(self.parts.values()))

    def check(self, advice: str, available: float | None = None) -> None:
        """Raise :class:`MemoryGuardError` naming the sizes, the estimate, the memory available and ``advice``
        when the estimate does not fit."""
        room = available_bytes() if available is None else float(available)
        if self.total <= room:
            return
        parts = ", ".join(f"{k} {human(v)}" for k, v in sorted(self.parts.items(), key=lambda kv: -kv[1]) if v)
        sizes = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        source = f" ({LIMIT_ENV})" if os.environ.get(LIMIT_ENV, "").strip() else ""
        raise MemoryGuardError(f"{self.what} needs about {human(self.total)} ({parts}; {sizes}), more than the "
                               f"{human(room)} available{source}: {advice}; nothing was allocated")


def tables_bytes(tiles: int, rows: int, cols: int, grids: int = 1) -> float:
    """The tile-order prefix counts (:func:`dfit_nb.sim.schedule.prefix_counts`) of ``grids`` grids: float64
    ``(tiles + 1) x (rows + cols)``, built on the host (a one-hot matrix and its cumulative sum: two transient
    copies of the larger) and copied to the device."""
    t = float(tiles) + 1.0
    return 8.0 * t * (2.0 * (rows + cols) * grids + 2.0 * max(rows, cols))


def replay_estimate(what: str, ops: int, slots: int, rows: int, cols: int, time_bins: int | None,
                    machines: int = 1, grids: int = 1, padded_to: tuple[int, int] | None = None) -> Estimate:
    """A replay's peak before its events: the compiled program, the tile-order tables, per-op records (link
    loads over ``2 (rows + cols)`` link groups, retile and delivery) per machine, and the cube's per-tile arrays
    over ``time_bins`` (``None``: no cube, as in :func:`dfit_nb.sim.replay_batch`). ``padded_to``: the grid
    the program is compiled for (:func:`dfit_nb.sim.schedule.bucket`), which sizes the tables and records."""
    prows, pcols = padded_to or (rows, cols)
    links = 2.0 * (prows + pcols)
    parts = {
        "compiled program": float(COMPILED_BYTES),
        "tile-order tables": tables_bytes(prows * pcols, prows, pcols, grids),
        # each scan step also builds (producers x rows) and (producers x cols) temporaries: small next to these
        "per-op records": 8.0 * ops * (RECORD_VALUES + 2.0 * links + 2.0 * slots) * machines,
    }
    sizes: dict[str, Any] = {"tile grid": f"{rows}x{cols}", "op slots": ops}
    if machines > 1:
        sizes["machines"] = machines
    if time_bins is not None:
        parts["cube"] = cube_bytes(time_bins, rows, cols)
        sizes["time_bins"] = time_bins
    return Estimate(what, parts, sizes)


def cube_bytes(time_bins: int, rows: int, cols: int) -> float:
    """The cube's arrays over time: busy and SRAM occupancy over tiles (each binned through a difference array,
    then clipped: four float64 copies) and the load of ``2 (rows + cols)`` link groups."""
    return 8.0 * time_bins * 4.0 * (2.0 * rows * cols + 2.0 * (rows + cols))


def events_estimate(what: str, events: int, rows: int, cols: int, time_bins: int) -> Estimate:
    """The events of a replay (one per op, tile and kind) and its cube, once the per-op records say how many."""
    # the compiled program stays resident while they are built
    parts = {"events": float(EVENT_BYTES) * events, "cube": cube_bytes(time_bins, rows, cols),
             "compiled program": float(COMPILED_BYTES)}
    return Estimate(what, parts, {"events": events, "tile grid": f"{rows}x{cols}", "time_bins": time_bins})


#: copies of the tile-order tables a sweep's evaluation holds at its peak, as measured: a sweep of one machine on
#: a 1x2048 grid (one copy estimated at 2.5 GiB) peaked at 6.9 GB, on 1x1024 (0.63 GiB) at 2.0 GB, about 1 GB of
#: it besides the tables: 2.2 and 1.6 copies. With one copy a 1x4096 sweep (10 GiB estimated) passed the check on
#: a 22 GiB machine and was killed by the kernel past 23 GB
SWEEP_TABLE_COPIES = 3.0


def sweep_estimate(what: str, machines: int, dataflows: int, ops: int, fields: int, rows: int, cols: int,
                   grids: int, table_copies: float = 1.0) -> Estimate:
    """A sweep's peak: every machine's fields, the results over (machines, dataflows, ops), the tables of each
    distinct grid (``table_copies`` of them: :data:`SWEEP_TABLE_COPIES` in a sweep, one in ``cost()``); one
    chunk's evaluation is bounded by :data:`dfit_nb.sim.grid.CHUNK_EVALS`."""
    parts = {
        "results": 8.0 * machines * dataflows * ops * SWEEP_VALUES * SWEEP_COPIES,
        "machines": 8.0 * machines * (fields + 2) * 2.0,  # the fields and the grid index, built then sliced
        "tile-order tables": table_copies * tables_bytes(rows * cols, rows, cols, grids),
        "compiled program": float(COMPILED_BYTES),
    }
    return Estimate(what, parts, {"machines": machines, "dataflows": dataflows, "ops": ops})


__all__ = (
    "LIMIT_ENV",
    "Estimate",
    "MemoryGuardError",
    "available_bytes",
    "cube_bytes",
    "events_estimate",
    "human",
    "parse_bytes",
    "replay_estimate",
    "sweep_estimate",
    "tables_bytes",
)
