"""``reconcile(trace, hw, run)``: ops costed alone vs the replay, level by level, every difference named.

:func:`dfit_nb.sim._cost` prices each op alone (a one-op program: operands from
DRAM, results back to it) and :func:`dfit_nb.replay` prices the program; both
read the one machine model (:mod:`dfit_nb.sim.machine`), so on a one-op program
they are equal, and on a whole program they differ only by what a program adds
to its ops. Energy is additive (overlap in time changes latency, not joules),
so the difference per level is exactly what the program context changed:

* ``dram``: producers keep results on chip for their consumers (not written
  and re-read), results that do not fit are read back by consumers;
* ``noc``: DRAM traffic delivered over the mesh shrinks with it;
* ``compute`` / ``sram``: the mapping an op gets in context (operands already on
  chip change which layout is fastest) and, layer-pipelined, the tiles it is
  granted;
* ``retile``: results moved between differently laid-out ops, and dataflow
  switches: a program-only cost.

What fusion saved (:mod:`dfit_nb.sim.kernels`): each op alone is a kernel of
its own and pays its launch; the replay pays one per kernel
(``launches_alone`` vs ``launches``, ``launch_cycles_saved``), keeps its
kernels' intermediates on chip (part of the ``dram`` and ``noc`` differences)
and hides their vector work under the array (``hidden_cycles``).

Latency: the ops alone, summed, minus the replay's per-op durations is the
context (moves, on-chip operands, DRAM contention, a repeated op paying its
latencies once); the durations summed minus the latency is the overlap of
ops running at once (layer-pipelined machines).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from ..capture.trace import Trace
from ..errors import DfitError
from ..events.schema import KINDS
from .hardware import Hardware, check_hardware
from .run import Run

LEVELS = KINDS  # the kinds a replay charges energy to (compute, sram, noc, dram, retile)
REASONS = {
    "compute": "the mapping each op gets in context (and, layer-pipelined, the tiles it is granted); the layout ops "
               "a kernel folds away",
    "sram": "the mapping each op gets in context; the layout ops a kernel folds away move nothing",
    "noc": "DRAM traffic delivered over the mesh changes with what stays on chip",
    "dram": "results producers keep on chip (or inside their fused kernel) are not written to and re-read from "
            "DRAM",
    "retile": "moves between differently laid-out ops and dataflow switches (program only)",
}


class ReconcileError(DfitError, ValueError):
    """The trace, the run or the costs alone given to :func:`reconcile` do not belong together."""


def _other_machine(attrs: dict[str, Any], hw: Hardware, *, require: bool) -> tuple[str, Any, float] | None:
    """The first field whose ``hw_<field>`` provenance attr (of a run or a cost table) differs from ``hw``'s, as
    ``(field, recorded, hw's)``; a missing attr counts as different when ``require``. None when all agree."""
    from .hardware import FIELDS

    for f in FIELDS:
        have = attrs.get(f"hw_{f}")
        want = float(np.asarray(getattr(hw, f)))
        if (have is None and require) or (have is not None and not np.isclose(float(have), want)):
            return f, have, want
    return None


def _own_dataflows(alone: xr.Dataset, trace: Any, hw: Hardware, names: np.ndarray, ids: np.ndarray
                   ) -> xr.Dataset:
    """The rows of a precomputed ``cost(trace, hw, [styles])`` under each op's own dataflow (``names``), checked
    to be the trace's ops on this machine, so a table of another program or machine is refused, not mixed in."""
    if not isinstance(alone, xr.Dataset):
        raise ReconcileError(f"reconcile: alone= must be an xarray Dataset, cost(trace, hw, [styles], "
                             f"fusion='none'), got {type(alone).__name__}")
    if "dataflow" not in alone.dims or "op" not in alone.dims:
        raise ReconcileError("reconcile: alone= must be cost(trace, hw, [styles]) with a dataflow dim, got dims "
                             f"{dict(alone.sizes)}")
    if alone.attrs.get("fusion", "none") != "none":
        raise ReconcileError(f"reconcile: alone= prices kernels (fusion={alone.attrs['fusion']!r}); it compares "
                             "each op alone with the replay: cost it with fusion='none'")
    if alone.attrs.get("memory") != "finite":
        raise ReconcileError(f"reconcile: alone= was costed with memory={alone.attrs.get('memory')!r}; the replay "
                             "prices finite memory: cost it with memory='finite'")
    wrong = _other_machine(alone.attrs, hw, require=True)
    if wrong:
        field, have, want = wrong
        raise ReconcileError(f"reconcile: alone= was costed on another machine (hw_{field} = {have!r}, {hw.name!r} "
                             f"has {want:g}); cost it on {hw.name!r}")
    if not np.array_equal(alone["op"].values, trace.ops["op"].values):
        raise ReconcileError(f"reconcile: alone= holds {alone.sizes['op']} ops, not the trace's "
                             f"{trace.ops.sizes['op']} (or not the same ones): cost this trace")
    styles = [str(x) for x in alone["dataflow"].values]
    missing = sorted(set(names[ids]) - set(styles))
    if missing:
        raise ReconcileError(f"reconcile: alone= has dataflows {styles}; the run also uses {missing}: cost those too")
    which = xr.DataArray([styles.index(n) for n in names[ids]], dims="op")
    return alone.sel(op=ids).isel(dataflow=which)


def _launch_cycles_alone(trace: Any, hw: Hardware, ops: xr.Dataset) -> float:
    """Σ over the run's ops of the fixed cost each pays alone (every op its own kernel), all executions: the
    model's :func:`~dfit_nb.sim.machine.fixed_cycles` of the unfused op table."""
    import jax
    import jax.numpy as jnp

    from ._cost import for_jit
    from ._prepare import prepare
    from .machine import fixed_cycles

    prep = prepare(trace, "none")
    with jax.enable_x64(True):
        fixed = np.asarray(fixed_cycles({k: jnp.asarray(v) for k, v in prep.arrays.items()}, for_jit(hw)))
    # the run's ops are the trace's replayed ops whatever the fusion: the same rows
    return float((fixed * prep.arrays["count"])[np.isin(prep.op, ops["op"].values)].sum())


def reconcile(trace: Any, hw: Hardware, run: Any, *, alone: xr.Dataset | None = None) -> xr.Dataset:
    """Σ of per-op costs alone vs the replayed ``run``, by energy level, with the reason for each difference.

    Parameters
    ----------
    trace : Trace
        The trace ``run`` replays.
    hw : Hardware
        The machine ``run`` replayed (its ``hw_*`` attrs are checked against it).
    run : Run
        From :func:`dfit_nb.replay`; its per-op dataflows are the ones costed alone.
    alone : xarray.Dataset, optional
        ``cost(trace, hw, [...], fusion="none")`` already computed over a ``dataflow`` dim that holds every
        dataflow the run uses (the CLI's cost table): each op is read from it under its own dataflow instead of
        costed again. It must be ``trace``'s ops alone on ``hw`` in finite memory; anything else raises
        :class:`ReconcileError` (a ``ValueError``), as do a run of another program than ``trace`` or a run or
        trace of another type.

    Returns
    -------
    xarray.Dataset
        Over ``level`` (:data:`LEVELS`): ``alone_j``, ``replayed_j``,
        ``difference_j`` (replayed minus alone) and ``reason``; scalars
        ``alone_energy_j`` and ``replayed_energy_j`` (equal to
        ``run.summary["energy_j"]``), ``alone_cycles`` (Σ cycles x count),
        ``replayed_op_cycles`` (Σ per-op durations), ``latency_cycles``,
        ``context_cycles`` and ``overlap_cycles``.

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import presets, reconcile
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> hw = presets.get("npu_like")
    >>> r = reconcile(t, hw, dfit_nb.replay(t, hw, "ws"))
    >>> bool(abs(float(r["alone_energy_j"] + r["difference_j"].sum() - r["replayed_energy_j"])) < 1e-18)
    True
    """
    from ._cost import cost

    check_hardware(hw, "reconcile()")
    if not isinstance(trace, Trace):
        raise ReconcileError(f"reconcile: trace must be a dfit_nb Trace (from dfit_nb.capture or load_trace), got "
                             f"{type(trace).__name__}")
    if not isinstance(run, Run):
        raise ReconcileError(f"reconcile: run must be a dfit_nb Run (from dfit_nb.replay of the trace), got "
                             f"{type(run).__name__}")
    if not run.comparable(trace):  # compare()'s test of one program: the run's ops would be read as the trace's
        raise ReconcileError(f"reconcile: the run replays another program ({run.attrs.get('function')!r} "
                             f"{run.attrs.get('arg_shapes')!r}) than the trace ({trace.attrs.get('function')!r} "
                             f"{trace.attrs.get('arg_shapes')!r}); pass the Trace the run was replayed from")
    differs = run.differs_from(trace)  # two lambdas of the same argument shapes pass comparable()
    if differs:
        raise ReconcileError(f"reconcile: the run replays another program than the trace ({differs}); pass the "
                             "Trace the run was replayed from")
    wrong = _other_machine(run.attrs, hw, require=False)
    if wrong:
        field, have, want = wrong
        raise ReconcileError(f"reconcile: the run was replayed with {field} = {float(have):g}, not {hw.name!r}'s "
                             f"{want:g}; pass the machine the run replayed")
    ops = run.ops
    ids = ops["op"].values
    names = np.full(trace.ops.sizes["op"], "ws", dtype=object)
    per_op = ops["dataflow"].values.astype(object)
    names[ids] = np.where(per_op == "", "ws", per_op)
    if alone is None:
        alone = cost(trace, hw, names, fusion="none").sel(op=ids)  # each op alone, its own dataflow
    else:
        alone = _own_dataflows(alone, trace, hw, names, ids)
    count = alone["count"].values
    lv_alone = {
        "compute": (alone["energy_mac_pj"] + alone["energy_rf_pj"]).values,
        "sram": alone["energy_sram_pj"].values, "noc": alone["energy_noc_pj"].values,
        "dram": alone["energy_dram_pj"].values, "retile": np.zeros(len(ids)),
    }
    a = np.array([float((lv_alone[k] * count).sum()) * 1e-12 for k in LEVELS])
    r = np.array([float(ops[f"energy_{k}_pj"].sum()) * 1e-12 for k in LEVELS])
    alone_cycles = float((alone["cycles"].values * count).sum())
    launches_alone = float(count.sum())
    launches = float((count * (ops["launch_cycles"].values > 0)).sum()) if "launch_cycles" in ops else launches_alone
    launch_saved = _launch_cycles_alone(trace, hw, ops) - float(ops["launch_cycles"].sum()) \
        if "launch_cycles" in ops else 0.0
    hidden = float(ops["hidden_cycles"].sum()) if "hidden_cycles" in ops else 0.0
    durations = float((ops["end"] - ops["start"]).sum())
    latency = float(run.summary["latency_cycles"])
    d = ("level",)
    return xr.Dataset(
        {
            "alone_j": (d, a, {"units": "J", "description": "Σ over replayed ops of energy alone x count"}),
            "replayed_j": (d, r, {"units": "J", "description": "the replay's energy at the level"}),
            "difference_j": (d, r - a, {"units": "J", "description": "replayed minus alone"}),
            "reason": (d, np.array([REASONS[k] for k in LEVELS], dtype=object),
                       {"units": "", "description": "what the program context changes at the level"}),
            "alone_energy_j": ((), float(a.sum()), {"units": "J"}),
            "replayed_energy_j": ((), float(r.sum()), {"units": "J"}),
            "alone_cycles": ((), alone_cycles, {"units": "cycle", "description": "Σ cycles x count, ops alone"}),
            "replayed_op_cycles": ((), durations, {"units": "cycle", "description": "Σ per-op durations replayed"}),
            "latency_cycles": ((), latency, {"units": "cycle", "description": "replayed latency"}),
            "context_cycles": ((), durations - alone_cycles, {
                "units": "cycle", "description": "what the program context adds to its ops' time (moves, "
                "on-chip operands, DRAM contention, latencies paid once by repeated ops)"}),
            "overlap_cycles": ((), durations - latency, {
                "units": "cycle", "description": "time ops ran at once (layer-pipelined machines)"}),
            "launches_alone": ((), launches_alone, {"units": "1", "description": "kernel launches of the ops "
                                                    "alone (one per op execution)"}),
            "launches": ((), launches, {"units": "1", "description": "kernel launches the replay paid (one per "
                                        "kernel execution)"}),
            "launch_cycles_saved": ((), launch_saved, {"units": "cycle", "description": "fixed cost fusion saved: "
                                                       "the ops' own launches alone minus the replay's"}),
            "hidden_cycles": ((), hidden, {"units": "cycle", "description": "vector-unit compute fusion hid under "
                                           "the PE array (part of context_cycles)"}),
        },
        coords={"level": list(LEVELS)},
        attrs={"hardware": hw.name, "dataflow": str(run.attrs.get("dataflow", "")),
               "fusion": str(run.attrs.get("fusion", ""))},
    )
