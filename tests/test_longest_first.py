"""``--dist loadscope`` hands modules out longest first by the recorded figures (``tests/longest_first.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import longest_first

ROOT = Path(__file__).resolve().parents[1]


def test_the_order_is_longest_first_and_counts_without_figures():
    units = {"a.py": ["a.py::t1", "a.py::t2", "a.py::t3"], "b.py": ["b.py::t"], "c.py": ["c.py::t1", "c.py::t2"]}
    assert longest_first.order(units, {}) == ["a.py", "c.py", "b.py"]  # loadscope's own: most tests first
    seconds = {"a.py::t1": 0.1, "a.py::t2": 0.1, "a.py::t3": 0.1, "b.py::t": 30.0, "c.py::t1": 2.0}
    # c.py::t2 is new: it counts as the median (0.1 s)
    assert longest_first.order(units, seconds) == ["b.py", "c.py", "a.py"]


def test_figures_are_merged_and_a_bad_file_is_ignored(tmp_path):
    path = tmp_path / "sub" / "durations.json"
    assert longest_first.load(path) == {}
    longest_first.save({"a": 1.0, "b": 2.0}, path)
    longest_first.save({"b": 3.0}, path)
    assert longest_first.load(path) == {"a": 1.0, "b": 3.0}
    assert not list(path.parent.glob("*.tmp"))
    for text in ("{", "[1, 2]", json.dumps({"a": "x", "b": -1, "c": True, "d": 0.5})):
        path.write_text(text)
        assert longest_first.load(path) == ({"d": 0.5} if "d" in text else {})
    longest_first.save({"e": 1.0}, path)  # over a file it could not read: a fresh one
    assert longest_first.load(path) == {"d": 0.5, "e": 1.0}


@pytest.mark.slow  # a pytest run with an xdist worker in a fresh process
def test_a_real_loadscope_run_hands_out_the_longest_module_first(tmp_path):
    """Three modules; the recorded figures say the one with fewest tests is the longest. One worker runs the
    modules in the order they are handed out: longest first, where loadscope's own would start from the most
    tests; and the run records its own figures."""
    for name, tests in (("test_many.py", 6), ("test_long.py", 1), ("test_mid.py", 3)):
        (tmp_path / name).write_text("".join(f"def test_{i}():\n    pass\n" for i in range(tests)))
    path = tmp_path / "durations.json"
    (tmp_path / "conftest.py").write_text(  # the repository's conftest.py, with this test's figures
        "from tests import longest_first\n"
        "def pytest_configure(config):\n"
        f"    longest_first.register(config, longest_first.Path({str(path)!r}))\n")
    figures = {"test_long.py::test_0": 50.0, "test_mid.py::test_0": 9.0, "test_mid.py::test_1": 0.1,
               **{f"test_many.py::test_{i}": 0.1 for i in range(5)}}  # test_many.py::test_5 is new: 0.1 s
    longest_first.save(figures, path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "1", "--dist", "loadscope", "-p", "no:cacheprovider",
                           "-p", "xdist", "-v", "-o", "addopts=", "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    order = [line.split("::")[0].split()[-1] for line in done.stdout.splitlines() if "PASSED" in line]
    assert list(dict.fromkeys(order)) == ["test_long.py", "test_mid.py", "test_many.py"], done.stdout
    recorded = longest_first.load(path)
    assert {f"test_many.py::test_{i}" for i in range(6)} <= set(recorded)
    assert recorded["test_long.py::test_0"] < 50.0  # this run's figure replaced the old one
