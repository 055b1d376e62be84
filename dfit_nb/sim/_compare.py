"""``compare(run_a, run_b)``: the A/B difference of two replays of one program (two policies, or two machines)."""

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


def compare(run_a: Any, run_b: Any, *, force: bool = False) -> xr.Dataset:
    """A versus B, per run, per region and (on one grid) per tile: ``a``, ``b``, ``b - a`` and ``b / a``.

    Both runs must replay the same program (function and argument shapes); ``force=True`` compares anyway.

    Returns
    -------
    xarray.Dataset
        Dim ``run`` (``a``, ``b``) for the summary scalars; ``region`` for
        energy, MACs, traffic and the span (first start to last end, in
        seconds) of every region; ``tile_y``/``tile_x`` for compute-busy
        seconds when both machines have the same grid. ``delta_*`` = B - A and
        ``ratio_*`` = B / A (NaN where A is 0).

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import compare, presets
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> hw = presets.get("npu_like")
    >>> ab = compare(dfit_nb.replay(t, hw, "ws"), dfit_nb.replay(t, hw, "os"))
    >>> ab["run"].values.tolist(), str(ab["energy_j"].attrs["units"])
    (['a', 'b'], 'J')
    """
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
    attrs = {"a": f"{run_a.attrs.get('hardware')} / {run_a.attrs.get('dataflow')} / {run_a.attrs.get('execution')}",
             "b": f"{run_b.attrs.get('hardware')} / {run_b.attrs.get('dataflow')} / {run_b.attrs.get('execution')}",
             "function": str(run_a.attrs.get("function", "")), "per_tile": int(same_grid)}
    return xr.Dataset(data, coords=coords, attrs=attrs)
