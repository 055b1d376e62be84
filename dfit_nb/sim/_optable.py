"""An op table read and checked: a Trace's ops, an xarray Dataset, a pandas DataFrame or a mapping of columns,
turned into float64 columns (:func:`ops_arrays`) and into the model's inputs of every op alone
(:func:`alone_arrays`), with the errors that name a bad column or row (:class:`CostInputError`). What
:func:`dfit_nb.sim.cost`, :func:`dfit_nb.sim.sweep`, the replay's preparation and the calibration read a user's
ops through.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import xarray as xr

from .. import _dtypes, _operands
from ..errors import DfitError
from . import machine
from .hardware import FIELDS
from .machine import DATAFLOWS


class CostInputError(DfitError, ValueError):
    """The ops table or the dataflow argument is invalid."""


def _raw_columns(table: Any) -> Any:
    """``name -> the column as the table holds it`` (``None`` when absent) for one table, its kind checked once: a
    warm :func:`cost` reads a dozen columns and checks each mapping against ``Mapping`` only once."""
    if isinstance(table, xr.Dataset):
        return lambda name: table[name].values if name in table else None
    if isinstance(table, Mapping):
        return table.get
    columns = getattr(table, "columns", None)  # pandas.DataFrame
    if columns is not None:
        return lambda name: table[name].to_numpy() if name in columns else None
    raise CostInputError(
        f"ops must be a dfit_nb Trace, an xarray Dataset, a pandas DataFrame or a mapping of columns; "
        f"got {type(table).__name__}"
    )


def hardware_columns(table: Any) -> list[str]:
    """The columns of an ops table (a Dataset's variables, a DataFrame's columns, a mapping's keys) that name
    :class:`~dfit_nb.sim.Hardware` fields, in field order."""
    if isinstance(table, xr.Dataset):
        names = table.variables
    elif isinstance(table, Mapping):
        names = table
    else:
        names = getattr(table, "columns", ())
    hits = _FIELD_NAMES.intersection(names)  # one pass over the table's few names: a warm cost() pays per call
    return [f for f in FIELDS if f in hits] if hits else []


_FIELD_NAMES = frozenset(FIELDS)

def _refuse_near_misses(table: Any) -> None:
    """Refuse a column whose name is not one cost() reads but nearly is (``math_fidelty``, ``a_on_chp``,
    ``Batch``): it would be ignored, and every op priced as if it were absent. Other columns are ignored."""
    import difflib

    names = table.keys() if isinstance(table, Mapping) else getattr(table, "columns", ())
    for name in map(str, names):
        if name in READ_COLUMNS or name in _FIELD_NAMES:
            continue
        near = difflib.get_close_matches(name, [*READ_COLUMNS, *FIELDS], 1, 0.8)
        if near:
            raise CostInputError(f"ops column {name!r} is not a column cost() reads; did you mean {near[0]!r}? "
                                 f"cost() reads {', '.join(sorted(READ_COLUMNS))} (other columns are ignored)")


def _column(table: Any, name: str) -> np.ndarray | None:
    raw = _raw_columns(table)(name)
    return None if raw is None else np.asarray(raw)


#: the dtypes named when one is refused
KNOWN_DTYPES = ("bool, int4, int8, int16, int32, int64, uint4, uint8, uint16, uint32, uint64, float8_e4m3fn, "
                "float8_e5m2 (and ml_dtypes' other float8 and float4 kinds), bfloat16, float16, float32, float64, "
                "complex64, complex128, bfp8, bfp4 (Tenstorrent's BFLOAT8_B, BFLOAT4_B block floats), or '' for an "
                "op without an array output")

#: an op's math fidelity by name: passes of each operand pair through the matrix engine (Tenstorrent's fidelities:
#: a 32x32x32 tile in 16 cycles per pass, tt-metal's GEMM_FLOPS report); a number 1-4 is taken as the passes
FIDELITIES = {"LoFi": 1, "HiFi2": 2, "HiFi3": 3, "HiFi4": 4}
#: per-op placement columns: the operand already sits in on-chip SRAM, sharded over the op's tiles (a, b), or the
#: result stays there (out): no DRAM or NoC traffic for it
PLACEMENTS = ("a_on_chip", "b_on_chip", "out_on_chip")
#: the per-op machine settings an ops table may hold besides its shapes and dtype
OP_SETTINGS = ("math_fidelity", *PLACEMENTS)


def dtype_itemsizes(dtypes: Any, label: str = "ops column 'dtype'",
                    error: type[DfitError] = CostInputError) -> np.ndarray:
    """Bytes per element of each dtype name in ``dtypes`` (0: an op without an array output, see
    :data:`dfit_nb._dtypes.NON_ARRAY_DTYPE`), float64.

    Raises ``error`` naming ``label``, the first row of an unknown name, the name and :data:`KNOWN_DTYPES`: an
    unknown dtype was costed as the machine's word before, silently (``float33`` as 8 bytes).
    """
    names, inverse = np.unique(np.asarray(dtypes).astype(str).reshape(-1), return_inverse=True)
    sizes = np.empty(len(names))
    for j, name in enumerate(names):
        size = _dtypes.known_itemsize(str(name))
        if size is None:
            row = int(np.flatnonzero(inverse.reshape(-1) == j)[0])
            raise error(f"{label} row {row} is {str(name)!r}, which is not a dtype dfit_nb knows; known: "
                        f"{KNOWN_DTYPES}")
        sizes[j] = size
    return sizes[inverse.reshape(-1)]


def numeric(values: Any, label: str, error: type[DfitError] = CostInputError) -> np.ndarray:
    """``values`` as a flat float64 array; refused with ``error`` naming ``label``, the row and the value when one
    is not a number (a CSV's ``4096x`` read as text; NumPy reads ``"4096"`` as 4096, as pandas does)."""
    try:
        return np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as err:
        flat = np.asarray(values, dtype=object).reshape(-1)
        for i, value in enumerate(flat):
            try:
                float(value)
            except (TypeError, ValueError):
                raise error(f"{label} must be numeric; row {i} is {value!r}") from err
        raise error(f"{label} must be numeric, got {np.asarray(values).dtype}") from err


def fidelity_passes(values: Any, label: str = "ops column 'math_fidelity'",
                    error: type[DfitError] = CostInputError) -> np.ndarray:
    """Passes through the matrix engine of each op's math fidelity (:data:`FIDELITIES`: a name, any case, or a
    whole number 1-4), float64; ``error`` names ``label``, the first bad row and what is valid.

    >>> fidelity_passes(["LoFi", "hifi4", 2, "3"]).tolist()
    [1.0, 4.0, 2.0, 3.0]
    """
    names = {k.lower(): v for k, v in FIDELITIES.items()}
    flat = np.asarray(values, dtype=object).reshape(-1)
    out = np.empty(len(flat))
    for i, value in enumerate(flat):
        passes = names.get(value.strip().lower()) if isinstance(value, str) else None
        if passes is None and not isinstance(value, (bool, np.bool_)):  # a number, or one as text (a CSV's "2")
            try:
                number = float(value)
            except (TypeError, ValueError):
                number = np.nan
            passes = int(number) if number in (1.0, 2.0, 3.0, 4.0) else None
        if passes is None:
            valid = ", ".join(f"{k} ({v})" for k, v in FIDELITIES.items())
            raise error(f"{label} row {i} is {value!r}, which is not a math fidelity; valid: {valid}, or the passes "
                        "1-4 as a number")
        out[i] = passes
    return out


def placement_flags(values: Any, label: str, error: type[DfitError] = CostInputError) -> np.ndarray:
    """A placement column (:data:`PLACEMENTS`) as 0.0 / 1.0: booleans, 0 and 1, or the text ``True`` / ``False``
    (any case, as a CSV holds them); ``error`` names ``label``, the first other row and what is valid.

    >>> placement_flags([True, 0, "false"], "a_on_chip").tolist()
    [1.0, 0.0, 0.0]
    """
    flat = np.asarray(values, dtype=object).reshape(-1)
    if np.asarray(values).dtype.kind == "b":
        return flat.astype(np.float64)
    out = np.empty(len(flat))
    for i, value in enumerate(flat):
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            out[i] = value.strip().lower() == "true"
        elif isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, float, np.integer, np.floating))
                                                     and value in (0, 1)):
            out[i] = float(value)
        else:
            raise error(f"{label} row {i} is {value!r}, which is not a boolean; valid: True or False (1 or 0): "
                        "whether the operand sits in on-chip SRAM, or the result stays there")
    return out


#: the numeric columns of an ops table, in the order they are checked
_NUMERIC = ("m", "k", "n", "batch", "flops", "transcendentals", "bytes_read", "bytes_written")
#: the columns cost() reads from a user's op table (the rest are ignored: a name, a layer, a measured time)
READ_COLUMNS = frozenset((*_NUMERIC, "dtype", "in_shapes", "op_class", "count", *OP_SETTINGS))


def _table(ops: Any) -> Any:
    """The ops table of ``ops`` (a Trace's ``ops`` Dataset, or ``ops`` itself)."""
    return ops.ops if hasattr(ops, "ops") and isinstance(ops.ops, xr.Dataset) else ops


def ops_arrays(ops: Any) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Normalise ``ops`` to float64 columns for the model, plus the op coordinate."""
    table = _table(ops)
    return _ops_arrays(table, _raw_columns(table))


def _ops_arrays(table: Any, column: Any) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """:func:`ops_arrays` of ``table``, its columns read by ``column`` (:func:`_raw_columns`)."""
    raw = {name: column(name) for name in _NUMERIC}
    missing = [name for name in ("m", "k", "n") if raw[name] is None]
    if missing:
        raise CostInputError(f"the ops table has no {', '.join(missing)} column(s); cost() needs m, k, n "
                             "(and optionally batch, dtype, flops, transcendentals, bytes_read, bytes_written)")
    given: dict[str, np.ndarray] = {}
    for name, col in raw.items():
        if col is not None:
            given[name] = numeric(col, f"ops column {name!r}")
    size = len(given["m"])
    if any(len(v) != size for v in given.values()):
        lengths = {name: len(given[name]) if name in given else size for name in _NUMERIC}
        raise CostInputError(f"ops columns must have one value per op; lengths {lengths}")
    # one block, one row per column (absent ones: batch 1, the rest 0), checked in one pass: a small table pays
    # per NumPy call, not per value
    stacked = np.zeros((len(_NUMERIC), size))
    stacked[_NUMERIC.index("batch")] = 1.0
    for name, values in given.items():
        stacked[_NUMERIC.index(name)] = values
    # whole and non-negative; NaN fails both comparisons and +-inf the first (inf - inf is NaN)
    ok = (stacked >= 0) & (stacked - np.floor(stacked) == 0)
    if not ok.all():
        col, i = (int(x[0]) for x in np.nonzero(~ok))
        raise CostInputError(f"ops column {_NUMERIC[col]!r} must hold finite non-negative whole numbers; "
                             f"row {i} is {stacked[col, i]:g}")
    out = dict(zip(_NUMERIC, stacked, strict=True))
    dtypes = column("dtype")
    if dtypes is None:
        itemsize, per_elem = np.zeros(size), 4.0  # bytes columns without a dtype: float32, JAX's default
    else:
        itemsize = dtype_itemsizes(dtypes)
        if len(itemsize) != size:
            raise CostInputError(f"ops columns must have one value per op; 'dtype' has {len(itemsize)}, m {size}")
        per_elem = np.where(itemsize > 0, itemsize, 4.0)
    for name, elems in (("bytes_read", "elems_in"), ("bytes_written", "elems_out")):
        values = out.pop(name)
        out[elems] = np.ceil(values / per_elem) if name in given else values  # no column: zeros, as divided
    out["itemsize"] = itemsize  # 0: unknown, the machine's native word is used
    # per-op machine settings, only where the table has them (a table without compiles as before)
    fidelity = column("math_fidelity")
    if fidelity is not None:
        out["passes"] = fidelity_passes(fidelity)
    # a depthwise convolution (one output channel per group, over many groups): the model may run it on the vector
    # unit (dfit_nb.sim.machine.model); the column exists only where a table holds one
    op_class = column("op_class")
    if op_class is not None:
        depthwise = (np.asarray(op_class).astype(str) == "conv") & (out["batch"] > 1) & (out["n"] == 1)
        if depthwise.any():
            out["depthwise"] = depthwise.astype(np.float64)
    for name in PLACEMENTS:
        flags = column(name)
        if flags is not None:
            out[name] = placement_flags(flags, f"ops column {name!r}")
    lengths = {name: len(out[name]) for name in ("passes", *PLACEMENTS) if name in out}
    if any(v != size for v in lengths.values()):
        raise CostInputError(f"ops columns must have one value per op; m has {size}, {lengths}")
    coord = table["op"].values if isinstance(table, xr.Dataset) and "op" in table.coords else np.arange(size)
    return out, coord


def dataflow_codes(dataflow: Any, n_ops: int) -> tuple[np.ndarray, list[str] | None]:
    """Codes (0 ws, 1 os, 2 is) shaped ``(n_ops,)`` or ``(n_dataflows, 1)``, and the names for a dim."""
    def code(name: Any) -> int:
        try:
            return DATAFLOWS.index(str(name).lower())
        except ValueError:
            raise CostInputError(f"unknown dataflow {name!r}; valid: {', '.join(DATAFLOWS)}") from None

    if isinstance(dataflow, str):
        return np.full(n_ops, code(dataflow)), None
    if isinstance(dataflow, (list, tuple)):
        if not dataflow:
            raise CostInputError(f"dataflow list is empty; give one or more of {', '.join(DATAFLOWS)}")
        names = [str(d).lower() for d in dataflow]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:  # the result's dataflow coordinate would hold it twice, and .sel(dataflow=...) be ambiguous
            raise CostInputError(f"dataflow list names {', '.join(map(repr, twice))} more than once; name each once")
        return np.array([[code(d)] for d in names]), names
    if dataflow is None or isinstance(dataflow, Mapping) or np.ndim(getattr(dataflow, "values", dataflow)) == 0:
        raise CostInputError(f"dataflow {str(dataflow)[:80]!r} ({type(dataflow).__name__}) is not a dataflow: give "
                             f"a name ({', '.join(DATAFLOWS)}), a list of names (each priced), or an array of one "
                             "name per op")
    per_op = np.asarray(getattr(dataflow, "values", dataflow)).reshape(-1)
    if per_op.size != n_ops:
        raise CostInputError(f"a per-op dataflow array needs one entry per op ({n_ops}), got {per_op.size}; "
                             "pass a list or tuple to ask for several dataflows instead")
    return np.array([code(d) for d in per_op]), None


def input_table(ops: Any, op: np.ndarray | None = None, with_elements: bool = False
                ) -> tuple[np.ndarray, ...] | None:
    """``(start, nbytes)``: the bytes (program dtype) of every input of the ops of ``ops``, a ragged array (op ``i``'s
    inputs are ``nbytes[start[i]:start[i + 1]]``, :func:`dfit_nb._operands.input_table`); ``op``: the ids of the
    ops to read, in order (default every row). A Trace's are read from ``trace.operands``; a table's from its
    ``in_shapes`` column, text such as ``float32[2,3] int32[]`` (an error names the row of a malformed one);
    None when it has neither. ``with_elements``: each input's element count as a third array.

    >>> start, nbytes = input_table({"in_shapes": ["float32[2,3] bfloat16[4]", "int32[]"]})
    >>> start.tolist(), nbytes.tolist()
    ([0, 2, 3], [24.0, 8.0, 4.0])
    """
    operands = getattr(ops, "operands", None)
    if isinstance(operands, xr.Dataset) and hasattr(ops, "ops"):
        ids = _table(ops)["op"].values if op is None else op
        return _operands.input_table(operands, ids, machine.DEFAULT_ITEMSIZE, with_elements)
    shapes = _raw_columns(_table(ops))("in_shapes")
    if shapes is None:
        return None
    # a missing cell (a DataFrame's NaN, None) names no inputs
    texts = [t if isinstance(t, str) else "" for t in np.asarray(shapes, dtype=object).reshape(-1)]
    try:
        operands = _operands.from_text(np.arange(len(texts)), texts, [""] * len(texts))
    except _operands.ShapeTextError as err:
        raise CostInputError(str(err)) from None
    return _operands.input_table(operands, np.arange(len(texts)) if op is None else op, machine.DEFAULT_ITEMSIZE,
                                 with_elements)


#: op-table columns of the inputs' widths (bytes per element; 0: unknown, the op's own ``itemsize``)
ITEMSIZE_COLUMNS = ("in_itemsize", "lhs_itemsize", "rhs_itemsize")


def operand_itemsizes(start: np.ndarray, nbytes: np.ndarray, elems: np.ndarray) -> dict[str, np.ndarray]:
    """Bytes per element of each op's inputs, from an :func:`input_table` with elements: ``in_itemsize`` over all
    of them (bytes over elements), ``lhs_itemsize`` and ``rhs_itemsize`` of its first and second (a GEMM's
    operands); 0 where an op has no such input. The model scales each operand's program bytes by its own width
    (:func:`dfit_nb.sim.machine.model`): a bfloat16 matmul into float32 reads two bytes per element, not one.

    >>> sizes = operand_itemsizes(np.array([0, 2, 3]), np.array([24.0, 8.0, 4.0]), np.array([6.0, 4.0, 1.0]))
    >>> {k: v.tolist() for k, v in sizes.items()}
    {'in_itemsize': [3.2, 4.0], 'lhs_itemsize': [4.0, 4.0], 'rhs_itemsize': [2.0, 0.0]}
    """
    n = len(start) - 1
    owner = np.repeat(np.arange(n), np.diff(start))
    total_b = np.bincount(owner, weights=nbytes, minlength=n)
    total_e = np.bincount(owner, weights=elems, minlength=n)
    rows = np.arange(n)
    out = {"in_itemsize": np.where(total_e > 0, total_b / np.maximum(total_e, 1.0), 0.0)}
    for key, position in (("lhs_itemsize", 0), ("rhs_itemsize", 1)):
        b = _operands.input_bytes_at(start, nbytes, rows, np.full(n, position))
        e = _operands.input_bytes_at(start, elems, rows, np.full(n, position))
        out[key] = np.where(e > 0, b / np.maximum(e, 1.0), 0.0)
    return out


def whole_elements(nbytes: np.ndarray, itemsize: np.ndarray) -> np.ndarray:
    """Elements in ``nbytes`` at ``itemsize`` bytes each (0 where the width is unknown): rounded up, after rounding
    away the float error of a width averaged over mixed inputs (3 x 5/3 bytes is 5 bytes, not 5.0000000001).

    >>> whole_elements(np.array([5.0, 10.0, 7.0]), np.array([5 / 3, 2.0, 0.0])).tolist()
    [3.0, 5.0, 0.0]
    """
    w = np.asarray(itemsize, np.float64)
    return np.where(w > 0, np.ceil(np.round(np.asarray(nbytes, np.float64) / np.where(w > 0, w, 1.0), 6)), 0.0)


def alone_arrays(ops: Any) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The model's inputs for every op of ``ops`` taken alone: as a one-op program replays it.

    Operands come from DRAM (nothing feeds them on chip), results go back to it
    (nothing consumes them on chip). Operand sizes come from a Trace's
    ``operands``, or a table's ``in_shapes`` text (``float32[2,3] int32[]``,
    :func:`input_table`), else from the GEMM view (``B M K`` and ``B K N``
    elements, ``B M N`` written).
    """
    columns, coord = alone_columns(ops)
    return alone_inputs(columns, np), coord


def alone_columns(ops: Any) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """What :func:`alone_inputs` derives the model's inputs from: :func:`ops_arrays`' columns, plus ``lhs_given``
    and ``rhs_given``, the bytes of an op's first two operands (:func:`input_table`; NaN where the table has none:
    the GEMM view's are used)."""
    table = _table(ops)
    column = _raw_columns(table)
    if not isinstance(table, xr.Dataset):  # a user's table (a Dataset is a capture's): a typo must not be ignored
        _refuse_near_misses(table)
    fields = hardware_columns(table)
    if fields:
        raise CostInputError(
            f"ops column(s) {fields} name Hardware fields: cost() prices every op on one machine, hw; set them "
            f"there (hw.replace({fields[0]}=...)), price several machines with dfit_nb.sim.sweep(), or give "
            "per-row machine settings to dfit_nb.sim.calibrate() / dfit_nb.sim.calibration.predict()")
    arrays, coord = _ops_arrays(table, column)
    inputs = input_table(ops, with_elements=True)
    if inputs is None:
        arrays["lhs_given"] = arrays["rhs_given"] = np.full(len(coord), np.nan)
        arrays.update({key: np.zeros(len(coord)) for key in ITEMSIZE_COLUMNS})  # unknown: the op's own dtype
    else:
        start, nbytes, elems = inputs
        if len(start) - 1 != len(coord):
            raise CostInputError(f"ops columns must have one value per op; 'in_shapes' has {len(start) - 1}, m "
                                 f"{len(coord)}")
        rows, have = np.arange(len(coord)), np.diff(start)
        for key, position in (("lhs_given", 0), ("rhs_given", 1)):
            arrays[key] = np.where(have > position, _operands.input_bytes_at(start, nbytes, rows, position), np.nan)
        arrays.update(operand_itemsizes(start, nbytes, elems))
        # the inputs' elements at their own width (a converting op's input is not the width of its result)
        read = column("bytes_read")
        if read is not None:
            arrays["elems_in"] = np.where(arrays["in_itemsize"] > 0, whole_elements(
                numeric(read, "ops column 'bytes_read'"), arrays["in_itemsize"]), arrays["elems_in"])
    return arrays, coord


def alone_inputs(columns: Mapping[str, Any], xp: Any = np) -> dict[str, Any]:
    """The model's inputs of every op alone (see :func:`alone_arrays`) from :func:`alone_columns`: one formula,
    run on the host (``xp`` NumPy) or inside :func:`cost`'s compiled program (``jax.numpy``, where a warm call's
    host work is what it costs). Every step is exact in float64 (products, maxima, selections): both give the
    same numbers."""
    m, k, n = columns["m"], columns["k"], columns["n"]
    b = xp.maximum(columns["batch"], 1.0)
    unit = xp.where(columns["itemsize"] > 0, columns["itemsize"], machine.DEFAULT_ITEMSIZE)
    in_unit = xp.where(columns["in_itemsize"] > 0, columns["in_itemsize"], unit)
    gemm = (m > 0) & (k > 0) & (n > 0)
    bm = b * m
    lhs = xp.where(xp.isnan(columns["lhs_given"]), bm * k * unit, columns["lhs_given"])
    rhs = xp.where(xp.isnan(columns["rhs_given"]), b * k * n * unit, columns["rhs_given"])
    read, written = columns["elems_in"] * in_unit, columns["elems_out"] * unit
    zeros, ones = xp.zeros_like(m), xp.ones_like(m)
    out = {key: value for key, value in columns.items() if key not in ("lhs_given", "rhs_given", *PLACEMENTS[:2])}
    # an operand already in SRAM (a_on_chip, b_on_chip) is one the model's fed fractions say arrives on chip; alone,
    # nothing moves it there, so no DRAM or NoC byte is charged for it
    out.update(
        gemm=gemm.astype(xp.float64), lhs_bytes=xp.where(gemm, lhs, 0.0), rhs_bytes=xp.where(gemm, rhs, 0.0),
        fed0=columns.get("a_on_chip", zeros), fed1=columns.get("b_on_chip", zeros), ext_bytes=read,
        bytes_written=xp.where(gemm & (written <= 0), bm * n * unit, written),
        has_consumer=zeros, count=ones, real=ones,
    )
    return out


def op_counts(ops: Any, n_ops: int) -> np.ndarray:
    """Executions per call from the ops table's ``count`` column (1 when it has none)."""
    count = _column(_table(ops), "count")
    return np.ones(n_ops) if count is None else np.asarray(count, dtype=np.float64)
