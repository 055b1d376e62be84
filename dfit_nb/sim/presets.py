"""Named machines: what each approximates and where its numbers come from.

A preset is one :func:`register` call; the tool logic never changes between
them. Figures marked "public" come from the cited papers or vendor material;
where a vendor publishes no number the value is an assumption, said so.

Thermal fields (:data:`dfit_nb.sim.hardware.THERMAL_FIELDS`) are ASSUMPTIONS on every preset: no vendor
publishes a per-tile RC network. Each preset's ``sources`` ends with its thermal basis; the values are the
cooling class of the chip (junction-to-ambient resistance = (junction limit - inlet) / design power), its die
heat capacity (silicon ~1.63 J/(cm^3 K)) and the Hardware defaults otherwise. The energies are 45 nm figures
(Horowitz), so the power of a 7 nm-class preset, and the heat, is overstated: treat a throttle verdict as a
question for a measured power trace, not an answer.

>>> from dfit_nb.sim import presets
>>> presets.names()
('scalesim_32', 'scalesim_128', 'tpu_like', 'cerebras_like', 'sambanova_like', 'npu_like', 'eyeriss_like',
 'tpu_v4', 'tpu_v6e', 'tt_wormhole_n150', 'tt_blackhole_p150', 'eyeriss')
>>> presets.get("scalesim_32").pe_rows
32
"""

from __future__ import annotations

import dataclasses

from .hardware import Hardware


@dataclasses.dataclass(frozen=True)
class Preset:
    """A named machine with the story of its numbers."""

    hardware: Hardware
    approximates: str
    sources: str


_PRESETS: dict[str, Preset] = {}


def register(hw: Hardware, *, approximates: str, sources: str) -> Hardware:
    """Add ``hw`` under ``hw.name`` (replacing one of the same name) and return it."""
    _PRESETS[hw.name] = Preset(hw, approximates, sources)
    return hw


def get(name: str) -> Hardware:
    """The preset called ``name``; the error lists the valid names."""
    try:
        return _PRESETS[name].hardware
    except KeyError:
        raise KeyError(f"no hardware preset {name!r}; valid: {', '.join(_PRESETS)}") from None


def info(name: str) -> Preset:
    """The preset with what it approximates and its sources."""
    get(name)
    return _PRESETS[name]


def names() -> tuple[str, ...]:
    """Names of the registered presets, in registration order."""
    return tuple(_PRESETS)


KB = 1024
MB = 1024 * KB

register(
    Hardware(name="scalesim_32", pe_rows=32, pe_cols=32, sram_input_bytes=256 * KB, sram_weight_bytes=256 * KB,
             sram_output_bytes=128 * KB, word_bytes=1, dram_bytes_per_cycle=10.0),
    approximates="SCALE-Sim's sample 32x32 machine (scale.cfg): one systolic array, 1-byte words",
    sources="SCALE-Sim v2/v3 sample config: ArrayHeight/Width 32, IfmapSramSzkB 256, FilterSramSzkB 256, "
            "OfmapSramSzkB 128, word size 1 byte; 10 words/cycle is its sample user bandwidth. Energy: defaults "
            "(Horowitz ISSCC 2014, Eyeriss ISCA 2016 ratios). Thermal: the Hardware defaults (no chip: a generic "
            "heat-sinked package).",
)
register(
    Hardware(name="scalesim_128", pe_rows=128, pe_cols=128, sram_input_bytes=6144 * KB,
             sram_weight_bytes=6144 * KB, sram_output_bytes=2048 * KB, word_bytes=1, dram_bytes_per_cycle=10.0),
    approximates="SCALE-Sim's sample 128x128 machine (a TPU-v1-sized array), 1-byte words",
    sources="SCALE-Sim sample config: 128x128 array, 6144/6144/2048 KB SRAM, word size 1 byte. Thermal: the "
            "Hardware defaults (no chip: a generic heat-sinked package).",
)
register(
    Hardware(name="tpu_like", tile_rows=2, tile_cols=4, pe_rows=128, pe_cols=128, sram_input_bytes=2 * MB,
             sram_weight_bytes=1 * MB, sram_output_bytes=1 * MB, word_bytes=2, vector_lanes=1024,
             noc_link_bytes_per_cycle=256.0, dram_bytes_per_cycle=1140.0, dram_latency_cycles=500.0,
             clock_ghz=1.05, thermal_resistance_k_per_w=0.29, heat_capacity_j_per_k=3.0, ambient_c=35.0,
             thermal_limit_c=85.0),
    approximates="a TPU v4 chip: 2 TensorCores x 4 MXUs of 128x128 bf16 MACs, time-multiplexed",
    sources="Public: Jouppi et al., 'TPU v4', ISCA 2023 (2 TensorCores x 4 MXUs of 128x128 per chip, 1050 MHz, "
            "1.2 TB/s HBM -> ~1140 B/cycle). On-chip memory here: 4 MiB per MXU tile, 32 MiB per chip, the "
            "vector-memory scale (the chip's larger 128 MiB CMEM is not modelled). NoC link width is an assumption. "
            "Thermal (assumption): air-cooled, a server heat sink sized for a 175 W chip, the design point of the "
            "air-cooled TPUv4i (Jouppi et al., 'Ten lessons from three generations', ISCA 2021: 175 W TDP, air "
            "cooling): (85 degC junction limit - 35 degC inlet) / 175 W ~ 0.29 K/W; 3 J/K for a ~600 mm^2 die "
            "(~0.8 J/K of silicon) with its share of a copper lid.",
)
register(
    Hardware(name="cerebras_like", execution="spatial", tile_rows=64, tile_cols=64, pe_rows=8, pe_cols=8,
             sram_input_bytes=16 * KB, sram_weight_bytes=24 * KB, sram_output_bytes=8 * KB, word_bytes=2,
             vector_lanes=4,
             noc_link_bytes_per_cycle=8.0, noc_hop_cycles=1.0, dram_bytes_per_cycle=1100.0,
             dram_latency_cycles=2000.0, clock_ghz=1.1, thermal_resistance_k_per_w=0.55,
             heat_capacity_j_per_k=0.3, ambient_c=25.0, thermal_limit_c=85.0),
    approximates="a scaled-down Cerebras WSE-2-style wafer: a large mesh of small cores, 48 KB SRAM each, "
                 "weights streamed in from off-wafer memory, layer-pipelined",
    sources="Public: Cerebras WSE-2 (850,000 cores, 48 KB SRAM per core, 2-D mesh fabric, ~1.1 GHz); Lie, "
            "'Cerebras Architecture Deep Dive', Hot Chips 34 (2022). Here 4096 tiles of 8x8 PEs stand for a "
            "region of the wafer; off-wafer (MemoryX) bandwidth is an assumption. Thermal (assumption): a water-cooled "
            "wafer (the CS-2 cools the WSE-2 with a water loop) dissipating ~15 kW over 46,225 mm^2 for a 40 K "
            "rise, i.e. 0.0027 K/W for the wafer; these 4096 of its 850,000 cores hold 0.48% of it (~223 mm^2), "
            "so 0.0027 / 0.0048 ~ 0.55 K/W, 25 degC water; 223 mm^2 x 0.775 mm of silicon ~ 0.3 J/K.",
)
register(
    Hardware(name="sambanova_like", execution="spatial", tile_rows=16, tile_cols=20, pe_rows=16, pe_cols=6,
             sram_input_bytes=256 * KB, sram_weight_bytes=128 * KB, sram_output_bytes=128 * KB, word_bytes=2,
             vector_lanes=16,
             noc_link_bytes_per_cycle=64.0, dram_bytes_per_cycle=100.0, dram_latency_cycles=300.0,
             clock_ghz=1.5, thermal_resistance_k_per_w=0.2, heat_capacity_j_per_k=3.0, ambient_c=35.0,
             thermal_limit_c=85.0),
    approximates="a SambaNova SN10 RDU-style reconfigurable dataflow chip: pattern compute units (16 lanes x "
                 "6 stages) beside 0.5 MB pattern memory units, spatially pipelined",
    sources="Public: Prabhakar et al., 'SambaNova SN10 RDU', Hot Chips 33 (2021) / ISSCC 2022 (640 PCUs and "
            "640 PMUs of 0.5 MB, i.e. 320 MB on chip; DDR4 off chip). Here 320 tiles each pair one PCU-like "
            "array with a PMU's worth of SRAM. Assumptions: the 1.5 GHz clock and ~150 GB/s of DDR bandwidth "
            "(100 B/cycle). Thermal (assumption): an air-cooled server heat sink for a ~250 W-class chip, "
            "(85 - 35) K / 250 W = 0.2 K/W; 3 J/K for a large (~700 mm^2) die with its lid share.",
)
register(
    Hardware(name="npu_like", tile_rows=4, tile_cols=5, pe_rows=16, pe_cols=16, sram_input_bytes=32 * KB,
             sram_weight_bytes=16 * KB, sram_output_bytes=16 * KB, word_bytes=1, vector_lanes=32,
             noc_link_bytes_per_cycle=32.0, dram_bytes_per_cycle=60.0, dram_latency_cycles=200.0,
             clock_ghz=1.0, thermal_resistance_k_per_w=5.0, heat_capacity_j_per_k=0.5, ambient_c=45.0,
             thermal_limit_c=95.0),
    approximates="an AMD Ryzen AI (XDNA, Phoenix) NPU: a 4x5 array of AIE-ML tiles, 256 int8 MACs per tile "
                 "per cycle, 64 KB data memory per tile",
    sources="Public: AMD XDNA / AIE-ML architecture manual (AM020): 256 int8 MACs/cycle and 64 KB data memory "
            "per AIE-ML tile; Phoenix NPU 4x5 compute tiles at ~1 GHz; LPDDR5 ~60 GB/s -> 60 B/cycle "
            "(assumption). Dato (task-based dataflow programming) targets this NPU. Thermal (assumption): the NPU "
            "block of a thin-and-light laptop SoC: the SoC's cooler holds ~30 W at a ~50 K rise (~2 K/W), and the "
            "small NPU block adds spreading resistance: 5 K/W from the block to the chassis air (45 degC inside "
            "a laptop), 95 degC limit (mobile SoCs throttle near 95-100 degC); 0.5 J/K.",
)
register(
    Hardware(name="eyeriss_like", pe_rows=12, pe_cols=14, sram_input_bytes=54 * KB, sram_weight_bytes=27 * KB,
             sram_output_bytes=27 * KB, word_bytes=2, vector_lanes=4, vector_overlap=0.0, dram_bytes_per_cycle=4.0,
             dram_latency_cycles=100.0, clock_ghz=0.2, thermal_resistance_k_per_w=30.0,
             heat_capacity_j_per_k=0.1, ambient_c=25.0, thermal_limit_c=85.0),
    approximates="Eyeriss v1: a 12x14 PE array with a 108 KB global buffer, 16-bit fixed point, 200 MHz",
    sources="Public: Chen et al., 'Eyeriss', ISSCC 2016 / JSSC 2017 (168 PEs in 12x14, 108 KB global buffer, "
            "16-bit, 100-250 MHz); the buffer split and DRAM bandwidth (64-bit at ~200 MHz, ~4 B/cycle "
            "effective) are assumptions. Eyeriss has no vector unit beside its PE array (its ReLU sits in the PEs' "
            "output path; pooling and the rest run off chip): non-GEMM work here runs on 4 lanes after the GEMM, "
            "never under it (vector_overlap = 0). Thermal (assumption): a 12.25 mm^2 test chip in a package with no "
            "heat sink on a lab bench: 30 K/W, in the 20-40 K/W still-air range JEDEC-style packages of that size "
            "report; 25 degC room; ~0.1 J/K with the package.",
)
register(
    Hardware(name="tpu_v4", tile_rows=2, tile_cols=4, pe_rows=128, pe_cols=128, sram_input_bytes=8 * MB,
             sram_weight_bytes=8 * MB, sram_output_bytes=4 * MB, word_bytes=2, accumulator_bytes=4,
             vector_lanes=256,
             noc_link_bytes_per_cycle=1024.0, dram_bytes_per_cycle=1143.0, dram_latency_cycles=500.0,
             clock_ghz=1.05, op_overhead_cycles=500.0, fold_overlap=1.0, memory_overlap=0.0,
             row_reductions="split", thermal_resistance_k_per_w=0.1, heat_capacity_j_per_k=3.0, ambient_c=35.0,
             thermal_limit_c=85.0),
    approximates="one Google Cloud TPU v4 chip as XLA runs a matmul on it: megacore (each op split over both "
                 "TensorCores' 2 x 4 MXUs of 128x128 bf16/fp16 MACs), time-multiplexed, with a fixed cost per op",
    sources="Public: Jouppi et al., 'TPU v4', ISCA 2023, and the Cloud TPU documentation: 2 TensorCores per chip, "
            "4 MXUs of 128x128 per TensorCore, 1050 MHz (275 TFLOP/s bf16 = 2 x 8 x 128 x 128 x 1.05 GHz), 32 GiB "
            "HBM at 1.2 TB/s (-> 1143 B/cycle), 16 MiB vector memory per TensorCore and 128 MiB CMEM (-> 4 + 16 "
            "MiB per MXU tile, split 8/8/4 MiB input/weight/output: an assumption; CMEM, a chip-wide cache, is "
            "modelled as its per-MXU share of each tile's SRAM). The MXU double-buffers its weights (Jouppi et al., "
            "'In-datacenter performance analysis of a TPU', ISCA 2017: the next tile of weights loads while the "
            "current one computes) -> fold_overlap = 1. The MXU multiplies in bf16 and accumulates in fp32 "
            "(Norrie et al., 'The Design Process for Google's Training Chips: TPUv2 and TPUv3', IEEE Micro 2021) "
            "-> accumulator_bytes = 4: partial sums kept between K folds are 4-byte words. Assumptions: a lone op "
            "pays its double-buffering fill and drain, nothing before or after it to hide them under "
            "(memory_overlap = 0), the vector lanes per MXU tile (the TensorCore's VPU, 8 sublanes x 128 lanes "
            "(Norrie et al. 2021), shared by its 4 MXUs: 256), a kernel's vector work beside the MXUs "
            "(vector_overlap = 1: the VPU and the MXUs take slots of the same VLIW bundle, Norrie et al. 2021), "
            "8 lane-cycles per transcendental (transcendental_cycles: no public figure for the TPU's unary "
            "pipeline; dfit_nb.sim.calibrate fits it on measured kernels), no cost per level of a cross-lane "
            "reduction tree (reduction_step_cycles = 0: no public figure for the cross-lane unit; calibrate fits "
            "it when named), "
            "the link width between tiles (VMEM feeds the MXUs faster than HBM feeds VMEM), the "
            "500-cycle HBM latency, and op_overhead_cycles = 500 (~0.48 us of launch and sync per op); "
            "short_reduction_cycles = 0 (no public figure: the measurements show a step for matmuls whose K is "
            "their shortest side, which dfit_nb.sim.calibrate fits). Compiler: XLA:TPU ends a kernel at a "
            "reduction over rows (a layer norm's statistics, a softmax's max and sum are kernels of their own: "
            "the TPU v4 compiler's fusions, compiled ahead of time with libtpu, docs/validation.md) -> "
            "row_reductions = 'split'. Measured "
            "against 1,198 TPU v4 matmuls in benchmarks/bench_tpu_v4.py; calibrate it to your chip with "
            "dfit_nb.sim.calibrate. Thermal (assumption): liquid-cooled, as Google's TPU v3 and v4 boards are: a "
            "cold plate of ~0.1 K/W from junction to 35 degC coolant; 3 J/K (die and lid share, as tpu_like).",
)
register(
    Hardware(name="tpu_v6e", tile_rows=1, tile_cols=2, pe_rows=256, pe_cols=256, sram_input_bytes=24 * MB,
             sram_weight_bytes=24 * MB, sram_output_bytes=16 * MB, word_bytes=2, accumulator_bytes=4,
             vector_lanes=512,
             noc_link_bytes_per_cycle=1024.0, dram_bytes_per_cycle=467.7, dram_latency_cycles=1750.0,
             clock_ghz=3.502, op_overhead_cycles=1750.0, fold_overlap=1.0, memory_overlap=0.0,
             row_reductions="split", thermal_resistance_k_per_w=0.29, heat_capacity_j_per_k=3.0, ambient_c=35.0,
             thermal_limit_c=85.0),
    approximates="one Google Cloud TPU v6e (Trillium) chip as XLA runs a program on it: one TensorCore with 2 MXUs "
                 "of 256x256 bf16 MACs, time-multiplexed, with a fixed cost per kernel",
    sources="Public: Cloud TPU v6e documentation (docs.cloud.google.com/tpu/docs/v6e): one TensorCore per chip, "
            "two 256x256 MXUs, a VPU of 128 lanes x 8 sublanes, 918 TFLOP/s bf16, 32 GB HBM at 1,638 GB/s; JAX's "
            "Pallas TPU table (jax/_src/pallas/mosaic/tpu_info.py, jax 0.10.2): 2 MXUs of 256 columns, 128 MiB "
            "VMEM per core. Derived: the clock that makes 2 x 256 x 256 MACs reach 918 TFLOP/s, 918e12 / (2 x 2 x "
            "65,536) = 3.502 GHz (Google publishes no clock; PyTorchSim models the chip at the same 3.502 GHz), "
            "so 1,638 GB/s -> 467.7 B/cycle; 64 MiB of VMEM per MXU tile, split 24/24/16 MiB input/weight/output "
            "(an assumption, tpu_v4's 3:3:2); 512 vector lanes per MXU tile (the VPU's 1,024 shared by its 2 "
            "MXUs). Assumptions as tpu_v4: the MXU double-buffers its weights (fold_overlap = 1) and accumulates "
            "in fp32 (accumulator_bytes = 4), a lone op pays its fill and drain (memory_overlap = 0), the VPU "
            "issues beside the MXUs (vector_overlap = 1), 8 lane-cycles per transcendental, the link between the "
            "two MXU tiles; tpu_v4's ~0.48 us of HBM latency and of launch per kernel, at this clock 1,750 "
            "cycles each; its compiler, XLA:TPU, splits row reductions as tpu_v4's does (row_reductions = "
            "'split'). Measured against 454 TPU v6e GEMMs and 89 fused FFN programs in "
            "benchmarks/bench_tpu_v6e.py; calibrate it with dfit_nb.sim.calibrate. Thermal (assumption): "
            "air-cooled like tpu_like, 0.29 K/W to 35 degC inlet air, 3 J/K.",
)
register(
    Hardware(name="tt_wormhole_n150", tile_rows=8, tile_cols=8, pe_rows=64, pe_cols=32, sram_input_bytes=512 * KB,
             sram_weight_bytes=512 * KB, sram_output_bytes=512 * KB, word_bytes=2, vector_lanes=32,
             noc_link_bytes_per_cycle=64.0, noc_hop_cycles=1.0, dram_bytes_per_cycle=288.0,
             dram_latency_cycles=500.0, clock_ghz=1.0, op_overhead_cycles=2000.0, fold_overlap=1.0,
             memory_overlap=0.0, sram_port_bytes=80.0, thermal_resistance_k_per_w=0.31, heat_capacity_j_per_k=3.0,
             ambient_c=35.0, thermal_limit_c=85.0),
    approximates="one Tenstorrent Wormhole n150 card (Wormhole B0) as TT-Metalium runs a matmul on it: the 8x8 "
                 "Tensix cores of its compute grid on a 2-D mesh NoC, each core's matrix engine at its one-pass "
                 "rate (LoFi: a 32x32x32 tile in 16 cycles; an op's math_fidelity adds passes), 1.5 MB of L1 per "
                 "core, outputs accumulated in place "
                 "(output-stationary), GDDR6 at the mesh's edge",
    sources="Public: Tenstorrent's Wormhole specifications (docs.tenstorrent.com/aibs/wormhole/specifications): n150 "
            "72 Tensix cores, 1 GHz AI clock, 1.5 MB SRAM per Tensix core, 12 GB GDDR6 at 12 GT/s on a 192-bit bus, "
            "288 GB/s, 160 W board power; tt-metal's GEMM_FLOPS tech report (tech_reports/GEMM_FLOPS/GEMM_FLOPS.md): "
            "an 8x8 compute grid on Wormhole, a matrix engine of 8x16 x 16x16 per cycle, 16 / 32 / 64 cycles per "
            "32x32x32 tile at LoFi / HiFi2 / HiFi4; tt-metal's data-movement guide "
            "(tests/tt_metal/tt_metal/data_movement/documentation/intro_to_dm.md): two NoCs of 32 B per cycle each on "
            "Wormhole; Tenstorrent's ISA documentation (github.com/tenstorrent/tt-isa-documentation, "
            "WormholeB0/TensixTile/L1.md): with both unpackers operating (a matmul's two operands), at most five "
            "128-bit L1 reads per cycle between them, theoretical -> sram_port_bytes = 80 B/cycle, the port's width "
            "whatever the dtype (a BFLOAT16 tile needs twice the cycles of a BFLOAT8_B one to reach the engine; the "
            "port also carries the results written, which the packers write through ports of their own). Derived: "
            "one pass (LoFi) is 32 x 32 x 32 MACs in 16 cycles = 2,048 MACs per cycle per core "
            "(the engine's 8x16 x 16x16) -> a 64x32 PE array; HiFi2 and HiFi4 are 2 and 4 passes, an op's "
            "math_fidelity column (dfit_nb.sim.cost); 8 x 8 x 2,048 x 2 x 1 GHz = 262 TFLOP/s at LoFi, 131 at HiFi2; "
            "288 GB/s / 1 GHz = 288 B/cycle; the two NoCs as one mesh of 2 x 32 = 64 B/cycle links. Assumptions: L1 "
            "split 512/512/512 KiB input/weight/output (the 1.5 MB, evenly; TT-Metalium allocates circular buffers "
            "per kernel); bf16 partial sums (accumulator_bytes 0: the report runs with fp32_dest_acc_en off); "
            "circular buffers double-buffer the reader, compute and writer kernels, so a tile's next operands load "
            "while it computes (fold_overlap = 1) and a lone op pays its fill and drain (memory_overlap = 0); 32 "
            "vector lanes (the SFPU), 1 cycle per NoC hop, 500 cycles of DRAM latency and 2,000 cycles of launch and "
            "sync per op (no public figures: dfit_nb.sim.calibrate fits them). Measured against 117 Wormhole GEMMs in "
            "benchmarks/bench_tenstorrent.py. Thermal (assumption): the card's cooler holds its 160 W board power at "
            "(85 degC junction limit - 35 degC inlet) / 160 W ~ 0.31 K/W; 3 J/K (die and lid share, as tpu_like).",
)
register(
    Hardware(name="tt_blackhole_p150", tile_rows=10, tile_cols=13, pe_rows=64, pe_cols=32,
             sram_input_bytes=512 * KB, sram_weight_bytes=512 * KB, sram_output_bytes=512 * KB, word_bytes=2,
             vector_lanes=32, noc_link_bytes_per_cycle=128.0, noc_hop_cycles=1.0, dram_bytes_per_cycle=379.3,
             dram_latency_cycles=675.0, clock_ghz=1.35, op_overhead_cycles=2700.0, fold_overlap=1.0,
             memory_overlap=0.0, sram_port_bytes=80.0, thermal_resistance_k_per_w=0.17, heat_capacity_j_per_k=3.0,
             ambient_c=35.0, thermal_limit_c=85.0),
    approximates="one Tenstorrent Blackhole p150 card as TT-Metalium runs a matmul on it: the 13x10 Tensix cores of "
                 "its compute grid on a 2-D mesh NoC, each core's matrix engine at its one-pass rate (LoFi: a "
                 "32x32x32 tile in 16 cycles; an op's math_fidelity adds passes), 1.5 MB of L1 per core, outputs "
                 "accumulated in place (output-stationary), "
                 "GDDR6 at the mesh's edge",
    sources="Public: Tenstorrent's Blackhole specifications (docs.tenstorrent.com/aibs/blackhole/specifications): "
            "p150 140 Tensix cores, AI clock up to 1.35 GHz, 1.5 MB SRAM per Tensix core, 32 GB GDDR6 at 16 GT/s on "
            "a 256-bit bus, 512 GB/s, 300 W board power; tt-metal's GEMM_FLOPS tech report "
            "(tech_reports/GEMM_FLOPS/GEMM_FLOPS.md): a 13x10 compute grid on Blackhole (13 columns, 10 rows), the "
            "matrix engine as Wormhole's (8x16 x 16x16 per cycle; 16 / 32 / 64 cycles per 32x32x32 tile at LoFi / "
            "HiFi2 / HiFi4) at 1.35 GHz; tt-metal's data-movement guide "
            "(tests/tt_metal/tt_metal/data_movement/documentation/intro_to_dm.md): two NoCs of 64 B per cycle each "
            "on Blackhole; Tenstorrent's ISA documentation (tt-isa-documentation, BlackholeA0/TensixTile/L1.md, "
            "shared with Wormhole's): the unpackers' five 128-bit L1 reads per cycle -> sram_port_bytes = 80 B/cycle "
            "(as tt_wormhole_n150). Derived: 2,048 MACs per cycle per core in one pass (LoFi) -> a 64x32 PE array, "
            "HiFi2 and HiFi4 as 2 and 4 passes (an op's math_fidelity); 130 x 2,048 x 2 x 1.35 GHz = 719 TFLOP/s at "
            "LoFi, 359 at HiFi2; 512 GB/s / 1.35 GHz = 379.3 B/cycle; "
            "the two NoCs as one mesh of 2 x 64 = 128 B/cycle links. Assumptions as tt_wormhole_n150 (L1 split "
            "512/512/512 KiB, bf16 partial sums, fold_overlap = 1, memory_overlap = 0, 32 vector lanes, 1 cycle per "
            "hop), and its 0.5 us of DRAM latency and 2 us of launch and sync per op, at this clock 675 and 2,700 "
            "cycles (dfit_nb.sim.calibrate fits them). Measured against 234 Blackhole GEMMs on two grids (13x10, "
            "11x10) in benchmarks/bench_tenstorrent.py. Thermal (assumption): (85 - 35) K / 300 W board power ~ "
            "0.17 K/W; 3 J/K.",
)
register(
    Hardware(name="eyeriss", pe_rows=12, pe_cols=14, sram_input_bytes=54 * KB, sram_weight_bytes=27 * KB,
             sram_output_bytes=27 * KB, word_bytes=2, vector_lanes=4, vector_overlap=0.0, dram_bytes_per_cycle=3.6,
             dram_latency_cycles=100.0, clock_ghz=0.2, memory_overlap=0.0, thermal_resistance_k_per_w=30.0,
             heat_capacity_j_per_k=0.1, ambient_c=25.0, thermal_limit_c=85.0),
    approximates="the fabricated Eyeriss chip (65 nm) of the JSSC 2017 paper as it ran one conv layer at a time: "
                 "168 PEs in 12x14, a 108 KB global buffer, 16-bit fixed point, 200 MHz, DRAM over a 64-bit link",
    sources="Paper figures: Chen, Krishna, Emer, Sze, 'Eyeriss: An Energy-Efficient Reconfigurable Accelerator for "
            "Deep Convolutional Neural Networks', IEEE JSSC 52(1), 2017: 168 PEs in a 12x14 array, a 108 KB global "
            "buffer, 16-bit fixed point, the per-layer measurements of its Tables V and VI taken at a 200 MHz core "
            "clock. Assumptions: the global buffer's split, 54/27/27 KiB input/weight/output (the chip shares it "
            "between ifmaps and partial sums per layer; the split is eyeriss_like's); partial sums as wide as the "
            "word (accumulator_bytes 0: the chip is 16-bit throughout); DRAM at 3.6 B per core cycle, a 64-bit data "
            "bus at the 90 MHz link clock a public summary of the paper's architecture figure gives (720 MB/s; not "
            "checked against the paper's own text here), with 100 cycles of latency; a lone layer pays its "
            "double-buffering fill and drain (memory_overlap 0: the tables' total latency exceeds the processing "
            "latency by the DRAM stalls); 4 vector lanes after the array, never under it (vector_overlap 0, as "
            "eyeriss_like: ReLU sits in the PEs' output path, pooling runs off chip). Energy per access: the paper "
            "gives no absolute figure (its companion, Chen, Emer, Sze, ISCA 2016, gives only ratios normalised to a "
            "MAC: register file 1x, array NoC 2x, global buffer 6x, DRAM 200x), so the Hardware defaults stand "
            "(45 nm Horowitz figures; the register file and NoC at the ISCA 2016 ratios to the SRAM figure): an "
            "assumption; the model has no clock-network or leakage power. Row stationary, the chip's dataflow, "
            "is not one of the model's three styles (ws, os, is). eyeriss_like is kept unchanged (tutorials and "
            "tests use it); this preset differs from it in its DRAM rate (3.6 against an assumed 4 B/cycle), "
            "memory_overlap 0 and these sources. Measured against the paper's 18 conv layers (AlexNet, VGG-16) in "
            "benchmarks/bench_eyeriss.py. Thermal (assumption): eyeriss_like's (a test chip on a lab bench with no "
            "heat sink, 30 K/W, 25 degC room, ~0.1 J/K).",
)
