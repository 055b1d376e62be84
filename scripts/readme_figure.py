"""Render the README's picture with the project's own code: ``python scripts/readme_figure.py``.

The bundled encoder, captured statically and replayed weight-stationary on ``npu_like`` (a 4x5 grid of 16x16
arrays, time-multiplexed): the timeline by region beside the roofline's DRAM panel, rendered offline by
vl-convert.
"""

from __future__ import annotations

from pathlib import Path

import altair as alt

import dfit_nb
from dfit_nb import views
from dfit_nb.sim import presets

OUT = Path(__file__).resolve().parents[1] / "docs" / "img" / "encoder_npu_like.png"


def main() -> Path:
    fn, args = dfit_nb.examples.get("encoder").build()
    trace = dfit_nb.capture(fn, *args)
    run = dfit_nb.replay(trace, presets.get("npu_like"), "ws")
    timeline = views.timeline(run, by="region", color="kind").properties(width=560, height=330)
    utilization = views.utilization(run)
    chart = alt.hconcat(timeline, utilization).resolve_scale(color="independent")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_bytes(views.png(chart, scale=1.0))
    print(f"wrote {OUT} ({OUT.stat().st_size / 1e3:.0f} kB): {run}")
    return OUT


if __name__ == "__main__":
    main()
