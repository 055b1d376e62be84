"""Chart build time and spec size for a 1M-event run (aggregation must keep every spec under 1 MB).

The 2-layer encoder (seq 128, d_model 256) time-multiplexed on ``cerebras_like``'s 4096 tiles: about a million
(op, tile, kind) events (the exact count is printed). For every view of ``dfit_nb.views`` -- timeline by tile and
by region, utilization, noc_load, buffer_pressure, regions, roofline, traffic_mix of the run; policy and reuse_map
of a Policy selected for the same program and machine; compare of the run against its output-stationary twin --
it measures: the chart build (the view function, then ``chart.to_dict()``, which validates against the Vega-Lite
schema), median of ``--repeats`` after one warm-up; the spec size ``len(json.dumps(chart.to_dict()))`` in bytes;
the rows embedded (all inline datasets together); whether the subtitle says the data were aggregated; and the
offline PNG render (``dfit_nb.views.png``, vl-convert; one render after a warm-up render). Prints a table, the
largest spec and the peak resident set (``resource.getrusage``); exits 1 if any spec is 1 MB (1,000,000 B) or more.
Run: ``python benchmarks/bench_views_large.py [--layers 2] [--repeats 3] [--no-png]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import dfit_nb
from dfit_nb import examples, views
from dfit_nb.sim import compare, presets, select_dataflows

LIMIT = 1_000_000  # bytes of JSON a spec must stay under


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def rows(spec: dict) -> int:
    """Rows embedded in a spec (Altair consolidates every inline dataset under ``datasets``)."""
    return sum(len(v) for v in spec.get("datasets", {}).values())


def subtitle(spec: dict) -> str:
    title = spec.get("title", {})
    sub = title.get("subtitle", "") if isinstance(title, dict) else ""
    return " ".join(sub) if isinstance(sub, list) else str(sub)


def measure(build: Callable[[], Any], repeats: int, png: bool) -> dict[str, Any]:
    build().to_dict()  # warm-up (imports, schema load, caches)
    builds, specs = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        chart = build()
        t1 = time.perf_counter()
        spec = chart.to_dict()
        t2 = time.perf_counter()
        builds.append(t1 - t0)
        specs.append(t2 - t1)
    text = json.dumps(spec)
    out = {"build_s": statistics.median(builds), "spec_s": statistics.median(specs), "bytes": len(text),
           "rows": rows(spec), "aggregated": "aggregated" in subtitle(spec), "png_s": float("nan")}
    if png:
        t0 = time.perf_counter()
        views.png(chart)
        out["png_s"] = time.perf_counter() - t0
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--preset", default="cerebras_like")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-png", action="store_true", help="skip the vl-convert PNG renders")
    a = p.parse_args()
    hw = presets.get(a.preset)
    fn, args = examples.get("encoder").build(layers=a.layers, seq=128, d_model=256, heads=4, d_ff=1024)
    trace = dfit_nb.capture(fn, *args)
    t0 = time.perf_counter()
    run = dfit_nb.replay(trace, hw, "ws", execution="time")
    n = int(run.summary["n_events"])
    print(f"replay: {n:,} events ({a.layers}-layer encoder, {a.preset}, time-multiplexed) in "
          f"{time.perf_counter() - t0:.1f} s (compile included); events Dataset {run.events.nbytes / 2**20:,.0f} MiB; "
          f"peak RSS {peak_mib():,.0f} MiB")
    t0 = time.perf_counter()
    other = dfit_nb.replay(trace, hw, "os", execution="time")
    ab = compare(run, other)
    del other
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # spill warnings of some candidate styles: expected
        policy = select_dataflows(trace, hw, "energy")
    print(f"B run (os), compare and an evaluated energy policy in {time.perf_counter() - t0:.1f} s; "
          f"peak RSS {peak_mib():,.0f} MiB")
    cases: dict[str, Callable[[], Any]] = {
        "timeline (tile)": lambda: views.timeline(run),
        "timeline (region)": lambda: views.timeline(run, by="region", color="region"),
        "utilization": lambda: views.utilization(run),
        "noc_load": lambda: views.noc_load(run),
        "buffer_pressure": lambda: views.buffer_pressure(run),
        "regions": lambda: views.regions(run, metric="energy"),
        "roofline": lambda: views.roofline(run, trace=trace),
        "traffic_mix": lambda: views.traffic_mix(run),
        "policy": lambda: views.policy(policy),
        "reuse_map": lambda: views.reuse_map(policy),
        "compare": lambda: views.compare(ab),
    }
    if not a.no_png:
        views.png(views.buffer_pressure(run))  # vl-convert's first render starts its engine: not counted
    header = (f"{'view':<18} {'build ms':>9} {'to_dict ms':>10} {'spec bytes':>11} {'rows':>6} {'aggregated':>10} "
              f"{'png ms':>8}")
    lines = [header, "-" * len(header)]
    results = {}
    for name, build in cases.items():
        r = results[name] = measure(build, a.repeats, not a.no_png)
        png = "-" if a.no_png else f"{r['png_s'] * 1e3:,.0f}"
        lines.append(f"{name:<18} {r['build_s'] * 1e3:>9,.0f} {r['spec_s'] * 1e3:>10,.0f} {r['bytes']:>11,} "
                     f"{r['rows']:>6,} {'yes' if r['aggregated'] else 'no':>10} {png:>8}")
    print(f"\n{n:,} events; median of {a.repeats} after a warm-up (build: the view function; to_dict: validate + "
          f"serialise); png: one vl-convert render; aggregated: the subtitle says so (a view whose input already fits "
          f"{views.MAX_ROWS:,} rows embeds it whole)")
    print("\n".join(lines))
    largest = max(results, key=lambda k: results[k]["bytes"])
    print(f"\nlargest spec: {largest}, {results[largest]['bytes']:,} B (limit {LIMIT:,} B)")
    print(f"peak RSS of the whole run: {peak_mib():,.0f} MiB (machine: {os.cpu_count()} CPUs)")
    over = [k for k, r in results.items() if r["bytes"] >= LIMIT]
    if over:
        print(f"FAIL: specs of 1 MB or more: {', '.join(over)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
