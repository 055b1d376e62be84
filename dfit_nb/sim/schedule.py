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
* **layer-pipelined** (``execution="spatial"``): each op holds its own region
  (``alloc`` tiles, proportional to its work, from :func:`allocate`), regions
  follow one another along the path, and ops run as soon as their inputs
  stream in. When the next region would run past the last tile, a new
  *section* begins at tile 0 after every earlier op has finished (the
  SambaNova section / Cerebras reload boundary).

Timing of one op
----------------
``ready``: time-multiplexed, when its last producer ends; layer-pipelined,
when every producer has streamed the first of ``STREAM_CHUNKS`` chunks of
its output (``start_p + (end_p - start_p) / STREAM_CHUNKS``), and it cannot
finish before its last producer plus one chunk of its own body (activations
stream tile to tile; a documented assumption of 8 chunks).
``start = max(ready, its tiles free, section barrier)``. Then:

1. **retile** ``[start, t1)``: inputs produced on chip by an op with a
   different layout or tiles travel from the producer's tiles (their centroid)
   to this op's tiles with XY routing (X along the producer's rows, in
   proportion to its tiles in each row, then Y along the destination
   column). The busiest link group sets the time:
   ``max link bytes / link bandwidth + hop latency x the longest route``.
   Producers whose results did not fit on chip are read from DRAM instead.
2. **body** from ``t1``: each tile computes its pieces (``compute``), its SRAM
   streams them (``sram``: bytes / port bandwidth), DRAM traffic is delivered
   from the west edge of each tile row over the row's links (``noc``; the first
   link of a row carries the whole row's traffic), and DRAM transfers wait
   share the chip's DRAM channel (``dram``: see below; the latency delays
   completion but overlaps other transfers). With double
   buffering these overlap; the op ends when the slowest finishes.

The DRAM channel is a timeline of ``DRAM_BINS`` bins over a horizon no
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

from .hardware import Hardware

STREAM_CHUNKS = 8.0
DRAM_BINS = 2048


class Grid(NamedTuple):
    """Static sizes of the arrays over tiles (the largest grid of a batch of machines)."""

    tiles: int
    rows: int
    cols: int


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


def tile_share(rank: Any, v: Any, u: Any) -> Any:
    """Virtual tiles run by the tile of ``rank`` within an op's ``u`` tiles (``v`` virtual tiles in all)."""
    return jnp.floor(v / u) + (rank < jnp.mod(v, u))


def allocate(work: Any, hw: Hardware, min_tiles: Any) -> Any:
    """Tiles each op holds when layer-pipelined: proportional to its work, at least ``min_tiles``.

    ``max(tiles - n_ops, tiles / 4)`` tiles are shared in proportion to each op's
    work and every op gets at least one (so one section holds every op when
    there are fewer ops than tiles); an op whose weights or result need more
    tiles' SRAM than that gets what they need (``min_tiles``), up to the whole grid.
    """
    f64 = jnp.float64
    tiles = jnp.asarray(hw.tile_rows, f64) * jnp.asarray(hw.tile_cols, f64)
    n = work.shape[0]
    pool = jnp.maximum(tiles - n, tiles / 4.0)
    share = jnp.floor(pool * work / jnp.maximum(work.sum(), 1e-30))
    return jnp.clip(jnp.maximum(share, min_tiles), 1.0, tiles)


def run(per_op: dict[str, Any], preds: Any, pred_bytes: Any, order: Any, hw: Hardware, grid: Grid,
        spatial: bool) -> dict[str, Any]:
    """Schedule mapped ops (in topological order) on ``hw``; per-op records (see the module docstring).

    ``per_op`` holds, per op: ``tiles``, ``virtual_tiles``, ``alloc``, ``count``,
    ``compute_v``, ``sram_cycles_v``, ``dram_cycles``, ``dram_bytes``, ``noc_unique_in``,
    ``noc_out``, ``psum_noc``, ``out_onchip``, ``layout``, ``gy``, ``gx``, ``real``
    (0 for padding ops, which come last).
    ``preds`` ``(ops, P)``: producer op indices, -1 padding; ``pred_bytes``: the
    bytes each producer passes, in the consumer's words. ``order``: ``(2, tiles)``
    ``(y, x)`` of each tile number (:func:`tile_order`).
    """
    f64 = jnp.float64
    n_ops = preds.shape[0]
    y, x = jnp.asarray(order[0], f64), jnp.asarray(order[1], f64)
    valid = y >= 0
    t_index = jnp.arange(grid.tiles, dtype=f64)
    n_tiles = jnp.asarray(hw.tile_rows, f64) * jnp.asarray(hw.tile_cols, f64)
    multi = n_tiles > 1
    link_bw = jnp.asarray(hw.noc_link_bytes_per_cycle, f64)
    hop = jnp.asarray(hw.noc_hop_cycles, f64)
    dram_bw = jnp.asarray(hw.dram_bytes_per_cycle, f64)
    latency = jnp.asarray(hw.dram_latency_cycles, f64)
    rows_1h = (y[:, None] == jnp.arange(grid.rows)[None, :]).astype(f64)  # (tiles, rows)
    cols_1h = (x[:, None] == jnp.arange(grid.cols)[None, :]).astype(f64)  # (tiles, cols)
    hop_pj = jnp.asarray(hw.noc_pj_per_byte_hop, f64)
    sram_pj = jnp.asarray(hw.sram_pj_per_byte, f64)
    dram_pj = jnp.asarray(hw.dram_pj_per_byte, f64)
    avg_hops = (jnp.asarray(hw.tile_cols, f64) + 1.0) / 2.0
    out_onchip, layout, gy, gx, n_used = (per_op[k] for k in ("out_onchip", "layout", "gy", "gx", "tiles"))
    # DRAM timeline: bins over a horizon no schedule can pass (every op's work serialized, DRAM at full rate,
    # every NoC byte over one link); the last bin takes what overflows at the full rate
    serial = per_op["count"] * (per_op["compute_v"] * per_op["virtual_tiles"] + per_op["sram_cycles_v"]
                                * per_op["virtual_tiles"] + per_op["dram_cycles"]
                                + (per_op["noc_unique_in"] + per_op["noc_out"] + per_op["psum_noc"]) / link_bw)
    moved = (pred_bytes.sum(axis=1) * per_op["count"]) / link_bw
    horizon = jnp.sum(serial + moved) + jnp.sum(per_op["real"]) * (latency + hop * (grid.rows + grid.cols)) + 1.0
    width = horizon / DRAM_BINS
    bins = jnp.arange(DRAM_BINS, dtype=f64)
    capacity = jnp.where(bins == DRAM_BINS - 1, jnp.inf, dram_bw * width)

    def step(carry: dict[str, Any], i: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        op = {key: val[i] for key, val in per_op.items()}
        u, v, count = op["tiles"], op["virtual_tiles"], op["count"]
        # ---- placement
        if spatial:
            wrap = carry["cursor"] + u > n_tiles
            offset = jnp.where(wrap, 0.0, carry["cursor"])
            barrier = jnp.where(wrap, jnp.max(jnp.where(valid, carry["tile_free"], 0.0)), carry["barrier"])
            section = carry["section"] + wrap
        else:
            offset, barrier, section = 0.0, 0.0, 0.0
        mask = (t_index >= offset) & (t_index < offset + u) & valid
        share = jnp.where(mask, tile_share(t_index - offset, v, u) / v, 0.0)
        owned = mask if spatial else valid
        prev_free = jnp.max(jnp.where(owned, carry["tile_free"], 0.0))
        # ---- dependencies
        p = preds[i]
        has = p >= 0
        pi = jnp.maximum(p, 0)
        p_start, p_end = carry["start"][pi], carry["end"][pi]
        if spatial:
            ready = jnp.max(jnp.where(has, p_start + (p_end - p_start) / STREAM_CHUNKS, 0.0))
        else:
            ready = jnp.max(jnp.where(has, p_end, 0.0))
        last_producer = jnp.max(jnp.where(has, p_end, 0.0))
        start = jnp.maximum(jnp.maximum(ready, prev_free), barrier)
        # ---- retile: producers' results that stayed on chip, laid out differently or elsewhere
        same = ((layout[pi] == op["layout"]) & (gy[pi] == op["gy"]) & (gx[pi] == op["gx"])
                & (carry["offset"][pi] == offset) & (n_used[pi] == u))
        on_chip = has & (out_onchip[pi] > 0) & multi
        moved = jnp.where(on_chip & ~same, pred_bytes[i], 0.0)  # (P,)
        from_dram = jnp.where(has & ~(out_onchip[pi] > 0), pred_bytes[i], 0.0)
        py, px = jnp.round(carry["cy"][pi]), jnp.round(carry["cx"][pi])
        flow = moved[:, None] * share[None, :]  # (P, tiles)
        east = (x[None, :] > px[:, None]) * flow
        west = (x[None, :] < px[:, None]) * flow
        south = (y[None, :] > py[:, None]) * flow
        north = (y[None, :] < py[:, None]) * flow
        prow = carry["rows"][pi]  # (P, rows): how each producer's tiles spread over the rows it sends from
        retile_links = jnp.concatenate([
            prow.T @ east.sum(axis=1), prow.T @ west.sum(axis=1),
            south.sum(axis=0) @ cols_1h, north.sum(axis=0) @ cols_1h,
        ]) * count
        hops = jnp.abs(x[None, :] - px[:, None]) + jnp.abs(y[None, :] - py[:, None])
        longest = jnp.max(jnp.where(flow > 0, hops, 0.0))
        retile_bytes = moved.sum() * count
        retile_cycles = jnp.where(retile_bytes > 0, jnp.max(retile_links) / link_bw + hop * longest * count, 0.0)
        retile_energy = ((flow * hops).sum() * hop_pj + 2.0 * moved.sum() * sram_pj) * count
        t1 = start + retile_cycles
        # ---- body: NoC delivery from the west edge, compute, SRAM, DRAM
        extra = from_dram.sum()
        in_t = share * jnp.where(multi, op["noc_unique_in"] + extra, 0.0) * count
        out_t = share * (op["noc_out"] + op["psum_noc"]) * count
        noc_links = jnp.concatenate([in_t @ rows_1h, out_t @ rows_1h, jnp.zeros(2 * grid.cols, f64)])
        far = jnp.max(jnp.where(mask, x + 1.0, 0.0))
        noc_cycles = jnp.where(in_t.sum() + out_t.sum() > 0, jnp.max(noc_links) / link_bw + hop * far, 0.0)
        runs = jnp.where(mask, tile_share(t_index - offset, v, u), 0.0)
        compute = jnp.max(runs) * op["compute_v"] * count
        sram = jnp.max(runs) * op["sram_cycles_v"] * count
        dram_bytes = (op["dram_bytes"] + extra) * count
        # the DRAM channel: a timeline of bins, each with dram_bw x width bytes of capacity; a transfer takes
        # what is left from t1 on (earlier reservations keep theirs) and completes when it has it all, then
        # waits the latency (pipelined with other transfers)
        b0 = jnp.clip(jnp.floor(t1 / width), 0, DRAM_BINS - 1)
        first = bins == b0
        free = jnp.maximum(capacity - carry["dram_used"], 0.0)
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
        dram_start = t1
        dram_end = jnp.where(dram_bytes > 0, jnp.maximum(done, t1) + latency, t1)
        body_end = jnp.maximum(jnp.maximum(t1 + compute, t1 + sram), jnp.maximum(t1 + noc_cycles, dram_end))
        if spatial:
            end = jnp.maximum(body_end, last_producer + (body_end - t1) / STREAM_CHUNKS)
        else:
            end = body_end
        new = {
            "tile_free": jnp.where(owned, end, carry["tile_free"]),
            "start": carry["start"].at[i].set(start),
            "end": carry["end"].at[i].set(end),
            "offset": carry["offset"].at[i].set(offset),
            "cy": carry["cy"].at[i].set(jnp.sum(jnp.where(mask, y, 0.0)) / u),
            "cx": carry["cx"].at[i].set(jnp.sum(jnp.where(mask, x, 0.0)) / u),
            "rows": carry["rows"].at[i].set(jnp.where(mask, 1.0, 0.0) @ rows_1h / u),
            "dram_used": carry["dram_used"] + take,
            "cursor": offset + u if spatial else 0.0,
            "barrier": barrier,
            "section": section,
        }
        record = {
            "offset": offset, "section": section, "ready": ready, "prev_free": prev_free, "start": start, "t1": t1,
            "end": end, "compute_cycles": compute, "sram_cycles": sram, "noc_cycles": noc_cycles,
            "dram_start": dram_start, "dram_end": dram_end, "retile_cycles": retile_cycles,
            "retile_bytes": retile_bytes, "retile_energy_pj": retile_energy,
            "dram_extra_bytes": extra * count,
            "extra_dram_pj": extra * count * dram_pj,
            "extra_noc_pj": jnp.where(multi, extra * count * avg_hops * hop_pj, 0.0),
            "link_retile": retile_links, "link_noc": noc_links,
        }
        return new, record

    zeros = jnp.zeros(n_ops, f64)
    carry0 = {
        "tile_free": jnp.zeros(grid.tiles, f64), "start": zeros, "end": zeros, "offset": zeros - 1.0,
        "cy": zeros, "cx": zeros, "rows": jnp.zeros((n_ops, grid.rows), f64),
        "dram_used": jnp.zeros(DRAM_BINS, f64), "cursor": jnp.asarray(0.0, f64),
        "barrier": jnp.asarray(0.0, f64), "section": jnp.asarray(0.0, f64),
    }
    _, records = jax.lax.scan(step, carry0, jnp.arange(n_ops))
    return records
