"""``dfit-nb``: the command-line entry point.

``dfit-nb report`` captures a bundled example, prints its region table, and costs
its ops on hardware presets, one op at a time (later stages add replay, the
hybrid policy and the HTML report).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import examples
from .capture import MODES, capture
from .sim import DATAFLOWS, cost, presets


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
    return 0


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
