"""``Run``: a replay's events, cube, summary, per-op and per-region tables; saved without pickle.

Built on the host from the per-op records of :func:`dfit_nb.sim._replay.program`
with NumPy, vectorized over events (no Python loop over ops, tiles or events).

Bottlenecks
-----------
Each op's *span* runs from when its tiles became free (the previous op on
them ended) to its end, so the spans of a time-multiplexed run tile its
latency. The evidence is the
fraction of the span each mechanism needs: ``compute`` (the busiest tile's
PE/vector cycles), ``sram`` (its SRAM port cycles), ``dram`` (from the start of
the body to the end of its DRAM transfers, waiting for the shared channel
included), ``noc`` (delivery over the mesh plus retiling), and
``scheduling`` (the op's tiles idle, waiting on its inputs or a section
boundary, plus, when layer-pipelined, waiting for a producer to finish
streaming; an op waiting for tiles busy with other work is not idle time).
Overlapped mechanisms can each be near 1; the dominant mechanism is the
largest. A region sums its ops' mechanism cycles over their
spans.

Bottleneck classes
------------------
The playbook's five classes (:data:`CLASSES`), each with evidence per op,
region and run (``class_evidence``, a fraction of the span like the
mechanisms'):

* ``compute``: as above.
* ``memory``: the largest of its sub-classes ``sram``, ``dram`` and ``noc``
  (:data:`MEMORY_MECHANISMS`): they overlap, so the binding level, not
  their sum, is the time memory needs.
* ``scheduling``: as above.
* ``precision``: ``precision_cycles``, the cycles of the op's span that go
  away when the same program runs at a narrower word (a second run of it,
  e.g. priced by :func:`dfit_nb.precision` or replayed on
  ``hw.replace(word_bytes=1)``): the time attributable to the word width.
  0 means *not analysed* until :meth:`Run.with_precision` attaches that run.
* ``thermal``: ``thermal_cycles``, the cycles clock throttling added to the
  op's span per call (one run of the program) under sustained operation
  (:func:`dfit_nb.sim.thermal`); 0 means not analysed or never throttled
  until :meth:`Run.with_thermal` attaches the analysis.

``bottleneck_class`` is the class with the most evidence (ties: the order of
:data:`CLASSES`); ``bottleneck`` names the same class with memory resolved to
its sub-class, one of :data:`BOTTLENECKS`, so a run that was never analysed
for precision or heat keeps the five names ``compute``, ``sram``, ``dram``,
``noc``, ``scheduling`` it always had.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import jax
import numpy as np
import xarray as xr

from .. import _xarray
from .._files import open_tree, save_tree, text_as_objects, text_variable
from .._html import render
from .._version import __version__
from ..events import binning
from ..events.schema import KINDS, events_dataset
from . import streaming
from ._cost import hardware_attrs
from ._kernel_table import running_kernel
from .hardware import Hardware
from .machine import DATAFLOWS, link_load, peak_macs_per_cycle, utilization
from .mapping import LAYOUTS, LEVELS, TENSORS
from .schedule import tile_order

#: what one replay measures per op (the ``mechanism`` dimension of ``evidence``)
MECHANISMS = ("compute", "sram", "dram", "noc", "scheduling")
#: the memory class's sub-classes
MEMORY_MECHANISMS = ("sram", "dram", "noc")
#: the bottleneck classes (the ``mechanism_class`` dimension of ``class_evidence``)
CLASSES = ("compute", "memory", "scheduling", "precision", "thermal")
#: every value ``bottleneck`` takes: a class, memory named by its sub-class
BOTTLENECKS = ("compute", "sram", "dram", "noc", "scheduling", "precision", "thermal")
_PARTS = ("events", "cube", "summary", "ops", "regions")


def _var(dims: Any, values: Any, units: str, description: str) -> tuple[Any, Any, dict[str, str]]:
    return (dims, values, {"units": units, "description": description})


def provenance(trace: Any, hw: Hardware, policy: str, execution: str, fusion: str = "") -> dict[str, Any]:
    """What a saved result needs to be reproduced and compared: versions, machine, program, policy."""
    t = getattr(trace, "attrs", {})
    return {
        "dfit_nb_version": __version__, "jax_version": jax.__version__,
        "function": str(t.get("function", "")), "arg_shapes": str(t.get("arg_shapes", "")),
        "trace_mode": str(getattr(trace, "mode", "")), "dataflow": policy, "execution": execution,
        "clock_ghz": float(np.asarray(hw.clock_ghz)), **hardware_attrs(hw),
        "fusion": fusion,
    }


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


def _evidence(out: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Mechanism cycles ``(ops, 5)`` and spans ``(ops,)`` (see the module docstring)."""
    base = out["prev_free"]  # when the op's tiles became free: start = max(ready, prev_free, barrier) >= base
    t1 = out["t1"]
    has_dram = out["dram_end"] > out["dram_start"]
    body_end = np.maximum.reduce([t1 + out["compute_cycles"], t1 + out["sram_cycles"], t1 + out["noc_cycles"],
                                  np.where(has_dram, out["dram_end"], t1)])
    cycles = np.stack([
        out["compute_cycles"], out["sram_cycles"], np.where(has_dram, out["dram_end"] - t1, 0.0),
        out["noc_cycles"] + out["retile_cycles"],
        (out["start"] - base) + np.maximum(out["end"] - body_end, 0.0),
    ], axis=1)
    return cycles, out["end"] - base


def _membership(op_regions: np.ndarray, regions: list[str]) -> np.ndarray:
    """``(regions, ops)``: region is the op's region or one of its ancestors (inclusive rollup)."""
    op_regions = np.asarray(op_regions, dtype=str)
    mat = np.zeros((len(regions), len(op_regions)), dtype=bool)
    for i, r in enumerate(regions):  # one vectorized test per region (regions are few)
        mat[i] = (op_regions == r) | (np.char.startswith(op_regions, r + "/") if r else True)
    return mat


def build_run(trace: Any, prep: Any, out: dict[str, np.ndarray], hw: Hardware, codes: np.ndarray, policy: str,
              execution: str, *, time_bins: int, inferences: int, measured: bool | None) -> Run:
    """Assemble the :class:`Run` of one replay."""
    attrs = provenance(trace, hw, policy, execution, prep.fusion)
    clock = attrs["clock_ghz"]
    cols = expand_events(prep, out, hw, codes)
    events = events_dataset(cols, clock_ghz=clock, attrs=attrs)
    if measured is None:
        measured = "time_s" in prep.table and bool(np.isfinite(prep.table["time_s"].values).any())
    if measured:
        from ..events.measured import measured_events
        from ..events.schema import concat

        events = concat(events, measured_events(trace))
        events.attrs = attrs
    ops = ops_dataset(prep, out, codes, attrs)
    regions = regions_dataset(trace, prep, ops, attrs)
    cube = cube_dataset(prep, out, ops, events, hw, regions, time_bins, attrs)
    summary = summary_dataset(ops, events, hw, inferences, attrs, streaming.of_ops(ops, hw, inferences))
    ops, regions, summary = _classified(ops, regions, summary)
    cube = text_as_objects(cube)
    return Run(events=events, cube=cube, summary=summary, ops=ops, regions=regions, attrs=attrs)


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


def _extra_cycles(d: tuple[str, ...], precision: np.ndarray, thermal: np.ndarray) -> dict[str, Any]:
    return {
        "precision_cycles": _var(d, precision, "cycle", "cycles of the span attributable to the word width (0: not "
                                 "analysed; see Run.with_precision)"),
        "thermal_cycles": _var(d, thermal, "cycle", "cycles throttling added to the span per call under "
                               "sustained operation (0: not analysed or never throttled; see Run.with_thermal)"),
    }


def classify(evidence: np.ndarray, precision: np.ndarray, thermal: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                                        np.ndarray]:
    """Class evidence ``(n, 5)`` over :data:`CLASSES`, ``bottleneck_class`` and ``bottleneck`` (memory resolved to
    its sub-class) from the mechanisms' evidence ``(n, 5)`` over :data:`MECHANISMS` and the precision and thermal
    evidence ``(n,)`` (see the module docstring).

    >>> ev, cls, name = classify(np.array([[0.2, 0.1, 0.9, 0.3, 0.0]]), np.zeros(1), np.array([1.0]))
    >>> ev.round(2).tolist(), cls.tolist(), name.tolist()
    ([[0.2, 0.9, 0.0, 0.0, 1.0]], ['thermal'], ['thermal'])
    >>> classify(np.array([[0.2, 0.1, 0.9, 0.3, 0.0]]), np.zeros(1), np.zeros(1))[2].tolist()
    ['dram']
    """
    evidence = np.asarray(evidence, dtype=np.float64).reshape(-1, len(MECHANISMS))
    col = {m: evidence[:, i] for i, m in enumerate(MECHANISMS)}
    memory = np.stack([col[m] for m in MEMORY_MECHANISMS], axis=1)
    ev = np.stack([col["compute"], memory.max(axis=1), col["scheduling"], np.asarray(precision, np.float64).reshape(-1),
                   np.asarray(thermal, np.float64).reshape(-1)], axis=1)
    cls = np.asarray(CLASSES, dtype=object)[np.argmax(ev, axis=1)]
    sub = np.asarray(MEMORY_MECHANISMS, dtype=object)[np.argmax(memory, axis=1)]
    return ev, cls.astype(str), np.where(cls == "memory", sub, cls).astype(str)


def _class_vars(d: tuple[str, ...], evidence: np.ndarray, precision: np.ndarray, thermal: np.ndarray,
                what: str) -> dict[str, Any]:
    """``bottleneck``, ``bottleneck_class`` and ``class_evidence`` over dims ``d`` (``()`` for the run)."""
    ev, cls, name = classify(evidence, precision, thermal)
    if not d:
        ev, cls, name = ev[0], cls[0], name[0]
    return {
        "bottleneck": _var(d, name, "", f"dominant mechanism {what}: " + " | ".join(BOTTLENECKS)
                           + " (memory named by its level)"),
        "bottleneck_class": _var(d, cls, "", f"dominant bottleneck class {what}: " + " | ".join(CLASSES)),
        "class_evidence": _var((*d, "mechanism_class"), ev, "1",
                               "evidence of each bottleneck class: its cycles over the span (memory: its largest "
                               "sub-class)"),
    }


def _classified(ops: xr.Dataset, regions: xr.Dataset, summary: xr.Dataset) -> tuple[xr.Dataset, ...]:
    """The bottleneck-class variables of ops, regions and summary from the ops' mechanism evidence and their
    ``precision_cycles`` and ``thermal_cycles`` (regions and the run sum cycles over the sum of spans)."""
    span = ops["span"].values.astype(np.float64)
    extra = np.stack([ops["precision_cycles"].values, ops["thermal_cycles"].values], axis=1).astype(np.float64)

    def share(cycles: np.ndarray, spans: np.ndarray) -> np.ndarray:
        return cycles / np.where(spans > 0, spans, 1.0)[..., None]

    op_extra = share(extra, span)
    mat = _membership(ops["region"].values, [str(r) for r in regions["region"].values]).astype(np.float64)
    reg_extra = share(mat @ extra, mat @ span)
    run_extra = share(extra.sum(axis=0), np.asarray(span.sum()))
    ops = _extended(ops, _class_vars(("op",), ops["evidence"].values, op_extra[:, 0], op_extra[:, 1], "of the op"))
    regions = _extended(regions, {
        **_class_vars(("region",), regions["evidence"].values, reg_extra[:, 0], reg_extra[:, 1], "over the region's "
                      "ops"),
        **{f"{k}_cycles": _var(("region",), (mat @ extra)[:, i], "cycle", f"cycles attributable to {k}, summed "
                               "over ops") for i, k in enumerate(("precision", "thermal"))}})
    summary = _extended(summary, {
        **_class_vars((), summary["evidence"].values, run_extra[0], run_extra[1], "over all ops"),
        **{f"{k}_cycles": _var((), float(extra[:, i].sum()), "cycle", f"cycles attributable to {k}, summed over "
                               "ops") for i, k in enumerate(("precision", "thermal"))}})
    return ops, regions, summary


def _extended(ds: xr.Dataset, new: dict[str, tuple[Any, Any, dict[str, str]]]) -> xr.Dataset:
    """``ds`` with the variables ``new`` (:func:`_var` tuples) and the ``mechanism_class`` coordinate, its text as
    Python strings (:func:`~dfit_nb._files.text_as_objects`).

    ``ds`` is consistent already and the new variables are checked against its sizes, so they go to xarray's
    constructor of a consistent Dataset (:func:`dfit_nb._xarray.consistent`) instead of the public one,
    which aligns every variable again (``_extended_public``: the reference, and the path where this xarray's
    internals refuse; ``tests/sim/test_replay.py`` checks both identical and that the direct one is taken)."""
    try:
        return _extended_direct(ds, new)
    except (AttributeError, TypeError, ValueError):
        return _extended_public(ds, new)


def _extended_public(ds: xr.Dataset, new: dict[str, tuple[Any, Any, dict[str, str]]]) -> xr.Dataset:
    """:func:`_extended` through the public ``xr.Dataset`` constructor, in one call (``assign``,
    ``assign_coords`` and the text conversion would each rebuild the whole Dataset)."""
    data = {n: text_variable(ds.variables[n]) for n in ds.data_vars}
    data.update({n: text_variable(xr.Variable(dims, np.asarray(values), attrs)) for n, (dims, values, attrs) in
                 new.items()})
    coords = {n: text_variable(ds.variables[n]) for n in ds.coords}
    coords["mechanism_class"] = xr.Variable(("mechanism_class",), np.asarray(CLASSES, dtype=object))
    return xr.Dataset(data, coords=coords, attrs=ds.attrs)


def _extended_direct(ds: xr.Dataset, new: dict[str, tuple[Any, Any, dict[str, str]]]) -> xr.Dataset:
    sizes = dict(ds.sizes)
    sizes["mechanism_class"] = len(CLASSES)
    indexes: dict[str, Any] = {}
    coords: dict[str, Any] = {}
    for name in ds.coords:
        v, index = ds.variables[name], ds.xindexes.get(name)
        if index is None:
            coords[name] = text_variable(v)
        elif v.dtype.kind == "U":  # an index of fixed-width text: its index is rebuilt over the Python strings
            indexes[name] = xr.indexes.PandasIndex(v.values.astype(object), name)
            coords[name] = indexes[name].create_variables()[name]
        else:
            indexes[name], coords[name] = index, v
    classes = xr.indexes.PandasIndex(np.asarray(CLASSES, dtype=object), "mechanism_class")
    indexes["mechanism_class"] = classes
    coords["mechanism_class"] = classes.create_variables()["mechanism_class"]
    data = {n: text_variable(ds.variables[n]) for n in ds.data_vars}
    for name, (dims, values, attrs) in new.items():
        v = text_variable(xr.Variable(dims, np.asarray(values), attrs))
        for dim, size in zip(v.dims, v.shape, strict=True):
            if sizes.get(dim) != size:
                raise ValueError(f"{name}: {dim} has {size} values, not {sizes.get(dim)}")
        data[name] = v
    return _xarray.consistent({**data, **coords}, set(coords), sizes, dict(ds.attrs), indexes)


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


class Run:
    """A replay: events, the tile x time cube, the summary, per-op and per-region results.

    Attributes
    ----------
    events : xarray.Dataset
        Dim ``event`` (:mod:`dfit_nb.events.schema`): one row per (op, tile, kind).
    cube : xarray.Dataset
        ``busy`` and ``sram_occupancy`` over (``time``, ``tile_y``, ``tile_x``),
        ``link_load`` over (``time``, ``link``), ``power_w`` over ``time``,
        ``traffic`` over (``region``, ``tensor``, ``level``).
    summary : xarray.Dataset
        Scalars: ``latency_cycles``, ``latency_s``, ``energy_j``,
        ``joules_per_inference``, ``utilization``, traffic by level, ``bottleneck``.
    ops : xarray.Dataset
        Dim ``op``: the mapping (virtual layout, physical tiles, ``transform``),
        timing, traffic, energy, ``bottleneck`` and ``evidence``, and the
        ``kernel`` each op ran in.
    kernels : xarray.Dataset
        Dim ``kernel``: the ops rolled up to the kernels the chip ran (a property).
    regions : xarray.Dataset
        Dim ``region`` (inclusive): totals, span, ``bottleneck``, ``evidence``.
    attrs : dict
        Provenance (also on every Dataset).
    """

    def __init__(self, *, events: xr.Dataset, cube: xr.Dataset, summary: xr.Dataset, ops: xr.Dataset,
                 regions: xr.Dataset, attrs: dict[str, Any]) -> None:
        self.events, self.cube, self.summary, self.ops, self.regions = events, cube, summary, ops, regions
        self.attrs = dict(attrs)

    @property
    def kernels(self) -> xr.Dataset:
        """The kernels the chip ran (:mod:`dfit_nb.sim.kernels`), dim ``kernel``: member ops, start, end, bytes
        per level, energy, launch cycles, bottleneck (:func:`dfit_nb.sim._kernel_table.kernels_dataset`)."""
        from ._kernel_table import kernels_dataset

        return kernels_dataset(self.ops)

    @property
    def mapping(self) -> xr.Dataset:
        """The virtual -> physical transformation per op (like capture's lowering map)."""
        return self.ops[["region", "primitive", "layout", "gy", "gx", "virtual_tiles", "alloc", "tiles",
                         "tile_offset", "section", "fold", "spilled_bytes", "out_onchip", "transform"]]

    def streamed(self, inferences: int) -> xr.Dataset:
        """The summary's streaming scalars for ``inferences`` streamed back to back (throughput, steady-state
        utilisation and period, fill, the pacing stage), from this run's per-op records
        (:mod:`dfit_nb.sim.streaming`): what ``replay(..., inferences=...)`` gives, without replaying.

        >>> import jax.numpy as jnp, dfit_nb
        >>> from dfit_nb.sim import presets
        >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
        >>> run = dfit_nb.replay(t, presets.get("npu_like"))
        >>> s = run.streamed(10)
        >>> round(float(s["stream_s"] / run.summary["latency_s"]), 9)   # time-multiplexed: one after another
        10.0
        """
        from .hardware import from_provenance

        if not isinstance(inferences, (int, np.integer)) or isinstance(inferences, bool) or inferences < 1:
            raise ValueError(f"inferences must be a whole number >= 1, got {inferences!r}")
        hw = from_provenance(self.attrs)
        data = stream_variables(streaming.of_ops(self.ops, hw, int(inferences)), self.ops,
                                float(self.attrs["clock_ghz"]) * 1e9)
        return xr.Dataset({**data, "inferences": _var((), int(inferences), "1", "inferences streamed")},
                          attrs=self.attrs)

    def thermal(self, inferences: int = 1000, **options: Any) -> xr.Dataset:
        """Temperatures and throttling of ``inferences`` calls back to back (:func:`dfit_nb.sim.thermal`)."""
        from ._thermal import thermal

        return thermal(self, inferences, **options)

    def with_thermal(self, analysis: xr.Dataset) -> Run:
        """A copy whose ``thermal`` bottleneck class carries ``analysis`` (from :meth:`thermal`): each op's
        ``thermal_cycles``, the cycles throttling added to its span per call.

        Examples
        --------
        >>> import jax.numpy as jnp, dfit_nb
        >>> from dfit_nb.sim import presets
        >>> run = dfit_nb.replay(dfit_nb.capture(lambda a: a @ a, jnp.ones((64, 64))), presets.get("npu_like"))
        >>> hw = presets.get("npu_like").replace(thermal_resistance_k_per_w=1e3, heat_capacity_j_per_k=1e-6,
        ...                                      throttle_clock_factor=0.25)  # a toy machine that overheats
        >>> hot = run.with_thermal(run.thermal(10**5, steps=64, hw=hw))
        >>> hot.summary["bottleneck"].item(), run.summary["bottleneck"].item()
        ('thermal', 'dram')
        """
        from ._thermal import ThermalError

        if not isinstance(analysis, xr.Dataset) or "thermal_cycles" not in analysis or "op" not in analysis.dims:
            raise ThermalError(f"analysis must be the Dataset of Run.thermal / dfit_nb.sim.thermal (with "
                               f"'thermal_cycles' over 'op'), got {describe_type(analysis)}")
        ops = self.ops["op"].values
        if not np.array_equal(np.asarray(analysis["op"].values, dtype=str), np.asarray(ops, dtype=str)):
            raise ThermalError("the thermal analysis is of another run (its ops differ): run it on this one")
        return self._with_cycles("thermal_cycles", analysis["thermal_cycles"].values)

    def with_precision(self, narrower: Run) -> Run:
        """A copy whose ``precision`` bottleneck class carries the time the word width costs: per op, the span
        this run spends beyond ``narrower``'s (the same program priced at a narrower word, e.g.
        ``dfit_nb.replay(trace, hw.replace(word_bytes=1))``), never below 0.

        Examples
        --------
        >>> import jax.numpy as jnp, dfit_nb
        >>> from dfit_nb.sim import presets
        >>> trace = dfit_nb.capture(lambda a: a @ a, jnp.ones((64, 64)))
        >>> wide = dfit_nb.replay(trace, presets.get("eyeriss_like"))  # 2-byte words
        >>> narrow = dfit_nb.replay(trace, presets.get("eyeriss_like").replace(word_bytes=1))
        >>> round(float(wide.with_precision(narrow).summary["class_evidence"].sel(mechanism_class="precision")), 2)
        0.49
        """
        if not isinstance(narrower, Run):
            raise ValueError(f"narrower must be a Run (the same program at a narrower word), got "
                             f"{type(narrower).__name__}")
        if not self.comparable(narrower) or not np.array_equal(np.asarray(narrower.ops["op"].values, dtype=str),
                                                                 np.asarray(self.ops["op"].values, dtype=str)):
            raise ValueError("narrower replays another program (function, argument shapes or ops differ): replay "
                             "the same trace at the narrower word")
        saved = np.maximum(self.ops["span"].values - narrower.ops["span"].values, 0.0)
        return self._with_cycles("precision_cycles", saved)

    def _with_cycles(self, name: str, cycles: np.ndarray) -> Run:
        ops = self.ops.copy()
        zeros = np.zeros(ops.sizes["op"])
        # a run saved before the bottleneck classes has neither: start both from "not analysed"
        ops = ops.assign({k: v for k, v in _extra_cycles(("op",), zeros, zeros).items() if k not in ops})
        ops[name] = (("op",), np.asarray(cycles, dtype=np.float64), dict(ops[name].attrs))
        ops, regions, summary = _classified(ops, self.regions, self.summary)
        return Run(events=self.events, cube=self.cube, summary=summary, ops=ops, regions=regions, attrs=self.attrs)

    def comparable(self, other: Run) -> bool:
        """True when both runs replay the same program (function and argument shapes)."""
        keys = ("function", "arg_shapes")
        return all(self.attrs.get(k) == other.attrs.get(k) for k in keys)

    def to_datatree(self) -> xr.DataTree:
        """The run as one ``xarray.DataTree``."""
        return xr.DataTree.from_dict({"/": xr.Dataset(attrs=self.attrs),
                                      **{f"/{p}": getattr(self, p) for p in _PARTS}})

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write to ``path`` (netCDF4; a ``.zarr`` path for Zarr), atomically."""
        return save_tree(self.to_datatree(), path)

    def to_perfetto(self, path: str | os.PathLike[str], **options: Any) -> Path:
        """Chrome trace-event JSON for Perfetto UI / chrome://tracing (see :func:`dfit_nb.events.perfetto`), with a
        ``kernels`` track above the tiles' (:attr:`kernels`).

        A file at ``path`` that dfit_nb did not write is refused (:class:`dfit_nb.errors.SaveRefusedError`, before
        any work) unless ``overwrite=True`` is passed; a trace dfit_nb wrote is replaced."""
        from ..events.perfetto import to_perfetto

        options.setdefault("kernels", self.kernels)
        return to_perfetto(self.events, path, clock_ghz=self.attrs["clock_ghz"], chip=self.attrs["hardware"],
                           link_load=self.cube["link_load"], **options)

    def __repr__(self) -> str:
        s = self.summary
        return (f"<dfit_nb.Run {self.attrs.get('function', '?')} on {self.attrs.get('hardware')} "
                f"({self.attrs.get('execution')}, {self.attrs.get('dataflow')}): "
                f"{float(s['latency_s']) * 1e6:.4g} us, {float(s['energy_j']) * 1e3:.4g} mJ, "
                f"util {float(s['utilization']):.1%}, bottleneck {s['bottleneck'].item()}, "
                f"{int(s['n_events'])} events>")

    def _repr_html_(self) -> str:
        s = self.summary
        rows = [
            ("latency", f"{float(s['latency_cycles']):,.0f} cycles = {float(s['latency_s']) * 1e6:.4g} us"),
            ("energy", f"{float(s['energy_j']) * 1e3:.4g} mJ ({float(s['joules_per_inference']) * 1e3:.4g} mJ per "
                       "inference)"),
            ("utilization", f"{float(s['utilization']):.2%}"),
            ("traffic", ", ".join(f"{k} {float(s[f'{k}_bytes']) / 1e6:.3g} MB"
                                  for k in ("sram", "noc", "retile", "dram"))),
            ("bottleneck", f"{s['bottleneck'].item()} ("
             + ", ".join(f"{m} {float(v):.0%}" for m, v in zip(MECHANISMS, s["evidence"].values, strict=True))
             + "".join(f", {c} {float(s['class_evidence'].sel(mechanism_class=c)):.0%}"
                       for c in ("precision", "thermal") if _analysed(s, c))
             + ")"),
            ("events", f"{int(s['n_events']):,}"),
        ]
        return render("key_values.html.j2", title=repr(self), rows=rows)


def describe_type(obj: Any) -> str:
    """``obj`` as an error names it: an ``xarray.Dataset`` with its variables, else its type."""
    if isinstance(obj, xr.Dataset):
        return f"a Dataset of {', '.join(map(str, list(obj.data_vars)[:6]))}{', ...' if len(obj.data_vars) > 6 else ''}"
    return type(obj).__name__


def _analysed(summary: xr.Dataset, cls: str) -> bool:
    """Whether the run carries a ``cls`` analysis (precision and thermal are shown once attached)."""
    return "class_evidence" in summary and float(summary[f"{cls}_cycles"]) > 0


def load_run(path: str | os.PathLike[str]) -> Run:
    """Load a run written by :meth:`Run.save` (no code is executed on load).

    Examples
    --------
    >>> import os, tempfile, jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import presets
    >>> run = dfit_nb.replay(dfit_nb.capture(lambda a: a @ a, jnp.ones((32, 32))), presets.get("npu_like"))
    >>> back = dfit_nb.load_run(run.save(os.path.join(tempfile.mkdtemp(), "r.nc")))
    >>> back.events.identical(run.events)
    True
    """
    tree = open_tree(path, "run", _PARTS, foreign={"lowering": "it looks like a trace: use dfit_nb.load_trace"})
    parts = {p: tree[p].to_dataset() for p in _PARTS}
    return Run(**parts, attrs=dict(tree.attrs))
