"""Every pytest run (the tests, the docstring examples, the notebooks) compiles into this checkout's own JAX cache.

JAX's persistent compilation cache (``dfit_nb.setup()`` switches it on: :func:`pytest_configure` calls it in every
test process, as the CLI, the magics and the notebooks do in theirs) points at ``.cache/jax-tests`` in this
checkout (git ignores it), set here, at the repository root, before ``setup()`` runs: no test run writes to the
user's ``~/.cache/dfit_nb/jax``, a clean clone (CI) starts cold, and a contributor's next run loads what the last
one compiled. The variables are inherited: the CLI subprocesses and the notebooks' kernels share the cache with
the test process that started them.

Each pytest-xdist worker compiles into a folder of its own, ``.cache/jax-tests/gw0``, ``gw1`` (a run without
workers: ``.cache/jax-tests`` itself). JAX writes an entry in place, not through a temporary file and a rename, so
with one folder a worker could read an entry the other was still writing, as one did on a fresh clone
(``zlib.error: incomplete or truncated stream``, an error under ``filterwarnings = error``). ``setup()`` now
gives JAX's cache atomic writes (``dfit_nb/_compile_cache.py``), which alone prevents that; the folders stay
apart too (the inner loop measured faster so, see below). A worker that inherits
the controller's folder takes its own (:func:`_own_folder`), locked while it lives (a second run in this checkout
meanwhile takes ``gw0-2``); what the worker starts inherits it. Before the workers start, each folder no live
process holds gets the others' entries as hard links (:func:`_share`), so a module that lands on the other worker
than last time still loads its programs. For that a key must not depend on the folder, and JAX's default puts a
path in it (its GPU autotuning cache's, inside the folder): hence ``JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES=none``.
Inner loop, 2 cores, a busy day: warm runs compiled 6 and 10 programs again (157.6 s, 140.1 s) against 8 and 6
with one shared folder (168.4 s, 175.0 s), and 810 and 173 with folder-dependent keys; cold, the ~220 programs both
workers need are compiled by each (430.6 s against 331.9 s, with load moving both).

Every program goes in (JAX's threshold at 0 s, where dfit_nb's own is 0.2 s): the inner loop compiles some 1,500
programs, most of them small, and loading each back is cheaper than compiling it again (``-m "not slow"`` on 2
cores: 2 min 7-16 s warm, 5 min 33 s - 6 min 10 s cold; 2 min 39 s warm when only programs past 0.2 s were kept,
the README's inner loop), and writing a small entry costs nothing measurable. A changed program has a new key, so a
stale entry is never loaded, only left behind: past :data:`MAX_BYTES` the oldest entries go first. Start cold with
``rm -rf .cache/jax-tests``; an explicit ``DFIT_NB_COMPILATION_CACHE`` or ``JAX_COMPILATION_CACHE_DIR`` (a
directory of your own, or ``0``) is kept.

Python's bytecode is written (beside the sources, in the ``__pycache__`` folders git ignores) even where
``PYTHONDONTWRITEBYTECODE`` is set, as this machine's environment sets it: otherwise every test process compiles
dfit_nb's sources again and pytest rewrites the asserts of all ~175 test modules again, in each xdist worker, each
notebook kernel and each CLI subprocess. Collecting the inner loop's tests took 11.3-13.2 s with bytecode kept
against 16.1-18.1 s without (``pytest --collect-only -m "not slow"`` here and in a worktree of the commit before,
alternating, 2 cores). Installed packages keep the bytecode pip compiled for them.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import sys
from pathlib import Path

import pytest

try:
    import fcntl
except ImportError:  # Windows: no folder locks, so no second run's workers kept apart, and nothing shared
    fcntl = None

#: this checkout's compilation cache for test runs
CACHE = Path(__file__).resolve().parent / ".cache" / "jax-tests"
#: past this size the oldest entries are removed until the cache is under half of it (the inner loop writes about
#: 22 MB; entries of programs since changed are never read again)
MAX_BYTES = 1 << 30


def _prune(directory: Path, max_bytes: int) -> None:
    """Remove the oldest files under ``directory`` (by modification time) until it holds at most ``max_bytes / 2``,
    when it holds more than ``max_bytes``. A file linked into several folders (:func:`_share`) counts once, and
    frees its bytes when its last name goes."""
    files = []
    names_of: dict[tuple[int, int], int] = {}
    for folder, _, names in os.walk(directory):  # every worker's folder; the exported programs in sub-folders
        for name in names:
            with contextlib.suppress(OSError):  # removed meanwhile by another run
                info = os.lstat(os.path.join(folder, name))
                inode = (info.st_dev, info.st_ino)
                names_of[inode] = names_of.get(inode, 0) + 1
                files.append((info.st_mtime, info.st_size, os.path.join(folder, name), inode))
    total = sum(size for _, size, _, inode in {f[3]: f for f in files}.values())
    if total <= max_bytes:
        return
    for _, size, path, inode in sorted(files):
        if total <= max_bytes // 2:
            break
        try:
            os.unlink(path)
        except OSError:  # another run removed it, or it cannot be: nothing is lost by keeping it
            continue
        names_of[inode] -= 1
        if not names_of[inode]:
            total -= size


#: the folders this process holds (see :func:`_lock`), open until it exits
_held: list[int] = []
#: a worker's folder in :data:`CACHE`: its xdist id, and a number where another run's worker of that id held it
WORKER_FOLDER = re.compile(r"gw\d+(-\d+)?")


def _lock(folder: Path) -> int | None:
    """An open descriptor of ``folder`` holding its lock (``flock``, let go when the descriptor is closed or this
    process exits, however it exits), or ``None`` where another live process holds it, or where there are no such
    locks (no ``fcntl``: Windows)."""
    if fcntl is None:
        return None
    fd = os.open(folder, os.O_RDONLY)  # not inherited by the processes this one starts
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _own_folder(directory: Path, name: str) -> Path:
    """``directory / name``, or ``name-2``, ``name-3``... beside it: the first that no other live process holds,
    held by this one until it exits, so a second test run in the same checkout at the same time (its workers are
    named gw0, gw1... too) writes elsewhere. The processes a worker starts (notebook kernels, CLI runs) use its
    folder through the environment, while the worker waits on them. Without locks, ``directory / name``."""
    for n in range(1, 100 if fcntl else 2):
        folder = directory / (name if n == 1 else f"{name}-{n}")
        folder.mkdir(parents=True, exist_ok=True)
        fd = _lock(folder)
        if fd is not None:
            _held.append(fd)
            return folder
    return directory / name  # no locks, or 99 runs at once: give up on separating them


def _share(directory: Path) -> bool:
    """Give ``directory`` and each worker's folder in it (:data:`WORKER_FOLDER`) every entry the others have, as
    hard links, so a module that runs on the other worker than last time (loadscope hands modules out as workers
    come free) still finds its programs, and so does a run without workers (which compiles into ``directory``).
    Returns whether ``directory`` now holds every entry of every folder that took part (it could be held, and
    hard links need a filesystem that has them).

    Only folders no live process holds take part, each held until every link is made: an entry in a folder that
    is being written may be incomplete, and JAX, where it finds no entry, writes one in place (a link made between
    its look and its write would be truncated, in every folder). ``directory`` stays held by this process until
    it exits, for a run without workers writes into it. Links are otherwise safe: JAX never rewrites an entry it
    finds and never removes one, and dfit_nb replaces an exported program's file by renaming a new one over it.
    Without locks nothing is shared.
    """
    folders, fds = [], []
    for folder in [directory, *sorted(p for p in directory.iterdir() if WORKER_FOLDER.fullmatch(p.name))]:
        fd = _lock(folder)
        if fd is None:
            continue
        (_held if folder == directory else fds).append(fd)
        files = set()
        top = str(folder)
        for sub, subdirs, names in os.walk(top):
            if sub == top:
                subdirs[:] = [d for d in subdirs if not WORKER_FOLDER.fullmatch(d)]  # the workers' own, at the top
            prefix = sub[len(top) + 1:]
            files.update(os.path.join(prefix, n) for n in names if not n.startswith("."))  # not temporaries
        folders.append((folder, files))
    complete = bool(folders) and folders[0][0] == directory
    everything = set().union(*(files for _, files in folders))
    for folder, files in folders:
        for name in everything - files:
            source = next(f / name for f, fs in folders if name in fs)
            try:
                (folder / name).parent.mkdir(exist_ok=True)
                os.link(source, folder / name)
            except OSError:  # gone meanwhile, or no hard links here: a compile, nothing worse
                complete = False
    for fd in fds:
        os.close(fd)
    return complete


def _bytes(directory: Path) -> int:
    """The bytes of the files in ``directory`` and its sub-folders, leaving out the workers' folders."""
    total = 0
    for folder, subdirs, names in os.walk(directory):
        if folder == str(directory):
            subdirs[:] = [d for d in subdirs if not WORKER_FOLDER.fullmatch(d)]
        for name in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


if "DFIT_NB_COMPILATION_CACHE" not in os.environ and "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    CACHE.mkdir(parents=True, exist_ok=True)
    # the whole tree (every worker's folder, the exported programs in each) where the top level, which holds each
    # entry once when shared, is past the cap or not the whole: sizing one folder, not each (0.07 s against 0.23 s)
    if not _share(CACHE) or _bytes(CACHE) > MAX_BYTES:
        _prune(CACHE, MAX_BYTES)
    os.environ["DFIT_NB_COMPILATION_CACHE"] = str(CACHE)
    # every program goes in; and no XLA cache of its own beside JAX's (GPU autotuning results, by default), whose
    # path JAX puts in every program's key: each worker's folder would key the same program differently
    for option, text, value in (("min_compile_time_secs", "0", 0.0), ("enable_xla_caches", "none", "none")):
        if f"JAX_PERSISTENT_CACHE_{option.upper()}" not in os.environ:
            os.environ[f"JAX_PERSISTENT_CACHE_{option.upper()}"] = text
            if "jax" in sys.modules:  # a plugin imported JAX before this file: its config has read the environment
                sys.modules["jax"].config.update(f"jax_persistent_cache_{option}", value)

if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("DFIT_NB_COMPILATION_CACHE") == str(CACHE) and \
        "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    # an xdist worker that inherited the controller's default (see the module docstring): a folder of its own
    os.environ["DFIT_NB_COMPILATION_CACHE"] = str(_own_folder(CACHE, os.environ["PYTEST_XDIST_WORKER"]))

if sys.dont_write_bytecode:  # see the module docstring
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # for the processes the tests start
    sys.dont_write_bytecode = False  # for the modules imported from here on: dfit_nb and the test modules


def pytest_configure(config):
    """``dfit_nb.setup()`` in every test process (the cache chosen above, synchronous CPU dispatch, the deferred
    IRI parser), before any test computes. The process that sees every test report (the xdist controller, or a run
    without workers) records what each test took and, under ``--dist loadscope``, hands the modules out longest
    first by the last run's figures (``tests/longest_first.py``)."""
    import dfit_nb
    from tests.longest_first import register

    dfit_nb.setup()
    register(config)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    """Collect the garbage once, then freeze what is left, so the collections that follow at exit skip it.

    By the time this runs (last), every test and fixture is done. What follows it walks the whole heap again and
    again: pytest's search for unraisable exceptions collects five times, IPython's shell (the magics tests start
    one) collects as it resets at exit, and JAX clears its caches. An xdist worker's heap after the inner loop
    (every compiled program's Python side, the traces, the captured examples) took 7-9 s to get through that,
    while the other worker and the controller waited on it. One collection here still runs every finalizer that
    was due (an exception in one is reported as before); objects that die after the freeze are never collected
    in a process that is exiting anyway. Worker exit, from its last test to the controller's end of session:
    9.3 s before, 2.7 s after (``-m "not slow"``, 2 cores, timestamps logged by a throwaway plugin).
    """
    gc.collect()
    gc.freeze()
