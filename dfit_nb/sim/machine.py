"""The one machine model: the per-tile physics every figure of the toolkit reads.

Everything that turns an op, a mapping and a :class:`~dfit_nb.sim.Hardware`
into cycles, bytes and joules lives here, as pure array functions (``jax.numpy``,
elementwise over ops, candidates and machines: ``jit``, ``vmap`` and ``grad``
go through them). Nothing else in the toolkit restates a formula:

* :func:`dfit_nb.sim._cost` maps each op alone (:func:`dfit_nb.sim.mapping.search`
  over the whole grid), then prices it with :func:`model` and times it with
  :func:`op_body` / :func:`alone_cycles`: exactly what :func:`dfit_nb.replay`
  charges a one-op program;
* :func:`dfit_nb.replay` (:mod:`dfit_nb.sim.schedule`) calls :func:`model` per op
  and :func:`op_body` per scan step, adding what only a schedule knows
  (dependencies, retiles between differently laid-out ops, DRAM contention);
* :func:`dfit_nb.sim.select_dataflows` prices every op x dataflow with the
  replay's own per-op records, and switches with :func:`switch_cost`;
* the views' roofline plots the roofs a Run carries (:func:`roofs`).

The model of one op
-------------------
An op is a batch of ``B`` GEMMs ``(M x K) @ (K x N)``; non-GEMM ops are a
stream of elements on the tiles' vector units. A *mapping* splits it over a
virtual grid of ``gy x gx`` tiles (layout ``mn``: rows by ``gy``, output
columns by ``gx``; layout ``mk``: rows by ``gy``, the reduction by ``gx``),
folded onto ``U = min(gy gx, alloc)`` physical tiles.

**Compute** per virtual tile follows SCALE-Sim's fold structure on an ``R x C``
array. A dataflow maps the GEMM onto (array rows, array columns, time):

=====  ==========  ==========  =========
style  rows (Sr)   cols (Sc)   time (T)
=====  ==========  ==========  =========
os     M           N           K
ws     K           N           M
is     K           M           N
=====  ==========  ==========  =========

The array runs ``ceil(Sr / R) * ceil(Sc / C)`` folds back to back; a fold costs
``T + R + C - 2`` cycles for OS and ``2R + C + T - 2`` for WS and IS (the
stationary operand is loaded first); like SCALE-Sim's "Total Cycles", a GEMM's
count is that product minus one. An op of ``passes`` passes (its math fidelity)
streams each fold that many times. An array that double-buffers its stationary
operand (``fold_overlap`` 1, a TPU MXU) hides each fold's fill under the previous
fold's stream: it pays the fill once per GEMM (see :func:`fold_cycles`). A K split (``mk``) reduces its partial sums on
the vector units (a ``log2(gx)``-deep tree). Non-GEMM work runs on ``vector_lanes``
lanes per tile: whole lane-steps of its ``flops`` (at least one per element), then
whole lane-steps of its transcendentals of ``transcendental_cycles`` each (a
polynomial or table evaluation; 8 by default), each lane issuing ``vector_rate``
operations per cycle (1 by default); a reduction over rows (its input's last axis)
adds the trees that reduce each row across the lanes, ``ceil(log2(min(L, lanes)))``
levels of ``reduction_step_cycles`` per lane-step of rows (0 by default; see
:func:`reduction_tree_cycles`). A depthwise convolution (one output
channel per group: ``N = 1``, ``B`` channels, ``K`` taps) runs on whichever of
the two is faster: the array, one channel's ``K x 1`` product after another,
or the vector unit, one multiply-add per lane-step (``ceil(B M K / lanes)``
steps per tile).

**SRAM traffic** (elements) per GEMM piece: each fold reads its operands once.

=====  ======================  ======================  ===========================
style  input reads             weight reads            output writes / reads
=====  ======================  ======================  ===========================
os     M*K*ceil(N/C)           K*N*ceil(M/R)           M*N / 0
ws     M*K*ceil(N/C)           K*N                     M*N*ceil(K/R) / M*N*(ceil(K/R)-1)
is     M*K                     K*N*ceil(M/C)           M*N*ceil(K/R) / M*N*(ceil(K/R)-1)
=====  ======================  ======================  ===========================

**What fits.** Per virtual tile, an operand piece that fits half its SRAM
partition (the other half prefetches: double buffering) is fetched once. When
neither operand fits, the loop is blocked: the overflow of one (its bytes
beyond the buffer) is re-read from DRAM once per further block of the other,
in the cheaper of the two loop orders; partial sums beyond half the output
partition spill to DRAM (that share, written and read back per fold) or are
blocked by rows (the weights' overflow streamed again per row block),
whichever moves fewer bytes. Re-read bytes grow smoothly with size over buffer.
Tiles that hold the same piece (the input's row block along a grid row, the
weights' column block along a grid column, where the GEMMs of a batch share
their weights) re-read it once between them, multicast, as they received it
the first time.

**Where operands come from.** Weights and program inputs come from DRAM,
delivered over the mesh from the grid's west edge (``(tile_cols + 1) / 2`` hops
on average; a piece several tiles share is multicast: it crosses each link once).
A tensor a producer kept on chip arrives over the NoC (a retile, priced by the
schedule); a result stays on chip for its consumers when its pieces fit half the
output partitions of its tiles, else it is written to DRAM. An op table may say
an operand already sits in SRAM, sharded over the op's tiles (``fed0`` / ``fed1``
1, from :func:`dfit_nb.sim.cost`'s ``a_on_chip`` / ``b_on_chip``), or that the
result stays there (``out_on_chip``): no DRAM or NoC traffic for it.

**Time** (:func:`op_body`). With double buffering, compute, SRAM ports, NoC
delivery and DRAM overlap; the op takes the slowest of

* compute: the busiest tile's virtual tiles x cycles each;
* SRAM ports: bytes / ``(R + 2C) x word`` per tile, or ``sram_port_bytes`` where
  the machine's port has a fixed width (``vector_sram_words x lanes x word`` on the
  vector unit);
* NoC: the busiest west-edge row link's bytes / ``noc_link_bytes_per_cycle``
  plus ``noc_hop_cycles`` x the farthest column;
* DRAM: bytes / ``dram_bytes_per_cycle`` plus ``dram_latency_cycles`` once;

where the on-tile demands (compute, SRAM ports) and the off-tile ones (NoC,
DRAM) overlap over the op's double-buffered blocks; the pipeline's fill and
drain (the shorter demand over the blocks) is exposed by ``1 - memory_overlap``
(1 by default: the slowest alone; see :func:`body_cycles`), plus ``op_overhead_cycles`` per
execution (launch, pipeline fill and drain, synchronisation: a fixed floor
real chips show on small ops; 0 by default).

**Words.** An op moves words of its dtype's width cast down to the machine's
widest native word (``word_bytes``); tables without a dtype use the native word.
Partial sums (every output write but the final one, every output read, a spill,
a K split's reduction) are ``accumulator_bytes`` wide when the machine says so
(a TPU MXU multiplies bf16 and accumulates in fp32: 4 bytes), never narrower
than the op's word; 0 keeps them at the word, as SCALE-Sim counts. They share
the SRAM ports' ``(R + 2C)`` words per cycle: wider sums take more of them.

**Energy** (pJ): MACs x the MAC energy of the op's word (``mac_pj_1/2/4``; an
8-byte MAC is charged 4x the 4-byte one); register file 3 words per MAC; SRAM
bytes read and written; NoC byte-hops; DRAM bytes.

**Kernels** (:mod:`dfit_nb.sim.kernels`). Ops run in the kernels a compiler
fuses them into; the grouping reaches the model as per-op columns (``kernel``,
``kernel_size``, ``payer``, ``free``, ``internal``, ``kernel_ws``, ``kernel_row``, ``kernel_weight``; absent, every
op is its own kernel, as :func:`dfit_nb.sim.cost` prices ops alone). A kernel
pays ``op_overhead_cycles`` once (:func:`fixed_cycles`), an op folded into its
indexing does no compute or SRAM work (:func:`kept_share`), a result read only
inside its fused kernel stays on chip, a tensor from outside that several of its
ops read comes in once (the schedule's ``shared_reads``), and the kernel's vector work hides under
its GEMM's array work by ``vector_overlap`` while its DRAM latency is waited once
(:func:`kernel_overlap`); a kernel whose streamed block of intermediates exceeds
a tile's SRAM runs unfused (:func:`kernel_fits`), and one that cannot keep the rows
it normalises (``row_buffer_bytes``, or a tile's SRAM) loops over them, streaming its
inputs again after each reduction over the rows (:func:`row_rereads`). A program output is always written to DRAM.

**Dataflow switch** (:func:`switch_cost`): changing the stationary operand
re-lays out the next GEMM's input in SRAM (read and written back), and on a
grid moves it across the mesh; a control penalty may be added per switch.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .hardware import Hardware

#: Dataflows (stationary operand): weight-, output-, input-stationary. Codes are their indices.
DATAFLOWS = ("ws", "os", "is")
WS, OS, IS = range(3)
#: Virtual layouts: split (rows, output columns) or (rows, reduction).
LAYOUTS = ("mn", "mk")
MN, MK = range(2)
#: Tensors and memory levels of the traffic matrix (``model(...)["traffic"]``).
TENSORS = ("activation", "weight", "psum")
LEVELS = ("sram", "noc", "dram")
#: Energy levels of :func:`model`.
ENERGY_LEVELS = ("mac", "rf", "sram", "noc", "dram")
#: Bytes per element of an op whose dtype is unknown (JAX's default float32).
DEFAULT_ITEMSIZE = 4.0
#: Inputs of :func:`model` that an op table carries only where it needs them (an op's passes through the array
#: for its math fidelity, a depthwise convolution's flag, a result kept in SRAM, the length of the rows a reduction
#: reduces, its inputs' widths), each with the value that prices an op as its absence does.
OPTIONAL_INPUTS = {"passes": 1.0, "depthwise": 0.0, "out_on_chip": 0.0, "row_reduce": 0.0, "in_itemsize": 0.0,
                   "lhs_itemsize": 0.0, "rhs_itemsize": 0.0}

_f64 = jnp.float64


def field(hw: Hardware, name: str, xp: Any = jnp) -> Any:
    """A Hardware field as a float64 array (the one way the model reads a field); ``xp=numpy`` on the host."""
    return xp.asarray(getattr(hw, name), xp.float64)


def optional(ops: dict[str, Any], name: str) -> Any:
    """The optional model input ``name`` of ``ops`` (:data:`OPTIONAL_INPUTS`), its neutral value where absent."""
    return ops.get(name, OPTIONAL_INPUTS[name])


def tiles(hw: Hardware, xp: Any = jnp) -> Any:
    """Tiles of the grid."""
    return field(hw, "tile_rows", xp) * field(hw, "tile_cols", xp)


def peak_macs_per_cycle(hw: Hardware, xp: Any = jnp) -> Any:
    """MACs per cycle of the whole chip: every tile's ``pe_rows x pe_cols`` array (the peak of
    :func:`utilization`; a Run's summary and the CLI's tables read it here).

    >>> import numpy as np
    >>> from dfit_nb.sim import presets
    >>> float(peak_macs_per_cycle(presets.get("tpu_v4"), np))
    131072.0
    """
    return tiles(hw, xp) * field(hw, "pe_rows", xp) * field(hw, "pe_cols", xp)


def peak_flops_per_s(hw: Hardware, xp: Any = jnp) -> Any:
    """Peak compute of the whole chip in FLOP/s (a MAC is two FLOPs): the roofline's compute roof and the
    presets table's TOPS."""
    return 2.0 * peak_macs_per_cycle(hw, xp) * (field(hw, "clock_ghz", xp) * 1e9)


def utilization(macs: Any, cycles: Any, hw: Hardware, xp: Any = jnp) -> Any:
    """MACs over the peak MACs the chip could do in ``cycles``; 0 where ``cycles`` is 0.

    One definition for :func:`dfit_nb.sim.cost` (per op), :func:`dfit_nb.replay` (its summary),
    :func:`dfit_nb.sim.replay_batch` (per machine) and the CLI's tables. ``xp=numpy`` on the host.

    >>> import numpy as np
    >>> from dfit_nb.sim import presets
    >>> float(utilization(512.0, 2.0, presets.get("scalesim_32"), np)), float(utilization(0.0, 0.0,
    ...     presets.get("scalesim_32"), np))
    (0.25, 0.0)
    """
    cycles = xp.asarray(cycles, xp.float64)
    busy = cycles > 0
    # the division sees 1 where there is no time, so no 0 / 0 is evaluated (nor its gradient)
    return xp.where(busy, macs / (xp.where(busy, cycles, 1.0) * peak_macs_per_cycle(hw, xp)), 0.0)


def link_load(nbytes: Any, cycles: Any, hw: Hardware, xp: Any = jnp) -> Any:
    """Load of a NoC link that carries ``nbytes`` in ``cycles``: bytes over what one link moves in that time
    (``noc_link_bytes_per_cycle``); 1 is a saturated link. A Run's ``cube["link_load"]`` is this per time bin."""
    return nbytes / (cycles * field(hw, "noc_link_bytes_per_cycle", xp))


def multi_tile(hw: Hardware) -> Any:
    """Whether the grid has more than one tile (a mesh to cross)."""
    return tiles(hw) > 1


def avg_hops(hw: Hardware) -> Any:
    """Average hops from the west edge to a tile of a row (XY routing)."""
    return (field(hw, "tile_cols") + 1.0) / 2.0


def sram_per_tile(hw: Hardware, xp: Any = jnp) -> Any:
    """SRAM bytes per tile, all partitions."""
    return (field(hw, "sram_input_bytes", xp) + field(hw, "sram_weight_bytes", xp)
            + field(hw, "sram_output_bytes", xp))


def sram_port_bytes_per_cycle(hw: Hardware, word: Any, gemm: Any) -> Any:
    """One tile's SRAM port bandwidth: on the PE array ``sram_port_bytes`` where the machine gives a port of fixed
    width, else R inputs + C weights + C outputs per cycle at the op's word; ``vector_sram_words`` per lane on the
    vector unit (3: two reads and a write)."""
    r, c, lanes = field(hw, "pe_rows"), field(hw, "pe_cols"), field(hw, "vector_lanes")
    port = field(hw, "sram_port_bytes")
    array = jnp.where(port > 0, port, (r + 2.0 * c) * word)
    return jnp.where(gemm, array, field(hw, "vector_sram_words") * lanes * word)


def roofs(hw: Hardware) -> dict[str, Any]:
    """The machine's roofs, whole chip, per second: what the roofline plots and a Run carries.

    ``peak_flops_per_s`` (a MAC is two FLOPs), ``dram_bytes_per_s``,
    ``noc_edge_bytes_per_s`` (data enter the mesh through one link per tile row
    at the west edge), ``sram_bytes_per_s`` (every tile's PE-array ports at the
    native word).

    >>> import jax
    >>> from dfit_nb.sim import presets
    >>> with jax.enable_x64(True):
    ...     r = roofs(presets.get("scalesim_32"))
    >>> float(r["peak_flops_per_s"]) == 2 * 32 * 32 * 1e9
    True
    """
    clock = field(hw, "clock_ghz") * 1e9
    native = field(hw, "word_bytes")
    return {
        "peak_flops_per_s": peak_flops_per_s(hw),
        "dram_bytes_per_s": field(hw, "dram_bytes_per_cycle") * clock,
        "noc_edge_bytes_per_s": field(hw, "tile_rows") * field(hw, "noc_link_bytes_per_cycle") * clock,
        "sram_bytes_per_s": tiles(hw) * sram_port_bytes_per_cycle(hw, native, True) * clock,
    }


#: units and descriptions of :func:`roofs`
ROOFS = {
    "peak_flops_per_s": ("FLOP/s", "peak compute of every PE array (a MAC is two FLOPs)"),
    "dram_bytes_per_s": ("B/s", "DRAM bandwidth"),
    "noc_edge_bytes_per_s": ("B/s", "bandwidth into the mesh: one link per tile row at the west edge"),
    "sram_bytes_per_s": ("B/s", "SRAM port bandwidth of every tile's PE array at the native word"),
}


def word_and_mac_energy(itemsize: Any, hw: Hardware, xp: Any = jnp) -> tuple[Any, Any]:
    """An op's word (its dtype's width cast down to the machine's widest native word; the native word when
    the width is unknown, 0) and the energy of one MAC at that width."""
    f64 = xp.float64
    native = xp.asarray(hw.word_bytes, f64)
    word = xp.where(itemsize > 0, xp.minimum(itemsize, native), native)
    mac_pj = xp.where(word <= 1, xp.asarray(hw.mac_pj_1, f64), xp.where(
        word <= 2, xp.asarray(hw.mac_pj_2, f64), xp.asarray(hw.mac_pj_4, f64) * xp.maximum(word / 4.0, 1.0) ** 2))
    return word, mac_pj


def accumulator_word(word: Any, hw: Hardware) -> Any:
    """Bytes of one partial sum of an op of ``word``: the machine's accumulator width (``accumulator_bytes``),
    never narrower than the word; 0, the word itself."""
    return jnp.maximum(word, field(hw, "accumulator_bytes"))


def word_scale(itemsize: Any, word: Any, xp: Any = jnp) -> Any:
    """Program bytes -> bytes in the machine's words (an unknown dtype counts as float32)."""
    return word / xp.where(itemsize > 0, itemsize, DEFAULT_ITEMSIZE)


def input_scales(ops: dict[str, Any], hw: Hardware, scale: Any, xp: Any = jnp) -> tuple[Any, Any, Any]:
    """Program bytes -> machine words for an op's inputs: ``(all inputs, lhs, rhs)``, each at its own width
    (``in_itemsize``, ``lhs_itemsize``, ``rhs_itemsize``: a bfloat16 matmul into float32, or a convert from
    bfloat16, reads two bytes per element, not the result's four cast down), cast down to the machine's widest
    native word as the result is; ``scale`` (the result's) where the width is unknown (0).

    >>> import numpy as np
    >>> from dfit_nb.sim import presets
    >>> ops = {"in_itemsize": np.array([2.0, 4.0, 0.0]), "lhs_itemsize": np.zeros(3), "rhs_itemsize": np.zeros(3)}
    >>> [v.tolist() for v in input_scales(ops, presets.get("tpu_v4"), np.full(3, 0.5), np)][0]   # 2-byte words
    [1.0, 0.5, 0.5]
    """
    def own(key: str) -> Any:
        item = xp.asarray(ops.get(key, 0.0), xp.float64)
        word, _ = word_and_mac_energy(item, hw, xp)  # the one cast-down rule, at the operand's width
        return xp.where(item > 0, word_scale(item, word, xp), scale)

    return own("in_itemsize"), own("lhs_itemsize"), own("rhs_itemsize")


def ceil_div(a: Any, b: Any, xp: Any = jnp) -> Any:
    """``ceil(a / b)`` exactly, for counts (integer-valued floats, ``b > 0``): the smallest integer ``q`` with
    ``q * b >= a``.

    XLA rewrites a division by a broadcast divisor into a multiplication by its reciprocal, so inside a compiled
    program ``1260 / 420`` can come out as ``3.0000000000000004`` and its ceiling as 4, depending on how the
    operands happen to broadcast (the mapping search's candidates against one op, a vmapped batch): the same op
    would then cost differently in the search and in the model. One step either way from the quotient's
    ceiling, checked with exact products, gives the true count whatever the division rounded to.

    >>> import jax.numpy as jnp
    >>> float(ceil_div(jnp.array([1260.0]), jnp.array(420.0))[0]), float(ceil_div(1261.0, 420.0, np))
    (3.0, 4.0)
    """
    q = xp.ceil(a / b)
    q = xp.where((q - 1.0) * b >= a, q - 1.0, q)
    return xp.where(q * b < a, q + 1.0, q)


def floor_div(a: Any, b: Any, xp: Any = jnp) -> Any:
    """``floor(a / b)`` exactly, for counts (see :func:`ceil_div`): the largest integer ``q`` with ``q * b <= a``.

    >>> float(floor_div(1260.0, 420.0, np)), float(floor_div(1259.0, 420.0, np))
    (3.0, 2.0)
    """
    q = xp.floor(a / b)
    q = xp.where((q + 1.0) * b <= a, q + 1.0, q)
    return xp.where(q * b > a, q - 1.0, q)


def fold_cycles(m: Any, k: Any, n: Any, df: Any, r: Any, c: Any, xp: Any = jnp, preload: Any = 0.0,
                passes: Any = 1.0) -> tuple[Any, Any, Any]:
    """Cycles of one GEMM on one R x C array: ``(cycles, row folds, col folds)``.

    ``df`` is a dataflow code (:data:`DATAFLOWS` index), elementwise.
    ``preload`` (``Hardware.fold_overlap``, 0..1): the share of each fold's
    fill (stationary load, skew fill and drain) hidden under the previous
    fold's stream. 0 is SCALE-Sim: folds run back to back. 1 is a
    double-buffered array: the fill is paid once per GEMM, and a fold lasts
    its stream, or, when a next fold follows, the ``R`` cycles of loading
    its stationary block if the stream is shorter. ``passes``: times each
    operand pair goes through the array (an op's math fidelity: Tenstorrent's
    LoFi 1, HiFi2 2, HiFi3 3, HiFi4 4), which lengthens every fold's stream.

    >>> fold_cycles(256.0, 256.0, 256.0, WS, 128.0, 128.0, np)[0]   # 2 x 2 folds of 2R + C + T - 2
    np.float64(2551.0)
    >>> fold_cycles(256.0, 256.0, 256.0, WS, 128.0, 128.0, np, preload=1.0)[0]   # 4 x T + one fill
    np.float64(1405.0)
    """
    sr = xp.where(df == OS, m, k)
    sc = xp.where(df == IS, m, n)
    t = xp.where(df == WS, m, xp.where(df == OS, k, n)) * passes
    fr, fc = ceil_div(sr, r, xp), ceil_div(sc, c, xp)
    fill = xp.where(df == OS, r + c - 2, 2 * r + c - 2)
    folds = fr * fc
    hidden = fill + xp.maximum(folds - 1.0, 0.0) * xp.maximum(r - t, 0.0)  # one fill; short streams wait for loads
    # SCALE-Sim reports the 0-based index of the last cycle as "Total Cycles": one less than
    # folds x per-fold cycles. We keep its convention so its figures compare exactly.
    return folds * (t + (1.0 - preload) * fill) + preload * hidden - 1, fr, fc


def gemm_sram_elements(m: Any, k: Any, n: Any, df: Any, r: Any, c: Any, xp: Any = jnp) -> dict[str, Any]:
    """SRAM element traffic of one GEMM per operand (see the module docstring)."""
    fold_n_c = ceil_div(n, c, xp)
    fold_k_r = ceil_div(k, r, xp)
    inp = xp.where(df == IS, m * k, m * k * fold_n_c)
    wgt = xp.where(df == WS, k * n, xp.where(df == OS, k * n * ceil_div(m, r, xp), k * n * ceil_div(m, c, xp)))
    out_w = xp.where(df == OS, m * n, m * n * fold_k_r)
    out_r = xp.where(df == OS, 0.0, m * n * (fold_k_r - 1))
    return {"input": inp, "weight": wgt, "output_w": out_w, "output_r": out_r}


def output_blocked_refetch(rows: Any, m: Any, k: Any, n: Any, word: Any, acc: Any, buf_in: Any, buf_w: Any,
                           buf_out: Any, xp: Any = jnp) -> tuple[Any, Any]:
    """DRAM bytes one ``m x k x n`` GEMM re-reads under an output-blocked schedule: ``(input, weight)``.

    The results are computed one ``bm x bn`` block at a time, the block's partial sums (``acc`` bytes each) held
    in ``buf_out`` bytes, while the block's ``bm`` rows of the input and ``bn`` columns of the weights stream past
    over the whole reduction. ``rows`` bounds ``bm`` (the rows whose partial sums live in SRAM at once: ``m``, or
    the array's rows when the PEs hold them). The block is square where the matrix allows (for a given block
    area, that re-reads least), the blocks' loop order the cheaper of the two: with row blocks outside, a row
    block of the input (``bm x k``) stays resident while it fits ``buf_in`` and the weights beyond ``buf_w``
    are read once more per further row block; with column blocks outside, the other way round. Block counts
    are real-valued (``m / bm``), so the bytes grow smoothly with the sizes and stay differentiable. A GEMM
    whose results all fit re-reads nothing.

    >>> import numpy as np
    >>> # an LM head on TPU v6e, 4096 x 4096 x 64128 per MXU, 8 MiB of accumulators: 1448 x 1448 blocks; column
    >>> # blocks outside keep each 11.9 MB block of weights resident, and the 33.5 MB input, 21 MB over its
    >>> # 12 MiB buffer, has that part read again for each of the 43.3 further column blocks
    >>> i, w = output_blocked_refetch(4096.0, 4096.0, 4096.0, 64128.0, 2.0, 4.0, 12 * 2**20, 12 * 2**20,
    ...                               8 * 2**20, np)
    >>> round(float(i) / 1e9, 3), float(w)
    (0.908, 0.0)
    """
    area = buf_out / acc  # partial sums the buffer holds
    bm = xp.minimum(xp.sqrt(area), rows)
    bn = xp.minimum(area / xp.maximum(bm, 1e-30), n)
    bm = xp.clip(area / xp.maximum(bn, 1e-30), 1.0, rows)
    bn = xp.maximum(bn, 1.0)
    row_blocks, col_blocks = xp.maximum(m / bm, 1.0), xp.maximum(n / bn, 1.0)
    one_in, one_w = m * k * word, k * n * word
    rows_outer = (xp.maximum(bm * k * word - buf_in, 0.0) * row_blocks * (col_blocks - 1.0),
                  xp.maximum(one_w - buf_w, 0.0) * (row_blocks - 1.0))
    cols_outer = (xp.maximum(one_in - buf_in, 0.0) * (col_blocks - 1.0),
                  xp.maximum(bn * k * word - buf_w, 0.0) * col_blocks * (row_blocks - 1.0))
    first = rows_outer[0] + rows_outer[1] <= cols_outer[0] + cols_outer[1]
    return xp.where(first, rows_outer[0], cols_outer[0]), xp.where(first, rows_outer[1], cols_outer[1])


def _pieces(ops: dict[str, Any], layout: Any, gy: Any, gx: Any) -> dict[str, Any]:
    """Per-virtual-tile GEMM piece: rows, bt GEMMs of mt x kt x nt."""
    m, k, n, b = ops["m"], ops["k"], ops["n"], jnp.maximum(ops["batch"], 1.0)
    rows = b * m
    rows_t = ceil_div(rows, gy)
    mt = jnp.minimum(rows_t, m)
    bt = ceil_div(rows_t, jnp.maximum(m, 1.0))
    mk = layout == MK
    kt = jnp.where(mk, ceil_div(k, gx), k)
    nt = jnp.where(mk, n, ceil_div(n, gx))
    return {"rows": rows, "rows_t": rows_t, "mt": mt, "bt": bt, "kt": kt, "nt": nt}


def model(ops: dict[str, Any], hw: Hardware, df: Any, layout: Any, gy: Any, gx: Any, alloc: Any) -> dict[str, Any]:
    """Cost of each op (one execution) under a mapping, folded onto ``alloc`` physical tiles.

    ``ops`` holds float64 arrays (see :func:`dfit_nb.sim._prepare.prepare`): the
    GEMM view (``m``, ``k``, ``n``, ``batch``, ``gemm``), ``flops``,
    ``transcendentals``, ``elems_in``, ``elems_out``, ``itemsize``, operand
    bytes (``lhs_bytes``, ``rhs_bytes``, ``ext_bytes``, ``bytes_written``, in
    program bytes), the fractions of the operands producers feed (``fed0``,
    ``fed1``), what an earlier op of a fused kernel already brought on chip
    of the program arguments it reads (``ext_shared`` bytes, ``lhs_shared``,
    ``rhs_shared`` flags; optional), for a kernel priced alone what its own
    producers feed (``kernel_fed0``, ``kernel_fed1``, ``kernel_fed_bytes``;
    optional) and ``has_consumer``. Every argument broadcasts. Returns per-op
    arrays: the mapping (``layout``, ``gy``, ``gx``, ``virtual_tiles``,
    ``tiles``, ``fold``, ``spilled_bytes``), ``compute_v`` and ``sram_cycles_v``
    per virtual tile, ``dram_bytes``, the NoC bytes the scheduler moves
    (``noc_in`` with multicast copies, ``noc_unique_in`` once per link,
    ``noc_out``, ``psum_noc``), bytes per operand (``sram_reads_input``, ...,
    ``dram_writes_output``), bytes by tensor and level (``traffic``, shape
    ``(3, 3, ...)``: :data:`TENSORS` x :data:`LEVELS`) and energy by level
    (``energy_<level>_pj`` for :data:`ENERGY_LEVELS`, and ``energy_compute_pj`` = MAC + RF).
    """
    r, c = field(hw, "pe_rows"), field(hw, "pe_cols")
    lanes = field(hw, "vector_lanes")
    gemm = ops["gemm"] > 0
    word, mac_pj = word_and_mac_energy(ops["itemsize"], hw)
    scale = word_scale(ops["itemsize"], word)
    in_scale, lhs_scale, rhs_scale = input_scales(ops, hw, scale)
    acc = accumulator_word(word, hw)
    gx = jnp.where(gemm, gx, 1.0)
    v = gy * gx
    u = jnp.maximum(jnp.minimum(v, alloc), 1.0)
    fold = ceil_div(v, u)
    p = _pieces(ops, layout, gy, gx)
    mk = (layout == MK) & gemm

    # ---- compute: per virtual tile
    one, _, _ = fold_cycles(p["mt"], p["kt"], p["nt"], df, r, c, preload=field(hw, "fold_overlap"),
                            passes=optional(ops, "passes"))
    # K split: each grid row reduces gx partial-sum pieces on its vector units (a log2(gx)-deep tree)
    reduce_cycles = jnp.where(mk & (gx > 1), ceil_div(p["rows_t"] * p["nt"], lanes) * jnp.log2(gx), 0.0)
    gemm_v = p["bt"] * one + reduce_cycles
    # a depthwise convolution is one (M x taps)(taps x 1) product per channel: the array would hold one channel's
    # taps in one column, channel after channel, while each lane of the vector unit can do one output element's
    # multiply-adds (one per lane-step, a fused multiply-add). The compiler takes the faster unit.
    depthwise_v = ceil_div(p["bt"] * p["mt"] * p["kt"] * p["nt"], lanes) / field(hw, "vector_rate") + reduce_cycles
    gemm_v = jnp.where(optional(ops, "depthwise") > 0, jnp.minimum(gemm_v, depthwise_v), gemm_v)
    kept = kept_share(ops)  # 0 for an op folded into its kernel's indexing (a reshape, a broadcast)
    work = vector_work(ops, hw) * kept  # lane-operations: the register-file traffic of a vector op
    # whole lane-steps of arithmetic, each issuing vector_rate operations per lane (a rate, so that a fit can
    # move it), then whole lane-steps of transcendentals of transcendental_cycles each: a factor outside the
    # ceiling, so that a fit can move it too (inside, its gradient would be zero)
    steps = ceil_div(jnp.maximum(ops["flops"], ops["elems_out"]) * kept, lanes * v) + field(
        hw, "transcendental_cycles") * ceil_div(ops["transcendentals"] * kept, lanes * v)
    vector_v = steps / field(hw, "vector_rate") + reduction_tree_cycles(ops, hw, v) * kept
    compute_v = jnp.where(gemm, gemm_v, vector_v)
    macs = jnp.where(gemm, jnp.maximum(ops["batch"], 1.0) * ops["m"] * ops["k"] * ops["n"], 0.0)

    # ---- SRAM (bytes, whole op)
    e = gemm_sram_elements(p["mt"], p["kt"], p["nt"], df, r, c)
    per_v = {key: val * p["bt"] * word for key, val in e.items()}
    sram_in = jnp.where(gemm, per_v["input"] * v, ops["elems_in"] * kept * word)
    sram_w = jnp.where(gemm, per_v["weight"] * v, 0.0)
    final_out = jnp.where(gemm, p["rows"] * ops["n"] * word, ops["elems_out"] * kept * word)
    # partial sums (every output write but the final one, every output read) move at the accumulator's width;
    # written so that an accumulator as wide as the word (wide = 1) leaves every figure exactly as it was
    wide = acc / word
    out_w = per_v["output_w"] * v
    sram_out_w = jnp.where(gemm, out_w + (out_w - final_out) * (wide - 1.0), ops["elems_out"] * kept * word)
    sram_out_r = jnp.where(gemm, per_v["output_r"] * v * wide, 0.0)

    # ---- what each tile is handed (compulsory, with multicast copies) and what does not fit
    half = 0.5  # of each partition: the other half prefetches (double buffering)
    in_piece = p["bt"] * p["mt"] * p["kt"] * word
    w_piece = p["bt"] * p["kt"] * p["nt"] * word
    deliv_in = in_piece * v
    deliv_w = w_piece * v
    # blocked reuse: the compiler tiles the loop, holding a block of one operand while the other streams past it.
    # Of an operand larger than its buffer, the part that fits stays resident and the rest is re-read from DRAM
    # once per further block of the other operand; of the two loop orders the cheaper is taken. Refetch so grows
    # smoothly (piecewise linearly) with each operand's size over its buffer, and is zero while one of them fits.
    one_in, one_w = p["mt"] * p["kt"] * word, p["kt"] * p["nt"] * word  # one GEMM's pieces
    buf_in, buf_w = half * field(hw, "sram_input_bytes"), half * field(hw, "sram_weight_bytes")
    input_again = jnp.maximum(one_in - buf_in, 0.0) * (jnp.maximum(one_w / buf_w, 1.0) - 1.0)
    weight_again = jnp.maximum(one_w - buf_w, 0.0) * (jnp.maximum(one_in / buf_in, 1.0) - 1.0)
    input_outer = input_again <= weight_again
    # tiles that hold the same piece of an operand take it from one DRAM read, multicast, as they receive it the
    # first time: the input's row block is shared along a grid row unless K is split there (mk), the weights'
    # column block along a grid column, unless each GEMM of a batch has weights of its own (attention's per-head
    # operands, a grouped convolution's filters) and the grid's rows hold different GEMMs. So the distinct pieces
    # re-read are gy (or every tile's, mk) and gx (times the grid rows' distinct GEMMs, up to the batch).
    own_weights = (ops["batch"] > 1) & (ops["rhs_bytes"] * rhs_scale > 1.5 * ops["k"] * ops["n"] * word)
    pieces_in = jnp.where(mk, v, gy)
    pieces_w = gx * jnp.where(own_weights, jnp.minimum(gy, jnp.maximum(ops["batch"], 1.0)), 1.0)
    refetch_in = jnp.where(gemm & input_outer, input_again, 0.0) * p["bt"] * pieces_in
    refetch_w = jnp.where(gemm & ~input_outer, weight_again, 0.0) * p["bt"] * pieces_w
    # partial sums beyond half the output partition (OS keeps its partial sums in the PEs): the compiler either
    # spills that share to DRAM (written and read back per reduction fold) or blocks the rows so each block's
    # sums fit, streaming the weights again per further row block (from SRAM while they fit their buffer, the
    # overflow from DRAM). It takes the cheaper; both grow smoothly with the partial sums' size over the buffer.
    psum_rows = jnp.where(df == OS, jnp.minimum(p["mt"], r), p["mt"])
    psum_piece = psum_rows * p["nt"] * acc
    buf_out = half * field(hw, "sram_output_bytes")
    spill_share = jnp.where(gemm, jnp.clip(1.0 - buf_out / jnp.maximum(psum_piece, 1e-30), 0.0, 1.0), 0.0)
    spill_w = spill_share * jnp.maximum(sram_out_w - final_out, 0.0)
    spill_r = spill_share * sram_out_r
    weight_per_block = jnp.where(gemm, jnp.maximum(one_w - buf_w, 0.0)
                                 * (jnp.maximum(psum_piece / buf_out, 1.0) - 1.0), 0.0) * p["bt"] * pieces_w
    spill_psums = spill_w + spill_r <= weight_per_block
    spill_w, spill_r = jnp.where(spill_psums, spill_w, 0.0), jnp.where(spill_psums, spill_r, 0.0)
    refetch_w = refetch_w + jnp.where(spill_psums, 0.0, weight_per_block)
    # every byte read from DRAM passes through SRAM: blocking never re-reads more than refetching on every fold
    refetch_in = jnp.minimum(refetch_in, jnp.maximum(sram_in - deliv_in, 0.0))
    refetch_w = jnp.minimum(refetch_w, jnp.maximum(sram_w - deliv_w, 0.0))
    # the third schedule a compiler has: output blocking. It finishes one bm x bn block of results (its partial
    # sums held in half the output partition) before the next, streaming that block's rows of the input and
    # columns of the weights past it over the whole reduction; nothing spills. A square block re-reads least;
    # the loop over row blocks outside keeps a row block of the input resident while it fits its buffer, the
    # loop over column blocks outside keeps a column block of the weights. A re-read the array's folds make
    # anyway (the moving operand, read from SRAM once per fold of the other) is within its SRAM reads; one of
    # the stationary operand (the weights of ws, reloaded per row block) adds SRAM reads beyond one pass.
    blocked_in, blocked_w = output_blocked_refetch(psum_rows, p["mt"], p["kt"], p["nt"], word, acc,
                                                    buf_in, buf_w, buf_out)
    blocked_in = jnp.where(gemm, blocked_in, 0.0) * p["bt"] * pieces_in
    blocked_w = jnp.where(gemm, blocked_w, 0.0) * p["bt"] * pieces_w
    block_outputs = blocked_in + blocked_w < refetch_in + refetch_w + spill_w + spill_r
    refetch_in = jnp.where(block_outputs, blocked_in, refetch_in)
    refetch_w = jnp.where(block_outputs, blocked_w, refetch_w)
    spill_w, spill_r = jnp.where(block_outputs, 0.0, spill_w), jnp.where(block_outputs, 0.0, spill_r)
    sram_in = sram_in + jnp.where(block_outputs, jnp.maximum(blocked_in - (sram_in - deliv_in), 0.0), 0.0)
    sram_w = sram_w + jnp.where(block_outputs, jnp.maximum(blocked_w - (sram_w - deliv_w), 0.0), 0.0)
    psum_spill = spill_w + spill_r
    psum_noc = jnp.where(mk, (gx - 1.0) * p["rows"] * ops["n"] * acc, 0.0)

    # operands from outside the program's ops (weights, program inputs) come from DRAM; the fractions
    # fed by producers arrive by retile (scheduler) or, when the producer spilled, from DRAM too. Inside a fused
    # kernel, an input an earlier op of the kernel read is on chip already; a kernel priced alone
    # (dfit_nb.sim._prepare.kernel_alone) reads what its own producers feed from DRAM where it runs unfused
    fused = fused_in_kernel(ops, hw)
    # a kernel that cannot keep its rows streams its inputs again after each reduction over them (looped)
    looped = row_rereads(ops, hw, fused, in_scale)
    refetch_in, sram_in = refetch_in + looped, sram_in + looped
    on = jnp.where(fused, 1.0, 0.0)
    ext0 = jnp.maximum(1.0 - ops["fed0"] + (1.0 - on) * ops.get("kernel_fed0", 0.0)
                       - on * ops.get("lhs_shared", 0.0), 0.0)
    ext1 = jnp.maximum(1.0 - ops["fed1"] + (1.0 - on) * ops.get("kernel_fed1", 0.0)
                       - on * ops.get("rhs_shared", 0.0), 0.0)
    ext_bytes = jnp.maximum(ops["ext_bytes"] + (1.0 - on) * ops.get("kernel_fed_bytes", 0.0)
                            - on * ops.get("ext_shared", 0.0), 0.0)
    ext_in_dram = jnp.where(gemm, ext0 * ops["lhs_bytes"] * lhs_scale, ext_bytes * in_scale)
    ext_w_dram = jnp.where(gemm, ext1 * ops["rhs_bytes"] * rhs_scale, 0.0)
    # a result stays on chip for its consumers when its pieces fit half the output partitions of its tiles, when
    # they all run in its fused kernel, or when the op table says it stays there (out_on_chip: a measured op whose
    # result was kept sharded in SRAM); program outputs and results that do not fit are written to DRAM
    out_onchip = ((ops["has_consumer"] > 0) & (
        ops["bytes_written"] * scale / u <= half * field(hw, "sram_output_bytes"))) | (
        fused & (ops.get("internal", 0.0) > 0)) | (optional(ops, "out_on_chip") > 0)
    # a program output leaves the chip whatever else reads it
    out_dram = jnp.where(out_onchip & (ops.get("is_output", 0.0) <= 0), 0.0, ops["bytes_written"] * scale)
    spilled = refetch_in + refetch_w + psum_spill
    dram_bytes = ext_in_dram + ext_w_dram + out_dram + spilled
    multi = multi_tile(hw)
    noc_in = jnp.where(multi, jnp.where(gemm, ext0 * deliv_in + ext1 * deliv_w, ext_in_dram)
                       + refetch_in + refetch_w + spill_r, 0.0)
    noc_out = jnp.where(multi, out_dram + spill_w, 0.0)
    # a piece several tiles share is multicast: it crosses each link once, so links carry the unique bytes
    noc_unique_in = jnp.where(multi, ext_in_dram + ext_w_dram + refetch_in + refetch_w + spill_r, 0.0)

    # ---- traffic by tensor (activation, weight, psum) and level (sram, noc, dram)
    rhs_is_weight = jnp.where(gemm, ext1, 0.0)
    sram_psum = jnp.where(gemm, (sram_out_w - final_out) + sram_out_r, 0.0)
    traffic = jnp.stack([
        jnp.stack([sram_in + sram_w * (1 - rhs_is_weight) + final_out,
                   jnp.where(multi, jnp.where(gemm, ext0 * deliv_in, ext_in_dram) + refetch_in + out_dram, 0.0),
                   ext_in_dram + refetch_in + out_dram]),
        jnp.stack([sram_w * rhs_is_weight,
                   jnp.where(multi, ext1 * deliv_w + refetch_w, 0.0),
                   ext_w_dram + refetch_w]),
        jnp.stack([sram_psum, psum_noc + jnp.where(multi, psum_spill, 0.0), psum_spill]),
    ])
    # tensors that are not a GEMM's external rhs but still come from outside (LayerNorm scale, bias) count as
    # weights at the DRAM level for non-GEMM ops
    nongemm_w = jnp.where(gemm, 0.0, ext_in_dram)
    traffic = traffic.at[0, 2].add(-nongemm_w).at[1, 2].add(nongemm_w)

    sram_bytes = sram_in + sram_w + sram_out_w + sram_out_r
    e_noc_hop = field(hw, "noc_pj_per_byte_hop")
    energy = {
        "mac": macs * mac_pj,
        "rf": jnp.where(gemm, 3.0 * macs, work) * word * field(hw, "rf_pj_per_byte"),
        "sram": sram_bytes * field(hw, "sram_pj_per_byte"),
        # DRAM traffic delivered from the west edge travels avg_hops (multicast pieces once per link); the
        # K-split reduction moves its partial sums one hop per step
        "noc": ((noc_unique_in + noc_out) * avg_hops(hw) + psum_noc) * e_noc_hop,
        "dram": dram_bytes * field(hw, "dram_pj_per_byte"),
    }
    sram_bw = sram_port_bytes_per_cycle(hw, word, gemm)
    resident = jnp.where(gemm, jnp.minimum(in_piece, field(hw, "sram_input_bytes"))
                         + jnp.minimum(w_piece, field(hw, "sram_weight_bytes"))
                         + jnp.minimum(p["bt"] * psum_rows * p["nt"] * acc, field(hw, "sram_output_bytes")),
                         jnp.minimum((ops["elems_in"] + ops["elems_out"]) * word / v, sram_per_tile(hw)))
    zero = 0.0 * (ops["m"] + df + layout + gy + alloc)
    out = {
        "layout": jnp.where(gemm, layout, 0.0), "gy": gy, "gx": gx, "virtual_tiles": v, "tiles": u, "fold": fold,
        "spilled_bytes": spilled, "compute_v": compute_v, "macs": macs, "word": word,
        "sram_bytes": sram_bytes, "sram_cycles_v": sram_bytes / (v * sram_bw),
        "dram_bytes": dram_bytes, "dram_cycles": dram_transfer_cycles(dram_bytes, hw),
        "noc_in": noc_in, "noc_unique_in": noc_unique_in, "noc_out": noc_out, "psum_noc": psum_noc,
        # double-buffered blocks of operands a virtual tile streams through half its buffers (see body_cycles)
        "blocks_v": jnp.where(gemm, jnp.maximum((in_piece + w_piece) / (buf_in + buf_w), 1.0),
                              jnp.maximum(ops["elems_in"] * word / v / (0.5 * sram_per_tile(hw)), 1.0)),
        "resident_bytes": resident, "final_out": final_out, "out_onchip": out_onchip * 1.0,
        "fixed_cycles": fixed_cycles(ops, hw, fused),
        "kernel": ops.get("kernel", 0.0) + 0.0 * gy, "fused": fused * 1.0,
        "sram_reads_input": sram_in, "sram_reads_weight": sram_w, "sram_reads_output": sram_out_r,
        "sram_writes_output": sram_out_w,
        "dram_reads_input": ext_in_dram + refetch_in, "dram_reads_weight": ext_w_dram + refetch_w,
        # the weights (and, for other ops, the parameters they read) loaded once per execution: what stays in SRAM
        # between streamed inferences on a layer-pipelined machine (dfit_nb.sim.schedule, "Streaming")
        "weight_dram_bytes": ext_w_dram + nongemm_w,
        "dram_reads_output": spill_r, "dram_writes_output": out_dram + spill_w,
        **{f"energy_{key}_pj": val for key, val in energy.items()},
        "energy_compute_pj": energy["mac"] + energy["rf"],
        # SRAM + DRAM energy by operand (the operand view of the same bytes)
        "energy_input_pj": sram_in * field(hw, "sram_pj_per_byte")
        + (ext_in_dram + refetch_in) * field(hw, "dram_pj_per_byte"),
        "energy_weight_pj": sram_w * field(hw, "sram_pj_per_byte")
        + (ext_w_dram + refetch_w) * field(hw, "dram_pj_per_byte"),
        "energy_output_pj": (sram_out_r + sram_out_w) * field(hw, "sram_pj_per_byte")
        + (spill_r + out_dram + spill_w) * field(hw, "dram_pj_per_byte"),
    }
    out = {key: val + zero for key, val in out.items()}
    out["traffic"] = traffic + zero
    return out


def pipeline_demand(ops: dict[str, Any], hw: Hardware) -> tuple[Any, Any]:
    """What a layer-pipelined machine allocates tiles by: each op's work in array (or vector-unit) cycles over all
    its executions, and the tiles its weights and result need (each fits its tiles' SRAM: weights their
    partitions, the result half its output partitions, the other half prefetching)."""
    gemm = ops["gemm"] > 0
    macs = jnp.maximum(ops["batch"], 1.0) * ops["m"] * ops["k"] * ops["n"]
    kept = kept_share(ops)
    vector = jnp.maximum(vector_work(ops, hw) * kept, ops["elems_out"] * kept)
    work = jnp.where(gemm, macs / (field(hw, "pe_rows") * field(hw, "pe_cols")),
                     vector / field(hw, "vector_lanes")) * ops["count"]
    word, _ = word_and_mac_energy(ops["itemsize"], hw)
    scale = word_scale(ops["itemsize"], word)
    weights = jnp.where(gemm, (1.0 - ops["fed1"]) * ops["rhs_bytes"] * input_scales(ops, hw, scale)[2], 0.0)
    outs = ceil_div(ops["bytes_written"] * scale, 0.5 * field(hw, "sram_output_bytes"))
    return work, jnp.maximum(ceil_div(weights, field(hw, "sram_weight_bytes")), outs)


def streamed(m: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    """An op's :func:`model` outputs for one more inference on a layer-pipelined machine: its weights (and the
    parameters a non-GEMM op reads) stay in its tiles' SRAM between inferences where they fit its ``tiles`` weight
    partitions, so they cross neither DRAM nor the mesh again; everything else moves as in the first inference.
    The one rule the schedule's stage times (:mod:`dfit_nb.sim.schedule`) and the mapping search of a
    layer-pipelined op (:func:`dfit_nb.sim.mapping.search`) both read."""
    kept = jnp.where(m["weight_dram_bytes"] <= m["tiles"] * field(hw, "sram_weight_bytes"), m["weight_dram_bytes"], 0.0)
    return {**m, "dram_bytes": m["dram_bytes"] - kept, "noc_unique_in": jnp.maximum(m["noc_unique_in"] - kept, 0.0)}


def noc_cycles(max_link_bytes: Any, far: Any, hw: Hardware) -> Any:
    """Cycles to push ``max_link_bytes`` through the busiest link and reach the column ``far`` hops out."""
    return jnp.where(max_link_bytes > 0,
                     max_link_bytes / field(hw, "noc_link_bytes_per_cycle") + field(hw, "noc_hop_cycles") * far, 0.0)


def dram_transfer_cycles(nbytes: Any, hw: Hardware) -> Any:
    """Cycles the DRAM channel needs for ``nbytes`` at full rate (the latency is paid once, after)."""
    return nbytes / field(hw, "dram_bytes_per_cycle")


def op_body(m: dict[str, Any], count: Any, extra_dram: Any, row_share: Any, col_used: Any, hw: Hardware,
            cols_at: Any) -> dict[str, Any]:
    """The body of one op (all ``count`` executions) on its tiles: compute, SRAM, NoC and DRAM demands.

    ``m``: one op's :func:`model` outputs (scalars); ``extra_dram``: bytes of
    producers' results that did not stay on chip (read from DRAM, delivered
    like other DRAM bytes); ``row_share`` ``(rows,)``: the op's share of work
    on each tile row; ``col_used`` ``(cols,)``: whether a column holds a tile of
    the op; ``cols_at``: column indices. Returns ``compute``, ``sram``,
    ``noc_cycles``, ``noc_links`` (bytes per link group: row in, row out, then
    ``2 x cols`` column groups, zero here) and ``dram_bytes``.
    """
    d = body_demands(m, count, extra_dram, hw)
    noc_links = jnp.concatenate([row_share * d["noc_in"], row_share * d["noc_out"],
                                 jnp.zeros(2 * cols_at.shape[0], _f64)])
    far = jnp.max(jnp.where(col_used, cols_at + 1.0, 0.0))
    # the busiest link from the row groups themselves: a maximum over noc_links would include the column groups'
    # zeros, and XLA splits that maximum into one over a broadcast constant, which it then folds at compile time
    # (over a second on a 64-column grid's cost table)
    busiest = jnp.maximum(jnp.max(row_share * d["noc_in"]), jnp.max(row_share * d["noc_out"]))
    return {**d, "noc_cycles": noc_cycles(jnp.maximum(busiest, 0.0), far, hw), "noc_links": noc_links}


def body_demands(m: dict[str, Any], count: Any, extra_dram: Any, hw: Hardware) -> dict[str, Any]:
    """What an op's body asks of its busiest tile and of the mesh and DRAM, wherever it is placed: ``compute`` and
    ``sram`` cycles, ``noc_in`` / ``noc_out`` bytes through the west edge (before the placement spreads them over
    rows) and ``dram_bytes``, all ``count`` executions (see :func:`op_body`)."""
    top = ceil_div(m["virtual_tiles"], m["tiles"])  # virtual tiles on the busiest tile
    return {
        "compute": top * m["compute_v"] * count,
        "sram": top * m["sram_cycles_v"] * count,
        "noc_in": jnp.where(multi_tile(hw), m["noc_unique_in"] + extra_dram, 0.0) * count,
        "noc_out": (m["noc_out"] + m["psum_noc"]) * count,
        "dram_bytes": (m["dram_bytes"] + extra_dram) * count,
        "blocks": top * m["blocks_v"] * count,  # the executions of a loop pipeline with each other
        "fixed": m["fixed_cycles"] * count,  # paid once per execution, whatever the tiles
    }


def alone_cycles(body: dict[str, Any], hw: Hardware, ideal: bool = False, latency_share: Any = 1.0
                 ) -> dict[str, Any]:
    """An op's cycles when nothing else runs (the DRAM channel free): :func:`body_cycles` of its demands plus its
    fixed overhead.

    ``ideal``: memories never stall (SCALE-Sim's computed-bandwidth mode): compute only. ``latency_share``: the
    share of the DRAM latency it waits (0 for the ops of a fused kernel but the first, :func:`kernel_overlap`).
    """
    compute = body["compute"]
    dram = jnp.where(body["dram_bytes"] > 0, dram_transfer_cycles(body["dram_bytes"], hw)
                     + field(hw, "dram_latency_cycles") * latency_share, 0.0)
    if ideal:
        return {"cycles": compute, "dram_cycles": dram}
    busy = body_cycles(compute, body["sram"], body["noc_cycles"], dram, hw, body["blocks"])
    return {"cycles": busy + overhead_cycles(busy, body["fixed"]), "dram_cycles": dram}


def body_cycles(compute: Any, sram: Any, noc: Any, dram: Any, hw: Hardware, blocks: Any = 1.0) -> Any:
    """How an op's demands combine into its busy time.

    The on-tile work (PE array or vector unit, and the SRAM ports that feed it
    as it runs) and the off-tile memory time (DRAM and NoC delivery, themselves
    a pipeline) overlap by double buffering: while one block of operands (half
    the buffers) is computed on, the next is loaded. Over ``blocks`` blocks the
    pipeline takes the longer of the two plus its fill and drain, the shorter
    one's share of one block: ``max + min / blocks``. ``memory_overlap`` is the
    share of that fill and drain hidden under neighbouring ops (1, the default:
    all of it, the slowest demand alone sets the time; 0: a lone op, such as
    one timed on its own, pays it, all of the shorter demand when one block
    holds the op).
    """
    on_tile, off_tile = jnp.maximum(compute, sram), jnp.maximum(noc, dram)
    exposed = (1.0 - field(hw, "memory_overlap")) * jnp.minimum(on_tile, off_tile) / jnp.maximum(blocks, 1.0)
    return jnp.maximum(on_tile, off_tile) + exposed


def fixed_cycles(ops: dict[str, Any], hw: Hardware, fused: Any = False) -> Any:
    """The fixed cost of one execution of each op: ``op_overhead_cycles`` once per kernel (paid by the kernel's
    first op that does work, ``payer``; every op that does work pays it when its kernel runs unfused, ``fused``
    false; an op folded into a kernel's indexing, ``free``, never does), plus ``short_reduction_cycles`` for a GEMM
    whose reduction dimension is its shortest (``K <= min(M, N)``). Without kernel columns every op is its own
    kernel."""
    short = (ops["gemm"] > 0) & (ops["k"] <= jnp.minimum(ops["m"], ops["n"]))
    pays = jnp.where(fused, ops.get("payer", 1.0) > 0, ops.get("free", 0.0) <= 0)
    return (jnp.where(pays, field(hw, "op_overhead_cycles"), 0.0)
            + jnp.where(short, field(hw, "short_reduction_cycles"), 0.0))


def reduction_tree_cycles(ops: dict[str, Any], hw: Hardware, v: Any) -> Any:
    """Cycles each of ``v`` virtual tiles spends on the trees that reduce rows across its vector unit's lanes: an
    op reducing rows of ``L = row_reduce`` elements (0: none) lays each row over ``w = min(L, vector_lanes)``
    lanes, so a lane-step holds ``vector_lanes / w`` rows and a tile runs ``ceil(rows x w / (vector_lanes x v))``
    of them, each ``ceil(log2(w))`` levels of ``reduction_step_cycles``. Accumulating a lane's own elements is its
    arithmetic (:func:`vector_work`); reducing over a major axis needs no tree (each lane owns its outputs)."""
    lanes = field(hw, "vector_lanes")
    length = optional(ops, "row_reduce")
    width = jnp.clip(jnp.minimum(length, lanes), 1.0, None)
    steps = ceil_div(jnp.where(length > 1, ops["elems_out"], 0.0) * width, lanes * v)
    return steps * jnp.ceil(jnp.log2(width)) * field(hw, "reduction_step_cycles")


def kept_share(ops: dict[str, Any]) -> Any:
    """1 for an op that does its own work; 0 for one folded into its kernel's indexing (``free``: a reshape,
    broadcast or convert under a fusion mode, see :mod:`dfit_nb.sim.kernels`)."""
    return jnp.where(ops.get("free", 0.0) > 0, 0.0, 1.0)


def vector_work(ops: dict[str, Any], hw: Hardware) -> Any:
    """Vector-unit work of one execution of a non-GEMM op, in lane-operations: its FLOPs plus
    ``transcendental_cycles`` lane-cycles per transcendental (exp, tanh, rsqrt, erf, ...: a polynomial or table
    evaluation on the lane)."""
    return ops["flops"] + field(hw, "transcendental_cycles") * ops["transcendentals"]


def kernel_fits(ops: dict[str, Any], hw: Hardware) -> Any:
    """Whether each op's kernel keeps its intermediates on chip.

    A fused kernel streams its iteration space through a tile in blocks: the array's output tile (``R x C``
    elements) or a step of the vector unit (``vector_lanes``), whichever is larger, double-buffered. Its working
    set is a block of each of its intermediates (``kernel_ws``: the results consumed only inside the kernel, one
    machine word per element each), and it must fit one tile's SRAM; a kernel that chains two matrix products
    also keeps the second one's weight on chip (``kernel_weight`` elements, which every streamed block of rows
    meets), spread over the chip's tiles as any weight is, so it must fit the chip's SRAM. A kernel that does not
    fit runs as unfused ops (the fusion ends where its working set exceeds the SRAM). Whole tensors are never
    held: no kernel the rules make needs a value after the block that made it (a reduction roots its kernel, or
    keeps just its rows, :func:`rows_kept`), so the tensors' size does not matter, only how many intermediates
    each element carries and a chained weight.
    """
    word = field(hw, "word_bytes")
    weight = ops.get("kernel_weight", 0.0) * word
    return (2.0 * _kernel_block(ops, hw) * word <= sram_per_tile(hw)) & (weight <= sram_per_tile(hw) * tiles(hw))


def _kernel_block(ops: dict[str, Any], hw: Hardware, xp: Any = jnp) -> Any:
    """Elements of one streamed block of each of a kernel's intermediates (see :func:`kernel_fits`)."""
    block = xp.maximum(field(hw, "vector_lanes", xp), field(hw, "pe_rows", xp) * field(hw, "pe_cols", xp))
    return block * ops.get("kernel_ws", 0.0)


def rows_kept(ops: dict[str, Any], hw: Hardware, xp: Any = jnp) -> Any:
    """Whether each op's kernel keeps on chip the rows it normalises (a softmax's, a layer norm's: ``kernel_row``
    elements, a row of each reduction's input, reused after the reduction; rule 9 of :mod:`dfit_nb.sim.kernels`).

    The rows fit ``row_buffer_bytes`` (a GPU thread block's registers: PyTorch's one-pass softmax holds rows of up
    to 1,024 elements) or, where the machine leaves that 0, one tile's SRAM beside the kernel's double-buffered
    blocks. A kernel whose rows do not fit still runs fused, as a looped reduction: it streams its inputs again
    for every reduction over the rows (:func:`row_rereads`), as PyTorch's multi-pass softmax and a compiler's
    looped reductions do, and keeps its other intermediates on chip."""
    word = field(hw, "word_bytes", xp)
    row = ops.get("kernel_row", 0.0) * word
    buffer = field(hw, "row_buffer_bytes", xp)
    own = 2.0 * (_kernel_block(ops, hw, xp) * word + row) <= sram_per_tile(hw, xp)
    return (row <= 0) | xp.where(buffer > 0, row <= buffer, own)


def rows_looped(ops: dict[str, Any], hw: Hardware, fused: Any, xp: Any = jnp) -> Any:
    """Whether each op's kernel runs fused and loops over the rows it normalises, which it cannot keep
    (:func:`rows_kept`)."""
    return fused & (ops.get("kernel_row", 0.0) > 0) & ~rows_kept(ops, hw, xp)


def row_rereads(ops: dict[str, Any], hw: Hardware, fused: Any, scale: Any) -> Any:
    """Bytes each op reads from DRAM again because its fused kernel loops over its rows (:func:`rows_looped`): a
    reduction over rows (``row_reduce`` > 1) of such a kernel ends a pass over them, and the next pass streams the
    kernel's inputs again (``kernel_in`` bytes, each tensor once, at the program's dtype; ``scale`` to the
    machine's word). A softmax's max and sum are two reductions: its input crosses DRAM three times."""
    again = rows_looped(ops, hw, fused) & (optional(ops, "row_reduce") > 1) & (ops["gemm"] <= 0)
    return jnp.where(again, ops.get("kernel_in", 0.0) * scale, 0.0)


def fused_in_kernel(ops: dict[str, Any], hw: Hardware) -> Any:
    """Whether each op runs fused with others: its kernel holds more than one op and fits (:func:`kernel_fits`)."""
    return (ops.get("kernel_size", 1.0) > 1) & kernel_fits(ops, hw)


def kernel_overlap(m: dict[str, Any], ops: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    """A fused kernel's vector work runs on the vector unit while its GEMM runs on the PE array.

    Per kernel, the array's compute ``A`` (its GEMMs' busy-tile cycles) hides up to ``vector_overlap x min(A, V)``
    of its vector ops' compute ``V``; each vector op of the kernel keeps ``1 - hidden / V`` of its compute (so a
    short epilogue, a bias and an activation, costs nothing next to its GEMM, and a long one costs what the array
    cannot hide). Ops of unfused kernels, and kernels without a GEMM, are unchanged. A fused kernel's DRAM
    transfers stream as one: the latency is waited once, by its first op that moves DRAM bytes
    (``latency_share`` 1 there, 0 for its other ops). ``m``: :func:`model`'s outputs for every op of a program
    (segment sums over its kernels); returns them with ``compute_v`` adjusted, ``hidden_cycles`` (the compute each
    op hid under its kernel's array, all executions) and ``latency_share``.
    """
    n = m["compute_v"].shape[-1]
    kernel = jnp.clip(jnp.asarray(ops.get("kernel", jnp.arange(n)), jnp.int32), 0, n - 1)
    fused = m["fused"] > 0
    gemm = ops["gemm"] > 0
    body = body_demands(m, ops["count"], 0.0, hw)["compute"] * ops.get("real", 1.0)  # the busiest tile's compute
    array = jax.ops.segment_sum(jnp.where(fused & gemm, body, 0.0), kernel, num_segments=n)[kernel]
    vector = jax.ops.segment_sum(jnp.where(fused & ~gemm, body, 0.0), kernel, num_segments=n)[kernel]
    hidden = field(hw, "vector_overlap") * jnp.minimum(array, vector)
    has = fused & ~gemm & (vector > 0)
    # the divisor is 1 where there is no vector work, so the untaken branch has a finite gradient (jnp.where
    # multiplies an infinite one by zero into NaN)
    keep = jnp.where(has, 1.0 - hidden / jnp.where(has, vector, 1.0), 1.0)
    # a fused kernel streams its DRAM transfers as one: the DRAM latency is waited once, by its first op (in
    # program order) with DRAM bytes of its own (a kernel whose ops read only other kernels' spilled results
    # waits it at its first op)
    index = jnp.arange(n, dtype=jnp.float64)
    moves = m["dram_bytes"] > 0
    first = jax.ops.segment_min(jnp.where(fused & moves, index, jnp.inf), kernel, num_segments=n)[kernel]
    lead = jax.ops.segment_min(jnp.where(fused, index, jnp.inf), kernel, num_segments=n)[kernel]
    share = jnp.where(fused & (index != jnp.where(jnp.isfinite(first), first, lead)), 0.0, 1.0)
    return {**m, "compute_v": m["compute_v"] * keep, "hidden_cycles": body * (1.0 - keep), "latency_share": share}


def overhead_cycles(busy: Any, fixed: Any) -> Any:
    """The fixed cost of an op that does something (``busy > 0``): ``fixed``, its :func:`fixed_cycles` of all its
    executions (:func:`body_demands`' ``fixed``)."""
    return jnp.where(busy > 0, fixed, 0.0)


def move_energy(nbytes: Any, byte_hops: Any, hw: Hardware) -> Any:
    """Energy (pJ) of moving ``nbytes`` between tiles over ``byte_hops`` byte-hops: read from the producer's
    SRAM, written to the consumer's, and carried by the mesh (a retile)."""
    return byte_hops * field(hw, "noc_pj_per_byte_hop") + 2.0 * nbytes * field(hw, "sram_pj_per_byte")


def dram_delivery_energy(nbytes: Any, hw: Hardware) -> tuple[Any, Any]:
    """``(dram_pj, noc_pj)`` of reading ``nbytes`` from DRAM and delivering them from the grid's west edge."""
    return (nbytes * field(hw, "dram_pj_per_byte"),
            jnp.where(multi_tile(hw), nbytes * avg_hops(hw) * field(hw, "noc_pj_per_byte_hop"), 0.0))


def switch_cost(ops: dict[str, Any], hw: Hardware, reconfig_cycles: Any = 0.0, reconfig_pj: Any = 0.0
                ) -> dict[str, Any]:
    """The price of switching dataflow before each op: one formula for the selection and the replay.

    Changing the stationary operand changes how the op's input activation
    (``lhs_bytes``, in the op's words) must be laid out in SRAM, so it is
    re-laid-out: a move (:func:`move_energy`: read from and written back to
    SRAM and, on a multi-tile grid, carried ``(tile_cols + 1) / 2`` hops across
    the mesh). It takes ``bytes / (tile_rows x noc_link_bytes_per_cycle)``
    cycles over the west-edge links of a grid, or the tile's SRAM-port time
    (:func:`sram_port_bytes_per_cycle`) on one tile. ``reconfig_cycles`` and
    ``reconfig_pj`` (control / reconfiguration penalty) are added per switch.
    Once per switch, not per execution of the op.

    Returns ``bytes`` (re-laid-out), ``energy_pj`` and ``cycles`` (penalty
    included), and ``relayout_energy_pj`` / ``relayout_cycles`` (without it).

    >>> import jax, numpy as np
    >>> from dfit_nb.sim import presets
    >>> ops = {"itemsize": np.array([2.0]), "lhs_bytes": np.array([1000.0])}
    >>> with jax.enable_x64(True):
    ...     sw = switch_cost(ops, presets.get("eyeriss_like"), 10.0, 5.0)
    ...     float(sw["bytes"][0]), float(sw["cycles"][0] - sw["relayout_cycles"][0])
    (1000.0, 10.0)
    """
    itemsize = jnp.asarray(ops["itemsize"], _f64)
    word, _ = word_and_mac_energy(itemsize, hw)
    nbytes = jnp.asarray(ops["lhs_bytes"], _f64) * input_scales(ops, hw, word_scale(itemsize, word))[1]
    multi = multi_tile(hw)
    energy = move_energy(nbytes, jnp.where(multi, nbytes * avg_hops(hw), 0.0), hw)
    cycles = jnp.where(multi, nbytes / (field(hw, "tile_rows") * field(hw, "noc_link_bytes_per_cycle")),
                       nbytes / sram_port_bytes_per_cycle(hw, word, True))
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
    index = xp.where(xp.asarray(gemm) > 0, xp.arange(codes.shape[-1]), -1)
    last = jax.lax.cummax(index) if xp is jnp else np.maximum.accumulate(index)  # latest GEMM at or before
    prev = xp.concatenate([xp.full(1, -1, last.dtype), last[:-1]])
    return (xp.asarray(gemm) > 0) & (prev >= 0) & (codes[xp.maximum(prev, 0)] != codes)


def last_gemm(gemm: Any, xp: Any = jnp) -> Any:
    """Per op: the index of the latest GEMM at or before it (the first GEMM for ops before any; -1 if none).

    The policy charges each op's dataflow-dependent cost (its retile from a GEMM's layout) to that GEMM.

    >>> import numpy as np
    >>> last_gemm(np.array([0., 1., 0., 0., 1., 0.]), xp=np).tolist()
    [1, 1, 1, 1, 4, 4]
    """
    is_gemm = xp.asarray(gemm) > 0
    index = xp.where(is_gemm, xp.arange(is_gemm.shape[-1]), -1)
    last = jax.lax.cummax(index) if xp is jnp else np.maximum.accumulate(index)
    first = xp.argmax(is_gemm)
    return xp.where(last < 0, xp.where(is_gemm.any(), first, -1), last)
