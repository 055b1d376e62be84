"""Execute tutorial notebooks in place, storing their outputs for nbval and a picture of every chart.

Usage: ``python scripts/execute_notebooks.py [NB ...]`` (all of notebooks/ by default).

Widget state is not stored: an offline ``JupyterChart`` carries the whole Vega bundle in
its state (about a megabyte per chart), which would make the stored notebooks huge. Without
that state a widget view can never be drawn from the file (its model belonged to the kernel
that ran it), so every output whose widget shows a chart (a ``JupyterChart``, or the visible
chart of a widget holding charts, such as the Explorer's selected tab) is stored as its text
form plus a PNG of that chart, rendered from the chart's own spec (read from the widget state
the execution recorded, then dropped) by ``dfit_nb.widgets._offline.static_png``: vl-convert,
offline, as a palette PNG of 7-22 kB.

The widget-view reference is dropped from those outputs: JupyterLab's widget renderer
(rank -10) outranks images (rank 90) wherever an output is trusted, and draws "Loading
widget..." instead of the picture (seen in JupyterLab 4.6 with ipywidgets 8.1 on a signed
notebook); nbconvert (nbviewer) skips a view without state anyway. PNG
rather than SVG: JupyterLab's SVG renderer is unsafe, so an untrusted notebook (any fresh
clone) would show the text form instead, while PNG is safe; and nbval skips ``image/png``
when it compares outputs, while it would compare an SVG's markup with the fresh run's (which
has none). Running the notebook replaces these outputs with the live, interactive widgets.

Cell execution timestamps are dropped so that re-executing an unchanged notebook leaves an
unchanged file.
"""

from __future__ import annotations

import base64
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from dfit_nb.widgets._offline import png_size, static_png

ROOT = Path(__file__).resolve().parents[1]
MAX_BYTES = 250_000  # per stored notebook; tests/test_notebooks.py holds the same limit
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
#: PNG pixels per CSS pixel: 1 keeps the seven charts of the quick start (7-22 kB each) inside MAX_BYTES
PNG_SCALE = 1.0


def chart_specs(model_id: str, state: dict) -> list[dict]:
    """The Vega-Lite specs a reader sees in the widget ``model_id``: its own, or those of its visible children.

    A ``JupyterChart`` (an anywidget model with a ``spec``) is its spec; a box lists its children's charts in
    order; a tab shows only its selected child (the first unless the widget chose another).
    """
    model = state.get(model_id)
    if model is None:
        return []
    values = model.get("state", {})
    if isinstance(values.get("spec"), dict):
        return [values["spec"]]
    children = [c.removeprefix("IPY_MODEL_") for c in values.get("children", []) if isinstance(c, str)]
    if model.get("model_name") in ("TabModel", "AccordionModel", "StackModel"):
        index = values.get("selected_index")
        children = children[index or 0:(index or 0) + 1] if children else []
    return [spec for child in children for spec in chart_specs(child, state)]


def add_static_charts(nb: nbformat.NotebookNode) -> int:
    """Give every chart-holding widget output a PNG of its chart and drop its widget-view reference.

    Reads the widget state that the execution stored in ``nb.metadata`` (which the caller then drops).
    Returns how many outputs got a picture.
    """
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    drawn = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for output in cell.outputs:
            view = output.get("data", {}).get(WIDGET_VIEW)
            if view is None:
                continue
            specs = chart_specs(view.get("model_id", ""), state)
            if not specs:
                continue
            # the first chart is what the widget shows first (a tab's selected view)
            png = static_png(specs[0], scale=PNG_SCALE)
            width, height = png_size(png)
            output.data["image/png"] = base64.b64encode(png).decode("ascii")
            output.metadata["image/png"] = {"width": round(width / PNG_SCALE), "height": round(height / PNG_SCALE)}
            del output.data[WIDGET_VIEW]
            drawn += 1
    return drawn


def execute(path: Path, timeout: int = 600) -> float:
    """Execute one notebook in place; returns the seconds it took."""
    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}},
                   store_widget_state=True, record_timing=False,
                   # one output per stream and cell, however the kernel's flushes fell (as nbval compares them)
                   coalesce_streams=True).execute()
    seconds = time.perf_counter() - t0
    charts = add_static_charts(nb)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nbformat.write(nb, path)
    size = path.stat().st_size
    flag = "  (over the size limit)" if size > MAX_BYTES else ""
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    print(f"{name}: executed in {seconds:.1f} s, {charts} chart pictures, {size / 1e3:.0f} kB{flag}")
    return seconds


if __name__ == "__main__":
    paths = [Path(p).resolve() for p in sys.argv[1:]] or sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
    for p in paths:
        execute(p)
