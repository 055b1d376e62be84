"""Work that cannot fit is refused before it allocates (or chunked where the API returns little), and the
estimates behind the refusals bound the memory real runs use."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dfit_nb
from dfit_nb.errors import DfitError
from dfit_nb.sim import Hardware, cost, presets, replay_batch, select_dataflows, sweep
from dfit_nb.sim import memory as guard
from dfit_nb.sim._batch import batch_chunk
from dfit_nb.sim._prepare import ONE_MACHINE_OPS, padded, pinned_layouts, prepare
from dfit_nb.sim.schedule import bucket

#: a Cerebras-wafer-sized grid of tiles: its tile-order tables alone are terabytes, more than any machine has
HUGE = {"tile_rows": 4096, "tile_cols": 4096}


@pytest.fixture(scope="module")
def small_trace():
    return dfit_nb.capture(lambda a, b: jnp.tanh(a @ b) @ b.T, jnp.ones((64, 96)), jnp.ones((96, 48)))


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _refused(call, *tokens):
    """``call()`` raises MemoryGuardError (a DfitError and a MemoryError) naming every token, without growing the
    process's peak memory."""
    before = _peak_mib()
    with pytest.raises(guard.MemoryGuardError) as err:
        call()
    assert isinstance(err.value, DfitError) and isinstance(err.value, MemoryError)
    message = str(err.value)
    for token in ("needs about", "available", "nothing was allocated", *tokens):
        assert token in message, (token, message)
    assert _peak_mib() - before < 256, "the refusal allocated what it refused"
    return message


def test_replay_on_a_wafer_sized_grid_is_refused_up_front(small_trace):
    hw = presets.get("cerebras_like").replace(**HUGE)
    msg = _refused(lambda: dfit_nb.replay(small_trace, hw), "4096x4096", "TiB", "tile-order tables", "cube",
                   "coarser tile grid", "time_bins=256")
    assert "cerebras_like" in msg


def test_replay_batch_cost_and_selection_on_a_wafer_sized_grid_are_refused(small_trace):
    hw = presets.get("npu_like").replace(**HUGE)
    _refused(lambda: replay_batch(small_trace, Hardware.stack([hw, hw])), "replay_batch", "4096x4096")
    _refused(lambda: cost({"m": [64], "k": [64], "n": [64]}, hw), "cost of 1 ops", "tile-order tables")
    _refused(lambda: select_dataflows(small_trace, hw, "energy", evaluate=False), "pricing", "4096x4096")


def test_a_sweep_of_a_billion_machines_is_refused_before_building_them():
    hw = presets.get("npu_like")
    msg = _refused(lambda: sweep({"m": [64], "k": [64], "n": [64]}, hw, dram_bw=np.linspace(1, 100, 100_000),
                                 clock_ghz=np.linspace(0.5, 2.0, 10_000)),
                   "1,000,000,000 machines", "results", "split an axis")
    assert "dataflows=3" in msg and "ops=1" in msg


def test_the_budget_can_be_set_and_a_bad_budget_is_named(small_trace, monkeypatch):
    hw = presets.get("npu_like")
    monkeypatch.setenv(guard.LIMIT_ENV, "1MiB")
    assert guard.available_bytes() == 2**20
    _refused(lambda: dfit_nb.replay(small_trace, hw), "DFIT_NB_MEMORY_LIMIT", "1.0 MiB available")
    for bad in ("lots", "-5GB", "0", "3 parsecs", "inf"):
        monkeypatch.setenv(guard.LIMIT_ENV, bad)
        with pytest.raises(guard.MemoryGuardError, match=guard.LIMIT_ENV):
            guard.available_bytes()
    monkeypatch.delenv(guard.LIMIT_ENV)
    assert guard.available_bytes() > 0


def _chain(x, w):
    for _ in range(40):
        x = jnp.tanh(x @ w)
    return x


def test_events_are_refused_once_their_number_is_known(monkeypatch):
    # 80 ops spread over every tile: more event bytes than the program's per-op records (padded to 1024 ops)
    trace = dfit_nb.capture(_chain, jnp.ones((256, 256)), jnp.ones((256, 256)))
    hw = presets.get("npu_like")
    prep = prepare(trace)
    # the program's op and producer-slot counts, padded as replay() pads them
    _, preds, *_ = padded(prep, np.zeros(len(prep.op)), pinned_layouts(prep, None), ONE_MACHINE_OPS)
    before = guard.replay_estimate("r", *preds.shape, int(hw.tile_rows), int(hw.tile_cols), 256)
    run = dfit_nb.replay(trace, hw)
    events = 5 * int(run.ops["tiles"].sum())
    after = guard.events_estimate("e", events, int(hw.tile_rows), int(hw.tile_cols), 256)
    assert len(prep.op) == run.ops.sizes["op"] and after.total > before.total
    # a budget between the two: the program runs, the expansion is refused
    monkeypatch.setenv(guard.LIMIT_ENV, str(int((before.total + after.total) / 2)))
    msg = _refused(lambda: dfit_nb.replay(trace, hw), "the events of the replay", f"events={events}")
    assert "replay_batch" in msg


def test_replay_batch_chunks_to_fit_and_gives_the_same_results(small_trace, monkeypatch):
    base = presets.get("npu_like")
    hw = base.replace(dram_bytes_per_cycle=np.linspace(8.0, 200.0, 20), pe_rows=np.repeat([8.0, 16.0], 10))
    whole = replay_batch(small_trace, hw)
    assert whole.attrs["machine_chunks"] == 1
    # the budget that fits 7 machines per call (half the budget is kept as headroom)
    sizes = (32, 4, int(base.tile_rows), int(base.tile_cols))
    grid = bucket(*sizes[2:])  # the grid the replay is compiled for
    one = guard.replay_estimate("x", *sizes, None, machines=1, padded_to=(grid.rows, grid.cols))
    budget = 2 * (one.parts["compiled program"] + one.parts["tile-order tables"]
                  + 7.5 * one.parts["per-op records"])
    assert batch_chunk("x", 20, 1, True, *sizes, available=budget) == 7
    monkeypatch.setenv(guard.LIMIT_ENV, str(int(budget)))
    chunked = replay_batch(small_trace, hw)
    assert chunked.attrs["machine_chunks"] == 3  # 7 + 7 + 6, the last padded to one compiled shape
    for var in whole.data_vars:
        np.testing.assert_array_equal(chunked[var].values, whole[var].values, err_msg=var)


def test_sweep_results_stay_within_the_values_the_estimate_assumes():
    ds = sweep({"m": [64, 32], "k": [64, 16], "n": [64, 8]}, presets.get("npu_like"), dram_bw=[8.0, 16.0, 32.0],
               progress=False)
    cells = 3 * 3 * 2  # machines x dataflows x ops
    assert ds.nbytes <= cells * guard.SWEEP_VALUES * 8
    assert guard.sweep_estimate("s", 3, 3, 2, 24, 4, 5, 1).parts["results"] >= 3 * ds.nbytes


_MEASURE = textwrap.dedent("""
    import json, re, sys, warnings
    import numpy as np, jax.numpy as jnp, psutil, dfit_nb
    from dfit_nb.sim import presets, sweep, memory
    from dfit_nb.sim.grid import grid_estimate
    warnings.simplefilter("ignore")
    # VmHWM, this process's own peak: ru_maxrss would carry the parent's (pytest's) peak across fork and exec
    peak = lambda: int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) * 1024
    now = lambda: psutil.Process().memory_info().rss
    if sys.argv[1] == "replay":
        t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b) @ b.T, jnp.ones((256, 512)), jnp.ones((512, 256)))
        hw = presets.get("cerebras_like").replace(tile_rows=128, tile_cols=128)
        base = now()
        run = dfit_nb.replay(t, hw)
        used = peak() - base
        pre = memory.replay_estimate("r", 32, 4, 128, 128, 256).total
        events = memory.events_estimate("e", 5 * int(run.ops["tiles"].sum()), 128, 128, 256).total
        estimate = max(pre, events)
    else:
        ops, grid = {"m": [64, 128], "k": [128, 64], "n": [256, 32]}, {"dram_bw": np.linspace(1, 100, 30_000)}
        base = now()
        sweep(ops, presets.get("npu_like"), progress=False, **grid)
        used = peak() - base
        estimate = grid_estimate(presets.get("npu_like"), grid, 3, 2).total
    print(json.dumps([used, estimate]))
""")


@pytest.mark.slow  # a fresh process each: a replay on a 128 x 128 grid, a sweep of 30,000 machines
@pytest.mark.parametrize("what", ["replay", "sweep"])
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak from /proc/self/status (Linux)")
def test_the_estimates_bound_the_peak_memory_of_real_runs(what):
    """In a fresh process each (so nothing else sets its peak): a replay on a 128 x 128 grid and a sweep of
    30,000 machines, each estimate against the growth of the peak resident memory."""
    out = subprocess.run([sys.executable, "-c", _MEASURE, what], capture_output=True, text=True, timeout=600,
                         check=True)
    real, estimate = json.loads(out.stdout.strip().splitlines()[-1])
    assert 0 < real <= estimate, (what, real / 2**20, estimate / 2**20)
    assert estimate < 4 * real + guard.COMPILED_BYTES, (what, "an estimate so loose it refuses work that fits")


def test_parse_bytes_units():
    assert guard.parse_bytes("8GB") == 8e9 and guard.parse_bytes("1.5 GiB") == 1.5 * 2**30
    assert guard.parse_bytes(4096) == 4096.0 and guard.parse_bytes("1e9") == 1e9
    assert guard.human(3 * 2**30) == "3.0 GiB" and guard.human(512) == "512 B"


def test_jax_is_untouched_by_a_refusal(small_trace):
    """A refused replay leaves the process usable: the next replay runs."""
    hw = presets.get("npu_like")
    with pytest.raises(guard.MemoryGuardError):
        dfit_nb.replay(small_trace, hw.replace(**HUGE))
    assert float(dfit_nb.replay(small_trace, hw).summary["latency_cycles"]) > 0
    assert jax.numpy.ones(3).sum() == 3


def test_a_thermal_transient_of_a_billion_steps_is_refused_before_its_arrays_exist(small_trace):
    """thermal()'s steps is the user's size: its arrays over steps x tiles took the process to the kernel's
    out-of-memory kill at steps=10**9. They are estimated and refused first, naming steps."""
    run = dfit_nb.replay(small_trace, presets.get("npu_like"))
    with pytest.raises(guard.MemoryGuardError, match=r"thermal\(\) of 1000000000 steps on a 4x5 grid.*fewer steps"):
        dfit_nb.sim.thermal(run, 10, steps=10**9)
    assert dfit_nb.sim.thermal(run, 10, steps=64).sizes["time"] == 64


def test_a_sweep_on_a_long_thin_grid_counts_the_copies_of_its_tables(monkeypatch):
    """A sweep's evaluation holds about two copies of the tile-order tables at its peak (measured: 6.9 GB on a
    1x2048 grid whose one copy is 2.5 GiB); the estimate counted one, so a 1x4096 sweep passed the check and the
    process was killed. cost() of one machine keeps one copy."""
    one = guard.sweep_estimate("s", 1, 3, 1, 24, 8, 4096, 1)
    swept = guard.sweep_estimate("s", 1, 3, 1, 24, 8, 4096, 1, guard.SWEEP_TABLE_COPIES)
    assert swept.parts["tile-order tables"] == guard.SWEEP_TABLE_COPIES * one.parts["tile-order tables"]
    monkeypatch.setenv(guard.LIMIT_ENV, "22GiB")  # this machine's memory, whatever the machine running the test
    with pytest.raises(guard.MemoryGuardError, match="tile-order tables"):
        sweep({"m": [128], "k": [256], "n": [64]}, presets.get("scalesim_32"), progress=False, tiles=[(1, 4096)])
