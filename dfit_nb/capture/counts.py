"""How many times each op runs: trip counts, branch choices and their provenance.

An op's count is the product of the multipliers on the path from the top-level
jaxpr down to it: a scan body runs ``length`` times per scan execution, a while
body ``trips`` times and its predicate ``trips + 1`` times, a cond branch
``fraction[b]`` of the cond's executions; every other container runs its jaxpr
once.

Statically a while loop's trip count is unknown: it is taken from the user's
hint, else assumed to be 1 (XLA's cost analysis makes the same assumption).
Statically a cond's branch is unknown: the branch with the most FLOPs is
assumed to run (the worst case, and XLA's own convention). Runtime modes
replace both with measured values. ``count_source`` says which applied, the
weakest link along the path winning: ``exact`` < ``measured`` < ``hint`` <
``assumed``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import CaptureError
from .walk import OpRecord

SOURCES = ("exact", "measured", "hint", "assumed")


def _children(records: Sequence[OpRecord]) -> dict[int, dict[str, list[int]]]:
    kids: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        kids[r.parent][r.context].append(r.id)
    return kids


def _relative_flops(op: int, records, kids, trips) -> float:
    """FLOPs of one execution of ``op`` including nested ops (worst-case branch)."""
    r = records[op]
    total = float(r.cost.flops)
    if not r.container:
        return total
    per_context = {
        ctx: sum(_relative_flops(c, records, kids, trips) for c in ids)
        for ctx, ids in kids.get(op, {}).items()
    }
    if r.container == "cond":
        return total + max(per_context.values(), default=0.0)
    for ctx, flops in per_context.items():
        total += flops * _static_multiplier(r, ctx, trips)
    return total


def _static_multiplier(r: OpRecord, context: str, trips: Mapping[int, float]) -> float:
    if r.container in ("scan", "shard_map"):
        return float(r.trip_count)
    if r.container == "while":
        t = float(trips.get(r.id, 1.0))
        return t + 1.0 if context == "cond" else t
    return 1.0


def static_branch_fractions(records: Sequence[OpRecord], trips: Mapping[int, float]) -> dict[int, list[float]]:
    """One-hot fractions selecting each cond's most expensive branch."""
    kids = _children(records)
    fracs: dict[int, list[float]] = {}
    for r in records:
        if r.container != "cond":
            continue
        flops = [
            sum(_relative_flops(c, records, kids, trips) for c in kids.get(r.id, {}).get(f"branch{b}", []))
            for b in range(r.n_branches)
        ]
        one_hot = [0.0] * r.n_branches
        if flops:
            one_hot[int(np.argmax(flops))] = 1.0
        fracs[r.id] = one_hot
    return fracs


def assign_counts(
    records: Sequence[OpRecord],
    *,
    trips: Mapping[int, float],
    trip_sources: Mapping[int, str],
    branch_fractions: Mapping[int, Sequence[float]],
    branch_source: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Counts (int64) and count sources for every op, in op order.

    ``trips`` gives while-loop trip counts per execution; ``branch_fractions``
    gives, per cond op, the fraction of its executions that took each branch.
    """
    counts = np.zeros(len(records), dtype=np.float64)
    rank = np.zeros(len(records), dtype=np.int64)
    for r in records:  # pre-order: parents come first
        if r.parent < 0:
            counts[r.id], rank[r.id] = 1.0, 0
            continue
        p = records[r.parent]
        mult, src = 1.0, "exact"
        if p.container in ("scan", "shard_map"):  # a scan's steps, a shard_map's shards
            mult = float(p.trip_count)
        elif p.container == "while":
            mult = float(trips.get(p.id, 1.0))
            mult = mult + 1.0 if r.context == "cond" else mult
            src = trip_sources.get(p.id, "assumed")
        elif p.container == "opaque":  # an unknown higher-order primitive: once per execution, assumed
            src = "assumed"
        elif p.container == "cond":
            fr = branch_fractions.get(p.id, ())
            b = int(r.context[6:])
            mult = float(fr[b]) if b < len(fr) else 0.0
            src = branch_source
        counts[r.id] = counts[p.id] * mult
        rank[r.id] = max(rank[p.id], SOURCES.index(src))
    over = np.flatnonzero(counts >= 2.0**63)  # the int64 cast below would wrap these to negative counts
    if over.size:
        r = records[int(over[0])]
        raise CaptureError(f"op {r.id} ({r.primitive}, region {r.region or '<root>'!r}) runs {counts[r.id]:.6g} "
                           f"times per call (the trip counts of the scans around it multiply), more than dfit_nb's "
                           f"64-bit counts hold (at most 2**63 - 1); make the scans shorter")
    return np.rint(counts).astype(np.int64), np.asarray(SOURCES, dtype=object)[rank]
