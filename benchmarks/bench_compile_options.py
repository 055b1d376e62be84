"""dfit_nb's compile-bound model programs compiled with its XLA options vs XLA's defaults, in one run.

``dfit_nb._runtime.compile_options`` compiles the programs a first call waits for (the replay's, ``cost()``'s past
``COST_OPS`` ops, the selection's DP) with XLA's CPU loop emitters (``xla_cpu_use_fusion_emitters=False``) and
LLVM's optimisation passes off (``xla_backend_optimization_level=0``), and the batched programs (sweeps, batch
replays, batch selections) so too for calls of little work (``_compile_options.by_work``); the thermal program and
a cost of a few ops keep XLA's defaults in every mode. This runs the same sequence in fresh processes with JAX's
persistent compilation cache off (every compile paid, as on a first run), alternating three modes: dfit_nb's
options as shipped, the loop emitters alone (what each option brings), and XLA's defaults everywhere
(``DFIT_NB_XLA_OPTIONS=0``); it prints per call the first call (compile and run) and the warm call (best of
several), best of ``--repeats`` processes per mode, side by side; then ``dfit-nb report`` (the default, 8 presets)
in a fresh process per mode, every run. It checks that every mode gives the same numbers to rounding (relative
1e-12).

The sequence: the default ``bert_block`` captured, then replayed on three presets whose tile grids fall in three
compile buckets (``tpu_like`` 8x8, ``sambanova_like`` 16x32, ``cerebras_like`` 64x64); ``cost()`` of it on three
dataflows; ``select_dataflows`` after the replay; a sweep of 12 machines (a call of little work: with dfit_nb's
options it runs the sweep program's compile with the options, ``_compile_options.by_work``); a warm ``cost()`` of 3
ops (microseconds per call, best of 5 rounds of 200 calls; XLA's defaults in every mode).

``--batches`` instead runs ``replay_batch`` and a sweep of 4 to 256 machines with the batched programs' two
compiles (the options, XLA's defaults), fresh processes each, and prints first and warm calls side by side with the
compile ``by_work`` picks for that size.

Run: ``python benchmarks/bench_compile_options.py [--repeats 2] [--no-report] [--batches]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

from dfit_nb._runtime.compile_options import OPTIONS

#: run first in every child: a subset of dfit_nb's options (``BENCH_OPTIONS``), to show what each one brings
SUBSET = r"""
import json, os
from dfit_nb._runtime import compile_options as _compile_options
if os.environ.get("BENCH_OPTIONS"):
    _compile_options.OPTIONS.clear()
    _compile_options.OPTIONS.update(json.loads(os.environ["BENCH_OPTIONS"]))
"""

CHILD = SUBSET + r"""
import json, time, warnings
import numpy as np
import dfit_nb
from dfit_nb import examples
from dfit_nb.sim import cost, presets, select_dataflows, sweep

warnings.simplefilter("ignore")
fn, args = examples.get("bert_block").build()
trace = dfit_nb.capture(fn, *args)
times, values = {}, {}

def timed(name, call, warm=3):
    t = time.perf_counter(); out = call(); first = time.perf_counter() - t
    best = float("inf")
    for _ in range(warm):
        t = time.perf_counter(); call(); best = min(best, time.perf_counter() - t)
    times[name] = (first, best)
    return out

for name in ("tpu_like", "sambanova_like", "cerebras_like"):
    run = timed(f"replay on {name}", lambda name=name: dfit_nb.replay(trace, presets.get(name)))
    values[f"replay {name}"] = [float(run.summary["latency_s"]), float(run.summary["energy_j"])]
hw = presets.get("tpu_like")
ds = timed("cost(), 3 dataflows (tpu_like)", lambda: cost(trace, hw, ["ws", "os", "is"]))
values["cost"] = ds["cycles"].values.ravel().tolist()
sel = timed("select_dataflows (tpu_like)", lambda: select_dataflows(trace, hw, "energy", evaluate=False))
values["select"] = sel.choices["cost"].values.ravel().tolist() + [repr(sel)]
npu = presets.get("npu_like")
ds = timed("sweep, 12 machines x 2 dataflows",
           lambda: sweep(trace, npu, ["ws", "os"], progress=False, dram_bw=[8.0, 16.0, 32.0, 64.0],
                         sram_kb=[256, 1024, 4096]))
values["sweep 12"] = ds["cycles"].values.ravel().tolist()
small = {"m": [64, 128, 256], "k": [64, 128, 256], "n": [64, 128, 256]}
values["cost 3 ops"] = cost(small, hw)["cycles"].values.tolist()
for _ in range(200):
    cost(small, hw)
best = float("inf")
for _ in range(5):
    t = time.perf_counter()
    for _ in range(200):
        cost(small, hw)
    best = min(best, (time.perf_counter() - t) / 200)
times["warm cost() of 3 ops (us per call)"] = (None, best * 1e6)
print(json.dumps({"times": times, "values": values}))
"""


#: the modes, by column: dfit_nb's options as shipped, the loop emitters alone (the LLVM passes at XLA's default
#: level), XLA's defaults for every program
MODES = {"dfit_nb": None, "emitters": {"xla_cpu_use_fusion_emitters": False}, "XLA": "off"}


#: ``--batches``: a replay_batch and a sweep of N machines with the batched programs' two compiles, chosen by
#: setting the work threshold past or below every call
BATCH_CHILD = r"""
import json, sys, time, warnings
import numpy as np
import dfit_nb
from dfit_nb import examples
from dfit_nb._runtime import compile_options as _compile_options
from dfit_nb.sim import Hardware, presets, replay_batch, sweep

warnings.simplefilter("ignore")
n, mode = int(sys.argv[1]), sys.argv[2]
_compile_options.COMPILE_BOUND_WORK = 10**15 if mode == "options" else 0
works = []  # the work of every call, as the library counts it (by_work is the one place that picks)
real_by_work = _compile_options.by_work
_compile_options.by_work = lambda work, *programs: works.append(work) or real_by_work(work, *programs)
fn, args = examples.get("bert_block").build()
trace = dfit_nb.capture(fn, *args)
hw = presets.get("tpu_like")
bandwidths = np.linspace(8.0, 64.0, n)
machines = Hardware.stack([hw.replace(dram_bytes_per_cycle=float(b)) for b in bandwidths])
calls = {"replay_batch": lambda: replay_batch(trace, machines),
         "sweep x 2 dataflows": lambda: sweep(trace, hw, ["ws", "os"], progress=False, dram_bw=bandwidths)}
out = {}
for name, call in calls.items():
    works.clear()
    t = time.perf_counter(); ds = call(); first = time.perf_counter() - t
    work = max(works)
    warm = float("inf")
    for _ in range(3):
        t = time.perf_counter(); call(); warm = min(warm, time.perf_counter() - t)
    var = "energy_j" if "energy_j" in ds else "energy_pj"
    out[name] = {"first": first, "warm": warm, "work": work, "values": ds[var].values.ravel().tolist()}
print(json.dumps(out))
"""
#: machines per call for ``--batches`` (the work, machines x assignments x padded ops, grows with them)
BATCH_SIZES = (4, 16, 64, 256)


def batches(repeats: int) -> None:
    """The batched programs' two compiles side by side (``--batches``), and which one ``by_work`` picks."""
    from dfit_nb._runtime.compile_options import COMPILE_BOUND_WORK, by_work

    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_", "BENCH_"))}
    env["DFIT_NB_COMPILATION_CACHE"] = "0"
    rows: dict[tuple[int, str], list[dict]] = {}
    for _ in range(repeats):
        for n in BATCH_SIZES:
            for mode in ("options", "defaults"):
                out = subprocess.run([sys.executable, "-c", BATCH_CHILD, str(n), mode], env=env, capture_output=True,
                                     text=True, check=True)
                rows.setdefault((n, mode), []).append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"\nbatched programs (bert_block on tpu_like, 128 padded ops; fresh processes, compilation cache off; best "
          f"of {repeats}): seconds with dfit_nb's options / with XLA's defaults; by_work picks the options up to "
          f"{COMPILE_BOUND_WORK:,} element evaluations per call")
    for name in ("replay_batch", "sweep x 2 dataflows"):
        for n in BATCH_SIZES:
            work = rows[(n, "options")][0][name]["work"]
            best = {m: {k: min(r[name][k] for r in rows[(n, m)]) for k in ("first", "warm")}
                    for m in ("options", "defaults")}
            pick = by_work(work, "options", "defaults")
            print(f"  {name:20s} {n:4d} machines (work {work:6,d}): first {best['options']['first']:.2f} / "
                  f"{best['defaults']['first']:.2f}   warm {best['options']['warm'] * 1e3:7.1f} / "
                  f"{best['defaults']['warm'] * 1e3:7.1f} ms   by_work: {pick}")
            ref = rows[(n, "defaults")][0][name]["values"]
            for r in rows[(n, "options")] + rows[(n, "defaults")]:
                worst = max(abs(x - y) / max(abs(y), 1e-300) for x, y in zip(r[name]["values"], ref, strict=True))
                assert worst <= 1e-12, (name, n, worst)
    print("  the same numbers with both compiles (relative 1e-12)")


def _env(mode: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_", "BENCH_"))}
    options = MODES[mode]
    env.update(DFIT_NB_COMPILATION_CACHE="0", DFIT_NB_XLA_OPTIONS="0" if options == "off" else "1")
    if isinstance(options, dict):
        env["BENCH_OPTIONS"] = json.dumps(options)
    return env


def child(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD], env=_env(mode), capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(mode: str) -> float:
    """``dfit-nb report`` (``dfit_nb.cli.main``) in a fresh process, with the mode's options."""
    with tempfile.TemporaryDirectory(prefix="bench_compile_options-") as out:
        argv = ["report", "-o", out, "--no-progress"]
        code = SUBSET + f"import sys\nfrom dfit_nb.cli import main\nsys.exit(main({argv!r}))"
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=_env(mode), capture_output=True, check=True)
        return time.perf_counter() - t


def _fmt(x: float | None, unit: str) -> str:
    return "-" if x is None else (f"{x:.0f}" if unit == "us" else f"{x:.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--no-report", action="store_true", help="skip the dfit-nb report runs")
    p.add_argument("--batches", action="store_true", help="only the batched programs' two compiles, by size")
    a = p.parse_args()
    if a.batches:
        batches(a.repeats)
        return
    runs: dict[str, list[dict]] = {m: [] for m in MODES}
    reports: dict[str, list[float]] = {m: [] for m in MODES}
    for _ in range(a.repeats):
        for mode in MODES:
            runs[mode].append(child(mode))
            if not a.no_report:
                reports[mode].append(report(mode))
    print(f"fresh processes, compilation cache off; best of {a.repeats} per mode (seconds; dfit_nb: its options "
          f"{json.dumps(OPTIONS)} for the compile-bound programs, emitters: only the loop emitters, XLA: XLA's "
          "defaults everywhere)")
    head = "".join(f"{m:>10s}" for m in MODES)
    print(f"  {'call':40s} first:{head}   warm:{head}")
    for name in runs["dfit_nb"][0]["times"]:
        unit = "us" if "us per call" in name else "s"
        first = {m: (None if runs[m][0]["times"][name][0] is None
                     else min(r["times"][name][0] for r in runs[m])) for m in runs}
        warm = {m: min(r["times"][name][1] for r in runs[m]) for m in runs}
        print(f"  {name:40s}       {''.join(f'{_fmt(first[m], unit):>10s}' for m in MODES)}"
              f"        {''.join(f'{_fmt(warm[m], unit):>10s}' for m in MODES)}")
    if not a.no_report:
        print("  dfit-nb report, cold, every run: "
              + ";  ".join(f"{m} {' / '.join(f'{x:.1f}' for x in reports[m])}" for m in MODES))
    ref = runs["dfit_nb"][0]["values"]
    worst = 0.0
    for rs in runs.values():
        for r in rs:
            for key, value in r["values"].items():
                if isinstance(value, list):
                    nums = [(x, y) for x, y in zip(value, ref[key], strict=True)
                            if isinstance(x, float) and (math.isfinite(x) or x != y)]
                    worst = max([worst, *(abs(x - y) / max(abs(y), 1e-300) for x, y in nums)])
                    assert [x for x in value if not isinstance(x, float)] == [x for x in ref[key]
                                                                                if not isinstance(x, float)], key
    print(f"  same numbers in every process and mode: largest relative difference {worst:.1e}")
    assert worst <= 1e-12

if __name__ == "__main__":
    main()
