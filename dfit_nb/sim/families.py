"""Segment by model family: which dataflow wins per family (one trace each) and per layer class, on one machine.

Each trace gets its evaluated policy (:func:`dfit_nb.sim.select_dataflows`: every single style replayed, the
hybrid replayed); the family's winner is the best replayed single style under the objective. Layer classes are
read from the op table, not from names: a GEMM is a ``conv`` or a ``dense`` matmul, and ``grouped conv`` /
``batched matmul`` when it has a batch of independent products (a depthwise convolution's groups, attention's
heads). Per class, a candidate's cost is what the selection's table charges the class's GEMMs under it (each
GEMM with the non-GEMM ops that follow it, :func:`dfit_nb.sim._viterbi.gemm_costs`); the class's winner is the
cheapest candidate summed over them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import xarray as xr

from ..errors import DfitError
from ._prepare import prepare
from .hardware import Hardware, check_hardware


class FamilyError(DfitError, ValueError):
    """No traces, or a trace that cannot be segmented."""


def layer_classes(trace: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(op ids, class names)`` of the trace's GEMMs, in program order (see the module docstring).

    >>> import jax.numpy as jnp, dfit_nb
    >>> t = dfit_nb.capture(lambda a, b: jnp.einsum("bij,bjk->bik", a, b), jnp.ones((4, 8, 8)), jnp.ones((4, 8, 8)))
    >>> layer_classes(t)[1].tolist()
    ['batched matmul']
    """
    prep = prepare(trace)
    gemm = np.flatnonzero(prep.arrays["gemm"] > 0)
    conv = np.char.startswith(prep.primitive[gemm].astype(str), "conv")
    batched = prep.arrays["batch"][gemm] > 1
    names = np.where(conv, np.where(batched, "grouped conv", "conv"), np.where(batched, "batched matmul", "dense"))
    return prep.op[gemm], names.astype(object)


def by_family(traces: Mapping[str, Any], hw: Hardware, objective: str = "energy") -> xr.Dataset:
    """Which dataflow wins per model family and per layer class, on one machine.

    Parameters
    ----------
    traces : dict of str to Trace
        ``{family: trace}``, e.g. a CNN and a transformer.
    hw : Hardware
    objective : {"energy", "latency", "edp"}

    Returns
    -------
    xarray.Dataset
        Dims ``family``, ``policy`` (the candidates and ``hybrid``), ``layer_class``, ``candidate``:
        ``metric`` (the replayed objective per family and policy), ``winner`` (best single style per family),
        ``hybrid_gain`` (the policy's replayed gain over it), ``class_cost`` (summed per class and candidate;
        NaN where the family has no such layer), ``class_winner`` (``""`` where absent), ``n_gemms``.

    Examples
    --------
    >>> import dfit_nb
    >>> from dfit_nb.sim import presets
    >>> fn, args = dfit_nb.examples.get("mlp").build()
    >>> ds = by_family({"mlp": dfit_nb.capture(fn, *args)}, presets.get("npu_like"))
    >>> ds["class_winner"].sel(family="mlp", layer_class="dense").item() in ("ws", "os", "is")
    True
    """
    from .policy import select_dataflows

    if not isinstance(traces, Mapping) or not traces:
        raise FamilyError(f"traces must be a non-empty dict {{family: Trace}}, got {type(traces).__name__}")
    check_hardware(hw, "by_family()", error=FamilyError)
    families = [str(f) for f in traces]
    policies = {f: select_dataflows(t, hw, objective, progress=False)  # one after another: no bar each
                for f, t in zip(families, traces.values(), strict=True)}
    cands = [str(c) for c in next(iter(policies.values())).choices["candidate"].values]
    classes_of = {f: layer_classes(traces[f])[1] for f in families}
    classes = sorted({c for v in classes_of.values() for c in v})
    labels = [*cands, "hybrid"]
    metric = np.zeros((len(families), len(labels)))
    cost = np.full((len(families), len(classes), len(cands)), np.nan)
    count = np.zeros((len(families), len(classes)), np.int64)
    for i, f in enumerate(families):
        b = policies[f].baselines
        m = {"energy": b["energy_j"], "latency": b["latency_s"], "edp": b["energy_j"] * b["latency_s"]}[objective]
        metric[i] = m.sel(policy=labels).values
        table = policies[f].choices["cost"].values  # (GEMMs, candidates), GEMMs in program order as classes_of
        for j, c in enumerate(classes):
            mine = classes_of[f] == c
            count[i, j] = int(mine.sum())
            if mine.any():
                cost[i, j] = table[mine].sum(axis=0)
    winner = np.asarray(cands, dtype=object)[np.argmin(metric[:, :-1], axis=1)]
    present = count > 0
    class_winner = np.where(present, np.asarray(cands, dtype=object)[np.argmin(np.nan_to_num(cost, nan=np.inf),
                                                                               axis=2)], "")
    units = {"energy": "J", "latency": "s", "edp": "J s"}[objective]
    return xr.Dataset(
        {"metric": (("family", "policy"), metric, {"units": units, "description": f"replayed {objective}"}),
         "winner": ("family", winner, {"units": "", "description": "best replayed single style"}),
         "hybrid_gain": ("family", np.array([policies[f].replayed_gain() for f in families]),
                         {"units": "1", "description": "the policy's replayed gain over the winner"}),
         "class_cost": (("family", "layer_class", "candidate"), cost,
                        {"units": "cycle" if objective == "latency" else "pJ",
                         "description": "the selection's cost of the class's GEMMs under each candidate"}),
         "class_winner": (("family", "layer_class"), class_winner.astype(object),
                          {"units": "", "description": "cheapest candidate for the class"}),
         "n_gemms": (("family", "layer_class"), count, {"units": "1", "description": "GEMMs of the class"})},
        coords={"family": families, "policy": labels, "layer_class": classes, "candidate": cands},
        attrs={"objective": objective, "hardware": hw.name},
    )


def family_table(ds: xr.Dataset) -> str:
    """``by_family``'s result as a Markdown table: one row per (family, layer class), the family's winner first."""
    whole = ds["metric"].attrs["units"]
    part = ds["class_cost"].attrs["units"]
    rows = ["| family | layer class | GEMMs | wins | units | " + " | ".join(f"{c}" for c in ds["candidate"].values)
            + " |", "|---|---|---|---|---|" + "---|" * ds.sizes["candidate"]]
    for f in ds["family"].values:
        row = ds.sel(family=f)
        rows.append(f"| {f} | (whole model, replayed; hybrid {float(row['hybrid_gain']):+.2%}) | "
                    f"{int(row['n_gemms'].sum())} | {row['winner'].item()} | {whole} | "
                    + " | ".join(f"{float(row['metric'].sel(policy=c)):.4g}" for c in ds["candidate"].values) + " |")
        for c in ds["layer_class"].values:
            if int(row["n_gemms"].sel(layer_class=c)) == 0:
                continue
            cells = row["class_cost"].sel(layer_class=c).values
            rows.append(f"| {f} | {c} | {int(row['n_gemms'].sel(layer_class=c))} | "
                        f"{row['class_winner'].sel(layer_class=c).item()} | {part} | "
                        + " | ".join(f"{v:.4g}" for v in cells) + " |")
    return "\n".join(rows) + "\n"
