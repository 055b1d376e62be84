"""The tutorials as stored, and two of them run in a real JupyterLab.

nbval (``notebooks/*.ipynb`` in the default pytest run) re-executes every notebook and compares each output
strictly; these tests check what nbval cannot: that the nine tutorials are there, executed, small, free of CDN
references and of blanket ``nbval-ignore-output``; and that the quick start and the hybrid tutorial draw their
charts and widgets in JupyterLab under headless Chromium, offline.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import nbformat
import pytest

from dfit_nb.widgets._offline import png_size
from tests import jupyterlab as lab

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
TUTORIALS = ["01_quick_start", "02_regions_and_transformations", "03_many_machines", "04_spatial_mapping",
             "05_hybrid_dataflow", "06_design_space_sweeps", "07_real_chip_calibration", "08_real_models",
             "09_case_study"]
MAX_BYTES = 250_000  # scripts/execute_notebooks.py warns above the same size
_MISSING = lab.missing()


def _read(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)


def test_the_nine_tutorials_are_there():
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


def _chart_outputs(name: str) -> list[tuple[int, int]]:
    """(code cell, output) positions of the outputs that show a chart: a JupyterChart or a widget holding charts."""
    holders = ("JupyterChart", "Explorer(", "SweepExplorer(")
    cells = [c.outputs for c in _read(name).cells if c.cell_type == "code"]
    return [(i, j) for i, c in enumerate(cells) for j, o in enumerate(c)
            if any(h in o.get("data", {}).get("text/plain", "") for h in holders)]


@pytest.mark.parametrize("name", TUTORIALS)
def test_every_stored_chart_carries_a_picture_and_no_dead_widget_view(name):
    """A reader without the kernel (a code host, nbviewer, JupyterLab before running) sees each chart as a PNG.

    scripts/execute_notebooks.py stores it; a widget-view reference without widget state can never draw.
    """
    charts = _chart_outputs(name)
    assert charts, f"{name}: no chart outputs found"
    cells = [c.outputs for c in _read(name).cells if c.cell_type == "code"]
    for i, j in charts:
        data = cells[i][j].data
        assert "application/vnd.jupyter.widget-view+json" not in data, f"{name} cell {i}: a dead widget view"
        png = base64.b64decode(data.get("image/png", ""))
        assert png[:8] == b"\x89PNG\r\n\x1a\n", f"{name} cell {i}: no PNG picture of its chart"
        width, height = png_size(png)
        assert 100 <= width <= 2000 and 50 <= height <= 2000, f"{name} cell {i}: a {width} x {height} picture"
        assert cells[i][j].metadata["image/png"] == {"width": width, "height": height}


needs_browser = pytest.mark.skipif(_MISSING is not None and not os.environ.get("CI"),
                                   reason=f"JupyterLab browser test {_MISSING} (CI installs them)")


@pytest.mark.slow
@needs_browser
@pytest.mark.parametrize("name", ["01_quick_start", "05_hybrid_dataflow"])
def test_a_tutorial_draws_its_charts_and_widgets_in_jupyterlab(lab_server, name):
    server, root = lab_server
    shutil.copy(NOTEBOOKS / f"{name}.ipynb", root / f"{name}.ipynb")
    with lab.browser_page(server, lab.ARTIFACTS) as (page, blocked, console_errors), \
            lab.screenshot_on_failure(page, f"{name}-failure"):
        # before running: the stored notebook shows a picture in every chart output, and only there
        lab.open_notebook(page, server, f"{name}.ipynb")
        shown = lab.stored_outputs(page)
        page.screenshot(path=str(lab.ARTIFACTS / f"{name}-stored.png"), full_page=True)
        stored = [c.outputs for c in _read(name).cells if c.cell_type == "code"]
        assert [len(c) for c in shown] == [len(c) for c in stored], "output areas on the page vs in the file"
        pictures = [(i, j) for i, c in enumerate(stored) for j, o in enumerate(c) if "image/png" in o.get("data", {})]
        assert pictures == _chart_outputs(name), "every chart output, and only those, stores a picture"
        drawn = [(i, j) for i, c in enumerate(shown) for j, o in enumerate(c) if o["images"] == 1]
        assert drawn == pictures, f"stored pictures drawn at {drawn}, expected at {pictures}: {shown}"
        # after running: the interactive charts, and no stored picture left beside them
        seen = lab.run_notebook(page, server, f"{name}.ipynb", lab.ARTIFACTS, timeout_s=400)
        assert not seen.errors, seen.errors
        charts = sum(json.dumps(c.outputs).count("JupyterChart") for c in _read(name).cells if c.cell_type == "code")
        assert seen.charts_with_marks >= min(charts, 3), f"{seen.charts_with_marks} charts drew marks of {charts}"
        assert seen.widgets >= min(charts, 3), f"{seen.widgets} widget views rendered"
        assert seen.images == 0, f"{seen.images} static pictures left beside the live charts"
        assert not blocked, f"the page tried to reach the network: {blocked[:5]}"
        vega_errors = [e for e in console_errors if "vega" in e.lower() or "altair" in e.lower()]
        assert not vega_errors, vega_errors
