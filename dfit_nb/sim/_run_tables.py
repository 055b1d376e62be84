"""The Datasets of one replay, built on the host from its per-op records with NumPy, vectorized over events (no
Python loop over ops, tiles or events): the events, the per-op and per-region tables, the tile x time cube and the
summary. :func:`dfit_nb.sim.run.build_run` assembles them into a :class:`~dfit_nb.sim.run.Run`.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np
import xarray as xr

from ..events import binning
from ..events.schema import KINDS
from ._bottlenecks import MECHANISMS, _evidence, _extra_cycles, _membership, _var
from ._kernel_table import running_kernel
from .hardware import Hardware
from .machine import DATAFLOWS, link_load, peak_macs_per_cycle, utilization
from .mapping import LAYOUTS, LEVELS, TENSORS
from .schedule import tile_order


def expand_events(prep: Any, out: dict[str, np.ndarray], hw: Hardware, codes: np.ndarray) -> dict[str, np.ndarray]:
    """Per-(op, tile, kind) event columns from the per-op records (see :mod:`dfit_nb.sim.schedule`)."""
    n = len(prep.op)
    count = prep.arrays["count"]
    u = out["tiles"].astype(np.int64)
    v = out["virtual_tiles"]
    off = out["offset"].astype(np.int64)
    op_idx = np.repeat(np.arange(n), u)
    rank = np.arange(op_idx.size) - np.repeat(np.cumsum(u) - u, u)
    tile = off[op_idx] + rank
    ty, tx = tile_order(int(hw.tile_rows), int(hw.tile_cols))[:, tile]
    runs = np.floor(v / u)[op_idx] + (rank < np.mod(v, u)[op_idx])
    share = runs / v[op_idx]
    t1, start = out["t1"][op_idx], out["start"][op_idx]
    lv = level_totals(out, prep.arrays["count"])
    kinds = {
        # kind: (start, end, bytes per op, energy per op, macs per op)
        "compute": (t1, t1 + runs * (out["compute_v"] * count)[op_idx], 0.0 * count, lv["energy_compute"],
                    out["macs"] * count),
        "sram": (t1, t1 + runs * (out["sram_cycles_v"] * count)[op_idx], lv["bytes_sram"], lv["energy_sram"], None),
        "noc": (t1, t1 + out["noc_cycles"][op_idx], lv["bytes_noc"], lv["energy_noc"], None),
        "dram": (out["dram_start"][op_idx], out["dram_end"][op_idx], lv["bytes_dram"], lv["energy_dram"], None),
        "retile": (start, t1, lv["bytes_retile"], lv["energy_retile"], None),
    }
    gemm = prep.arrays["gemm"] > 0
    df_names = np.where(gemm, np.asarray(DATAFLOWS, dtype=object)[codes.astype(np.int64)], "").astype(object)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("row", "tile_y", "tile_x", "kind", "start", "end",
                                                         "bytes", "macs", "energy_pj")}
    for code, (s, e, nbytes, energy, macs) in enumerate(kinds.values()):  # five kinds, not a loop over ops
        nbytes, energy = np.broadcast_to(nbytes, (n,)), np.broadcast_to(energy, (n,))
        present = ((e - s) > 0) | (nbytes[op_idx] > 0) | (energy[op_idx] > 0)
        if macs is not None:
            present |= macs[op_idx] > 0
        sel = np.flatnonzero(present)
        oi = op_idx[sel]
        cols["row"].append(oi)
        cols["tile_y"].append(ty[sel])
        cols["tile_x"].append(tx[sel])
        cols["kind"].append(np.full(sel.size, code, np.int8))
        cols["start"].append(s[sel])
        cols["end"].append(e[sel])
        cols["bytes"].append(nbytes[oi] * share[sel])
        cols["macs"].append(macs[oi] * share[sel] if macs is not None else np.zeros(sel.size))
        cols["energy_pj"].append(energy[oi] * share[sel])
    joined = {k: np.concatenate(v) for k, v in cols.items()}
    order = np.argsort(joined["start"], kind="stable")  # time order; within a time, kind then tile order
    joined = {k: v[order] for k, v in joined.items()}
    row = joined.pop("row")
    kind_names = np.asarray(list(kinds), dtype=object)
    kernel = op_kernels(prep)
    return {**joined, "op": prep.op[row], "region": prep.region.astype(object)[row],
            "kind": kind_names[joined["kind"]], "dataflow": df_names[row], "kernel": kernel[row]}


def level_totals(out: dict[str, Any], count: Any, xp: Any = np) -> dict[str, Any]:
    """Per-op totals over all executions: bytes and energy by level (the events sum to these). ``xp``: NumPy on
    the host, ``jax.numpy`` inside a compiled replay (the selection's per-op costs)."""
    return {
        "bytes_sram": out["sram_bytes"] * count,
        "bytes_noc": (out["noc_in"] + out["noc_out"] + out["psum_noc"]) * count
        + xp.where(out["extra_noc_pj"] > 0, out["dram_extra_bytes"], 0.0),
        "bytes_dram": out["dram_bytes"] * count + out["dram_extra_bytes"],
        "bytes_retile": out["retile_bytes"],
        "energy_compute": out["energy_compute_pj"] * count,
        "energy_sram": out["energy_sram_pj"] * count,
        "energy_noc": out["energy_noc_pj"] * count + out["extra_noc_pj"],
        "energy_dram": out["energy_dram_pj"] * count + out["extra_dram_pj"],
        "energy_retile": out["retile_energy_pj"],
    }


#: per-operand traffic of an op, from the one model (``machine.model``) -> description
OPERAND_BYTES = {
    "sram_reads_input": "SRAM bytes read of the input (ifmap) operand",
    "sram_reads_weight": "SRAM bytes read of the weight (filter) operand",
    "sram_reads_output": "SRAM bytes of partial sums read back",
    "sram_writes_output": "SRAM bytes of outputs and partial sums written",
    "dram_reads_input": "DRAM bytes read of the input operand (producers' results that left the chip included)",
    "dram_reads_weight": "DRAM bytes read of the weight operand",
    "dram_reads_output": "DRAM bytes of spilled partial sums read back",
    "dram_writes_output": "DRAM bytes of outputs (and spilled partial sums) written",
}


def operand_bytes(out: dict[str, np.ndarray], count: np.ndarray, d: tuple[str, ...]) -> dict[str, Any]:
    """Per-operand bytes of every op over all its executions (the DRAM ones sum to ``bytes_dram``)."""
    data = {k: _var(d, out[k] * count, "B", f"{desc}, all executions") for k, desc in OPERAND_BYTES.items()}
    extra = data["dram_reads_input"][1] + out["dram_extra_bytes"]
    data["dram_reads_input"] = _var(d, extra, "B", f"{OPERAND_BYTES['dram_reads_input']}, all executions")
    return data


def ops_dataset(prep: Any, out: dict[str, np.ndarray], codes: np.ndarray, attrs: dict[str, Any]) -> xr.Dataset:
    """Per-op results: the mapping (virtual -> physical), timing, traffic, energy, bottleneck."""
    lv = level_totals(out, prep.arrays["count"])
    cycles, span = _evidence(out)
    safe = np.where(span > 0, span, 1.0)
    evidence = np.clip(cycles / safe[:, None], 0.0, None)
    gemm = prep.arrays["gemm"] > 0
    layout = np.asarray(LAYOUTS, dtype=object)[out["layout"].astype(np.int64)]
    transform = _transform_text(layout, out, gemm)
    energy = sum(lv[f"energy_{k}"] for k in KINDS)
    d = ("op",)
    data = {
        "region": _var(d, prep.region.astype(str), "", "region path"),
        "primitive": _var(d, prep.primitive.astype(str), "", "JAX primitive"),
        "count": _var(d, prep.arrays["count"], "1", "executions per call (run back to back)"),
        "dataflow": _var(d, np.where(gemm, np.asarray(DATAFLOWS)[codes.astype(np.int64)], ""), "",
                         "ws | os | is ('' for non-GEMM ops)"),
        "layout": _var(d, np.where(gemm, layout, "vector").astype(str), "",
                       "virtual layout: mn (rows x output cols), mk (rows x reduction), vector (non-GEMM)"),
        "gy": _var(d, out["gy"], "1", "virtual grid rows"),
        "gx": _var(d, out["gx"], "1", "virtual grid columns"),
        "virtual_tiles": _var(d, out["virtual_tiles"], "1", "virtual tiles (gy x gx)"),
        "alloc": _var(d, out["alloc"], "1", "physical tiles the execution style grants the op"),
        "tiles": _var(d, out["tiles"], "1", "physical tiles the op runs on"),
        "tile_offset": _var(d, out["offset"], "1",
                            "first tile (Hilbert numbering, see dfit_nb.sim.schedule.tile_order)"),
        "section": _var(d, out["section"], "1", "pipeline section (layer-pipelined; 0 when time-multiplexed)"),
        "fold": _var(d, out["fold"], "1", "virtual tiles merged onto each physical tile"),
        **operand_bytes(out, prep.arrays["count"], d),
        "spilled_bytes": _var(d, out["spilled_bytes"] * prep.arrays["count"], "B",
                              "DRAM bytes beyond the compulsory: refetches and partial-sum spills"),
        "out_onchip": _var(d, out["out_onchip"] > 0, "", "the result stays on chip for its consumers"),
        "transform": _var(d, transform, "", "the virtual -> physical step: what was split, merged, spilled"),
        "ready": _var(d, out["ready"], "cycle", "when the op's inputs were ready"),
        "start": _var(d, out["start"], "cycle", "start"),
        "body_start": _var(d, out["t1"], "cycle", "start of compute (after retiling)"),
        "end": _var(d, out["end"], "cycle", "end"),
        "span": _var(d, span, "cycle", "from when the op's tiles became free to its end"),
        "stage_cycles": _var(d, out["stage_cycles"], "cycle", "the op's time per inference once inferences "
                             "stream through its tiles (weights kept where they fit: dfit_nb.sim.streaming)"),
        "stage_compute_cycles": _var(d, out["stage_compute_cycles"], "cycle",
                                     "of stage_cycles: the tiles' work (array or vector unit, SRAM ports)"),
        "stage_noc_cycles": _var(d, out["stage_noc_cycles"], "cycle", "of stage_cycles: delivery over the mesh"),
        "stage_dram_bytes": _var(d, out["stage_dram_bytes"], "B", "DRAM bytes per streamed inference"),
        "stage_op": _var(d, prep.op[np.asarray(out.get("stage_lead", np.arange(len(prep.op))), np.int64)], "",
                         "the first op of the op's stage: a fused kernel's ops run on one region one after another "
                         "(layer-pipelined; the op itself otherwise)"),
        "retile_cycles": _var(d, out["retile_cycles"], "cycle", "moving the op's inputs from its producers' tiles "
                              "(and a dataflow switch)"),
        "macs": _var(d, out["macs"] * prep.arrays["count"], "MAC", "multiply-accumulates, all executions"),
        **{f"{m}_cycles": _var(d, cycles[:, i], "cycle", f"cycles attributable to {m}")
           for i, m in enumerate(MECHANISMS)},
        **{f"bytes_{k}": _var(d, lv[f"bytes_{k}"], "B", f"bytes at the {k} level, all executions")
           for k in ("sram", "noc", "dram", "retile")},
        **{f"energy_{k}_pj": _var(d, lv[f"energy_{k}"], "pJ", f"{k} energy, all executions")
           for k in KINDS},
        "energy_pj": _var(d, energy, "pJ", "energy, all executions"),
        "switch": _var(d, out["switch_cycles"] + out["switch_energy_pj"] + out["switch_bytes"] > 0, "",
                       "a dataflow switch is paid before the op (its re-layout is part of the retile)"),
        "switch_bytes": _var(d, out["switch_bytes"], "B", "bytes re-laid-out by the dataflow switch (in bytes_retile)"),
        "switch_cycles": _var(d, out["switch_cycles"], "cycle",
                              "cycles of the dataflow switch, reconfiguration included (in the retile phase)"),
        "switch_energy_pj": _var(d, out["switch_energy_pj"], "pJ",
                                 "energy of the dataflow switch, reconfiguration included (in energy_retile_pj)"),
        "evidence": _var(("op", "mechanism"), evidence, "1", "fraction of the op's span each mechanism needs"),
        **_extra_cycles(d, np.zeros(span.shape), np.zeros(span.shape)),
        **kernel_vars(prep, out, d),
    }
    return xr.Dataset(data, coords={"op": prep.op, "mechanism": list(MECHANISMS)}, attrs=attrs)


def op_kernels(prep: Any) -> np.ndarray:
    """Per op of a prepared table, the kernel it runs in (:mod:`dfit_nb.sim.kernels`; without kernels, its own)."""
    k = getattr(prep, "kernels", None)
    return k.kernel if k is not None else np.arange(len(prep.op))


def kernel_vars(prep: Any, out: dict[str, np.ndarray], d: tuple[str, ...]) -> dict[str, Any]:
    """Per op, the kernel it ran in (:mod:`dfit_nb.sim.kernels`) and what the kernel changed for it."""
    k = getattr(prep, "kernels", None)
    n = len(prep.op)
    kernel = op_kernels(prep)
    names = k.name[kernel] if k is not None else prep.primitive
    count = prep.arrays["count"]
    return {
        "kernel": _var(d, kernel.astype(np.int64), "1", "the kernel the op ran in (numbered in program order; "
                       "run.kernels)"),
        "kernel_name": _var(d, np.asarray(names).astype(str), "", "its kernel's name (an XLA fusion's with "
                            "fusion='compiler'; its ops' primitives otherwise)"),
        "fused": _var(d, out.get("fused", np.zeros(n)) > 0, "", "the op ran fused with others: its inputs from "
                      "its kernel's ops stayed on chip, one launch for the kernel"),
        "free": _var(d, (k.free if k is not None else np.zeros(n, bool)).astype(bool), "",
                     "folded into its kernel's indexing (a reshape, broadcast or convert): no compute or SRAM work"),
        "launch_cycles": _var(d, out["fixed_cycles"] * count, "cycle", "fixed cost (launch, the short-reduction "
                              "step) the op paid, all executions: once per kernel"),
        "hidden_cycles": _var(d, out.get("hidden_cycles", np.zeros(n)), "cycle",
                              "vector-unit compute hidden under its kernel's PE-array work, all executions"),
    }


def _transform_text(layout: np.ndarray, out: dict[str, np.ndarray], gemm: np.ndarray) -> np.ndarray:
    """``"mn 4x8 -> 16 tiles, merged 2:1, spilled 1.2 MB"`` per op (vectorized string building)."""
    gy, gx = out["gy"].astype(np.int64).astype(str), out["gx"].astype(np.int64).astype(str)
    tiles = out["tiles"].astype(np.int64).astype(str)
    head = np.where(gemm, np.char.add(np.char.add(np.char.add(layout.astype(str), " "), gy), np.char.add("x", gx)),
                    np.char.add("vector x", gy))
    text = np.char.add(np.char.add(head, " -> "), np.char.add(tiles, " tiles"))
    fold = out["fold"].astype(np.int64)
    text = np.where(fold > 1, np.char.add(np.char.add(text, ", merged "), np.char.add(fold.astype(str), ":1")), text)
    spill = out["spilled_bytes"]
    mb = np.char.mod("%.3g", spill / 1e6)
    return np.where(spill > 0, np.char.add(np.char.add(text, ", spilled "), np.char.add(mb, " MB")), text)


def regions_dataset(trace: Any, prep: Any, ops: xr.Dataset, attrs: dict[str, Any]) -> xr.Dataset:
    """Per-region (inclusive) totals, span and bottleneck."""
    names = [str(r) for r in trace.regions["region"].values] if hasattr(trace, "regions") else [""]
    names = [r for r in names if r == "" or (np.char.startswith(prep.region.astype(str), r).any())]
    mat = _membership(prep.region, names).astype(np.float64)
    cycles = np.stack([ops[f"{m}_cycles"].values for m in MECHANISMS], axis=1)
    span = ops["span"].values
    sums = mat @ cycles
    span_sum = mat @ span
    evidence = sums / np.where(span_sum > 0, span_sum, 1.0)[:, None]
    big = np.where(mat > 0, 1.0, np.nan)
    d = ("region",)
    with np.errstate(all="ignore"):
        first = np.nanmin(big * ops["start"].values, axis=1)
        last = np.nanmax(big * ops["end"].values, axis=1)
    data = {
        "n_ops": _var(d, mat.sum(axis=1).astype(np.int64), "1", "replayed ops in the region and below"),
        "start": _var(d, first, "cycle", "first op start"),
        "end": _var(d, last, "cycle", "last op end"),
        "macs": _var(d, mat @ ops["macs"].values, "MAC", "multiply-accumulates"),
        "energy_pj": _var(d, mat @ ops["energy_pj"].values, "pJ", "energy"),
        **{f"bytes_{k}": _var(d, mat @ ops[f"bytes_{k}"].values, "B", f"bytes at the {k} level")
           for k in ("sram", "noc", "dram", "retile")},
        **{f"{m}_cycles": _var(d, sums[:, i], "cycle", f"cycles attributable to {m}, summed over ops")
           for i, m in enumerate(MECHANISMS)},
        "evidence": _var(("region", "mechanism"), evidence, "1",
                         "mechanism cycles over the sum of the ops' spans"),
    }
    return xr.Dataset(data, coords={"region": np.array(names, dtype=object), "mechanism": list(MECHANISMS)},
                      attrs=attrs)


def link_names(tile_rows: int, tile_cols: int) -> list[str]:
    """Link groups in the order of the scheduler's link arrays."""
    return ([f"row{r}.east" for r in range(tile_rows)] + [f"row{r}.west" for r in range(tile_rows)]
            + [f"col{c}.south" for c in range(tile_cols)] + [f"col{c}.north" for c in range(tile_cols)])


def cube_dataset(prep: Any, out: dict[str, np.ndarray], ops: xr.Dataset, events: xr.Dataset, hw: Hardware,
                 regions: xr.Dataset, time_bins: int, attrs: dict[str, Any]) -> xr.Dataset:
    """Busy fraction, SRAM occupancy, NoC link load, power and the running kernel over time; the traffic mix by
    region."""
    tr, tc = int(hw.tile_rows), int(hw.tile_cols)
    sim = events["source"].values == "simulated"
    latency = float(np.max(out["end"])) if len(out["end"]) else 0.0
    edges = binning.time_edges(latency, time_bins)
    width = np.diff(edges)
    kind = events["kind"].values
    s, e = events["start"].values, events["end"].values
    group = events["tile_y"].values.astype(np.int64) * tc + events["tile_x"].values.astype(np.int64)
    comp = np.flatnonzero(sim & (kind == "compute"))
    busy = binning.busy_fraction(s[comp], e[comp], group[comp], tr * tc, edges)
    # resident bytes of each compute event's op, over its compute interval
    row = np.searchsorted(prep.op, events["op"].values[comp])
    resident = out["resident_bytes"][row]
    occ = binning.bin_intervals(s[comp], e[comp], resident * (e[comp] - s[comp]), group[comp], tr * tc, edges)
    occ = occ / width[:, None] / float(hw.sram_bytes)
    # NoC link groups: the retile phase and the delivery phase of each op
    n_links = 2 * tr + 2 * tc
    lr, ln = out["link_retile"][:, :n_links], out["link_noc"][:, :n_links]
    o_r, g_r = np.nonzero(lr)
    o_n, g_n = np.nonzero(ln)
    starts = np.concatenate([out["start"][o_r], out["t1"][o_n]])
    ends = np.concatenate([out["t1"][o_r], out["t1"][o_n] + out["noc_cycles"][o_n]])
    loads = binning.bin_intervals(starts, ends, np.concatenate([lr[o_r, g_r], ln[o_n, g_n]]),
                                  np.concatenate([g_r, g_n]), n_links, edges)
    loads = link_load(loads, width[:, None], hw, np)
    sel = np.flatnonzero(sim)
    energy = binning.bin_intervals(s[sel], e[sel], events["energy_pj"].values[sel], np.zeros(sel.size, np.int64), 1,
                                   edges)[:, 0]
    # difference-array binning leaves -1e-16 where nothing ran: clip the round-off
    busy, occ, loads, energy = (np.maximum(a, 0.0) for a in (busy, occ, loads, energy))
    clock_hz = attrs["clock_ghz"] * 1e9
    power = energy * 1e-12 / (width / clock_hz)
    # traffic mix: bytes by (region, tensor, level), all executions, regions inclusive
    mix = out["traffic"] * prep.arrays["count"]  # (tensor, level, ops)
    mix[0, 1] += out["retile_bytes"] + np.where(out["extra_noc_pj"] > 0, out["dram_extra_bytes"], 0.0)
    mix[0, 2] += out["dram_extra_bytes"]
    names = [str(r) for r in regions["region"].values]
    mat = _membership(prep.region, names).astype(np.float64)
    traffic = np.einsum("ro,tlo->rtl", mat, mix)
    t = ("time",)
    running = running_kernel(0.5 * (edges[:-1] + edges[1:]), op_kernels(prep), out["start"], out["end"])
    data = {
        "kernel": _var(t, running, "1", "the kernel running at the bin's middle (run.kernels; the latest started "
                       "where kernels overlap, -1 where none runs)"),
        "busy": _var(("time", "tile_y", "tile_x"), _grid(busy, tr, tc), "1",
                     "fraction of the bin each tile's PE array (or vector unit) computes"),
        "sram_occupancy": _var(("time", "tile_y", "tile_x"), _grid(occ, tr, tc), "1",
                               "SRAM in use (resident operand pieces) over the tile's SRAM: buffer pressure"),
        "link_load": _var(("time", "link"), loads, "1",
                          "load of each NoC link group's busiest link: bytes / (bin cycles x link bandwidth)"),
        "power_w": _var(t, power, "W", "power: simulated energy per bin over the bin's seconds"),
        "energy_pj": _var(t, energy, "pJ", "simulated energy spent in the bin"),
        "traffic": _var(("region", "tensor", "level"), traffic, "B",
                        "bytes by tensor kind and memory level, all executions (regions inclusive)"),
    }
    coords = {"time": edges[:-1], "time_end": ("time", edges[1:]), "tile_y": np.arange(tr), "tile_x": np.arange(tc),
              "link": link_names(tr, tc), "region": names, "tensor": list(TENSORS), "level": list(LEVELS)}
    ds = xr.Dataset(data, coords=coords, attrs={**attrs, "bin_cycles": float(width[0]) if width.size else 0.0})
    ds["time"].attrs = {"units": "cycle", "description": "bin start"}
    ds["time_end"].attrs = {"units": "cycle", "description": "bin end"}
    return ds


def _grid(arr: np.ndarray, tr: int, tc: int) -> np.ndarray:
    """(time, tiles in row-major y * tc + x) -> (time, tile_y, tile_x)."""
    return arr.reshape(arr.shape[0], tr, tc)


def summary_dataset(ops: xr.Dataset, events: xr.Dataset, hw: Hardware, inferences: int,
                    attrs: dict[str, Any], stream: dict[str, Any] | None = None) -> xr.Dataset:
    """Scalars: latency, energy, utilisation, traffic by level, the dominant bottleneck, and ``inferences``
    streamed back to back (``stream``: :func:`dfit_nb.sim.streaming.steady_state`)."""
    def total(name: str) -> float:  # the NaN-skipping sum on the array itself, without xarray's reduction wrapper
        return float(np.nansum(ops.variables[name].values))

    def highest(name: str) -> float:
        return float(np.nanmax(ops.variables[name].values)) if ops.sizes["op"] else 0.0

    latency = highest("end")
    clock_hz = attrs["clock_ghz"] * 1e9
    energy = total("energy_pj") * 1e-12
    macs = total("macs")
    peak = float(peak_macs_per_cycle(hw, np))
    cyc = np.array([total(f"{m}_cycles") for m in MECHANISMS])
    span = total("span")
    evidence = cyc / span if span > 0 else np.zeros(len(MECHANISMS))
    data = {
        "latency_cycles": _var((), latency, "cycle", "end of the last op"),
        "latency_s": _var((), latency / clock_hz, "s", "latency in seconds"),
        "energy_j": _var((), energy, "J", "energy of one call"),
        "inferences": _var((), inferences, "1", "inferences (calls of the function) streamed back to back"),
        "joules_per_inference": _var((), energy, "J", "energy of one inference (one call; weights loaded each "
                                     "time)"),
        "macs": _var((), macs, "MAC", "multiply-accumulates of one call"),
        "utilization": _var((), float(utilization(macs, latency, hw, np)), "1",
                            "MACs over the peak MACs the chip could do in the latency"),
        "peak_macs_per_cycle": _var((), peak, "MAC/cycle", "tiles x R x C"),
        **{f"{k}_bytes": _var((), total(f"bytes_{k}"), "B", f"bytes at the {k} level")
           for k in ("sram", "noc", "dram", "retile")},
        **{f"energy_{k}_j": _var((), total(f"energy_{k}_pj") * 1e-12, "J", f"{k} energy")
           for k in KINDS},
        "switches": _var((), int(total("switch")), "1", "dataflow switches paid (between adjacent GEMMs)"),
        "energy_switch_j": _var((), total("switch_energy_pj") * 1e-12, "J",
                                "dataflow-switch energy (part of energy_retile_j)"),
        "sections": _var((), highest("section") + 1 if ops.sizes["op"] else 0.0, "1",
                         "pipeline sections (layer-pipelined)"),
        "n_ops": _var((), ops.sizes["op"], "1", "ops replayed"),
        "n_events": _var((), int((events["source"].values == "simulated").sum()), "1", "simulated events"),
        **roof_variables(hw),
        "evidence": _var(("mechanism",), evidence, "1", "mechanism cycles over the sum of op spans"),
        **(stream_variables(stream, ops, clock_hz) if stream is not None else {}),
    }
    return xr.Dataset(data, coords={"mechanism": list(MECHANISMS)}, attrs=attrs)


def stream_variables(stream: dict[str, Any], ops: xr.Dataset, clock_hz: float) -> dict[str, Any]:
    """The summary's streaming scalars (:mod:`dfit_nb.sim.streaming`): throughput, steady state, fill, the stage
    that sets the pace."""
    w = int(stream["bottleneck_op"])
    region = str(ops["region"].values[w]) if w >= 0 else ""
    return {
        "throughput_inferences_per_s": _var((), stream["throughput_inferences_per_s"], "1/s",
                                            "inferences per second over the streamed inferences, fill included"),
        "steady_state_utilization": _var((), stream["steady_state_utilization"], "1",
                                         "an inference's MACs over the peak during one steady-state period"),
        "steady_state_period_s": _var((), stream["period_cycles"] / clock_hz, "s",
                                      "time between inferences once the pipeline is full"),
        "pipeline_fill_s": _var((), stream["pipeline_fill_s"], "s", "the first inference's latency"),
        "stream_s": _var((), stream["total_cycles"] / clock_hz, "s", "time the streamed inferences take"),
        "bottleneck_stage": _var((), w, "1", "op whose stage sets the steady-state period (-1: the DRAM channel, "
                                 "or a time-multiplexed machine's whole inference)"),
        "bottleneck_stage_region": _var((), region, "", "region of the bottleneck stage"),
        "bottleneck_stage_class": _var((), stream["bottleneck_class"], "",
                                       "what limits the bottleneck stage (dfit_nb.sim.streaming.STAGE_CLASSES, "
                                       "or 'inference')"),
    }


def roof_variables(hw: Hardware) -> dict[str, Any]:
    """The machine's roofs (:func:`dfit_nb.sim.machine.roofs`) as summary variables ``roof_<name>``: the roofline
    view plots these, so it never re-models the hardware."""
    from .hardware import field_vector
    from .machine import ROOFS

    with jax.enable_x64(True):
        values = {k: float(v) for k, v in jax.device_get(_roofs_program()(field_vector(hw))).items()}
    return {f"roof_{k}": _var((), values[k], *ROOFS[k]) for k in ROOFS}


@functools.cache
def _roofs_program() -> Any:
    """:func:`dfit_nb.sim.machine.roofs` jitted over a machine's field vector: one small compile per process,
    where calling it on the machine eagerly compiled each of its six jax.numpy operations (0.1-0.15 s in a fresh
    process's first replay)."""
    from .hardware import from_field_vector
    from .machine import roofs

    return jax.jit(lambda fields: roofs(from_field_vector(fields)))
