"""Lazy, chunked sweeps on Dask: one task per chunk of machines, on this process' threads or any Dask cluster.

A chunk's task is the eager code path over its machines (:mod:`dfit_nb.sim.grid`); each task checks that its
worker runs the client's dfit_nb and JAX (:class:`ScaleOutError` otherwise); :func:`check_chunk` refuses a chunk
larger than the workers' memory; :func:`progress` and :func:`dashboard` show the tasks. The public face is
:mod:`dfit_nb.sim.scale`; the Zarr store the chunks stream to is :mod:`dfit_nb.sim._sweep_store`.
"""

from __future__ import annotations

import contextlib
import operator
import os
from collections.abc import Iterator
from typing import Any

import dask
import dask.array as da
import jax
import numpy as np
import xarray as xr
from dask.callbacks import Callback
from dask.highlevelgraph import HighLevelGraph
from tqdm.auto import tqdm

from .._version import __version__
from ..errors import DfitError
from . import memory as _memory
from ._cost import TOTALS, hardware_attrs
from .grid import Plan, dataset, evaluate_range
from .hardware import FIELDS

#: the names of every chunk task (progress bars count them) and of every write task of :func:`to_zarr`
CHUNK_PREFIX = "dfit-chunk-"
WRITE_PREFIX = "dfit-write-"


class ScaleOutError(DfitError, RuntimeError):
    """A chunked sweep cannot run as asked: bad ``chunks``, a worker with other versions, a store of another
    sweep."""


def versions() -> dict[str, str]:
    """The versions a chunk's result depends on: dfit_nb's and JAX's (checked on every worker).

    >>> sorted(versions())
    ['dfit_nb', 'jax']
    """
    return {"dfit_nb": __version__, "jax": jax.__version__}


def check_versions(client: dict[str, str]) -> None:
    """Raise :class:`ScaleOutError` naming both sides when this process runs another dfit_nb or JAX than the
    client that built the task.

    >>> check_versions({"dfit_nb": "0.0.1", "jax": jax.__version__})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    dfit_nb.sim._chunks.ScaleOutError: this Dask worker runs dfit_nb ... but the client runs dfit_nb 0.0.1 ...
    """
    here = versions()
    if here != client:
        raise ScaleOutError(
            f"this Dask worker runs dfit_nb {here['dfit_nb']} with JAX {here['jax']}, but the client runs dfit_nb "
            f"{client['dfit_nb']} with JAX {client['jax']}: the model differs between versions, so the chunks "
            f"would not be comparable; install the client's versions on every worker (pip install "
            f"dfit_nb=={client['dfit_nb']} jax=={client['jax']}) and restart the cluster (pid {os.getpid()})")


def blocks(shape: tuple[int, ...], chunks: int) -> tuple[tuple[tuple[int, ...], ...], list[tuple[Any, int, int]]]:
    """Split a grid of ``shape`` (C order) into blocks of at most ``chunks`` machines, each a run of whole rows
    of the trailing axes: the per-axis chunk sizes (Dask's ``chunks``) and, per block, its index, first and
    end flat machine.

    >>> blocks((3, 4), 8)
    (((2, 1), (4,)), [((0, 0), 0, 8), ((1, 0), 8, 12)])
    >>> blocks((3, 4), 3)[0]
    ((1, 1, 1), (3, 1))
    """
    if isinstance(chunks, bool) or not isinstance(chunks, (int, np.integer)) or chunks < 1:
        raise ScaleOutError(f"chunks must be a positive whole number of machines per chunk, got {chunks!r}")
    if not shape:
        return (), [((), 0, 1)]
    # the first axis whose trailing rows fit in a chunk is split; axes before it go one index at a time
    rows = [int(np.prod(shape[k + 1:])) for k in range(len(shape))]
    k = next(k for k in range(len(shape)) if rows[k] <= chunks)
    step = min(shape[k], max(1, int(chunks) // rows[k]))
    per_axis = [(1,) * n for n in shape[:k]] + [(step,) * (shape[k] // step) + ((shape[k] % step,) if shape[k] % step
                                                                               else ())]
    per_axis += [(n,) for n in shape[k + 1:]]
    out = []
    for index in np.ndindex(*(len(c) for c in per_axis)):
        start = tuple(sum(c[:i]) for c, i in zip(per_axis, index, strict=True))
        size = int(np.prod([c[i] for c, i in zip(per_axis, index, strict=True)]))
        lo = int(np.ravel_multi_index(start, shape))
        out.append((index, lo, lo + size))
    return tuple(per_axis), out


def _client() -> Any:
    """The active ``dask.distributed`` client, if any (distributed is optional)."""
    try:
        from distributed import default_client
    except ImportError:
        return None
    try:
        return default_client()
    except ValueError:
        return None


def worker_memory() -> tuple[float, int, str]:
    """Memory one task may use (bytes), tasks that run at once per memory pool, and where the figure comes from:
    the smallest worker's limit over its threads when a distributed client is active, else this process' memory
    over the local scheduler's threads.

    >>> room, threads, source = worker_memory()
    >>> room > 0 and threads >= 1
    True
    """
    client = _client()
    if client is not None:
        workers = client.scheduler_info().get("workers", {}).values()
        limits = [(float(w.get("memory_limit") or _memory.available_bytes()), int(w.get("nthreads", 1)))
                  for w in workers]
        if limits:
            room, threads = min(limits, key=lambda lt: lt[0] / lt[1])
            return room, threads, "the smallest Dask worker (its memory_limit)"
    threads = int(dask.config.get("num_workers", None) or os.cpu_count() or 1)
    return _memory.available_bytes(), threads, "this process (the local scheduler's threads)"


def check_chunk(what: str, per_chunk: _memory.Estimate) -> None:
    """Refuse chunks whose peak, times the tasks that run at once, does not fit a worker's memory."""
    room, threads, source = worker_memory()
    shared = per_chunk.parts.get("compiled program", 0.0)  # one compiled program per process, not per thread
    total = _memory.Estimate(f"{what}, {threads} at once on {source},",
                             {**{k: v * threads for k, v in per_chunk.parts.items() if k != "compiled program"},
                              "compiled program": shared}, per_chunk.sizes)
    total.check("use fewer machines per chunk (a smaller chunks=), or workers with more memory", available=room)


def _sweep_block(p: Plan, client_versions: dict[str, str], lo: int, hi: int, shape: tuple[int, ...],
                 largest: int) -> dict[str, np.ndarray]:
    """One chunk task: machines ``[lo, hi)`` of the sweep, each variable shaped as its block."""
    check_versions(client_versions)
    out = evaluate_range(p, lo, hi, fixed=largest)
    return {k: v.reshape(shape + v.shape[1:]) for k, v in out.items()}


def chunked(name: str, task: Any, context: Any, per_axis: tuple[tuple[int, ...], ...],
            parts: list[tuple[tuple[int, ...], tuple[Any, ...]]], variables: dict[str, tuple[tuple[int, ...], ...]]
            ) -> dict[str, da.Array]:
    """Dask arrays of ``variables`` (name -> the chunks of its trailing dims) over blocks of machines: per block
    ``(index, args)`` one task ``task(context, client_versions, *args)`` returning every variable's block;
    ``context`` travels once per worker (one graph key)."""
    chunk_name, context_key = CHUNK_PREFIX + name, "dfit-context-" + name
    client_versions = versions()
    layer: dict[Any, Any] = {context_key: context}
    for index, args in parts:
        layer[(chunk_name, *index)] = (task, context_key, client_versions, *args)
    arrays = {}
    for var, trailing in variables.items():
        var_name = f"dfit-{var}-{name}"
        getters = {(var_name, *index, *(0,) * len(trailing)): (operator.getitem, (chunk_name, *index), var)
                   for index, _ in parts}
        graph = HighLevelGraph({chunk_name: layer, var_name: getters}, {chunk_name: set(), var_name: {chunk_name}})
        ndim = len(per_axis) + len(trailing)
        arrays[var] = da.Array(graph, var_name, (*per_axis, *trailing), dtype=np.float64,
                               meta=np.empty((0,) * ndim, np.float64))
    return arrays


def lazy_sweep(p: Plan, chunks: int) -> xr.Dataset:
    """The lazy Dataset of a planned sweep (see :func:`dfit_nb.sim.sweep`'s ``chunks``)."""
    per_axis, parts = blocks(p.shape, chunks)
    largest = max(hi - lo for _, lo, hi in parts)
    rows, cols = int((p.grid_keys // p.key_base).max()), int((p.grid_keys % p.key_base).max())
    est = _memory.sweep_estimate(f"a chunk of {largest:,} machines", largest, len(p.dataflows),
                                 len(p.coord) if p.per_op else 1, len(FIELDS), rows, cols, len(p.grid_keys),
                                 _memory.SWEEP_TABLE_COPIES)
    check_chunk(f"chunks of {largest:,} machines of a sweep of {p.machines:,}", est)
    n_df, n_ops = len(p.dataflows), len(p.coord)
    trailing = {v: ((n_df,),) if v in TOTALS else ((n_df,), (n_ops,)) for v in p.variables if v != "count"}
    tasks = [(index, (lo, hi, tuple(c[i] for c, i in zip(per_axis, index, strict=True)), largest))
             for index, lo, hi in parts]
    # the sweep's identity (inputs and options) names its Dask tasks and, through them, its Zarr store
    token = dask.base.tokenize(p.arrays, p.count, hardware_attrs(p.base),
                               {k: labels for k, (_, labels) in p.axes.items()}, p.dataflows, p.ideal, p.per_op,
                               p.variables)
    arrays = chunked(f"{token}-{chunks}", _sweep_block, p, per_axis, tasks, trailing)
    ds = dataset(p, arrays)
    ds.attrs.update(chunks=len(parts), chunk_machines=largest)
    return ds


class _Bar(Callback):
    """A tqdm bar over the tasks of one kind (chunks or writes) run by the local scheduler."""

    def __init__(self, prefix: str, desc: str) -> None:
        super().__init__()
        self.prefix, self.desc, self.bar = prefix, desc, None

    def _mine(self, key: Any) -> bool:
        name = key[0] if isinstance(key, tuple) else key
        return isinstance(name, str) and name.startswith(self.prefix)

    def _start_state(self, dsk: Any, state: Any) -> None:
        total = sum(1 for k in dsk if self._mine(k))
        self.bar = tqdm(total=total, desc=self.desc, unit="chunk", disable=total < 2)

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        if self.bar is not None and self._mine(key):
            self.bar.update(1)

    def _finish(self, dsk: Any, state: Any, errored: bool) -> None:
        if self.bar is not None:
            self.bar.close()


@contextlib.contextmanager
def progress(desc: str = "chunks", prefix: str = CHUNK_PREFIX) -> Iterator[Any]:
    """A progress bar over the chunks computed inside the ``with`` block: tqdm under the local scheduler; with a
    ``dask.distributed`` client, a printed line with its dashboard link (where every task shows live), and the
    client yielded.

    >>> from dfit_nb.sim import presets, sweep
    >>> lazy = sweep({"m": [64], "k": [64], "n": [64]}, presets.get("scalesim_32"), ["os"], chunks=1,
    ...              per_op=False, dram_bw=[4.0, 8.0])
    >>> with progress():
    ...     total = float(lazy["total_cycles"].sum())
    """
    client = _client()
    if client is not None:
        print(dashboard(desc))
        yield client
        return
    with _Bar(prefix, desc) as bar:
        yield bar


def dashboard(what: str = "this sweep") -> str:
    """One line naming the active client's dashboard (where a distributed computation's progress shows), or
    saying that the local scheduler runs ``what``.

    >>> dashboard("this sweep")
    "this sweep runs on this process' threads (no dask.distributed client is active)"
    """
    client = _client()
    if client is None:
        return f"{what} runs on this process' threads (no dask.distributed client is active)"
    return f"{what} runs on the Dask cluster; progress: {client.dashboard_link}"
