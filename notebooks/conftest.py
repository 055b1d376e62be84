"""nbval runs the tutorials; the real-chip tutorial reads measurements outside the repository.

Every tutorial is an end-to-end check of 40-100 s (a kernel, captures, replays, charts), so its cells are marked
``slow``: ``python -m pytest -m "not slow"`` leaves them out of the inner loop, and the full run keeps them.

``07_real_chip_calibration`` needs ``../shared/data/tpu_v4_matmul/`` (measured TPU v4 matmuls from the public
SCALE-Sim-validation project, kept out of the repository). Where a plain clone lacks that folder its cells are
skipped with a message that says where the data comes from, rather than failing on a missing file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "tpu_v4_matmul"
NEEDS_DATA = {"07_real_chip_calibration.ipynb"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if Path(str(item.fspath)).suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
    if DATA.is_dir():
        return
    skip = pytest.mark.skip(reason=f"{DATA} is absent: the measured TPU v4 matmuls live in the project's shared "
                                   "data folder (../shared/data/tpu_v4_matmul, from the public SCALE-Sim-validation "
                                   "project)")
    for item in items:
        if Path(str(item.fspath)).name in NEEDS_DATA:
            item.add_marker(skip)
