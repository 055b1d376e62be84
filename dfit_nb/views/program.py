"""Program-level charts: region tree, roofline, traffic mix, reuse, a dataflow policy, a sweep's Pareto front.

Pure functions from ``Trace`` / ``Run`` / ``Policy`` / sweep Datasets to Altair charts. Every chart has a
title, tooltips, and embeds at most :data:`dfit_nb.views._common.MAX_ROWS` rows (larger inputs are aggregated
first, and the subtitle says so).

The region tree is :mod:`dfit_nb.views._region_tree` and the sweep's chart :mod:`dfit_nb.views._sweep_chart`;
their charts are importable from here too.
"""

from __future__ import annotations

from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from ..events.schema import KINDS
from ..sim.hardware import check_hardware
from ._common import (
    MAX_ROWS,
    ViewInputError,
    aggregated,
    check_count,
    check_region,
    expect,
    in_region,
    require,
    titled,
)
from ._region_tree import _path_depth, _tail
from ._region_tree import regions as regions
from ._sweep_chart import pareto_mask as pareto_mask
from ._sweep_chart import sweep as sweep

__all__ = ("policy", "regions", "reuse_map", "roofline", "sweep", "traffic_mix")

_LEVELS = ("sram", "noc", "dram")
_TENSORS = ("activation", "weight", "psum")


# ---- helpers -------------------------------------------------------------------------------------------------------
def _hw_value(attrs: dict[str, Any], hw: Any, field: str) -> float:
    if hw is not None:
        return float(np.asarray(getattr(hw, field)))
    return float(attrs[f"hw_{field}"])


# ---- 2. roofline ---------------------------------------------------------------------------------------------------
def roofline(run: Any, hw: Any = None, trace: Any = None, region: str | None = None) -> alt.HConcatChart:
    """Ops of a Run against the compute roof and the DRAM, NoC and SRAM bandwidth roofs (log-log).

    Parameters
    ----------
    run : Run
        A replay.
    hw : Hardware, optional
        The machine for the roofs; by default the roofs the Run carries (``run.summary["roof_*"]``, from the one
        machine model).
    trace : Trace, optional
        Gives FLOPs to non-GEMM ops (a Run counts MACs only; without it those ops are left out).
    region : str, optional
        Only the ops of this region's subtree.

    Returns
    -------
    altair.HConcatChart
        One panel per level: x = FLOP per byte moved at that level, y = attained FLOP/s over the op's span,
        colour = the op's bottleneck, the roofs as lines. Clicking an op sets the point selection ``region``.

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import presets
    >>> from dfit_nb.views import program
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> run = dfit_nb.replay(t, presets.get("npu_like"))
    >>> "$schema" in program.roofline(run, trace=t).to_dict()
    True
    """
    expect(run, "roofline", "run", "Run")
    if hw is not None:
        check_hardware(hw, "roofline()", error=ViewInputError, batch_error=ValueError,
                       batch_hint=": roofline() draws the roofs of one machine")
    if trace is not None:
        expect(trace, "roofline", "trace", "Trace")
    check_region(region, "roofline")
    a = run.attrs
    clock_hz = _hw_value(a, hw, "clock_ghz") * 1e9
    if hw is not None:  # the roofs of another machine, from the one machine model
        from ..sim.run import roof_variables

        roof = {k: float(v[1]) for k, v in roof_variables(hw).items()}
    else:
        require(run.summary, ("roof_peak_flops_per_s", "roof_dram_bytes_per_s", "roof_noc_edge_bytes_per_s",
                              "roof_sram_bytes_per_s"), "roofline", "summary")
        roof = {k: float(run.summary[k]) for k in run.summary.data_vars if k.startswith("roof_")}
    peak = roof["roof_peak_flops_per_s"]
    roofs = {
        "dram": ("DRAM", roof["roof_dram_bytes_per_s"]),
        "noc": ("NoC (west edge)", roof["roof_noc_edge_bytes_per_s"]),
        "sram": ("SRAM", roof["roof_sram_bytes_per_s"]),
    }
    ops = run.ops
    require(ops, ("op", "region", "primitive", "bottleneck", "macs", "span", "start", "end",
                  *(f"bytes_{k}" for k in _LEVELS)), "roofline", "ops")
    flops = 2.0 * ops["macs"].values.astype(np.float64)
    if trace is not None:
        differs = run.differs_from(trace)  # another program's FLOPs would be drawn on the run's ops
        if differs:
            raise ViewInputError(f"roofline(): trace= is not the program this run replayed: {differs}; pass the "
                                 "Trace the run was replayed from")
        tf = (trace.ops["flops"] * trace.ops["count"]).to_series()
        extra = tf.reindex(ops["op"].values).fillna(0.0).values
        flops = np.where(flops > 0, flops, extra)
    span = ops["span"].values.astype(np.float64)
    span = np.where(span > 0, span, ops["end"].values - ops["start"].values)
    base = pd.DataFrame({
        "op": ops["op"].values, "region": [str(v) for v in ops["region"].values],
        "primitive": [str(v) for v in ops["primitive"].values],
        "bottleneck": [str(v) for v in ops["bottleneck"].values],
        "flops": flops, "seconds": span / clock_hz,
        **{f"bytes_{k}": ops[f"bytes_{k}"].values.astype(np.float64) for k in _LEVELS},
    })
    notes = []
    if region:
        inside = in_region(base["region"].values, region)
        if not inside.any():
            raise ValueError(f"region {region!r} has no ops in this run")
        base = base[inside]
        notes.append(f"region {region} only")
    n_in = len(base)
    base = base[(base["flops"] > 0) & (base["seconds"] > 0)]
    n_ops = len(base)
    if n_ops * len(_LEVELS) > MAX_ROWS:
        base = (base.groupby(["region", "primitive", "bottleneck"], as_index=False)
                .agg(op=("op", "min"), flops=("flops", "sum"), seconds=("seconds", "sum"),
                     **{f"bytes_{k}": (f"bytes_{k}", "sum") for k in _LEVELS}))
        base = base.nlargest(MAX_ROWS // len(_LEVELS), "flops")
        notes.append(aggregated(n_ops, len(base), "ops summed by region, primitive and bottleneck"))
    base["flops_per_s"] = base["flops"] / base["seconds"]
    dropped = n_in - n_ops
    if dropped:
        notes.append(f"{dropped} ops without FLOPs or time left out" + ("" if trace is not None else
                                                                       " (pass trace= for non-GEMM FLOPs)"))
    domain = sorted(set(base["bottleneck"]) | {"compute", "sram", "dram", "noc", "scheduling"})
    pick: Any = alt.selection_point(name="region", fields=["region"], on="click", clear="dblclick")
    panels = []
    for level in ("dram", "noc", "sram"):
        name, bw = roofs[level]
        pts = base[base[f"bytes_{level}"] > 0].assign(intensity=lambda d, lv=level: d["flops"] / d[f"bytes_{lv}"])
        lo = float(pts["intensity"].min()) if len(pts) else 0.1
        hi = float(pts["intensity"].max()) if len(pts) else 1000.0
        ridge = peak / bw
        lo, hi = min(lo, ridge) / 4.0, max(hi, ridge) * 4.0
        xs = np.geomspace(lo, hi, 48)
        roof = pd.DataFrame({"intensity": np.concatenate([xs, xs]),
                             "flops_per_s": np.concatenate([np.minimum(peak, bw * xs), np.full(xs.size, peak)]),
                             "roof": [f"{name} {bw / 1e9:.4g} GB/s"] * xs.size + [f"peak {peak / 1e12:.4g} TFLOP/s"]
                             * xs.size})
        x = alt.X("intensity:Q", scale=alt.Scale(type="log"), title=f"FLOP per {name} byte")
        y = alt.Y("flops_per_s:Q", scale=alt.Scale(type="log"), title="attained FLOP/s", axis=alt.Axis(format="~s"))
        lines = alt.Chart(roof).mark_line(color="gray", strokeDash=[4, 2]).encode(
            x=x, y=y, detail="roof:N", tooltip=[alt.Tooltip("roof:N")])
        dots = alt.Chart(pts).mark_circle(size=50, opacity=0.8, cursor="pointer").encode(
            x=x, y=y, color=alt.Color("bottleneck:N", scale=alt.Scale(domain=domain)),
            tooltip=[alt.Tooltip("op:Q"), alt.Tooltip("region:N"), alt.Tooltip("primitive:N"),
                     alt.Tooltip("bottleneck:N"), alt.Tooltip("flops:Q", format=".4~s"),
                     alt.Tooltip(f"bytes_{level}:Q", format=".4~s", title=f"{name} bytes"),
                     alt.Tooltip("intensity:Q", format=".3~g", title="FLOP/byte"),
                     alt.Tooltip("flops_per_s:Q", format=".4~s", title="FLOP/s"),
                     alt.Tooltip("seconds:Q", format=".3~s", title="span (s)")])
        if pts.empty:  # no op moves bytes at this level (e.g. one tile: no NoC): the roofs alone, no empty layer
            panels.append(lines.properties(width=260, height=220, title=f"{name} (no traffic)"))
            continue
        if pick is not None:  # the selection lives on one panel: Altair warns when one param joins several
            dots, pick = dots.add_params(pick), None
        panels.append(alt.layer(lines, dots).properties(width=260, height=220, title=name))
    chart = alt.hconcat(*panels)
    return titled(chart, f"Roofline: {a.get('function', '?')} on {a.get('hardware', '?')}", [n for n in notes if n])


# ---- 3. traffic mix ------------------------------------------------------------------------------------------------
def _pick_regions(names: list[str], totals: np.ndarray, depth: int, top: int) -> tuple[list[int], list[int]]:
    """(shown, folded into "(other)") indices: the top regions by bytes at ``depth`` (the deepest present above)."""
    depths = np.array([_path_depth(n) for n in names])
    d = min(depth, int(depths.max())) if len(depths) else 0
    while d > 0 and not (depths == d).any():
        d -= 1
    at = np.flatnonzero(depths == d)
    order = at[np.argsort(-totals[at], kind="stable")]
    return list(order[:top]), list(order[top:])


def traffic_mix(run_or_policy: Any, level: str | None = None, top: int = 12, depth: int = 2,
                region: str | None = None) -> alt.VConcatChart:
    """Bytes by tensor kind (activation / weight / partial sum) and memory level for the top regions, plus energy.

    Parameters
    ----------
    run_or_policy : Run or Policy
        A Run (``run.cube["traffic"]``) or an evaluated Policy (``policy.artifacts["traffic_mix"]``, one row of
        facets per policy).
    level : {"sram", "noc", "dram"}, optional
        One memory level only (default: all, one column each).
    top : int
        Regions shown; the rest at that depth are summed into ``(other)``.
    depth : int
        Region depth to compare (regions are inclusive; the deepest present level at most this deep is used).
    region : str, optional
        Only this region's subtree, compared ``depth`` levels below it.

    Returns
    -------
    altair.VConcatChart
        Stacked bars of bytes per region, and the energy by level (compute, SRAM, NoC, DRAM, retile).

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import presets
    >>> from dfit_nb.views import program
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> "$schema" in program.traffic_mix(dfit_nb.replay(t, presets.get("npu_like"))).to_dict()
    True
    """
    kind = expect(run_or_policy, "traffic_mix", "run_or_policy", "Run", "Policy")
    check_count(top, "top", "traffic_mix")
    check_count(depth, "depth", "traffic_mix", low=0)
    check_region(region, "traffic_mix")
    if level is not None and level not in _LEVELS:
        raise ValueError(f"level must be one of {_LEVELS} or None, got {level!r}")
    if kind == "Run":
        da = run_or_policy.cube["traffic"].expand_dims(policy=[str(run_or_policy.attrs.get("dataflow", "run"))])
        summaries = {da["policy"].values[0]: run_or_policy.summary}
        title = f"Traffic mix: {run_or_policy.attrs.get('function', '?')} on {run_or_policy.attrs.get('hardware', '?')}"
    else:
        if not run_or_policy.artifacts or "traffic_mix" not in run_or_policy.artifacts:
            raise ValueError("this policy has no traffic mix: select with evaluate=True (or call policy.evaluate)")
        da = run_or_policy.artifacts["traffic_mix"]["bytes"]
        runs = run_or_policy.runs or {}
        summaries = {k: runs[k].summary for k in (str(p) for p in da["policy"].values) if k in runs}
        title = f"Traffic mix per policy ({run_or_policy.name})"
    da = da.transpose("policy", "region", "tensor", "level")
    if level is not None:
        da = da.sel(level=[level])
    if region:
        inside = in_region(da["region"].values, region)
        if not inside.any():
            raise ValueError(f"region {region!r} has no traffic in this run")
        da = da.isel(region=np.flatnonzero(inside))
        depth = _path_depth(region) + depth
        title += f", region {region}"
    names = [str(n) for n in da["region"].values]
    totals = da.sum(("policy", "tensor", "level")).values
    shown, other = _pick_regions(names, totals, depth, top)
    values = da.values  # policy, region, tensor, level
    blocks = [values[:, shown]]
    labels = [names[i] or "<root>" for i in shown]
    if other:
        blocks.append(values[:, other].sum(axis=1, keepdims=True))
        labels.append("(other)")
    arr = np.concatenate(blocks, axis=1)
    pol, reg, ten, lev = (np.asarray(v) for v in np.meshgrid(
        [str(p) for p in da["policy"].values], labels, [str(t) for t in da["tensor"].values],
        [str(x) for x in da["level"].values], indexing="ij"))
    df = pd.DataFrame({"policy": pol.ravel(), "region": reg.ravel(), "tensor": ten.ravel(), "level": lev.ravel(),
                       "bytes": arr.ravel()})
    # stacks in the legend's order (Vega-Lite's order channel wants a quantitative field)
    df["rank"] = df["tensor"].map({t: i for i, t in enumerate(_TENSORS)}).fillna(len(_TENSORS))
    n_full = int(values.size)
    notes = [aggregated(n_full, len(df), f"top {len(shown)} regions at depth "
                                         f"{_path_depth(names[shown[0]]) if shown else 0} by bytes, rest summed")]
    tooltip = [alt.Tooltip("policy:N"), alt.Tooltip("region:N"), alt.Tooltip("tensor:N"), alt.Tooltip("level:N"),
               alt.Tooltip("bytes:Q", format=".4~s")]
    enc: dict[str, Any] = {
        "x": alt.X("sum(bytes):Q", title="bytes", axis=alt.Axis(format="~s")),
        "y": alt.Y("region:N", sort=labels, title=None),
        "color": alt.Color("tensor:N", scale=alt.Scale(domain=list(_TENSORS))),
        "order": alt.Order("rank:Q"),
        "column": alt.Column("level:N", sort=list(_LEVELS), title="level"),
        "tooltip": tooltip,
    }
    if df["policy"].nunique() > 1:
        enc["row"] = alt.Row("policy:N", title="policy", sort=[str(p) for p in da["policy"].values])
    bars = alt.Chart(df).mark_bar().encode(**enc).properties(width=200, height=max(60, 14 * len(labels)))
    parts: list[Any] = [bars]
    if summaries:
        edf = pd.DataFrame([{"policy": p, "kind": k, "rank": i, "energy_j": float(s[f"energy_{k}_j"])}
                            for p, s in summaries.items() for i, k in enumerate(KINDS)])
        energy = alt.Chart(edf).mark_bar().encode(
            x=alt.X("sum(energy_j):Q", title="energy (J)", axis=alt.Axis(format="~s")),
            y=alt.Y("policy:N", title=None),
            color=alt.Color("kind:N", scale=alt.Scale(domain=list(KINDS), scheme="tableau10"), title="energy"),
            order=alt.Order("rank:Q"),
            tooltip=[alt.Tooltip("policy:N"), alt.Tooltip("kind:N"), alt.Tooltip("energy_j:Q", format=".4~s")],
        ).properties(width=420, height=max(30, 22 * len(summaries)), title="energy by level")
        parts.append(energy)
    chart = alt.vconcat(*parts).resolve_scale(color="independent")
    return titled(chart, title, [n for n in notes if n])


# ---- 4. reuse map --------------------------------------------------------------------------------------------------
def reuse_map(policy: Any) -> alt.Chart:
    """Heatmap of the reuse factor (MACs per byte moved) per GEMM, operand and level under the chosen dataflows.

    Parameters
    ----------
    policy : Policy
        An evaluated policy (``policy.artifacts["reuse"]``).

    Returns
    -------
    altair.Chart
        y = op (``#id region-tail``), x = operand x level, colour = reuse (log scale).

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import presets, select_dataflows
    >>> from dfit_nb.views import program
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> "$schema" in program.reuse_map(select_dataflows(t, presets.get("npu_like"), "energy")).to_dict()
    True
    """
    expect(policy, "reuse_map", "policy", "Policy")
    if not policy.artifacts or "reuse" not in policy.artifacts:
        raise ValueError("this policy has no reuse map: select with evaluate=True (or call policy.evaluate)")
    ds = policy.artifacts["reuse"]
    reuse = ds["reuse"].transpose("op", "level", "operand")
    ops = [int(o) for o in reuse["op"].values]
    regions_ = [str(v) for v in ds["region"].values]
    dataflow = [str(v) for v in ds["dataflow"].values]
    labels = [f"#{o} {_tail(r)}" for o, r in zip(ops, regions_, strict=True)]
    lv, od = [str(v) for v in reuse["level"].values], [str(v) for v in reuse["operand"].values]
    vals = reuse.values.astype(np.float64)
    n_cell = len(lv) * len(od)
    notes = []
    n_before = vals.shape[0] * n_cell
    if n_before > MAX_ROWS:  # fold ops into groups of consecutive GEMMs (geometric mean)
        per = int(np.ceil(vals.shape[0] * n_cell / MAX_ROWS))
        groups = np.arange(vals.shape[0]) // per
        with np.errstate(all="ignore"):
            logs = np.log(np.where(vals > 0, vals, np.nan))
            vals = np.exp(np.stack([np.nanmean(logs[groups == g], axis=0) for g in np.unique(groups)]))
        labels = [f"{labels[g * per]} .. ({min(per, len(ops) - g * per)} ops)" for g in np.unique(groups)]
        dataflow = ["/".join(sorted(set(dataflow[g * per:(g + 1) * per]))) for g in np.unique(groups)]
        regions_ = [regions_[g * per] for g in np.unique(groups)]
        notes.append(aggregated(n_before, vals.shape[0] * n_cell, f"{per} consecutive GEMMs per row, geometric mean"))
    rows = []
    for i, lab in enumerate(labels):
        for j, level in enumerate(lv):
            for k, operand in enumerate(od):
                v = vals[i, j, k]
                rows.append({"op": lab, "region": regions_[i], "dataflow": dataflow[i], "level": level,
                             "operand": operand, "cell": f"{operand} @ {level}",
                             "reuse": float(v) if np.isfinite(v) and v > 0 else None})
    df = pd.DataFrame(rows)
    cells = [f"{o} @ {lvl}" for lvl in lv for o in od]
    chart = alt.Chart(df).mark_rect().encode(
        x=alt.X("cell:N", sort=cells, title="operand @ level"),
        y=alt.Y("op:N", sort=labels, title="GEMM"),
        color=alt.Color("reuse:Q", scale=alt.Scale(type="log", scheme="viridis"), title="reuse (MAC/B)"),
        tooltip=[alt.Tooltip("op:N"), alt.Tooltip("region:N"), alt.Tooltip("dataflow:N"), alt.Tooltip("operand:N"),
                 alt.Tooltip("level:N"), alt.Tooltip("reuse:Q", format=".4~g")],
    ).properties(width=36 * len(cells), height=max(60, 16 * len(labels)))
    notes.append("MACs per byte of the operand moved at the level; blank: no traffic")
    return titled(chart, f"Reuse under {policy.name}", [n for n in notes if n])


# ---- 5. policy -----------------------------------------------------------------------------------------------------
def policy(policy: Any) -> alt.VConcatChart:
    """Every GEMM's candidate costs with the chosen dataflow, the switch points, and the replayed gains.

    Parameters
    ----------
    policy : Policy
        From :func:`dfit_nb.sim.select_dataflows`.

    Returns
    -------
    altair.VConcatChart
        Cost of every candidate per GEMM (log scale; the chosen one ringed; dashed rules where the dataflow
        switches) and, when the policy was evaluated, bars of the hybrid's energy and latency gains against each
        single style.

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import presets, select_dataflows
    >>> from dfit_nb.views import program
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> "$schema" in program.policy(select_dataflows(t, presets.get("npu_like"), "latency")).to_dict()
    True
    """
    expect(policy, "policy", "policy", "Policy")
    ch = policy.choices
    ops = [int(o) for o in ch["op"].values]
    cands = [str(c) for c in ch["candidate"].values]
    regions_ = [str(v) for v in ch["region"].values]
    chosen = [str(v) for v in ch["dataflow"].values]
    labels = [f"#{o} {_tail(r)}" for o, r in zip(ops, regions_, strict=True)]
    cost = ch["cost"].transpose("op", "candidate").values
    n_before = cost.size
    notes = []
    idx = np.arange(len(ops))
    if n_before > MAX_ROWS:  # keep the switch points and an even subsample of the rest
        keep = max(1, MAX_ROWS // len(cands))
        sw = np.flatnonzero(ch["switch"].values)
        idx = np.unique(np.concatenate([sw, np.linspace(0, len(ops) - 1, keep - min(len(sw), keep - 1)).astype(int)]))
        idx = idx[:keep]
        notes.append(aggregated(n_before, idx.size * len(cands), "an even sample of GEMMs plus every switch point"))
    unit = {"energy": "pJ", "latency": "cycles", "edp": "pJ x cycles"}.get(policy.objective, "")
    rows = [{"op": labels[i], "order": int(i), "candidate": c, "cost": float(cost[i, j]),
             "energy_pj": float(ch["energy_pj"].values[i, j]), "cycles": float(ch["cycles"].values[i, j]),
             "chosen": c == chosen[i], "region": regions_[i], "choice": chosen[i]}
            for i in idx for j, c in enumerate(cands)]
    df = pd.DataFrame(rows)
    df = df[np.isfinite(df["cost"]) & (df["cost"] > 0)]
    sorted_labels = [labels[i] for i in idx]
    x = alt.X("op:N", sort=sorted_labels, title="GEMM (program order)", axis=alt.Axis(labelAngle=-45))
    y = alt.Y("cost:Q", scale=alt.Scale(type="log"), title=f"{policy.objective} cost ({unit})")
    tooltip = [alt.Tooltip("op:N"), alt.Tooltip("region:N"), alt.Tooltip("candidate:N"), alt.Tooltip("choice:N"),
               alt.Tooltip("cost:Q", format=".4~s"), alt.Tooltip("energy_pj:Q", format=".4~s"),
               alt.Tooltip("cycles:Q", format=".4~s")]
    color = alt.Color("candidate:N", scale=alt.Scale(domain=cands), title="dataflow")
    base = alt.Chart(df)
    lines = base.mark_line(opacity=0.5).encode(x=x, y=y, color=color, detail="candidate:N")
    dots = base.mark_circle(size=40).encode(x=x, y=y, color=color, tooltip=tooltip)
    picked = base.transform_filter(alt.datum.chosen).mark_point(size=180, strokeWidth=2, filled=False).encode(
        x=x, y=y, color=color, tooltip=tooltip)
    layers = [lines, dots, picked]
    sw_rows = pd.DataFrame([{"op": labels[i], "to": chosen[i],
                             "switch_energy_pj": float(ch["switch_energy_pj"].values[i]),
                             "switch_cycles": float(ch["switch_cycles"].values[i])}
                            for i in idx if bool(ch["switch"].values[i])])
    if len(sw_rows):
        layers.insert(0, alt.Chart(sw_rows).mark_rule(strokeDash=[4, 3], color="black").encode(
            x=alt.X("op:N", sort=sorted_labels),
            tooltip=[alt.Tooltip("op:N", title="switch before"), alt.Tooltip("to:N"),
                     alt.Tooltip("switch_energy_pj:Q", format=".4~s"), alt.Tooltip("switch_cycles:Q", format=".4~s")]))
    top_chart = alt.layer(*layers).properties(width=max(300, 22 * len(idx)), height=240)
    parts: list[Any] = [top_chart]
    if policy.baselines is not None:
        b = policy.baselines
        gains = pd.DataFrame([{"baseline": str(p), "metric": m, "gain": float(b[f"{m}_gain"].values[i]),
                               "saved": float(b[f"{m}_gain_{'j' if m == 'energy' else 's'}"].values[i])}
                              for i, p in enumerate(b["policy"].values) if str(p) != "hybrid"
                              for m in ("energy", "latency")])
        parts.append(alt.Chart(gains).mark_bar().encode(
            x=alt.X("baseline:N", title="vs single style"), xOffset="metric:N",
            y=alt.Y("gain:Q", axis=alt.Axis(format="%"), title="replayed gain of the hybrid"),
            color=alt.Color("metric:N", scale=alt.Scale(domain=["energy", "latency"], scheme="set2")),
            tooltip=[alt.Tooltip("baseline:N"), alt.Tooltip("metric:N"), alt.Tooltip("gain:Q", format=".2%"),
                     alt.Tooltip("saved:Q", format=".4~s")],
        ).properties(width=240, height=140, title="replayed gains"))
    else:
        notes.append("not evaluated: no replayed gains")
    n_sw = int(np.sum(ch["switch"].values))
    notes.insert(0, f"{len(ops)} GEMMs, {n_sw} switch{'es' if n_sw != 1 else ''}; ringed: chosen")
    chart = alt.vconcat(*parts).resolve_scale(color="independent")
    return titled(chart, f"Dataflow policy: {policy.name} (objective {policy.objective})", [n for n in notes if n])
