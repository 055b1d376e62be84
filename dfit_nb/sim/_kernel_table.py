"""``run.kernels``: a replay's per-op results rolled up to the kernels the chip ran (:mod:`dfit_nb.sim.kernels`).

A kernel's figures are sums over its ops (bytes, energy, MACs, launch cycles), its time runs from its first op's
start to its last op's end, and its bottleneck is the mechanism that needs most of its ops' cycles together
(:data:`dfit_nb.sim.run.MECHANISMS`). The ops keep their own rows: a region's time and energy stay the sums of its
ops' (each op carries its share of its kernel's work), so every per-region view still answers "which layer".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from .kernels import members

#: per-op variables summed into each kernel -> (units, description)
SUMS = {
    "macs": ("MAC", "multiply-accumulates of its ops, all executions"),
    "bytes_sram": ("B", "SRAM bytes of its ops, all executions"),
    "bytes_noc": ("B", "NoC bytes of its ops, all executions"),
    "bytes_dram": ("B", "DRAM bytes of its ops, all executions"),
    "bytes_retile": ("B", "bytes moved between differently laid-out ops before its ops"),
    "energy_pj": ("pJ", "energy of its ops, all executions"),
    "launch_cycles": ("cycle", "fixed cost paid (one launch per kernel and execution)"),
    "hidden_cycles": ("cycle", "vector-unit compute hidden under its PE-array work"),
}


def kernels_dataset(ops: xr.Dataset) -> xr.Dataset:
    """The kernels of a Run's ``ops`` (a run saved before kernels: one kernel per op).

    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import presets
    >>> t = dfit_nb.capture(lambda a, b, c: jnp.tanh(a @ b + c), jnp.ones((64, 128)), jnp.ones((128, 32)),
    ...                     jnp.ones(32))
    >>> run = dfit_nb.replay(t, presets.get("tpu_v4"))
    >>> k = run.kernels
    >>> k.sizes["kernel"], str(k["members"].values[0]), int(k["n_ops"][0])
    (1, 'dot_general+add+tanh (ops 0, 1, 2, 3)', 4)
    """
    n = int(ops.sizes["op"])
    kernel = ops["kernel"].values.astype(np.int64) if "kernel" in ops else np.arange(n)
    ids, first, inv = np.unique(kernel, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    size = len(ids)
    n_ops = np.bincount(inv, minlength=size)
    op_ids = ops["op"].values
    primitive = ops["primitive"].values.astype(str)
    free = ops["free"].values.astype(bool) if "free" in ops else np.zeros(n, bool)
    listed = []
    for rows in members(inv, size):
        work = [primitive[i] for i in rows if not free[i]] or [primitive[rows[0]]]
        listed.append("+".join(work) + " (ops " + ", ".join(str(op_ids[i]) for i in rows) + ")")
    start = np.full(size, np.inf)
    np.minimum.at(start, inv, ops["start"].values.astype(np.float64))
    end = np.zeros(size)
    np.maximum.at(end, inv, ops["end"].values.astype(np.float64))
    d = ("kernel",)
    data: dict[str, Any] = {
        "name": (d, (ops["kernel_name"].values[first] if "kernel_name" in ops else primitive[first]).astype(str),
                 {"units": "", "description": "the kernel's name (an XLA fusion's, or its ops' primitives)"}),
        "members": (d, np.asarray(listed, dtype=str), {"units": "", "description": "its ops' primitives (free "
                                                        "reshapes and broadcasts left out) and op ids"}),
        "n_ops": (d, n_ops, {"units": "1", "description": "ops in the kernel"}),
        "region": (d, _common_regions(ops["region"].values.astype(str), inv, size),
                   {"units": "", "description": "the deepest region holding all its ops"}),
        "start": (d, start, {"units": "cycle", "description": "start of its first op"}),
        "end": (d, end, {"units": "cycle", "description": "end of its last op"}),
        "fused": (d, np.bincount(inv, weights=ops["fused"].values.astype(np.float64), minlength=size) > 0
                  if "fused" in ops else np.zeros(size, bool),
                  {"units": "", "description": "its ops ran fused (intermediates on chip, one launch)"}),
    }
    for name, (units, description) in SUMS.items():
        if name in ops:
            data[name] = (d, np.bincount(inv, weights=ops[name].values.astype(np.float64), minlength=size),
                          {"units": units, "description": description})
    if "evidence" in ops and "span" in ops:
        cycles = ops["evidence"].values * ops["span"].values[:, None]
        per = np.zeros((size, cycles.shape[1]))
        np.add.at(per, inv, cycles)
        mechanisms = np.asarray(ops["mechanism"].values).astype(str)
        data["bottleneck"] = (d, mechanisms[np.argmax(per, axis=1)],
                              {"units": "", "description": "the mechanism needing most of its ops' cycles"})
    return xr.Dataset(data, coords={"kernel": ids}, attrs=dict(ops.attrs))


def running_kernel(times: np.ndarray, kernel: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The kernel running at each of ``times``: of the kernels whose span (their ops' first start to last end)
    covers the time, the one that started last; ``-1`` where none runs.

    ``kernel``, ``start``, ``end``: per op, its kernel id and its interval. Kernels that overlap in time (ops on
    different tiles) are resolved to the latest started, the one a timeline shows on top.

    >>> running_kernel(np.array([1.0, 5.0, 9.0]), np.array([0, 0, 1]), np.array([0.0, 2.0, 4.0]),
    ...                np.array([2.0, 3.0, 6.0])).tolist()
    [0, 1, -1]
    """
    times = np.asarray(times, np.float64)
    if not len(kernel):
        return np.full(times.shape, -1, np.int64)
    ids, inv = np.unique(np.asarray(kernel, np.int64), return_inverse=True)
    inv = inv.reshape(-1)
    first = np.full(ids.size, np.inf)
    np.minimum.at(first, inv, np.asarray(start, np.float64))
    last = np.full(ids.size, -np.inf)
    np.maximum.at(last, inv, np.asarray(end, np.float64))
    order = np.argsort(first, kind="stable")
    first, last, ids = first[order], last[order], ids[order]
    # the latest-started kernel at or before each time; where it has ended, the one reaching furthest of those
    # before it (a running maximum of the ends), if that one still runs
    at = np.searchsorted(first, times, side="right") - 1
    reach = np.maximum.accumulate(last)
    # where a kernel's end is the running maximum, it is the furthest-reaching so far
    furthest = np.maximum.accumulate(np.where(last >= reach, np.arange(ids.size), 0))
    valid = at >= 0
    i = np.where(valid, at, 0)
    own = valid & (last[i] > times)
    other = valid & ~own & (reach[i] > times)
    return np.where(own, ids[i], np.where(other, ids[furthest[i]], -1)).astype(np.int64)


def _common_regions(regions: np.ndarray, inv: np.ndarray, size: int) -> np.ndarray:
    """Per kernel, the deepest region path every one of its ops lies in."""
    out = [""] * size
    seen = [False] * size
    for r, k in zip(regions, inv, strict=True):
        parts = r.split("/") if r else []
        if not seen[k]:
            out[k], seen[k] = r, True
            continue
        common = out[k].split("/") if out[k] else []
        i = 0
        while i < min(len(common), len(parts)) and common[i] == parts[i]:
            i += 1
        out[k] = "/".join(common[:i])
    return np.asarray(out, dtype=str)
