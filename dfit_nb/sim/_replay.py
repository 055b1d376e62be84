"""``replay(trace, hw, dataflow)``: a captured program mapped, scheduled and costed on a tiled machine.

The pipeline (one jitted program per grid size and execution style):

1. :func:`prepare` (host, cached on the trace): the leaf ops that run, in
   program order (a topological order: every edge runs forward), with their
   GEMM view, operand sizes, which operands producers feed, and each op's
   producers.
2. :func:`dfit_nb.sim.mapping.search`: the virtual layout of every op.
3. :func:`dfit_nb.sim.schedule.allocate` (layer-pipelined machines only):
   each op's tile region.
4. :func:`dfit_nb.sim.machine.model` (the one machine model): the physical mapping and the op's
   cycles, traffic and energy.
5. :func:`dfit_nb.sim.schedule.run`: the ``lax.scan`` over ops.
6. :mod:`dfit_nb.sim.run`: events, cube, summary and bottlenecks, on the host
   with NumPy (vectorized over events).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import re
import threading
import warnings
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tqdm.auto import tqdm

from .. import _compile_options, _exported
from ..errors import DfitError, DfitWarning
from ..events.schema import KINDS
from . import kernels, machine, mapping, memory, schedule
from ._cost import CostInputError, dataflow_codes, for_jit, operand_bytes, ops_arrays, padded_count
from .hardware import EXECUTION_STYLES, Hardware, check_hardware, field_vector
from .kernels import Kernels
from .machine import DATAFLOWS, switch_cost, switched, word_and_mac_energy
from .run import level_totals

#: what ``replay(trace, hw, dataflow)`` takes by name: a single style for every GEMM, or the verified hybrid
REPLAY_DATAFLOWS = (*DATAFLOWS, "hybrid")


class ReplayError(DfitError, ValueError):
    """The trace, hardware or options cannot be replayed."""


class SpillWarning(DfitWarning):
    """Data exceed the SRAM: an op moves some through DRAM more than once (a GEMM's operands re-read per block,
    partial sums spilled), or a fusible kernel runs unfused (its working set exceeds a tile's SRAM)."""


@dataclasses.dataclass(frozen=True)
class Prepared:
    """The ops a replay schedules, as arrays (one row per op, program order)."""

    op: np.ndarray  # op ids in trace.ops
    table: Any  # the replayed rows of trace.ops (xarray.Dataset)
    region: np.ndarray
    primitive: np.ndarray
    arrays: dict[str, np.ndarray]  # float64 model inputs
    preds: np.ndarray  # (ops, P) row indices of producers, -1 padding
    pred_bytes: np.ndarray  # (ops, P) bytes each producer passes (program dtype)
    kernels: Kernels | None = None  # which ops run as one kernel (dfit_nb.sim.kernels)

    @property
    def fusion(self) -> str:
        """The fusion mode the kernels were grouped by."""
        return self.kernels.mode if self.kernels is not None else "none"


def prepare(trace: Any, fusion: str | None = None) -> Prepared:
    """The replayable ops of ``trace`` grouped into kernels by ``fusion`` (:data:`dfit_nb.sim.kernels.FUSION_MODES`;
    default :data:`~dfit_nb.sim.kernels.DEFAULT_FUSION`), cached on the trace object per mode."""
    mode = kernels.check_mode(fusion)
    cached = getattr(trace, "_dfit_replay_prepared", None)
    store = cached if isinstance(cached, dict) else {}
    if isinstance(store.get(mode), Prepared):
        return store[mode]
    base = store.get("")  # the ops before kernels, shared by every mode
    if not isinstance(base, Prepared):
        base = _prepare_ops(trace)
    prepared = with_kernels(base, mode, trace)
    store.update({"": base, mode: prepared})
    try:
        trace._dfit_replay_prepared = store
    except AttributeError:  # a read-only object: just do not cache
        pass
    return prepared


def with_kernels(prep: Prepared, fusion: str, trace: Any = None) -> Prepared:
    """``prep`` with its ops grouped into kernels by ``fusion``: the kernel columns the model reads (``kernel``,
    ``kernel_size``, ``payer``, ``free``, ``internal``, ``kernel_ws``, ``kernel_row``, ``shared_reads``) added to
    its arrays."""
    lowering = getattr(trace, "lowering", None)
    known = None
    if lowering is not None and "fusion" in getattr(lowering, "coords", {}):
        known = lowering["fusion"].values
    table = {"primitive": prep.primitive, "count": prep.arrays["count"], "gemm": prep.arrays["gemm"],
             "elems_in": prep.arrays["elems_in"], "elems_out": prep.arrays["elems_out"],
             **{c: prep.table[c].values for c in ("op_class", "fusion", "folded_reason", "in_shapes", "out_shapes")
                if c in prep.table}}
    try:
        k = kernels.group(table, prep.preds, fusion, known)
    except kernels.FusionError as err:
        raise ReplayError(str(err)) from None
    arrays = {**prep.arrays, "kernel": k.kernel.astype(np.float64), "kernel_size": k.size.astype(np.float64),
              "shared_reads": shared_reads(k.kernel, prep.preds),
              "payer": k.payer.astype(np.float64), "free": k.free.astype(np.float64),
              "internal": k.internal.astype(np.float64), "kernel_ws": k.working_set.astype(np.float64),
              "kernel_row": k.row.astype(np.float64)}
    return dataclasses.replace(prep, arrays=arrays, kernels=k)


def shared_reads(kernel: np.ndarray, preds: np.ndarray) -> np.ndarray:
    """Per op, a bitmask of its producer slots (bit ``s``: ``preds[:, s]``) whose result an earlier op of the same
    kernel already reads from outside the kernel: a fused kernel brings a tensor on chip once, however many of
    its ops use it (a softmax's max and subtract read the same scores). As float64 (exact for up to 52 slots).

    >>> shared_reads(np.array([0, 1, 1]), np.array([[-1, -1], [0, -1], [0, 1]])).tolist()
    [0.0, 0.0, 1.0]
    """
    n, width = preds.shape
    if width > 52:
        raise ReplayError(f"an op has {width} producers; the replay handles at most 52")
    out = np.zeros(n)
    kernel = np.asarray(kernel, np.int64)
    op, slot = np.nonzero(preds >= 0)  # in program order, then slot order
    producer = preds[op, slot]
    outside = kernel[producer] != kernel[op]
    op, slot, producer = op[outside], slot[outside], producer[outside]
    # the first read of each (kernel, producer) brings it in; every later one finds it there
    _, first = np.unique(kernel[op] * n + producer, return_index=True)
    later = np.ones(op.size, bool)
    later[first] = False
    np.add.at(out, op[later], 2.0 ** slot[later])
    return out


def _prepare_ops(trace: Any) -> Prepared:
    """The replayable ops of ``trace``, before kernels."""
    ops = getattr(trace, "ops", None)
    missing = [k for k in ("container", "live", "in_shapes", "bytes_read") if k not in getattr(ops, "variables", {})]
    if ops is None or "op" not in getattr(ops, "dims", {}) or missing or getattr(trace, "edges", None) is None:
        hint = (" (a replay's result): pass the Trace that was replayed"
                if hasattr(trace, "events") and hasattr(trace, "cube") else "")
        raise ReplayError(f"replay() needs a dfit_nb Trace (from dfit_nb.capture or load_trace), got "
                          f"{type(trace).__name__}{hint}")
    leaf = (ops["container"].values == "") & ops["live"].values.astype(bool)
    if not leaf.any():
        raise ReplayError("the trace has no ops to replay (no live leaf ops: the function computes nothing)")
    table = ops.isel(op=np.flatnonzero(leaf))
    arrays, op_ids = ops_arrays(table)
    n = len(op_ids)
    row = np.full(int(ops.sizes["op"]), -1, np.int64)
    row[op_ids] = np.arange(n)

    # operand sizes (program dtype) of the GEMM's lhs and rhs
    operand = [operand_bytes(s) for s in table["in_shapes"].values]
    lhs = np.array([o[0] if o else 0.0 for o in operand])
    rhs = np.array([o[1] if len(o) > 1 else 0.0 for o in operand])

    e = trace.edges
    src, dst = row[e["src"].values], row[e["dst"].values]
    keep = (src >= 0) & (dst >= 0)
    src, dst = src[keep], dst[keep]
    # traces saved before edges named the consumer's operand: every tensor counts as the first operand
    pos = e["operand"].values[keep] if "operand" in e else np.zeros(int(keep.sum()), np.int64)
    nbytes = e["bytes"].values[keep].astype(np.float64)
    # bytes producers feed each (op, operand): one tensor even when several producers may write it (cond)
    fed = np.zeros((n, max(int(pos.max()) + 1, 2) if pos.size else 2))
    np.maximum.at(fed, (dst, pos), nbytes)
    gemm = (arrays["m"] > 0) & (arrays["k"] > 0) & (arrays["n"] > 0)
    arrays.update(
        gemm=gemm.astype(np.float64),
        lhs_bytes=lhs, rhs_bytes=rhs,
        fed0=np.where(lhs > 0, np.minimum(fed[:, 0] / np.maximum(lhs, 1.0), 1.0), 0.0),
        fed1=np.where(rhs > 0, np.minimum(fed[:, 1] / np.maximum(rhs, 1.0), 1.0), 0.0),
        ext_bytes=np.maximum(table["bytes_read"].values - fed.sum(axis=1), 0.0),
        bytes_written=table["bytes_written"].values.astype(np.float64),
        has_consumer=np.isin(np.arange(n), src).astype(np.float64),
        # a program output is written out whatever else reads it (traces saved before the column: none known)
        is_output=(table["program_output"].values.astype(np.float64) if "program_output" in table
                   else np.zeros(n)),
        count=table["count"].values.astype(np.float64),
    )
    # producers of each op: one row per (consumer, producer), bytes summed over the operands it feeds
    pairs, inverse = np.unique(np.stack([dst, src], axis=1), axis=0, return_inverse=True)
    pair_bytes = np.bincount(inverse.reshape(-1), weights=nbytes, minlength=len(pairs))
    indeg = np.bincount(pairs[:, 0], minlength=n) if len(pairs) else np.zeros(n, np.int64)
    width = max(int(indeg.max()) if n else 0, 1)
    slot = np.arange(len(pairs)) - np.repeat(np.cumsum(indeg) - indeg, indeg)
    preds = np.full((n, width), -1, np.int64)
    pred_bytes = np.zeros((n, width))
    if len(pairs):
        preds[pairs[:, 0], slot] = pairs[:, 1]
        pred_bytes[pairs[:, 0], slot] = pair_bytes
    return Prepared(op=op_ids, table=table, region=table["region"].values.astype(object),
                    primitive=table["primitive"].values.astype(object), arrays=arrays, preds=preds,
                    pred_bytes=pred_bytes)


def pinned_layouts(prep: Prepared, layouts: Mapping[str, str] | None, tiles: int | None = None
                   ) -> dict[str, np.ndarray]:
    """Per-op pinned layout (-1 free) and factors (0 free) from ``{region: "mn" | "mk" | "mk:4x8"}``; the factors
    are checked against the split factors the search offers on a grid of ``tiles`` tiles."""
    n = len(prep.op)
    out = {"layout": np.full(n, -1.0), "gy": np.zeros(n), "gx": np.zeros(n)}
    if not layouts:
        return out
    depth = np.full(n, -1)
    regions = sorted({str(r) for r in prep.region})
    for region, spec in layouts.items():
        m = re.fullmatch(r"(mn|mk)(?::(\d+)x(\d+))?", str(spec).strip().lower())
        if m is None:
            raise ReplayError(f"layout {spec!r} for region {region!r} is not valid; use 'mn' or 'mk', optionally "
                              "with split factors 'mn:GYxGX' (e.g. 'mk:4x8')")
        gy, gx = (float(m.group(2)), float(m.group(3))) if m.group(2) else (0.0, 0.0)
        for f in (gy, gx):
            if f and tiles is not None and not mapping.factor_ok(f, tiles):
                q = int(mapping.odd_part(float(tiles), np))
                offered = "powers of two" + (f" or {q} x a power of two" if q > 1 else "")
                raise ReplayError(f"layout {spec!r}: split factor {f:g} is not one the search offers on a grid of "
                                  f"{tiles} tiles: {offered}, up to {2 ** mapping.MAX_LOG2}")
        region = region.strip("/")
        hit = np.array([str(r) == region or str(r).startswith(region + "/") or region == "" for r in prep.region])
        if not hit.any():
            raise ReplayError(f"layouts: no op in region {region!r}; regions: {', '.join(regions[:20])}"
                              + (" ..." if len(regions) > 20 else ""))
        deeper = hit & (region.count("/") + (region != "") > depth)  # the most specific region wins
        out["layout"][deeper] = float(mapping.LAYOUTS.index(m.group(1)))
        out["gy"][deeper], out["gx"][deeper] = gy, gx
        depth[deeper] = region.count("/") + (region != "")
    return out


def _bucket(n: int, least: int) -> int:
    return max(least, 1 << max(n - 1, 0).bit_length())


#: the fewest ops a one-machine replay program is compiled for: every program up to this size shares one compile
#: per grid bucket and execution style, so a new model replays without compiling (a padded op costs the scan one
#: cheap step, a compile costs seconds: benchmarks/bench_cold_start.py). Batches of machines keep
#: :data:`BATCH_OPS`: there each padded op is paid once per machine.
ONE_MACHINE_OPS = 1024
BATCH_OPS = 32


def padded_sizes(prep: Prepared, least: int = BATCH_OPS) -> tuple[int, int]:
    """The op count and producer slots :func:`padded` pads ``prep`` to (part of what decides the program)."""
    n, width = prep.preds.shape
    return _bucket(n, least), _bucket(width, 4)


def padded(prep: Prepared, codes: np.ndarray, pinned: dict[str, np.ndarray], least: int = BATCH_OPS
           ) -> tuple[Any, ...]:
    """Inputs padded to power-of-two op counts (at least ``least``) and producer slots, so programs of similar
    size share one compilation. Padding ops come last, do nothing and depend on nothing: no real op sees them."""
    n, width = prep.preds.shape
    size, slots = padded_sizes(prep, least)
    arrays = {k: np.concatenate([v, np.zeros(size - n)]) for k, v in prep.arrays.items()}
    arrays["count"][n:] = 1.0
    if "kernel" in arrays:  # padding ops are kernels of their own (ids past every real one)
        arrays["kernel"][n:] = np.arange(n, size)
        arrays["kernel_size"][n:] = 1.0
    arrays["real"] = (np.arange(size) < n).astype(np.float64)
    preds = np.full((size, slots), -1, np.int64)
    preds[:n, :width] = prep.preds
    pred_bytes = np.zeros((size, slots))
    pred_bytes[:n, :width] = prep.pred_bytes
    pin = {k: np.concatenate([v, np.full(size - n, -1.0 if k == "layout" else 0.0)]) for k, v in pinned.items()}
    return arrays, preds, pred_bytes, np.concatenate([codes, np.zeros(size - n)]), pin


@functools.partial(_compile_options.jit, static_argnames=("grid", "spatial"))
def program(ops: dict[str, Any], preds: Any, pred_bytes: Any, tables: Any, hw: Hardware, df: Any,
            pinned: dict[str, Any], grid: schedule.Grid, spatial: bool, reconfig: Any = None) -> dict[str, Any]:
    """Map, allocate, model and schedule every op (the jitted, vmap-able core of :func:`replay`).

    ``reconfig``: ``(reconfig_cycles, reconfig_pj)``, the penalty per dataflow switch (default none). A GEMM whose
    dataflow differs from the previous GEMM's in program order pays :func:`dfit_nb.sim.machine.switch_cost`
    (the selection's price) in its retile phase.
    """
    f64 = jnp.float64
    reconfig = jnp.zeros(2, f64) if reconfig is None else jnp.asarray(reconfig, f64)
    n_tiles = machine.tiles(hw)
    if spatial:
        work, min_tiles = machine.pipeline_demand(ops, hw)
        alloc = schedule.allocate(work, hw, min_tiles)
    else:
        alloc = n_tiles + 0.0 * ops["m"]
    # the mapping is chosen for the tiles the op gets (its region when layer-pipelined): a virtual grid chosen for
    # the whole grid and folded onto a small region holds many pieces per tile, each paying the array's fill
    best = mapping.search(ops, hw, df, alloc, pinned, tables)
    word, _ = word_and_mac_energy(ops["itemsize"], hw)
    scale = machine.word_scale(ops["itemsize"], word)
    m = machine.model(ops, hw, df, best["layout"], best["gy"], best["gx"], alloc)
    m = machine.kernel_overlap(m, ops, hw)  # a fused kernel's vector work under its GEMM's array work
    # dataflow switches: where the assignment changes between GEMMs adjacent in program order (as the DP)
    paid = switched(df, ops["gemm"]) & (ops["real"] > 0)
    price = switch_cost(ops, hw, reconfig[0], reconfig[1])
    per_op = {**{k: m[k] for k in schedule.PER_OP}, "count": ops["count"], "real": ops["real"],
              "shared_reads": ops.get("shared_reads", 0.0 * ops["count"]),
              **{f"switch_{k}": jnp.where(paid, price[k], 0.0) for k in ("bytes", "cycles", "energy_pj")}}
    records = schedule.run(per_op, preds, pred_bytes * scale[:, None], tables, hw, grid, spatial)
    return {**m, **records, "alloc": alloc}


def _per_op_records(out: dict[str, Any], ops: dict[str, Any], xp: Any = jnp) -> dict[str, Any]:
    """Per op, all executions: the energy the replay charges it and its increment of the latency (its end past
    every earlier op's, in program order): they sum to the replayed energy and latency exactly. ``xp``:
    ``jax.numpy`` inside a compiled program, NumPy on a replay's outputs."""
    levels = level_totals(out, ops["count"], xp)
    energy = sum(levels[f"energy_{k}"] for k in KINDS) * ops["real"]
    end = out["end"] * ops["real"]
    cummax = jax.lax.cummax(end) if xp is jnp else np.maximum.accumulate(end)
    before = xp.concatenate([xp.zeros(1, end.dtype), cummax[:-1]])
    return {"energy_pj": energy, "latency_cycles": xp.maximum(end - before, 0.0)}


@functools.partial(jax.jit, static_argnames=("grid", "spatial", "shared_grid"))
def _styles_program(ops: dict[str, Any], preds: Any, pred_bytes: Any, tables: Any, hw: Hardware, dfs: Any,
                    pinned: dict[str, Any], grid: schedule.Grid, spatial: bool, shared_grid: bool) -> dict[str, Any]:
    """Per-op replayed costs (:func:`_per_op_records`) of every dataflow assignment in ``dfs`` ``(D, ops)``, on one
    machine (``shared_grid``) or a batch (leading axis of ``hw`` and, unless shared, of ``tables``)."""
    def one(tables_1: Any, hw_1: Hardware) -> dict[str, Any]:
        def style(df: Any) -> dict[str, Any]:
            return _per_op_records(program.__wrapped__(ops, preds, pred_bytes, tables_1, hw_1, df, pinned, grid,
                                                       spatial), ops)
        return jax.vmap(style)(dfs)

    if hw.batch_shape == ():
        return one(tables, hw)
    return jax.vmap(one, in_axes=(None if shared_grid else 0, 0))(tables, hw)


#: :func:`_styles_program` compiled with dfit_nb's compiler options, for a batch selection of little work
#: (:func:`dfit_nb._compile_options.by_work`): there its compile is what the call waits for
_styles_program_fast_compile = _compile_options.jit(_styles_program.__wrapped__,
                                                    static_argnames=("grid", "spatial", "shared_grid"))


def style_costs(prep: Prepared, hw: Hardware, codes: np.ndarray, execution: str | None = None) -> dict[str, np.ndarray]:
    """What the replay charges each op under each dataflow assignment: ``energy_pj`` and ``latency_cycles``
    (the op's increment of the latency), shaped ``(D, ops)`` (``(machines, D, ops)`` for a batch of machines).

    ``codes`` ``(D, ops)``: dataflow codes per op, e.g. one row per single style. This is how
    :func:`dfit_nb.sim.select_dataflows` prices its choices: with the replay's own mapping, refetch, movement
    and scheduling.
    """
    execution = hw.execution if execution is None else execution
    shape = hw.batch_shape
    n = len(prep.op)
    codes = np.asarray(codes, np.float64).reshape(-1, n)
    # one machine runs replay()'s own program below, so it is padded as replay() pads
    arrays, preds, pred_bytes, _, pin = padded(prep, codes[0], pinned_layouts(prep, None),
                                               ONE_MACHINE_OPS if shape == () else BATCH_OPS)
    size = arrays["m"].shape[0]
    dfs = np.concatenate([codes, np.zeros((codes.shape[0], size - n))], axis=1)
    rows, cols = (np.ravel(np.asarray(getattr(hw, f))).astype(np.int64) for f in ("tile_rows", "tile_cols"))
    n_machines = int(np.prod(shape)) if shape else 1
    grids = len(set(zip(np.broadcast_to(rows, n_machines).tolist(), np.broadcast_to(cols, n_machines).tolist(),
                        strict=True)))
    padded_grid = schedule.bucket(int(rows.max()), int(cols.max()))
    est = memory.replay_estimate(f"pricing {codes.shape[0]} dataflow assignments of {n} ops", size,
                                 preds.shape[1], int(rows.max()), int(cols.max()), None,
                                 machines=n_machines * codes.shape[0], grids=1 if grids == 1 else n_machines,
                                 padded_to=(padded_grid.rows, padded_grid.cols))
    est.check(GRID_ADVICE + ", fewer machines at a time, or fewer assignments")
    if shape == ():
        # one machine: the replay's own compiled program, once per assignment (a handful: the single styles), with
        # replay()'s inputs (the padded codes are dfs' rows), so a selection after a replay compiles nothing
        records = [_per_op_records(_one_machine(arrays, preds, pred_bytes, hw, row, pin, execution,
                                                switch_penalty(None)), arrays, np) for row in dfs]
        return {k: np.stack([r[k] for r in records])[:, :n] for k in records[0]}
    from .hardware import FIELDS

    leaves = {f: np.broadcast_to(np.asarray(getattr(hw, f), np.float64), shape) for f in FIELDS}
    grid, tables, shared = _batch_tables(leaves)
    machines = dataclasses.replace(hw, name="", execution="time", **leaves)
    program = _compile_options.by_work(n_machines * dfs.size, _styles_program_fast_compile, _styles_program)
    with jax.enable_x64(True):
        out = jax.device_get(_exported.call(
            program, {"grid": grid, "spatial": execution == "spatial", "shared_grid": shared}, arrays, preds,
            pred_bytes, tables, machines, dfs, pin))
    return {k: np.asarray(v)[..., :n] for k, v in out.items()}


def _batch_tables(leaves: dict[str, np.ndarray], grid: schedule.Grid | None = None,
                  shared: bool | None = None) -> tuple[schedule.Grid, Any, bool]:
    """The padded grid of a batch of machines, its tile-order tables (one, or one per machine) and whether
    every machine shares one grid. ``grid`` and ``shared`` fix both for a chunk of a larger batch (one compiled
    program for every chunk)."""
    rows, cols = leaves["tile_rows"].astype(np.int64), leaves["tile_cols"].astype(np.int64)
    grid = grid or schedule.bucket(int(rows.max()), int(cols.max()))
    shapes = list(zip(rows.tolist(), cols.tolist(), strict=True))
    tables = {shape: schedule.grid_tables(*shape, grid) for shape in set(shapes)}  # one per distinct grid shape
    shared = len(tables) == 1 if shared is None else shared
    per_machine = tables[shapes[0]] if shared else tuple(np.stack([tables[s][i] for s in shapes]) for i in (0, 1))
    return grid, per_machine, shared


def trace_key(prep: Prepared) -> str:
    """A fingerprint of the replayed op table (ids, primitives, GEMM view, sizes, counts, edges)."""
    h = hashlib.sha1()
    for arr in (prep.op, *(prep.arrays[k] for k in ("m", "k", "n", "batch", "count", "bytes_written", "flops")),
                prep.preds):
        h.update(np.ascontiguousarray(arr).tobytes())
    h.update("|".join(str(p) for p in prep.primitive).encode())
    if prep.fusion != "none":  # the kernels the policy was priced on (keys of unfused selections are unchanged)
        h.update(prep.fusion.encode())
    return h.hexdigest()[:16]


def hardware_key(hw: Hardware) -> str:
    """A fingerprint of a machine: every field's value and the execution style (not its name)."""
    from .hardware import FIELDS

    h = hashlib.sha1(hw.execution.encode())
    for f in FIELDS:
        h.update(np.asarray(getattr(hw, f), np.float64).tobytes())
    return h.hexdigest()[:16]


def check_policy_target(policy: Any, trace: Any, hw: Hardware) -> None:
    """A Policy replays only on the trace and machine it was selected on: a clear error otherwise."""
    want_trace, want_hw = getattr(policy, "trace_key", ""), getattr(policy, "hw_key", "")
    if want_trace and want_trace != trace_key(prepare(trace, getattr(policy, "fusion", None))):
        raise ReplayError(f"this Policy ({getattr(policy, 'name', 'policy')}) was selected for another trace: its "
                          "per-op choices would not match these ops; select again with "
                          "dfit_nb.sim.select_dataflows(trace, hw, objective)")
    if want_hw and want_hw != hardware_key(hw):
        raise ReplayError(f"this Policy ({getattr(policy, 'name', 'policy')}) was selected on machine "
                          f"{getattr(policy, 'hw_name', '')!r}, not on {hw.name!r} (fields or execution style "
                          "differ): its gains were priced there; select again with "
                          "dfit_nb.sim.select_dataflows(trace, hw, objective)")


def dataflow_per_op(dataflow: Any, trace: Any, prep: Prepared, hw: Hardware) -> tuple[np.ndarray, str]:
    """Dataflow codes per op and the policy's name for provenance."""
    n = len(prep.op)
    if isinstance(dataflow, str) and dataflow.lower() == "hybrid":
        raise ReplayError("'hybrid' is chosen per machine: replay(trace, hw, 'hybrid') for one machine, or "
                          "dfit_nb.sim.select_dataflows(trace, machines) for the choices over a batch")
    per_op = getattr(dataflow, "per_op", None)
    if per_op is not None:  # a Policy: per-op names aligned with trace.ops
        check_policy_target(dataflow, trace, hw)
        values = np.asarray(getattr(per_op, "values", per_op))
        try:
            values = values[prep.op] if len(values) != n else values
        except IndexError as err:
            raise ReplayError(f"the policy has {len(values)} per-op choices; the trace has {n} replayed ops") from err
        values = np.where(values == "", "ws", values)  # non-GEMM ops have no dataflow
        codes, _ = dataflow_codes(values, n)
        return codes.astype(np.float64), str(getattr(dataflow, "name", "policy"))
    if isinstance(dataflow, (list, tuple)):
        raise ReplayError(f"replay() takes one dataflow ({', '.join(REPLAY_DATAFLOWS)}) or a Policy; to compare "
                          "several, replay once per dataflow")
    try:
        codes, _ = dataflow_codes(dataflow, n)
    except CostInputError as err:
        raise ReplayError(f"{err}, or 'hybrid', or a Policy") from None
    return codes.astype(np.float64), dataflow if isinstance(dataflow, str) else "per-op"


def switch_penalty(dataflow: Any) -> np.ndarray:
    """``(reconfig_cycles, reconfig_pj)`` a Policy was selected with (charged per switch); zeros otherwise."""
    values = np.array([float(getattr(dataflow, "reconfig_cycles", 0.0) or 0.0),
                       float(getattr(dataflow, "reconfig_pj", 0.0) or 0.0)])
    if not np.isfinite(values).all() or values.min() < 0:
        raise ReplayError(f"the policy's reconfig_cycles and reconfig_pj must be finite and >= 0, got "
                          f"{values.tolist()}")
    return values


#: what to do when a replay's per-tile arrays do not fit
GRID_ADVICE = ("replay a coarser tile grid (tile_rows x tile_cols: the replay keeps arrays over tiles and over "
               "tiles x (rows + cols), so group cores into larger tiles)")


def replay(trace: Any, hw: Hardware, dataflow: Any = "ws", *, execution: str | None = None,
           layouts: Mapping[str, str] | None = None, time_bins: int = 256, inferences: int = 1,
           measured: bool | None = None, fusion: str | None = None) -> Any:
    """Map and schedule a captured program on ``hw``: the event cube.

    Parameters
    ----------
    trace : Trace
        From :func:`dfit_nb.capture` or :func:`dfit_nb.load_trace`.
    hw : Hardware
        One machine, e.g. ``dfit_nb.sim.presets.get("cerebras_like")``.
    dataflow : {"ws", "os", "is", "hybrid"}, or a Policy
        One dataflow for every GEMM; ``"hybrid"`` selects one per GEMM
        (:func:`dfit_nb.sim.select_dataflows`, energy objective), replays it and
        every single style, and returns the hybrid's run only when it beats them
        (else the best single style's, named so); a Policy (from
        :func:`~dfit_nb.sim.select_dataflows` on this trace and machine: others
        are refused) chooses per op. Where the dataflow
        changes between GEMMs adjacent in program order, the later GEMM pays the
        switch the selection prices (:func:`dfit_nb.sim.machine.switch_cost`,
        plus a Policy's ``reconfig_cycles`` / ``reconfig_pj``) as a ``retile``
        before its body: energy, bytes, and a delay on its tiles.
    execution : {"time", "spatial"}, optional
        Overrides ``hw.execution``: time-multiplexed or layer-pipelined.
    layouts : dict, optional
        ``{region: "mn" | "mk" | "mn:GYxGX"}`` pins the virtual layout of the
        ops in a region (the most specific region wins).
    time_bins : int
        Time bins of the cube.
    inferences : int
        Inferences one call of the function serves (for joules per inference).
    measured : bool, optional
        Add the trace's measured events (``source="measured"``); default: when
        the trace has measured times (profile or eager mode).
    fusion : {"rules", "compiler", "none"}, optional
        Which ops run together as one kernel (intermediates on chip, one launch,
        vector work beside the array): the machine's fusion rules (the default),
        the capture's XLA fusion map, or one kernel per primitive
        (:mod:`dfit_nb.sim.kernels`). A Policy replays with the fusion it was
        selected with.

    Returns
    -------
    Run
        ``events``, ``cube``, ``summary``, ``ops``, ``regions`` (see :class:`dfit_nb.sim.run.Run`).

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import presets
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> run = dfit_nb.replay(t, presets.get("npu_like"), "ws")
    >>> int(run.summary["macs"]) == 64 * 128 * 32
    True
    >>> sorted(set(run.events["kind"].values.tolist()))   # tanh runs in the matmul's kernel: nothing to retile
    ['compute', 'dram', 'noc', 'sram']
    >>> run.kernels.sizes["kernel"], sorted(set(dfit_nb.replay(t, presets.get("npu_like"), fusion="none").events[
    ...     "kind"].values.tolist()))
    (1, ['compute', 'dram', 'noc', 'retile', 'sram'])
    """
    from .run import build_run

    check_hardware(hw, "replay()", error=ReplayError,
                   batch_hint="; for a batch of machines use dfit_nb.sim.replay_batch")
    execution = hw.execution if execution is None else execution
    if execution not in EXECUTION_STYLES:
        raise ReplayError(f"unknown execution style {execution!r}; valid: {', '.join(EXECUTION_STYLES)}")
    if not isinstance(time_bins, (int, np.integer)) or time_bins < 1:
        raise ReplayError(f"time_bins must be a positive integer, got {time_bins!r}")
    if not isinstance(inferences, (int, np.integer)) or inferences < 1:
        raise ReplayError(f"inferences must be a positive integer, got {inferences!r}")
    fusion = policy_fusion(dataflow, fusion)
    prep = prepare(trace, fusion)
    if isinstance(dataflow, str) and dataflow.lower() == "hybrid":
        from .policy import select_dataflows

        # the exact selection (energy), replayed and verified against every single style
        policy = select_dataflows(trace, hw.replace(execution=execution), "energy", evaluate=False, fusion=fusion)
        return policy.evaluate(layouts=layouts, time_bins=time_bins, inferences=inferences,
                               measured=measured).runs["hybrid"]
    codes, policy_name = dataflow_per_op(dataflow, trace, prep, hw)
    pinned = pinned_layouts(prep, layouts, int(hw.tiles))
    what = f"replay of {len(prep.op)} ops on {hw.name or 'the machine'!r}"
    out = _run_program(prep, hw, codes, pinned, execution, switch_penalty(dataflow), time_bins, what)
    grid = schedule.bucket(int(hw.tile_rows), int(hw.tile_cols))
    n = len(prep.op)
    out = {k: np.asarray(v)[..., :n] if k == "traffic" else np.asarray(v)[:n] for k, v in out.items()}
    links = schedule.real_links(int(hw.tile_rows), int(hw.tile_cols), grid)  # the machine's own link groups
    out.update({k: out[k][:, links] for k in ("link_retile", "link_noc")})
    _warn_spills(prep, out, hw)
    # the events are one per (op, tile, kind): their number is known now, before they are expanded
    events = 5 * int(out["tiles"].astype(np.int64).sum())
    memory.events_estimate(f"the events of the {what}", events, int(hw.tile_rows), int(hw.tile_cols),
                           time_bins).check(
        GRID_ADVICE + ", fewer time_bins, or replay_batch for per-machine scalars without events")
    return build_run(trace, prep, out, hw, codes, policy_name, execution, time_bins=time_bins,
                     inferences=inferences, measured=measured)


def policy_fusion(dataflow: Any, fusion: str | None) -> str:
    """The fusion a replay of ``dataflow`` runs with: a Policy's own (another one is refused), else ``fusion``."""
    own = getattr(dataflow, "fusion", None) if getattr(dataflow, "per_op", None) is not None else None
    mode = kernels.check_mode(fusion)
    if own is None:
        return mode
    if fusion is not None and mode != own:
        raise ReplayError(f"this Policy was selected with fusion={own!r}: its choices were priced on those kernels; "
                          f"replay it with fusion={own!r} (or leave fusion out), or select again with "
                          f"fusion={mode!r}")
    return own


def _run_program(prep: Prepared, hw: Hardware, codes: np.ndarray, pinned: dict[str, np.ndarray], execution: str,
                 reconfig: Any, time_bins: int, what: str) -> dict[str, Any]:
    """The one-machine replay program on ``prep`` (padded to its op and grid buckets), its outputs on the host;
    the memory its run would need is checked first (:func:`dfit_nb.sim.memory.replay_estimate`)."""
    grid = schedule.bucket(int(hw.tile_rows), int(hw.tile_cols))
    arrays, preds, pred_bytes, codes_p, pinned_p = padded(prep, codes, pinned, ONE_MACHINE_OPS)
    memory.replay_estimate(what, preds.shape[0], preds.shape[1], int(hw.tile_rows), int(hw.tile_cols), time_bins,
                           padded_to=(grid.rows, grid.cols)).check(
        GRID_ADVICE + ", or fewer time_bins")
    return _one_machine(arrays, preds, pred_bytes, hw, codes_p, pinned_p, execution, reconfig)


#: how many one-machine programs' outputs :func:`_one_machine` keeps (each a few MB at most: 4.8 MB for the
#: encoder block on a 64 x 64 grid)
KEPT_OUTPUTS = 8
_kept: collections.OrderedDict[bytes, dict[str, np.ndarray]] = collections.OrderedDict()
_kept_lock = threading.Lock()


def _one_machine(arrays: dict[str, np.ndarray], preds: np.ndarray, pred_bytes: np.ndarray, hw: Hardware,
                 codes: np.ndarray, pinned: dict[str, np.ndarray], execution: str, reconfig: Any
                 ) -> dict[str, np.ndarray]:
    """The one-machine replay :func:`program` on padded inputs, its outputs on the host (writable copies).

    The last :data:`KEPT_OUTPUTS` results are kept by a digest of every input: :func:`select_dataflows` prices
    each single style with this program and its evaluation then replays the same styles (the same inputs), which
    are read from here instead of run again (the same arrays, so the same numbers; ``select_dataflows`` on the
    8 presets 1.3-1.4x faster, ``benchmarks/bench_report_overlap.py``). The grid's tables are a function of the
    machine's grid, which its fields give."""
    grid = schedule.bucket(int(hw.tile_rows), int(hw.tile_cols))
    digest = hashlib.blake2b(repr((grid, execution)).encode(), digest_size=20)
    for a in (*(arrays[k] for k in sorted(arrays)), preds, pred_bytes, field_vector(hw), codes,
              *(pinned[k] for k in sorted(pinned)), reconfig):
        a = np.ascontiguousarray(a)
        digest.update(f"{a.dtype.str}{a.shape}".encode())
        digest.update(a.data)
    key = digest.digest() + "".join(sorted(arrays)).encode() + "".join(sorted(pinned)).encode()
    with _kept_lock:
        kept = _kept.get(key)
        if kept is not None:
            _kept.move_to_end(key)
    if kept is None:
        with jax.enable_x64(True):
            tables = schedule.grid_tables(int(hw.tile_rows), int(hw.tile_cols), grid)
            kept = {k: np.asarray(v) for k, v in jax.device_get(_exported.call(
                program, {"grid": grid, "spatial": execution == "spatial"}, arrays, preds, pred_bytes, tables,
                for_jit(hw), codes, pinned, reconfig=reconfig)).items()}
        for v in kept.values():
            v.setflags(write=False)
        with _kept_lock:
            _kept[key] = kept
            while len(_kept) > KEPT_OUTPUTS:
                _kept.popitem(last=False)
    return {k: v.copy() for k, v in kept.items()}


def program_key(trace: Any, hw: Hardware, execution: str | None = None, fusion: str | None = None
                ) -> tuple[Any, ...]:
    """What decides which compiled program :func:`replay` runs ``trace`` on ``hw`` with: the grid bucket, the
    execution style and the padded op and producer-slot counts (machines with equal keys share one program).

    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import presets
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> program_key(t, presets.get("npu_like")) == program_key(t, presets.get("npu_like").replace(tile_rows=3))
    True
    >>> program_key(t, presets.get("npu_like")) == program_key(t, presets.get("npu_like").replace(tile_rows=9))
    False
    """
    execution = hw.execution if execution is None else execution
    return (schedule.bucket(int(hw.tile_rows), int(hw.tile_cols)), execution,
            *padded_sizes(prepare(trace, fusion), ONE_MACHINE_OPS))


def warm(trace: Any, hw: Hardware, execution: str | None = None, time_bins: int = 256) -> None:
    """Compile (and run once) the program :func:`replay` of ``trace`` on ``hw`` runs, without building a Run.

    A later replay of any machine with the same :func:`program_key` (any dataflow: the styles are inputs of
    the program) then starts without compiling. The Explorer calls it on a second thread for the grid buckets
    next to the one shown, so that moving a tile-grid slider past a bucket does not wait for a compile (XLA
    releases the GIL while it compiles). Raises what :func:`replay` would (a machine too large for memory).

    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import presets
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> warm(t, presets.get("npu_like").replace(tile_rows=9))  # the 16 x 8 bucket, compiled now
    """
    check_hardware(hw, "warm()", error=ReplayError)
    execution = hw.execution if execution is None else execution
    if execution not in EXECUTION_STYLES:
        raise ReplayError(f"unknown execution style {execution!r}; valid: {', '.join(EXECUTION_STYLES)}")
    prep = prepare(trace)
    n = len(prep.op)
    codes, _ = dataflow_per_op("ws", trace, prep, hw)  # the dataflow is an input of the program, not its shape
    _run_program(prep, hw, codes, pinned_layouts(prep, None), execution, switch_penalty("ws"), time_bins,
                 f"warm-up of the replay of {n} ops on {hw.name or 'the machine'!r}")


#: the share of an op's own traffic (its operands and result, once) that its re-read and spilled bytes must reach
#: for :class:`SpillWarning` to name it (1: its data cross DRAM twice over); a blocked loop re-streaming a few KiB
#: of weights (up to a third of a small op's traffic on eyeriss_like's 108 KiB) is how it runs, not a warning
SPILL_SHARE = 1.0


def _warn_spills(prep: Prepared, out: dict[str, np.ndarray], hw: Hardware) -> None:
    """One warning naming the ops that move data through DRAM more than once because it exceeds the SRAM (a
    GEMM's operands re-read per block, partial sums spilled: ``spilled_bytes``, at least :data:`SPILL_SHARE` of
    the op's operands and result), and the fusible kernels that run
    unfused because their working set exceeds a tile's SRAM (:func:`dfit_nb.sim.machine.kernel_fits`). An op
    that merely streams more data than the chip holds (an elementwise op of a large tensor reads and writes each
    byte once) is not named: that is how it runs on any chip."""
    spilled = out["spilled_bytes"] * prep.arrays["count"]
    words = machine.word_scale(prep.arrays["itemsize"], out["word"], np)
    once = (prep.table["bytes_read"].values + prep.arrays["bytes_written"]) * words * prep.arrays["count"]
    big = np.flatnonzero((spilled > 0) & (spilled >= SPILL_SHARE * once))
    k = prep.kernels
    unfused: list[int] = []
    if k is not None and "fused" in out:
        ids = np.unique(k.kernel[(k.size > 1) & ~k.free & (out["fused"] <= 0)])
        unfused = [int(np.flatnonzero(k.kernel == i)[0]) for i in ids]
    if not big.size and not unfused:
        return
    chip = float(hw.tiles) * float(hw.sram_bytes)
    parts = []
    if big.size:
        names = ", ".join(f"#{int(prep.op[i])} {prep.primitive[i]} ({spilled[i] / 2**20:.1f} MiB again)"
                          for i in big[:5])
        parts.append(f"{big.size} op(s) move data through DRAM more than once: their operands or partial sums "
                     f"exceed the SRAM ({chip / 2**20:.1f} MiB on {hw.name!r}): {names}{' ...' if big.size > 5 else ''}"
                     " (run.ops['spilled_bytes'])")
    if unfused:
        names = ", ".join(f"{k.name[k.kernel[i]]} (from op #{int(prep.op[i])})" for i in unfused[:3])
        parts.append(f"{len(unfused)} kernel(s) run unfused, each op writing its result to DRAM: their working set "
                     f"exceeds a tile's SRAM on {hw.name!r}: {names}{' ...' if len(unfused) > 3 else ''} "
                     "(run.ops['fused'])")
    warnings.warn("; ".join(parts), SpillWarning, stacklevel=3)


#: per-machine scalars of :func:`replay_batch` -> (units, description)
BATCH_VARS: dict[str, tuple[str, str]] = {
    "latency_cycles": ("cycle", "end of the last op"),
    "latency_s": ("s", "latency in seconds"),
    "energy_j": ("J", "energy of one call"),
    "utilization": ("1", "MACs over the peak MACs the chip could do in the latency"),
    "dram_bytes": ("B", "DRAM bytes"),
    "retile_bytes": ("B", "bytes moved between differently laid-out ops or re-laid-out by dataflow switches"),
    "sections": ("1", "pipeline sections (layer-pipelined)"),
}


@functools.partial(jax.jit, static_argnames=("grid", "spatial", "shared_grid"))
def _batch_program(ops: dict[str, Any], preds: Any, pred_bytes: Any, tables: Any, hw: Hardware, df: Any,
                   pinned: dict[str, Any], grid: schedule.Grid, spatial: bool, shared_grid: bool,
                   reconfig: Any = None) -> dict[str, Any]:
    """:func:`program` for a batch of machines (leading axis of ``hw``, and of ``tables`` unless every machine
    has the same grid), reduced to scalars inside the compiled program so per-op arrays never leave it."""
    def one(tables_1: Any, hw_1: Hardware) -> dict[str, Any]:
        out = program.__wrapped__(ops, preds, pred_bytes, tables_1, hw_1, df, pinned, grid, spatial, reconfig)
        real, count = ops["real"], ops["count"]
        energy = _per_op_records(out, ops)["energy_pj"]
        f64 = jnp.float64
        latency = jnp.max(out["end"] * real)
        macs = jnp.sum(out["macs"] * count * real)
        return {
            "latency_cycles": latency,
            "latency_s": latency / (jnp.asarray(hw_1.clock_ghz, f64) * 1e9),
            "energy_j": jnp.sum(energy) * 1e-12,
            "utilization": machine.utilization(macs, latency, hw_1),
            "dram_bytes": jnp.sum((out["dram_bytes"] * count + out["dram_extra_bytes"]) * real),
            "retile_bytes": jnp.sum(out["retile_bytes"] * real),
            "sections": jnp.max(out["section"] * real) + 1.0,
        }

    return jax.vmap(one, in_axes=(None if shared_grid else 0, 0))(tables, hw)


#: :func:`_batch_program` compiled with dfit_nb's compiler options, for a call of little work (a few machines, or
#: one: :func:`summarize`; :func:`dfit_nb._compile_options.by_work`): there its compile is what the call waits for
_batch_program_fast_compile = _compile_options.jit(_batch_program.__wrapped__,
                                                   static_argnames=("grid", "spatial", "shared_grid"))


def batch_program(machines: int, ops: int) -> Any:
    """The compile of :func:`_batch_program` for a call on ``machines`` (padded) machines of ``ops`` padded ops."""
    return _compile_options.by_work(machines * ops, _batch_program_fast_compile, _batch_program)


def _machine_sharding(hw: Hardware, mesh: Mesh | None) -> NamedSharding | None:
    """The sharding of the machine axis: over every axis of ``mesh``, else the one ``hw``'s leaves carry
    (jax Arrays with a :class:`~jax.sharding.NamedSharding` that splits their leading axis), else ``None``."""
    if mesh is not None:
        if not isinstance(mesh, Mesh):
            raise ReplayError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
        return NamedSharding(mesh, PartitionSpec(tuple(mesh.axis_names)))
    for leaf in jax.tree.leaves(hw):
        sharding = getattr(leaf, "sharding", None)
        if (isinstance(sharding, NamedSharding) and np.ndim(leaf) >= 1 and len(sharding.spec)
                and sharding.spec[0] is not None and sharding.mesh.size > 1):
            return NamedSharding(sharding.mesh, PartitionSpec(sharding.spec[0]))
    return None


@dataclasses.dataclass(frozen=True, eq=False)
class BatchPlan:
    """What replaying any range of a batch's machines needs besides their fields (picklable: a chunk task of a
    lazy :func:`replay_batch` carries it to a worker once)."""

    arrays: dict[str, np.ndarray]
    preds: np.ndarray
    pred_bytes: np.ndarray
    codes: np.ndarray
    pinned: dict[str, np.ndarray]
    grid: schedule.Grid
    spatial: bool
    shared: bool
    once: Any  # the tables of the one grid every machine shares (None: per machine)
    reconfig: Any
    chunk: int  # machines per vmapped call
    sharding: NamedSharding | None
    hw: Hardware  # one machine of the batch: its name and execution (every field is replaced per call)


def batch_range(p: BatchPlan, leaves: dict[str, np.ndarray], progress: bool = False) -> dict[str, np.ndarray]:
    """The per-machine scalars of the machines whose fields are ``leaves``, :attr:`BatchPlan.chunk` at a time,
    every call that one compiled shape (a lazy batch's smaller last chunk included)."""
    n_machines = len(leaves["tile_rows"])
    outs = []
    starts = range(0, n_machines, p.chunk)
    for lo in tqdm(starts, desc="replay_batch", unit="chunk", disable=not progress or len(starts) < 2):
        hi = min(lo + p.chunk, n_machines)
        # padded to p.chunk machines (batch_chunk: a multiple of the devices, a lone chunk's machines rounded up
        # to a power of two, so batches of similar size share one program) by repeating the last machine; its
        # results are dropped. Tables are built per chunk: a batch of different grids carries one per machine
        part = {f: _pad_rows(v[lo:hi], p.chunk) for f, v in leaves.items()}
        tables = p.once if p.shared else _batch_tables(part, p.grid, p.shared)[1]
        batch = dataclasses.replace(p.hw, name="", execution="time", **part)
        with jax.enable_x64(True):
            if p.sharding is not None:  # float64 leaves placed under x64; the jitted program follows the sharding
                batch = jax.device_put(batch, p.sharding)
                if not p.shared:
                    tables = jax.device_put(tables, p.sharding)
            # on one device the program kept traced on disk (a new process skips tracing it); sharded, the plain one
            out = jax.device_get(_exported.call(
                batch_program(p.chunk, len(p.preds)), {"grid": p.grid, "spatial": p.spatial, "shared_grid": p.shared},
                p.arrays, p.preds, p.pred_bytes, tables, batch, p.codes, p.pinned, reconfig=p.reconfig))
        outs.append({k: np.asarray(v)[: hi - lo] for k, v in out.items()})
    return {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}


def _batch_block(p: BatchPlan, client_versions: dict[str, str], leaves: dict[str, np.ndarray]
                 ) -> dict[str, np.ndarray]:
    """One chunk task of a lazy :func:`replay_batch` (``leaves``: its machines' fields, carried in the task)."""
    from .scale import check_versions

    check_versions(client_versions)
    return batch_range(p, leaves)


def replay_batch(trace: Any, hw: Hardware, dataflow: Any = "ws", *, execution: str | None = None,
                 layouts: Mapping[str, str] | None = None, mesh: Mesh | None = None, chunks: int | None = None,
                 fusion: str | None = None) -> Any:
    """Replay ``trace`` on a batch of machines in one vmapped program: per-machine scalars, no events.

    ``hw`` is a batched :class:`Hardware` (``Hardware.stack([...])`` or array
    fields); machines may differ in any field, the tile grid included (arrays
    over tiles are padded to the largest grid). Returns an ``xarray.Dataset``
    over ``machine`` with :data:`BATCH_VARS` and every hardware field as a
    coordinate. Use :func:`replay` on one machine for its events and cube.

    The machine axis is sharded over devices (SPMD: each device replays its
    share of the machines; the op table is replicated) when ``mesh`` is given
    (a :class:`jax.sharding.Mesh`; the machine axis is split over all its
    axes), or when ``hw``'s leaves are jax Arrays sharded on their leading axis
    by a :class:`~jax.sharding.NamedSharding` (``jax.device_put(hw,
    NamedSharding(mesh, PartitionSpec("machines")))``; put them under
    ``jax.enable_x64(True)`` to keep float64 fields exact). The batch is padded
    to a multiple of the device count; results equal the unsharded ones.

    ``fusion``: which ops run as one kernel, as in :func:`dfit_nb.replay`.

    ``chunks=N``: a lazy Dataset backed by Dask arrays, one task per ``N`` machines (see
    :mod:`dfit_nb.sim.scale`): nothing runs until it is reduced, plotted or saved, on this process' threads or
    an active ``dask.distributed`` client; ``.compute()`` equals the eager result.

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import Hardware, presets, replay_batch
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> base = presets.get("npu_like")
    >>> ds = replay_batch(t, Hardware.stack([base, base.replace(dram_bytes_per_cycle=600.0)]))
    >>> bool(ds["latency_cycles"][1] < ds["latency_cycles"][0])
    True
    >>> lazy = replay_batch(t, Hardware.stack([base, base.replace(dram_bytes_per_cycle=600.0)]), chunks=1)
    >>> lazy["latency_cycles"].chunks, bool((lazy["latency_cycles"] == ds["latency_cycles"]).all())
    (((1, 1),), True)
    """
    check_hardware(hw, "replay_batch()", batch=True, error=ReplayError,
                   batch_hint="; replay one machine with dfit_nb.replay")
    shape = hw.batch_shape
    from .hardware import FIELDS

    if shape[0] == 0:  # a batch rebuilt without the constructor's checks (jax.tree.map): name what is empty
        empty = [f"Hardware.{f}" for f in FIELDS if np.size(getattr(hw, f)) == 0]
        raise ReplayError(f"replay_batch() got a batch of no machines: {', '.join(empty)} empty; give one value "
                          "per machine (Hardware.stack)")
    execution = hw.execution if execution is None else execution
    if execution not in EXECUTION_STYLES:
        raise ReplayError(f"unknown execution style {execution!r}; valid: {', '.join(EXECUTION_STYLES)}")
    leaves = {f: np.broadcast_to(np.asarray(getattr(hw, f), np.float64), shape) for f in FIELDS}
    prep = prepare(trace, policy_fusion(dataflow, fusion))
    codes, policy_name = dataflow_per_op(dataflow, trace, prep, Hardware(**{f: v[0] for f, v in leaves.items()}))
    arrays, preds, pred_bytes, codes_p, pin = padded(prep, codes, pinned_layouts(prep, layouts))
    n_machines = shape[0]
    rows, cols = leaves["tile_rows"].astype(np.int64), leaves["tile_cols"].astype(np.int64)
    grids = len(set(zip(rows.tolist(), cols.tolist(), strict=True)))
    sizes = (preds.shape[0], preds.shape[1], int(rows.max()), int(cols.max()))
    sharding = _machine_sharding(hw, mesh)
    devices = sharding.mesh.size if sharding is not None else 1
    shared = grids == 1
    what = f"replay_batch of {len(prep.op)} ops"
    per_task = None
    if chunks is not None:
        from .scale import blocks, check_chunk

        if sharding is not None:
            raise ReplayError("replay_batch(chunks=...) spreads the machines over Dask's workers (each chunk on one "
                              "worker's default device); mesh= or sharded leaves spread them over this process' "
                              "devices: pass one or the other")

        per_task = blocks((n_machines,), chunks)
        largest = max(hi - lo for _, lo, hi in per_task[1])
        one = memory.replay_estimate(what, *sizes[:2], *sizes[2:], None, machines=min(largest, n_machines),
                                     grids=1 if shared else largest,
                                     padded_to=(schedule.bucket(*sizes[2:]).rows, schedule.bucket(*sizes[2:]).cols))
        check_chunk(f"chunks of {largest:,} machines of a {what}", one)
        n_machines = largest  # each task's calls are sized for its chunk
    chunk = batch_chunk(what, n_machines, devices, shared, *sizes)
    grid = schedule.bucket(int(rows.max()), int(cols.max()))
    once = _batch_tables({f: v[:1] for f, v in leaves.items()}, grid, True)[1] if shared else None
    plan = BatchPlan(arrays, preds, pred_bytes, codes_p, pin, grid, execution == "spatial", shared, once,
                     switch_penalty(dataflow), chunk, sharding,
                     dataclasses.replace(hw, **{f: v[0] for f, v in leaves.items()}))  # the metadata; not every leaf
    import xarray as xr

    from .run import provenance

    meta = {k: dict(zip(("units", "description"), v, strict=True)) for k, v in BATCH_VARS.items()}
    if per_task is None:
        out = batch_range(plan, leaves, progress=True)
        attrs_chunks = -(-shape[0] // chunk)
    else:
        import dask.base  # only a lazy batch needs Dask: `import dfit_nb` does not load it

        from .scale import chunked

        name = dask.base.tokenize(arrays, preds, pred_bytes, codes_p, pin, leaves, execution, str(dataflow))
        out = chunked(f"batch-{name}-{chunks}", _batch_block, plan, *_leaf_parts(per_task, leaves),
                      {k: () for k in BATCH_VARS})
        attrs_chunks = len(per_task[1])
    data = {k: (("machine",), v, meta[k]) for k, v in out.items()}
    coords = {"machine": np.arange(shape[0]), **{f: ("machine", v) for f, v in leaves.items()}}
    attrs = {k: v for k, v in provenance(trace, Hardware(), policy_name, execution, prep.fusion).items()
             if not k.startswith("hw_") and k not in ("hardware", "clock_ghz")}
    return xr.Dataset(data, coords=coords, attrs={**attrs, "hardware": hw.name, "machine_chunks": attrs_chunks})


def _leaf_parts(per_task: Any, leaves: dict[str, np.ndarray]) -> tuple[Any, list[Any]]:
    """The chunk tasks of a lazy batch: each carries its machines' fields (the graph holds each slice once)."""
    per_axis, parts = per_task
    return per_axis, [(index, ({f: np.ascontiguousarray(v[lo:hi]) for f, v in leaves.items()},))
                      for index, lo, hi in parts]


def _pad_rows(x: np.ndarray, size: int) -> np.ndarray:
    """``x`` padded along its first axis to ``size`` rows by repeating its last row."""
    return np.concatenate([x, np.repeat(x[-1:], size - len(x), axis=0)]) if size > len(x) else x


def batch_chunk(what: str, machines: int, devices: int, shared: bool, ops: int, slots: int, rows: int, cols: int,
                available: float | None = None) -> int:
    """Machines per vmapped call of a batch replay: as many as fit half the memory available (the rest is
    headroom for the host's copies), a multiple of ``devices``; refused when even ``devices`` machines do not fit
    in all of it."""
    room = memory.available_bytes() if available is None else float(available)
    grid = schedule.bucket(rows, cols)
    sizes = dict(padded_to=(grid.rows, grid.cols))
    one = memory.replay_estimate(what, ops, slots, rows, cols, None, machines=1, grids=1, **sizes)
    # a shared grid's tables are built once; otherwise every machine carries its own
    per_machine = one.parts["per-op records"] + (0.0 if shared else one.parts["tile-order tables"])
    fixed = one.parts["compiled program"] + (one.parts["tile-order tables"] if shared else 0.0)
    fit = int((room / 2 - fixed) // per_machine)
    if fit < devices:
        memory.replay_estimate(what, ops, slots, rows, cols, None, machines=devices,
                               grids=1 if shared else devices, **sizes).check(
            GRID_ADVICE + ", or fewer devices to shard over", available=room)
        fit = devices
    # up to the machines rounded to a power of two: batch_range pads a lone chunk so, to share its program
    most = min(padded_count(machines, 1), fit)
    return max(devices, most - most % devices)


def summarize(prep: Prepared, hw: Hardware, codes: np.ndarray, execution: str | None = None,
              reconfig: Any = (0.0, 0.0)) -> dict[str, float]:
    """Latency, energy and friends of one replay (no events): the scalars of :func:`replay_batch` for an op
    table (e.g. a trace scaled to another shape) on one machine. Dataflow switches between adjacent GEMMs are
    charged as in :func:`replay`, with ``reconfig = (reconfig_cycles, reconfig_pj)`` per switch."""
    execution = hw.execution if execution is None else execution
    grid = schedule.bucket(int(hw.tile_rows), int(hw.tile_cols))
    arrays, preds, pred_bytes, codes_p, pin = padded(prep, np.asarray(codes, np.float64), pinned_layouts(prep, None))
    tables = schedule.grid_tables(int(hw.tile_rows), int(hw.tile_cols), grid)
    batch = Hardware.stack([hw])
    batch = dataclasses.replace(batch, name="", execution="time")
    with jax.enable_x64(True):
        out = jax.device_get(_exported.call(
            batch_program(1, len(preds)), {"grid": grid, "spatial": execution == "spatial", "shared_grid": True},
            arrays, preds, pred_bytes, tables, batch, codes_p, pin, reconfig=np.asarray(reconfig, np.float64)))
    return {k: float(np.asarray(v)[0]) for k, v in out.items()}
