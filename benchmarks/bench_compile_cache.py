"""JAX's persistent compilation cache: ``dfit-nb report`` in fresh processes, cold against warm.

Issue 17: a second ``dfit-nb report`` (or a new kernel) should start warm. Each repeat runs the README's first
command's main job (``python -m dfit_nb report``, by default the encoder on every preset) in fresh
subprocesses: once with ``DFIT_NB_COMPILATION_CACHE`` pointing at a new, empty directory (cold: everything
compiles and the cache is written), then ``--warm`` times more against that same directory (warm: the programs
load from disk). ``--no-cache`` adds a run with ``DFIT_NB_COMPILATION_CACHE=0`` first (what the cold run
costs over no cache at all: writing the entries). Every run's wall time (the whole process: Python and JAX
start-up included) is printed, then cold vs warm and their ratio side by side. ``JAX_COMPILATION_CACHE_DIR`` is
removed from the subprocesses' environment (dfit_nb would defer to it); ``--min-compile-time`` sets JAX's
``jax_persistent_cache_min_compile_time_secs`` for them (default: dfit_nb's own threshold).

``--no-exported`` adds, per repeat, the same cold and warm runs with ``DFIT_NB_EXPORTED=0`` (every process traces
the replay and cost programs again; the compiled programs are still cached), printed beside the default.

Run: ``python benchmarks/bench_compile_cache.py [--repeats 1] [--warm 1] [--no-cache] [--no-exported]
[-- report options]``,
e.g. ``python benchmarks/bench_compile_cache.py -- --example mlp --hw npu_like``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dfit_nb._runtime import compile_cache as _compile_cache
from dfit_nb._runtime import exported as _exported


def _entries(cache: Path) -> tuple[int, float]:
    """(number of cache entries, their MiB)."""
    files = [p for p in cache.glob("*-cache") if p.is_file()] if cache.is_dir() else []
    return len(files), sum(p.stat().st_size for p in files) / 2**20


def _report(cache: str, out: Path, report_args: list[str], min_compile_time: float | None,
            exported: bool = True) -> float:
    """Wall seconds of one ``python -m dfit_nb report`` in a fresh process with ``DFIT_NB_COMPILATION_CACHE=cache``
    (and ``DFIT_NB_EXPORTED=0`` unless ``exported``)."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_COMPILATION_CACHE_DIR", _exported.ENV)}
    env[_compile_cache.ENV] = cache
    if not exported:
        env[_exported.ENV] = "0"
    if min_compile_time is not None:
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = str(min_compile_time)
    cmd = [sys.executable, "-m", "dfit_nb", "report", "-o", str(out), *report_args]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-4000:]}")
    return wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=1, help="cold/warm pairs, each with a new empty cache directory")
    p.add_argument("--warm", type=int, default=1, help="warm runs after each cold run")
    p.add_argument("--no-cache", action="store_true",
                   help="first a run with the cache off (DFIT_NB_COMPILATION_CACHE=0)")
    p.add_argument("--min-compile-time", type=float, default=None,
                   help="jax_persistent_cache_min_compile_time_secs for the runs (default: dfit_nb's "
                        f"{_compile_cache.MIN_COMPILE_TIME_S} s)")
    p.add_argument("--no-exported", action="store_true",
                   help="also each repeat with DFIT_NB_EXPORTED=0 (programs traced in every process, the compiled "
                        "ones still cached), printed beside the default")
    p.add_argument("report_args", nargs="*", help="options passed to dfit-nb report (after --)")
    a = p.parse_args()
    what = " ".join(["dfit-nb report", *a.report_args])
    thr = _compile_cache.MIN_COMPILE_TIME_S if a.min_compile_time is None else a.min_compile_time
    print(f"{what}: fresh processes, {os.cpu_count()} CPUs, min compile time {thr} s")
    colds, warms, off = [], [], None
    with tempfile.TemporaryDirectory(prefix="bench_compile_cache-") as tmp:
        tmp = Path(tmp)
        if a.no_cache:
            off = _report("0", tmp / "out", a.report_args, a.min_compile_time)
            print(f"  cache off               {off:7.1f} s")
        plain_colds: list[float] = []
        plain_warms: list[float] = []
        for r in range(a.repeats):
            for exported, (cs, ws) in ((True, (colds, warms)), (False, (plain_colds, plain_warms))):
                if not exported and not a.no_exported:
                    continue
                label = "" if exported else " DFIT_NB_EXPORTED=0"
                cache = tmp / f"cache{r}{label.strip()}"
                cold = _report(str(cache), tmp / "out", a.report_args, a.min_compile_time, exported)
                n, mib = _entries(cache)
                print(f"  repeat {r}{label}: cold (empty) {cold:7.1f} s   wrote {n} entries, {mib:.1f} MiB")
                cs.append(cold)
                for w in range(a.warm):
                    warm = _report(str(cache), tmp / "out", a.report_args, a.min_compile_time, exported)
                    n2, _ = _entries(cache)
                    print(f"  repeat {r}{label}: warm {w}       {warm:7.1f} s   cold/warm {cold / warm:.2f}x"
                          + (f"   ({n2 - n} new entries)" if n2 != n else ""))
                    ws.append(warm)
        if plain_colds:
            pc, pw = statistics.median(plain_colds), statistics.median(plain_warms)
            print(f"DFIT_NB_EXPORTED=0 (every process traces its programs): cold {pc:.1f} s, warm {pw:.1f} s; "
                  f"the exported programs save {pc - statistics.median(colds):+.1f} s cold, "
                  f"{pw - statistics.median(warms):+.1f} s warm")
    cold, warm = statistics.median(colds), statistics.median(warms)
    print(f"{what}: cold {cold:.1f} s, warm {warm:.1f} s (medians of {len(colds)} and {len(warms)}): "
          f"{cold / warm:.2f}x" + (f"; cache off {off:.1f} s" if off is not None else ""))


if __name__ == "__main__":
    main()
