"""Runtime modes: measure the program on the host and report what measuring cost.

``profile``
    Runs the compiled program under ``jax.profiler`` and reads the per-HLO-
    instruction events back from the XSpace file (``jax.profiler.ProfileData``).
    An instruction's *exclusive* time (its span minus the instructions nested
    in it, e.g. a while loop minus its body) is split over the jaxpr ops it
    holds: each op gets the mean of its share of the instruction's FLOPs and
    its share of the instruction's unfused bytes (equal shares when both are
    zero). Event counts give executions per call, hence measured while-loop
    trip counts and cond branch frequencies.
``eager``
    Interprets the tagged jaxpr op by op, blocking after each primitive, and
    times every op; loops and branches run as they really do, so counts are
    exact. Slow by nature: its overhead is reported, not hidden.

Overhead is measured against the plain jitted call: blocks of plain calls and
blocks of instrumented calls alternate, and each side's median per-call time
is compared. Profile mode sizes those blocks from a time budget unless told
the counts (:func:`choose_profile_counts`), as ``timeit.Timer.autorange``
does: a fixed count took a minute on a model at 0.5 s a call (issue 15).
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.extend.core as jcore
import numpy as np

from ..errors import MeasurementWarning
from .lowering import FusionMap
from .profile_events import HloModuleMismatchError, find_xplane_files, read_hlo_op_timings
from .walk import OpRecord, Walk

#: seconds profile mode aims to spend on its timed calls when it chooses the counts (``capture(profile_budget_s=)``)
DEFAULT_PROFILE_BUDGET_S = 2.0
#: rounds chosen from the budget: two at least, so a spread between rounds exists; twenty at most, enough for the
#: t quantile of the overhead's interval to be near its limit (2.09 at 19 degrees of freedom, 1.96 at infinity)
MIN_AUTO_ROUNDS, MAX_AUTO_ROUNDS = 2, 20
#: half-width, in percentage points, of the overhead's 95% interval at which a budget-sized run stops adding rounds
#: (``capture(profile_ci_pct=)``)
DEFAULT_PROFILE_CI_PCT = 3.0
#: rounds a budget-sized run takes before its interval may stop it: with two, the t quantile is 12.7 and a chance
#: pair of near-equal rounds would end the run on an interval that means little
MIN_STOP_ROUNDS = 3
#: the confidence level of the overhead's interval
CI_LEVEL = 0.95


@dataclasses.dataclass(frozen=True)
class ProfileSizing:
    """How many profile-mode calls ran, and where the numbers came from."""

    rounds: int
    calls_per_round: int
    budget_s: float
    sizing: str  # "explicit", "budget" (both chosen), "calls from budget" or "rounds from budget"
    probe_s: float | None = None  # one plain + one profiled call, profiler write and read included; None: not run
    max_rounds: int = 0  # the rounds the budget held (or the rounds given); ``rounds`` <= this
    ci_pct: float = DEFAULT_PROFILE_CI_PCT  # the interval's half-width that stops a budget-sized run early

    def to_attrs(self) -> dict[str, Any]:
        """Flat ``trace.attrs`` entries (netCDF-safe: no None)."""
        attrs: dict[str, Any] = {"profile_rounds": self.rounds, "profile_calls": self.calls_per_round,
                                 "profile_budget_s": self.budget_s, "profile_sizing": self.sizing,
                                 "profile_max_rounds": self.max_rounds, "profile_ci_pct": self.ci_pct}
        if self.probe_s is not None:
            attrs["profile_probe_s"] = self.probe_s
        return attrs


def choose_profile_counts(pair_s: float, budget_s: float, rounds: int | None = None,
                          calls: int | None = None) -> tuple[int, int]:
    """Profile-mode ``(rounds, calls_per_round)`` that fit ``budget_s``, like ``timeit.Timer.autorange``.

    ``pair_s`` is what one plain call and one profiled call cost together
    (the profiler writing and reading the call's events included): at most
    ``budget_s / pair_s`` pairs run, in 2 to 20 rounds of at least one call.
    ``rounds`` is the most a budget-sized run takes: it stops sooner once the
    overhead's interval is narrow enough (:func:`paired_overhead`).
    The 2-round, 1-call minimum exceeds the budget when a pair takes more than
    half of it. A count given (not ``None``) is returned unchanged.

    Examples
    --------
    >>> choose_profile_counts(1.0, 2.0)  # a model at 0.5 s a call: 2 pairs fill the budget
    (2, 1)
    >>> choose_profile_counts(1.0, 20.0)  # the same model given 20 s: 20 rounds of one call
    (20, 1)
    >>> choose_profile_counts(0.002, 2.0)  # 1 ms a call: 1,000 pairs
    (20, 50)
    >>> choose_profile_counts(0.002, 2.0, rounds=4), choose_profile_counts(0.002, 2.0, calls=10)
    ((4, 250), (20, 10))
    >>> choose_profile_counts(0.002, 2.0, rounds=7, calls=1)
    (7, 1)
    """
    # perf_counter can read 0 for a trivial call: floor it so the division stays finite
    pairs = int(budget_s / max(pair_s, 1e-9))
    if rounds is None:
        # rounds as many as the cap allows: more, shorter rounds pair the two sides more closely in time (slow drift
        # in the machine's load cancels) and give the interval more degrees of freedom for the same calls
        per_round = calls if calls is not None else max(1, pairs // MAX_AUTO_ROUNDS)
        rounds = min(MAX_AUTO_ROUNDS, max(MIN_AUTO_ROUNDS, pairs // per_round))
    if calls is None:
        calls = max(1, pairs // rounds)
    return int(rounds), int(calls)


def paired_overhead(baseline: Sequence[Sequence[float]], instrumented: Sequence[Sequence[float]],
                    level: float = CI_LEVEL) -> tuple[float, float, float]:
    """The overhead ratio and its confidence interval, from rounds of paired blocks.

    Round ``r`` ran a block of plain calls ``baseline[r]`` next to a block of
    instrumented calls ``instrumented[r]``. Each round gives one paired log
    ratio of the blocks' medians; the ratio is the exponential of their mean
    and the interval Student's t interval of that mean, so the machine's slow
    drift (another job starting) moves both sides of a round and cancels.
    With one round there is no interval: its bounds are NaN.

    Returns
    -------
    (ratio, low, high) : tuple of float
        ``instrumented / baseline`` and the bounds of its ``level`` interval.

    Examples
    --------
    >>> r, lo, hi = paired_overhead([[1.0], [1.0], [1.0]], [[1.10], [1.12], [1.08]])
    >>> round(r, 3), lo < r < hi, round(lo, 3), round(hi, 3)
    (1.1, True, 1.051, 1.151)
    """
    if len(baseline) != len(instrumented) or not len(baseline):
        raise ValueError(f"paired_overhead needs as many baseline as instrumented rounds (at least one), got "
                         f"{len(baseline)} and {len(instrumented)}")
    d = np.log([statistics.median(i) / statistics.median(b) for b, i in zip(baseline, instrumented, strict=True)])
    mean = float(d.mean())
    if d.size < 2:
        return float(np.exp(mean)), float("nan"), float("nan")
    from scipy import stats  # here, not at import: only runtime modes need it, and scipy.stats is slow to import

    half = float(stats.t.ppf(0.5 + level / 2, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size))
    return float(np.exp(mean)), float(np.exp(mean - half)), float(np.exp(mean + half))


def interval_half_width_pct(low: float, high: float) -> float:
    """Half the width of an interval of ratios, in percentage points (infinite when undefined)."""
    return 50.0 * (high - low) if np.isfinite(low) and np.isfinite(high) else float("inf")


@dataclasses.dataclass
class Measurement:
    """What a runtime mode measured."""

    op_time_per_call: np.ndarray  # seconds per call, per op (NaN where unmeasured)
    trips: dict[int, float]  # while op -> trips per execution
    branch_fractions: dict[int, list[float]]  # cond op -> fraction per branch
    baseline_s: float
    instrumented_s: float
    n_calls: int
    fusion_executions: dict[str, float] = dataclasses.field(default_factory=dict)
    fusion_time_s: dict[str, float] = dataclasses.field(default_factory=dict)
    exec_per_call: dict[int, float] = dataclasses.field(default_factory=dict)
    loops_seen: set[int] = dataclasses.field(default_factory=set)  # while ops whose loop instruction ran
    sizing: ProfileSizing | None = None  # profile mode: the rounds and calls run, and why
    ratio: tuple[float, float, float] | None = None  # paired_overhead's (ratio, low, high) over the rounds
    rounds: int = 0  # rounds run: the interval's sample size


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - t0


# ---------------------------------------------------------------- profile mode
def _profile_options() -> jax.profiler.ProfileOptions:
    """The lightest options that still record every HLO instruction execution.

    JAX's defaults also run the Python tracer (every Python call is an event), which more
    than doubles the profiler's overhead on a small program, and dump HLO protos we
    already hold as text. Host tracer level 1 still records the CPU runtime's
    per-instruction events; device (GPU) kernel events do not depend on it.
    """
    options = jax.profiler.ProfileOptions()
    options.host_tracer_level = 1
    options.python_tracer_level = 0
    options.enable_hlo_proto = False
    return options


def run_profile(
    plain: Callable[..., Any],
    compiled: Callable[..., Any],
    args: Sequence[Any],
    *,
    walk: Walk,
    fusion_map: FusionMap,
    module: str,
    rounds: int | None = None,
    calls_per_round: int | None = None,
    budget_s: float = DEFAULT_PROFILE_BUDGET_S,
    ci_pct: float = DEFAULT_PROFILE_CI_PCT,
) -> Measurement:
    """Profile ``compiled`` (the tagged program) against ``plain`` (the user's jitted call).

    ``rounds`` or ``calls_per_round`` left ``None`` is chosen from ``budget_s``
    by :func:`choose_profile_counts`, from one timed pair of a plain and a
    profiled call (two pairs when the first takes under a quarter of the budget).
    Rounds left to the budget stop early, after :data:`MIN_STOP_ROUNDS`, once
    the overhead's interval is within ``ci_pct`` percentage points either
    side; rounds given all run.
    """
    jax.block_until_ready(plain(*args))  # compiles the user's jitted call: never timed
    base: list[list[float]] = []  # per round, per call
    inst: list[list[float]] = []
    rounds_given = rounds
    files = []
    note = ""
    how = {(False, False): "explicit", (True, True): "budget", (False, True): "calls from budget",
           (True, False): "rounds from budget"}[(rounds is None, calls_per_round is None)]
    with tempfile.TemporaryDirectory(prefix="dfit_profile_") as root:
        probe_s = None
        if how == "explicit":
            jax.block_until_ready(compiled(*args))
        else:  # the sizing pair's profiled call is also the tagged program's warm-up: one call less of a slow model
            probe_s = _probe_pair(plain, compiled, args, f"{root}/probe0", module)
            # A first run carries one-time costs (the bundled encoder's: ~12 ms on a ~4 ms pair, measured), which
            # would cut a fast program's calls several-fold; a pair this cheap is simply timed again.
            if probe_s < budget_s / 4:
                probe_s = _probe_pair(plain, compiled, args, f"{root}/probe1", module)
            rounds, calls_per_round = choose_profile_counts(probe_s, budget_s, rounds, calls_per_round)
        assert rounds is not None and calls_per_round is not None  # for the type checker: both are set now
        may_stop = rounds_given is None
        for r in range(rounds):
            base.append([_timed(lambda: plain(*args)) for _ in range(calls_per_round)])
            log_dir = f"{root}/round{r}"
            jax.profiler.start_trace(log_dir, profiler_options=_profile_options())
            try:
                inst.append([_timed(lambda: compiled(*args)) for _ in range(calls_per_round)])
            finally:
                jax.profiler.stop_trace()
            files.extend(find_xplane_files(log_dir))
            # stopping on the interval itself shifts its coverage a little (a sequential test); the floor of
            # MIN_STOP_ROUNDS keeps the shift small, and a run that never narrows spends the whole budget
            if may_stop and r + 1 >= MIN_STOP_ROUNDS:
                if interval_half_width_pct(*paired_overhead(base, inst)[1:]) <= ci_pct:
                    break
        timings = []
        for f in files:
            try:
                timings.append(read_hlo_op_timings(f, module))
            except HloModuleMismatchError as err:  # the caller warns when nothing was seen
                timings.append({})
                note = str(err)
    if not any(timings):
        warnings.warn(f"the profiler recorded no HLO events for module {module!r}; times are NaN. "
                      f"{note if files else 'No profile file was written.'}", MeasurementWarning, stacklevel=3)
    n_events: dict[str, float] = defaultdict(float)
    excl_ns: dict[str, float] = defaultdict(float)
    runs = 0
    for per_file in timings:
        runs += max((t.runs for t in per_file.values()), default=0)
        for name, t in per_file.items():
            n_events[name] += t.n_events
            excl_ns[name] += t.exclusive_ns
    runs = max(runs, 1)
    executions = {name: n / runs for name, n in n_events.items()}
    fusion_time = {name: ns * 1e-9 / runs for name, ns in excl_ns.items()}
    op_time = _split_fusion_time(walk.records, fusion_map, fusion_time)
    # Only instructions the profiler saw count as measured. An instruction with no event either
    # did not run (a branch not taken, a loop body run zero times) or ran unseen: the CPU runtime
    # emits no per-instruction events inside computations it outlined into a `call`.
    exec_per_call = {
        op: max(executions[f] for f in names if f in executions)
        for op, names in fusion_map.op_to_fusions.items() if any(f in executions for f in names)
    }
    loops_seen = {
        op for op, names in fusion_map.op_to_fusions.items()
        if any(f in executions and fusion_map.record(f).opcode == "while" for f in names)
    }
    flat_base, flat_inst = [t for b in base for t in b], [t for i in inst for t in i]
    return Measurement(
        op_time_per_call=op_time,
        trips={}, branch_fractions={},
        baseline_s=statistics.median(flat_base), instrumented_s=statistics.median(flat_inst),
        n_calls=len(flat_inst), fusion_executions=executions, fusion_time_s=fusion_time,
        exec_per_call=exec_per_call, loops_seen=loops_seen,
        sizing=ProfileSizing(len(inst), int(calls_per_round), float(budget_s), how, probe_s, int(rounds),
                             float(ci_pct)),
        ratio=paired_overhead(base, inst), rounds=len(inst),
    )


def _probe_pair(plain: Callable[..., Any], compiled: Callable[..., Any], args: Sequence[Any], log_dir: str,
                module: str) -> float:
    """Seconds one plain call and one profiled call take, the profile's write and read included.

    The profiler's own work grows with the events a call emits (1.4-1.8 ms a call of the bundled encoder,
    whose plain call takes 0.2 ms, on 2 CPU cores), so sizing from the plain call alone would overrun the
    budget several times on fast programs; the profile read here is discarded.
    """
    t0 = time.perf_counter()
    jax.block_until_ready(plain(*args))
    jax.profiler.start_trace(log_dir, profiler_options=_profile_options())
    try:
        jax.block_until_ready(compiled(*args))
    finally:
        jax.profiler.stop_trace()
    for f in find_xplane_files(log_dir):
        try:
            read_hlo_op_timings(f, module)
        except HloModuleMismatchError:  # the timed rounds warn about it
            pass
    return time.perf_counter() - t0


def _split_fusion_time(records: Sequence[OpRecord], fusion_map: FusionMap, fusion_time: dict[str, float]) -> np.ndarray:
    op_time = np.full(len(records), np.nan)
    for rec in fusion_map.records:
        t = fusion_time.get(rec.name)
        if t is None or not rec.op_ids:
            continue
        ids = [o for o in rec.op_ids if o < len(records)]
        flops = np.array([records[o].cost.flops for o in ids], dtype=np.float64)
        nbytes = np.array([records[o].cost.bytes_read + records[o].cost.bytes_written for o in ids], dtype=np.float64)
        shares = [s / s.sum() for s in (flops, nbytes) if s.sum() > 0]
        weight = np.mean(shares, axis=0) if shares else np.full(len(ids), 1.0 / len(ids))
        for o, w in zip(ids, weight, strict=True):
            op_time[o] = (0.0 if np.isnan(op_time[o]) else op_time[o]) + t * w
    return op_time


def _free_descendants(records: Sequence[OpRecord], root: int, context_prefix: str) -> list[int]:
    """Leaf ops under ``root``'s jaxpr(s) named ``context_prefix`` reached through 1x containers only."""
    kids = defaultdict(list)
    for r in records:
        kids[r.parent].append(r)
    out, stack = [], [r for r in kids[root] if r.context.startswith(context_prefix)]
    while stack:
        r = stack.pop()
        if not r.container:
            out.append(r.id)
        elif r.container not in ("scan", "while", "cond"):
            stack.extend(kids[r.id])
    return out


def infer_control(
    records: Sequence[OpRecord],
    exec_per_call: dict[int, float],
    counts_fn: Callable[[dict[int, float], dict[int, list[float]]], np.ndarray],
    static_trips: dict[int, float],
    static_fracs: dict[int, list[float]],
    loops_seen: set[int] = frozenset(),
) -> tuple[dict[int, float], dict[int, list[float]], set[int]]:
    """Measured while trips and cond branch fractions from per-op executions.

    ``exec_per_call`` holds only ops the measurement saw. A while loop whose body
    was not seen ran zero times if its loop instruction was seen (``loops_seen``);
    otherwise it stays unmeasured. A cond branch not seen gets the executions the
    seen branches leave over. Returns ``(trips, fractions, measured_ids)`` where
    ``measured_ids`` are the control ops whose figures came from measurement.
    """
    trips, fracs = dict(static_trips), {k: list(v) for k, v in static_fracs.items()}
    measured: set[int] = set()
    for r in records:  # pre-order: outer loops are settled before inner ones
        if r.container not in ("while", "cond"):
            continue
        counts = counts_fn(trips, fracs)
        own = float(counts[r.id])
        if own <= 0:
            continue
        if r.container == "while":
            seen = [exec_per_call[o] for o in _free_descendants(records, r.id, "body") if o in exec_per_call]
            if seen:
                trips[r.id] = max(seen) / own
                measured.add(r.id)
            elif r.id in loops_seen:
                trips[r.id] = 0.0
                measured.add(r.id)
        else:
            per_branch = []
            for b in range(r.n_branches):
                seen = [exec_per_call[o] for o in _free_descendants(records, r.id, f"branch{b}") if o in exec_per_call]
                per_branch.append(max(seen) / own if seen else None)
            if any(p is not None for p in per_branch):
                known = sum(p for p in per_branch if p is not None)
                missing = [b for b, p in enumerate(per_branch) if p is None]
                rest = max(0.0, 1.0 - known) / len(missing) if missing else 0.0
                fracs[r.id] = [rest if p is None else p for p in per_branch]
                measured.add(r.id)
    return trips, fracs, measured


# ------------------------------------------------------------------ eager mode

#: containers of one jaxpr run once that eager mode steps into, op by op (scan, while and cond have their own
#: rules in :class:`_EagerInterpreter`); any other op runs whole
ENTERED_CALLS = ("jit", "call", "remat", "custom_jvp", "custom_vjp")

class _EagerInterpreter:
    """Runs a tagged jaxpr one primitive at a time, timing and counting."""

    def __init__(self, walk: Walk) -> None:
        self.eqn_op = walk.eqn_op
        self.records = walk.records
        self.time = np.zeros(len(walk.records))
        self.execs = np.zeros(len(walk.records))
        self.trips: dict[int, float] = defaultdict(float)
        self.branch_runs: dict[int, list[float]] = {}

    def run(self, jaxpr: jcore.Jaxpr, consts: Sequence[Any], args: Sequence[Any]) -> list[Any]:
        env: dict[Any, Any] = {}

        def read(v: Any) -> Any:
            return v.val if isinstance(v, jcore.Literal) else env[v]

        for v, x in zip(jaxpr.constvars, consts, strict=True):
            env[v] = x
        for v, x in zip(jaxpr.invars, args, strict=True):
            env[v] = x
        for eqn in jaxpr.eqns:
            op = self.eqn_op[id(eqn)]
            self.execs[op] += 1
            invals = [read(v) for v in eqn.invars]
            outs = self._eval(op, eqn, invals)
            for v, x in zip(eqn.outvars, outs, strict=True):
                if not isinstance(v, jcore.DropVar):
                    env[v] = x
        return [read(v) for v in jaxpr.outvars]

    def _sub(self, j: Any, args: Sequence[Any]) -> list[Any]:
        if isinstance(j, jcore.ClosedJaxpr):
            return self.run(j.jaxpr, j.consts, args)
        return self.run(j, [], args)

    def _eval(self, op: int, eqn: Any, invals: list[Any]) -> list[Any]:
        kind = self.records[op].container
        p = eqn.params
        if kind == "scan":
            return self._scan(p, invals)
        if kind == "while":
            cn, bn = p["cond_nconsts"], p["body_nconsts"]
            cconsts, bconsts, carry = invals[:cn], invals[cn:cn + bn], invals[cn + bn:]
            while bool(self._sub(p["cond_jaxpr"], cconsts + carry)[0]):
                carry = self._sub(p["body_jaxpr"], bconsts + carry)
                self.trips[op] += 1
            return carry
        if kind == "cond":
            branches = p["branches"]
            index = int(np.clip(int(invals[0]), 0, len(branches) - 1))
            self.branch_runs.setdefault(op, [0.0] * len(branches))[index] += 1
            return self._sub(branches[index], invals[1:])
        if kind in ENTERED_CALLS:
            sub = next(v for v in p.values() if isinstance(v, (jcore.ClosedJaxpr, jcore.Jaxpr)))
            n_in = len((sub.jaxpr if isinstance(sub, jcore.ClosedJaxpr) else sub).invars)
            return self._sub(sub, invals[len(invals) - n_in:])
        t0 = time.perf_counter()
        out = eqn.primitive.bind(*invals, **p)
        jax.block_until_ready(out)
        self.time[op] += time.perf_counter() - t0
        return list(out) if eqn.primitive.multiple_results else [out]

    def _scan(self, p: dict[str, Any], invals: list[Any]) -> list[Any]:
        nc, nk = p["num_consts"], p["num_carry"]
        consts, carry, xs = invals[:nc], invals[nc:nc + nk], invals[nc + nk:]
        ys = []
        steps = range(p["length"] - 1, -1, -1) if p["reverse"] else range(p["length"])
        for i in steps:
            outs = self._sub(p["jaxpr"], consts + carry + [x[i] for x in xs])
            carry, y = outs[:nk], outs[nk:]
            ys.append(y)
        if p["reverse"]:
            ys.reverse()
        y_avals = p["jaxpr"].out_avals[nk:]
        stacked = [
            jax.numpy.stack([y[j] for y in ys]) if ys else jax.numpy.zeros((0, *a.shape), a.dtype)
            for j, a in enumerate(y_avals)
        ]
        return carry + stacked


def run_eager(plain: Callable[..., Any], walk: Walk, args: Sequence[Any], *, repeats: int = 3) -> Measurement:
    """Interpret the tagged jaxpr op by op ``repeats`` times after one warm-up run."""
    closed = walk.tagged
    jax.block_until_ready(plain(*args))
    _EagerInterpreter(walk).run(closed.jaxpr, closed.consts, args)  # warm-up: compiles each primitive
    interp = _EagerInterpreter(walk)
    base: list[list[float]] = []  # per repeat: the plain calls either side of its interpreted run
    inst: list[list[float]] = []
    for _ in range(repeats):
        before = _timed(lambda: plain(*args))
        inst.append([_timed(lambda: interp.run(closed.jaxpr, closed.consts, args))])
        base.append([before, _timed(lambda: plain(*args))])
    n_exec = {r.id: interp.execs[r.id] / repeats for r in walk.records}
    trips = {op: t / interp.execs[op] for op, t in interp.trips.items() if interp.execs[op] > 0}
    for r in walk.records:
        if r.container == "while" and r.id not in trips and interp.execs[r.id] > 0:
            trips[r.id] = 0.0
    fracs = {op: [b / interp.execs[op] for b in runs] for op, runs in interp.branch_runs.items()}
    op_time = np.where(interp.execs > 0, interp.time / repeats, np.nan)
    op_time[[r.id for r in walk.records if r.container]] = np.nan
    return Measurement(
        op_time_per_call=op_time, trips=trips, branch_fractions=fracs,
        baseline_s=statistics.median([t for b in base for t in b]),
        instrumented_s=statistics.median([i[0] for i in inst]), n_calls=repeats,
        exec_per_call=n_exec, ratio=paired_overhead(base, inst), rounds=repeats,
    )
