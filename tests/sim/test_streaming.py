"""Streaming inferences (issue 41, item 1): the steady state of a replayed program, against hand-computed cases
and against the replay itself."""

from __future__ import annotations

import numpy as np
import pytest

from dfit_nb.sim import Hardware
from dfit_nb.sim.streaming import STAGE_CLASSES, steady_state

HW = Hardware(pe_rows=10, pe_cols=10, dram_bytes_per_cycle=10.0, clock_ghz=2.0)  # 100 MACs a cycle


def records(**kw):
    n = len(kw["stage_cycles"])
    base = {"start": np.zeros(n), "end": np.zeros(n), "section": np.zeros(n), "stage_dram_bytes": np.zeros(n),
            "stage_compute_cycles": np.zeros(n), "stage_noc_cycles": np.zeros(n), "retile_cycles": np.zeros(n)}
    return {**base, **{k: np.asarray(v, np.float64) for k, v in kw.items()}}


def test_two_sections_stream_their_inferences_one_section_after_the_other():
    # section 0: stages of 40 and 60 cycles, done at 150; section 1: one stage of 80, done at 400
    rec = records(stage_cycles=[40, 60, 80], stage_compute_cycles=[40, 60, 80], end=[90, 150, 400],
                  section=[0, 0, 1])
    s = steady_state(rec, np.ones(3), 8_000.0, HW, True, 10)
    assert s["sections"] == 2 and s["fill_cycles"] == 400
    assert s["period_cycles"] == 60 + 80  # each section's slowest stage, once per inference
    assert s["total_cycles"] == 150 + 250 + 9 * (60 + 80)
    assert s["throughput_inferences_per_s"] == pytest.approx(10 / (s["total_cycles"] / 2e9))
    assert s["steady_state_utilization"] == pytest.approx(8_000 / (100 * 140))
    assert s["pipeline_fill_s"] == pytest.approx(400 / 2e9)
    assert (s["bottleneck_op"], s["bottleneck_class"]) == (2, "compute")
    one = steady_state(rec, np.ones(3), 8_000.0, HW, True, 1)
    assert one["total_cycles"] == one["fill_cycles"] == 400  # one inference: the replay's latency


def test_the_dram_channel_bounds_a_section_whose_stages_share_it():
    # two stages of 50 cycles each moving 400 bytes per inference through a 10 B/cycle channel: 80 cycles
    rec = records(stage_cycles=[50, 50], stage_compute_cycles=[50, 10], stage_dram_bytes=[400, 400],
                  end=[60, 120])
    s = steady_state(rec, np.ones(2), 1_000.0, HW, True, 3)
    assert s["period_cycles"] == 80 and s["total_cycles"] == 120 + 2 * 80
    assert (s["bottleneck_op"], s["bottleneck_class"]) == (-1, "dram channel")


def test_the_slowest_stage_names_what_limits_it_and_padding_is_ignored():
    # op 1's stage: a 30-cycle retile, then 100 cycles of mesh delivery, 20 of fixed cost; op 2 is padding
    rec = records(stage_cycles=[60, 150, 1e9], stage_compute_cycles=[60, 40, 0], stage_noc_cycles=[0, 100, 0],
                  retile_cycles=[0, 30, 0], end=[70, 200, 1e9])
    s = steady_state(rec, np.array([1, 1, 0]), 1.0, HW, True, 2)
    assert s["period_cycles"] == 150 and s["fill_cycles"] == 200
    assert (s["bottleneck_op"], s["bottleneck_class"]) == (1, "noc")
    assert set(STAGE_CLASSES) >= {"compute", "noc", "retile", "dram", "fixed", "dram channel"}


def test_time_multiplexed_machines_run_one_inference_after_another():
    rec = records(stage_cycles=[10, 20], end=[100, 300], section=[0, 0])
    s = steady_state(rec, np.ones(2), 6_000.0, HW, False, 5)
    assert s["period_cycles"] == s["fill_cycles"] == 300 and s["total_cycles"] == 1500
    assert s["steady_state_utilization"] == pytest.approx(6_000 / (100 * 300))
    assert (s["bottleneck_op"], s["bottleneck_class"]) == (-1, "inference")


def test_a_layer_pipelined_op_is_mapped_for_its_own_region():
    # the virtual grid is chosen for the tiles the op gets: never more pieces than its region's tiles (a grid
    # chosen for the whole wafer and folded onto a region left many small pieces per tile, each paying the array's
    # fill: ResNet-18 on cerebras_like took 2.6x longer)
    import dfit_nb
    from dfit_nb.examples import resnet18
    from dfit_nb.sim import presets

    trace = dfit_nb.capture(resnet18.forward, *resnet18.specs(size=64))
    run = dfit_nb.replay(trace, presets.get("cerebras_like"), "ws", time_bins=8)
    ops = run.ops
    gemm = ops["macs"].values > 0
    assert (ops["virtual_tiles"].values[gemm] <= ops["alloc"].values[gemm]).all()
    assert (ops["tiles"].values <= ops["alloc"].values).all()


def test_factors_the_user_pins_are_kept_beyond_a_region_and_folded_onto_it():
    import dfit_nb
    from dfit_nb.examples import resnet18
    from dfit_nb.sim import presets

    trace = dfit_nb.capture(resnet18.forward, *resnet18.specs(size=64))
    # 2,048 virtual tiles for each of block7's convolutions: not every region beside the others' can hold them
    run = dfit_nb.replay(trace, presets.get("cerebras_like"), "ws", time_bins=8, layouts={"block7": "mn:4x512"})
    ops = run.ops
    pinned = (ops["region"].values == "block7") & (ops["macs"].values > 0)
    virtual, alloc = ops["virtual_tiles"].values[pinned], ops["alloc"].values[pinned]
    assert pinned.any() and (virtual == 2048).all()
    assert (virtual > alloc).any()  # folded onto its region
    assert (ops["tiles"].values[pinned] == np.minimum(virtual, alloc)).all()


def test_replay_streams_inferences_on_every_execution_style():
    import dfit_nb
    from dfit_nb.examples import resnet18
    from dfit_nb.sim import presets

    trace = dfit_nb.capture(resnet18.forward, *resnet18.specs(size=64))
    for name in ("cerebras_like", "tpu_like"):
        hw = presets.get(name)
        one = dfit_nb.replay(trace, hw, "ws", time_bins=8)
        many = dfit_nb.replay(trace, hw, "ws", time_bins=8, inferences=16)
        s1, s = one.summary, many.summary
        # the first inference is the same replay: the events, latency and energy do not depend on the stream
        assert float(s["latency_s"]) == float(s1["latency_s"]) == float(s["pipeline_fill_s"])
        assert float(s["energy_j"]) == float(s1["energy_j"]) and int(s["inferences"]) == 16
        period, fill = float(s["steady_state_period_s"]), float(s["pipeline_fill_s"])
        assert float(s["stream_s"]) == pytest.approx(fill + 15 * period, rel=1e-9)
        assert float(s["throughput_inferences_per_s"]) == pytest.approx(16 / float(s["stream_s"]), rel=1e-9)
        assert float(s["steady_state_utilization"]) == pytest.approx(
            float(s["macs"]) / (float(s["peak_macs_per_cycle"]) * period * hw.clock_ghz * 1e9), rel=1e-9)
        if hw.execution == "spatial":
            # the stream overlaps inferences: faster than one after another, never faster than its slowest stage
            assert period < fill and float(s["steady_state_utilization"]) > float(s["utilization"])
            # a stage is a fused kernel's ops on one region: its time is theirs summed
            stage_of = many.ops["stage_op"].values
            stage = np.bincount(np.unique(stage_of, return_inverse=True)[1], many.ops["stage_cycles"].values)
            assert len(stage) < many.ops.sizes["op"]  # the convolutions' epilogues share their tiles
            assert period * hw.clock_ghz * 1e9 >= stage.max() * (1 - 1e-12)
            w = int(s["bottleneck_stage"])
            first = np.unique(stage_of, return_index=True)[1]
            assert w == -1 or (w in first and stage[list(first).index(w)] == stage.max()
                               and s["bottleneck_stage_region"].item() == str(many.ops["region"].values[w]))
        else:
            assert period == fill and int(s["bottleneck_stage"]) == -1
            assert s["bottleneck_stage_class"].item() == "inference"


def _two_layers(dram_bytes_per_cycle):
    """Two GEMMs, one tile each, on a 2 x 2 layer-pipelined machine whose mesh is fast: the numbers of the hand
    derivation in docs/validation.md ("A throughput bound by hand")."""
    import jax
    import jax.numpy as jnp

    import dfit_nb
    from dfit_nb.sim import Hardware

    def f(x, w1, w2):
        with jax.named_scope("l1"):
            h = x @ w1
        with jax.named_scope("l2"):
            return h @ w2

    hw = Hardware(name="two_tiles", execution="spatial", tile_rows=2, tile_cols=2, pe_rows=8, pe_cols=8,
                  word_bytes=4, noc_link_bytes_per_cycle=1e6, noc_hop_cycles=0.0,
                  dram_bytes_per_cycle=dram_bytes_per_cycle, dram_latency_cycles=0.0)
    trace = dfit_nb.capture(f, jnp.ones((64, 32)), jnp.ones((32, 48)), jnp.ones((48, 16)))
    return dfit_nb.replay(trace, hw, "ws", time_bins=8, inferences=100, fusion="none",
                          layouts={"l1": "mn:1x1", "l2": "mn:1x1"}), hw


def test_the_replay_reaches_the_throughput_bound_derived_by_hand():
    from dfit_nb.sim.machine import WS, fold_cycles

    # weight-stationary on 8 x 8 PEs (SCALE-Sim's fold count): l1 (64x32 @ 32x48) has 4 x 6 folds of the 64-row
    # stream plus a 2R + C - 2 = 22-cycle fill, 24 x 86 - 1 = 2063 cycles; l2 (64x48 @ 48x16) 6 x 2 folds, 1031
    l1 = float(fold_cycles(64.0, 32.0, 48.0, WS, 8.0, 8.0, np)[0])
    l2 = float(fold_cycles(64.0, 48.0, 16.0, WS, 8.0, 8.0, np)[0])
    assert (l1, l2) == (2063.0, 1031.0)
    # a fast DRAM channel: the slowest stage, l1's array, sets the pace (its SRAM ports and the mesh are faster)
    run, hw = _two_layers(1e6)
    s, ops = run.summary, run.ops
    assert (ops["tiles"].values == 1).all() and int(s["sections"]) == 1
    period = float(s["steady_state_period_s"]) * hw.clock_ghz * 1e9
    assert period == pytest.approx(l1, rel=1e-6)
    assert s["bottleneck_stage_region"].item() == "l1" and s["bottleneck_stage_class"].item() == "compute"
    assert float(s["stream_s"]) == pytest.approx(float(s["pipeline_fill_s"]) + 99 * l1 / 1e9, rel=1e-9)
    # 4 B/cycle: every inference reads x (64 x 32 x 4 = 8,192 B) and writes the result (64 x 16 x 4 = 4,096 B)
    # through the one channel, 3,072 cycles, longer than either stage: the channel sets the pace
    run, hw = _two_layers(4.0)
    s = run.summary
    assert float(s["steady_state_period_s"]) * 1e9 == pytest.approx(12_288 / 4, rel=1e-6)
    assert s["bottleneck_stage_class"].item() == "dram channel" and int(s["bottleneck_stage"]) == -1


def test_a_runs_stream_without_replaying_is_the_replays_own():
    import jax.numpy as jnp

    import dfit_nb
    from dfit_nb.sim import presets

    trace = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b) @ b.T, jnp.ones((64, 128)), jnp.ones((128, 32)))
    for name in ("sambanova_like", "npu_like"):
        streamed = dfit_nb.replay(trace, presets.get(name), inferences=32).summary
        later = dfit_nb.replay(trace, presets.get(name)).streamed(32)
        for k in later.data_vars:
            assert later[k].item() == streamed[k].item(), (name, k)
    run = dfit_nb.replay(trace, presets.get("npu_like"))
    from dfit_nb.sim import ReplayError

    # a plain ValueError, where replay(..., inferences=0) raises ReplayError (still a ValueError)
    with pytest.raises(ReplayError, match="inferences must be a whole number >= 1, got 0"):
        run.streamed(0)
    # a stream time past float64 (10**306) and a count float() cannot hold (10**400) are refused by name
    for huge in (10**306, 10**400):
        with pytest.raises(ReplayError, match=r"inferences must be .*stream time is finite in float64"):
            run.streamed(huge)
    from dfit_nb.sim.run import Run

    old = Run(events=run.events, cube=run.cube, summary=run.summary, regions=run.regions, attrs=run.attrs,
              ops=run.ops.drop_vars(["stage_cycles", "stage_dram_bytes"]))
    with pytest.raises(ReplayError, match=r"this run has no stage_cycles, stage_dram_bytes .* replay the trace again"):
        old.streamed(4)


def test_a_fused_kernel_is_one_stage_on_one_region():
    """A GEMM and its epilogue (bias, ReLU, a transpose) are one kernel: layer-pipelined, its ops run on the GEMM's
    region one after another, the kernel streams its result from when the GEMM started, and its stage time is its
    ops' summed. One kernel per primitive (fusion="none") gives every op a region of its own."""
    import jax
    import jax.numpy as jnp

    import dfit_nb
    from dfit_nb.sim import presets

    def f(x, w1, b, w2):
        return jax.nn.relu(x @ w1 + b).T @ w2  # the transpose keeps the second GEMM out of the first's kernel

    s, f32 = jax.ShapeDtypeStruct, jnp.float32
    t = dfit_nb.capture(f, s((256, 128), f32), s((128, 256), f32), s((256,), f32), s((256, 64), f32))
    hw = presets.get("sambanova_like")
    run = dfit_nb.replay(t, hw, "ws", inferences=8)
    ops = run.ops
    gemm = np.flatnonzero(ops["primitive"].values == "dot_general")
    first = ops["kernel"].values == ops["kernel"].values[gemm[0]]
    assert first.sum() > 2 and (ops["stage_op"].values[first] == ops["op"].values[gemm[0]]).all()
    assert len(set(ops["tile_offset"].values[first])) == 1
    alloc = ops["alloc"].values[first]
    assert len(set(alloc)) == 1 and (ops["tiles"].values[first] <= alloc).all()
    start, end = ops["start"].values[first], ops["end"].values[first]
    np.testing.assert_allclose(start[1:], end[:-1])  # one after another on the region
    # the second GEMM, a stage of its own past the first's region, streams in from when the GEMM started
    second = gemm[1]
    assert ops["stage_op"].values[second] == ops["op"].values[second]
    assert ops["tile_offset"].values[second] >= ops["tiles"].values[first].max()
    assert float(ops["ready"].values[second]) == pytest.approx(start[0] + (end[-1] - start[0]) / 8, rel=1e-12)
    stage = [ops["stage_cycles"].values[first].sum(), float(ops["stage_cycles"].values[second])]
    assert float(run.summary["steady_state_period_s"]) * hw.clock_ghz * 1e9 == pytest.approx(max(stage), rel=1e-12)
    apart = dfit_nb.replay(t, hw, "ws", fusion="none").ops
    assert (apart["stage_op"].values == apart["op"].values).all()
    assert len(set(apart["tile_offset"].values)) == apart.sizes["op"]


def _balance_case(seed):
    rng = np.random.default_rng(seed)
    stages = int(rng.integers(1, 4))
    counts = np.array([1.0, 2.0, 4.0, 8.0])
    # each stage's time on 1, 2, 4, 8 tiles: non-increasing (the best mapping within that many)
    times = np.minimum.accumulate(rng.integers(1, 100, (stages, 4)).astype(float), axis=1)
    need = rng.choice([0.0, 0.0, 2.0, 3.0, 5.0], stages)
    rows, cols = int(rng.integers(1, 4)), int(rng.integers(1, 5))
    return times, counts, need, rows, cols


@pytest.mark.parametrize("seed", range(40))
def test_balance_minimises_each_sections_slowest_stage_exactly(seed):
    """schedule.balance against brute force. Sections: stages packed in order while their smallest counts (at
    least their need) fit the grid. Within each: the smallest achievable slowest-stage time over every assignment
    of tile counts (at least each stage's need, at most the grid in all)."""
    import itertools

    import jax
    import jax.numpy as jnp

    from dfit_nb.sim import Hardware
    from dfit_nb.sim.schedule import balance

    times, counts, need, rows, cols = _balance_case(seed)
    grid = rows * cols
    usable = counts[counts <= grid]  # a count above the grid is no option
    # a stage runs on its pick of the usable counts, raised to the smallest usable count at least its need (the
    # grid where none is): its time is the pick's
    floor = np.array([min([c for c in usable if c >= n] or [grid]) for n in need])
    floor = np.maximum(floor, usable[0])
    sections, used = [], 0.0
    for s, f in enumerate(floor):
        if not sections or used + f > grid:
            sections.append([])
            used = 0.0
        sections[-1].append(s)
        used += f
    with jax.enable_x64(True):
        tiles, section = balance(jnp.asarray(times), jnp.asarray(counts), jnp.asarray(need),
                                 jnp.ones(len(times)), Hardware(tile_rows=rows, tile_cols=cols))
    tiles, section = np.asarray(tiles), np.asarray(section)
    assert [list(np.flatnonzero(section == i)) for i in range(len(sections))] == sections
    for members in sections:
        best = np.inf
        for pick in itertools.product(range(len(usable)), repeat=len(members)):
            if np.maximum(usable[list(pick)], floor[members]).sum() <= grid:
                best = min(best, max(times[s, k] for s, k in zip(members, pick, strict=True)))
        assert np.isfinite(best)  # a section's floors fit the grid, so some assignment does
        assert (tiles[members] >= floor[members]).all() and tiles[members].sum() <= grid
        # the time of each stage is that of the largest usable count within its tiles
        k = np.searchsorted(usable, tiles[members], side="right") - 1
        assert max(times[s, k[i]] for i, s in enumerate(members)) == best


def test_the_balanced_allocation_streams_no_slower_than_the_proportional_one():
    """The replay program runs the proportional split and the balanced one and keeps the shorter period: on
    ResNet-18 both layer-pipelined presets gain, and so does a wafer too small for it, in sections
    (benchmarks/bench_streaming.py has the 224x224 figures)."""
    import dfit_nb
    from dfit_nb.examples import resnet18
    from dfit_nb.sim import presets
    from dfit_nb.sim._replay import allocation_period

    trace = dfit_nb.capture(resnet18.forward, *resnet18.specs(size=64))
    for name in ("cerebras_like", "sambanova_like"):
        hw = presets.get(name)
        (p0, _), (p1, _) = (allocation_period(trace, hw, al) for al in ("proportional", "balanced"))
        assert p1 < p0, name
        run = dfit_nb.replay(trace, hw, "ws", time_bins=8, inferences=4)
        assert float(run.summary["steady_state_period_s"]) * hw.clock_ghz * 1e9 == pytest.approx(p1, rel=1e-9)
    # a program larger than the grid streams in sections, each balanced on the whole grid: ResNet-18's weights
    # on a 16x16 wafer take 7 sections, and balancing within each shortens the period
    small = presets.get("cerebras_like").replace(name="cerebras_like 16x16", tile_rows=16, tile_cols=16)
    (p0, s0), (p1, s1) = (allocation_period(trace, small, al) for al in ("proportional", "balanced"))
    assert s0 == s1 > 1 and p1 < p0
