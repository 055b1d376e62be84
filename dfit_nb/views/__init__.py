"""Charts: pure functions from Traces, Runs, Policies and sweep Datasets to Altair charts.

No ipywidgets here (``dfit_nb.widgets`` composes these); every chart embeds at
most :data:`~dfit_nb.views._common.MAX_ROWS` rows, aggregating first and saying
so in its subtitle. Render offline with :func:`png` (vl-convert) or
``chart.save(path, inline=True)``.
"""

from .._extras import require

require("ui", "dfit_nb.views", ("altair", "vl_convert"))

from ._common import (
    MAX_PNG_PIXELS,
    MAX_ROWS,
    ViewInputError,
    check_region,
    check_window,
    describe,
    expect,
    in_region,
    png,
    render_png,
)
from .calibration import calibration
from .program import pareto_mask, policy, regions, reuse_map, roofline, sweep, traffic_mix
from .run import buffer_pressure, compare, noc_load, timeline, utilization
from .thermal import temperature

__all__ = ["MAX_PNG_PIXELS", "MAX_ROWS", "ViewInputError", "buffer_pressure", "calibration", "check_region",
           "check_window", "compare", "describe", "expect", "in_region", "noc_load", "pareto_mask", "png", "policy",
           "regions", "render_png", "reuse_map", "roofline", "sweep", "temperature", "timeline", "traffic_mix",
           "utilization"]
