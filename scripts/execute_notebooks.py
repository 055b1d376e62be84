"""Execute tutorial notebooks in place, storing their outputs for nbval.

Usage: ``python scripts/execute_notebooks.py [NB ...]`` (all of notebooks/ by default).

Widget state is not stored: an offline ``JupyterChart`` carries the whole Vega bundle in
its state (about a megabyte per chart), which would make the stored notebooks huge. The
outputs keep each widget's view reference and text form; run the notebook to see the
interactive views. Cell execution timestamps are dropped so that re-executing an unchanged
notebook leaves an unchanged file.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
MAX_BYTES = 250_000  # per stored notebook; tests/test_notebooks.py holds the same limit


def execute(path: Path, timeout: int = 600) -> float:
    """Execute one notebook in place; returns the seconds it took."""
    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}},
                   store_widget_state=False, record_timing=False).execute()
    seconds = time.perf_counter() - t0
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nbformat.write(nb, path)
    size = path.stat().st_size
    flag = "  (over the size limit)" if size > MAX_BYTES else ""
    print(f"{path.relative_to(ROOT)}: executed in {seconds:.1f} s, {size / 1e3:.0f} kB{flag}")
    return seconds


if __name__ == "__main__":
    paths = [Path(p).resolve() for p in sys.argv[1:]] or sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
    for p in paths:
        execute(p)
