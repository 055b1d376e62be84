"""The report page's charts: which views it shows (:func:`chart_list`, of the :func:`featured` preset, and
:func:`comparison_chart` across presets), each embedded as script-safe JSON (:func:`embedded_json`) drawn by the
Vega bundle inlined once (:func:`bundle`, kept on disk), or as static SVG (:func:`page_charts`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from . import views
from ._atomic import atomic_file
from ._html import trusted
from ._report_results import SINGLE_STYLES, PresetResult


@functools.lru_cache(maxsize=1)
def bundle() -> str:
    """Vega + Vega-Lite + vega-embed as one script (about 0.9 MB), for the installed Altair's Vega-Lite version.

    vl-convert bundles it with its JavaScript toolchain on every call (2-5 s, a large part of a warm
    ``dfit-nb report``), yet it depends only on vl-convert's and Vega-Lite's versions: it is kept on disk under
    dfit_nb's cache directory (beside JAX's compilation cache, ``$XDG_CACHE_HOME/dfit_nb/vega``), keyed by both,
    written atomically, and rebuilt whenever the file cannot be read or written.
    """
    import altair as alt
    import vl_convert as vlc

    wanted = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    version = f"v{wanted}" if wanted in vlc.get_vegalite_versions() else None
    stored = _bundle_path(str(getattr(vlc, "__version__", "unknown")), version or "default")
    try:
        return stored.read_text(encoding="utf-8") if stored is not None else _build_bundle(vlc, version, None)
    except (OSError, UnicodeError):  # not there yet, or unreadable: build it, keep it if we can
        return _build_bundle(vlc, version, stored)


def _bundle_path(vl_convert_version: str, vl_version: str) -> Path | None:
    """Where the bundle for these versions is kept, or ``None`` without a usable home/cache directory."""
    from ._runtime.compile_cache import default_directory

    try:
        root = default_directory().parent
    except RuntimeError:  # Path.home() with no home directory
        return None
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", f"{vl_convert_version}-{vl_version}")
    return root / "vega" / f"bundle-{safe}.js"


def _build_bundle(vlc: Any, version: str | None, stored: Path | None) -> str:
    js = vlc.javascript_bundle(vl_version=version).replace("</script", "<\\/script")
    if stored is None:
        return js
    # a read-only cache: the bundle is simply built again next time
    with contextlib.suppress(OSError):
        stored.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(stored, "w", permissions=0o644) as f:  # readers see the whole bundle or none
            f.write(js)
    return js


def bundle_available() -> bool:
    """Whether the interactive (inline JavaScript) charts can be built here."""
    try:
        return bool(bundle())
    except Exception:  # an older vl-convert without javascript_bundle, or its runtime failing
        return False


def comparison_chart(results: Sequence[PresetResult]) -> Any:
    """Latency and energy of every preset under each single style and its hybrid policy (log scales)."""
    import altair as alt

    rows = []
    for r in results:
        if r.policy is None:
            s = r.run.summary
            rows.append({"preset": r.name, "policy": str(r.run.attrs["dataflow"]),
                         "latency_us": float(s["latency_s"]) * 1e6, "energy_mj": float(s["energy_j"]) * 1e3})
            continue
        b = r.policy.baselines
        for p in b["policy"].values:
            rows.append({"preset": r.name, "policy": str(p), "latency_us": float(b["latency_s"].sel(policy=p)) * 1e6,
                         "energy_mj": float(b["energy_j"].sel(policy=p)) * 1e3})
    df = pd.DataFrame(rows)
    order = [r.name for r in results]
    styles = [*SINGLE_STYLES, "hybrid"]
    base = alt.Chart(df).mark_point(filled=True, size=70, opacity=0.85).encode(
        y=alt.Y("preset:N", sort=order, title=None),
        color=alt.Color("policy:N", sort=styles, title="dataflow"),
        tooltip=["preset", "policy", alt.Tooltip("latency_us:Q", format=".4g", title="latency (us)"),
                 alt.Tooltip("energy_mj:Q", format=".4g", title="energy (mJ)")],
    ).properties(width=320)
    lat = base.encode(x=alt.X("latency_us:Q", scale=alt.Scale(type="log"), title="latency (us, log)"))
    en = base.encode(x=alt.X("energy_mj:Q", scale=alt.Scale(type="log"), title="energy (mJ, log)"))
    return alt.hconcat(lat, en).properties(title=alt.TitleParams(
        "Presets compared", subtitle="replayed latency and energy of one call under each single dataflow and the "
                                     "hybrid policy"))


@dataclasses.dataclass(frozen=True)
class NothingToShow:
    """A chart left out because its view would be empty, and why (one line on the page instead)."""

    why: str


def featured(results: Sequence[PresetResult]) -> PresetResult:
    """The preset the page charts: the first with more than one tile (a single tile's utilisation heatmap is
    one square and its NoC carries nothing), else the first."""
    return next((r for r in results if float(r.hw.tiles) > 1), results[0])


def chart_list(trace: Any, first: PresetResult, results: Sequence[PresetResult]) -> list[tuple[str, str, Any]]:
    """(key, heading, builder) of every chart of the page."""
    run, pol, hw = first.run, first.policy, first.hw
    noc = float(run.cube["link_load"].sum()) if "link_load" in run.cube else 0.0
    charts: list[tuple[str, str, Any]] = [
        ("regions", "Regions: energy per named scope", lambda: views.regions(run, metric="energy")),
        ("roofline", "Roofline", lambda: views.roofline(run, hw, trace)),
        ("timeline", "Timeline", lambda: views.timeline(run)),
        ("utilization", "Utilisation", lambda: views.utilization(run)),
        ("noc_load", "NoC load", (lambda: views.noc_load(run)) if noc > 0 else (lambda: NothingToShow(
            f"{first.name} has one tile: no data crosses its mesh" if float(hw.tiles) <= 1
            else f"no op of this program sends data over {first.name}'s mesh"))),
    ]
    if pol is not None:
        charts += [
            ("traffic_mix", "Traffic mix per policy", lambda: views.traffic_mix(pol)),
            ("buffer_pressure", "Buffer pressure per policy",
             lambda: views.buffer_pressure(pol.artifacts["buffer_pressure"])),
            ("policy", "Hybrid policy", lambda: views.policy(pol)),
            ("reuse_map", "Reuse factors under the policy", lambda: views.reuse_map(pol)),
        ]
    else:
        charts += [("traffic_mix", "Traffic mix", lambda: views.traffic_mix(run)),
                   ("buffer_pressure", "Buffer pressure", lambda: views.buffer_pressure(run))]
    if len(results) > 1:
        charts.append(("compare", "Presets compared", lambda: comparison_chart(results)))
    return charts


def _svg(spec: dict[str, Any]) -> str:
    import vl_convert as vlc

    return vlc.vegalite_to_svg(json.dumps(spec))


def embedded_json(spec: Any) -> str:
    r"""``spec`` as JSON safe inside a ``<script>`` element, whatever its strings hold (region names are a user's).

    In JSON ``<``, ``>`` and ``&`` occur only inside strings, where ``\u003c``, ``\u003e`` and ``\u0026`` mean the
    same characters to ``JSON.parse``; escaped, no ``</script>`` can close the element early and no ``<!--``
    can switch the HTML parser into the script-data-escaped state (a region named ``<!--<script>`` stopped every
    chart of the page from rendering).

    >>> print(embedded_json({"region": "<!--<script></script>"}))
    {"region":"\u003c!--\u003cscript\u003e\u003c/script\u003e"}
    """
    text = json.dumps(spec, separators=(",", ":"), allow_nan=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page_charts(specs: Sequence[tuple[str, str, Any]], mode: str) -> list[dict[str, Any]]:
    """One entry per chart for the page: its spec as script-safe JSON (interactive), its SVG (static), or the one
    line that replaces it (nothing to show, or why it failed)."""
    out = []
    for key, heading, spec in specs:
        chart: dict[str, Any] = {"key": key, "heading": heading}
        if isinstance(spec, NothingToShow):
            chart["nothing"] = spec.why
        elif isinstance(spec, str):
            chart["error"] = f"this chart could not be built: {spec}"
        elif mode == "interactive":
            chart["spec"] = trusted(embedded_json(spec))  # every "<", ">" and "&" escaped as JSON
        else:
            try:
                chart["svg"] = trusted(_svg(spec))  # vl-convert's SVG: its text is XML-escaped
            except Exception as err:
                chart["error"] = f"this chart could not be rendered: {type(err).__name__}: {err}"
        out.append(chart)
    return out
