"""Machine grids and ``sweep``: the cost model over many machines and dataflows in one vmapped call."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
import xarray as xr
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tqdm.auto import tqdm

from ._cost import (
    MEMORY_MODES,
    CostInputError,
    alone,
    alone_arrays,
    batch_tables,
    dataflow_codes,
    finish,
    hardware_attrs,
    op_counts,
    to_dataset,
)
from .hardware import FIELDS, Hardware
from .memory import Estimate, sweep_estimate

#: Grid keys that are not Hardware fields: name -> (fields it sets, description)
ALIASES: dict[str, tuple[tuple[str, ...], str]] = {
    "pe": (("pe_rows", "pe_cols"), "(R, C) of each tile's PE array"),
    "tiles": (("tile_rows", "tile_cols"), "(rows, cols) of the tile grid"),
    "sram_kb": (("sram_input_bytes", "sram_weight_bytes", "sram_output_bytes"),
                "SRAM per tile in KiB, split in the base machine's proportions"),
    "dram_bw": (("dram_bytes_per_cycle",), "DRAM bytes per cycle"),
    "noc_bw": (("noc_link_bytes_per_cycle",), "NoC link bytes per cycle"),
}

#: machine-op-dataflow evaluations per chunk (bounds memory: each evaluates every mapping candidate; a progress
#: bar shows chunks)
CHUNK_EVALS = 20_000


def _grid_values(key: str, values: Any, base: Hardware) -> tuple[dict[str, np.ndarray], list[Any]]:
    """Field arrays set by one grid axis, and the axis' coordinate labels."""
    if key not in FIELDS and key not in ALIASES:
        raise CostInputError(f"cannot sweep {key!r}; sweepable: {', '.join([*ALIASES, *FIELDS])}")
    values = list(values) if isinstance(values, (list, tuple, np.ndarray, range)) else [values]
    if not values:
        raise CostInputError(f"sweep axis {key!r} has no values")
    if key in FIELDS:
        return {key: np.asarray(values, dtype=np.float64)}, values
    fields = ALIASES[key][0]
    if key in ("pe", "tiles"):
        pairs = [tuple(v) if isinstance(v, (tuple, list)) else (v, v) for v in values]
        if any(len(p) != 2 for p in pairs):
            raise CostInputError(f"sweep axis {key!r} takes (rows, cols) pairs, got {values!r}")
        labels = [f"{a}x{b}" for a, b in pairs]
        rows, cols = (np.array([p[i] for p in pairs], float) for i in (0, 1))
        return {fields[0]: rows, fields[1]: cols}, labels
    if key == "sram_kb":
        parts = np.array([float(np.asarray(getattr(base, f))) for f in fields])
        share = parts / parts.sum()
        total = np.asarray(values, dtype=np.float64) * 1024
        return {f: np.floor(total * s) for f, s in zip(fields, share, strict=True)}, values
    return {fields[0]: np.asarray(values, dtype=np.float64)}, values


def machine_grid(base: Hardware, grid: dict[str, Any]) -> tuple[Hardware, dict[str, list[Any]], tuple[int, ...]]:
    """The cartesian product of ``grid`` over ``base`` as one batched Hardware (flat)."""
    axes = {key: _grid_values(key, values, base) for key, values in grid.items()}
    shape = tuple(len(labels) for _, labels in axes.values())
    n = int(np.prod(shape)) if shape else 1
    index = np.indices(shape).reshape(len(shape), -1) if shape else np.zeros((0, 1), int)
    fields = {f: np.full(n, float(np.asarray(getattr(base, f)))) for f in FIELDS}
    for axis, (sets, _) in enumerate(axes.values()):
        for field, vals in sets.items():
            fields[field] = vals[index[axis]]
    # no name: the name is static pytree metadata, and one compiled program should serve every base
    return Hardware(name="", **fields), {k: labels for k, (_, labels) in axes.items()}, shape


def grid_estimate(base: Hardware, grid: dict[str, Any], dataflows: int, ops: int) -> Estimate:
    """The peak memory of :func:`sweep` over ``grid``, from the axes' lengths alone (nothing is built)."""
    axes = {key: _grid_values(key, values, base) for key, values in grid.items()}
    machines = int(np.prod([len(labels) for _, labels in axes.values()], dtype=np.float64)) if axes else 1
    rows = cols = None
    grids = 1
    for sets, labels in axes.values():
        if "tile_rows" in sets or "tile_cols" in sets:
            grids *= len(labels)  # distinct grids: at most the product of the axes that set them
            rows = max(rows or 0, int(np.max(sets.get("tile_rows", [0]))))
            cols = max(cols or 0, int(np.max(sets.get("tile_cols", [0]))))
    rows = max(rows or 0, int(np.max(np.asarray(base.tile_rows))))
    cols = max(cols or 0, int(np.max(np.asarray(base.tile_cols))))
    return sweep_estimate(f"a sweep of {machines:,} machines", machines, dataflows, ops, len(FIELDS), rows,
                                 cols, grids)


@functools.partial(jax.jit, static_argnames="ideal")
def _evaluate_batch(ops: dict[str, Any], hw: Hardware, df: Any, tables: Any, index: Any, ideal: bool
                    ) -> dict[str, Any]:
    """:func:`dfit_nb.sim._cost.alone` over machines (leading axis of ``hw`` and ``index``) and dataflows."""
    def one(h: Hardware, i: Any) -> dict[str, Any]:
        t = (tables[0][i], tables[1][i])
        return jax.vmap(lambda d: alone(ops, h, d, t, ideal))(df)

    return jax.vmap(one)(hw, index)


def _take(hw: Hardware, lo: int, hi: int, pad_to: int) -> Hardware:
    def part(x: Any) -> np.ndarray:
        x = np.asarray(x)[lo:hi]
        return np.concatenate([x, np.repeat(x[-1:], pad_to - len(x), axis=0)]) if pad_to > len(x) else x

    return jax.tree.map(part, hw)


def sweep(
    ops: Any,
    hw: Hardware,
    dataflow: Sequence[str] | str = ("ws", "os", "is"),
    memory: str = "finite",
    progress: bool = True,
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
        Show a progress bar when the grid is evaluated in several chunks.
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
    """
    if memory not in MEMORY_MODES:
        raise CostInputError(f"unknown memory mode {memory!r}; valid: {', '.join(MEMORY_MODES)}")
    if not isinstance(hw, Hardware) or hw.batch_shape != ():
        raise CostInputError("sweep() takes one base Hardware; put the values to sweep in keyword axes")
    arrays, coord = alone_arrays(ops)
    names = [dataflow] if isinstance(dataflow, str) else list(dataflow)
    codes, _ = dataflow_codes(names, len(coord))
    grid_estimate(hw, grid, len(names), len(coord)).check(
        "sweep fewer machines at a time (split an axis over several calls and reduce each result), fewer "
        "dataflows, or fewer ops (aggregate the trace by region first)")
    machines, labels, shape = machine_grid(hw, grid)
    total = int(np.prod(shape)) if shape else 1
    tables, grid_index = batch_tables(machines.tile_rows, machines.tile_cols)
    devices = jax.local_devices()
    per_chunk = max(len(devices), CHUNK_EVALS // max(1, len(names) * len(coord)))
    per_chunk -= per_chunk % len(devices)
    chunks = range(0, total, per_chunk)
    sharding = NamedSharding(Mesh(np.array(devices), ("machine",)), PartitionSpec("machine"))
    results: list[dict[str, np.ndarray]] = []
    with jax.enable_x64(True):
        for lo in tqdm(chunks, desc="sweep", unit="chunk", disable=not progress or len(chunks) < 2):
            hi = min(lo + per_chunk, total)
            size = hi - lo if len(chunks) == 1 else per_chunk  # one compiled shape for every chunk
            size += (-size) % len(devices)
            part = _take(machines, lo, hi, size)
            index = _take(grid_index, lo, hi, size)
            if len(devices) > 1:
                part, index = jax.device_put((part, index), sharding)
            out = jax.device_get(_evaluate_batch(arrays, part, codes[:, 0].astype(np.float64), tables, index,
                                                 memory == "ideal"))
            results.append({k: v[: hi - lo] if size > hi - lo else v for k, v in out.items()})
    merged = results[0] if len(results) == 1 else {k: np.concatenate([r[k] for r in results]) for k in results[0]}
    merged = finish(merged, np.asarray(machines.clock_ghz, np.float64)[:, None, None])
    full = (*shape, len(names), len(coord))
    merged = {k: np.broadcast_to(v, (total, len(names), len(coord))).reshape(full) for k, v in merged.items()}
    dims = (*labels, "dataflow", "op")
    coords = {**{k: (k, np.asarray(v, dtype=object if isinstance(v[0], str) else None)) for k, v in labels.items()},
              "dataflow": names, "op": coord}
    attrs = {**hardware_attrs(hw), "memory": memory, "swept": ",".join(labels),
             **{f"axis_{k}": ALIASES[k][1] if k in ALIASES else FIELDS[k][1] for k in labels}}
    ds = to_dataset(merged, dims, coords, attrs, op_counts(ops, len(coord)))
    for key in labels:
        ds[key].attrs["units"] = "" if key in ("pe", "tiles") else ("KiB" if key == "sram_kb" else
                                                                     (FIELDS[key][0] if key in FIELDS else "B/cycle"))
    return ds


__all__ = ("ALIASES", "machine_grid", "sweep")
