"""The calibration view: a valid spec, drawn by Vega offline, held-out rows marked, errors named."""

from __future__ import annotations

import pandas as pd
import pytest

from dfit_nb.sim import presets
from dfit_nb.sim.calibration import calibrate, predict
from dfit_nb.views import calibration
from tests.views.test_program import _check


@pytest.fixture(scope="module")
def cal():
    hw = presets.get("tpu_v4")
    rows = pd.DataFrame({"m": [128, 384, 1024, 2048, 4096] * 2, "k": [256] * 5 + [2048] * 5, "n": [512] * 10,
                         "dtype": ["float16"] * 10})
    rows["time_s"] = predict(rows, hw.replace(clock_ghz=0.9, op_overhead_cycles=1500.0))["seconds"]
    return calibrate(rows, hw, ["clock_ghz", "op_overhead_cycles"])


def test_the_view_draws_both_machines_and_marks_held_out_rows(cal):
    spec = _check(calibration(cal))
    (rows,) = [r for r in spec["datasets"].values() if r and "held_out" in r[0]]
    assert {r["machine"] for r in rows} == {"tpu_v4 (as given)", "tpu_v4 (calibrated)"}
    assert sum(r["held_out"] for r in rows) == 2 * int((~cal.rows["fitted"]).sum())
    subtitle = " ".join(spec["title"]["subtitle"])
    assert "held-out MAPE" in subtitle and "converged" in spec["title"]["text"]


def test_one_machine_and_a_bad_choice(cal):
    spec = _check(calibration(cal, machine="fitted"))
    (rows,) = [r for r in spec["datasets"].values() if r and "held_out" in r[0]]
    assert {r["machine"] for r in rows} == {"tpu_v4 (calibrated)"}
    with pytest.raises(ValueError, match="machine must be"):
        calibration(cal, machine="all")
