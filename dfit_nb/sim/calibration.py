"""Calibration against measured times: fit Hardware fields by gradient through the one machine model.

:func:`predictor` turns an op table and a machine's grid into a pure function
``Hardware -> per-op outputs`` (the ops-alone model of :func:`dfit_nb.sim.cost`:
the mapping search, :func:`dfit_nb.sim.machine.model`, the body time), so
``jax.grad`` and ``jax.jacfwd`` go through it with respect to the machine's
continuous fields (clock, bandwidths, latencies, the per-op overhead, energies;
the tile grid and array sizes are shapes of the search and stay fixed).

:func:`calibrate` fits chosen fields to measured seconds: a loss of the log
error (:func:`row_loss`: soft-L1 by default, so that a few rows the model cannot
explain do not set a field), its gradient through the model, BFGS (:func:`_bfgs`:
it returns the lowest point it evaluated, with that point's loss) over
unconstrained parameters mapped into each field's bounds (a sigmoid), so the
fitted machine is always valid (:attr:`Calibration.at_bounds` names the values
that ended on an edge of their box); a field may be fitted once per group of
rows (``per_group``). It fits on a seeded, stratified half of the rows and
reports on the other half: MAPE, Pearson and Spearman correlation, per size
bucket and pooled.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import xarray as xr
from tqdm.auto import tqdm

from .._files import open_tree, save_tree
from .._html import render, trusted
from .._runtime.padding import padded_count, padded_index
from ..errors import DfitError, DfitWarning
from ._cost import alone, batch_tables, for_jit, grid_tables, model_outputs
from ._optable import (
    OP_SETTINGS,
    PLACEMENTS,
    alone_arrays,
    dataflow_codes,
    dtype_itemsizes,
    fidelity_passes,
    hardware_columns,
    numeric,
    placement_flags,
)
from .hardware import FIELDS, THERMAL_FIELDS, Hardware, HardwareError, check_hardware, from_field_vector
from .kernels import splits_rows

#: fields a calibration may fit: continuous ones (whole-number sizes have no gradient to follow), except the
#: thermal ones (:data:`~dfit_nb.sim.hardware.THERMAL_FIELDS`): a per-op time does not depend on them, so their
#: gradient is zero and a fit could only leave them where they started
FITTABLE = tuple(f for f, (_, _, kind, _, _) in FIELDS.items()
                 if kind in ("positive", "nonneg") and f not in THERMAL_FIELDS)
#: default fields: how fast the arrays run, how fast and how soon memory feeds them, how much of that hides
#: under compute, and the fixed costs per op (every op's, and a GEMM's whose K is its shortest side)
DEFAULT_FIELDS = ("clock_ghz", "dram_bytes_per_cycle", "dram_latency_cycles", "memory_overlap", "op_overhead_cycles",
                  "short_reduction_cycles")
#: default fields for program and kernel rows (any op): the GEMM defaults and the vector unit's
KERNEL_FIELDS = (*DEFAULT_FIELDS, "vector_rate", "transcendental_cycles", "vector_overlap")
#: the losses :func:`calibrate` minimises over the fitted rows' log errors r = log(predicted / measured):
#: ``"soft_l1"`` (the default) is 2 s^2 (sqrt(1 + (r / s)^2) - 1) with s = :data:`SOFT_L1_SCALE`, r^2 while a
#: row is off by well under s (about 10%) and 2 s |r| beyond, so a row the model cannot explain (a library's
#: poor blocking, a preempted timing) pulls on the fields as an absolute error does, not as its square;
#: ``"squared"`` is the mean squared log error, which lets a few such rows set a field (scipy's
#: ``least_squares`` calls the first ``soft_l1`` and the second ``linear``)
LOSSES = ("soft_l1", "squared")
DEFAULT_LOSS = "soft_l1"
#: the log error (about 10%) where the soft-L1 loss turns from squared to absolute
SOFT_L1_SCALE = 0.1
#: how many times :func:`calibrate` starts BFGS again from where it stopped, while that lowers the loss
RESTARTS = 8
#: measured-time columns accepted, with their scale to seconds
TIME_COLUMNS = {"time_s": 1.0, "seconds": 1.0, "time_us": 1e-6, "time_ns": 1e-9}


def row_loss(r: Any, loss: str = DEFAULT_LOSS) -> Any:
    """Each row's term of :func:`calibrate`'s loss (:data:`LOSSES`) for log errors ``r``, in ``jax.numpy`` (so
    the descent differentiates it) or NumPy alike.

    >>> import numpy as np
    >>> [round(float(v), 5) for v in row_loss(np.array([0.0, 0.01, 1.0]))]     # ~r^2 near 0, ~0.2 |r| far out
    [0.0, 0.0001, 0.181]
    >>> float(row_loss(np.array(0.5), "squared"))
    0.25
    """
    if loss == "squared":
        return r * r
    s = SOFT_L1_SCALE
    return 2.0 * s * s * ((1.0 + (r / s) ** 2) ** 0.5 - 1.0)


def _check_loss(loss: Any) -> None:
    if not isinstance(loss, str) or loss not in LOSSES:
        raise CalibrationError(f"loss must be one of {', '.join(repr(x) for x in LOSSES)} (the soft-L1 loss of the log "
                               f"error, robust to rows the model cannot explain, or its square), got {loss!r}")


def _time_column(columns: Any) -> str | None:
    """The one time column of ``columns`` (None when none): two (``time_s`` and ``time_us``) are refused by name,
    as either could be the measurement and the other would be dropped without a word."""
    found = [c for c in TIME_COLUMNS if c in columns]
    if len(found) > 1:
        raise CalibrationError(f"measured has several time columns {found}: it is ambiguous which one holds the "
                               f"measured time; keep exactly one of {', '.join(TIME_COLUMNS)}")
    return found[0] if found else None
#: the columns of measured GEMM rows besides the time and the Hardware fields (each of which, as a column, sets
#: that field for its row): the shapes, the dtype, the size bucket and the per-op settings of the op table
MEASURED_COLUMNS = ("m", "k", "n", "batch", "dtype", "bucket", *OP_SETTINGS)


class CalibrationError(DfitError, ValueError):
    """The measurements, fields or bounds cannot be calibrated on."""


class CalibrationWarning(DfitWarning):
    """The fit did not converge: the machine returned is the last iterate, flagged so."""


def predictor(ops: Any, hw: Hardware, dataflow: Any = "ws", memory: str = "finite", *,
              groups: Mapping[str, np.ndarray] | None = None) -> Callable[[Hardware], dict[str, Any]]:
    """A pure function ``Hardware -> per-op outputs`` of ``ops`` alone, for ``jax.grad`` / ``jax.jacfwd``.

    ``dataflow``: one name, one per op, or a list or tuple: per op the fastest
    of those (``dataflow`` in the outputs says which, by code).

    The grid (tile rows and columns) of ``hw`` is fixed in the function (it
    shapes the mapping search); every other field comes from the Hardware it
    is called with, so gradients flow to them. Columns of ``ops`` named after
    Hardware fields set those fields per row (:func:`row_machines`): each
    group of rows on its own machine, one vmapped model over the groups. Outputs are those of
    :func:`dfit_nb.sim.cost` (``cycles``, ``energy_pj``, ...) plus ``seconds``.
    Call it under ``jax.enable_x64(True)`` (the model counts in float64).

    ``groups`` (``{field: per-row group index}``): fields given per group of rows. The Hardware the function is
    called with holds each of those fields as a vector, one value per group, and each row is priced with its
    group's value, its rows on a machine of their own as for a field set by a column (what :func:`calibrate`'s
    ``per_group`` fits).

    Examples
    --------
    >>> import jax
    >>> from dfit_nb.sim import presets
    >>> from dfit_nb.sim.calibration import predictor
    >>> hw = presets.get("tpu_v4")
    >>> f = predictor({"m": [512], "k": [512], "n": [512], "dtype": ["float16"]}, hw)
    >>> with jax.enable_x64(True):  # jitted: one compile, where an eager grad dispatches every primitive
    ...     h = jax.tree.map(lambda x: jax.numpy.asarray(x, float), hw)
    ...     g = jax.jit(jax.grad(lambda h: f(h)["seconds"].sum()))(h)
    >>> float(g.clock_ghz) < 0 < float(g.op_overhead_cycles)  # a faster clock, a smaller overhead: less time
    True
    """
    if memory not in ("finite", "ideal"):
        raise CalibrationError(f"unknown memory mode {memory!r}; valid: finite, ideal")
    ideal = memory == "ideal"
    machines = row_machines(ops, hw, by=groups)
    if machines is not None:
        return _grouped_predictor(machines, hw, dataflow, ideal)
    arrays, coord = alone_arrays(ops)
    codes, names = dataflow_codes(dataflow, len(coord))
    tables = grid_tables(int(np.asarray(hw.tile_rows)), int(np.asarray(hw.tile_cols)))

    def predict_with(h: Hardware) -> dict[str, Any]:
        table = {k: jnp.asarray(v, jnp.float64) for k, v in arrays.items()}
        return _alone_seconds(table, h, codes, names, tables, ideal, hw.execution == "spatial")

    return predict_with


def _alone_seconds(table: dict[str, Any], h: Hardware, codes: Any, names: list[str] | None, tables: Any,
                   ideal: bool, spatial: bool = False) -> dict[str, Any]:
    """:func:`~dfit_nb.sim._cost.alone` of every op of ``table`` on ``h`` (per op the fastest of several
    dataflows when ``names``), with ``dataflow`` (its code) and ``seconds``. ``spatial``: the machine is
    layer-pipelined (``h``, a traced copy, no longer says so)."""
    if names:  # the fastest of several dataflows per op: the compiler picks which operand stays
        every = jax.vmap(lambda d: alone(table, h, d[0], tables, ideal, spatial))(jnp.asarray(codes, jnp.float64))
        best = jnp.argmin(every["cycles"], axis=0)
        out = {k: jnp.take_along_axis(v, best[None, :], axis=0)[0] for k, v in every.items()}
        out["dataflow"] = jnp.asarray(codes, jnp.float64)[:, 0][best]
    else:
        out = alone(table, h, jnp.asarray(codes, jnp.float64), tables, ideal, spatial)
        out["dataflow"] = jnp.asarray(codes, jnp.float64)
    out["seconds"] = out["cycles"] / (jnp.asarray(h.clock_ghz, jnp.float64) * 1e9)
    return out


@dataclasses.dataclass(frozen=True)
class RowMachines:
    """An op table whose rows set Hardware fields (:func:`row_machines`): the table without those columns, the
    fields, and per group of rows that set them alike the values and the rows (in table order)."""

    table: pd.DataFrame
    fields: tuple[str, ...]
    values: np.ndarray  # (groups, fields)
    rows: tuple[np.ndarray, ...]  # per group, its row indexes
    #: fields given per group of rows (``row_machines``' ``by``): per field, each machine's group index
    by: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def machine(self, hw: Hardware, group: int) -> Hardware:
        """``hw`` with group ``group``'s fields set."""
        return hw.replace(**{f: _field_value(f, v) for f, v in zip(self.fields, self.values[group], strict=True)})


def _field_value(field: str, value: float) -> float | int:
    """A field's value as the Hardware constructor expects it: whole-number fields (grid, arrays, buffers,
    words) as ints, the rest as floats."""
    return int(value) if FIELDS[field][2] in ("count", "size", "word") and float(value).is_integer() else value


def row_machines(ops: Any, hw: Hardware, error: type[DfitError] = CalibrationError,
                 label: str = "ops", by: Mapping[str, np.ndarray] | None = None) -> RowMachines | None:
    """The groups of rows of ``ops`` (a DataFrame or a mapping of columns) that set :class:`Hardware` fields as
    columns, each a machine of its own: ``hw`` with that row's values; None when no column names a field.

    ``by`` (``{field: per-row group index}``, fields given per group of rows, see :func:`predictor`): rows of
    different groups are machines of their own too, and :attr:`RowMachines.by` says each machine's group.

    Each group's machine is checked as the constructor checks it: a bad value is refused with ``error``, naming
    the column, its first row of that value and why.

    >>> from dfit_nb.sim import presets
    >>> g = row_machines({"m": [64] * 3, "k": [64] * 3, "n": [64] * 3, "tile_cols": [4, 2, 4]},
    ...                  presets.get("tpu_like"))
    >>> g.fields, g.values.tolist(), [r.tolist() for r in g.rows]
    (('tile_cols',), [[2.0], [4.0]], [[1], [0, 2]])
    """
    if isinstance(ops, pd.DataFrame):
        frame = ops
    elif isinstance(ops, Mapping):
        frame = None
    else:
        return None  # a Trace or a Dataset: a program's ops, which set no machine field
    fields = tuple(hardware_columns(ops))
    by = dict(by or {})
    if not fields and not by:
        return None
    frame = frame if frame is not None else pd.DataFrame({k: np.asarray(v).reshape(-1) for k, v in ops.items()})
    keyed = [numeric(frame[f], f"{label} column {f!r}", error) for f in fields]
    keyed += [np.asarray(v, np.float64).reshape(-1) for v in by.values()]
    columns = np.stack(keyed, axis=1) if keyed else np.zeros((len(frame), 0))
    values, inverse = np.unique(columns, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    rows = tuple(np.flatnonzero(inverse == g) for g in range(len(values)))
    out = RowMachines(frame.drop(columns=list(fields)).reset_index(drop=True), fields, values[:, :len(fields)], rows,
                      {f: values[:, len(fields) + i].astype(np.int64) for i, f in enumerate(by)})
    for g in range(len(values)):
        try:
            out.machine(hw, g)
        except HardwareError as err:
            field = next((f for f in fields if f"Hardware.{f} " in str(err)), fields[0])
            raise error(f"{label} column {field!r} row {int(rows[g][0])}: {err}") from None
    return out


def _grouped_predictor(machines: RowMachines, hw: Hardware, dataflow: Any, ideal: bool
                       ) -> Callable[[Hardware], dict[str, Any]]:
    """:func:`predictor` of rows on machines of their own (:func:`row_machines`): every group's rows, padded to
    one power-of-two count (copies of its first row, priced alone and dropped), on its machine, in one vmapped
    model over the groups, the grid tables padded to the largest grid's bucket (as a sweep's): one compiled
    model whatever the groups' grids."""
    arrays, coord = alone_arrays(machines.table)
    codes, names = dataflow_codes(dataflow, len(coord))
    size = padded_count(max(len(r) for r in machines.rows), 1)
    index = np.stack([r[padded_index(len(r), size)] for r in machines.rows])  # (groups, size): source rows
    table = {k: np.asarray(v, np.float64)[index] for k, v in arrays.items()}
    df = codes if names else np.asarray(codes, np.float64)[index]
    where = np.empty(len(coord), np.int64)  # each row's place in the flattened (groups, size) outputs
    for g, r in enumerate(machines.rows):
        where[r] = g * size + np.arange(len(r))
    values = {f: machines.values[:, i] for i, f in enumerate(machines.fields)}
    rows = values.get("tile_rows", np.full(len(machines.rows), float(np.asarray(hw.tile_rows))))
    cols = values.get("tile_cols", np.full(len(machines.rows), float(np.asarray(hw.tile_cols))))
    (row_tables, col_tables), which = batch_tables(rows, cols)
    groups = len(machines.rows)

    def predict_with(h: Hardware) -> dict[str, Any]:
        every = jax.tree.map(lambda x: jnp.broadcast_to(jnp.asarray(x, jnp.float64), (groups,)),
                             dataclasses.replace(h, **{f: jnp.asarray(getattr(h, f))[0] for f in machines.by}))
        every = dataclasses.replace(every, **{f: jnp.asarray(v, jnp.float64) for f, v in values.items()},
                                    **{f: jnp.asarray(getattr(h, f), jnp.float64)[g] for f, g in machines.by.items()})

        def one(part: dict[str, Any], h_g: Hardware, t_rows: Any, t_cols: Any, df_g: Any) -> dict[str, Any]:
            return _alone_seconds(part, h_g, codes if names else df_g, names, (t_rows, t_cols), ideal,
                                  hw.execution == "spatial")

        part = {k: jnp.asarray(v) for k, v in table.items()}
        out = jax.vmap(one, in_axes=(0, 0, 0, 0, None if names else 0))(
            part, every, row_tables[which], col_tables[which], jnp.asarray(df, jnp.float64))
        return {k: v.reshape(-1)[where] for k, v in out.items()}

    return predict_with


def vector_predictor(ops: Any, hw: Hardware, dataflow: Any = "ws", memory: str = "finite"
                     ) -> Callable[[Any], dict[str, Any]]:
    """:func:`predictor` over the machine's fields as one vector: ``fields -> per-op outputs``, where ``fields``
    is :func:`~dfit_nb.sim.hardware.field_vector` of a machine (one float64 per :data:`FIELDS` entry, in order).

    The same model as :func:`predictor` (it rebuilds the Hardware from the vector inside the function); one array
    instead of a pytree of 32 leaves is what a jitted call dispatches fastest (``python
    benchmarks/bench_cost_call.py``), and the gradient is one vector in field order, as an optimiser wants it.

    >>> import jax
    >>> from dfit_nb.sim import presets
    >>> from dfit_nb.sim.calibration import vector_predictor
    >>> from dfit_nb.sim.hardware import FIELDS, field_vector
    >>> hw = presets.get("tpu_v4")
    >>> f = vector_predictor({"m": [512], "k": [512], "n": [512], "dtype": ["float16"]}, hw)
    >>> with jax.enable_x64(True):
    ...     g = jax.jit(jax.grad(lambda v: f(v)["seconds"].sum()))(field_vector(hw))
    >>> order = list(FIELDS)
    >>> float(g[order.index("clock_ghz")]) < 0 < float(g[order.index("op_overhead_cycles")])
    True
    """
    f = predictor(ops, hw, dataflow, memory)
    return lambda fields: f(from_field_vector(fields))


def predict(ops: Any, hw: Hardware, dataflow: Any = "ws", memory: str = "finite", *,
            per_group: Mapping[str, PerGroup] | None = None) -> dict[str, np.ndarray]:
    """Per-op seconds, cycles and the rest of :func:`dfit_nb.sim.cost`'s outputs as NumPy arrays, plus
    ``dataflow`` (the code of the dataflow used: with several, per op the fastest, as :func:`predictor` picks it).

    Columns named after :class:`Hardware` fields set that field per row (:func:`row_machines`): each group of
    rows is priced on its own machine.

    It runs :func:`~dfit_nb.sim.cost`'s compiled program (op count padded to a power of two, grid to its bucket),
    so after a ``cost()`` or another prediction of a similar-sized table it compiles nothing; :func:`predictor`
    is the same model as a pure function for ``jax.grad`` (``tests/sim/test_calibration.py`` checks both equal).

    ``per_group`` (a :class:`Calibration`'s, ``{field: PerGroup}``): each row takes its group's value of the
    field, its group named by the row's value in the group's column, as if the field were a column of the rows;
    a group the calibration did not fit is refused, with those it did.

    >>> from dfit_nb.sim import presets
    >>> from dfit_nb.sim.calibration import predict
    >>> p = predict({"m": [64, 4096], "k": [64, 4096], "n": [64, 4096], "dtype": ["float16"] * 2},
    ...             presets.get("tpu_v4"))
    >>> bool(p["seconds"][1] > p["seconds"][0] > 0)
    True
    """
    if per_group:
        ops = _with_group_values(ops, per_group)
    machines = row_machines(ops, hw)
    if machines is not None:  # rows on machines of their own: each group of them on its machine
        parts = [(r, predict(machines.table.iloc[r], machines.machine(hw, g), dataflow, memory))
                 for g, r in enumerate(machines.rows)]
        joined = {}
        for key in parts[0][1]:
            joined[key] = np.empty(len(machines.table))
            for r, part in parts:
                joined[key][r] = part[key]
        return joined
    # cost()'s own compiled program (padded op count, grid bucket): a prediction after a cost() call, or of a
    # table of similar size, compiles nothing; it checks the inputs (a bad memory mode is named with the valid ones)
    out, names, _, codes, _ = model_outputs(ops, hw, dataflow, memory)
    if not names:
        return {**out, "dataflow": codes.astype(np.float64)}
    best = np.argmin(out["cycles"], axis=0)  # per op the fastest of the dataflows, as predictor() picks it
    picked = {k: np.take_along_axis(np.broadcast_to(v, out["cycles"].shape), best[None, :], axis=0)[0]
              for k, v in out.items()}
    return {**picked, "dataflow": codes[:, 0][best].astype(np.float64)}


def _with_group_values(ops: Any, per_group: Mapping[str, PerGroup]) -> pd.DataFrame:
    """``ops`` with each per-group field as a column of its rows' group values, the group columns dropped."""
    frame = ops if isinstance(ops, pd.DataFrame) else pd.DataFrame(
        {k: np.asarray(v).reshape(-1) for k, v in dict(ops).items()})
    values = {}
    for field, per in per_group.items():
        if per.column not in frame.columns:
            raise CalibrationError(f"the rows have no column {per.column!r}, which names each row's group of "
                                   f"{field!r} (fitted per group: {', '.join(sorted(per.values))})")
        names = frame[per.column].astype(str).to_numpy()
        unseen = sorted(set(names) - set(per.values))
        if unseen:
            raise CalibrationError(f"{per.column!r} group(s) {unseen} were not fitted, so {field!r} has no value for "
                                   f"them; fitted groups: {', '.join(sorted(per.values))}")
        values[field] = np.array([per.values[n] for n in names], np.float64)
    drop = sorted({p.column for p in per_group.values()} - set(MEASURED_COLUMNS))
    return frame.drop(columns=drop).assign(**values)


@dataclasses.dataclass(frozen=True)
class PerGroup:
    """A field fitted once per group of rows (:func:`calibrate`'s ``per_group``): the column that names each row's
    group, and the fitted value of each group."""

    column: str
    values: Mapping[str, float]


@dataclasses.dataclass(frozen=True)
class Calibration:
    """A machine fitted to measured times, with its predictions and error on fitted and held-out rows.

    Attributes
    ----------
    hw : Hardware
        The fitted machine (its name says so).
    base : Hardware
        The machine the fit started from.
    fields : tuple of str
        The fitted fields.
    rows : xarray.Dataset
        Dim ``row``: ``m``, ``k``, ``n``, ``batch``, ``measured_s``, ``predicted_s`` (fitted machine),
        ``base_predicted_s``, ``fitted`` (the row was fitted), ``bucket``, and the per-row settings the
        measurements gave (``math_fidelity`` as passes, the placements as 0 / 1, Hardware fields).
    metrics : xarray.Dataset
        ``mape``, ``pearson``, ``spearman`` over (``machine``: base / fitted, ``split``: fitted / held_out,
        ``bucket``: each bucket and ``pooled``), and ``rows``.
    converged : bool
    loss : float
        The final value of the loss (``objective``) on the fitted rows: the mean of :func:`row_loss` of the
        fitted machine's log errors, as :func:`predict` prices it.
    seed : int
        The seed of the split.
    per_group : dict
        ``{field: PerGroup}``: the fields fitted once per group of rows (``calibrate``'s ``per_group``), with
        the column naming the groups and each group's value; ``hw`` keeps the start's value of those fields.
        :meth:`predict` prices new rows with them.
    objective : str
        The loss minimised (:data:`LOSSES`): ``"soft_l1"`` or ``"squared"``.
    bounds : dict
        ``{field: (low, high)}``: the box each fitted field (and per-group field) was held in;
        :attr:`at_bounds` names those that ended on an edge of it.
    """

    hw: Hardware
    base: Hardware
    fields: tuple[str, ...]
    rows: xr.Dataset
    metrics: xr.Dataset
    converged: bool
    loss: float
    seed: int
    per_group: Mapping[str, PerGroup] = dataclasses.field(default_factory=dict)
    objective: str = DEFAULT_LOSS
    bounds: Mapping[str, tuple[float, float]] = dataclasses.field(default_factory=dict)

    @property
    def at_bounds(self) -> dict[str, str]:
        """The fitted values that ended on an edge of their box, ``{field: "lower" | "upper"}`` (a per-group value
        as ``field[group]``): the rows pushed them as far as allowed, so each is a limit of the fit, not a measured
        figure (no row pins it, or another field explains what it would); widen its ``bounds=`` or fit without it.
        An edge is within 1% of a positive bound's value, within 0.2% of a share's 0..1, or within 0.01% of the box
        from a lower bound of 0.

        >>> import pandas as pd
        >>> from dfit_nb.sim import presets
        >>> from dfit_nb.sim.calibration import calibrate, predict
        >>> tpu = presets.get("tpu_v4")
        >>> square = pd.DataFrame({"m": [256, 1024, 4096] * 4, "k": [256, 1024, 4096] * 4, "n": [512] * 12})
        >>> square["time_s"] = predict(square, tpu.replace(clock_ghz=0.2))["seconds"]   # slower than the box allows
        >>> calibrate(square, tpu, ["clock_ghz"], bounds={"clock_ghz": (0.5, 2.0)}, progress=False).at_bounds
        {'clock_ghz': 'lower'}
        """
        values = {f: float(np.asarray(getattr(self.hw, f))) for f in self.fields}
        values.update({f"{f}[{g}]": v for f, per in self.per_group.items() for g, v in per.values.items()})
        out = {}
        for name, v in values.items():
            lo, hi = self.bounds.get(name.split("[")[0], (np.nan, np.nan))
            share = lo == 0.0 and hi == 1.0
            low_edge = lo + 0.002 if share else lo * 1.01 if lo > 0 else lo + 1e-4 * (hi - lo)
            high_edge = hi - 0.002 if share else hi * 0.99
            if v <= low_edge:
                out[name] = "lower"
            elif v >= high_edge:
                out[name] = "upper"
        return out

    def predict(self, ops: Any, dataflow: Any = "ws", memory: str = "finite") -> dict[str, np.ndarray]:
        """:func:`predict` of op rows on the fitted machine, each row with its group's fitted values
        (``per_group``): the rows need the group column(s), and a group the fit did not see is refused.

        >>> import numpy as np, pandas as pd
        >>> from dfit_nb.sim import presets
        >>> from dfit_nb.sim.calibration import calibrate, predict
        >>> hw = presets.get("tpu_v4")
        >>> sizes = np.array([128, 512, 1024, 2048, 4096] * 2)
        >>> rows = pd.DataFrame({"m": sizes, "k": sizes, "n": sizes, "h": ["a", "b"] * 5})
        >>> rows["time_s"] = predict(rows.drop(columns="h").assign(op_overhead_cycles=np.where(
        ...     rows["h"] == "a", 4000.0, 800.0)), hw)["seconds"]
        >>> cal = calibrate(rows, hw, ["clock_ghz"], per_group={"op_overhead_cycles": "h"})
        >>> p = cal.predict(pd.DataFrame({"m": [64, 64], "k": [64, 64], "n": [64, 64], "h": ["a", "b"]}))
        >>> bool(p["seconds"][0] > p["seconds"][1])
        True
        """
        return predict(ops, self.hw, dataflow, memory, per_group=self.per_group)

    def summary(self) -> pd.DataFrame:
        """The metrics as a table: one row per (machine, split, bucket)."""
        return self.metrics.to_dataframe().reset_index()

    def __repr__(self) -> str:
        held = self.metrics.sel(split="held_out", bucket="pooled")
        fit = {f: float(np.asarray(getattr(self.hw, f))) for f in self.fields}
        fit.update({f"{f}[{g}]": v for f, per in self.per_group.items() for g, v in per.values.items()})
        state = "" if self.converged else " (NOT converged)"
        edges = self.at_bounds
        return (f"<dfit_nb.Calibration of {self.base.name!r}{state}: "
                + ", ".join(f"{k}={v:.4g}" + (f" (at its {edges[k]} bound)" if k in edges else "")
                            for k, v in fit.items())
                + f"; held-out MAPE {float(held['mape'].sel(machine='fitted')):.1%} "
                f"(base {float(held['mape'].sel(machine='base')):.1%}), Spearman "
                f"{float(held['spearman'].sel(machine='fitted')):.3f}; {int(self.rows.sizes['row'])} rows, "
                f"{int(self.rows['fitted'].sum())} fitted, seed {self.seed}>")

    def _repr_html_(self) -> str:
        table = self.summary().pivot_table(index=["split", "bucket"], columns="machine",
                                           values=["mape", "spearman", "pearson"])
        edges = self.at_bounds
        fields = [(f, float(np.asarray(getattr(self.base, f))), float(np.asarray(getattr(self.hw, f))),
                   edges.get(f, "")) for f in self.fields]
        fields += [(f"{f} [{per.column} = {g}]", float(np.asarray(getattr(self.base, f))), v,
                    edges.get(f"{f}[{g}]", "")) for f, per in self.per_group.items() for g, v in per.values.items()]
        # pandas escapes the table's text itself (to_html's escape=True)
        metrics = trusted(table.to_html(float_format=lambda v: f"{v:.3f}"))
        return render("calibration.html.j2", name=self.base.name, converged=self.converged, loss=self.loss,
                      objective=self.objective, seed=self.seed, fields=fields, metrics=metrics)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the rows and metrics (groups ``rows``, ``metrics``; the machines in the root's attrs) to one
        netCDF file, or a Zarr store for a ``.zarr`` path, as every dfit_nb result is saved
        (``docs/architecture.md``, "What save promises": it replaces only a previous dfit_nb save, atomically);
        see :func:`load`."""
        doc = {"hw": _hw_doc(self.hw), "base": _hw_doc(self.base), "fields": list(self.fields),
               "converged": self.converged, "loss": self.loss, "objective": self.objective, "seed": self.seed,
               "bounds": {f: list(b) for f, b in self.bounds.items()},
               "per_group": {f: {"column": p.column, "values": dict(p.values)} for f, p in self.per_group.items()}}
        root = xr.Dataset(attrs={"dfit_calibration": json.dumps(doc)})
        return save_tree(xr.DataTree.from_dict({"/": root, "rows": self.rows, "metrics": self.metrics}), path)


def load(path: str | os.PathLike[str]) -> Calibration:
    """A :class:`Calibration` written by :meth:`Calibration.save`."""
    tree = open_tree(path, "calibration", ("rows", "metrics"))
    if "dfit_calibration" not in tree.attrs:
        raise CalibrationError(f"{path} is not a dfit_nb calibration (no dfit_calibration attribute)")
    doc = json.loads(tree.attrs["dfit_calibration"])
    rows, metrics = tree["rows"].to_dataset(), tree["metrics"].to_dataset()
    return Calibration(hw=Hardware(**doc["hw"]), base=Hardware(**doc["base"]), fields=tuple(doc["fields"]),
                       rows=rows, metrics=metrics, converged=bool(doc["converged"]), loss=float(doc["loss"]),
                       seed=int(doc["seed"]), objective=str(doc.get("objective", "squared")),
                       bounds={str(f): (float(b[0]), float(b[1])) for f, b in doc.get("bounds", {}).items()},
                       per_group={f: PerGroup(str(p["column"]), {str(g): float(v) for g, v in p["values"].items()})
                                  for f, p in doc.get("per_group", {}).items()})


def _hw_doc(hw: Hardware) -> dict[str, Any]:
    return {"name": hw.name, "execution": hw.execution, "row_reductions": hw.row_reductions,
            **{f: float(np.asarray(getattr(hw, f))) for f in FIELDS}}


def measured_table(measured: Any) -> pd.DataFrame:
    """``m, k, n, batch, dtype, time_s`` (and ``bucket`` when given) from a DataFrame or a profile-mode Trace."""
    if isinstance(getattr(measured, "ops", None), xr.Dataset):
        ops = measured.ops
        if "time_s" not in ops:
            raise CalibrationError("the trace has no measured times: capture it with mode='profile' on your device")
        leaf = (ops["container"].values == "") if "container" in ops else np.ones(ops.sizes["op"], bool)
        t = ops["time_s"].values / np.maximum(ops["count"].values, 1)
        keep = leaf & (ops["m"].values > 0) & np.isfinite(t) & (t > 0)
        if not keep.any():
            raise CalibrationError("the trace has no GEMM op with a measured time (profile mode times ops on the "
                                   "device; a static capture has none)")
        sel = ops.isel(op=np.flatnonzero(keep))
        return pd.DataFrame({"m": sel["m"].values, "k": sel["k"].values, "n": sel["n"].values,
                             "batch": np.maximum(sel["batch"].values, 1), "dtype": sel["dtype"].values.astype(str),
                             "time_s": t[keep]})
    if not isinstance(measured, pd.DataFrame):
        raise CalibrationError(f"measured must be a pandas DataFrame (m, k, n, [batch, dtype], time_s or time_us) "
                               f"or a Trace captured in profile mode; got {type(measured).__name__}")
    missing = [c for c in ("m", "k", "n") if c not in measured.columns]
    time_col = _time_column(measured.columns)
    if missing or time_col is None:
        raise CalibrationError(f"measured lacks {missing + ([] if time_col else ['a time column'])}; it needs m, k, "
                               f"n and one of {', '.join(TIME_COLUMNS)} (optional: batch, dtype, bucket, "
                               f"{', '.join(OP_SETTINGS)}, and Hardware fields set per row)")
    known = (*MEASURED_COLUMNS, *TIME_COLUMNS, *FIELDS)
    unknown = [str(c) for c in measured.columns if c not in known]
    if unknown:  # a typo (tile_row, math_fidelty) would otherwise price every row on the unchanged machine
        import difflib

        near = {c: difflib.get_close_matches(c, known, 1) for c in unknown}
        hints = "".join(f"; {c!r}: did you mean {m[0]!r}?" for c, m in near.items() if m)
        raise CalibrationError(f"measured column(s) {unknown} are neither measurement columns nor Hardware fields"
                               f"{hints}; known: {', '.join((*MEASURED_COLUMNS, *TIME_COLUMNS))}, and any Hardware "
                               f"field, which sets that field for its row ({', '.join(FIELDS)})")
    # every row checked by column before any work: a row of m = 0, a time of 0 or "4096x" read from a CSV would
    # otherwise be fitted (moving the held-out error) or fail deep inside with a TypeError
    t = numeric(measured[time_col], f"measured {time_col!r}", CalibrationError) * TIME_COLUMNS[time_col]
    bad = ~np.isfinite(t) | (t <= 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise CalibrationError(f"measured {time_col!r} must be finite and > 0; row {i} is "
                               f"{float(t[i] / TIME_COLUMNS[time_col]):g}")
    sizes = {c: numeric(measured[c], f"measured {c!r}", CalibrationError)
             for c in ("m", "k", "n", "batch") if c in measured}
    for c, v in sizes.items():
        bad = ~np.isfinite(v) | (v < 1) | (v != np.floor(v))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise CalibrationError(f"measured {c!r} must hold whole numbers >= 1 (a GEMM's sizes); row {i} is "
                                   f"{v[i]:g}")
    dtype = measured["dtype"].astype(str).to_numpy() if "dtype" in measured else "float32"
    if "dtype" in measured:
        dtype_itemsizes(dtype, "measured 'dtype'", CalibrationError)
    out = pd.DataFrame({"m": sizes["m"], "k": sizes["k"], "n": sizes["n"], "batch": sizes.get("batch", 1.0),
                        "dtype": dtype, "time_s": t})
    if "bucket" in measured:
        out["bucket"] = measured["bucket"].astype(str).to_numpy()
    if "math_fidelity" in measured:
        out["math_fidelity"] = fidelity_passes(measured["math_fidelity"].to_numpy(), "measured 'math_fidelity'",
                                               CalibrationError)
    for c in PLACEMENTS:
        if c in measured:
            out[c] = placement_flags(measured[c].to_numpy(), f"measured {c!r}", CalibrationError)
    for c in FIELDS:
        if c in measured:
            out[c] = numeric(measured[c], f"measured {c!r}", CalibrationError)
    return out


def _buckets(table: pd.DataFrame) -> np.ndarray:
    """The size bucket of each row: the table's own, else a decade of MACs (``1e6-1e7`` ...)."""
    if "bucket" in table:
        return table["bucket"].astype(str).to_numpy()
    macs = table["batch"].to_numpy(np.float64) * table["m"] * table["k"] * table["n"]
    lo = np.floor(np.log10(np.maximum(macs.to_numpy(np.float64), 1.0))).astype(int)
    return np.array([f"1e{d}-1e{d + 1} MACs" for d in lo])


def stratified_split(buckets: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """A seeded boolean mask: ``fraction`` of each bucket's rows (at least one per bucket with two or more)."""
    rng = np.random.default_rng(seed)
    fit = np.zeros(len(buckets), bool)
    for b in np.unique(buckets):
        idx = np.flatnonzero(buckets == b)
        k = round(fraction * len(idx))
        k = min(max(k, 1 if len(idx) > 1 else 0), len(idx) - 1 if len(idx) > 1 else len(idx))
        fit[rng.choice(idx, size=k, replace=False)] = True
    return fit


def metrics(predicted: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    """MAPE, Pearson and Spearman correlation of ``predicted`` against ``measured``.

    >>> m = metrics(np.array([1.0, 2.0, 4.0]), np.array([1.0, 2.0, 5.0]))
    >>> round(m["mape"], 4), round(m["spearman"], 3)
    (0.0667, 1.0)
    """
    from scipy import stats

    p, y = np.asarray(predicted, np.float64), np.asarray(measured, np.float64)
    if len(y) < 2:
        return {"mape": float(np.mean(np.abs(p - y) / y)) if len(y) else np.nan, "pearson": np.nan,
                "spearman": np.nan}
    mape = float(np.mean(np.abs(p - y) / y))
    # a correlation of a (nearly) constant column is undefined: NaN, not SciPy's warning (a family of kernels
    # the model prices alike, two equal measurements)
    flat = [np.ptp(v) <= 1e-12 * max(float(np.max(np.abs(v))), 1e-300) for v in (p, y)]
    if any(flat):
        return {"mape": mape, "pearson": np.nan, "spearman": np.nan}
    return {"mape": mape, "pearson": float(stats.pearsonr(p, y)[0]), "spearman": float(stats.spearmanr(p, y)[0])}


def _bounds(hw: Hardware, fields: Sequence[str], bounds: Mapping[str, tuple[float, float]] | None
            ) -> dict[str, tuple[float, float]]:
    out = {}
    for f in fields:
        value = float(np.asarray(getattr(hw, f)))
        _, _, kind, field_lo, field_hi = FIELDS[f]
        # default: a factor 20 around the start within what the field allows; a share: all of 0..1
        default = (value / 20.0, value * 20.0) if value > 0 else (0.0, 1e5)
        default = (field_lo, field_hi) if field_hi == 1.0 else (max(default[0], field_lo), min(default[1], field_hi))
        lo, hi = (bounds or {}).get(f, default)
        lo, hi = float(lo), float(hi)
        if not (np.isfinite(lo) and np.isfinite(hi)) or lo >= hi:
            raise CalibrationError(f"bounds of {f!r} must be finite with low < high, got ({lo:g}, {hi:g})")
        if lo < field_lo or (kind == "positive" and lo <= 0) or hi > field_hi:
            raise CalibrationError(f"bounds of {f!r} ({lo:g}, {hi:g}) would leave the machine invalid: "
                                   f"Hardware.{f} must be {'>' if kind == 'positive' else '>='} {field_lo:g}"
                                   + ("" if np.isinf(field_hi) else f" and <= {field_hi:g}"))
        out[f] = (lo, hi)
    return out


def calibrate(measured: Any, hw: Hardware, fields: Sequence[str] | None = None, dataflow: Any = "ws", *,
              fit_fraction: float = 0.5, seed: int = 0, bounds: Mapping[str, tuple[float, float]] | None = None,
              max_iterations: int = 200, fusion: str | None = None,
              per_group: Mapping[str, str] | None = None, loss: str = DEFAULT_LOSS,
              progress: bool = True) -> Calibration:
    """Fit ``fields`` of ``hw`` to measured times of any op by gradient through the one machine model.

    Parameters
    ----------
    measured : pandas.DataFrame or Trace
        One of:

        * GEMM rows: ``m``, ``k``, ``n`` (optional ``batch``, ``dtype``, ``bucket``) and a time in ``time_s``,
          ``seconds``, ``time_us`` or ``time_ns``; each priced alone (:func:`dfit_nb.sim.cost`), with its own
          settings where the rows give them: the op table's ``dtype`` (``bfp8``, ``bfp4`` included),
          ``math_fidelity`` (LoFi, HiFi2, HiFi3, HiFi4 or 1-4 passes through the array), ``a_on_chip``,
          ``b_on_chip``, ``out_on_chip`` (booleans: the operand already sits in on-chip SRAM, sharded over the
          op's tiles, or the result stays there); and any column named after a :class:`Hardware` field, which
          sets that field for its row (``tile_rows``, ``tile_cols``, ``pe_rows``, ...): rows that set them alike
          run on one machine, each group on its own, and the fit moves the shared ``fields`` over all of them.
          Any other column is refused by name;
        * program rows, of any op: a ``trace`` column (Traces) or ``fn`` (JAX functions) with ``args`` (a tuple
          of their arguments or ``jax.ShapeDtypeStruct``), a time column, optional ``name``, ``family``,
          ``bucket``; each priced as :func:`dfit_nb.replay` prices the program (its kernels by ``fusion``);
        * a Trace captured in ``profile`` mode on your device, of any program: each XLA fusion it timed is a
          row, priced as the replay's kernel of that fusion (``fusion="compiler"``);
        * several such Traces, one fit over all their fusions: a list (each program named by its function) or a
          dict naming each; rows are named ``program/fusion`` and ``Calibration.rows["program"]`` says whose.

        Program and kernel rows report their error per op family (``gemm``, ``reduction``,
        ``transcendental``, ``elementwise``, ``data_movement``) unless a ``bucket`` column says otherwise.
    hw : Hardware
        The machine to start from (e.g. ``presets.get("tpu_v4")``); its grid and array sizes are kept.
    fields : sequence of str, optional
        Continuous Hardware fields to fit (:data:`FITTABLE`); default :data:`DEFAULT_FIELDS` (clock, DRAM
        bandwidth and latency, memory overlap, per-op overhead) for GEMM rows, and
        :data:`KERNEL_FIELDS` (those and the vector unit's) for program and kernel rows.
    dataflow : str or sequence of str
        The dataflow the measured ops are modelled with; several (``("ws", "is")``): per op the fastest of them,
        as a compiler that picks which operand stays in the array (on a TPU, by transposing the product).
    fit_fraction : float
        Share of each size bucket fitted (seeded); the rest is held out and reported.
    seed : int
        Seed of the split.
    bounds : dict, optional
        ``{field: (low, high)}``; default a factor 20 around the start (``(0, 1e5)`` for a zero start).
    max_iterations : int
        BFGS iterations at most.
    fusion : {"rules", "compiler", "none"}, optional
        How program rows group their ops into kernels (:func:`dfit_nb.replay`'s ``fusion``).
    per_group : dict, optional
        ``{field: column}``: fit ``field`` once per group of rows, the groups named by the measured table's
        ``column`` (e.g. ``{"op_overhead_cycles": "harness"}`` for rows timed through harnesses of different
        fixed costs). Each group's rows are priced on the machine with that group's value (one model, vmapped
        over the groups as for a field set by a column); the field is fitted per group whether or not ``fields``
        names it, and ``Calibration.per_group`` reports the values (``Calibration.hw`` keeps the start's).
        GEMM rows and program rows (a table); every group needs a row in the fitted half.
    loss : {"soft_l1", "squared"}
        What the fit minimises over the fitted rows' log errors (:func:`row_loss`): the soft-L1 loss (default:
        squared within about 10%, absolute beyond, so that a few rows the model cannot explain do not set a
        field) or the mean squared log error.
    progress : bool
        ``tqdm.auto`` bars over the program rows' captures and the descents (the first, its compile included,
        takes most of the time).

    Returns
    -------
    Calibration

    Examples
    --------
    >>> import numpy as np, pandas as pd
    >>> from dfit_nb.sim import presets
    >>> from dfit_nb.sim.calibration import calibrate, predict
    >>> hw = presets.get("tpu_v4")
    >>> sizes = np.array([128, 256, 512, 1024, 2048, 3072, 4096] * 2)
    >>> rows = pd.DataFrame({"m": sizes, "k": sizes[::-1], "n": sizes, "dtype": "float16"})
    >>> truth = hw.replace(clock_ghz=0.8, op_overhead_cycles=1500.0)   # a machine to recover
    >>> rows["time_s"] = predict(rows, truth)["seconds"]
    >>> cal = calibrate(rows, hw, ["clock_ghz", "op_overhead_cycles"])
    >>> round(float(cal.hw.clock_ghz), 2), float(cal.metrics["mape"].sel(machine="fitted", split="held_out",
    ...                                                                  bucket="pooled")) < 0.01
    (0.8, True)

    Rows measured on different settings of one chip (core grids, fidelities, where an operand lives):

    >>> tt = presets.get("tt_wormhole_n150")
    >>> rows = pd.DataFrame({"m": sizes, "k": sizes[::-1], "n": sizes, "dtype": ["bfloat16", "bfp8"] * 7,
    ...                      "math_fidelity": ["HiFi2", "LoFi"] * 7, "a_on_chip": [True, False] * 7,
    ...                      "tile_cols": [8, 4] * 7})                 # two grids: 8x8 and 4x8
    >>> rows["time_ns"] = predict(rows, tt.replace(clock_ghz=0.8), "os")["seconds"] * 1e9
    >>> round(float(calibrate(rows, tt, ["clock_ghz"], "os").hw.clock_ghz), 2)
    0.8

    A fixed cost per group of rows (two harnesses, each with its own per-call floor):

    >>> rows = pd.DataFrame({"m": sizes, "k": sizes, "n": sizes, "dtype": "float16",
    ...                      "harness": ["eager", "compiled"] * 7})
    >>> overhead = np.where(rows["harness"] == "eager", 3000.0, 500.0)
    >>> rows["time_s"] = predict(rows.drop(columns="harness").assign(op_overhead_cycles=overhead), hw)["seconds"]
    >>> cal = calibrate(rows, hw, ["clock_ghz"], per_group={"op_overhead_cycles": "harness"})
    >>> {k: round(v) for k, v in cal.per_group["op_overhead_cycles"].values.items()}
    {'compiled': 500, 'eager': 3000}
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise CalibrationError(f"seed must be a whole number >= 0 (the seed of the fit/held-out split), got {seed!r}")
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, (int, np.integer)) or max_iterations < 1:
        raise CalibrationError(f"max_iterations must be a whole number >= 1 (BFGS iterations at most), got "
                               f"{max_iterations!r}")
    _check_loss(loss)
    if isinstance(fields, str):  # one field by name, not its letters
        fields = (fields,)
    labels = _group_labels(measured, per_group)
    read = {*MEASURED_COLUMNS, "name", "family"}  # columns the rows are read with, kept when they name groups too
    extra = sorted({column for column, _ in labels.values()} - read)
    if extra:  # the group columns name groups, not measurements: the rows are read without them
        measured = measured.drop(columns=extra)
    kernel_rows = _kernel_rows(measured, fusion, splits_rows(hw), progress)
    table = measured_table(measured) if kernel_rows is None else kernel_rows.table
    fields = tuple((DEFAULT_FIELDS if kernel_rows is None else KERNEL_FIELDS) if fields is None else fields)
    _check_fields((*fields, *(f for f in labels if f not in fields)))
    # fitted per group where per_group says so, once for all rows otherwise
    grouped = {f: np.unique(v, return_inverse=True) for f, (_, v) in labels.items()}
    by = {f: inverse.reshape(-1) for f, (_, inverse) in grouped.items()}
    fields = tuple(f for f in fields if f not in labels)
    if not 0 < fit_fraction < 1:
        raise CalibrationError(f"fit_fraction must be between 0 and 1, got {fit_fraction!r}")
    check_hardware(hw, "calibrate()", error=CalibrationError)
    buckets = _buckets(table) if kernel_rows is None else (
        table["bucket"].astype(str).to_numpy() if "bucket" in table else table["family"].astype(str).to_numpy())
    fit = stratified_split(buckets, fit_fraction, seed)
    for f, (names, inverse) in grouped.items():
        empty = [str(names[g]) for g in range(len(names)) if not fit[inverse == g].any()]
        if empty:
            raise CalibrationError(f"per_group {f!r} by column {labels[f][0]!r}: group(s) {empty} have no row in the "
                                   f"fitted {fit_fraction:.0%} of the rows (the split is by bucket, seed {seed}), so "
                                   "their value cannot be fitted: give each group two or more rows, or another seed")
    unknowns = len(fields) + sum(len(names) for names, _ in grouped.values())
    if fit.sum() < unknowns:
        what = (f"{unknowns} value(s) ({len(fields)} field(s) and {unknowns - len(fields)} per-group value(s))"
                if grouped else f"{unknowns} field(s)")
        raise CalibrationError(f"{int(fit.sum())} fitted row(s) cannot determine {what}: give at least {unknowns} rows "
                               f"to fit (of {len(table)} measured, {fit_fraction:.0%} fitted)")
    _check_bounds(bounds, (*fields, *grouped))
    box = _bounds(hw, (*fields, *grouped), bounds)
    set_per_row = [f for f in (*fields, *grouped) if f in table.columns]
    if set_per_row:
        raise CalibrationError(f"measured column(s) {set_per_row} set those Hardware fields per row, so they cannot "
                               "also be fitted: drop them from fields, or from the measured columns")
    loss_rows = fit
    # each per-group field's value per group: the start's for every group (the base machine), or the fit's
    start_values = {f: np.full(len(names), float(np.asarray(getattr(hw, f)))) for f, (names, _) in grouped.items()}
    if kernel_rows is None:
        row_machines(table, hw, label="measured")  # checks every row's machine before any fit
        # the loss prices the fitted rows only (the held-out ones would be priced at every step for nothing)
        f = predictor(table[fit].reset_index(drop=True), hw, dataflow,
                      groups={k: v[fit] for k, v in by.items()} or None)
        loss_rows = np.ones(int(fit.sum()), bool)

        def seconds_of(h: Hardware) -> Any:
            return f(h)["seconds"]

        def predicted(h: Hardware, values: Mapping[str, np.ndarray]) -> np.ndarray:
            # each row's group value as a column setting that field: predict's own pricing of per-row fields
            return predict(table.assign(**{k: values[k][v] for k, v in by.items()}), h, dataflow)["seconds"]
    else:
        from .kernel_predictor import KernelRowError, kernel_predictor

        try:
            seconds_of = kernel_predictor(kernel_rows, hw, dataflow, groups=by or None)
        except KernelRowError as err:
            raise CalibrationError(str(err)) from None
        compiled = jax.jit(seconds_of)  # one compile for the base and the fitted machine

        def predicted(h: Hardware, values: Mapping[str, np.ndarray]) -> np.ndarray:
            with jax.enable_x64(True):
                h = dataclasses.replace(for_jit(h), **{k: jnp.asarray(v, jnp.float64) for k, v in values.items()})
                return np.asarray(compiled(h))
    y = np.log(table["time_s"].to_numpy(np.float64))
    fitted_hw, converged, final, status, group_values = _fit(
        seconds_of, y[fit] if kernel_rows is None else y, loss_rows, hw, fields, box, max_iterations,
        {f: len(names) for f, (names, _) in grouped.items()}, loss=loss, progress=progress)
    pred = predicted(fitted_hw, group_values)
    base_pred = predicted(hw, start_values)
    # the loss reported is the returned machine's, priced as predict prices it (the descent's own figure for the
    # same point, to rounding)
    final = float(np.mean(row_loss(np.log(np.maximum(pred[fit], 1e-30)) - y[fit], loss)))
    if not converged:
        warnings.warn(f"calibration of {hw.name!r} did not converge in {max_iterations} iterations (status "
                      f"{status}); last loss ({loss}) {final:.4g} "
                      f"(MAPE on fitted rows {np.mean(np.abs(pred[fit] - np.exp(y[fit])) / np.exp(y[fit])):.1%}): "
                      "the machine returned is the last iterate (calibration.converged is False)",
                      CalibrationWarning, stacklevel=2)
    rows = xr.Dataset(
        {"m": ("row", table["m"].to_numpy()), "k": ("row", table["k"].to_numpy()), "n": ("row", table["n"].to_numpy()),
         "batch": ("row", np.broadcast_to(table["batch"].to_numpy(), len(table)).copy()),
         "measured_s": ("row", np.exp(y), {"units": "s"}), "predicted_s": ("row", pred, {"units": "s"}),
         "base_predicted_s": ("row", base_pred, {"units": "s"}), "fitted": ("row", fit),
         "bucket": ("row", buckets.astype(object)),
         **{c: ("row", table[c].to_numpy(np.float64)) for c in (*OP_SETTINGS, *FIELDS) if c in table},
         **({} if kernel_rows is None else {"name": ("row", table["name"].astype(str).to_numpy().astype(object)),
                                            "family": ("row", table["family"].astype(str).to_numpy().astype(object))}),
         **({"program": ("row", table["program"].astype(str).to_numpy().astype(object))}
            if kernel_rows is not None and "program" in table else {})},
        coords={"row": np.arange(len(table))})
    for column, values in {c: v for c, v in labels.values()}.items():
        if column not in rows:  # the group of each row, as the measurements named it
            rows[column] = ("row", np.asarray(values, object))
    per = {f: PerGroup(labels[f][0], {str(n): float(v) for n, v in zip(names, group_values[f], strict=True)})
           for f, (names, _) in grouped.items()}
    return Calibration(hw=fitted_hw, base=hw, fields=fields, rows=rows,
                       metrics=_metric_dataset(rows), converged=converged, loss=final, seed=seed, per_group=per,
                       objective=loss, bounds=dict(box))


def _group_labels(measured: Any, per_group: Mapping[str, str] | None) -> dict[str, tuple[str, np.ndarray]]:
    """``calibrate``'s ``per_group``, checked: ``{field: (column, each row's group name)}``; a field that cannot be
    fitted, a column that is absent or a row without a group is refused by name."""
    if not per_group:
        return {}
    if not isinstance(per_group, Mapping):
        raise CalibrationError(f"per_group must map Hardware fields to column names, e.g. "
                               f"{{'op_overhead_cycles': 'harness'}}; got {type(per_group).__name__}")
    try:
        _check_fields(tuple(per_group))
    except CalibrationError as err:
        raise CalibrationError(f"per_group: {err}") from None
    if not isinstance(measured, pd.DataFrame):
        raise CalibrationError(f"per_group needs the measurements as a table with the group column(s) "
                               f"{sorted(set(per_group.values()))}; got {type(measured).__name__}")
    out = {}
    for field, column in per_group.items():
        if column not in measured.columns:
            raise CalibrationError(f"per_group {field!r}: measured has no column {column!r} naming each row's group; "
                                   f"its columns: {', '.join(map(str, measured.columns))}")
        if column in FIELDS or column in TIME_COLUMNS or column in ("m", "k", "n", "trace", "fn", "args"):
            raise CalibrationError(f"per_group {field!r}: column {column!r} is a measurement column; name the "
                                   "groups in a column of their own")
        values = measured[column]
        missing = values.isna().to_numpy()
        if missing.any():
            raise CalibrationError(f"per_group {field!r}: column {column!r} row {int(np.flatnonzero(missing)[0])} "
                                   "names no group (every row needs one)")
        out[field] = (str(column), values.astype(str).to_numpy())
    return out


def _check_bounds(bounds: Any, fitted: tuple[str, ...]) -> None:
    """``bounds`` keyed by fitted fields only: a key of no field (a typo) or of a field not fitted would
    otherwise be ignored, leaving that field at its default bounds without a word."""
    if bounds is None:
        return
    if not isinstance(bounds, Mapping):
        raise CalibrationError(f"bounds must be a dict {{field: (low, high)}} of fitted fields, got "
                               f"{type(bounds).__name__}; fitted: {', '.join(fitted)}")
    unknown = [str(f) for f in bounds if f not in FIELDS]
    if unknown:
        raise CalibrationError(f"bounds name(s) {unknown} that are not Hardware fields; fitted: {', '.join(fitted)}")
    unfitted = [str(f) for f in bounds if f not in fitted]
    if unfitted:
        raise CalibrationError(f"bounds name(s) {unfitted} that are not fitted (add them to fields, or drop their "
                               f"bounds); fitted: {', '.join(fitted)}")


def _check_fields(fields: tuple[str, ...]) -> None:
    """Fields a calibration can fit, or a clear error naming the ones it cannot."""
    unknown = [f for f in fields if f not in FIELDS]
    if unknown:
        raise CalibrationError(f"Hardware has no field(s) {unknown}; fittable: {', '.join(FITTABLE)}")
    thermal = [f for f in fields if f in THERMAL_FIELDS]
    if thermal:
        raise CalibrationError(f"cannot fit {thermal} on measured times: latency does not depend on them (they "
                               f"drive dfit_nb.sim.thermal); fittable: {', '.join(FITTABLE)}")
    shaped = [f for f in fields if f not in FITTABLE]
    if shaped:
        raise CalibrationError(f"cannot fit {shaped} by gradient: they are whole numbers (sizes of the grid, the "
                               f"arrays, the buffers, the words) with no gradient to follow (sweep them instead); "
                               f"fittable: {', '.join(FITTABLE)}")
    if not fields or len(set(fields)) != len(fields):
        raise CalibrationError(f"fields must name one or more distinct Hardware fields, got {list(fields)}")


def _kernel_rows(measured: Any, fusion: str | None, split: bool = False, progress: bool = False) -> Any:
    """Program or kernel rows (:mod:`dfit_nb.sim.kernel_predictor`) when ``measured`` holds them, else None."""
    from .kernel_predictor import KernelRowError, fusion_rows, fusion_rows_of, program_names, program_rows

    try:
        if isinstance(getattr(measured, "ops", None), xr.Dataset):
            return fusion_rows(measured)
        if _several_traces(measured):
            return fusion_rows_of(program_names(measured))
        if isinstance(measured, pd.DataFrame) and ("trace" in measured.columns or "fn" in measured.columns):
            time_col = _time_column(measured.columns)
            if time_col is None:
                raise CalibrationError(f"measured lacks a time column; program rows need one of "
                                       f"{', '.join(TIME_COLUMNS)}")
            return program_rows(measured, time_col, TIME_COLUMNS[time_col], fusion, split, progress=progress)
    except KernelRowError as err:
        raise CalibrationError(str(err)) from err.__cause__
    return None


def _several_traces(measured: Any) -> bool:
    """Whether ``measured`` is several Traces: a non-empty list or tuple of them, or a mapping of names to them (a
    Trace holds its ops as an ``xarray.Dataset``); a mix of Traces and other things is refused by position."""
    if isinstance(measured, Mapping):
        items = list(measured.items())
    elif isinstance(measured, (list, tuple)):
        items = list(enumerate(measured))
    else:
        return False
    traces = [isinstance(getattr(v, "ops", None), xr.Dataset) for _, v in items]
    if items and any(traces) and not all(traces):
        bad = [f"{k!r} ({type(v).__name__})" for (k, v), ok in zip(items, traces, strict=True) if not ok]
        raise CalibrationError(f"measured mixes Traces with other things: {', '.join(bad)}; give profile-mode Traces "
                               "only (a list, or a dict naming each program)")
    if not items:
        raise CalibrationError("measured is empty: give a table of rows, a profile-mode Trace, or several of them")
    return all(traces)


class _Descent(NamedTuple):
    """Where :func:`_bfgs` ended: ``x`` and its loss ``fun`` and gradient ``jac`` (evaluated there), ``status``
    (0: gradient below tolerance, 1: out of iterations, 3: no lower point along the search direction, 5: loss not
    finite at the start), ``success`` (status 0) and ``nit``, the iterations run."""

    x: Any
    fun: Any
    jac: Any
    status: Any
    success: Any
    nit: Any


def _bfgs(loss: Callable[[Any], Any], z0: Any, max_iterations: int, gtol: float = 1e-5, halvings: int = 40
          ) -> _Descent:
    """Minimise ``loss`` from ``z0`` by BFGS with a backtracking line search that only ever moves to the lowest
    point it evaluated, so the point returned is the lowest the descent evaluated and ``fun`` is its loss.

    ``jax.scipy.optimize.minimize``'s BFGS cannot promise that: when its line search fails (often on a piecewise
    model), it returns a full step along the search direction, a point it never evaluated, with the loss of
    another point. Here a search that finds no lower point ends the descent where it stands (status 3).

    The line search tries steps 1, 1/2, 1/4, ... (the first iteration's from a unit-length step, the inverse
    Hessian estimate being the identity) until one lowers the loss by Armijo's sufficient decrease, at most
    ``halvings`` times, and moves to the lowest of its trials when that is below the current loss. The inverse
    Hessian estimate is updated only where the step's curvature is positive, so it stays positive definite.
    Pure ``jax.numpy`` and ``lax`` loops: jit it once for many starts.

    >>> import jax, jax.numpy as jnp
    >>> from dfit_nb.sim.calibration import _bfgs
    >>> with jax.enable_x64(True):
    ...     r = jax.jit(lambda z: _bfgs(lambda x: jnp.sum((x - jnp.array([1.0, -2.0])) ** 2), z, 50))(jnp.zeros(2))
    >>> [round(float(v), 6) for v in r.x], int(r.status)
    ([1.0, -2.0], 0)
    """
    value_and_grad = jax.value_and_grad(loss)
    f0, g0 = value_and_grad(z0)
    eye = jnp.eye(z0.shape[0], dtype=z0.dtype)
    c1 = 1e-4  # Armijo's sufficient-decrease constant (Nocedal and Wright's usual value)

    def done_status(f: Any, g: Any, k: Any) -> Any:
        return jnp.where(jnp.max(jnp.abs(g)) < gtol, 0, jnp.where(k >= max_iterations, 1, -1))

    def step(state: tuple[Any, ...]) -> tuple[Any, ...]:
        k, z, f, g, h, _ = state
        p = -h @ g
        slope = g @ p
        steepest = ~(slope < 0)  # an estimate that lost its descent direction to rounding: the gradient's
        p = jnp.where(steepest, -g, p)
        slope = jnp.where(steepest, -(g @ g), slope)
        first = jnp.where(k == 0, jnp.minimum(1.0, 1.0 / jnp.maximum(jnp.sqrt(g @ g), 1e-300)), 1.0)

        def trial(s: tuple[Any, ...]) -> tuple[Any, ...]:
            i, _, zb, fb, gb = s
            a = first * 0.5 ** i
            zt = z + a * p
            ft, gt = value_and_grad(zt)
            lower = ft < fb  # NaN is never lower
            return (i + 1, ft <= f + c1 * a * slope, jnp.where(lower, zt, zb), jnp.where(lower, ft, fb),
                    jnp.where(lower, gt, gb))

        _, _, zb, fb, gb = jax.lax.while_loop(lambda s: ~s[1] & (s[0] < halvings), trial,
                                              (jnp.asarray(0), jnp.asarray(False), z, f, g))
        moved = fb < f
        s, y = zb - z, gb - g
        sy, yy = s @ y, y @ y
        # the first update scales the identity to the curvature seen (Nocedal and Wright, eq. 6.20)
        h = jnp.where((k == 0) & (sy > 0) & (yy > 0), (sy / jnp.where(yy > 0, yy, 1.0)) * eye, h)
        rho = 1.0 / jnp.where(sy > 0, sy, 1.0)
        w = eye - rho * jnp.outer(s, y)
        updated = w @ h @ w.T + rho * jnp.outer(s, s)
        curved = moved & (sy > 1e-12 * jnp.sqrt((s @ s) * yy))
        h = jnp.where(curved, updated, h)
        status = jnp.where(moved, done_status(fb, gb, k + 1), 3)
        return k + 1, zb, fb, gb, h, status

    start = jnp.where(jnp.isfinite(f0), done_status(f0, g0, 0), 5)
    k, z, f, g, _, status = jax.lax.while_loop(lambda s: s[5] < 0, step, (jnp.asarray(0), z0, f0, g0, eye, start))
    return _Descent(x=z, fun=f, jac=g, status=status, success=status == 0, nit=k)


def _fit(seconds_of: Callable[[Hardware], Any], y: np.ndarray, fit: np.ndarray, hw: Hardware,
         fields: tuple[str, ...], box: Mapping[str, tuple[float, float]], max_iterations: int,
         groups: Mapping[str, int] | None = None, *, loss: str = DEFAULT_LOSS, progress: bool = False
         ) -> tuple[Hardware, bool, float, int, dict[str, np.ndarray]]:
    """BFGS on the mean ``loss`` (:func:`row_loss`) of the log error of ``seconds_of`` against ``exp(y)`` over the
    ``fit`` rows, each field mapped into its bounds by a sigmoid: ``(fitted machine, converged, final loss, BFGS
    status, per-group values)``.

    ``groups`` (``{field: number of groups}``): fields fitted once per group, within the field's bounds in
    ``box``; ``seconds_of`` is called with each as a vector of its groups' values (:func:`predictor`'s and
    :func:`~dfit_nb.sim.kernel_predictor.kernel_predictor`'s ``groups``), and the per-group values come back
    as ``{field: values}``; the fitted machine keeps ``hw``'s value of those fields. ``progress``: a ``tqdm.auto``
    bar over the descents (the first and the restarts)."""
    base_hw = for_jit(hw)
    groups = dict(groups or {})
    # one parameter per shared field, then one per group of each per-group field
    names = [*fields, *(f for f, count in groups.items() for _ in range(count))]
    lo = np.array([box[k][0] for k in names])
    hi = np.array([box[k][1] for k in names])
    start = np.array([float(np.asarray(getattr(hw, k))) for k in names])
    slots, at = {}, len(fields)
    for f, count in groups.items():
        slots[f] = slice(at, at + count)
        at += count
    # the start, inside the bounds: a field at a bound (a cost a preset leaves at 0) starts 1% inside, where the
    # sigmoid still passes a gradient (at 1e-6 of the box its slope is 1e-6 and the fit never moves it)
    frac = np.clip((start - lo) / (hi - lo), 1e-2, 1 - 1e-2)
    z0 = np.log(frac / (1 - frac))

    def machine_of(z: Any) -> Hardware:
        values = lo + (hi - lo) * jax.nn.sigmoid(z)
        return dataclasses.replace(base_hw, **{k: values[i] for i, k in enumerate(fields)},
                                   **{f: values[cut] for f, cut in slots.items()})

    def objective(z: Any) -> Any:
        pred = seconds_of(machine_of(z))
        r = jnp.log(jnp.maximum(pred, 1e-30)) - y
        return jnp.sum(jnp.where(fit, row_loss(r, loss), 0.0)) / fit.sum()

    bar = tqdm(total=1 + RESTARTS, desc="calibrate", unit="descent", disable=not progress, leave=False)
    with jax.enable_x64(True), bar:
        # one compiled descent for the first run and every restart
        solve = jax.jit(lambda z: _bfgs(objective, z, int(max_iterations)))
        result = solve(jnp.asarray(z0))
        bar.update(1)
        bar.set_postfix(loss=f"{float(result.fun):.4g}")
        # the descent stops where its line search finds no lower point along its curvature estimate (status 3),
        # often early on this piecewise model (a field the others mask moves little); started again from there,
        # with the estimate reset, it goes on while that still lowers the loss (not after running out of
        # iterations: max_iterations is the caller's budget)
        for _ in range(RESTARTS):
            if int(result.status) != 3:
                break
            again = solve(result.x)
            bar.update(1)
            if not float(again.fun) < float(result.fun) * (1.0 - 1e-6):
                break
            result = again
            bar.set_postfix(loss=f"{float(result.fun):.4g}")
        z = jnp.asarray(result.x)
        final = float(result.fun)
        # status 3: no further descent (a minimum to precision; common where the model is piecewise, e.g. the
        # mapping search switching layouts); 1: out of iterations; 5: not finite at the start
        converged = (bool(result.success) or int(result.status) == 3) and bool(np.isfinite(final))
        # the machine the loss priced at z: the same expression as machine_of's, so the values are those the
        # descent evaluated to the last bit
        values = np.asarray(lo + (hi - lo) * jax.nn.sigmoid(z))
        if not np.isfinite(values).all():
            bad = sorted({k for k, v in zip(names, values, strict=True) if not np.isfinite(v)})
            raise CalibrationError(f"the fit of {[*fields, *groups]} diverged (no finite value for {bad}; loss "
                                   f"{final:g}): fit fewer fields, or give them bounds=")
        fitted_hw = hw.replace(name=f"{hw.name} (calibrated)", **{k: float(values[i]) for i, k in enumerate(fields)})
    return fitted_hw, converged, final, int(result.status), {f: values[cut].copy() for f, cut in slots.items()}


def _metric_dataset(rows: xr.Dataset) -> xr.Dataset:
    """MAPE / Pearson / Spearman over (machine, split, bucket) from a Calibration's rows."""
    buckets = [*sorted(set(rows["bucket"].values.tolist())), "pooled"]
    machines, splits = ("base", "fitted"), ("fitted", "held_out")
    out = {k: np.full((2, 2, len(buckets)), np.nan) for k in ("mape", "pearson", "spearman")}
    count = np.zeros((2, len(buckets)), np.int64)
    fit = rows["fitted"].values.astype(bool)
    for s, mask in enumerate((fit, ~fit)):
        for b, bucket in enumerate(buckets):
            sel = mask & ((rows["bucket"].values == bucket) if bucket != "pooled" else True)
            count[s, b] = int(sel.sum())
            for i, var in enumerate(("base_predicted_s", "predicted_s")):
                for key, value in metrics(rows[var].values[sel], rows["measured_s"].values[sel]).items():
                    out[key][i, s, b] = value
    dims = ("machine", "split", "bucket")
    return xr.Dataset({**{k: (dims, v, {"units": "1"}) for k, v in out.items()},
                       "rows": (("split", "bucket"), count, {"units": "1"})},
                      coords={"machine": list(machines), "split": list(splits), "bucket": buckets})


__all__ = ("DEFAULT_FIELDS", "DEFAULT_LOSS", "FITTABLE", "KERNEL_FIELDS", "LOSSES", "SOFT_L1_SCALE", "Calibration",
           "CalibrationError", "CalibrationWarning", "PerGroup", "calibrate", "load", "predict", "predictor",
           "row_loss", "vector_predictor")
