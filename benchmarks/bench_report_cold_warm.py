"""``dfit-nb report`` cold and warm, this checkout beside another one (say, the commit before a change).

Each round runs, for each side in turn, the report in a fresh process with an empty cache folder
(``XDG_CACHE_HOME``: JAX's compilation cache, the exported programs, the Vega bundle; cold), then again with that
folder filled (warm), and counts XLA's log lines on stderr ("Constant folding", "slow_operation_alarm").
Each side runs its own code: ``python -m dfit_nb.cli`` from its own folder.
Run: ``python benchmarks/bench_report_cold_warm.py --other /path/to/other/checkout [--rounds 3]``.
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

XLA_LOG = ("Constant folding", "slow_operation_alarm")


def _report(folder: Path, cache: Path, out: Path) -> tuple[float, int]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "dfit_nb.cli", "report", "-o", str(out), "--no-progress"],
                       cwd=folder, env=env, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"dfit-nb report failed in {folder}:\n{p.stderr[-3000:]}")
    return took, sum(p.stderr.count(s) for s in XLA_LOG)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--other", required=True, help="the other checkout (a clone at another commit)")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    sides = {"this": Path(__file__).resolve().parents[1], "other": Path(a.other).resolve()}
    times: dict[str, dict[str, list[float]]] = {s: {"cold": [], "warm": []} for s in sides}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for side, folder in sides.items():
                cache, out = Path(tmp) / f"cache-{side}-{r}", Path(tmp) / f"out-{side}-{r}"
                cold, log_cold = _report(folder, cache, out)
                warm, log_warm = _report(folder, cache, out)
                times[side]["cold"].append(cold)
                times[side]["warm"].append(warm)
                print(f"round {r + 1} {side:5s}: cold {cold:5.1f} s, warm {warm:5.1f} s, XLA log lines "
                      f"{log_cold + log_warm}")
    for side in sides:
        print(f"{side:5s} ({sides[side]}): cold median {statistics.median(times[side]['cold']):.1f} s, warm median "
              f"{statistics.median(times[side]['warm']):.1f} s over {a.rounds} rounds")


if __name__ == "__main__":
    main()
