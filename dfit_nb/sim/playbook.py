"""The policy playbook: a hybrid-dataflow decision laid out as an accelerator review memo.

The memo follows the review template field by field:

1. **Symptom**: the failing metric, the workload slice, the first failing stage (the first persistent
   divergence of :func:`dfit_nb.sim.compare` between the best single style and the policy, and the first layer
   whose cheapest style differs), and the build and runtime tags (:func:`dfit_nb.sim.memo.tags`);
2. **Mechanism**: the primary mechanism with its evidence, the competing hypotheses ranked by theirs
   (:func:`dfit_nb.sim.memo.hypotheses`) and the missing evidence (:func:`dfit_nb.sim.memo.missing_evidence`);
3. **Proposed action**: the smallest reversible change, the expected movement (replayed, and p50/p95/p99 latency
   under batch variance when :meth:`Policy.with_batch_variance` ran) and the regression risk (correctness,
   quality, thermal, software compatibility);
4. **Signoff**: the required artifacts, the required owners and a suggested decision by the rule of
   :func:`dfit_nb.sim.memo.decide`.

Then layer-wise recommendations, transition rules with their break-even condition and the caveats. Every figure
is read from the policy's replays. Markdown, or HTML with inline styles and no script or remote resource (it
renders offline).
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

import numpy as np

from .._files import HTML_MARK
from .._html import render, trusted
from ..capture.trace import describe_arguments
from ..errors import DfitError
from ._compare import compare
from .memo import OWNERS, SIGNS, calibrated_error, decide, hypotheses, is_policy, missing_evidence

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


def document(policy: Any) -> list[tuple[str, Any]]:
    """The playbook's document model: the memo as ``(kind, content)`` blocks, in order, that :func:`report` renders
    as Markdown or HTML and the offline report renders in its page.

    Kinds: ``"h1"``, ``"h2"``, ``"h3"`` (a heading: its text), ``"p"`` (a paragraph: its text), ``"ul"`` (a list:
    its items' texts) and ``"table"`` (a list of rows of cell texts, the header row first). All content is plain
    text, never markup: each renderer escapes it for its format.

    Raises
    ------
    PlaybookError
        ``policy`` is not a :class:`~dfit_nb.sim.Policy`, or has not been replayed
        (``select_dataflows(..., evaluate=False)``, never evaluated).
    """
    if not is_policy(policy):  # its baselines and replays are read below
        raise PlaybookError(f"the playbook needs a dfit_nb.sim.Policy (from select_dataflows), got "
                            f"{type(policy).__name__}")
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
    # the unit of choice is a GEMM kernel: GEMMs that run in one kernel (rule 10's chains, a compiler fusion holding
    # two) share a dataflow, so every per-layer figure below is per kernel, its GEMMs' costs summed
    starts, kname, kregion = _kernels(ch, ops, regions)
    kcost = np.add.reduceat(cost, starts, axis=0) if len(ops) else cost
    kchosen = chosen[starts]
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

    # 1. symptom: the failing metric, the slice, the first failing stage and layer, the tags
    per_op_best = np.argmin(kcost, axis=1)  # per kernel
    # a layer prefers another style only when that style is strictly cheaper: a tie (argmin takes the first
    # of equals) is no symptom
    cheapest = kcost[np.arange(len(per_op_best)), per_op_best]
    diverge = np.flatnonzero(cheapest < kcost[:, base_i] * (1 - 1e-12))
    units = "GEMMs" if len(starts) == len(ops) else "GEMM kernels"
    ab = compare(base_run, policy.runs["hybrid"])
    metric_unit = {"energy": ("energy_j", "mJ", 1e3), "latency": ("latency_s", "us", 1e6)}
    if objective in metric_unit:
        var, u, k = metric_unit[objective]
        figure = (f"{float(b[var].sel(policy=best)) * k:.4g} {u} under {best} against "
                  f"{float(b[var].sel(policy='hybrid')) * k:.4g} {u} under the policy")
    else:
        figure = (f"{float((b['energy_j'] * b['latency_s']).sel(policy=best)):.4g} J s under {best} against "
                  f"{float((b['energy_j'] * b['latency_s']).sel(policy='hybrid')):.4g} J s under the policy")
    first = ab.attrs["first_divergence"]
    stage = (f"{first or '<root>'} (stage {ab.attrs['first_divergence_index'] + 1} of {ab.sizes['stage']} in program "
             f"order): from there on the policy's replay stays out of step with {best}'s by more than "
             f"{ab.attrs['divergence_threshold']:.0%} of that stage's own time or energy (compare(), first "
             f"persistent divergence)" if ab.attrs["first_divergence_index"] >= 0 else
             f"none: the policy's replay never stays out of step with {best}'s by more than "
             f"{ab.attrs['divergence_threshold']:.0%} of a stage (compare(), first persistent divergence)")
    blocks += [("h2", "1. Symptom"), ("ul", [
        f"Failing metric: {objective} of the best single style, {figure}: the policy is {_saved(main_gain, best)} "
        f"(replayed).",
        f"Workload slice: {attrs.get('function', '?')} "
        f"(arguments: {describe_arguments(attrs.get('arg_shapes', '')) or 'none'}); "
        f"{attrs.get('trace_mode', '?')} capture, {attrs.get('execution')} execution, "
        f"{int(base_run.summary['inferences'])} inference(s) streamed.",
        f"First failing stage: {stage}.",
    ])]
    if diverge.size:
        i = int(diverge[0])
        saving = kcost[i, base_i] - kcost[i, per_op_best[i]]
        blocks.append(("p", f"Under one style ({best}) the {objective} is not minimal per layer: the first layer "
                            f"where styles diverge is {kname[i]} ({kregion[i]}), where "
                            f"{cands[per_op_best[i]]} costs {kcost[i, per_op_best[i]]:.4g} {unit} against "
                            f"{kcost[i, base_i]:.4g} for {best} ({saving / kcost[i, base_i]:.1%} less). "
                            f"{diverge.size} of {len(starts)} {units} prefer another style."))
    else:
        blocks.append(("p", f"No symptom: every GEMM's cheapest candidate is {best}; a hybrid cannot beat the "
                            "best single style here, whatever the switch cost."))
    tg = policy.tags or {}
    blocks += [("h3", "Build and runtime tags"),
               ("table", [("tag", "value")] + [(k, str(v)) for k, v in tg.items()] if tg else
                [("tag", "value"), ("(none)", "the policy carries no tags (selected before tags existed)")])]

    # 2. mechanism: the primary mechanism with its evidence, competing hypotheses ranked, missing evidence
    s = base_run.summary
    evidence = ", ".join(f"{m} {float(v):.0%}" for m, v in zip(s["mechanism"].values, s["evidence"].values,
                                                                strict=True))
    mech = [f"Whole program under {best}: {s['bottleneck'].item()}-bound (fraction of op spans each mechanism "
            f"needs: {evidence})."]
    if diverge.size:
        op_row = base_run.ops.sel(op=ops[starts[int(diverge[0])]])
        ev = ", ".join(f"{m} {float(v):.0%}" for m, v in zip(op_row["mechanism"].values, op_row["evidence"].values,
                                                            strict=True))
        mech.append(f"At the divergent layer: {op_row['bottleneck'].item()}-bound ({ev}); reuse under {best} vs "
                    f"{cands[per_op_best[int(diverge[0])]]} is what the styles trade (see the reuse-factor map).")
    if first and first in base_run.regions["region"].values:
        reg = base_run.regions.sel(region=first)
        ev = ", ".join(f"{m} {float(v):.0%}" for m, v in zip(reg["mechanism"].values, reg["evidence"].values,
                                                            strict=True))
        mech.append(f"At the first failing stage ({first}) under {best}: {reg['bottleneck'].item()}-bound ({ev}).")
    ranked = hypotheses(base_run)
    rows = [("rank", "class", "evidence (share of op spans)", "within it", "ops it dominates", "where most")]
    rows += [(str(i + 1) + (" (primary)" if i == 0 else ""), h["mechanism"],
              f"{h['evidence']:.1%}" if h["attributed"] else "not analysed", h["detail"] or "-", str(h["ops"]),
              h["top_region"] or ("-" if not h["ops"] else "<root>")) for i, h in enumerate(ranked)]
    blocks += [("h2", "2. Mechanism"), ("ul", mech), ("h3", f"Competing hypotheses, ranked (under {best})"),
               ("table", rows), ("h3", "Missing evidence"), ("ul", missing_evidence(policy))]

    # 3. proposed action: the smallest reversible change, the single segment switch with the best net saving
    blocks += [("h2", "3. Proposed action"), ("h3", "Smallest reversible change")]
    sw_price = ch["switch_energy_if_paid_pj"].values if objective != "latency" else ch["switch_cycles_if_paid"].values
    n_k = len(starts)
    kprice = sw_price[starts] if len(ops) else sw_price
    net = np.zeros(n_k)
    for i in range(n_k):  # one candidate change per kernel (reports are small: a Python loop is fine here)
        alt = per_op_best[i]
        if alt == base_i:
            net[i] = -np.inf
            continue
        price = (kprice[i] if i > 0 else 0.0) + (kprice[i + 1] if i + 1 < n_k else 0.0)
        net[i] = kcost[i, base_i] - kcost[i, alt] - price
    k = int(np.argmax(net)) if n_k else 0
    if n_k and np.isfinite(net[k]) and net[k] > 0:
        paid = ("the switch in and out" if 0 < k < n_k - 1 else
                "the switch out" if k == 0 and n_k > 1 else "the switch in" if k > 0 else "no switch")
        blocks.append(("p", f"Pin {kname[k]} ({kregion[k]}) to {cands[per_op_best[k]]} and keep "
                            f"{best} elsewhere: net {net[k]:.4g} {unit} saved after paying {paid}. "
                            f"Reversible: remove the pin. The full hybrid ({policy.name}): {objective} "
                            f"{_saved(main_gain, best)}, replayed."))
    else:
        blocks.append(("p", f"Keep {best} everywhere: no single-layer switch pays for itself (savings below the "
                            "switch cost) and the replayed hybrid does not beat the single style."
                            if main_gain <= 0 else
                            f"Adopt {policy.name}: {objective} {_saved(main_gain, best)}, replayed."))

    blocks += [("h3", "Expected movement"),
               ("ul", [f"{objective}: {_saved(main_gain, best)} (replayed).",
                       f"{other}: {_saved(other_gain, best)} (replayed)"
                       + (" - a regression: weigh it before adopting." if other_gain < 0 else "."),
                       f"Switches: {policy.switches}; each adds a re-layout on the critical path."])]
    regressions = {other: -other_gain}
    tail = policy.tail
    if tail is not None:
        qs = [float(q) for q in tail["quantile"].values]
        head = ("policy", *[f"p{q * 100:g} latency (us)" for q in qs], "mean latency (us)")
        rows = [head]
        for label, name in (("policy", policy.name), ("baseline", tail.attrs["baseline"])):
            lq = tail["latency_q"].sel(policy=label).values
            rows.append((name, *[f"{v * 1e6:.4g}" for v in lq],
                         f"{float(tail['mean_latency_s'].sel(policy=label)) * 1e6:.4g}"))
        sizes = ", ".join(f"{int(sz)} ({float(w):.0%})" for sz, w in zip(tail["size"].values, tail["weight"].values,
                                                                          strict=True))
        blocks += [("p", f"Latency under batch variance ({tail.attrs['axis']} sizes and their share: {sizes}; "
                         f"{tail.attrs['mix']}), replayed at every size for the policy and for "
                         f"{tail.attrs['baseline']}:"),
                   ("table", rows)]
        for q in qs:
            pol = float(tail["latency_q"].sel(policy="policy", quantile=q))
            bas = float(tail["latency_q"].sel(policy="baseline", quantile=q))
            if q >= 0.95 and bas > 0:
                regressions[f"p{q * 100:g} latency"] = (pol - bas) / bas
    else:
        blocks.append(("p", "p95/p99 latency under batch variance: not computed (see missing evidence)."))
    hyb, base_e = policy.runs["hybrid"], policy.runs[best]
    power = [float(r.summary["energy_j"]) / max(float(r.summary["latency_s"]), 1e-30) for r in (base_e, hyb)]
    blocks += [("h3", "Regression risk"), ("ul", [
        "Correctness: a dataflow changes which operand stays in the array and the order partial sums accumulate, "
        "not the arithmetic; float results can differ in the last bits where accumulation order changes.",
        "Quality: no number format changes (the policy picks dataflows only), so model quality is unaffected.",
        f"Thermal: average power {power[1]:.4g} W under the policy against {power[0]:.4g} W under {best} "
        f"({(power[1] - power[0]) / power[0] if power[0] else 0.0:+.1%}), from the replayed energy and latency; "
        + (f"throttling adds {float(hyb.summary['thermal_cycles']):.4g} cycles under the policy against "
           f"{float(base_e.summary['thermal_cycles']):.4g} under {best}."
           if any(float(r.summary.get("thermal_cycles", 0.0)) > 0 for r in (hyb, base_e)) else
           "no throttling is attributed to either run (see missing evidence)."),
        f"Software compatibility: the compiler/runtime must support a per-layer dataflow; {policy.switches} "
        f"switch(es), each a re-layout (reconfiguration penalty {policy.reconfig_cycles:g} cycles, "
        f"{policy.reconfig_pj:g} pJ per switch as selected).",
    ])]

    # 4. signoff: artifacts, owners, a decision by the stated rule
    error, source = calibrated_error(policy.calibration)
    worst = max(regressions, key=lambda k: regressions[k])
    decision, why = decide(float(policy.replayed_gain()), error, max(regressions[worst], 0.0))
    blocks += [("h2", "4. Signoff"), ("h3", "Required artifacts"), ("ul", [
        "This memo with its build and runtime tags (hashes of the machine, the jaxpr and the argument shapes).",
        f"The replays behind every figure: policy.runs (event cubes of {', '.join(policy.runs)}; Run.save writes "
        "each as netCDF) and policy.baselines.",
        "The batch-variance table (policy.tail)." if tail is not None else
        "The batch-variance table: still to produce (policy.with_batch_variance).",
        "A measured trace on the target confirming the predicted movement (see missing evidence).",
    ]), ("h3", "Required owners"), ("table", [("owner", "signs off for")] + [(o, SIGNS[o]) for o in OWNERS]),
        ("h3", "Suggested decision"),
        ("p", f"{decision.upper()}: {why}; "
              + (f"the largest regression is {worst} ({regressions[worst]:+.1%} worse)" if regressions[worst] > 0
                 else f"no other figure regresses ({', '.join(f'{k} {-v:+.1%}' for k, v in regressions.items())} "
                      "better)") + ". Rule: "
              f"rollback when the gain is below -e, escalate when the gain is within +/-e, bounded rollout when the "
              f"gain exceeds e but a regression does too, ship otherwise; e = {error:.1%}, the {source}.")]

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
    stayed = [i for i in range(n_k) if per_op_best[i] != kchosen[i]]
    for i in stayed[:5]:
        saving = kcost[i, kchosen[i]] - kcost[i, per_op_best[i]]
        price = (kprice[i] if i > 0 else 0.0) + (kprice[i + 1] if i + 1 < n_k else 0.0)
        rules.append(f"{kname[i][0].upper()}{kname[i][1:]} ({kregion[i]}) would prefer {cands[per_op_best[i]]} "
                     f"({saving:.4g} {unit} less) but switching to it and back costs {price:.4g} {unit}: "
                     "does not pay.")
    for i in np.flatnonzero(np.diff(np.append(starts, len(ops))) > 1)[:5]:
        a, z = starts[i], (starts[i + 1] if i + 1 < n_k else len(ops)) - 1
        rules.append(f"Ops #{ops[a]}..#{ops[z]} run in one kernel: one dataflow for all of them (a switch happens "
                     "only between kernels), priced together above.")
    if main_gain <= 0:
        why = ("every GEMM's cheapest style is the same" if not diverge.size else
               "the savings do not cover the switch costs, or mapping and movement in the replay erase them")
        rules.append(f"The hybrid cannot beat the best single style ({best}) here: {why}.")
    caveats = list(CAVEATS)
    if policy.tail is not None:  # the last caveat is what the batch-variance replays answer in part
        caveats[-1] = (f"Gains are replayed at the captured shapes, and at {len(policy.tail['size'])} "
                       f"{policy.tail.attrs['axis']} sizes for the latency quantiles (policy chosen at the captured "
                       "shape); other sequence lengths can move the break-even points.")
    blocks += [("h2", "Transition rules"), ("ul", rules), ("h2", "Caveats"), ("ul", caveats)]
    return blocks


def _kernels(choices: Any, ops: np.ndarray, regions: np.ndarray) -> tuple[np.ndarray, list[str], list[str]]:
    """The GEMM kernels of a policy's choices: the first row of each run of GEMMs in one kernel, and per kernel
    how the memo names it (``op #17``, or ``ops #56..#67``) and its region (the regions' common prefix, with
    ``"; one kernel"`` for several GEMMs). Choices saved before kernels existed count one kernel per GEMM."""
    kernel = choices["kernel"].values if "kernel" in choices else np.arange(len(ops))
    starts = np.flatnonzero(np.concatenate([[True], kernel[1:] != kernel[:-1]])) if len(ops) else np.zeros(0, int)
    ends = np.append(starts[1:], len(ops))
    label, where = [], []
    for a, z in zip(starts, ends, strict=True):
        label.append(f"op #{ops[a]}" if z - a == 1 else f"ops #{ops[a]}..#{ops[z - 1]}")
        shared = posixpath.commonpath(list(regions[a:z]))  # whole region path components
        where.append((shared or "<root>") + ("; one kernel" if z - a > 1 else ""))
    return starts, label, where


def report(policy: Any, format: str = "markdown") -> str:
    """Render the playbook of an evaluated policy: ``"markdown"`` or ``"html"`` (self-contained, offline)."""
    if format not in ("markdown", "html"):
        raise PlaybookError(f"unknown report format {format!r}; valid: markdown, html")
    blocks = document(policy)
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
        elif kind == "h3":
            out.append(f"### {_md(body)}")
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
    return render("playbook.html.j2", mark=trusted(HTML_MARK), title=blocks[0][1] if blocks else "playbook",
                  blocks=blocks) + "\n"
