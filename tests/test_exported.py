"""The exported-program cache (dfit_nb._runtime.exported): same numbers as a plain call, reused across processes, and
never in the way (off switch, tracers, unreadable files, an unwritable directory)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dfit_nb
from dfit_nb._runtime import exported as _exported
from dfit_nb._runtime import kept as _kept
from dfit_nb.errors import CompilationCacheWarning
from dfit_nb.sim import _replay, presets


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty exported-program directory for this test, and nothing held in memory from earlier calls: neither
    the loaded programs nor the replay's kept outputs (an earlier test's replay of the same inputs would be read
    from there, calling no program)."""
    folder = tmp_path / _exported.SUBDIR
    monkeypatch.setattr(_exported, "directory", lambda: folder)
    monkeypatch.setattr(_exported, "_loaded", {})
    monkeypatch.setattr(_exported, "_signed", {})
    monkeypatch.setattr(_replay, "_kept", _kept.Kept())
    monkeypatch.setattr(_exported, "_warned", False)
    monkeypatch.delenv(_exported.ENV, raising=False)
    return folder


@jax.jit
def _square_sum(x):
    return {"s": (x * x).sum(), "n": x.shape[0] + 0 * x.sum()}


@pytest.mark.slow  # compiles every program twice, exported and plain
def test_replay_and_cost_through_the_cache_equal_the_plain_calls(cache, monkeypatch, static_traces):
    """A replay (its program) and a cost table (its own program) exported, then loaded back from the files,
    give exactly the plain jitted calls' numbers."""
    t, hw = static_traces["mlp"], presets.get("npu_like")
    exported_run, exported_cost = dfit_nb.replay(t, hw, "os"), dfit_nb.sim.cost(t, hw, ["ws", "is"])
    files = sorted(cache.glob("*.stablehlo"))
    assert len(files) == 2  # one replay program, one cost program
    monkeypatch.setattr(_exported, "_loaded", {})  # a fresh process: the programs come from the files
    _replay._kept.clear()  # ... and the replay's outputs from its program, not from the ones kept
    loaded_run = dfit_nb.replay(t, hw, "os")
    assert sorted(cache.glob("*.stablehlo")) == files and all(f.stat().st_size > 0 for f in files)
    assert len(_exported._loaded) == 1  # the replay's program, loaded from its file
    monkeypatch.setenv(_exported.ENV, "0")
    _replay._kept.clear()
    plain_run, plain_cost = dfit_nb.replay(t, hw, "os"), dfit_nb.sim.cost(t, hw, ["ws", "is"])
    for run in (exported_run, loaded_run):
        for name in ("latency_s", "energy_j", "dram_bytes"):
            assert float(run.summary[name]) == float(plain_run.summary[name])
        np.testing.assert_array_equal(run.ops["end"].values, plain_run.ops["end"].values)
    for name in ("cycles", "energy_pj", "dram_reads_input"):
        np.testing.assert_array_equal(exported_cost[name].values, plain_cost[name].values)


@pytest.mark.slow  # compiles every program twice, exported and plain
def test_sweeps_batches_and_a_batch_selection_through_the_cache_equal_the_plain_calls(cache, monkeypatch,
                                                                                      static_traces):
    """The batch programs (a sweep's, replay_batch's, and select_dataflows' pricing of every style on a batch of
    machines) exported, then loaded back from the files, give exactly the plain jitted calls' numbers."""
    from dfit_nb.sim import Hardware, replay_batch, select_dataflows, sweep

    t, hw = static_traces["mlp"], presets.get("npu_like")
    machines = Hardware.stack([hw.replace(dram_bytes_per_cycle=b) for b in (16.0, 64.0)])

    def calls():
        return (sweep(t, hw, ["ws", "os"], progress=False, dram_bw=[8.0, 32.0, 128.0]),
                replay_batch(t, machines), select_dataflows(t, machines, "latency"))

    exported = calls()
    files = sorted(cache.glob("*.stablehlo"))
    held = {key[0].__name__ for key in _exported._loaded}
    assert {"_evaluate_batch", "_batch_program", "_styles_program"} <= held and len(files) == len(_exported._loaded)
    monkeypatch.setattr(_exported, "_loaded", {})  # a fresh process: the programs come from the files
    loaded = calls()
    assert sorted(cache.glob("*.stablehlo")) == files
    monkeypatch.setenv(_exported.ENV, "0")
    plain = calls()
    for got in (exported, loaded):
        for ds, ref in zip(got, plain, strict=True):
            assert set(ds.data_vars) == set(ref.data_vars)
            for name in ref.data_vars:
                if ref[name].dtype.kind == "f":
                    np.testing.assert_array_equal(ds[name].values, ref[name].values, err_msg=name)


def test_a_new_shape_or_static_argument_is_a_new_program(cache):
    x = np.arange(4.0, dtype=np.float32)
    assert float(_exported.call(_square_sum, {}, x)["s"]) == 14.0
    assert float(_exported.call(_square_sum, {}, np.arange(5.0, dtype=np.float32))["s"]) == 30.0
    f = jax.jit(lambda a, power: a ** power, static_argnames="power")
    assert float(_exported.call(f, {"power": 3}, np.float32(2.0))) == 8.0
    assert float(_exported.call(f, {"power": 2}, np.float32(2.0))) == 4.0
    assert len(list(cache.glob("*.stablehlo"))) == 4


def test_a_signed_call_finds_its_program_by_the_callers_key(cache, monkeypatch):
    """call_signed (a warm cost()'s path) exports or loads a program as call() does, then finds it by the
    caller's key alone; a fresh table of programs (a new process) loads it again, and off means the plain call."""
    x = np.arange(4.0, dtype=np.float32)
    resolved = []
    real = _exported._resolve
    monkeypatch.setattr(_exported, "_resolve", lambda fn, *a: resolved.append(fn) or real(fn, *a))
    for _ in range(3):
        assert float(_exported.call_signed(_square_sum, {}, ("4 float32",), x)["s"]) == 14.0
    assert resolved == [_square_sum] and len(list(cache.glob("*.stablehlo"))) == 1  # looked up once, exported
    assert float(_exported.call(_square_sum, {}, x)["s"]) == 14.0
    assert len(_exported._loaded) == 1  # call() finds the same program
    monkeypatch.setattr(_exported, "_loaded", {})  # a fresh process's table: the program comes from its file
    assert float(_exported.call_signed(_square_sum, {}, ("4 float32",), x)["s"]) == 14.0
    assert len(resolved) == 3 and len(_exported._loaded) == 1 and len(list(cache.glob("*.stablehlo"))) == 1
    monkeypatch.setenv(_exported.ENV, "0")
    assert float(_exported.call_signed(_square_sum, {}, ("4 float32",), x)["s"]) == 14.0  # the plain call
    assert len(resolved) == 4 and len(_exported._loaded) == 1


def test_the_cache_stands_aside_when_off_or_inside_a_transformation(cache, monkeypatch):
    x = np.arange(3.0, dtype=np.float32)
    # under jit / grad the arguments are tracers: the plain function is traced into the outer program
    assert float(jax.jit(lambda v: _exported.call(_square_sum, {}, v)["s"])(x)) == 5.0
    g = jax.grad(lambda v: _exported.call(_square_sum, {}, v)["s"])(jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(g), 2 * x)
    assert not cache.exists()
    monkeypatch.setenv(_exported.ENV, "off")
    assert not _exported.enabled()
    assert float(_exported.call(_square_sum, {}, x)["s"]) == 5.0
    assert not cache.exists()


def test_an_unreadable_file_warns_once_and_is_replaced(cache, monkeypatch):
    x = np.arange(3.0, dtype=np.float32)
    _exported.call(_square_sum, {}, x)
    [path] = cache.glob("*.stablehlo")
    path.write_bytes(b"not a serialized program")
    monkeypatch.setattr(_exported, "_loaded", {})
    with pytest.warns(CompilationCacheWarning, match="unreadable exported program .*tracing it again"):
        assert float(_exported.call(_square_sum, {}, x)["s"]) == 5.0
    assert path.read_bytes() != b"not a serialized program"  # replaced by a good one
    path.write_bytes(b"")
    monkeypatch.setattr(_exported, "_loaded", {})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second bad file in a process is ignored without another warning
        assert float(_exported.call(_square_sum, {}, x)["s"]) == 5.0


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_an_unwritable_directory_keeps_the_program_in_memory(cache):
    cache.mkdir(mode=0o500)
    try:
        x = np.arange(3.0, dtype=np.float32)
        assert float(_exported.call(_square_sum, {}, x)["s"]) == 5.0
        assert float(_exported.call(_square_sum, {}, x)["s"]) == 5.0
        assert list(cache.iterdir()) == []
    finally:
        cache.chmod(0o700)


@pytest.mark.slow  # a fresh Python process importing JAX, compiling and loading
def test_a_fresh_process_loads_the_program_instead_of_tracing_it(tmp_path):
    """Two processes on one cache directory: the first exports the replay's program, the second reads that
    file (not traced: jax.export.export is never called there) and prints the same latency."""
    script = textwrap.dedent("""
        import jax, dfit_nb
        from dfit_nb.sim import presets
        dfit_nb.setup()  # the compilation cache, and beside it the exported programs
        calls = []
        original = jax.export.export
        jax.export.export = lambda *a, **k: (calls.append(1), original(*a, **k))[1]
        fn, args = dfit_nb.examples.get("mlp").build()
        run = dfit_nb.replay(dfit_nb.capture(fn, *args), presets.get("tpu_like"), "ws")
        print(len(calls), repr(float(run.summary["latency_s"])))
    """)
    env = {**os.environ, "DFIT_NB_COMPILATION_CACHE": str(tmp_path / "cache")}
    env.pop(_exported.ENV, None)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    outs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True,
                           timeout=300).stdout.split() for _ in range(2)]
    assert outs[0][0] == "1" and outs[1][0] == "0"
    assert outs[0][1] == outs[1][1]
    assert len(list((tmp_path / "cache" / _exported.SUBDIR).glob("*.stablehlo"))) == 1


def test_the_source_fingerprint_covers_the_whole_package():
    """An edit anywhere in dfit_nb (the model in sim/, not only the runtime package) makes new keys: the
    fingerprint hashes every module of the package, the runtime package's own included."""
    import hashlib
    from pathlib import Path

    root = Path(dfit_nb.__file__).resolve().parent
    h = hashlib.sha256()
    files = sorted(root.rglob("*.py"))
    for path in files:
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    assert root / "sim" / "machine.py" in files and root / "_runtime" / "exported.py" in files
    assert _exported.source_fingerprint() == h.hexdigest()
