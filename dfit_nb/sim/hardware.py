"""``Hardware``: a tiled dataflow accelerator as a JAX pytree.

A machine is a grid of ``tile_rows x tile_cols`` tiles joined by a 2-D mesh
network-on-chip; each tile holds an ``pe_rows x pe_cols`` systolic array of
processing elements (PEs), a vector unit of ``vector_lanes`` lanes for
non-GEMM work, and local SRAM split into input (ifmap), weight (filter) and
output (ofmap) buffers. Off-chip DRAM feeds the grid.

Every numeric field is a pytree leaf, so a batch of machines is one
``Hardware`` whose leaves are arrays of the same shape, and a sweep is a
``vmap`` (see :func:`dfit_nb.sim.sweep`); ``name``, the execution style and the
compiler's way with row reductions are static metadata (:data:`STATIC_FIELDS`).

Energy defaults and their sources
---------------------------------
* MAC energy by word size, Horowitz, "Computing's energy problem", ISSCC 2014,
  45 nm, 0.9 V: 8-bit integer multiply 0.2 pJ + add 0.03 pJ -> 0.23 pJ;
  16-bit float multiply 1.1 pJ + add 0.4 pJ -> 1.5 pJ; 32-bit float multiply
  3.7 pJ + add 0.9 pJ -> 4.6 pJ.
* SRAM: Horowitz (same talk) gives 10 pJ per 64-bit read of an 8 KB SRAM,
  i.e. 1.25 pJ per byte (larger arrays cost more: 100 pJ per 64 bits at 1 MB).
* DRAM: Horowitz gives 1.3-2.6 nJ per 64-bit access; the default takes the low
  end, 1.3 nJ / 8 B = 162.5 pJ per byte.
* Register file and NoC hop: Eyeriss (Chen, Emer, Sze, ISCA 2016) normalises
  access energy to the global buffer (SRAM) at 6x, array NoC at 2x and the
  register file at 1x; the defaults keep those ratios to the SRAM figure
  above: RF = 1.25 / 6 pJ per byte, NoC hop = 2 x RF.

Thermal defaults (assumptions; only :func:`dfit_nb.sim.thermal` reads them)
---------------------------------------------------------------------------
* ``lateral_resistance_k_per_w`` 9 K/W: between the centres of two square tiles through a silicon die the
  resistance is ``pitch / (k t pitch) = 1 / (k t)``, whatever the tile size; bulk silicon conducts
  k ~ 150 W/(m K) near room temperature and a full-thickness 300 mm wafer die is t ~ 0.775 mm ->
  1 / (150 x 0.000775) ~ 8.6 K/W. A lid or spreader conducts sideways too, so this single-layer value
  overstates hotspots (conservative).
* ``thermal_resistance_k_per_w`` 0.5 K/W, ``heat_capacity_j_per_k`` 2 J/K, ``ambient_c`` 35 degC,
  ``thermal_limit_c`` 85 degC: a generic heat-sinked accelerator package in a server (35 degC inlet air;
  85 degC, a common junction limit). Silicon holds ~1.63 J/(cm^3 K) (2.33 g/cm^3 x 0.70 J/(g K)), copper
  ~3.45 J/(cm^3 K): a few cm^2 of die plus its share of a copper lid is of the order of 1-5 J/K.
* ``throttle_clock_factor`` 0.5: the clock halves while the hottest tile is above the limit (a stated rule;
  real DVFS steps differ per chip).
Presets set their own (see :mod:`dfit_nb.sim.presets`).

Examples
--------
>>> from dfit_nb.sim import Hardware
>>> hw = Hardware(pe_rows=32, pe_cols=32)
>>> hw.peak_macs_per_cycle
1024
>>> hw.replace(pe_rows=64).pe_rows
64
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np

from .._html import render
from .._runtime import exported as _exported
from ..capture.regions import refused_characters
from ..errors import DfitError


class HardwareError(DfitError, ValueError):
    """A hardware field has an invalid value."""


# field -> (unit, description, kind, lower bound, upper bound); kind: "count" (a positive
# integer), "size" (a non-negative integer number of bytes), "word" (a power of two within the
# bounds), "positive" or "nonneg" (reals). A "positive" field's lower bound above 0 is where it stops
# being physically meaningful (1e-300 B/cycle of DRAM gave a 7.7e294 s latency): rejected too.
FIELDS: dict[str, tuple[str, str, str, float, float]] = {
    "tile_rows": ("1", "rows of tiles in the grid", "count", 1, 1e6),
    "tile_cols": ("1", "columns of tiles in the grid", "count", 1, 1e6),
    "pe_rows": ("1", "rows R of each tile's systolic PE array", "count", 1, 1e5),
    "pe_cols": ("1", "columns C of each tile's systolic PE array", "count", 1, 1e5),
    "sram_input_bytes": ("B", "SRAM per tile for input (ifmap) operands", "size", 1, 1e12),
    "sram_weight_bytes": ("B", "SRAM per tile for weight (filter) operands", "size", 1, 1e12),
    "sram_output_bytes": ("B", "SRAM per tile for outputs and partial sums", "size", 1, 1e12),
    "word_bytes": ("B", "widest native word of the datapath (1 int8, 2 bf16/fp16, 4 fp32); wider dtypes are cast "
                   "down to it, narrower ones keep their width", "word", 1, 8),
    "accumulator_bytes": ("B", "width of a partial sum the PE array accumulates in and keeps between reduction "
                          "folds (4: fp32 accumulation of bf16/fp16 products, as TPU MXUs do; int32 of int8); an "
                          "op's partial sums are never narrower than its word; 0: the op's word, as SCALE-Sim counts",
                          "size", 0, 8),
    "vector_lanes": ("1", "lanes of each tile's vector unit (elements per cycle)", "count", 1, 1e6),
    "noc_link_bytes_per_cycle": ("B/cycle", "bandwidth of one mesh NoC link", "positive", 1e-3, math.inf),
    "noc_hop_cycles": ("cycle", "latency of one NoC hop", "nonneg", 0, 1e6),
    "dram_bytes_per_cycle": ("B/cycle", "off-chip DRAM bandwidth of the whole chip", "positive", 1e-3,
                             math.inf),
    "dram_latency_cycles": ("cycle", "DRAM access latency", "nonneg", 0, 1e9),
    "clock_ghz": ("GHz", "clock frequency", "positive", 1e-3, 1e3),
    "op_overhead_cycles": ("cycle", "fixed cost of every op execution beyond its overlapped demands (launch, "
                           "pipeline fill and drain, synchronisation); 0 unless a preset or a calibration says",
                           "nonneg", 0, 1e9),
    "short_reduction_cycles": ("cycle", "extra fixed cost of a GEMM execution whose reduction dimension is its "
                               "shortest (K <= min(M, N)): on a TPU v4 a one-fold matmul of that shape takes about "
                               "60 ns more than its neighbours, for a reason the measurements do not show "
                               "(docs/validation.md); 0 unless a preset or a calibration says", "nonneg", 0, 1e9),
    "fold_overlap": ("1", "share of each fold's stationary-operand load and pipeline fill hidden under the previous "
                     "fold's stream: 0, SCALE-Sim's folds back to back; 1, a double-buffered array (TPU MXU) filled "
                     "once per GEMM", "nonneg", 0, 1),
    "memory_overlap": ("1", "share of an op's double-buffering fill and drain (its memory or compute time, the "
                       "shorter, over its blocks of half the buffers) hidden under neighbouring ops: 1, the "
                       "slowest demand alone sets the time; 0, a lone op pays it (all of the shorter when one block "
                       "holds the op)", "nonneg", 0, 1),
    "sram_port_bytes": ("B/cycle", "bytes a tile's SRAM moves to and from its PE array per cycle whatever the "
                        "word: a port of fixed width, through which a narrower dtype moves more elements a cycle (a "
                        "Tensix core's two unpackers read five 128-bit L1 words a cycle, 80 B); 0: the array's own "
                        "ports, R inputs + C weights + C outputs a cycle at the op's word", "nonneg", 0, math.inf),
    "vector_rate": ("1/cycle", "vector operations each lane issues per cycle (elementwise throughput = lanes x "
                    "rate; a rate, so a calibration can fit it where the lane count is a whole number)", "positive",
                    1e-3, 1e3),
    "vector_sram_words": ("1", "words per lane per cycle between the vector unit and its tile's SRAM (3: two "
                          "operands read and a result written each cycle)", "positive", 1e-3, 1e3),
    "transcendental_cycles": ("cycle", "lane-cycles of the vector unit per transcendental (exp, tanh, rsqrt, erf, "
                              "log: a polynomial or table evaluation on the lane); 8 unless a preset or a "
                              "calibration says", "nonneg", 0, 1e6),
    "row_buffer_bytes": ("B", "bytes of rows a kernel keeps on chip while it reduces and reuses them (a softmax's, "
                         "a layer norm's): a GPU thread block's registers; longer rows are streamed again for each "
                         "reduction over them (a looped reduction); 0: a tile's SRAM beside the kernel's blocks",
                         "nonneg", 0, math.inf),
    "reduction_step_cycles": ("cycle", "cycles of one level of the tree that reduces a row across the vector unit's "
                              "lanes (a shuffle or exchange between lanes and an add, with its synchronisation): "
                              "a reduction over rows of L elements pays ceil(log2(min(L, lanes))) levels per lane-step "
                              "of rows; 0 unless a preset or a calibration says", "nonneg", 0, 1e6),
    "vector_overlap": ("1", "share of a fused kernel's vector work (its GEMM's epilogue and prologue: bias, "
                       "activation, scale, convert) that runs on the vector unit while the PE array works: 1, a "
                       "vector unit beside the array (a TPU's VPU beside its MXUs); 0, the array's own datapath "
                       "does it after the GEMM", "nonneg", 0, 1),
    "mac_pj_1": ("pJ", "energy of one MAC on 1-byte words (int8)", "nonneg", 0, math.inf),
    "mac_pj_2": ("pJ", "energy of one MAC on 2-byte words (bf16/fp16)", "nonneg", 0, math.inf),
    "mac_pj_4": ("pJ", "energy of one MAC on 4-byte words (fp32; 8-byte words are charged 4x this)", "nonneg", 0,
                 math.inf),
    "rf_pj_per_byte": ("pJ/B", "register-file access energy per byte", "nonneg", 0, math.inf),
    "sram_pj_per_byte": ("pJ/B", "SRAM access energy per byte", "nonneg", 0, math.inf),
    "noc_pj_per_byte_hop": ("pJ/B", "NoC energy per byte per hop", "nonneg", 0, math.inf),
    "dram_pj_per_byte": ("pJ/B", "DRAM access energy per byte", "nonneg", 0, math.inf),
    # thermal model only (dfit_nb.sim.thermal): no cost-model number reads these
    "ambient_c": ("degC", "temperature of the coolant or air the heat sink rejects heat to (thermal model)",
                  "nonneg", -50, 200),
    "thermal_limit_c": ("degC", "junction temperature above which the clock throttles (thermal model)", "nonneg",
                        -50, 500),
    "thermal_resistance_k_per_w": ("K/W", "junction-to-ambient thermal resistance of the whole chip (die, package, "
                                   "heat sink); each tile's vertical path is this x the tile count (thermal model)",
                                   "positive", 1e-6, 1e6),
    "lateral_resistance_k_per_w": ("K/W", "thermal resistance between the centres of two mesh-adjacent tiles "
                                   "through the die (thermal model)", "positive", 1e-6, 1e9),
    "heat_capacity_j_per_k": ("J/K", "heat capacity of the die and what heats with it (lid, spreader), split "
                              "evenly over the tiles (thermal model)", "positive", 1e-9, 1e6),
    "throttle_clock_factor": ("1", "clock multiplier while the hottest tile is above thermal_limit_c (1: never "
                              "slows down; thermal model)", "positive", 1e-3, 1),
}

#: The static fields (pytree metadata, not leaves): they shape the program or its schedule, not a number in it.
STATIC_FIELDS = ("name", "execution", "row_reductions")

#: The fields only :func:`dfit_nb.sim.thermal` reads (the cost model never does).
THERMAL_FIELDS = ("ambient_c", "thermal_limit_c", "thermal_resistance_k_per_w", "lateral_resistance_k_per_w",
                  "heat_capacity_j_per_k", "throttle_clock_factor")

# Values a user passes are checked; JAX's own values are not: tracers and jax Arrays (gradients, cotangents,
# device-placed leaves, where a zero or negative entry is a derivative, not a machine) and shape specs. JAX
# rebuilds the pytree without the constructor (see ``_unflatten``), so its placeholders (``object()`` sentinels,
# ``None``) never reach these checks, and a user's ``None``, dict or object can be refused.
_UNCHECKED = (jax.core.Tracer, jax.Array, jax.ShapeDtypeStruct)

#: How ops share the tile grid (static: it changes the shape of the schedule, not a number in it).
#: "time": time-multiplexed, each op has the whole grid in turn (TPU-like); "spatial": layer-pipelined,
#: ops hold disjoint tile regions and run concurrently, activations streaming tile to tile
#: (Cerebras- and SambaNova-like). See :func:`dfit_nb.replay`.
EXECUTION_STYLES = ("time", "spatial")

#: How the machine's compiler fuses a reduction over rows (a softmax's max and sum, a layer norm's mean and
#: variance) with the ops that use it (static: it changes which ops form a kernel, not a number in one; rule 9 of
#: :mod:`dfit_nb.sim.kernels`). "fused": the kernel keeps the row on chip and the reduction's consumers join it
#: (a GPU's softmax and layer-norm kernels; XLA:GPU's ``SoftmaxRewriterTriton``); "split": the reduction roots
#: its kernel and its consumers start the next, as XLA:TPU compiles a layer norm and a softmax
#: (``docs/validation.md``, "Kernels against XLA:TPU's own fusions").
ROW_REDUCTIONS = ("fused", "split")
#: ``row_reductions`` of a :meth:`Hardware.stack` of machines that differ in it (no machine's own value)
MIXED = "mixed"

#: Horowitz ISSCC 2014 (45 nm) MAC energy by word size in bytes (see the module docstring).
MAC_PJ_BY_WORD = {1: 0.23, 2: 1.5, 4: 4.6}

#: A tile's SRAM partitions, in the order :func:`sram_split` hands out spare bytes.
SRAM_FIELDS = ("sram_input_bytes", "sram_weight_bytes", "sram_output_bytes")


@dataclasses.dataclass(frozen=True)
class Hardware:
    """A tiled dataflow accelerator (see the module docstring for the model and sources).

    Every field but the static ones (:data:`STATIC_FIELDS`: ``name``, ``execution``
    of :data:`EXECUTION_STYLES`, ``row_reductions`` of :data:`ROW_REDUCTIONS`) may
    be a scalar or an array (a batch of machines). Invalid values raise
    :class:`HardwareError` naming the field, the value and the valid range:
    bools, strings, ``None`` and other non-numbers, a ``word_bytes`` other than
    1, 2, 4 or 8, and values outside a field's physically meaningful range (e.g.
    bandwidths below 1e-3 B/cycle, a clock outside 1e-3..1e3 GHz; see
    :data:`FIELDS`). Traced values (inside ``jit``/``vmap``), jax Arrays and
    shape specs are not checked.
    """

    name: str = "custom"
    execution: str = "time"
    row_reductions: str = "fused"
    tile_rows: Any = 1
    tile_cols: Any = 1
    pe_rows: Any = 32
    pe_cols: Any = 32
    sram_input_bytes: Any = 256 * 1024
    sram_weight_bytes: Any = 256 * 1024
    sram_output_bytes: Any = 128 * 1024
    word_bytes: Any = 1
    accumulator_bytes: Any = 0
    vector_lanes: Any = 32
    noc_link_bytes_per_cycle: Any = 32.0
    noc_hop_cycles: Any = 1.0
    dram_bytes_per_cycle: Any = 16.0
    dram_latency_cycles: Any = 100.0
    clock_ghz: Any = 1.0
    op_overhead_cycles: Any = 0.0
    short_reduction_cycles: Any = 0.0
    fold_overlap: Any = 0.0
    memory_overlap: Any = 1.0
    sram_port_bytes: Any = 0.0
    vector_rate: Any = 1.0
    vector_sram_words: Any = 3.0
    transcendental_cycles: Any = 8.0
    reduction_step_cycles: Any = 0.0
    row_buffer_bytes: Any = 0.0
    vector_overlap: Any = 1.0
    mac_pj_1: Any = MAC_PJ_BY_WORD[1]
    mac_pj_2: Any = MAC_PJ_BY_WORD[2]
    mac_pj_4: Any = MAC_PJ_BY_WORD[4]
    rf_pj_per_byte: Any = 1.25 / 6
    sram_pj_per_byte: Any = 1.25
    noc_pj_per_byte_hop: Any = 2 * 1.25 / 6
    dram_pj_per_byte: Any = 162.5
    ambient_c: Any = 35.0
    thermal_limit_c: Any = 85.0
    thermal_resistance_k_per_w: Any = 0.5
    lateral_resistance_k_per_w: Any = 9.0
    heat_capacity_j_per_k: Any = 2.0
    throttle_clock_factor: Any = 0.5

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise HardwareError(f"Hardware.name must be a str (it names the machine in results and file names), "
                                f"got {_given(self.name)}")
        if not self.name.isprintable():  # (every refused character is unprintable: the check costs nothing else)
            self._check_name_characters()
        if not isinstance(self.execution, str) or self.execution not in EXECUTION_STYLES:
            raise HardwareError(f"Hardware.execution = {self.execution!r} is not an execution style; valid: "
                                f"{', '.join(EXECUTION_STYLES)}")
        if not isinstance(self.row_reductions, str) or self.row_reductions not in (*ROW_REDUCTIONS, MIXED):
            raise HardwareError(f"Hardware.row_reductions = {self.row_reductions!r} is not a way to fuse a "
                                f"reduction over rows; valid: {', '.join(ROW_REDUCTIONS)} (the row stays on chip "
                                f"in one kernel with what uses it; the reduction ends its kernel), or {MIXED!r} "
                                "for a stack of machines of both")
        for field, (_, _, kind, lo, hi) in FIELDS.items():
            value = getattr(self, field)
            if isinstance(value, _UNCHECKED):  # traced or device values: see _UNCHECKED
                continue
            _check(field, value, kind, lo, hi)
        self._check_buffers()
        self._check_thermal_limit()

    def _check_name_characters(self) -> None:
        """Refuse a name holding what region and op names may not hold (``capture.regions.REFUSED_CATEGORIES``:
        NUL, tab, newline, escape, U+2028, U+2029, ...): one policy for every name a result carries. A NUL in a
        machine's name was dropped by a ``.nc`` round trip ('a\\x00b' came back 'ab')."""
        bad = refused_characters(self.name)
        if bad:
            chars = ", ".join(f"{c!r} (U+{ord(c):04X})" for c in bad)
            raise HardwareError(f"Hardware.name {self.name!r} holds {chars}; machine names, as region and op names, "
                                "may not hold control characters, line or paragraph separators (Unicode "
                                "categories Cc, Zl, Zp), which files drop and charts cannot show; rename it "
                                "without them")

    def _check_thermal_limit(self) -> None:
        """A limit at or below ambient would throttle a chip that dissipates nothing: no real machine."""
        amb, limit = self.ambient_c, self.thermal_limit_c
        if isinstance(amb, _UNCHECKED) or isinstance(limit, _UNCHECKED):
            return
        if np.any(np.asarray(limit) <= np.asarray(amb)):
            raise HardwareError(f"Hardware.thermal_limit_c = {limit!r} degC must be above Hardware.ambient_c = "
                                f"{amb!r} degC (the clock would throttle with the chip idle)")

    def _check_buffers(self) -> None:
        """Each SRAM partition must hold one array row of operands, double-buffered."""
        values = [getattr(self, f) for f in ("pe_rows", "pe_cols", "word_bytes")]
        if any(isinstance(v, _UNCHECKED) for v in values):
            return
        need = 2 * np.maximum(np.asarray(values[0]), np.asarray(values[1])) * np.asarray(values[2])
        for field in ("sram_input_bytes", "sram_weight_bytes", "sram_output_bytes"):
            have = getattr(self, field)
            if isinstance(have, _UNCHECKED):
                continue
            short = np.asarray(have) < need
            if np.any(short):
                raise HardwareError(
                    f"Hardware.{field} = {have!r} B is too small: it must hold one row of the "
                    f"{values[0]}x{values[1]} PE array's operands, double-buffered "
                    f"(>= 2 x max(pe_rows, pe_cols) x word_bytes = {np.max(need):g} B)"
                )

    # ---- derived ------------------------------------------------------------
    @property
    def tiles(self) -> Any:
        """Number of tiles."""
        return self.tile_rows * self.tile_cols

    @property
    def peak_macs_per_cycle(self) -> Any:
        """MACs per cycle of the whole chip: tiles x R x C, in the fields' own types (an ``int`` for a preset);
        figures read it as float64 from :func:`dfit_nb.sim.machine.peak_macs_per_cycle`, which a test keeps equal."""
        return self.tiles * self.pe_rows * self.pe_cols

    @property
    def sram_bytes(self) -> Any:
        """SRAM per tile, all three buffers."""
        return self.sram_input_bytes + self.sram_weight_bytes + self.sram_output_bytes

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """Shape of a batch of machines (``()`` for one)."""
        # Python numbers (every preset's fields) skip np.shape and the broadcast: a warm cost() asks this per call
        shapes = [np.shape(v) for f in FIELDS if not isinstance(v := getattr(self, f), (int, float))]
        return np.broadcast_shapes(*shapes) if shapes else ()

    @classmethod
    def stack(cls, machines: list[Hardware], name: str = "batch") -> Hardware:
        """One batched machine (leading axis) from several, e.g. to ``vmap`` over them.

        Examples
        --------
        >>> from dfit_nb.sim import Hardware, presets
        >>> Hardware.stack([presets.get("scalesim_32"), presets.get("npu_like")]).pe_rows.tolist()
        [32.0, 16.0]
        """
        if not machines:
            raise HardwareError("Hardware.stack needs at least one machine")
        styles = {m.execution for m in machines}
        if len(styles) > 1:
            raise HardwareError(f"Hardware.stack: machines differ in execution style {sorted(styles)}; "
                                "stack machines of one style (it is static: it shapes the schedule)")
        # machines whose compilers fuse row reductions differently stack for what their numbers give (peak, area,
        # an op table's cost), not to replay a Trace: its kernels would differ per machine (MIXED refuses that)
        rows = {m.row_reductions for m in machines}
        fields = {f: np.asarray([np.asarray(getattr(m, f), np.float64) for m in machines]) for f in FIELDS}
        return cls(name=name, execution=styles.pop(), row_reductions=rows.pop() if len(rows) == 1 else MIXED,
                   **fields)

    def replace(self, **changes: Any) -> Hardware:
        """A copy with ``changes`` applied (validated); unknown fields are named."""
        unknown = set(changes) - set(FIELDS) - set(STATIC_FIELDS)
        if unknown:
            raise HardwareError(f"Hardware has no field(s) {sorted(unknown)}; fields: {', '.join(FIELDS)}")
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        """A readable table of every field with its unit and meaning."""
        rows = [(f, _fmt(getattr(self, f)), unit, desc) for f, (unit, desc, *_) in FIELDS.items()]
        rows += [
            ("tiles", _fmt(self.tiles), "1", "tile_rows x tile_cols"),
            ("peak_macs_per_cycle", _fmt(self.peak_macs_per_cycle), "MAC/cycle", "tiles x R x C"),
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        split = f", row reductions: {self.row_reductions}" if self.row_reductions != "fused" else ""
        lines = [f"Hardware {self.name!r} (execution: {self.execution}{split})"]
        lines += [f"  {a.ljust(widths[0])}  {b.rjust(widths[1])}  {c.ljust(widths[2])}  {d}" for a, b, c, d in rows]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return render("pre.html.j2", text=self.describe())


def sram_split(hw: Hardware, sram_kb: Any) -> dict[str, np.ndarray]:
    """A tile's SRAM of ``sram_kb`` KiB split over its three partitions in ``hw``'s proportions.

    The one rule for "SRAM per tile" as a single number (``sweep(sram_kb=...)`` and the Explorer's SRAM slider):
    the total is rounded to whole bytes, each partition gets the whole bytes of its exact share, and the bytes
    the rounding leaves go one each to the largest remainders (ties: input, weight, output). The partitions sum
    to the total exactly, and a total equal to ``hw``'s gives its own partitions. Computed in integers, so the
    split does not depend on float round-off. A total that is not a finite number gives non-finite partitions,
    which :class:`Hardware` then refuses naming the field.

    Parameters
    ----------
    hw : Hardware
        One machine whose partitions give the proportions.
    sram_kb : float or array_like
        SRAM per tile in KiB, all three partitions; an array gives one split per value.

    Returns
    -------
    dict of str to numpy.ndarray
        :data:`SRAM_FIELDS` -> bytes (float64 whole numbers), each shaped like ``sram_kb``.

    Examples
    --------
    >>> from dfit_nb.sim import presets
    >>> parts = sram_split(presets.get("scalesim_128"), 100)
    >>> [int(parts[f]) for f in SRAM_FIELDS], sum(int(v) for v in parts.values()) == 100 * 1024
    ([43886, 43886, 14628], True)
    """
    check_hardware(hw, "sram_split()")
    have = [int(float(np.asarray(getattr(hw, f)))) for f in SRAM_FIELDS]
    whole = sum(have)
    totals = np.asarray(sram_kb, np.float64) * 1024
    out = np.empty((*totals.shape, len(have)))
    for index, total in np.ndenumerate(totals):
        if not np.isfinite(total):
            out[index] = total
            continue
        exact = round(float(total))
        floors, rests = zip(*(divmod(exact * v, whole) for v in have), strict=True)
        parts = list(floors)
        # sorted is stable: equal remainders take the spare bytes in SRAM_FIELDS order
        for i in sorted(range(len(have)), key=lambda j: -rests[j])[: exact - sum(floors)]:
            parts[i] += 1
        out[index] = parts
    return {f: out[..., i] for i, f in enumerate(SRAM_FIELDS)}


def check_hardware(hw: Any, where: str, *, argument: str = "hw", batch: bool | None = False,
                   error: type[Exception] = HardwareError, batch_error: type[Exception] | None = None,
                   also_valid: str = "", batch_hint: str = "") -> Hardware:
    """``hw`` when it is a :class:`Hardware` of the kind ``where`` takes, else one error naming ``argument``,
    what it was and what is valid.

    Parameters
    ----------
    hw : object
        The value a caller was given.
    where : str
        The function or widget that takes it, as its message names it (``"replay()"``).
    argument : str
        The argument's name.
    batch : bool or None
        ``False``: one machine (batch shape ``()``); ``True``: a batch (:meth:`Hardware.stack`); ``None``: either.
    error : type
        The exception class raised (the caller's own error class, so callers catch what they always caught).
    batch_error : type, optional
        The class raised for a machine of the wrong batch shape, when it differs from ``error``.
    also_valid : str
        Other values the caller takes, named in the message (``"or None"``).
    batch_hint : str
        Where a batch (or a single machine) should go instead, appended to that message.

    Returns
    -------
    Hardware
        ``hw`` itself.

    Examples
    --------
    >>> check_hardware("npu_like", "replay()")
    Traceback (most recent call last):
    ...
    dfit_nb.sim.hardware.HardwareError: replay(): hw must be one dfit_nb.sim.Hardware \
(dfit_nb.sim.presets.get(name) for a preset, or dfit_nb.sim.Hardware(field=value, ...)), got a str ('npu_like')
    """
    if not isinstance(hw, Hardware):
        kind = {False: "one dfit_nb.sim.Hardware", True: "a batch of machines (one dfit_nb.sim.Hardware from "
                "Hardware.stack)", None: "a dfit_nb.sim.Hardware"}[batch]
        valid = "dfit_nb.sim.presets.get(name) for a preset, or dfit_nb.sim.Hardware(field=value, ...)"
        raise error(f"{where}: {argument} must be {kind} ({valid}){' ' + also_valid if also_valid else ''}, "
                    f"got {_given(hw)}")
    _check_concrete_arrays(hw)
    shape = hw.batch_shape
    if batch is not None and (len(shape) == 1 if batch else shape == ()) is False:
        wanted = ("a 1-D batch of machines (dfit_nb.sim.Hardware.stack([...]))" if batch else
                  "one machine (one dfit_nb.sim.Hardware)")
        what = f"a batch of machines of shape {shape}" if shape else "one machine"
        raise (batch_error or error)(f"{where} takes {wanted}; {argument} ({hw.name!r}) is {what}{batch_hint}")
    return hw


def _check_concrete_arrays(hw: Hardware) -> None:
    """The range checks the constructor leaves to JAX's own values (``_UNCHECKED``), run on the concrete ones an
    entry point is handed: a machine of ``jnp.array`` fields, or one a ``jax.tree_util.tree_map`` rebuilt, is a
    machine like any other there (a negative bandwidth priced a GEMM, a zero grid failed deep in the replay).
    Tracers (inside a jitted or differentiated function) are still not checked."""
    rebuilt = getattr(hw, "_rebuilt", False)  # every field of a machine JAX rebuilt skipped the constructor
    for field, (_, _, kind, lo, hi) in FIELDS.items():
        value = getattr(hw, field)
        if isinstance(value, (jax.core.Tracer, jax.ShapeDtypeStruct)):
            continue
        if isinstance(value, jax.Array) or rebuilt:
            arr = np.asarray(value)
            if arr.size:  # a batch of no machines: the batch entry points name every empty field themselves
                _check(field, arr if isinstance(value, jax.Array) else value, kind, lo, hi)


def _fmt(value: Any) -> str:
    arr = np.asarray(value)
    if arr.ndim:
        return f"[{arr.size} values: {arr.min():g}..{arr.max():g}]"
    return f"{arr.item():g}" if arr.dtype.kind == "f" else str(arr.item())


def _given(value: Any) -> str:
    """``value`` as an error message names it: its type and a short repr."""
    if value is None:
        return "None"
    name, text = type(value).__name__, repr(value)
    article = "an" if name[:1].lower() in "aeiou" else "a"
    return f"{article} {name} ({text[:60] + '...' if len(text) > 60 else text})"


def _numbers(field: str, value: Any) -> np.ndarray:
    """``value`` as a float64 array, or :class:`HardwareError` naming the field and the type given.

    Bools are refused although NumPy and Python count them as numbers: ``pe_rows=True`` is a slip, not one PE.
    Strings are refused although NumPy would parse ``"16"``: the field would keep the string and fail later.
    """
    expected = "a number (an int or a float; a NumPy array or a list of them for a batch of machines)"
    if isinstance(value, (bool, np.bool_)):
        raise HardwareError(f"Hardware.{field} must be {expected}, got a bool ({value!r})")
    if isinstance(value, (int, float, np.integer, np.floating)):
        return np.asarray(value, dtype=np.float64)
    if isinstance(value, (np.ndarray, list, tuple)):
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError) as err:  # ragged nested lists
            raise HardwareError(f"Hardware.{field} must be {expected}, got {_given(value)}") from err
        if arr.dtype.kind == "b":
            raise HardwareError(f"Hardware.{field} must be {expected}, got an array of bools ({_given(value)})")
        if arr.dtype.kind not in "iuf":
            raise HardwareError(f"Hardware.{field} must be {expected}, got values of dtype {arr.dtype} in "
                                f"{_given(value)}")
        return arr.astype(np.float64)
    raise HardwareError(f"Hardware.{field} must be {expected}, got {_given(value)}")


def _check(field: str, value: Any, kind: str, lo: float, hi: float) -> None:
    arr = _numbers(field, value)
    if arr.size == 0:  # every range check below holds vacuously, and a batch of no machines fails later, unnamed
        raise HardwareError(f"Hardware.{field} is an empty array (shape {arr.shape}): no machine; give a number, "
                            "or one value per machine of a batch")

    def shown(mask: np.ndarray) -> str:
        if arr.ndim == 0:
            return repr(value)
        i = int(np.flatnonzero(mask.reshape(-1))[0])
        return f"{arr.reshape(-1)[i]:g} (element {i} of a batch of {arr.size})"

    if not np.all(np.isfinite(arr)):
        raise HardwareError(f"Hardware.{field} must be finite, got {shown(~np.isfinite(arr))}")
    integer = kind in ("count", "size", "word")
    if integer and not np.all(arr == np.round(arr)):
        raise HardwareError(f"Hardware.{field} must be a whole number, got {shown(arr != np.round(arr))}")
    unit = FIELDS[field][0]
    if field == "accumulator_bytes":  # a partial sum is a word too (int32, fp32, ...); 0 says "the op's word"
        bad = ~np.isin(arr, (0, 1, 2, 4, 8))
        if np.any(bad):
            raise HardwareError(f"Hardware.{field} = {shown(bad)} is not an accumulator width: it must be 0 (the "
                                f"op's word), 1, 2, 4 or 8 ({unit}: int8, fp16, fp32/int32, fp64)")
    if kind == "word":  # a datapath word is a power of two bytes (int8, bf16/fp16, fp32, fp64)
        sizes = [2 ** i for i in range(int(math.log2(lo)), int(math.log2(hi)) + 1)]
        bad = ~np.isin(arr, sizes)
        if np.any(bad):
            raise HardwareError(f"Hardware.{field} = {shown(bad)} is not a word size: it must be "
                                f"{', '.join(map(str, sizes[:-1]))} or {sizes[-1]} ({unit}: int8, bf16/fp16, fp32, "
                                "fp64)")
        return
    strict = kind in ("count", "positive")
    bad = (arr < lo) | (arr > hi) if not strict or lo > 0 else (arr <= lo) | (arr > hi)
    if np.any(bad):
        upper = "" if math.isinf(hi) else f" and <= {hi:g}"
        if kind == "positive" and lo > 0:
            # the bound is not a sign rule but where the model stops describing a machine: say so
            valid = f"> 0 and, to be physically meaningful, >= {lo:g}{upper}"
        else:
            valid = f"{'>' if strict and lo == 0 else '>='} {lo:g}{upper}"
        why = ("; values outside it describe no real machine and make the model's times meaningless"
               if kind == "positive" and lo > 0 else "")
        raise HardwareError(f"Hardware.{field} = {shown(bad)} is out of range: it must be {valid} ({unit}){why}")


def _flatten_with_keys(hw: Hardware) -> tuple[list[tuple[Any, Any]], tuple[str, ...]]:
    return [(jax.tree_util.GetAttrKey(f), getattr(hw, f)) for f in FIELDS], _meta(hw)


def _flatten(hw: Hardware) -> tuple[list[Any], tuple[str, ...]]:
    return [getattr(hw, f) for f in FIELDS], _meta(hw)


def _meta(hw: Hardware) -> tuple[str, ...]:
    return tuple(getattr(hw, f) for f in STATIC_FIELDS)


def _unflatten(meta: tuple[str, ...], leaves: Any) -> Hardware:
    """Rebuild a machine without the constructor's checks.

    JAX rebuilds the pytree with its own values: tracers, shape specs, and placeholders such as the ``object()``
    sentinels ``vmap`` puts in every leaf to match ``in_axes``. None of them is a user's input, and only a user's
    input is validated (in ``__post_init__``), so refusing a user's ``object()`` cannot break ``vmap``.
    """
    hw = object.__new__(Hardware)
    for name, value in zip((*STATIC_FIELDS, *FIELDS), (*meta, *leaves), strict=True):
        object.__setattr__(hw, name, value)  # frozen dataclass: its own __setattr__ refuses
    object.__setattr__(hw, "_rebuilt", True)  # not checked here: an entry point checks it (check_hardware)
    return hw


def program_copy(hw: Hardware, **changes: Any) -> Hardware:
    """``hw`` (with ``changes``) with its static fields at fixed values: the compiled programs read none of them
    (the schedule's style and the kernels are inputs decided on the host), so machines that differ only there
    share one compiled program.

    >>> from dfit_nb.sim import presets
    >>> a, b = (program_copy(presets.get(n)) for n in ("tpu_v4", "tpu_like"))
    >>> jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    True
    """
    return dataclasses.replace(hw, name="", execution="time", row_reductions="fused", **changes)


def field_vector(hw: Hardware) -> np.ndarray:
    """One machine's fields as one float64 vector in :data:`FIELDS` order: a jitted call then takes one array
    instead of one per field (each argument is one host-to-device transfer; see benchmarks/bench_cost_call.py).

    >>> from dfit_nb.sim import presets
    >>> v = field_vector(presets.get("tpu_like"))
    >>> v.shape == (len(FIELDS),), float(v[list(FIELDS).index("tile_cols")])
    (True, 4.0)
    """
    return np.array([getattr(hw, f) for f in FIELDS], np.float64)


def from_field_vector(vector: Any, name: str = "", execution: str = "time") -> Hardware:
    """The machine of :func:`field_vector` (inside ``jit``: the vector may be traced), without the constructor's
    checks: the values come from a machine that was validated when it was built."""
    return _unflatten((name, execution, "fused"), [vector[i] for i in range(len(FIELDS))])


def from_provenance(attrs: dict[str, Any]) -> Hardware:
    """The machine a result was computed on, rebuilt from its attrs (``hardware``, ``execution``, one
    ``hw_<field>`` per field, as every Run and cost table records them, and ``row_reductions`` where it is not
    the default).

    Raises
    ------
    KeyError
        The attrs lack fields (a result saved by an older dfit_nb); the message lists them.

    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import presets
    >>> run = dfit_nb.replay(dfit_nb.capture(lambda a: a @ a, jnp.ones((8, 8))), presets.get("npu_like"))
    >>> from_provenance(run.attrs) == presets.get("npu_like")
    True
    """
    missing = [f for f in FIELDS if f"hw_{f}" not in attrs]
    if missing:
        raise KeyError(f"the provenance lacks {', '.join(missing)} (saved by an older dfit_nb)")
    return Hardware(name=str(attrs.get("hardware", "custom")), execution=str(attrs.get("execution", "time")),
                    row_reductions=str(attrs.get("row_reductions", "fused")), **{f: attrs[f"hw_{f}"] for f in FIELDS})


# keyed like jax.tree_util.register_dataclass (GetAttrKey per field; name and execution static metadata)
jax.tree_util.register_pytree_with_keys(Hardware, _flatten_with_keys, _unflatten, _flatten)
# a batch of machines is an argument of the programs dfit_nb keeps traced on disk
_exported.serializable(Hardware, "dfit_nb.sim.Hardware")
