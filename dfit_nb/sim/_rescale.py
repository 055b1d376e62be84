"""Rescaling a captured program's op table to other sizes (batch, sequence length) without tracing each one.

How every op's GEMM dims, FLOPs, operand bytes, counts and the bytes passed along each edge grow with each size is
measured once per size axis (:func:`exponents`, one more capture at ``probe`` times the base); then any size is
an arithmetic rescale of the prepared op table (:func:`scaled`). The studies over sizes read it:
:mod:`dfit_nb.sim.shapes` (shape sensitivity, tail latency) and the memo's batch variance
(:func:`dfit_nb.sim.memo.batch_variance`).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from ..errors import DfitError
from ._prepare import Prepared, kernel_inputs, prepare, with_kernels
from .machine import DATAFLOWS

#: the op-table columns that scale with size (fractions and flags do not)
FIELDS = ("m", "k", "n", "batch", "flops", "transcendentals", "elems_in", "elems_out", "lhs_bytes", "rhs_bytes",
          "ext_bytes", "bytes_written", "count")


DIMS = ("m", "k", "n", "batch")


class ShapeError(DfitError, ValueError):
    """The program cannot be rescaled (no function, bad sizes, or its structure changes with size)."""


def _power(v1: np.ndarray, v2: np.ndarray, ratio: float) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.round(np.where((v1 > 0) & (v2 > 0), np.log(v2 / v1) / np.log(ratio), 0.0), 6)


def check_base(base: Any, axis: str | None = None, error: type[Exception] = ShapeError) -> None:
    """Refuse ``base`` unless it is a dict of one or more size axes, each a positive integer (the trace's size), and
    holds ``axis`` when one is named; ``error``: the caller's class. A list or a float size would fail later, deep
    in the rescale (``base.items()``, a size of 0 scales by infinity).

    >>> check_base({"batch": 2}, "seq")
    Traceback (most recent call last):
    ...
    dfit_nb.sim._rescale.ShapeError: axis 'seq' is not in base {'batch': 2}; name the captured size of 'seq' in base
    """
    if not isinstance(base, Mapping) or not base:
        raise error(f"base must be a dict naming at least one size axis and its size in the trace, e.g. "
                    f"base={{'batch': 2}}; got {base!r:.80}")
    for name, size in base.items():
        if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)) or size < 1:
            raise error(f"base size {name}={size!r} must be a positive integer")
    if axis is not None and axis not in base:
        raise error(f"axis {axis!r} is not in base {dict(base)}; name the captured size of {axis!r} in base")


def exponents(trace: Any, make_args: Callable[..., Sequence[Any]], base: Mapping[str, int],
              probe: float = 2.0) -> xr.Dataset:
    """Per replayed op, column and producer, the exponent of each size axis (see the module docstring).

    ``make_args(**sizes)`` returns the function's positional arguments at those
    sizes (arrays or ``jax.ShapeDtypeStruct``); ``base`` holds the sizes of the
    trace itself.
    """
    from ..capture import capture

    fn = getattr(trace, "fn", None)
    if fn is None:
        raise ShapeError("the trace does not hold its function (it was loaded from a file): capture it again, "
                         "or study shapes on a trace from dfit_nb.capture")
    check_base(base)
    if not callable(make_args):
        raise ShapeError(f"make_args must be a function: make_args(**sizes) -> the function's positional arguments "
                         f"at those sizes (e.g. lambda batch: (np.ones((batch, 8)),)); got {type(make_args).__name__}")
    prep = prepare(trace)
    cols, preds = [], []
    for axis, size in base.items():
        # the exponent is log(v2 / v1) / log(bigger / size): the same size divides by log(1) = 0 (NaN exponents),
        # a size of 0 gives empty operands (every exponent 0: nothing would scale)
        bigger = round(size * probe) if isinstance(probe, (int, float, np.integer, np.floating)) \
            and not isinstance(probe, (bool, np.bool_)) and np.isfinite(probe) else None
        if bigger is None or bigger < 1 or bigger == size:
            raise ShapeError(f"probe={probe!r} measures {axis} at {bigger if bigger is not None else probe!r}, not "
                             f"another size of at least 1 (base {axis}={size}): give a finite probe that changes "
                             "the size, e.g. 2 (the default)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            other = prepare(capture(fn, *make_args(**{**base, axis: bigger})))
        if other.preds.shape != prep.preds.shape or (other.primitive != prep.primitive).any() or \
                (other.preds != prep.preds).any():
            raise ShapeError(f"the program's structure changes with {axis!r} ({len(prep.op)} ops at {size}, "
                             f"{len(other.op)} at {bigger}): it cannot be rescaled without tracing each size")
        ratio = bigger / size
        cols.append(np.stack([_power(prep.arrays[f], other.arrays[f], ratio) for f in FIELDS], axis=1))
        preds.append(_power(prep.pred_bytes, other.pred_bytes, ratio))
    return xr.Dataset(
        {"exponent": (("axis", "op", "field"), np.stack(cols),
                      {"units": "1", "description": "the column grows as (size / base) ** exponent"}),
         "pred_exponent": (("axis", "op", "slot"), np.stack(preds),
                           {"units": "1", "description": "bytes passed by each producer: the same law"})},
        coords={"axis": list(base), "op": prep.op, "field": list(FIELDS)},
        attrs={"base": ",".join(f"{k}={v}" for k, v in base.items()), "probe": probe},
    )


def scaled(prep: Prepared, exps: xr.Dataset, factors: Mapping[str, float]) -> Prepared:
    """``prep`` with every op rescaled by ``factors`` (size / base per axis)."""
    mult = np.ones((len(prep.op), len(FIELDS)))
    pmult = np.ones(prep.pred_bytes.shape)
    for axis, f in factors.items():
        if axis not in exps["axis"].values:
            raise ShapeError(f"unknown size axis {axis!r}; measured axes: {', '.join(map(str, exps['axis'].values))}")
        if not f > 0:
            raise ShapeError(f"scale {axis}={f!r} must be positive")
        mult *= float(f) ** exps["exponent"].sel(axis=axis).values
        pmult *= float(f) ** exps["pred_exponent"].sel(axis=axis).values
    a = {k: v.copy() for k, v in prep.arrays.items()}
    for i, f in enumerate(FIELDS):
        v = prep.arrays[f] * mult[:, i]
        # dims and counts are whole numbers (at least 1 where they were)
        a[f] = np.where(prep.arrays[f] > 0, np.maximum(np.round(v), 1.0), 0.0) if f in (*DIMS, "count") else v
    a["elems_in"], a["elems_out"] = np.ceil(a["elems_in"]), np.ceil(a["elems_out"])
    out = dataclasses.replace(prep, arrays=a, pred_bytes=prep.pred_bytes * pmult)
    # the kernels of the rescaled program, grouped again (a kernel's working set, and what the rules fuse through
    # a broadcast, follow the sizes)
    if prep.kernels is None:
        return out
    out = with_kernels(out, prep.fusion, split=prep.kernels.split)
    # the argument bytes a kernel shares are read from the base shapes: they scale as the op's external reads
    base = prep.arrays["ext_bytes"]
    grown = np.where(base > 0, a["ext_bytes"] / np.maximum(base, 1.0), 0.0)
    out.arrays["ext_shared"] = out.arrays["ext_shared"] * grown
    # and so do the argument bytes a kernel reads from outside (producers' bytes are pred_bytes, rescaled)
    out.arrays["kernel_in"] = kernel_inputs(out.arrays["kernel"], out, grown)
    return out


def _codes(names: np.ndarray) -> np.ndarray:
    return np.array([DATAFLOWS.index(n) if n in DATAFLOWS else 0 for n in names], np.float64)


def _weighted_quantiles(values: np.ndarray, weights: np.ndarray, qs: Sequence[float]) -> np.ndarray:
    order = np.argsort(values)
    v, w = values[order], weights[order]
    cum = np.cumsum(w) / w.sum()
    return np.array([v[min(np.searchsorted(cum, q - 1e-12), len(v) - 1)] for q in qs])


def check_quantiles(quantiles: Any, error: type[Exception] = ShapeError) -> list[float]:
    """``quantiles`` as a list of floats, each finite and in ``(0, 1]``, else ``error`` (the caller's class) naming
    them: a NaN or a quantile above 1 would index past the distribution, so :func:`_weighted_quantiles` would read
    its largest size as any quantile, silently.

    >>> check_quantiles((0.5, 0.99))
    [0.5, 0.99]
    """
    qs = [] if isinstance(quantiles, (str, bytes)) or np.ndim(quantiles) != 1 else list(quantiles)
    bad = [q for q in qs if isinstance(q, (bool, np.bool_)) or not isinstance(q, (int, float, np.integer, np.floating))
           or not (np.isfinite(q) and 0 < q <= 1)]
    if not qs or bad:
        raise error(f"quantiles must be a non-empty list of finite numbers in (0, 1] (e.g. (0.5, 0.95, 0.99)); "
                    f"{'got ' + repr(quantiles) if not qs else f'these are not: {bad}'}")
    return [float(q) for q in qs]


def size_distribution(batch_sizes: Mapping[int, float] | Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """``(sizes, weights)`` of a batch-size distribution: ``{size: probability}`` or a sample of sizes (each size
    weighted by how often it occurs). Sizes are finite whole numbers >= 1; weights are finite, >= 0 and sum above 0.

    >>> [a.tolist() for a in size_distribution([1, 4, 1])]
    [[1.0, 4.0], [2.0, 1.0]]
    """
    valid = ("batch_sizes needs finite whole sizes >= 1 with finite weights >= 0 that sum above 0 ({size: weight} "
             f"or a sample of sizes, e.g. {{1: 0.5, 4: 0.5}} or [1, 1, 4]), got {batch_sizes!r:.120}")
    # a string is iterable (its characters) and a number is not: neither is a sample of sizes
    if isinstance(batch_sizes, (str, bytes)) or not isinstance(batch_sizes, Iterable):
        raise ShapeError(valid)
    try:
        if isinstance(batch_sizes, Mapping):
            sizes = np.array(list(batch_sizes), dtype=np.float64)
            weights = np.array(list(batch_sizes.values()), dtype=np.float64)
        else:
            sizes, counts = np.unique(np.asarray(list(batch_sizes), dtype=np.float64), return_counts=True)
            weights = counts.astype(np.float64)
    except (TypeError, ValueError):  # a size or weight that is not a number ("a", None, a list)
        raise ShapeError(valid) from None
    # an infinite weight makes every cumulative probability NaN (inf / inf), so each quantile would be one size
    if sizes.ndim != 1 or sizes.size == 0 or not np.isfinite(sizes).all() or (sizes < 1).any() \
            or (sizes != np.round(sizes)).any() or not np.isfinite(weights).all() or (weights < 0).any() \
            or not weights.sum() > 0:
        raise ShapeError(valid)
    return sizes, weights
