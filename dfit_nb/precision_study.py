"""Precision with quality evidence: reduced-precision GEMM/conv inputs, their output drift and their price.

:func:`precision` runs a captured program with the inputs of its ``dot_general`` and ``conv_general_dilated`` ops
reduced to a narrower format (cast, or fake-quantised) and every other op in the program's own dtypes, and
measures how far the outputs drift from the program's own run, for every GEMM at once and for one region at a
time (to find which layers carry the drift). With a machine (``hw=``) the same formats are priced by replaying
the trace with those ops' dtype changed (narrower words: fewer bytes, more fits in SRAM, cheaper MACs), so the
energy and latency win sits next to its quality cost. :func:`precision_verdict` then says, per format, whether
the win is backed by the evidence: a precision change is never recommended without it.

How the program runs
--------------------
The captured jaxpr (``trace.jaxpr``) is walked by capture's own walker
(:func:`dfit_nb.capture.walk.walk_closed_jaxpr`), so op ids and region paths are those of ``trace.ops``, and its
tagged copy is evaluated by a small interpreter, jitted once per format: leaf equations are bound as they are;
``jit``, ``remat``, ``custom_jvp`` and ``custom_vjp`` calls are inlined (their primal computation); ``scan``,
``while`` and ``cond`` are rebuilt with ``lax.scan``, ``lax.while_loop`` and ``lax.switch`` over interpreted
bodies. Each GEMM's inputs pass through ``where(reduce[op], quantise(x), x)``, ``reduce`` a traced mask, so
every region's run reuses one compiled program. GEMMs inside a primitive dfit_nb has no rule for (an "opaque"
container) are run as they are and not reduced.

Formats (:data:`FORMATS`): floating operands of each GEMM are rounded to the format and back to their own dtype
(float32 in a float32 program), and the GEMM computes in that dtype afterwards:

* ``bf16``, ``fp16``: a cast (``fp16`` overflows to inf beyond 65504, as a plain cast does);
* ``fp8_e4m3``, ``fp8_e5m2``: a per-tensor scale mapping the tensor's largest magnitude to the format's largest
  finite value (448, 57344), the cast, and the scale undone;
* ``int8``: symmetric fake-quantisation, ``clip(round(x / s), -127, 127) * s``, with ``s = amax / 127``: one
  scale per output channel for the weight-like operand (the right-hand operand of ``dot_general``, reduced over
  its contracting dimensions, so batch dimensions get their own scales; the kernel of a convolution, per output
  feature) and one per tensor for the activation (the left-hand operand).

Scales come from each tensor at run time (dynamic quantisation, no calibration set).

Metrics, per floating output leaf (non-floating leaves are listed in ``attrs["skipped_outputs"]``):
``max_abs_error`` ``max |y - y_ref|``, ``rel_error`` ``||y - y_ref|| / ||y_ref||`` (2-norms over every
element), ``cosine`` (1 when both are zero) and ``top1_agreement``, the share of rows (every index of the
leading axes) whose argmax over the last axis agrees, for outputs that look like logits: **floating, at least
1-D, last axis longer than 1** (``logits=`` overrides the rule). The reference is the float32 run: the captured
program itself (``jax.jit`` of ``trace.jaxpr``); ``attrs["interpreter_max_abs_diff"]`` is how far the
interpreter with nothing reduced lands from it (0 when XLA compiles both alike), the floor below which drift
means nothing.

Pricing: the reduced GEMMs' rows of ``trace.ops`` get the format's dtype (``dtype``, their floating inputs in
``trace.operands`` and so ``in_shapes``, ``bytes_read``, ``bytes_written``) and the edges into them the format's
bytes, and the modified trace is replayed (:func:`dfit_nb.replay`). The machine model charges an op's words at its
dtype's width cast down to ``hw.word_bytes`` and the MAC energy of that width
(:func:`dfit_nb.sim.machine.word_and_mac_energy`), so a format no narrower than the machine's native word changes
nothing there. The whole GEMM (its output included) is priced at the format's width; every other op keeps its dtype.

The formats and the interpreter are :mod:`dfit_nb._quantise`, the pricing :mod:`dfit_nb._precision_price`, the
checks of the inputs :mod:`dfit_nb._precision_inputs`; their public names are importable from here too.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.extend.core as jcore
import jax.numpy as jnp
import numpy as np
import xarray as xr

from ._html import render
from ._precision_inputs import PrecisionError as PrecisionError
from ._precision_inputs import check_formats, logits_flags, output_names, region_of, trace_and_args
from ._precision_price import price
from ._precision_price import reduced_trace as reduced_trace
from ._quantise import FORMATS as FORMATS
from ._quantise import Format as Format
from ._quantise import Interpreter
from ._version import __version__
from .capture import Trace
from .capture.walk import walk_closed_jaxpr
from .errors import OpaquePrimitiveWarning
from .sim import REPLAY_DATAFLOWS
from .sim.hardware import check_hardware
from .sim.machine import word_and_mac_energy

#: the primitives whose inputs a format reduces
GEMM_PRIMITIVES = ("dot_general", "conv_general_dilated")
#: the ``region`` entry holding every GEMM reduced at once
ALL = "(all)"
#: the formats :func:`precision` measures unless told
DEFAULT_FORMATS = ("bf16", "fp8_e4m3", "int8")
#: the default drift tolerance of :func:`precision_verdict`: worst output's ``rel_error``
DEFAULT_TOLERANCE = 0.01
#: the default least ``top1_agreement`` of :func:`precision_verdict` on logits outputs
DEFAULT_MIN_TOP1 = 0.99
#: the rule naming the regions that carry the drift (:func:`precision_verdict`)
CARRIER_RULE = ("regions whose drift when reduced alone exceeds the tolerance; when none does, the fewest regions, "
                "largest first, whose drifts sum to at least half of all regions' drifts")
LOGITS_RULE = "floating, at least 1-D, last axis longer than 1"


# variable -> (units, description)
VARIABLES: dict[str, tuple[str, str]] = {
    "max_abs_error": ("output units", "largest |reduced - float32| over the output's elements"),
    "rel_error": ("1", "||reduced - float32|| / ||float32||, 2-norms over the output's elements"),
    "cosine": ("1", "cosine similarity of the reduced and float32 outputs (1 when both are zero)"),
    "top1_agreement": ("1", "share of rows whose argmax over the last axis agrees with the float32 run; NaN for "
                            f"outputs that are not logits ({LOGITS_RULE})"),
    "is_logits": ("", f"whether top-1 agreement is measured on the output ({LOGITS_RULE}, or logits=)"),
    "gemm_ops": ("1", "dot_general / conv_general_dilated ops reduced in the region"),
    "gemm_flops": ("FLOP", "FLOPs per call of the region's reduced ops (flops x count)"),
    "word_bytes": ("B", "bytes of the word the machine prices the format's GEMMs at: the format's width cast "
                        "down to hw.word_bytes"),
    "latency_s": ("s", "replayed latency with the region's GEMMs in the format"),
    "energy_j": ("J", "replayed energy with the region's GEMMs in the format"),
    "joules_per_inference": ("J", "replayed energy per inference with the region's GEMMs in the format"),
    "dram_bytes": ("B", "replayed DRAM traffic with the region's GEMMs in the format (what no longer fits SRAM)"),
    "latency_ratio": ("1", "latency_s / the float32 replay's"),
    "energy_ratio": ("1", "energy_j / the float32 replay's"),
    "dram_bytes_ratio": ("1", "dram_bytes / the float32 replay's (1 when both are 0)"),
    "float32_latency_s": ("s", "replayed latency of the program as captured"),
    "float32_energy_j": ("J", "replayed energy of the program as captured"),
    "float32_joules_per_inference": ("J", "replayed energy per inference of the program as captured"),
    "float32_dram_bytes": ("B", "replayed DRAM traffic of the program as captured"),
}


def _var(dims: Any, values: Any, name: str) -> tuple[Any, Any, dict[str, str]]:
    units, description = VARIABLES[name]
    return (dims, values, {"units": units, "description": description})


# ---------------------------------------------------------------------------------------------------- outputs
def _metrics(ref: Any, out: Any, logits: bool) -> tuple[float, float, float, float]:
    r, o = np.asarray(ref, np.float64).ravel(), np.asarray(out, np.float64).ravel()
    d = o - r
    max_abs = float(np.max(np.abs(d))) if d.size else 0.0
    nr, no, nd = (float(np.linalg.norm(v)) for v in (r, o, d))
    rel = nd / nr if nr > 0 else (0.0 if nd == 0 else math.inf)
    cos = float(np.dot(r, o)) / (nr * no) if nr > 0 and no > 0 else (1.0 if nr == no == 0 else 0.0)
    top1 = math.nan
    if logits:
        a, b = np.asarray(ref, np.float64), np.asarray(out, np.float64)
        top1 = float(np.mean(np.argmax(a, axis=-1) == np.argmax(b, axis=-1)))
    return max_abs, rel, cos, top1


# ------------------------------------------------------------------------------------------------------ study
def precision(trace_or_fn: Trace | Callable[..., Any], *args: Any, formats: Sequence[str] | str = DEFAULT_FORMATS,
              hw: Any = None, dataflow: Any = "ws", region_depth: int | None = None,
              logits: bool | Sequence[str | int] | None = None, inferences: int = 1,
              **kwargs: Any) -> PrecisionStudy:
    """Output drift of reduced-precision GEMM/conv inputs, globally and region by region, and its price.

    Parameters
    ----------
    trace_or_fn : Trace or callable
        A function (captured here, static mode) or a :class:`~dfit_nb.Trace` from :func:`dfit_nb.capture` (it must
        hold its jaxpr: a trace loaded from disk does not).
    *args, **kwargs
        The function's arguments, concrete arrays (the program runs): the same pytree ``capture`` took.
    formats : str or sequence of str
        Names in :data:`FORMATS`: ``bf16``, ``fp16``, ``fp8_e4m3``, ``fp8_e5m2``, ``int8``.
    hw : Hardware, optional
        A machine to price the formats on (:func:`dfit_nb.replay` of the trace with the GEMMs' dtype changed);
        ``None``: quality only.
    dataflow : {"ws", "os", "is", "hybrid"}
        The replay's dataflow (default ``"ws"``); ``"hybrid"`` selects one per format and region. A
        :class:`~dfit_nb.sim.Policy` is refused: it is tied to the op table it was selected on.
    region_depth : int, optional
        Group regions by their first ``region_depth`` path segments (``None``: each GEMM's full region path).
    logits : bool or sequence of output names / indices, optional
        Which outputs get ``top1_agreement``; ``None`` applies the rule (floating, at least 1-D, last axis
        longer than 1); ``True`` / ``False`` every floating output / none.
    inferences : int
        Inferences one call serves (the replay's ``joules_per_inference``).

    Returns
    -------
    PrecisionStudy
        ``.data``: an ``xarray.Dataset`` over (``format``, ``region``, ``output``); the ``region`` entry
        :data:`ALL` (``"(all)"``) reduces every GEMM at once, each other entry one region alone (its path as in
        ``trace.ops["region"]``, ``""`` the root). ``.verdict(tolerance)``: :func:`precision_verdict`.

    Raises
    ------
    PrecisionError
        An unknown format (the valid ones are named), no ``dot_general`` / ``conv_general_dilated`` op to
        reduce, no floating output, arguments that do not fit the trace, shape specs instead of arrays, a trace
        without its jaxpr, ``hw`` not one :class:`~dfit_nb.sim.Hardware`.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, dfit_nb
    >>> def mlp(w1, w2, x):
    ...     with jax.named_scope("hidden"):
    ...         h = jnp.tanh(x @ w1)
    ...     with jax.named_scope("head"):
    ...         return h @ w2
    >>> k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
    >>> w1, w2 = jax.random.normal(k1, (32, 64)) / 6, jax.random.normal(k2, (64, 10)) / 8
    >>> x = jax.random.normal(k3, (16, 32))
    >>> hw = dfit_nb.sim.presets.get("npu_like").replace(word_bytes=4)  # a float32 datapath
    >>> study = dfit_nb.precision(mlp, w1, w2, x, formats=("bf16", "int8"), hw=hw)
    >>> study.data["region"].values.tolist()
    ['(all)', 'head', 'hidden']
    >>> rel = study.data["rel_error"].sel(region="(all)", output="out")
    >>> bool(0 < rel.sel(format="bf16") < rel.sel(format="int8") < 0.05)
    True
    >>> [round(float(v), 2) for v in study.data["energy_ratio"].sel(region="(all)")]  # vs float32
    [0.49, 0.24]
    >>> verdict = study.verdict(tolerance=0.01)
    >>> verdict["backed"].values.tolist(), verdict["recommended"].values.tolist()
    ([True, False], [True, False])
    """
    fmts = check_formats(formats)
    if not isinstance(dataflow, str):
        raise PrecisionError(f"dataflow must be a name ({', '.join(REPLAY_DATAFLOWS)}), got "
                             f"{type(dataflow).__name__}: a Policy is tied to the op table it was selected on, "
                             "which a format changes; 'hybrid' selects one per format and region")
    if dataflow.lower() not in REPLAY_DATAFLOWS:
        raise PrecisionError(f"unknown dataflow {dataflow!r}; valid: {', '.join(REPLAY_DATAFLOWS)}")
    if hw is not None:
        check_hardware(hw, "precision()", error=PrecisionError, also_valid="or None (quality only)")
    # a NumPy integer (np.int64(2), from an array of depths) is a whole number too
    if region_depth is not None and (isinstance(region_depth, bool) or not isinstance(region_depth, (int, np.integer))
                                     or region_depth < 1):
        raise PrecisionError(f"region_depth must be None or a whole number >= 1, got {region_depth!r}")
    # inferences divides the replayed energy, after the whole study, and is recorded as a whole number: checked
    # first, so a 0 or a fraction fails before the work and is never priced one way and recorded another
    if isinstance(inferences, bool) or not isinstance(inferences, (int, np.integer)) or inferences < 1:
        raise PrecisionError(f"inferences must be a whole number >= 1 (the inferences one call serves), got "
                             f"{inferences!r}")
    trace, dyn = trace_and_args(trace_or_fn, args, kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OpaquePrimitiveWarning)  # capture warned already
        walk = walk_closed_jaxpr(trace.jaxpr)
    ops = trace.ops
    if len(walk.records) != ops.sizes["op"] or any(
            r.primitive != p for r, p in zip(walk.records, ops["primitive"].values, strict=True)):
        raise PrecisionError("the trace's jaxpr does not match its ops table; capture the function again")

    # the GEMMs to reduce: live dot/conv ops the interpreter reaches (not inside an opaque container)
    def under_opaque(op: int) -> bool:
        parent = walk.records[op].parent
        while parent >= 0:
            if walk.records[parent].container == "opaque":
                return True
            parent = walk.records[parent].parent
        return False

    live = ops["live"].values.astype(bool)
    gemm_all = [r.id for r in walk.records if r.primitive in GEMM_PRIMITIVES and live[r.id]]
    gemms = [o for o in gemm_all if not under_opaque(o)]
    if not gemms:
        raise PrecisionError(
            f"{trace.attrs.get('function', 'the function')} has no dot_general or conv_general_dilated op"
            + (" outside primitives dfit_nb cannot look into" if gemm_all else "")
            + ": precision() reduces the inputs of GEMMs and convolutions only, so there is nothing to reduce")
    if len(gemms) < len(gemm_all):
        warnings.warn(f"{len(gemm_all) - len(gemms)} GEMM op(s) inside primitives without a cost rule run in their "
                      "own precision (not reduced)", OpaquePrimitiveWarning, stacklevel=2)
    slot = {o: i for i, o in enumerate(gemms)}
    region_path = [region_of(str(ops["region"].values[o]), region_depth) for o in gemms]
    regions = sorted(set(region_path))
    masks = np.zeros((1 + len(regions), len(gemms)), bool)
    masks[0] = True
    for j, reg in enumerate(regions):
        masks[1 + j] = [r == reg for r in region_path]

    # the float32 run: the captured program itself
    reference = jax.jit(jcore.jaxpr_as_fun(trace.jaxpr))(*dyn)
    names = output_names(trace, args, kwargs, len(reference))
    floating = [bool(jnp.issubdtype(x.dtype, jnp.floating)) for x in reference]
    if not any(floating):
        described = ", ".join(f"{n}: {x.dtype}{list(x.shape)}" for n, x in zip(names, reference, strict=True))
        raise PrecisionError(f"no output of {trace.attrs.get('function', 'the function')} is floating point "
                             f"({described or 'it returns nothing'}): drift is measured on floating outputs")
    kept = [i for i, f in enumerate(floating) if f]
    nonfinite = [int(np.size(x) - np.isfinite(np.asarray(x)).sum()) if floating[k] else 0
                 for k, x in enumerate(reference)]
    bad = [(names[k], c, int(np.size(reference[k]))) for k, c in enumerate(nonfinite) if c]
    if bad:  # drift against a NaN or inf reference has no meaning: every format would read inf or NaN
        described = ", ".join(f"{n} ({c} of {size} elements)" for n, c, size in bad)
        raise PrecisionError(f"the float32 run of {trace.attrs.get('function', 'the function')} gives NaN or inf in "
                             f"{described}: drift is measured against a finite reference; give inputs whose "
                             "float32 outputs are finite")
    flags = logits_flags(list(reference), names, logits)

    shape = (len(fmts), 1 + len(regions), len(kept))
    metric = {k: np.full(shape, np.nan) for k in ("max_abs_error", "rel_error", "cosine", "top1_agreement")}
    floor = 0.0
    for i, fmt in enumerate(fmts):
        interp = Interpreter(walk, slot, fmt)
        run = jax.jit(lambda mask, *a, interp=interp: interp(walk.tagged, mask, a))
        if i == 0:  # nothing reduced: how far the interpreter lands from the program itself
            plain = run(jnp.zeros(len(gemms), bool), *dyn)
            floor = max((float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)), initial=0.0))
                         for k, (a, b) in enumerate(zip(plain, reference, strict=True)) if floating[k]), default=0.0)
        for j, mask in enumerate(masks):
            outs = run(jnp.asarray(mask), *dyn)
            for c, k in enumerate(kept):
                values = _metrics(reference[k], outs[k], flags[k])
                for name, v in zip(("max_abs_error", "rel_error", "cosine", "top1_agreement"), values, strict=True):
                    metric[name][i, j, c] = v

    region_coord = [ALL, *regions]
    flops = ops["flops"].values.astype(np.float64) * ops["count"].values.astype(np.float64)
    gemm_flops = [float(flops[[o for o, m in zip(gemms, mask, strict=True) if m]].sum()) for mask in masks]
    dims3 = ("format", "region", "output")
    data = {name: _var(dims3, values, name) for name, values in metric.items()}
    data["is_logits"] = _var("output", np.array([flags[k] for k in kept]), "is_logits")
    data["gemm_ops"] = _var("region", masks.sum(axis=1).astype(np.int64), "gemm_ops")
    data["gemm_flops"] = _var("region", np.array(gemm_flops), "gemm_flops")
    attrs: dict[str, Any] = {
        "description": "output drift of reduced-precision GEMM/conv inputs against the float32 run, every GEMM at "
                       f"once (region {ALL!r}) and one region at a time, with the formats priced on a machine",
        "function": str(trace.attrs.get("function", "")), "arg_shapes": str(trace.attrs.get("arg_shapes", "")),
        "dfit_nb_version": __version__, "jax_version": jax.__version__,
        "reference": "the captured program run as is (jax.jit of trace.jaxpr)",
        "interpreter_max_abs_diff": floor,
        "logits_rule": LOGITS_RULE if logits is None else f"given: {logits!r}",
        "skipped_outputs": ", ".join(f"{names[k]} ({reference[k].dtype})" for k in range(len(names))
                                     if not floating[k]),
        "region_depth": -1 if region_depth is None else int(region_depth),
        "hardware": "" if hw is None else str(hw.name),
    }
    if hw is not None:
        region_ops = [[o for o, m in zip(gemms, mask, strict=True) if m] for mask in masks]
        priced, base = price(trace, hw, dataflow, inferences, region_ops, fmts)
        for k in ("latency_s", "energy_j", "joules_per_inference", "dram_bytes"):
            data[k] = _var(("format", "region"), priced[k], k)
            data[f"float32_{k}"] = _var((), base[k], f"float32_{k}")
        data["latency_ratio"] = _var(("format", "region"), priced["latency_s"] / base["latency_s"], "latency_ratio")
        data["energy_ratio"] = _var(("format", "region"), priced["energy_j"] / base["energy_j"], "energy_ratio")
        dram = priced["dram_bytes"] / base["dram_bytes"] if base["dram_bytes"] > 0 else np.where(
            priced["dram_bytes"] > 0, np.inf, 1.0)
        data["dram_bytes_ratio"] = _var(("format", "region"), dram, "dram_bytes_ratio")
        native = float(np.asarray(hw.word_bytes))
        # the word the one machine model charges (machine.word_and_mac_energy), not a restatement of its rule
        word, _ = word_and_mac_energy(np.array([float(f.itemsize) for f in fmts]), hw, np)
        data["word_bytes"] = _var("format", np.asarray(word, np.float64), "word_bytes")
        attrs.update(native_word_bytes=native, execution=str(hw.execution),
                     dataflow=dataflow.lower(), inferences=int(inferences))
    coords = {
        "format": ("format", [f.name for f in fmts], {"description": "reduced format of GEMM/conv inputs"}),
        "format_dtype": ("format", [f.dtype for f in fmts], {"description": "the format's NumPy / ml_dtypes name"}),
        "format_bytes": ("format", np.array([f.itemsize for f in fmts], np.int64),
                         {"units": "B", "description": "bytes per element of the format"}),
        "region": ("region", region_coord, {"description": f"{ALL!r}: every GEMM reduced at once; else the region "
                                                           "reduced alone ('' the root), all others as captured"}),
        "output": ("output", [names[k] for k in kept], {"description": "output leaf (jax.tree_util.keystr path)"}),
    }
    return PrecisionStudy(xr.Dataset(data, coords=coords, attrs=attrs))


# ---------------------------------------------------------------------------------------------------- verdict
def _check_tolerance(name: str, value: Any, upper: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not (math.isfinite(value) and 0 <= value <= upper):
        bound = f"between 0 and {upper:g}" if math.isfinite(upper) else "finite and >= 0"
        raise PrecisionError(f"{name} must be a number {bound}, got {value!r}")
    return float(value)


def precision_verdict(study: PrecisionStudy | xr.Dataset, tolerance: float = DEFAULT_TOLERANCE, *,
                      metric: str = "rel_error", min_top1: float = DEFAULT_MIN_TOP1) -> xr.Dataset:
    """Per format: is the win backed by quality evidence, and which regions carry the drift.

    A format is **backed** when, with every GEMM reduced, the worst output's ``metric`` is within
    ``tolerance`` (``rel_error`` and ``max_abs_error``: at most; ``cosine``: at least ``1 - tolerance``) and
    every logits output keeps ``top1_agreement >= min_top1``. It **wins** when the replay prices it below
    float32 (energy or latency ratio under 1; unknown without ``hw``). It is **recommended** only when both
    hold: a precision change is never recommended without its quality evidence. The **carriers** are the
    regions that carry the drift (:data:`CARRIER_RULE`), by each region's drift when reduced alone.

    Returns an ``xarray.Dataset`` over ``format``: ``backed``, ``win``, ``recommended`` (bool), ``drift`` (the
    measured value), ``top1`` (the worst logits output's agreement, NaN without one), ``carriers`` (regions,
    comma-separated) and ``reason`` (a sentence); the rule in ``attrs``.

    >>> import jax.numpy as jnp, dfit_nb
    >>> x = jnp.linspace(-1.0, 1.0, 64).reshape(8, 8)
    >>> v = precision_verdict(dfit_nb.precision(lambda a: a @ a.T, x, formats="bf16"), tolerance=0.05)
    >>> bool(v["backed"].item()), bool(v["recommended"].item())
    (True, False)
    >>> print(v["reason"].item())  # doctest: +ELLIPSIS
    bf16: drift backed (rel_error ... <= 0.05; top-1 agreement 1, least 0.99); not priced (hw=None): no win to
    recommend; not recommended. Drift carried by: <root>
    """
    ds = getattr(study, "data", study)
    if not isinstance(ds, xr.Dataset) or "rel_error" not in ds or "format" not in ds.dims \
            or "region" not in ds.dims or ALL not in ds["region"].values:  # the verdict reads region "(all)"
        raise PrecisionError(f"precision_verdict() needs the result of dfit_nb.precision (or its .data, with its "
                             f"{ALL!r} region), got {type(study).__name__}")
    metrics = ("rel_error", "max_abs_error", "cosine")
    if metric not in metrics:
        raise PrecisionError(f"unknown metric {metric!r}; valid: {', '.join(metrics)}")
    tolerance = _check_tolerance("tolerance", tolerance, 2.0 if metric == "cosine" else math.inf)
    min_top1 = _check_tolerance("min_top1", min_top1, 1.0)
    values = ds[metric]
    drift_all = values.sel(region=ALL)
    # the worst output: the largest error, or the smallest cosine
    worst = drift_all.min("output") if metric == "cosine" else drift_all.max("output")
    within = worst >= 1.0 - tolerance if metric == "cosine" else worst <= tolerance
    logits = ds["is_logits"].values.astype(bool)
    top1 = ds["top1_agreement"].sel(region=ALL).isel(output=np.flatnonzero(logits))
    worst_top1 = top1.min("output") if logits.any() else xr.full_like(worst, np.nan)
    top1_ok = (worst_top1 >= min_top1) | ~logits.any()
    backed = within & top1_ok
    priced = "energy_ratio" in ds
    regions = [r for r in ds["region"].values.tolist() if r != ALL]
    rows: dict[str, list[Any]] = {k: [] for k in ("win", "recommended", "carriers", "reason")}
    for f in ds["format"].values.tolist():
        ok, t1, d = bool(backed.sel(format=f)), float(worst_top1.sel(format=f)), float(worst.sel(format=f))
        # drift per region reduced alone: a cosine's drift is 1 - cosine
        per = values.sel(format=f, region=regions)
        per = (1.0 - per.min("output")) if metric == "cosine" else per.max("output")
        carriers = _carriers([str(r) for r in regions], np.nan_to_num(per.values, nan=np.inf),
                             tolerance)
        sign = ">=" if metric == "cosine" else "<="
        shown = f"{metric} {d:.3g} {sign} {1.0 - tolerance if metric == 'cosine' else tolerance:g}"
        text = f"{f}: drift backed ({shown}" if ok else f"{f}: drift NOT backed ({metric} {d:.3g}, tolerance " \
            f"{tolerance:g}"
        if not math.isnan(t1):
            text += f"; top-1 agreement {t1:.3g}, least {min_top1:g}"
        text += ")"
        if priced:
            e = float(ds["energy_ratio"].sel(format=f, region=ALL))
            lat = float(ds["latency_ratio"].sel(format=f, region=ALL))
            win = bool(e < 1.0 - 1e-9 or lat < 1.0 - 1e-9)
            text += f"; energy x{e:.3g}, latency x{lat:.3g} vs float32"
            if not win:
                word = ds.attrs.get("native_word_bytes")
                text += (f" (no win: the machine's native word, {word:g} B, is no wider than the format's)"
                         if word is not None and float(ds["word_bytes"].sel(format=f)) >= word else " (no win)")
        else:
            win = None
            text += "; not priced (hw=None): no win to recommend"
        rec = bool(ok and win)
        text += "; recommended" if rec else ("; not recommended: the drift exceeds the tolerance" if not ok
                                             else "; not recommended")
        if carriers:
            text += f". Drift carried by: {', '.join(c or '<root>' for c in carriers)}"
        rows["win"].append(np.nan if win is None else float(win))
        rows["recommended"].append(rec)
        rows["carriers"].append(", ".join(c or "<root>" for c in carriers))
        rows["reason"].append(text)
    out = xr.Dataset(
        {
            "backed": ("format", backed.values.astype(bool),
                       {"description": "drift within the tolerance with every GEMM reduced (and top-1 kept)"}),
            "win": ("format", np.array(rows["win"]), {"description": "1 when the replay prices the format below "
                                                                     "float32 (energy or latency), 0 when not, "
                                                                     "NaN without hw"}),
            "recommended": ("format", np.array(rows["recommended"], bool),
                            {"description": "backed and a win: the only formats recommended"}),
            "drift": ("format", worst.values, {"units": "1" if metric != "max_abs_error" else "output units",
                                               "description": f"worst output's {metric}, every GEMM reduced"}),
            "top1": ("format", worst_top1.values, {"units": "1", "description": "worst logits output's top-1 "
                                                                                "agreement (NaN: no logits)"}),
            "carriers": ("format", np.array(rows["carriers"], dtype=object),
                         {"description": CARRIER_RULE}),
            "reason": ("format", np.array(rows["reason"], dtype=object), {"description": "the verdict in words"}),
        },
        coords={"format": ds["format"].values},
        attrs={"metric": metric, "tolerance": tolerance, "min_top1": min_top1,
               "rule": "recommended = backed (drift within tolerance, top-1 kept on logits) and a priced win; "
                       "never without the quality evidence", "carrier_rule": CARRIER_RULE},
    )
    return out


def _carriers(regions: list[str], drift: np.ndarray, tolerance: float) -> list[str]:
    order = np.argsort(-drift, kind="stable")
    over = [regions[i] for i in order if drift[i] > tolerance]
    if over:
        return over
    total = float(np.sum(drift))
    if not regions or total <= 0:
        return []
    picked, acc = [], 0.0
    for i in order:
        picked.append(regions[i])
        acc += float(drift[i])
        if acc >= total / 2:
            break
    return picked


@dataclasses.dataclass(frozen=True)
class PrecisionStudy:
    """What :func:`precision` measured: ``data`` (an ``xarray.Dataset``) and :meth:`verdict`."""

    data: xr.Dataset

    def verdict(self, tolerance: float = DEFAULT_TOLERANCE, **options: Any) -> xr.Dataset:
        """:func:`precision_verdict` of this study."""
        return precision_verdict(self, tolerance, **options)

    def __repr__(self) -> str:
        d = self.data
        parts = []
        for f in d["format"].values.tolist():
            s = f"{f} rel {float(d['rel_error'].sel(format=f, region=ALL).max()):.3g}"
            if "energy_ratio" in d:
                s += f" energy x{float(d['energy_ratio'].sel(format=f, region=ALL)):.3g}"
            parts.append(s)
        where = f" on {d.attrs['hardware']}" if d.attrs.get("hardware") else ""
        return (f"<dfit_nb.PrecisionStudy {d.attrs.get('function', '?')}{where}: {d.sizes['region'] - 1} region(s), "
                f"{'; '.join(parts)}>")

    def _repr_html_(self) -> str:
        d = self.data
        v = self.verdict()
        priced = "energy_ratio" in d
        head = ["format", "worst rel error", "worst cosine", "top-1", *(["energy x", "latency x"] if priced else []),
                f"backed (rel <= {DEFAULT_TOLERANCE:g})", "drift carried by"]
        rows = []
        for f in d["format"].values.tolist():
            sel = d.sel(format=f, region=ALL)
            top1 = float(v["top1"].sel(format=f))
            cells = [f, f"{float(sel['rel_error'].max()):.3g}", f"{float(sel['cosine'].min()):.6g}",
                     "-" if math.isnan(top1) else f"{top1:.3g}"]
            if priced:
                cells += [f"{float(sel['energy_ratio']):.3g}", f"{float(sel['latency_ratio']):.3g}"]
            cells += ["yes" if bool(v["backed"].sel(format=f)) else "no", str(v["carriers"].sel(format=f).item())]
            rows.append(cells)
        return render("precision_study.html.j2", title=repr(self), head=head, rows=rows)
