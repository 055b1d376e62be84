"""Inferences streamed back to back: the steady state of a replayed program, and what it takes to fill.

A replay schedules one call of the program (one inference, or one batch). A machine serving a stream of them
runs the next before the last is done where it can:

* **layer-pipelined** (``execution="spatial"``): every stage holds its own tiles (a stage is an op, or a fused
  kernel's ops on one region: :func:`dfit_nb.sim.schedule.stage_leads`), so stage ``s`` starts inference
  ``i + 1`` as soon as it is done with inference ``i``. Once the pipeline is full an inference leaves every
  ``period`` cycles, the time of the slowest stage: its ops' ``stage_cycles`` from the schedule, summed (each
  op's body per inference with its weights kept in its tiles' SRAM where they fit, its inputs' retile, its
  fixed cost; see :mod:`dfit_nb.sim.schedule`), or the section's traffic through the one DRAM channel
  (``sum(stage_dram_bytes) / dram_bytes_per_cycle``) when that is longer. A program larger than the grid runs in
  sections (the SambaNova section / Cerebras reload boundary): each section streams all ``N`` inferences, then
  the next is loaded, so ``N`` inferences take ``sum over sections (span + (N - 1) period)`` where ``span`` is
  the section's time in the one-inference replay (from the previous section's end to its own: its fill, its
  weights loaded once), so one inference takes the replay's latency;
* **time-multiplexed** (``execution="time"``): every op owns the whole grid in turn, so inferences run one
  after another: the period is the one inference's latency and ``N`` take ``N`` times it.

Both report the same figures, so presets compare on equal terms: ``throughput_inferences_per_s`` (``N`` over the
time ``N`` take), ``steady_state_utilization`` (an inference's MACs over the peak during one period),
``pipeline_fill_s`` (the first inference's latency, when the pipeline first holds work in every stage) and the
bottleneck stage (the op setting the period, and what limits it).

The period is the bound of a flow shop with one kind of job: stages run at their own pace and buffer between
them, so a stream of ``N`` leaves at most ``(N - 1)`` periods after the first. Two things it leaves out: the
mesh links two stages share (contention between concurrent ops on the NoC is not modelled, as in the
one-inference schedule) and a stage whose inputs for inference ``i + 1`` are not yet made (the slowest stage
upstream sets the pace there too, which the maximum already takes).

Parameters (weights, a normalisation's scale) stay resident; a non-GEMM op's other external inputs count with
its parameters (the model's traffic convention), so a program input read by an elementwise op is taken as
loaded once.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from . import machine
from ._prepare import ReplayError
from .hardware import Hardware

#: inferences the CLI's replay table and the report stream when they show throughput
REPORTED_STREAM = 64

#: what limits the slowest stage: its tiles' work (PE array or vector unit, and their SRAM ports), delivery over the
#: mesh, its inputs' retile, its own DRAM traffic, its fixed cost; or the section's traffic through the DRAM channel
STAGE_CLASSES = ("compute", "noc", "retile", "dram", "fixed", "dram channel")


def float_count(n: int) -> float:
    """A whole count (inferences) as a float: ``inf`` where it exceeds float64, whose ``float()`` raises
    ``OverflowError``; the callers then refuse a time that is not finite, naming the count."""
    try:
        return float(n)
    except OverflowError:
        return math.inf


def section_periods(stage: Any, dram_bytes: Any, section: Any, dram_bytes_per_cycle: Any, sections: int,
                    xp: Any = np) -> tuple[Any, Any]:
    """Per section: its slowest stage's cycles and its stages' DRAM traffic through the one channel, in cycles; the
    streamed period is the sum over sections of the larger. ``stage``, ``dram_bytes``, ``section``: per stage
    (zeros for rows that are none); ``xp``: NumPy on a Run, ``jax.numpy`` inside the replay (which keeps the
    allocation whose period is shorter: :func:`dfit_nb.sim._replay.program`).

    >>> [v.tolist() for v in section_periods(np.array([30.0, 50.0, 20.0]), np.array([0.0, 10.0, 90.0]),
    ...                                      np.array([0, 0, 1]), 1.0, 2)]
    [[50.0, 20.0], [10.0, 90.0]]
    """
    if xp is np:
        slowest = np.zeros(sections)
        np.maximum.at(slowest, section, stage)
        return slowest, np.bincount(section, dram_bytes, sections) / dram_bytes_per_cycle
    slowest = xp.maximum(jax.ops.segment_max(stage, section, num_segments=sections), 0.0)
    return slowest, jax.ops.segment_sum(dram_bytes, section, num_segments=sections) / dram_bytes_per_cycle


def steady_state(records: dict[str, Any], real: Any, macs: float, hw: Hardware, spatial: bool,
                 inferences: int) -> dict[str, Any]:
    """The streamed figures of one replay: period, time for ``inferences``, fill, utilisation, bottleneck.

    Host NumPy over the replay's per-op records (``O(ops)``), like the rest of a Run's assembly.

    Parameters
    ----------
    records
        Per-op schedule records (:func:`dfit_nb.sim.schedule.run`): ``start``, ``end``, ``section``,
        ``stage_cycles``, ``stage_dram_bytes``, ``stage_compute_cycles``, ``stage_noc_cycles``,
        ``retile_cycles``, and optionally ``stage_lead`` (any key per op that is equal for the ops of one stage;
        without it every op is a stage).
    real
        Per op, 1 for the program's ops and 0 for padding.
    macs
        The MACs of one inference (all its ops, all executions).
    hw
        The machine (one, not a batch).
    spatial
        Layer-pipelined (True) or time-multiplexed.
    inferences
        How many inferences stream (at least 1).

    Returns
    -------
    dict
        ``period_cycles``, ``total_cycles`` (the ``inferences``), ``fill_cycles``,
        ``throughput_inferences_per_s``, ``steady_state_utilization``, ``pipeline_fill_s``, ``bottleneck_op``
        (-1: the DRAM channel, or a time-multiplexed machine's whole inference), ``bottleneck_class`` (one of
        :data:`STAGE_CLASSES`, or ``"inference"`` when time-multiplexed) and ``sections``.

    Examples
    --------
    Two stages of 30 and 50 cycles, one section that took 100 cycles for the first inference, 4 inferences:

    >>> rec = {"start": np.array([0.0, 10.0]), "end": np.array([40.0, 100.0]), "section": np.zeros(2),
    ...        "stage_cycles": np.array([30.0, 50.0]), "stage_dram_bytes": np.zeros(2),
    ...        "stage_compute_cycles": np.array([30.0, 50.0]), "stage_noc_cycles": np.zeros(2),
    ...        "retile_cycles": np.zeros(2)}
    >>> from dfit_nb.sim import Hardware
    >>> hw = Hardware(pe_rows=2, pe_cols=5, dram_bytes_per_cycle=1.0, clock_ghz=1.0)  # 10 MACs a cycle
    >>> s = steady_state(rec, np.ones(2), 250.0, hw, True, 4)
    >>> float(s["period_cycles"]), float(s["total_cycles"]), float(s["steady_state_utilization"])
    (50.0, 250.0, 0.5)
    >>> s["bottleneck_op"], s["bottleneck_class"]
    (1, 'compute')
    """
    real = np.asarray(real) > 0
    rec = {k: np.asarray(records[k], np.float64)[real] for k in (
        "start", "end", "section", "stage_cycles", "stage_dram_bytes", "stage_compute_cycles", "stage_noc_cycles",
        "retile_cycles")}
    op_ids = np.flatnonzero(real)
    op_section = rec["section"]
    if "stage_lead" in records:  # a fused kernel's ops share their stage's tiles: its time is theirs summed
        key = np.asarray(records["stage_lead"])[real]
        _, first, group = np.unique(key, return_index=True, return_inverse=True)
        summed = ("stage_cycles", "stage_dram_bytes", "stage_compute_cycles", "stage_noc_cycles", "retile_cycles")
        rec.update({k: np.bincount(group, rec[k], len(first)) for k in summed})
        stage_ids, stage_section = op_ids[first], op_section[first]
    else:
        stage_ids, stage_section = op_ids, op_section
    n = float_count(inferences)
    latency = float(rec["end"].max()) if rec["end"].size else 0.0
    dram_bw, clock = float(hw.dram_bytes_per_cycle), float(hw.clock_ghz)
    sections = 1
    if spatial and rec["end"].size:
        section = stage_section.astype(np.int64)
        sections = int(section.max()) + 1
        stage = rec["stage_cycles"]
        slowest, channel = section_periods(stage, rec["stage_dram_bytes"], section, dram_bw, sections)
        # a section's share of the first inference: from the end of the section before it (its barrier) to its
        # own end, so the spans add up to the one-inference latency
        last = np.zeros(sections)
        np.maximum.at(last, op_section.astype(np.int64), rec["end"])
        last = np.maximum.accumulate(last)
        span = np.diff(last, prepend=0.0)
        period = float(np.maximum(slowest, channel).sum())
        total = float(span.sum()) + (n - 1.0) * period
        if np.any(channel > slowest):
            bottleneck, klass = -1, STAGE_CLASSES[-1]
        else:
            w = int(np.argmax(stage))
            dram = rec["stage_dram_bytes"][w] / dram_bw
            busy = max(rec["stage_compute_cycles"][w], rec["stage_noc_cycles"][w], dram)
            parts = [rec["stage_compute_cycles"][w], rec["stage_noc_cycles"][w], rec["retile_cycles"][w], dram,
                     stage[w] - rec["retile_cycles"][w] - busy]
            bottleneck, klass = int(stage_ids[w]), STAGE_CLASSES[int(np.argmax(parts))]
    else:
        period, total = latency, n * latency
        bottleneck, klass = -1, "inference"
    if not (math.isfinite(n) and math.isfinite(total)):  # else a stream of inf seconds at 0 inferences a second
        raise ReplayError(f"inferences must be a whole number >= 1 whose stream time is finite in float64: {n:.3g} "
                          f"inferences of {period:.6g} cycles overflow; stream fewer")
    return {
        "period_cycles": period, "total_cycles": total, "fill_cycles": latency,
        "throughput_inferences_per_s": n / max(total, 1e-30) * clock * 1e9,
        "steady_state_utilization": float(machine.utilization(float(macs), period, hw, np)),
        "pipeline_fill_s": latency / (clock * 1e9),
        "bottleneck_op": bottleneck, "bottleneck_class": klass, "sections": sections,
    }


def of_ops(ops: Any, hw: Hardware, inferences: int) -> dict[str, Any]:
    """:func:`steady_state` of a Run's ``ops`` Dataset (its per-op records) on ``hw``.

    Raises
    ------
    ReplayError
        The ops lack the per-op stage records (a run saved by a dfit_nb from before streaming): replay it again.
    """
    names = ("start", "end", "section", "stage_cycles", "stage_dram_bytes", "stage_compute_cycles",
             "stage_noc_cycles", "retile_cycles")
    missing = [k for k in names if k not in ops.variables]
    if missing:
        raise ReplayError(f"this run has no {', '.join(missing)} (saved by a dfit_nb from before streaming): "
                         "replay the trace again to stream it")
    records = {k: ops[k].values for k in names}
    if "stage_op" in ops.variables:  # absent from runs saved before stages: there every op is its own
        records["stage_lead"] = ops["stage_op"].values
    spatial = str(ops.attrs.get("execution", "")) == "spatial"
    return steady_state(records, np.ones(ops.sizes["op"]), float(np.nansum(ops["macs"].values)), hw, spatial,
                        inferences)
