"""The review memo's facts: build and runtime tags, tail latency under batch variance, competing hypotheses,
missing evidence, the signoff decision rule and the playbook's artifacts (reuse, buffer pressure, traffic mix).

Everything here reads results the one machine model produced (a :class:`~dfit_nb.sim.Policy`'s replays, its
:class:`~dfit_nb.sim.Run` evidence); no figure is computed twice. :mod:`dfit_nb.sim.playbook` lays the facts out
as the memo (symptom, mechanism, proposed action, signoff).

The decision rule
-----------------
``g`` is the policy's replayed relative gain on its objective against the best single style
(:meth:`Policy.replayed_gain`), ``e`` the model's calibrated error (:data:`CALIBRATED_ERROR`, or a
:class:`~dfit_nb.sim.Calibration` the user passes) and ``r`` the largest relative regression among the other
figures the memo reports (the other metric, p95/p99 latency under batch variance), positive when worse:

- ``rollback`` when ``g < -e``: the change is worse by more than the model's error;
- ``escalate`` when ``|g| <= e``: the predicted movement is within the model's error, so only a measurement on
  the target can decide;
- ``bounded rollout`` when ``g > e`` but ``r > e``: a real gain with a regression beyond the model's error;
- ``ship`` when ``g > e`` and ``r <= e``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from .._version import __version__
from ..errors import DfitError
from . import schedule
from ._batch import batch_program
from ._prepare import hardware_key, padded, pinned_layouts, prepare
from ._rescale import (
    ShapeError,
    _codes,
    _weighted_quantiles,
    check_base,
    check_quantiles,
    exponents,
    scaled,
    size_distribution,
)
from .hardware import FIELDS, Hardware, check_hardware, program_copy
from .kernels import splits_rows
from .memory import replay_estimate

#: the model's calibrated error used by the decision rule when no Calibration is given: the held-out pooled MAPE
#: of the calibrated ``tpu_v4`` model on measured TPU v4 matmuls (docs/validation.md, "Real hardware: TPU v4
#: matmuls", the "pooled | calibrated" row; ``python benchmarks/bench_tpu_v4.py``, seed 0)
CALIBRATED_ERROR = 0.067
CALIBRATED_ERROR_SOURCE = ("held-out pooled MAPE of the calibrated tpu_v4 model on 598 measured TPU v4 matmuls "
                           "(docs/validation.md, 'Real hardware: TPU v4 matmuls'; benchmarks/bench_tpu_v4.py, seed 0)")
#: who signs a dataflow-policy change off
OWNERS = ("system architect", "compiler/runtime owner", "performance-modelling owner", "production inference lead")
#: what each owner signs for
SIGNS = {"system architect": "the mechanism and the machine it is argued on",
         "compiler/runtime owner": "per-layer dataflow support, the switch cost and software compatibility",
         "performance-modelling owner": "the model's figures and the error bound the decision uses",
         "production inference lead": "p95/p99 under the real batch mix and the rollout"}
DECISIONS = ("ship", "bounded rollout", "rollback", "escalate")
#: the default request mix: batch size as a multiple of the captured batch -> probability (half the requests at
#: the captured size, a tail to 16x); p50 is the captured size, p95 8x, p99 16x
DEFAULT_BATCH_MIX: dict[int, float] = {1: 0.5, 2: 0.25, 4: 0.15, 8: 0.08, 16: 0.02}
QUANTILES = (0.5, 0.95, 0.99)


class MemoError(DfitError, ValueError):
    """Bad input to the memo's facts (a gain, an error bound, a batch mix, a seed)."""


def _sha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def check_extra_tags(extra: Any, error: type[Exception] = MemoError) -> None:
    """Refuse the user's own tags unless they are a dict (``None``: none), raising ``error``: the caller's class,
    so :func:`dfit_nb.sim.select_dataflows` can refuse them before its search."""
    if extra is not None and not isinstance(extra, Mapping):
        raise error(f"tags must be a dict {{name: value}} of your own tags (e.g. {{'model_revision': 'v3'}}), got "
                    f"{type(extra).__name__} {extra!r:.80}")


def tags(trace: Any, hw: Hardware, seed: int | None = None, extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Build and runtime tags of a result: versions, XLA flags, backend, machine and model revision.

    ``hardware_hash`` is :func:`dfit_nb.sim._prepare.hardware_key` (every field and the execution style, not the
    name); ``jaxpr_hash`` hashes the traced program's text and ``param_shapes_hash`` the arguments' shapes and
    dtypes as captured (``trace.attrs["arg_shapes"]``). ``seed`` is the workload seed if the user gives one;
    ``extra`` adds the user's own tags (e.g. a model revision name).

    >>> import jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import presets
    >>> t = dfit_nb.capture(lambda a, b: a @ b, jnp.ones((4, 8)), jnp.ones((8, 2)))
    >>> tg = tags(t, presets.get("npu_like"), seed=0)
    >>> tg["seed"], tg["hardware"], len(tg["jaxpr_hash"])
    ('0', 'npu_like', 16)
    """
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise MemoError(f"seed must be an int (the workload's random seed), got {seed!r}")
    check_extra_tags(extra)  # read by .items() below
    # hashed field by field: one machine, whose tag a batch of machines would not be
    check_hardware(hw, "tags()", error=MemoError)
    attrs = getattr(trace, "attrs", {}) or {}
    jaxpr = str(getattr(trace, "jaxpr_text", "") or "")
    shapes = str(attrs.get("arg_shapes", ""))
    try:
        jaxlib_version = importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:  # a JAX build without a separate jaxlib distribution
        jaxlib_version = "not installed"
    out = {
        "dfit_nb": __version__, "jax": jax.__version__, "jaxlib": jaxlib_version,
        "xla_flags": os.environ.get("XLA_FLAGS", "") or "(unset)",
        "backend": jax.default_backend(), "capture_backend": str(attrs.get("backend", "unknown")),
        "hardware": str(getattr(hw, "name", "")), "hardware_hash": hardware_key(hw),
        "function": str(attrs.get("function", "")), "arg_shapes": shapes,
        "jaxpr_hash": _sha(jaxpr) if jaxpr else "unknown (no jaxpr)",
        "param_shapes_hash": _sha(shapes) if shapes else "unknown (no shapes)",
        "seed": "not given" if seed is None else str(int(seed)),
    }
    for k, v in (extra or {}).items():
        out[str(k)] = str(v)
    return out


def calibrated_error(calibration: Any = None) -> tuple[float, str]:
    """``(error, provenance)``: the held-out pooled MAPE of a :class:`~dfit_nb.sim.Calibration` (fitted machine),
    or :data:`CALIBRATED_ERROR` with its source.

    >>> calibrated_error()[0]
    0.067
    """
    if calibration is None:
        return CALIBRATED_ERROR, CALIBRATED_ERROR_SOURCE
    metrics = getattr(calibration, "metrics", None)
    if metrics is None or "mape" not in metrics:
        raise MemoError(f"calibration must be a dfit_nb.sim.Calibration (from calibrate), got "
                        f"{type(calibration).__name__}")
    mape = float(metrics["mape"].sel(machine="fitted", split="held_out", bucket="pooled"))
    rows = int(calibration.rows.sizes["row"]) if hasattr(calibration, "rows") else 0
    return mape, f"held-out pooled MAPE of the given calibration ({rows} measured rows)"


def decide(gain: float, error: float, regression: float = 0.0) -> tuple[str, str]:
    """The suggested decision and the rule that gave it (see the module docstring).

    ``gain``: relative saving on the objective (positive: better); ``error``: the model's calibrated relative
    error (>= 0); ``regression``: the largest relative worsening among the other reported figures (positive:
    worse).

    >>> decide(0.20, 0.079)[0], decide(0.05, 0.079)[0], decide(0.20, 0.079, 0.15)[0], decide(-0.2, 0.079)[0]
    ('ship', 'escalate', 'bounded rollout', 'rollback')
    """
    values = {"gain": gain, "error": error, "regression": regression}
    bad = {k: v for k, v in values.items() if isinstance(v, (bool, np.bool_))  # True is no gain of 100 %
           or not isinstance(v, (int, float, np.floating, np.integer)) or not np.isfinite(v)}
    if bad or error < 0:
        raise MemoError(f"decide needs finite numbers and error >= 0, got {bad or {'error': error}}")
    if gain < -error:
        return "rollback", f"the gain {gain:+.1%} is worse than minus the model's error ({error:.1%})"
    if gain <= error:
        return "escalate", f"the gain {gain:+.1%} is within the model's calibrated error (+/-{error:.1%})"
    if regression > error:
        return "bounded rollout", (f"the gain {gain:+.1%} exceeds the model's error ({error:.1%}) but a regression "
                                   f"of {regression:.1%} does too")
    return "ship", (f"the gain {gain:+.1%} exceeds the model's error ({error:.1%}) and no regression does "
                    f"(largest {max(regression, 0.0):.1%})")


def hypotheses(run: Any) -> list[dict[str, Any]]:
    """The bottleneck classes of a Run ranked by their evidence (fraction of the op spans each needs), strongest
    first: ``[{"mechanism", "evidence", "detail", "ops", "top_region", "attributed"}, ...]``.

    The classes are the Run's own (``summary["class_evidence"]`` over its class dimension, with
    ``bottleneck_class`` per op), falling back to its mechanisms (``summary["evidence"]``) for a Run without
    classes; none is listed here. The class made of mechanisms (memory: the one without ``<class>_cycles`` of its
    own, made of the mechanisms that are not classes themselves) gets their evidence as ``detail``;
    ``attributed`` is False for a class whose ``<class>_cycles`` the Run reports as 0 (precision and thermal
    before an analysis is attached). ``ops`` counts the ops the class dominates and ``top_region`` is where they
    take the most span.
    """
    from .run import Run

    if not isinstance(run, Run):  # its summary and ops are read below
        raise MemoError(f"hypotheses() needs a dfit_nb Run (from dfit_nb.replay or load_run), got {type(run).__name__}")
    s = run.summary
    mechanisms = [str(m) for m in s["mechanism"].values]
    mech_ev = np.asarray(s["evidence"].values, np.float64)
    if "class_evidence" in s and "bottleneck_class" in run.ops:
        dim = s["class_evidence"].dims[0]
        names = [str(c) for c in s[dim].values]
        evidence = np.asarray(s["class_evidence"].values, np.float64)
        per_op = np.asarray(run.ops["bottleneck_class"].values).astype(str)
    else:
        names, evidence = mechanisms, mech_ev
        per_op = np.asarray(run.ops["bottleneck"].values).astype(str)
    members = [m for m in mechanisms if m not in names]  # mechanisms that make up a composite class
    span = np.asarray(run.ops["span"].values, np.float64)
    regions = np.asarray(run.ops["region"].values).astype(str)
    out = []
    for i in np.argsort(-evidence, kind="stable"):
        m = names[i]
        mine = per_op == m
        top = ""
        if mine.any():  # the region where ops this class dominates take the most span
            regs, inv = np.unique(regions[mine], return_inverse=True)
            top = str(regs[int(np.argmax(np.bincount(inv, weights=span[mine])))])
        detail = ""
        if m not in mechanisms and f"{m}_cycles" not in s and members:  # a class of its own cycles has no members
            order = sorted(members, key=lambda k: -mech_ev[mechanisms.index(k)])
            detail = ", ".join(f"{k} {mech_ev[mechanisms.index(k)]:.0%}" for k in order)
        attributed = not (f"{m}_cycles" in s and m not in mechanisms and float(s[f"{m}_cycles"]) == 0)
        out.append({"mechanism": m, "evidence": float(evidence[i]), "detail": detail, "ops": int(mine.sum()),
                    "top_region": top, "attributed": attributed})
    return out


def is_policy(obj: Any) -> bool:
    """Whether ``obj`` reads as a :class:`~dfit_nb.sim.Policy` (what the memo and the playbook read of one);
    by its attributes, since ``policy`` imports this module and the playbook, which cannot import it back."""
    return all(hasattr(obj, a) for a in ("choices", "baselines", "runs", "hw", "calibration"))


def missing_evidence(policy: Any) -> list[str]:
    """What would confirm the memo, derived from the policy and its replays (each line says what is missing)."""
    if not is_policy(policy) or policy.runs is None:  # its machine and hybrid replay are read
        raise MemoError(f"missing_evidence() needs an evaluated dfit_nb.sim.Policy (select_dataflows(..., "
                        f"evaluate=True)), got {type(policy).__name__}")
    hw, run = policy.hw, policy.runs["hybrid"]
    name = getattr(hw, "name", "") or "the target"
    err, source = calibrated_error(policy.calibration)
    out = [f"A measured trace of this workload on {name}: every figure here is the analytical model's; the error "
           f"bound used ({err:.1%}) is the {source}."]
    spilled = float(run.ops["spilled_bytes"].sum()) if "spilled_bytes" in run.ops else 0.0
    n_spill = int((run.ops["spilled_bytes"].values > 0).sum()) if "spilled_bytes" in run.ops else 0
    out.append(f"Finite memory not validated: the replay's fit-or-refetch SRAM model charges {spilled / 1e6:.4g} MB "
               f"of refetch and spill traffic in {n_spill} ops under the policy; no DRAM counters were measured."
               if spilled > 0 else
               "Finite memory not exercised: every op's working set fits on chip in the replay (no refetch or "
               "spill), which no measurement confirms.")
    # the machine's thermal parameters, found by their documented role (the field table says "thermal")
    thermal = [f for f, spec in FIELDS.items() if "thermal" in f or "thermal" in str(spec[1]).lower()]
    mechanisms = [str(m) for m in run.summary["mechanism"].values]
    unattributed = {h["mechanism"] for h in hypotheses(run) if not h["attributed"]}
    if thermal or "thermal" in mechanisms:
        shown = ", ".join(f"{f} = {float(np.asarray(getattr(hw, f))):g}" for f in thermal) or "the thermal model"
        out.append(f"Thermal parameters are assumptions (preset defaults, not measured on {name}): {shown}."
                   + (" No throttling is attributed to these runs: sustained operation was not analysed here "
                      "(run.with_thermal(run.thermal(inferences)) weighs it)." if "thermal" in unattributed else ""))
    else:
        out.append("Thermal behaviour is not modelled by this build: sustained-load throttling is unknown.")
    out.append("Quality: the policy changes no number format (dataflows only), so no accuracy evidence is needed; a "
               "precision change would need dfit_nb.precision's drift figures first."
               + (" No time is attributed to the word width (run.with_precision(narrower_run) weighs it)."
                  if "precision" in unattributed else ""))
    if policy.tail is None:
        out.append("p95/p99 under batch variance not computed: call policy.with_batch_variance(make_args, base) "
                   "(make_args(**sizes) builds the function's arguments at other sizes).")
    return out


def _mix(mix: Mapping[int, float] | Sequence[int] | None, base: int) -> tuple[np.ndarray, np.ndarray]:
    """``(batch sizes, weights)`` from ``{size: probability}`` or a sample of sizes
    (:func:`dfit_nb.sim._rescale.size_distribution`); ``None``: :data:`DEFAULT_BATCH_MIX`, multiples of ``base``."""
    if mix is None:
        mix = {base * k: p for k, p in DEFAULT_BATCH_MIX.items()}
    try:
        return size_distribution(mix)
    except ShapeError as err:
        raise MemoError(str(err)) from None


def batch_variance(policy: Any, make_args: Callable[..., Sequence[Any]], base: Mapping[str, int],
                   batch_sizes: Mapping[int, float] | Sequence[int] | None = None, axis: str = "batch",
                   quantiles: Sequence[float] = QUANTILES) -> xr.Dataset:
    """Latency and energy of the policy and of its baseline (the best single style) over a distribution of batch
    sizes, with their quantiles: one vmapped replay over every (size, policy) pair.

    The trace's op table is rescaled to each size by :mod:`dfit_nb.sim._rescale` (one extra capture at twice the
    base size measures how each column grows); the replays are the scalar replay of
    :func:`dfit_nb.sim._batch.summarize`, vmapped over sizes and the two assignments in one compiled call.

    Parameters
    ----------
    policy : Policy
        An evaluated policy (it knows its trace and machine).
    make_args : callable
        ``make_args(**sizes)`` -> the function's positional arguments at those sizes.
    base : dict
        The sizes of the captured trace, e.g. ``{"batch": 2}``; must include ``axis``.
    batch_sizes : dict or sequence, optional
        ``{batch size: probability}``, or a sample of batch sizes; default :data:`DEFAULT_BATCH_MIX` (multiples of
        the base batch).
    axis : str
        The size axis that varies.
    quantiles : sequence of float

    Returns
    -------
    xarray.Dataset
        Dims ``size``, ``policy`` (``"policy"``, ``"baseline"``) and ``quantile``: ``latency_s`` and ``energy_j``
        per size, ``weight``, ``latency_q`` and ``energy_q`` (the smallest value whose cumulative probability
        reaches q), ``mean_latency_s``.
    """
    if policy.trace is None or policy.hw is None or policy.baselines is None:
        raise MemoError("batch variance needs an evaluated policy that knows its trace and machine "
                        "(select_dataflows(trace, hw, evaluate=True))")
    check_base(base, axis, MemoError)
    qs = np.asarray(check_quantiles(quantiles, MemoError), np.float64)
    sizes, weights = _mix(batch_sizes, int(base[axis]))
    exps = exponents(policy.trace, make_args, base)
    lat, eng = replay_sizes(policy, exps, {axis: sizes / base[axis]})
    labels = ["policy", "baseline"]
    lq = np.stack([_weighted_quantiles(lat[:, j], weights, qs) for j in range(2)])
    eq = np.stack([_weighted_quantiles(eng[:, j], weights, qs) for j in range(2)])
    return xr.Dataset(
        {"latency_s": (("size", "policy"), lat, {"units": "s", "description": "replayed latency at each size"}),
         "energy_j": (("size", "policy"), eng, {"units": "J", "description": "replayed energy at each size"}),
         "weight": ("size", weights / weights.sum(), {"units": "1", "description": "probability of the size"}),
         "latency_q": (("policy", "quantile"), lq, {"units": "s", "description": "latency quantile over sizes"}),
         "energy_q": (("policy", "quantile"), eq, {"units": "J", "description": "energy quantile over sizes"}),
         "mean_latency_s": ("policy", (lat * weights[:, None]).sum(0) / weights.sum(),
                            {"units": "s", "description": "mean latency over sizes"})},
        coords={"size": sizes.astype(np.int64), "policy": labels, "quantile": qs},
        attrs={"axis": axis, "base": ",".join(f"{k}={v}" for k, v in base.items()),
               "baseline": str(policy.baselines.attrs["best_single"]), "policy_name": policy.name,
               "hardware": policy.hw.name,
               "mix": "default (multiples of the base batch: " + ", ".join(
                   f"{k}x {v:g}" for k, v in DEFAULT_BATCH_MIX.items()) + ")" if batch_sizes is None else "given"},
    )


def replay_sizes(policy: Any, exps: xr.Dataset, factors: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(latency_s, energy_j)`` shaped ``(points, 2)``: the policy and its baseline (the best single style)
    replayed on the trace's op table rescaled by each point of ``factors`` (size / base per axis, equal lengths),
    in one vmapped call of the scalar replay."""
    hw = policy.hw
    prep = prepare(policy.trace, policy.fusion, splits_rows(hw))
    n_points = len(next(iter(factors.values())))
    best = str(policy.baselines.attrs["best_single"])
    per_op = np.asarray(policy.per_op, dtype=object)
    per_op = per_op[prep.op] if len(per_op) != len(prep.op) else per_op  # aligned with trace.ops, as replay reads it
    codes = np.stack([_codes(np.where(per_op == "", "ws", per_op)), _codes(np.full(len(prep.op), best))])
    def at(i: int) -> Any:
        return padded(scaled(prep, exps, {k: float(v[i]) for k, v in factors.items()}), codes[0],
                      pinned_layouts(prep, None))

    first = at(0)
    grid = schedule.bucket(int(hw.tile_rows), int(hw.tile_cols))
    # every (size, assignment) pair is one replay of the vmapped call, all at once: a sample of many distinct
    # sizes is checked against the memory before the op tables of every size are built
    replay_estimate(f"batch variance over {n_points} distinct sizes", first[0]["m"].shape[0], first[1].shape[1],
                    int(hw.tile_rows), int(hw.tile_cols), None, machines=2 * n_points,
                    padded_to=(grid.rows, grid.cols)).check(
        "give fewer distinct batch sizes (each is one more replay: round a sample, e.g. to powers of two)")
    rows = [first, *(at(i) for i in range(1, n_points))]
    arrays = {k: np.stack([r[0][k] for r in rows]) for k in rows[0][0]}
    pred_bytes = np.stack([r[2] for r in rows])
    preds, pin = rows[0][1], rows[0][4]
    n = len(prep.op)
    dfs = np.concatenate([codes, np.zeros((2, arrays["m"].shape[1] - n))], axis=1)
    tables = schedule.grid_tables(int(hw.tile_rows), int(hw.tile_cols), grid)
    machines = program_copy(Hardware.stack([hw]))
    reconfig = np.array([policy.reconfig_cycles, policy.reconfig_pj], np.float64)
    spatial = hw.execution == "spatial"
    program = batch_program(n_points * len(dfs), arrays["m"].shape[1])

    def one(ops: Any, pb: Any, df: Any) -> Any:
        return program(ops, preds, pb, tables, machines, df, pin, grid, spatial, True, reconfig)

    # every (size, assignment) pair in one call: sizes on the outer axis, the two assignments on the inner
    with jax.enable_x64(True):
        out = jax.device_get(jax.vmap(lambda ops, pb: jax.vmap(lambda df: one(ops, pb, df))(jnp.asarray(dfs)))(
            arrays, pred_bytes))
    return np.asarray(out["latency_s"])[..., 0], np.asarray(out["energy_j"])[..., 0]


def artifacts(policy: Any, runs: dict[str, Any], labels: list[str]) -> dict[str, Any]:
    """The playbook's artifacts of a policy (``policy.artifacts``; see :class:`~dfit_nb.sim.Policy`): reuse-factor
    map, buffer-pressure profile and traffic mix, all from its replays ``runs`` (``labels``: the policies in order,
    the hybrid last)."""
    # reuse: MACs per byte of each operand moved at SRAM and DRAM, as the policy's own replay moved them
    per_op = runs["hybrid"].ops.sel(op=policy.choices["op"].values)
    levels, operands = ("sram", "dram"), ("input", "weight", "output")
    moved = {("sram", "input"): "sram_reads_input", ("sram", "weight"): "sram_reads_weight",
             ("sram", "output"): "sram_writes_output", ("dram", "input"): "dram_reads_input",
             ("dram", "weight"): "dram_reads_weight", ("dram", "output"): "dram_writes_output"}
    macs = per_op["macs"].values
    reuse = np.stack([np.stack([np.where(per_op[moved[lv, o]].values > 0, macs / np.maximum(
        per_op[moved[lv, o]].values, 1.0), 0.0) for o in operands], axis=-1) for lv in levels], axis=1)
    reuse_ds = xr.Dataset(
        {"reuse": (("op", "level", "operand"), reuse,
                   {"units": "MAC/B", "description": "MACs per byte of the operand moved at the level (0: none)"}),
         "dataflow": ("op", policy.choices["dataflow"].values, {"units": ""}),
         "region": ("op", policy.choices["region"].values, {"units": ""})},
        coords={"op": policy.choices["op"].values, "level": list(levels), "operand": list(operands)})
    occ = [runs[k].cube["sram_occupancy"] for k in labels]
    pressure = xr.Dataset(
        {"mean": (("policy", "bin"), np.stack([o.mean(("tile_y", "tile_x")).values for o in occ]),
                  {"units": "1", "description": "SRAM occupancy averaged over tiles"}),
         "busiest": (("policy", "bin"), np.stack([o.max(("tile_y", "tile_x")).values for o in occ]),
                     {"units": "1", "description": "SRAM occupancy of the fullest tile"}),
         "bin_start_s": (("policy", "bin"), np.stack([runs[k].cube["time"].values / (runs[k].attrs["clock_ghz"] * 1e9)
                                                      for k in labels]), {"units": "s"})},
        coords={"policy": labels, "bin": np.arange(occ[0].sizes["time"])})
    mix = xr.concat([runs[k].cube["traffic"] for k in labels], dim=xr.DataArray(labels, dims="policy"),
                    join="outer", fill_value=0.0)
    return {"reuse": reuse_ds, "buffer_pressure": pressure, "traffic_mix": mix.to_dataset(name="bytes")}
