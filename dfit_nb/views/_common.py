"""Shared helpers of the chart builders: row budgets, titles that say when data were aggregated, PNG export."""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Sequence
from typing import Any

import altair as alt
import numpy as np
import pandas as pd
import xarray as xr

from ..errors import DfitError

#: rows a chart may embed (Altair's MaxRowsError fires at 5,000 by default; specs stay small)
MAX_ROWS = 4000
#: pixels a PNG may have (width x height after scaling): 2**26, 256 MiB of RGBA in vl-convert's buffer
MAX_PNG_PIXELS = 1 << 26
# the drawing's size in CSS pixels, on the root element of vl-convert's SVG
_SVG_SIZE = re.compile(r'<svg\b[^>]*?\swidth="(?P<width>[0-9.]+)"[^>]*?\sheight="(?P<height>[0-9.]+)"')


class ViewInputError(DfitError, TypeError):
    """A view or widget was given an object of the wrong kind (a Trace where a Run is needed, a str, None).

    The message names the parameter, what it needs and what it was given. Also a ``TypeError``.
    """


# kind -> (where such an object comes from), for the messages of :func:`expect`
_ORIGIN = {
    "Trace": "a Trace (from dfit_nb.capture)",
    "Run": "a Run (from dfit_nb.replay or dfit_nb.load_run)",
    "Policy": "a Policy (from dfit_nb.sim.select_dataflows)",
    "Calibration": "a Calibration (from dfit_nb.sim.calibrate)",
    "Hardware": "a Hardware (dfit_nb.sim.Hardware or dfit_nb.sim.presets.get(name))",
    "Dataset": "an xarray.Dataset",
}


def _classes() -> dict[str, type]:
    # imported on first use: the classes live in floors below the views, which must not load UI libraries
    from ..capture.trace import Trace
    from ..sim.calibration import Calibration
    from ..sim.hardware import Hardware
    from ..sim.policy import Policy
    from ..sim.run import Run

    return {"Trace": Trace, "Run": Run, "Policy": Policy, "Calibration": Calibration, "Hardware": Hardware,
            "Dataset": xr.Dataset}


def describe(obj: Any) -> str:
    """What ``obj`` is, as an error message says what it was given.

    >>> describe(None), describe("run.nc"), describe(3)
    ('None', "a str ('run.nc')", 'an int (3)')
    """
    if obj is None:
        return "None"
    for kind, cls in _classes().items():
        if isinstance(obj, cls):
            if kind == "Dataset":
                names = sorted(map(str, obj.data_vars))
                return (f"an xarray.Dataset with variables {names[:8]}{' ...' if len(names) > 8 else ''}"
                        if names else "an empty xarray.Dataset")
            if kind == "Hardware":
                return f"a Hardware ({obj.name!r})"
            return f"a {kind}"
    name = type(obj).__name__
    text = repr(obj)
    text = text[:60] + "..." if len(text) > 60 else text
    article = "an" if name[:1].lower() in "aeiou" else "a"
    return f"{article} {name} ({text})"


def _hint(obj: Any, kinds: Sequence[str]) -> str:
    """The usual way from what was given to what is needed."""
    cls = _classes()
    if "Run" in kinds and isinstance(obj, cls["Trace"]):
        return "; replay the trace first: dfit_nb.replay(trace, hw)"
    if "Run" in kinds and isinstance(obj, cls["Policy"]):
        return "; a policy's replays are in policy.runs (e.g. policy.runs['hybrid'])"
    if "Trace" in kinds and isinstance(obj, cls["Run"]):
        return "; pass the Trace the run was replayed from"
    if "Policy" in kinds and isinstance(obj, (cls["Run"], cls["Trace"])):
        return "; select one first: dfit_nb.sim.select_dataflows(trace, hw)"
    if isinstance(obj, (str, bytes)) and ("Run" in kinds or "Trace" in kinds):
        return "; a saved result is opened first: dfit_nb.load_run(path) or dfit_nb.load_trace(path)"
    return ""


def expect(obj: Any, view: str, param: str, *kinds: str, dataset: str = "") -> str:
    """The kind of ``obj`` among ``kinds`` ("Trace", "Run", "Policy", "Calibration", "Hardware", "Dataset"), or
    :class:`ViewInputError` saying what ``view``'s ``param`` needs and what it was given.

    ``dataset`` says which Dataset a ``"Dataset"`` kind means (e.g. ``"its cube"``).

    >>> expect(None, "timeline", "run", "Run")
    Traceback (most recent call last):
    ...
    dfit_nb.views._common.ViewInputError: timeline() needs a Run (from dfit_nb.replay or dfit_nb.load_run) as \
'run', got None
    """
    cls = _classes()
    for kind in kinds:
        if isinstance(obj, cls[kind]):
            return kind
    wanted = [_ORIGIN[k] + (f" ({dataset})" if k == "Dataset" and dataset else "") for k in kinds]
    needs = wanted[0] if len(wanted) == 1 else ", ".join(wanted[:-1]) + " or " + wanted[-1]
    raise ViewInputError(f"{view}() needs {needs} as {param!r}, got {describe(obj)}{_hint(obj, kinds)}")


def check_region(region: Any, view: str, name: str = "region") -> None:
    """``region`` (the parameter ``name``) must be a region path (str) or ``None``."""
    if region is not None and not isinstance(region, str):
        raise ViewInputError(f"{view}() needs a region path (str, e.g. 'encoder/layer_0') or None as {name!r}, "
                             f"got {describe(region)}")


def check_window(time_window: Any, view: str, name: str = "time_window") -> None:
    """``time_window`` (the parameter ``name``) must be ``None`` or two numbers ``(start_s, end_s)`` (their order
    is checked on use)."""
    if time_window is None:
        return
    ok = (isinstance(time_window, (tuple, list, np.ndarray)) and len(time_window) == 2
          and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in time_window))
    if not ok:
        raise ViewInputError(f"{view}() needs {name} as two numbers (start_s, end_s) in seconds, or None; got "
                             f"{describe(time_window)}")


def check_count(value: Any, name: str, view: str, low: int = 1) -> None:
    """``value`` must be a whole number ``>= low`` (a row budget, a number of regions)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ViewInputError(f"{view}() needs {name} as a whole number >= {low}, got {describe(value)}")
    if value < low:
        raise ValueError(f"{view}() needs {name} >= {low}, got {value}")


def titled(chart: Any, title: str, subtitle: str | list[str] | None = None) -> Any:
    """``chart`` with a title and an optional subtitle (say there when data were aggregated or binned)."""
    params = {"text": title}
    if subtitle:
        params["subtitle"] = subtitle
    return chart.properties(title=alt.TitleParams(**params))


def aggregated(n_before: int, n_after: int, how: str) -> str:
    """The subtitle line that says data were reduced, or ``""`` when they were not."""
    if n_after >= n_before:
        return ""
    return f"{n_before:,} rows aggregated to {n_after:,} ({how})"


def require(ds: Any, names: tuple[str, ...], view: str, part: str, nonempty: tuple[str, ...] = ()) -> None:
    """Raise a clear error when ``ds`` lacks variables a view needs (a Run from an older schema, a foreign Dataset),
    or has none of the dims in ``nonempty`` (a cube cut to an empty slice of time bins or tiles), which the view's
    pooling would divide by.

    >>> import xarray as xr
    >>> require(xr.Dataset({"busy": 0.0}), ("busy", "time_end"), "utilization", "cube")
    Traceback (most recent call last):
    ...
    ValueError: utilization needs ['time_end'] in the run's cube, which has ['busy']: a Run saved by an older \
dfit_nb or a Dataset of another kind; replay the trace again
    """
    have = set(getattr(ds, "data_vars", ())) | set(getattr(ds, "coords", ()))
    missing = [n for n in names if n not in have]
    if missing:
        raise ValueError(f"{view} needs {missing} in the run's {part}, which has {sorted(map(str, have))}: a Run saved "
                         "by an older dfit_nb or a Dataset of another kind; replay the trace again")
    sizes = dict(getattr(ds, "sizes", {}))
    empty = [d for d in nonempty if sizes.get(d, 1) == 0]
    if empty:
        raise ValueError(f"{view} needs at least one {' and one '.join(map(repr, empty))} in the run's {part}, which "
                         f"has the sizes {sizes}: a slice (isel/sel) that kept none of them")


def in_region(paths: Any, region: str | None) -> Any:
    """Boolean mask: which region paths lie in ``region``'s subtree (all of them for ``None`` or ``""``).

    >>> in_region(["enc/a", "enc/ab", "enc/a/x", "dec"], "enc/a").tolist()
    [True, False, True, False]
    """
    check_region(region, "in_region")
    if not region:
        return np.ones(np.shape(paths), dtype=bool)
    codes, names = pd.factorize(np.asarray(paths, dtype=object).reshape(-1))  # hash once: events repeat few paths
    inside = np.array([str(x) == region or str(x).startswith(region + "/") for x in names], dtype=bool)
    return inside[codes].reshape(np.shape(paths)) if len(names) else np.zeros(np.shape(paths), dtype=bool)


def window_mask(start: Any, end: Any, time_window: tuple[float, float] | None, what: str) -> Any:
    """Boolean mask of the intervals ``[start, end)`` that overlap ``time_window`` (same unit); clear errors."""
    if time_window is None:
        return np.ones(np.shape(start), dtype=bool)
    lo, hi = (float(v) for v in time_window)
    if not hi > lo:
        raise ValueError(f"time_window must be (start, end) with end > start, got {time_window}")
    sel = (np.asarray(end) > lo) & (np.asarray(start) < hi)
    if not sel.any():
        raise ValueError(f"time_window {time_window} overlaps no {what} of the run")
    return sel


def png(chart: Any, scale: float = 1.0) -> bytes:
    """Render ``chart`` to PNG offline with vl-convert (no browser, no network).

    ``scale`` (pixels per CSS pixel) must be a finite number > 0 that keeps the image within
    :data:`MAX_PNG_PIXELS`; otherwise :class:`ViewInputError` (not a number) or ``ValueError`` names it.
    """
    if not callable(getattr(chart, "to_json", None)):
        raise ViewInputError(f"png() needs an Altair chart (e.g. from a dfit_nb.views function), got "
                             f"{describe(chart)}")
    return render_png(chart.to_json(), scale, "png")


def render_png(spec: str | dict[str, Any], scale: Any, view: str, **options: Any) -> bytes:
    """PNG bytes of the Vega-Lite ``spec`` at ``scale``, after checking ``scale`` (``view`` names the caller).

    vl-convert is handed only a scale it can draw: 0, a negative number or NaN make it panic (a Rust backtrace
    on stderr) and a huge one makes it allocate the whole image at once, which aborts the Python process (the
    notebook's kernel) when the memory is not there. So the chart is drawn as SVG first, its size read, and the
    PNG rasterised from that SVG (the very bytes ``vegalite_to_png`` gives) only when it fits
    :data:`MAX_PNG_PIXELS`. ``options`` go to ``vegalite_to_svg`` (e.g. ``allowed_base_urls``).

    >>> render_png({"mark": "point"}, 0, "png")
    Traceback (most recent call last):
    ...
    ValueError: png() needs scale as a finite number > 0 (pixels per CSS pixel, e.g. 1 or 2), got 0
    """
    import vl_convert as vlc

    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise ViewInputError(f"{view}() needs scale as a number > 0 (pixels per CSS pixel, e.g. 1 or 2), got "
                             f"{describe(scale)}")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"{view}() needs scale as a finite number > 0 (pixels per CSS pixel, e.g. 1 or 2), got "
                         f"{scale!r}")
    svg = vlc.vegalite_to_svg(spec, **options)
    size = _SVG_SIZE.search(svg[:2000])
    if size is not None:
        width, height = float(size["width"]), float(size["height"])
        pixels = math.ceil(width * scale) * math.ceil(height * scale)
        if pixels > MAX_PNG_PIXELS:
            largest = math.sqrt(MAX_PNG_PIXELS / max(width * height, 1.0))
            raise ValueError(f"{view}(): scale={scale!r} makes a {width:g} x {height:g} chart a PNG of {pixels:,} "
                             f"pixels, more than the {MAX_PNG_PIXELS:,} one image may take; use a scale of at "
                             f"most {math.floor(largest * 100) / 100:g}")
    return vlc.svg_to_png(svg, scale=float(scale))
