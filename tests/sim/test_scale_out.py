"""Sweeps past one machine: lazy chunked Datasets, tree reductions, resumable Zarr, a dask.distributed cluster."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time

import dask
import dask.array as da
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import dfit_nb
from dfit_nb.sim import Hardware, _chunks, presets, replay_batch, scale, sweep
from dfit_nb.sim import grid as grid_mod
from dfit_nb.sim.memory import MemoryGuardError
from dfit_nb.sim.pareto import ReductionError, best, pareto_front, quantiles
from dfit_nb.sim.scale import ScaleOutError, blocks, to_zarr

OPS = {"m": [64, 197, 1], "k": [64, 300, 512], "n": [64, 33, 512], "batch": [1, 2, 1]}
GRID = {"tiles": [(1, 1), (2, 2), (4, 5)], "noc_bw": [8.0, 64.0], "dram_bw": [16.0, 60.0, 200.0]}
HW = presets.get("npu_like")
CHUNKS = 4  # one chunk size for every test: one compiled shape


@pytest.fixture(scope="module")
def eager() -> xr.Dataset:
    return sweep(OPS, HW, progress=False, **GRID)


def _same(lazy_computed: xr.Dataset, eager: xr.Dataset) -> None:
    xr.testing.assert_identical(lazy_computed.drop_attrs(deep=False), eager.drop_attrs(deep=False))
    assert {k: v for k, v in lazy_computed.attrs.items() if k not in ("chunks", "chunk_machines")} == eager.attrs


def test_lazy_sweep_is_one_task_per_chunk_computes_nothing_until_asked_and_equals_eager(eager, monkeypatch):
    calls = []
    for name in ("_evaluate_batch", "_evaluate_batch_fast_compile"):  # the two compiles by_work picks from
        real = getattr(grid_mod, name)
        monkeypatch.setattr(grid_mod, name, lambda *a, real=real, **k: calls.append(1) or real(*a, **k))
    lazy = sweep(OPS, HW, chunks=CHUNKS, **GRID)
    assert calls == []  # built, not evaluated
    assert all(isinstance(lazy[v].data, da.Array) for v in lazy.data_vars if v != "count")
    assert lazy["cycles"].dims == eager["cycles"].dims and lazy["cycles"].shape == eager["cycles"].shape
    graph = dict(lazy["cycles"].data.__dask_graph__())
    chunk_tasks = [k for k in graph if isinstance(k, tuple) and k[0].startswith(scale.CHUNK_PREFIX)]
    assert len(chunk_tasks) == lazy.attrs["chunks"] == 6  # 3 tiles x 2 noc_bw rows of 3 dram_bw machines
    _same(lazy.compute(), eager)
    assert len(calls) == 6  # each chunk once, though 28 variables read it


def test_totals_only_and_picked_variables_equal_the_eager_totals(eager):
    totals = sweep(OPS, HW, chunks=CHUNKS, per_op=False, **GRID)
    assert set(totals.data_vars) == {"total_cycles", "total_energy_j", "total_macs"} and "op" not in totals.dims
    computed = totals.compute()
    for var in totals.data_vars:
        np.testing.assert_array_equal(computed[var].values, eager[var].values)
    picked = sweep(OPS, HW, chunks=CHUNKS, variables=["cycles", "total_energy_j"], **GRID)
    assert set(picked.data_vars) == {"cycles", "total_energy_j"}
    np.testing.assert_array_equal(picked["cycles"].values, eager["cycles"].values)
    eager_totals = sweep(OPS, HW, per_op=False, progress=False, **GRID)
    xr.testing.assert_identical(eager_totals, eager[list(totals.data_vars)])


@settings(max_examples=60)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.integers(1, 50))
def test_blocks_cover_every_machine_once_in_order_and_fit_the_chunk(shape, chunks):
    per_axis, parts = blocks(tuple(shape), chunks)
    assert [sum(c) for c in per_axis] == shape
    flat = np.arange(int(np.prod(shape))).reshape(shape)
    seen = []
    for index, lo, hi in parts:
        assert 0 < hi - lo <= chunks
        starts = [sum(c[:i]) for c, i in zip(per_axis, index, strict=True)]
        region = flat[tuple(slice(s, s + c[i]) for s, c, i in zip(starts, per_axis, index, strict=True))]
        np.testing.assert_array_equal(region.reshape(-1), np.arange(lo, hi))  # a block is a contiguous run
        seen.extend(range(lo, hi))
    assert seen == list(range(flat.size))


def _brute_front(x: np.ndarray, y: np.ndarray) -> list[int]:
    """The definition, pairwise: dominated by a point no worse on both and better on one; of equal points the
    first (in flat order) stays."""
    keep = []
    for i in range(x.size):
        if not (np.isfinite(x[i]) and np.isfinite(y[i])):
            continue
        dominated = np.any((x <= x[i]) & (y <= y[i]) & ((x < x[i]) | (y < y[i])))
        earlier_twin = np.any((x[:i] == x[i]) & (y[:i] == y[i]))
        if not dominated and not earlier_twin:
            keep.append(i)
    return keep


@settings(max_examples=40)
@given(st.integers(1, 9), st.integers(1, 7), st.integers(1, 5), st.integers(1, 4), st.data())
def test_tree_front_equals_the_brute_force_front(rows, cols, chunk_rows, chunk_cols, data):
    values = st.sampled_from([1.0, 2.0, 3.0, 4.0, np.inf])  # few values: ties and non-finite points
    x = np.array(data.draw(st.lists(values, min_size=rows * cols, max_size=rows * cols))).reshape(rows, cols)
    y = np.array(data.draw(st.lists(values, min_size=rows * cols, max_size=rows * cols))).reshape(rows, cols)
    chunks = (min(chunk_rows, rows), min(chunk_cols, cols))
    ds = xr.Dataset({"latency_cycles": (("a", "b"), da.from_array(x, chunks=chunks)),
                     "energy_j": (("a", "b"), da.from_array(y, chunks=chunks))},
                    coords={"a": np.arange(rows) * 10, "b": [f"b{j}" for j in range(cols)]})
    front = pareto_front(ds)
    expected = _brute_front(x.reshape(-1), y.reshape(-1))
    assert sorted(front["flat"].values.tolist()) == expected
    ia, ib = np.unravel_index(front["flat"].values, x.shape)
    np.testing.assert_array_equal(front["a"].values, ia * 10)
    np.testing.assert_array_equal(front["latency_cycles"].values, x[ia, ib])
    assert np.all(np.diff(front["latency_cycles"].values) >= 0)


def test_reductions_of_a_lazy_sweep_equal_numpy_on_the_eager_one(eager):
    lazy = sweep(OPS, HW, chunks=CHUNKS, per_op=False, **GRID)
    xr.testing.assert_identical(pareto_front(lazy), pareto_front(eager))
    b = best(lazy, "total_energy_j", keep=["dataflow"])
    for d, name in enumerate(eager["dataflow"].values):
        values = eager["total_energy_j"].sel(dataflow=name).values
        where = np.unravel_index(np.argmin(values), values.shape)
        assert b["total_energy_j"].sel(dataflow=name).item() == values[where]
        assert [b[k].values[d] for k in GRID] == [eager[k].values[i] for k, i in zip(GRID, where, strict=True)]
    q = quantiles(lazy, "total_cycles", [0.1, 0.5, 0.9])
    np.testing.assert_array_equal(q.values, np.quantile(eager["total_cycles"].values, [0.1, 0.5, 0.9]))
    with pytest.raises(ReductionError, match="objectives \\['nope'\\] are not variables"):
        pareto_front(lazy, ("nope", "total_cycles"))
    with pytest.raises(ReductionError, match="keep dims \\['op'\\] are not dims of 'total_cycles'"):
        best(lazy, "total_cycles", keep=["op"])


@pytest.mark.slow
def test_lazy_replay_batch_equals_eager():
    trace = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    hw = Hardware.stack([HW.replace(dram_bytes_per_cycle=bw, tile_cols=c) for bw in (8.0, 64.0, 600.0)
                         for c in (2, 5)], name="batch")
    eager_batch = replay_batch(trace, hw)
    lazy = replay_batch(trace, hw, chunks=4)
    assert lazy["latency_cycles"].chunks == ((4, 2),) and lazy.attrs["machine_chunks"] == 2
    computed = lazy.compute()
    xr.testing.assert_identical(computed.drop_attrs(deep=False), eager_batch.drop_attrs(deep=False))
    with pytest.raises(ScaleOutError, match="chunks must be a positive whole number of machines per chunk, got 0"):
        replay_batch(trace, hw, chunks=0)


def test_bad_chunks_oversized_chunks_and_bad_variables_are_refused(monkeypatch):
    with pytest.raises(ScaleOutError, match=r"chunks must be a positive whole number of machines per chunk, got 2\.5"):
        sweep(OPS, HW, chunks=2.5, **GRID)
    with pytest.raises(dfit_nb.sim.CostInputError, match="names 'latency'; valid with per_op=False: total_cycles"):
        sweep(OPS, HW, chunks=CHUNKS, per_op=False, variables=["latency"], **GRID)
    monkeypatch.setenv("DFIT_NB_MEMORY_LIMIT", "4GiB")
    big = {"dram_bw": np.linspace(1.0, 100.0, 1000), "noc_bw": np.linspace(1.0, 100.0, 1000)}
    threads = scale.worker_memory()[1]  # chunks run at once, each with its own results
    with pytest.raises(MemoryGuardError, match=rf"chunks of 1,000,000 machines of a sweep of 1,000,000, {threads} at "
                                               r"once on this process .* needs about .* GiB .*more than the 4\.0 GiB "
                                               r"available.*smaller chunks="):
        sweep(OPS, HW, chunks=10**6, **big)
    lazy = sweep(OPS, HW, chunks=1000, per_op=False, **big)  # fits: nothing evaluated yet
    assert lazy.attrs["chunks"] == 1000


def test_what_is_not_a_store_path_or_a_lazy_dataset_is_refused(tmp_path):
    from dfit_nb.errors import LoadRefusedError, SaveRefusedError

    lazy = sweep(OPS, HW, chunks=CHUNKS, per_op=False, **GRID)
    for store in (None, 5):  # os.fspath's bare TypeError, naming no argument
        with pytest.raises(SaveRefusedError, match=r"refusing to write a sweep to .*the store must be a path"):
            to_zarr(lazy, store, progress=False)
        with pytest.raises(LoadRefusedError, match=r"refusing to open .*the store must be a path"):
            scale.open_sweep(store)
    with pytest.raises(ScaleOutError, match=r"to_zarr\(\) streams a lazy Dataset"):  # named, not an AttributeError
        to_zarr(None, tmp_path / "s.zarr", progress=False)
    assert not os.listdir(tmp_path)


def test_a_worker_with_another_version_fails_at_its_first_task(monkeypatch):
    monkeypatch.setattr(_chunks, "versions", lambda: {"dfit_nb": "0.0.1", "jax": "0.4.0"})
    lazy = sweep(OPS, HW, chunks=CHUNKS, per_op=False, **GRID)  # the "client" runs other versions
    monkeypatch.undo()
    with pytest.raises(ScaleOutError, match=f"this Dask worker runs dfit_nb {dfit_nb.__version__} with JAX "
                                            f"{jax.__version__}, but the client runs dfit_nb 0.0.1 with JAX 0.4.0"):
        lazy["total_cycles"].compute()


KILLED_RUN = textwrap.dedent("""
    import sys, time, dask
    import numpy as np
    from dfit_nb.sim import _sweep_store, presets, scale, sweep
    dask.config.set(scheduler="synchronous")  # one chunk after another
    real = _sweep_store._write_block
    def slowly(*args):  # a slow chunk, so the parent can kill the run half way
        out = real(*args)
        time.sleep(0.15)
        return out
    _sweep_store._write_block = slowly
    ops = {ops!r}
    lazy = sweep(ops, presets.get("npu_like"), chunks=3, per_op=False, dram_bw={bw!r}, noc_bw=[8.0, 64.0])
    scale.to_zarr(lazy, sys.argv[1], progress=False)
    print("finished")
""")


@pytest.mark.slow
def test_zarr_stream_killed_half_way_resumes_without_losing_or_repeating_chunks(tmp_path):
    import zarr

    bw = [float(b) for b in range(4, 64, 2)]  # 30 x 2 machines, 3 per chunk: 20 chunks
    path = str(tmp_path / "sweep.zarr")
    child = subprocess.Popen([sys.executable, "-c", KILLED_RUN.format(ops=OPS, bw=bw), path],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    done = 0
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and child.poll() is None:
            try:
                done = int(np.sum(zarr.open_group(path, mode="r")[scale.DONE][:]))
            except Exception:  # the store is being created
                done = 0
            if done >= 5:
                break
            time.sleep(0.02)
    finally:
        child.send_signal(signal.SIGKILL)
        _, err = child.communicate(timeout=60)
    assert 5 <= done < 20, (done, err.decode()[-2000:])
    before = np.asarray(zarr.open_group(path, mode="r")[scale.DONE][:], bool)
    lazy = sweep(OPS, HW, chunks=3, per_op=False, dram_bw=bw, noc_bw=[8.0, 64.0])
    written = to_zarr(lazy, path, progress=False)
    assert written == int((~before).sum())  # only the chunks not on disk, each once
    stored = scale.open_sweep(path)  # every chunk checked against the CRC32 its task recorded
    assert bool(stored[scale.DONE].all()) and scale.CHECKSUMS not in stored
    assert set(xr.open_zarr(path).data_vars) - set(stored.data_vars) == {scale.CHECKSUMS}
    expected = sweep(OPS, HW, per_op=False, progress=False, dram_bw=bw, noc_bw=[8.0, 64.0])
    xr.testing.assert_identical(stored.drop_vars(scale.DONE).load().drop_attrs(deep=False),
                                expected.drop_attrs(deep=False))
    assert to_zarr(lazy, path, progress=False) == 0
    other = sweep(OPS, HW, chunks=2, per_op=False, dram_bw=bw, noc_bw=[8.0, 64.0])
    with pytest.raises(ScaleOutError, match="holds another sweep"):
        to_zarr(other, path)


@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    with dask.config.set({"distributed.worker.daemon": False}):
        lc = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                      silence_logs=logging.ERROR)
    try:
        yield lc
    finally:
        lc.close(timeout=30)


@pytest.fixture
def client(cluster):
    """The default client during one test only (the workers, and what they compiled, live for the module)."""
    import distributed

    c = distributed.Client(cluster)
    try:
        yield c
    finally:
        c.close(timeout=30)


@pytest.mark.slow
def test_the_same_call_runs_on_a_local_cluster_compiling_once_per_worker(client, eager):
    def compiled() -> int:  # tests.shared.programs, on a worker (which may not import the tests package)
        from dfit_nb._runtime import exported as _exported
        from dfit_nb.sim import grid

        fns = (grid._evaluate_batch, grid._evaluate_batch_fast_compile)
        return sum(fn._cache_size() + sum(1 for key in _exported._loaded if key[0] is fn) for fn in fns)

    before = client.run(compiled)
    lazy = sweep(OPS, HW, chunks=2, **GRID)  # 9 chunks of 2 machines over 2 workers: one new compiled shape
    assert "runs on the Dask cluster" in scale.dashboard()
    _same(lazy.compute(), eager)
    after = client.run(compiled)
    grown = {w: after[w] - before.get(w, 0) for w in after}
    assert set(grown.values()) <= {0, 1} and 1 in grown.values(), grown  # per worker, not per task


@pytest.mark.slow
def test_a_worker_killed_mid_sweep_is_retried_without_losing_chunks(client, eager):
    from distributed import futures_of, wait

    lazy = sweep(OPS, HW, chunks=1, **GRID).persist()  # 18 chunks
    futures = futures_of(lazy)
    wait(futures, timeout=120, return_when="FIRST_COMPLETED")
    holders = {addr for keys in client.who_has(futures).values() for addr in keys}
    victim = sorted(holders)[0]
    pid = client.run(os.getpid, workers=[victim])[victim]
    os.kill(pid, signal.SIGKILL)  # its chunks (done or running) are lost: the scheduler must redo them
    _same(lazy.compute(), eager)


@pytest.mark.slow
def test_sweep_explorer_on_a_lazy_batch_computes_the_front_and_opens_a_picked_machine():
    from dfit_nb.widgets import SweepExplorer

    trace = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    # the machines of test_lazy_replay_batch_equals_eager: its compiled batch programs serve this test too
    hw = Hardware.stack([HW.replace(dram_bytes_per_cycle=bw, tile_cols=c) for bw in (8.0, 64.0, 600.0)
                         for c in (2, 5)], name="batch")
    lazy = replay_batch(trace, hw, chunks=4)
    sx = SweepExplorer(lazy, trace)
    eager_batch = replay_batch(trace, hw)
    expected = pareto_front(eager_batch)["machine"].values
    assert sorted(sx.shown["machine"].values.tolist()) == sorted(expected.tolist())
    assert not any(isinstance(sx.shown[v].data, da.Array) for v in sx.shown.data_vars)
    assert "lazy sweep: its Pareto front" in sx.status.value and sx.chart.chart.to_dict()["$schema"]
    picked = int(expected[-1])
    assert sx.machine(picked).dram_bytes_per_cycle == float(hw.dram_bytes_per_cycle[picked])
    grid_lazy = sweep(OPS, HW, chunks=CHUNKS, per_op=False, **GRID)
    sg = SweepExplorer(grid_lazy)
    assert sg.shown.sizes["front"] == pareto_front(grid_lazy).sizes["front"]


def test_the_progress_bar_counts_the_chunks_of_a_local_computation():
    lazy = sweep(OPS, HW, chunks=CHUNKS, per_op=False, **GRID)
    with scale.progress() as bar:
        lazy.compute()
    assert bar.bar.total == bar.bar.n == lazy.attrs["chunks"] == 6
    assert "runs on this process' threads" in scale.dashboard()
