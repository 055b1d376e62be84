"""The batch programs in a new process with a warm cache: loaded traced from disk beside tracing them again.

A new kernel (or a second ``dfit-nb`` command) finds every compiled program in JAX's persistent compilation cache,
but still traces and lowers each jitted program in Python before JAX can look it up: 0.5-1.5 s for a sweep's or a
batch replay's program on 2 cores. The one-machine replay and cost programs have been kept traced on disk
(:mod:`dfit_nb._runtime.exported`) since an earlier round; a sweep's (``grid._evaluate_batch``), ``replay_batch``'s
(``_batch._batch_program``) and a batch selection's (``_batch._styles_program``) now are too.

This fills a fresh cache directory once (a first process runs the sequence below), then runs the same sequence in
new processes against it, alternating: exported programs on (today) and off (``DFIT_NB_EXPORTED=0``: every program
traced again, as before for these three; the one-machine programs too, so the capture and replay rows show the
older mechanism's share). The sequence is what a notebook does after a capture: a replay, a sweep of 12
machines on two dataflows, ``replay_batch`` of 4 machines, ``select_dataflows`` on a batch of 2. It prints each
call's seconds (best of ``--repeats`` processes per mode) side by side and checks that both modes give the same
numbers.

Run: ``python benchmarks/bench_new_process.py [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, time, warnings
import numpy as np
import dfit_nb
dfit_nb.setup()  # the compilation cache (DFIT_NB_COMPILATION_CACHE) and dispatch, as a user's kernel has them
from dfit_nb import examples
from dfit_nb.sim import Hardware, presets, replay_batch, select_dataflows, sweep

warnings.simplefilter("ignore")
fn, args = examples.get("encoder").build()
times, values = {}, {}
t = time.perf_counter(); trace = dfit_nb.capture(fn, *args); times["capture"] = time.perf_counter() - t
hw = presets.get("npu_like")
t = time.perf_counter(); run = dfit_nb.replay(trace, hw); times["replay"] = time.perf_counter() - t
values["replay"] = float(run.summary["latency_s"])
t = time.perf_counter()
ds = sweep(trace, hw, ["ws", "os"], progress=False, dram_bw=[8.0, 16.0, 32.0, 64.0], sram_kb=[256, 1024, 4096])
times["sweep (12 machines x 2 dataflows)"] = time.perf_counter() - t
values["sweep"] = float(ds["cycles"].sum())
machines = Hardware.stack([hw.replace(dram_bytes_per_cycle=b) for b in (8.0, 16.0, 32.0, 64.0)])
t = time.perf_counter(); rb = replay_batch(trace, machines)
times["replay_batch (4 machines)"] = time.perf_counter() - t
values["replay_batch"] = float(rb["latency_s"].sum())
pair = Hardware.stack([hw, hw.replace(dram_bytes_per_cycle=16.0)])
t = time.perf_counter(); sel = select_dataflows(trace, pair, "latency")
times["select_dataflows (batch of 2)"] = time.perf_counter() - t
values["select"] = float(sum(float(sel[v].sum()) for v in sel.data_vars if sel[v].dtype.kind == "f"))
print(json.dumps({"times": times, "values": values}))
"""


def child(cache: str, exported: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    env.update(DFIT_NB_COMPILATION_CACHE=cache, DFIT_NB_EXPORTED="1" if exported else "0")
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_new_process-") as cache:
        child(cache, True)  # fills the compilation cache and the exported programs
        child(cache, False)  # and the plain programs' compiles (their keys differ from the exported ones')
        runs: dict[bool, list[dict]] = {True: [], False: []}
        for _ in range(a.repeats):
            for exported in (True, False):
                runs[exported].append(child(cache, exported))
    same = all(r["values"] == runs[True][0]["values"] for rs in runs.values() for r in rs)
    print(f"a new process, warm compilation cache; best of {a.repeats} processes per mode (seconds)")
    print(f"  {'call':36s} {'exported':>9s} {'traced again':>13s}")
    total = {True: 0.0, False: 0.0}
    for name in runs[True][0]["times"]:
        best = {m: min(r["times"][name] for r in runs[m]) for m in runs}
        total = {m: total[m] + best[m] for m in runs}
        print(f"  {name:36s} {best[True]:9.2f} {best[False]:13.2f}")
    print(f"  {'total':36s} {total[True]:9.2f} {total[False]:13.2f}   ({total[False] / total[True]:.2f}x)")
    print(f"  same numbers in every process: {same}")


if __name__ == "__main__":
    main()
