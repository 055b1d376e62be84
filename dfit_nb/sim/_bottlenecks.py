"""The bottleneck classification of a replay: each op's mechanisms, their evidence, and the classes they roll into.

Used by :mod:`dfit_nb.sim.run` (a run's ops, regions and summary, and a run's precision and thermal analyses
attached later) and by the Datasets a replay builds (:mod:`dfit_nb.sim._run_tables`).

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

from typing import Any

import numpy as np
import xarray as xr

from .._files import text_variable
from .._runtime import datasets as _xarray

#: what one replay measures per op (the ``mechanism`` dimension of ``evidence``)
MECHANISMS = ("compute", "sram", "dram", "noc", "scheduling")
#: the memory class's sub-classes
MEMORY_MECHANISMS = ("sram", "dram", "noc")
#: the bottleneck classes (the ``mechanism_class`` dimension of ``class_evidence``)
CLASSES = ("compute", "memory", "scheduling", "precision", "thermal")
#: every value ``bottleneck`` takes: a class, memory named by its sub-class
BOTTLENECKS = ("compute", "sram", "dram", "noc", "scheduling", "precision", "thermal")


def _var(dims: Any, values: Any, units: str, description: str) -> tuple[Any, Any, dict[str, str]]:
    return (dims, values, {"units": units, "description": description})


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
    constructor of a consistent Dataset (:func:`dfit_nb._runtime.datasets.consistent`) instead of the public one,
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
