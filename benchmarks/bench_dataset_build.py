"""Building the model's Datasets through xarray's public constructor against the one helper that builds them from
parts already known to be consistent (``dfit_nb._runtime.datasets.consistent``, xarray's internal constructor), side by
side, at the two places that build them on every call:

* ``cost()``'s result (``dfit_nb._runtime.datasets.assemble`` / ``assemble_public``): about 50 variables over ``op``;
* a replay's per-op table with the bottleneck classes added (``dfit_nb.sim._bottlenecks._extended`` /
  ``_extended_public``).

Both paths give the identical Dataset (checked here, and in ``tests/sim/test_cost.py`` and
``tests/sim/test_replay.py``). Prints the best of ``--rounds`` rounds of ``--calls`` calls, in microseconds per call,
and the ratio public / helper.

Run: ``python benchmarks/bench_dataset_build.py [--calls 200 --rounds 7]``.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from typing import Any

import dfit_nb
from dfit_nb import examples
from dfit_nb._runtime import datasets as _xarray
from dfit_nb.sim import _bottlenecks, cost, presets


def best_us(fn: Callable[[], Any], calls: int, rounds: int) -> float:
    """The best of ``rounds`` rounds of ``calls`` calls of ``fn``, in microseconds per call."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    fn, fn_args = examples.get("mlp").build()
    trace = dfit_nb.capture(fn, *fn_args)
    hw = presets.get("npu_like")

    ds = cost(trace, hw, ["ws", "os", "is"])
    data = {k: (v.dims, v.values, dict(v.attrs)) for k, v in ds.data_vars.items()}
    index = {k: ds[k].values for k in ds.indexes}
    helper_cost = lambda: _xarray.assemble(data, index, dict(ds.attrs))
    public_cost = lambda: _xarray.assemble_public(data, index, dict(ds.attrs))
    assert helper_cost().identical(public_cost())

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = dfit_nb.replay(trace, hw, "ws")
    added = ("bottleneck", "bottleneck_class", "class_evidence")
    bare = run.ops.drop_vars([*added, "mechanism_class"])
    new = {k: (run.ops[k].dims, run.ops[k].values, dict(run.ops[k].attrs)) for k in added}
    helper_run = lambda: _bottlenecks._extended(bare, new)
    public_run = lambda: _bottlenecks._extended_public(bare, new)
    assert helper_run().identical(public_run())

    print(f"{'Dataset':56s} {'public us':>10s} {'helper us':>10s} {'ratio':>7s}")
    for what, public, helper in ((f"cost() result ({len(data)} variables, {ds.sizes['op']} ops)", public_cost,
                                  helper_cost),
                                 (f"replay per-op table + classes ({len(run.ops.data_vars)} variables)", public_run,
                                  helper_run)):
        p, h = best_us(public, args.calls, args.rounds), best_us(helper, args.calls, args.rounds)
        print(f"{what:56s} {p:10.1f} {h:10.1f} {p / h:6.2f}x")


if __name__ == "__main__":
    main()
