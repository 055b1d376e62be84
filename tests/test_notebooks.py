"""The tutorials as stored, and two of them run in a real JupyterLab.

nbval (``notebooks/*.ipynb`` in the default pytest run) re-executes every notebook and compares each output
strictly; these tests check what nbval cannot: that the seven tutorials are there, executed, small, free of CDN
references and of blanket ``nbval-ignore-output``; and that the quick start and the hybrid tutorial draw their
charts and widgets in JupyterLab under headless Chromium, offline.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import nbformat
import pytest

from tests import jupyterlab as lab

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
TUTORIALS = ["01_quick_start", "02_regions_and_transformations", "03_many_machines", "04_spatial_mapping",
             "05_hybrid_dataflow", "06_design_space_sweeps", "07_real_chip_calibration", "08_real_models"]
MAX_BYTES = 250_000  # scripts/execute_notebooks.py warns above the same size
_MISSING = lab.missing()


def _read(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)


def test_the_seven_tutorials_are_there():
    assert sorted(p.stem for p in NOTEBOOKS.glob("[0-9]*.ipynb")) == TUTORIALS


@pytest.mark.parametrize("name", TUTORIALS)
def test_a_tutorial_is_stored_executed_small_and_offline(name):
    path = NOTEBOOKS / f"{name}.ipynb"
    assert path.stat().st_size < MAX_BYTES, f"{name}: {path.stat().st_size:,} B stored"
    nb = _read(name)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and nb.metadata["kernelspec"]["name"] == "python3"
    counts = [c.execution_count for c in code]
    assert counts == list(range(1, len(code) + 1)), f"{name}: not executed top to bottom in one kernel: {counts}"
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{name}: stored errors {[e.ename for e in errors]}"
    text = json.dumps([c.outputs for c in code])
    for cdn in ("cdn.jsdelivr", "unpkg.com", "cdnjs", "googleapis"):
        assert cdn not in text, f"{name}: an output loads from {cdn}"
    ignored = [c for c in code if "nbval-ignore-output" in c.metadata.get("tags", [])]
    assert len(ignored) <= len(code) // 3, f"{name}: {len(ignored)} of {len(code)} cells ignore their output"
    assert "nbval-ignore-output" not in json.dumps(nb.metadata)
    assert sum(c.cell_type == "markdown" for c in nb.cells) >= 4, f"{name}: a tutorial explains itself"


needs_browser = pytest.mark.skipif(_MISSING is not None and not os.environ.get("CI"),
                                   reason=f"JupyterLab browser test {_MISSING} (CI installs them)")


@needs_browser
@pytest.mark.parametrize("name", ["01_quick_start", "05_hybrid_dataflow"])
def test_a_tutorial_draws_its_charts_and_widgets_in_jupyterlab(lab_server, name):
    server, root = lab_server
    shutil.copy(NOTEBOOKS / f"{name}.ipynb", root / f"{name}.ipynb")
    with lab.browser_page(server, lab.ARTIFACTS) as (page, blocked, console_errors), \
            lab.screenshot_on_failure(page, f"{name}-failure"):
        seen = lab.run_notebook(page, server, f"{name}.ipynb", lab.ARTIFACTS, timeout_s=400)
        assert not seen.errors, seen.errors
        charts = sum(json.dumps(c.outputs).count("JupyterChart") for c in _read(name).cells if c.cell_type == "code")
        assert seen.charts_with_marks >= min(charts, 3), f"{seen.charts_with_marks} charts drew marks of {charts}"
        assert seen.widgets >= min(charts, 3), f"{seen.widgets} widget views rendered"
        assert not blocked, f"the page tried to reach the network: {blocked[:5]}"
        vega_errors = [e for e in console_errors if "vega" in e.lower() or "altair" in e.lower()]
        assert not vega_errors, vega_errors
