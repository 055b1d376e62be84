"""Which of the 100 unaligned TPU v4 matmuls the calibrated machine misses, in which direction, and what they share.

Reads ``../shared/data/tpu_v4_matmul/`` (see its README), calibrates ``tpu_v4`` on the grid exactly as
``benchmarks/bench_tpu_v4.py`` does (seeded half of the 1,198 grid rows, default fields, ``ws,is``), predicts the
100 unaligned rows, and prints:

1. the error per group: is N (the output's minor, lane dimension) a multiple of 128, by M;
2. the same by M, K, N modulo 128 and modulo 8, and by the aspect N / M;
3. each unaligned row against its nearest grid neighbour (every dimension rounded to the grid's 512 step): the
   measured time per MAC of the two, so that the unaligned penalty is read from measurements, not the model;
4. the bandwidth the measured time implies if the weights (K x N) were re-read once per 128 rows of M;
5. a counterfactual: the same machine with the op on one TensorCore (``tile_rows = 1``) where N is unaligned;
6. the same, only where N is unaligned and N > M (the output's larger dimension is the unaligned lane dimension);
7. with ``--xla v4:2x2x1``: what XLA:TPU itself plans for each row, compiled ahead of time for that topology
   (Google's ``libtpu`` in a throwaway venv, no TPU: see ``bench_kernels.py --tpu``): its own cost model's
   ``estimated_cycles`` in the matmul fusion's ``backend_config``, the measured time over that estimate (at the
   TPU v4's 1,050 MHz), the fusion's iteration bounds and output layout, and which operand it prefetches. The
   ratio shows whether the compiler's own model expected the time the chip took.

Run: ``python benchmarks/tpu_v4_unaligned.py [--seed 0]``;
``/tmp/tpuvenv/bin/python benchmarks/tpu_v4_unaligned.py --xla v4:2x2x1``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tpu_v4 import DATA, load, load_unaligned

from dfit_nb.sim import presets
from dfit_nb.sim.calibration import DEFAULT_FIELDS, calibrate, predict


def unaligned() -> pd.DataFrame:
    ops, seconds, _ = load_unaligned()
    return ops.assign(time_us=seconds * 1e6)


def xla_plans(u: pd.DataFrame, topology: str) -> pd.DataFrame | None:
    """Per row of ``u`` (``m``, ``k``, ``n``): XLA:TPU's compiled plan for a bf16 ``a @ b`` on a device of
    ``topology`` (None where libtpu is absent): ``estimated_cycles`` and the window config of the matmul fusion, its
    output layout, and the operand XLA prefetches across programs (``copy-start``)."""
    import json
    import re

    import jax
    import jax.numpy as jnp
    from bench_kernels import tpu_device

    device = tpu_device(topology)
    if device is None:
        return None
    where = jax.sharding.SingleDeviceSharding(device)
    rows = []
    for r in u.itertuples():
        spec = [jax.ShapeDtypeStruct(s, jnp.bfloat16, sharding=where) for s in ((r.m, r.k), (r.k, r.n))]
        text = jax.jit(lambda a, b: a @ b).lower(*spec).compile().as_text()
        root = next(line for line in text.splitlines() if "ROOT" in line and "kind=kOutput" in line)
        window = json.loads(re.search(r"backend_config=(\{.*\})", root).group(1))["window_config"]
        prefetch = re.search(r"copy-start\(%(\w)", text)
        rows.append({"xla_cycles": int(window["estimated_cycles"]),
                     "iterations": "x".join(window["iteration_bounds"]),
                     "out window": "x".join(window["output_window_bounds"]),
                     "out layout": re.search(r"\]\{([0-9,]+):T", root).group(1),
                     "prefetch": {"a": "lhs", "b": "rhs"}.get(prefetch.group(1), "?") if prefetch else "none"})
    return pd.DataFrame(rows, index=u.index)


def summary(err: pd.Series, by: list) -> pd.DataFrame:
    g = err.groupby(by)
    return pd.DataFrame({"rows": g.size(), "MAPE": g.apply(lambda e: np.abs(e).mean()).round(3),
                         "mean signed err": g.mean().round(3)})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--xla", default="", help="a TPU topology (v4:2x2x1) to compile each row for (needs libtpu)")
    a = p.parse_args()
    if not DATA.is_dir():
        raise SystemExit(f"{DATA} is absent: the measured TPU v4 matmuls live in the project's shared data folder")
    pd.set_option("display.width", 160)
    grid = load()
    cal = calibrate(grid.drop(columns=["scale_sim_cycles"]), presets.get("tpu_v4"), list(DEFAULT_FIELDS),
                    ["ws", "is"], seed=a.seed)
    u = unaligned()
    y = u["time_us"].to_numpy()
    pred = np.asarray(predict(u.drop(columns="time_us"), cal.hw, ["ws", "is"])["seconds"]) * 1e6
    u["err"] = (pred - y) / y  # negative: the model is too fast
    u["TFLOP/s"] = 2 * u.m * u.k * u.n / (y * 1e-6) / 1e12
    n_al = (u.n % 128 == 0).rename("N % 128 == 0")
    print(f"calibrated on the grid (seed {a.seed}); unaligned 100 MAPE {np.abs(u.err).mean():.1%}, "
          f"mean signed error {u.err.mean():+.1%} (negative: predicted too fast)")
    print("\n1. by N aligned to 128, and M")
    print(summary(u.err, [n_al, u.m]).assign(**{"median TFLOP/s": u.groupby([n_al, u.m])["TFLOP/s"].median()
                                               .round(1)}).to_string())
    print("\n2. by each dimension's residue, and the aspect N / M")
    for col in ("m", "k", "n"):
        print(summary(u.err, [(u[col] % 128).rename(f"{col.upper()} % 128")]).T.to_string(), "\n")
    print(summary(u.err, [(u[col] % 8 == 0).rename(f"{col.upper()} % 8 == 0") for col in "mkn"]).to_string())
    print(summary(u.err, [pd.cut(u.n / u.m, [0, 0.5, 1, 2, 4]).rename("N / M")]).to_string())
    print("\n3. measured time per MAC against the nearest grid shape (dims rounded to 512), by N aligned and M")
    g = grid[grid.bucket == "1024-4096"].set_index(["m", "k", "n"])["time_us"]
    near = [g.get(tuple(int(np.clip(round(v / 512) * 512, 1024, 4096)) for v in (r.m, r.k, r.n)), np.nan)
            for r in u.itertuples()]
    near_shape = [np.prod([np.clip(round(v / 512) * 512, 1024, 4096) for v in (r.m, r.k, r.n)]) for r in u.itertuples()]
    u["penalty"] = (y / (u.m * u.k * u.n)) / (np.asarray(near) / np.asarray(near_shape, np.float64))
    print(u.groupby([n_al, u.m])["penalty"].median().round(2).rename("unaligned / grid time per MAC").to_string())
    print("\n4. bandwidth implied if the weights were re-read once per 128 rows of M (calibrated DRAM: "
          f"{float(cal.hw.dram_bytes_per_cycle) * float(cal.hw.clock_ghz):.0f} GB/s)")
    reread = (u.k * u.n * 2 * np.ceil(u.m / 128) + u.m * u.k * 2) / (y * 1e-6) / 1e9
    print(reread.groupby([n_al, u.m]).median().round(0).rename("GB/s").to_string())
    print("\n5. counterfactual: one TensorCore (tile_rows = 1) where N % 128 != 0")
    one = u.drop(columns=["time_us", "err", "TFLOP/s", "penalty"]).assign(tile_rows=np.where(n_al, 2, 1))
    e1 = pd.Series((np.asarray(predict(one, cal.hw, ["ws", "is"])["seconds"]) * 1e6 - y) / y)
    print(summary(e1, [n_al, u.m]).to_string())
    print(f"all 100: MAPE {np.abs(e1).mean():.1%}")
    print("\n6. counterfactual: one TensorCore where N % 128 != 0 and N > M")
    wide = ~n_al & (u.n > u.m)
    e2 = pd.Series((np.asarray(predict(one.assign(tile_rows=np.where(wide, 1, 2)), cal.hw, ["ws", "is"])["seconds"])
                    * 1e6 - y) / y)
    print(summary(e2, [n_al, wide.rename("N > M"), u.m]).to_string())
    print(f"all 100: MAPE {np.abs(e2).mean():.1%}")
    print("\nworst 15 rows")
    print(u.sort_values("err").head(15).round(3).to_string(index=False))
    if a.xla:
        xla_part(u, a.xla)


def xla_part(u: pd.DataFrame, topology: str) -> None:
    """Part 7: the measured time against XLA:TPU's own estimate of each row's fusion (see the module docstring)."""
    plans = xla_plans(u, topology)
    if plans is None:
        return
    v = pd.concat([u[["m", "k", "n", "time_us", "TFLOP/s", "err"]], plans], axis=1)
    v["measured / XLA"] = v["time_us"] * 1.05e3 / v["xla_cycles"]  # TPU v4 TensorCore clock 1,050 MHz
    slow = (v["TFLOP/s"] < 60).rename("< 60 TFLOP/s")
    print(f"\n7. XLA:TPU's plan ({topology}, compiled ahead of time): measured time over XLA's estimated_cycles at "
          "1,050 MHz, by the rows' measured rate")
    print(v.groupby(slow)["measured / XLA"].describe()[["count", "min", "50%", "max"]].round(2).to_string())
    print("calibrated model's error on the same groups: "
          + ", ".join(f"{k}: MAPE {np.abs(e).mean():.1%}, signed {e.mean():+.1%}" for k, e in v.groupby(slow)["err"]))
    print("\nby output layout and prefetched operand (rows, share under 60 TFLOP/s)")
    print(v.groupby(["out layout", "prefetch"])["TFLOP/s"].agg(rows="size", slow_share=lambda t: (t < 60).mean())
          .round(2).to_string())
    print("\nevery row, by measured / XLA")
    print(v.sort_values("measured / XLA").round(3).to_string(index=False))


if __name__ == "__main__":
    main()
