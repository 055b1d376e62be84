"""JAX's persistent compilation cache as ``dfit_nb.setup()`` sets it up (``dfit_nb/_runtime/compile_cache.py``).

JAX reads its cache settings once per process, at the first compile, so every case runs in a fresh subprocess
with its own environment; traces are one small matmul. Only the first test replays (dfit_nb's own threshold
must let the replay program through); the others force every compile into the cache with JAX's threshold at 0.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dfit_nb._runtime import compile_cache as _compile_cache
from dfit_nb.errors import CompilationCacheWarning, DfitWarning

#: the child: import dfit_nb and call setup() (recording warnings), capture a tiny matmul, compile one more jitted
#: function,
#: optionally replay it; print what dfit_nb decided, what JAX uses and the persistent-cache events as JSON
CHILD = textwrap.dedent("""
    import json, sys, warnings
    import jax, jax.numpy as jnp
    from jax import monitoring

    events = {}
    monitoring.register_event_listener(lambda name, **kw: events.__setitem__(name, events.get(name, 0) + 1))
    if len(sys.argv) > 2:
        jax.config.update("jax_compilation_cache_dir", sys.argv[2])   # the user's own setting, before setup()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import dfit_nb
        dfit_nb.setup()
    f32 = jnp.float32
    trace = dfit_nb.capture(lambda x, w: jnp.tanh(x @ w), jax.ShapeDtypeStruct((8, 16), f32),
                            jax.ShapeDtypeStruct((16, 8), f32))
    jax.block_until_ready(jax.jit(lambda x: x * 2 + 1)(jnp.arange(4.0)))
    latency = None
    if sys.argv[1] == "replay":
        latency = float(dfit_nb.replay(trace, dfit_nb.sim.presets.get("scalesim_32"), "ws").summary["latency_cycles"])
    state = dfit_nb._runtime.compile_cache.state()
    from jax._src import compilation_cache
    print(json.dumps({
        "cache_type": type(compilation_cache._cache).__name__,
        "source": state.source, "directory": state.directory, "reason": state.reason,
        "jax_dir": jax.config.jax_compilation_cache_dir,
        "min_time": jax.config.jax_persistent_cache_min_compile_time_secs,
        "warnings": [[type(w.message).__name__, str(w.message)] for w in caught],
        "events": {k.rsplit("/", 1)[1]: v for k, v in events.items()}, "latency": latency,
    }))
""")


def _child(tmp_path: Path, what: str = "compile", env: dict[str, str | None] | None = None,
           jax_dir: str | None = None) -> dict:
    """Run :data:`CHILD` with HOME and XDG_CACHE_HOME inside ``tmp_path`` (no test touches the real cache)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("JAX_") and k != _compile_cache.ENV}
    e.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "xdg"))
    for k, v in (env or {}).items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    argv = [sys.executable, "-c", CHILD, what, *([jax_dir] if jax_dir is not None else [])]
    p = subprocess.run(argv, env=e, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return {**json.loads(p.stdout.strip().splitlines()[-1]), "stderr": p.stderr}


def _entries(path: Path) -> set[str]:
    return {p.name for p in path.glob("*-cache")} if path.is_dir() else set()


@pytest.mark.slow  # two fresh processes, each capturing and replaying end to end
def test_a_replay_populates_the_cache_and_the_next_process_loads_it(tmp_path):
    cache = tmp_path / "cache"
    cold = _child(tmp_path, "replay", {_compile_cache.ENV: str(cache)})
    assert (cold["source"], cold["directory"], cold["jax_dir"]) == ("env", str(cache), str(cache))
    assert cold["min_time"] == _compile_cache.MIN_COMPILE_TIME_S and not cold["warnings"]
    assert cold["cache_type"] == "AtomicFileCache" and not list(cache.glob(".*"))  # renamed into place, no temporary
    written = _entries(cache)
    assert any(name.startswith("jit_") for name in written), sorted(cache.iterdir())  # the replay program
    assert cold["events"].get("cache_misses", 0) >= 1 and not cold["events"].get("cache_hits")

    warm = _child(tmp_path, "replay", {_compile_cache.ENV: str(cache)})
    # every entry loads (a program that compiled just under the threshold before may pass it now, under load)
    assert warm["events"].get("cache_hits", 0) >= len(written) and written <= _entries(cache)
    assert warm["latency"] == cold["latency"]

    # a corrupted entry (a process killed while writing it) is JAX's warning and a fresh compile, never a crash
    for entry in cache.glob("*-cache"):
        entry.write_bytes(entry.read_bytes()[:100])
    broken = _child(tmp_path, "replay", {_compile_cache.ENV: str(cache)})
    assert broken["latency"] == cold["latency"] and not broken["events"].get("cache_hits")
    assert "Error reading persistent compilation cache entry" in broken["stderr"]


@pytest.mark.slow  # two fresh processes
def test_a_program_has_the_same_key_in_every_workers_folder(tmp_path):
    """The test runs' xdist workers compile into folders of their own, and a run's start links each folder's
    entries into the others (the repository's conftest.py). That helps only where a program's key does not depend
    on the folder, and JAX's does by default: it puts the path of an XLA cache of its own (GPU autotuning results,
    inside the compilation cache) in every key, unless ``jax_persistent_cache_enable_xla_caches`` is ``none``, as
    that conftest.py sets it for test runs. Then what one folder compiled, the other loads."""
    env = {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES": "none"}
    _child(tmp_path, env={_compile_cache.ENV: str(tmp_path / "gw0"), **env})
    written = _entries(tmp_path / "gw0")
    shutil.copytree(tmp_path / "gw0", tmp_path / "gw1")
    other = _child(tmp_path, env={_compile_cache.ENV: str(tmp_path / "gw1"), **env})
    assert other["events"].get("cache_hits", 0) >= len(written) and _entries(tmp_path / "gw1") == written


@pytest.mark.slow  # a fresh Python process importing JAX
def test_the_default_directory_is_created_under_xdg_cache_home(tmp_path):
    child = _child(tmp_path, env={"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"})
    cache = tmp_path / "xdg" / "dfit_nb" / "jax"
    assert (child["source"], child["directory"], child["jax_dir"]) == ("dfit_nb", str(cache), str(cache))
    assert child["min_time"] == 0  # a threshold the user set is theirs
    assert _entries(cache) and not child["warnings"] and not (tmp_path / "home").exists()


def test_the_requested_directory(tmp_path, monkeypatch):
    """The XDG rule (an unset, empty or relative XDG_CACHE_HOME means ~/.cache) and the switch's spellings."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _compile_cache.default_directory() == tmp_path / "xdg" / "dfit_nb" / "jax"
    for xdg in ("", "relative/cache"):
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
        assert _compile_cache.default_directory() == tmp_path / "home" / ".cache" / "dfit_nb" / "jax"
    monkeypatch.delenv("XDG_CACHE_HOME")
    default = tmp_path / "home" / ".cache" / "dfit_nb" / "jax"
    assert _compile_cache.default_directory() == default
    for off in ("0", "off", "OFF", "false", "False", " no "):
        assert _compile_cache.requested_directory(off) is None
    for on in ("", "1", "on", "true", "YES"):
        assert _compile_cache.requested_directory(on) == default
    assert _compile_cache.requested_directory("~/jc") == tmp_path / "home" / "jc"
    monkeypatch.chdir(tmp_path)
    assert _compile_cache.requested_directory("rel/jc") == tmp_path / "rel" / "jc"  # absolute from the start
    monkeypatch.setenv(_compile_cache.ENV, "0")
    assert _compile_cache.requested_directory() is None


@pytest.mark.slow  # a fresh Python process importing JAX
def test_switched_off_leaves_no_cache(tmp_path):
    child = _child(tmp_path, env={_compile_cache.ENV: "0", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"})
    assert (child["source"], child["directory"], child["jax_dir"]) == ("off", None, None)
    assert not child["events"].get("cache_misses") and not child["warnings"]
    assert not (tmp_path / "xdg").exists() and not (tmp_path / "home").exists()


@pytest.mark.slow  # a fresh Python process importing JAX each
def test_a_cache_directory_configured_in_jax_is_never_overridden(tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    env = {_compile_cache.ENV: str(ours), "JAX_COMPILATION_CACHE_DIR": str(theirs),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    child = _child(tmp_path, env=env)
    assert (child["source"], child["jax_dir"]) == ("jax", str(theirs))
    assert _entries(theirs) and not ours.exists() and not (tmp_path / "xdg").exists()
    # set in Python before dfit_nb is imported: kept too, and dfit_nb's threshold is not applied
    other = tmp_path / "other"
    child = _child(tmp_path, env={_compile_cache.ENV: str(ours)}, jax_dir=str(other))
    assert (child["source"], child["jax_dir"], child["min_time"]) == ("jax", str(other), 1.0)
    assert not ours.exists()


@pytest.mark.slow  # a fresh Python process importing JAX
def test_an_unwritable_directory_warns_once_and_continues_without_a_cache(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    child = _child(tmp_path, env={_compile_cache.ENV: str(blocker / "sub"),
                                  "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"})
    assert (child["source"], child["directory"], child["jax_dir"]) == ("unwritable", None, None)
    assert [w[0] for w in child["warnings"]] == ["CompilationCacheWarning"]
    assert str(blocker / "sub") in child["warnings"][0][1] and _compile_cache.ENV in child["warnings"][0][1]
    assert "NotADirectoryError" in child["reason"] or "FileExistsError" in child["reason"]
    assert not child["events"].get("cache_misses") and blocker.read_text() == "not a directory"
    assert issubclass(CompilationCacheWarning, DfitWarning)


def test_the_test_suite_never_writes_to_the_real_cache():
    """The repository's conftest.py points the cache at a directory of its own (unless one was chosen explicitly)
    and calls ``dfit_nb.setup()``, so that this process, its subprocesses and the notebooks' kernels share it and
    leave ``~/.cache`` alone."""
    state = _compile_cache.state()
    assert state is not None and state.source in ("env", "jax", "off")
    if state.directory is not None:
        assert Path(state.directory) != _compile_cache.default_directory()


#: the child for the metadata case: capture ``sin(x) @ w``, with ``sin`` wrapped in a custom_jvp or not (the two
#: lower to the same program once locations and op names are stripped, but their ops are numbered differently)
TAGS_CHILD = textwrap.dedent("""
    import json, sys
    import jax, jax.numpy as jnp
    import dfit_nb

    @jax.custom_jvp
    def wrapped_sin(x):
        return jnp.sin(x)

    wrapped_sin.defjvp(lambda p, t: (wrapped_sin(p[0]), jnp.cos(p[0]) * t[0]))
    sin = wrapped_sin if sys.argv[1] == "wrapped" else jnp.sin
    s = jax.ShapeDtypeStruct((64, 64), jnp.float32)
    trace = dfit_nb.capture(lambda x, w: sin(x) @ w, s, s)
    print(json.dumps(dict(zip(trace.ops.primitive.values.tolist(), trace.ops.fusion.values.tolist()))))
""")


@pytest.mark.slow  # a fresh Python process importing JAX each
def test_a_capture_never_reads_another_programs_tags_from_the_cache(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    env.update({_compile_cache.ENV: str(tmp_path / "cache"), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"})

    def fusions(which: str) -> dict:
        p = subprocess.run([sys.executable, "-c", TAGS_CHILD, which], env=env, capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout.strip().splitlines()[-1])

    plain = fusions("plain")  # fills the cache
    assert plain["sin"] and plain["dot_general"]
    wrapped = fusions("wrapped")
    assert (wrapped["sin"], wrapped["dot_general"]) == (plain["sin"], plain["dot_general"]), wrapped


def test_a_directory_every_user_may_write_is_refused(tmp_path):
    """JAX runs the executables it loads: a world-writable directory would let anyone run code in the process.
    A directory dfit_nb creates is the user's alone."""
    mine = tmp_path / "new" / "cache"
    _compile_cache._prepare(mine)
    assert mine.stat().st_mode & 0o777 == 0o700 and not list(mine.iterdir())
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(PermissionError, match="writable by every user"):
        _compile_cache._prepare(shared)


def _repository_conftest():
    """The repository's ``conftest.py`` (the test runs' own compilation cache), loaded under a name of its own."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("repository_conftest", Path(__file__).parents[1] / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the test run's variables are set already: this changes nothing
    return module


def _this_runs_folder(conftest) -> Path:
    """This process's compilation cache as the repository's conftest.py chose it: ``.cache/jax-tests``, or an
    xdist worker's folder in it (``gw0``, or ``gw0-2`` while another run's gw0 holds that); skips where the
    run's cache was chosen by DFIT_NB_COMPILATION_CACHE or JAX_COMPILATION_CACHE_DIR."""
    here = Path(os.environ.get("DFIT_NB_COMPILATION_CACHE", "."))
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    ours = (here.parent == conftest.CACHE and re.fullmatch(rf"{re.escape(worker)}(-\d+)?", here.name)) if worker \
        else here == conftest.CACHE
    if "JAX_COMPILATION_CACHE_DIR" in os.environ or not ours:
        pytest.skip("this run's cache was chosen by DFIT_NB_COMPILATION_CACHE or JAX_COMPILATION_CACHE_DIR")
    return here


def test_the_test_runs_cache_is_this_checkouts_and_keeps_every_program():
    conftest = _repository_conftest()
    assert conftest.CACHE == Path(__file__).resolve().parents[1] / ".cache" / "jax-tests"
    here = _this_runs_folder(conftest)
    assert os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    assert os.environ["JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES"] == "none"  # no folder in the programs' keys
    assert _compile_cache.state().directory == str(here)


def test_an_xdist_worker_compiles_into_a_folder_of_its_own():
    """JAX writes a cache entry in place (no temporary and rename), so a worker could read an entry the other
    was still writing (a truncated stream, an error under ``filterwarnings = error``): each worker has its own
    folder, named after it, which JAX (and the exported programs' sub-folder) use."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("not an xdist worker")
    import jax

    here = _this_runs_folder(_repository_conftest())
    assert here.name.split("-")[0] == os.environ["PYTEST_XDIST_WORKER"]
    assert jax.config.jax_compilation_cache_dir == _compile_cache.state().directory == str(here)


def test_each_worker_holds_its_own_folder_while_it_lives(tmp_path):
    """Workers gw0 and gw1 get different folders; a second run's gw0, while the first's is alive, a third; once
    the first has exited (its descriptor closed), its folder is free again."""
    conftest = _repository_conftest()
    try:
        assert conftest._own_folder(tmp_path, "gw0") == tmp_path / "gw0"
        assert conftest._own_folder(tmp_path, "gw1") == tmp_path / "gw1"
        assert conftest._own_folder(tmp_path, "gw0") == tmp_path / "gw0-2"  # gw0 is held
        os.close(conftest._held.pop(0))  # the first gw0 exits
        assert conftest._own_folder(tmp_path, "gw0") == tmp_path / "gw0"
    finally:
        for fd in conftest._held:
            os.close(fd)


def test_the_test_runs_cache_drops_its_oldest_files_past_its_cap(tmp_path):
    prune = _repository_conftest()._prune
    (tmp_path / "dfit_nb_exported").mkdir()
    for i in range(10):  # JAX's entries at the top, exported programs in the sub-folder: both count
        file = (tmp_path / "dfit_nb_exported" if i % 2 else tmp_path) / f"entry{i}"
        file.write_bytes(b"x" * 100)
        os.utime(file, (i, i))
    prune(tmp_path, 1000)  # 1,000 bytes held: at the cap, nothing goes
    assert len(list(tmp_path.rglob("entry*"))) == 10
    prune(tmp_path, 500)  # past it: the oldest go until half the cap is left
    assert sorted(p.name for p in tmp_path.rglob("entry*")) == ["entry8", "entry9"]


def test_the_cap_counts_an_entry_linked_into_several_folders_once(tmp_path):
    prune = _repository_conftest()._prune
    for i, folder in enumerate(("gw0", "gw1", "gw2")):
        (tmp_path / folder).mkdir()
        if i:
            os.link(tmp_path / "gw0" / "entry", tmp_path / folder / "entry")
        else:
            (tmp_path / "gw0" / "entry").write_bytes(b"x" * 100)
    prune(tmp_path, 100)  # 100 bytes on disk, under three names: at the cap, nothing goes
    assert len(list(tmp_path.rglob("entry"))) == 3
    prune(tmp_path, 99)  # past it: every name goes, for the bytes are freed with the last one
    assert not list(tmp_path.rglob("entry"))


def test_a_run_gives_every_free_folder_the_entries_the_others_have(tmp_path):
    """At a run's start every worker's folder, and the folder a run without workers uses, gets the entries the
    others have, as hard links (one file on disk); a folder another live run's worker holds neither gives nor
    takes, and temporaries (names starting with a dot) stay where they are."""
    conftest = _repository_conftest()
    (tmp_path / "gw0" / "dfit_nb_exported").mkdir(parents=True)
    (tmp_path / "gw1").mkdir()
    (tmp_path / "gw0" / "a-cache").write_bytes(b"a")
    (tmp_path / "gw0" / "dfit_nb_exported" / "p.stablehlo").write_bytes(b"p")
    (tmp_path / "gw1" / "b-cache").write_bytes(b"b")
    (tmp_path / "gw1" / ".p-1234").write_bytes(b"")
    (tmp_path / "c-cache").write_bytes(b"c")  # a run without workers compiled this one
    try:
        busy = conftest._own_folder(tmp_path, "gw2")  # another run's worker, alive
        (busy / "d-cache").write_bytes(b"d")
        assert conftest._share(tmp_path)  # the top level holds every entry now
        everything = ["a-cache", "b-cache", "c-cache", "dfit_nb_exported/p.stablehlo"]
        for folder in (tmp_path, tmp_path / "gw0", tmp_path / "gw1"):
            entries = sorted(str(p.relative_to(folder)) for p in folder.rglob("[!.]*") if p.is_file()
                             and not conftest.WORKER_FOLDER.fullmatch(p.relative_to(folder).parts[0]))
            assert entries == everything, folder
            assert (folder / "a-cache").samefile(tmp_path / "gw0" / "a-cache")
        assert sorted(p.name for p in busy.iterdir()) == ["d-cache"]
        assert not (tmp_path / "gw0" / ".p-1234").exists()
        assert conftest._lock(tmp_path) is None  # held by this run (it may compile there) until it exits
        assert not conftest._share(tmp_path)  # so another run's start leaves it be (and sizes the whole tree)
        fd = conftest._lock(tmp_path / "gw0")  # free again for this run's worker
        assert fd is not None
        os.close(fd)
    finally:
        for fd in conftest._held:
            os.close(fd)
