"""Per-op cost on a tiled systolic machine: cycles, traffic per operand and level, energy.

Pure ``jax.numpy``, elementwise over ops with NumPy broadcasting, so the same
code runs on one op, a table of ops, a batch of machines (``vmap`` over a
:class:`~dfit_nb.sim.Hardware` pytree) and several dataflows at once. Counts
are computed in float64 (exact integers up to 2**53); callers enter a scoped
``jax.enable_x64(True)`` (see :mod:`dfit_nb.sim.cost`).

The model
---------
**Splitting over tiles.** An op is a batch of ``B`` GEMMs ``(M x K) @ (K x N)``.
With ``T`` tiles, each tile runs ``ceil(B / T)`` GEMMs one after the other; when
``B < T`` the spare tiles split ``M``: ``s = min(T // B, ceil(M / R))`` tiles share one
GEMM, each taking ``m_t = ceil(M / s)`` rows (no piece thinner than one array height). Replay (``dfit_nb.replay``) owns
smarter placements; this is the default spread used to cost one op alone.

**Compute cycles** follow SCALE-Sim's fold structure on an ``R x C`` array. A
dataflow maps the GEMM onto (array rows, array columns, time):

=====  ==========  ==========  =========
style  rows (Sr)   cols (Sc)   time (T)
=====  ==========  ==========  =========
os     M           N           K
ws     K           N           M
is     K           M           N
=====  ==========  ==========  =========

The array runs ``ceil(Sr / R) * ceil(Sc / C)`` folds back to back; a fold costs
``T + R + C - 2`` cycles for OS (fill, stream, drain) and ``2R + C + T - 2`` for
WS and IS (the stationary operand is loaded first, taking R more cycles); like
SCALE-Sim's "Total Cycles", a GEMM's count is that product minus one (SCALE-Sim
reports the 0-based index of its last cycle).

**SRAM traffic** (elements) per GEMM: each fold reads its operands once.

=====  ======================  ======================  ===========================
style  input reads             weight reads            output writes / reads
=====  ======================  ======================  ===========================
os     M*K*ceil(N/C)           K*N*ceil(M/R)           M*N / 0
ws     M*K*ceil(N/C)           K*N                     M*N*ceil(K/R) / M*N*(ceil(K/R)-1)
is     M*K                     K*N*ceil(M/C)           M*N*ceil(K/R) / M*N*(ceil(K/R)-1)
=====  ======================  ======================  ===========================

**DRAM traffic.** Operands start in DRAM and results end there (SCALE-Sim's
assumption). An operand whose footprint fits in half of its SRAM partition
(the other half prefetches: double buffering) is fetched once; otherwise every
fold refetches it, so its DRAM reads equal its SRAM reads. Outputs are written
once if the partial sums of a pass fit in half the output partition; otherwise
partial sums spill (written and read back per fold). Weights shared by tiles
that split ``M`` are read once from DRAM and multicast on the NoC.

**NoC.** On a grid of more than one tile, every byte fetched from DRAM enters at
the west edge and travels on average ``(tile_cols + 1) / 2`` hops (XY routing);
multicast weights are delivered to each tile that uses them. The edge injects
through ``tile_rows`` links.

**Stalls.** With double buffering, memory overlaps compute: the op takes
``max(compute, dram, noc)`` cycles, plus the DRAM latency once; ``stall_cycles``
is the excess over compute. ``memory="ideal"`` sets stalls to zero.

**Words.** An op moves words of its dtype's width, cast down to the machine's widest
native word (``word_bytes``): a float32 program on a bf16 machine moves 2-byte words,
an int8 op stays 1 byte. Tables without a dtype use the native word.

**Energy** (pJ): MACs x the MAC energy of the op's word (``mac_pj_1/2/4``; an
8-byte MAC is charged 4x the 4-byte one, multiplier area growing with the square
of the width); register file 3 words per MAC (two operand
reads, one accumulate); SRAM bytes read and written; NoC byte-hops; DRAM bytes.

**Non-GEMM ops** (``m == 0``) run on the tiles' vector units: ``flops`` plus 8
cycles-worth of work per transcendental (a documented assumption: a
polynomial/table evaluation), spread over ``vector_lanes x tiles`` lanes; their
inputs are read from DRAM and outputs written back once, through SRAM.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .hardware import Hardware

DATAFLOWS = ("ws", "os", "is")
OPERANDS = ("input", "weight", "output")
LEVELS = ("mac", "rf", "sram", "noc", "dram")
TRANSCENDENTAL_WORK = 8.0


def _cdiv(a: Any, b: Any, xp: Any = jnp) -> Any:
    return xp.ceil(a / b)


def fold_cycles(m: Any, k: Any, n: Any, df: Any, r: Any, c: Any, xp: Any = jnp) -> tuple[Any, Any, Any]:
    """Cycles of one GEMM on one R x C array: ``(cycles, row folds, col folds)``.

    ``df`` is 0 (ws), 1 (os) or 2 (is), elementwise.
    """
    sr = xp.where(df == 1, m, k)
    sc = xp.where(df == 2, m, n)
    t = xp.where(df == 0, m, xp.where(df == 1, k, n))
    fr, fc = _cdiv(sr, r, xp), _cdiv(sc, c, xp)
    per_fold = xp.where(df == 1, t + r + c - 2, 2 * r + c + t - 2)
    # SCALE-Sim reports the 0-based index of the last cycle as "Total Cycles": one less than
    # folds x per-fold cycles. We keep its convention so its figures compare exactly.
    return fr * fc * per_fold - 1, fr, fc


def word_and_mac_energy(itemsize: Any, hw: Hardware, xp: Any = jnp) -> tuple[Any, Any]:
    """An op's word (its dtype's width cast down to the machine's widest native word; the native word when
    the width is unknown, 0) and the energy of one MAC at that width."""
    f64 = xp.float64
    native = xp.asarray(hw.word_bytes, f64)
    word = xp.where(itemsize > 0, xp.minimum(itemsize, native), native)
    mac_pj = xp.where(word <= 1, xp.asarray(hw.mac_pj_1, f64), xp.where(
        word <= 2, xp.asarray(hw.mac_pj_2, f64), xp.asarray(hw.mac_pj_4, f64) * xp.maximum(word / 4.0, 1.0) ** 2))
    return word, mac_pj


def gemm_sram_elements(m: Any, k: Any, n: Any, df: Any, r: Any, c: Any, xp: Any = jnp) -> dict[str, Any]:
    """SRAM element traffic of one GEMM per operand (see the module docstring)."""
    fold_n_c = _cdiv(n, c, xp)
    fold_k_r = _cdiv(k, r, xp)
    inp = xp.where(df == 2, m * k, m * k * fold_n_c)
    wgt = xp.where(df == 0, k * n, xp.where(df == 1, k * n * _cdiv(m, r, xp), k * n * _cdiv(m, c, xp)))
    out_w = xp.where(df == 1, m * n, m * n * fold_k_r)
    out_r = xp.where(df == 1, 0.0, m * n * (fold_k_r - 1))
    return {"input": inp, "weight": wgt, "output_w": out_w, "output_r": out_r}


def op_cost(ops: dict[str, Any], hw: Hardware, df: Any, ideal: bool, xp: Any = jnp) -> dict[str, Any]:
    """Cost of every op (arrays broadcast together) on ``hw`` with dataflow codes ``df``.

    ``ops`` holds ``m, k, n, batch, flops, transcendentals, elems_in, elems_out, itemsize``
    (float64 arrays). Returns a dict of float64 arrays, one per output variable.
    ``xp`` is the array namespace: ``jax.numpy`` (jit/vmap) or ``numpy`` (the
    reference the benchmarks compare against).
    """
    f64 = xp.float64
    m, k, n = (xp.asarray(ops[x], f64) for x in ("m", "k", "n"))
    b = xp.maximum(xp.asarray(ops["batch"], f64), 1.0)
    r, c = xp.asarray(hw.pe_rows, f64), xp.asarray(hw.pe_cols, f64)
    tiles = xp.asarray(hw.tile_rows, f64) * xp.asarray(hw.tile_cols, f64)
    word, mac_pj = word_and_mac_energy(xp.asarray(ops["itemsize"], f64), hw, xp)
    gemm = (m > 0) & (k > 0) & (n > 0)

    # ---- split over tiles
    gemms_per_tile = _cdiv(b, tiles, xp)
    split = xp.where(b >= tiles, 1.0, xp.minimum(xp.floor(tiles / b), xp.maximum(_cdiv(m, r, xp), 1.0)))
    mt = _cdiv(m, split, xp)
    pieces = b * split
    tiles_used = xp.minimum(tiles, pieces)
    macs = xp.where(gemm, b * m * k * n, 0.0)

    one, _, _ = fold_cycles(mt, k, n, df, r, c, xp)
    gemm_compute = gemms_per_tile * one

    # ---- vector path for non-GEMM ops
    lanes = xp.asarray(hw.vector_lanes, f64) * tiles
    work = xp.asarray(ops["flops"], f64) + TRANSCENDENTAL_WORK * xp.asarray(ops["transcendentals"], f64)
    elems_in, elems_out = xp.asarray(ops["elems_in"], f64), xp.asarray(ops["elems_out"], f64)
    vector_compute = _cdiv(xp.maximum(work, elems_out), lanes, xp)
    compute = xp.where(gemm, gemm_compute, vector_compute)

    # ---- SRAM traffic (elements, whole op)
    s = gemm_sram_elements(mt, k, n, df, r, c, xp)
    sram = {key: xp.where(gemm, v * pieces, 0.0) for key, v in s.items()}
    sram["input"] = sram["input"] + xp.where(gemm, 0.0, elems_in)
    sram["output_w"] = sram["output_w"] + xp.where(gemm, 0.0, elems_out)

    # ---- DRAM traffic (elements)
    half = 0.5
    in_fits = mt * k * word <= half * xp.asarray(hw.sram_input_bytes, f64)
    w_fits = k * n * word <= half * xp.asarray(hw.sram_weight_bytes, f64)
    psum_rows = xp.where(df == 1, xp.minimum(mt, r), mt)  # OS keeps partial sums in the PEs
    out_fits = psum_rows * n * word <= half * xp.asarray(hw.sram_output_bytes, f64)
    dram_in = xp.where(in_fits, b * m * k, sram["input"])
    dram_w = xp.where(w_fits, b * k * n, sram["weight"])
    dram_out_w = xp.where(out_fits, b * m * n, sram["output_w"])
    dram_out_r = xp.where(out_fits, 0.0, sram["output_r"])
    dram = {
        "input": xp.where(gemm, dram_in, elems_in),
        "weight": xp.where(gemm, dram_w, 0.0),
        "output_w": xp.where(gemm, dram_out_w, elems_out),
        "output_r": xp.where(gemm, dram_out_r, 0.0),
    }
    dram_bytes = sum(dram.values()) * word

    # ---- NoC: bytes delivered to tiles on a multi-tile grid
    multi = tiles > 1
    weight_copies = xp.where(gemm, xp.minimum(split, tiles_used), 1.0)
    # weights that fit are fetched once and multicast to every tile sharing them; weights that
    # do not fit are streamed by each tile on its own (already counted per piece)
    noc_weight = xp.where(gemm & w_fits, dram["weight"] * weight_copies, dram["weight"])
    noc_bytes = xp.where(multi, (dram["input"] + noc_weight + dram["output_w"]) * word, 0.0)
    avg_hops = (xp.asarray(hw.tile_cols, f64) + 1.0) / 2.0
    noc_cycles = xp.where(
        multi,
        noc_bytes / (xp.asarray(hw.tile_rows, f64) * xp.asarray(hw.noc_link_bytes_per_cycle, f64))
        + xp.asarray(hw.noc_hop_cycles, f64) * xp.asarray(hw.tile_cols, f64),
        0.0,
    )
    dram_cycles = dram_bytes / xp.asarray(hw.dram_bytes_per_cycle, f64) + xp.asarray(hw.dram_latency_cycles, f64)
    stall = 0.0 * compute if ideal else xp.maximum(xp.maximum(dram_cycles, noc_cycles) - compute, 0.0)
    active = (compute > 0) | (dram_bytes > 0)
    stall = xp.where(active, stall, 0.0)
    cycles = compute + stall

    # ---- energy (pJ)
    sram_bytes = (sram["input"] + sram["weight"] + sram["output_w"] + sram["output_r"]) * word
    e_level = {
        "mac": macs * mac_pj,
        "rf": xp.where(gemm, 3.0 * macs, work) * word * xp.asarray(hw.rf_pj_per_byte, f64),
        "sram": sram_bytes * xp.asarray(hw.sram_pj_per_byte, f64),
        "noc": noc_bytes * avg_hops * xp.asarray(hw.noc_pj_per_byte_hop, f64),
        "dram": dram_bytes * xp.asarray(hw.dram_pj_per_byte, f64),
    }
    peak = tiles * r * c
    e_sram, e_dram = xp.asarray(hw.sram_pj_per_byte, f64) * word, xp.asarray(hw.dram_pj_per_byte, f64) * word
    out = {
        "cycles": cycles,
        "compute_cycles": compute,
        "stall_cycles": stall,
        "dram_cycles": xp.where(active, dram_cycles, 0.0),
        "noc_cycles": noc_cycles,
        "macs": macs,
        "utilization": xp.where(cycles > 0, macs / (xp.maximum(cycles, 1.0) * peak), 0.0),
        "tiles_used": xp.where(gemm, tiles_used, xp.where(active, tiles, 0.0)),
        "noc_bytes": noc_bytes,
        "energy_pj": sum(e_level.values()),
        **{f"energy_{lv}_pj": e for lv, e in e_level.items()},
        "energy_input_pj": sram["input"] * e_sram + dram["input"] * e_dram,
        "energy_weight_pj": sram["weight"] * e_sram + dram["weight"] * e_dram,
        "energy_output_pj": (sram["output_w"] + sram["output_r"]) * e_sram
        + (dram["output_w"] + dram["output_r"]) * e_dram,
        "sram_reads_input": sram["input"] * word,
        "sram_reads_weight": sram["weight"] * word,
        "sram_reads_output": sram["output_r"] * word,
        "sram_writes_output": sram["output_w"] * word,
        "dram_reads_input": dram["input"] * word,
        "dram_reads_weight": dram["weight"] * word,
        "dram_reads_output": dram["output_r"] * word,
        "dram_writes_output": dram["output_w"] * word,
    }
    for operand, key in (("input", "input"), ("weight", "weight"), ("output", "output_w")):
        out[f"reuse_sram_{operand}"] = xp.where(sram[key] > 0, macs / xp.maximum(sram[key] * word, 1.0), 0.0)
        out[f"reuse_dram_{operand}"] = xp.where(dram[key] > 0, macs / xp.maximum(dram[key] * word, 1.0), 0.0)
    zero = 0.0 * (m + df)  # every output gets the full (dataflow x op) shape
    return {key: value + zero for key, value in out.items()}


def switch_cost(ops: dict[str, Any], hw: Hardware, reconfig_cycles: Any = 0.0, reconfig_pj: Any = 0.0,
                xp: Any = jnp) -> dict[str, Any]:
    """The price of switching dataflow before each op: one formula for the selection and the replay.

    Changing the stationary operand changes how the op's input activation
    (``lhs_bytes``, in the op's words) must be laid out in SRAM, so it is
    re-laid-out: read from and written back to SRAM (``2 x bytes x
    sram_pj_per_byte``) and, on a multi-tile grid, moved across the mesh
    (``bytes x (tile_cols + 1) / 2`` hops ``x noc_pj_per_byte_hop``). It takes
    ``bytes / (tile_rows x noc_link_bytes_per_cycle)`` cycles over the west-edge
    links of a grid, or ``bytes / ((R + 2C) x word)`` through one tile's SRAM
    ports. ``reconfig_cycles`` and ``reconfig_pj`` (control / reconfiguration
    penalty) are added per switch. Once per switch, not per execution of the op.

    Returns ``bytes`` (re-laid-out), ``energy_pj`` and ``cycles`` (penalty
    included), and ``relayout_energy_pj`` / ``relayout_cycles`` (without it).
    Pure array code (``jax.numpy`` or ``numpy`` as ``xp``): jit-able and vmap-able.

    >>> import numpy as np
    >>> from dfit_nb.sim import presets
    >>> ops = {"itemsize": np.array([2.0]), "lhs_bytes": np.array([1000.0])}
    >>> sw = switch_cost(ops, presets.get("eyeriss_like"), 10.0, 5.0, xp=np)
    >>> float(sw["bytes"][0]), float(sw["cycles"][0] - sw["relayout_cycles"][0])
    (1000.0, 10.0)
    """
    f64 = xp.float64
    itemsize = xp.asarray(ops["itemsize"], f64)
    word, _ = word_and_mac_energy(itemsize, hw, xp)
    scale = xp.where(itemsize > 0, word / xp.maximum(itemsize, 1.0), 1.0)
    nbytes = xp.asarray(ops["lhs_bytes"], f64) * scale
    rows, cols = xp.asarray(hw.tile_rows, f64), xp.asarray(hw.tile_cols, f64)
    multi = rows * cols > 1
    energy = nbytes * (2.0 * xp.asarray(hw.sram_pj_per_byte, f64)
                       + xp.where(multi, (cols + 1.0) / 2.0 * xp.asarray(hw.noc_pj_per_byte_hop, f64), 0.0))
    ports = (xp.asarray(hw.pe_rows, f64) + 2.0 * xp.asarray(hw.pe_cols, f64)) * word
    cycles = xp.where(multi, nbytes / (rows * xp.asarray(hw.noc_link_bytes_per_cycle, f64)), nbytes / ports)
    return {"bytes": nbytes, "energy_pj": energy + reconfig_pj, "cycles": cycles + reconfig_cycles,
            "relayout_energy_pj": energy, "relayout_cycles": cycles}


def switched(codes: Any, gemm: Any, xp: Any = jnp) -> Any:
    """Per op: a dataflow switch is paid before it (a GEMM whose dataflow differs from the previous GEMM's in
    program order: the adjacency the selection's DP charges; non-GEMM ops between them do not break it).

    >>> import numpy as np
    >>> switched(np.array([0., 2., 1., 0., 1.]), np.array([1., 0., 1., 1., 1.]), xp=np).tolist()
    [False, False, True, True, True]
    """
    codes = xp.asarray(codes)
    is_gemm = xp.asarray(gemm) > 0
    index = xp.where(is_gemm, xp.arange(codes.shape[-1]), -1)
    last = _cummax(index, xp)  # the latest GEMM at or before each op
    prev = xp.concatenate([xp.full(1, -1, last.dtype), last[:-1]])
    return is_gemm & (prev >= 0) & (codes[xp.maximum(prev, 0)] != codes)


def _cummax(x: Any, xp: Any) -> Any:
    if xp is jnp:
        return jax.lax.cummax(x)
    return np.maximum.accumulate(x)
