"""What save promises (issue 14): it replaces only what dfit_nb wrote, atomically (a kill at any moment leaves a
loadable result or the old one recoverable), cleans its own leftovers, survives a full disk, versions files, and
refuses damaged ones by their checksums (issue 42, item 3)."""

from __future__ import annotations

import contextlib
import copy
import errno
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import h5py
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr

import dfit_nb
from dfit_nb import _files
from dfit_nb.cli import main
from dfit_nb.errors import DfitError, FormatVersionError, IntegrityError, SaveError, SaveRefusedError

# ------------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def trace():
    return dfit_nb.capture(lambda x: x @ x, jnp.ones((4, 4)))


@pytest.fixture(scope="module")
def run(trace):
    return dfit_nb.replay(trace, dfit_nb.sim.presets.get("scalesim_32"))


def _tagged(obj, tag):
    """A shallow copy of ``obj`` (a Trace or Run) whose attrs say ``tag``: tells an old save from a new one after
    a reload (the module's fixtures are not changed)."""
    tagged = copy.copy(obj)
    tagged.attrs = {**obj.attrs, "tag": tag}
    return tagged


def _attrs(obj) -> dict:
    """Attrs as saved and loaded (a loaded trace also holds its jaxpr text there)."""
    return {k: v for k, v in obj.attrs.items() if k != "jaxpr_text"}


def _write_unversioned(obj, path: Path) -> None:
    """Write ``obj`` as dfit_nb did before the format version: no format attribute, and through h5netcdf (the
    engine it wrote with until it moved to the netCDF4 library), so such files are checked to load too."""
    tree = obj.to_datatree()
    if path.suffix == ".zarr":
        tree.to_zarr(path, consolidated=False)
    else:
        tree.to_netcdf(path, engine="h5netcdf")


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _load(path: Path):
    return dfit_nb.load_run(path) if "run" in path.name else dfit_nb.load_trace(path)


def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           check=True)
    return int(child.stdout)


# ------------------------------------------------------------------------------- 1. never delete what is not ours


def test_an_unrelated_folder_is_refused_and_kept(trace, tmp_path):
    results = tmp_path / "results"
    (results / "sub").mkdir(parents=True)
    (results / "thesis.tex").write_text("years of work")
    (results / "sub" / "data.csv").write_text("1,2,3")
    before = _snapshot(results)
    with pytest.raises(SaveRefusedError, match=r"refusing to replace .*results: it is a directory that dfit_nb did "
                                               r"not write.*new path .*result\.nc.*previous dfit_nb save"):
        trace.save(results)
    assert _snapshot(results) == before
    assert _names(tmp_path) == ["results"]  # no temporary either


@pytest.mark.parametrize("content", ["text", "foreign_netcdf", "empty"])
def test_a_file_dfit_nb_did_not_write_is_refused_and_kept(trace, run, tmp_path, content):
    target = tmp_path / "data.nc"
    if content == "text":
        target.write_text("my notes")
    elif content == "foreign_netcdf":
        xr.Dataset({"a": ("x", [1, 2])}, attrs={"source": "someone else"}).to_netcdf(target, engine="h5netcdf")
    else:
        target.touch()
    before = target.read_bytes()
    for obj in (trace, run):
        with pytest.raises(SaveRefusedError, match=re.escape(f"{target}: it is a file that dfit_nb did not write")):
            obj.save(target)
    assert target.read_bytes() == before
    assert _names(tmp_path) == ["data.nc"]


def _not_a_file(kind: str, folder: Path, stack: contextlib.ExitStack) -> Path:
    """A FIFO, a listening Unix socket or a character device (``/dev/null``, through a link) in ``folder``."""
    path = folder / f"thing.{'zarr' if kind == 'socket' else 'nc'}"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        server = stack.enter_context(socket.socket(socket.AF_UNIX))
        server.bind(str(path))
        server.listen()
    else:
        path.symlink_to("/dev/null")
    return path


def _without_hanging(call):
    """Start ``call()`` on a thread and wait up to 20 s; returns (what it raised or None, the thread). A thread still
    alive is blocked (opening a FIFO): the caller opens the FIFO's other end to let it go."""
    box: dict[str, BaseException] = {}

    def target():
        try:
            call()
        except BaseException as err:  # collected for the assertion
            box["err"] = err

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(20)
    return box.get("err"), t


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("kind", ["fifo", "socket", "device"])
def test_files_that_are_not_files_are_refused_by_load_and_save_unopened(trace, tmp_path, kind):
    """Issue 42, item 4: load_trace on a FIFO blocked forever (Ctrl-C did not stop it). Loads now make the check
    saves make (``_files.special_file``), before opening anything."""
    from dfit_nb.errors import LoadRefusedError
    from dfit_nb.sim import calibration

    said = {"fifo": "a FIFO (named pipe)", "socket": "a socket", "device": "a character device"}[kind]
    with contextlib.ExitStack() as stack:
        path = _not_a_file(kind, tmp_path, stack)
        for load in (dfit_nb.load_trace, dfit_nb.load_run, calibration.load):
            err, thread = _without_hanging(lambda load=load: load(path))
            if thread.is_alive():  # blocked in open(): a writer lets it go, then the test fails
                with open(path, "wb") as w:  # the FIFO's write end
                    w.write(b"x")
                thread.join(20)
                pytest.fail(f"{load.__name__} opened {path}, a {kind}, and blocked")
            assert isinstance(err, LoadRefusedError) and isinstance(err, OSError), err
            assert f"refusing to load {path}: it is {said}, not a file" in str(err)
        err, thread = _without_hanging(lambda: trace.save(path))
        assert not thread.is_alive()
        assert isinstance(err, SaveRefusedError) and f"refusing to replace {path}: it is {said}" in str(err)
        assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # nothing written beside it either


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("where", ["ops/flops/c/0", "ops/flops/zarr.json", "sweep chunk", "plain folder"])
def test_a_fifo_inside_a_zarr_store_is_refused_by_load_unopened(trace, tmp_path, where):
    """A FIFO standing for one of a store's files (a chunk, a variable's metadata) blocked the load as a FIFO at
    the path did: zarr opens it. Loads walk a store's entries first (``_files.special_inside``); a folder that is
    no Zarr store is not walked (``load_trace("/")`` must not walk the disk), and zarr opens nothing in it."""
    from dfit_nb.errors import LoadRefusedError
    from dfit_nb.sim import presets, scale, sweep

    if where == "plain folder":
        (tmp_path / "deep" / "er").mkdir(parents=True)
        os.mkfifo(tmp_path / "deep" / "er" / "pipe")
        for load in (dfit_nb.load_trace, scale.open_sweep):
            err, thread = _without_hanging(lambda load=load: load(tmp_path))
            assert not thread.is_alive()
            assert isinstance(err, DfitError) and not isinstance(err, LoadRefusedError), err
            assert str(tmp_path) in str(err) and "is not a" in str(err), str(err)
        return
    if where == "sweep chunk":
        lazy = sweep({"m": [64], "k": [64], "n": [64]}, presets.get("scalesim_32"), ["os"], chunks=1,
                     per_op=False, dram_bw=[4.0, 8.0])
        path = tmp_path / "sweep.zarr"
        scale.to_zarr(lazy, path, progress=False)
        inside, load = path / "total_cycles" / "1.0", scale.open_sweep
    else:
        path = trace.save(tmp_path / "t.zarr")
        inside, load = path / where, dfit_nb.load_trace
    inside.unlink()
    os.mkfifo(inside)
    err, thread = _without_hanging(lambda: load(path))
    if thread.is_alive():  # blocked in open(): a writer lets it go, then the test fails
        with open(inside, "wb") as w:
            w.write(b"x")
        thread.join(20)
        pytest.fail(f"{load.__name__} opened {inside}, a FIFO, and blocked")
    assert isinstance(err, LoadRefusedError) and isinstance(err, OSError), err
    assert str(path) in str(err) and f"{inside} inside it is a FIFO (named pipe)" in str(err), str(err)


@pytest.mark.parametrize("kind", ["plain_folder", "foreign_zarr", "empty_folder"])
def test_a_zarr_path_dfit_nb_did_not_write_is_refused_and_kept(trace, tmp_path, kind):
    target = tmp_path / "store.zarr"
    if kind == "plain_folder":
        target.mkdir()
        (target / "keep.txt").write_text("mine")
    elif kind == "foreign_zarr":
        xr.Dataset({"a": ("x", [1, 2])}).to_zarr(target, consolidated=False)
    else:
        target.mkdir()
    before = _snapshot(target)
    with pytest.raises(SaveRefusedError, match="it is a directory that dfit_nb did not write"):
        trace.save(target)
    assert _snapshot(target) == before and target.is_dir()
    assert _names(tmp_path) == ["store.zarr"]


def test_bytes_paths_are_decoded_and_what_is_no_path_is_refused_naming_it(trace, run, tmp_path, monkeypatch):
    """A bytes path (b'/tmp/x.nc') raised "a bytes-like object is required, not 'str'"; None or 5 raised
    os.fspath's bare TypeError; '' was named as '.', "the current directory". Bytes now save and load (decoded
    by os.fsdecode); the rest are refused, saying a path is needed or that it is empty."""
    from dfit_nb.errors import LoadRefusedError

    path = os.fsencode(tmp_path / "t.nc")
    assert trace.save(path) == tmp_path / "t.nc"
    assert dfit_nb.load_trace(path).attrs["function"] == trace.attrs["function"]
    assert run.to_perfetto(os.fsencode(tmp_path / "r.json")) == tmp_path / "r.json"
    monkeypatch.chdir(tmp_path)
    for bad, said in ((None, "got NoneType"), (5, "got int"), ("", "an empty path ''")):
        for save in (trace.save, run.save, run.to_perfetto):
            with pytest.raises(SaveRefusedError, match="refusing to save to") as err:
                save(bad)
            assert said in str(err.value) and ("str or an os.PathLike" in str(err.value) or bad == ""), err.value
        for load in (dfit_nb.load_trace, dfit_nb.load_run):
            with pytest.raises(LoadRefusedError, match=f"refusing to load .*{re.escape(said)}"):
                load(bad)
    assert _names(tmp_path) == ["r.json", "t.nc"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("kind", ["fifo", "device"])
@pytest.mark.parametrize("overwrite", [False, True])
def test_to_perfetto_refuses_a_special_file_even_with_overwrite(run, tmp_path, kind, overwrite):
    """to_perfetto('/dev/null') said "a file that dfit_nb did not write", and with overwrite=True renamed its
    trace over the device (run as root, /dev/null became a regular file). A FIFO, socket or device (here a link
    to /dev/null: only the link could be replaced) is now refused as a special file, overwrite or not."""
    said = {"fifo": "a FIFO (named pipe)", "device": "a character device"}[kind]
    with contextlib.ExitStack() as stack:
        path = _not_a_file(kind, tmp_path, stack)
        with pytest.raises(SaveRefusedError, match=re.escape(f"it is {said}, a special file (not a regular file)")):
            run.to_perfetto(path, overwrite=overwrite)
        assert _files.special_file(path) and _names(tmp_path) == [path.name]


@pytest.mark.parametrize("name", [".", "..", "sub/..", "/"])
def test_dot_dotdot_and_root_are_refused(trace, tmp_path, monkeypatch, name):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "keep.txt").write_text("mine")
    monkeypatch.chdir(tmp_path / "sub")
    before = _snapshot(tmp_path)
    with pytest.raises(SaveRefusedError, match=r"refusing to save to .*: it is the (current or a parent directory|"
                                               r"root of the file system).*new path.*previous dfit_nb save"):
        trace.save(name)
    assert _snapshot(tmp_path) == before
    assert _names(tmp_path / "sub") == ["keep.txt"]


def test_the_home_and_working_directories_are_refused(trace, tmp_path, monkeypatch):
    home, work = tmp_path / "home", tmp_path / "home" / "work"
    work.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    with pytest.raises(SaveRefusedError, match="it is the home directory"):
        trace.save(home)
    with pytest.raises(SaveRefusedError, match="it is the working directory"):
        trace.save(work.resolve())
    with pytest.raises(SaveRefusedError, match="it is the working directory or one of its parents"):
        trace.save(tmp_path)
    assert _names(work) == [] and _names(home) == ["work"]


def test_a_link_to_a_folder_is_refused_and_the_folder_kept(trace, tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    (tmp_path / "link.zarr").symlink_to(folder, target_is_directory=True)
    with pytest.raises(SaveRefusedError, match=r"link\.zarr: it is a directory that dfit_nb did not write"):
        trace.save(tmp_path / "link.zarr")
    assert _names(folder) == ["keep.txt"] and (tmp_path / "link.zarr").is_symlink()


def test_a_missing_folder_is_named_not_a_temporary(trace, tmp_path):
    missing = re.escape(str(tmp_path / "nowhere"))
    with pytest.raises(SaveError, match=rf"cannot save to .*: the directory {missing} does not exist") as info:
        trace.save(tmp_path / "nowhere" / "t.nc")
    assert "dfit-tmp" not in str(info.value) and info.value.errno == errno.ENOENT
    assert _names(tmp_path) == []


def test_a_netcdf_and_a_zarr_save_are_not_swapped(trace, tmp_path):
    store = trace.save(tmp_path / "t.zarr")
    store.rename(tmp_path / "t.nc")  # a dfit_nb store under a netCDF name
    with pytest.raises(SaveRefusedError, match=r"it is a Zarr store dfit_nb wrote, but this path saves a netCDF"):
        trace.save(tmp_path / "t.nc")
    assert (tmp_path / "t.nc" / "zarr.json").is_file()


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_a_previous_dfit_nb_save_is_replaced(trace, run, tmp_path, suffix):
    for obj, name in ((trace, "t"), (run, "run")):
        path = tmp_path / f"{name}{suffix}"
        obj.save(path)
        obj.save(path)  # a save of ours: replaced
        assert _attrs(_load(path)) == _attrs(obj)
    assert _names(tmp_path) == sorted([f"run{suffix}", f"t{suffix}"])


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_a_save_from_before_the_format_version_is_replaced(trace, tmp_path, suffix):
    path = tmp_path / f"t{suffix}"
    assert "dfit_nb_version" in trace.attrs  # the marker of earlier saves
    _write_unversioned(trace, path)
    trace.save(path)
    assert _root_attrs(path)[_files.FORMAT_ATTR] == _files.FORMAT_VERSION


def test_the_cli_refuses_a_folder_for_save_trace(tmp_path, capsys):
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    code = main(["report", "--example", "mlp", "--hw", "--no-progress", "--save-trace", str(folder)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"dfit-nb: error: --save-trace '{folder}': refusing to replace")
    assert "Traceback" not in err and _names(folder) == ["keep.txt"]


# ------------------------------------------------------------------------------------------------ 2. crash safety

_CHILD = textwrap.dedent("""
    import sys
    import dfit_nb
    src, dst = sys.argv[1], sys.argv[2]
    obj = dfit_nb.load_run(src) if "run" in src.rsplit("/", 1)[-1] else dfit_nb.load_trace(src)
    obj.attrs["tag"] = "new"
    obj.save(dst)
    print("saved")
""")


def _killed_save(src: Path, dst: Path, point: str, how: str = "kill") -> int:
    """Save ``src`` to ``dst`` in a child process stopped by the save's test hook at ``point`` and killed there
    (SIGKILL; ``how="exit"``: the hook's own ``os._exit``). Returns the child's pid."""
    env = {**os.environ, _files.HOOK_ENV: point if how == "kill" else f"{point}:exit", "JAX_PLATFORMS": "cpu"}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(src), str(dst)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        if how == "kill":
            for line in child.stderr:  # the hook says where it stopped; anything else is the child's noise
                if line.strip() == f"dfit_nb save hook: {point}":
                    child.send_signal(signal.SIGKILL)
                    break
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    expected = -signal.SIGKILL if how == "kill" else 75
    assert child.returncode == expected, (child.returncode, out, err)
    assert "saved" not in out
    return child.pid


@pytest.mark.slow  # a fresh Python process importing JAX killed per step
@pytest.mark.parametrize(("suffix", "point", "how"), [
    (".nc", "partial", "kill"),     # half the temporary written
    (".nc", "written", "exit"),     # the temporary complete, not yet renamed in
    (".zarr", "written", "kill"),   # the new store complete beside the old
    (".zarr", "aside", "kill"),     # the old store moved aside, the new one not yet in: nothing at the path
    (".zarr", "replaced", "kill"),  # the new store in, the old one aside not yet deleted
])
def test_a_save_killed_at_any_step_leaves_a_loadable_result(run, tmp_path, suffix, point, how):
    src = tmp_path / "src" / "run.nc"
    src.parent.mkdir()
    run.save(src)  # what the child loads, tags "new" and saves
    dst = tmp_path / "out" / f"run{suffix}"
    dst.parent.mkdir()
    _tagged(run, "old").save(dst)  # the previous result the killed save replaces

    pid = _killed_save(src, dst, point, how)
    leftovers = sorted(set(_names(dst.parent)) - {dst.name})
    expected = {"partial": ["dfit-tmp"], "written": ["dfit-tmp"], "aside": ["dfit-old", "dfit-tmp"],
                "replaced": ["dfit-old"]}[point]
    assert [re.sub(r"-\d+$", "", name) for name in leftovers] == [f"{dst.name}.{kind}-{pid}" for kind in expected]
    assert dst.exists() == (point != "aside")

    back = dfit_nb.load_run(dst)  # the old result (restored from aside if need be), or the complete new one
    assert back.attrs["tag"] == ("new" if point == "replaced" else "old")
    assert back.events.identical(run.events)

    _tagged(run, "next").save(dst)  # the next save cleans the leftovers of the killed one
    assert _names(dst.parent) == [dst.name]
    assert dfit_nb.load_run(dst).attrs["tag"] == "next"


@pytest.mark.slow  # a fresh Python process importing JAX, killed
def test_a_killed_zarr_save_is_restored_by_the_next_save_too(run, tmp_path):
    """Killed between the renames, then saved again (not loaded first): the old store comes back first, so if
    the next save failed too, the old result would still be there."""
    src, dst = tmp_path / "run_src.nc", tmp_path / "run.zarr"
    run.save(src)
    _tagged(run, "old").save(dst)
    _killed_save(src, dst, "aside")
    assert not dst.exists()
    _tagged(run, "next").save(dst)
    assert _names(tmp_path) == ["run.zarr", "run_src.nc"]
    assert dfit_nb.load_run(dst).attrs["tag"] == "next"


def test_stale_leftovers_of_our_naming_are_cleaned_and_others_kept(trace, tmp_path):
    path = trace.save(tmp_path / "t.nc")
    dead, live = _dead_pid(), os.getppid()  # the parent runs: its save could be in progress
    (tmp_path / f"t.nc.dfit-tmp-{dead}").write_bytes(b"half a file")
    (tmp_path / f".t.nc.tmp-{dead}").write_bytes(b"half a file, earlier naming")
    (tmp_path / f"t.nc.dfit-old-{dead}").mkdir()
    (tmp_path / f"t.nc.dfit-tmp-{dead}-7").write_bytes(b"half a file, the naming of one call")
    (tmp_path / f"t.nc.dfit-old-{dead}-8").mkdir()
    (tmp_path / f"t.nc.dfit-tmp-{live}").write_bytes(b"another process's save")
    (tmp_path / f"t.nc.dfit-tmp-{live}-3").write_bytes(b"another process's save")
    for keep in ("t.nc.backup", "t.nc.dfit-tmp-notapid", f"u.nc.dfit-tmp-{dead}"):
        (tmp_path / keep).write_text("not ours to remove")
    trace.save(path)
    assert _names(tmp_path) == sorted(["t.nc", f"t.nc.dfit-tmp-{live}", f"t.nc.dfit-tmp-{live}-3", "t.nc.backup",
                                       "t.nc.dfit-tmp-notapid", f"u.nc.dfit-tmp-{dead}"])


# ------------------------------------------------------------------------------------------------ threads (issue 42)


def _in_threads(n: int, work) -> list[BaseException]:
    """Run ``work(i)`` for i < n on n threads started together; the errors they raised."""
    barrier, errors = threading.Barrier(n), []

    def one(i: int) -> None:
        barrier.wait()
        try:
            work(i)
        except BaseException as err:  # collected for the assertion
            errors.append(err)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a save or load hung"
    return errors


@pytest.mark.parametrize("suffix", [".zarr", ".nc"])
def test_threads_saving_one_path_leave_one_whole_save_and_lose_nothing(run, tmp_path, suffix):
    """Issue 42: 8 threads saving one Run to one path shared the temporary name and deleted each other's files,
    destroying the good save already there. Now each call has its own temporary and the saves take turns: every
    save succeeds, the last one is there whole, nothing else is left beside it."""
    path = _tagged(run, "before").save(tmp_path / f"run{suffix}")
    assert not _in_threads(8, lambda i: _tagged(run, f"thread {i}").save(path))
    assert _names(tmp_path) == [path.name]
    back = dfit_nb.load_run(path)
    assert back.attrs["tag"].startswith("thread ") and back.events.identical(run.events)


def test_threads_saving_and_loading_netcdf_files_do_not_crash_the_process(run, tmp_path):
    """Issue 42: netCDF-C is not thread-safe; two threads in Run.save / load_run, even on different files, killed
    the process (SIGSEGV or SIGABRT). Every call into it now holds one lock: saves and loads of 8 files by 8
    threads, then of one file while others load it, all succeed and load back what was saved."""
    paths = [tmp_path / f"run{i}.nc" for i in range(8)]
    shared = _tagged(run, "shared").save(tmp_path / "shared.nc")

    def work(i: int) -> None:
        for k in range(3):
            _tagged(run, f"{i}.{k}").save(paths[i])
            assert dfit_nb.load_run(paths[i]).attrs["tag"] == f"{i}.{k}"
            if i % 2:
                _tagged(run, "shared").save(shared)
            else:
                assert dfit_nb.load_run(shared).attrs["tag"] == "shared"

    assert not _in_threads(8, work)
    assert all(dfit_nb.load_run(p).attrs["tag"] == f"{i}.2" for i, p in enumerate(paths))
    assert _names(tmp_path) == sorted([p.name for p in paths] + ["shared.nc"])


def test_threads_streaming_one_sweep_to_one_store_take_turns(tmp_path):
    """Four threads calling ``scale.to_zarr`` of one sweep on one new path: each saw no store and created one, and
    all but the first failed renaming theirs in ("[Errno 39] Directory not empty ... check the disk"). Calls on
    one local store take turns now: the first writes every chunk, the others find it complete."""
    from dfit_nb.sim import presets, scale, sweep

    lazy = sweep({"m": [64, 8], "k": [64, 8], "n": [64, 8]}, presets.get("scalesim_32"), ["os"], chunks=1,
                 per_op=False, dram_bw=[4.0, 8.0, 16.0])
    path, written = tmp_path / "sweep.zarr", []
    assert not _in_threads(4, lambda i: written.append(scale.to_zarr(lazy, path, progress=False)))
    assert sorted(written) == [0, 0, 0, 3] and _names(tmp_path) == ["sweep.zarr"]
    assert scale.open_sweep(path)["total_cycles"].values.tolist() == lazy["total_cycles"].values.tolist()


def test_loads_of_a_zarr_path_never_see_a_swap_half_done(run, tmp_path):
    """A load on one thread while another swaps a Zarr store in: between the swap's renames nothing is at the
    path, and a load then must not move the old store back under the save (the path's lock keeps them apart)."""
    path = _tagged(run, "0").save(tmp_path / "run.zarr")

    def work(i: int) -> None:
        for k in range(4):
            if i % 2:
                _tagged(run, f"{i}.{k}").save(path)
            else:
                assert dfit_nb.load_run(path).attrs["tag"]

    assert not _in_threads(6, work)
    assert _names(tmp_path) == ["run.zarr"] and dfit_nb.load_run(path).attrs["tag"].endswith(".3")


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_a_name_too_long_for_its_temporary_names_the_users_path(trace, tmp_path, suffix):
    # issue 42, item 6: a 253-byte name fit the file system, its temporary did not: the OSError named the hidden
    # temporary only
    path = tmp_path / ("a" * (253 - len(suffix)) + suffix)
    with pytest.raises(SaveError) as info:
        trace.save(path)
    message = str(info.value)
    assert info.value.errno == errno.ENAMETOOLONG and isinstance(info.value, OSError)
    assert message.startswith(f"could not save {path}: its name is 253 bytes") and "too long" in message
    assert not re.search(r"dfit-tmp-\d", message) and _names(tmp_path) == []


def test_a_failed_netcdf_write_keeps_the_old_file_and_removes_the_temporary(trace, tmp_path, monkeypatch):
    path = _tagged(trace, "old").save(tmp_path / "t.nc")
    before = path.read_bytes()

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)  # fails after the whole temporary is written
    with pytest.raises(SaveError, match=r"could not save .*t\.nc: .*No space left on device \(the previous save "
                                        r"there is unchanged; the temporary t\.nc\.dfit-tmp-\d+-\d+ was "
                                        r"removed\)") as info:
        _tagged(trace, "new").save(path)
    assert isinstance(info.value, OSError) and info.value.errno == errno.ENOSPC
    assert path.read_bytes() == before and _names(tmp_path) == ["t.nc"]


def test_a_failed_zarr_write_keeps_the_old_store_and_removes_the_temporary(trace, tmp_path, monkeypatch):
    path = trace.save(tmp_path / "t.zarr")
    before = _snapshot(path)
    write, written = _files._write_file, []

    def full(file, data):
        if len(written) == 5:  # part of the temporary store on disk, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write(file, data)
        written.append(file)

    monkeypatch.setattr(_files, "_write_file", full)
    with pytest.raises(SaveError, match="No space left on device") as info:
        trace.save(path)
    assert info.value.errno == errno.ENOSPC and len(written) == 5
    assert _snapshot(path) == before and _names(tmp_path) == ["t.zarr"]


def test_a_zarr_store_encoded_in_memory_is_the_one_zarr_writes_to_disk(trace, run, tmp_path, monkeypatch):
    """A save encodes a Zarr store in memory and writes its files after (the local store's round trips per array
    were most of a save): file for file, what Zarr's own local store writes, the path large trees take."""
    for kind, obj in (("t", trace), ("run", run)):
        memory = obj.save(tmp_path / f"{kind}-memory.zarr")
        with monkeypatch.context() as m:
            m.setattr(_files, "ZARR_IN_MEMORY_BYTES", 0)
            disk = obj.save(tmp_path / f"{kind}-disk.zarr")
        files = _snapshot(memory)
        assert files == _snapshot(disk) and any(name.endswith("zarr.json") for name in files)
        assert len(files) > 20  # every group and variable: metadata and chunks
        assert _load(memory).to_datatree().identical(obj.to_datatree())


@pytest.mark.slow  # a fresh Python process importing JAX under a file-size limit
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_FSIZE and SIGXFSZ as on Linux")
def test_a_full_disk_gives_a_clear_error_not_a_crash(trace, tmp_path):
    """A real failed write (the file-size limit stands in for a full disk: writes fail with EFBIG): HDF5 used to
    segfault closing the file; now the process lives, the old file is intact and no temporary is left."""
    path = _tagged(trace, "old").save(tmp_path / "t.nc")
    before = path.read_bytes()
    code = textwrap.dedent(f"""
        import resource, signal, dfit_nb
        t = dfit_nb.load_trace({str(path)!r})
        t.attrs["padding"] = "x" * 200_000  # a file larger than the limit
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
        try:
            t.save({str(path)!r})
        except dfit_nb.errors.SaveError as err:
            print("SaveError", err.errno, err)
    """)
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert child.returncode == 0, (child.returncode, child.stderr[-2000:])
    assert child.stdout.startswith(f"SaveError {errno.EFBIG} could not save {path}: [Errno {errno.EFBIG}] File too "
                                   "large (the previous save there is unchanged"), child.stdout
    assert path.read_bytes() == before and _names(tmp_path) == ["t.nc"]


# ------------------------------------------------------------------------------------------------ 3. format version


def _root_attrs(path: Path) -> dict:
    if path.is_dir():
        return json.loads((path / "zarr.json").read_text())["attributes"]
    with h5py.File(path, "r") as f:  # netCDF-C stores text attributes as fixed-length bytes
        return {k: v.decode() if isinstance(v, bytes) else v for k, v in f.attrs.items()}


def _set_format(path: Path, version: str) -> None:
    if path.is_dir():
        meta = json.loads((path / "zarr.json").read_text())
        meta["attributes"][_files.FORMAT_ATTR] = version
        (path / "zarr.json").write_text(json.dumps(meta))
    else:
        with h5py.File(path, "r+") as f:
            f.attrs[_files.FORMAT_ATTR] = version


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_every_save_records_the_format_and_loading_hides_it(trace, run, tmp_path, suffix):
    for obj, name in ((trace, "t"), (run, "run")):
        path = obj.save(tmp_path / f"{name}{suffix}")
        assert _root_attrs(path)[_files.FORMAT_ATTR] == _files.FORMAT_VERSION == "1.2"
        assert _files.FORMAT_ATTR not in obj.attrs  # the object saved is not changed
        back = _load(path)
        assert _files.FORMAT_ATTR not in back.attrs
        assert _attrs(back) == _attrs(obj)


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_a_newer_major_format_is_refused_clearly(trace, run, tmp_path, suffix):
    for obj, name, load in ((trace, "t", dfit_nb.load_trace), (run, "run", dfit_nb.load_run)):
        path = obj.save(tmp_path / f"{name}{suffix}")
        _set_format(path, "2.0")
        newer = rf"{re.escape(str(path))} was written by a newer dfit_nb format 2; this version reads up to 1 "
        with pytest.raises(FormatVersionError, match=newer + r"\(dfit_nb .*\): upgrade dfit_nb"):
            load(path)
        obj.save(path)  # still ours: a save may replace it
        assert load(path).attrs["function"] == obj.attrs["function"]


def test_a_newer_minor_format_loads_and_a_garbled_version_is_named(trace, tmp_path):
    path = trace.save(tmp_path / "t.nc")
    _set_format(path, "1.7")
    assert dfit_nb.load_trace(path).total_flops() == trace.total_flops()
    _set_format(path, "banana")
    with pytest.raises(FormatVersionError, match=r"unreadable dfit_nb format version 'banana'"):
        dfit_nb.load_trace(path)
    assert issubclass(FormatVersionError, DfitError)


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_files_from_before_the_format_version_still_load(trace, run, tmp_path, suffix):
    for obj, name in ((trace, "t"), (run, "run")):
        path = tmp_path / f"{name}{suffix}"
        _write_unversioned(obj, path)
        assert _files.FORMAT_ATTR not in _root_attrs(path)
        assert _attrs(_load(path)) == _attrs(obj)


# ------------------------------------------------------------------------------------------------ 4. integrity


def _variables(path: Path) -> dict[str, dict]:
    """Every stored variable's attributes, by its path inside the file or store (``ops/flops``)."""
    found: dict[str, dict] = {}
    if path.is_dir():
        for meta in path.rglob("zarr.json"):
            doc = json.loads(meta.read_text())
            if doc.get("node_type") == "array":
                found[str(meta.parent.relative_to(path))] = doc.get("attributes", {})
        return found

    def visit(name: str, obj) -> None:  # returns None: a value would stop the visit
        attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in obj.attrs.items()}
        if isinstance(obj, h5py.Dataset) and "not a netCDF variable" not in str(attrs.get("NAME", "")):
            found[name] = attrs  # (a dimension without a coordinate is a dataset in HDF5, not a variable)

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return found


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_every_variable_is_saved_with_a_checksum_and_loading_hides_them(trace, run, tmp_path, suffix):
    for obj, name in ((trace, "t"), (run, "run")):
        path = obj.save(tmp_path / f"{name}{suffix}")
        stored = _variables(path)
        assert len(stored) > 10 and all(re.fullmatch(r"crc32:[0-9a-f]{8}", str(a[_files.CHECKSUM_ATTR]))
                                        for a in stored.values()), stored
        assert _root_attrs(path)[_files.CHECKSUM_ATTR] == "crc32"
        back = _load(path)
        parts = ("ops", "edges", "regions", "lowering") if name == "t" else ("events", "cube", "summary", "ops",
                                                                               "regions")
        for part in parts:  # the loaded object and the saved one (unchanged by the save) hold no checksum
            assert getattr(back, part).identical(getattr(obj, part)), part
            for ds in (getattr(back, part), getattr(obj, part)):
                assert not any(_files.CHECKSUM_ATTR in v.attrs for v in ds.variables.values()), part
        assert _files.CHECKSUM_ATTR not in back.attrs and _attrs(back) == _attrs(obj)


def test_a_value_changed_in_a_netcdf_file_is_refused_naming_the_file_and_the_variable(trace, tmp_path):
    path = trace.save(tmp_path / "t.nc")
    with h5py.File(path, "r+") as f:  # a valid file with one wrong value: what a flipped data byte makes
        f["ops/flops"][0] += 1
    with pytest.raises(IntegrityError) as info:
        dfit_nb.load_trace(path)
    message = str(info.value)
    assert isinstance(info.value, DfitError)
    for token in (str(path), "variable 'flops' of group '/ops'", "reads back with checksum crc32:", "saved with"):
        assert token in message, (token, message)


def test_a_deleted_or_swapped_zarr_chunk_is_refused_naming_the_variable(trace, tmp_path):
    path = trace.save(tmp_path / "t.zarr")
    chunk = path / "ops" / "flops" / "c" / "0"
    saved = chunk.read_bytes()
    chunk.unlink()  # Zarr reads a missing chunk back as fill values (zeros), with no error
    with pytest.raises(IntegrityError, match=rf"{re.escape(str(path))}: its variable 'flops' of group '/ops'"):
        dfit_nb.load_trace(path)
    # another array's chunk in its place: valid, decodable, wrong
    assert int(trace.ops["m"][0]) != int(trace.ops["flops"][0])
    chunk.write_bytes((path / "ops" / "m" / "c" / "0").read_bytes())
    with pytest.raises(IntegrityError, match=r"variable 'flops' of group '/ops'"):
        dfit_nb.load_trace(path)
    chunk.write_bytes(saved)
    assert dfit_nb.load_trace(path).ops.identical(trace.ops)


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_a_lost_checksum_or_an_unknown_kind_is_refused(trace, tmp_path, suffix):
    path = trace.save(tmp_path / f"t{suffix}")
    if path.is_dir():
        meta = path / "ops" / "count" / "zarr.json"
        doc = json.loads(meta.read_text())
        del doc["attributes"][_files.CHECKSUM_ATTR]
        meta.write_text(json.dumps(doc))
    else:
        with h5py.File(path, "r+") as f:
            del f["ops/count"].attrs[_files.CHECKSUM_ATTR]
    with pytest.raises(IntegrityError, match=rf"{re.escape(str(path))}: its variable 'count' of group '/ops' has "
                                             r"no checksum"):
        dfit_nb.load_trace(path)
    path = trace.save(tmp_path / f"u{suffix}")
    if path.is_dir():
        meta = json.loads((path / "zarr.json").read_text())
        meta["attributes"][_files.CHECKSUM_ATTR] = "sha3"
        (path / "zarr.json").write_text(json.dumps(meta))
    else:
        with h5py.File(path, "r+") as f:
            f.attrs[_files.CHECKSUM_ATTR] = "sha3"
    with pytest.raises(IntegrityError, match=r"checksums of kind 'sha3'.*upgrade dfit_nb"):
        dfit_nb.load_trace(path)


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_files_saved_before_the_checksums_load_unchecked(trace, run, tmp_path, suffix):
    for obj, name in ((trace, "t"), (run, "run")):
        path = tmp_path / f"{name}{suffix}"
        _write_unversioned(obj, path)
        assert not any(_files.CHECKSUM_ATTR in a for a in _variables(path).values())
        assert _attrs(_load(path)) == _attrs(obj)


def test_single_byte_flips_in_a_netcdf_file_never_load_wrong_values(trace, tmp_path):
    # the audit: 9 of 30 single-byte flips in a .nc file loaded with wrong values and no error
    data = trace.save(tmp_path / "t.nc").read_bytes()
    outcomes = []
    for i in range(30):
        flipped = bytearray(data)
        flipped[int((i + 0.5) * len(data) / 30)] ^= 0xFF
        path = tmp_path / f"flip{i}.nc"
        path.write_bytes(bytes(flipped))
        try:
            back = dfit_nb.load_trace(path)
        except DfitError as err:
            outcomes.append("refused" if str(path) in str(err) else f"refused without the path: {err}")
            continue
        same = all(getattr(back, p).identical(getattr(trace, p)) for p in ("ops", "edges", "regions", "lowering"))
        outcomes.append("same" if same and _attrs(back) == _attrs(trace) else f"silent at byte {i}")
    assert not [o for o in outcomes if o != "refused" and o != "same"], outcomes


def test_a_flipped_byte_in_any_file_of_a_zarr_store_never_loads_wrong_values(trace, tmp_path):
    """The audit: a flipped byte in a Zarr chunk loaded wrong values. Each file of a saved trace's store (chunks,
    metadata), its middle byte flipped in turn: refused naming the store (``IntegrityError`` once the root's
    mark is read: a chunk that no longer decompresses is damage, not another program's file) or loaded
    identical."""
    path = trace.save(tmp_path / "t.zarr")
    outcomes = {}
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        data = file.read_bytes()
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0xFF
        file.write_bytes(bytes(flipped))
        where = str(file.relative_to(path))
        try:
            back = dfit_nb.load_trace(path)
        except DfitError as err:
            root = where == "zarr.json"  # the mark itself unreadable: not known to be a dfit_nb store
            expected = DfitError if root else IntegrityError
            named = str(path) in str(err)
            outcomes[where] = "refused" if isinstance(err, expected) and named else f"{type(err).__name__}: {err}"
        else:
            same = all(getattr(back, p).identical(getattr(trace, p)) for p in ("ops", "edges", "regions",
                                                                                "lowering"))
            outcomes[where] = "same" if same and _attrs(back) == _attrs(trace) else "silent"
        file.write_bytes(data)
    assert len(outcomes) > 50 and "refused" in outcomes.values()
    assert not {w: o for w, o in outcomes.items() if o not in ("refused", "same")}, outcomes


def test_checksums_tell_text_by_its_strings_not_its_dtype():
    text = ["ab", "c", "", "é注"]
    same = {_files.checksum(np.array(text)), _files.checksum(np.array(text, dtype=object)),
            _files.checksum(np.array(text, dtype=np.dtypes.StringDType()))}
    assert len(same) == 1
    # the lengths keep the joining unambiguous; the shape is part of it
    assert _files.checksum(np.array(["a", "bc", "", "é注"], dtype=object)) not in same
    assert _files.checksum(np.array(text).reshape(2, 2)) not in same
    assert _files.checksum(np.zeros(4)) != _files.checksum(np.zeros((2, 2)))


def test_a_runs_large_arrays_are_saved_compressed_and_load_identical(tmp_path):
    # a 64x64-tile machine's cube is two float64 (256, 64, 64) arrays, mostly zeros where tiles idle (issue 41,
    # item 6: cerebras_like's cubes were most of a report folder)
    import netCDF4
    import numpy as np

    from dfit_nb._files import COMPRESS_BYTES
    from dfit_nb.sim import presets

    fn, args = dfit_nb.examples.get("mlp").build()
    run = dfit_nb.replay(dfit_nb.capture(fn, *args), presets.get("cerebras_like"), "ws")
    path = run.save(tmp_path / "run.nc")
    cube_bytes = sum(run.cube[v].nbytes for v in ("busy", "sram_occupancy"))
    assert cube_bytes >= 2 * COMPRESS_BYTES and path.stat().st_size < cube_bytes / 4
    with netCDF4.Dataset(path) as f:
        assert f["cube"]["busy"].filters()["zlib"] and f["cube"]["busy"].filters()["shuffle"]
        assert not f["summary"]["latency_s"].filters()["zlib"]  # small variables stay as they are
    back = dfit_nb.load_run(path)
    for v in ("busy", "sram_occupancy", "link_load"):
        np.testing.assert_array_equal(back.cube[v].values, run.cube[v].values)


@pytest.mark.parametrize("suffix", [".zarr", ".nc"])
def test_a_loaded_trace_and_run_work_as_the_saved_ones(trace, tmp_path, suffix):
    """Zarr reads text back as NumPy's variable-width strings, which dfit_nb's ``astype(str)`` refused: a trace
    loaded from a ``.zarr`` store could not be replayed, nor a loaded run exported or compared. Both formats load
    text as Python strings now, and what is loaded replays and exports as the original does."""
    hw = dfit_nb.sim.presets.get("npu_like")
    loaded = dfit_nb.load_trace(trace.save(tmp_path / f"t{suffix}"))
    assert all(v.dtype.kind != "T" for v in loaded.ops.variables.values())
    run = dfit_nb.replay(trace, hw)
    again = dfit_nb.replay(loaded, hw)
    assert float(again.summary["latency_cycles"]) == float(run.summary["latency_cycles"])
    assert float(dfit_nb.sim.cost(loaded, hw)["seconds"].sum()) == float(dfit_nb.sim.cost(trace, hw)["seconds"].sum())
    back = dfit_nb.load_run(run.save(tmp_path / f"r{suffix}"))
    back.to_perfetto(tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text())
    assert dfit_nb.sim.compare(run, back) is not None
