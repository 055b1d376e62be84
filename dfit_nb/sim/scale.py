"""Sweeps past one machine: lazy, chunked results on Dask, streamed to Zarr, run on any Dask cluster.

``sweep(..., chunks=N)`` and ``replay_batch(..., chunks=N)`` return an ``xarray.Dataset`` backed by Dask
arrays: one task per chunk of ``N`` machines, each task the eager code path over its machines (one jitted
``vmap`` of the one model, :data:`dfit_nb.sim.grid.CHUNK_EVALS` evaluations per call), so nothing is computed
until the Dataset is reduced (:mod:`dfit_nb.sim.pareto`), plotted or saved (:func:`to_zarr`: resumable,
checksummed per chunk, read back checked by :func:`open_sweep`). The same Dataset computes on the threads of this
process or, when a ``dask.distributed.Client`` is active, on its workers: the model's jitted functions are
module-level, so each worker process compiles them once; each task checks that its worker runs the client's
dfit_nb and JAX (:class:`ScaleOutError` otherwise).

This module is the public face of the two parts, importable from here: the chunks' tasks on Dask
(:mod:`dfit_nb.sim._chunks`) and the Zarr store they stream to (:mod:`dfit_nb.sim._sweep_store`).

>>> from dfit_nb.sim import presets, sweep
>>> lazy = sweep({"m": [64, 8], "k": [64, 8], "n": [64, 8]}, presets.get("scalesim_32"), ["os"], chunks=2,
...              per_op=False, dram_bw=[4.0, 8.0, 16.0])
>>> lazy.attrs["chunks"], lazy["total_cycles"].data.numblocks
(2, (2, 1))
"""

from __future__ import annotations

from .._extras import require

require("cluster", "lazy sweeps and batches (chunks=...), to_zarr and open_sweep", ("dask",))

from ._chunks import CHUNK_PREFIX as CHUNK_PREFIX
from ._chunks import WRITE_PREFIX as WRITE_PREFIX
from ._chunks import ScaleOutError as ScaleOutError
from ._chunks import blocks as blocks
from ._chunks import check_chunk as check_chunk
from ._chunks import check_versions as check_versions
from ._chunks import chunked as chunked
from ._chunks import dashboard as dashboard
from ._chunks import lazy_sweep as lazy_sweep
from ._chunks import progress as progress
from ._chunks import versions as versions
from ._chunks import worker_memory as worker_memory
from ._sweep_store import CHECKSUMS as CHECKSUMS
from ._sweep_store import CHUNK_DIMS as CHUNK_DIMS
from ._sweep_store import CHUNK_KINDS as CHUNK_KINDS
from ._sweep_store import CHUNK_SPLIT as CHUNK_SPLIT
from ._sweep_store import CHUNK_VARIABLES as CHUNK_VARIABLES
from ._sweep_store import DONE as DONE
from ._sweep_store import EAGER_CHECKSUMS as EAGER_CHECKSUMS
from ._sweep_store import open_sweep as open_sweep
from ._sweep_store import to_zarr as to_zarr

__all__ = ("CHECKSUMS", "CHUNK_PREFIX", "DONE", "WRITE_PREFIX", "ScaleOutError", "blocks", "check_versions",
           "dashboard", "open_sweep", "progress", "to_zarr", "versions", "worker_memory")
