"""Mapping ops onto the tile grid: virtual first, physical second (the Dato idea).

Pure ``jax.numpy``, vectorized over ops (and candidates); used by
:func:`dfit_nb.replay` inside one jitted program.

Virtual mapping
---------------
An op is a batch of ``B`` GEMMs ``(M x K) @ (K x N)`` (non-GEMM ops: a stream
of elements on the vector units). Its *layout* splits it over a virtual grid of
``gy x gx`` tiles:

======  =====================  =====================  =================================
layout  grid rows split        grid columns split     what is shared / reduced
======  =====================  =====================  =================================
``mn``  the ``B*M`` rows       ``N`` (output cols)    input rows multicast along a grid
                                                      row; weights shared down a column
``mk``  the ``B*M`` rows       ``K`` (reduction)      partial sums reduced along a grid
                                                      row over the NoC (``(gx-1) B M N``)
======  =====================  =====================  =================================

A virtual tile holds ``rows_t = ceil(B M / gy)`` rows: ``bt = ceil(rows_t / M)``
GEMMs of ``mt = min(rows_t, M)`` rows each (a batched GEMM is split by batch
first), and ``kt x nt`` of the weights. Non-GEMM ops use ``mn`` with ``gx = 1``.

The search tries every layout with ``gy, gx`` powers of two up to the whole
chip (``gy * gx <= tiles``; 2 x 13 x 13 candidates per op, evaluated at once)
and keeps the one with the lowest *estimated* time, ``max(compute, DRAM, NoC)``
of the op alone, times ``1 + 0.02 log2(gy gx)``: each doubling of the tiles an
op occupies must buy more than 2 % of its time, which maximises utilisation
(an op never spreads where it does not speed up) and keeps tiles free for
concurrent ops. Ties go to ``mn``, then the smaller ``gy``, then ``gx``. A user pins a layout
per region (``replay(..., layouts={"encoder/layer_0/mlp": "mk"})``, or
``"mn:4x8"`` to pin the factors too).

Physical mapping
----------------
The virtual grid is folded onto the tiles the execution style grants the op:
the whole grid when time-multiplexed, its own region of ``alloc`` tiles when
layer-pipelined. ``U = min(gy gx, alloc)`` physical tiles each run
``fold = ceil(gy gx / U)`` virtual tiles in turn (tile ``j`` runs
``floor(V / U)`` or one more): *merged*. Per virtual tile, an operand whose
piece does not fit half its SRAM partition (the other half prefetches) is
refetched from DRAM on every fold, and partial sums that do not fit spill to
DRAM: *spilled*. Both are recorded per op (``Run.mapping``).

Traffic and energy follow :mod:`dfit_nb.sim.dataflow` for the per-tile GEMM
(SCALE-Sim folds, SRAM reads per operand); what differs is where operands come
from: a tensor produced by an earlier op arrives over the NoC from the
producer's tiles (a *retile*, costed by the scheduler) when it stayed on chip,
and from DRAM otherwise; weights and program inputs come from DRAM, delivered
from the grid's west edge. Edge pieces are counted as full pieces (the array
does the padded work).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from .dataflow import fold_cycles, gemm_sram_elements, word_and_mac_energy
from .hardware import Hardware

LAYOUTS = ("mn", "mk")
MAX_LOG2 = 12  # factors up to 4096 per grid side
TILE_PENALTY = 0.02
TENSORS = ("activation", "weight", "psum")
LEVELS = ("sram", "noc", "dram")

_A, _B = np.meshgrid(np.arange(MAX_LOG2 + 1), np.arange(MAX_LOG2 + 1), indexing="ij")
#: every (layout, gy, gx) the search tries
CANDIDATES = {
    "layout": np.repeat(np.arange(len(LAYOUTS)), _A.size).astype(np.float64),
    "gy": np.tile(2.0 ** _A.reshape(-1), len(LAYOUTS)),
    "gx": np.tile(2.0 ** _B.reshape(-1), len(LAYOUTS)),
}

def _pieces(ops: dict[str, Any], layout: Any, gy: Any, gx: Any) -> dict[str, Any]:
    """Per-virtual-tile GEMM piece: rows, bt GEMMs of mt x kt x nt."""
    m, k, n, b = ops["m"], ops["k"], ops["n"], jnp.maximum(ops["batch"], 1.0)
    rows = b * m
    rows_t = jnp.ceil(rows / gy)
    mt = jnp.minimum(rows_t, m)
    bt = jnp.ceil(rows_t / jnp.maximum(m, 1.0))
    mk = layout == 1
    kt = jnp.where(mk, jnp.ceil(k / gx), k)
    nt = jnp.where(mk, n, jnp.ceil(n / gx))
    return {"rows": rows, "rows_t": rows_t, "mt": mt, "bt": bt, "kt": kt, "nt": nt}


def model(ops: dict[str, Any], hw: Hardware, df: Any, layout: Any, gy: Any, gx: Any, alloc: Any) -> dict[str, Any]:
    """Cost of each op (per execution) under a mapping, folded onto ``alloc`` physical tiles.

    ``ops`` holds float64 arrays (see :func:`dfit_nb.sim.replay.prepare`); every
    argument broadcasts. Returns per-op arrays: the mapping (``layout``, ``gy``,
    ``gx``, ``virtual_tiles``, ``tiles``, ``fold``, ``spilled_bytes``),
    cycles (``compute_v`` per virtual tile, ``sram_cycles``, ``dram_cycles``
    of the op's own traffic), bytes by tensor and level (``traffic``, shape
    ``(3, 3, ...)``: :data:`TENSORS` x :data:`LEVELS`), energy by level, and
    what the scheduler needs (``noc_in``: bytes delivered to the tiles, multicast
    copies included; ``noc_unique_in``: the same once per link; ``noc_out``:
    bytes sent back to the west edge; ``psum_noc``: the K-split reduction).
    """
    f64 = jnp.float64
    r, c = jnp.asarray(hw.pe_rows, f64), jnp.asarray(hw.pe_cols, f64)
    lanes = jnp.asarray(hw.vector_lanes, f64)
    gemm = ops["gemm"] > 0
    word, mac_pj = word_and_mac_energy(ops["itemsize"], hw)
    scale = jnp.where(ops["itemsize"] > 0, word / jnp.maximum(ops["itemsize"], 1.0), 1.0)  # program bytes -> words
    gx = jnp.where(gemm, gx, 1.0)
    v = gy * gx
    u = jnp.maximum(jnp.minimum(v, alloc), 1.0)
    fold = jnp.ceil(v / u)
    p = _pieces(ops, layout, gy, gx)
    mk = (layout == 1) & gemm

    # ---- compute: per virtual tile
    one, _, _ = fold_cycles(p["mt"], p["kt"], p["nt"], df, r, c)
    # K split: each grid row reduces gx partial-sum pieces on its vector units (a log2(gx)-deep tree)
    reduce_cycles = jnp.where(mk & (gx > 1), jnp.ceil(p["rows_t"] * p["nt"] / lanes) * jnp.log2(gx), 0.0)
    gemm_v = p["bt"] * one + reduce_cycles
    work = ops["flops"] + 8.0 * ops["transcendentals"]
    vector_v = jnp.ceil(jnp.maximum(work, ops["elems_out"]) / (lanes * v))
    compute_v = jnp.where(gemm, gemm_v, vector_v)
    macs = jnp.where(gemm, jnp.maximum(ops["batch"], 1.0) * ops["m"] * ops["k"] * ops["n"], 0.0)

    # ---- SRAM (bytes, whole op)
    e = gemm_sram_elements(p["mt"], p["kt"], p["nt"], df, r, c)
    per_v = {key: val * p["bt"] * word for key, val in e.items()}
    sram_in = jnp.where(gemm, per_v["input"] * v, ops["elems_in"] * word)
    sram_w = jnp.where(gemm, per_v["weight"] * v, 0.0)
    sram_out_w = jnp.where(gemm, per_v["output_w"] * v, ops["elems_out"] * word)
    sram_out_r = jnp.where(gemm, per_v["output_r"] * v, 0.0)
    final_out = jnp.where(gemm, p["rows"] * ops["n"] * word, ops["elems_out"] * word)

    # ---- what each tile is handed (compulsory, with multicast copies) and what does not fit
    half = 0.5
    in_piece = p["bt"] * p["mt"] * p["kt"] * word
    w_piece = p["bt"] * p["kt"] * p["nt"] * word
    in_fits = p["mt"] * p["kt"] * word <= half * jnp.asarray(hw.sram_input_bytes, f64)
    w_fits = p["kt"] * p["nt"] * word <= half * jnp.asarray(hw.sram_weight_bytes, f64)
    psum_rows = jnp.where(df == 1, jnp.minimum(p["mt"], r), p["mt"])
    out_fits = psum_rows * p["nt"] * word <= half * jnp.asarray(hw.sram_output_bytes, f64)
    deliv_in = in_piece * v
    deliv_w = w_piece * v
    refetch_in = jnp.where(gemm & ~in_fits, jnp.maximum(sram_in - deliv_in, 0.0), 0.0)
    refetch_w = jnp.where(gemm & ~w_fits, jnp.maximum(sram_w - deliv_w, 0.0), 0.0)
    psum_spill = jnp.where(gemm & ~out_fits, (sram_out_w - final_out) + sram_out_r, 0.0)
    psum_noc = jnp.where(mk, (gx - 1.0) * p["rows"] * ops["n"] * word, 0.0)

    # operands from outside the program's ops (weights, program inputs) come from DRAM; the fractions
    # fed by producers arrive by retile (scheduler) or, when the producer spilled, from DRAM too
    ext0, ext1 = 1.0 - ops["fed0"], 1.0 - ops["fed1"]
    ext_in_dram = jnp.where(gemm, ext0 * ops["lhs_bytes"] * scale, ops["ext_bytes"] * scale)
    ext_w_dram = jnp.where(gemm, ext1 * ops["rhs_bytes"] * scale, 0.0)
    # a result stays on chip for its consumers when its pieces fit half the output partitions of its tiles;
    # program outputs and results that do not fit are written to DRAM
    out_onchip = (ops["has_consumer"] > 0) & (
        ops["bytes_written"] * scale / u <= half * jnp.asarray(hw.sram_output_bytes, f64))
    out_dram = jnp.where(out_onchip, 0.0, ops["bytes_written"] * scale)
    spilled = refetch_in + refetch_w + psum_spill
    dram_bytes = ext_in_dram + ext_w_dram + out_dram + spilled
    multi = (jnp.asarray(hw.tile_rows, f64) * jnp.asarray(hw.tile_cols, f64)) > 1
    noc_in = jnp.where(multi, jnp.where(gemm, ext0 * deliv_in + ext1 * deliv_w, ext_in_dram)
                       + refetch_in + refetch_w + jnp.where(gemm & ~out_fits, sram_out_r, 0.0), 0.0)
    noc_out = jnp.where(multi, out_dram + jnp.where(gemm & ~out_fits, sram_out_w - final_out, 0.0), 0.0)
    # a piece several tiles share is multicast: it crosses each link once, so links carry the unique bytes
    noc_unique_in = jnp.where(multi, ext_in_dram + ext_w_dram + refetch_in + refetch_w
                              + jnp.where(gemm & ~out_fits, sram_out_r, 0.0), 0.0)

    # ---- traffic by tensor (activation, weight, psum) and level (sram, noc, dram)
    rhs_is_weight = jnp.where(gemm, ext1, 0.0)
    sram_psum = jnp.where(gemm, (sram_out_w - final_out) + sram_out_r, 0.0)
    traffic = jnp.stack([
        jnp.stack([sram_in + sram_w * (1 - rhs_is_weight) + final_out,
                   jnp.where(multi, jnp.where(gemm, ext0 * deliv_in, ext_in_dram) + refetch_in + out_dram, 0.0),
                   jnp.where(gemm, ext_in_dram, ops["ext_bytes"] * scale) + refetch_in + out_dram]),
        jnp.stack([sram_w * rhs_is_weight,
                   jnp.where(multi, ext1 * deliv_w + refetch_w, 0.0),
                   ext_w_dram + refetch_w]),
        jnp.stack([sram_psum,
                   psum_noc + jnp.where(multi, jnp.where(gemm & ~out_fits, sram_out_w - final_out + sram_out_r,
                                                         0.0), 0.0),
                   psum_spill]),
    ])
    # tensors that are not a GEMM's external rhs but still come from outside (LayerNorm scale, bias) count as
    # weights at the DRAM level for non-GEMM ops
    nongemm_w = jnp.where(gemm, 0.0, ext_in_dram)
    traffic = traffic.at[0, 2].add(-nongemm_w).at[1, 2].add(nongemm_w)

    sram_bytes = sram_in + sram_w + sram_out_w + sram_out_r
    hops = (jnp.asarray(hw.tile_cols, f64) + 1.0) / 2.0
    e_noc_hop = jnp.asarray(hw.noc_pj_per_byte_hop, f64)
    energy = {
        "compute": macs * mac_pj + jnp.where(gemm, 3.0 * macs, work) * word * jnp.asarray(hw.rf_pj_per_byte, f64),
        "sram": sram_bytes * jnp.asarray(hw.sram_pj_per_byte, f64),
        # DRAM traffic delivered from the west edge travels (tile_cols + 1) / 2 hops on average (multicast
        # pieces once per link);
        # the K-split reduction moves its partial sums one hop per step
        "noc": ((noc_unique_in + noc_out) * hops + psum_noc) * e_noc_hop,
        "dram": dram_bytes * jnp.asarray(hw.dram_pj_per_byte, f64),
    }
    # SRAM ports are sized to the datapath's edges: R inputs + C weights + C outputs per cycle on the PE array,
    # two reads and a write per lane on the vector unit
    sram_bw = jnp.where(gemm, (r + 2.0 * c) * word, 3.0 * lanes * word)
    resident = jnp.where(gemm, jnp.minimum(in_piece, half * jnp.asarray(hw.sram_input_bytes, f64) * 2)
                         + jnp.minimum(w_piece, jnp.asarray(hw.sram_weight_bytes, f64))
                         + jnp.minimum(p["bt"] * psum_rows * p["nt"] * word, jnp.asarray(hw.sram_output_bytes, f64)),
                         jnp.minimum((ops["elems_in"] + ops["elems_out"]) * word / v, hw_sram(hw)))
    zero = 0.0 * (ops["m"] + df + layout + gy + alloc)
    out = {
        "layout": jnp.where(gemm, layout, 0.0), "gy": gy, "gx": gx, "virtual_tiles": v, "tiles": u, "fold": fold,
        "spilled_bytes": spilled, "compute_v": compute_v, "macs": macs, "word": word,
        "sram_bytes": sram_bytes, "sram_cycles_v": sram_bytes / (v * sram_bw),
        "dram_bytes": dram_bytes, "dram_cycles": dram_bytes / jnp.asarray(hw.dram_bytes_per_cycle, f64),
        "noc_in": noc_in, "noc_unique_in": noc_unique_in, "noc_out": noc_out, "psum_noc": psum_noc,
        "resident_bytes": resident, "final_out": final_out, "out_onchip": out_onchip * 1.0,
        **{f"energy_{key}_pj": val for key, val in energy.items()},
    }
    out = {key: val + zero for key, val in out.items()}
    out["traffic"] = traffic + zero
    return out


def hw_sram(hw: Hardware) -> Any:
    """SRAM bytes per tile, all partitions."""
    f64 = jnp.float64
    return (jnp.asarray(hw.sram_input_bytes, f64) + jnp.asarray(hw.sram_weight_bytes, f64)
            + jnp.asarray(hw.sram_output_bytes, f64))


def estimate(m: dict[str, Any], hw: Hardware) -> Any:
    """The search's score of a mapping (lower is better): the op's time alone, with a tile penalty."""
    f64 = jnp.float64
    rows_used = jnp.minimum(jnp.asarray(hw.tile_rows, f64), m["tiles"])
    noc = (m["noc_unique_in"] + m["noc_out"] + m["psum_noc"]) / (
        rows_used * jnp.asarray(hw.noc_link_bytes_per_cycle, f64))
    compute = m["fold"] * jnp.maximum(m["compute_v"], m["sram_cycles_v"])
    t = jnp.maximum(jnp.maximum(compute, m["dram_cycles"]), noc)
    return t * (1.0 + TILE_PENALTY * jnp.log2(m["tiles"]))


def search(ops: dict[str, Any], hw: Hardware, df: Any, budget: Any, pinned: dict[str, Any]) -> dict[str, Any]:
    """The best virtual mapping of every op: ``layout``, ``gy``, ``gx`` arrays.

    ``budget``: tiles an op may spread over. ``pinned``: per-op ``layout``
    (-1 free), ``gy`` and ``gx`` (0 free) from the user's per-region choices.
    """
    cand = {key: jnp.asarray(val)[None, :] for key, val in CANDIDATES.items()}
    col = {key: jnp.asarray(val)[:, None] for key, val in ops.items()}
    gemm = col["gemm"] > 0
    rows = jnp.maximum(col["batch"], 1.0) * col["m"]
    split_cap = jnp.where(cand["layout"] == 1, col["k"], col["n"])
    ok = cand["gy"] * cand["gx"] <= budget[:, None] if jnp.ndim(budget) else cand["gy"] * cand["gx"] <= budget
    ok &= jnp.where(gemm, (cand["gy"] <= jnp.maximum(rows, 1.0)) & (cand["gx"] <= jnp.maximum(split_cap, 1.0)),
                    (cand["layout"] == 0) & (cand["gx"] == 1)
                    & (cand["gy"] <= jnp.maximum(jnp.ceil(col["elems_out"] / jnp.asarray(hw.vector_lanes)), 1.0)))
    pl, py, px = (jnp.asarray(pinned[key])[:, None] for key in ("layout", "gy", "gx"))
    ok &= ((pl < 0) | (cand["layout"] == pl)) & ((py <= 0) | (cand["gy"] == py)) & ((px <= 0) | (cand["gx"] == px))
    ok = ok.at[:, 0].set(ok[:, 0] | ~ok.any(axis=1))  # 1x1 mn is always possible
    alloc = budget[:, None] if jnp.ndim(budget) else budget
    m = model(col, hw, jnp.asarray(df)[:, None] if jnp.ndim(df) else df, cand["layout"], cand["gy"], cand["gx"],
              alloc)
    score = jnp.where(ok, estimate(m, hw), jnp.inf)
    best = jnp.argmin(score, axis=1)  # ties: the first candidate (mn before mk, smaller gy, then smaller gx)
    return {key: jnp.asarray(CANDIDATES[key])[best] for key in ("layout", "gy", "gx")}
