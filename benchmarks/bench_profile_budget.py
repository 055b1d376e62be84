"""Profile mode sized by a time budget: the calls chosen and the whole capture's wall time.

Issue 15's target: a profile-mode capture of a model whose call takes 0.5 s
takes <= 10 s with the default budget (a fixed 5 x 10 calls took 63 s). Two
functions: the bundled encoder (well under a millisecond a call, so the budget
buys many calls) and a chain of tanh(x @ w) matmuls of size ``--n``, as many
as take ``--call-s`` seconds (0.5) by one timed matmul (this machine's speed
varies with its other users; the chain's plain jitted call is timed and printed
before the captures). Every repeat is printed, with the overhead's 95% interval
over the rounds and the rounds the interval needed. Issue 41's target: on the
0.5 s call, an interval no wider than +-3 points within a 20 s budget
(``--budget 20``).
Run: ``python benchmarks/bench_profile_budget.py [--budget 2.0] [--ci-pct 3] [--repeats 3] [--compare-fixed]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

import dfit_nb


def matmul_chain(depth: int):
    def chain(x, w):
        for _ in range(depth):
            x = jnp.tanh(x @ w)
        return x
    return chain


def _call_times(jitted, args, n: int) -> list[float]:
    """Wall seconds of ``n`` calls after one warm-up (compile) call."""
    jax.block_until_ready(jitted(*args))
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        jax.block_until_ready(jitted(*args))
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=float, default=None, help="profile_budget_s (default: capture's default)")
    p.add_argument("--ci-pct", type=float, default=None, help="profile_ci_pct (default: capture's default)")
    p.add_argument("--n", type=int, default=2048, help="matrix size of the slow function")
    p.add_argument("--call-s", type=float, default=0.5, help="seconds a call of the slow function should take")
    p.add_argument("--depth", type=int, default=None, help="matmuls in the slow function (default: from --call-s)")
    p.add_argument("--repeats", type=int, default=3, help="independent captures per function")
    p.add_argument("--compare-fixed", action="store_true",
                   help="also capture the slow function once with the former fixed counts (5 rounds x 10 calls)")
    a = p.parse_args()
    budget = {} if a.budget is None else {"profile_budget_s": a.budget}
    if a.ci_pct is not None:
        budget["profile_ci_pct"] = a.ci_pct

    fast_fn, fast_args = dfit_nb.examples.get("encoder").build()
    key = jax.random.PRNGKey(0)
    x, w = (jax.random.normal(k, (a.n, a.n), jnp.float32) / a.n ** 0.5 for k in jax.random.split(key))
    if a.depth is None:
        layer = min(_call_times(jax.jit(matmul_chain(1)), (x, w), 3))
        a.depth = max(1, round(a.call_s / layer))
        print(f"one tanh(x @ w) at {a.n}x{a.n}: {layer:.3f} s (min of 3) -> {a.depth} matmuls for ~{a.call_s} s")
    slow_fn, slow_args = matmul_chain(a.depth), (x, w)
    one = _call_times(jax.jit(slow_fn), slow_args, 3)
    print(f"slow function: {a.depth} x tanh(x @ w), {a.n}x{a.n} float32; plain jitted call "
          f"{', '.join(f'{t:.3f}' for t in one)} s (3 calls after one warm-up)")

    for label, fn, args in (("encoder (fast)", fast_fn, fast_args), ("matmul chain (slow)", slow_fn, slow_args)):
        wall, half = [], []
        for i in range(a.repeats):
            t0 = time.perf_counter()
            t = dfit_nb.capture(fn, *args, mode="profile", **budget)
            wall.append(time.perf_counter() - t0)
            at, o = t.attrs, t.overhead
            low, high = o.interval_percent
            half.append((high - low) / 2)
            print(f"[{label}] repeat {i}: budget {at['profile_budget_s']} s, sizing pair {at['profile_probe_s']:.4f} s"
                  f" -> {at['profile_rounds']} of at most {at['profile_max_rounds']} rounds x {at['profile_calls']} "
                  f"calls ({at['profile_sizing']}); plain {o.baseline_s * 1e3:.3f} ms, profiled "
                  f"{o.instrumented_s * 1e3:.3f} ms; overhead {o.describe()}; capture {wall[-1]:.2f} s")
        print(f"[{label}] capture wall time: median {statistics.median(wall):.2f} s, max {max(wall):.2f} s "
              f"over {a.repeats}; interval half-width: max {max(half):.2f} points (target "
              f"{t.attrs['profile_ci_pct']})")
    if a.compare_fixed:
        t0 = time.perf_counter()
        t = dfit_nb.capture(slow_fn, *slow_args, mode="profile", profile_rounds=5, profile_calls=10)
        print(f"[matmul chain (slow)] former fixed counts, 5 rounds x 10 calls: plain {t.overhead.baseline_s * 1e3:.3f}"
              f" ms, profiled {t.overhead.instrumented_s * 1e3:.3f} ms; capture {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
