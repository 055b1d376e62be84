"""The price of a reduced format: a trace whose chosen GEMMs run in it (:func:`reduced_trace`), replayed on a
machine (:func:`price`). What :func:`dfit_nb.precision` reports next to the drift (its docstring, "Pricing").
"""

from __future__ import annotations

import warnings
from collections.abc import Collection
from typing import Any

import jax.numpy as jnp
import ml_dtypes
import numpy as np

from . import _operands
from ._dtypes import itemsize
from ._quantise import FORMATS, Format
from .capture import Trace
from .sim import SpillWarning, replay


def floating(dtype: str) -> bool:
    """Whether ``dtype`` (a NumPy or ml_dtypes name) is a floating-point type; False for a name neither knows.

    >>> floating("bfloat16"), floating("int8"), floating("token")
    (True, False, False)
    """
    try:
        return bool(jnp.issubdtype(np.dtype(getattr(ml_dtypes, dtype, dtype)), jnp.floating))
    except TypeError:
        return False


def reduced_trace(trace: Trace, ops: Collection[int], fmt: Format | str) -> Trace:
    """A copy of ``trace`` whose ops ``ops`` (ids of ``trace.ops``) run in ``fmt``: what the replay prices.

    Their ``dtype`` becomes the format's, their floating inputs' in ``trace.operands`` too (and so in the
    ``in_shapes`` text), ``bytes_read`` and ``bytes_written`` are recounted at the format's width, and so are the
    bytes of the edges into their floating operands. Nothing else changes; the replay reads the widths from these
    columns (:func:`dfit_nb.sim.machine.word_and_mac_energy`).

    >>> import jax.numpy as jnp, dfit_nb
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((4, 8)), jnp.ones((8, 2)))
    >>> r = reduced_trace(t, [0], "int8")
    >>> r.ops[["dtype", "in_shapes", "bytes_read", "bytes_written"]].isel(op=[0]).to_dataframe().to_dict("records")
    [{'dtype': 'int8', 'in_shapes': 'int8[4,8] int8[8,2]', 'bytes_read': 48, 'bytes_written': 8}]
    """
    fmt = FORMATS[fmt] if isinstance(fmt, str) else fmt
    ops_ds = trace.ops.copy(deep=True)
    operands = trace.operands.copy(deep=True)
    ids = np.asarray(sorted(int(o) for o in ops), np.int64)
    width = float(fmt.itemsize)
    dtype = ops_ds["dtype"].values.astype(object)
    read = ops_ds["bytes_read"].values.copy()
    written = ops_ds["bytes_written"].values.copy()
    # the inputs of the chosen ops: floating ones take the format's dtype, and their bytes its width
    rows = np.flatnonzero(np.isin(operands["op"].values, ids) & (operands["role"].values == "input"))
    names = operands["dtype"].values.astype(object)
    size = _operands.elements(operands.isel(operand=rows))
    operand_scale: dict[tuple[int, int], float] = {}
    new_read = dict.fromkeys(ids.tolist(), 0.0)
    owner, position = operands["op"].values, operands["position"].values
    for j, elements in zip(rows, size, strict=True):
        o, pos, dt = int(owner[j]), int(position[j]), str(names[j])
        if floating(dt):
            operand_scale[(o, pos)] = width / max(itemsize(dt), 1.0)
            new_read[o] += elements * width
            names[j] = fmt.dtype
        else:
            new_read[o] += elements * itemsize(dt)
    operands["dtype"] = (operands["dtype"].dims, names, operands["dtype"].attrs)
    for o in ids:
        read[o] = round(new_read[int(o)])
        if floating(str(dtype[o])) and itemsize(str(dtype[o])) > 0:
            written[o] = round(written[o] * width / itemsize(str(dtype[o])))
            dtype[o] = fmt.dtype
    shapes = ops_ds["in_shapes"].values.astype(object)
    shapes[ids] = _operands.text_columns(operands, ids)[0]  # the display text, from the data
    ops_ds["in_shapes"] = (ops_ds["in_shapes"].dims, shapes, ops_ds["in_shapes"].attrs)
    ops_ds["dtype"] = (ops_ds["dtype"].dims, dtype.astype(str), ops_ds["dtype"].attrs)
    ops_ds["bytes_read"].values = read
    ops_ds["bytes_written"].values = written
    edges = trace.edges.copy(deep=True)
    if edges.sizes.get("edge", 0) and operand_scale:
        pos = edges["operand"].values if "operand" in edges else np.zeros(edges.sizes["edge"], np.int64)
        factor = np.array([operand_scale.get((int(d), int(p)), 1.0)
                           for d, p in zip(edges["dst"].values, pos, strict=True)])
        edges["bytes"].values = np.round(edges["bytes"].values * factor).astype(edges["bytes"].dtype)
    return Trace(ops=ops_ds, edges=edges, regions=trace.regions, lowering=trace.lowering, operands=operands,
                 attrs={**trace.attrs, "precision_format": fmt.name}, overhead=trace.overhead,
                 jaxpr=trace.jaxpr, fn=trace.fn)


def price(trace: Trace, hw: Any, dataflow: Any, inferences: int, region_ops: list[list[int]],
          fmts: list[Format]) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Replayed latency, energy, energy per inference and DRAM bytes of ``trace`` with each ``region_ops`` entry's
    GEMMs in each format (arrays over (format, entry)), and of ``trace`` as captured."""

    def summary(t: Trace) -> dict[str, float]:
        s = replay(t, hw, dataflow, time_bins=8, measured=False).summary
        return {"latency_s": float(s["latency_s"]), "energy_j": float(s["energy_j"]),
                "joules_per_inference": float(s["energy_j"]) / inferences, "dram_bytes": float(s["dram_bytes"])}

    base = summary(trace)  # a SpillWarning of the program as captured reaches the user
    out = {k: np.full((len(fmts), len(region_ops)), np.nan) for k in base}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpillWarning)  # narrower words spill no more than the baseline
        for i, fmt in enumerate(fmts):
            for j, ops in enumerate(region_ops):
                for k, v in summary(reduced_trace(trace, ops, fmt)).items():
                    out[k][i, j] = v
    return out, base
