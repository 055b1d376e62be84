"""What a warm report's analysis and files cost, each beside the path it replaced, in one process.

Two changes, each timed alternately against its before in the same warm process (``bert_block``, every preset):

* ``select_dataflows`` (one machine): its evaluation's single-style replays read from the outputs the pricing
  kept (:data:`dfit_nb.sim._replay.KEPT_OUTPUTS`), against every replay running its program again
  (``KEPT_OUTPUTS = 0``, before).
* ``write_report``: each preset's files written on the writer thread from when its replays are done, beside the
  next presets' replays and the charts (today), against the analysis first and then the report
  (``write_report(results=...)``: the files overlap the charts only).

Each figure is the best and the median of ``--rounds`` rounds (the minimum is the least disturbed by other work
on a shared machine). A whole ``dfit-nb report`` in fresh processes is ``benchmarks/bench_compile_cache.py``.

Run: ``python benchmarks/bench_report_overlap.py [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings

import dfit_nb
from dfit_nb.report import analyse, write_report
from dfit_nb.sim import SpillWarning, _replay, presets, select_dataflows


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    warnings.simplefilter("ignore", SpillWarning)
    fn, args = dfit_nb.examples.get("bert_block").build()
    trace = dfit_nb.capture(fn, *args)
    machines = [presets.get(n) for n in presets.names()]

    def select_all(kept: int) -> None:
        _replay.KEPT_OUTPUTS = kept
        _replay._kept.clear()
        for hw in machines:
            select_dataflows(trace, hw, "energy")

    def pipelined() -> None:
        write_report(trace, None, tempfile.mkdtemp(), progress=False)

    def sequential() -> None:
        write_report(trace, None, tempfile.mkdtemp(), progress=False,
                     results=analyse(trace, None, progress=False))

    select_all(8)
    pipelined()  # every program loaded or compiled, before any figure
    rows = {"select_dataflows on 8 presets, kept outputs": [], "  ... every replay run again (before)": [],
            "write_report, files beside the replays": [], "  ... analysis first, then files (before)": []}
    keys = list(rows)
    for _ in range(a.rounds):
        rows[keys[0]].append(timed(lambda: select_all(8)))
        rows[keys[1]].append(timed(lambda: select_all(0)))
        rows[keys[2]].append(timed(pipelined))
        rows[keys[3]].append(timed(sequential))
    _replay.KEPT_OUTPUTS = 8
    print(f"bert_block ({len(trace.ops.op)} ops), {len(machines)} presets, warm, best / median of {a.rounds} "
          "alternating rounds:")
    for name, times in rows.items():
        print(f"  {name:48s} {min(times):6.2f} / {statistics.median(times):6.2f} s")
    for new, old in ((keys[0], keys[1]), (keys[2], keys[3])):
        print(f"  {new.split(',')[0]}: {statistics.median(rows[old]) / statistics.median(rows[new]):.2f}x faster "
              "(medians)")


if __name__ == "__main__":
    main()
