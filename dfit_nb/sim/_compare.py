"""``compare(run_a, run_b)``: the A/B difference of two replays of one program (two policies, or two machines).

First persistent divergence
---------------------------
A *stage* is an op's own region path (the innermost region holding it; ``""`` for ops outside any), and
stages are taken in program order (by their first op). Stage ``s`` takes ``T(s)`` seconds (the sum of its ops'
spans, which tile the latency of a time-multiplexed run) and ``E(s)`` pJ; through stage ``s`` run B is
``shift_T(s) = sum_{s' <= s} T_b(s') - T_a(s')`` seconds and ``shift_E(s)`` pJ away from run A.

- Stage ``s`` *diverges* when it differs by more than ``threshold`` of its own size in A:
  ``|T_b(s) - T_a(s)| > threshold x T_a(s)`` or ``|E_b(s) - E_a(s)| > threshold x E_a(s)`` (a stage only one
  run has always diverges).
- It diverges *persistently* when, at every stage ``s' >= s`` to the end of the program, the runs stay out of
  step by more than that same amount: ``|shift_T(s')| > threshold x T_a(s)`` or
  ``|shift_E(s')| > threshold x E_a(s)``. A difference later stages cancel (B falls back in step with A) is
  transient and not named.

The *first persistent divergence* is the earliest stage that diverges persistently. A floor of ``1e-9`` of run
A's total time and energy keeps float rounding from counting as a difference.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from ..errors import DfitError

_SUMMARY = ("latency_s", "energy_j", "joules_per_inference", "utilization", "sram_bytes", "noc_bytes",
            "retile_bytes", "dram_bytes")
_REGION = ("energy_pj", "macs", "bytes_dram", "bytes_noc", "bytes_retile")


class CompareError(DfitError, ValueError):
    """The two runs do not replay the same program."""


def _check_runs(who: str, *runs: Any) -> None:
    """Runs only: None or a run's ``summary`` Dataset would fail on a missing attribute deep inside."""
    from .run import Run

    for name, run in zip(("run_a", "run_b"), runs, strict=False):
        if not isinstance(run, Run):
            raise CompareError(f"{who} {name} must be a dfit_nb Run (from dfit_nb.replay or load_run), got "
                               f"{type(run).__name__}")


#: default ``threshold`` of the first persistent divergence: 5 % of a stage's own time or energy
DIVERGENCE_THRESHOLD = 0.05


def _stages(run: Any) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Stages (op regions) in program order with each one's span (s) and energy (pJ)."""
    regions = np.asarray(run.ops["region"].values).astype(str)
    names, first, inv = np.unique(regions, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    span = np.bincount(inv, weights=np.asarray(run.ops["span"].values, np.float64), minlength=len(names))
    energy = np.bincount(inv, weights=np.asarray(run.ops["energy_pj"].values, np.float64), minlength=len(names))
    return [str(n) for n in names[order]], span[order] / (run.attrs["clock_ghz"] * 1e9), energy[order]


def divergence(run_a: Any, run_b: Any, threshold: float = DIVERGENCE_THRESHOLD) -> xr.Dataset:
    """Per stage in program order, how far B is out of step with A, and the first persistent divergence.

    See the module docstring for the definitions. Returns a Dataset over ``stage``: ``stage_span_s_a`` / ``_b``,
    ``stage_energy_pj_a`` / ``_b``, ``time_shift_s`` and ``energy_shift_pj`` (B - A, cumulative through the stage),
    ``diverges`` and ``persists``; attrs ``first_divergence`` (the stage's region, or ``""`` when none is persistent),
    ``first_divergence_index`` (-1 when none) and ``divergence_threshold``.

    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import presets
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> r = dfit_nb.replay(t, presets.get("npu_like"), "ws")
    >>> divergence(r, r).attrs["first_divergence_index"]
    -1
    """
    _check_runs("divergence()", run_a, run_b)
    # NumPy integers are numbers; a bool is not a fraction (True would read as a threshold of 100 %)
    if isinstance(threshold, (bool, np.bool_)) or not (
            isinstance(threshold, (int, float, np.integer, np.floating)) and np.isfinite(threshold) and threshold >= 0):
        raise CompareError(f"threshold must be a finite number >= 0 (a fraction of a stage's own time and energy), "
                           f"got {threshold!r}")
    na, ta, ea = _stages(run_a)
    nb, tb, eb = _stages(run_b)
    names = na + [n for n in nb if n not in na]
    ia, ib = {n: i for i, n in enumerate(na)}, {n: i for i, n in enumerate(nb)}
    both = np.array([n in ia and n in ib for n in names])

    def pick(values: np.ndarray, index: dict[str, int]) -> np.ndarray:
        return np.array([values[index[n]] if n in index else 0.0 for n in names])

    span_a, span_b, en_a, en_b = pick(ta, ia), pick(tb, ib), pick(ea, ia), pick(eb, ib)
    shift_t = np.cumsum(span_b) - np.cumsum(span_a)
    shift_e = np.cumsum(en_b) - np.cumsum(en_a)
    floor_t, floor_e = 1e-9 * max(span_a.sum(), 1e-30), 1e-9 * max(en_a.sum(), 1e-30)
    tol_t, tol_e = threshold * span_a + floor_t, threshold * en_a + floor_e  # per stage: its own size in A
    diverges = (np.abs(span_b - span_a) > tol_t) | (np.abs(en_b - en_a) > tol_e) | ~both
    # stays[s, s']: at stage s' the runs are still apart by more than stage s's tolerance (only s' >= s counts)
    stays = (np.abs(shift_t)[None, :] > tol_t[:, None]) | (np.abs(shift_e)[None, :] > tol_e[:, None])
    later = np.triu(np.ones((len(names), len(names)), bool))
    persists = diverges & np.all(stays | ~later, axis=1)
    first = int(np.argmax(persists)) if persists.any() else -1
    d = ("stage",)
    return xr.Dataset(
        {"stage_span_s_a": (d, span_a, {"units": "s", "description": "A: the stage's op spans"}),
         "stage_span_s_b": (d, span_b, {"units": "s", "description": "B: the stage's op spans"}),
         "stage_energy_pj_a": (d, en_a, {"units": "pJ", "description": "A: the stage's energy"}),
         "stage_energy_pj_b": (d, en_b, {"units": "pJ", "description": "B: the stage's energy"}),
         "time_shift_s": (d, shift_t, {"units": "s", "description": "B - A: time spent through the stage"}),
         "energy_shift_pj": (d, shift_e, {"units": "pJ", "description": "B - A: energy spent through the stage"}),
         "diverges": (d, diverges, {"units": "", "description": "differs by more than threshold of its size in A"}),
         "persists": (d, persists, {"units": "", "description": "diverges, and B never falls back in step"})},
        coords={"stage": np.array(names, dtype=object)},
        attrs={"first_divergence": names[first] if first >= 0 else "", "first_divergence_index": first,
               "divergence_threshold": float(threshold)},
    )


def compare(run_a: Any, run_b: Any, *, force: bool = False, threshold: float = DIVERGENCE_THRESHOLD) -> xr.Dataset:
    """A versus B, per run, per region and (on one grid) per tile: ``a``, ``b``, ``b - a`` and ``b / a``; and the
    first stage from which B stays out of step with A (see the module docstring and :func:`divergence`).

    Both runs must replay the same program (function and argument shapes); ``force=True`` compares anyway.

    Returns
    -------
    xarray.Dataset
        Dim ``run`` (``a``, ``b``) for the summary scalars; ``region`` for
        energy, MACs, traffic and the span (first start to last end, in
        seconds) of every region; ``tile_y``/``tile_x`` for compute-busy
        seconds when both machines have the same grid. ``delta_*`` = B - A and
        ``ratio_*`` = B / A (NaN where A is 0). Dim ``stage`` (op regions in
        program order): :func:`divergence`'s variables; attrs
        ``first_divergence`` (a region path, ``""`` if the runs never
        persistently diverge), ``first_divergence_index`` and
        ``divergence_threshold``.

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import compare, presets
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> hw = presets.get("npu_like")
    >>> ab = compare(dfit_nb.replay(t, hw, "ws"), dfit_nb.replay(t, hw, "os"))
    >>> ab["run"].values.tolist(), str(ab["energy_j"].attrs["units"])
    (['a', 'b'], 'J')
    >>> ab.attrs["divergence_threshold"]
    0.05
    """
    _check_runs("compare()", run_a, run_b)
    if not isinstance(force, (bool, np.bool_)):  # force="no" is truthy: two programs would be compared anyway
        raise CompareError(f"force must be True or False (compare runs of different programs anyway), got {force!r}")
    if not force and not run_a.comparable(run_b):
        raise CompareError(
            f"the runs replay different programs ({run_a.attrs.get('function')!r} "
            f"{run_a.attrs.get('arg_shapes')!r} vs {run_b.attrs.get('function')!r} "
            f"{run_b.attrs.get('arg_shapes')!r}); pass force=True to compare anyway")
    data: dict[str, Any] = {}
    for var in _SUMMARY:
        pair = np.array([float(run_a.summary[var]), float(run_b.summary[var])])
        attrs = dict(run_a.summary[var].attrs)
        data[var] = (("run",), pair, attrs)
        data[f"delta_{var}"] = ((), pair[1] - pair[0], {**attrs, "description": f"B - A: {var}"})
        data[f"ratio_{var}"] = ((), pair[1] / pair[0] if pair[0] else np.nan, {"units": "1",
                                                                              "description": f"B / A: {var}"})
    data["bottleneck"] = (("run",), np.array([run_a.summary["bottleneck"].item(),
                                              run_b.summary["bottleneck"].item()], dtype=object), {"units": ""})
    regions = sorted(set(run_a.regions["region"].values.tolist()) | set(run_b.regions["region"].values.tolist()))
    ra, rb = (r.regions.reindex(region=regions) for r in (run_a, run_b))
    clock = (run_a.attrs["clock_ghz"] * 1e9, run_b.attrs["clock_ghz"] * 1e9)
    for var in _REGION:
        a, b = ra[var].values, rb[var].values
        units = run_a.regions[var].attrs.get("units", "")
        data[f"{var}_a"] = (("region",), a, {"units": units, "description": f"A: {var}"})
        data[f"{var}_b"] = (("region",), b, {"units": units, "description": f"B: {var}"})
        data[f"delta_{var}"] = (("region",), b - a, {"units": units, "description": f"B - A: {var}"})
    span_a = (ra["end"].values - ra["start"].values) / clock[0]
    span_b = (rb["end"].values - rb["start"].values) / clock[1]
    data["span_s_a"] = (("region",), span_a, {"units": "s", "description": "A: first start to last end"})
    data["span_s_b"] = (("region",), span_b, {"units": "s", "description": "B: first start to last end"})
    with np.errstate(divide="ignore", invalid="ignore"):
        data["ratio_span"] = (("region",), np.where(span_a > 0, span_b / span_a, np.nan),
                              {"units": "1", "description": "B / A: region span"})
    data["bottleneck_a"] = (("region",), ra["bottleneck"].values.astype(object), {"units": ""})
    data["bottleneck_b"] = (("region",), rb["bottleneck"].values.astype(object), {"units": ""})
    coords: dict[str, Any] = {"run": ["a", "b"], "region": np.array(regions, dtype=object)}
    same_grid = run_a.cube.sizes.get("tile_y") == run_b.cube.sizes.get("tile_y") and \
        run_a.cube.sizes.get("tile_x") == run_b.cube.sizes.get("tile_x")
    if same_grid:
        busy = []
        for run, hz in ((run_a, clock[0]), (run_b, clock[1])):
            c = run.cube
            seconds = ((c["time_end"] - c["time"]) / hz)
            busy.append((c["busy"] * seconds).sum("time").values)
        data["busy_s_a"] = (("tile_y", "tile_x"), busy[0], {"units": "s", "description": "A: compute-busy time"})
        data["busy_s_b"] = (("tile_y", "tile_x"), busy[1], {"units": "s", "description": "B: compute-busy time"})
        data["delta_busy_s"] = (("tile_y", "tile_x"), busy[1] - busy[0], {"units": "s",
                                                                          "description": "B - A: busy time"})
        coords.update(tile_y=run_a.cube["tile_y"].values, tile_x=run_a.cube["tile_x"].values)
    div = divergence(run_a, run_b, threshold)
    attrs = {"a": f"{run_a.attrs.get('hardware')} / {run_a.attrs.get('dataflow')} / {run_a.attrs.get('execution')}",
             "b": f"{run_b.attrs.get('hardware')} / {run_b.attrs.get('dataflow')} / {run_b.attrs.get('execution')}",
             "function": str(run_a.attrs.get("function", "")), "per_tile": int(same_grid), **div.attrs}
    return xr.Dataset(data, coords=coords, attrs=attrs).merge(div, combine_attrs="override")  # keeps these attrs
