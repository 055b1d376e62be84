"""The thermal model's exact modal step (one ``lax.scan``) beside a dense reference, and the throttle preset pair.

For each grid, in one run on the same machine and power: the jitted scan of :func:`dfit_nb.sim._thermal._simulate`
(the 2-D DCT basis of the tile grid, each mode solved exactly per step) and a plain NumPy reference that
assembles the tiles x tiles conductance matrix and steps with ``scipy.linalg.expm`` of it (exact too, O(tiles^3)
to set up, O(tiles^2) per step). Printed: the time of each (best of ``--rounds``), their ratio, and the largest
temperature difference (the two are the same mathematics: it should be round-off). Then sustained back-to-back
1024^3 bf16 GEMMs on ``tpu_like`` and ``tpu_v4`` with their documented thermal defaults: peak temperature,
throttled share of time and slowdown.

Run: ``python benchmarks/bench_thermal.py [--steps 256 --rounds 5]``.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

import dfit_nb
from dfit_nb.sim import Hardware, presets
from dfit_nb.sim._thermal import _network, _simulate

DT = 1e-3  # seconds per step


def dense_reference(power: np.ndarray, dt: float, hw: Hardware) -> np.ndarray:
    """Temperature rise after each step from the assembled network: ``theta' = E theta + (I - E) G^-1 p``."""
    tr, tc = int(hw.tile_rows), int(hw.tile_cols)
    n = tr * tc
    g_v = 1 / (float(hw.thermal_resistance_k_per_w) * n)
    g_l = 1 / float(hw.lateral_resistance_k_per_w)
    c = float(hw.heat_capacity_j_per_k) / n
    g = np.eye(n) * g_v
    idx = np.arange(n).reshape(tr, tc)
    for a, b in [(idx[:, :-1], idx[:, 1:]), (idx[:-1, :], idx[1:, :])]:  # set-up only: each mesh edge once
        a, b = a.ravel(), b.ravel()
        g[a, a] += g_l
        g[b, b] += g_l
        g[a, b] -= g_l
        g[b, a] -= g_l
    e = scipy.linalg.expm(-g * dt / c)
    ginv = np.linalg.inv(g)
    theta = np.zeros(n)
    out = np.empty((power.shape[0], n))
    for i, p in enumerate(power.reshape(power.shape[0], n)):  # the reference steps one by one
        ss = ginv @ p
        theta = ss + e @ (theta - ss)
        out[i] = theta
    return out.reshape(power.shape)


def best(fn, rounds: int) -> float:
    fn()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    head = ("grid", "tiles", "scan (ms)", "dense (ms)", "dense/scan", "max |dT| (K)")
    print("{:>8s} {:>6s} {:>10s} {:>11s} {:>10s} {:>13s}".format(*head))
    for preset in ("npu_like", "sambanova_like", "cerebras_like"):
        hw = presets.get(preset).replace(thermal_limit_c=499.0)  # never throttles: both integrate the same steps
        tr, tc = int(hw.tile_rows), int(hw.tile_cols)
        power = rng.uniform(0, 0.5, (args.steps, tr, tc))
        net = _network(hw)

        def scan(power=power, net=net, hw=hw):
            with jax.enable_x64(True):  # float64 throughout, as dfit_nb.sim.thermal runs it
                net = {k: jnp.asarray(v) for k, v in net.items()}
                out = _simulate(jnp.asarray(power * DT), jnp.float64(DT), jnp.zeros(power.shape[1:]), net,
                                jnp.float64(float(hw.thermal_limit_c) - float(hw.ambient_c)), jnp.float64(0.5))
                return np.asarray(out["theta"])

        t_scan = best(scan, args.rounds)
        if tr * tc <= 400:
            t_dense = best(lambda power=power, hw=hw: dense_reference(power, DT, hw), args.rounds)
            diff = float(np.abs(scan() - dense_reference(power, DT, hw)).max())
            print(f"{tr:>3d}x{tc:<4d} {tr * tc:6d} {t_scan * 1e3:10.2f} {t_dense * 1e3:11.2f} {t_dense / t_scan:10.1f} "
                  f"{diff:13.2e}")
        else:
            print(f"{tr:>3d}x{tc:<4d} {tr * tc:6d} {t_scan * 1e3:10.2f} {'(skipped: O(tiles^3))':>25s}")
    b = jnp.ones((1024, 1024), jnp.bfloat16)
    trace = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b) @ b, b, b)
    print("\nsustained 1024^3 bf16 GEMMs, 200,000 inferences back to back, documented thermal defaults")
    for preset in ("tpu_like", "tpu_v4"):
        th = dfit_nb.replay(trace, presets.get(preset)).thermal(200_000, steps=args.steps)
        print(f"  {preset:9s} peak {float(th['peak_temperature_c']):6.1f} degC (limit "
              f"{th.attrs['thermal_limit_c']:g}), throttled {float(th['throttle_fraction']):5.1%} of the time, "
              f"slowdown {float(th['slowdown']):.3f}x, {float(th['time'][-1]):.3g} s")


if __name__ == "__main__":
    main()
