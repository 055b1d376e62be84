"""Longest first: pytest-xdist's ``--dist loadscope`` with its work units handed out in order of how long their
tests took the last time they ran here.

``loadscope`` keeps each module (a notebook, a doctest file) on one worker and hands the modules out in order of
their test count, most first. Test counts say little about time here: a notebook of 20 cells runs for 45 s, a
module of 300 table checks for 5 s, and the JupyterLab test (one test, 17 s) came last, so one worker ran it
while the other sat idle. Handing out the longest first (the classic longest-processing-time rule) evens the
two workers' ends: the full run's per-test times (a JUnit report), replayed through ``loadscope``'s hand-out
rule on two workers, finish at 298.7 s in count order against 288.6 s (an even split) longest first.

What each test took (setup, call and teardown) is written to :data:`DURATIONS` (this checkout's ``.cache``, which
git ignores) when a run ends, merged over the previous file, so the inner loop and the full run keep each other's
figures; a test not seen before counts as the median of those known. With no file (a clean clone, CI) the order is
``loadscope``'s own: every test counts the same. The order changes which worker runs a module and when, never
what runs or what it checks.
"""

from __future__ import annotations

import json
import os
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

#: seconds per test node id from the runs before (this checkout's, never committed)
DURATIONS = Path(__file__).resolve().parents[1] / ".cache" / "test-durations.json"


def load(path: Path = DURATIONS) -> dict[str, float]:
    """The recorded seconds per node id; empty when the file is missing, unreadable or not such a mapping."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and v >= 0}


def save(seconds: Mapping[str, float], path: Path = DURATIONS) -> None:
    """Merge ``seconds`` over the recorded figures and write them atomically (a run killed meanwhile, or another
    checkout's run, never leaves half a file); a failure to write only loses the figures."""
    merged = {**load(path), **seconds}
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(merged, sort_keys=True, indent=0))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


def order(units: Mapping[str, Iterable[str]], seconds: Mapping[str, float]) -> list[str]:
    """The scopes of ``units`` (scope -> its tests' node ids), longest expected first; ties keep their order.

    A test without a figure counts as the median recorded test; with no figures at all every test counts 1,
    which is ``loadscope``'s own order (most tests first).
    """
    default = statistics.median(seconds.values()) if seconds else 1.0
    expected = {scope: sum(seconds.get(test, default) for test in tests) for scope, tests in units.items()}
    return sorted(units, key=lambda scope: -expected[scope])


class Plugin:
    """Registered in the process that sees every report (the xdist controller, or a run without workers): it adds
    up each test's phases and saves them when the session ends, and hands ``--dist loadscope``'s modules out in
    :func:`order` of the figures recorded before (other modes stay xdist's own)."""

    def __init__(self, path: Path = DURATIONS) -> None:
        self.path = path
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: Any) -> None:
        self.seconds[report.nodeid] += float(report.duration)

    def pytest_sessionfinish(self, session: Any) -> None:
        if self.seconds:
            save(dict(self.seconds), self.path)

    @pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist's own, which answers for every mode
    def pytest_xdist_make_scheduler(self, config: Any, log: Any) -> Any:
        if config.getvalue("dist") != "loadscope":
            return None
        return scheduler(config, log, load(self.path))


def register(config: Any, path: Path = DURATIONS) -> None:
    """Register :class:`Plugin` (recording into ``path``) in the process that sees every report: the xdist
    controller, or a run without workers; an xdist worker gets none."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        config.pluginmanager.register(Plugin(path), "dfit_nb_longest_first")


def scheduler(config: Any, log: Any, seconds: Mapping[str, float]) -> Any:
    """``loadscope``'s scheduler with its work queue put in :func:`order` before the first unit is handed out."""
    from xdist.scheduler import LoadScopeScheduling

    class LongestFirst(LoadScopeScheduling):
        _ordered = False

        def _assign_work_unit(self, node: Any) -> None:
            if not self._ordered:  # the queue is complete (built from the collection) by the first hand-out
                self._ordered = True
                units = dict(self.workqueue)
                self.workqueue.clear()
                self.workqueue.update((scope, units[scope]) for scope in order(units, seconds))
            super()._assign_work_unit(node)

    return LongestFirst(config, log)
