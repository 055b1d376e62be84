"""Shared helpers of the chart builders: row budgets, titles that say when data were aggregated, PNG export."""

from __future__ import annotations

from typing import Any

import altair as alt
import numpy as np
import pandas as pd

#: rows a chart may embed (Altair's MaxRowsError fires at 5,000 by default; specs stay small)
MAX_ROWS = 4000


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


def require(ds: Any, names: tuple[str, ...], view: str, part: str) -> None:
    """Raise a clear error when ``ds`` lacks variables a view needs (a Run from an older schema, a foreign Dataset).

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


def in_region(paths: Any, region: str | None) -> Any:
    """Boolean mask: which region paths lie in ``region``'s subtree (all of them for ``None`` or ``""``).

    >>> in_region(["enc/a", "enc/ab", "enc/a/x", "dec"], "enc/a").tolist()
    [True, False, True, False]
    """
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
    """Render ``chart`` to PNG offline with vl-convert (no browser, no network)."""
    import vl_convert as vlc

    return vlc.vegalite_to_png(chart.to_json(), scale=scale)
