"""Machine grids and the plan of a sweep: which machines, dataflows and ops, their vmapped evaluation in chunks
and the Dataset (:func:`dfit_nb.sim.sweep`, in :mod:`dfit_nb.sim._sweep`, runs them)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
import xarray as xr
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tqdm.auto import tqdm

from .._runtime import compile_options as _compile_options
from .._runtime import exported as _exported
from .._runtime.padding import padded_count, padded_index
from ._cost import (
    BATCH_GRIDS,
    BATCH_MACHINES,
    COST_OPS,
    MEMORY_MODES,
    TOTALS,
    VARIABLES,
    _attrs,
    alone,
    batch_tables,
    finish,
    hardware_attrs,
)
from ._optable import CostInputError, dataflow_codes
from ._prepare import priced_ops, take_rows
from .hardware import FIELDS, Hardware, check_hardware, sram_split
from .hardware import _check as check_field
from .kernels import splits_rows
from .memory import SWEEP_TABLE_COPIES, Estimate, sweep_estimate
from .schedule import bucket

#: Grid keys that are not Hardware fields: name -> (fields it sets, description)
ALIASES: dict[str, tuple[tuple[str, ...], str]] = {
    "pe": (("pe_rows", "pe_cols"), "(R, C) of each tile's PE array"),
    "tiles": (("tile_rows", "tile_cols"), "(rows, cols) of the tile grid"),
    "sram_kb": (("sram_input_bytes", "sram_weight_bytes", "sram_output_bytes"),
                "SRAM per tile in KiB, split in the base machine's proportions (dfit_nb.sim.hardware.sram_split)"),
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
    values = _axis_values(key, values)
    if not values:
        raise CostInputError(f"sweep axis {key!r} has no values")
    pairs = key in ("pe", "tiles")
    bad = [v for v in values if not all(map(_is_number, (v if pairs and isinstance(v, (tuple, list)) else [v])))]
    if bad:  # True would be swept as a size of 1, "64" fail deep in NumPy
        raise CostInputError(f"sweep axis {key!r} takes numbers{' or (rows, cols) pairs of them' if pairs else ''}, "
                             f"not booleans or text; got {bad}")
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
    if key == "sram_kb":  # the Explorer's SRAM slider splits by the same rule
        return sram_split(base, np.asarray(values, dtype=np.float64)), values
    return {fields[0]: np.asarray(values, dtype=np.float64)}, values


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def _axis_values(key: str, values: Any) -> list[Any]:
    """One axis' values as a list: a list, tuple or range as is, a 1-D NumPy or JAX array by element (an
    ``(n, 2)`` array as pairs for ``pe`` and ``tiles``), a scalar as one value; an array of other dims is refused,
    as it would be broadcast against the other axes."""
    if isinstance(values, (list, tuple, range)):
        return list(values)
    if isinstance(values, (str, bytes)) or not hasattr(values, "__array__"):
        return [values]
    arr = np.asarray(values)
    if arr.ndim == 0:
        return [arr.item()]
    if arr.ndim == 1:
        return arr.tolist()
    if arr.ndim == 2 and arr.shape[1] == 2 and key in ("pe", "tiles"):
        return [tuple(row) for row in arr.tolist()]
    raise CostInputError(f"sweep axis {key!r} takes a 1-D list or array of values"
                         f"{' (or an (n, 2) array of pairs)' if key in ('pe', 'tiles') else ''}, got an array of "
                         f"shape {arr.shape}")


def _axes(base: Hardware, grid: dict[str, Any]) -> dict[str, tuple[dict[str, np.ndarray], list[Any]]]:
    axes = {key: _grid_values(key, values, base) for key, values in grid.items()}
    setter: dict[str, str] = {}
    for key, (sets, _) in axes.items():
        for field in sets:
            if field in setter:  # the later axis would silently overwrite the earlier one's values
                raise CostInputError(f"sweep axes {setter[field]!r} and {key!r} both set Hardware.{field}: sweep it "
                                     "through one of them")
            setter[field] = key
    return axes


def _fields_at(base: Hardware, axes: dict[str, Any], shape: tuple[int, ...], flat: np.ndarray
               ) -> dict[str, np.ndarray]:
    """Every Hardware field of the machines at flat (C-order) positions ``flat`` of the grid: a chunk of the
    product is built without building the rest."""
    index = np.unravel_index(flat, shape) if shape else ()
    fields = {f: np.full(len(flat), float(np.asarray(getattr(base, f)))) for f in FIELDS}
    for axis, (sets, _) in enumerate(axes.values()):
        for field, vals in sets.items():
            fields[field] = vals[index[axis]]
    return fields


def machine_grid(base: Hardware, grid: dict[str, Any]) -> tuple[Hardware, dict[str, list[Any]], tuple[int, ...]]:
    """The cartesian product of ``grid`` over ``base`` as one batched Hardware (flat)."""
    axes = _axes(base, grid)
    shape = tuple(len(labels) for _, labels in axes.values())
    n = int(np.prod(shape)) if shape else 1
    fields = _fields_at(base, axes, shape, np.arange(n))
    # no name: the name is static pytree metadata, and one compiled program should serve every base
    return Hardware(name="", **fields), {k: labels for k, (_, labels) in axes.items()}, shape


def grid_estimate(base: Hardware, grid: dict[str, Any], dataflows: int, ops: int,
                  axes: dict[str, Any] | None = None) -> Estimate:
    """The peak memory of :func:`sweep` over ``grid``, from the axes' lengths alone (nothing is built); ``axes``:
    ``grid`` already read (:func:`_axes`), when the caller has it."""
    axes = _axes(base, grid) if axes is None else axes
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
    padded = bucket(rows, cols)  # the tables are padded as batch_tables pads them
    return sweep_estimate(f"a sweep of {machines:,} machines", machines, dataflows, ops, len(FIELDS), padded.rows,
                          padded.cols, padded_count(grids, BATCH_GRIDS), SWEEP_TABLE_COPIES)


@functools.partial(jax.jit, static_argnames="ideal")
def _evaluate_batch(ops: dict[str, Any], hw: Hardware, df: Any, tables: Any, index: Any, ideal: bool
                    ) -> dict[str, Any]:
    """:func:`dfit_nb.sim._cost.alone` over machines (leading axis of ``hw`` and ``index``) and dataflows."""
    def one(h: Hardware, i: Any) -> dict[str, Any]:
        t = (tables[0][i], tables[1][i])
        return jax.vmap(lambda d: alone(ops, h, d, t, ideal, h.execution == "spatial"))(df)

    return jax.vmap(one)(hw, index)


#: :func:`_evaluate_batch` compiled with dfit_nb's compiler options, for a sweep call of little work
#: (:func:`dfit_nb._runtime.compile_options.by_work`): there its compile is what the call waits for
_evaluate_batch_fast_compile = _compile_options.jit(_evaluate_batch.__wrapped__, static_argnames="ideal")


def _take(hw: Hardware, lo: int, hi: int, pad_to: int) -> Hardware:
    def part(x: Any) -> np.ndarray:
        x = np.asarray(x)[lo:hi]
        return np.concatenate([x, np.repeat(x[-1:], pad_to - len(x), axis=0)]) if pad_to > len(x) else x

    return jax.tree.map(part, hw)


@dataclasses.dataclass(frozen=True, eq=False)
class Plan:
    """Everything an evaluation of machines ``[lo, hi)`` of a sweep needs: the model's inputs, the grid (axes, not
    machines: a chunk builds its own) and the tile-order tables of every distinct grid. Picklable, so a Dask task
    carries it to a worker once."""

    arrays: dict[str, np.ndarray]
    coord: np.ndarray
    count: np.ndarray
    base: Hardware
    axes: dict[str, tuple[dict[str, np.ndarray], list[Any]]]
    shape: tuple[int, ...]
    dataflows: list[str]
    codes: np.ndarray
    ideal: bool
    tables: tuple[np.ndarray, np.ndarray]
    grid_keys: np.ndarray  # the distinct grids, sorted, as rows * key_base + cols
    key_base: int
    per_op: bool
    variables: tuple[str, ...]
    fusion: str = "none"  # how the ops were grouped into kernels, each priced alone
    kernel: np.ndarray | None = None  # per op, the op id of its kernel's first op

    @property
    def machines(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1


def _grid_tables(base: Hardware, axes: dict[str, Any]) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray, int]:
    """The tables of every distinct tile grid of the sweep (from the axes that set the grid alone: few), padded
    to the largest, in :func:`batch_tables`' order, and their keys ``rows * key_base + cols``."""
    sub = {k: v for k, v in axes.items() if {"tile_rows", "tile_cols"} & set(v[0])}
    shape = tuple(len(labels) for _, labels in sub.values())
    fields = _fields_at(base, sub, shape, np.arange(int(np.prod(shape)) if shape else 1))
    rows, cols = fields["tile_rows"].astype(np.int64), fields["tile_cols"].astype(np.int64)
    tables, _ = batch_tables(rows, cols)
    distinct = np.unique(np.stack([rows, cols], 1), axis=0)
    key_base = int(distinct[:, 1].max()) + 1
    return tables, distinct[:, 0] * key_base + distinct[:, 1], key_base


def variables_for(per_op: bool) -> tuple[str, ...]:
    """The data variables a sweep holds: every per-op variable, ``count`` and the totals per call (``per_op``),
    or the totals alone."""
    return tuple(VARIABLES) if per_op else tuple(TOTALS)


def plan(ops: Any, hw: Hardware, dataflow: Sequence[str] | str, memory: str, grid: dict[str, Any],
         per_op: bool = True, variables: Sequence[str] | None = None, fusion: str | None = None) -> Plan:
    """Check a sweep's inputs and gather what evaluating any chunk of it needs (nothing is evaluated); the ops
    as :func:`dfit_nb.sim._prepare.priced_ops` prices them."""
    if memory not in MEMORY_MODES:
        raise CostInputError(f"unknown memory mode {memory!r}; valid: {', '.join(MEMORY_MODES)}")
    check_hardware(hw, "sweep()", error=CostInputError, batch_hint="; sweep() takes one base machine and the "
                   "values to sweep in keyword axes (e.g. pe=[(16, 16), (32, 32)])")
    priced = priced_ops(ops, fusion, splits_rows(hw))
    arrays, coord = priced.arrays, priced.coord
    names = [dataflow] if isinstance(dataflow, str) else list(dataflow)
    codes, _ = dataflow_codes(names, len(coord))
    axes = _axes(hw, grid)
    # each axis' values checked before anything runs (a bad one named by its position on the axis); checks across
    # fields (SRAM against the PE array) need the machines: each range of them is checked when it is built
    for sets, _ in axes.values():
        for field, values in sets.items():
            check_field(field, values, *FIELDS[field][2:])
    valid = variables_for(per_op)
    if variables is None:
        kept = valid
    else:
        kept = tuple(dict.fromkeys([variables] if isinstance(variables, str) else variables))
        bad = [v for v in kept if v not in valid]
        if bad or not kept:
            raise CostInputError(f"sweep(variables=...) names {', '.join(map(repr, bad)) or 'nothing'}; valid with "
                                 f"per_op={per_op}: {', '.join(valid)}")
    # the grids' tile-order tables are built here, for an eager sweep and a lazy one alike: checked first (a 1x4096
    # grid's took minutes and most of the memory before the sweep's own check refused it)
    whole = grid_estimate(hw, grid, len(names), len(coord) if per_op else 1, axes)
    Estimate(whole.what + "'s tile-order tables", {k: whole.parts[k] for k in ("tile-order tables",
                                                                                "compiled program")},
             whole.sizes).check("sweep smaller tile grids (tile_rows x tile_cols), or fewer of them in one call")
    tables, keys, key_base = _grid_tables(hw, axes)
    shape = tuple(len(labels) for _, labels in axes.values())
    return Plan(arrays, coord, priced.count, hw, axes, shape, names, codes[:, 0].astype(np.float64),
                memory == "ideal", tables, keys, key_base, per_op, kept, priced.fusion, priced.kernel)


def evaluate_range(p: Plan, lo: int, hi: int, fixed: int | None = None, progress: bool = False
                   ) -> dict[str, np.ndarray]:
    """The results of machines ``[lo, hi)`` (flat, C order over the grid's axes): each variable of ``p``
    shaped ``(hi - lo, dataflows, ops)`` (per op) or ``(hi - lo, dataflows)`` (totals).

    Machines go through :func:`_evaluate_batch` (one jitted ``vmap`` of the one model) :data:`CHUNK_EVALS`
    evaluations at a time, sharded over the local devices. ``fixed``: the largest range of the sweep (a chunk of
    a lazy sweep); every call then has one compiled shape, padded, so each process compiles once per sweep.
    """
    fields = _fields_at(p.base, p.axes, p.shape, np.arange(lo, hi))
    machines = Hardware(name="", **fields)  # checks every machine of the range (sram against the PE array, ...)
    grid_index = np.searchsorted(p.grid_keys, fields["tile_rows"].astype(np.int64) * p.key_base
                                 + fields["tile_cols"].astype(np.int64))
    total = hi - lo
    n_df, n_ops = len(p.dataflows), len(p.coord)
    # the op table padded to a power of two (cost()'s sizes): sweeps of similar tables share one program
    ops = take_rows(p.arrays, padded_index(n_ops, padded_count(n_ops, COST_OPS)), n_ops) if n_ops else p.arrays
    devices = jax.local_devices()
    per_chunk = max(len(devices), CHUNK_EVALS // max(1, n_df * padded_count(n_ops, COST_OPS)))
    if fixed is not None:
        per_chunk = min(per_chunk, fixed + (-fixed) % len(devices))
    per_chunk -= per_chunk % len(devices)
    chunks = range(0, total, per_chunk)
    sharding = NamedSharding(Mesh(np.array(devices), ("machine",)), PartitionSpec("machine"))
    totals = {t: v for t, v in TOTALS.items() if t in p.variables}
    needed = (set(p.variables) | set(totals.values())) - {"count"}
    results: list[dict[str, np.ndarray]] = []
    with jax.enable_x64(True):
        for a in tqdm(chunks, desc="sweep", unit="chunk", disable=not progress or len(chunks) < 2):
            b = min(a + per_chunk, total)
            # one compiled shape for every chunk; one chunk: its machines rounded up to a power of two, so sweeps
            # of similar size share one program
            size = min(padded_count(b - a, BATCH_MACHINES), per_chunk) if len(chunks) == 1 and fixed is None \
                else per_chunk
            size += (-size) % len(devices)
            part = _take(machines, a, b, size)
            index = _take(grid_index, a, b, size)
            if len(devices) > 1:
                part, index = jax.device_put((part, index), sharding)
            # on one device the program kept traced on disk (a new process skips tracing it); sharded, the plain one
            program = _compile_options.by_work(size * n_df * padded_count(n_ops, COST_OPS),
                                               _evaluate_batch_fast_compile, _evaluate_batch)
            out = jax.device_get(_exported.call(program, {"ideal": p.ideal}, ops, part, p.codes, p.tables, index))
            out = finish({k: v[: b - a, ..., :n_ops] for k, v in out.items()},
                         np.asarray(machines.clock_ghz, np.float64)[a:b, None, None])
            out = {k: np.broadcast_to(v, (b - a, n_df, n_ops)) for k, v in out.items() if k in needed}
            # totals per call as cost()'s Dataset sums them (per row: exact whatever the chunking); without
            # per_op, the per-op values never leave the chunk
            out.update({t: (out[v] * p.count).sum(axis=-1) for t, v in totals.items()})
            results.append({k: v for k, v in out.items() if k in p.variables})
    if len(results) == 1:
        return results[0]
    return {k: np.concatenate([r[k] for r in results]) for k in results[0]}


def dataset(p: Plan, values: dict[str, Any]) -> xr.Dataset:
    """The sweep's Dataset from each variable's values over the whole grid (NumPy or Dask arrays), with the
    coordinates, units and provenance of an eager :func:`sweep`."""
    labels = {k: v for k, (_, v) in p.axes.items()}
    dims = (*labels, "dataflow", "op")
    coords = {**{k: (k, np.asarray(v, dtype=object if isinstance(v[0], str) else None)) for k, v in labels.items()},
              "dataflow": p.dataflows, "op": p.coord}
    if p.kernel is not None:
        coords["kernel"] = ("op", p.kernel)
    attrs = {**hardware_attrs(p.base), "memory": "ideal" if p.ideal else "finite", "fusion": p.fusion,
             "swept": ",".join(labels),
             **{f"axis_{k}": ALIASES[k][1] if k in ALIASES else FIELDS[k][1] for k in labels}}
    data = {}
    for name in p.variables:
        if name == "count":
            data[name] = xr.Variable(("op",), p.count, _attrs(name))
        else:
            data[name] = xr.Variable(dims[:-1] if name in TOTALS else dims, values[name], _attrs(name))
    ds = xr.Dataset(data, coords=coords if p.per_op else {k: v for k, v in coords.items() if k not in ("op", "kernel")},
                    attrs=attrs)
    for key in labels:
        ds[key].attrs["units"] = "" if key in ("pe", "tiles") else ("KiB" if key == "sram_kb" else
                                                                     (FIELDS[key][0] if key in FIELDS else "B/cycle"))
    return ds


__all__ = ("ALIASES", "machine_grid")
