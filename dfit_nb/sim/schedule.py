"""The dependency-ordered replay of mapped ops on the tile grid: one ``lax.scan`` over ops.

Pure ``jax.numpy``: the scan carries each tile's free time, each op's start
and end, where each op's tiles are (their centroid) and when the DRAM channel
is free; arrays over tiles do the per-tile work of a step, so there is no
Python loop over ops or tiles. :func:`dfit_nb.replay` expands the per-op
records into events on the host.

Placement
---------
Tiles are numbered along a Hilbert curve over the grid (:func:`tile_order`),
so a run of consecutive tiles is a compact 2-D block spanning several rows and
columns, and consecutive regions touch.
An op runs on tiles ``[offset, offset + tiles)``:

* **time-multiplexed** (``execution="time"``): every op starts at tile 0 and
  owns the whole grid while it runs (its idle tiles stay reserved), so ops run
  one after another in dependency order;
* **layer-pipelined** (``execution="spatial"``): each *stage* holds its own
  region (``alloc`` tiles: :func:`balance`, the counts that make each
  section's slowest stage as fast as the grid allows, or :func:`allocate`'s,
  in proportion to work, where that streams faster), regions follow one another along
  the path, and stages run as soon as their
  inputs stream in. A stage is one op, or the ops of a fused kernel
  (:func:`stage_leads`): they run on one region one after another, each
  handing its blocks on in the tiles' SRAM, and the stage streams its result
  from when its first op started. When the next region would run past the
  last tile, a new *section* begins at tile 0 after every earlier op has
  finished (the SambaNova section / Cerebras reload boundary); within a
  section regions are disjoint, so a stage's tiles have been free since its
  section began.

A step of the scan costs O(rows + columns + DRAM bins), not O(tiles): an op's
spread over rows and columns comes from prefix counts along the tile order
(:func:`prefix_counts`), and per-tile detail is rebuilt on the host only for
the events.

Timing of one op
----------------
``ready``: time-multiplexed, when its last producer ends; layer-pipelined,
when every producer has streamed the first of ``STREAM_CHUNKS`` chunks of
its output (``start_p + (end_p - start_p) / STREAM_CHUNKS``, ``start_p`` the
start of the producer's stage), and it cannot
finish before its last producer plus one chunk of its own body (activations
stream tile to tile; a documented assumption of 8 chunks).
``start = max(ready, its tiles free, section barrier)``; its tiles are free
when its section began, or, for a later op of a stage, when the op before it
ends. Then:

1. **retile** ``[start, t1)``: inputs produced on chip by an op with a
   different layout or tiles travel from the producer's tiles to this op's
   tiles with XY routing: X along the producer's rows (in proportion to its
   tiles in each row) east or west of its centroid column, then Y down the
   destination columns, split at the producer's centroid row (the rows and
   columns of a compact block are taken as independent). Hops are measured
   from the producer's centroid. The busiest link group sets the time:
   ``max link bytes / link bandwidth + hop latency x the longest route``.
   Producers whose results did not fit on chip are read from DRAM instead.
   A producer in the op's own fused kernel passes its result on chip: no
   move, no DRAM (:mod:`dfit_nb.sim.kernels`); nor does a producer outside it
   whose result an earlier op of the fused kernel already brought in
   (``shared_reads``: a kernel loads a tensor once, however many ops use it).
   A GEMM whose dataflow differs from the previous GEMM's (program order)
   then pays the dataflow switch the selection prices (``switch_bytes``,
   ``switch_cycles``, ``switch_energy_pj`` from
   :func:`dfit_nb.sim.machine.switch_cost`, once, not per execution): its
   cycles extend the retile phase, so the body starts that much later on the
   op's tiles; on a grid its bytes load the west-edge links of every row.
2. **body** from ``t1``: each tile computes its pieces (``compute``), its SRAM
   streams them (``sram``: bytes / port bandwidth), DRAM traffic is delivered
   from the west edge of each tile row over the row's links (``noc``; the first
   link of a row carries the whole row's traffic), and DRAM transfers wait
   share the chip's DRAM channel (``dram``: see below; the latency delays
   completion but overlaps other transfers). With double
   buffering these overlap; the op ends when the slowest finishes.

Time-multiplexed ops run one at a time, so each finds the DRAM channel free.
Layer-pipelined ops share it: the channel is a timeline of ``DRAM_BINS`` bins over a horizon no
schedule can exceed, each with ``dram_bytes_per_cycle x width`` bytes: a
transfer takes the capacity left from ``t1`` on, so a transfer scheduled later
in program order but earlier in time backfills free bandwidth instead of
queueing behind it (list scheduling over a single "free at" time would not).

An op that runs ``count`` times (scan bodies, loops) runs its executions back
to back: every duration and byte count is multiplied by ``count``.

Link groups
-----------
NoC load is kept per *link group*: for each tile row its east- and
west-bound links, for each tile column its south- and north-bound links
(``2 tile_rows + 2 tile_cols`` groups). A group's load is the bytes on its
busiest link (flows through a group are summed: an upper bound when flows
use different links of the row). Concurrent ops contend for the DRAM channel;
contention between concurrent ops on the same NoC links is not modelled.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import machine
from .hardware import Hardware

STREAM_CHUNKS = 8.0
DRAM_BINS = 1024


class Grid(NamedTuple):
    """Static sizes of the arrays over tiles (the largest grid of a batch of machines)."""

    tiles: int
    rows: int
    cols: int


#: the smallest side of a grid bucket (:func:`bucket`): every grid up to 8 x 8 shares one compiled replay
MIN_BUCKET_SIDE = 8


def bucket(tile_rows: int, tile_cols: int) -> Grid:
    """The static sizes a machine's replay is compiled for: each side rounded up to a power of two, at least
    :data:`MIN_BUCKET_SIDE`, so machines whose grids differ (presets, an Explorer slider) share one compiled
    program. Tiles past the machine's grid are never placed on (:func:`tile_order` numbers them ``(-1, -1)``),
    and rows and columns past it carry no work, so the padding changes no result.

    >>> bucket(1, 1), bucket(16, 20)
    (Grid(tiles=64, rows=8, cols=8), Grid(tiles=512, rows=16, cols=32))
    """
    rows = max(MIN_BUCKET_SIDE, 1 << max(int(tile_rows) - 1, 0).bit_length())
    cols = max(MIN_BUCKET_SIDE, 1 << max(int(tile_cols) - 1, 0).bit_length())
    return Grid(rows * cols, rows, cols)


def grid_tables(tile_rows: int, tile_cols: int, grid: Grid) -> tuple[np.ndarray, np.ndarray]:
    """The :func:`prefix_counts` of a ``tile_rows x tile_cols`` machine's :func:`tile_order`, padded to ``grid``."""
    return prefix_counts(tile_order(tile_rows, tile_cols, grid.tiles), grid.rows, grid.cols)


def real_links(tile_rows: int, tile_cols: int, grid: Grid) -> np.ndarray:
    """Where a machine's link groups (east and west per row, south and north per column) sit in the link arrays
    of a replay compiled for ``grid``: index these columns to get the machine's own ``2 rows + 2 cols`` groups."""
    r, c = np.arange(int(tile_rows)), np.arange(int(tile_cols))
    return np.concatenate([r, grid.rows + r, 2 * grid.rows + c, 2 * grid.rows + grid.cols + c])


def tile_order(tile_rows: int, tile_cols: int, size: int | None = None) -> np.ndarray:
    """``(2, size)`` array of ``(y, x)`` of tile numbers ``0 .. size - 1`` along a Hilbert curve (host NumPy).

    The curve runs over the smallest power-of-two square holding the grid and
    skips cells outside it, so any run of consecutive numbers is a compact
    2-D block (a region spans many rows and columns, hence many links). Numbers
    past the grid (``size`` larger than the grid, for a batch of machines
    padded to the largest) get ``(-1, -1)``.

    >>> tile_order(2, 2).tolist()
    [[0, 1, 1, 0], [0, 0, 1, 1]]
    """
    side = 1 << max(int(np.ceil(np.log2(max(tile_rows, tile_cols, 1)))), 0)
    d = np.arange(side * side, dtype=np.int64)
    x = np.zeros_like(d)
    y = np.zeros_like(d)
    t = d.copy()
    s = 1
    while s < side:  # the classic d -> (x, y) conversion, vectorized over d (log2(side) steps)
        rx = 1 & (t // 2)
        ry = 1 & (t ^ rx)
        flip = ry == 0
        swap_x = np.where(flip & (rx == 1), s - 1 - x, x)
        swap_y = np.where(flip & (rx == 1), s - 1 - y, y)
        x, y = np.where(flip, swap_y, swap_x), np.where(flip, swap_x, swap_y)
        x = x + s * rx
        y = y + s * ry
        t //= 4
        s *= 2
    inside = (y < tile_rows) & (x < tile_cols)
    order = np.stack([y[inside], x[inside]])
    size = order.shape[1] if size is None else size
    out = np.full((2, size), -1, dtype=np.int64)
    out[:, : min(size, order.shape[1])] = order[:, :size]
    return out


def allocate(work: Any, hw: Hardware, min_tiles: Any, counts: Any = None) -> Any:
    """Tiles each op holds when layer-pipelined: proportional to its work, at least ``min_tiles``.

    ``max(tiles - n_ops + 1, tiles / 4)`` tiles are shared in proportion to each op's
    work and every op gets at least one (so one section holds every op when
    there are fewer ops than tiles); an op whose weights or result need more
    tiles' SRAM than that gets what they need (``min_tiles``), up to the whole grid.
    ``counts``: the tile counts a mapping fills exactly (:func:`dfit_nb.sim.mapping.tile_counts`): a share is
    rounded down to one of them (the tiles above it would hold nothing) and a need up to one (weights spread over
    fewer tiles than they need would not stay on chip).

    Examples
    --------
    Three ops on a 64-tile grid, the third's weights needing 20 tiles; any count usable, then powers of two only:

    >>> import jax, jax.numpy as jnp
    >>> from dfit_nb.sim import Hardware
    >>> hw = Hardware(tile_rows=8, tile_cols=8)
    >>> with jax.enable_x64(True):  # dfit_nb's programs run in float64
    ...     print(allocate(jnp.array([100.0, 300.0, 10.0]), hw, jnp.array([0.0, 0.0, 20.0])).tolist())
    ...     print(allocate(jnp.array([100.0, 300.0, 10.0]), hw, jnp.array([0.0, 0.0, 20.0]),
    ...                    jnp.array([1.0, 2, 4, 8, 16, 32, 64])).tolist())
    [15.0, 45.0, 20.0]
    [8.0, 32.0, 32.0]
    """
    f64 = jnp.float64
    tiles = jnp.asarray(hw.tile_rows, f64) * jnp.asarray(hw.tile_cols, f64)
    n = jnp.sum(work > 0)  # ops that do work (padding ops do none)
    # floored shares sum to at most the pool and at most n - 1 ops are raised to one tile: all fit the grid
    pool = jnp.maximum(tiles - n + 1.0, tiles / 4.0)
    share = jnp.floor(pool * work / jnp.maximum(work.sum(), 1e-30))
    need = min_tiles
    if counts is not None:
        c = jnp.asarray(counts, f64)[None, :]
        share = jnp.max(jnp.where(c <= share[:, None], c, 1.0), axis=1)
        up = jnp.min(jnp.where(c >= need[:, None], c, jnp.inf), axis=1)
        need = jnp.where(jnp.isfinite(up), up, tiles)
    return jnp.clip(jnp.maximum(share, need), 1.0, tiles)


#: bisection steps of :func:`balance` over its candidate periods (2^24: more than stages x tile counts ever hold)
BALANCE_STEPS = 24


def balance(stage_time: Any, counts: Any, need: Any, real: Any, hw: Hardware) -> tuple[Any, Any]:
    """Tiles per stage that minimise each section's slowest stage (the streamed period), and the stages' sections.

    ``stage_time`` ``(stages, K)``: each stage's estimated time per inference on ``counts[k]`` tiles
    (non-increasing in the count: the best mapping within that many tiles); ``counts`` ``(K,)``: the tile counts
    a mapping fills, ascending (``inf`` for none); ``need``: the tiles a stage's weights and result need;
    ``real``: 0 for padding rows, which take no tiles.

    Sections first: each stage's *floor* is the smallest count it can run on (at least ``need``), and stages are
    packed in program order into sections whose floors fit the grid (a new section where the next floor would
    overflow it, as :func:`run` wraps). A section streams all its inferences before the next is loaded, so the
    period is the sum of the sections' slowest stages and each section has the whole grid: for each, the smallest
    period ``P`` whose smallest counts with ``stage_time <= P`` (at least the floor) add up to at most the grid
    is found by bisection over the candidate periods (every stage time), all sections at once; each stage gets
    the smallest such count. A program that fits the grid is one section. Pure ``jax.numpy``.

    >>> import jax, jax.numpy as jnp
    >>> from dfit_nb.sim import Hardware
    >>> counts = jnp.array([1.0, 2.0, 4.0, 8.0])
    >>> t = jnp.array([[80.0, 40, 20, 10], [8.0, 4, 2, 1]])  # a stage ten times the other's work
    >>> with jax.enable_x64(True):
    ...     tiles, section = balance(t, counts, jnp.zeros(2), jnp.ones(2), Hardware(tile_rows=3, tile_cols=3))
    ...     print(tiles.tolist(), section.tolist())
    ...     # weights that need 8 tiles each: two sections, each stage on the whole grid's 8
    ...     tiles, section = balance(t, counts, jnp.full(2, 8.0), jnp.ones(2), Hardware(tile_rows=3, tile_cols=3))
    ...     print(tiles.tolist(), section.tolist())
    [8.0, 1.0] [0, 0]
    [8.0, 8.0] [0, 1]
    """
    f64 = jnp.float64
    grid = jnp.asarray(hw.tile_rows, f64) * jnp.asarray(hw.tile_cols, f64)
    counts = jnp.asarray(counts, f64)
    stages = stage_time.shape[0]
    usable = (jnp.isfinite(counts) & (counts <= grid))[None, :]
    need_c = jnp.min(jnp.where(usable & (counts[None, :] >= need[:, None]), counts[None, :], jnp.inf), axis=1)
    need_c = jnp.where(jnp.isfinite(need_c), need_c, grid)

    def tiles_for(period: Any) -> Any:  # period: per stage
        ok = usable & (stage_time <= period[:, None])
        first = jnp.argmax(ok, axis=1)
        c = jnp.where(ok.any(axis=1), counts[first], jnp.inf)
        return jnp.where(real > 0, jnp.maximum(c, need_c), 0.0)

    periods = jnp.sort(jnp.where(usable & (real[:, None] > 0), stage_time, jnp.inf).ravel())
    top = jnp.max(jnp.where(jnp.isfinite(periods), periods, 0.0))
    periods = jnp.where(jnp.isfinite(periods), periods, top)  # still ascending
    floor = tiles_for(jnp.full(stages, top))

    def pack(carry: Any, t: Any) -> tuple[Any, Any]:
        used, section = carry
        new = (t > 0) & (used + t > grid)
        return (jnp.where(new, t, used + t), section + new), section + new

    _, section = jax.lax.scan(pack, (jnp.asarray(0.0, f64), jnp.asarray(0, jnp.int32)), floor)

    def total(at: Any) -> Any:  # at: per section, an index into periods
        return jax.ops.segment_sum(jnp.maximum(tiles_for(periods[at[section]]), floor), section,
                                   num_segments=stages)

    def step(_: Any, bounds: Any) -> Any:
        lo, hi = bounds  # per section: periods[hi] fits; periods[lo - 1] does not
        mid = (lo + hi) // 2
        fit = total(mid) <= grid
        return jnp.stack([jnp.where(fit, lo, mid + 1), jnp.where(fit, mid, hi)])

    n = periods.shape[0]
    start = jnp.stack([jnp.zeros(stages, jnp.int32), jnp.full(stages, n - 1, jnp.int32)])
    _, hi = jax.lax.fori_loop(0, BALANCE_STEPS, step, start)
    tiles = jnp.maximum(tiles_for(periods[hi[section]]), floor)
    return jnp.where(real > 0, tiles, 1.0), section


def stage_leads(kernel: Any, fused: Any, gemm: Any) -> Any:
    """Per op, the index of the op whose tiles it runs on when layer-pipelined (its own index, or the first op of
    its *stage*).

    A fused kernel is one stage: its ops run on one region, one after another, its intermediates handed on in
    the tiles' SRAM. A stage is a run of consecutive ops of one fused kernel, and a second GEMM of a kernel (rule
    10's chained matrix products) starts a stage of its own: two GEMMs each want a whole array, so a
    layer-pipelined machine streams one into the other across regions. Pure ``jax.numpy``.

    >>> import jax, jax.numpy as jnp
    >>> with jax.enable_x64(True):  # kernels [0, 0, 0, 1, 2, 2, 2]: a GEMM + two epilogue ops, an op alone,
    ...     # two chained GEMMs with an op between them
    ...     print(stage_leads(jnp.array([0.0, 0, 0, 1, 2, 2, 2]), jnp.array([1, 1, 1, 0, 1, 1, 1]) > 0,
    ...                       jnp.array([1, 0, 0, 0, 1, 0, 1]) > 0).tolist())
    [0, 0, 0, 3, 4, 4, 6]
    """
    kernel, fused, gemm = jnp.asarray(kernel), jnp.asarray(fused), jnp.asarray(gemm)
    n = kernel.shape[0]
    index = jnp.arange(n)
    prev = lambda x, fill: jnp.concatenate([jnp.full((1,), fill, x.dtype), x[:-1]])
    joins = fused & prev(fused, False) & (kernel == prev(kernel, -1.0))
    run_start = jax.lax.cummax(jnp.where(joins, 0, index))
    gemms_before = jnp.cumsum(gemm) - gemm  # GEMMs before each op
    second_gemm = gemm & (gemms_before - gemms_before[run_start] > 0)
    return jax.lax.cummax(jnp.where(joins & ~second_gemm, 0, index))


def prefix_counts(order: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """``(tiles + 1, rows)`` and ``(tiles + 1, cols)``: how many of the first ``t`` tiles lie in each row / column.

    With them the row and column spread of any run of tiles is two lookups, so a
    schedule step costs O(rows + cols), not O(tiles).
    """
    y, x = np.asarray(order[0]), np.asarray(order[1])
    row_1h = (y[:, None] == np.arange(rows)[None, :]).astype(np.float64)
    col_1h = (x[:, None] == np.arange(cols)[None, :]).astype(np.float64)
    zero_r, zero_c = np.zeros((1, rows)), np.zeros((1, cols))
    return np.concatenate([zero_r, np.cumsum(row_1h, axis=0)]), np.concatenate([zero_c, np.cumsum(col_1h, axis=0)])


def spread(pre: Any, offset: Any, u: Any, v: Any) -> tuple[Any, Any]:
    """Tiles per row (or column) of the run ``[offset, offset + u)``, and the op's share of work on each.

    The first ``v mod u`` tiles of the run hold one more virtual tile than the others.
    """
    offset = jnp.asarray(offset)
    lo = pre[offset.astype(jnp.int32)]
    count = pre[(offset + u).astype(jnp.int32)] - lo
    extra = pre[(offset + jnp.mod(v, u)).astype(jnp.int32)] - lo
    return count, (machine.floor_div(v, u) * count + extra) / v


#: the model outputs (:func:`dfit_nb.sim.machine.model`) the schedule reads per op, besides ``count``, ``real`` and
#: the ``switch_*`` prices
PER_OP = ("tiles", "virtual_tiles", "compute_v", "sram_cycles_v", "dram_cycles", "dram_bytes", "noc_unique_in",
          "noc_out", "psum_noc", "out_onchip", "layout", "gy", "gx", "blocks_v", "fixed_cycles", "kernel", "fused",
          "latency_share", "weight_dram_bytes")


def run(per_op: dict[str, Any], preds: Any, pred_bytes: Any, tables: tuple[Any, Any], hw: Hardware, grid: Grid,
        spatial: bool) -> dict[str, Any]:
    """Schedule mapped ops (in topological order) on ``hw``; per-op records (see the module docstring).

    ``per_op`` holds, per op: ``tiles``, ``virtual_tiles``, ``count``,
    ``compute_v``, ``sram_cycles_v``, ``dram_cycles``, ``dram_bytes``, ``noc_unique_in``,
    ``noc_out``, ``psum_noc``, ``out_onchip``, ``layout``, ``gy``, ``gx``, ``real``
    (0 for padding ops, which come last), and optionally ``switch_bytes``,
    ``switch_cycles``, ``switch_energy_pj`` (a dataflow switch before the op; 0 if absent).
    ``preds`` ``(ops, P)``: producer op indices, -1 padding; ``pred_bytes``: the
    bytes each producer passes, in the consumer's words. ``tables``: the
    :func:`prefix_counts` of the machine's :func:`tile_order`.
    """
    f64 = jnp.float64
    n_ops = preds.shape[0]
    row_pre, col_pre = (jnp.asarray(t, f64) for t in tables)
    rows_at, cols_at = jnp.arange(grid.rows, dtype=f64), jnp.arange(grid.cols, dtype=f64)
    n_tiles = jnp.asarray(hw.tile_rows, f64) * jnp.asarray(hw.tile_cols, f64)
    multi = n_tiles > 1
    # the physics is machine's; the schedule reads the link, hop and DRAM figures only to bound its horizon
    # and to run the shared DRAM channel's timeline
    link_bw = machine.field(hw, "noc_link_bytes_per_cycle")
    hop = machine.field(hw, "noc_hop_cycles")
    dram_bw = machine.field(hw, "dram_bytes_per_cycle")
    latency = machine.field(hw, "dram_latency_cycles")
    out_onchip, layout, gy, gx, n_used = (per_op[k] for k in ("out_onchip", "layout", "gy", "gx", "tiles"))
    kernel = per_op.get("kernel", jnp.arange(n_ops, dtype=f64))
    # DRAM timeline: bins over a horizon no schedule can pass (every op's work serialized, DRAM at full rate,
    # every NoC byte over one link); the last bin takes what overflows at the full rate
    serial = per_op["count"] * (per_op["compute_v"] * per_op["virtual_tiles"] + per_op["sram_cycles_v"]
                                * per_op["virtual_tiles"] + per_op["dram_cycles"]
                                + (per_op["noc_unique_in"] + per_op["noc_out"] + per_op["psum_noc"]) / link_bw
                                + per_op["fixed_cycles"] * per_op["real"])  # padding: none
    moved_bound = (pred_bytes.sum(axis=1) * per_op["count"]) / link_bw
    zeros = jnp.zeros(n_ops, f64)
    per_op = {**{f"switch_{k}": zeros for k in ("bytes", "cycles", "energy_pj")},
              "kernel": jnp.arange(n_ops, dtype=f64), "fused": zeros, "latency_share": zeros + 1.0,
              "shared_reads": zeros, "stage_lead": jnp.arange(n_ops, dtype=f64), "stage_tiles": n_used, **per_op}
    slot_bit = 2.0 ** jnp.arange(preds.shape[1], dtype=f64)
    horizon = (jnp.sum(serial + moved_bound + per_op["switch_cycles"])
               # the machine's own grid, not the batch's padded one: a machine's bins do not depend on its batch
               + jnp.sum(per_op["real"]) * (latency + hop * (machine.field(hw, "tile_rows")
                                                             + machine.field(hw, "tile_cols"))) + 1.0)
    width = horizon / DRAM_BINS
    bins = jnp.arange(DRAM_BINS, dtype=f64)
    capacity = jnp.where(bins == DRAM_BINS - 1, jnp.inf, dram_bw * width)

    def dram_timeline(used: Any, t1: Any, dram_bytes: Any) -> tuple[Any, Any]:
        """When a transfer of ``dram_bytes`` from ``t1`` completes, and the capacity it takes per bin."""
        b0 = jnp.clip(jnp.floor(t1 / width), 0, DRAM_BINS - 1)
        first = bins == b0
        free = jnp.maximum(capacity - used, 0.0)
        lead = jnp.clip((t1 - b0 * width) / width, 0.0, 1.0)
        avail = jnp.where(bins < b0, 0.0, jnp.where(first, free * (1.0 - lead), free))
        cum = jnp.cumsum(avail)
        take = jnp.clip(dram_bytes - (cum - avail), 0.0, avail)
        k = jnp.argmax(cum >= dram_bytes)
        seg_start = jnp.where(k == b0, t1, k * width)
        done = seg_start + (dram_bytes - (cum[k] - avail[k])) / jnp.maximum(avail[k], 1e-30) * (
            (k + 1.0) * width - seg_start)
        done = jnp.where(k == DRAM_BINS - 1, jnp.maximum(done, seg_start + (dram_bytes - (cum[k] - avail[k]))
                                                         / dram_bw), done)
        return done, take

    def step(carry: dict[str, Any], i: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        op = {key: val[i] for key, val in per_op.items()}
        u, v, count = op["tiles"], op["virtual_tiles"], op["count"]
        # ---- placement: a run of tiles along the Hilbert order
        lead = op["stage_lead"].astype(jnp.int32)
        if spatial:
            # an op of a stage's fused kernel after its first runs on the first's region once the op before it
            # (of the same stage) is done; a stage's first op takes a region of the stage's extent
            follows = lead != i
            wrap = ~follows & (carry["cursor"] + op["stage_tiles"] > n_tiles)
            offset = jnp.where(follows, carry["offset"][lead], jnp.where(wrap, 0.0, carry["cursor"]))
            # a new section starts when every earlier op has finished; within a section regions are
            # disjoint, so an op's tiles have been free since its section began
            barrier = jnp.where(wrap, carry["last_end"], carry["barrier"])
            section = carry["section"] + wrap
            prev_free = jnp.where(follows, carry["end"][jnp.maximum(i - 1, 0)], barrier)
        else:
            offset, barrier, section = 0.0, 0.0, 0.0
            prev_free = carry["last_end"]  # every op owns the whole grid in turn
        row_n, row_share = spread(row_pre, offset, u, v)
        col_n, col_share = spread(col_pre, offset, u, v)
        # ---- dependencies
        p = preds[i]
        has = p >= 0
        pi = jnp.maximum(p, 0)
        # a stage streams its result from when its first op started: its later ops hand each block on in the
        # tiles' SRAM as it is made
        p_start, p_end = carry["anchor"][pi], carry["end"][pi]
        if spatial:
            ready = jnp.max(jnp.where(has, p_start + (p_end - p_start) / STREAM_CHUNKS, 0.0))
        else:
            ready = jnp.max(jnp.where(has, p_end, 0.0))
        last_producer = jnp.max(jnp.where(has, p_end, 0.0))
        start = jnp.maximum(jnp.maximum(ready, prev_free), barrier)
        # ---- retile: producers' results that stayed on chip, laid out differently or elsewhere
        same = ((layout[pi] == op["layout"]) & (gy[pi] == op["gy"]) & (gx[pi] == op["gx"])
                & (carry["offset"][pi] == offset) & (n_used[pi] == u))
        # inside a fused kernel an input made by the kernel's own op never leaves the chip nor moves
        # and a tensor an earlier op of its fused kernel brought in is already there
        shared = (jnp.floor(op["shared_reads"] / slot_bit) % 2.0 > 0) & (op["fused"] > 0)
        in_kernel = has & (((kernel[pi] == op["kernel"]) & (op["fused"] > 0)) | shared)
        on_chip = has & (out_onchip[pi] > 0) & multi
        moved = jnp.where(on_chip & ~same & ~in_kernel, pred_bytes[i], 0.0)  # (P,)
        from_dram = jnp.where(has & ~(out_onchip[pi] > 0) & ~in_kernel, pred_bytes[i], 0.0)
        # producers' tiles: their rows (from the prefix counts) and centroid
        p_off, p_u = jnp.maximum(carry["offset"][pi], 0.0), n_used[pi]
        row_n_p = row_pre[(p_off + p_u).astype(jnp.int32)] - row_pre[p_off.astype(jnp.int32)]
        col_n_p = col_pre[(p_off + p_u).astype(jnp.int32)] - col_pre[p_off.astype(jnp.int32)]
        p_rows = row_n_p / p_u[:, None]
        # the centroid from whole tile counts (exact in float64, then one division): a tie at .5 rounds the same
        # way however the sum is ordered (a vmapped or batched program must place it where a single one does)
        py, px = jnp.round((row_n_p @ rows_at) / p_u), jnp.round((col_n_p @ cols_at) / p_u)
        # X legs leave along the producer's rows (in proportion to its tiles there), east or west of its
        # centroid column; Y legs run down the destination columns, the destination rows' share of the op
        # split at the producer's centroid row (rows and columns of a compact block taken as independent)
        east = moved * (col_share[None, :] * (cols_at[None, :] > px[:, None])).sum(axis=1)
        west = moved * (col_share[None, :] * (cols_at[None, :] < px[:, None])).sum(axis=1)
        below = (row_share[None, :] * (rows_at[None, :] > py[:, None])).sum(axis=1)
        above = (row_share[None, :] * (rows_at[None, :] < py[:, None])).sum(axis=1)
        prow = p_rows  # (P, rows)
        retile_links = jnp.concatenate([
            east @ prow, west @ prow, jnp.sum(moved * below) * col_share, jnp.sum(moved * above) * col_share,
        ]) * count
        dist = ((col_share[None, :] * jnp.abs(cols_at[None, :] - px[:, None])).sum(axis=1)
                + (row_share[None, :] * jnp.abs(rows_at[None, :] - py[:, None])).sum(axis=1))
        span_x = jnp.max(jnp.where(col_n[None, :] > 0, jnp.abs(cols_at[None, :] - px[:, None]), 0.0), axis=1)
        span_y = jnp.max(jnp.where(row_n[None, :] > 0, jnp.abs(rows_at[None, :] - py[:, None]), 0.0), axis=1)
        longest = jnp.max(jnp.where(moved > 0, span_x + span_y, 0.0))
        retile_bytes = moved.sum() * count
        retile_cycles = jnp.where(retile_bytes > 0, machine.noc_cycles(jnp.max(retile_links), longest * count, hw),
                                  0.0)
        retile_energy = machine.move_energy(moved.sum(), (moved * dist).sum(), hw) * count
        # a dataflow switch (priced by dfit_nb.sim.machine.switch_cost) re-lays out the input after the moves,
        # once: on a grid, in over the west-edge links of every row
        sw_bytes, sw_cycles = op["switch_bytes"], op["switch_cycles"]
        retile_links = retile_links + jnp.concatenate([
            jnp.where(multi & (rows_at < jnp.asarray(hw.tile_rows, f64)),
                      sw_bytes / jnp.asarray(hw.tile_rows, f64), 0.0),
            jnp.zeros(grid.rows + 2 * grid.cols, f64)])
        retile_cycles = retile_cycles + sw_cycles
        retile_bytes = retile_bytes + sw_bytes
        retile_energy = retile_energy + op["switch_energy_pj"]
        t1 = start + retile_cycles
        # ---- body (the one machine model): NoC delivery from the west edge of each row, compute, SRAM, DRAM
        extra = from_dram.sum()
        body = machine.op_body(op, count, extra, row_share, col_n > 0, hw, cols_at)
        noc_links, noc_cycles = body["noc_links"], body["noc_cycles"]
        compute, sram, dram_bytes = body["compute"], body["sram"], body["dram_bytes"]
        # the DRAM channel: a timeline of bins, each with dram_bw x width bytes of capacity; a transfer takes
        # what is left from t1 on (earlier reservations keep theirs) and completes when it has it all, then
        # waits the latency (pipelined with other transfers)
        if spatial:
            done, take = dram_timeline(carry["dram_used"], t1, dram_bytes)
        else:  # ops run one at a time, each finishing its transfers: the channel is free at t1
            done, take = t1 + machine.dram_transfer_cycles(dram_bytes, hw), 0.0
        # a fused kernel's DRAM transfers are one stream: its first op with DRAM traffic waits the latency
        dram_end = jnp.where(dram_bytes > 0, jnp.maximum(done, t1) + latency * op["latency_share"], t1)
        body_end = t1 + machine.body_cycles(compute, sram, noc_cycles, dram_end - t1, hw, body["blocks"])
        body_end = body_end + machine.overhead_cycles(body_end - t1, body["fixed"])  # the fixed cost per execution
        if spatial:
            end = jnp.maximum(body_end, last_producer + (body_end - t1) / STREAM_CHUNKS)
        else:
            end = body_end
        # ---- streamed: the op's time per inference once inferences follow one another through its tiles
        # (layer-pipelined). Its weights stay in its tiles' SRAM between inferences where they fit there, so they
        # cross neither DRAM nor the mesh again; its activations still move (retile, DRAM) and each inference
        # pays the fixed cost again. The DRAM latency overlaps the previous inference's work; the channel's share
        # among the stages is the section's bound (dfit_nb.sim.streaming).
        streamed = machine.op_body(machine.streamed(op, hw) if spatial else op, count, extra, row_share, col_n > 0,
                                   hw, cols_at)
        stage_busy = machine.body_cycles(streamed["compute"], streamed["sram"], streamed["noc_cycles"],
                                         machine.dram_transfer_cycles(streamed["dram_bytes"], hw), hw,
                                         streamed["blocks"])
        stage = retile_cycles + stage_busy + machine.overhead_cycles(stage_busy, streamed["fixed"])
        new = {
            "last_end": jnp.maximum(carry["last_end"], end),
            "anchor": carry["anchor"].at[i].set(jnp.where(lead != i, carry["anchor"][lead], start)),
            "end": carry["end"].at[i].set(end),
            "offset": carry["offset"].at[i].set(offset),
            "dram_used": carry["dram_used"] + take,
            "cursor": jnp.where(lead != i, carry["cursor"], offset + op["stage_tiles"]) if spatial else 0.0,
            "barrier": barrier,
            "section": section,
        }
        extra_dram_pj, extra_noc_pj = machine.dram_delivery_energy(extra * count, hw)
        record = {
            "offset": offset, "section": section, "ready": ready, "prev_free": prev_free, "start": start, "t1": t1,
            "end": end, "compute_cycles": compute, "sram_cycles": sram, "noc_cycles": noc_cycles,
            "dram_start": t1, "dram_end": dram_end, "retile_cycles": retile_cycles,
            "retile_bytes": retile_bytes, "retile_energy_pj": retile_energy,
            "switch_bytes": sw_bytes, "switch_cycles": sw_cycles, "switch_energy_pj": op["switch_energy_pj"],
            "dram_extra_bytes": extra * count,
            "extra_dram_pj": extra_dram_pj,
            "extra_noc_pj": extra_noc_pj,
            "link_retile": retile_links, "link_noc": noc_links,
            "stage_cycles": stage, "stage_dram_bytes": streamed["dram_bytes"],
            "stage_compute_cycles": jnp.maximum(streamed["compute"], streamed["sram"]),
            "stage_noc_cycles": streamed["noc_cycles"], "stage_lead": op["stage_lead"],
        }
        return new, record

    scalar = jnp.asarray(0.0, f64)
    carry0 = {
        "last_end": scalar, "anchor": zeros, "end": zeros, "offset": zeros - 1.0,
        "dram_used": jnp.zeros(DRAM_BINS, f64), "cursor": scalar, "barrier": scalar, "section": scalar,
    }
    _, records = jax.lax.scan(step, carry0, jnp.arange(n_ops))
    return records
