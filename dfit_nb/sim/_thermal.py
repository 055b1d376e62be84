"""Thermal: a compact RC model of the tile grid, driven by a replay's per-tile power, with clock throttling.

The model (HotSpot-style, one layer of lumped nodes)
----------------------------------------------------
Each tile ``i`` is one node with temperature rise ``theta_i = T_i - T_amb`` over the ambient, heat capacity
``C = heat_capacity_j_per_k / tiles``, a vertical conductance ``g_v = 1 / (thermal_resistance_k_per_w x tiles)``
to ambient (the chip's junction-to-ambient path shared evenly by its tiles, in parallel) and a lateral
conductance ``g_l = 1 / lateral_resistance_k_per_w`` to each of its (up to 4) mesh neighbours::

    C dtheta_i/dt = p_i - g_v theta_i - g_l sum_{j ~ i} (theta_i - theta_j)

i.e. ``C dtheta/dt = p - G theta`` with ``G = g_v I + g_l (L_y (+) L_x)``, ``L`` the Laplacian of a path of tiles
(insulated chip edges). The eigenvectors of a path Laplacian are the DCT-II basis, so ``G`` is diagonal in the
2-D DCT of the grid (eigenvalues ``g_v + g_l (2 - 2 cos(pi a / rows) + 2 - 2 cos(pi b / cols))``) and a step of
constant power is solved *exactly* per mode: ``theta' = theta_ss + (theta - theta_ss) exp(-lambda dt / C)``.
The integration is unconditionally stable whatever the step, and the steady state of a uniform power map
``p`` per tile is ``theta = p / g_v = p x thermal_resistance_k_per_w x tiles`` (no lateral flow).

Power: the replay's own energy events (:attr:`Run.events`), on-die kinds only (compute, SRAM, NoC, retile;
DRAM access energy is dissipated in the DRAM devices, off the die), binned per tile on the run's cube time bins
(:func:`dfit_nb.events.binning.bin_intervals`); nothing is re-priced. No static (leakage) power is modelled.

Sustained operation and throttling
----------------------------------
``inferences`` inferences run back to back, each one call of the replayed program: the per-tile energy of one
call repeats, and ``steps`` time steps each cover an equal share of the work (``calls x
latency_cycles / steps`` cycles, a fraction of a call or many calls). A step whose hottest tile starts above
``thermal_limit_c`` runs with the clock scaled by ``throttle_clock_factor``: the same work and energy (dynamic
energy per operation does not depend on the clock) over ``1 / factor`` times the seconds, so at ``factor`` times
the power. The throttled latency is the seconds of all steps over the calls; the slowdown its ratio to the
unthrottled latency. A step is the decision granularity: use more ``steps`` to resolve a throttle cycle (the
model's time constant is ``C / g_v``, the chip's ``R x C``).

Thermal evidence per op: the cycles (at the nominal clock) its work was stretched by, per call (the share
of each throttled step's work that falls in the op's span); :meth:`dfit_nb.sim.Run.with_thermal` turns it into
the ``thermal`` bottleneck class.

>>> import jax.numpy as jnp, dfit_nb
>>> from dfit_nb.sim import presets, thermal
>>> run = dfit_nb.replay(dfit_nb.capture(lambda a: a @ a, jnp.ones((64, 64))), presets.get("npu_like"))
>>> th = thermal(run, inferences=1000, steps=20)
>>> th["temperature"].dims
('time', 'tile_y', 'tile_x')
>>> bool(th["peak_temperature_c"] > th.attrs["ambient_c"]), float(th["throttle_fraction"])
(True, 0.0)
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from ..errors import DfitError
from ..events import binning
from .hardware import FIELDS, THERMAL_FIELDS, Hardware, check_hardware, from_provenance
from .memory import Estimate
from .streaming import float_count

#: float64 arrays over (steps + 1) x tiles the transient keeps at its peak (the periodic energies, the steps'
#: energies, the scan's temperatures and their copies on the way back): an upper bound (about 3.3 measured)
STEP_TILE_ARRAYS = 8

#: event kinds whose energy heats the die (DRAM access energy is spent in the DRAM devices)
ON_DIE_KINDS = ("compute", "sram", "noc", "retile")

#: a tile is a hotspot when its peak rise over ambient is at least this share of the hottest tile's
HOTSPOT_SHARE = 0.9


class ThermalError(DfitError, ValueError):
    """Bad input to the thermal model (run, inferences, steps, power map)."""


def _path_modes(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues ``(n,)`` and orthonormal eigenvectors ``(n, n)`` (columns) of the Laplacian of an n-node path.

    >>> lam, u = _path_modes(3)
    >>> np.allclose(u @ np.diag(lam) @ u.T, [[1, -1, 0], [-1, 2, -1], [0, -1, 1]])
    True
    """
    k = np.arange(n)
    lam = 2.0 - 2.0 * np.cos(np.pi * k / n)
    u = np.cos(np.pi * np.outer(np.arange(n) + 0.5, k) / n)
    return lam, u / np.linalg.norm(u, axis=0)


def _network(hw: Hardware) -> dict[str, np.ndarray]:
    """The RC network of ``hw`` in its modal basis: per-tile C, g_v, mode eigenvalues and the DCT matrices."""
    tr, tc = int(hw.tile_rows), int(hw.tile_cols)
    n = tr * tc
    ly, uy = _path_modes(tr)
    lx, ux = _path_modes(tc)
    g_v = 1.0 / (float(hw.thermal_resistance_k_per_w) * n)
    g_l = 1.0 / float(hw.lateral_resistance_k_per_w)
    lam = g_v + g_l * (ly[:, None] + lx[None, :])
    return {"c": np.float64(float(hw.heat_capacity_j_per_k) / n), "g_v": np.float64(g_v), "lam": lam, "uy": uy,
            "ux": ux}


def steady_state(power_w: Any, hw: Hardware) -> np.ndarray:
    """Steady-state temperatures (degC) of the tile grid under a constant per-tile power map.

    Parameters
    ----------
    power_w : array_like
        Watts per tile, shape ``(tile_rows, tile_cols)``, finite and ``>= 0``.
    hw : Hardware
        The machine (its thermal fields).

    Returns
    -------
    numpy.ndarray
        ``(tile_rows, tile_cols)`` temperatures: ``T_amb + G^-1 p``.

    Examples
    --------
    >>> from dfit_nb.sim import Hardware
    >>> hw = Hardware(tile_rows=2, tile_cols=2, thermal_resistance_k_per_w=1.0, ambient_c=40.0)
    >>> steady_state(np.full((2, 2), 2.5), hw).tolist()  # uniform: 40 + 2.5 W x (1 K/W x 4 tiles)
    [[50.0, 50.0], [50.0, 50.0]]
    """
    net = _network(hw)
    p = _power_map(power_w, hw)
    modal = net["uy"].T @ p @ net["ux"] / net["lam"]
    return float(hw.ambient_c) + net["uy"] @ modal @ net["ux"].T


def _power_map(power_w: Any, hw: Hardware) -> np.ndarray:
    p = np.asarray(power_w, dtype=np.float64)
    shape = (int(hw.tile_rows), int(hw.tile_cols))
    if p.shape != shape:
        raise ThermalError(f"power_w has shape {p.shape}; the machine's grid is (tile_rows, tile_cols) = {shape}")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise ThermalError("power_w must be finite and >= 0 W per tile")
    return p


@jax.jit
def _simulate(energy: jax.Array, dt0: jax.Array, theta0: jax.Array, net: dict[str, jax.Array],
              limit_rise: jax.Array, factor: jax.Array) -> dict[str, jax.Array]:
    """``lax.scan`` over time steps: per step (energy ``(tr, tc)`` J, nominal seconds ``dt0``) the exact modal
    update, the throttle decision from the hottest tile at the step's start, and the heat to ambient."""
    uy, ux, lam, c, g_v = net["uy"], net["ux"], net["lam"], net["c"], net["g_v"]
    n = uy.shape[0] * ux.shape[0]

    def step(theta: jax.Array, e: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        throttled = jnp.max(theta) > limit_rise
        dt = jnp.where(throttled, dt0 / factor, dt0)
        modal = uy.T @ theta @ ux
        ss = (uy.T @ (e / dt) @ ux) / lam
        decay = jnp.exp(-lam * dt / c)
        new_modal = ss + (modal - ss) * decay
        # heat through the vertical path: g_v x the integral of sum(theta); sum(theta) = sqrt(n) x the uniform mode
        tau = c / lam[0, 0]
        integral = ss[0, 0] * dt + (modal[0, 0] - ss[0, 0]) * tau * (1.0 - decay[0, 0])
        out = {"theta": uy @ new_modal @ ux.T, "throttled": throttled, "dt": dt,
               "heat_out": g_v * jnp.sqrt(n) * integral, "start_max": jnp.max(theta)}
        return out["theta"], out

    _, outs = jax.lax.scan(step, theta0, energy)
    return outs


def tile_energy(run: Any) -> tuple[np.ndarray, np.ndarray]:
    """On-die energy of one call per (time bin, tile_y, tile_x) in J, and the bin edges in cycles.

    The replay's simulated events of the :data:`ON_DIE_KINDS`, binned on the run's cube bins.

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> run = dfit_nb.replay(dfit_nb.capture(lambda a: a @ a, jnp.ones((64, 64))), dfit_nb.sim.presets.get("npu_like"))
    >>> e, edges = tile_energy(run)
    >>> e.shape[1:], edges.size == e.shape[0] + 1
    ((4, 5), True)
    """
    ev, cube = run.events, run.cube
    tr, tc = cube.sizes["tile_y"], cube.sizes["tile_x"]
    edges = np.append(cube["time"].values, cube["time_end"].values[-1:]).astype(np.float64)
    sel = np.flatnonzero((ev["source"].values == "simulated") & np.isin(ev["kind"].values.astype(str), ON_DIE_KINDS))
    group = ev["tile_y"].values[sel].astype(np.int64) * tc + ev["tile_x"].values[sel].astype(np.int64)
    energy = binning.bin_intervals(ev["start"].values[sel], ev["end"].values[sel], ev["energy_pj"].values[sel],
                                   group, tr * tc, edges)
    return np.maximum(energy, 0.0).reshape(-1, tr, tc) * 1e-12, edges


def _periodic(cum: np.ndarray, edges: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Cumulative quantity at work positions ``w`` (cycles) of calls repeated back to back: whole calls times the
    per-call total plus the part of the current call (linear within a bin). ``cum``: ``(bins + 1, ...)``."""
    period = edges[-1]
    whole = np.floor(w / period)
    part = w - whole * period
    idx = np.clip(np.searchsorted(edges, part, side="right") - 1, 0, edges.size - 2)
    frac = (part - edges[idx]) / (edges[idx + 1] - edges[idx])
    inside = cum[idx] + (cum[idx + 1] - cum[idx]) * frac.reshape(-1, *([1] * (cum.ndim - 1)))
    return whole.reshape(-1, *([1] * (cum.ndim - 1))) * cum[-1] + inside


def _hardware(run: Any, hw: Hardware | None) -> Hardware:
    """The run's machine: ``hw`` if given (its grid must match), else rebuilt from the run's provenance."""
    attrs = run.attrs
    if hw is None:
        try:
            hw = from_provenance(attrs)
        except KeyError as err:
            raise ThermalError(f"the run's {err.args[0]}: pass hw= (the machine it ran on, with its thermal "
                               "fields)") from None
    check_hardware(hw, "thermal()", error=ThermalError)
    grid = (run.cube.sizes["tile_y"], run.cube.sizes["tile_x"])
    if (int(hw.tile_rows), int(hw.tile_cols)) != grid:
        raise ThermalError(f"hw has a {int(hw.tile_rows)}x{int(hw.tile_cols)} grid, the run a {grid[0]}x{grid[1]} "
                           "one: pass the machine the run was replayed on")
    # the run's energies and cycles are its machine's: another clock would turn its cycles into other seconds
    # (another power), and any other field would describe a machine the run's energies are not of
    differ = [f for f in FIELDS if f not in THERMAL_FIELDS and f"hw_{f}" in attrs
              and float(np.asarray(getattr(hw, f))) != float(attrs[f"hw_{f}"])]
    if differ:
        shown = ", ".join(f"{f} = {float(np.asarray(getattr(hw, f))):g} (the run's {float(attrs[f'hw_{f}']):g})"
                          for f in differ[:3])
        raise ThermalError(f"hw differs from the machine the run was replayed on in {shown}: pass that machine, "
                           f"changing only its thermal fields ({', '.join(THERMAL_FIELDS)}) with hw.replace(...)")
    return hw


def thermal(run: Any, inferences: int = 1000, *, steps: int = 256, hw: Hardware | None = None) -> xr.Dataset:
    """Temperatures of the tile grid while ``inferences`` inferences of ``run`` execute back to back, with throttling.

    See the module docstring for the model. Parameters are the machine's thermal fields
    (:data:`dfit_nb.sim.hardware.THERMAL_FIELDS`): ``hw.replace(thermal_resistance_k_per_w=...)`` to try others.

    Parameters
    ----------
    run : Run
        A replay (:func:`dfit_nb.replay`); its per-tile energy drives the model.
    inferences : int
        Inferences run back to back (>= 1), one call of the program each.
    steps : int
        Time steps of the transient (>= 1), each an equal share of the work.
    hw : Hardware, optional
        The machine; by default rebuilt from the run's provenance (every field is recorded there). Only its
        thermal fields may differ from the run's machine (:class:`ThermalError` otherwise).

    Returns
    -------
    xarray.Dataset
        ``temperature`` over (``time``, ``tile_y``, ``tile_x``) at each step's end, ``power_w`` and
        ``throttled`` over ``time``, ``peak_tile_temperature_c`` and ``hotspot`` over the grid, scalars
        ``peak_temperature_c``, ``hottest_tile_y``/``_x``, ``throttle_fraction``, ``latency_s``,
        ``throttled_latency_s``, ``slowdown``, ``energy_in_j``, ``heat_to_ambient_j``, ``stored_heat_j``, and
        ``thermal_cycles`` over ``op`` (the per-op stretch, per call). Every variable has ``units`` and
        ``description``.

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> run = dfit_nb.replay(dfit_nb.capture(lambda a: a @ a, jnp.ones((64, 64))), dfit_nb.sim.presets.get("npu_like"))
    >>> hot = dfit_nb.sim.presets.get("npu_like").replace(thermal_resistance_k_per_w=1e3, heat_capacity_j_per_k=1e-6)
    >>> th = thermal(run, inferences=10**5, steps=64, hw=hot)  # a toy machine that overheats: the clock halves
    >>> round(float(th["throttle_fraction"]), 2), round(float(th["slowdown"]), 2)
    (0.99, 1.98)
    """
    if not hasattr(run, "events") or not hasattr(run, "cube") or not hasattr(run, "ops"):
        raise ThermalError(f"run must be a dfit_nb Run (from dfit_nb.replay), got {type(run).__name__}")
    for name, value in (("inferences", inferences), ("steps", steps)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ThermalError(f"{name} must be a positive integer, got {value!r}")
    hw = _hardware(run, hw)
    tr, tc = int(hw.tile_rows), int(hw.tile_cols)
    # steps is the user's size: the arrays over steps x tiles are checked against the memory before they exist
    Estimate(f"thermal() of {int(steps)} steps on a {tr}x{tc} grid",
             {"arrays over steps x tiles": 8.0 * STEP_TILE_ARRAYS * (int(steps) + 1) * tr * tc},
             {"steps": int(steps), "tiles": tr * tc}).check(
        "use fewer steps (each is an equal share of the work; 256, the default, draws a smooth transient)")
    clock_hz = float(hw.clock_ghz) * 1e9
    energy_bins, edges = tile_energy(run)
    cum = np.concatenate([np.zeros((1, tr, tc)), np.cumsum(energy_bins, axis=0)])
    calls = float_count(inferences)
    work = calls * float(edges[-1])  # Python floats: an overflow is inf, refused below, not a NumPy warning
    if not math.isfinite(work / clock_hz):  # the transient's seconds would be inf and every temperature NaN
        raise ThermalError(f"inferences must be a positive integer whose run time is finite in float64: "
                           f"{calls:.3g} calls of {edges[-1]:.6g} cycles overflow; use fewer (the steady state "
                           "is reached after a few times the chip's R x C)")
    w = np.linspace(0.0, work, int(steps) + 1)
    step_energy = np.maximum(np.diff(_periodic(cum, edges, w), axis=0), 0.0)
    dt0 = (work / steps) / clock_hz
    net = _network(hw)
    amb, limit, factor = float(hw.ambient_c), float(hw.thermal_limit_c), float(hw.throttle_clock_factor)
    with jax.enable_x64(True):
        outs = jax.device_get(_simulate(jnp.asarray(step_energy), jnp.float64(dt0), jnp.zeros((tr, tc)),
                                        {k: jnp.asarray(v) for k, v in net.items()}, jnp.float64(limit - amb),
                                        jnp.float64(factor)))
    theta = np.asarray(outs["theta"])
    throttled = np.asarray(outs["throttled"], dtype=bool)
    dt = np.asarray(outs["dt"])
    t_end = np.cumsum(dt)
    temperature = amb + theta
    peak_tile = amb + np.maximum(theta.max(axis=0), 0.0)
    rise = peak_tile - amb
    hotspot = rise >= HOTSPOT_SHARE * rise.max() if rise.max() > 0 else np.zeros_like(rise, dtype=bool)
    hy, hx = np.unravel_index(int(np.argmax(peak_tile)), peak_tile.shape)
    latency = work / clock_hz / calls
    throttled_latency = float(t_end[-1]) / calls
    extra = _op_stretch(run, edges, w, throttled, factor) / calls
    e_in = float(step_energy.sum())
    stored = float(net["c"] * theta[-1].sum())
    v = _var
    data = {
        "temperature": v(("time", "tile_y", "tile_x"), temperature, "degC", "tile temperature at the step's end"),
        "power_w": v(("time",), step_energy.sum(axis=(1, 2)) / dt, "W", "on-die power of the step (throttled steps: "
                     "the same energy over more seconds)"),
        "throttled": v(("time",), throttled, "", "the step ran at the throttled clock (hottest tile above the limit "
                       "at its start)"),
        "inferences_done": v(("time",), w[1:] / edges[-1], "1", "calls completed by the step's end"),
        "peak_tile_temperature_c": v(("tile_y", "tile_x"), peak_tile, "degC", "each tile's peak temperature"),
        "hotspot": v(("tile_y", "tile_x"), hotspot, "",
                     f"peak rise over ambient >= {HOTSPOT_SHARE:g} x the hottest tile's"),
        "peak_temperature_c": v((), float(peak_tile.max()), "degC", "the hottest tile's peak temperature"),
        "hottest_tile_y": v((), int(hy), "1", "row of the hottest tile"),
        "hottest_tile_x": v((), int(hx), "1", "column of the hottest tile"),
        "throttle_fraction": v((), float(dt[throttled].sum() / t_end[-1]), "1",
                               "share of the seconds spent at the throttled clock"),
        "latency_s": v((), latency, "s", "latency of one call at the nominal clock"),
        "throttled_latency_s": v((), throttled_latency, "s", "seconds per call, throttling included"),
        "slowdown": v((), throttled_latency / latency if latency > 0 else 1.0, "1",
                      "throttled latency over the nominal latency"),
        "energy_in_j": v((), e_in, "J", "on-die energy of all the inferences"),
        "heat_to_ambient_j": v((), float(np.sum(outs["heat_out"])), "J",
                               "heat that left through the vertical path (package, heat sink)"),
        "stored_heat_j": v((), stored, "J", "heat stored in the tiles at the end (C x rise, summed)"),
        "thermal_cycles": v(("op",), extra, "cycle",
                            "cycles (nominal clock) throttling added to the op's span, per call"),
    }
    coords = {"time": ("time", t_end, {"units": "s", "description": "end of the step (throttled seconds)"}),
              "tile_y": np.arange(tr), "tile_x": np.arange(tc), "op": run.ops["op"].values}
    attrs = {**{k: val for k, val in run.attrs.items() if not isinstance(val, (dict, list))},
             **{f: float(np.asarray(getattr(hw, f))) for f in THERMAL_FIELDS}, "inferences": int(inferences),
             "calls": calls, "steps": int(steps), "tiles": tr * tc}
    return xr.Dataset(data, coords=coords, attrs=attrs)


def _var(dims: Any, values: Any, units: str, description: str) -> tuple[Any, Any, dict[str, str]]:
    return (dims, values, {"units": units, "description": description})


def _op_stretch(run: Any, edges: np.ndarray, w: np.ndarray, throttled: np.ndarray, factor: float) -> np.ndarray:
    """Cycles each op was stretched by over the whole sustained run: ``(1 / factor - 1)`` x the work of each
    throttled step that falls in the op's span ``[end - span, end)`` of each call."""
    ops = run.ops
    end = ops["end"].values.astype(np.float64)
    start = end - ops["span"].values.astype(np.float64)
    period = edges[-1]
    length = np.clip(end, 0.0, period) - np.clip(start, 0.0, period)
    whole = np.floor(w / period)[:, None]
    part = (w[:, None] - whole * period)
    covered = whole * length[None, :] + np.clip(part - start[None, :], 0.0, length[None, :])  # (steps + 1, ops)
    per_step = np.diff(covered, axis=0)
    return (1.0 / factor - 1.0) * (per_step * throttled[:, None]).sum(axis=0)


__all__ = ("HOTSPOT_SHARE", "ON_DIE_KINDS", "ThermalError", "steady_state", "thermal", "tile_energy")
