"""Profile-mode overhead against the plain jitted call, on the bundled encoder.

Blocks of plain jitted calls and blocks of calls under ``jax.profiler``
alternate inside one ``capture(..., mode="profile")``; the ratio of their
medians is the overhead. Two sizes: the example's defaults (a small program,
well under a millisecond a call, where the profiler's fixed cost per HLO
instruction shows) and a larger encoder (``--layers``/``--seq``/``--d-model``).
Run: ``python benchmarks/bench_profile_overhead.py``.
"""

from __future__ import annotations

import argparse
import statistics

import dfit_nb


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3, help="independent captures; the median is reported")
    a = p.parse_args()
    dfit_nb.setup()  # synchronous CPU dispatch unless DFIT_NB_SYNC_CPU_DISPATCH=0, as the CLI and the tutorials run
    sizes = {
        "default": {},
        "large": dict(layers=a.layers, batch=a.batch, seq=a.seq, d_model=a.d_model, heads=4, d_ff=4 * a.d_model),
    }
    for label, size in sizes.items():
        fn, args = dfit_nb.examples.get("encoder").build(**size)
        pct = []
        for i in range(a.repeats):
            t = dfit_nb.capture(fn, *args, mode="profile", profile_rounds=a.rounds, profile_calls=a.calls)
            o = t.overhead
            pct.append(o.percent)
            print(f"[{label}] repeat {i}: plain {o.baseline_s * 1e3:.3f} ms  profiled {o.instrumented_s * 1e3:.3f} ms"
                  f"  overhead {o.describe()}  ({o.n_calls} calls each side)")
        timed = int((t.lowering["time_s"] > 0).sum())
        print(f"[{label}] encoder {size or dfit_nb.examples.get('encoder').defaults}: "
              f"{timed} of {t.lowering.sizes['fusion']} HLO instructions timed, {t.total_flops():.3e} FLOP/call; "
              f"profile-mode overhead, median of {a.repeats}: {statistics.median(pct):+.2f}%  (target <= 2%)")


if __name__ == "__main__":
    main()
