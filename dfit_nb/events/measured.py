"""Measured events: a trace captured in ``profile`` or ``eager`` mode as an events Dataset.

Each leaf op with a measured time becomes one ``compute`` event on the host
(``source="measured"``, tile ``-1``, no cycles), so measured and simulated
events share one schema and one accessor (``ds.dfit.compare()``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np
import xarray as xr

from ..errors import DfitError
from .schema import events_dataset

if TYPE_CHECKING:
    from ..capture.trace import Trace

__all__ = ["NotMeasuredError", "measured_events"]

PROVENANCE = ("function", "arg_shapes", "jax_version", "dfit_nb_version", "backend", "device_kind")
MAC_CLASSES = ("gemm", "conv")


class NotMeasuredError(DfitError, ValueError):
    """The trace holds no measured times (captured in static mode), or what was given is not a Trace (a Run, a
    path): the message names what it was and where its measured events are."""


def measured_events(trace: Trace, *, sequential: bool = True) -> xr.Dataset:
    """The measured ops of a ``profile``- or ``eager``-mode trace as host events.

    One ``compute`` event per leaf op (``container == ''``) with a finite
    ``time_s``; ops without a time are skipped, and so are container ops,
    unless a container has a time and none of the ops inside it has one (a
    profiled loop whose body emitted no per-instruction events): then the
    container's event stands for them. An op's
    event covers all its executions: duration ``time_s × count``, ``bytes``
    = ``(bytes_read + bytes_written) × count``, ``macs`` = ``flops / 2 ×
    count`` for ``gemm`` and ``conv`` ops (0 otherwise), ``energy_pj`` 0.
    Events have ``source="measured"``, tile ``-1``/``-1``, NaN cycles and
    ``region`` and ``op`` from the trace.

    Parameters
    ----------
    trace : dfit_nb.Trace
        A trace captured with ``mode="profile"`` or ``mode="eager"``.
    sequential : bool
        If true (default), events are laid out one after another in op
        order on the host timeline: an event starts where the previous one
        ends (``start_s`` = cumulative time of the earlier events). If
        false, every event starts at 0: only durations are claimed, not
        when the ops ran.

    Returns
    -------
    xarray.Dataset
        An events Dataset (:mod:`dfit_nb.events.schema`); attrs: the trace's
        provenance (function, argument shapes, versions, backend, device
        kind) and ``mode``.

    Raises
    ------
    NotMeasuredError
        If the trace holds no measured time (static mode), or ``trace`` is not a Trace.

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((4, 8)), jnp.ones((8, 2)), mode="eager")
    >>> ev = measured_events(t)
    >>> ev["source"].values.tolist(), ev["macs"].values.tolist()
    (['measured', 'measured'], [64.0, 0.0])
    >>> bool(ev["start_s"][1] == ev["end_s"][0])
    True
    >>> measured_events(dfit_nb.capture(lambda a: a * 2, jnp.ones(3)))
    Traceback (most recent call last):
    ...
    dfit_nb.events.measured.NotMeasuredError: trace ... has no measured times (mode='static'); ...
    """
    from ..capture.trace import Trace

    if not isinstance(trace, Trace):  # a Run has ops too, without times: a KeyError 'time_s' naming nothing
        hint = ("; a Run's measured events are already among its events: run.events.dfit.select(source='measured')"
                if hasattr(trace, "events") else "; a saved trace is opened first: dfit_nb.load_trace(path)"
                if isinstance(trace, (str, os.PathLike)) else "")
        raise NotMeasuredError(f"measured_events() needs a Trace captured with mode='profile' or mode='eager' as "
                               f"'trace', got {type(trace).__name__}{hint}")
    ops = trace.ops
    time_s = ops["time_s"].values.astype(np.float64)
    leaf = ops["container"].values.astype(str) == ""
    timed = np.isfinite(time_s)
    # a container timed as a whole (a profiled loop whose body emits no per-instruction events) stands for
    # its ops when none of them has a time of its own
    covered = np.zeros(len(time_s), bool)
    parent = ops["parent"].values.astype(np.int64)
    up = parent[np.flatnonzero(leaf & timed)]
    while up.size:  # one step per nesting level
        up = up[up >= 0]
        covered[up] = True
        up = parent[up]
    keep = timed & (leaf | ~covered)
    if not keep.any():
        raise NotMeasuredError(
            f"trace of {trace.attrs.get('function', '?')!r} has no measured times (mode={trace.mode!r}); "
            "measured events need a trace captured with mode='profile' or mode='eager'")
    count = ops["count"].values[keep].astype(np.float64)
    duration = time_s[keep] * count
    if sequential:
        end = np.cumsum(duration)  # sequential sums: end[i] == start[i] + duration[i] exactly
        start = np.concatenate([[0.0], end[:-1]])
    else:
        start, end = np.zeros_like(duration), duration
    op_class = ops["op_class"].values[keep].astype(str)
    flops = ops["flops"].values[keep].astype(np.float64)
    columns = {
        "op": ops["op"].values[keep] if "op" in ops.coords else np.flatnonzero(keep),
        "region": ops["region"].values[keep].astype(str),
        "kind": np.full(duration.size, "compute"),
        "start_s": start,
        "end_s": end,
        "bytes": (ops["bytes_read"].values[keep] + ops["bytes_written"].values[keep]).astype(np.float64) * count,
        "macs": np.where(np.isin(op_class, MAC_CLASSES), flops / 2.0 * count, 0.0),
        "energy_pj": np.zeros(duration.size),
        "source": np.full(duration.size, "measured"),
    }
    attrs = {k: trace.attrs[k] for k in PROVENANCE if k in trace.attrs}
    attrs["mode"] = trace.mode
    return events_dataset(columns, attrs=attrs)
