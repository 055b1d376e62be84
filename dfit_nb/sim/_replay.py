"""The one-machine replay: a captured program mapped, scheduled and costed on a tiled machine, as a Run.

The pipeline (one jitted program per grid size and execution style):

1. :func:`dfit_nb.sim._prepare.prepare` (host, cached on the trace): the leaf ops
   that run, in program order, as arrays, grouped into kernels.
2. :func:`dfit_nb.sim.mapping.search`: the virtual layout of every op.
3. :func:`dfit_nb.sim.schedule.allocate` (layer-pipelined machines only):
   each op's tile region.
4. :func:`dfit_nb.sim.machine.model` (the one machine model): the physical mapping and the op's
   cycles, traffic and energy.
5. :func:`dfit_nb.sim.schedule.run`: the ``lax.scan`` over ops.
6. :mod:`dfit_nb.sim.run`: events, cube, summary and bottlenecks, on the host
   with NumPy (vectorized over events).

``"hybrid"`` (select, then replay and verify) is the selection's: :func:`dfit_nb.sim.policy.replay`, which
:func:`dfit_nb.replay` is, calls :func:`replay` here for everything else. Batches of machines are
:mod:`dfit_nb.sim._batch`.
"""

from __future__ import annotations

import functools
import hashlib
import warnings
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._runtime import compile_options as _compile_options
from .._runtime import exported as _exported
from .._runtime.kept import Kept
from ..errors import DfitWarning
from ..events.schema import KINDS
from . import machine, mapping, memory, schedule, streaming
from ._cost import for_jit
from ._prepare import (
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
from .hardware import EXECUTION_STYLES, Hardware, check_hardware, field_vector
from .kernels import splits_rows
from .machine import switch_cost, switched, word_and_mac_energy
from .run import build_run, level_totals


class SpillWarning(DfitWarning):
    """Data exceed the SRAM: an op moves some through DRAM more than once (a GEMM's operands re-read per block,
    partial sums spilled), or a fusible kernel runs unfused (its working set exceeds a tile's SRAM)."""


@functools.partial(_compile_options.jit, static_argnames=("grid", "spatial", "allocation"))
def program(ops: dict[str, Any], preds: Any, pred_bytes: Any, tables: Any, hw: Hardware, df: Any,
            pinned: dict[str, Any], grid: schedule.Grid, spatial: bool, reconfig: Any = None,
            allocation: str = "balanced") -> dict[str, Any]:
    """Map, allocate, model and schedule every op (the jitted, vmap-able core of :func:`replay`).

    ``reconfig``: ``(reconfig_cycles, reconfig_pj)``, the penalty per dataflow switch (default none). A GEMM whose
    dataflow differs from the previous GEMM's in program order pays :func:`dfit_nb.sim.machine.switch_cost`
    (the selection's price) in its retile phase. ``allocation`` (layer-pipelined): ``"balanced"``, the model's
    (stages' tiles that minimise each section's slowest stage, :func:`dfit_nb.sim.schedule.balance`), or
    ``"proportional"`` (:func:`dfit_nb.sim.schedule.allocate` alone: tiles in
    proportion to work), kept for comparison (``benchmarks/bench_streaming.py``).
    """
    f64 = jnp.float64
    reconfig = jnp.zeros(2, f64) if reconfig is None else jnp.asarray(reconfig, f64)
    n_tiles = machine.tiles(hw)
    n_ops = ops["m"].shape[0]
    word, _ = word_and_mac_energy(ops["itemsize"], hw)
    # what a producer feeds a consumer is the consumer's input, at the input's width
    scale = machine.input_scales(ops, hw, machine.word_scale(ops["itemsize"], word))[0]
    # dataflow switches: where the assignment changes between GEMMs adjacent in program order (as the DP)
    paid = switched(df, ops["gemm"]) & (ops["real"] > 0)
    price = switch_cost(ops, hw, reconfig[0], reconfig[1])

    def one_pass(best: dict[str, Any], alloc: Any, lead: Any) -> dict[str, Any]:
        """Model and schedule the ops mapped by ``best`` on ``alloc`` tiles each (``lead``: their stages)."""
        m = machine.model(ops, hw, df, best["layout"], best["gy"], best["gx"], alloc)
        m = machine.kernel_overlap(m, ops, hw)  # a fused kernel's vector work under its GEMM's array work
        per_op = {**{k: m[k] for k in schedule.PER_OP}, "count": ops["count"], "real": ops["real"],
                  "shared_reads": ops.get("shared_reads", 0.0 * ops["count"]),
                  **{f"switch_{k}": jnp.where(paid, price[k], 0.0) for k in ("bytes", "cycles", "energy_pj")},
                  "stage_lead": lead.astype(f64),
                  "stage_tiles": jax.ops.segment_max(m["tiles"], lead, num_segments=n_ops)[lead]}
        records = schedule.run(per_op, preds, pred_bytes * scale[:, None], tables, hw, grid, spatial)
        return {**m, **records, "alloc": alloc, "stage_tiles": per_op["stage_tiles"]}

    if not spatial:
        lead = jnp.arange(n_ops)
        alloc = n_tiles + 0.0 * ops["m"]
        return one_pass(mapping.search(ops, hw, df, alloc, pinned, tables, spatial), alloc, lead)
    # a fused kernel is one stage on one region (dfit_nb.sim.schedule.stage_leads): its work and the tiles its
    # weights and result need are the region's, allocated once to the stage's first op
    work, min_tiles = machine.pipeline_demand(ops, hw)
    lead = schedule.stage_leads(ops.get("kernel", jnp.arange(n_ops, dtype=f64)), machine.fused_in_kernel(ops, hw),
                                ops["gemm"] > 0)
    first = jnp.arange(n_ops) == lead
    work = jnp.where(first, jax.ops.segment_sum(work, lead, num_segments=n_ops), 0.0)
    min_tiles = jnp.where(first, jax.ops.segment_max(min_tiles, lead, num_segments=n_ops), 0.0)
    counts = mapping.distinct_tile_counts(hw)
    proportional = schedule.allocate(work, hw, min_tiles, counts)
    # every candidate mapping scored on its own tiles: the time of each stage on every region size at once; the
    # mapping is then chosen for the tiles the op gets (its region): a virtual grid chosen for the whole grid and
    # folded onto a small region holds many pieces per tile, each paying the array's fill
    scored = mapping.scores(ops, hw, df, n_tiles, pinned, tables, spatial)
    if allocation != "balanced":
        alloc = proportional[lead]
        return one_pass(mapping.choose(scored, alloc), alloc, lead)
    times = _stage_times(scored, counts, ops, hw, lead)
    real = jnp.where(first, ops["real"], 0.0)

    def step(tiles: Any, _: Any) -> tuple[Any, dict[str, Any]]:
        # replay with these tiles per stage, then rebalance: the estimate leaves out what the schedule adds
        # (inputs' retile, delivery, fixed costs), so each stage's times are scaled by its replayed / estimated
        # ratio at the tiles it had
        out = one_pass(mapping.choose(scored, tiles[lead]), tiles[lead], lead)
        k = jnp.clip(jnp.searchsorted(counts, tiles, side="right") - 1, 0, counts.shape[0] - 1)
        estimated = jnp.take_along_axis(times, k[:, None], axis=1)[:, 0]
        replayed = jax.ops.segment_sum(out["stage_cycles"] * ops["real"], lead, num_segments=n_ops)
        ratio = jnp.where(estimated > 0, replayed / jnp.where(estimated > 0, estimated, 1.0), 1.0)
        balanced, _ = schedule.balance(times * jnp.maximum(ratio, 1e-3)[:, None], counts, min_tiles, real, hw)
        period = jnp.sum(jnp.maximum(*streaming.section_periods(
            replayed, jax.ops.segment_sum(out["stage_dram_bytes"] * ops["real"], lead, num_segments=n_ops),
            out["section"].astype(jnp.int32), machine.field(hw, "dram_bytes_per_cycle"), n_ops, jnp)))
        return balanced, {**out, "period": period}

    # the proportional split, then the balanced one: the replay keeps the one with the shorter period
    _, passes = jax.lax.scan(step, proportional, None, length=2)
    better = jnp.argmin(passes.pop("period"))
    return jax.tree.map(lambda v: v[better], passes)


def _stage_times(scored: dict[str, Any], counts: Any, ops: dict[str, Any], hw: Hardware, lead: Any) -> Any:
    """``(ops, K)``: per stage (rows of its first op; zero elsewhere), its estimated time per inference on each of
    ``counts`` tiles: the sum over its ops of the best score among the candidates within that many tiles. A fused
    kernel's vector ops count only in a kernel without a GEMM (with one, the array hides them); an op whose
    factors are pinned folds its grid onto the tiles (its time grows with the fold)."""
    n = lead.shape[0]
    order = jnp.argsort(scored["tiles"])
    within = jax.lax.cummin(scored["score"][:, order], axis=1)  # the best score using at most so many tiles
    j = jnp.searchsorted(scored["tiles"][order], counts, side="right") - 1
    t_op = jnp.where(j[None, :] >= 0, within[:, jnp.maximum(j, 0)], jnp.inf)
    pinned = scored["pinned"][:, 0]
    grid = scored["tiles"][jnp.argmin(scored["score"], axis=1)]  # a pinned op's one candidate
    folded = jnp.min(scored["score"], axis=1)[:, None] * jnp.ceil(grid[:, None] / jnp.maximum(counts[None, :], 1.0))
    t_op = jnp.where(pinned[:, None], folded, t_op)
    gemm = ops["gemm"] > 0
    has_gemm = jax.ops.segment_max(gemm.astype(jnp.float64), lead, num_segments=n)[lead] > 0
    hidden = machine.fused_in_kernel(ops, hw) & ~gemm & has_gemm
    t_op = jnp.where(hidden[:, None] | ~(ops["real"] > 0)[:, None], 0.0, t_op)
    return jax.ops.segment_sum(t_op, lead, num_segments=n)


def allocation_period(trace: Any, hw: Hardware, allocation: str) -> tuple[float, int]:
    """The streamed period (cycles) and sections of a weight-stationary layer-pipelined replay of ``trace`` on
    ``hw`` whose tiles are allocated by ``allocation`` (:func:`program`): how the model's balanced allocation
    compares with tiles in proportion to work (``benchmarks/bench_streaming.py``)."""
    prep = prepare(trace, None, splits_rows(hw))
    n = len(prep.op)
    arrays, preds, pred_bytes, codes, pinned = padded(prep, np.zeros(n), pinned_layouts(prep, None), ONE_MACHINE_OPS)
    out = _one_machine(arrays, preds, pred_bytes, hw, codes, pinned, "spatial", switch_penalty("ws"), allocation)
    records = {k: v[:n] for k, v in out.items() if v.ndim == 1}
    s = streaming.steady_state(records, np.ones(n), 1.0, hw, True, 2)
    return s["period_cycles"], s["sections"]


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


def check_arguments(hw: Any, execution: str | None, time_bins: Any, inferences: Any) -> str:
    """The execution style a one-machine replay of ``hw`` runs (``execution``, else the machine's own), after the
    checks :func:`dfit_nb.replay` makes of its arguments: :class:`ReplayError` naming the one that is wrong."""
    check_hardware(hw, "replay()", error=ReplayError,
                   batch_hint="; for a batch of machines use dfit_nb.sim.replay_batch")
    execution = hw.execution if execution is None else execution
    if execution not in EXECUTION_STYLES:
        raise ReplayError(f"unknown execution style {execution!r}; valid: {', '.join(EXECUTION_STYLES)}")
    # a bool is an int to Python: True would pass as 1 where a count was meant
    for name, value in (("time_bins", time_bins), ("inferences", inferences)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ReplayError(f"{name} must be a positive integer, got {value!r}")
    return execution


def replay(trace: Any, hw: Hardware, dataflow: Any = "ws", *, execution: str | None = None,
           layouts: Mapping[str, str] | None = None, time_bins: int = 256, inferences: int = 1,
           measured: bool | None = None, fusion: str | None = None) -> Any:
    """:func:`dfit_nb.replay` of one style, per-op names or a Policy (everything but ``"hybrid"``, which the
    selection resolves to a Policy first: :func:`dfit_nb.sim.policy.replay`); the same arguments and Run."""
    execution = check_arguments(hw, execution, time_bins, inferences)
    prep = prepare(trace, policy_fusion(dataflow, fusion), splits_rows(hw))
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


_kept = Kept()




def _one_machine(arrays: dict[str, np.ndarray], preds: np.ndarray, pred_bytes: np.ndarray, hw: Hardware,
                 codes: np.ndarray, pinned: dict[str, np.ndarray], execution: str, reconfig: Any,
                 allocation: str = "balanced") -> dict[str, np.ndarray]:
    """The one-machine replay :func:`program` on padded inputs, its outputs on the host (writable copies).

    The last :data:`KEPT_OUTPUTS` results are kept by a digest of every input: :func:`select_dataflows` prices
    each single style with this program and its evaluation then replays the same styles (the same inputs), which
    are read from here instead of run again (the same arrays, so the same numbers;
    ``benchmarks/bench_report_overlap.py`` measures the saving). The grid's tables are a function of the
    machine's grid, which its fields give. ``allocation``: :func:`program`'s (the default is the model's)."""
    grid = schedule.bucket(int(hw.tile_rows), int(hw.tile_cols))
    digest = hashlib.blake2b(repr((grid, execution, allocation)).encode(), digest_size=20)
    for a in (*(arrays[k] for k in sorted(arrays)), preds, pred_bytes, field_vector(hw), codes,
              *(pinned[k] for k in sorted(pinned)), reconfig):
        a = np.ascontiguousarray(a)
        digest.update(f"{a.dtype.str}{a.shape}".encode())
        digest.update(a.data)
    key = digest.digest() + "".join(sorted(arrays)).encode() + "".join(sorted(pinned)).encode()
    kept = _kept.get(key)
    if kept is None:
        with jax.enable_x64(True):
            tables = schedule.grid_tables(int(hw.tile_rows), int(hw.tile_cols), grid)
            kept = {k: np.asarray(v) for k, v in jax.device_get(_exported.call(
                program, {"grid": grid, "spatial": execution == "spatial", "allocation": allocation}, arrays, preds,
                pred_bytes, tables, for_jit(hw), codes, pinned, reconfig=reconfig)).items()}
        for v in kept.values():
            v.setflags(write=False)
        _kept.put(key, kept, KEPT_OUTPUTS)
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
            *padded_sizes(prepare(trace, fusion, splits_rows(hw)), ONE_MACHINE_OPS))


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
    prep = prepare(trace, None, splits_rows(hw))
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
    in_words = machine.input_scales(prep.arrays, hw, words, np)[0]
    once = (prep.table["bytes_read"].values * in_words + prep.arrays["bytes_written"] * words) * prep.arrays["count"]
    k = prep.kernels
    unfused: list[int] = []
    looped: list[int] = []
    rows = np.zeros(len(spilled), bool)
    if k is not None and "fused" in out:
        ids = np.unique(k.kernel[(k.size > 1) & ~k.free & (out["fused"] <= 0)])
        unfused = [int(np.flatnonzero(k.kernel == i)[0]) for i in ids]
        # fused kernels that stream their rows again per reduction (machine.row_rereads)
        rows = machine.rows_looped(prep.arrays, hw, out["fused"] > 0, np)
        looped = [int(np.flatnonzero(k.kernel == i)[0]) for i in np.unique(k.kernel[rows])]
    big = np.flatnonzero((spilled > 0) & (spilled >= SPILL_SHARE * once) & ~rows)
    if not big.size and not unfused and not looped:
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
        parts.append(f"{len(unfused)} kernel(s) run unfused, each op a kernel of its own: their working set "
                     f"exceeds a tile's SRAM, or a chained GEMM's weight the chip's, on {hw.name!r}: "
                     f"{names}{' ...' if len(unfused) > 3 else ''} "
                     "(run.ops['fused'])")
    if looped:
        names = ", ".join(f"{k.name[k.kernel[i]]} (from op #{int(prep.op[i])})" for i in looped[:3])
        parts.append(f"{len(looped)} kernel(s) cannot keep the rows they normalise on chip (row_buffer_bytes, or a "
                     f"tile's SRAM) on {hw.name!r}, and stream their inputs again for each reduction over them: "
                     f"{names}{' ...' if len(looped) > 3 else ''} (run.ops['spilled_bytes'])")
    warnings.warn("; ".join(parts), SpillWarning, stacklevel=3)
