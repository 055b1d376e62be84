"""Kernels: the grouping (rules, the capture's XLA fusion map, none), and how the one model prices them."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dfit_nb
from dfit_nb import _operands
from dfit_nb.sim import Hardware, SpillWarning, kernels, presets
from dfit_nb.sim._prepare import ReplayError, prepare, shared_arguments

MODES = kernels.FUSION_MODES


@pytest.fixture(scope="module")
def encoder(static_traces):
    return static_traces["encoder"]


@pytest.mark.parametrize("name", ["encoder", "mlp", "cnn", "scan_model"])
def test_compiler_kernels_are_the_fusions_xla_executed(static_traces, name):
    """fusion='compiler': ops XLA put in one fusion run in one kernel, named after it; every kernel that launches is
    an instruction XLA executed."""
    trace = static_traces[name]
    prep = prepare(trace, "compiler")
    k = prep.kernels
    primary = np.array([str(f).split(";")[0] for f in prep.table["fusion"].values])
    executed = set(trace.lowering["fusion"].values.astype(str))
    for f in set(primary) - {""}:
        assert len(set(k.kernel[primary == f])) == 1, f  # one fusion, one kernel
        assert f in executed
        assert k.name[k.kernel[primary == f][0]] == f
    launching = len(set(k.kernel[k.payer]))
    assert launching <= len(executed)
    # what XLA folded away (bitcasts, CSE, constants) does no work
    folded = (primary == "") & (prep.table["folded_reason"].values.astype(str) != "")
    assert (k.free == folded).all()


@pytest.mark.parametrize("name", ["encoder", "mlp", "cnn", "scan_model"])
def test_rules_kernels_are_valid_fusions(static_traces, name):
    """fusion='rules': at most two GEMMs per kernel, the second a chain of the first (rule 10: its rows, reducing
    over the first's columns, no data move between them), ops of one kernel run equally often, and the kernels
    form a DAG (no kernel waits on another that waits on it)."""
    prep = prepare(static_traces[name], "rules")
    k = prep.kernels
    a = prep.arrays
    gemm = a["gemm"] > 0
    count = a["count"]
    moves = np.isin(prep.primitive.astype(str), list(kernels.FUSIBLE_MOVES))
    for kid in range(k.count):
        rows = np.flatnonzero(k.kernel == kid)
        g = rows[gemm[rows]]
        assert len(g) <= 2
        if len(g) == 2:
            first, second = g
            assert (a["m"][second], a["k"][second]) == (a["m"][first], a["n"][first])
            assert not moves[rows].any()
            assert k.weight[rows[0]] == a["k"][second] * a["n"][second] * max(a["batch"][second], 1)
        assert len(set(count[rows])) == 1
    # kernel DAG: an edge from producer kernel to consumer kernel never closes a cycle
    edges = {(int(k.kernel[p]), int(k.kernel[i])) for i in range(len(prep.op)) for p in prep.preds[i]
             if p >= 0 and k.kernel[p] != k.kernel[i]}
    order = _topological(k.count, edges)
    assert order is not None, "the kernels form a cycle"


def _topological(n, edges):
    indeg = [0] * n
    out = [[] for _ in range(n)]
    for a, b in edges:
        out[a].append(b)
        indeg[b] += 1
    ready = [i for i in range(n) if indeg[i] == 0]
    seen = 0
    while ready:
        a = ready.pop()
        seen += 1
        for b in out[a]:
            indeg[b] -= 1
            if indeg[b] == 0:
                ready.append(b)
    return seen == n or None


def test_rules_fuse_at_least_as_much_as_xla(static_traces):
    """On the bundled encoder the rules launch no more kernels than XLA executed fusions on this CPU (its fusion
    passes differ: a dot is a YNNPACK call there, transposes are copies of their own, and a softmax or a layer
    norm is several fusions where the rules keep the row on chip), far fewer than one per primitive: per layer its
    two layer norms, its softmax and its six GEMMs with their epilogues, the MLP's two in one kernel (rule 10),
    and the final layer norm."""
    prep = prepare(static_traces["encoder"], "rules")
    k = prep.kernels
    launching = len(set(k.kernel[k.payer]))
    xla = static_traces["encoder"].lowering.sizes["fusion"]
    gemm = prep.arrays["gemm"] > 0
    gemms = int(gemm.sum())
    two = {kid for kid in set(k.kernel[gemm]) if (gemm & (k.kernel == kid)).sum() == 2}
    rows = len(set(k.kernel[k.row > 0]) - two)
    assert launching < 0.4 * len(prep.op)
    assert launching <= 1.25 * xla
    layers = 2
    assert (gemms, rows, len(two)) == (6 * layers, 3 * layers + 1, layers)  # each MLP's two GEMMs chain
    assert launching == gemms - len(two) + rows


def test_an_epilogue_fuses_into_its_gemm():
    t = dfit_nb.capture(lambda a, b, c: jnp.tanh(a @ b + c), jnp.ones((64, 128)), jnp.ones((128, 32)), jnp.ones(32))
    k = prepare(t, "rules").kernels
    assert k.count == 1 and k.payer.sum() == 1
    run = dfit_nb.replay(t, presets.get("tpu_v4"))
    assert run.kernels.sizes["kernel"] == 1
    assert float(run.ops["launch_cycles"].sum()) == float(presets.get("tpu_v4").op_overhead_cycles)


@pytest.mark.parametrize("preset", ["tpu_v4", "npu_like", "eyeriss_like"])
def test_conservation_from_ops_to_kernels_to_the_summary(encoder, preset):
    run = dfit_nb.replay(encoder, presets.get(preset))
    k = run.kernels
    assert int(k["n_ops"].sum()) == run.ops.sizes["op"]
    for var, total in (("macs", "macs"), ("bytes_dram", "dram_bytes"), ("bytes_sram", "sram_bytes")):
        assert float(k[var].sum()) == pytest.approx(float(run.ops[var].sum()), rel=1e-12)
        assert float(k[var].sum()) == pytest.approx(float(run.summary[total]), rel=1e-9), var
    assert float(k["energy_pj"].sum()) * 1e-12 == pytest.approx(float(run.summary["energy_j"]), rel=1e-9)
    assert float(k["end"].max()) == pytest.approx(float(run.summary["latency_cycles"]), rel=1e-12)
    assert (k["start"].values <= k["end"].values).all()
    # the events carry their op's kernel: grouped by it, they sum to the kernels' figures and lie in their spans
    ev = run.events.dfit.by_kernel(var=["macs", "energy_pj"])
    assert ev["kernel"].values.tolist() == k["kernel"].values.tolist()
    for var in ("macs", "energy_pj"):
        np.testing.assert_allclose(ev[var].values, k[var].values, rtol=1e-9, atol=1e-6)
    assert (ev["start"].values >= k["start"].values).all() and (ev["end"].values <= k["end"].values).all()
    # the cube names the kernel running in each time bin, in the order the kernels ran
    running = run.cube["kernel"].values
    mid = 0.5 * (run.cube["time"].values + run.cube["time_end"].values)
    ran = running >= 0
    assert ran.mean() > 0.9
    spans = k.sel(kernel=running[ran])
    assert ((spans["start"].values <= mid[ran]) & (mid[ran] < spans["end"].values)).all()


def test_one_launch_per_kernel(encoder):
    hw = presets.get("tpu_v4")
    for mode in MODES:
        run = dfit_nb.replay(encoder, hw, fusion=mode)
        prep = prepare(encoder, mode, kernels.splits_rows(hw))
        launching = len(set(prep.kernels.kernel[prep.kernels.payer]))
        short = float((run.ops["launch_cycles"] > float(hw.op_overhead_cycles)).sum())  # none: no short-K GEMM
        assert short == 0
        assert float(run.ops["launch_cycles"].sum()) == launching * float(hw.op_overhead_cycles), mode
    # reconcile names what the launches saved, from the model's own fixed cost alone and in the replay
    rc = dfit_nb.sim.reconcile(encoder, hw, dfit_nb.replay(encoder, hw))
    assert float(rc["launch_cycles_saved"]) == (float(rc["launches_alone"]) - float(rc["launches"])) * float(
        hw.op_overhead_cycles) > 0
    # fusion saves launches and DRAM round trips, and never adds MACs
    none, rules = (dfit_nb.replay(encoder, hw, fusion=m) for m in ("none", "rules"))
    assert float(rules.summary["latency_cycles"]) < float(none.summary["latency_cycles"])
    assert float(rules.summary["dram_bytes"]) <= float(none.summary["dram_bytes"])
    assert float(rules.summary["macs"]) == float(none.summary["macs"])


@pytest.mark.parametrize("program", ["gemm", "two_gemms"])
def test_the_three_modes_agree_where_nothing_can_fuse(program):
    """A lone GEMM, or two GEMMs of independent inputs: no fusion is possible, every mode prices the same."""
    a, b = jnp.ones((96, 64)), jnp.ones((64, 48))
    if program == "gemm":
        t = dfit_nb.capture(lambda x, y: x @ y, a, b)
    else:
        t = dfit_nb.capture(lambda x, y, z, w: (x @ y, z @ w), a, b, jnp.ones((32, 48)), jnp.ones((48, 16)))
    for preset in ("tpu_v4", "npu_like", "cerebras_like"):
        hw = presets.get(preset)
        runs = [dfit_nb.replay(t, hw, fusion=m) for m in MODES]
        for run in runs[1:]:
            for var in ("latency_cycles", "energy_j", "dram_bytes", "macs"):
                assert float(run.summary[var]) == float(runs[0].summary[var]), (preset, var)


def test_a_vector_op_costs_its_lanes_and_transcendentals():
    """Hand-computed: tanh of 64 x 96 elements on one tile of 32 lanes: whole lane-steps of its flops (at least
    one per element), then of its transcendentals, transcendental_cycles each; vector_rate divides both."""
    x = jnp.ones((64, 96))
    t = dfit_nb.capture(jnp.tanh, x)
    row = t.ops.isel(op=int(np.flatnonzero(t.ops["primitive"].values == "tanh")[0]))
    flops, trans, n = float(row["flops"]), float(row["transcendentals"]), 64 * 96
    for cycles_per in (8.0, 20.0):
        hw = presets.get("scalesim_32").replace(vector_lanes=32, transcendental_cycles=cycles_per)
        for rate in (1.0, 2.0):
            run = dfit_nb.replay(t, hw.replace(vector_rate=rate))
            expected = (math.ceil(max(flops, n) / 32) + cycles_per * math.ceil(trans / 32)) / rate
            assert float(run.ops["compute_cycles"].sel(op=int(row["op"]))) == pytest.approx(expected, rel=1e-12)


def test_the_epilogue_hides_under_the_array():
    """A GEMM's bias and activation run on the vector unit while the array works (vector_overlap 1): the kernel
    takes its GEMM's time; with vector_overlap 0 the epilogue's compute adds to it."""
    t = dfit_nb.capture(lambda a, b, c: jnp.tanh(a @ b + c), jnp.ones((512, 512)), jnp.ones((512, 512)),
                        jnp.ones(512))
    hw = presets.get("scalesim_128").replace(vector_lanes=128)
    over, serial = (dfit_nb.replay(t, hw.replace(vector_overlap=v)) for v in (1.0, 0.0))
    vector = float(serial.ops["compute_cycles"].where(serial.ops["layout"] == "vector").sum())
    assert vector > 0
    hidden = float(over.ops["hidden_cycles"].sum())
    array = float(over.ops["compute_cycles"].where(over.ops["layout"] != "vector").sum())
    assert hidden == pytest.approx(min(array, vector), rel=1e-12)
    assert float(over.ops["compute_cycles"].where(over.ops["layout"] == "vector").sum()) == pytest.approx(
        vector - hidden, abs=1e-6)
    assert float(serial.ops["hidden_cycles"].sum()) == 0.0


@pytest.mark.filterwarnings("ignore::dfit_nb.sim.SpillWarning")
def test_a_kernel_whose_block_does_not_fit_a_tile_runs_unfused():
    """Rule 8: a fused kernel streams blocks of max(lanes, R x C) elements, double-buffered, through every op; a
    machine whose tile SRAM cannot hold a block of every intermediate runs the kernel as unfused ops. The size of
    the tensors does not matter, only the intermediates each element carries."""
    f = lambda x: jnp.exp(jnp.sin(x) * 2.0) + 1.0
    small = dfit_nb.capture(f, jnp.ones((64, 64)))
    large = dfit_nb.capture(f, jnp.ones((2048, 2048)))  # 16 MiB per intermediate, more than eyeriss_like holds
    block = 32 * 32
    prep = prepare(small, "rules")
    assert float(prep.arrays["kernel_ws"].max()) == 3  # the sin, mul and exp results stay inside
    base = presets.get("scalesim_32").replace(vector_lanes=32, word_bytes=4)
    need = 2 * block * 3 * 4
    third = int(need // 3)
    tight = base.replace(sram_input_bytes=third - 64, sram_weight_bytes=third - 64, sram_output_bytes=third - 64)
    roomy = base.replace(sram_input_bytes=third + 64, sram_weight_bytes=third + 64, sram_output_bytes=third + 64)
    assert not bool(dfit_nb.replay(small, tight).ops["fused"].any())
    assert bool(dfit_nb.replay(small, roomy).ops["fused"].all())
    assert bool(dfit_nb.replay(large, presets.get("eyeriss_like")).ops["fused"].all())
    none = dfit_nb.replay(small, tight, fusion="none")
    assert float(dfit_nb.replay(small, tight).summary["dram_bytes"]) == float(none.summary["dram_bytes"])


def _layer_norm(x, w, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * w + b


@pytest.mark.filterwarnings("ignore::dfit_nb.sim.SpillWarning")
def test_a_row_normalisation_is_one_kernel_where_its_row_fits():
    """Rule 9: a softmax and a layer norm reduce rows and use the results across the same rows: one kernel
    keeping a row of each reduction's input on chip, where rule 4 alone makes three and four. A row longer than a
    tile holds still runs as one kernel, looped: it streams its input again for each reduction over the rows; a
    reduction over another axis (column sums) still roots its kernel."""
    x = jnp.ones((64, 256))
    soft = dfit_nb.capture(lambda a: jax.nn.softmax(a, axis=-1), x)
    norm = dfit_nb.capture(_layer_norm, x, jnp.ones(256), jnp.ones(256))
    fused = presets.get("tpu_v4").replace(row_reductions="fused")  # (tpu_v4's compiler, XLA:TPU, splits them)
    for t in (soft, norm):
        k = prepare(t, "rules").kernels
        assert len(set(k.kernel[k.payer])) == 1 and set(k.row.tolist()) == {2 * 256.0}  # two row reductions
        run = dfit_nb.replay(t, fused)
        assert bool(run.ops["fused"].all()) and run.kernels.sizes["kernel"] == 1
        # the row stays on chip: only the program's output is written to DRAM, no intermediate
        writes = run.ops["dram_writes_output"].values
        assert np.flatnonzero(writes).tolist() == [run.ops.sizes["op"] - 1]
        assert float(writes[-1]) == 64 * 256 * 2  # float32 as tpu_v4's bf16 word
    # 2 x (2 rows + blocks of intermediates) x word: 50,000-element rows need 0.8 MB of a tile, more than
    # eyeriss_like's: the softmax loops, reading its input once per pass (max, sum, normalise) at the 2-byte word
    long = dfit_nb.capture(lambda a: jax.nn.softmax(a, axis=-1), jnp.ones((4, 50_000)))
    kept = dfit_nb.replay(long, fused)
    assert bool(kept.ops["fused"].all()) and float(kept.ops["spilled_bytes"].sum()) == 0
    looped = dfit_nb.replay(long, presets.get("eyeriss_like"))
    assert bool(looped.ops["fused"].all()) and looped.kernels.sizes["kernel"] == 1
    # (besides the max's scalar operand, 2 bytes)
    assert float(looped.ops["dram_reads_input"].sum()) == pytest.approx(3 * 4 * 50_000 * 2, abs=8)
    assert float(looped.ops["dram_writes_output"].sum()) == 4 * 50_000 * 2
    # the same rows within a GPU-like machine's row buffer (a thread block's registers) or beyond it
    for buffer, passes in ((2 * 50_000 * 4, 1), (2 * 1024 * 4, 3)):
        run = dfit_nb.replay(long, fused.replace(row_buffer_bytes=buffer))
        assert float(run.ops["dram_reads_input"].sum()) == pytest.approx(passes * 4 * 50_000 * 2, abs=8)
    cols = dfit_nb.capture(lambda a: a / a.sum(0, keepdims=True), x)
    k = prepare(cols, "rules").kernels
    assert len(set(k.kernel[k.payer])) == 2 and not k.row.any()
    # the rows reduced, read from the operands' shapes: the softmax's max and sum reduce rows of 256, the
    # column sums none
    reductions = {t: t.ops["op"].values[t.ops["op_class"].values == "reduction"] for t in (soft, cols)}
    assert _operands.reduced_row(soft.operands, reductions[soft]).tolist() == [256.0, 256.0]
    assert _operands.reduced_row(cols.operands, reductions[cols]).tolist() == [0.0]
    assert prepare(soft).reduced_row.max() == 256.0 and not prepare(cols).reduced_row.any()


def test_an_mlps_two_gemms_chain_into_one_kernel_and_nothing_else_does():
    """Rule 10: x @ w1, an activation, @ w2 is one kernel (XLA:TPU's fusion of an MLP): the rows stream through
    both GEMMs, the hidden activations never reach DRAM, the second weight stays on chip. Not a chain: a split
    between the GEMMs (a gated FFN's gate and up halves), a second GEMM whose other operand is made in the kernel
    too, a convolution. A second weight larger than a tile's SRAM runs unfused."""
    s = jax.ShapeDtypeStruct
    f32 = jnp.float32

    def mlp(x, w1, w2):
        return jax.nn.gelu(x @ w1) @ w2

    def gated(x, w, w2):
        gate, up = jnp.split(x @ w, 2, axis=-1)
        return (jax.nn.silu(gate) * up) @ w2

    def both_inside(q, k):
        h = jnp.tanh(q @ k.T)
        return h @ (h * 2.0)

    t = dfit_nb.capture(mlp, s((64, 32), f32), s((32, 128), f32), s((128, 32), f32))
    k = prepare(t, "rules").kernels
    assert k.count == 1 and k.payer.sum() == 1 and set(k.weight.tolist()) == {128.0 * 32} and not k.row.any()
    run = dfit_nb.replay(t, presets.get("tpu_v4"))
    assert bool(run.ops["fused"].all())
    writes = run.ops["dram_writes_output"].values
    assert np.flatnonzero(writes).tolist() == [run.ops.sizes["op"] - 1]  # only the program's output
    none = dfit_nb.replay(t, presets.get("tpu_v4"), fusion="none")
    assert float(run.ops["launch_cycles"].sum()) < float(none.ops["launch_cycles"].sum())
    assert float(run.summary["macs"]) == float(none.summary["macs"])
    for fn, args in ((gated, (s((64, 32), f32), s((32, 256), f32), s((128, 32), f32))),
                     (both_inside, (s((64, 32), f32), s((64, 32), f32)))):
        p = prepare(dfit_nb.capture(fn, *args), "rules")
        gemm = p.arrays["gemm"] > 0
        assert len(set(p.kernels.kernel[gemm])) == 2, fn.__name__
    conv = dfit_nb.capture(lambda x, a, b: jax.lax.conv(jax.nn.relu(jax.lax.conv(x, a, (1, 1), "SAME")), b, (1, 1),
                                                       "SAME"), s((1, 8, 16, 16), f32), s((8, 8, 3, 3), f32),
                           s((8, 8, 3, 3), f32))
    p = prepare(conv, "rules")
    assert len(set(p.kernels.kernel[p.arrays["gemm"] > 0])) == 2
    # a 1,024 x 1,024 weight in 2-byte words is 2 MiB: tpu_v4's chip holds it, eyeriss_like's does not
    big = dfit_nb.capture(mlp, s((8, 64), f32), s((64, 1024), f32), s((1024, 1024), f32))
    assert prepare(big, "rules").kernels.count == 1
    assert bool(dfit_nb.replay(big, presets.get("tpu_v4")).ops["fused"].all())
    with pytest.warns(SpillWarning, match="run unfused"):
        assert not bool(dfit_nb.replay(big, presets.get("eyeriss_like")).ops["fused"].any())


@pytest.mark.parametrize("preset", ["tpu_like", "npu_like"])
def test_a_fused_kernel_brings_a_tensor_on_chip_once(preset):
    """A softmax's max and subtract both read the scores a GEMM made in another kernel: the fused kernel moves
    them in once (a retile on a grid, a DRAM read where they left the chip), not once per reading op."""
    t = dfit_nb.capture(lambda a, b: jax.nn.softmax(a @ b, axis=-1), jnp.ones((64, 256)), jnp.ones((256, 512)))
    prep = prepare(t, "rules")
    readers = [i for i in range(len(prep.op)) if 0 in prep.preds[i]]
    assert [str(prep.primitive[i]) for i in readers] == ["reduce_max", "sub"]
    assert prep.arrays["shared_reads"][readers].tolist() == [0.0, 1.0]
    hw = presets.get(preset)
    run = dfit_nb.replay(t, hw)
    scores = 64 * 512 * float(hw.word_bytes)
    kernel_ops = run.ops.isel(op=slice(1, None))
    assert float(kernel_ops["bytes_retile"].sum() + kernel_ops["dram_reads_input"].sum()) == pytest.approx(
        scores, abs=8)
    unfused = dfit_nb.replay(t, hw, fusion="none")
    assert float(unfused.ops["bytes_retile"].sum() + unfused.ops["dram_reads_input"].isel(op=slice(1, None)).sum()
                 ) > 1.9 * scores


@pytest.mark.parametrize("preset", ["tpu_like", "npu_like"])
def test_a_fused_kernel_reads_a_program_argument_once(preset):
    """A softmax of a program argument reads it for its max and again for its subtract: fused, the kernel
    brings it from DRAM once; one kernel per primitive, twice. A layer norm's argument likewise, read by its
    mean, its centring and (squared) its variance."""
    hw = presets.get(preset)
    x = jax.ShapeDtypeStruct((64, 512), jnp.float32)
    word_bytes = 64 * 512 * float(hw.word_bytes)
    for fn in (lambda a: jax.nn.softmax(a, axis=-1), lambda a: (a - a.mean(-1, keepdims=True)) * 2.0):
        t = dfit_nb.capture(fn, x)
        fused, unfused = dfit_nb.replay(t, hw), dfit_nb.replay(t, hw, fusion="none")
        assert bool(fused.ops["fused"].any())
        assert float(fused.ops["dram_reads_input"].sum()) == pytest.approx(word_bytes, abs=8)
        assert float(unfused.ops["dram_reads_input"].sum()) == pytest.approx(2 * word_bytes, abs=8)


def test_an_epilogue_reading_the_gemms_own_argument_takes_it_from_chip():
    """The capture names the argument each op reads as it is (``trace.edges``' ``input_edge`` rows). A residual
    epilogue reading the GEMM's lhs argument finds it on chip in the fused kernel: the kernel reads the lhs and
    the weights once."""
    hw = presets.get("tpu_v4")
    t = dfit_nb.capture(lambda x, w: x @ w + x, jnp.ones((32, 64)), jnp.ones((64, 64)))
    e, prims = t.edges, t.ops["primitive"].values
    reads = sorted(zip(e["input_dst"].values.tolist(), e["input_operand"].values.tolist(),
                       e["input_arg"].values.tolist(), e["input_bytes"].values.tolist(), strict=True))
    assert [(str(prims[d]), o, g, b) for d, o, g, b in reads] == [
        ("dot_general", 0, 0, 32 * 64 * 4), ("dot_general", 1, 1, 64 * 64 * 4), ("add", 1, 0, 32 * 64 * 4)]
    prep = prepare(t, "rules")
    assert prep.arrays["ext_shared"].tolist() == [0.0, 32 * 64 * 4.0]
    fused, unfused = dfit_nb.replay(t, hw), dfit_nb.replay(t, hw, fusion="none")
    assert bool(fused.ops["fused"].all())
    moved = {run: float((r.ops["dram_reads_input"] + r.ops["dram_reads_weight"]).sum())
             for run, r in (("fused", fused), ("unfused", unfused))}
    assert moved == {"fused": (32 * 64 + 64 * 64) * 2.0, "unfused": (2 * 32 * 64 + 64 * 64) * 2.0}


def test_shared_arguments_marks_later_reads_per_kernel_and_operand():
    """The first read of an argument in a kernel brings it in; later reads in that kernel are shared, a GEMM's
    as its lhs or rhs flag, another op's as bytes of that operand; a read in another kernel is not."""
    reads = np.array([[0, 0, 5], [1, 0, 5], [1, 1, 6], [2, 1, 6], [3, 0, 5]])
    nbytes = np.array([32.0, 128.0, 64.0, 64.0, 32.0])  # float32[8], float32[8,4], float32[4,4] twice, float32[8]
    out = shared_arguments(np.array([0, 0, 0, 1]), reads, nbytes, np.array([0.0, 1.0, 0.0, 0.0]))
    assert out["lhs_shared"].tolist() == [0.0, 1.0, 0.0, 0.0]
    assert out["rhs_shared"].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert out["ext_shared"].tolist() == [0.0, 0.0, 64.0, 0.0]


def test_policy_replays_with_its_fusion(encoder):
    hw = presets.get("npu_like")
    policy = dfit_nb.sim.select_dataflows(encoder, hw, "energy", fusion="none")
    assert policy.fusion == "none"
    assert policy.runs["hybrid"].attrs["fusion"] == "none"
    with pytest.raises(ReplayError, match="selected with fusion='none'"):
        dfit_nb.replay(encoder, hw, policy, fusion="rules")


def test_a_single_style_selection_is_named_after_it(encoder):
    policy = dfit_nb.sim.select_dataflows(encoder, presets.get("npu_like"), "energy", candidates=("os",),
                                          evaluate=False)
    assert policy.name.startswith("os ") and "hybrid" not in policy.name


@pytest.mark.parametrize("bad", ["xla", "", 3, "Rules!"])
def test_an_unknown_fusion_mode_is_refused_with_the_valid_ones(encoder, bad):
    with pytest.raises(kernels.FusionError, match="'rules', 'compiler', 'none'"):
        dfit_nb.replay(encoder, presets.get("npu_like"), fusion=bad)


def test_a_fusion_map_from_another_trace_is_refused(encoder):
    other = copy.copy(encoder)
    ops = encoder.ops.copy()
    fusion = ops["fusion"].values.astype(object).copy()
    fusion[np.flatnonzero(fusion != "")[0]] = "fusion.from_an_older_file"
    ops["fusion"] = ("op", fusion)
    other.ops = ops
    other.__dict__.pop("_dfit_replay_prepared", None)
    with pytest.raises(ReplayError, match=r"fusion\.from_an_older_file"):
        dfit_nb.replay(other, presets.get("npu_like"), fusion="compiler")
    # the rules do not read the map
    dfit_nb.replay(other, presets.get("npu_like"), fusion="rules")


def test_gradients_through_a_kernel_without_vector_work_are_finite():
    """A kernel with no vector work to hide (a scale by a folded constant) passes finite gradients to every field,
    so a calibration can fit vector_rate on such programs."""
    import jax
    import pandas as pd

    from dfit_nb.sim._cost import for_jit
    from dfit_nb.sim.kernel_predictor import kernel_predictor, program_rows

    rows = program_rows(pd.DataFrame({"fn": [lambda x: x / jnp.sqrt(16.0), jnp.tanh],
                                      "args": [(jnp.ones((64, 64)),)] * 2, "time_s": [1e-6, 1e-6]}),
                        "time_s", 1.0, None)
    hw = presets.get("tpu_v4")
    f = kernel_predictor(rows, hw)
    with jax.enable_x64(True):
        h = jax.tree.map(lambda x: jnp.asarray(x, float), for_jit(hw))
        g = jax.jit(jax.grad(lambda h: f(h).sum()))(h)
    assert all(np.isfinite(float(getattr(g, k))) for k in ("vector_rate", "clock_ghz", "vector_overlap",
                                                           "op_overhead_cycles", "dram_bytes_per_cycle"))
    assert float(g.vector_rate) < 0  # a faster vector unit, less time
    assert float(g.transcendental_cycles) > 0  # a slower tanh, more time: a field a calibration can move


def _gelu_residual():
    return dfit_nb.capture(lambda x, w: jax.nn.gelu(x @ w) + x, jax.ShapeDtypeStruct((256, 512), jnp.float32),
                           jax.ShapeDtypeStruct((512, 512), jnp.float32))


def test_a_sweep_prices_a_trace_as_its_kernels_each_alone():
    """sweep() of a Trace prices each kernel alone (default fusion "rules"): a program that is one kernel costs
    what its replay does, to rounding; where a tile's SRAM cannot hold the kernel's working set it runs as its
    ops, each alone, exactly as fusion="none" prices them; MACs are the same in every mode."""
    t = _gelu_residual()
    hw = presets.get("tpu_v4")
    sweeps = {mode: dfit_nb.sim.sweep(t, hw, dataflow="ws", fusion=mode, progress=False, sram_kb=[64, 4096])
              for mode in ("rules", "none")}
    rules, none = sweeps["rules"], sweeps["none"]
    assert rules.attrs["fusion"] == "rules" and none.attrs["fusion"] == "none"
    assert prepare(t, "rules").kernels.count == 1 and len(set(rules["kernel"].values.tolist())) == 1
    replayed = float(dfit_nb.replay(t, hw, "ws").summary["latency_cycles"])
    assert float(rules["total_cycles"].sel(sram_kb=4096).item()) == pytest.approx(replayed, rel=1e-9)
    # too small: the kernel runs unfused, and each op costs what it costs alone
    small = rules.sel(sram_kb=64, dataflow="ws")
    np.testing.assert_allclose(small["cycles"].values, none.sel(sram_kb=64, dataflow="ws", op=rules["op"].values)[
        "cycles"].values, rtol=1e-12)
    assert float(rules["total_macs"].sel(sram_kb=64).item()) == float(none["total_macs"].sel(sram_kb=64).item())
    # fused, the kernel moves less and launches once
    big = rules.sel(sram_kb=4096, dataflow="ws")
    assert float(big["energy_pj"].sum()) < float(none.sel(sram_kb=4096, dataflow="ws")["energy_pj"].sum())


def test_the_three_fusion_modes_of_a_sweep_agree_where_nothing_fuses():
    """A program of one GEMM is one kernel in every mode: the sweeps are equal."""
    t = dfit_nb.capture(lambda a, b: a @ b, jnp.ones((64, 128)), jnp.ones((128, 32)))
    hw = presets.get("npu_like")
    got = [dfit_nb.sim.sweep(t, hw, dataflow=["ws", "os"], fusion=mode, progress=False, pe=[(8, 8), (16, 16)])
           for mode in ("rules", "compiler", "none")]
    for other in got[1:]:
        np.testing.assert_array_equal(other["cycles"].values, got[0]["cycles"].values)
        np.testing.assert_array_equal(other["energy_pj"].values, got[0]["energy_pj"].values)


def test_a_sweep_of_a_table_has_no_kernels_and_says_so():
    table = {"m": [64], "k": [64], "n": [64]}
    hw = presets.get("scalesim_32")
    with pytest.raises(dfit_nb.sim.CostInputError, match="pass the Trace"):
        dfit_nb.sim.sweep(table, hw, fusion="rules", progress=False, pe=[(8, 8)])
    with pytest.raises(kernels.FusionError, match="'rules', 'compiler', 'none'"):
        dfit_nb.sim.sweep(_gelu_residual(), hw, fusion="xla", progress=False, pe=[(8, 8)])
    assert dfit_nb.sim.sweep(table, hw, progress=False, pe=[(8, 8)]).attrs["fusion"] == "none"


def test_cost_of_a_trace_prices_its_kernels_as_the_sweep_and_the_replay_do():
    """cost() reads a Trace as the sweep does (each kernel alone, default "rules"): a one-kernel program costs
    what its replay does; fusion="none" keeps every row of the ops table alone; a table refuses kernels."""
    t = _gelu_residual()
    hw = presets.get("tpu_v4")
    fused = dfit_nb.sim.cost(t, hw)
    assert fused.attrs["fusion"] == "rules" and "kernel" in fused.coords
    assert fused["op"].values.tolist() == prepare(t, "rules").op.tolist()
    replayed = float(dfit_nb.replay(t, hw, "ws").summary["latency_cycles"])
    assert float(fused["total_cycles"]) == pytest.approx(replayed, rel=1e-9)
    swept = dfit_nb.sim.sweep(t, hw, dataflow="ws", progress=False, pe=[(128, 128)])
    np.testing.assert_allclose(swept["cycles"].values.reshape(-1), fused["cycles"].values, rtol=1e-12)
    alone = dfit_nb.sim.cost(t, hw, fusion="none")
    assert alone.attrs["fusion"] == "none" and alone.sizes["op"] == t.ops.sizes["op"]
    assert float(alone["total_macs"]) == float(fused["total_macs"])
    assert float(alone["total_cycles"]) > 2 * float(fused["total_cycles"])
    with pytest.raises(dfit_nb.sim.CostInputError, match="pass the Trace"):
        dfit_nb.sim.cost({"m": [8], "k": [8], "n": [8]}, hw, fusion="compiler")


def test_a_trace_saved_before_input_edges_replays_reading_each_argument_per_op(tmp_path):
    """A trace whose edges have no ``input_edge`` rows (saved before the capture recorded them) still loads and
    replays; its kernels cannot know which argument an op reads, so each op reads its own."""
    t = dfit_nb.capture(lambda a: jax.nn.softmax(a, axis=-1), jax.ShapeDtypeStruct((64, 512), jnp.float32))
    old = copy.copy(t)
    old.edges = t.edges.drop_vars(["input_arg", "input_dst", "input_operand", "input_bytes", "input_edge"])
    path = old.save(tmp_path / "old.nc")
    loaded = dfit_nb.load_trace(path)
    assert "input_edge" not in loaded.edges.dims
    assert not prepare(loaded, "rules").arrays["ext_shared"].any()
    hw = presets.get("tpu_like")
    reads = {name: float(dfit_nb.replay(x, hw).ops["dram_reads_input"].sum()) for name, x in
             (("old", loaded), ("new", t))}
    assert reads["old"] == pytest.approx(2 * reads["new"], abs=8)  # and a 2-byte scalar, once in both


# --------------------------------------------------------------------------------------------------------------------
# A trace lowered by XLA:TPU (ahead of time, libtpu, no TPU): tests/data/tpu_v4_block.nc, written by
# ``dfit_nb.capture(block, params, x, lower_for=<a device of topology v4:2x2x1>)``: a pre-layer-norm block (layer norm,
# a GELU MLP 128 -> 256 -> 128, a residual) on 16 tokens. See benchmarks/bench_kernels.py --tpu.
# --------------------------------------------------------------------------------------------------------------------
TPU_BLOCK = Path(__file__).resolve().parents[1] / "data" / "tpu_v4_block.nc"


@pytest.fixture(scope="module")
def tpu_block():
    return dfit_nb.load_trace(TPU_BLOCK)


def test_a_trace_lowered_for_a_tpu_keeps_xla_tpus_fusions(tpu_block):
    """The capture's fusion map is the TPU compiler's: its DMA halves are executed instructions holding no op, and
    XLA:TPU put the layer norm's scaling, both GEMMs, the GELU and the residual in one fusion."""
    t = tpu_block
    assert (t.attrs["backend"], t.attrs["device_kind"]) == ("tpu", "TPU v4")
    low = t.lowering
    kinds = dict(zip(low["fusion"].values.astype(str), low["kind"].values.astype(str), strict=True))
    dma = np.array([o.endswith(("-start", "-done")) for o in low["opcode"].values.astype(str)])
    assert dma.sum() >= 2 and (low["op_ids"].values.astype(str)[dma] == "").all()
    assert (low["op_ids"].values.astype(str)[~dma] != "").all()
    fusion = np.array([str(f).split(";")[0] for f in t.ops["fusion"].values])
    prim = t.ops["primitive"].values.astype(str)
    gemms = fusion[prim == "dot_general"]
    assert len(gemms) == 2 and gemms[0] == gemms[1] and kinds[gemms[0]] == "kOutput"
    assert set(fusion[(prim == "tanh") | (prim == "rsqrt")]) <= set(kinds)
    assert fusion[prim == "tanh"][0] == gemms[0] and fusion[prim == "rsqrt"][0] != gemms[0]


def test_compiler_kernels_of_a_tpu_lowering_price_xla_tpus_grouping(tpu_block):
    """fusion='compiler' on the TPU lowering: a kernel with two GEMMs (which the rules never make) is priced as one
    launch, its intermediates on chip; the work is the same in every mode."""
    hw = presets.get("tpu_v4")
    runs = {mode: dfit_nb.replay(tpu_block, hw, "ws", fusion=mode) for mode in MODES}
    ops = runs["compiler"].ops
    gemm = ops["primitive"].values.astype(str) == "dot_general"
    kernel = ops["kernel"].values
    assert kernel[gemm][0] == kernel[gemm][1]
    assert (ops["launch_cycles"].values[kernel == kernel[gemm][0]] > 0).sum() == 1
    # the rules chain the MLP's GEMMs as XLA:TPU does (rule 10), and keep the second's weight on chip
    assert len(set(runs["rules"].ops["kernel"].values[gemm])) == 1
    assert (runs["rules"].ops["fused"].values[gemm]).all()
    for mode, run in runs.items():
        assert float(run.summary["macs"]) == pytest.approx(float(runs["none"].summary["macs"]), rel=1e-12), mode
    # one kernel for the block's MLP moves fewer DRAM bytes than a kernel per primitive
    assert float(runs["compiler"].summary["dram_bytes"]) < float(runs["none"].summary["dram_bytes"])


def _pairs_in_one_kernel(kernel: np.ndarray, working: np.ndarray) -> set[tuple[int, int]]:
    idx = np.flatnonzero(working)
    return {(int(i), int(j)) for a, i in enumerate(idx) for j in idx[a + 1:] if kernel[i] == kernel[j]}


def test_tpu_v4s_rules_split_a_layer_norm_as_xla_tpu_does(tpu_block):
    """tpu_v4's compiler ends a kernel at a reduction over rows (``Hardware.row_reductions = "split"``): on the
    block XLA:TPU lowered, the rules launch XLA:TPU's 5 kernels, and 94% of the op pairs they put in one kernel
    share an XLA:TPU fusion; keeping the row (rule 9) makes 2 kernels, 66% of whose pairs XLA:TPU keeps together."""
    hw = presets.get("tpu_v4")
    assert hw.row_reductions == "split" and kernels.splits_rows(hw)
    xla = prepare(tpu_block, "compiler").kernels
    split, fused = (prepare(tpu_block, "rules", s).kernels for s in (True, False))
    assert split.split and not fused.split and not split.row.any() and fused.row.any()
    working = ~(split.free | xla.free)
    theirs = _pairs_in_one_kernel(xla.kernel, working)
    agree = {}
    for name, k in (("split", split), ("fused", fused)):
        ours = _pairs_in_one_kernel(k.kernel, working)
        agree[name] = len(ours & theirs) / len(ours)
    launches = {name: len(set(k.kernel[k.payer])) for name, k in (("xla", xla), ("split", split), ("fused", fused))}
    assert launches == {"xla": 5, "split": 5, "fused": 2}
    assert agree["split"] > 0.94 and agree["fused"] < 0.67
    # the replay on tpu_v4 runs the split kernels; the same machine told to keep rows runs the fused ones
    assert dfit_nb.replay(tpu_block, hw).kernels.sizes["kernel"] == split.count
    assert dfit_nb.replay(tpu_block, hw.replace(row_reductions="fused")).kernels.sizes["kernel"] == fused.count
    # the work is the same; only the kernels differ
    runs = [dfit_nb.replay(tpu_block, h) for h in (hw, hw.replace(row_reductions="fused"))]
    assert float(runs[0].summary["macs"]) == float(runs[1].summary["macs"])


def test_lower_for_this_processs_device_is_the_default_lowering():
    def f(x, w):
        return jnp.tanh(x @ w).sum(0)

    args = (jax.ShapeDtypeStruct((8, 16), jnp.float32), jax.ShapeDtypeStruct((16, 4), jnp.float32))
    default = dfit_nb.capture(f, *args)
    placed = dfit_nb.capture(f, *args, lower_for=jax.devices("cpu")[0])
    assert placed.attrs["backend"] == "cpu" and placed.attrs["device_kind"] == default.attrs["device_kind"]
    assert placed.ops["fusion"].values.tolist() == default.ops["fusion"].values.tolist()
    assert placed.lowering["kind"].values.tolist() == default.lowering["kind"].values.tolist()


@pytest.mark.parametrize(("value", "mode", "error", "words"), [
    ("tpu", "static", TypeError, ["lower_for must be a jax.Device", "'tpu'", "get_topology_desc"]),
    (None, "profile", ValueError, ["lower_for=", "mode='profile'", "mode='static'"]),
])
def test_lower_for_is_refused_with_what_would_be_valid(value, mode, error, words):
    device = jax.devices("cpu")[0] if value is None else value
    with pytest.raises(error) as info:
        dfit_nb.capture(lambda x: x + 1, jnp.ones(3), mode=mode, lower_for=device)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


@pytest.fixture(scope="module")
def softmax_rows():
    return dfit_nb.capture(lambda a: jax.nn.softmax(a, axis=-1), jax.ShapeDtypeStruct((8, 512), jnp.float32))


@pytest.mark.filterwarnings("ignore::dfit_nb.sim.SpillWarning")
@settings(max_examples=8, deadline=None)
@given(small=st.floats(1.0, 2e4), extra=st.floats(0.0, 2e4), step=st.floats(0.0, 50.0))
def test_a_smaller_row_buffer_or_a_slower_tree_never_helps(softmax_rows, small, extra, step):
    """Invariants of looped row reductions and reduction trees (machine.rows_kept, row_rereads,
    reduction_tree_cycles) over the machine's fields (leaves: one compiled program): the softmax's input crosses
    DRAM once (its rows kept: 2 rows x 512 x 4 B = 4 KiB fit) or three times (looped), never otherwise; a smaller
    buffer never moves fewer bytes or takes less time; a slower tree never takes less time; the work is the same.
    (A buffer of 0 is not the smallest: it means a tile's SRAM, see test_a_row_normalisation_is_one_kernel...)"""
    hw = Hardware(word_bytes=4, reduction_step_cycles=step)
    runs = [dfit_nb.replay(softmax_rows, hw.replace(row_buffer_bytes=b)) for b in (small, small + extra)]
    reads = [float(r.ops["dram_reads_input"].sum()) for r in runs]
    for r, b in zip(reads, (small, small + extra), strict=True):
        kept = b >= 2 * 512 * 4
        assert r == pytest.approx((1 if kept else 3) * 8 * 512 * 4, abs=8)
    assert reads[0] >= reads[1]
    assert float(runs[0].summary["latency_s"]) >= float(runs[1].summary["latency_s"]) * (1 - 1e-12)
    slower = dfit_nb.replay(softmax_rows, hw.replace(reduction_step_cycles=step + 10.0))
    assert float(slower.summary["latency_s"]) >= float(dfit_nb.replay(softmax_rows, hw).summary["latency_s"])
    assert (float(runs[0].ops["energy_compute_pj"].sum()) == float(runs[1].ops["energy_compute_pj"].sum())
            == float(slower.ops["energy_compute_pj"].sum()))
