"""The tables ``dfit-nb report`` prints: each preset's replay, the reconciliation of costs and replays, the
policies, the files written, the per-op costs. Importable from :mod:`dfit_nb.cli`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .events.schema import KINDS
from .sim import DATAFLOWS, presets, reconcile
from .sim.machine import utilization


def replay_table(results: Sequence[Any], dataflow: str, inferences: int = 1) -> str:
    """The program replayed on each preset: one inference's latency, energy, utilisation and bottleneck, and the
    throughput and steady-state utilisation of ``inferences`` streamed back to back (:meth:`Run.streamed`)."""
    fusion = next((str(r.run.attrs.get("fusion", "")) for r in results), "")
    lines = [f"the whole program replayed on each preset ({dataflow}; its ops grouped into the kernels a compiler "
             f"runs, fusion={fusion!r}; mapped, scheduled, ops overlapping where the machine allows); inf/s and "
             f"steady: {inferences} inferences streamed back to back:",
             f"{'preset':16s} {'execution':9s} {'kernels':>7s} {'latency us':>11s} {'mJ':>9s} {'util':>6s} "
             f"{'inf/s':>10s} {'steady':>6s} {'DRAM MB':>8s} {'events':>8s}  bottleneck"]
    for r in results:
        s = r.run.summary
        stream = r.run.streamed(inferences)
        spill = " (spills: data exceed on-chip SRAM)" if r.spills else ""
        kernels = len(set(r.run.ops["kernel"].values.tolist())) if "kernel" in r.run.ops else r.run.ops.sizes["op"]
        lines.append(f"{r.name:16s} {r.run.attrs['execution']:9s} {kernels:7d} {float(s['latency_s']) * 1e6:11.2f} "
                     f"{float(s['energy_j']) * 1e3:9.4f} {float(s['utilization']):6.1%} "
                     f"{float(stream['throughput_inferences_per_s']):10.0f} "
                     f"{float(stream['steady_state_utilization']):6.1%} {float(s['dram_bytes']) / 1e6:8.3f} "
                     f"{int(s['n_events']):8d}  {s['bottleneck'].item()}{spill}")
    return "\n".join(lines)


def reconcile_table(trace: Any, results: Sequence[Any], alone: dict[str, Any] | None = None) -> str:
    """Per preset: Σ energy of the ops costed alone vs the replay, and the difference named level by level.

    ``alone``: per preset name, ``cost(trace, hw, DATAFLOWS)`` already computed (the cost table's), read
    instead of costing the ops again."""
    lines = ["ops alone vs the replay (one machine model; energy is additive, so the difference is what the program "
             "context changes):",
             # reconcile's levels are the kinds a replay charges energy to
             f"{'preset':16s} {'alone mJ':>10s} {'replay mJ':>10s} " + " ".join(f"{'d ' + k:>10s}" for k in KINDS)
             + f" {'overlap us':>10s}"]
    for r in results:
        rc = reconcile(trace, presets.get(r.name), r.run, alone=(alone or {}).get(r.name))
        clock = float(r.run.attrs["clock_ghz"]) * 1e3
        lines.append(f"{r.name:16s} {float(rc['alone_energy_j']) * 1e3:10.4f} "
                     f"{float(rc['replayed_energy_j']) * 1e3:10.4f} "
                     + " ".join(f"{float(v) * 1e3:+10.4f}" for v in rc["difference_j"].values)
                     + f" {float(rc['overlap_cycles']) / clock:10.2f}")
    lines.append("  d dram: results kept on chip for their consumers (or inside their kernel); d noc: DRAM deliveries "
                 "over the mesh; d compute / d sram: the mapping in context and the kernels' free reshapes; d retile: "
                 "moves between layouts and dataflow switches")
    return "\n".join(lines)


def policy_table(results: Sequence[Any]) -> str:
    """Per preset: the hybrid policy, its switches, and what it saves against each single style (replayed)."""
    objective = next((r.policy.objective for r in results if r.policy is not None), "energy")
    lines = [f"hybrid dataflow policy per preset (objective {objective}; replayed; saving = baseline - hybrid, "
             "relative to the baseline):",
             f"{'preset':16s} {'policy':24s} {'switches':>8s} {'uses':12s} "
             + " ".join(f"{'vs ' + s + ' E':>9s} {'vs ' + s + ' t':>9s}" for s in DATAFLOWS)]
    for r in results:
        if r.policy is None:
            lines.append(f"{r.name:16s} {r.note}")
            continue
        b = r.policy.baselines
        uses = ",".join(sorted(set(r.policy.choices["dataflow"].values.tolist())))
        name = r.policy.name if len(r.policy.name) <= 24 else r.policy.name.split(" ")[0] + " (fallback)"
        gains = " ".join(f"{float(b['energy_gain'].sel(policy=s)):+9.1%} {float(b['latency_gain'].sel(policy=s)):+9.1%}"
                         for s in DATAFLOWS)
        lines.append(f"{r.name:16s} {name:24s} {r.policy.switches:8d} {uses:12s} {gains}")
    return "\n".join(lines)


def files_table(report: Any) -> str:
    """Where the files are."""
    d = report.directory
    lines = [f"report written to {d}/ ({report.charts} charts):",
             f"  {report.html}  ({report.html_bytes / 1e6:.2f} MB; open it in a browser, works offline)"]
    for name in report.runs:
        extra = [p.name for p in (report.playbooks.get(name), report.playbooks_html.get(name)) if p is not None]
        row = f"  {name:16s} {report.runs[name].name}  {report.perfetto[name].name}  {'  '.join(extra)}"
        lines.append(row.rstrip())
    lines.append("  (<preset>.nc: dfit_nb.load_run; <preset>.perfetto.json: Perfetto UI / chrome://tracing; "
                 "playbook_<preset>.md: the policy's playbook)")
    return "\n".join(str(x) for x in lines)


def cost_table(alone: dict[str, Any]) -> str:
    """Σ over ops of (per-op cost x count) for each preset and dataflow, from ``alone``: per preset name,
    ``cost(trace, hw, DATAFLOWS)`` (ops costed one at a time)."""
    lines = ["ops costed alone on each preset (each as a one-op program: operands from DRAM, no overlap):",
             f"{'preset':16s} {'dataflow':8s} {'cycles':>14s} {'ms':>10s} {'mJ':>10s} {'util':>6s}"]
    for name, ds in alone.items():
        hw = presets.get(name)
        for df in DATAFLOWS:
            tot = ds.sel(dataflow=df)
            cycles, macs = float(tot["total_cycles"]), float(tot["total_macs"])
            util = float(utilization(macs, cycles, hw, np))
            lines.append(f"{name:16s} {df:8s} {cycles:14,.0f} {cycles / (hw.clock_ghz * 1e6):10.3f} "
                         f"{float(tot['total_energy_j']) * 1e3:10.4f} {util:6.1%}")
    return "\n".join(lines)
