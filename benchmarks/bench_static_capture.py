"""Static capture time of a 48-layer unrolled encoder against JAX's own trace + lower + compile.

Baseline: ``jax.jit(fn).trace(*args)`` (what ``make_jaxpr`` does), ``.lower()``,
``.compile()``. Ours: ``dfit_nb.capture(fn, *args)`` in static mode (trace,
walk every op, cost rules, tagged lowering and compile, HLO fusion map, the
Datasets). Both run on ShapeDtypeStructs, alternately, each on a fresh (not
jitted) function object, so neither reuses a trace or lowering that JAX cached
for the other: the cold start a user meets. Run:
``python benchmarks/bench_static_capture.py``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax

import dfit_nb
from dfit_nb.examples.encoder import encoder


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=48)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    _, args = dfit_nb.examples.get("encoder").build(layers=a.layers)
    heads = dfit_nb.examples.get("encoder").defaults["heads"]

    def fresh():
        return lambda params, x: encoder(params, x, heads=heads)

    specs = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), args)
    jax_s, ours_s = [], []
    for _ in range(a.repeats):
        f = jax.jit(fresh())
        t0 = time.perf_counter()
        f.trace(*specs).lower().compile()
        jax_s.append(time.perf_counter() - t0)
        g = fresh()
        t0 = time.perf_counter()
        t = dfit_nb.capture(g, *specs)
        ours_s.append(time.perf_counter() - t0)
        print(f"jax trace+lower+compile {jax_s[-1]:.3f} s   dfit_nb.capture {ours_s[-1]:.3f} s   "
              f"ratio {ours_s[-1] / jax_s[-1]:.3f}")
    ratio = statistics.median(ours_s) / statistics.median(jax_s)
    best = min(ours_s) / min(jax_s)  # least disturbed run of each: robust on a shared machine
    print(f"{a.layers}-layer encoder, {t.ops.sizes['op']} ops, {t.lowering.sizes['fusion']} HLO instructions: "
          f"ratio of medians {ratio:.3f}, ratio of minima {best:.3f}  (target <= 1.5)")


if __name__ == "__main__":
    main()
