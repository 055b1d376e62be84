"""``dfit-nb``: the command-line entry point.

``dfit-nb report`` captures a bundled example, prints its region table, costs
its ops on hardware presets one op at a time, and replays the whole program on
each preset (mapping and schedule; later stages add the hybrid policy and the
HTML report).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import examples
from .capture import MODES, capture
from .sim import DATAFLOWS, cost, presets, replay


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dfit-nb", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("report", help="capture an example and print its region table")
    r.add_argument("--example", default="encoder", choices=examples.names(), help="bundled example (default encoder)")
    r.add_argument("--mode", default="static", choices=MODES, help="instrumentation mode (default static)")
    r.add_argument("--depth", type=int, default=None, help="deepest region level to print")
    r.add_argument("-o", "--output", default=None, help="also save the trace to this netCDF path")
    r.add_argument("--hw", nargs="*", default=None, metavar="PRESET",
                   help=f"hardware presets to cost the ops on (default: all of {', '.join(presets.names())})")
    r.add_argument("--dataflow", default="ws", choices=[*DATAFLOWS, "hybrid"],
                   help="dataflow of the replay (default ws)")
    r.add_argument("--run-dir", default=None,
                   help="save each preset's replay here (<preset>.nc) with its Perfetto trace (<preset>.json)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    args = _parser().parse_args(argv)
    fn, fn_args = examples.get(args.example).build()
    trace = capture(fn, *fn_args, mode=args.mode)
    print(repr(trace))
    if trace.mode != "static":
        o = trace.overhead
        print(f"{trace.mode} mode: plain call {o.baseline_s * 1e3:.3f} ms, "
              f"instrumented {o.instrumented_s * 1e3:.3f} ms ({o.percent:+.2f}%, median of {o.n_calls} calls)")
    low = trace.lowering.attrs
    print(f"XLA cost analysis FLOPs: {low.get('xla_flops', float('nan')):.0f} ({low.get('xla_flops_note', '')}); "
          f"dfit_nb FLOPs (flops x count): {trace.total_flops()}")
    print(trace.region_table(max_depth=args.depth))
    if args.output:
        print(f"saved {trace.save(args.output)}")
    names = presets.names() if args.hw is None else args.hw
    unknown = [n for n in names if n not in presets.names()]
    if unknown:
        print(f"dfit-nb: unknown preset(s) {unknown}; valid: {', '.join(presets.names())}", file=sys.stderr)
        return 2
    if names:
        print()
        print(cost_table(trace, names))
        print()
        print(replay_table(trace, names, args.dataflow, args.run_dir))
    return 0


def replay_table(trace, names: Sequence[str], dataflow: str, run_dir: str | None) -> str:
    """The program replayed on each preset: latency, energy, utilisation, bottleneck."""
    import warnings
    from pathlib import Path

    from .sim.replay import SpillWarning

    lines = [f"the whole program replayed on each preset ({dataflow}; mapped, scheduled, ops overlapping where "
             "the machine allows):",
             f"{'preset':16s} {'execution':9s} {'latency us':>11s} {'mJ':>9s} {'util':>6s} {'DRAM MB':>8s} "
             f"{'events':>8s}  bottleneck"]
    for name in names:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SpillWarning)
            run = replay(trace, presets.get(name), dataflow)
        s = run.summary
        spill = " (spills: data exceed on-chip SRAM)" if caught else ""
        lines.append(f"{name:16s} {run.attrs['execution']:9s} {float(s['latency_s']) * 1e6:11.2f} "
                     f"{float(s['energy_j']) * 1e3:9.4f} {float(s['utilization']):6.1%} "
                     f"{float(s['dram_bytes']) / 1e6:8.3f} {int(s['n_events']):8d}  {s['bottleneck'].item()}{spill}")
        if run_dir:
            folder = Path(run_dir)
            folder.mkdir(parents=True, exist_ok=True)
            run.save(folder / f"{name}.nc")
            run.to_perfetto(folder / f"{name}.json")
    if run_dir:
        lines.append(f"runs saved in {run_dir} (<preset>.nc: dfit_nb.load_run; <preset>.json: Perfetto UI)")
    return "\n".join(lines)


def cost_table(trace, names: Sequence[str]) -> str:
    """Σ over ops of (per-op cost x count) for each preset and dataflow, ops costed one at a time."""
    lines = ["ops costed one at a time on each preset (no overlap between ops; replay models that):",
             f"{'preset':16s} {'dataflow':8s} {'cycles':>14s} {'ms':>10s} {'mJ':>10s} {'util':>6s}"]
    for name in names:
        hw = presets.get(name)
        ds = cost(trace, hw, list(DATAFLOWS))
        for df in DATAFLOWS:
            tot = ds.sel(dataflow=df)
            cycles, macs = float(tot["total_cycles"]), float(tot["total_macs"])
            util = macs / (cycles * hw.peak_macs_per_cycle) if cycles else 0.0
            lines.append(f"{name:16s} {df:8s} {cycles:14,.0f} {cycles / (hw.clock_ghz * 1e6):10.3f} "
                         f"{float(tot['total_energy_j']) * 1e3:10.4f} {util:6.1%}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
