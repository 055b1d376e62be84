"""Batches of machines: a captured program replayed on many machines in one vmapped program, reduced to
per-machine scalars inside it (:func:`replay_batch`, :func:`summarize`), and the per-op prices of several
dataflow assignments the selection reads (:func:`style_costs`)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tqdm.auto import tqdm

from .._runtime import compile_options as _compile_options
from .._runtime import exported as _exported
from .._runtime.padding import padded_count
from . import machine, memory, schedule
from ._prepare import (
    BATCH_OPS,
    GRID_ADVICE,
    ONE_MACHINE_OPS,
    Prepared,
    ReplayError,
    dataflow_per_op,
    padded,
    padded_sizes,
    pinned_layouts,
    policy_fusion,
    prepare,
    switch_penalty,
)
from ._replay import _one_machine, _per_op_records, program
from .hardware import EXECUTION_STYLES, FIELDS, Hardware, check_hardware, program_copy
from .kernels import splits_rows
from .run import provenance

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
#: one: :func:`summarize`; :func:`dfit_nb._runtime.compile_options.by_work`): there its compile is what the call
#: waits for
_batch_program_fast_compile = _compile_options.jit(_batch_program.__wrapped__,
                                                   static_argnames=("grid", "spatial", "shared_grid"))


def batch_program(machines: int, ops: int) -> Any:
    """The compile of :func:`_batch_program` for a call on ``machines`` (padded) machines of ``ops`` padded ops."""
    return _compile_options.by_work(machines * ops, _batch_program_fast_compile, _batch_program)


@functools.partial(jax.jit, static_argnames=("grid", "spatial", "shared_grid"))
def _styles_program(ops: dict[str, Any], preds: Any, pred_bytes: Any, tables: Any, hw: Hardware, dfs: Any,
                    pinned: dict[str, Any], grid: schedule.Grid, spatial: bool, shared_grid: bool,
                    reconfig: Any = None) -> dict[str, Any]:
    """Per-op replayed costs (:func:`_per_op_records`) of every dataflow assignment in ``dfs`` ``(D, ops)``, on one
    machine (``shared_grid``) or a batch (leading axis of ``hw`` and, unless shared, of ``tables``)."""
    def one(tables_1: Any, hw_1: Hardware) -> dict[str, Any]:
        def style(df: Any) -> dict[str, Any]:
            return _per_op_records(program.__wrapped__(ops, preds, pred_bytes, tables_1, hw_1, df, pinned, grid,
                                                       spatial, reconfig), ops)
        return jax.vmap(style)(dfs)

    if hw.batch_shape == ():
        return one(tables, hw)
    return jax.vmap(one, in_axes=(None if shared_grid else 0, 0))(tables, hw)


#: :func:`_styles_program` compiled with dfit_nb's compiler options, for a batch selection of little work
#: (:func:`dfit_nb._runtime.compile_options.by_work`): there its compile is what the call waits for
_styles_program_fast_compile = _compile_options.jit(_styles_program.__wrapped__,
                                                    static_argnames=("grid", "spatial", "shared_grid"))


def style_costs(prep: Prepared, hw: Hardware, codes: np.ndarray, execution: str | None = None,
                reconfig: Any = None) -> dict[str, np.ndarray]:
    """What the replay charges each op under each dataflow assignment: ``energy_pj`` and ``latency_cycles``
    (the op's increment of the latency), shaped ``(D, ops)`` (``(machines, D, ops)`` for a batch of machines).

    ``codes`` ``(D, ops)``: dataflow codes per op, e.g. one row per single style. This is how
    :func:`dfit_nb.sim.select_dataflows` prices its choices: with the replay's own mapping, refetch, movement
    and scheduling. ``reconfig``: ``(reconfig_cycles, reconfig_pj)`` paid per dataflow switch (default none).
    """
    execution = hw.execution if execution is None else execution
    reconfig = switch_penalty(None) if reconfig is None else np.asarray(reconfig, np.float64)
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
        records = [_per_op_records(_one_machine(arrays, preds, pred_bytes, hw, row, pin, execution, reconfig),
                                   arrays, np) for row in dfs]
        return {k: np.stack([r[k] for r in records])[:, :n] for k in records[0]}
    leaves = {f: np.broadcast_to(np.asarray(getattr(hw, f), np.float64), shape) for f in FIELDS}
    grid, tables, shared = _batch_tables(leaves)
    machines = program_copy(hw, **leaves)
    program = _compile_options.by_work(n_machines * dfs.size, _styles_program_fast_compile, _styles_program)
    with jax.enable_x64(True):
        out = jax.device_get(_exported.call(
            program, {"grid": grid, "spatial": execution == "spatial", "shared_grid": shared}, arrays, preds,
            pred_bytes, tables, machines, dfs, pin, reconfig=reconfig))
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
        batch = program_copy(p.hw, **part)
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
    if shape[0] == 0:  # a batch rebuilt without the constructor's checks (jax.tree.map): name what is empty
        empty = [f"Hardware.{f}" for f in FIELDS if np.size(getattr(hw, f)) == 0]
        raise ReplayError(f"replay_batch() got a batch of no machines: {', '.join(empty)} empty; give one value "
                          "per machine (Hardware.stack)")
    execution = hw.execution if execution is None else execution
    if execution not in EXECUTION_STYLES:
        raise ReplayError(f"unknown execution style {execution!r}; valid: {', '.join(EXECUTION_STYLES)}")
    leaves = {f: np.broadcast_to(np.asarray(getattr(hw, f), np.float64), shape) for f in FIELDS}
    prep = prepare(trace, policy_fusion(dataflow, fusion), splits_rows(hw))
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


def assignments_per_call(prep: Prepared, hw: Hardware, wanted: int) -> int:
    """How many dataflow assignments one vmapped :func:`style_costs` call prices on the one machine ``hw``: all
    ``wanted`` where they fit half the memory available, else as many as do (:func:`batch_chunk`; refused when
    not even one does)."""
    ops, slots = padded_sizes(prep, BATCH_OPS)
    return min(wanted, batch_chunk(f"pricing dataflow assignments of {len(prep.op)} ops", wanted, 1, True, ops,
                                   slots, int(hw.tile_rows), int(hw.tile_cols)))


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
    batch = program_copy(batch)
    with jax.enable_x64(True):
        out = jax.device_get(_exported.call(
            batch_program(1, len(preds)), {"grid": grid, "spatial": execution == "spatial", "shared_grid": True},
            arrays, preds, pred_bytes, tables, batch, codes_p, pin, reconfig=np.asarray(reconfig, np.float64)))
    return {k: float(np.asarray(v)[0]) for k, v in out.items()}
