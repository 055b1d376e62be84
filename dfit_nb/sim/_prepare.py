"""Preparing a replay: a captured program's op table as the arrays the replay programs take.

:func:`prepare` (host, cached on the trace): the leaf ops that run, in program order (a topological order:
every edge runs forward), with their GEMM view, operand sizes, which operands producers feed, each op's
producers and the kernels they form; :func:`padded` pads them to the op and producer-slot buckets one compiled
program serves; :func:`dataflow_per_op` turns a replay's ``dataflow`` argument (a style, per-op names or a
Policy) into per-op codes. The one-machine replay (:mod:`dfit_nb.sim._replay`), batches
(:mod:`dfit_nb.sim._batch`), the selection and the shape studies all start here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import _operands
from .._runtime.padding import padded_count
from ..errors import DfitError
from . import kernels, mapping
from ._optable import (
    ITEMSIZE_COLUMNS,
    CostInputError,
    alone_arrays,
    dataflow_codes,
    input_table,
    op_counts,
    operand_itemsizes,
    ops_arrays,
    whole_elements,
)
from .hardware import FIELDS, Hardware
from .kernels import Kernels
from .machine import DATAFLOWS

#: what ``replay(trace, hw, dataflow)`` takes by name: a single style for every GEMM, or the verified hybrid
REPLAY_DATAFLOWS = (*DATAFLOWS, "hybrid")


class ReplayError(DfitError, ValueError):
    """The trace, hardware or options cannot be replayed."""


@dataclasses.dataclass(frozen=True)
class Prepared:
    """The ops a replay schedules, as arrays (one row per op, program order)."""

    op: np.ndarray  # op ids in trace.ops
    table: Any  # the replayed rows of trace.ops (xarray.Dataset)
    region: np.ndarray
    primitive: np.ndarray
    arrays: dict[str, np.ndarray]  # float64 model inputs
    preds: np.ndarray  # (ops, P) row indices of producers, -1 padding
    pred_bytes: np.ndarray  # (ops, P) bytes each producer passes (program dtype)
    kernels: Kernels | None = None  # which ops run as one kernel (dfit_nb.sim.kernels)
    # (reads, 3): (row, operand position, argument) of each program argument an op reads as it is (none known in
    # traces saved before the capture recorded them)
    arg_reads: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 3), np.int64))
    # (edges, 3): (consumer row, producer row, operand position) of every edge between replayed ops, and the
    # bytes each passes (program dtype)
    feeds: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 3), np.int64))
    feed_bytes: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    # the bytes (program dtype) of every input of every op, ragged: op i's are in_bytes[in_start[i]:in_start[i + 1]]
    # (dfit_nb._operands.input_table)
    in_start: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(1, np.int64))
    in_bytes: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    # per op, the length of the rows it reduces its first input over (dfit_nb._operands.reduced_row), 0 if none
    reduced_row: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))

    def input_bytes(self, row: np.ndarray, position: np.ndarray) -> np.ndarray:
        """Bytes (program dtype) of input ``position`` of each op ``row`` (0 where it has no such input)."""
        return _operands.input_bytes_at(self.in_start, self.in_bytes, row, position)

    @property
    def fusion(self) -> str:
        """The fusion mode the kernels were grouped by."""
        return self.kernels.mode if self.kernels is not None else "none"


def prepare(trace: Any, fusion: str | None = None, split: bool = False) -> Prepared:
    """The replayable ops of ``trace`` grouped into kernels by ``fusion`` (:data:`dfit_nb.sim.kernels.FUSION_MODES`;
    default :data:`~dfit_nb.sim.kernels.DEFAULT_FUSION`), cached on the trace object per mode. ``split``: the
    machine's compiler ends a kernel at a reduction over rows (:func:`dfit_nb.sim.kernels.splits_rows` of the
    machine the ops are replayed on; only the rules read it)."""
    mode = kernels.check_mode(fusion)
    key = f"{mode}/split" if split and mode == "rules" else mode
    cached = getattr(trace, "_dfit_replay_prepared", None)
    store = cached if isinstance(cached, dict) else {}
    if isinstance(store.get(key), Prepared):
        return store[key]
    base = store.get("")  # the ops before kernels, shared by every mode
    if not isinstance(base, Prepared):
        base = _prepare_ops(trace)
    prepared = with_kernels(base, mode, trace, split)
    store.update({"": base, key: prepared})
    try:
        trace._dfit_replay_prepared = store
    except AttributeError:  # a read-only object: just do not cache
        pass
    return prepared


def with_kernels(prep: Prepared, fusion: str, trace: Any = None, split: bool = False) -> Prepared:
    """``prep`` with its ops grouped into kernels by ``fusion``: the kernel columns the model reads (``kernel``,
    ``kernel_size``, ``payer``, ``free``, ``internal``, ``kernel_ws``, ``kernel_row``, ``kernel_weight``,
    ``shared_reads``) added to
    its arrays (``split`` as for :func:`prepare`)."""
    lowering = getattr(trace, "lowering", None)
    known = None
    if lowering is not None and "fusion" in getattr(lowering, "coords", {}):
        known = lowering["fusion"].values
    table = {"primitive": prep.primitive, "count": prep.arrays["count"], "gemm": prep.arrays["gemm"],
             "elems_in": prep.arrays["elems_in"], "elems_out": prep.arrays["elems_out"],
             "reduced_row": prep.reduced_row, **{d: prep.arrays[d] for d in ("m", "k", "n", "batch")},
             **{c: prep.table[c].values for c in ("op_class", "fusion", "folded_reason") if c in prep.table}}
    try:
        k = kernels.group(table, prep.preds, fusion, known, split)
    except kernels.FusionError as err:
        raise ReplayError(str(err)) from None
    # a reduction over its input's last axis reduces across the vector unit's lanes (machine.reduction_tree_cycles)
    # and may loop over its rows (machine.row_rereads): the rows' length, from the (possibly rescaled) elements;
    # the column exists only where a program has one
    row_reduce = kernels.reduced_rows(table, np.asarray(table.get("op_class", np.full(len(prep.op), ""))).astype(str)
                                      == "reduction")
    extra = {"row_reduce": row_reduce} if (row_reduce > 1).any() else {}
    arrays = {**{key: v for key, v in prep.arrays.items() if key != "row_reduce"}, **extra,
              "kernel": k.kernel.astype(np.float64), "kernel_size": k.size.astype(np.float64),
              "shared_reads": shared_reads(k.kernel, prep.preds),
              **shared_arguments(k.kernel, prep.arg_reads, prep.input_bytes(*prep.arg_reads[:, :2].T),
                                 prep.arrays["gemm"]),
              "payer": k.payer.astype(np.float64), "free": k.free.astype(np.float64),
              "internal": k.internal.astype(np.float64), "kernel_ws": k.working_set.astype(np.float64),
              "kernel_row": k.row.astype(np.float64), "kernel_weight": k.weight.astype(np.float64),
              "kernel_in": kernel_inputs(k.kernel, prep)}
    return dataclasses.replace(prep, arrays=arrays, kernels=k)


def kernel_inputs(kernel: np.ndarray, prep: Prepared, arg_scale: np.ndarray | None = None) -> np.ndarray:
    """Per op, the bytes (program dtype) its kernel reads from outside itself, each tensor once: program
    arguments and other kernels' results. A kernel that cannot keep its rows on chip reads them again for each
    reduction over them (:func:`dfit_nb.sim.machine.row_rereads`). ``arg_scale``: per op, a factor on the
    argument bytes it reads (a rescaled program's; producers' bytes are ``prep.pred_bytes``, rescaled already)."""
    kernel = np.asarray(kernel, np.int64)
    n = len(kernel)
    op, slot = np.nonzero(prep.preds >= 0)
    producer = prep.preds[op, slot]
    outside = kernel[producer] != kernel[op]
    arg_row, arg_pos, arg = np.asarray(prep.arg_reads, np.int64).reshape(-1, 3).T
    first_source = int(arg.max()) + 1 if arg.size else 0
    arg_bytes = prep.input_bytes(arg_row, arg_pos) * (1.0 if arg_scale is None else arg_scale[arg_row])
    row = np.concatenate([arg_row, op[outside]])
    source = np.concatenate([arg, first_source + producer[outside]])
    # a producer's pred_bytes sum the operands it feeds the op (x * x: twice); its result is read once
    fed = np.minimum(prep.pred_bytes[op[outside], slot[outside]], prep.arrays["bytes_written"][producer[outside]])
    nbytes = np.concatenate([arg_bytes, fed])
    out = np.zeros(n)
    if not row.size:
        return out
    # one read per (kernel, tensor): the largest of its reads
    key = kernel[row] * (int(source.max()) + 1) + source
    uniq, inverse = np.unique(key, return_inverse=True)
    per = np.zeros(uniq.size)
    np.maximum.at(per, inverse.reshape(-1), nbytes)
    owner = np.zeros(uniq.size, np.int64)
    owner[inverse.reshape(-1)] = kernel[row]
    return np.bincount(owner, weights=per, minlength=n)[kernel]


def shared_reads(kernel: np.ndarray, preds: np.ndarray) -> np.ndarray:
    """Per op, a bitmask of its producer slots (bit ``s``: ``preds[:, s]``) whose result an earlier op of the same
    kernel already reads from outside the kernel: a fused kernel brings a tensor on chip once, however many of
    its ops use it (a softmax's max and subtract read the same scores). As float64 (exact for up to 52 slots).

    >>> shared_reads(np.array([0, 1, 1]), np.array([[-1, -1], [0, -1], [0, 1]])).tolist()
    [0.0, 0.0, 1.0]
    """
    n, width = preds.shape
    if width > 52:
        raise ReplayError(f"an op has {width} producers; the replay handles at most 52")
    out = np.zeros(n)
    kernel = np.asarray(kernel, np.int64)
    op, slot = np.nonzero(preds >= 0)  # in program order, then slot order
    producer = preds[op, slot]
    outside = kernel[producer] != kernel[op]
    op, slot, producer = op[outside], slot[outside], producer[outside]
    # the first read of each (kernel, producer) brings it in; every later one finds it there
    _, first = np.unique(kernel[op] * n + producer, return_index=True)
    later = np.ones(op.size, bool)
    later[first] = False
    np.add.at(out, op[later], 2.0 ** slot[later])
    return out


def shared_arguments(kernel: np.ndarray, arg_reads: np.ndarray, arg_bytes: np.ndarray, gemm: np.ndarray
                     ) -> dict[str, np.ndarray]:
    """What each op reads of a program argument that an earlier op of its kernel (or an earlier operand of its
    own) already brought on chip: a fused kernel loads an argument once, however many of its ops use it (a
    softmax of a program input reads it for its max and again for its subtract). ``ext_shared``: those bytes of
    a non-GEMM op (program dtype, at most its external reads); ``lhs_shared``, ``rhs_shared``: 1 where a GEMM's
    operand is such an argument. The model takes them off the op's DRAM reads only where its kernel runs fused.

    ``arg_bytes``: the bytes of each read (``Prepared.input_bytes`` of its op and operand position).

    >>> reads = np.array([[0, 0, 7], [1, 0, 7], [1, 1, 3]])  # op 0 reads argument 7; op 1 reads 7 and 3
    >>> out = shared_arguments(np.array([0, 0]), reads, np.array([16.0, 16.0, 16.0]), np.zeros(2))
    >>> out["ext_shared"].tolist(), out["lhs_shared"].tolist()
    ([0.0, 16.0], [0.0, 0.0])
    """
    row, position, arg = np.asarray(arg_reads, np.int64).reshape(-1, 3).T
    return _later_reads(kernel, row, position, arg, np.asarray(arg_bytes, np.float64).reshape(-1), gemm)


def _later_reads(kernel: np.ndarray, row: np.ndarray, position: np.ndarray, source: np.ndarray,
                 nbytes: np.ndarray, gemm: np.ndarray) -> dict[str, np.ndarray]:
    """``ext_shared`` / ``lhs_shared`` / ``rhs_shared`` (see :func:`shared_arguments`) of reads of ``source``
    tensors from outside the kernel: op ``row`` reads ``nbytes`` of ``source`` as its input ``position``; the
    first read of each (kernel, source), in program order then operand order, brings it in."""
    n = len(kernel)
    out = {"ext_shared": np.zeros(n), "lhs_shared": np.zeros(n), "rhs_shared": np.zeros(n)}
    if not len(row):
        return out
    kernel = np.asarray(kernel, np.int64)
    order = np.lexsort((position, row))
    row, position, source, nbytes = row[order], position[order], source[order], nbytes[order]
    _, first = np.unique(kernel[row] * (int(source.max()) + 1) + source, return_index=True)
    later = np.ones(row.size, bool)
    later[first] = False
    gemm_op = np.asarray(gemm)[row] > 0
    out["lhs_shared"][row[later & gemm_op & (position == 0)]] = 1.0
    out["rhs_shared"][row[later & gemm_op & (position == 1)]] = 1.0
    vector = later & ~gemm_op
    np.add.at(out["ext_shared"], row[vector], nbytes[vector])
    return out


@dataclasses.dataclass(frozen=True)
class Priced:
    """The ops :func:`dfit_nb.sim.cost` and :func:`dfit_nb.sim.sweep` price, as the model's inputs."""

    arrays: dict[str, np.ndarray]  # the model's inputs, per execution (float64)
    coord: np.ndarray  # op ids
    count: np.ndarray  # executions per call
    fusion: str  # how the ops were grouped into kernels ("none": each op alone)
    kernel: np.ndarray | None = None  # per op, the op id of its kernel's first op (None: no kernels)


def pricing_mode(ops: Any, fusion: str | None) -> str:
    """The fusion :func:`priced_ops` groups ``ops`` by: ``fusion`` checked, or by default
    :data:`~dfit_nb.sim.kernels.DEFAULT_FUSION` for a Trace and ``"none"`` for a table of ops (which has no
    dataflow between its rows to group by; any other mode is refused for one)."""
    is_trace = hasattr(ops, "edges") and hasattr(ops, "ops")
    mode = (kernels.DEFAULT_FUSION if is_trace else "none") if fusion is None else kernels.check_mode(fusion)
    if mode != "none" and not is_trace:
        raise CostInputError(f"fusion={mode!r} groups a Trace's ops into kernels by the dataflow between them; an "
                             "op table has none: pass the Trace (dfit_nb.capture), or fusion='none' to price each "
                             "row alone")
    return mode


def priced_ops(ops: Any, fusion: str | None = None, split: bool = False) -> Priced:
    """What :func:`~dfit_nb.sim.cost` and :func:`~dfit_nb.sim.sweep` price: a Trace's replayed ops, each a member
    of its kernel run alone (:func:`kernel_alone`; ``fusion`` as for :func:`dfit_nb.replay`, default
    :data:`~dfit_nb.sim.kernels.DEFAULT_FUSION`), or every row of an op table alone (``fusion="none"``, the
    default for a table, which has no dataflow between its ops to group by; a Trace's every row too); ``split`` as
    for :func:`prepare`."""
    mode = pricing_mode(ops, fusion)
    if mode == "none":
        arrays, coord = alone_arrays(ops)
        return Priced(arrays, coord, op_counts(ops, len(coord)), mode)
    try:
        prep = prepare(ops, mode, split)
    except ReplayError as err:
        raise CostInputError(str(err)) from None
    return Priced(kernel_alone(prep), prep.op, prep.arrays["count"].copy(), mode,
                  prep.op[np.asarray(prep.arrays["kernel"], np.int64)])


def take_rows(arrays: Mapping[str, np.ndarray], index: np.ndarray, real: int) -> dict[str, np.ndarray]:
    """The rows ``index`` of the model's inputs ``arrays``, the positions from ``real`` on being copies that pad
    the table to a compiled size: each copy is a kernel of its own (an id past every real one), so no kernel's
    sums (its launch, its overlap, its latency) see it.

    >>> take_rows({"kernel": np.array([0.0, 0.0]), "kernel_size": np.array([2.0, 2.0])}, np.array([0, 1, 0]), 2)
    {'kernel': array([0., 0., 2.]), 'kernel_size': array([2., 2., 1.])}
    """
    out = {key: value[index] for key, value in arrays.items()}
    if "kernel" in out:
        pad = np.arange(len(index)) >= real
        out["kernel"] = np.where(pad, np.arange(len(index), dtype=np.float64), out["kernel"])
        for key, value in (("kernel_size", 1.0), ("payer", 1.0), ("internal", 0.0)):
            if key in out:
                out[key] = np.where(pad, value, out[key])
    return out


def kernel_alone(prep: Prepared) -> dict[str, np.ndarray]:
    """The model's inputs of every op of ``prep`` (grouped into kernels) priced as a member of its kernel run
    alone: what :func:`dfit_nb.sim.cost` and :func:`dfit_nb.sim.sweep` price for a Trace. A kernel alone reads
    its inputs from DRAM (program arguments, and results of ops in other kernels) and writes its results there,
    except those only its own ops consume, which stay on chip while the kernel runs fused; it pays one fixed
    cost and waits the DRAM latency once. The producers inside the kernel feed an op on chip where the kernel
    runs fused (``kernel_fed0``, ``kernel_fed1``, ``kernel_fed_bytes``: what comes from DRAM instead where it does
    not, :func:`dfit_nb.sim.machine.model`), and an input two ops of the kernel read comes in once. Every
    figure is per execution (``count`` 1), as :func:`~dfit_nb.sim.cost` reports."""
    a = prep.arrays
    n = len(prep.op)
    kernel = np.asarray(a["kernel"], np.int64)
    dst, src, pos = prep.feeds.T if len(prep.feeds) else (np.zeros(0, np.int64),) * 3
    inside = kernel[src] == kernel[dst]
    # what producers inside the kernel feed each (op, operand)
    fed = _fed_bytes(n, dst[inside], pos[inside], prep.feed_bytes[inside])
    kernel_fed0, kernel_fed1 = _fed_share(fed[:, 0], a["lhs_bytes"]), _fed_share(fed[:, 1], a["rhs_bytes"])
    read = np.asarray(prep.table["bytes_read"].values, np.float64)
    # inputs from outside the kernel, read once per kernel: program arguments, and other kernels' results
    # (sources numbered past the arguments)
    arg_row, arg_pos, arg = np.asarray(prep.arg_reads, np.int64).reshape(-1, 3).T
    first_source = int(arg.max()) + 1 if arg.size else 0
    arg_bytes = prep.input_bytes(arg_row, arg_pos)
    outside = ~inside
    shared = _later_reads(kernel, np.concatenate([arg_row, dst[outside]]), np.concatenate([arg_pos, pos[outside]]),
                          np.concatenate([arg, first_source + src[outside]]),
                          np.concatenate([arg_bytes, prep.feed_bytes[outside]]), a["gemm"])
    keep = ("m", "k", "n", "batch", "flops", "transcendentals", "elems_in", "elems_out", "itemsize", *ITEMSIZE_COLUMNS,
            "gemm", "lhs_bytes", "rhs_bytes", "bytes_written", "is_output", "kernel", "kernel_size", "payer", "free",
            "internal", "kernel_ws", "kernel_row", "kernel_weight", "kernel_in")
    ones = np.ones(n)
    return {**{key: np.asarray(a[key], np.float64) for key in keep}, **shared,
            "fed0": kernel_fed0, "fed1": kernel_fed1, "kernel_fed0": kernel_fed0, "kernel_fed1": kernel_fed1,
            "ext_bytes": np.maximum(read - fed.sum(axis=1), 0.0), "kernel_fed_bytes": fed.sum(axis=1),
            "has_consumer": 0.0 * ones, "count": ones, "real": ones,
            **{key: np.asarray(a[key], np.float64) for key in ("row_reduce",) if key in a}}


def _fed_bytes(n: int, dst: np.ndarray, pos: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """``(ops, operands)``: the bytes producers feed each (op, operand position), at least two positions (a
    GEMM's lhs and rhs); one tensor however many producers may write it (a cond's branches)."""
    fed = np.zeros((n, max(int(pos.max()) + 1 if pos.size else 0, 2)))
    np.maximum.at(fed, (dst, pos), nbytes)
    return fed


def _fed_share(fed: np.ndarray, size: np.ndarray) -> np.ndarray:
    """The share (0-1) of an operand of ``size`` bytes that producers feed (0 where the operand is empty)."""
    return np.where(size > 0, np.minimum(fed / np.maximum(size, 1.0), 1.0), 0.0)


def _prepare_ops(trace: Any) -> Prepared:
    """The replayable ops of ``trace``, before kernels."""
    ops = getattr(trace, "ops", None)
    missing = [k for k in ("container", "live", "bytes_read") if k not in getattr(ops, "variables", {})]
    if ops is None or "op" not in getattr(ops, "dims", {}) or missing or getattr(trace, "edges", None) is None \
            or getattr(trace, "operands", None) is None:
        hint = (" (a replay's result): pass the Trace that was replayed"
                if hasattr(trace, "events") and hasattr(trace, "cube") else "")
        raise ReplayError(f"replay() needs a dfit_nb Trace (from dfit_nb.capture or load_trace), got "
                          f"{type(trace).__name__}{hint}")
    leaf = (ops["container"].values == "") & ops["live"].values.astype(bool)
    if not leaf.any():
        raise ReplayError("the trace has no ops to replay (no live leaf ops: the function computes nothing)")
    table = ops.isel(op=np.flatnonzero(leaf))
    arrays, op_ids = ops_arrays(table)
    n = len(op_ids)
    row = np.full(int(ops.sizes["op"]), -1, np.int64)
    row[op_ids] = np.arange(n)

    # operand sizes (program dtype), of the GEMM's lhs and rhs among them, and each op's inputs' widths
    in_start, in_bytes, in_elems = input_table(trace, op_ids, with_elements=True)
    rows = np.arange(n)
    lhs, rhs = (_operands.input_bytes_at(in_start, in_bytes, rows, np.full(n, p)) for p in (0, 1))
    widths = operand_itemsizes(in_start, in_bytes, in_elems)
    read = table["bytes_read"].values.astype(np.float64)
    # the inputs' elements at their own width (a converting op's input is not the width of its result)
    arrays["elems_in"] = np.where(widths["in_itemsize"] > 0, whole_elements(read, widths["in_itemsize"]),
                                  arrays["elems_in"])
    arrays.update(widths)

    e = trace.edges
    src, dst = row[e["src"].values], row[e["dst"].values]
    keep = (src >= 0) & (dst >= 0)
    src, dst = src[keep], dst[keep]
    # traces saved before edges named the consumer's operand: every tensor counts as the first operand
    pos = e["operand"].values[keep] if "operand" in e else np.zeros(int(keep.sum()), np.int64)
    nbytes = e["bytes"].values[keep].astype(np.float64)
    fed = _fed_bytes(n, dst, pos, nbytes)
    gemm = (arrays["m"] > 0) & (arrays["k"] > 0) & (arrays["n"] > 0)
    arrays.update(
        gemm=gemm.astype(np.float64),
        lhs_bytes=lhs, rhs_bytes=rhs,
        fed0=_fed_share(fed[:, 0], lhs), fed1=_fed_share(fed[:, 1], rhs),
        ext_bytes=np.maximum(table["bytes_read"].values - fed.sum(axis=1), 0.0),
        bytes_written=table["bytes_written"].values.astype(np.float64),
        has_consumer=np.isin(np.arange(n), src).astype(np.float64),
        # a program output is written out whatever else reads it (traces saved before the column: none known)
        is_output=(table["program_output"].values.astype(np.float64) if "program_output" in table
                   else np.zeros(n)),
        count=table["count"].values.astype(np.float64),
    )
    # producers of each op: one row per (consumer, producer), bytes summed over the operands it feeds
    pairs, inverse = np.unique(np.stack([dst, src], axis=1), axis=0, return_inverse=True)
    pair_bytes = np.bincount(inverse.reshape(-1), weights=nbytes, minlength=len(pairs))
    indeg = np.bincount(pairs[:, 0], minlength=n) if len(pairs) else np.zeros(n, np.int64)
    width = max(int(indeg.max()) if n else 0, 1)
    slot = np.arange(len(pairs)) - np.repeat(np.cumsum(indeg) - indeg, indeg)
    preds = np.full((n, width), -1, np.int64)
    pred_bytes = np.zeros((n, width))
    if len(pairs):
        preds[pairs[:, 0], slot] = pairs[:, 1]
        pred_bytes[pairs[:, 0], slot] = pair_bytes
    # arguments each op reads as they are (traces saved before the capture recorded them: none known)
    arg_reads = np.zeros((0, 3), np.int64)
    if "input_dst" in e:
        reader = row[e["input_dst"].values]
        known = reader >= 0
        arg_reads = np.stack([reader[known], e["input_operand"].values[known], e["input_arg"].values[known]],
                             axis=1).astype(np.int64)
    return Prepared(op=op_ids, table=table, region=table["region"].values.astype(object),
                    primitive=table["primitive"].values.astype(object), arrays=arrays, preds=preds,
                    pred_bytes=pred_bytes, arg_reads=arg_reads,
                    feeds=np.stack([dst, src, pos], axis=1).astype(np.int64), feed_bytes=nbytes,
                    in_start=in_start, in_bytes=in_bytes, reduced_row=_operands.reduced_row(trace.operands, op_ids))


def pinned_layouts(prep: Prepared, layouts: Mapping[str, str] | None, tiles: int | None = None
                   ) -> dict[str, np.ndarray]:
    """Per-op pinned layout (-1 free) and factors (0 free) from ``{region: "mn" | "mk" | "mk:4x8"}``; the factors
    are checked against the split factors the search offers on a grid of ``tiles`` tiles."""
    n = len(prep.op)
    out = {"layout": np.full(n, -1.0), "gy": np.zeros(n), "gx": np.zeros(n)}
    if layouts is not None and not (isinstance(layouts, Mapping) and all(isinstance(r, str) for r in layouts)):
        # a bare "mk" would be read by .items() as if it were a mapping
        raise ReplayError(f"layouts must be a dict {{region: layout}} (e.g. {{'encoder/attn': 'mk'}}, '' for every "
                          f"op), got {type(layouts).__name__} {layouts!r}")
    if not layouts:
        return out
    depth = np.full(n, -1)
    regions = sorted({str(r) for r in prep.region})
    for region, spec in layouts.items():
        m = re.fullmatch(r"(mn|mk)(?::(\d+)x(\d+))?", str(spec).strip().lower())
        if m is None:
            raise ReplayError(f"layout {spec!r} for region {region!r} is not valid; use 'mn' or 'mk', optionally "
                              "with split factors 'mn:GYxGX' (e.g. 'mk:4x8')")
        gy, gx = (float(m.group(2)), float(m.group(3))) if m.group(2) else (0.0, 0.0)
        for f in (gy, gx):
            if f and tiles is not None and not mapping.factor_ok(f, tiles):
                q = int(mapping.odd_part(float(tiles), np))
                offered = "powers of two" + (f" or {q} x a power of two" if q > 1 else "")
                raise ReplayError(f"layout {spec!r}: split factor {f:g} is not one the search offers on a grid of "
                                  f"{tiles} tiles: {offered}, up to {2 ** mapping.MAX_LOG2}")
        region = region.strip("/")
        hit = np.array([str(r) == region or str(r).startswith(region + "/") or region == "" for r in prep.region])
        if not hit.any():
            raise ReplayError(f"layouts: no op in region {region!r}; regions: {', '.join(regions[:20])}"
                              + (" ..." if len(regions) > 20 else ""))
        deeper = hit & (region.count("/") + (region != "") > depth)  # the most specific region wins
        out["layout"][deeper] = float(mapping.LAYOUTS.index(m.group(1)))
        out["gy"][deeper], out["gx"][deeper] = gy, gx
        depth[deeper] = region.count("/") + (region != "")
    return out


#: the fewest ops a one-machine replay program is compiled for: every program up to this size shares one compile
#: per grid bucket and execution style, so a new model replays without compiling (a padded op costs the scan one
#: cheap step, a compile costs seconds: benchmarks/bench_cold_start.py). Batches of machines keep
#: :data:`BATCH_OPS`: there each padded op is paid once per machine.
ONE_MACHINE_OPS = 1024
BATCH_OPS = 32


def padded_sizes(prep: Prepared, least: int = BATCH_OPS) -> tuple[int, int]:
    """The op count and producer slots :func:`padded` pads ``prep`` to (part of what decides the program)."""
    n, width = prep.preds.shape
    return padded_count(n, least), padded_count(width, 4)


def padded(prep: Prepared, codes: np.ndarray, pinned: dict[str, np.ndarray], least: int = BATCH_OPS
           ) -> tuple[Any, ...]:
    """Inputs padded to power-of-two op counts (at least ``least``) and producer slots, so programs of similar
    size share one compilation. Padding ops come last, do nothing and depend on nothing: no real op sees them."""
    n, width = prep.preds.shape
    size, slots = padded_sizes(prep, least)
    arrays = {k: np.concatenate([v, np.zeros(size - n)]) for k, v in prep.arrays.items()}
    arrays["count"][n:] = 1.0
    if "kernel" in arrays:  # padding ops are kernels of their own (ids past every real one)
        arrays["kernel"][n:] = np.arange(n, size)
        arrays["kernel_size"][n:] = 1.0
    arrays["real"] = (np.arange(size) < n).astype(np.float64)
    preds = np.full((size, slots), -1, np.int64)
    preds[:n, :width] = prep.preds
    pred_bytes = np.zeros((size, slots))
    pred_bytes[:n, :width] = prep.pred_bytes
    pin = {k: np.concatenate([v, np.full(size - n, -1.0 if k == "layout" else 0.0)]) for k, v in pinned.items()}
    return arrays, preds, pred_bytes, np.concatenate([codes, np.zeros(size - n)]), pin


def trace_key(prep: Prepared) -> str:
    """A fingerprint of the replayed op table (ids, primitives, GEMM view, sizes, counts, edges)."""
    h = hashlib.sha1()
    for arr in (prep.op, *(prep.arrays[k] for k in ("m", "k", "n", "batch", "count", "bytes_written", "flops")),
                prep.preds):
        h.update(np.ascontiguousarray(arr).tobytes())
    h.update("|".join(str(p) for p in prep.primitive).encode())
    if prep.fusion != "none":  # the kernels the policy was priced on (keys of unfused selections are unchanged)
        h.update(prep.fusion.encode())
    if prep.kernels is not None and prep.kernels.split:  # a compiler that ends kernels at row reductions
        h.update(b"split")
    return h.hexdigest()[:16]


def hardware_key(hw: Hardware) -> str:
    """A fingerprint of a machine: every field's value and the execution style (not its name)."""
    h = hashlib.sha1(hw.execution.encode())
    if hw.row_reductions != "fused":  # (keys of machines without another way are unchanged)
        h.update(hw.row_reductions.encode())
    for f in FIELDS:
        h.update(np.asarray(getattr(hw, f), np.float64).tobytes())
    return h.hexdigest()[:16]


def check_policy_target(policy: Any, trace: Any, hw: Hardware) -> None:
    """A Policy replays only on the trace and machine it was selected on: a clear error otherwise."""
    want_trace, want_hw = getattr(policy, "trace_key", ""), getattr(policy, "hw_key", "")
    if want_trace and want_trace != trace_key(prepare(trace, getattr(policy, "fusion", None),
                                                      kernels.splits_rows(hw))):
        raise ReplayError(f"this Policy ({getattr(policy, 'name', 'policy')}) was selected for another trace: its "
                          "per-op choices would not match these ops; select again with "
                          "dfit_nb.sim.select_dataflows(trace, hw, objective)")
    if want_hw and want_hw != hardware_key(hw):
        raise ReplayError(f"this Policy ({getattr(policy, 'name', 'policy')}) was selected on machine "
                          f"{getattr(policy, 'hw_name', '')!r}, not on {hw.name!r} (fields or execution style "
                          "differ): its gains were priced there; select again with "
                          "dfit_nb.sim.select_dataflows(trace, hw, objective)")


def dataflow_per_op(dataflow: Any, trace: Any, prep: Prepared, hw: Hardware) -> tuple[np.ndarray, str]:
    """Dataflow codes per op and the policy's name for provenance."""
    n = len(prep.op)
    if isinstance(dataflow, str) and dataflow.lower() == "hybrid":
        raise ReplayError("'hybrid' is chosen per machine: replay(trace, hw, 'hybrid') for one machine, or "
                          "dfit_nb.sim.select_dataflows(trace, machines) for the choices over a batch")
    per_op = getattr(dataflow, "per_op", None)
    if per_op is not None:  # a Policy: per-op names aligned with trace.ops
        check_policy_target(dataflow, trace, hw)
        values = np.asarray(getattr(per_op, "values", per_op))
        try:
            values = values[prep.op] if len(values) != n else values
        except IndexError as err:
            raise ReplayError(f"the policy has {len(values)} per-op choices; the trace has {n} replayed ops") from err
        values = np.where(values == "", "ws", values)  # non-GEMM ops have no dataflow
        codes, _ = dataflow_codes(values, n)
        return one_per_kernel(codes.astype(np.float64), prep), str(getattr(dataflow, "name", "policy"))
    if isinstance(dataflow, (list, tuple)):
        raise ReplayError(f"replay() takes one dataflow ({', '.join(REPLAY_DATAFLOWS)}) or a Policy; to compare "
                          "several, replay once per dataflow")
    try:
        codes, _ = dataflow_codes(dataflow, n)
    except CostInputError as err:
        raise ReplayError(f"{err}, or 'hybrid', or a Policy") from None
    return one_per_kernel(codes.astype(np.float64), prep), dataflow if isinstance(dataflow, str) else "per-op"


def one_per_kernel(codes: np.ndarray, prep: Prepared) -> np.ndarray:
    """``codes``, refused where two GEMMs of one kernel would run different dataflows: a switch happens only
    between kernels (its stationary operand is the kernel's, for every GEMM it chains)."""
    gemm = np.flatnonzero(prep.arrays["gemm"] > 0)
    if prep.kernels is None or len(gemm) < 2:
        return codes
    kernel = np.asarray(prep.kernels.kernel)[gemm]
    lo = np.full(int(kernel.max()) + 1, np.inf)
    hi = np.full(int(kernel.max()) + 1, -np.inf)
    np.minimum.at(lo, kernel, codes[gemm])
    np.maximum.at(hi, kernel, codes[gemm])
    bad = np.flatnonzero(lo < hi)
    if bad.size:
        rows = gemm[kernel == bad[0]]
        shown = ", ".join(f"#{int(prep.op[r])} {DATAFLOWS[int(codes[r])]}" for r in rows)
        raise ReplayError(f"GEMM ops {shown} run in one kernel ({prep.kernels.name[bad[0]]}, fusion="
                          f"{prep.fusion!r}) but were given different dataflows: a switch happens only between "
                          "kernels. Valid: one dataflow for a kernel's GEMMs, or fusion='none' (one kernel per op)")
    return codes


def switch_penalty(dataflow: Any) -> np.ndarray:
    """``(reconfig_cycles, reconfig_pj)`` a Policy was selected with (charged per switch); zeros otherwise."""
    values = np.array([float(getattr(dataflow, "reconfig_cycles", 0.0) or 0.0),
                       float(getattr(dataflow, "reconfig_pj", 0.0) or 0.0)])
    if not np.isfinite(values).all() or values.min() < 0:
        raise ReplayError(f"the policy's reconfig_cycles and reconfig_pj must be finite and >= 0, got "
                          f"{values.tolist()}")
    return values


def policy_fusion(dataflow: Any, fusion: str | None) -> str:
    """The fusion a replay of ``dataflow`` runs with: a Policy's own (another one is refused), else ``fusion``."""
    own = getattr(dataflow, "fusion", None) if getattr(dataflow, "per_op", None) is not None else None
    mode = kernels.check_mode(fusion)
    if own is None:
        return mode
    if fusion is not None and mode != own:
        raise ReplayError(f"this Policy was selected with fusion={own!r}: its choices were priced on those kernels; "
                          f"replay it with fusion={own!r} (or leave fusion out), or select again with "
                          f"fusion={mode!r}")
    return own


#: what to do when a replay's per-tile arrays do not fit
GRID_ADVICE = ("replay a coarser tile grid (tile_rows x tile_cols: the replay keeps arrays over tiles and over "
               "tiles x (rows + cols), so group cores into larger tiles)")
