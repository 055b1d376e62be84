"""Shared helpers of the chart builders: row budgets, titles that say when data were aggregated, PNG export."""

from __future__ import annotations

from typing import Any

import altair as alt

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


def png(chart: Any, scale: float = 1.0) -> bytes:
    """Render ``chart`` to PNG offline with vl-convert (no browser, no network)."""
    import vl_convert as vlc

    return vlc.vegalite_to_png(chart.to_json(), scale=scale)
