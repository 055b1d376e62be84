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
batch sizes into p50 / p95 / p99 latency and energy per policy. The rescaling itself
(:func:`exponents`, :func:`scaled`, :func:`size_distribution`) is :mod:`dfit_nb.sim._rescale`'s, re-exported
here: it sits below the selection, so the memo's batch variance uses it without importing this module.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from ._batch import summarize
from ._prepare import prepare
from ._rescale import DIMS as DIMS
from ._rescale import FIELDS as FIELDS
from ._rescale import ShapeError as ShapeError
from ._rescale import _codes, _weighted_quantiles, check_base, check_quantiles
from ._rescale import exponents as exponents
from ._rescale import scaled as scaled
from ._rescale import size_distribution as size_distribution
from .hardware import Hardware, check_hardware
from .kernels import splits_rows
from .machine import DATAFLOWS
from .policy import _check as _check_policy
from .policy import select_dataflows


def _check_scales(scales: Any) -> dict[str, list[float]]:
    """``scales`` as ``{axis: [factor, ...]}``, each axis a non-empty list of finite factors > 0: an empty list
    would leave no shape to evaluate (a reshape of nothing), and a string ("12") its characters."""
    if not isinstance(scales, Mapping) or not scales:
        raise ShapeError(f"scales must be a dict {{axis: [factor, ...]}} naming one or more axes, e.g. "
                         f"{{'batch': [0.5, 1, 2]}}; got {scales!r}")
    out = {}
    for axis, values in scales.items():
        ok = not isinstance(values, (str, bytes, Mapping)) and np.ndim(values) == 1 and len(values) > 0
        factors = list(values) if ok else []
        if ok and all(isinstance(f, (int, float, np.integer, np.floating)) and not isinstance(f, (bool, np.bool_))
                      and np.isfinite(f) and f > 0 for f in factors):
            out[axis] = [float(f) for f in factors]
            continue
        raise ShapeError(f"scales[{axis!r}] needs a non-empty list of positive, finite factors of the base size "
                         f"(e.g. [0.5, 1, 2]); got {values!r}")
    return out


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
        Factors of the base per axis (e.g. ``{"batch": [0.5, 1, 2, 4]}``), each an axis of ``base`` and each
        factor giving a size of at least 1; every combination is evaluated.
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
    # a batch of machines would reach the selection's per-op choices as a Dataset, far from here
    check_hardware(hw, "shape_sensitivity()", error=ShapeError)
    _check_policy(objective, DATAFLOWS, None)  # the selection's own check (PolicyError), before any capture
    scales = _check_scales(scales)
    for axis in scales:  # before the probe captures (two per axis), which a misspelt axis would only waste
        check_base(base, axis)
        # below one element the dims are held at 1 while FLOPs and bytes keep shrinking: a mix of two sizes
        small = [f for f in scales[axis] if f * base[axis] < 1.0 - 1e-9]
        if small:
            raise ShapeError(f"scales[{axis!r}] factors {small} make {axis} smaller than 1 (base {axis}="
                             f"{base[axis]}): the smallest factor is 1 / {base[axis]} = {1.0 / base[axis]:g}")
    exps = exponents(trace, make_args, base)
    prep = prepare(trace, None, splits_rows(hw))
    base_policy = select_dataflows(trace, hw, objective, evaluate=False, progress=False)
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
        sel = select_dataflows(trace, hw, objective, evaluate=False, prepared=p, progress=False)
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


def tail_latency(trace: Any, hw: Hardware, make_args: Callable[..., Sequence[Any]], base: Mapping[str, int],
                 batch_sizes: Mapping[int, float] | Sequence[int], axis: str = "batch", objective: str = "energy",
                 quantiles: Sequence[float] = (0.5, 0.95, 0.99)) -> xr.Dataset:
    """p50 / p95 / p99 latency and energy per policy under a distribution of batch sizes.

    ``batch_sizes``: ``{size: probability}`` or samples (each size weighted by how often it occurs).
    Policies: each single style, and the hybrid chosen at the base shape (what a deployment would run).
    Quantiles are of the discrete distribution (the smallest value whose cumulative probability reaches q).
    """
    check_hardware(hw, "tail_latency()", error=ShapeError)
    sizes, weights = size_distribution(batch_sizes)
    check_quantiles(quantiles)
    check_base(base, axis)
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
