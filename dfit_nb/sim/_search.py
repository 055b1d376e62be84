"""Selection on the replayed figure, where the dynamic programme's sum is not the objective.

The selection's dynamic programme (:mod:`dfit_nb.sim._viterbi`) minimises a sum of per-GEMM prices. Two
objectives are not such a sum:

* ``"latency"`` on a layer-pipelined machine: ops overlap, so an op's share of the latency depends on its
  neighbours' dataflows, and a DP that saves 17% on paper can save 1% replayed;
* ``"edp"`` (energy x delay) anywhere: a product of two sums.

There :func:`improve` searches the replayed figure itself, starting from the DP's choice: each round replays
(:func:`replayed_objective`) every assignment one move away (one GEMM to another style, the
GEMMs from one onwards to another style, every GEMM to one style), keeps the best if it beats the current
one, and stops when none does, when a round gains less than :data:`MIN_ROUND_GAIN`, after :data:`MAX_ROUNDS`,
or when its time budget is spent (``select_dataflows(search_budget_s=...)``: checked after every call of
:data:`CALL_ROWS` assignments; the first call, the single styles first, always runs).
Pins and ``max_switches`` are honoured by every assignment it tries. A switch must pay for itself: of the
assignments within :data:`MIN_ROUND_GAIN` of a round's best it keeps the one with the fewest switches, and it
does not move to more switches for less than that gain. It is a local search (first improvement by
the best neighbour), not an exact method: it never returns worse than the DP's choice or the single styles, as
replayed, and says how many assignments it replayed.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ._batch import assignments_per_call, style_costs
from .hardware import Hardware
from .machine import DATAFLOWS

#: rounds of the search at most (each replays every neighbour of the current assignment)
MAX_ROUNDS = 8

#: assignments one call of :func:`replayed_objective` replays at most (fewer where the memory holds fewer): the
#: time budget is checked between calls
CALL_ROWS = 32

#: a round whose best move saves less than this share of the replayed objective is kept, and is the last: under
#: a five-hundredth of the model's calibrated error (6.7%), below what its figures can tell apart; on a large
#: layer-pipelined grid each further round costs tens of seconds (Keras ResNet50 on ``cerebras_like``: eight
#: rounds, 226 s, for 0.002%)
MIN_ROUND_GAIN = 1e-4


def searched(objective: str, execution: str) -> bool:
    """Whether :func:`improve` runs for ``objective`` on a machine of ``execution`` style (the DP's sum is not
    the objective there)."""
    return objective == "edp" or (objective == "latency" and execution == "spatial")


#: grids of more tiles than this replay the search's assignments in one vmapped program, whose compile the many
#: slow one-machine runs of a large grid repay; smaller grids run the replay's own compiled program (already
#: compiled by the DP's pricing) once per assignment (the commit that set it records the timings)
VMAPPED_TILES = 64


def replayed_objective(prep: Any, hw: Hardware, codes: np.ndarray, objective: str, reconfig: Any,
                       width: int = 0, deadline: float = np.inf) -> tuple[np.ndarray, int]:
    """The replayed ``objective`` (energy pJ, latency cycles, or their product) of the rows of ``codes``
    ``(D, ops)``, in calls of ``width`` rows (all ``D`` at once where no ``width`` is given), and how many rows
    were replayed: no call starts once ``time.perf_counter()`` is past ``deadline`` (the first always runs), and
    the rows not replayed score ``inf``. On a grid of more than :data:`VMAPPED_TILES` tiles a call is one vmapped
    replay program padded to ``width`` rows (one program compiled for every call); on a smaller one, the replay's
    own compiled program (the one the DP's pricing ran) runs once per row."""
    width = width or len(codes)
    many = int(hw.tile_rows) * int(hw.tile_cols) > VMAPPED_TILES
    scores = np.full(len(codes), np.inf)
    done = 0
    while done < len(codes) and not (done and time.perf_counter() > deadline):
        part = codes[done: done + width]
        if many:
            rows = np.concatenate([part, np.repeat(part[:1], width - len(part), axis=0)])
            costs = {k: v[0, : len(part)] for k, v in style_costs(
                prep, Hardware.stack([hw]), rows, execution=hw.execution, reconfig=reconfig).items()}
        else:
            costs = style_costs(prep, hw, part, execution=hw.execution, reconfig=reconfig)
        energy = costs["energy_pj"].sum(axis=-1)
        latency = costs["latency_cycles"].sum(axis=-1)
        scores[done: done + len(part)] = {"energy": energy, "latency": latency, "edp": energy * latency}[objective]
        done += len(part)
    return scores, done


def _switches(choice: np.ndarray) -> int:
    return int(np.count_nonzero(choice[1:] != choice[:-1]))


def neighbours(choice: np.ndarray, allowed: np.ndarray, max_switches: int | None,
               tied: np.ndarray | None = None) -> np.ndarray:
    """Every assignment one move from ``choice`` (``(G,)`` candidate indices) that ``allowed`` ``(G, C)`` and
    ``max_switches`` permit: one kernel's GEMMs changed, a suffix changed to one style, or one style everywhere.
    ``tied`` ``(G,)`` marks a GEMM in the kernel of the one before it: the two never differ.

    >>> allowed = np.ones((3, 2), bool)
    >>> neighbours(np.array([0, 0, 0]), allowed, None).tolist()
    [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1], [0, 1, 1]]
    >>> neighbours(np.array([0, 0, 0]), allowed, None, np.array([False, False, True])).tolist()
    [[1, 0, 0], [0, 1, 1], [1, 1, 1]]
    """
    g_count, c_count = allowed.shape
    tied = np.zeros(g_count, bool) if tied is None else np.asarray(tied, bool)
    group = np.cumsum(~tied) - 1
    out = []
    for g in np.flatnonzero(~tied):
        for c in range(c_count):
            if c != choice[g]:
                one = choice.copy()
                one[group == group[g]] = c
                out.append(one)
    for g in range(g_count):
        for c in range(c_count):
            tail = choice.copy()
            tail[g:] = c
            out.append(tail)
    for c in range(c_count):
        out.append(np.full(g_count, c))
    ok = []
    seen = {tuple(choice)}
    for a in out:
        key = tuple(a)
        if key in seen:
            continue
        seen.add(key)
        if (allowed[np.arange(g_count), a].all() and (max_switches is None or _switches(a) <= max_switches)
                and not np.any(tied[1:] & (a[1:] != a[:-1]))):
            ok.append(a)
    return np.array(ok, dtype=np.int64).reshape(-1, g_count)


def improve(prep: Any, hw: Hardware, gemm: np.ndarray, choice: np.ndarray, cands: list[str], allowed: np.ndarray,
            objective: str, max_switches: int | None, reconfig: Any, tied: np.ndarray | None = None,
            budget_s: float | None = None, progress: bool = False) -> tuple[np.ndarray, dict[str, Any]]:
    """The best assignment a local search of the replayed ``objective`` finds from ``choice`` (module docstring).

    ``budget_s``: no call of the search's replays starts after this many seconds (the first always runs, the
    single styles first; ``None``: no limit). ``progress``: a ``tqdm.auto`` bar over the rounds.

    Returns
    -------
    (choice, info)
        The assignment (candidate indices per GEMM) and ``{"start": replayed objective of the DP's choice,
        "found": of the returned one, "replayed": assignments replayed, "rounds": rounds run, "out_of_time":
        whether the budget ended the search}``.
    """
    codes_of = np.array([DATAFLOWS.index(c) for c in cands], np.float64)

    def codes(choices: np.ndarray) -> np.ndarray:
        rows = np.zeros((len(choices), len(prep.op)))
        rows[:, gemm] = codes_of[choices]
        return rows

    best = np.asarray(choice, np.int64).copy()
    g_count, c_count = allowed.shape
    width = min(g_count * (c_count - 1) + g_count * c_count + c_count, CALL_ROWS)
    if int(hw.tile_rows) * int(hw.tile_cols) > VMAPPED_TILES:
        # as many as fit the memory available at once (a large grid's replays are large): one width every call
        width = assignments_per_call(prep, hw, width)
    deadline = np.inf if budget_s is None else time.perf_counter() + float(budget_s)
    current = float(replayed_objective(prep, hw, codes(best[None]), objective, reconfig, width)[0][0])
    start, replayed, rounds, out_of_time = current, 1, 0, False
    with tqdm(total=MAX_ROUNDS, desc="select_dataflows: search", unit="round", disable=not progress,
              leave=False) as bar:
        while rounds < MAX_ROUNDS and not out_of_time:
            rounds += 1
            bar.update(1)
            near = neighbours(best, allowed, max_switches, tied)
            if not len(near):
                break
            # the single styles first: the first call of the first round always runs, so the search is never worse
            # than they are, as replayed, however short its budget
            single = (near == near[:, :1]).all(axis=1)
            near = np.concatenate([near[single], near[~single]])
            scores, done = replayed_objective(prep, hw, codes(near), objective, reconfig, width, deadline)
            replayed += done
            timed, partial = time.perf_counter() > deadline, done < len(near)  # keep the best of what was replayed
            # a switch must pay for itself: of the assignments within MIN_ROUND_GAIN of the best, the one with the
            # fewest switches (a single style, not a hybrid 1e-7 faster with two switches), and no move to more
            # switches for less than that
            close = np.flatnonzero(scores <= float(np.min(scores)) * (1.0 + MIN_ROUND_GAIN))
            i = int(min(close, key=lambda j: (_switches(near[j]), float(scores[j]))))
            small = float(scores[i]) > current * (1.0 - MIN_ROUND_GAIN)
            improved = bool(scores[i] < current * (1.0 - 1e-12)) and not (
                small and _switches(near[i]) > _switches(best))
            if improved:
                best, current = near[i], float(scores[i])
            more = improved and not small and rounds < MAX_ROUNDS
            out_of_time = timed and (partial or more)  # the budget, not the search, ended it
            if not more:
                break
    return best, {"start": start, "found": current, "replayed": replayed, "rounds": rounds,
                  "out_of_time": out_of_time}
