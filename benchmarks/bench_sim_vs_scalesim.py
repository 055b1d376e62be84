"""Our cost model against SCALE-Sim on one BERT-base encoder block (seq 128): wall time and parity.

SCALE-Sim is a cycle-level peer simulator; its per-layer wall times on this
machine are recorded in ``tests/data/scalesim_reference.csv`` (``wall_s``; how they
were measured is in ``tests/data/scalesim_reference.md``). This script times
our model on exactly those layers and machine (``memory="ideal"``: SCALE-Sim's
computed-bandwidth mode), checks the cycles agree row by row, and prints the
ratio. The SCALE-Sim side is read from the fixture because SCALE-Sim needs its
own venv (numpy<2, pandas<3) that the project does not install.
Run: ``python benchmarks/bench_sim_vs_scalesim.py``.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np
import pandas as pd

from dfit_nb.sim import cost, presets

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "data" / "scalesim_reference.csv"
PRESET = {"scale_32": "scalesim_32", "scale_128": "scalesim_128"}


def main() -> None:
    ref = pd.read_csv(FIXTURE)
    ref = ref[(ref["workload"] == "bert_base_block_seq128") & (ref["bandwidth_mode"] == "calc")]
    if ref.empty:
        raise SystemExit("the fixture has no BERT-block rows")
    for (machine, dataflow), rows in ref.groupby(["machine", "dataflow"]):
        hw = presets.get(PRESET[machine])
        table = rows[["m", "k", "n"]].reset_index(drop=True)
        ds = cost(table, hw, dataflow, memory="ideal")  # warm-up: compiles
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            ds = cost(table, hw, dataflow, memory="ideal")
            times.append(time.perf_counter() - t0)
        ours = statistics.median(times)
        theirs = float(rows["wall_s"].sum())
        same = int((ds["cycles"].values == rows["total_cycles"].values).sum())
        print(f"{machine:9s} {dataflow}: {len(rows)} GEMMs  SCALE-Sim {theirs:8.2f} s   dfit_nb {ours * 1e3:7.2f} ms   "
              f"ratio {theirs / ours:>10,.0f}x   cycles equal on {same}/{len(rows)} rows "
              f"(total {int(np.sum(ds['cycles'].values)):,} cycles)")


if __name__ == "__main__":
    main()
