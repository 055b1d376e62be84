"""``capture(fn, *args, mode=...)``: trace, walk, lower, optionally measure."""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.extend.core as jcore
import numpy as np

from .._memory import device_available_bytes, human
from .._version import __version__
from ..errors import CaptureError, DfitError
from . import counts as counts_mod
from . import probes, tables
from . import regions as regions_mod
from ._jax_internals import metadata_in_cache_key
from .costs import aval_nbytes as costs_nbytes
from .lowering import build_fusion_map, hlo_module_name
from .trace import Overhead, Trace
from .walk import XLA_MAX_BYTES, ArrayInfo, Walk, walk_closed_jaxpr

MODES = ("static", "profile", "eager")

WhileHint = int | Mapping[int | str, int] | None


def is_dynamic(leaf: Any) -> bool:
    """Arrays and shape specs are traced; everything else is static (as equinox's filter_jit)."""
    return isinstance(leaf, (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct))


def _describe(leaf: Any) -> str:
    shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
    return f"{dtype}[{','.join(map(str, shape))}]" if shape is not None else repr(leaf)


def _fn_name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__name__", None) or getattr(type(fn), "__name__", "fn")


def _source_info(fn: Callable[..., Any], name: str) -> str:
    """``name at file:line`` where ``fn``'s code is (as JAX names a traced function), else ``name``."""
    try:
        code = inspect.unwrap(fn).__code__
        return f"{name} at {code.co_filename}:{code.co_firstlineno}"
    except (AttributeError, ValueError):  # a builtin, a callable object, a __wrapped__ cycle
        return name


def _check_flattenable(args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> None:
    """Refuse an argument JAX cannot flatten as a pytree (a dict whose keys do not sort, such as ``{1: x, "1":
    x}``), naming it: else JAX's bare ValueError ("Comparator raised exception while sorting pytree dictionary
    keys") named neither the argument nor the function."""
    named = [(f"argument {i}", a) for i, a in enumerate(args)] + [(f"keyword argument {k!r}", v)
                                                                    for k, v in kwargs.items()]
    for which, value in named:
        try:
            jax.tree_util.tree_flatten(value)
        except (ValueError, TypeError) as err:
            cause = f"{err}: {err.__cause__}" if err.__cause__ is not None else str(err)
            raise CaptureError(
                f"cannot capture {name}: its {which} cannot be flattened as a pytree ({cause}); JAX sorts a dict's "
                "keys, so the keys of each dict must be of one comparable type (all str, or all int)") from err


def _check_option_arrays(fn: Any, options: dict[str, Any]) -> None:
    """Refuse an array given to one of capture's own options: a keyword argument of ``fn`` named like one
    (``mode``, ``regions``, ``while_trips``, ...) is taken by capture, not passed to ``fn``, and was refused as,
    say, "unknown mode Array([...])", which did not say why."""
    for option, value in options.items():
        if isinstance(value, (jax.Array, np.ndarray, jax.ShapeDtypeStruct)):
            try:
                takes = option in inspect.signature(fn).parameters
            except (TypeError, ValueError):
                takes = False
            name = _fn_name(fn)
            whose = f"{name} takes a parameter {option!r} whose name clashes with it" if takes else (
                f"a keyword argument of {name} of that name clashes with it")
            raise TypeError(
                f"capture() got an array ({_describe(value)}) as {option}=, which is capture's own option, never "
                f"passed to the function: {whose}; pass it with functools.partial({name}, {option}=...) or a "
                f"wrapper (lambda *a: {name}(*a, {option}=...)) and capture that")


def _check_inputs(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], mode: str, while_trips: Any,
                  profile: dict[str, Any] | None = None, budget_s: Any = probes.DEFAULT_PROFILE_BUDGET_S,
                  ci_pct: Any = probes.DEFAULT_PROFILE_CI_PCT) -> None:
    if not callable(fn):
        raise TypeError(f"capture() needs a callable as its first argument, got {type(fn).__name__}: {fn!r:.80}")
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; valid modes: {', '.join(MODES)}")
    # checked in every mode, before tracing: profile mode with no rounds or calls has no time to take a median of
    for name, value in (profile or {}).items():
        if value is None:  # chosen from profile_budget_s
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be None (chosen from profile_budget_s) or a whole number >= 1 (profile "
                            f"mode times profile_rounds blocks of profile_calls calls), got {type(value).__name__} "
                            f"{value!r}")
        if value < 1:
            raise ValueError(f"{name} must be >= 1: profile mode times at least one round of one call; got {value}")
    # a budget of zero, NaN or infinity sizes nothing: refuse it here rather than time 2 calls or loop forever
    if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float, np.integer, np.floating)):
        raise TypeError(f"profile_budget_s must be a positive finite number of seconds (e.g. 2.0), "
                        f"got {type(budget_s).__name__} {budget_s!r}")
    if not (math.isfinite(budget_s) and budget_s > 0):
        raise ValueError(f"profile_budget_s must be a positive finite number of seconds (e.g. 2.0), got {budget_s}")
    if isinstance(ci_pct, bool) or not isinstance(ci_pct, (int, float, np.integer, np.floating)):
        raise TypeError(f"profile_ci_pct must be a number of percentage points >= 0 (e.g. 3.0; 0 spends the whole "
                        f"budget), got {type(ci_pct).__name__} {ci_pct!r}")
    if not (math.isfinite(ci_pct) and ci_pct >= 0):
        raise ValueError(f"profile_ci_pct must be a finite number of percentage points >= 0 (e.g. 3.0; 0 spends the "
                         f"whole budget), got {ci_pct}")
    if (while_trips is not None and not isinstance(while_trips, (int, Mapping))) or isinstance(while_trips, bool):
        raise TypeError(
            "while_trips must be None, an int (every while loop), or a mapping from a while op id (int) "
            f"or region path (str) to an int; got {type(while_trips).__name__}"
        )
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins and some C callables have no signature: let tracing decide
    try:
        sig.bind(*args, **kwargs)
    except TypeError as err:
        raise TypeError(f"arguments do not match {_fn_name(fn)}{sig}: {err}") from err


# ------------------------------------------------------------------------------------------------ sizes

#: the most a FLOP or byte count of one op, or of the whole program, may be: the tables hold them as int64
COUNT_MAX = 2**63 - 1


def _number(n: float) -> str:
    """``2**80`` for a power of two from 2**20 on, ``2**63 - 1``, else exact: ``1,048,575``."""
    n = int(n)
    if n >= 2**20 and n & (n - 1) == 0:
        return f"2**{n.bit_length() - 1}"
    if n >= 2**20 and (n + 1) & n == 0:
        return f"2**{n.bit_length()} - 1"
    return f"{n:,}"


def _where(walk: Walk, a: ArrayInfo) -> str:
    """Where an array comes from, for a message: ``op 2 (mul, region '<root>', at f.py:3) output 0``."""
    if a.op < 0:
        return f"argument leaf {a.index}" if a.role == "input" else f"closed-over constant {a.index}"
    r = walk.records[a.op]
    at = f", at {r.source}" if r.source else ""
    op = f"op {r.id} ({r.primitive}, region {r.region or '<root>'!r}{at})"
    if a.role == "output":
        return f"{op} output {a.index}" if len(r.outputs) > 1 else op
    return f"{'constant' if a.role == 'constant' else 'input'} {a.index} of the {r.context or 'inner'} jaxpr of {op}"


def _check_representable(walk: Walk, name: str) -> None:
    """Refuse, before XLA's compiler aborts the process on it, a program with an array XLA cannot represent."""
    if not walk.unrepresentable:
        return
    a = walk.unrepresentable[0]
    more = len(walk.unrepresentable) - 1
    size = (f"{_number(a.elements)} elements x {a.itemsize} bytes = {_number(a.nbytes)} bytes" if a.elements else
            "no elements, but its byte width times its dimensions in order overflows before the 0")
    raise CaptureError(
        f"cannot capture {name}: {_where(walk, a)} {'makes' if a.role == 'output' else 'is'} {a.describe()} "
        f"({size}); XLA cannot represent an array "
        f"of 2**63 bytes or more (at most {_number(XLA_MAX_BYTES)} bytes: fewer than {_number(2**63 // a.itemsize)} "
        f"{a.dtype} elements) and its compiler would abort the whole process, so no mode captures it, not even "
        f"mode='static' (which allocates nothing but still compiles); make the arrays smaller"
        + (f" ({more} more array(s) too big)" if more else "")
    )


def _check_countable(walk: Walk, name: str, count: np.ndarray | None = None) -> None:
    """Refuse a program whose FLOP or byte counts do not fit the tables' 64-bit integers: an op of arrays XLA
    represents can still read and write more than 2**63 bytes (the lowering table sums them per fusion) or do
    2**64 FLOPs, which would fail deep in NumPy.

    ``count``: executions per call of each op (scan trip counts multiply). Without it (before the counts are
    known) the counts per execution are checked; with it, the counts per call, which nested scans can push past
    64 bits from ops that are small on their own (a bare ``OverflowError`` in the region table before).
    """
    if not walk.records:
        return
    counts = {"FLOPs": lambda c: c.flops, "transcendentals": lambda c: c.transcendentals,
              "bytes read and written": lambda c: c.bytes_read + c.bytes_written}
    times = [1.0] * len(walk.records) if count is None else [float(c) for c in count]
    for what, of in counts.items():
        # Python ints per execution, times a float count: exact below 2**53, and never wraps around
        values = [(of(r.cost) * t, of(r.cost), t, r) for r, t in zip(walk.records, times, strict=True)]
        total = sum(v for v, *_ in values)
        if total <= COUNT_MAX:
            continue
        value, each, t, r = max(values, key=lambda v: v[0])
        op = (f"op {r.id} ({r.primitive}, region {r.region or '<root>'!r}, {r.in_shapes or 'no inputs'} -> "
              f"{r.out_shapes})")
        per = "per execution" if count is None else f"per call ({_number(each)} per execution x {t:.6g} executions)"
        scope = (f"{op} has {_number(value)} {what} {per}" if value > COUNT_MAX else
                 f"its ops have {_number(total)} {what} per call (the most: {op}, {_number(value)} {per})")
        fix = "make the arrays smaller" if count is None else "make the arrays smaller or the scans shorter"
        raise CaptureError(f"cannot capture {name}: {scope}, more than dfit_nb's 64-bit counts hold (at most "
                           f"{_number(COUNT_MAX)}); {fix}")


def _compiled_bytes(compiled: Any) -> int | None:
    """What one call of the compiled program allocates: its outputs and temporaries (XLA's memory analysis)."""
    try:
        stats = compiled.memory_analysis()
        return int(stats.output_size_in_bytes) + int(stats.temp_size_in_bytes)
    except Exception:  # a backend without the analysis
        return None


#: the containers eager mode enters and runs op by op (probes._EagerInterpreter); any other op runs whole
_EAGER_ENTERED = ("scan", "while", "cond", *probes.ENTERED_CALLS)


def _eager_peak(walk: Walk, jaxpr: Any) -> tuple[int, int]:
    """(bytes, ops): the most eager mode holds at once while it interprets ``jaxpr``, counting only what always
    runs, and how many op outputs that sums.

    The interpreter keeps every op's output until the jaxpr's run ends (its environment), so the outputs add up;
    a container it enters also holds its own run's outputs while it runs. Not counted, as they may not run: a cond's
    branches but the smallest (one of them runs), a while body, a scan body of length 0.
    """
    held = ops = peak = 0
    for eqn in jaxpr.eqns:
        out = sum(_nbytes(v.aval) for v in eqn.outvars if type(v).__name__ != "DropVar")
        op = walk.eqn_op.get(id(eqn))
        inner, inner_ops = 0, 0
        if op is not None and walk.records[op].container in _EAGER_ENTERED:
            record = walk.records[op]
            p = eqn.params
            if record.container == "cond":
                inner, inner_ops = min((_eager_peak(walk, _opened(b)) for b in p["branches"]), default=(0, 0))
            elif record.container == "while":
                inner, inner_ops = _eager_peak(walk, _opened(p["cond_jaxpr"]))
            elif record.container == "scan":
                if p["length"] > 0:  # one step's run at a time, beside the list of every step's ys it stacks
                    inner, inner_ops = _eager_peak(walk, _opened(p["jaxpr"]))
                    inner += sum(_nbytes(v.aval) for v in eqn.outvars[p["num_carry"]:])
            else:  # the first jaxpr among its params, as the interpreter picks it
                sub = next((v for v in p.values() if isinstance(v, (jcore.ClosedJaxpr, jcore.Jaxpr))), None)
                if sub is not None:
                    inner, inner_ops = _eager_peak(walk, _opened(sub))
        peak = max(peak, held + max(inner, out))
        held += out
        ops += 1 + inner_ops
    return max(peak, held), ops


def _opened(j: Any) -> Any:
    return j.jaxpr if isinstance(j, jcore.ClosedJaxpr) else j


def _nbytes(aval: Any) -> int:
    try:
        return costs_nbytes(aval)
    except Exception:  # a symbolic (shape-polymorphic) dimension: no static size
        return 0


def _check_runtime_memory(walk: Walk, compiled: Any, closed: Any, name: str, mode: str) -> None:
    """Refuse a runtime capture that must allocate more than the device has free, before running anything.

    Eager mode runs every op on its own and keeps each output until the run ends, so the outputs of the ops that
    always run add up (:func:`_eager_peak`; comparing only the largest of them let three 4 GiB products and their
    three broadcasts through where one fitted, and the process was killed). Both modes run the compiled program,
    whose outputs and temporaries (XLA's memory analysis; else its largest output) are allocated; there fusion may
    never materialise an intermediate (``sum(outer(a, b))`` allocates nothing of the outer product), so that is
    profile mode's only figure.
    """
    needs: list[tuple[int, str]] = []
    if mode == "eager" and walk.largest is not None:  # first: on a tie, the message names the op
        a = walk.largest
        held, ops = _eager_peak(walk, walk.tagged.jaxpr)
        needs.append((max(held, a.nbytes),
                      f"eager mode runs every op on its own and keeps each output until the run ends: the outputs "
                      f"of the {ops} op(s) that always run come to {human(max(held, a.nbytes))} at once (the "
                      f"largest: {_where(walk, a)} makes {a.describe()}, {_number(a.elements)} elements, "
                      f"{human(a.nbytes)})"))
    outs = [v.aval for v in closed.jaxpr.outvars if getattr(v.aval, "shape", None) is not None]
    largest_out = max(outs, key=costs_nbytes, default=None)
    out_note = (f"; its largest output is {_shape_str(largest_out)}, {human(costs_nbytes(largest_out))}"
                if largest_out is not None else "")
    program = _compiled_bytes(compiled)
    if program is not None:
        needs.append((program, f"the compiled program's outputs and temporaries come to {human(program)} "
                               f"(XLA's memory analysis{out_note})"))
    elif largest_out is not None:
        needs.append((costs_nbytes(largest_out), f"its output {_shape_str(largest_out)} takes "
                                                 f"{human(costs_nbytes(largest_out))}"))
    if not needs:
        return
    need, why = max(needs, key=lambda n: n[0])
    free, device = device_available_bytes()
    if need > free:
        raise CaptureError(
            f"cannot capture {name} in mode={mode!r}: {why}, more than the {human(free)} free on {device}; "
            f"use mode='static', which allocates nothing (or give smaller arrays)")


def _conventions_attrs(walk: Walk, ops: Any) -> dict[str, Any]:
    """Where the counts knowingly differ from a plain op-by-op count, named on ``trace.lowering.attrs``.

    ``merged_ops_note``: the op pairs counted as XLA counts what it merges them into (costs/conventions.py);
    ``conv_gemm_view_padding_macs``: the MACs the GEMM view (``m x k x n`` per convolution, what the replay maps)
    counts beyond ``flops / 2``: padding taps and dilation holes, which the FLOP count leaves out as XLA does.
    """
    kinds = {"clamp": "min/max pair(s) counted as one clamp, as XLA merges them (jnp.clip, relu6)",
             "pad_into_conv": "explicit zero pad(s) folded into the following convolution's padding, as XLA "
                              "folds them (its padding taps not counted)"}
    parts = []
    for kind, what in kinds.items():
        found = [m for m in walk.merged if m[0] == kind]
        if found:
            parts.append(f"{len(found)} {what}: {_number(sum(m[3] for m in found))} FLOPs per execution fewer "
                         f"than counting each op alone (ops {', '.join(str(m[2]) for m in found[:8])}"
                         f"{', ...' if len(found) > 8 else ''})")
    conv = ops["op_class"].values == "conv"
    count = ops["count"].values[conv].astype(np.float64)
    view = (ops["m"].values[conv] * ops["k"].values[conv] * ops["n"].values[conv]
            * np.maximum(ops["batch"].values[conv], 1)).astype(np.float64)
    padding = float(((view - ops["flops"].values[conv] / 2) * count).sum())
    return {"merged_ops_note": "; ".join(parts) or "none",
            "conv_gemm_view_padding_macs": round(padding),
            "conv_gemm_view_note": "the GEMM view of convolutions (m x k x n, what the replay maps) counts "
                                   "padding taps and dilation holes as MACs; flops do not (XLA's convention): "
                                   "replay MACs = sum(flops) / 2 + conv_gemm_view_padding_macs on convolutions"}


def _shape_str(aval: Any) -> str:
    return f"{aval.dtype}[{','.join(map(str, aval.shape))}]"


def _resolve_while_hints(walk: Walk, while_trips: WhileHint) -> tuple[dict[int, float], dict[int, str]]:
    whiles = [r for r in walk.records if r.container == "while"]
    trips: dict[int, float] = {}
    sources: dict[int, str] = {}
    if while_trips is None:
        return trips, sources
    if isinstance(while_trips, int):
        items: list[tuple[int | str, Any]] = [(r.id, while_trips) for r in whiles]
    else:
        items = list(while_trips.items())
    available = ", ".join(f"{r.id} ({r.region or '<root>'})" for r in whiles) or "none"
    for key, value in items:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise TypeError(f"while_trips[{key!r}] must be a non-negative int, got {value!r}")
        if isinstance(key, bool) or not isinstance(key, (int, str)):
            raise TypeError(f"while_trips keys must be op ids (int) or region paths (str), got {key!r}")
        targets = [r for r in whiles if (r.id == key if isinstance(key, int) else r.region == key)]
        if not targets:
            raise ValueError(f"while_trips key {key!r} names no while loop; while loops (op id (region)): {available}")
        for r in targets:
            trips[r.id] = float(value)
            sources[r.id] = "hint"
    return trips, sources


@dataclasses.dataclass
class _Control:
    """While trip counts and cond branch fractions, and where each came from."""

    trips: dict[int, float]
    trip_sources: dict[int, str]
    fracs: dict[int, list[float]] = dataclasses.field(default_factory=dict)
    branch_source: str = "assumed"

    def update_from_profile(self, walk: Walk, m: probes.Measurement) -> None:
        def counts_for(trips, fracs):
            return counts_mod.assign_counts(walk.records, trips=trips, trip_sources={}, branch_fractions=fracs,
                                            branch_source="assumed")[0]

        self.trips, self.fracs, measured = probes.infer_control(
            walk.records, m.exec_per_call, counts_for, self.trips, self.fracs, m.loops_seen)
        self.trip_sources = {**self.trip_sources, **{op: "measured" for op in measured if op in self.trips}}
        if any(op in measured for op in self.fracs):
            self.branch_source = "measured"

    def update_from_eager(self, m: probes.Measurement) -> None:
        self.trips = {**self.trips, **m.trips}
        self.trip_sources = {**self.trip_sources, **{op: "measured" for op in m.trips}}
        self.fracs = {**self.fracs, **m.branch_fractions}
        self.branch_source = "measured"


def _check_lower_for(lower_for: Any, mode: str) -> None:
    if lower_for is None:
        return
    if not isinstance(lower_for, jax.Device):
        raise TypeError(f"lower_for must be a jax.Device (jax.devices()[0], or a device of an ahead-of-time "
                        f"topology such as jax.experimental.topologies.get_topology_desc(platform='tpu', "
                        f"topology_name='v4:2x2x1').devices[0]), got {type(lower_for).__name__} {lower_for!r:.80}")
    if mode != "static":
        raise ValueError(f"lower_for={lower_for} compiles the program for that device; mode={mode!r} times it on "
                         f"this process's default device instead. Use mode='static' with lower_for, or drop it")


def _placed(dyn: list[Any], device: Any) -> list[Any]:
    """The traced arguments as shapes on ``device`` (the lowering then compiles for that device's backend), or
    unchanged when no device is asked for."""
    if device is None:
        return dyn
    sharding = jax.sharding.SingleDeviceSharding(device)
    return [jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=sharding) for x in dyn]


def capture(
    fn: Callable[..., Any],
    *args: Any,
    mode: str = "static",
    while_trips: WhileHint = None,
    profile_rounds: int | None = None,
    profile_calls: int | None = None,
    profile_budget_s: float = probes.DEFAULT_PROFILE_BUDGET_S,
    profile_ci_pct: float = probes.DEFAULT_PROFILE_CI_PCT,
    regions: str = "both",
    param_args: int | str | Sequence[int | str] | None = None,
    lower_for: Any = None,
    **kwargs: Any,
) -> Trace:
    """Capture a JAX function as an instrumented graph IR.

    Parameters
    ----------
    fn : callable
        A JAX-traceable function (jitted or not).
    *args, **kwargs
        Its arguments: any pytree. Array leaves (``jax.Array``, NumPy arrays)
        and ``jax.ShapeDtypeStruct`` leaves are traced; every other leaf is
        static (closed over), like ``equinox.filter_jit``.
    mode : {"static", "profile", "eager"}
        ``static`` executes nothing; ``profile`` runs the compiled program under
        ``jax.profiler`` and attributes per-HLO-instruction times to ops and
        regions; ``eager`` times every primitive on its own. Runtime modes need
        concrete arrays, not shape specs.
    while_trips : int or mapping, optional
        Static trip-count hints for while loops: one int for all, or a
        mapping from op id or region path to an int. Unhinted loops are
        assumed to run once (``count_source == "assumed"``); runtime modes
        measure them.
    profile_rounds, profile_calls : int, optional
        Profile mode runs ``profile_rounds`` blocks of ``profile_calls``
        plain calls, each followed by a block of profiled calls. A number
        given is used exactly; ``None`` (the default) is chosen from
        ``profile_budget_s``.
    profile_budget_s : float, default 2.0
        Seconds profile mode aims to spend on its timed calls, plain and
        profiled together (the profiler writing and reading its events
        included), when ``profile_rounds`` or ``profile_calls`` is ``None``.
        Like ``timeit.Timer.autorange``, one plain and one profiled call are
        timed first (twice when cheap: a first run carries one-time costs)
        and the counts are sized from them: at most
        ``budget / (plain + profiled)`` call pairs, in 2 to 20 rounds of at
        least one call. Rounds sized from the budget stop early, after 3,
        once the overhead's 95% interval is within ``profile_ci_pct``. A call
        slower than about a quarter of the budget still gets 2 rounds of 1
        call, so the spread between rounds can be reported. The sizing pair
        and one warm-up call come on top (a model at 0.5 s a call: 7 calls
        in all). What was used is recorded in ``trace.attrs``:
        ``profile_rounds`` (run), ``profile_max_rounds`` (the most the budget
        held), ``profile_calls``, ``profile_budget_s``, ``profile_ci_pct``,
        ``profile_sizing`` (which counts came from the budget) and, when any
        did, ``profile_probe_s`` (the seconds the sizing pair of calls took).
    profile_ci_pct : float, default 3.0
        Profile mode stops adding rounds once the overhead's 95% interval
        (``trace.overhead.interval_percent``) is within this many percentage
        points either side of its estimate; 0 spends the whole budget. Raise
        ``profile_budget_s`` for a narrower interval on a slow model.
    regions : {"both", "params", "scopes"}, default "both"
        How ops are grouped into regions (``trace.ops["region"]``).
        ``"scopes"``: the named scopes and nested-jit paths of JAX's name
        stack. ``"params"``: the model parameter each op works for: an op
        that reads a parameter leaf (directly or through reshapes,
        transposes, converts, broadcasts) takes that leaf's path without its
        last key (``blocks/3/attn/qkv/kernel`` -> ``blocks/3/attn/qkv``);
        an op between such anchors takes the region of its latest producer
        that has one (backward and optimizer ops: of their first consumer
        that has one), else of the other side. ``"both"``: a named scope
        that names one layer apart (Linen, Keras), or that the user entered
        around no parameter, is kept; elsewhere (NNX, Equinox, optax
        updates, a nested ``jit(fn)`` alone) the parameter region is used.
        Parameters are the leaves of pytree arguments reached through a
        named key (dict key, attribute): not bare array arguments, not the
        items of a plain tuple or list such as a batch ``(x, labels)``.
        JAX's transform wrappers (``jvp``, ``transpose``, ``vmap``) never
        become path segments: ``trace.ops["direction"]`` says ``forward``,
        ``backward`` (under ``transpose``) or ``optimizer`` (reads an
        optimizer state, such as optax's ``mu`` / ``nu``, or follows the
        backward pass), and when a program has more than one direction
        every region starts with it (``forward/conv0``, ``backward/conv0``,
        ``optimizer/conv0``). The full rule: ``dfit_nb.capture.regions``.
        With no parameter among the arguments, regions are the scopes; a
        function that closes over arrays then gets a
        :class:`~dfit_nb.capture.regions.ParameterRegionWarning`.
    param_args : int, str or sequence of them, optional
        The positional indices (or keyword names) of the arguments that hold
        the parameters, when the default rule above picks wrongly (a batch
        passed as a dict, weights passed as bare arrays): every leaf of
        them is a parameter, and no other leaf is.
    lower_for : jax.Device, optional
        The device whose compiler lowers the program, so that the fusion map
        (``trace.lowering``, ``trace.ops["fusion"]``, and the replay's
        ``fusion="compiler"``) is the one *that* compiler makes. By default
        the program is compiled for this process's default device (on a
        laptop, XLA's CPU backend, whose fusions are not an accelerator's).
        The device need not be attached: with Google's ``libtpu`` installed,
        JAX compiles ahead of time for a TPU topology on a machine without
        one (``jax.experimental.topologies.get_topology_desc(platform="tpu",
        topology_name="v4:2x2x1").devices[0]``). Only with ``mode="static"``:
        the runtime modes time the program on the default device. Recorded
        in ``trace.attrs["backend"]`` and ``trace.attrs["device_kind"]``.

    Returns
    -------
    Trace

    Raises
    ------
    TypeError
        ``fn`` is not callable, the arguments do not fit its signature, or a
        hint has the wrong type.
    ValueError
        Unknown ``mode``, a hint naming no while loop, ``profile_rounds`` or ``profile_calls`` below 1, or
        ``profile_budget_s`` not a positive finite number (a wrong type is a ``TypeError``).
    CaptureError
        JAX failed to trace or compile ``fn`` (its error is chained); or, refused before lowering, an array of
        the program (an argument or any intermediate, nested jaxprs included) that XLA cannot represent
        (2**63 bytes or more: its compiler would abort the process), or FLOP or byte counts beyond 64 bits; or,
        in a runtime mode, refused before running, a program that must allocate more than the device has free
        (eager: the outputs of the ops that always run, which it keeps until the run ends; both: the
        compiled program's outputs and temporaries), with the advice to use ``mode="static"``. Also a region or op
        name (a named scope, a function name, a parameter key, a primitive) holding a control character (Unicode
        categories Cc, Zl, Zp: NUL, tab, newline, U+2028, U+2029, ...), shown with ``repr``.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, dfit_nb
    >>> def f(x, w):
    ...     with jax.named_scope("layer"):
    ...         return jnp.tanh(x @ w)
    >>> t = dfit_nb.capture(f, jax.ShapeDtypeStruct((8, 16), jnp.float32), jnp.ones((16, 4)))
    >>> t.ops[["primitive", "region", "flops", "m", "k", "n"]].to_dataframe()
       primitive region  flops  m   k  n
    op
    0  dot_general  layer    1024  8  16  4
    1         tanh  layer       0  0   0  0

    Flax NNX and Equinox models are captured through their split into a pure
    function of arrays (the recipe; shown here with Equinox):

    >>> import equinox as eqx
    >>> model = eqx.nn.MLP(4, 2, 8, 1, key=jax.random.PRNGKey(0))
    >>> params, static = eqx.partition(model, eqx.is_array)
    >>> t = dfit_nb.capture(lambda p, x: eqx.combine(p, static)(x), params, jnp.ones(4))
    >>> int(t.ops["flops"].where(t.ops["primitive"] == "dot_general", 0).sum())
    96

    With Flax NNX: ``graphdef, state = nnx.split(model)`` then
    ``dfit_nb.capture(lambda s, x: nnx.merge(graphdef, s)(x), state, x)``.

    Profile mode sizes its run from a time budget and says what it chose;
    counts given are kept as given:

    >>> x = jnp.ones((64, 64))
    >>> t = dfit_nb.capture(lambda a: jnp.tanh(a @ a), x, mode="profile", profile_budget_s=0.1)
    >>> t.attrs["profile_sizing"], t.attrs["profile_rounds"] >= 2, t.attrs["profile_calls"] >= 1
    ('budget', True, True)
    >>> t.overhead.n_calls == t.attrs["profile_rounds"] * t.attrs["profile_calls"]
    True
    >>> low, high = t.overhead.interval_percent  # the overhead's 95% interval over the rounds
    >>> bool(low <= t.overhead.percent <= high)
    True
    >>> t = dfit_nb.capture(lambda a: jnp.tanh(a @ a), x, mode="profile", profile_rounds=2, profile_calls=3)
    >>> t.attrs["profile_sizing"], t.attrs["profile_rounds"], t.attrs["profile_calls"], t.overhead.n_calls
    ('explicit', 2, 3, 6)

    Regions from parameters: a pytree of weights names the layers, with no
    named scope in the model:

    >>> params = {"dense0": {"w": jnp.ones((4, 8))}, "dense1": {"w": jnp.ones((8, 2))}}
    >>> def mlp(params, x):
    ...     return jnp.tanh(x @ params["dense0"]["w"]) @ params["dense1"]["w"]
    >>> t = dfit_nb.capture(mlp, params, jnp.ones((3, 4)))
    >>> t.ops[["primitive", "region", "direction"]].to_dataframe()
          primitive  region direction
    op
    0   dot_general  dense0   forward
    1          tanh  dense0   forward
    2   dot_general  dense1   forward
    """
    t_start = time.perf_counter()
    # first: an array here is a keyword argument of fn whose name is one of capture's options
    _check_option_arrays(fn, {"mode": mode, "while_trips": while_trips, "profile_rounds": profile_rounds,
                              "profile_calls": profile_calls, "profile_budget_s": profile_budget_s,
                              "profile_ci_pct": profile_ci_pct, "regions": regions, "param_args": param_args,
                              "lower_for": lower_for})
    _check_inputs(fn, args, kwargs, mode, while_trips,
                  {"profile_rounds": profile_rounds, "profile_calls": profile_calls}, profile_budget_s, profile_ci_pct)
    if not isinstance(regions, str) or regions not in regions_mod.REGION_MODES:
        raise ValueError(f"unknown regions={regions!r}; valid: {', '.join(map(repr, regions_mod.REGION_MODES))} "
                         f"(named scopes and parameter paths, parameter paths only, named scopes only)")
    if param_args is not None and not (isinstance(param_args, (int, str)) or (
            isinstance(param_args, Sequence) and all(isinstance(a, (int, str)) for a in param_args))):
        raise TypeError(f"param_args must be an argument position (int), a keyword name (str) or a sequence of "
                        f"them, got {type(param_args).__name__} {param_args!r}")
    _check_lower_for(lower_for, mode)
    _check_flattenable(args, kwargs, _fn_name(fn))
    param_leaves = regions_mod.parameter_leaves(fn, args, kwargs, param_args)
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
    dyn_pos = [i for i, leaf in enumerate(leaves) if is_dynamic(leaf)]
    dyn = [leaves[i] for i in dyn_pos]
    if mode != "static":
        specs = [f"leaf {i}: {_describe(leaves[i])}" for i in dyn_pos if isinstance(leaves[i], jax.ShapeDtypeStruct)]
        if specs:
            raise TypeError(
                f"mode={mode!r} executes the function, so every traced argument must be a concrete array; "
                f"got jax.ShapeDtypeStruct at {'; '.join(specs)}. Pass arrays, or use mode='static'."
            )

    def flat_fn(*dyn_leaves: Any) -> Any:
        full = list(leaves)
        for i, v in zip(dyn_pos, dyn_leaves, strict=True):
            full[i] = v
        a, k = jax.tree_util.tree_unflatten(treedef, full)
        return fn(*a, **k)

    name = _fn_name(fn)
    regions_mod.check_name(name, "the function name", name)
    try:
        closed = jax.make_jaxpr(flat_fn)(*dyn)
    except Exception as err:
        # JAX names the function it traced: flat_fn, this module's wrapper; the user's function is the one to name
        code = flat_fn.__code__
        said = str(err).replace(f"flat_fn at {code.co_filename}:{code.co_firstlineno}", _source_info(fn, name))
        raise CaptureError(f"JAX could not trace {name}: {type(err).__name__}: {said}") from err

    walk = walk_closed_jaxpr(closed)
    dyn_params = [param_leaves[i] for i in dyn_pos]
    if regions != "scopes" and not any(p is not None and p.region for p in dyn_params) and walk.const_arrays:
        warnings.warn(
            f"regions={regions!r}: {name} takes no parameters as arguments (no traced argument is a pytree leaf "
            f"under a named key, such as a dict of weights or a module) but closes over {walk.const_arrays} "
            f"array(s): its weights are constants, so regions fall back to named scopes. Pass the weights as an "
            f"argument (capture(model.apply, variables, x), not capture(lambda x: model.apply(variables, x), x)), "
            f"or name them with param_args=.", regions_mod.ParameterRegionWarning, stacklevel=2)
    regions_mod.assign_regions(walk.records, walk.edges, dyn_params, regions)
    # before anything is stored or lowered: a NUL or U+2028 in a name is lost or breaks a chart later (issue 42)
    regions_mod.check_names(walk.records, name)
    # before lowering: XLA's compiler aborts the process on an array it cannot represent; our counts are int64
    _check_representable(walk, name)
    _check_countable(walk, name)
    tagged_fn = jax.jit(jcore.jaxpr_as_fun(walk.tagged))
    try:
        lowered = tagged_fn.lower(*_placed(dyn, lower_for))
        # the tags are op names, which JAX's persistent cache key leaves out by default: keyed on them, a cached
        # program never comes back with another program's tags (a wrong fusion map)
        with metadata_in_cache_key():
            compiled = lowered.compile()
    except Exception as err:
        raise CaptureError(f"XLA could not lower/compile {name}: {type(err).__name__}: {err}") from err
    if mode != "static":  # before running: what the run must allocate, against what the device has free
        _check_runtime_memory(walk, compiled, closed, name, mode)
    hlo_text = compiled.as_text()
    # containers are known from the walk too: one whose inner ops were all optimised away is still a container
    fusion_map = build_fusion_map(hlo_text, containers=[r.id for r in walk.records if r.container])
    module = hlo_module_name(hlo_text)
    xla_cost = compiled.cost_analysis() or {}
    if isinstance(xla_cost, list):
        xla_cost = xla_cost[0] if xla_cost else {}
    xla_cost = {k: v for k, v in xla_cost.items() if k in ("flops", "transcendentals", "bytes accessed")}
    loops = sum(r.container in ("scan", "while") for r in walk.records)
    conds = sum(r.container == "cond" for r in walk.records)

    control = _Control(*_resolve_while_hints(walk, while_trips))
    control.fracs = counts_mod.static_branch_fractions(walk.records, control.trips)
    m = None
    try:
        if mode == "profile":
            m = probes.run_profile(jax.jit(flat_fn), compiled, dyn, walk=walk, fusion_map=fusion_map, module=module,
                                   rounds=profile_rounds, calls_per_round=profile_calls, budget_s=profile_budget_s,
                                   ci_pct=profile_ci_pct)
            control.update_from_profile(walk, m)
        elif mode == "eager":
            m = probes.run_eager(jax.jit(flat_fn), walk, dyn)
            control.update_from_eager(m)
    except DfitError:
        raise
    except Exception as err:  # the user's program failed as it ran (a callback raised, the device failed)
        hint = ("; another profiler trace is running in this process: stop it (jax.profiler.stop_trace()) or "
                "capture with mode='eager'") if mode == "profile" and "already been started" in str(err) else ""
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        # a callback's error arrives as a Python traceback inside JAX's message: its last line says what failed
        said = (lines[0].split(": Traceback")[0] + ": " + lines[-1] if len(lines) > 1 and "Traceback" in lines[0]
                else lines[0] if lines else "")
        raise CaptureError(f"{name} failed while running in mode={mode!r}: {type(err).__name__}: {said}{hint}") from err

    try:
        count, sources = counts_mod.assign_counts(
            walk.records, trips=control.trips, trip_sources=control.trip_sources, branch_fractions=control.fracs,
            branch_source=control.branch_source,
        )
    except CaptureError as err:  # a count past 64 bits: named with the function
        raise CaptureError(f"cannot capture {name}: {err}") from None
    _check_countable(walk, name, count)  # per call now: nested scans multiply counts past 64 bits
    time_s = np.full(len(walk.records), np.nan)
    if m is not None:
        time_s = np.where(count > 0, m.op_time_per_call / np.maximum(count, 1), np.nan)

    try:
        ops = tables.ops_dataset(walk, count, sources, control.trips, fusion_map, time_s)
        lowering = tables.lowering_dataset(
            fusion_map, ops, stablehlo=lowered.as_text(), hlo=hlo_text, xla_cost=xla_cost, module=module,
            executions=m.fusion_executions if mode == "profile" else None,
            times=m.fusion_time_s if mode == "profile" else None,
        )
    except OverflowError as err:  # a count _check_countable did not foresee (an HLO instruction's bytes)
        raise CaptureError(f"cannot capture {name}: a FLOP or byte count does not fit dfit_nb's 64-bit counts "
                           f"({err}); make the arrays smaller") from err
    # XLA's cost analysis is a per-program static count: say when it is not a per-call total
    notes = []
    if loops:
        notes.append(f"{loops} scan/while loop(s): XLA counts each loop body once, not per iteration")
    if conds:
        notes.append(f"{conds} cond(s): XLA counts the most expensive branch")
    lowering.attrs["xla_flops_note"] = "; ".join(notes) or "straight-line program: a per-call total"
    lowering.attrs.update(_conventions_attrs(walk, ops))

    attrs = {
        "function": name,
        "arg_shapes": "; ".join(_describe(leaf) for leaf in dyn),
        "static_args": "; ".join(_describe(leaves[i]) for i in range(len(leaves)) if i not in set(dyn_pos)),
        "dfit_nb_version": __version__,
        "jax_version": jax.__version__,
        "backend": jax.default_backend() if lower_for is None else lower_for.platform,
        "device_kind": (jax.devices() if lower_for is None else [lower_for])[0].device_kind,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "opaque_primitives": ",".join(walk.opaque_primitives),
        "regions": regions,
        "parameter_leaves": sum(p is not None for p in dyn_params),
    }
    if m is not None and m.sizing is not None:  # profile mode: the rounds and calls it ran, and why
        attrs.update(m.sizing.to_attrs())
    overhead = Overhead(mode=mode, capture_s=time.perf_counter() - t_start, **(
        {"baseline_s": m.baseline_s, "instrumented_s": m.instrumented_s, "n_calls": m.n_calls,
         "rounds": m.rounds, **dict(zip(("paired_ratio", "ratio_low", "ratio_high"), m.ratio or (), strict=False))}
        if m else {}))
    return Trace(
        ops=ops, edges=tables.edges_dataset(walk.edges, walk.input_edges), regions=tables.regions_dataset(ops),
        operands=tables.operands_dataset(walk),
        lowering=lowering, attrs=attrs, overhead=overhead, jaxpr=closed, fn=fn,
    )
