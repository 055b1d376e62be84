"""Import time in fresh processes: ml_dtypes, JAX and dfit_nb, and ml_dtypes releases side by side.

Every process that imports JAX imports ml_dtypes first (JAX's extra NumPy dtypes: bfloat16, float8, int4...): the
CLI, each pytest-xdist worker, each notebook kernel, each fresh process a test starts. ml_dtypes 0.7.0 registers
its NumPy ufunc loops in about a second at import (numpy's ``PyUFunc_AddLoop``), 0.6.0 in milliseconds, so
``pyproject.toml`` keeps ``ml_dtypes<0.7``.

This prints, for this environment, the import time of ``ml_dtypes``, ``jax`` and ``dfit_nb`` (each in fresh
processes, after numpy), then, for each release given with ``--versions``, the import time of ``ml_dtypes`` in a
throwaway virtual environment holding only this environment's NumPy and that release (``pip install``; the
environments are built once under a temporary folder and deleted), the releases alternating, best and median of
``--repeats`` processes each, and their ratios to the first.

Where ``rfc3987_syntax`` is installed (JupyterLab brings it in), it then prints ``import dfit_nb.report`` (Altair,
hence jsonschema) after ``dfit_nb.setup()``, deferring that module's import
(:mod:`dfit_nb._runtime.deferred_iri`)
beside ``DFIT_NB_DEFER_IRI=0`` (jsonschema imports it, building its parsers), alternating fresh processes.

Run: ``python benchmarks/bench_import.py [--repeats 5] [--versions 0.6.0 0.7.0]``
(``--versions`` with nothing after it skips the side-by-side).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

import numpy as np

TIMER = "import time, numpy; t = time.perf_counter(); import {mod}; print(time.perf_counter() - t)"
#: ``import dfit_nb.report`` after ``dfit_nb.setup()`` (which defers rfc3987_syntax unless DFIT_NB_DEFER_IRI=0)
SETUP_TIMER = ("import time, numpy; t = time.perf_counter(); import dfit_nb; dfit_nb.setup(); import {mod}; "
               "print(time.perf_counter() - t)")


def import_seconds(python: str, mod: str, timer: str = TIMER, **env: str) -> float:
    """Seconds to import ``mod`` after numpy in a fresh ``python`` process (``env``: added to its environment)."""
    out = subprocess.run([python, "-c", timer.format(mod=mod)], capture_output=True, text=True, check=True,
                         env={**os.environ, **env})
    return float(out.stdout.strip().splitlines()[-1])


def environment(folder: Path, numpy_version: str, ml_dtypes_version: str) -> str:
    """A venv with only NumPy and one ml_dtypes release; its python."""
    venv.EnvBuilder(with_pip=True, clear=True).create(folder)
    python = str(folder / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    f"numpy=={numpy_version}", f"ml_dtypes=={ml_dtypes_version}"], check=True)
    return python


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--versions", nargs="*", default=["0.6.0", "0.7.0"])
    a = p.parse_args()

    import ml_dtypes

    print(f"this environment: numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}; seconds to import, "
          f"best / median of {a.repeats} fresh processes")
    for mod in ("ml_dtypes", "jax", "dfit_nb"):
        times = [import_seconds(sys.executable, mod) for _ in range(a.repeats)]
        print(f"  {mod:10s} {min(times):6.3f} / {statistics.median(times):6.3f}")
    deferred_iri(a.repeats)
    if not a.versions:
        return
    with tempfile.TemporaryDirectory(prefix="bench_import_") as tmp:
        pythons = {v: environment(Path(tmp) / v, np.__version__, v) for v in a.versions}
        times: dict[str, list[float]] = {v: [] for v in a.versions}
        for _ in range(a.repeats):  # alternating, so a busy spell of the machine hits every release alike
            for v, python in pythons.items():
                times[v].append(import_seconds(python, "ml_dtypes"))
    first = statistics.median(times[a.versions[0]])
    print(f"import ml_dtypes with numpy {np.__version__}, release by release (alternating; best / median, and the "
          f"median over {a.versions[0]}'s)")
    for v in a.versions:
        med = statistics.median(times[v])
        print(f"  ml_dtypes {v:8s} {min(times[v]):6.3f} / {med:6.3f} s   {med / first:7.1f}x")


def deferred_iri(repeats: int) -> None:
    """``import dfit_nb.report`` with rfc3987_syntax deferred (today) and imported with jsonschema (before)."""
    if importlib.util.find_spec("rfc3987_syntax") is None:
        print("rfc3987_syntax is not installed here: jsonschema does not import it, nothing to defer (skipped)")
        return
    times: dict[str, list[float]] = {"1": [], "0": []}
    for _ in range(repeats):
        for switch in times:
            times[switch].append(import_seconds(sys.executable, "dfit_nb.report", SETUP_TIMER,
                                                DFIT_NB_DEFER_IRI=switch, DFIT_NB_COMPILATION_CACHE="0"))
    on, off = statistics.median(times["1"]), statistics.median(times["0"])
    print(f"import dfit_nb.report (Altair, jsonschema), alternating, best / median of {repeats}")
    print(f"  rfc3987_syntax deferred (today)        {min(times['1']):6.3f} / {on:6.3f} s")
    print(f"  imported with jsonschema (before)      {min(times['0']):6.3f} / {off:6.3f} s   {off / on:5.2f}x")


if __name__ == "__main__":
    main()
