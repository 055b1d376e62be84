"""Shared, session-scoped captures: each example is traced and compiled once per test run (into the run's own
JAX cache: see the repository's conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import settings

import dfit_nb
from dfit_nb import examples

# Every property test draws the same examples on every run, so CI never fails on an example no earlier run drew and
# a failure reproduces; `--hypothesis-profile explore` draws new ones (how the examples kept with @example in
# tests/sim/test_cost.py were found). Either way no example has a deadline: the first call of a case compiles.
settings.register_profile("dfit_nb", derandomize=True, deadline=None)
settings.register_profile("explore", deadline=None)
settings.load_profile("dfit_nb")

#: the examples the shared fixtures capture and replay on every preset: the small ones (bert_block, the CLI's
#: BERT-base-sized default, is exercised by its own tests, not on every preset in every fixture)
SUITE_EXAMPLES = ("cnn", "encoder", "mlp", "scan_model")


def large_grid_presets() -> frozenset[str]:
    """The presets whose tile grids pad to a larger bucket than a single tile's (today ``sambanova_like``'s
    16 x 20 and ``cerebras_like``'s 64 x 64): each compiles every replay and cost program again for its bucket,
    where the other presets share the 8 x 8 one."""
    from dfit_nb.sim import presets, schedule

    smallest = schedule.bucket(1, 1)
    return frozenset(name for name in presets.names()
                     if schedule.bucket(int(presets.get(name).tile_rows), int(presets.get(name).tile_cols)) != smallest)


def _strings(values: Any) -> Iterator[str]:
    for value in values:
        if isinstance(value, str):
            yield value
        elif isinstance(value, tuple | list):
            yield from _strings(value)


def pytest_collection_modifyitems(config, items):
    """A test parametrized over a large-grid preset is ``slow``: the full run (CI) checks every preset, and the
    ``-m "not slow"`` inner loop compiles the 8 x 8 grid bucket only (the README's inner loop)."""
    large = large_grid_presets()
    for item in items:
        spec = getattr(item, "callspec", None)
        if spec is not None and not large.isdisjoint(_strings(spec.params.values())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def built():
    """name -> (fn, args) for every bundled example at its default sizes."""
    return {name: examples.get(name).build() for name in SUITE_EXAMPLES}


@pytest.fixture(scope="session")
def static_traces(built):
    """name -> static-mode Trace for every bundled example."""
    return {name: dfit_nb.capture(fn, *args) for name, (fn, args) in built.items()}


@pytest.fixture(scope="session")
def profile_scan_trace(built):
    """Profile-mode trace of the scan model (loops, cond, while inside)."""
    fn, args = built["scan_model"]
    return dfit_nb.capture(fn, *args, mode="profile", profile_rounds=3, profile_calls=5)


@pytest.fixture(scope="session")
def eager_scan_trace(built):
    """Eager-mode trace of the scan model."""
    fn, args = built["scan_model"]
    return dfit_nb.capture(fn, *args, mode="eager")


class _Runs(Mapping):
    """(example, preset) -> Run over every bundled example and preset, each replayed the first time it is asked for.

    The views tests read 14 of the 32 pairs; replaying all of them up front cost more than half of those tests'
    time. Every key is still there (iteration replays what is missing), and a pair is replayed once per session.
    """

    def __init__(self, traces: dict) -> None:
        from dfit_nb.sim import presets

        self._traces, self._runs = traces, {}
        self._keys = [(name, p) for name in traces for p in presets.names()]

    def __getitem__(self, key: tuple[str, str]):
        if key not in self._runs:
            import warnings

            from dfit_nb.sim import SpillWarning, presets

            name, preset = key
            if key not in self._keys:
                raise KeyError(f"{key!r}: all_runs holds (example, preset) pairs of {sorted(self._traces)} and "
                               f"{presets.names()}")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SpillWarning)  # small machines (Eyeriss' 108 KB) spill: expected
                self._runs[key] = dfit_nb.replay(self._traces[name], presets.get(preset), "ws")
        return self._runs[key]

    def __iter__(self):
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


@pytest.fixture(scope="session")
def all_runs(static_traces):
    """(example, preset) -> Run: every bundled example on every preset (weight-stationary), replayed on first use."""
    return _Runs(static_traces)


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory):
    """One JupyterLab server for the browser tests: ``(url|token, root)``; tests copy notebooks into ``root``."""
    from tests import jupyterlab as lab

    reason = lab.missing()
    if reason is not None:
        pytest.fail(f"the JupyterLab browser tests cannot run: it {reason}")
    root = tmp_path_factory.mktemp("lab")
    with lab.jupyterlab(root, root / "jupyterlab.log") as server:
        yield server, root
