"""The selection's dynamic programme: the exact minimum over per-GEMM dataflows with switch costs (a Viterbi
pass), in ``jax.numpy`` so it vmaps over machines, and the per-GEMM prices it reads from the replay. The
selection itself (:func:`dfit_nb.sim.select_dataflows`) and the objectives are :mod:`dfit_nb.sim.policy`'s."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._runtime import compile_options as _compile_options
from ._batch import style_costs
from .hardware import Hardware
from .machine import DATAFLOWS, last_gemm, switch_cost

#: weighted-sum points of the energy-delay product
EDP_WEIGHTS = 33


def viterbi(cost: Any, switch: Any, max_switches: int | None) -> tuple[Any, Any]:
    """Exact minimum of ``sum cost[g, d_g] + sum switch[g] [d_g != d_(g-1)]``: ``(choice (G,), total)``.

    ``cost`` ``(G, D)`` may hold ``inf`` (forbidden choices); ``max_switches``
    ``None`` means unbounded. Pure ``jax.numpy`` (``vmap`` it over machines).

    >>> import numpy as np
    >>> c = np.array([[1.0, 5.0], [5.0, 1.0], [1.0, 5.0]])
    >>> [int(v) for v in viterbi(c, np.array([0.0, 1.0, 1.0]), None)[0]]
    [0, 1, 0]
    >>> [int(v) for v in viterbi(c, np.array([0.0, 9.0, 9.0]), None)[0]]
    [0, 0, 0]
    >>> [int(v) for v in viterbi(c, np.array([0.0, 1.0, 1.0]), 1)[0]]  # one switch cannot pay for itself
    [0, 0, 0]
    """
    cost = jnp.asarray(cost)
    switch = jnp.asarray(switch, cost.dtype)
    d = cost.shape[1]
    k = 1 if max_switches is None else max_switches + 1  # states: switches used so far (one state if unbounded)
    inf = jnp.inf
    v0 = jnp.full((d, k), inf).at[:, 0].set(cost[0])

    def step(v: Any, inputs: Any) -> tuple[Any, Any]:
        c, s = inputs
        # the best predecessor in another dataflow, per (dataflow, switches): two smallest over dataflows
        order = jnp.argsort(v, axis=0)
        best, second = order[0], order[1] if d > 1 else order[0]
        other = jnp.where(jnp.arange(d)[:, None] == best[None, :], second[None, :], best[None, :])  # (d, k)
        from_other = jnp.take_along_axis(v, other, axis=0)
        if max_switches is None:
            switched = from_other + s
        else:  # a switch into k comes from k - 1: so does the predecessor to remember
            switched = jnp.concatenate([jnp.full((d, 1), inf), from_other[:, :-1] + s], axis=1)
            other = jnp.concatenate([other[:, :1], other[:, :-1]], axis=1)
        take = switched < v  # ties stay: fewer switches
        new = jnp.where(take, switched, v) + c[:, None]
        return new, (take, other)

    v, (takes, others) = jax.lax.scan(step, v0, (cost[1:], switch[1:]))
    flat = jnp.argmin(v.reshape(-1))
    last_d, last_k = flat // k, flat % k
    total = v.reshape(-1)[flat]

    def back(state: Any, inputs: Any) -> tuple[Any, Any]:
        cur_d, cur_k = state
        take, other = inputs
        t = take[cur_d, cur_k]
        prev_d = jnp.where(t, other[cur_d, cur_k], cur_d)
        prev_k = jnp.where(t & (max_switches is not None), cur_k - 1, cur_k)
        return (prev_d, prev_k), cur_d

    (first_d, _), rest = jax.lax.scan(back, (last_d, last_k), (takes, others), reverse=True)
    return jnp.concatenate([first_d[None], rest]), total


@functools.partial(_compile_options.jit, static_argnames=("objective", "max_switches"))
def _select(energy: Any, cycles: Any, ops: dict[str, Any], hw: Hardware, allowed: Any, reconfig: Any,
            tied: Any, objective: str, max_switches: int | None) -> dict[str, Any]:
    """The DP for one machine (``vmap`` over machines): ``energy`` and ``cycles`` ``(G, D)`` are what the replay
    charges each GEMM (and the non-GEMM ops after it) under each candidate; switches priced by
    :func:`dfit_nb.sim.machine.switch_cost`, the price the replay charges too. ``tied`` ``(G,)``: the GEMM runs in
    the kernel of the one before it, where no switch can happen (an infinite price for the DP)."""
    sw = switch_cost(ops, hw, reconfig[0], reconfig[1])
    sw_e, sw_c = sw["energy_pj"], sw["cycles"]
    no_switch = jnp.where(jnp.asarray(tied), jnp.inf, 0.0)
    forbid = jnp.where(allowed, 0.0, jnp.inf)
    if objective == "energy":
        choice, _ = viterbi(energy + forbid, sw_e + no_switch, max_switches)
    elif objective == "latency":
        choice, _ = viterbi(cycles + forbid, sw_c + no_switch, max_switches)
    else:
        # E x T is not a sum: solve E + w T exactly for a sweep of w and keep the lowest product
        scale = jnp.sum(jnp.min(energy, axis=1)) / jnp.maximum(jnp.sum(jnp.min(cycles, axis=1)), 1e-30)
        weights = jnp.concatenate([jnp.zeros(1), scale * jnp.logspace(-4, 4, EDP_WEIGHTS - 2), jnp.full(1, 1e30)])

        def solve(w: Any) -> tuple[Any, Any]:
            c, _ = viterbi(jnp.where(w >= 1e30, cycles, energy + w * cycles) + forbid,
                           jnp.where(w >= 1e30, sw_c, sw_e + w * sw_c) + no_switch, max_switches)
            e_tot, t_tot = _totals(c, energy, cycles, sw_e, sw_c)
            return c, e_tot * t_tot

        cands, products = jax.vmap(solve)(weights)
        choice = cands[jnp.argmin(products)]
    e_tot, t_tot = _totals(choice, energy, cycles, sw_e, sw_c)
    return {"choice": choice, "energy": energy, "cycles": cycles, "switch_energy": sw_e, "switch_cycles": sw_c,
            "energy_total": e_tot, "cycles_total": t_tot}


def gemm_costs(prep: Any, hw: Hardware, candidates: Sequence[str], execution: str | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """``(energy_pj, latency_cycles)`` shaped ``(G, D)`` (``(machines, G, D)`` for a batch): what the replay
    charges under each candidate single style, per GEMM, with the non-GEMM ops that follow it (their retile
    depends on its layout; ops before the first GEMM go to the first). Single-style columns sum to the replayed
    energy and latency exactly (latency as each op's increment of the makespan, in program order)."""
    n = len(prep.op)
    codes = np.array([[DATAFLOWS.index(c)] * n for c in candidates], np.float64)
    per_op = style_costs(prep, hw, codes, execution)
    gemm = np.flatnonzero(prep.arrays["gemm"] > 0)
    owner = last_gemm(prep.arrays["gemm"], xp=np)
    group = (owner[None, :] == gemm[:, None]).astype(np.float64)  # (G, ops)
    energy = np.einsum("go,...do->...gd", group, per_op["energy_pj"])
    latency = np.einsum("go,...do->...gd", group, per_op["latency_cycles"])
    return energy, latency


def _totals(choice: Any, energy: Any, cycles: Any, sw_e: Any, sw_c: Any) -> tuple[Any, Any]:
    g = jnp.arange(choice.shape[0])
    switched = jnp.concatenate([jnp.zeros(1, bool), choice[1:] != choice[:-1]])
    e = jnp.sum(energy[g, choice]) + jnp.sum(jnp.where(switched, sw_e, 0.0))
    t = jnp.sum(cycles[g, choice]) + jnp.sum(jnp.where(switched, sw_c, 0.0))
    return e, t
