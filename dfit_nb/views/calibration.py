"""The calibration view: predicted against measured seconds, log-log, held-out rows marked."""

from __future__ import annotations

from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from ._common import MAX_ROWS, aggregated, expect, require, titled


def calibration(cal: Any, machine: str = "both") -> alt.LayerChart:
    """Each measured op as a point: measured seconds (x) against predicted (y), log axes, with the y = x line.

    Parameters
    ----------
    cal : Calibration
        From :func:`dfit_nb.sim.calibrate`.
    machine : {"both", "fitted", "base"}
        Which machine's predictions to draw (``both``: two colours).

    Returns
    -------
    altair.LayerChart
        Filled points are held-out rows (never fitted), hollow ones were fitted; the subtitle gives the held-out
        MAPE and Spearman of each machine drawn.

    Examples
    --------
    >>> import numpy as np, pandas as pd
    >>> from dfit_nb.sim import presets
    >>> from dfit_nb.sim.calibration import calibrate, predict
    >>> from dfit_nb.views.calibration import calibration
    >>> hw = presets.get("tpu_v4")
    >>> rows = pd.DataFrame({"m": [128, 512, 2048, 4096] * 2, "k": [256] * 4 + [2048] * 4, "n": [512] * 8,
    ...                      "dtype": ["float16"] * 8})
    >>> rows["time_s"] = predict(rows, hw.replace(clock_ghz=0.9))["seconds"]
    >>> "$schema" in calibration(calibrate(rows, hw, ["clock_ghz"])).to_dict()
    True
    """
    expect(cal, "calibration", "cal", "Calibration")
    rows = cal.rows
    require(rows, ("measured_s", "predicted_s", "base_predicted_s", "fitted", "bucket"), "calibration", "rows")
    if machine not in ("both", "fitted", "base"):
        raise ValueError(f"machine must be 'both', 'fitted' or 'base', got {machine!r}")
    chosen = {"both": ("base", "fitted"), "fitted": ("fitted",), "base": ("base",)}[machine]
    var = {"base": "base_predicted_s", "fitted": "predicted_s"}
    label = {"base": f"{cal.base.name} (as given)", "fitted": cal.hw.name}
    frames = [pd.DataFrame({"measured_s": rows["measured_s"].values, "predicted_s": rows[var[m]].values,
                            "machine": label[m], "held_out": ~rows["fitted"].values.astype(bool),
                            "bucket": rows["bucket"].values.astype(str), "m": rows["m"].values,
                            "k": rows["k"].values, "n": rows["n"].values}) for m in chosen]
    df = pd.concat(frames, ignore_index=True)
    notes = []
    if len(df) > MAX_ROWS:  # keep every held-out row's spread: sample evenly per machine
        keep = np.concatenate([np.flatnonzero(df["machine"].values == label[m])[
            np.linspace(0, (df["machine"].values == label[m]).sum() - 1, MAX_ROWS // len(chosen)).astype(int)]
            for m in chosen])
        notes.append(aggregated(len(df), len(keep), "an even sample of rows per machine"))
        df = df.iloc[keep]
    held = cal.metrics.sel(split="held_out", bucket="pooled")
    notes += [f"{label[m]}: held-out MAPE {float(held['mape'].sel(machine=m)):.1%}, Spearman "
              f"{float(held['spearman'].sel(machine=m)):.3f}" for m in chosen]
    notes.append("filled: held out (never fitted); hollow: fitted; the line is predicted = measured")
    lo = float(min(df["measured_s"].min(), df["predicted_s"].min()))
    hi = float(max(df["measured_s"].max(), df["predicted_s"].max()))
    scale = alt.Scale(type="log", domain=[lo * 0.8, hi * 1.25])
    points = alt.Chart(df).mark_point(size=28).encode(
        x=alt.X("measured_s:Q", title="measured (s)", scale=scale, axis=alt.Axis(format="~e")),
        y=alt.Y("predicted_s:Q", title="predicted (s)", scale=scale, axis=alt.Axis(format="~e")),
        color=alt.Color("machine:N", title="machine"),
        fill=alt.condition("datum.held_out", alt.Color("machine:N"), alt.value("transparent")),
        shape=alt.Shape("bucket:N", title="size bucket"),
        tooltip=["m:Q", "k:Q", "n:Q", "bucket:N", "held_out:N", alt.Tooltip("measured_s:Q", format=".3e"),
                 alt.Tooltip("predicted_s:Q", format=".3e"), "machine:N"],
    )
    line = alt.Chart(pd.DataFrame({"measured_s": [lo * 0.8, hi * 1.25], "predicted_s": [lo * 0.8, hi * 1.25]})
                     ).mark_line(color="gray", strokeDash=[4, 3]).encode(x="measured_s:Q", y="predicted_s:Q")
    chart = alt.layer(line, points).properties(width=420, height=420)
    return titled(chart, f"Predicted vs measured ({'converged' if cal.converged else 'NOT converged'})", notes)
