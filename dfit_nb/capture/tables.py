"""Turn a walk, its counts, its lowering and its measurements into the Trace Datasets."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from .. import _operands
from .lowering import FusionMap
from .walk import OpRecord, Walk

# (units, description) of every ops variable: the data contract users read.
OP_VARS: dict[str, tuple[str, str]] = {
    "primitive": ("", "JAX primitive name"),
    "region": ("", "full region path, '/'-joined ('' = root): named scopes and nested-jit segments, or the path of "
                   "the parameter the op works for (capture's regions=), after the direction when a program has "
                   "several"),
    "direction": ("", "forward | backward (under JAX's transpose: the gradient) | optimizer (reads an optimizer "
                      "state or follows the backward pass)"),
    "parent": ("", "op id of the enclosing container op (-1 at top level)"),
    "context": ("", "which jaxpr of the parent holds the op: body, cond, branch<i>, jit, remat, ..."),
    "branch": ("", "index of the innermost enclosing cond branch (-1 if none)"),
    "depth": ("", "nesting depth of the jaxpr holding the op"),
    "container": ("", "container kind (scan, while, cond, jit, remat, custom_jvp, ...) or '' for leaf ops"),
    "op_class": ("", "gemm, conv, elementwise, transcendental, reduction, data_movement, control, opaque"),
    "opaque": ("", "True if no cost rule knows the primitive (FLOPs unknown, bytes counted)"),
    "flops": ("FLOP", "floating-point operations per execution (XLA's counting convention)"),
    "transcendentals": ("1", "transcendental evaluations per execution (XLA's convention)"),
    "bytes_read": ("B", "bytes of all inputs per execution, unfused view"),
    "bytes_written": ("B", "bytes of all outputs per execution, unfused view"),
    "m": ("1", "GEMM rows (dot: lhs free dims; conv: batch x output spatial)"),
    "k": ("1", "GEMM reduction length (dot: contracting dims; conv: in-features/group x kernel taps)"),
    "n": ("1", "GEMM columns (dot: rhs free dims; conv: out-features per group)"),
    "batch": ("1", "GEMM batch (dot: batch dims; conv: feature groups); 0 for non-GEMM ops"),
    "dtype": ("", "dtype of the first output"),
    "in_shapes": ("", "the inputs' dtypes and shapes as text, for reading (the data: trace.operands)"),
    "out_shapes": ("", "the outputs' dtypes and shapes as text, for reading (the data: trace.operands)"),
    "source": ("", "user source location that created the op"),
    "count": ("1", "executions per call of the captured function (scan trip counts multiply)"),
    "count_source": ("", "exact | measured | hint | assumed: how count was obtained (weakest link on the path)"),
    "trip_count": ("1", "iterations per execution for scan/while ops (while: hint, 1 assumed, or measured)"),
    "live": ("", "False if no later op or output uses the op's result (dead code)"),
    "program_output": ("", "the op's result is (part of) the captured function's output: it leaves the program "
                       "(written to memory) whatever else reads it"),
    "fusion": ("", "executed optimized-HLO instruction(s) holding the op, ';'-joined ('' if none)"),
    "folded_reason": ("", "why the op has no HLO instruction ('' if it has one)"),
    "time_s": ("s", "measured time per execution (NaN in static mode)"),
}

_STR_VARS = {"primitive", "region", "direction", "context", "container", "op_class", "dtype", "in_shapes",
             "out_shapes", "source", "count_source", "fusion", "folded_reason"}


def _with_attrs(data: np.ndarray, dim: str, spec: tuple[str, str]) -> xr.DataArray:
    units, description = spec
    attrs = {"description": description}
    if units:
        attrs["units"] = units
    return xr.DataArray(data, dims=(dim,), attrs=attrs)


_LAYOUT_ONLY = {"stop_gradient", "optimization_barrier", "reshape", "squeeze", "expand_dims", "broadcast_in_dim",
                "transpose", "copy", "copy_p",
                "convert_element_type", "bitcast_convert_type", "reduce_precision", "slice"}


def folded_reason(r: OpRecord, live: bool, constant: bool) -> str:
    """Best explanation for an op that left no instruction in the optimized HLO."""
    if r.container:
        return "container: lowered into its nested ops (or inlined)"
    if not live:
        return "dead code: its result is never used"
    if constant:
        return "constant-folded: all inputs are literals or closed-over constants"
    if r.primitive in _LAYOUT_ONLY:
        return "layout-only: became a bitcast or was absorbed into a consumer's indexing"
    return "simplified away by XLA (CSE or algebraic simplification)"


def ops_dataset(
    walk: Walk,
    counts: np.ndarray,
    sources: np.ndarray,
    trips: Mapping[int, float],
    fusion_map: FusionMap | None,
    time_s: np.ndarray,
) -> xr.Dataset:
    """The ``trace.ops`` Dataset."""
    recs = walk.records
    fusions = [";".join(fusion_map.fusions_of(r.id)) if fusion_map else "" for r in recs]
    reasons = [
        "" if f or fusion_map is None else folded_reason(r, r.id in walk.live, r.id in walk.constant)
        for r, f in zip(recs, fusions, strict=True)
    ]
    trip = np.array([
        float(trips.get(r.id, 1.0)) if r.container == "while" else float(r.trip_count) for r in recs
    ], dtype=np.float64)
    cols: dict[str, np.ndarray] = {
        "primitive": [r.primitive for r in recs],
        "region": [r.region for r in recs],
        "direction": [r.direction for r in recs],
        "parent": [r.parent for r in recs],
        "context": [r.context for r in recs],
        "branch": [r.branch for r in recs],
        "depth": [r.depth for r in recs],
        "container": [r.container for r in recs],
        "op_class": [r.cost.op_class for r in recs],
        "opaque": [r.opaque for r in recs],
        "flops": [r.cost.flops for r in recs],
        "transcendentals": [r.cost.transcendentals for r in recs],
        "bytes_read": [r.cost.bytes_read for r in recs],
        "bytes_written": [r.cost.bytes_written for r in recs],
        "m": [r.cost.m for r in recs],
        "k": [r.cost.k for r in recs],
        "n": [r.cost.n for r in recs],
        "batch": [r.cost.batch for r in recs],
        "dtype": [r.dtype for r in recs],
        "in_shapes": [r.in_shapes for r in recs],
        "out_shapes": [r.out_shapes for r in recs],
        "source": [r.source for r in recs],
        "count": counts,
        "count_source": sources,
        "trip_count": trip,
        "live": [r.id in walk.live for r in recs],
        "program_output": [r.id in walk.outputs for r in recs],
        "fusion": fusions,
        "folded_reason": reasons,
        "time_s": time_s,
    }
    data_vars = {}
    for name, values in cols.items():
        if name in _STR_VARS:
            arr = np.empty(len(recs), dtype=object)
            arr[:] = [str(v) for v in values]
        elif name in ("opaque", "live", "program_output"):
            arr = np.asarray(values, dtype=bool)
        elif name in ("trip_count", "time_s"):
            arr = np.asarray(values, dtype=np.float64)
        else:
            arr = np.asarray(values, dtype=np.int64)
        data_vars[name] = _with_attrs(arr, "op", OP_VARS[name])
    return xr.Dataset(data_vars, coords={"op": np.arange(len(recs), dtype=np.int64)})


def operands_dataset(walk: Walk) -> xr.Dataset:
    """The ``trace.operands`` Dataset: the dtype and shape of every op's inputs and outputs
    (:func:`dfit_nb._operands.operands_dataset`)."""
    recs = walk.records
    return _operands.operands_dataset([r.id for r in recs], [r.inputs for r in recs], [r.outputs for r in recs])


def edges_dataset(edges: Sequence[tuple[int, int, int, int]],
                  input_edges: Sequence[tuple[int, int, int, int]] = ()) -> xr.Dataset:
    """The ``trace.edges`` Dataset: dataflow between leaf ops (dim ``edge``) and from the program's arguments into
    the ops that read them as they are (dim ``input_edge``)."""
    arr = np.asarray(sorted(set(edges)), dtype=np.int64).reshape(-1, 4)
    inputs = np.asarray(sorted(set(input_edges), key=lambda e: (e[1], e[2])), dtype=np.int64).reshape(-1, 4)
    return xr.Dataset(
        {
            "src": _with_attrs(arr[:, 0], "edge", ("", "producing op id")),
            "dst": _with_attrs(arr[:, 1], "edge", ("", "consuming op id")),
            "operand": _with_attrs(arr[:, 2], "edge", ("", "input position of the tensor in the consuming op "
                                                          "(dot_general/conv: 0 lhs, 1 rhs)")),
            "bytes": _with_attrs(arr[:, 3], "edge", ("B", "bytes of the tensor passed, per execution")),
            "input_arg": _with_attrs(inputs[:, 0], "input_edge", (
                "", "the argument read: its position among the program's flattened array arguments")),
            "input_dst": _with_attrs(inputs[:, 1], "input_edge", ("", "the op that reads it as it is")),
            "input_operand": _with_attrs(inputs[:, 2], "input_edge", ("", "its input position in that op")),
            "input_bytes": _with_attrs(inputs[:, 3], "input_edge", ("B", "bytes of the argument")),
        },
        coords={"edge": np.arange(len(arr), dtype=np.int64),
                "input_edge": np.arange(len(inputs), dtype=np.int64)},
    )


def _ancestors(path: str) -> list[str]:
    parts = path.split("/") if path else []
    return [""] + ["/".join(parts[: i + 1]) for i in range(len(parts))]


def regions_dataset(ops: xr.Dataset) -> xr.Dataset:
    """Roll ops up into the region tree (inclusive totals: flops, bytes × count; time)."""
    region = ops["region"].values
    count = ops["count"].values.astype(np.float64)
    per_op = {
        "flops": ops["flops"].values * count,
        "transcendentals": ops["transcendentals"].values * count,
        "bytes_read": ops["bytes_read"].values * count,
        "bytes_written": ops["bytes_written"].values * count,
        "time_s": np.where(count > 0, ops["time_s"].values * count, 0.0),
    }
    measured = not np.all(np.isnan(ops["time_s"].values))
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    n_ops: dict[str, int] = defaultdict(int)
    self_flops: dict[str, float] = defaultdict(float)
    first: dict[str, int] = {}
    for i, path in enumerate(region):
        self_flops[path] += per_op["flops"][i]
        for anc in _ancestors(path):
            first.setdefault(anc, i)
            n_ops[anc] += 1
            for key, vals in per_op.items():
                if key == "time_s" and np.isnan(vals[i]):
                    continue
                totals[anc][key] += vals[i]
    # depth-first, siblings in program order (the order their first op appears)
    names = sorted(n_ops, key=lambda p: [first[a] for a in _ancestors(p)])
    parents = [_ancestors(p)[-2] if p else "" for p in names]
    spec = {
        "flops": ("FLOP", "total FLOPs in the region and its sub-regions (flops x count)"),
        "transcendentals": ("1", "total transcendentals in the region and its sub-regions"),
        "bytes_read": ("B", "total unfused bytes read in the region and its sub-regions"),
        "bytes_written": ("B", "total unfused bytes written in the region and its sub-regions"),
        "time_s": ("s", "measured time per call in the region and its sub-regions (NaN in static mode)"),
    }
    data = {
        key: _with_attrs(
            np.asarray([totals[p][key] if (key != "time_s" or measured) else np.nan for p in names],
                       dtype=np.int64 if key not in ("time_s",) else np.float64),
            "region", spec[key],
        )
        for key in spec
    }
    data["self_flops"] = _with_attrs(np.asarray([self_flops[p] for p in names], dtype=np.int64), "region",
                                     ("FLOP", "FLOPs of ops directly in this region (not sub-regions)"))
    data["n_ops"] = _with_attrs(np.asarray([n_ops[p] for p in names], dtype=np.int64), "region",
                                ("1", "number of ops in the region and its sub-regions"))
    data["parent"] = _with_attrs(np.asarray(parents, dtype=object), "region",
                                 ("", "parent region path (the root '' is its own parent)"))
    data["depth"] = _with_attrs(np.asarray([len(_ancestors(p)) - 1 for p in names], dtype=np.int64),
                                "region", ("", "depth in the region tree (root = 0)"))
    return xr.Dataset(data, coords={"region": np.asarray(names, dtype=object)})


def lowering_dataset(
    fusion_map: FusionMap,
    ops: xr.Dataset,
    *,
    stablehlo: str,
    hlo: str,
    xla_cost: Mapping[str, float],
    module: str,
    executions: Mapping[str, float] | None = None,
    times: Mapping[str, float] | None = None,
) -> xr.Dataset:
    """The ``trace.lowering`` Dataset: one row per executed HLO instruction."""
    recs = fusion_map.records
    flops = ops["flops"].values
    count = ops["count"].values
    share = {op: len(fusion_map.fusions_of(op)) for rec in recs for op in rec.op_ids}
    static_exec = [max((float(count[o]) for o in rec.op_ids), default=np.nan) for rec in recs]
    spec = {
        "opcode": ("", "HLO opcode of the instruction (fusion, while, copy, ...)"),
        "kind": ("", "fusion kind (kLoop, kInput, kOutput, kCustom), 'control', or 'unfused'"),
        "computation": ("", "HLO computation holding the instruction (ENTRY, a while body, a branch)"),
        "op_ids": ("", "jaxpr op ids the instruction holds, ','-joined"),
        "n_ops": ("1", "number of jaxpr ops the instruction holds"),
        "flops": ("FLOP", "FLOPs of the ops it holds, per execution (ops held by k instructions count 1/k)"),
        "bytes_accessed": ("B", "operand + output bytes of the instruction: the fused bytes view"),
        "executions": ("1", "executions per call (measured in runtime modes, from op counts otherwise)"),
        "time_s": ("s", "measured exclusive time per call (NaN in static mode)"),
    }
    cols = {
        "opcode": [r.opcode for r in recs],
        "kind": [r.kind for r in recs],
        "computation": [r.computation for r in recs],
        "op_ids": [",".join(str(o) for o in r.op_ids) for r in recs],
        "n_ops": [len(r.op_ids) for r in recs],
        "flops": [sum(flops[o] / share[o] for o in r.op_ids) for r in recs],
        "bytes_accessed": [r.bytes_accessed for r in recs],
        "executions": [
            e if executions is None else executions.get(r.name, 0.0) for r, e in zip(recs, static_exec, strict=True)
        ],
        "time_s": [(times or {}).get(r.name, np.nan) for r in recs],
    }
    dtypes = {"n_ops": np.int64, "bytes_accessed": np.int64, "flops": np.float64,
              "executions": np.float64, "time_s": np.float64}
    data = {
        k: _with_attrs(np.asarray(v, dtype=dtypes.get(k, object)), "fusion", spec[k])
        for k, v in cols.items()
    }
    data["stablehlo"] = xr.DataArray(np.asarray(stablehlo, dtype=object),
                                     attrs={"description": "StableHLO text of the lowered (tagged) program"})
    data["hlo"] = xr.DataArray(np.asarray(hlo, dtype=object),
                               attrs={"description": "optimized HLO text of the compiled (tagged) program"})
    attrs = {"hlo_module": module, **{f"xla_{k.replace(' ', '_')}": float(v) for k, v in xla_cost.items()}}
    return xr.Dataset(data, coords={"fusion": np.asarray([r.name for r in recs], dtype=object)}, attrs=attrs)
