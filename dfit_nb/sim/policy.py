"""Hybrid dataflow selection: the best dataflow per GEMM, paying for every switch (exact dynamic programming).

The selection
-------------
The GEMM ops of a trace, in program order (a topological order of the op
graph), form the sequence ``g = 0 .. G-1``. Choosing dataflow ``d_g`` for each
costs

    sum_g cost[g, d_g]  +  sum_{g >= 1, d_g != d_(g-1)} switch[g]

where ``cost[g, d]`` is what the replay charges under single style ``d``
(:func:`dfit_nb.sim._batch.style_costs`: each style replayed once, with its
mapping, refetches, movement and scheduling) to GEMM ``g`` and the non-GEMM
ops after it up to the next GEMM (their retiles depend on its layout): energy
in pJ, or the ops' increments of the latency in cycles (they sum to the
replayed latency exactly), and ``switch[g]`` the price of changing style
before op ``g``. The single styles' totals are therefore the replayed ones;
a hybrid differs from its DP total only where a retile's price depends on a
neighbour's style, or (layer-pipelined) where overlap makes latency not a
sum, which :meth:`Policy.evaluate` checks by replaying. A Viterbi pass
over ``(dataflow, switches used)`` states finds the minimum exactly for this
chain cost; ``max_switches`` bounds the switches, ``pins`` fix the dataflow of
the GEMMs of a region. On branching graphs the switch is charged between ops
adjacent in program order, not along every edge: exact for chains (an
encoder's GEMMs), and an approximation where two branches interleave (a
switch between parallel branches is charged although no tensor flows between
them; never more than one switch per op). A switch happens only between
kernels: two GEMMs of one kernel (rule 10's chained matrix products, or a
compiler fusion holding both) run one dataflow, so the DP prices a switch
between them as infinite and a pin on one holds for both. The tie is the
fusion's, before a machine whose SRAM cannot hold the kernel runs it unfused:
conservative there.

Switch (retile) cost
--------------------
Changing the stationary operand changes how the next GEMM's input activation
must be laid out in SRAM, so before op ``g`` its input tensor (``lhs`` bytes,
in the machine's words) is re-laid-out: read from and written back to SRAM
(``2 x bytes x sram_pj_per_byte``), and on a multi-tile grid moved across the
mesh (``bytes x (tile_cols + 1) / 2 hops x noc_pj_per_byte_hop``); it takes
``bytes / (tile_rows x noc_link_bytes_per_cycle)`` cycles on a grid, or
``bytes / ((R + 2C) x word)`` through one tile's SRAM ports. A configurable
control/reconfiguration penalty (``reconfig_cycles``, ``reconfig_pj``) is
added per switch. The formula is :func:`dfit_nb.sim.machine.switch_cost`,
shared with the replay: :func:`dfit_nb.replay` of a Policy charges the same
switch (same adjacency, same price, the Policy's ``reconfig_cycles`` and
``reconfig_pj``) as a ``retile`` before the GEMM, so the replayed gains
include what the DP paid.

Objectives
----------
``"energy"`` is a sum, and so is ``"latency"`` on a time-multiplexed machine:
the DP is exact. ``"edp"`` (energy x delay) is not a sum; the DP solves the
weighted sum ``E + w T`` exactly for a sweep of weights and keeps the policy
with the lowest ``E x T`` (a supported point of the Pareto front). Nor is
``"latency"`` on a layer-pipelined machine, where ops overlap. For these two
the selection then searches the replayed figure itself from the DP's choice
(:mod:`dfit_nb.sim._search`: a local search over one-GEMM, suffix and
single-style moves, every move replayed), and ``policy.totals.attrs["search"]``
says what it replayed and found; :meth:`Policy.evaluate` then replays the
result against every single style as before.

Replay
------
:func:`replay` here is :func:`dfit_nb.replay`: ``"hybrid"`` is the exact selection (energy), replayed and
verified against every single style by :meth:`Policy.evaluate`; every other dataflow (a style, per-op names, a
Policy) goes straight to the one-machine replay (:mod:`dfit_nb.sim._replay`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
import xarray as xr

from .._html import render
from ..errors import DfitError
from . import _replay, memo, playbook
from ._cost import for_jit
from ._prepare import ReplayError, check_policy_target, hardware_key, policy_fusion, prepare, trace_key
from ._search import improve, searched
from ._viterbi import _select, gemm_costs
from ._viterbi import viterbi as viterbi
from .hardware import FIELDS, Hardware, check_hardware, program_copy
from .kernels import splits_rows
from .machine import DATAFLOWS

OBJECTIVES = ("energy", "latency", "edp")
#: seconds after which the replayed search (where the objective is not a sum) starts no further replay: a round on
#: a large layer-pipelined grid replays hundreds of assignments of the whole program (an NNX ViT-B/16, 98 GEMMs,
#: on ``cerebras_like``: 493 a round, minutes each), while the gains left after a round or two are small (Keras
#: ResNet50 there: eight rounds, 226 s, ended 0.002% ahead of the best single style;
#: ``benchmarks/bench_real_models.py``)
SEARCH_BUDGET_S = 60.0


class PolicyError(DfitError, ValueError):
    """An invalid objective, candidate set, pin or switch cap."""


@dataclasses.dataclass(frozen=True)
class Policy:
    """A per-op dataflow choice with its costs; pass it to :func:`dfit_nb.replay` as ``dataflow=``.

    Attributes
    ----------
    name : str
        ``"hybrid(<objective>)"`` or the single style it fell back to.
    per_op : numpy.ndarray
        One dataflow name per op of ``trace.ops`` (``""`` for non-GEMM ops).
    choices : xarray.Dataset
        Dim ``op`` (the GEMMs, in order): ``dataflow``, ``cost`` over
        (``op``, ``candidate``) under the objective, ``energy_pj`` and
        ``cycles`` per candidate, ``switch`` (paid before the op, 0 if none),
        ``switch_cost``, ``region``, ``kernel`` (the kernel the GEMM runs
        in; GEMMs of one kernel share a dataflow).
    totals : xarray.Dataset
        The objective's total for the policy and for each single style.
    objective : str
    baselines : xarray.Dataset or None
        Replayed gains against every single style (:meth:`evaluate`).
    runs : dict or None
        The replays behind ``baselines`` (``"ws"``, ``"os"``, ``"is"``, ``"hybrid"`` -> Run).
    artifacts : dict or None
        The playbook's artifacts for the chosen policy, as Datasets: ``"reuse"`` (the
        reuse-factor map: MACs per byte moved in the policy's replay, per GEMM, operand and level),
        ``"buffer_pressure"`` (SRAM occupancy over time, mean and busiest tile, per
        policy) and ``"traffic_mix"`` (activation / weight / partial-sum bytes by
        level and region, per policy).
    reconfig_cycles, reconfig_pj : float
        The control/reconfiguration penalty per switch the policy was selected
        with; :func:`dfit_nb.replay` charges it with each switch, as the DP did.
    tags : dict of str to str
        Build and runtime tags of the selection (:func:`dfit_nb.sim.memo.tags`: versions, XLA flags, backend,
        machine hash, model revision, workload seed), quoted by the memo.
    tail : xarray.Dataset or None
        Latency and energy under batch variance for the policy and its baseline
        (:meth:`with_batch_variance`), quoted by the memo as p50/p95/p99.
    calibration : Calibration or None
        Whose held-out error the memo's decision rule uses (default :data:`dfit_nb.sim.memo.CALIBRATED_ERROR`).
    """

    name: str
    per_op: np.ndarray
    choices: xr.Dataset
    totals: xr.Dataset
    objective: str
    baselines: xr.Dataset | None = None
    runs: dict[str, Any] | None = dataclasses.field(default=None, repr=False, compare=False)
    artifacts: dict[str, xr.Dataset] | None = dataclasses.field(default=None, repr=False, compare=False)
    reconfig_cycles: float = 0.0
    reconfig_pj: float = 0.0
    trace_key: str = ""
    hw_key: str = ""
    hw_name: str = ""
    trace: Any = dataclasses.field(default=None, repr=False, compare=False)
    hw: Any = dataclasses.field(default=None, repr=False, compare=False)
    fallback: str = ""
    tags: dict[str, str] = dataclasses.field(default_factory=dict, compare=False)
    tail: xr.Dataset | None = dataclasses.field(default=None, repr=False, compare=False)
    calibration: Any = dataclasses.field(default=None, repr=False, compare=False)
    fusion: str = "rules"

    def evaluate(self, trace: Any = None, hw: Hardware | None = None, **replay_options: Any) -> Policy:
        """Replay the policy and every single style through :func:`dfit_nb.replay`: the gains with mapping,
        movement and scheduling included. Returns the policy with ``baselines`` filled in; if the replayed
        hybrid is worse than the best replayed single style under the objective, returns that single style
        instead (named so, with the reason in ``fallback``), so a selected policy is never worse than the best
        single style. ``trace`` and ``hw`` default to the ones the policy was selected on; others raise
        :class:`PolicyError` (a policy is chosen for one program on one machine)."""
        trace = self.trace if trace is None else trace
        hw = self.hw if hw is None else hw
        if trace is None or hw is None:
            raise PolicyError("this policy does not know the trace and machine it was selected on (selected with "
                              "prepared=, or loaded): pass them, policy.evaluate(trace, hw)")
        try:
            self._check_target(trace, hw)
        except ReplayError as err:
            raise PolicyError(str(err)) from None

        styles = [str(c) for c in self.choices["candidate"].values]
        replay_options = {**replay_options, "fusion": self.fusion}
        runs = {style: replay(trace, hw, style, **replay_options) for style in styles}
        runs["hybrid"] = replay(trace, hw, self, **replay_options)
        energy = np.array([float(runs[k].summary["energy_j"]) for k in runs])
        latency = np.array([float(runs[k].summary["latency_s"]) for k in runs])
        per_inf = np.array([float(runs[k].summary["joules_per_inference"]) for k in runs])
        metric = {"energy": energy, "latency": latency, "edp": energy * latency}[self.objective]
        base = metric[:-1]
        allowed = self.choices["dataflow"].values
        # a single style a pin forbids is not a valid baseline for the fallback
        feasible = np.array([all(v == s or not pinned for v, pinned in zip(allowed, self._pinned(), strict=True))
                             for s in styles])
        best = int(np.argmin(np.where(feasible, base, np.inf))) if feasible.any() else -1
        policy = self
        if best >= 0 and metric[-1] > base[best] * (1 + 1e-12):
            per_op = np.where(self.per_op == "", "", styles[best]).astype(object)
            choices = self.choices.assign(dataflow=("op", np.full(self.choices.sizes["op"], styles[best], object)),
                                          switch=("op", np.zeros(self.choices.sizes["op"], bool)))
            why = (f"the replayed hybrid ({metric[-1]:.4g}) did not beat {styles[best]} ({base[best]:.4g}) on "
                   f"{self.objective}")
            policy = dataclasses.replace(self, name=f"{styles[best]} (single style: the replayed hybrid "
                                                      f"did not beat it)", per_op=per_op, choices=choices,
                                         fallback=why)
            runs["hybrid"] = runs[styles[best]]
            energy[-1], latency[-1], per_inf[-1] = energy[best], latency[best], per_inf[best]
        labels = [*styles, "hybrid"]
        d = ("policy",)
        baselines = xr.Dataset(
            {
                "energy_j": (d, energy, {"units": "J", "description": "replayed energy of one call"}),
                "latency_s": (d, latency, {"units": "s", "description": "replayed latency"}),
                "joules_per_inference": (d, per_inf, {"units": "J", "description": "replayed energy per inference"}),
                "energy_gain_j": (d, energy - energy[-1], {"units": "J",
                                                           "description": "baseline minus hybrid energy"}),
                "energy_gain": (d, (energy - energy[-1]) / np.where(energy > 0, energy, 1.0),
                                {"units": "1", "description": "relative energy saved by the hybrid"}),
                "latency_gain_s": (d, latency - latency[-1], {"units": "s",
                                                             "description": "baseline minus hybrid latency"}),
                "latency_gain": (d, (latency - latency[-1]) / np.where(latency > 0, latency, 1.0),
                                 {"units": "1", "description": "relative latency saved by the hybrid"}),
            },
            coords={"policy": labels},
            attrs={"objective": self.objective, "best_single": styles[best] if best >= 0 else "",
                   **{k: v for k, v in runs["hybrid"].attrs.items() if k != "dataflow"}},
        )
        return dataclasses.replace(policy, baselines=baselines, runs=runs,
                                   artifacts=memo.artifacts(policy, runs, labels))

    def report(self, format: str = "markdown") -> str:
        """The playbook: an accelerator review memo, as Markdown or self-contained offline HTML.

        See :func:`dfit_nb.sim.playbook.report`.
        """
        return playbook.report(self, format)

    def with_batch_variance(self, make_args: Any, base: Mapping[str, int],
                            batch_sizes: Mapping[int, float] | Sequence[int] | None = None,
                            axis: str = "batch") -> Policy:
        """The policy with ``tail`` filled in: its latency and its baseline's over a distribution of batch sizes
        (:func:`dfit_nb.sim.memo.batch_variance`; default mix :data:`dfit_nb.sim.memo.DEFAULT_BATCH_MIX`).

        >>> import jax.numpy as jnp, dfit_nb
        >>> from dfit_nb.sim import presets
        >>> make_args = lambda batch: (jnp.ones((batch, 64)), jnp.ones((64, 32)))
        >>> trace = dfit_nb.capture(lambda x, w: jnp.tanh(x @ w), *make_args(4))
        >>> p = select_dataflows(trace, presets.get("npu_like")).with_batch_variance(make_args, {"batch": 4})
        >>> p.tail["size"].values.tolist(), p.tail["quantile"].values.tolist()
        ([4, 8, 16, 32, 64], [0.5, 0.95, 0.99])
        """
        return dataclasses.replace(self, tail=memo.batch_variance(self, make_args, base, batch_sizes, axis))

    def _pinned(self) -> np.ndarray:
        """Per GEMM: whether a pin fixed its dataflow."""
        return self.choices["pinned"].values if "pinned" in self.choices else np.zeros(self.choices.sizes["op"], bool)

    @property
    def switches(self) -> int:
        """Switches the policy pays."""
        return int(self.choices["switch"].sum())

    def _check_target(self, trace: Any, hw: Hardware) -> None:
        """Raise ReplayError when ``trace`` or ``hw`` is not what the policy was selected on."""
        check_policy_target(self, trace, hw)

    def summary_line(self) -> str:
        """One line of replayed figures (or, before :meth:`evaluate`, a note that nothing was replayed)."""
        used = sorted(set(self.choices["dataflow"].values.tolist()))
        head = f"{self.name}: {self.choices.sizes['op']} GEMMs, uses {used}, {self.switches} switches"
        if self.baselines is None:
            return f"{head}; not replayed yet (call .evaluate())"
        b = self.baselines
        best = str(b.attrs.get("best_single", ""))
        gain = self.replayed_gain()
        line = (f"{head}; replayed {float(b['energy_j'].sel(policy='hybrid')) * 1e3:.4g} mJ, "
                f"{float(b['latency_s'].sel(policy='hybrid')) * 1e6:.4g} us: {gain:+.2%} {self.objective} vs the "
                f"best single style ({best}), replayed")
        return line + (f"; fell back: {self.fallback}" if self.fallback else "")

    def replayed_gain(self) -> float:
        """The relative saving, under the objective, of the replayed policy against the best replayed single style
        (0 when it is that style; NaN before :meth:`evaluate`)."""
        if self.baselines is None:
            return float("nan")
        b = self.baselines
        best = str(b.attrs.get("best_single", ""))
        if not best:
            return 0.0
        metric = {"energy": b["energy_j"], "latency": b["latency_s"],
                  "edp": b["energy_j"] * b["latency_s"]}[self.objective]
        base = float(metric.sel(policy=best))
        return (base - float(metric.sel(policy="hybrid"))) / base if base > 0 else 0.0

    def __repr__(self) -> str:
        return f"<dfit_nb.Policy {self.summary_line()}>"

    def _repr_html_(self) -> str:
        return render("pre.html.j2", text=repr(self))


def _pins(regions: np.ndarray, pins: Mapping[str, str] | None, candidates: Sequence[str]
          ) -> tuple[np.ndarray, list[str | None], list[str | None]]:
    """``(G, D)`` allowed choices from ``{region: dataflow}`` (the most specific region wins; ties must agree), with,
    per GEMM, the dataflow a pin fixed (``None``: free) and the pin (its region, as given) that fixed it."""
    allowed = np.ones((len(regions), len(candidates)), bool)
    depth = np.full(len(regions), -1)
    pinned: list[str | None] = [None] * len(regions)
    source: list[str | None] = [None] * len(regions)
    if not pins:
        return allowed, pinned, source
    if not isinstance(pins, Mapping):
        raise PolicyError(f"pins must be a dict {{region: dataflow}}, got {type(pins).__name__}")
    regions = np.asarray(regions, dtype=str)
    for key, df in pins.items():
        if not isinstance(key, str) or not isinstance(df, str):
            raise PolicyError(f"pins map a region path (str) to a dataflow (str), got {key!r}: {df!r}")
        df = df.lower()
        if df not in candidates:
            raise PolicyError(f"pin {key!r} -> {df!r}: not a candidate; candidates: {', '.join(candidates)}")
        region = key.strip("/")
        level = region.count("/") + 1 if region else 0
        hit = (regions == region) | (np.char.startswith(regions, region + "/") if region else True)
        if not np.any(hit):
            raise PolicyError(f"pin {region!r}: no GEMM in that region")
        clash = hit & (depth == level) & np.array([p is not None and p != df for p in pinned])
        if clash.any():
            raise PolicyError(f"contradictory pins: region {region!r} is pinned to {df!r} and, at the same depth, "
                              f"to {pinned[int(np.flatnonzero(clash)[0])]!r}")
        for i in np.flatnonzero(hit & (depth <= level)):
            pinned[i], depth[i], source[i] = df, level, key
    for i, df in enumerate(pinned):
        if df is not None:
            allowed[i] = [c == df for c in candidates]
    return allowed, pinned, source


def _tied(prep: Any, gemm: np.ndarray) -> np.ndarray:
    """Per GEMM, whether it runs in the same kernel as the GEMM before it (rule 10's chained matrix products, or
    a compiler fusion holding two): a dataflow switch happens only between kernels, so those two share one."""
    tied = np.zeros(len(gemm), bool)
    if prep.kernels is not None and len(gemm) > 1:
        kernel = np.asarray(prep.kernels.kernel)[gemm]
        tied[1:] = kernel[1:] == kernel[:-1]
    return tied


def _share_kernel_pins(ops: np.ndarray, tied: np.ndarray, allowed: np.ndarray, pinned: list[str | None],
                       source: list[str | None]) -> tuple[np.ndarray, list[str | None], list[str | None]]:
    """The pins spread over each kernel's GEMMs (they run one dataflow); two pins that disagree inside one kernel
    are refused, naming both."""
    if not tied.any():
        return allowed, pinned, source
    allowed, pinned, source = allowed.copy(), list(pinned), list(source)
    group = np.cumsum(~tied) - 1
    for gid in np.unique(group[tied]):
        members = np.flatnonzero(group == gid)
        fixed = {(pinned[i], source[i]) for i in members if pinned[i] is not None}
        if len({df for df, _ in fixed}) > 1:
            shown = ", ".join(f"{src!r} -> {df}" for df, src in sorted(fixed))
            raise PolicyError(f"the pins {shown} disagree on GEMM ops {[int(ops[i]) for i in members]}, which run in "
                              "one kernel: a dataflow switch happens only between kernels. Valid: pins that agree "
                              "on the kernel's GEMMs, or a replay with fusion='none' (one kernel per op)")
        both = allowed[members].all(axis=0)
        allowed[members] = both
        if fixed:
            df, src = next(iter(fixed))
            for i in members:
                pinned[i], source[i] = df, src
    return allowed, pinned, source


def _check_feasible(ops: np.ndarray, pinned: list[str | None], source: list[str | None],
                    max_switches: int | None) -> None:
    """Raise :class:`PolicyError` when the pins cannot all hold within ``max_switches``.

    Free GEMMs between two pinned ones can take either side's dataflow at no extra switch, so the fewest
    switches any assignment needs is the number of changes along the pinned GEMMs in program order; the DP
    given fewer has only infinite-cost paths and would silently drop a pin.
    """
    if max_switches is None:
        return
    seq = [(int(op), df, src) for op, df, src in zip(ops, pinned, source, strict=True) if df is not None]
    changes = [(a, b) for a, b in itertools.pairwise(seq) if a[1] != b[1]]
    if len(changes) <= max_switches:
        return
    shown = "; ".join(f"op #{a[0]} pinned to {a[1]} by {a[2]!r}, then op #{b[0]} pinned to {b[1]} by {b[2]!r}"
                      for a, b in changes[:4]) + ("; ..." if len(changes) > 4 else "")
    conflicting = {src: df for _, df, src in seq if any(src in (a[2], b[2]) for a, b in changes)}
    raise PolicyError(
        f"the pins {conflicting} cannot all hold with max_switches={max_switches}: in program order they need at "
        f"least {len(changes)} switch{'es' if len(changes) != 1 else ''} ({shown}). Valid: max_switches >= "
        f"{len(changes)} (or None for no cap), or pins that agree on one dataflow where switches are not allowed"
    )


def _check_budget(budget: Any) -> None:
    if budget is None:
        return
    if isinstance(budget, bool) or not isinstance(budget, numbers.Real) or not (math.isfinite(budget) and budget > 0):
        raise PolicyError(f"search_budget_s must be a positive number of seconds or None (no limit), got {budget!r}")


def _check(objective: str, candidates: Sequence[str], max_switches: int | None) -> list[str]:
    if objective not in OBJECTIVES:
        raise PolicyError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")
    if isinstance(candidates, str):  # one dataflow by name, as cost() takes it, not its letters
        candidates = [candidates]
    cands = [str(c).lower() for c in candidates]
    if not cands:
        raise PolicyError(f"candidates is empty: give one or more of {', '.join(DATAFLOWS)}")
    bad = [c for c in cands if c not in DATAFLOWS]
    if bad:
        raise PolicyError(f"unknown candidate dataflow(s) {bad or candidates!r}; valid: {', '.join(DATAFLOWS)}")
    if len(set(cands)) != len(cands):
        raise PolicyError(f"candidates repeat a dataflow: {candidates!r}")
    if max_switches is not None and (not isinstance(max_switches, (int, np.integer)) or max_switches < 0):
        raise PolicyError(f"max_switches must be a whole number >= 0 (or None for no cap), got {max_switches!r}")
    return cands


def select_dataflows(trace: Any, hw: Hardware, objective: str = "energy",
                     candidates: Sequence[str] = DATAFLOWS, *, max_switches: int | None = None,
                     pins: Mapping[str, str] | None = None, reconfig_cycles: float = 0.0,
                     reconfig_pj: float = 0.0, evaluate: bool = True,
                     prepared: Any = None, seed: int | None = None, tags: Mapping[str, Any] | None = None,
                     calibration: Any = None, fusion: str | None = None,
                     search_budget_s: float | None = SEARCH_BUDGET_S, progress: bool = True) -> Policy | xr.Dataset:
    """Choose a dataflow per GEMM (exact DP with switch costs; see the module docstring).

    Parameters
    ----------
    trace : Trace
    hw : Hardware
        One machine, or a batch (``Hardware.stack``): then one vmapped call
        returns an ``xarray.Dataset`` of choices over (``machine``, ``op``).
    objective : {"energy", "latency", "edp"}
    candidates : sequence of {"ws", "os", "is"}
    max_switches : int, optional
        At most this many switches (``None``: no cap).
    pins : dict, optional
        ``{region: dataflow}``: the GEMMs of a region keep that dataflow. Pins that cannot all hold within
        ``max_switches`` (``{"a": "ws", "b": "os"}`` with ``max_switches=0``) raise :class:`PolicyError`
        naming them and the switches they need; a pin is never dropped.
    reconfig_cycles, reconfig_pj : float
        Control/reconfiguration penalty per switch, on top of the retile cost.
    evaluate : bool
        Replay the policy and every single style (:meth:`Policy.evaluate`):
        ``policy.baselines`` holds the replayed gains, and a hybrid the replay
        shows worse than the best single style falls back to it.
    prepared : Prepared, optional
        The op table to select on instead of ``prepare(trace)`` (e.g. the
        trace's ops scaled to another shape by :mod:`dfit_nb.sim.shapes`).
    seed : int, optional
        The workload's random seed, recorded in ``policy.tags`` (the memo's build and runtime tags).
    tags : dict, optional
        More tags of the user's own (e.g. ``{"model_revision": "v3"}``), recorded with the computed ones.
    calibration : Calibration, optional
        A fitted :class:`~dfit_nb.sim.Calibration`: the memo's decision rule uses its held-out error instead of
        the project's measured figure (:data:`dfit_nb.sim.memo.CALIBRATED_ERROR`).
    fusion : {"rules", "compiler", "none"}, optional
        Which ops run as one kernel (:func:`dfit_nb.replay`); the choices are priced on those kernels, a switch
        falls between kernels, and the policy replays with the same fusion.
    search_budget_s : float or None
        Where the objective is not a sum of per-GEMM prices (latency on a layer-pipelined machine, EDP) the
        selection searches the replayed figure from the DP's choice (:mod:`dfit_nb.sim._search`); none of
        that search's replays start after this many seconds (the first call, the single styles among them,
        always runs; ``None``: no limit). On a large grid a round replays hundreds of assignments
        (:data:`SEARCH_BUDGET_S` explains the default). A search its budget stops depends on the machine's
        speed (the search note, ``policy.totals.attrs["search"]``, says so); ``None`` gives one policy on every
        machine.
    progress : bool
        A ``tqdm.auto`` bar over that search's rounds, where it runs.

    Examples
    --------
    >>> import dfit_nb
    >>> from dfit_nb.sim import presets, select_dataflows
    >>> fn, args = dfit_nb.examples.get("mlp").build()
    >>> policy = select_dataflows(dfit_nb.capture(fn, *args), presets.get("npu_like"), "energy")
    >>> float(policy.totals["gain_vs_best_single"]) >= 0
    True
    """
    cands = _check(objective, candidates, max_switches)
    _check_budget(search_budget_s)
    check_hardware(hw, "select_dataflows()", batch=None, error=PolicyError)
    memo.check_extra_tags(tags, PolicyError)  # memo.tags reads them only after the search
    prep = prepared if prepared is not None else prepare(trace, fusion, splits_rows(hw))
    gemm = np.flatnonzero(prep.arrays["gemm"] > 0)
    if gemm.size == 0:
        raise PolicyError("the trace has no GEMM (dot_general / conv) ops: there is no dataflow to choose")
    ops = {k: v[gemm] for k, v in prep.arrays.items()}
    regions = prep.region[gemm].astype(str)
    allowed, pinned, source = _pins(regions, pins, cands)
    tied = _tied(prep, gemm)
    allowed, pinned, source = _share_kernel_pins(prep.op[gemm], tied, allowed, pinned, source)
    _check_feasible(prep.op[gemm], pinned, source, max_switches)
    reconfig = np.array([float(reconfig_cycles), float(reconfig_pj)])
    if reconfig.min() < 0 or not np.isfinite(reconfig).all():
        raise PolicyError(f"reconfig_cycles and reconfig_pj must be finite and >= 0, got {reconfig.tolist()}")
    batch = hw.batch_shape
    energy, cycles = gemm_costs(prep, hw, cands)
    machine = for_jit(hw) if batch == () else program_copy(
        hw, **{f: np.broadcast_to(np.asarray(getattr(hw, f), np.float64), batch) for f in _fields()})
    fn = functools.partial(_select, objective=objective, max_switches=max_switches)
    with jax.enable_x64(True):
        if batch == ():
            out = jax.device_get(fn(energy, cycles, ops, machine, allowed, reconfig, tied))
        else:
            out = jax.device_get(jax.vmap(lambda e, c, h: fn(e, c, ops, h, allowed, reconfig, tied))(
                energy, cycles, machine))
    # the feasibility check above covers the pins and the cap; this catches what it cannot see (a cost that is
    # infinite or NaN leaves the DP no finite path, and its argmin would then ignore a pin without a word)
    choice = np.asarray(out["choice"]).astype(np.int64)
    honoured = allowed[np.arange(allowed.shape[0]), choice]
    if not np.all(honoured):
        g = int(np.flatnonzero(~honoured.reshape(-1, allowed.shape[0]).all(axis=0))[0])
        raise PolicyError(f"no assignment honours the pins {dict(pins or {})} under max_switches={max_switches}: "
                          f"GEMM op #{int(prep.op[gemm][g])} ({regions[g] or '<root>'}) would have to break its pin "
                          f"{source[g]!r} -> {pinned[g]!r} (its costs: energy {energy[..., g, :].tolist()} pJ, "
                          f"cycles {cycles[..., g, :].tolist()})")
    search = None
    if batch == () and searched(objective, hw.execution):
        # the DP's sum is not this objective here: search the replayed figure from the DP's choice
        choice, search = improve(prep, hw, gemm, choice, cands, allowed, objective, max_switches, reconfig, tied,
                                 search_budget_s, progress)
        out = {**out, "choice": choice}
    names = np.asarray(cands, dtype=object)
    if batch != ():
        return xr.Dataset(
            {"dataflow": (("machine", "op"), names[np.asarray(out["choice"])].astype(object)),
             "energy_j": ("machine", np.asarray(out["energy_total"]) * 1e-12, {"units": "J"}),
             "cycles": ("machine", np.asarray(out["cycles_total"]), {"units": "cycle"})},
            coords={"op": prep.op[gemm], "machine": np.arange(batch[0])},
            attrs={"objective": objective, "candidates": ",".join(cands)})
    memo.calibrated_error(calibration)  # a wrong object is refused here, not when the memo is written
    selected = _policy(prep, gemm, regions, out, names, cands, objective, allowed)
    if search is not None:
        selected.totals.attrs["search"] = (
            f"replayed local search from the DP's choice: {search['replayed']} assignments replayed in "
            f"{search['rounds']} round(s), replayed {objective} {search['start']:.6g} -> {search['found']:.6g}"
            + (f"; stopped at its time budget (search_budget_s={search_budget_s:g})" if search["out_of_time"]
               else ""))
    policy = dataclasses.replace(selected,
                                 reconfig_cycles=float(reconfig[0]), reconfig_pj=float(reconfig[1]),
                                 trace_key=trace_key(prep), hw_key=hardware_key(hw), hw_name=hw.name,
                                 trace=trace if prepared is None else None, hw=hw,
                                 tags=memo.tags(trace, hw, seed, tags), calibration=calibration,
                                 fusion=prep.fusion)
    return policy.evaluate() if evaluate and prepared is None else policy


def _fields() -> list[str]:
    return list(FIELDS)


def _policy(prep: Any, gemm: np.ndarray, regions: np.ndarray, out: dict[str, Any], names: np.ndarray,
            cands: list[str], objective: str, allowed: np.ndarray) -> Policy:
    choice = np.asarray(out["choice"]).astype(np.int64)
    energy, cycles = np.asarray(out["energy"]), np.asarray(out["cycles"])
    sw_e, sw_c = np.asarray(out["switch_energy"]), np.asarray(out["switch_cycles"])
    switched = np.concatenate([[False], choice[1:] != choice[:-1]])
    objective_cost = {"energy": energy, "latency": cycles, "edp": energy}[objective]
    # single-style totals (switch-free), for the yardstick; a style a pin forbids is not a valid baseline
    single_e = energy.sum(axis=0)
    single_t = cycles.sum(axis=0)
    pol_e = float(energy[np.arange(len(choice)), choice].sum() + sw_e[switched].sum())
    pol_t = float(cycles[np.arange(len(choice)), choice].sum() + sw_c[switched].sum())
    metric = {"energy": (single_e, pol_e), "latency": (single_t, pol_t),
              "edp": (single_e * single_t, pol_e * pol_t)}[objective]
    feasible = allowed.all(axis=0)
    singles = np.where(feasible, metric[0], np.inf)
    best = int(np.argmin(singles)) if np.isfinite(singles).any() else -1
    per_op = np.full(len(prep.op), "", dtype=object)
    per_op[gemm] = names[choice]
    choices = xr.Dataset(
        {
            "dataflow": ("op", names[choice], {"units": "", "description": "chosen dataflow"}),
            "region": ("op", regions.astype(object), {"units": "", "description": "region path"}),
            "cost": (("op", "candidate"), objective_cost, {"units": "pJ" if objective != "latency" else "cycle",
                                                           "description": f"{objective} cost of each candidate"}),
            "energy_pj": (("op", "candidate"), energy, {"units": "pJ", "description": "energy, all executions"}),
            "cycles": (("op", "candidate"), cycles, {"units": "cycle", "description": "cycles, all executions"}),
            "switch": ("op", switched, {"units": "", "description": "a switch is paid before this op"}),
            "switch_energy_pj": ("op", np.where(switched, sw_e, 0.0), {"units": "pJ",
                                                                     "description": "switch energy paid"}),
            "switch_cycles": ("op", np.where(switched, sw_c, 0.0), {"units": "cycle",
                                                                   "description": "switch cycles paid"}),
            "switch_energy_if_paid_pj": ("op", sw_e, {"units": "pJ", "description": "the price of a switch here"}),
            "switch_cycles_if_paid": ("op", sw_c, {"units": "cycle", "description": "the cycles of a switch here"}),
            "pinned": ("op", ~allowed.all(axis=1), {"units": "", "description": "a pin fixed the dataflow"}),
            "kernel": ("op", np.asarray(prep.kernels.kernel)[gemm] if prep.kernels is not None else gemm,
                       {"units": "", "description": "the kernel the GEMM runs in: a switch happens only between "
                                                    "kernels"}),
        },
        coords={"op": prep.op[gemm], "candidate": cands},
        attrs={"objective": objective},
    )
    gain = (metric[0][best] - metric[1]) / metric[0][best] if best >= 0 and metric[0][best] > 0 else 0.0
    gain = 0.0 if abs(gain) < 1e-12 else gain  # the same assignment summed in another order
    totals = xr.Dataset(
        {
            "energy_pj": ((), pol_e, {"units": "pJ", "description": "policy energy, switches included"}),
            "cycles": ((), pol_t, {"units": "cycle", "description": "policy cycles, switches included"}),
            "single_energy_pj": ("candidate", single_e, {"units": "pJ"}),
            "single_cycles": ("candidate", single_t, {"units": "cycle"}),
            "best_single": ((), cands[best] if best >= 0 else "", {"units": ""}),
            "gain_vs_best_single": ((), gain, {"units": "1", "description": f"relative {objective} gain"}),
        },
        coords={"candidate": cands}, attrs={"objective": objective},
    )
    used = sorted(set(names[choice].tolist()))
    # a selection that keeps one style everywhere is that style, not a hybrid
    name = f"hybrid({objective})" if len(used) > 1 else f"{used[0] if used else 'ws'} ({objective} selection: " \
        "one style on every GEMM)"
    return Policy(name=name, per_op=per_op, choices=choices, totals=totals, objective=objective)


def replay(trace: Any, hw: Hardware, dataflow: Any = "ws", *, execution: str | None = None,
           layouts: Mapping[str, str] | None = None, time_bins: int = 256, inferences: int = 1,
           measured: bool | None = None, fusion: str | None = None) -> Any:
    """Map and schedule a captured program on ``hw``: the event cube.

    Parameters
    ----------
    trace : Trace
        From :func:`dfit_nb.capture` or :func:`dfit_nb.load_trace`.
    hw : Hardware
        One machine, e.g. ``dfit_nb.sim.presets.get("cerebras_like")``.
    dataflow : {"ws", "os", "is", "hybrid"}, or a Policy
        One dataflow for every GEMM; ``"hybrid"`` selects one per GEMM
        (:func:`dfit_nb.sim.select_dataflows`, energy objective), replays it and
        every single style, and returns the hybrid's run only when it beats them
        (else the best single style's, named so); a Policy (from
        :func:`~dfit_nb.sim.select_dataflows` on this trace and machine: others
        are refused) chooses per op. Where the dataflow
        changes between GEMMs adjacent in program order, the later GEMM pays the
        switch the selection prices (:func:`dfit_nb.sim.machine.switch_cost`,
        plus a Policy's ``reconfig_cycles`` / ``reconfig_pj``) as a ``retile``
        before its body: energy, bytes, and a delay on its tiles.
    execution : {"time", "spatial"}, optional
        Overrides ``hw.execution``: time-multiplexed or layer-pipelined.
    layouts : dict, optional
        ``{region: "mn" | "mk" | "mn:GYxGX"}`` pins the virtual layout of the
        ops in a region (the most specific region wins).
    time_bins : int
        Time bins of the cube.
    inferences : int
        Inferences streamed back to back: calls of the function, one after
        another (:mod:`dfit_nb.sim.streaming`). A layer-pipelined machine
        starts the next in each op's tiles as soon as that op is done with the
        last, its weights staying in SRAM; a time-multiplexed one runs them one
        after another. The summary's ``throughput_inferences_per_s``,
        ``steady_state_utilization``, ``steady_state_period_s``,
        ``pipeline_fill_s``, ``stream_s`` and ``bottleneck_stage`` (with its
        region and what limits it) say what the stream reaches
        (``run.streamed(n)`` gives them for another ``n``); the events, the
        cube and the other figures are the first inference's.
    measured : bool, optional
        Add the trace's measured events (``source="measured"``); default: when
        the trace has measured times (profile or eager mode).
    fusion : {"rules", "compiler", "none"}, optional
        Which ops run together as one kernel (intermediates on chip, one launch,
        vector work beside the array): the machine's fusion rules (the default),
        the capture's XLA fusion map, or one kernel per primitive
        (:mod:`dfit_nb.sim.kernels`). A Policy replays with the fusion it was
        selected with.

    Returns
    -------
    Run
        ``events``, ``cube``, ``summary``, ``ops``, ``regions`` (see :class:`dfit_nb.sim.run.Run`).

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import presets
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> run = dfit_nb.replay(t, presets.get("npu_like"), "ws")
    >>> int(run.summary["macs"]) == 64 * 128 * 32
    True
    >>> sorted(set(run.events["kind"].values.tolist()))   # tanh runs in the matmul's kernel: nothing to retile
    ['compute', 'dram', 'noc', 'sram']
    >>> run.kernels.sizes["kernel"], sorted(set(dfit_nb.replay(t, presets.get("npu_like"), fusion="none").events[
    ...     "kind"].values.tolist()))
    (1, ['compute', 'dram', 'noc', 'retile', 'sram'])
    """
    execution = _replay.check_arguments(hw, execution, time_bins, inferences)
    if not (isinstance(dataflow, str) and dataflow.lower() == "hybrid"):
        return _replay.replay(trace, hw, dataflow, execution=execution, layouts=layouts, time_bins=time_bins,
                              inferences=inferences, measured=measured, fusion=fusion)
    fusion = policy_fusion(dataflow, fusion)
    prepare(trace, fusion, splits_rows(hw))  # a trace that cannot be replayed is refused as replay() refuses it
    # the exact selection (energy), replayed and verified against every single style
    policy = select_dataflows(trace, hw.replace(execution=execution), "energy", evaluate=False, fusion=fusion)
    return policy.evaluate(layouts=layouts, time_bins=time_bins, inferences=inferences,
                           measured=measured).runs["hybrid"]
