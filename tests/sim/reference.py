"""The schedule of :mod:`dfit_nb.sim.schedule` as a plain-Python event loop.

One op after another, one tile after another, in Python floats: the oracle the
tests hold the ``lax.scan`` to, and the baseline ``benchmarks/bench_replay.py``
measures it against. Not used by :func:`dfit_nb.replay`, so it lives with the tests.

>>> import numpy as np
>>> from dfit_nb.sim import presets
>>> from dfit_nb.sim.schedule import Grid, tile_order
>>> per_op = {k: np.array([1.0]) for k in ("tiles", "virtual_tiles", "count", "layout", "gy", "gx", "blocks_v")}
>>> per_op.update({k: np.array([0.0]) for k in ("sram_cycles_v", "dram_cycles", "dram_bytes", "noc_unique_in",
...                                             "noc_out", "psum_noc", "out_onchip", "fixed_cycles")})
>>> per_op["compute_v"] = np.array([100.0])
>>> hw = presets.get("npu_like")
>>> out = run(per_op, np.full((1, 1), -1), np.zeros((1, 1)), tile_order(4, 5), hw, Grid(20, 4, 5), False)
>>> float(out["end"][0])
100.0
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dfit_nb.sim.hardware import Hardware
from dfit_nb.sim.schedule import DRAM_BINS, STREAM_CHUNKS, Grid


def run(per_op: dict[str, Any], preds: Any, pred_bytes: Any, order: Any, hw: Hardware, grid: Grid,
        spatial: bool) -> dict[str, np.ndarray]:
    """The same records as :func:`dfit_nb.sim.schedule.run` (``start``, ``t1``, ``end``, ...).

    ``order``: the machine's :func:`~dfit_nb.sim.schedule.tile_order`; the loop
    walks each op's own tiles.
    """
    op = {k: [float(v) for v in np.asarray(a, np.float64)] for k, a in per_op.items()}
    preds = np.asarray(preds).tolist()
    for key in ("switch_bytes", "switch_cycles", "switch_energy_pj", "fused", "shared_reads"):  # none by default
        op.setdefault(key, [0.0] * len(preds))
    op.setdefault("kernel", [float(i) for i in range(len(preds))])
    op.setdefault("latency_share", [1.0] * len(preds))
    op.setdefault("stage_lead", [float(i) for i in range(len(preds))])  # every op its own stage by default
    op.setdefault("stage_tiles", list(op["tiles"]))
    pred_bytes = np.asarray(pred_bytes, np.float64).tolist()
    ys = [int(v) for v in order[0]]
    xs = [int(v) for v in order[1]]
    n_tiles = float(hw.tile_rows) * float(hw.tile_cols)
    multi = n_tiles > 1
    link_bw, hop = float(hw.noc_link_bytes_per_cycle), float(hw.noc_hop_cycles)
    dram_bw, latency = float(hw.dram_bytes_per_cycle), float(hw.dram_latency_cycles)
    n = len(preds)
    serial = sum(op["count"][i] * (op["compute_v"][i] * op["virtual_tiles"][i]
                                   + op["sram_cycles_v"][i] * op["virtual_tiles"][i] + op["dram_cycles"][i]
                                   + (op["noc_unique_in"][i] + op["noc_out"][i] + op["psum_noc"][i]) / link_bw
                                   + op["fixed_cycles"][i])
                 + sum(pred_bytes[i]) * op["count"][i] / link_bw + op["switch_cycles"][i] for i in range(n))
    horizon = serial + n * (latency + hop * (float(hw.tile_rows) + float(hw.tile_cols))) + 1.0
    width = horizon / DRAM_BINS
    capacity = [dram_bw * width] * (DRAM_BINS - 1) + [math.inf]
    used = [0.0] * DRAM_BINS
    ends, offsets, anchors = [0.0] * n, [-1.0] * n, [0.0] * n
    cys, cxs, rowdist = [0.0] * n, [0.0] * n, [[0.0] * grid.rows for _ in range(n)]
    cursor, barrier, section, last_end = 0.0, 0.0, 0.0, 0.0
    rec: dict[str, list[float]] = {k: [] for k in ("start", "t1", "end", "ready", "prev_free", "offset",
                                                   "retile_cycles", "retile_bytes", "noc_cycles", "dram_end")}
    for i in range(n):
        u, v, count = op["tiles"][i], op["virtual_tiles"][i], op["count"][i]
        head = int(op["stage_lead"][i])
        if spatial and head != i:  # a later op of a fused kernel's stage: on its first op's tiles, after the op before
            offset = offsets[head]
            prev_free = ends[i - 1]
        elif spatial:
            if cursor + op["stage_tiles"][i] > n_tiles:
                cursor, section, barrier = 0.0, section + 1, last_end
            offset = cursor
            prev_free = barrier
        else:
            offset = 0.0
            prev_free = last_end
        # the op's tiles, their rows and columns, and the work each holds
        row_n, col_n = [0.0] * grid.rows, [0.0] * grid.cols
        row_share, col_share = [0.0] * grid.rows, [0.0] * grid.cols
        for rank in range(int(u)):
            t = int(offset) + rank
            share = (math.floor(v / u) + (1.0 if rank < math.fmod(v, u) else 0.0)) / v
            row_n[ys[t]] += 1.0
            col_n[xs[t]] += 1.0
            row_share[ys[t]] += share
            col_share[xs[t]] += share
        ready, last = 0.0, 0.0
        moved, from_dram = [], 0.0
        for slot, p in enumerate(preds[i]):
            if p < 0:
                continue
            if spatial:  # a stage streams from when its first op started
                ready = max(ready, anchors[p] + (ends[p] - anchors[p]) / STREAM_CHUNKS)
            else:
                ready = max(ready, ends[p])
            last = max(last, ends[p])
            on_chip = op["out_onchip"][p] > 0
            if op["fused"][i] > 0 and op["kernel"][p] == op["kernel"][i]:
                continue  # a producer of the op's own fused kernel: on chip, no move
            if op["fused"][i] > 0 and int(op["shared_reads"][i]) >> slot & 1:
                continue  # an earlier op of its fused kernel brought this producer's result in
            same = (op["layout"][p] == op["layout"][i] and op["gy"][p] == op["gy"][i] and op["gx"][p] == op["gx"][i]
                    and offsets[p] == offset and op["tiles"][p] == u)
            if on_chip and multi and not same:
                moved.append((p, pred_bytes[i][slot]))
            if not on_chip:
                from_dram += pred_bytes[i][slot]
        start = max(ready, prev_free, barrier)
        # retile flows: X along the producer's rows, Y down the destination columns
        links = [0.0] * (2 * grid.rows + 2 * grid.cols)
        longest, byte_hops, total_moved = 0.0, 0.0, 0.0
        for p, nbytes in moved:
            total_moved += nbytes
            py, px = _round(cys[p]), _round(cxs[p])
            for c in range(grid.cols):
                for r in range(grid.rows):
                    if c > px:
                        links[r] += nbytes * col_share[c] * rowdist[p][r]
                    if c < px:
                        links[grid.rows + r] += nbytes * col_share[c] * rowdist[p][r]
                below = sum(row_share[r] for r in range(grid.rows) if r > py)
                above = sum(row_share[r] for r in range(grid.rows) if r < py)
                links[2 * grid.rows + c] += nbytes * below * col_share[c]
                links[2 * grid.rows + grid.cols + c] += nbytes * above * col_share[c]
            byte_hops += nbytes * (sum(col_share[c] * abs(c - px) for c in range(grid.cols))
                                   + sum(row_share[r] * abs(r - py) for r in range(grid.rows)))
            span = (max([abs(c - px) for c in range(grid.cols) if col_n[c] > 0], default=0.0)
                    + max([abs(r - py) for r in range(grid.rows) if row_n[r] > 0], default=0.0))
            if nbytes > 0:
                longest = max(longest, span)
        links = [x * count for x in links]
        retile_bytes = total_moved * count
        retile = max(links) / link_bw + hop * longest * count if retile_bytes > 0 else 0.0
        # a dataflow switch before this GEMM: its re-layout follows the moves, once (not per execution)
        retile += op["switch_cycles"][i]
        retile_bytes += op["switch_bytes"][i]
        t1 = start + retile
        # delivery from the west edge of each row
        unique_in = (op["noc_unique_in"][i] + from_dram) if multi else 0.0
        rows_in = [row_share[r] * unique_in * count for r in range(grid.rows)]
        rows_out = [row_share[r] * (op["noc_out"][i] + op["psum_noc"][i]) * count for r in range(grid.rows)]
        far = max([c + 1.0 for c in range(grid.cols) if col_n[c] > 0], default=0.0)
        noc = (max(rows_in + rows_out) / link_bw + hop * far) if sum(rows_in) + sum(rows_out) > 0 else 0.0
        top = math.ceil(v / u)
        compute = top * op["compute_v"][i] * count
        sram = top * op["sram_cycles_v"][i] * count
        # the DRAM timeline
        dram_bytes = (op["dram_bytes"][i] + from_dram) * count
        b0 = min(max(math.floor(t1 / width), 0), DRAM_BINS - 1)
        remaining, done = dram_bytes, t1
        if not spatial:  # one op at a time: the channel is free at t1
            done, remaining = t1 + dram_bytes / dram_bw, 0.0
        for b in range(b0, DRAM_BINS if remaining > 0 else b0):
            free = max(capacity[b] - used[b], 0.0)
            lead = min(max((t1 - b0 * width) / width, 0.0), 1.0) if b == b0 else 0.0
            avail = free * (1.0 - lead)
            take = min(remaining, avail)
            used[b] += take
            if remaining <= avail:
                seg = t1 if b == b0 else b * width
                done = seg + remaining / max(avail, 1e-30) * ((b + 1.0) * width - seg)
                if b == DRAM_BINS - 1:
                    done = max(done, seg + remaining / dram_bw)
                break
            remaining -= take
        dram_end = max(done, t1) + latency * op["latency_share"][i] if dram_bytes > 0 else t1
        on_tile, off_tile = max(compute, sram), max(noc, dram_end - t1)
        blocks = max(top * op["blocks_v"][i] * count, 1.0)
        body_end = (t1 + max(on_tile, off_tile)
                    + (1.0 - float(hw.memory_overlap)) * min(on_tile, off_tile) / blocks)
        body_end += op["fixed_cycles"][i] * op["count"][i] if body_end > t1 else 0.0
        end = max(body_end, last + (body_end - t1) / STREAM_CHUNKS) if spatial else body_end
        last_end = max(last_end, end)
        ends[i], offsets[i] = end, offset
        anchors[i] = anchors[head] if head != i else start
        cys[i] = sum(r * row_n[r] for r in range(grid.rows)) / u
        cxs[i] = sum(c * col_n[c] for c in range(grid.cols)) / u
        rowdist[i] = [row_n[r] / u for r in range(grid.rows)]
        if spatial and head == i:
            cursor = offset + op["stage_tiles"][i]
        for key, value in (("start", start), ("t1", t1), ("end", end), ("ready", ready), ("prev_free", prev_free),
                           ("offset", offset), ("retile_cycles", retile), ("retile_bytes", retile_bytes),
                           ("noc_cycles", noc), ("dram_end", dram_end)):
            rec[key].append(value)
    return {k: np.asarray(v) for k, v in rec.items()}


def _round(value: float) -> float:
    """Round half to even, like ``jnp.round``."""
    return float(np.round(value))
