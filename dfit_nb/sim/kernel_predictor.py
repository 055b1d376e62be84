"""Measured programs and kernels as calibration rows, and their replayed times as a function of the machine.

:func:`dfit_nb.sim.calibrate` fits a machine to measured times by gradient through the one model. For GEMM rows
(``m, k, n``) that model is each op alone (:func:`dfit_nb.sim.calibration.predictor`). For anything else, a
row is a *program* (a JAX function or a Trace, timed whole) or one *kernel* of a program (an XLA fusion a
profile-mode capture timed), and its predicted time is what :func:`dfit_nb.replay` gives it: the program's
latency, or the kernel's span (its first op's start to its last op's end), with the same mapping search,
kernels, schedule and fixed costs. :func:`kernel_rows` builds the rows, :func:`kernel_predictor` the pure
function ``Hardware -> seconds per row`` that ``jax.grad`` goes through (one vmapped replay program per padded
op count; the grid is fixed).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from . import schedule
from ._prepare import BATCH_OPS, Prepared, padded, pinned_layouts, prepare
from ._replay import program
from .hardware import Hardware, check_hardware
from .kernels import check_mode
from .machine import OPTIONAL_INPUTS

#: op families a kernel row is reported by (:func:`family`)
FAMILIES = ("gemm", "reduction", "transcendental", "elementwise", "data_movement", "other")


class KernelRowError(ValueError):
    """A measured program or kernel cannot be made a calibration row (the message names the row)."""


@dataclasses.dataclass(frozen=True)
class KernelRows:
    """Measured programs or kernels: per row, the prepared program it belongs to, the ops it covers and its time.

    ``table`` (one row per measurement): ``name``, ``family``, ``m``, ``k``, ``n``, ``batch`` (the row's largest
    GEMM, 0 without one), ``time_s`` and, when the caller gave one, ``bucket``.
    """

    preps: tuple[Prepared, ...]
    prep_of: np.ndarray  # (rows,) index into preps
    masks: tuple[np.ndarray, ...]  # per row: which of its prep's ops it covers
    table: pd.DataFrame
    whole: bool  # rows are whole programs (their latency) rather than kernels (their ops' busy time)


def family(prep: Prepared, ops: np.ndarray) -> str:
    """The op family of a group of ops (a kernel or a program): ``gemm`` if a GEMM runs in it, else a reduction,
    a transcendental, elementwise work, data movement alone, or ``other``."""
    if not ops.size:
        return "other"
    classes = set(prep.table["op_class"].values[ops].astype(str)) if "op_class" in prep.table else set()
    if (prep.arrays["gemm"][ops] > 0).any() or "conv" in classes:
        return "gemm"
    for name in ("reduction", "transcendental", "elementwise", "data_movement"):
        if name in classes:
            return name
    return "other"


def _gemm_dims(prep: Prepared, ops: np.ndarray) -> tuple[float, float, float, float]:
    macs = np.maximum(prep.arrays["batch"][ops], 1) * prep.arrays["m"][ops] * prep.arrays["k"][ops] \
        * prep.arrays["n"][ops] * (prep.arrays["gemm"][ops] > 0)
    if not ops.size or macs.max() <= 0:
        return 0.0, 0.0, 0.0, 0.0
    i = ops[int(np.argmax(macs))]
    return (float(prep.arrays["m"][i]), float(prep.arrays["k"][i]), float(prep.arrays["n"][i]),
            float(max(prep.arrays["batch"][i], 1)))


def _program_row(prep: Prepared, name: str, seconds: float, fam: str | None) -> dict[str, Any]:
    every = np.arange(len(prep.op))
    m, k, n, b = _gemm_dims(prep, every)
    return {"name": name, "family": fam or family(prep, every), "m": m, "k": k, "n": n, "batch": b,
            "time_s": seconds}


def _seconds(value: Any, where: str) -> float:
    try:
        t = float(value)
    except (TypeError, ValueError):
        raise KernelRowError(f"{where}: the measured time must be a number of seconds, got {value!r}") from None
    if not np.isfinite(t) or t <= 0:
        raise KernelRowError(f"{where}: the measured time must be finite and > 0 seconds, got {t:g}")
    return t


def program_rows(frame: pd.DataFrame, time_col: str, scale: float, fusion: str | None, split: bool = False,
                 *, progress: bool = False) -> KernelRows:
    """Rows of whole programs: a DataFrame with a ``trace`` column (Traces), or ``fn`` (JAX functions) and
    ``args`` (a tuple of their arguments, arrays or ``jax.ShapeDtypeStruct``), and a time column; optional
    ``name``, ``family`` and ``bucket``. Each function is captured (static mode); a row whose function cannot be
    captured, or whose time is not positive and finite, is refused by row number. ``split``: the machine's
    compiler ends a kernel at a reduction over rows (:func:`dfit_nb.sim.kernels.splits_rows`). ``progress``: a
    ``tqdm.auto`` bar over the rows (two or more)."""
    from .. import capture

    mode = check_mode(fusion)
    preps, rows, masks = [], [], []
    records = frame.to_dict("records")
    for i, rec in enumerate(tqdm(records, desc="calibrate: rows", unit="row", leave=False,
                                 disable=not progress or len(records) < 2)):
        where = f"row {i}" + (f" ({rec['name']})" if rec.get("name") is not None else "")
        seconds = _seconds(rec[time_col], where) * scale
        trace = rec.get("trace")
        if trace is None:
            fn, args = rec.get("fn"), rec.get("args", ())
            if not callable(fn):
                raise KernelRowError(f"{where}: needs a callable in 'fn' (or a Trace in 'trace'), got "
                                     f"{type(fn).__name__}")
            args = args if isinstance(args, (tuple, list)) else (args,)
            try:
                trace = capture(fn, *args)
            except Exception as err:
                raise KernelRowError(f"{where}: its function could not be captured: {type(err).__name__}: "
                                     f"{err}") from err
        try:
            prep = prepare(trace, mode, split)
        except Exception as err:
            raise KernelRowError(f"{where}: {err}") from err
        preps.append(prep)
        masks.append(np.ones(len(prep.op), bool))
        name = str(rec.get("name") or getattr(trace, "attrs", {}).get("function", f"row {i}"))
        row = _program_row(prep, name, seconds, None if pd.isna(rec.get("family", np.nan)) else str(rec["family"]))
        if "bucket" in rec and not pd.isna(rec["bucket"]):
            row["bucket"] = str(rec["bucket"])
        rows.append(row)
    return KernelRows(tuple(preps), np.arange(len(preps)), tuple(masks), pd.DataFrame(rows), whole=True)


def fusion_rows(trace: Any) -> KernelRows:
    """Rows of a profile-mode Trace's executed fusions: each fusion XLA timed, as the kernel of the replay that
    holds its ops (``fusion="compiler"``: the kernels are the capture's fusions), with its measured time per
    call. Fusions that hold no replayed op of their own are skipped: a copy XLA inserted, a loop's control, or a
    fusion whose ops XLA also computed in another (an op runs in the replay once, in the first fusion that holds
    it, as ``fusion="compiler"`` groups it)."""
    low = getattr(trace, "lowering", None)
    if low is None or "time_s" not in low or not np.isfinite(low["time_s"].values.astype(float)).any():
        raise KernelRowError("the trace has no measured fusion times: capture it with mode='profile' on the device "
                             "to calibrate on")
    prep = prepare(trace, "compiler")
    k = prep.kernels
    by_name = {str(k.name[i]): i for i in range(k.count)}
    rows, masks = [], []
    for name, t in zip(low["fusion"].values.astype(str), low["time_s"].values.astype(float), strict=True):
        kid = by_name.get(name)
        if kid is None or not np.isfinite(t) or t <= 0:
            continue
        ops = np.flatnonzero(k.kernel == kid)
        # the profile's time is per call, every execution included, as the replay's ops (count executions)
        m, kk, n, b = _gemm_dims(prep, ops)
        rows.append({"name": name, "family": family(prep, ops), "m": m, "k": kk, "n": n, "batch": b,
                     "time_s": t})
        mask = np.zeros(len(prep.op), bool)
        mask[ops] = True
        masks.append(mask)
    if not rows:
        raise KernelRowError("no executed fusion of the trace holds a replayed op with a measured time")
    return KernelRows((prep,), np.zeros(len(rows), np.int64), tuple(masks), pd.DataFrame(rows), whole=False)


def program_names(traces: Any) -> dict[str, Any]:
    """Several Traces by name: a mapping as given (names as strings), a sequence by each Trace's function name
    (``attrs["function"]``), numbered where two share one (``mlp``, ``mlp#2``)."""
    if isinstance(traces, Mapping):
        return {str(k): v for k, v in traces.items()}
    out: dict[str, Any] = {}
    for trace in traces:
        base = str(getattr(trace, "attrs", {}).get("function", "program"))
        name, n = base, 1
        while name in out:
            n += 1
            name = f"{base}#{n}"
        out[name] = trace
    return out


def fusion_rows_of(traces: Mapping[str, Any]) -> KernelRows:
    """Rows of several profile-mode Traces' executed fusions, one calibration over all of them: each program's
    :func:`fusion_rows`, named ``program/fusion`` with a ``program`` column; a program whose fusions cannot be rows is
    named in the error."""
    preps, prep_of, masks, tables = [], [], [], []
    for i, (label, trace) in enumerate(traces.items()):
        try:
            part = fusion_rows(trace)
        except KernelRowError as err:
            raise KernelRowError(f"program {label!r}: {err}") from err
        preps.append(part.preps[0])
        prep_of.append(np.full(len(part.table), i, np.int64))
        masks.extend(part.masks)
        tables.append(part.table.assign(program=label, name=label + "/" + part.table["name"]))
    return KernelRows(tuple(preps), np.concatenate(prep_of), tuple(masks), pd.concat(tables, ignore_index=True),
                      whole=False)


def _broadcast(x: Any, n: int) -> Any:
    return jnp.broadcast_to(jnp.asarray(x, jnp.float64), (n,))


def kernel_predictor(rows: KernelRows, hw: Hardware, dataflow: Any = "ws", *,
                     groups: Mapping[str, np.ndarray] | None = None) -> Callable[[Hardware], Any]:
    """A pure function ``Hardware -> seconds per row`` (the replay's time of each row's ops), for ``jax.grad``.

    A program row's time is its replayed latency; a kernel row's, the busy time of its ops (the sum of their
    durations: on a time-multiplexed machine they run one at a time, between other kernels' ops).

    Programs are padded as :func:`dfit_nb.sim.replay_batch` pads them and those of one padded size replayed in
    one vmapped program; the grid of ``hw`` is fixed. Call the function under ``jax.enable_x64(True)``.

    ``groups`` (``{field: per-row group index}``, program rows only): fields given per group of rows. The
    Hardware the function is called with holds each as a vector, one value per group, and each program is
    replayed with its group's value (the machine vmapped with the programs).
    """
    check_hardware(hw, "kernel_predictor()", error=KernelRowError)
    if not isinstance(dataflow, str):
        raise KernelRowError("program and kernel rows are replayed with one dataflow (a name), got "
                             f"{dataflow!r}")
    grid = schedule.bucket(int(np.asarray(hw.tile_rows)), int(np.asarray(hw.tile_cols)))
    tables = schedule.grid_tables(int(np.asarray(hw.tile_rows)), int(np.asarray(hw.tile_cols)), grid)
    spatial = hw.execution == "spatial"
    by = {f: np.asarray(g, np.int64).reshape(-1) for f, g in (groups or {}).items()}
    if by and not rows.whole:
        raise KernelRowError("fields given per group of rows need whole-program rows (a table of programs with a "
                             "group column); a profile-mode trace's kernels run in one replay, on one machine")
    for f, g in by.items():
        if len(g) != len(rows.table):
            raise KernelRowError(f"the groups of {f!r} give {len(g)} row(s), the rows are {len(rows.table)}")
    by_shape: dict[tuple[int, int], list[int]] = {}
    padded_inputs = []
    for j, prep in enumerate(rows.preps):
        codes = np.full(len(prep.op), float(("ws", "os", "is").index(dataflow)))
        arrays, preds, pred_bytes, codes_p, pin = padded(prep, codes, pinned_layouts(prep, None), BATCH_OPS)
        padded_inputs.append((arrays, preds, pred_bytes, codes_p, pin))
        by_shape.setdefault(preds.shape, []).append(j)
    stacked = []
    for members in by_shape.values():
        parts = [padded_inputs[j] for j in members]
        # programs stacked into one vmapped model need the same inputs: an optional one a program lacks (a
        # depthwise convolution's flag) is filled with the value that prices its ops as its absence does
        keys = [set(arrays) for arrays, *_ in parts]
        lacking = set.union(*keys) - set.intersection(*keys)
        parts = [({**{key: np.full(len(arrays["m"]), OPTIONAL_INPUTS[key]) for key in lacking - set(arrays)},
                   **arrays}, *rest) for arrays, *rest in parts]
        stacked.append((members, jax.tree.map(lambda *xs: np.stack(xs), *parts)))
    # per row: its prep's group and position, and its mask over the padded ops
    where = {j: (g, p) for g, (members, _) in enumerate(stacked) for p, j in enumerate(members)}
    row_masks = []
    for r, j in enumerate(rows.prep_of):
        size = padded_inputs[j][1].shape[0]
        mask = np.zeros(size, bool)
        mask[: len(rows.masks[r])] = rows.masks[r]
        row_masks.append(mask)

    def seconds(h: Hardware) -> Any:
        ends = []
        for members, (arrays, preds, pred_bytes, codes, pin) in stacked:
            def one(a: Any, p: Any, pb: Any, c: Any, pn: Any, h_p: Hardware) -> Any:
                out = program.__wrapped__(a, p, pb, tables, h_p, c, pn, grid, spatial)
                return out["start"], out["end"]

            if by:  # each program on its group's machine: the per-group fields indexed by its row's group
                # (program rows: one prep per row, prep j is row j)
                scalar = dataclasses.replace(h, **{f: jnp.asarray(getattr(h, f))[0] for f in by})
                every = jax.tree.map(functools.partial(_broadcast, n=len(members)), scalar)
                every = dataclasses.replace(every, **{f: jnp.asarray(getattr(h, f), jnp.float64)[g[members]]
                                                      for f, g in by.items()})
                ends.append(jax.vmap(one)(arrays, preds, pred_bytes, codes, pin, every))
            else:
                ends.append(jax.vmap(one, in_axes=(0, 0, 0, 0, 0, None))(arrays, preds, pred_bytes, codes, pin, h))
        cycles = []
        for r, j in enumerate(rows.prep_of):
            g, p = where[int(j)]
            start, end = ends[g][0][p], ends[g][1][p]
            mask = jnp.asarray(row_masks[r])
            if rows.whole:
                cycles.append(jnp.max(jnp.where(mask, end, 0.0)))
            else:
                cycles.append(jnp.sum(jnp.where(mask, end - start, 0.0)))
        return jnp.stack(cycles) / (jnp.asarray(h.clock_ghz, jnp.float64) * 1e9)

    return seconds
