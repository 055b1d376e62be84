"""``dfit-nb``: the command-line entry point.

``dfit-nb report`` captures a bundled example and prints its region table
(later stages add replay, the hybrid policy and the HTML report).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import examples
from .capture import MODES, capture


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dfit-nb", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("report", help="capture an example and print its region table")
    r.add_argument("--example", default="encoder", choices=examples.names(), help="bundled example (default encoder)")
    r.add_argument("--mode", default="static", choices=MODES, help="instrumentation mode (default static)")
    r.add_argument("--depth", type=int, default=None, help="deepest region level to print")
    r.add_argument("-o", "--output", default=None, help="also save the trace to this netCDF path")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
