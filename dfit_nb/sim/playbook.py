"""The policy playbook: a hybrid-dataflow decision laid out as an accelerator review memo.

Symptom (the failing metric and the first layer where styles diverge), mechanism
(the dominant bottleneck class with its evidence), proposed action (the
smallest reversible policy change), expected movement and regression risk;
then layer-wise recommendations, transition rules with their break-even
condition, the gains against the baseline they are measured against, and the
caveats. Markdown, or HTML with inline styles and no script or remote
resource (it renders offline).
"""

from __future__ import annotations

import html
import re
from typing import Any

import numpy as np

from ..errors import DfitError

CAVEATS = (
    "Costs come from dfit_nb's analytical model (SCALE-Sim fold structure per tile, fit-or-refetch memory, "
    "mesh NoC, shared DRAM channel), not from a measurement on the machine.",
    "The selection is exact for the chain of GEMMs in program order; on branching graphs a switch is charged "
    "between ops adjacent in that order.",
    "A switch is priced as a re-layout of the next GEMM's input activation (SRAM read + write, a trip across the "
    "mesh) plus the configured reconfiguration penalty; a real compiler may hide or add cost.",
    "Gains are replayed at the captured shapes only; other batch sizes or sequence lengths can move the "
    "break-even points.",
)


class PlaybookError(DfitError, ValueError):
    """The policy cannot be reported (not evaluated, or an unknown format)."""


def _pct(x: float) -> str:
    return f"{x:+.2%}"


def _saved(gain: float, best: str) -> str:
    """A relative gain (baseline minus policy, over baseline) in words."""
    if abs(gain) < 5e-5:
        return f"the same as {best}"
    return f"{gain:.2%} less than {best}" if gain > 0 else f"{-gain:.2%} more than {best}"


def _blocks(policy: Any) -> list[tuple[str, Any]]:
    """The memo as (kind, content) blocks: ("h1" | "h2" | "p" | "ul" | "table", ...)."""
    b = policy.baselines
    if b is None or policy.runs is None:
        raise PlaybookError("the policy has not been replayed: use select_dataflows(..., evaluate=True) or "
                            "policy.evaluate(trace, hw) before report()")
    ch = policy.choices
    objective = policy.objective
    best = b.attrs["best_single"]
    cands = [str(c) for c in ch["candidate"].values]
    unit = "cycles" if objective == "latency" else "pJ"
    cost = ch["cost"].values
    chosen = np.array([cands.index(d) for d in ch["dataflow"].values])
    base_i = cands.index(best)
    regions = ch["region"].values.astype(str)
    ops = ch["op"].values
    e_gain = float(b["energy_gain"].sel(policy=best))
    t_gain = float(b["latency_gain"].sel(policy=best))
    main_gain, other_gain = (t_gain, e_gain) if objective == "latency" else (e_gain, t_gain)
    other = "energy" if objective == "latency" else "latency"
    base_run, hybrid_run = policy.runs[best], policy.runs["hybrid"]
    attrs = hybrid_run.attrs
    blocks: list[tuple[str, Any]] = [
        ("h1", f"Dataflow policy playbook: {attrs.get('function', '?')} on {attrs.get('hardware', '?')}"),
        ("p", f"Objective: {objective}. Candidates: {', '.join(cands)}. Baseline: the best single style under the "
              f"objective, replayed through the same pipeline (mapping, movement, schedule): {best}. "
              f"Execution: {attrs.get('execution')}. Policy: {policy.name}, {policy.switches} switch(es) over "
              f"{len(ops)} GEMMs."),
    ]
    rows = [("policy", "energy (mJ)", "J / inference", "latency (us)", f"energy vs {best}", f"latency vs {best}")]
    for label in b["policy"].values:
        e, t = float(b["energy_j"].sel(policy=label)), float(b["latency_s"].sel(policy=label))
        e0, t0 = float(b["energy_j"].sel(policy=best)), float(b["latency_s"].sel(policy=best))
        rows.append((str(label), f"{e * 1e3:.4g}", f"{float(b['joules_per_inference'].sel(policy=label)):.4g}",
                     f"{t * 1e6:.4g}", _pct((e - e0) / e0 if e0 else 0.0), _pct((t - t0) / t0 if t0 else 0.0)))
    blocks += [("h2", "Expected gains (replayed)"), ("table", rows)]

    # symptom: the first layer where the styles diverge (its best candidate is not the baseline's)
    per_op_best = np.argmin(cost, axis=1)
    diverge = np.flatnonzero(per_op_best != base_i)
    blocks.append(("h2", "Symptom"))
    if diverge.size:
        i = int(diverge[0])
        saving = cost[i, base_i] - cost[i, per_op_best[i]]
        blocks.append(("p", f"Under one style ({best}) the {objective} is not minimal per layer: the first layer "
                            f"where styles diverge is op #{ops[i]} ({regions[i] or '<root>'}), where "
                            f"{cands[per_op_best[i]]} costs {cost[i, per_op_best[i]]:.4g} {unit} against "
                            f"{cost[i, base_i]:.4g} for {best} ({saving / cost[i, base_i]:.1%} less). "
                            f"{diverge.size} of {len(ops)} GEMMs prefer another style."))
    else:
        blocks.append(("p", f"No symptom: every GEMM's cheapest candidate is {best}; a hybrid cannot beat the "
                            "best single style here, whatever the switch cost."))

    # mechanism: the dominant bottleneck class, with its evidence
    s = base_run.summary
    evidence = ", ".join(f"{m} {float(v):.0%}" for m, v in zip(s["mechanism"].values, s["evidence"].values,
                                                                strict=True))
    mech = [f"Whole program under {best}: {s['bottleneck'].item()}-bound (fraction of op spans each mechanism "
            f"needs: {evidence})."]
    if diverge.size:
        op_row = base_run.ops.sel(op=ops[int(diverge[0])])
        ev = ", ".join(f"{m} {float(v):.0%}" for m, v in zip(op_row["mechanism"].values, op_row["evidence"].values,
                                                            strict=True))
        mech.append(f"At the divergent layer: {op_row['bottleneck'].item()}-bound ({ev}); reuse under {best} vs "
                    f"{cands[per_op_best[int(diverge[0])]]} is what the styles trade (see the reuse-factor map).")
    blocks += [("h2", "Mechanism"), ("ul", mech)]

    # proposed action: the smallest reversible change, the single segment switch with the best net saving
    blocks.append(("h2", "Proposed action"))
    sw_price = ch["switch_energy_if_paid_pj"].values if objective != "latency" else ch["switch_cycles_if_paid"].values
    net = np.zeros(len(ops))
    for i in range(len(ops)):  # one candidate change per GEMM (reports are small: a Python loop is fine here)
        alt = per_op_best[i]
        if alt == base_i:
            net[i] = -np.inf
            continue
        price = (sw_price[i] if i > 0 else 0.0) + (sw_price[i + 1] if i + 1 < len(ops) else 0.0)
        net[i] = cost[i, base_i] - cost[i, alt] - price
    k = int(np.argmax(net)) if len(ops) else 0
    if len(ops) and np.isfinite(net[k]) and net[k] > 0:
        paid = ("the switch in and out" if 0 < k < len(ops) - 1 else
                "the switch out" if k == 0 and len(ops) > 1 else "the switch in" if k > 0 else "no switch")
        blocks.append(("p", f"Pin op #{ops[k]} ({regions[k] or '<root>'}) to {cands[per_op_best[k]]} and keep "
                            f"{best} elsewhere: net {net[k]:.4g} {unit} saved after paying {paid}. "
                            f"Reversible: remove the pin. The full hybrid ({policy.name}): {objective} "
                            f"{_saved(main_gain, best)}, replayed."))
    else:
        blocks.append(("p", f"Keep {best} everywhere: no single-layer switch pays for itself (savings below the "
                            "switch cost) and the replayed hybrid does not beat the single style."
                            if main_gain <= 0 else
                            f"Adopt {policy.name}: {objective} {_saved(main_gain, best)}, replayed."))

    blocks += [("h2", "Expected movement and regression risk"),
               ("ul", [f"{objective}: {_saved(main_gain, best)} (replayed).",
                       f"{other}: {_saved(other_gain, best)} (replayed)"
                       + (" - a regression: weigh it before adopting." if other_gain < 0 else "."),
                       f"Switches: {policy.switches}; each adds a re-layout on the critical path."])]

    # layer-wise recommendations
    rows = [("op", "region", "chosen", *[f"{c} ({unit})" for c in cands], "switch before")]
    for i in range(len(ops)):
        rows.append((f"#{ops[i]}", regions[i] or "<root>", cands[chosen[i]], *[f"{cost[i, j]:.4g}" for j in
                                                                              range(len(cands))],
                     f"{sw_price[i]:.4g}" if bool(ch["switch"].values[i]) else ""))
    blocks += [("h2", "Layer-wise recommendations"), ("table", rows)]

    # transition rules: where switching pays and where it does not, with the break-even condition
    rules = [f"Break-even: a switch to style d before op g pays when the {objective} saved over the ops that keep "
             f"d until the next switch exceeds the switch in plus the switch out (here {np.median(sw_price):.4g} "
             f"{unit} per switch, median)."]
    bounds = np.flatnonzero(np.concatenate([[True], chosen[1:] != chosen[:-1]]))
    for start, stop in zip(bounds, [*bounds[1:], len(ops)], strict=True):
        if cands[chosen[start]] == best:
            continue
        saved = float(cost[start:stop, base_i].sum() - cost[start:stop, chosen[start]].sum())
        price = float(sw_price[start] + (sw_price[stop] if stop < len(ops) else 0.0))
        rules.append(f"Ops #{ops[start]}..#{ops[stop - 1]} ({regions[start] or '<root>'}): {cands[chosen[start]]} "
                     f"saves {saved:.4g} {unit} against {price:.4g} for the switches: pays ({saved / price:.3g}x)."
                     if price > 0 else f"Ops #{ops[start]}..#{ops[stop - 1]}: {cands[chosen[start]]} saves "
                     f"{saved:.4g} {unit} at no switch cost.")
    stayed = [i for i in range(len(ops)) if per_op_best[i] != chosen[i]]
    for i in stayed[:5]:
        saving = cost[i, chosen[i]] - cost[i, per_op_best[i]]
        price = (sw_price[i] if i > 0 else 0.0) + (sw_price[i + 1] if i + 1 < len(ops) else 0.0)
        rules.append(f"Op #{ops[i]} ({regions[i] or '<root>'}) would prefer {cands[per_op_best[i]]} "
                     f"({saving:.4g} {unit} less) but switching to it and back costs {price:.4g} {unit}: "
                     "does not pay.")
    if main_gain <= 0:
        why = ("every GEMM's cheapest style is the same" if not diverge.size else
               "the savings do not cover the switch costs, or mapping and movement in the replay erase them")
        rules.append(f"The hybrid cannot beat the best single style ({best}) here: {why}.")
    blocks += [("h2", "Transition rules"), ("ul", rules), ("h2", "Caveats"), ("ul", list(CAVEATS))]
    return blocks


def report(policy: Any, format: str = "markdown") -> str:
    """Render the playbook of an evaluated policy: ``"markdown"`` or ``"html"`` (self-contained, offline)."""
    if format not in ("markdown", "html"):
        raise PlaybookError(f"unknown report format {format!r}; valid: markdown, html")
    blocks = _blocks(policy)
    return _markdown(blocks) if format == "markdown" else _html(blocks)


def _md(text: Any, cell: bool = False) -> str:
    r"""``text`` safe in Markdown: names (regions, functions, machines) are a user's strings and may hold anything.

    Backslashes are doubled first (so none can undo the escapes below); a line break would end a table row or
    start a new block, so it becomes a space; ``&`` and ``<`` become entities, so no HTML tag or comment can
    open (``>`` alone opens nothing and stays, as in ``bqhd,bkhd->bhqk``); brackets are escaped, so no link or
    remote image can form; in a table cell ``|`` is escaped, so it cannot split the cell.

    >>> print(_md("a|b <!--<script>\n![x](y)", cell=True))
    a\|b &lt;!--&lt;script> !\[x\](y)
    """
    out = str(text).replace("\\", "\\\\")
    out = re.sub(r"\r\n?|\n", " ", out)
    out = out.replace("&", "&amp;").replace("<", "&lt;").replace("[", "\\[").replace("]", "\\]")
    return out.replace("|", "\\|") if cell else out


def _markdown(blocks: list[tuple[str, Any]]) -> str:
    out = []
    for kind, body in blocks:
        if kind == "h1":
            out.append(f"# {_md(body)}")
        elif kind == "h2":
            out.append(f"## {_md(body)}")
        elif kind == "p":
            out.append(_md(body))
        elif kind == "ul":
            out.append("\n".join(f"- {_md(item)}" for item in body))
        else:
            head, *rows = body
            out.append("\n".join(["| " + " | ".join(_md(h, cell=True) for h in head) + " |", "|" + "---|" * len(head)]
                                 + ["| " + " | ".join(_md(c, cell=True) for c in r) + " |" for r in rows]))
    return "\n\n".join(out) + "\n"


def _html(blocks: list[tuple[str, Any]]) -> str:
    style = ("body{font-family:system-ui,sans-serif;max-width:60em;margin:2em auto;line-height:1.45}"
             "table{border-collapse:collapse;font-size:0.9em}td,th{border:1px solid #ccc;padding:0.2em 0.5em;"
             "text-align:right}th{background:#f3f3f3}td:nth-child(2),th:nth-child(2){text-align:left}")
    parts = []
    for kind, body in blocks:
        if kind in ("h1", "h2"):
            parts.append(f"<{kind}>{html.escape(body)}</{kind}>")
        elif kind == "p":
            parts.append(f"<p>{html.escape(body)}</p>")
        elif kind == "ul":
            parts.append("<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in body) + "</ul>")
        else:
            head, *rows = body
            parts.append("<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head)
                         + "</tr></thead><tbody>" + "".join(
                             "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
                         + "</tbody></table>")
    title = html.escape(blocks[0][1]) if blocks else "playbook"
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title><style>{style}</style>"
            f"</head><body>{''.join(parts)}</body></html>\n")
