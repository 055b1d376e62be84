"""Every pytest run (the tests, the docstring examples, the notebooks) compiles into a fresh JAX cache.

JAX's persistent compilation cache (``import dfit_nb`` switches it on) points at a new directory per test run,
set here, at the repository root, before anything imports dfit_nb, so that no test run writes to the user's
``~/.cache/dfit_nb/jax`` and every run starts cold, as CI does on a clean clone. The variable is inherited: the
CLI subprocesses and the notebooks' kernels share the run's cache with the test process. A developer who wants
warm runs across test runs sets ``DFIT_NB_COMPILATION_CACHE`` (or ``JAX_COMPILATION_CACHE_DIR``) to a directory
of their own; an explicit setting is kept.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

if "DFIT_NB_COMPILATION_CACHE" not in os.environ and "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="dfit_nb-test-jax-cache-")
    os.environ["DFIT_NB_COMPILATION_CACHE"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
