"""Every pytest run (the tests, the docstring examples, the notebooks) compiles into this checkout's own JAX cache.

JAX's persistent compilation cache (``import dfit_nb`` switches it on) points at ``.cache/jax-tests`` in this
checkout (git ignores it), set here, at the repository root, before anything imports dfit_nb: no test run writes
to the user's ``~/.cache/dfit_nb/jax``, a clean clone (CI) starts cold, and a contributor's next run loads what
the last one compiled. The variables are inherited: the CLI subprocesses and the notebooks' kernels share the
cache with the test process.

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
import sys
from pathlib import Path

import pytest

#: this checkout's compilation cache for test runs
CACHE = Path(__file__).resolve().parent / ".cache" / "jax-tests"
#: past this size the oldest entries are removed until the cache is under half of it (the inner loop writes about
#: 22 MB; entries of programs since changed are never read again)
MAX_BYTES = 1 << 30


def _prune(directory: Path, max_bytes: int) -> None:
    """Remove the oldest files under ``directory`` (by modification time) until it holds at most ``max_bytes / 2``,
    when it holds more than ``max_bytes``."""
    files = []
    for folder, _, names in os.walk(directory):  # JAX's entries, and dfit_nb's exported programs in a sub-folder
        for name in names:
            with contextlib.suppress(OSError):  # removed meanwhile by another run
                info = os.lstat(os.path.join(folder, name))
                files.append((info.st_mtime, info.st_size, os.path.join(folder, name)))
    total = sum(size for _, size, _ in files)
    if total <= max_bytes:
        return
    for _, size, path in sorted(files):
        if total <= max_bytes // 2:
            break
        try:
            os.unlink(path)
        except OSError:  # another run removed it, or it cannot be: nothing is lost by keeping it
            continue
        total -= size


if "DFIT_NB_COMPILATION_CACHE" not in os.environ and "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    CACHE.mkdir(parents=True, exist_ok=True)
    _prune(CACHE, MAX_BYTES)
    os.environ["DFIT_NB_COMPILATION_CACHE"] = str(CACHE)
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
        os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
        if "jax" in sys.modules:  # a plugin imported JAX before this file: its config has read the environment
            sys.modules["jax"].config.update("jax_persistent_cache_min_compile_time_secs", 0.0)

if sys.dont_write_bytecode:  # see the module docstring
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # for the processes the tests start
    sys.dont_write_bytecode = False  # for the modules imported from here on: dfit_nb and the test modules


def pytest_configure(config):
    """The process that sees every test report (the xdist controller, or a run without workers) records what each
    test took and, under ``--dist loadscope``, hands the modules out longest first by the last run's figures
    (``tests/longest_first.py``)."""
    from tests.longest_first import register

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
