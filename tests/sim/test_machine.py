"""The one machine model: cost() and replay agree by construction, energy reconciles, every tile is usable."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dfit_nb
from dfit_nb.sim import Hardware, presets, reconcile
from dfit_nb.sim._prepare import ReplayError, prepare
from dfit_nb.sim._replay import SpillWarning


def _conv(x, w):
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


# one-op programs of each kind the model distinguishes: a GEMM, a batched GEMM, a convolution, a vector op
ONE_OP = {
    "matmul": (lambda a, b: a @ b, (jnp.ones((96, 200)), jnp.ones((200, 48)))),
    "batched": (lambda a, b: jnp.einsum("bmk,bkn->bmn", a, b), (jnp.ones((3, 40, 64)), jnp.ones((3, 64, 24)))),
    "conv": (_conv, (jnp.ones((1, 12, 12, 8)), jnp.ones((3, 3, 8, 16)))),
    "tanh": (jnp.tanh, (jnp.ones((64, 96)),)),
}


@pytest.fixture(scope="module")
def one_op_traces():
    traces = {name: dfit_nb.capture(fn, *args) for name, (fn, args) in ONE_OP.items()}
    for name, t in traces.items():
        assert len(prepare(t).op) == 1, name
    return traces


@pytest.mark.parametrize("preset", presets.names())
def test_cost_equals_a_one_op_replay_on_every_preset_and_dataflow(one_op_traces, preset):
    hw = presets.get(preset)
    for name, t in one_op_traces.items():
        (op,) = prepare(t).op
        for df in ("ws", "os", "is"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SpillWarning)
                run = dfit_nb.replay(t, hw, df)
            c = dfit_nb.sim.cost(t, hw, df).sel(op=op)
            r = run.ops.sel(op=op)
            where = f"{name} on {preset} ({df})"
            np.testing.assert_allclose(float(c["cycles"]), float(run.summary["latency_cycles"]), rtol=1e-9,
                                       err_msg=where)
            np.testing.assert_allclose(float(c["energy_pj"]), float(r["energy_pj"]), rtol=1e-9, err_msg=where)
            levels = {"compute": float(c["energy_mac_pj"] + c["energy_rf_pj"]), "sram": float(c["energy_sram_pj"]),
                      "noc": float(c["energy_noc_pj"]), "dram": float(c["energy_dram_pj"])}
            for level, value in levels.items():
                np.testing.assert_allclose(value, float(r[f"energy_{level}_pj"]), rtol=1e-9, atol=1e-9,
                                           err_msg=f"{level} energy, {where}")
            dram = sum(float(c[v]) for v in ("dram_reads_input", "dram_reads_weight", "dram_reads_output",
                                              "dram_writes_output"))
            np.testing.assert_allclose(dram, float(r["bytes_dram"]), rtol=1e-9, err_msg=f"DRAM bytes, {where}")
            np.testing.assert_allclose(float(c["noc_bytes"]), float(r["bytes_noc"]), rtol=1e-9, atol=1e-9,
                                       err_msg=f"NoC bytes, {where}")
            assert (float(c["gy"]), float(c["gx"])) == (float(r["gy"]), float(r["gx"])), where
            assert float(r["energy_retile_pj"]) == 0.0, where


@pytest.mark.parametrize("preset", ["tpu_like", "cerebras_like", "npu_like"])
def test_energy_of_every_example_reconciles_level_by_level(static_traces, all_runs, preset):
    hw = presets.get(preset)
    for name, t in static_traces.items():
        run = all_runs[(name, preset)]
        r = reconcile(t, hw, run)
        replayed = float(run.summary["energy_j"])
        assert float(r["replayed_energy_j"]) == pytest.approx(replayed, rel=1e-12), name
        # alone + the named differences = the replay, exactly
        assert float(r["alone_energy_j"] + r["difference_j"].sum()) == pytest.approx(replayed, rel=1e-12), name
        # a program never re-reads more from DRAM than its ops alone do: results stay on chip or go to DRAM
        assert float(r["difference_j"].sel(level="dram")) <= 1e-15, name
        assert float(r["difference_j"].sel(level="retile")) >= 0.0, name
        # the per-operand DRAM traffic the Run reports (the reuse map reads it) adds up to the op's DRAM bytes
        per_operand = sum(run.ops[k].values for k in ("dram_reads_input", "dram_reads_weight", "dram_reads_output",
                                                      "dram_writes_output"))
        np.testing.assert_allclose(per_operand, run.ops["bytes_dram"].values, rtol=1e-9, atol=1e-6, err_msg=name)
        if hw.execution == "time":  # ops run one after another: nothing overlaps
            assert float(r["overlap_cycles"]) == pytest.approx(0.0, abs=1e-6), name


def test_reconcile_refuses_another_machine(static_traces, all_runs):
    with pytest.raises(ValueError, match="replayed with"):
        reconcile(static_traces["mlp"], presets.get("tpu_like"), all_runs[("mlp", "npu_like")])


def test_reconcile_refuses_a_run_of_another_program_and_inputs_of_another_type(static_traces, all_runs):
    from dfit_nb.sim._reconcile import ReconcileError

    hw, run = presets.get("npu_like"), all_runs[("mlp", "npu_like")]
    with pytest.raises(ReconcileError, match=r"the run replays another program .*pass the Trace the run was replayed"):
        reconcile(static_traces["encoder"], hw, run)
    with pytest.raises(ReconcileError, match=r"run must be a dfit_nb Run .*got NoneType"):
        reconcile(static_traces["mlp"], hw, None)
    with pytest.raises(ReconcileError, match=r"trace must be a dfit_nb Trace .*got Dataset"):
        reconcile(static_traces["mlp"].ops, hw, run)
    with pytest.raises(ReconcileError, match=r"alone= must be an xarray Dataset.*got str"):
        reconcile(static_traces["mlp"], hw, run, alone="x")
    # two lambdas of the same argument shapes pass Run.comparable (function name and shapes): their ops differ
    a = dfit_nb.capture(lambda x: jnp.tanh(x) @ x, jnp.ones((8, 8)))
    b = dfit_nb.capture(lambda x: jnp.sort(x, axis=0) + x, jnp.ones((8, 8)))
    with pytest.raises(ReconcileError, match=r"another program than the trace \(op 0 is 'tanh' in the run"):
        reconcile(b, hw, dfit_nb.replay(a, hw))


def test_a_large_gemm_uses_every_tile_of_a_4x5_grid():
    """Split factors are not only powers of two: the fifth column of an XDNA-like 4x5 grid works."""
    t = dfit_nb.capture(lambda a, b: a @ b, jnp.ones((640, 256)), jnp.ones((256, 320)))
    hw = presets.get("npu_like")
    run = dfit_nb.replay(t, hw, "os")  # compute-bound here: 20 tiles beat 16 by more than the tile penalty
    assert float(run.ops["tiles"].max()) == hw.tiles
    busy = run.cube["busy"].sum("time").values
    assert (busy > 0).all(), busy
    assert float(dfit_nb.sim.cost(t, hw, "os")["tiles_used"].max()) == hw.tiles


def test_pinned_factors_are_checked_against_the_grid():
    t = dfit_nb.capture(lambda a, b: a @ b, jnp.ones((256, 128)), jnp.ones((128, 160)))
    hw = presets.get("npu_like")
    run = dfit_nb.replay(t, hw, "ws", layouts={"": "mn:5x4"})
    assert (float(run.ops["gy"][0]), float(run.ops["gx"][0])) == (5.0, 4.0)
    with pytest.raises(ReplayError, match="split factor 3"):
        dfit_nb.replay(t, hw, "ws", layouts={"": "mn:3x1"})


def test_runs_carry_the_roofs_of_the_one_model(all_runs):
    from dfit_nb.sim.machine import roofs

    run = all_runs[("mlp", "npu_like")]
    hw = presets.get("npu_like")
    with jax.enable_x64(True):
        want = {k: float(v) for k, v in roofs(hw).items()}
    for key, value in want.items():
        assert float(run.summary[f"roof_{key}"]) == pytest.approx(value, rel=1e-12)
    assert want["peak_flops_per_s"] == pytest.approx(2 * hw.peak_macs_per_cycle * hw.clock_ghz * 1e9)
    # a run's roofs come from one jitted call over the machine's field vector: the same values on every preset
    from dfit_nb.sim.run import roof_variables

    for name in presets.names():
        hw = presets.get(name)
        with jax.enable_x64(True):
            eager = {f"roof_{k}": float(v) for k, v in roofs(hw).items()}
        assert {k: float(v[1]) for k, v in roof_variables(hw).items()} == pytest.approx(eager, rel=1e-15)


# ---------------------------------------------------------------- the physics the real-chip check added
def _dram(c):
    return sum(float(c[v][0]) for v in ("dram_reads_input", "dram_reads_weight", "dram_reads_output",
                                         "dram_writes_output"))


def test_blocked_reuse_grows_smoothly_with_size_over_buffer():
    """One GEMM whose operands both overflow and whose results do not fit: DRAM bytes fall steadily as the
    buffers grow, with no jump where a buffer crosses an operand's size, reach the compulsory bytes once one
    operand fits, and never exceed the refetch-every-fold bound (each DRAM byte passes through SRAM)."""
    from dfit_nb.sim import Hardware, cost

    ops = {"m": [1024], "k": [1024], "n": [1024], "dtype": ["float16"]}
    compulsory = 3 * 1024 * 1024 * 2
    kib = np.arange(256, 4097, 64)
    dram = []
    for size in kib:
        # 128 KiB of partial sums: 256 x 256 blocks of the 1024 x 1024 result
        hw = Hardware(pe_rows=32, pe_cols=32, word_bytes=2, sram_input_bytes=int(size) * 1024,
                      sram_weight_bytes=int(size) * 1024, sram_output_bytes=256 * 1024)
        c = cost(ops, hw, "ws")
        dram.append(_dram(c))
        for x in ("input", "weight"):
            assert float(c[f"sram_reads_{x}"][0]) >= float(c[f"dram_reads_{x}"][0])
    dram = np.array(dram)
    assert (np.diff(dram) <= 1e-6).all()                       # more buffer never moves more
    assert (np.abs(np.diff(dram)) / dram[:-1] < 0.2).all()     # no all-or-nothing step between neighbours
    assert dram[0] > 1.5 * compulsory                          # 2 MiB operands against 128 KiB half-buffers
    assert dram[-1] == pytest.approx(compulsory)              # the input fits half its 4 MiB partition


def test_a_gemm_whose_results_fit_streams_each_operand_once():
    """Output blocking: with the whole result's partial sums resident (2 MiB in a 4 MiB partition), the
    reduction streams past it once, so however small the operands' buffers, each operand is read from DRAM
    once (the all-refetch schedule would read the input 5.7x over with 128 KiB half-buffers). Output
    stationary is the exception: its partial sums live in the PEs, so its output block is the array's rows."""
    from dfit_nb.sim import Hardware, cost

    ops = {"m": [1024], "k": [1024], "n": [1024], "dtype": ["float16"]}
    for df in ("ws", "is"):
        hw = Hardware(pe_rows=32, pe_cols=32, word_bytes=2, sram_input_bytes=256 * 1024,
                      sram_weight_bytes=256 * 1024, sram_output_bytes=4096 * 1024)
        assert _dram(cost(ops, hw, df)) == pytest.approx(3 * 1024 * 1024 * 2), df


def test_output_blocking_replaces_spilled_partial_sums_of_a_vocabulary_projection():
    """An LM head on tpu_v6e (4096 tokens x 4096 x 128,256): its 2 GB of float32 partial sums cannot stay on
    chip. Spilling them per reduction fold would move tens of GB; finishing one block of results before the next
    re-reads about 1 GB of the input, so the model moves about twice the compulsory bytes and spills nothing."""
    from dfit_nb.sim import cost, presets

    c = cost({"m": [4096], "k": [4096], "n": [128256], "dtype": ["bfloat16"]}, presets.get("tpu_v6e"), "ws")
    compulsory = (4096 * 4096 + 4096 * 128256 + 4096 * 128256) * 2
    assert float(c["dram_reads_output"][0]) == 0.0
    assert compulsory < _dram(c) < 2.5 * compulsory


def test_a_double_buffered_array_pays_its_fill_once_per_gemm():
    from dfit_nb.sim import cost

    hw = presets.get("scalesim_128")
    ops = {"m": [1000, 64, 4000], "k": [700, 64, 300], "n": [900, 64, 50]}
    for df in ("ws", "os", "is"):
        back_to_back = cost(ops, hw, df, memory="ideal")["compute_cycles"].values
        overlapped = cost(ops, hw.replace(fold_overlap=1.0), df, memory="ideal")["compute_cycles"].values
        half = cost(ops, hw.replace(fold_overlap=0.5), df, memory="ideal")["compute_cycles"].values
        assert (overlapped <= half).all() and (half <= back_to_back).all(), df
        assert overlapped[1] == back_to_back[1], df  # one fold: nothing to hide the fill under
        assert overlapped[0] < back_to_back[0], df


def test_partial_sums_move_at_the_accumulator_width():
    """A K-folded GEMM's partial sums (every output write but the final one, every read back) are
    ``accumulator_bytes`` wide; the final result keeps the op's word; an accumulator no wider than the word, one
    reduction fold and an output-stationary array (sums stay in the PEs) change nothing."""
    from dfit_nb.sim import cost

    hw = Hardware(pe_rows=32, pe_cols=32, word_bytes=2, sram_output_bytes=1 << 20)
    ops = {"m": [64, 64], "k": [512, 32], "n": [48, 48], "dtype": ["bfloat16", "bfloat16"]}
    keys = ("cycles", "sram_cycles", "sram_writes_output", "sram_reads_output", "dram_writes_output", "energy_pj")
    base = cost(ops, hw, "ws")
    for same in (hw.replace(accumulator_bytes=2), hw.replace(accumulator_bytes=1)):
        for key in keys:
            np.testing.assert_array_equal(cost(ops, same, "ws")[key].values, base[key].values, err_msg=key)
    wide = cost(ops, hw.replace(accumulator_bytes=4), "ws")
    final = 64 * 48 * 2.0
    folds = 512 // 32
    assert float(base["sram_writes_output"][0]) == folds * final
    assert float(wide["sram_writes_output"][0]) == final + 2 * (folds - 1) * final
    assert float(wide["sram_reads_output"][0]) == 2 * float(base["sram_reads_output"][0]) == 2 * (folds - 1) * final
    assert float(wide["sram_cycles"][0]) > float(base["sram_cycles"][0])
    assert float(wide["energy_pj"][0]) > float(base["energy_pj"][0])
    for key in keys:  # one reduction fold (k <= R): nothing to accumulate between folds
        assert float(wide[key][1]) == float(base[key][1]), key
    for key in keys:  # output stationary: the sums never leave the PEs
        assert float(cost(ops, hw.replace(accumulator_bytes=4), "os")[key][0]) == float(cost(ops, hw, "os")[key][0])
    fp32 = {**ops, "dtype": ["float32", "float32"]}
    wide32 = hw.replace(word_bytes=4, sram_output_bytes=1 << 20)
    for key in keys:  # never narrower than the word: a 4-byte op on 2-byte accumulators keeps 4-byte sums
        np.testing.assert_array_equal(cost(fp32, wide32.replace(accumulator_bytes=2), "ws")[key].values,
                                      cost(fp32, wide32, "ws")[key].values, err_msg=key)


def test_a_gemm_whose_reduction_side_is_shortest_pays_its_extra_fixed_cost_alone_and_in_a_replay():
    """short_reduction_cycles: once per execution of a GEMM with K <= min(M, N), in cost() and in a one-op replay
    alike; a GEMM with a longer K and a non-GEMM op pay nothing more; the gradient reaches the field."""
    from dfit_nb.sim import cost
    from dfit_nb.sim.calibration import predictor

    hw = presets.get("tpu_v4")
    step = hw.replace(short_reduction_cycles=100.0)
    ops = {"m": [64, 64, 48, 0], "k": [32, 128, 48, 0], "n": [96, 64, 96, 0], "count": [1, 1, 3, 1],
           "flops": [0, 0, 0, 4096], "bytes_read": [0, 0, 0, 16384], "bytes_written": [0, 0, 0, 16384],
           "dtype": ["float16"] * 4}
    base, more = cost(ops, hw, "ws"), cost(ops, step, "ws")
    np.testing.assert_array_equal(more["cycles"].values - base["cycles"].values, [100.0, 0.0, 100.0, 0.0])
    for key in ("compute_cycles", "dram_cycles", "energy_pj", "layout"):  # nothing else moves
        np.testing.assert_array_equal(more[key].values, base[key].values, err_msg=key)
    # a one-op program (48x48 @ 48x96: K = min(M, N), the boundary) pays it in a replay too, once per execution
    trace = dfit_nb.capture(lambda a, b: a @ b, jnp.ones((48, 48), jnp.float16), jnp.ones((48, 96), jnp.float16))
    runs = [dfit_nb.replay(trace, machine, "ws") for machine in (hw, step)]
    assert float(runs[1].summary["latency_cycles"] - runs[0].summary["latency_cycles"]) == 100.0
    f = predictor({k: v[:1] for k, v in ops.items()}, hw, "ws")
    with jax.enable_x64(True):
        h = jax.tree.map(lambda x: jnp.asarray(x, float), hw)
        grad = jax.jit(jax.grad(lambda h: f(h)["cycles"][0]))(h)
    assert float(grad.short_reduction_cycles) == 1.0


def test_a_lone_op_pays_its_pipeline_fill_and_drain_unless_neighbours_hide_it():
    """memory_overlap 1: the slowest demand alone; 0: an op that fits one block loads and computes in turn, and an
    op of many blocks exposes only a share of its shorter demand."""
    from dfit_nb.sim import cost

    hw = presets.get("tpu_v4").replace(op_overhead_cycles=0.0)
    small = {"m": [256], "k": [256], "n": [256], "dtype": ["float16"]}
    big = {"m": [16384], "k": [16384], "n": [16384], "dtype": ["float16"]}
    def demands(c):
        on = max(float(c["compute_cycles"][0]), float(c["sram_cycles"][0]))
        off = max(float(c["noc_cycles"][0]), float(c["dram_cycles"][0]))
        return on, off, float(c["cycles"][0])

    for ops in (small, big):
        on, off, cycles = demands(cost(ops, hw.replace(memory_overlap=1.0), "ws"))
        assert cycles == pytest.approx(max(on, off))
        on, off, cycles = demands(cost(ops, hw.replace(memory_overlap=0.0), "ws"))  # its own mapping and demands
        exposed = cycles - max(on, off)
        if ops is small:
            assert exposed == pytest.approx(min(on, off))   # one block: no overlap at all
        else:
            assert 0 < exposed < 0.2 * min(on, off)          # many blocks: only the fill and drain show


def test_reconcile_prices_each_op_alone_under_its_own_dataflow(static_traces):
    """On a run that mixes all three styles, reconcile()'s "alone" side is each op priced by cost() under the
    dataflow the run gave it (not one style for all)."""
    from dfit_nb.sim import cost

    t, hw = static_traces["cnn"], presets.get("npu_like")
    run = dfit_nb.replay(t, hw, np.array(["ws", "os", "is"])[np.arange(len(prepare(t).op)) % 3])
    ids = run.ops["op"].values
    names = np.full(t.ops.sizes["op"], "ws", dtype=object)
    names[ids] = np.where(run.ops["dataflow"].values == "", "ws", run.ops["dataflow"].values)
    assert {"ws", "os", "is"} <= set(names[ids])
    direct = cost(t, hw, names, fusion="none").sel(op=ids)
    r = reconcile(t, hw, run)
    assert float(r["alone_cycles"]) == float((direct["cycles"] * direct["count"]).sum())
    alone_sram = float((direct["energy_sram_pj"] * direct["count"]).sum()) * 1e-12
    assert float(r["alone_j"].sel(level="sram")) == pytest.approx(alone_sram, rel=1e-15)


def test_reconcile_reads_a_precomputed_cost_table_under_each_ops_own_dataflow(static_traces):
    """``alone=`` (the CLI's cost table over every style) gives the same figures as costing each op under its
    own dataflow again, on a run mixing all three; a table of another machine, memory mode, trace or missing a
    style the run uses is refused by name."""
    from dfit_nb.sim import cost

    t, hw = static_traces["cnn"], presets.get("npu_like")
    run = dfit_nb.replay(t, hw, np.array(["ws", "os", "is"])[np.arange(len(prepare(t).op)) % 3])
    table = cost(t, hw, ["ws", "os", "is"], fusion="none")
    fresh, reused = reconcile(t, hw, run), reconcile(t, hw, run, alone=table)
    for v in ("alone_j", "replayed_j", "difference_j", "alone_cycles", "context_cycles"):
        np.testing.assert_array_equal(reused[v].values, fresh[v].values)
    with pytest.raises(ValueError, match="another machine"):
        reconcile(t, hw, run, alone=cost(t, presets.get("tpu_like"), ["ws", "os", "is"], fusion="none"))
    with pytest.raises(ValueError, match="cost it with fusion='none'"):
        reconcile(t, hw, run, alone=cost(t, hw, ["ws", "os", "is"]))  # the kernels alone: not what it compares
    with pytest.raises(ValueError, match="memory='finite'"):
        reconcile(t, hw, run, alone=cost(t, hw, ["ws", "os", "is"], memory="ideal", fusion="none"))
    with pytest.raises(ValueError, match=r"also uses \['is'\]"):
        reconcile(t, hw, run, alone=table.sel(dataflow=["ws", "os"]))
    with pytest.raises(ValueError, match="cost this trace"):
        reconcile(t, hw, run, alone=table.isel(op=slice(1, None)))
    with pytest.raises(ValueError, match="dataflow dim"):
        reconcile(t, hw, run, alone=cost(t, hw, "ws"))
    with pytest.raises(ValueError, match=r"the run was replayed with \w+ = .*not 'tpu_like'.*pass the machine"):
        reconcile(t, presets.get("tpu_like"), run)


# ---------------------------------------------------------------- derived quantities: one function each
def test_peak_compute_is_one_number_everywhere():
    from dfit_nb.magics import presets_table
    from dfit_nb.sim.machine import peak_flops_per_s, peak_macs_per_cycle
    from dfit_nb.sim.run import roof_variables

    table = presets_table()
    for name in presets.names():
        hw = presets.get(name)
        peak = float(peak_macs_per_cycle(hw, np))
        assert peak == float(hw.peak_macs_per_cycle) == float(hw.tiles * hw.pe_rows * hw.pe_cols), name
        with jax.enable_x64(True):
            assert float(peak_macs_per_cycle(hw)) == peak
            flops = float(peak_flops_per_s(hw))
        assert flops == float(peak_flops_per_s(hw, np)) == float(roof_variables(hw)["roof_peak_flops_per_s"][1])
        assert float(table.loc[name, "peak TOPS"]) == float(f"{flops / 1e12:.3g}"), name
    batch = Hardware.stack([presets.get("npu_like"), presets.get("tpu_v4")])
    assert peak_macs_per_cycle(batch, np).tolist() == np.asarray(batch.peak_macs_per_cycle).tolist()


def test_utilization_is_one_formula_for_cost_replay_replay_batch_and_the_cli():
    from dfit_nb.cli import cost_table
    from dfit_nb.sim import DATAFLOWS, cost, replay_batch
    from dfit_nb.sim.machine import utilization

    t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((96, 200)), jnp.ones((200, 48)))
    hw = presets.get("npu_like")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpillWarning)
        run = dfit_nb.replay(t, hw, "ws")
        batch = replay_batch(t, Hardware.stack([hw, hw.replace(pe_rows=8)]), "ws")
    s = run.summary
    want = float(utilization(float(s["macs"]), float(s["latency_cycles"]), hw, np))
    assert 0 < want <= 1 and float(s["utilization"]) == want
    assert float(batch["utilization"][0]) == pytest.approx(want, rel=1e-12)
    assert float(batch["utilization"][1]) == pytest.approx(
        float(utilization(float(s["macs"]), float(batch["latency_cycles"][1]), hw.replace(pe_rows=8), np)), rel=1e-12)
    per_op = cost(t, hw, list(DATAFLOWS))
    assert np.array_equal(per_op["utilization"].values,
                          utilization(per_op["macs"].values, per_op["cycles"].values, hw, np))
    tot = per_op.sel(dataflow="ws")
    line = next(x for x in cost_table({"npu_like": per_op}).splitlines() if x.startswith("npu_like") and " ws " in x)
    assert line.endswith(f"{float(utilization(float(tot['total_macs']), float(tot['total_cycles']), hw, np)):6.1%}")
    # no time, no utilisation (and no 0 / 0 evaluated: warnings are errors here)
    assert float(utilization(0.0, 0.0, hw, np)) == 0.0
    with jax.enable_x64(True):
        g = jax.grad(lambda c: utilization(100.0, c, hw))(0.0)
    assert float(g) == 0.0


def test_link_load_is_bytes_over_link_bandwidth_time(all_runs):
    from dfit_nb.sim.machine import link_load

    hw = presets.get("npu_like")
    assert float(link_load(64.0, 2.0, hw, np)) == 64.0 / (2.0 * hw.noc_link_bytes_per_cycle)
    cube = all_runs[("mlp", "npu_like")].cube
    assert float(cube["link_load"].max()) > 0 and float(cube["link_load"].min()) >= 0


def test_a_depthwise_convolution_runs_on_the_faster_of_the_array_and_the_vector_unit():
    """One output channel per group: the array holds one channel's 9 taps in one column, channel after channel;
    each vector lane does an output element's multiply-adds. Hand-computed on one tile."""
    from dfit_nb.sim import cost

    channels, side = 16, 8
    x, w = jnp.ones((1, side, side, channels)), jnp.ones((3, 3, 1, channels))
    depthwise = dfit_nb.capture(lambda a, b: jax.lax.conv_general_dilated(
        a, b, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=channels), x, w)
    row = depthwise.ops.isel(op=np.flatnonzero(depthwise.ops["primitive"].values == "conv_general_dilated"))
    m, k, n, b = (int(row[d].values[0]) for d in ("m", "k", "n", "batch"))
    assert (m, k, n, b) == (side * side, 9, 1, channels)
    macs = m * k * n * b
    hw = Hardware(pe_rows=32, pe_cols=32, vector_lanes=16, fold_overlap=0.0)
    # ws on the array: per channel one GEMM of one fold, 2R + C + T - 2 cycles (T = M rows stream) less SCALE-Sim's 1
    array = channels * (2 * 32 + 32 + m - 2 - 1)
    vector = -(-macs // 16)  # one multiply-add per lane-step
    assert vector < array
    got = float(cost(row, hw, "ws", memory="ideal")["compute_cycles"].values[0])
    assert got == vector
    assert float(cost(row, hw.replace(vector_rate=0.5), "ws", memory="ideal")["compute_cycles"].values[0]) == 2 * vector
    # a vector unit of one lane is slower than the array: the array's figure, as a batched product has
    assert float(cost(row, hw.replace(vector_lanes=1), "ws", memory="ideal")["compute_cycles"].values[0]) == array
    batched = row.assign(op_class=("op", np.array(["gemm"])))  # the same shapes as a batched matrix-vector product
    assert float(cost(batched, hw, "ws", memory="ideal")["compute_cycles"].values[0]) == array
    # the replay prices it the same way: one op, the vector figure
    run = dfit_nb.replay(depthwise, hw, "ws")
    assert float(run.ops["compute_cycles"].sel(op=int(row.op.values[0]))) == vector


def test_tiles_sharing_an_operand_piece_re_read_it_once_between_them():
    """A GEMM whose N is split over a row of four tiles: each tile holds the whole input and its own quarter of
    the weights, and neither fits its buffer. The input they share is re-read from DRAM once for the four
    (multicast, as it was delivered), the weights' quarters once each: the row re-reads the input as one tile
    computing a quarter of N does, and four times its weights."""
    from dfit_nb.sim import Hardware

    per_tile = dict(pe_rows=32, pe_cols=32, word_bytes=2, sram_input_bytes=128 * 1024,
                    sram_weight_bytes=128 * 1024, sram_output_bytes=64 * 1024)
    m, k, n = 512, 1024, 2048
    row = dfit_nb.capture(lambda a, b: a @ b, jnp.ones((m, k), jnp.float16), jnp.ones((k, n), jnp.float16))
    quarter = dfit_nb.capture(lambda a, b: a @ b, jnp.ones((m, k), jnp.float16),
                              jnp.ones((k, n // 4), jnp.float16))
    with pytest.warns(SpillWarning):  # re-reads are what the replay warns of
        four = dfit_nb.replay(row, Hardware(tile_rows=1, tile_cols=4, **per_tile), "ws", layouts={"": "mn:1x4"})
    with pytest.warns(SpillWarning):
        one = dfit_nb.replay(quarter, Hardware(**per_tile), "ws")
    assert float(four.ops["gx"][0]) == 4.0

    def again(run, operand, once):
        return float(run.ops[f"dram_reads_{operand}"][0]) - once * 2

    assert again(one, "input", m * k) > 0.5 * m * k * 2  # the input overflows its buffer: it is re-read
    assert again(four, "input", m * k) == pytest.approx(again(one, "input", m * k), rel=1e-9)
    assert again(one, "weight", k * n // 4) > 0
    assert again(four, "weight", k * n) == pytest.approx(4 * again(one, "weight", k * n // 4), rel=1e-9)


def test_a_fixed_width_sram_port_feeds_a_narrower_dtype_faster():
    """Array ports R + 2C words wide (the default) feed any dtype at the array's rate; a port of fixed width
    (``sram_port_bytes``, a Tensix core's unpackers) moves half the elements of a 2-byte dtype that it moves of a
    1-byte one, so where it binds a bfloat16 GEMM's SRAM time is twice an int8 one's, and the op takes it."""
    from dfit_nb.sim import Hardware, cost

    ops = {"m": [256, 256], "k": [256, 256], "n": [256, 256], "dtype": ["bfloat16", "int8"]}
    wide = Hardware(pe_rows=32, pe_cols=32, word_bytes=2, sram_input_bytes=1 << 20, sram_weight_bytes=1 << 20,
                    sram_output_bytes=1 << 20, memory_overlap=1.0)
    c = cost(ops, wide, "ws")
    assert float(c["sram_cycles"][0]) == pytest.approx(float(c["sram_cycles"][1]), rel=1e-9)
    narrow = cost(ops, wide.replace(sram_port_bytes=8.0), "ws")
    sram = narrow["sram_cycles"].values
    assert sram[0] == pytest.approx(2 * sram[1], rel=1e-9)
    assert sram[0] > float(narrow["compute_cycles"][0])  # it binds: the bfloat16 op is SRAM-bound
    assert float(narrow["cycles"][0]) > float(narrow["cycles"][1]) > float(c["cycles"][1])


def test_tiles_holding_different_gemms_of_a_batch_re_read_their_own_weights():
    """A batch of four GEMMs, each with weights of its own (attention's per-head operands), one GEMM on each of
    four grid rows: the tiles of the column share no weights, so each re-reads its own, four times what one GEMM
    alone on one tile re-reads."""
    from dfit_nb.sim import Hardware

    per_tile = dict(pe_rows=32, pe_cols=32, word_bytes=2, sram_input_bytes=128 * 1024,
                    sram_weight_bytes=128 * 1024, sram_output_bytes=64 * 1024)
    b, m, k, n = 4, 512, 1024, 512
    batch = dfit_nb.capture(lambda a, w: jnp.einsum("bmk,bkn->bmn", a, w), jnp.ones((b, m, k), jnp.float16),
                            jnp.ones((b, k, n), jnp.float16))
    single = dfit_nb.capture(lambda a, w: a @ w, jnp.ones((m, k), jnp.float16), jnp.ones((k, n), jnp.float16))
    with pytest.warns(SpillWarning):
        four = dfit_nb.replay(batch, Hardware(tile_rows=4, tile_cols=1, **per_tile), "ws", layouts={"": "mn:4x1"})
    with pytest.warns(SpillWarning):
        one = dfit_nb.replay(single, Hardware(**per_tile), "ws")
    assert float(four.ops["gy"][0]) == 4.0

    def again(run, once):
        return sum(float(run.ops[f"dram_reads_{x}"][0]) for x in ("input", "weight")) - once * 2

    assert again(one, m * k + k * n) > 0
    assert again(four, b * (m * k + k * n)) == pytest.approx(4 * again(one, m * k + k * n), rel=1e-9)


@pytest.mark.parametrize("shape, axis, levels, steps", [
    ((16, 64), -1, 3, 16),  # rows of 64 over 8 lanes: a row per lane-step, a 3-level tree each
    ((16, 4), -1, 2, 8),  # rows of 4: two rows per lane-step, a 2-level tree
    ((64, 16), 0, 0, 0),  # column sums: each lane owns its outputs, no tree
])
def test_a_row_reduction_pays_its_tree_across_the_lanes(shape, axis, levels, steps):
    """machine.reduction_tree_cycles by hand: ceil(rows x min(L, lanes) / lanes) lane-steps of ceil(log2(min(L,
    lanes))) levels of reduction_step_cycles each, on one tile; nothing else moves."""
    t = dfit_nb.capture(lambda a: a.sum(axis), jnp.ones(shape))
    base = Hardware(vector_lanes=8)
    runs = [dfit_nb.replay(t, base.replace(reduction_step_cycles=c), fusion="none") for c in (0.0, 10.0)]
    sums = [r.ops.where(r.ops["primitive"] == "reduce_sum", drop=True) for r in runs]
    extra = float(sums[1]["compute_cycles"].sum() - sums[0]["compute_cycles"].sum())
    assert extra == steps * levels * 10.0
    for key in ("bytes_dram", "bytes_sram", "energy_pj"):
        assert float(runs[1].ops[key].sum()) == float(runs[0].ops[key].sum())
