"""``design(trace, hw, objective, constraints)``: the machine for a workload, found by gradient descent through the
one machine model.

The search
----------
Each designed field lives on a lattice of powers of two between its bounds (:data:`SPACE`): PE rows and columns,
tile rows and columns, SRAM per tile (split in the base machine's proportions, :func:`~dfit_nb.sim.hardware.
sram_split`), vector lanes; bandwidths on a half-octave lattice. The search moves a point ``u`` of log2
coordinates, one per field, several seeded starts at once (``vmap``):

* **Relaxation.** The whole-number fields pass through ceilings and folds in the model, so their own gradient is
  zero almost everywhere. The search never feeds the model a fractional PE count: it prices the valid machines at
  the corners of the lattice simplex around ``u`` (the Freudenthal triangulation: sort the fractional parts, step
  one field up at a time, ``d + 1`` corners for ``d`` whole-number fields) and takes their barycentric blend of the
  log objective. That blend is continuous and piecewise linear in ``u``; its gradient along a field is the
  model's own change between neighbouring valid machines. Bandwidths enter each corner machine at their
  continuous value, so their gradient is the model's (``jax.grad`` through the mapping search and the pricing,
  as :func:`dfit_nb.sim.calibrate` uses it). The model is :func:`dfit_nb.sim._cost.alone` (every kernel alone,
  summed, as :func:`dfit_nb.sim.sweep` prices a program), each of the dataflows, the best kept.
* **Constraints.** Area (:func:`dfit_nb.sim.area`, smooth in ``2**u``) and power (the blended log energy over
  log latency) enter as quadratic penalties on their log excess; ``u`` is projected back into the bounds after
  each Adam step.
* **Rounding and replay.** Every corner priced on the way is a valid machine with a price. The best of them
  (and their lattice neighbours, priced in one batch) that meet the area limit are replayed exactly
  (:func:`dfit_nb.sim.replay_batch`, each dataflow), and the best replayed machine that meets every constraint is
  returned. Every figure the result reports is a replay's.
"""

from __future__ import annotations

import dataclasses
import math
import time
import types
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr
from tqdm.auto import tqdm

from .._html import render
from .._runtime import compile_options as _compile_options
from .._runtime.padding import padded_count, padded_index
from ..capture.trace import Trace
from ..errors import DfitError
from ._area import area as area_of
from ._area import area_mm2, power
from ._batch import replay_batch
from ._cost import COST_OPS, alone, batch_tables, for_jit
from ._prepare import take_rows
from .grid import plan
from .hardware import FIELDS, Hardware, check_hardware, sram_split

OBJECTIVES = ("edp", "energy", "latency", "throughput")
CONSTRAINTS = ("area_mm2", "power_w")

#: field -> (lower bound, upper bound, lattice step in octaves): the design space a field may span
SPACE: dict[str, tuple[float, float, float]] = {
    "pe_rows": (4, 256, 1.0),
    "pe_cols": (4, 256, 1.0),
    "tile_rows": (1, 16, 1.0),
    "tile_cols": (1, 16, 1.0),
    "sram_kb": (16, 65536, 1.0),
    "vector_lanes": (4, 1024, 1.0),
    "dram_bytes_per_cycle": (8, 4096, 0.5),
    "noc_link_bytes_per_cycle": (8, 2048, 0.5),
}
#: the whole-number fields (relaxed through the lattice simplex); the rest are continuous (gradient of the model)
WHOLE = ("pe_rows", "pe_cols", "tile_rows", "tile_cols", "sram_kb", "vector_lanes")
DEFAULT_FIELDS = ("pe_rows", "pe_cols", "tile_rows", "tile_cols", "sram_kb", "dram_bytes_per_cycle")

#: penalty weight on the squared log excess of a constraint (an octave over the limit costs as much as 2^30 of EDP)
PENALTY = 30.0
#: Adam's step in octaves, and its moment decays
LEARNING_RATE = 0.35
BETAS = (0.8, 0.95)
#: share of ``budget_s`` the gradient phase may take (the polish and the replays take the rest)
SEARCH_SHARE = 0.6
#: rounds of the polish around the best priced machines
POLISH_ROUNDS = 1


class DesignError(DfitError, ValueError):
    """Bad input to :func:`design`: an unknown objective, constraint or field, infeasible constraints, a budget
    too small."""


@dataclasses.dataclass(frozen=True, eq=False)
class Space:
    """The fields a search designs: per field its log2 bounds and lattice step, whether it is whole-number.

    Compared and hashed by value: it is static metadata of the compiled step, which a later search of the same
    space (and op table shapes) reuses."""

    fields: tuple[str, ...]
    lo: np.ndarray  # log2 lower bounds
    hi: np.ndarray  # log2 upper bounds
    step: np.ndarray  # lattice step in octaves
    whole: np.ndarray  # bool per field

    def _key(self) -> tuple[Any, ...]:
        return (self.fields, *(tuple(np.asarray(a).tolist()) for a in (self.lo, self.hi, self.step, self.whole)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Space) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def levels(self, i: int) -> np.ndarray:
        """The lattice values of field ``i`` (log2)."""
        n = round((self.hi[i] - self.lo[i]) / self.step[i])
        return self.lo[i] + self.step[i] * np.arange(n + 1)

    def snap(self, u: np.ndarray) -> np.ndarray:
        """``u`` (log2, ``(..., fields)``) rounded to the lattice and clipped into the bounds."""
        k = np.round((u - self.lo) / self.step) * self.step + self.lo
        return np.clip(k, self.lo, self.hi)


def space(hw: Hardware, fields: Sequence[str] | Mapping[str, tuple[float, float]] | None) -> Space:
    """The design space of ``fields`` (names, or name -> (lower, upper) bounds within :data:`SPACE`'s)."""
    if fields is None:
        fields = DEFAULT_FIELDS
    if isinstance(fields, str):
        fields = (fields,)
    bounds = dict(fields) if isinstance(fields, Mapping) else {f: None for f in fields}
    unknown = [f for f in bounds if f not in SPACE]
    if unknown:
        raise DesignError(f"design() cannot design field(s) {unknown}; valid fields: {', '.join(SPACE)}")
    if not bounds:
        raise DesignError(f"design() needs at least one field to design; valid fields: {', '.join(SPACE)}")
    lo, hi, step = [], [], []
    for f, b in bounds.items():
        a, z, s = SPACE[f]
        if b is not None:
            try:
                a2, z2 = (float(x) for x in b)
            except (TypeError, ValueError):
                raise DesignError(f"design() fields[{f!r}] must be (lower, upper) bounds, got {b!r}") from None
            if not (a <= a2 <= z2 <= z):
                raise DesignError(f"design() fields[{f!r}] = {b!r} must satisfy {a:g} <= lower <= upper <= {z:g}")
            a, z = a2, z2
        la, lz = math.log2(a), math.log2(z)
        # bounds on the field's lattice: whole octaves (or half) from the lower bound
        lz = la + math.floor((lz - la) / s + 1e-9) * s
        lo.append(la)
        hi.append(lz)
        step.append(s)
    names = tuple(bounds)
    return Space(names, np.array(lo), np.array(hi), np.array(step), np.array([f in WHOLE for f in names]))


def _values(sp: Space, u: Any, xp: Any = jnp) -> dict[str, Any]:
    """Field values ``2**u`` by name (``u``: ``(..., fields)``)."""
    return {f: 2.0 ** u[..., i] for i, f in enumerate(sp.fields)}


def _with(base: Hardware, values: Mapping[str, Any], shares: np.ndarray) -> Hardware:
    """``base`` (leaves float64, unchecked) with the designed ``values``; ``sram_kb`` split by ``shares``."""
    changes = {k: v for k, v in values.items() if k != "sram_kb"}
    if "sram_kb" in values:
        total = values["sram_kb"] * 1024.0
        changes.update(sram_input_bytes=total * shares[0], sram_weight_bytes=total * shares[1],
                       sram_output_bytes=total * shares[2])
    return dataclasses.replace(base, **changes)


def machine_at(base: Hardware, sp: Space, u: np.ndarray, name: str = "designed") -> Hardware:
    """The valid machine at lattice point ``u`` (log2 per field, rounded to the lattice): whole numbers, SRAM split
    by :func:`~dfit_nb.sim.hardware.sram_split`."""
    k = sp.snap(np.asarray(u, np.float64))
    changes: dict[str, Any] = {}
    for i, f in enumerate(sp.fields):
        v = float(2.0 ** k[i])
        if f == "sram_kb":
            parts = sram_split(base, v)
            changes.update({p: int(parts[p]) for p in parts})
        elif sp.whole[i]:
            changes[f] = round(v)
        else:
            changes[f] = v
    return base.replace(name=name, **changes)


def _simplex(u: Any, sp: Space) -> tuple[Any, Any]:
    """The corners ``(d + 1, fields)`` of the lattice simplex holding ``u`` over its whole-number fields (the
    continuous ones stay at ``u``) and their barycentric weights ``(d + 1,)``, differentiable in ``u``."""
    whole = np.flatnonzero(sp.whole)
    lo, step = jnp.asarray(sp.lo), jnp.asarray(sp.step)
    x = (u - lo) / step  # lattice units
    xw = x[whole]
    floor = jax.lax.stop_gradient(jnp.floor(xw))
    top = jnp.asarray(((sp.hi - sp.lo) / sp.step)[whole])
    floor = jnp.minimum(floor, jnp.maximum(top - 1.0, 0.0))  # at the upper bound, the simplex below it
    frac = jnp.clip(xw - floor, 0.0, 1.0)
    order = jnp.argsort(-jax.lax.stop_gradient(frac))
    d = len(whole)
    ups = jnp.concatenate([jnp.zeros((1, d)), jnp.cumsum(jax.nn.one_hot(order, d), axis=0)])  # (d + 1, d)
    corners_w = jnp.minimum(floor[None, :] + ups, top[None, :])
    fs = frac[order]
    weights = jnp.concatenate([1.0 - fs[:1], fs[:-1] - fs[1:], fs[-1:]]) if d else jnp.ones(1)
    corners = jnp.broadcast_to(x, (d + 1, x.shape[0]))
    corners = corners.at[:, whole].set(corners_w)
    return lo + step * corners, weights


@dataclasses.dataclass(frozen=True)
class _Problem:
    """What pricing a machine needs, fixed for a search (a pytree: the arrays are its leaves, the space and the
    objective static): the op table padded to a power of two (padding rows count 0), the dataflow codes, the
    tile-order tables of every grid the space holds, the base machine and how SRAM splits."""

    ops: dict[str, Any]
    count: Any
    codes: Any
    tables: tuple[Any, Any]
    grid_rows: Any  # log2 tile rows of each table, sorted as batch_tables sorts
    grid_cols: Any
    base: Hardware
    shares: Any
    space: Space
    objective: str
    spatial: bool  # the base machine is layer-pipelined: ops mapped for their streamed stage, as its replay maps them


jax.tree_util.register_dataclass(_Problem,
                                 data_fields=["ops", "count", "codes", "tables", "grid_rows", "grid_cols", "base",
                                              "shares"], meta_fields=["space", "objective", "spatial"])


def _problem(trace: Any, hw: Hardware, sp: Space, dataflows: Sequence[str], objective: str) -> _Problem:
    p = plan(trace, hw, list(dataflows), "finite", {}, per_op=False)
    n_ops = len(p.coord)
    padded = padded_count(n_ops, COST_OPS)
    ops = take_rows(p.arrays, padded_index(n_ops, padded), n_ops)
    count = np.zeros(padded)
    count[:n_ops] = p.count
    rows = sp.levels(sp.fields.index("tile_rows")) if "tile_rows" in sp.fields else \
        np.array([math.log2(float(hw.tile_rows))])
    cols = sp.levels(sp.fields.index("tile_cols")) if "tile_cols" in sp.fields else \
        np.array([math.log2(float(hw.tile_cols))])
    rr, cc = np.meshgrid(rows, cols, indexing="ij")
    tables, _ = batch_tables(np.round(2.0 ** rr.ravel()), np.round(2.0 ** cc.ravel()))
    have = np.array([float(getattr(hw, f)) for f in ("sram_input_bytes", "sram_weight_bytes", "sram_output_bytes")])
    return _Problem({k: np.asarray(v, np.float64) for k, v in ops.items()}, count, np.asarray(p.codes, np.float64),
                    tuple(np.asarray(t, np.float64) for t in tables), rows, cols, for_jit(hw), have / have.sum(), sp,
                    objective, hw.execution == "spatial")


def _log_figures(pb: _Problem, u: Any) -> tuple[Any, Any]:
    """Log seconds and log joules of one call on the machine at ``u`` (``(fields,)``, its whole-number fields on
    the lattice), the best of the dataflows by the objective: :func:`~dfit_nb.sim._cost.alone` summed over ops."""
    sp = pb.space
    hw = _with(pb.base, _values(sp, u), pb.shares)
    r = jnp.log2(hw.tile_rows) if "tile_rows" in sp.fields else jnp.asarray(pb.grid_rows[0])
    c = jnp.log2(hw.tile_cols) if "tile_cols" in sp.fields else jnp.asarray(pb.grid_cols[0])
    i = jnp.round((r - pb.grid_rows[0]) * pb.grid_cols.shape[0] + (c - pb.grid_cols[0])).astype(jnp.int32)
    t = (jnp.asarray(pb.tables[0])[i], jnp.asarray(pb.tables[1])[i])
    ops = {k: jnp.asarray(v) for k, v in pb.ops.items()}
    count = jnp.asarray(pb.count)

    def one(d: Any) -> tuple[Any, Any]:
        out = alone(ops, hw, d, t, False, pb.spatial)
        cycles = jnp.sum(out["cycles"] * count)
        energy = jnp.sum(out["energy_pj"] * count)
        return jnp.log(cycles / (hw.clock_ghz * 1e9)), jnp.log(energy * 1e-12)

    lt, le = jax.vmap(one)(jnp.asarray(pb.codes))
    score = _score(pb.objective, lt, le)
    best = jnp.argmin(jax.lax.stop_gradient(score))
    return lt[best], le[best]


def _score(objective: str, log_t: Any, log_e: Any) -> Any:
    """The log objective (lower is better) from log seconds and log joules."""
    return {"edp": log_t + log_e, "energy": log_e, "latency": log_t, "throughput": log_t}[objective]


def _priced(pb: _Problem, corner: Any) -> tuple[Any, Any]:
    """:func:`_log_figures` of one corner, differentiable in the continuous fields by forward mode.

    The model is run forward once and linearised in the continuous fields alone (``jax.linearize``: one tangent
    per continuous field, each about the cost of a forward pass); the figures returned are that first-order
    expansion around the corner (exactly its value there), so reverse mode over the loss never goes back through
    the model, whose reverse pass over the mapping search costs several forward passes and their memory. The
    whole-number fields of a corner are lattice points: their gradient is the blend's, not the model's.
    """
    cont = np.flatnonzero(~pb.space.whole)
    fixed = jax.lax.stop_gradient(corner)
    if not len(cont):
        return jax.lax.stop_gradient(_log_figures(pb, fixed))
    (lt, le), tangent = jax.linearize(lambda c: _log_figures(pb, c), fixed)
    basis = jnp.eye(corner.shape[0])[cont]
    dlt, dle = jax.vmap(tangent)(basis)  # (continuous fields,) each
    moved = corner[cont] - fixed[cont]  # zero in value; carries the gradient to u
    return (jax.lax.stop_gradient(lt) + jnp.dot(jax.lax.stop_gradient(dlt), moved),
            jax.lax.stop_gradient(le) + jnp.dot(jax.lax.stop_gradient(dle), moved))


def _loss_fn(pb: _Problem, limits: dict[str, float]) -> Any:
    """``u -> (loss, aux)`` for one start: the blended log objective over the simplex corners plus penalties."""
    sp = pb.space

    def loss(u: Any) -> tuple[Any, dict[str, Any]]:
        corners, w = _simplex(u, sp)
        lt, le = jax.vmap(lambda c: _priced(pb, c))(corners)
        score = _score(pb.objective, lt, le)
        value = jnp.sum(w * score)
        relaxed = _with(pb.base, _values(sp, u), pb.shares)
        area = area_mm2(relaxed)
        total = value
        if "area_mm2" in limits:
            total = total + PENALTY * jax.nn.relu(jnp.log(area / limits["area_mm2"])) ** 2
        if "power_w" in limits:
            log_p = jnp.sum(w * (le - lt))
            total = total + PENALTY * jax.nn.relu(log_p - jnp.log(limits["power_w"])) ** 2
        return total, {"corners": corners, "score": score, "log_t": lt, "log_e": le, "value": value, "area": area,
                       "blend_t": jnp.sum(w * lt), "blend_e": jnp.sum(w * le)}

    return loss


@_compile_options.jit
def _step(pb: _Problem, limits: dict[str, Any], u: Any, m: Any, v: Any, t: Any) -> tuple[Any, Any, Any, Any, Any]:
    """One Adam step of every start at once (``vmap``), projected into the bounds: compiled once per space,
    objective, constraint kinds and op-table shape, whatever the program and the base machine."""
    grad = jax.value_and_grad(_loss_fn(pb, limits), has_aux=True)
    lo, hi = jnp.asarray(pb.space.lo), jnp.asarray(pb.space.hi)
    b1, b2 = BETAS
    (loss, aux), g = jax.vmap(grad)(u)
    g = jnp.where(jnp.isfinite(g), g, 0.0)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    mh, vh = m / (1 - b1 ** t), v / (1 - b2 ** t)
    u_new = jnp.clip(u - LEARNING_RATE * mh / (jnp.sqrt(vh) + 1e-8), lo, hi)
    return u_new, m, v, loss, aux


@dataclasses.dataclass(frozen=True, eq=False)
class Design:
    """What :func:`design` found: the best machine, its replayed figures, what it evaluated, its path.

    Attributes
    ----------
    hardware : Hardware
        The best replayed machine that meets every constraint.
    figures : dict
        Its replayed ``latency_s``, ``energy_j``, ``edp_js``, ``throughput_per_s``, ``power_w``, ``area_mm2`` and
        the ``dataflow`` that gave them.
    evaluated : xarray.Dataset
        Every replayed candidate (dim ``candidate``): the designed fields, the replayed figures, ``area_mm2``,
        ``feasible`` and the loop's own estimate ``model_objective``.
    front : xarray.Dataset
        The candidates no other beats on latency, energy and area at once (dim ``front``).
    path : xarray.Dataset
        The search (dims ``step``, ``start``): each field's relaxed value, the blended objective, the relaxed
        area, and the loop model's blended ``latency_s`` and ``energy_j`` (every kernel alone, summed: the
        replay's figures differ by what the program overlaps).
    times : dict
        Seconds per phase: ``prepare``, ``search`` (compile included), ``polish``, ``replay``, ``total``.
    """

    hardware: Hardware
    figures: dict[str, Any]
    evaluated: xr.Dataset
    front: xr.Dataset
    path: xr.Dataset
    times: dict[str, float]
    objective: str
    constraints: dict[str, float]

    def __repr__(self) -> str:
        f = self.figures
        return (f"Design({self.objective}: {self.hardware.name!r}, {f['latency_s'] * 1e6:.4g} us, "
                f"{f['energy_j'] * 1e3:.4g} mJ, {f['area_mm2']:.4g} mm^2, {f['power_w']:.4g} W; "
                f"{self.evaluated.sizes['candidate']} replayed in {self.times['total']:.3g} s)")

    def _repr_html_(self) -> str:
        f, hw = self.figures, self.hardware
        rows = [("objective", self.objective),
                ("constraints", ", ".join(f"{k} <= {v:g}" for k, v in self.constraints.items()) or "none"),
                ("PE array", f"{hw.pe_rows}x{hw.pe_cols} per tile, {hw.tile_rows}x{hw.tile_cols} tiles"),
                ("SRAM per tile", f"{(hw.sram_input_bytes + hw.sram_weight_bytes + hw.sram_output_bytes) / 1024:g} "
                                  "KiB"),
                ("DRAM", f"{float(hw.dram_bytes_per_cycle):g} B/cycle"),
                ("latency", f"{f['latency_s'] * 1e6:.4g} us ({f['dataflow']})"),
                ("energy", f"{f['energy_j'] * 1e3:.4g} mJ"),
                ("EDP", f"{f['edp_js']:.4g} J s"),
                ("area", f"{f['area_mm2']:.4g} mm^2"),
                ("power", f"{f['power_w']:.4g} W"),
                ("replayed", f"{self.evaluated.sizes['candidate']} candidates, {self.front.sizes['front']} on the "
                             "front"),
                ("time", ", ".join(f"{k} {v:.3g} s" for k, v in self.times.items()))]
        return render("key_values.html.j2", title=repr(self), rows=rows)


def replay_machines(trace: Any, machines: Sequence[Hardware], objective: str, constraints: Mapping[str, float],
                    dataflow: Sequence[str] = ("ws", "os", "is")) -> xr.Dataset:
    """Replay ``machines`` exactly (:func:`dfit_nb.sim.replay_batch`, each dataflow; per machine the best by the
    objective among the dataflows that meet the power limit, else the best): dim ``candidate``."""
    batch = Hardware.stack(list(machines), name="candidates")
    runs = [replay_batch(trace, batch, d) for d in dataflow]
    lat = np.stack([r["latency_s"].values for r in runs])  # (dataflows, machines)
    en = np.stack([r["energy_j"].values for r in runs])
    pw = power(energy_j=en, latency_s=lat)
    score = np.asarray(_score(objective, np.log(lat), np.log(en)))
    ok = pw <= constraints.get("power_w", np.inf)
    pick = np.argmin(np.where(ok, score, score + 1e9), axis=0)
    cols = np.arange(len(machines))
    area = np.asarray(area_of(batch), np.float64).reshape(-1)
    lat_b, en_b = lat[pick, cols], en[pick, cols]
    feasible = (area <= constraints.get("area_mm2", np.inf)) & ok[pick, cols]
    return xr.Dataset(
        {"latency_s": ("candidate", lat_b), "energy_j": ("candidate", en_b), "edp_js": ("candidate", lat_b * en_b),
         "power_w": ("candidate", pw[pick, cols]), "area_mm2": ("candidate", area),
         "objective": ("candidate", score[pick, cols]), "feasible": ("candidate", feasible),
         "dataflow": ("candidate", np.asarray(dataflow, dtype=object)[pick])},
        coords={"candidate": cols})


def _front3(ds: xr.Dataset) -> xr.Dataset:
    """The candidates no other beats on latency, energy and area at once (lower is better)."""
    x = np.stack([ds[v].values for v in ("latency_s", "energy_j", "area_mm2")], 1)
    keep = [i for i in range(len(x))
            if not np.any(np.all(x <= x[i], 1) & np.any(x < x[i], 1))]
    return ds.isel(candidate=keep).rename({"candidate": "front"})


def _check_inputs(objective: Any, constraints: Any, budget_s: Any) -> dict[str, float]:
    if not isinstance(objective, str) or objective not in OBJECTIVES:
        raise DesignError(f"design() objective {objective!r} is not one of {', '.join(OBJECTIVES)}")
    constraints = {} if constraints is None else constraints
    if not isinstance(constraints, Mapping):
        raise DesignError(f"design() constraints must be a dict of {', '.join(CONSTRAINTS)} -> limit, got "
                          f"{type(constraints).__name__}")
    unknown = [k for k in constraints if k not in CONSTRAINTS]
    if unknown:
        raise DesignError(f"design() constraint(s) {unknown} unknown; valid constraints: {', '.join(CONSTRAINTS)}")
    limits = {}
    for k, v in constraints.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise DesignError(f"design() constraints[{k!r}] must be a finite number > 0, got {v!r}")
        limits[k] = float(v)
    if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) or not budget_s > 0 \
            or not math.isfinite(budget_s):
        raise DesignError(f"design() budget_s must be a finite number of seconds > 0, got {budget_s!r}")
    return limits


def design(trace: Any, hw: Hardware, objective: str = "edp", constraints: Mapping[str, float] | None = None,
           fields: Sequence[str] | Mapping[str, tuple[float, float]] | None = None, budget_s: float = 60.0, *,
           starts: int = 8, replays: int = 32, dataflow: Sequence[str] = ("ws", "os", "is"), seed: int = 0,
           max_steps: int = 60, progress: bool = True) -> Design:
    """The machine that minimises ``objective`` for ``trace`` under ``constraints``, by gradient descent through
    the one machine model (see the module docstring for the relaxation), its best candidates replayed exactly.

    Parameters
    ----------
    trace : Trace
        A captured program (:func:`dfit_nb.capture`).
    hw : Hardware
        The base machine: the fields not designed keep its values; ``sram_kb`` splits in its proportions.
    objective : {"edp", "energy", "latency", "throughput"}
        What to minimise per call: energy x latency, energy, latency; ``"throughput"`` maximises calls per second
        of one call after another (for one program it ranks machines as latency does).
    constraints : dict, optional
        ``area_mm2`` (:func:`dfit_nb.sim.area`) and ``power_w`` (replayed energy over latency) limits.
    fields : sequence of str or dict, optional
        Fields to design (default :data:`DEFAULT_FIELDS`), or name -> (lower, upper) bounds within :data:`SPACE`.
    budget_s : float
        Seconds for the whole search: the gradient phase stops at :data:`SEARCH_SHARE` of it (or ``max_steps``),
        leaving the rest to the polish and the replays (which are not cut short). Refused when the first step
        (its compile included) takes longer.
    starts : int
        Seeded starts searched at once (``vmap``); one of them is the base machine.
    replays : int
        How many candidates are replayed exactly.
    dataflow : sequence of str
        The dataflows each machine is priced and replayed with (the best kept).
    seed : int
        Seed of the random starts.
    max_steps : int
        The most Adam steps.
    progress : bool
        A ``tqdm.auto`` bar over the steps (the first, its compile included, takes longest).

    Returns
    -------
    Design

    Examples
    --------
    >>> import jax, jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import design, presets
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jax.ShapeDtypeStruct((256, 512), jnp.bfloat16),
    ...                     jax.ShapeDtypeStruct((512, 256), jnp.bfloat16))
    >>> d = design(t, presets.get("npu_like"), constraints={"area_mm2": 20.0}, starts=2, replays=4, max_steps=3,
    ...            fields=("pe_rows", "pe_cols", "sram_kb"))
    >>> d.figures["area_mm2"] <= 20.0
    True
    """
    t0 = time.perf_counter()
    if not isinstance(trace, Trace):
        raise DesignError(f"design() needs a dfit_nb Trace (from dfit_nb.capture or load_trace), got "
                          f"{type(trace).__name__}")
    limits = _check_inputs(objective, constraints, budget_s)
    check_hardware(hw, "design()", error=DesignError)
    sp = space(hw, fields)
    for name, value in (("starts", starts), ("replays", replays), ("max_steps", max_steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise DesignError(f"design() {name} must be a whole number >= 1, got {value!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise DesignError(f"design() seed must be a whole number >= 0 (the seed of the random starts), got {seed!r}")
    smallest = machine_at(hw, sp, sp.lo)
    floor_area = area_of(smallest)
    if "area_mm2" in limits and floor_area > limits["area_mm2"]:
        at = ", ".join(f"{f}={2 ** v:g}" for f, v in zip(sp.fields, sp.lo, strict=True))
        raise DesignError(f"design() constraints['area_mm2'] = {limits['area_mm2']:g} mm^2 is infeasible: the "
                          f"smallest machine of the space ({at}) "
                          f"takes {floor_area:.4g} mm^2; give at least that, or narrower bounds for fields the "
                          "base machine fixes")
    names = [dataflow] if isinstance(dataflow, str) else list(dataflow)
    with jax.enable_x64(True):
        pb = _problem(trace, hw, sp, names, objective)
        times = {"prepare": time.perf_counter() - t0}
        rng = np.random.default_rng(seed)
        u0 = rng.uniform(sp.lo, sp.hi, size=(starts, len(sp.fields)))
        start_here = np.array([math.log2(float(getattr(hw, f))) if f != "sram_kb" else
                               math.log2(sum(float(getattr(hw, p)) for p in ("sram_input_bytes", "sram_weight_bytes",
                                                                              "sram_output_bytes")) / 1024)
                               for f in sp.fields])
        u0[0] = np.clip(start_here, sp.lo, sp.hi)
        lim = {k: jnp.float64(v) for k, v in limits.items()}

        def step(u: Any, m: Any, v: Any, t: Any) -> tuple[Any, Any, Any, Any, Any]:
            return _step(pb, lim, u, m, v, t)

        u, m, v = jnp.asarray(u0), jnp.zeros_like(u0), jnp.zeros_like(u0)
        seen: dict[tuple[float, ...], tuple[float, float]] = {}
        path_u, path_value, path_area, path_t, path_e = [], [], [], [], []
        t_search = time.perf_counter()
        with tqdm(total=max_steps, desc="design", unit="step", disable=not progress, leave=False) as bar:
            for it in range(1, max_steps + 1):
                path_u.append(np.asarray(u))
                u, m, v, _, aux = step(u, m, v, jnp.float64(it))
                aux = jax.device_get(aux)
                path_value.append(np.asarray(aux["value"]))
                path_area.append(np.asarray(aux["area"]))
                path_t.append(np.exp(np.asarray(aux["blend_t"])))
                path_e.append(np.exp(np.asarray(aux["blend_e"])))
                _record(seen, aux, sp)
                bar.update(1)
                elapsed = time.perf_counter() - t0
                if it == 1 and elapsed > budget_s:
                    raise DesignError(f"design() budget_s = {budget_s:g} s is too small: one step took {elapsed:.3g} s "
                                      "(compile included); give a larger budget_s")
                if elapsed > budget_s * SEARCH_SHARE:
                    break
        times["search"] = time.perf_counter() - t_search
        t_polish = time.perf_counter()
        # rounding: the best priced corners that meet the area limit, then the lattice around them, priced by the
        # same compiled step: from each of them one simplex up (the point and a chain of neighbours above it) and
        # one from the point below it in every field, in a random order of the fields (a chain down to it)
        for _ in range(POLISH_ROUNDS):
            best = _best_points(seen, hw, sp, limits, starts)
            jitter = rng.uniform(0.02, 0.98, size=best.shape)
            for u_p in (best, np.clip(best - sp.step * jitter, sp.lo, sp.hi)):
                _, _, _, _, aux = step(jnp.asarray(u_p), jnp.zeros_like(u_p), jnp.ones_like(u_p), jnp.float64(1))
                aux = jax.device_get(aux)
                _record(seen, aux, sp)
        times["polish"] = time.perf_counter() - t_polish
    t_replay = time.perf_counter()
    keys, scores, ok = _ranked(seen, hw, sp, limits)
    if not ok.any():
        raise DesignError(f"design() found no machine within area_mm2 = {limits['area_mm2']:g} mm^2 (smallest "
                          f"priced {_areas(hw, sp, keys).min():.4g} mm^2); raise the limit or narrow the fields")
    chosen, chosen_scores = keys[ok][:replays], scores[ok][:replays]
    machines = [machine_at(hw, sp, k, name=f"{hw.name} designed {i}") for i, k in enumerate(chosen)]
    evaluated = replay_machines(trace, machines, objective, limits, names)
    for i, f in enumerate(sp.fields):
        evaluated[f] = ("candidate", 2.0 ** chosen[:, i])
    evaluated["model_objective"] = ("candidate", chosen_scores)
    times["replay"] = time.perf_counter() - t_replay
    feasible = evaluated["feasible"].values
    if not feasible.any():
        raise DesignError(f"design() replayed {len(machines)} candidates within the area limit and none meets "
                          f"power_w = {limits.get('power_w', math.inf):g} W (lowest replayed "
                          f"{float(evaluated['power_w'].min()):.4g} W); raise the limit or the replays")
    pick = int(np.argmin(np.where(feasible, evaluated["objective"].values, np.inf)))
    row = evaluated.isel(candidate=pick)
    figures = {k: float(row[k]) for k in ("latency_s", "energy_j", "edp_js", "power_w", "area_mm2")}
    figures["throughput_per_s"] = 1.0 / figures["latency_s"]
    figures["dataflow"] = str(row["dataflow"].values)
    path = xr.Dataset(
        {**{f: (("step", "start"), 2.0 ** np.stack(path_u)[..., i]) for i, f in enumerate(sp.fields)},
         "objective": (("step", "start"), np.stack(path_value)),
         "area_mm2": (("step", "start"), np.stack(path_area)),
         "latency_s": (("step", "start"), np.stack(path_t), {"description": "the loop's model (kernels alone, "
                                                                             "summed), blended over the corners"}),
         "energy_j": (("step", "start"), np.stack(path_e), {"description": "as latency_s"})},
        coords={"step": np.arange(len(path_u)), "start": np.arange(starts)},
        attrs={"objective": f"blended log {objective} (natural log) of the simplex corners"})
    times["total"] = time.perf_counter() - t0
    best_hw = machines[pick].replace(name=f"{hw.name} designed")
    return Design(best_hw, figures, evaluated, _front3(evaluated), path, times, objective, limits)


def _record(seen: dict[tuple[float, ...], tuple[float, float]], aux: dict[str, Any], sp: Space) -> None:
    """Keep every corner a step priced: lattice point -> (log objective, log power)."""
    corners = np.asarray(aux["corners"]).reshape(-1, len(sp.fields))
    score = np.asarray(aux["score"]).reshape(-1)
    log_p = (np.asarray(aux["log_e"]) - np.asarray(aux["log_t"])).reshape(-1)
    for c, s, p in zip(sp.snap(corners), score, log_p, strict=True):
        seen[tuple(c.tolist())] = (float(s), float(p))


def _ranked(seen: dict[tuple[float, ...], tuple[float, float]], hw: Hardware, sp: Space, limits: dict[str, float]
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The priced lattice points best first, their log objectives, and whether each meets the area limit: those
    the model finds within the power limit first (by objective), then the rest by their excess power."""
    keys = np.array(list(seen))
    score, log_p = np.array([seen[tuple(k)] for k in keys.tolist()]).T
    excess = np.maximum(log_p - math.log(limits.get("power_w", math.inf)), 0.0)
    order = np.lexsort((score, excess))
    keys, score = keys[order], score[order]
    return keys, score, _areas(hw, sp, keys) <= limits.get("area_mm2", np.inf)


def _best_points(seen: dict[tuple[float, ...], tuple[float, float]], hw: Hardware, sp: Space,
                 limits: dict[str, float], n: int) -> np.ndarray:
    """The ``n`` best priced lattice points within the area limit (:func:`_ranked`; repeated when fewer)."""
    keys, _, ok = _ranked(seen, hw, sp, limits)
    pool = keys[ok] if ok.any() else keys
    return pool[np.arange(n) % min(n, len(pool))]


def _areas(hw: Hardware, sp: Space, keys: np.ndarray) -> np.ndarray:
    """The areas (mm^2) of the machines at lattice points ``keys`` ``(n, fields)``, as :func:`machine_at` builds
    them, without building each."""
    k = sp.snap(np.asarray(keys, np.float64).reshape(-1, len(sp.fields)))
    values: dict[str, Any] = {f: np.asarray(getattr(hw, f), np.float64) for f in FIELDS}
    for i, f in enumerate(sp.fields):
        v = 2.0 ** k[:, i]
        if f == "sram_kb":
            values.update(sram_split(hw, v))
        else:
            values[f] = np.round(v) if sp.whole[i] else v
    return np.broadcast_to(area_mm2(types.SimpleNamespace(**values), np), (len(k),)).astype(np.float64)


__all__ = ("CONSTRAINTS", "DEFAULT_FIELDS", "OBJECTIVES", "SPACE", "Design", "DesignError", "design")
