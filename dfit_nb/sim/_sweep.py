"""``sweep(ops, hw, **grid)``: the cost model over every combination of machine fields and dataflows.

An eager sweep evaluates :mod:`dfit_nb.sim.grid`'s plan in vmapped chunks here; a lazy one (``chunks=``) is
:func:`dfit_nb.sim.scale.lazy_sweep`'s Dask graph of the same chunks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import xarray as xr

from .grid import dataset, evaluate_range, grid_estimate, plan
from .hardware import Hardware


def sweep(
    ops: Any,
    hw: Hardware,
    dataflow: Sequence[str] | str = ("ws", "os", "is"),
    memory: str = "finite",
    progress: bool = True,
    *,
    chunks: int | None = None,
    per_op: bool = True,
    variables: Sequence[str] | None = None,
    fusion: str | None = None,
    **grid: Any,
) -> xr.Dataset:
    """Cost ``ops`` on every combination of the ``grid`` axes and ``dataflow``.

    Parameters
    ----------
    ops : Trace, Dataset, DataFrame or mapping
        As for :func:`dfit_nb.sim._cost`.
    hw : Hardware
        The base machine; swept fields replace its values.
    dataflow : str or sequence of str
        Dataflows to evaluate (a ``dataflow`` dim).
    memory : {"finite", "ideal"}
    progress : bool
        Show a progress bar when the grid is evaluated in several chunks (eager sweeps; a lazy one shows its
        bar when computed, see :func:`dfit_nb.sim.scale.progress`).
    chunks : int, optional
        Machines per chunk: return a *lazy* Dataset backed by Dask arrays, one task per chunk (see
        :mod:`dfit_nb.sim.scale`); nothing is evaluated until it is reduced, plotted or saved. Chunks are blocks
        of whole rows of the trailing axes, so the dims are the eager ones and ``.compute()`` equals the eager
        result exactly. Runs on an active ``dask.distributed`` client as is.
    per_op : bool
        ``False``: only the totals per call (``total_cycles``, ``total_energy_j``, ``total_macs``) per machine
        and dataflow, summed over ops inside each chunk (no ``op`` dim): what a sweep of millions of machines
        keeps.
    variables : sequence of str, optional
        The data variables to keep (default: all of the mode's).
    fusion : {"rules", "compiler", "none"}, optional
        How a Trace's ops are grouped into kernels, as for :func:`dfit_nb.replay` (default ``"rules"``): each
        op is priced as a member of its kernel run alone (intermediates on chip, one fixed cost, the DRAM
        latency waited once; :func:`dfit_nb.sim._prepare.kernel_alone`), and the ``op`` dim holds the ops the
        replay prices, with a ``kernel`` coordinate (its kernel's first op). ``"none"``: every op of the
        table alone (the default for a table of ops, which has no dataflow to group by).
    **grid
        Axis name -> values: any Hardware field, or ``pe=[(R, C), ...]``,
        ``tiles=[(rows, cols), ...]``, ``sram_kb=[...]``, ``dram_bw=[...]``,
        ``noc_bw=[...]``.

    Returns
    -------
    xarray.Dataset
        One dim per grid axis (in the order given), then ``dataflow`` and ``op``.
        All machines run in one jitted ``vmap``; with several local JAX devices
        each chunk is sharded over them.

    Examples
    --------
    >>> from dfit_nb.sim import presets, sweep
    >>> ds = sweep({"m": [64], "k": [64], "n": [64]}, presets.get("scalesim_32"),
    ...            dataflow=["os"], memory="ideal", pe=[(8, 8), (32, 32)])
    >>> ds["cycles"].sel(dataflow="os", op=0).values.tolist()
    [4991.0, 503.0]
    >>> lazy = sweep({"m": [64], "k": [64], "n": [64]}, presets.get("scalesim_32"), dataflow=["os"],
    ...              memory="ideal", chunks=1, per_op=False, pe=[(8, 8), (32, 32)])
    >>> lazy["total_cycles"].chunks, lazy["total_cycles"].sel(dataflow="os").values.tolist()
    (((1, 1), (1,)), [4991.0, 503.0])
    """
    p = plan(ops, hw, dataflow, memory, grid, per_op, variables, fusion)
    if chunks is not None:
        from .scale import lazy_sweep  # Dask is loaded by the first lazy sweep, not by `import dfit_nb`

        return lazy_sweep(p, chunks)
    grid_estimate(hw, grid, len(p.dataflows), len(p.coord) if per_op else 1).check(
        "sweep fewer machines at a time (split an axis over several calls and reduce each result), fewer "
        "dataflows, or fewer ops (aggregate the trace by region first); or pass chunks= for a lazy sweep "
        "(dfit_nb.sim.scale: reduce it or stream it to Zarr)")
    out = evaluate_range(p, 0, p.machines, progress=progress)
    full = (*p.shape, len(p.dataflows))
    return dataset(p, {k: v.reshape(full + v.shape[2:]) for k, v in out.items()})
