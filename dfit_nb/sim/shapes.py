"""Shape sensitivity and tail latency: a captured program at other batch sizes and sequence lengths.

How every op's GEMM dims, FLOPs, operand bytes, counts and the bytes passed
along each edge grow with each size is measured once per size axis, by
capturing the function at a second size (``probe`` times the base): each
column is taken as ``value x (size / base) ** exponent`` with the exponent from
the two captures (1 for a dim that is the batch, 2 for attention scores in
the sequence length, 0 for weights). After that any size is an arithmetic
rescale of the op table: no tracing per size. Monomial quantities (GEMM dims,
each operand's size) rescale exactly; a column that sums terms of different
degree (an op's external input bytes mixing activations and weights) follows
one power law through the two captures: exact at them, approximate between
(the replayed latency stays within 0.03 % of a fresh capture on the encoder at
4x batch, 4x sequence and 3x / 1.5x both; ``tests/sim/test_shapes.py``).
Programs whose structure changes with a size are refused with a clear error.

Then :func:`shape_sensitivity` replays every single style, the hybrid chosen
at the base shape, and the hybrid re-selected at each shape, and reports which
GEMMs flip their best dataflow; :func:`tail_latency` turns a distribution of
batch sizes into p50 / p95 / p99 latency and energy per policy.
"""

from __future__ import annotations

import dataclasses
import itertools
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from ..errors import DfitError
from ._replay import Prepared, prepare, summarize, with_kernels
from .hardware import Hardware
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
    if not base:
        raise ShapeError("base must name at least one size axis, e.g. base={'batch': 2}")
    prep = prepare(trace)
    cols, preds = [], []
    for axis, size in base.items():
        if not isinstance(size, (int, np.integer)) or size < 1:
            raise ShapeError(f"base size {axis}={size!r} must be a positive integer")
        bigger = round(size * probe)
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
    return with_kernels(out, prep.fusion) if prep.kernels is not None else out


def _codes(names: np.ndarray) -> np.ndarray:
    return np.array([DATAFLOWS.index(n) if n in DATAFLOWS else 0 for n in names], np.float64)


def _points(scales: Mapping[str, Sequence[float]]) -> list[dict[str, float]]:
    axes = list(scales)
    return [dict(zip(axes, p, strict=True)) for p in itertools.product(*(list(scales[a]) for a in axes))]


def shape_sensitivity(trace: Any, hw: Hardware, make_args: Callable[..., Sequence[Any]], base: Mapping[str, int],
                      scales: Mapping[str, Sequence[float]], objective: str = "energy") -> xr.Dataset:
    """The policy analysis over scaled shapes: which GEMMs flip their best dataflow, and where.

    Parameters
    ----------
    trace : Trace
        From :func:`dfit_nb.capture` (it holds the function).
    hw : Hardware
    make_args : callable
        ``make_args(**sizes)`` -> the function's positional arguments at those sizes.
    base : dict
        The sizes of ``trace`` (e.g. ``{"batch": 2, "seq": 32}``).
    scales : dict
        Factors of the base per axis (e.g. ``{"batch": [0.5, 1, 2, 4]}``); every combination is evaluated.
    objective : {"energy", "latency", "edp"}

    Returns
    -------
    xarray.Dataset
        Dims: the scaled axes, ``policy`` (``ws``, ``os``, ``is``, ``hybrid@base``: the per-op
        choice made at the base shape, ``hybrid``: re-selected at each shape) and ``op`` (the
        GEMMs): ``latency_s``, ``energy_j``, ``best`` (each GEMM's cheapest dataflow alone),
        ``chosen`` (the re-selected hybrid), ``flipped`` (best differs from the base shape's),
        ``n_flipped``.

    Examples
    --------
    >>> import dfit_nb
    >>> from dfit_nb.sim import presets
    >>> from dfit_nb.sim.shapes import shape_sensitivity
    >>> build = dfit_nb.examples.get("mlp").build
    >>> fn, args = build(batch=8)
    >>> ds = shape_sensitivity(dfit_nb.capture(fn, *args), presets.get("npu_like"),
    ...                        lambda batch: build(batch=batch)[1], {"batch": 8}, {"batch": [1, 4]})
    >>> ds["latency_s"].dims
    ('batch', 'policy')
    """
    from .policy import select_dataflows

    exps = exponents(trace, make_args, base)
    prep = prepare(trace)
    base_policy = select_dataflows(trace, hw, objective, evaluate=False)
    fixed = _codes(np.asarray(base_policy.per_op))  # per replayed op; "" (non-GEMM) -> ws, which it ignores
    gemm_rows = np.flatnonzero(prep.arrays["gemm"] > 0)
    policies = [*DATAFLOWS, "hybrid@base", "hybrid"]
    points = _points(scales)
    lat = np.zeros((len(points), len(policies)))
    eng = np.zeros_like(lat)
    best = np.empty((len(points), gemm_rows.size), dtype=object)
    chosen = np.empty_like(best)
    for i, point in enumerate(points):  # a handful of shapes: each is one compiled replay per policy
        p = scaled(prep, exps, point)
        sel = select_dataflows(trace, hw, objective, evaluate=False, prepared=p)
        cands = list(sel.choices["candidate"].values)
        best[i] = np.asarray(cands, dtype=object)[np.argmin(sel.choices["cost"].values, axis=1)]
        chosen[i] = sel.choices["dataflow"].values
        reselected = _codes(np.where(np.asarray(sel.per_op) == "", "ws", np.asarray(sel.per_op)))
        for j, codes in enumerate([np.full(len(prep.op), float(c)) for c in range(3)] + [fixed, reselected]):
            s = summarize(p, hw, codes)
            lat[i, j], eng[i, j] = s["latency_s"], s["energy_j"]
    shape = [len(scales[a]) for a in scales]
    axes = list(scales)
    base_point = {a: 1.0 for a in scales}
    base_best = np.asarray(
        [c for c in np.asarray(base_policy.choices["candidate"].values, dtype=object)[
            np.argmin(base_policy.choices["cost"].values, axis=1)]], dtype=object)
    flipped = best != base_best[None, :]
    data = {
        "latency_s": ((*axes, "policy"), lat.reshape(*shape, len(policies)), {"units": "s",
                                                                            "description": "replayed latency"}),
        "energy_j": ((*axes, "policy"), eng.reshape(*shape, len(policies)), {"units": "J",
                                                                           "description": "replayed energy"}),
        "best": ((*axes, "op"), best.reshape(*shape, -1), {"units": "", "description": "cheapest dataflow alone"}),
        "chosen": ((*axes, "op"), chosen.reshape(*shape, -1), {"units": "",
                                                              "description": "the hybrid re-selected here"}),
        "flipped": ((*axes, "op"), flipped.reshape(*shape, -1), {"units": "",
                                                                "description": "best differs from the base shape"}),
        "n_flipped": (axes, flipped.sum(axis=1).reshape(shape), {"units": "1",
                                                                "description": "GEMMs whose best dataflow flips"}),
    }
    coords = {a: [float(v) for v in scales[a]] for a in axes}
    coords.update(policy=policies, op=prep.op[gemm_rows],
                  region=("op", prep.region[gemm_rows].astype(object)))
    return xr.Dataset(data, coords=coords, attrs={"objective": objective, "hardware": hw.name,
                                                  "base": ",".join(f"{k}={v}" for k, v in base.items()),
                                                  "scale": "factor of the base size", "base_point": str(base_point)})


def _weighted_quantiles(values: np.ndarray, weights: np.ndarray, qs: Sequence[float]) -> np.ndarray:
    order = np.argsort(values)
    v, w = values[order], weights[order]
    cum = np.cumsum(w) / w.sum()
    return np.array([v[min(np.searchsorted(cum, q - 1e-12), len(v) - 1)] for q in qs])


def size_distribution(batch_sizes: Mapping[int, float] | Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """``(sizes, weights)`` of a batch-size distribution: ``{size: probability}`` or a sample of sizes (each size
    weighted by how often it occurs). Sizes are whole numbers >= 1; weights are >= 0 and sum above 0.

    >>> [a.tolist() for a in size_distribution([1, 4, 1])]
    [[1.0, 4.0], [2.0, 1.0]]
    """
    if isinstance(batch_sizes, Mapping):
        sizes = np.array(list(batch_sizes), dtype=np.float64)
        weights = np.array(list(batch_sizes.values()), dtype=np.float64)
    else:
        sizes, counts = np.unique(np.asarray(list(batch_sizes), dtype=np.float64), return_counts=True)
        weights = counts.astype(np.float64)
    if sizes.size == 0 or (sizes < 1).any() or (sizes != np.round(sizes)).any() or (weights < 0).any() \
            or not weights.sum() > 0:
        raise ShapeError(f"batch_sizes needs whole sizes >= 1 with weights >= 0 that sum above 0 ({{size: weight}} "
                         f"or a sample of sizes), got {batch_sizes!r}")
    return sizes, weights


def tail_latency(trace: Any, hw: Hardware, make_args: Callable[..., Sequence[Any]], base: Mapping[str, int],
                 batch_sizes: Mapping[int, float] | Sequence[int], axis: str = "batch", objective: str = "energy",
                 quantiles: Sequence[float] = (0.5, 0.95, 0.99)) -> xr.Dataset:
    """p50 / p95 / p99 latency and energy per policy under a distribution of batch sizes.

    ``batch_sizes``: ``{size: probability}`` or samples (each size weighted by how often it occurs).
    Policies: each single style, and the hybrid chosen at the base shape (what a deployment would run).
    Quantiles are of the discrete distribution (the smallest value whose cumulative probability reaches q).
    """
    sizes, weights = size_distribution(batch_sizes)
    if axis not in base:
        raise ShapeError(f"axis {axis!r} is not in base {dict(base)}")
    ds = shape_sensitivity(trace, hw, make_args, base, {axis: list(sizes / base[axis])}, objective)
    policies = [p for p in ds["policy"].values if p != "hybrid"]
    lat = ds["latency_s"].sel(policy=policies).values  # (sizes, policy)
    eng = ds["energy_j"].sel(policy=policies).values
    data = {
        "latency_s": (("policy", "quantile"), np.stack([_weighted_quantiles(lat[:, j], weights, quantiles)
                                                        for j in range(len(policies))]), {"units": "s"}),
        "energy_j": (("policy", "quantile"), np.stack([_weighted_quantiles(eng[:, j], weights, quantiles)
                                                       for j in range(len(policies))]), {"units": "J"}),
        "mean_latency_s": (("policy",), (lat * weights[:, None]).sum(0) / weights.sum(), {"units": "s"}),
        "mean_energy_j": (("policy",), (eng * weights[:, None]).sum(0) / weights.sum(), {"units": "J"}),
    }
    return xr.Dataset(data, coords={"policy": policies, "quantile": list(quantiles)},
                      attrs={"axis": axis, "sizes": ",".join(f"{s:g}" for s in sizes), "objective": objective,
                             "hardware": hw.name})
