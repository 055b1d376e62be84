"""``sim.design`` against random search and a grid sweep (issue 43).

Per case (3 workloads: the encoder, the CNN, ``bert_block``; 2 base presets: ``tpu_like``, ``npu_like``) the area
limit is the base machine's own area, and every method designs the same fields on the same lattice
(``dfit_nb.sim._design.SPACE``): ``design`` (its gradient search, then its best candidates replayed), random search
(lattice points drawn uniformly among those within the area limit) and a grid sweep (evenly spaced levels per
field, those within the limit). Each baseline runs twice: with as many replayed machines as ``design`` replayed,
and with as many as fit in ``design``'s wall time; the random search at equal replays is a draw, run with 5 seeds
of its own (``--random-seeds``), and its median draw is compared. Every machine is replayed exactly
(``replay_batch``, each of ws/os/is, the best kept); the printed ratio is the baseline's best EDP over
``design``'s (> 1: design is better). The same at 4, 8 and 16 replays: ``design``'s best among the first of its
replayed candidates (what ``replays=k`` replays) against the median of seeded random draws of as many.

Then the enumerable-grid check: every machine of a grid of at most 5,000 (the same fields, narrower bounds) is
replayed, and ``design`` on the same bounds must land within 2% of the grid's optimum. ``design``'s wall time on
``bert_block`` (87 ops) and the encoder (157 ops) is printed with its phases.

Run: ``python benchmarks/bench_design.py`` (``--quick`` for one case and a small grid; ``--cases cnn/npu_like`` for
chosen cases; ``--ceiling 2000`` adds per case a random search of 2,000 replays, whose best bounds the ratio any
search could show against random search at equal replays; ``--fields all`` designs all eight fields of ``SPACE``
instead of ``design``'s default six).
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np

import dfit_nb
from dfit_nb import sim
from dfit_nb.sim._design import DEFAULT_FIELDS, SPACE, _areas, design, machine_at, replay_machines, space

WORKLOADS = ("encoder", "cnn", "bert_block")
PRESETS = ("tpu_like", "npu_like")


def _feasible_points(sp: sim._design.Space, base: sim.Hardware, points: np.ndarray, limit: float) -> list:
    machines = [machine_at(base, sp, p, name=f"p{i}") for i, p in enumerate(points)]
    areas = np.asarray(sim.area(sim.Hardware.stack(machines)), np.float64).reshape(-1)
    return [m for m, a in zip(machines, areas, strict=True) if a <= limit]


def random_search(trace, base, sp, limit: float, n: int, seed: int) -> tuple[float, int, float]:
    """Best replayed EDP of ``n`` random lattice machines within the area limit: (edp, replayed, seconds)."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    found: list = []
    while len(found) < n:
        idx = [rng.integers(0, len(sp.levels(i)), size=4 * n) for i in range(len(sp.fields))]
        points = np.stack([sp.levels(i)[j] for i, j in enumerate(idx)], 1)
        found += _feasible_points(sp, base, points, limit)
    ev = replay_machines(trace, found[:n], "edp", {"area_mm2": limit})
    return float(ev["edp_js"].where(ev["feasible"]).min()), n, time.perf_counter() - t0


def grid_search(trace, base, sp, limit: float, n: int) -> tuple[float, int, float]:
    """Best replayed EDP of an even grid within the area limit, at most ``n`` machines replayed: levels per field
    (evenly spaced on its lattice) added one field at a time, the field with the fewest first, while the grid's
    machines within the limit are fewer than ``n``; then thinned evenly to ``n``."""
    t0 = time.perf_counter()
    d = len(sp.fields)
    sizes = [len(sp.levels(i)) for i in range(d)]
    levels = [min(2, s) for s in sizes]

    def grid(lv: list[int]) -> np.ndarray:
        axes = [sp.levels(i)[np.unique(np.round(np.linspace(0, sizes[i] - 1, lv[i])).astype(int))] for i in range(d)]
        return np.array(list(itertools.product(*axes)))

    points = grid(levels)
    inside = points[_areas(base, sp, points) <= limit]
    while len(inside) < n and any(lv < s for lv, s in zip(levels, sizes, strict=True)):
        grow = min((i for i in range(d) if levels[i] < sizes[i]), key=lambda i: levels[i])
        trial = levels.copy()
        trial[grow] += 1
        more = grid(trial)
        more_inside = more[_areas(base, sp, more) <= limit]
        if len(more_inside) > n and len(inside):
            break
        levels, points, inside = trial, more, more_inside
    if len(inside) > n:  # the grid's feasible part thinned evenly to the budget
        inside = inside[np.unique(np.linspace(0, len(inside) - 1, n).astype(int))]
    found = [machine_at(base, sp, p, name=f"g{i}") for i, p in enumerate(inside)]
    ev = replay_machines(trace, found, "edp", {"area_mm2": limit})
    return float(ev["edp_js"].where(ev["feasible"]).min()), len(found), time.perf_counter() - t0


def capture(name: str):
    fn, args = dfit_nb.examples.get(name).build()
    return dfit_nb.capture(fn, *args)


def compare(cases, budget_s: float, ceiling: int = 0, fields: tuple = DEFAULT_FIELDS,
            random_seeds: int = 5, budgets: tuple = (4, 8, 16)) -> None:
    """``ceiling``: per case also a long random search of that many replays; the best machine any method found
    then bounds the ratio any search could show against random search at equal replays. ``fields``: the fields
    every method designs. ``random_seeds``: seeded draws of the random search at equal replays (their median
    EDP is the one compared). ``budgets``: smaller replay budgets compared the same way: ``design`` with
    ``replays=k`` replays the first ``k`` of the candidates it replays with more (its priced ranking; the search
    does not depend on ``replays``, ``tests/sim/test_design.py`` checks it), so its best at ``k`` is read from the
    one run, against the median of seeded random draws of ``k``."""
    rows, bounds = [], []
    at_budget: dict[int, list[float]] = {k: [] for k in budgets}
    traces: dict = {}
    for w, p in cases:
        if w not in traces:
            traces[w] = capture(w)
        trace = traces[w]
        base = sim.presets.get(p)
        limit = sim.area(base)
        sp = space(base, fields)
        d = design(trace, base, "edp", {"area_mm2": limit}, fields=fields, budget_s=budget_s)
        n = d.evaluated.sizes["candidate"]
        wall = d.times["total"]
        # random search at equal replays is a draw: its ratio is the median over seeded draws
        draws = [random_search(trace, base, sp, limit, n, seed=100 + k) for k in range(random_seeds)]
        draw_edps = np.array([dr[0] for dr in draws])
        r_edp = float(np.median(draw_edps))
        per_machine = draws[0][2] / n
        n_wall = max(n, min(4000, int(wall / per_machine)))
        rw_edp, _, _ = random_search(trace, base, sp, limit, n_wall, seed=2)
        g_edp, g_n, _ = grid_search(trace, base, sp, limit, n)
        gw_edp, gw_n, _ = grid_search(trace, base, sp, limit, n_wall)
        e = d.figures["edp_js"]
        prefix = np.where(d.evaluated["feasible"].values, d.evaluated["edp_js"].values, np.inf)
        small = []
        for k in budgets:
            if k >= n:
                continue
            e_k = float(prefix[:k].min())
            r_k = float(np.median([random_search(trace, base, sp, limit, k, seed=100 + j)[0]
                                   for j in range(random_seeds)]))
            at_budget[k].append(r_k / e_k)
            small.append(f"@{k}: design {e_k / e:.2f}x its best, random {r_k / e_k:.2f}x")
        rows.append((w, p, len(trace.ops.op), limit, d.figures["area_mm2"], n, wall, r_edp / e, n_wall,
                     rw_edp / e, g_n, g_edp / e, gw_n, gw_edp / e))
        print(f"{w:10s} {p:9s} ops {rows[-1][2]:4d} limit {limit:7.1f} mm2 designed {rows[-1][4]:7.1f} mm2 | "
              f"design {n} replays {wall:5.1f} s | random@{n} {r_edp / e:6.2f}x (median of {random_seeds} draws, "
              f"{draw_edps.min() / e:.2f}-{draw_edps.max() / e:.2f}x) random@{n_wall} "
              f"{rw_edp / e:6.2f}x | grid@{g_n} {g_edp / e:6.2f}x grid@{gw_n} {gw_edp / e:6.2f}x", flush=True)
        if small:
            print(f"{'':21s}fewer replays: " + "; ".join(small), flush=True)
        if ceiling:
            long_edp, _, long_s = random_search(trace, base, sp, limit, ceiling, seed=3)
            best = min(e, long_edp, rw_edp, g_edp, gw_edp)
            bounds.append(r_edp / best)
            print(f"{'':21s}random@{ceiling} ({long_s:.0f} s) {long_edp / e:6.2f}x of design's EDP; the best any "
                  f"method found is {e / best:.3f}x design's, random@{n} {r_edp / best:.2f}x the best: the most "
                  f"any search could show at {n} replays here", flush=True)
    cols = {"random, equal replays": 7, "random, equal wall time": 9, "grid, equal replays": 11,
            "grid, equal wall time": 13}
    print("\nmedian EDP ratio (baseline best / design best) over", len(rows), "cases:")
    for label, c in cols.items():
        print(f"  {label:26s} {np.median([r[c] for r in rows]):6.2f}x")
    for k, ratios in at_budget.items():
        if ratios:
            print(f"  {f'random, equal replays ({k})':26s} {np.median(ratios):6.2f}x  (per case: "
                  + ", ".join(f"{r:.2f}" for r in ratios) + ")")
    if bounds:
        print(f"  {'at most (best found)':26s} {np.median(bounds):6.2f}x: random at equal replays over the best "
              f"machine any method found, the median over the cases")


def enumerable_grid(workload: str, preset: str, bounds: dict, budget_s: float) -> None:
    trace = capture(workload)
    base = sim.presets.get(preset)
    limit = sim.area(base)
    sp = space(base, bounds)
    axes = [sp.levels(i) for i in range(len(sp.fields))]
    points = np.array(list(itertools.product(*axes)))
    assert len(points) <= 5000, len(points)
    t0 = time.perf_counter()
    found = _feasible_points(sp, base, points, limit)
    ev = replay_machines(trace, found, "edp", {"area_mm2": limit})
    best = float(ev["edp_js"].where(ev["feasible"]).min())
    grid_s = time.perf_counter() - t0
    d = design(trace, base, "edp", {"area_mm2": limit}, fields=bounds, budget_s=budget_s)
    gap = d.figures["edp_js"] / best - 1.0
    print(f"\nenumerable grid: {workload} on {preset}, {len(points)} machines ({len(found)} within {limit:.1f} mm2), "
          f"all replayed in {grid_s:.1f} s: optimum EDP {best:.4g} J s; design {d.figures['edp_js']:.4g} J s "
          f"({gap * 100:+.2f}%, {d.evaluated.sizes['candidate']} replays, {d.times['total']:.1f} s)")


def wall_time(workload: str, preset: str, budget_s: float) -> None:
    trace = capture(workload)
    base = sim.presets.get(preset)
    d = design(trace, base, "edp", {"area_mm2": sim.area(base)}, budget_s=budget_s)
    phases = ", ".join(f"{k} {v:.1f} s" for k, v in d.times.items())
    print(f"wall time: {workload} ({len(trace.ops.op)} ops) on {preset}, budget_s={budget_s:g}: {phases}; "
          f"{d.path.sizes['step']} steps x {d.path.sizes['start']} starts")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one case and a small grid")
    parser.add_argument("--budget", type=float, default=45.0, help="design()'s budget_s")
    parser.add_argument("--ceiling", type=int, default=0,
                        help="per case also a random search of this many replays, to bound what any search shows")
    parser.add_argument("--cases", default="", help="comma-separated workload/preset pairs (default: all six)")
    parser.add_argument("--fields", choices=("default", "all"), default="default",
                        help="the fields every method designs: design()'s default six, or all eight of SPACE (the "
                             "vector unit's lanes and the NoC links too)")
    parser.add_argument("--random-seeds", type=int, default=5,
                        help="seeded draws of the random search at equal replays; the median's ratio is printed")
    a = parser.parse_args()
    fields = DEFAULT_FIELDS if a.fields == "default" else tuple(SPACE)
    print(f"cores: {len(__import__('os').sched_getaffinity(0))}; fields: {', '.join(fields)}")
    if a.cases:
        compare([tuple(case.split("/")) for case in a.cases.split(",")], a.budget, a.ceiling, fields, a.random_seeds)
        return
    if a.quick:
        compare([("cnn", "npu_like")], a.budget, a.ceiling, fields, a.random_seeds)
        enumerable_grid("cnn", "npu_like", {"pe_rows": (4, 32), "pe_cols": (4, 32), "sram_kb": (16, 256)}, a.budget)
        return
    wall_time("bert_block", "tpu_like", a.budget)
    wall_time("encoder", "tpu_like", a.budget)
    compare(list(itertools.product(WORKLOADS, PRESETS)), a.budget, a.ceiling, fields, a.random_seeds)
    enumerable_grid("bert_block", "tpu_like", {"pe_rows": (8, 128), "pe_cols": (8, 128), "tile_rows": (1, 8),
                                               "tile_cols": (1, 8), "sram_kb": (64, 4096)}, a.budget)


if __name__ == "__main__":
    main()
