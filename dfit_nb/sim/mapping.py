"""Mapping ops onto the tile grid: virtual first, physical second (the Dato idea).

Pure ``jax.numpy``, vectorized over ops (and candidates); used by
:func:`dfit_nb.replay` inside one jitted program.

Virtual mapping
---------------
An op is a batch of ``B`` GEMMs ``(M x K) @ (K x N)`` (non-GEMM ops: a stream
of elements on the vector units). Its *layout* splits it over a virtual grid of
``gy x gx`` tiles:

======  =====================  =====================  =================================
layout  grid rows split        grid columns split     what is shared / reduced
======  =====================  =====================  =================================
``mn``  the ``B*M`` rows       ``N`` (output cols)    input rows multicast along a grid
                                                      row; weights shared down a column
``mk``  the ``B*M`` rows       ``K`` (reduction)      partial sums reduced along a grid
                                                      row over the NoC (``(gx-1) B M N``)
======  =====================  =====================  =================================

A virtual tile holds ``rows_t = ceil(B M / gy)`` rows: ``bt = ceil(rows_t / M)``
GEMMs of ``mt = min(rows_t, M)`` rows each (a batched GEMM is split by batch
first), and ``kt x nt`` of the weights. Non-GEMM ops use ``mn`` with ``gx = 1``.

The search tries every layout with split factors ``gy, gx`` from ``2^a`` and
``q 2^a`` (``a = 0 .. 12``, ``q`` the odd part of the machine's tile count,
so that a 4x5 grid can use all 20 tiles: ``5 x 4``, ``10 x 2``, ``20 x 1``),
``gy * gx <= tiles`` (546 candidates per op, evaluated at once; a program compiled for a grid of at most
``T`` tiles drops, before tracing, the candidates that cannot fit ``T`` tiles: 54 on a 20-tile grid), and
keeps the one with the lowest time of the op alone under the one machine model
(the body time of :func:`dfit_nb.sim.machine.op_body` on tiles ``0 .. U-1``:
compute, SRAM ports, NoC, DRAM; exactly what a one-op replay takes), times
``1 + 0.02 log2(tiles used)``: each doubling of the tiles an
op occupies must buy more than 2 % of its time, which maximises utilisation
(an op never spreads where it does not speed up) and keeps tiles free for
concurrent ops. Ties go to ``mn``, then the smaller ``gy``, then ``gx``. A user pins a layout
per region (``replay(..., layouts={"encoder/layer_0/mlp": "mk"})``, or
``"mn:4x8"`` to pin the factors too, from the same candidates).

Physical mapping
----------------
The search offers the virtual grids that fit the tiles the execution style
grants the op (``budget``): the whole grid when time-multiplexed, its own region
of ``alloc`` tiles when layer-pipelined, so a layer-pipelined op is cut for its
region, not for the whole grid. A grid larger than that (factors the user pinned)
is folded onto them: ``U = min(gy gx, alloc)`` physical tiles each run
``fold = ceil(gy gx / U)`` virtual tiles in turn (tile ``j`` runs
``floor(V / U)`` or one more): *merged*. Per virtual tile, operands that do
not fit half their SRAM partitions (the other half prefetches) are re-read from
DRAM by blocks, and partial sums that do not fit spill to DRAM or are blocked
(:mod:`dfit_nb.sim.machine`, "What fits"): *spilled*. Both are recorded per op
(``Run.mapping``).

Cycles, traffic and energy of a mapped op are :func:`dfit_nb.sim.machine.model`
(the one machine model): a tensor produced by an earlier op arrives over the
NoC from the producer's tiles (a *retile*, costed by the scheduler) when it
stayed on chip, and from DRAM otherwise; weights and program inputs come from
DRAM, delivered from the grid's west edge. Edge pieces are counted as full
pieces (the array does the padded work).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import machine
from .hardware import Hardware
from .machine import LAYOUTS as LAYOUTS
from .machine import LEVELS as LEVELS
from .machine import TENSORS as TENSORS

MAX_LOG2 = 12  # factors up to 4096 per grid side
TILE_PENALTY = 0.02
#: factors per side: 2^a, then q 2^a (q: the odd part of the machine's tile count)
FACTORS = 2 * (MAX_LOG2 + 1)
_L, _Y, _X = (a.reshape(-1) for a in np.meshgrid(np.arange(len(LAYOUTS)), np.arange(FACTORS), np.arange(FACTORS),
                                                 indexing="ij"))
# a pair whose powers of two alone pass 4096 tiles never fits a grid; q on both sides (q^2 2^k) never fills one
_KEEP = ((_Y % (MAX_LOG2 + 1)) + (_X % (MAX_LOG2 + 1)) <= MAX_LOG2) & ~((_Y > MAX_LOG2) & (_X > MAX_LOG2))
#: every (layout, gy index, gx index) the search tries: mn before mk, then gy index, then gx index
CANDIDATES = {"layout": _L[_KEEP].astype(np.float64), "iy": _Y[_KEEP], "ix": _X[_KEEP]}


def _smallest_factor(index: np.ndarray) -> np.ndarray:
    """The smallest value factor ``index`` takes on any machine: ``2^a`` exactly, ``q 2^a`` with ``q >= 3``."""
    return np.where(index <= MAX_LOG2, 2.0 ** index, 3.0 * 2.0 ** (index - MAX_LOG2 - 1))


@functools.lru_cache(maxsize=64)
def candidates_within(max_tiles: int) -> dict[str, np.ndarray]:
    """The :data:`CANDIDATES` that can fit a grid of at most ``max_tiles`` tiles, in the same order.

    Every other candidate needs ``gy * gx > max_tiles`` on any machine, so the search scores it ``inf``: dropping
    it before tracing changes no result (ties still go to the earlier candidate) and shrinks the search, the bulk
    of the model's work, from 546 candidates per op to 54 on a 20-tile grid.

    >>> len(candidates_within(20)["layout"]), len(candidates_within(4096)["layout"])
    (54, 446)
    """
    keep = _smallest_factor(CANDIDATES["iy"]) * _smallest_factor(CANDIDATES["ix"]) <= max(int(max_tiles), 1)
    out = {key: value[keep] for key, value in CANDIDATES.items()}
    for value in out.values():
        value.setflags(write=False)
    return out


def odd_part(n: Any, xp: Any = jnp) -> Any:
    """The odd part of ``n`` (``20 -> 5``, ``4096 -> 1``), elementwise on float64 arrays (``xp``: ``jax.numpy``
    inside the search, ``numpy`` on the host)."""
    q = xp.asarray(n, xp.float64)
    # n & -n is the largest power of two dividing n: one elementwise kernel, not one per halving (which would be
    # 20 sequential kernels in every cost and replay program); a value that is not a positive whole number is
    # its own odd part
    wide = xp is np or jax.config.jax_enable_x64  # int64 where JAX has it (dfit_nb's programs run in float64)
    whole = (q >= 1.0) & (q < 2.0 ** (62 if wide else 30)) & (q == xp.floor(q))
    as_int = xp.where(whole, q, 1.0).astype(xp.int64 if wide else xp.int32)
    return xp.where(whole, q / xp.bitwise_and(as_int, -as_int).astype(q.dtype), q)


def factors(hw: Hardware) -> tuple[Any, Any]:
    """``(values, valid)``: the split factors of one grid side for ``hw`` (see the module docstring)."""
    pow2 = 2.0 ** jnp.arange(MAX_LOG2 + 1, dtype=jnp.float64)
    q = odd_part(machine.tiles(hw))
    values = jnp.concatenate([pow2, q * pow2])
    valid = jnp.concatenate([jnp.ones(MAX_LOG2 + 1, bool), jnp.full(MAX_LOG2 + 1, q > 1)])
    return values, valid


def factor_ok(f: float, tiles: int) -> bool:
    """Whether ``f`` is a split factor the search offers on a grid of ``tiles`` tiles (host check for pins)."""
    pow2 = [2.0 ** a for a in range(MAX_LOG2 + 1)]
    q = float(odd_part(float(tiles), np))
    return f in pow2 or (q > 1 and f in [q * p for p in pow2])


def placement(tables: tuple[Any, Any]) -> tuple[Any, Any]:
    """Per tile count ``u``: the largest share of ``u`` tiles (from tile 0 along the tile order) on one tile row,
    and the farthest column they reach (``+1``): what the body time of an op on those tiles needs (one virtual
    tile per tile). ``tables``: the :func:`~dfit_nb.sim.schedule.prefix_counts` of the grid."""
    row_pre, col_pre = (jnp.asarray(t, jnp.float64) for t in tables)
    u = jnp.arange(row_pre.shape[0], dtype=jnp.float64)
    row_share = jnp.max(row_pre, axis=1) / jnp.maximum(u, 1.0)
    far = jnp.max(jnp.where(col_pre > 0, jnp.arange(col_pre.shape[1], dtype=jnp.float64)[None, :] + 1.0, 0.0),
                  axis=1)
    return row_share, far


def estimate(m: dict[str, Any], hw: Hardware, tables: tuple[Any, Any]) -> Any:
    """The search's score of a mapping (lower is better): the op's time alone on tiles ``0 .. U-1`` under the
    one model (:func:`dfit_nb.sim.machine.op_body` of a one-op replay), times a small penalty per doubling of
    its tiles."""
    row_share, far = placement(tables)
    i = jnp.clip(m["tiles"], 0, row_share.shape[0] - 1).astype(jnp.int32)
    d = machine.body_demands(m, 1.0, 0.0, hw)
    link = row_share[i] * jnp.maximum(d["noc_in"], d["noc_out"])  # the busiest row link, as op_body finds it
    t = machine.alone_cycles({**d, "noc_cycles": machine.noc_cycles(link, far[i], hw)}, hw)["cycles"]
    return t * (1.0 + TILE_PENALTY * jnp.log2(m["tiles"]))


def tile_counts(hw: Hardware) -> Any:
    """Every tile count a mapping fills exactly on ``hw``: ``gy * gx`` over the search's split factors that fit
    its grid (``inf`` for the pairs that do not), flat. What a layer-pipelined allocation snaps to
    (:func:`dfit_nb.sim.schedule.allocate`): tiles beyond the largest count within an op's region hold nothing."""
    values, valid = factors(hw)
    grid = values[:, None] * values[None, :]
    return jnp.where(valid[:, None] & valid[None, :] & (grid <= machine.tiles(hw)), grid, jnp.inf).ravel()


#: at most this many distinct tile counts a mapping fills: products of two factors from ``2^a`` and ``q 2^a``
#: within 4,096 tiles are ``2^k``, ``q 2^k`` or ``q^2 2^k``, 13 of each at most
DISTINCT_COUNTS = 40


def distinct_tile_counts(hw: Hardware) -> Any:
    """:func:`tile_counts` without repeats, ascending, padded with ``inf`` to :data:`DISTINCT_COUNTS` (a static
    size, so it stays inside a jitted, vmapped program).

    >>> import jax
    >>> from dfit_nb.sim import Hardware
    >>> with jax.enable_x64(True):
    ...     print([int(c) for c in distinct_tile_counts(Hardware(tile_rows=4, tile_cols=5)) if c < 1e9])
    [1, 2, 4, 5, 8, 10, 16, 20]
    """
    return jnp.unique(tile_counts(hw), size=DISTINCT_COUNTS, fill_value=jnp.inf)


def search(ops: dict[str, Any], hw: Hardware, df: Any, budget: Any, pinned: dict[str, Any],
           tables: tuple[Any, Any], spatial: bool = False) -> dict[str, Any]:
    """The best virtual mapping of every op: ``layout``, ``gy``, ``gx`` arrays.

    ``budget``: tiles an op may spread over. ``pinned``: per-op ``layout``
    (-1 free), ``gy`` and ``gx`` (0 free) from the user's per-region choices.
    ``tables``: the grid's tile-order prefix counts (where an op's tiles lie); their static length (``tiles + 1``
    of the grid the program is compiled for, padded: never fewer than ``hw``'s tiles) bounds the candidates.
    ``spatial``: the op is a stage of a layer-pipelined machine, scored on one more inference streamed through its
    tiles (:func:`dfit_nb.sim.machine.streamed`: weights that fit its tiles stay there), the machine's steady state,
    rather than on its first inference.
    """
    return choose(scores(ops, hw, df, budget, pinned, tables, spatial), budget)


def choose(scored: dict[str, Any], budget: Any) -> dict[str, Any]:
    """The best of :func:`scores`' candidates that fit ``budget`` tiles per op (factors a user pinned are kept
    whatever their tiles: they fold onto the budget)."""
    fits = scored["tiles"][None, :] <= (budget[:, None] if jnp.ndim(budget) else budget)
    score = jnp.where(fits | scored["pinned"], scored["score"], jnp.inf)
    best = jnp.argmin(score, axis=1)  # ties: the first candidate (mn before mk, smaller gy, then smaller gx)
    return {"layout": scored["layout"][best], "gy": scored["gy"][best], "gx": scored["gx"][best]}


def scores(ops: dict[str, Any], hw: Hardware, df: Any, budget: Any, pinned: dict[str, Any],
           tables: tuple[Any, Any], spatial: bool = False) -> dict[str, Any]:
    """Every candidate mapping of every op, scored (:func:`estimate`; ``inf`` where the op cannot take it) on
    ``budget`` tiles: ``score`` ``(ops, candidates)``, and per candidate its ``layout``, ``gy``, ``gx`` and
    ``tiles`` (``gy * gx``); ``pinned`` ``(ops, 1)``: the op's factors are the user's. A candidate's score does
    not depend on the budget when it fits it (its tiles are its own), so scores taken on the whole grid price
    every region size at once (:func:`dfit_nb.sim.schedule.balance`)."""
    values, valid = factors(hw)
    tried = candidates_within(jnp.shape(tables[0])[-2] - 1)
    iy, ix = jnp.asarray(tried["iy"]), jnp.asarray(tried["ix"])
    cand = {"layout": jnp.asarray(tried["layout"])[None, :], "gy": values[iy][None, :],
            "gx": values[ix][None, :]}
    col = {key: jnp.asarray(val)[:, None] for key, val in ops.items()}
    gemm = col["gemm"] > 0
    rows = jnp.maximum(col["batch"], 1.0) * col["m"]
    split_cap = jnp.where(cand["layout"] == machine.MK, col["k"], col["n"])
    pl, py, px = (jnp.asarray(pinned[key])[:, None] for key in ("layout", "gy", "gx"))
    ok = (valid[iy] & valid[ix])[None, :]
    # free choices fit the tiles the op is granted; factors the user pinned are kept, folded onto them
    ok &= (cand["gy"] * cand["gx"] <= (budget[:, None] if jnp.ndim(budget) else budget)) | ((py > 0) & (px > 0))
    ok &= jnp.where(gemm, (cand["gy"] <= jnp.maximum(rows, 1.0)) & (cand["gx"] <= jnp.maximum(split_cap, 1.0)),
                    (cand["layout"] == machine.MN) & (cand["gx"] == 1)
                    & (cand["gy"] <= jnp.maximum(machine.ceil_div(col["elems_out"], machine.field(hw, "vector_lanes")),
                                                 1.0)))
    ok &= ((pl < 0) | (cand["layout"] == pl)) & ((py <= 0) | (cand["gy"] == py)) & ((px <= 0) | (cand["gx"] == px))
    ok = ok.at[:, 0].set(ok[:, 0] | ~ok.any(axis=1))  # 1x1 mn is always possible
    alloc = budget[:, None] if jnp.ndim(budget) else budget
    m = machine.model(col, hw, jnp.asarray(df)[:, None] if jnp.ndim(df) else df, cand["layout"], cand["gy"],
                      cand["gx"], alloc)
    score = jnp.where(ok, estimate(machine.streamed(m, hw) if spatial else m, hw, tables), jnp.inf)
    return {"score": score, "layout": cand["layout"][0], "gy": cand["gy"][0], "gx": cand["gx"][0],
            "tiles": cand["gy"][0] * cand["gx"][0], "pinned": (py > 0) & (px > 0)}
