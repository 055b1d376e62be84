"""Read per-HLO-instruction timings from a JAX profiler trace.

``jax.profiler.start_trace(log_dir)`` / ``stop_trace()`` writes
``log_dir/plugins/profile/<timestamp>/<host>.xplane.pb``.  In that XSpace every
event produced by an XLA executable carries an ``hlo_op`` stat (the executed
instruction's name, e.g. ``copy.12`` or ``ynn_fusion.3``) and an ``hlo_module``
stat (the module name, e.g. ``jit_f``).  On CPU these events sit on the thread
lines of the ``/host:CPU`` plane; on GPU they are the kernel events of the
``/device:GPU:<n>`` planes.  Control instructions (``while``, ``conditional``,
``call``) on CPU are events that enclose, on the same line, the events of the
instructions they run.

:func:`read_hlo_op_timings` sums those events per ``hlo_op`` name, which are
exactly the names of :class:`dfit_nb.capture.lowering.FusionRecord`, and
splits off *exclusive* time: an event's duration minus the durations of the
matching events directly nested in it on the same line.  The executor's own
bookkeeping events (``end: copy.12`` and other events without ``hlo_op``) are
not subtracted, so a ``while``'s exclusive time is its loop overhead.

If any ``/device:`` plane holds matching events, only device planes are read
(host-side launch events on GPU would count the same kernels twice).  Lines
that profiler tools derive from other lines (``XLA Ops``, ``XLA Modules``,
``Steps`` ...) are skipped for the same reason.

Only the reader imports JAX, lazily, for ``jax.profiler.ProfileData``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dfit_nb.errors import DfitError

__all__ = [
    "HloModuleMismatchError",
    "HloOpTiming",
    "HloOpTimings",
    "find_xplane_files",
    "read_hlo_op_timings",
]

#: Timeline lines that summarise other lines; reading them would double count.
DERIVED_LINES = frozenset(
    {
        "XLA Modules",
        "XLA Ops",
        "XLA TraceMe",
        "Steps",
        "Framework Name Scope",
        "Framework Ops",
        "TensorFlow Name Scope",
        "TensorFlow Ops",
        "Source code",
    }
)


@dataclass(frozen=True)
class HloOpTiming:
    """Profiled time of one executed HLO instruction, summed over events.

    ``n_events`` counts events: one per execution on CPU (a while body
    instruction gives trip count x runs), possibly several kernels per
    execution on GPU.  ``exclusive_ns`` is ``total_ns`` minus the matching
    events nested in it on the same line.  ``runs`` is the number of distinct
    ``run_id`` values seen for the module (executions profiled); 0 when the
    events carry no ``run_id``.
    """

    name: str
    n_events: int
    total_ns: float
    exclusive_ns: float
    runs: int


class HloOpTimings(dict):
    """``dict[str, HloOpTiming]`` that also says which module names matched.

    Attributes
    ----------
    requested : str
        The module name asked for.
    matched : tuple[str, ...]
        The ``hlo_module`` values whose events were read.
    exact : bool
        False when no name matched exactly and a prefix match was used.
    seen : tuple[str, ...]
        Every ``hlo_module`` value in the trace.
    program_ids : tuple[int, ...]
        ``program_id`` values of the events read (several means the same
        name was compiled more than once; pass ``program_id`` to pick one).
    note : str
        Human-readable remark about the match ("" for an exact match).
    """

    requested: str = ""
    matched: tuple[str, ...] = ()
    exact: bool = True
    seen: tuple[str, ...] = ()
    program_ids: tuple[int, ...] = ()
    note: str = ""


class HloModuleMismatchError(DfitError, LookupError):
    """No event in the trace belongs to the requested HLO module."""

    def __init__(self, requested: str, seen: Iterable[str]):
        self.requested = requested
        self.seen = tuple(sorted(set(seen)))
        listed = ", ".join(self.seen) if self.seen else "none"
        super().__init__(
            f"no profiler events for HLO module {requested!r} (neither exact nor "
            f"prefix match); hlo_module names seen: {listed}"
        )


def find_xplane_files(log_dir: str | Path) -> list[Path]:
    """All ``*.xplane.pb`` files under ``log_dir``, oldest trace first.

    Files are ordered by their trace folder (named by timestamp), then by
    host file name, so ``find_xplane_files(d)[-1]`` is from the newest trace.

    Examples
    --------
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> p = d / "plugins" / "profile" / "2024_01_01_00_00_00" / "host.xplane.pb"
    >>> p.parent.mkdir(parents=True); _ = p.write_bytes(b"")
    >>> [f.name for f in find_xplane_files(d)]
    ['host.xplane.pb']
    """
    root = Path(log_dir)
    return sorted(root.rglob("*.xplane.pb"), key=lambda p: (p.parent.name, p.name))


@dataclass
class _Event:
    name: str
    start: float
    end: float
    child_ns: float = 0.0


def _load(source: str | Path | bytes | Any) -> Any:
    if isinstance(source, bytes | bytearray):
        from jax.profiler import ProfileData

        return ProfileData.from_serialized_xspace(bytes(source))
    if isinstance(source, str | Path):
        from jax.profiler import ProfileData

        from .._files import special_file
        from ..errors import LoadRefusedError

        # a FIFO would block the read forever, a device or socket be consumed by it: refused before opening
        kind = special_file(source)
        if kind:
            raise LoadRefusedError(f"{str(source)!r} is {kind}, not an .xplane.pb file; nothing was read")
        if not Path(source).is_file():
            raise FileNotFoundError(f"no .xplane.pb file at {str(source)!r}")
        return ProfileData.from_file(str(source))
    return source  # already a ProfileData


def _hlo_lines(profile: Any) -> Iterator[tuple[str, str, list[tuple[Any, dict]]]]:
    """(plane name, line name, [(event, stats)]) for lines with hlo events."""
    for plane in profile.planes:
        for line in plane.lines:
            if line.name in DERIVED_LINES:
                continue
            events = []
            for event in line.events:
                stats = dict(event.stats)
                if "hlo_op" in stats:
                    events.append((event, stats))
            if events:
                yield plane.name, line.name, events


def _select_modules(requested: str, seen: set[str]) -> tuple[set[str], bool]:
    if requested in seen:
        return {requested}, True
    prefixed = {s for s in seen if s.startswith(requested) or requested.startswith(s)}
    return prefixed, False


def _nest(events: list[_Event]) -> None:
    """Add to each event the time of the events directly nested in it."""
    stack: list[_Event] = []
    for ev in sorted(events, key=lambda e: (e.start, -e.end)):
        while stack and not (stack[-1].start <= ev.start and ev.end <= stack[-1].end):
            stack.pop()
        if stack:
            stack[-1].child_ns += ev.end - ev.start
        stack.append(ev)


def read_hlo_op_timings(
    xplane_path_or_bytes: str | Path | bytes,
    module_name: str,
    program_id: int | None = None,
) -> HloOpTimings:
    """Sum profiler events per executed HLO instruction of one module.

    Parameters
    ----------
    xplane_path_or_bytes
        Path of an ``.xplane.pb`` file, its bytes, or a loaded
        ``jax.profiler.ProfileData``.
    module_name
        HLO module name (``hlo_module_name(compiled.as_text())``).  Matched
        exactly; if nothing matches, names that start with it (or that it
        starts with) are used and ``result.exact`` is False with a ``note``.
    program_id
        Keep only events of this ``program_id`` (when one name was compiled
        several times).

    Returns
    -------
    HloOpTimings
        ``{hlo instruction name: HloOpTiming}`` plus match details.

    Raises
    ------
    HloModuleMismatchError
        No exact or prefix match; the message lists the names seen.

    Examples
    --------
    >>> t = read_hlo_op_timings(find_xplane_files(log_dir)[-1], "jit_f")  # doctest: +SKIP
    >>> t["while.5"].exclusive_ns < t["while.5"].total_ns  # doctest: +SKIP
    True
    """
    if not module_name:
        raise ValueError("module_name must be a non-empty HLO module name")
    lines = list(_hlo_lines(_load(xplane_path_or_bytes)))
    seen = {str(stats.get("hlo_module", "")) for _, _, evs in lines for _, stats in evs}
    seen.discard("")
    modules, exact = _select_modules(module_name, seen)
    if not modules:
        raise HloModuleMismatchError(module_name, seen)

    def keep(stats: dict) -> bool:
        if stats.get("hlo_module") not in modules:
            return False
        return program_id is None or stats.get("program_id") == program_id

    on_device = any(plane.startswith("/device:") and any(keep(s) for _, s in evs) for plane, _, evs in lines)
    picked: list[_Event] = []
    run_ids: set = set()
    program_ids: set = set()
    for plane, _, evs in lines:
        if on_device and not plane.startswith("/device:"):
            continue
        line_events = []
        for event, stats in evs:
            if not keep(stats):
                continue
            start = float(event.start_ns)
            line_events.append(_Event(str(stats["hlo_op"]), start, start + event.duration_ns))
            if "run_id" in stats:
                run_ids.add(stats["run_id"])
            if "program_id" in stats:
                program_ids.add(int(stats["program_id"]))
        _nest(line_events)
        picked += line_events

    result = HloOpTimings()
    sums: dict[str, list[float]] = {}
    for ev in picked:
        acc = sums.setdefault(ev.name, [0, 0.0, 0.0])
        acc[0] += 1
        acc[1] += ev.end - ev.start
        acc[2] += ev.end - ev.start - ev.child_ns
    for name, (n, total, excl) in sorted(sums.items()):
        result[name] = HloOpTiming(name, int(n), total, max(excl, 0.0), len(run_ids))
    result.requested = module_name
    result.matched = tuple(sorted(modules))
    result.exact = exact
    result.seen = tuple(sorted(seen))
    result.program_ids = tuple(sorted(program_ids))
    if not exact:
        result.note = (
            f"no hlo_module named {module_name!r}; used prefix match "
            f"{', '.join(result.matched)} (seen: {', '.join(result.seen)})"
        )
    return result
