"""``cost(ops, hw, dataflow)``: every op alone on a machine, priced by the one machine model, as an xarray Dataset."""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from .._runtime import compile_options as _compile_options
from .._runtime import datasets as _xarray
from .._runtime import exported as _exported
from .._runtime.kept import Kept
from .._runtime.padding import pack, padded_count, padding, rows_per_block
from . import machine, mapping, schedule
from ._optable import (
    CostInputError,
    alone_columns,
    alone_inputs,
    dataflow_codes,
    op_counts,
)
from ._prepare import Priced, priced_ops, pricing_mode, take_rows
from .hardware import FIELDS, Hardware, check_hardware, field_vector, from_field_vector
from .kernels import splits_rows
from .memory import available_bytes, sweep_estimate

MEMORY_MODES = ("finite", "ideal")

# variable -> (units, description)
VARIABLES: dict[str, tuple[str, str]] = {
    "cycles": ("cycle", "cycles of one execution of the op alone: the slowest of compute, SRAM ports, NoC, DRAM"),
    "compute_cycles": ("cycle", "cycles the busiest tile's PE array (or vector unit) computes, SCALE-Sim folds"),
    "stall_cycles": ("cycle", "cycles waiting on SRAM ports, the NoC or DRAM beyond compute (0 with memory='ideal')"),
    "sram_cycles": ("cycle", "cycles the busiest tile's SRAM ports need for its traffic"),
    "dram_cycles": ("cycle", "cycles DRAM needs for the op's traffic, plus latency once"),
    "noc_cycles": ("cycle", "cycles the mesh needs to deliver the op's DRAM traffic from the west edge"),
    "layout": ("1", "virtual layout of the mapping: 0 mn (rows x output columns), 1 mk (rows x reduction)"),
    "gy": ("1", "virtual grid rows the op is split over"),
    "gx": ("1", "virtual grid columns the op is split over"),
    "seconds": ("s", "cycles / clock"),
    "macs": ("MAC", "multiply-accumulates (0 for non-GEMM ops)"),
    "utilization": ("1", "MACs / (cycles x peak MACs per cycle)"),
    "tiles_used": ("1", "tiles the op occupies"),
    "noc_bytes": ("B", "bytes the mesh NoC delivers to and from tiles (a multicast piece once per receiving tile)"),
    "energy_pj": ("pJ", "total energy per execution"),
    "energy_j": ("J", "total energy per execution"),
    **{f"energy_{lv}_pj": ("pJ", f"energy at the {lv} level") for lv in machine.ENERGY_LEVELS},
    **{f"energy_{o}_pj": ("pJ", f"SRAM + DRAM energy of {o} traffic") for o in ("input", "weight", "output")},
    "sram_reads_input": ("B", "SRAM bytes read of the input (ifmap) operand"),
    "sram_reads_weight": ("B", "SRAM bytes read of the weight (filter) operand"),
    "sram_reads_output": ("B", "SRAM bytes of partial sums read back"),
    "sram_writes_output": ("B", "SRAM bytes of outputs and partial sums written"),
    "dram_reads_input": ("B", "DRAM bytes read of the input operand"),
    "dram_reads_weight": ("B", "DRAM bytes read of the weight operand"),
    "dram_reads_output": ("B", "DRAM bytes of spilled partial sums read back"),
    "dram_writes_output": ("B", "DRAM bytes of outputs (and spilled partial sums) written"),
    **{
        f"reuse_{lv}_{o}": ("MAC/B", f"reuse factor: MACs per byte of {o} moved at the {lv} level")
        for lv in ("sram", "dram") for o in ("input", "weight", "output")
    },
    "count": ("1", "executions per call (from the ops table; 1 if it has no count)"),
    "total_cycles": ("cycle", "sum over ops of cycles x count (each op alone, nothing overlapped)"),
    "total_energy_j": ("J", "sum over ops of energy_j x count"),
    "total_macs": ("MAC", "sum over ops of macs x count"),
}

#: the smallest op count :func:`cost` compiles for (tables are padded to a power of two at least this)
COST_OPS = 8

#: the most tiles a machine may have for :func:`cost` to price a small table on a grid compiled for this many
#: tiles rather than the replay's bucket (:func:`cost_grid`)
SMALL_GRID_TILES = 8

#: the fewest distinct grids, and machines, a batch of machines (:func:`dfit_nb.sim.sweep`) compiles for: both
#: are padded to a power of two at least these, so small sweeps share one compiled program
BATCH_GRIDS = 4
BATCH_MACHINES = 8

#: per-call totals -> the per-op variable they sum
TOTALS = {"total_cycles": "cycles", "total_energy_j": "energy_j", "total_macs": "macs"}

#: the variables :func:`alone` returns (the rest are derived from them on the host by :func:`finish` and
#: :func:`to_dataset`)
MODEL_OUTPUTS = tuple(k for k in VARIABLES if k not in ("seconds", "energy_j", "count", *TOTALS))


def alone(ops: dict[str, Any], hw: Hardware, df: Any, tables: tuple[Any, Any], ideal: bool = False,
          spatial: bool = False) -> dict[str, Any]:
    """Every op alone on ``hw`` (pure ``jax.numpy``; ``vmap`` it over machines or dataflows).

    The mapping search over the whole grid, :func:`dfit_nb.sim.machine.model`
    on every tile, and the body time of :func:`dfit_nb.sim.machine.op_body`
    placed where a one-op replay places it (tile 0 onwards along the tile
    order): what :func:`dfit_nb.replay` charges a one-op program. ``tables``:
    the :func:`~dfit_nb.sim.schedule.prefix_counts` of the machine's tile order. ``spatial``: the machine is
    layer-pipelined, so the op is mapped for its streamed stage, as its replay maps it.
    """
    n_tiles = machine.tiles(hw)
    n = ops["m"].shape[0]
    df = jnp.broadcast_to(jnp.asarray(df, jnp.float64), (n,))
    free = {"layout": jnp.full(n, -1.0), "gy": jnp.zeros(n), "gx": jnp.zeros(n)}
    best = mapping.search(ops, hw, df, n_tiles, free, tables, spatial)
    m = machine.model(ops, hw, df, best["layout"], best["gy"], best["gx"], n_tiles)
    # a kernel's vector work under its GEMM's array work, its DRAM latency waited once (nothing changes for ops
    # without kernel columns: each its own kernel)
    m = machine.kernel_overlap(m, ops, hw)
    row_pre, col_pre = (jnp.asarray(t, jnp.float64) for t in tables)
    cols_at = jnp.arange(col_pre.shape[1], dtype=jnp.float64)

    def body(mi: dict[str, Any]) -> dict[str, Any]:
        _, row_share = schedule.spread(row_pre, 0.0, mi["tiles"], mi["virtual_tiles"])
        col_n, _ = schedule.spread(col_pre, 0.0, mi["tiles"], mi["virtual_tiles"])
        return machine.op_body(mi, 1.0, 0.0, row_share, col_n > 0, hw, cols_at)

    b = jax.vmap(body)({k: v for k, v in m.items() if k != "traffic"})
    t = machine.alone_cycles(b, hw, ideal, m["latency_share"])
    cycles = t["cycles"]
    levels = {lv: m[f"energy_{lv}_pj"] for lv in machine.ENERGY_LEVELS}
    out = {
        "cycles": cycles, "compute_cycles": b["compute"], "stall_cycles": cycles - b["compute"],
        "sram_cycles": b["sram"], "dram_cycles": t["dram_cycles"], "noc_cycles": b["noc_cycles"],
        "layout": m["layout"], "gy": m["gy"], "gx": m["gx"], "macs": m["macs"],
        "utilization": machine.utilization(m["macs"], cycles, hw),
        "tiles_used": jnp.where((b["compute"] > 0) | (m["dram_bytes"] > 0), m["tiles"], 0.0),
        "noc_bytes": m["noc_in"] + m["noc_out"] + m["psum_noc"],
        "energy_pj": sum(levels.values()), **{f"energy_{lv}_pj": e for lv, e in levels.items()},
        **{f"energy_{o}_pj": m[f"energy_{o}_pj"] for o in ("input", "weight", "output")},
        **{k: m[k] for k in ("sram_reads_input", "sram_reads_weight", "sram_reads_output", "sram_writes_output",
                             "dram_reads_input", "dram_reads_weight", "dram_reads_output", "dram_writes_output")},
    }
    for operand, sram_key, dram_key in (("input", "sram_reads_input", "dram_reads_input"),
                                        ("weight", "sram_reads_weight", "dram_reads_weight"),
                                        ("output", "sram_writes_output", "dram_writes_output")):
        for level, key in (("sram", sram_key), ("dram", dram_key)):
            out[f"reuse_{level}_{operand}"] = jnp.where(m[key] > 0, m["macs"] / jnp.maximum(m[key], 1.0), 0.0)
    return out


@functools.partial(_compile_options.jit, static_argnames=("keys", "dataflows", "block_rows", "ideal", "spatial"))
def _evaluate(inputs: Any, keys: tuple[str, ...], dataflows: int, block_rows: int, tables: tuple[Any, Any],
              ideal: bool, spatial: bool = False) -> Any:
    """:func:`alone` for one dataflow per op (``dataflows`` 0) or several (``dataflows`` of them: vmapped), its
    outputs stacked in :data:`MODEL_OUTPUTS` order in blocks of ``block_rows`` rows (0: one block), one
    transfer to the host per block instead of one per variable.

    Its inputs come packed for the same reason (:func:`~dfit_nb._runtime.padding.pack`): the op table (row ``i`` of
    ``(len(keys), ops)`` is column ``keys[i]`` of :func:`alone_columns`, from which the program derives the model's
    inputs with :func:`alone_inputs`) in blocks of rows, then the machine's
    :func:`~dfit_nb.sim.hardware.field_vector` and the dataflow codes (one per op, or one per dataflow) end to end.
    For a small table every input and output block, like the tables (int32) and the program's own arrays, fits
    :data:`~dfit_nb._runtime.padding.SEQUENTIAL_BYTES`, so XLA runs the program on the calling thread
    (``benchmarks/bench_cost_call.py`` times it against the same program with float64 tables, which runs on the
    pool).
    """
    blocks, rest = inputs
    table = jnp.concatenate(blocks) if len(blocks) > 1 else blocks[0]  # rows are sliced from the blocks again
    columns = {key: table[i] for i, key in enumerate(keys)}
    # an op table's columns, from which the model's inputs are derived here; a Trace's kernels come as those inputs
    ops = alone_inputs(columns, jnp) if "lhs_given" in keys else columns
    hw = from_field_vector(rest[: len(FIELDS)])
    df = rest[len(FIELDS):]
    if dataflows:
        out = jax.vmap(lambda d: alone(ops, hw, d, tables, ideal, spatial))(df)
    else:
        out = alone(ops, hw, df, tables, ideal, spatial)
    if set(out) != set(MODEL_OUTPUTS):  # at trace time: the table of variables and the model must agree
        raise AssertionError(f"alone() outputs {sorted(set(out) ^ set(MODEL_OUTPUTS))} differ from MODEL_OUTPUTS")
    rows = [jnp.asarray(out[k], jnp.float64) for k in MODEL_OUTPUTS]
    per = block_rows or len(rows)
    return tuple(jnp.stack(rows[i:i + per]) for i in range(0, len(rows), per))


#: :func:`_evaluate` compiled with XLA's default emitters, for tables of up to :data:`COST_OPS` ops: a warm
#: ``cost()`` of a few ops is a latency figure, and there the default emitters' program runs faster, while the
#: loop emitters compile it faster at any size (:mod:`dfit_nb._runtime.compile_options`; figures in
#: benchmarks/README.md).
#: The same function: the same numbers to rounding (``tests/test_compile_options.py``).
_evaluate_small = jax.jit(_evaluate.__wrapped__,
                          static_argnames=("keys", "dataflows", "block_rows", "ideal", "spatial"))


@functools.lru_cache(maxsize=16)
def device_tables(tile_rows: int, tile_cols: int, rows: int, cols: int, tiles: int) -> tuple[Any, Any]:
    """:func:`grid_tables` placed on the default device once, for the calls that reuse them: as int32 (counts of
    tiles, exact), which the programs read as float64, so the 9 x 8 tables of an 8-tile grid fit
    :data:`SEQUENTIAL_BYTES` (:func:`_evaluate`)."""
    tables = grid_tables(tile_rows, tile_cols, rows, cols, tiles)
    return jax.device_put(tuple(t.astype(np.int32) for t in tables))


@functools.lru_cache(maxsize=16)
def grid_tables(tile_rows: int, tile_cols: int, rows: int | None = None, cols: int | None = None,
                tiles: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The prefix counts of a grid's tile order, padded to a larger grid's sizes when given.

    Cached (a few grids recur in a session) and read-only, since every caller shares the arrays.
    """
    grid = schedule.Grid(tiles or tile_rows * tile_cols, rows or tile_rows, cols or tile_cols)
    tables = schedule.grid_tables(tile_rows, tile_cols, grid)
    for table in tables:
        table.setflags(write=False)
    return tables


def batch_tables(tile_rows: np.ndarray, tile_cols: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """For a batch of machines: the tables of each distinct grid, padded to the :func:`~dfit_nb.sim.schedule.bucket`
    of the largest and stacked (``(S, tiles + 1, rows)``, ``(S, tiles + 1, cols)``), and each machine's index into
    them. ``S`` is the distinct grids' count rounded up to a power of two, at least :data:`BATCH_GRIDS` (the last
    grid's tables repeated, never indexed), so batches whose grids differ share one compiled program, as
    :func:`cost`'s tables do."""
    shapes = np.stack([np.asarray(tile_rows, np.int64).reshape(-1), np.asarray(tile_cols, np.int64).reshape(-1)], 1)
    distinct, index = np.unique(shapes, axis=0, return_inverse=True)
    grid = schedule.bucket(int(distinct[:, 0].max()), int(distinct[:, 1].max()))
    parts = [grid_tables(int(r), int(c), grid.rows, grid.cols, grid.tiles) for r, c in distinct]
    parts += parts[-1:] * (padded_count(len(parts), BATCH_GRIDS) - len(parts))
    return (np.stack([p[0] for p in parts]), np.stack([p[1] for p in parts])), index.reshape(-1)


def for_jit(hw: Hardware) -> Hardware:
    """``hw`` with float64 leaves and no name, so one compiled program serves every machine.

    The name is static pytree metadata and Python ints and floats trace differently: either
    would make ``jit`` compile again for each preset. ``hw`` was validated when it was built and
    only its leaves' types change here, so the copy skips validation (a quarter of a warm
    :func:`cost` call).
    """
    out = copy.copy(hw)  # a frozen dataclass: copied without __init__, so without __post_init__'s checks
    for field in FIELDS:
        object.__setattr__(out, field, np.asarray(getattr(hw, field), np.float64))
    object.__setattr__(out, "name", "")
    object.__setattr__(out, "execution", "time")
    object.__setattr__(out, "row_reductions", "fused")  # the kernels are grouped on the host, before the program
    return out


def _check_scalar_hw(hw: Any) -> Hardware:
    return check_hardware(hw, "cost()", error=CostInputError,
                          batch_hint="; for a batch of machines use dfit_nb.sim.sweep()")


class _Machine(NamedTuple):
    """What :func:`cost` reads of one checked machine, computed once per machine (:func:`_machine`)."""

    hw: Hardware
    fields: np.ndarray  # field_vector(hw), read-only
    attrs: dict[str, Any]  # hardware_attrs(hw): copied into each Dataset's attrs, never changed
    rows: int
    cols: int


#: the machines :func:`_machine` has read, by ``id``: each entry holds its machine, so the id stays its own
_machines = Kept()
#: how many machines :data:`_machines` keeps (the least recently used goes first)
_MACHINES_KEPT = 16


def _machine(hw: Any) -> _Machine:
    """``hw`` checked (one machine, a Hardware) and read for :func:`cost`: its field vector, its provenance
    attrs and its grid. A machine whose every field is a Python or NumPy scalar can change no value (a Hardware
    is frozen), so what was read of it is kept: a warm call looks it up once instead of reading its 33 fields
    three times. A machine holding arrays (which can change in place) is read on every call."""
    entry = _machines.get(id(hw))
    if entry is not None and entry.hw is hw:
        return entry
    hw = _check_scalar_hw(hw)
    fields = field_vector(hw)
    fields.setflags(write=False)
    entry = _Machine(hw, fields, hardware_attrs(hw, fields), int(hw.tile_rows), int(hw.tile_cols))
    if all(isinstance(getattr(hw, name), (int, float, np.generic)) for name in FIELDS):
        _machines.put(id(hw), entry, _MACHINES_KEPT)
    return entry


def to_dataset(values: Mapping[str, np.ndarray], dims: Sequence[str], coords: Mapping[str, Any],
               attrs: Mapping[str, Any], count: np.ndarray) -> xr.Dataset:
    """Wrap model outputs with units and descriptions, plus ``count`` and per-call totals.

    ``coords``: name -> values or ``(dims, values)``; dimension coordinates take the fast path of
    :func:`dfit_nb._runtime.datasets.assemble`.
    """
    dims = tuple(dims)
    described = _described()
    data: dict[str, tuple[tuple[str, ...], np.ndarray, dict[str, str]]] = {
        name: (dims, np.asarray(arr), described[name]) for name, arr in values.items()}
    data["count"] = (("op",), np.asarray(count), described["count"])
    # the three totals in one product and one sum (each row summed as alone: the same numbers), each a NumPy
    # array (a NumPy scalar would take xarray's constructor)
    sums = (np.stack([np.asarray(values[var]) for var in TOTALS.values()]) * count).sum(axis=-1)
    for total, total_values in zip(TOTALS, sums, strict=True):
        data[total] = (dims[:-1], np.asarray(total_values), described[total])
    if any(isinstance(v, tuple) and v[0] not in (name, (name,)) for name, v in coords.items()):
        return xr.Dataset(data, coords=dict(coords), attrs=dict(attrs))  # a non-dimension coordinate
    index = {name: np.asarray(v[1] if isinstance(v, tuple) else v) for name, v in coords.items()}
    return _xarray.assemble(data, index, dict(attrs))


@functools.cache
def _described() -> dict[str, dict[str, str]]:
    """Every variable's ``units`` and ``description`` (:func:`_attrs`), built once: a warm ``cost()`` reads one
    dictionary per variable."""
    return {name: {"units": units, "description": description} for name, (units, description) in VARIABLES.items()}


def _attrs(name: str) -> dict[str, str]:
    """The ``units`` and ``description`` of a variable: built once and shared, so never mutated (every Variable
    built from it copies it)."""
    return _described()[name]




_HW_ATTRS = tuple(f"hw_{f}" for f in FIELDS)


def hardware_attrs(hw: Hardware, fields: np.ndarray | None = None) -> dict[str, Any]:
    """Provenance: the machine's name and every field (``fields``: its :func:`field_vector`, when at hand)."""
    values = (field_vector(hw) if fields is None else fields).tolist()
    # the compiler's way with row reductions only where it is not the default (results made before it had one)
    split = {"row_reductions": hw.row_reductions} if hw.row_reductions != "fused" else {}
    return {"hardware": hw.name, **dict(zip(_HW_ATTRS, values, strict=True)), **split}


def cost(ops: Any, hw: Hardware, dataflow: Any = "ws", memory: str = "finite", fusion: str | None = None
         ) -> xr.Dataset:
    """Per-op cycles, traffic and energy of ``ops`` on ``hw``: each kernel of a Trace alone, each op of a table
    alone.

    Each op of a table is priced exactly as :func:`dfit_nb.replay` prices a
    one-op program (operands from DRAM, the result written back): the replay's
    mapping search over the whole grid, the one machine model
    (:mod:`dfit_nb.sim.machine`), and the body time on the tiles the op is
    placed on. A Trace's ops are grouped into the kernels the replay runs
    (``fusion``), and each op is priced as a member of its kernel run alone:
    the kernel's inputs from DRAM, its results back there except those only its
    own ops use (on chip while it runs fused), one fixed cost, the DRAM latency
    waited once, its vector work under its GEMM's (a one-kernel program costs
    what its replay does). On a whole program the replay differs only by what
    the program adds (results kept on chip between kernels, retiles, overlap):
    :func:`dfit_nb.sim._reconcile` names it.

    Parameters
    ----------
    ops : Trace, xarray.Dataset, pandas.DataFrame or mapping
        A table with ``m``, ``k``, ``n`` columns (the GEMM view; 0 for non-GEMM
        ops) and optionally ``batch``, ``dtype``, ``flops``,
        ``transcendentals``, ``bytes_read``, ``bytes_written``, and per-op
        settings: ``math_fidelity`` (:data:`FIDELITIES`: passes through the
        array), ``a_on_chip`` / ``b_on_chip`` (a GEMM operand already in SRAM,
        sharded over the op's tiles) and ``out_on_chip`` (the result stays
        there): no DRAM or NoC bytes for them. An ``in_shapes`` column
        (text such as ``"bfloat16[16,32] bfloat16[32,8]"``, one
        ``dtype[d0,d1,...]`` per input; a Trace's come from its
        ``operands``) gives a GEMM's operand bytes; a malformed one is
        refused naming its row. A column named after a
        Hardware field is refused: one call prices one machine (per-row
        machines: :func:`dfit_nb.sim.calibrate`, ``calibration.predict``).
    hw : Hardware
        One machine (``dfit_nb.sim.presets.get(name)`` or your own).
    dataflow : str, list of str, or per-op array
        ``"ws"``, ``"os"`` or ``"is"``; a list or tuple asks for several (a
        ``dataflow`` dim); an array with one name per op chooses per op.
    memory : {"finite", "ideal"}
        ``"ideal"``: SRAM and DRAM never stall (SCALE-Sim's computed-bandwidth mode).
    fusion : {"rules", "compiler", "none"}, optional
        How a Trace's ops are grouped into kernels, as for :func:`dfit_nb.replay`
        (default ``"rules"``); ``"none"`` prices every row of its ``ops`` table
        alone. A table of ops has no dataflow to group by: ``"none"`` only.

    Returns
    -------
    xarray.Dataset
        Dims ``op`` (and ``dataflow``); every variable of
        :data:`VARIABLES`, per single execution, with units. For a Trace's
        kernels, ``op`` holds the ops the replay prices, with a ``kernel``
        coordinate (its kernel's first op); ``attrs["fusion"]`` says which.

    Examples
    --------
    >>> from dfit_nb.sim import cost, presets
    >>> ds = cost({"m": [64], "k": [64], "n": [64]}, presets.get("scalesim_32"), ["os", "ws"], memory="ideal")
    >>> ds["cycles"].values.tolist()
    [[503.0], [631.0]]
    >>> on_chip = cost({"m": [512] * 2, "k": [512] * 2, "n": [512] * 2, "dtype": ["bfp8"] * 2,
    ...                 "math_fidelity": ["HiFi4"] * 2, "a_on_chip": [False, True]},
    ...                presets.get("tt_wormhole_n150"), "os")
    >>> on_chip["dram_reads_input"].values.tolist()   # 512 x 512 block-float elements, 1.0625 bytes each
    [278528.0, 0.0]
    """
    mode = pricing_mode(ops, fusion)
    priced = priced_ops(ops, mode, splits_rows(hw)) if mode != "none" else None
    out, names, coord, _, _ = model_outputs(ops, hw, dataflow, memory, priced)
    dims = ("dataflow", "op") if names else ("op",)
    coords = {"op": coord, **({"dataflow": names} if names else {}),
              **({"kernel": ("op", priced.kernel)} if priced is not None else {})}
    attrs = {**_machine(hw).attrs, "memory": memory, "fusion": mode,
             "dataflow": ",".join(names) if names else (dataflow if isinstance(dataflow, str) else "per-op")}
    counts = priced.count if priced is not None else op_counts(ops, len(coord))
    return to_dataset(out, dims, coords, attrs, counts)  # every output: one row of a block


def cost_grid(tile_rows: int, tile_cols: int, n_ops: int) -> schedule.Grid:
    """The grid :func:`cost` compiles for: the replay's :func:`~dfit_nb.sim.schedule.bucket`, except that a small
    table (at most :data:`COST_OPS` ops) on a machine of at most :data:`SMALL_GRID_TILES` tiles runs a program
    compiled for that many tiles (on the bucket's 8 x 8 sides).

    A warm ``cost()`` of a few ops is a latency figure, and most of its program is the mapping search, which
    scores every candidate split that can fit the compiled grid: 32 per op for 8 tiles against 116 for the
    bucket's 64. The candidates it drops need more tiles than such a machine has (the bucket's search scores them
    ``inf``), so the numbers are the same bit for bit (``tests/sim/test_cost.py``); the price is one more
    compiled program, shared by every machine of up to 8 tiles (the single-tile presets, ``tpu_like``,
    ``tpu_v4``) and kept by the persistent caches like the others.

    >>> cost_grid(2, 4, 3), cost_grid(2, 4, 100), cost_grid(4, 5, 3)
    (Grid(tiles=8, rows=8, cols=8), Grid(tiles=64, rows=8, cols=8), Grid(tiles=64, rows=8, cols=8))
    """
    grid = schedule.bucket(tile_rows, tile_cols)
    if padded_count(n_ops, COST_OPS) <= COST_OPS and tile_rows * tile_cols <= SMALL_GRID_TILES:
        return schedule.Grid(SMALL_GRID_TILES, grid.rows, grid.cols)
    return grid


@functools.lru_cache(maxsize=64)
def _grid_and_tables(tile_rows: int, tile_cols: int, n_ops: int) -> tuple[schedule.Grid, tuple[Any, Any]]:
    """:func:`cost_grid` and its :func:`device_tables`, looked up once per call."""
    grid = cost_grid(tile_rows, tile_cols, n_ops)
    return grid, device_tables(tile_rows, tile_cols, grid.rows, grid.cols, grid.tiles)


@functools.lru_cache(maxsize=256)
def _estimated_bytes(ops: int, dataflows: int, rows: int, cols: int) -> float:
    """The peak bytes of a :func:`cost` call (its :func:`~dfit_nb.sim.memory.sweep_estimate`'s total)."""
    return sweep_estimate("", 1, dataflows, ops, 0, rows, cols, 1).total


def model_outputs(ops: Any, hw: Hardware, dataflow: Any = "ws", memory: str = "finite", priced: Priced | None = None
                  ) -> tuple[dict[str, np.ndarray], list[str] | None, np.ndarray, np.ndarray, np.ndarray]:
    """What :func:`cost` computes before it builds its Dataset: ``(outputs, dataflow names or None, op
    coordinate, dataflow codes, the machine's field vector)``, the outputs as NumPy arrays (``(dataflows, ops)``
    for a list of dataflows, else ``(ops,)``), ``seconds`` and ``energy_j`` included. One compiled program per
    padded op count and grid (:func:`cost_grid`) serves both (and :func:`dfit_nb.sim.calibration.predict`)."""
    if memory not in MEMORY_MODES:
        raise CostInputError(f"unknown memory mode {memory!r}; valid: {', '.join(MEMORY_MODES)}")
    read = _machine(hw)
    hw, rows, cols = read.hw, read.rows, read.cols
    if priced is None:
        arrays, coord = alone_columns(ops)  # the program derives the model's inputs from them (alone_inputs)
    else:  # a Trace's kernels, each alone: the model's inputs themselves (kernel_alone)
        arrays, coord = priced.arrays, priced.coord
    codes, names = dataflow_codes(dataflow, len(coord))
    sizes = (len(coord), len(names or ()) or 1, rows, cols)
    if _estimated_bytes(*sizes) > available_bytes():  # the Estimate, which names the sizes, built only to refuse
        sweep_estimate(f"cost of {len(coord)} ops on {hw.name or 'the machine'!r}", 1, sizes[1], sizes[0], 0,
                       rows, cols, 1).check(
            "use a coarser tile grid (tile_rows x tile_cols), or cost fewer ops per call")
    with jax.enable_x64(True):
        # padded to the grid's bucket (cost_grid), like the replay's: presets and machines whose grids differ
        # share one compiled program (tiles past the grid are never placed on, so no result changes)
        grid, tables = _grid_and_tables(rows, cols, len(coord))
        keys = tuple(arrays)
        # the op count padded to a power of two (at least COST_OPS) by repeating the first op, so tables of
        # similar size share one compiled program; each op is priced alone, so the copies change no other op's
        # figures, and they are sliced off below
        n = len(coord)
        index = padding(n, COST_OPS)  # the source column of every padded row, cached per size
        # one array of the columns, then the padded rows taken: the fewest NumPy calls (a warm call pays per call)
        if priced is None:
            table = np.array([arrays[k] for k in keys]) if n else np.zeros((len(keys), 1))  # no op: zeros, sliced
            table = table.take(index, axis=1)
        else:  # the copies are kernels of their own
            table = np.array([v for v in take_rows(arrays, index, n).values()])
        df = codes.astype(np.float64).reshape(-1) if names or n else np.zeros(1)
        df = df if names else df[index]
        fields = read.fields
        evaluate = _evaluate_small if table.shape[1] <= COST_OPS else _evaluate
        dataflows = len(names or ())
        static = {"keys": keys, "dataflows": dataflows, "ideal": memory == "ideal",
                  "block_rows": rows_per_block(table.shape[1] * max(dataflows, 1)),
                  "spatial": hw.execution == "spatial"}
        # the inputs' shapes follow from these (float64, the tables' from the grid's bucket): a warm call finds
        # its program by them alone
        signature = (keys, dataflows, static["ideal"], static["spatial"], table.shape, grid)
        blocks = _exported.call_signed(evaluate, static, signature, pack(table, fields, df), tables=tables)
        outputs = [row for block in blocks for row in np.asarray(block)[..., :n]]
    return _derive(dict(zip(MODEL_OUTPUTS, outputs, strict=True)), hw.clock_ghz), names, coord, codes, fields


def finish(out: dict[str, np.ndarray], clock_ghz: Any) -> dict[str, np.ndarray]:
    """Add the derived variables (seconds, joules); ``clock_ghz`` broadcasts against the outputs."""
    return _derive({k: v if type(v) is np.ndarray else np.asarray(v) for k, v in out.items()}, clock_ghz)


def _derive(out: dict[str, np.ndarray], clock_ghz: Any) -> dict[str, np.ndarray]:
    """:func:`finish` of outputs that are NumPy arrays already (it adds to ``out`` and returns it)."""
    out["seconds"] = out["cycles"] / (np.asarray(clock_ghz, np.float64) * 1e9)
    out["energy_j"] = out["energy_pj"] * 1e-12
    return out
