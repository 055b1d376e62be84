"""dfit_nb's compile-bound model programs with XLA's CPU loop emitters vs XLA's default fusion emitters, in one run.

``dfit_nb._compile_options`` compiles the programs a first call waits for (the replay's, ``cost()``'s past
``COST_OPS`` ops, the selection's DP) with ``xla_cpu_use_fusion_emitters=False``; the programs whose run time
matters more (sweeps, batches, thermal, a cost of a few ops) keep XLA's defaults in both modes. This runs the same
sequence in fresh processes with JAX's persistent compilation cache off (every compile paid, as on a first run),
alternating the two modes (``DFIT_NB_XLA_OPTIONS=1`` and ``0``), and prints per call the first call (compile
and run) and the warm call (best of several), best of ``--repeats`` processes per mode, side by side; then
``dfit-nb report`` (the default, 8 presets) in a fresh process per mode, every run. It checks that both modes give
the same numbers to rounding (relative 1e-12).

The sequence: the default ``bert_block`` captured, then replayed on three presets whose tile grids fall in three
compile buckets (``tpu_like`` 8x8, ``sambanova_like`` 16x32, ``cerebras_like`` 64x64); ``cost()`` of it on three
dataflows; ``select_dataflows`` after the replay; a sweep of 12 machines (a default-emitter program in both modes,
for reference); a warm ``cost()`` of 3 ops (microseconds per call, best of 5 rounds of 200 calls; the
default-emitter program in both modes).

Run: ``python benchmarks/bench_compile_options.py [--repeats 2] [--no-report]``.
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

CHILD = r"""
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


def _env(options: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env.update(DFIT_NB_COMPILATION_CACHE="0", DFIT_NB_XLA_OPTIONS="1" if options else "0")
    return env


def child(options: bool) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD], env=_env(options), capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(options: bool) -> float:
    with tempfile.TemporaryDirectory(prefix="bench_compile_options-") as out:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "dfit_nb", "report", "-o", out, "--no-progress"], env=_env(options),
                       capture_output=True, check=True)
        return time.perf_counter() - t


def _fmt(x: float | None, unit: str) -> str:
    return "-" if x is None else (f"{x:.0f}" if unit == "us" else f"{x:.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--no-report", action="store_true", help="skip the dfit-nb report runs")
    a = p.parse_args()
    runs: dict[bool, list[dict]] = {True: [], False: []}
    reports: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(a.repeats):
        for options in (True, False):
            runs[options].append(child(options))
            if not a.no_report:
                reports[options].append(report(options))
    print(f"fresh processes, compilation cache off; best of {a.repeats} per mode (seconds; dfit_nb: the loop "
          "emitters for the compile-bound programs, XLA: XLA's default emitters everywhere)")
    print(f"  {'call':40s} {'first: dfit_nb':>14s} {'XLA':>8s}   {'warm: dfit_nb':>13s} {'XLA':>8s}")
    for name in runs[True][0]["times"]:
        unit = "us" if "us per call" in name else "s"
        first = {m: (None if runs[m][0]["times"][name][0] is None
                     else min(r["times"][name][0] for r in runs[m])) for m in runs}
        warm = {m: min(r["times"][name][1] for r in runs[m]) for m in runs}
        print(f"  {name:40s} {_fmt(first[True], unit):>14s} {_fmt(first[False], unit):>8s}   "
              f"{_fmt(warm[True], unit):>13s} {_fmt(warm[False], unit):>8s}")
    if not a.no_report:
        print(f"  {'dfit-nb report, cold (every run)':40s} "
              f"{' / '.join(f'{x:.1f}' for x in reports[True]):>14s} {' / '.join(f'{x:.1f}' for x in reports[False])}")
    ref = runs[True][0]["values"]
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
