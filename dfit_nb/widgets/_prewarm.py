"""Compiling the next grid buckets' replay programs ahead, on one background thread for every Explorer of the
process, while no Explorer updates (see :mod:`dfit_nb.widgets.explorer`, whose docstring describes it).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..sim import program_key, schedule, warm
from ..sim.hardware import Hardware

#: a warm-up starts once no Explorer has updated for this long: compiling takes a core (and the GIL while it
#: traces), so it waits for the user to look at a chart rather than slow the slider they are moving
IDLE_S = 1.0
_warm_lock = threading.Lock()
_warm_pool: ThreadPoolExecutor | None = None
#: program key -> the warm-up compiling it, or a done future for a program an update has run (a compiled program
#: serves every trace and machine of its key)
_warming: dict[tuple[Any, ...], Future] = {}
_last_update = 0.0
_updating = 0  # Explorer updates under way
_compiling: set[tuple[Any, ...]] = set()  # programs a warm-up has started compiling
_taken: set[tuple[Any, ...]] = set()  # programs an update compiled before their warm-up started
#: set when the interpreter exits: queued warm-ups are dropped (else exit would wait for each one's compile)
_closing = threading.Event()


def _close() -> None:
    _closing.set()
    with _warm_lock:
        for pending in _warming.values():
            pending.cancel()


# the pool's own exit hook joins its thread after running every queued item; threading's exit hooks run in reverse
# order of registration, so this one, registered after concurrent.futures', drops the queue first (a compile
# already under way still finishes)
getattr(threading, "_register_atexit", lambda fn: None)(_close)


def _busy(updating: bool) -> None:
    """Mark the start (``updating``) or the end of an Explorer update: warm-ups wait while one runs (it may be
    compiling itself) and for :data:`IDLE_S` after the last one ends."""
    global _last_update, _updating
    with _warm_lock:
        _updating += 1 if updating else -1
        _last_update = time.monotonic()


def _idle_for() -> float:
    """Seconds a warm-up still has to wait for the Explorers to be idle (0: go)."""
    with _warm_lock:
        return max(IDLE_S, 0.01) if _updating > 0 else max(0.0, IDLE_S - (time.monotonic() - _last_update))


def _warm_quietly(key: tuple[Any, ...], trace: Any, hw: Hardware) -> None:
    """:func:`warm` once the Explorers are idle, unless an update has taken the program over meanwhile; its
    failures dropped: a warm-up is a guess, and the replay that needs the program reports any real problem
    itself."""
    while (wait := _idle_for()) > 0 and not _closing.is_set():
        _closing.wait(wait)
    with _warm_lock:
        if _closing.is_set() or key in _taken:
            return
        _compiling.add(key)
    try:
        warm(trace, hw)
    except Exception:  # a guess that failed: the replay that needs this program will say why, if it ever runs
        pass


def _submit_warm(trace: Any, hw: Hardware) -> None:
    global _warm_pool
    key = program_key(trace, hw)
    with _warm_lock:
        if key in _warming:
            return
        if _warm_pool is None:
            _warm_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dfit_nb-explorer-warm")
        _warming[key] = _warm_pool.submit(_warm_quietly, key, trace, hw)


def _await_warm(key: tuple[Any, ...]) -> None:
    """Before an update replays the program ``key``: wait for a warm-up already compiling it (rather than compile
    it a second time beside it); one not compiling yet is dropped, since the update compiles the program now."""
    with _warm_lock:
        pending = _warming.get(key)
        if pending is None or pending.done():
            return
        if key not in _compiling:
            _taken.add(key)  # the warm-up returns without compiling when it gets there
            pending.cancel()
            del _warming[key]
            return
    pending.result()  # _warm_quietly never raises


def _compiled(key: tuple[Any, ...]) -> None:
    """Record that an update has run the program ``key`` (no warm-up is queued for it later)."""
    done: Future = Future()
    done.set_result(None)
    with _warm_lock:
        _warming.setdefault(key, done)


def bucket_neighbours(hw: Hardware, rows: tuple[int, ...], cols: tuple[int, ...]) -> list[Hardware]:
    """``hw`` with its tile rows (then columns) moved to the nearest value of ``rows`` (``cols``) in the grid
    bucket just above, and just below, its own: the machines whose replay programs a tile slider reaches next.

    >>> from dfit_nb.sim import presets
    >>> from dfit_nb.widgets.explorer import GRID
    >>> hw = presets.get("npu_like")  # 4 x 5 tiles: the 8 x 8 bucket, the smallest
    >>> [(int(h.tile_rows), int(h.tile_cols)) for h in bucket_neighbours(hw, GRID, GRID)]
    [(16, 5), (4, 16)]
    """
    out = []
    for field, options in (("tile_rows", rows), ("tile_cols", cols)):
        here = int(getattr(hw, field))
        side = _side(here)
        above = [v for v in options if _side(v) > side]
        below = [v for v in options if _side(v) < side]
        for value in ([min(above, key=_side)] if above else []) + ([max(below, key=_side)] if below else []):
            out.append(hw.replace(**{field: int(value)}))
    return out


def _side(n: int) -> int:
    """The bucket side :func:`dfit_nb.sim.schedule.bucket` rounds ``n`` tiles up to."""
    return schedule.bucket(int(n), 1).rows
