"""Offline rendering: charts must never need a CDN.

Altair 6's default ``html`` renderer loads Vega from a CDN (it fails offline) and
JupyterLab 4.6 ships no renderer for Vega-Lite v6's mimetype. The offline path
chosen here is ``alt.JupyterChart`` with its JavaScript bundled into the
widget (``JupyterChart.enable_offline(True)``), shown through Altair's
``jupyter`` renderer with ``offline=True``: interactive, selections readable
from Python, and no network. It becomes the default on import of
:mod:`dfit_nb.widgets` only while the user has not chosen a renderer of their
own (Altair's ``default`` is active); a user's choice is left alone.

A stored notebook cannot keep those widgets (their state holds the whole Vega
bundle); :func:`static_png` is the picture that stands in for a chart there
(``scripts/execute_notebooks.py``): rendered by vl-convert, offline, and
re-encoded (by Pillow) as a 256-colour palette PNG, about a tenth of vl-convert's bytes.
"""

from __future__ import annotations

import io
from typing import Any

import altair as alt
import numpy as np

_ENABLED = False


def enable_offline(force: bool = False) -> str:
    """Make offline JupyterChart rendering the default (unless the user chose a renderer); returns the active one.

    >>> import altair as alt
    >>> enable_offline() in alt.renderers.names()
    True
    """
    global _ENABLED
    alt.JupyterChart.enable_offline(True)
    if force or alt.renderers.active == "default" or _ENABLED:
        alt.renderers.enable("jupyter", offline=True)
        _ENABLED = True
    return alt.renderers.active


def png_size(png: bytes) -> tuple[int, int]:
    """Width and height in pixels of a PNG image (read from its header by Pillow).

    >>> png_size(static_png({"mark": "point", "width": 40, "height": 30}))[0] > 40
    True
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(png), formats=["PNG"]) as image:
            return image.size
    except UnidentifiedImageError as err:
        raise ValueError(f"not a PNG image: it starts {png[:16]!r}") from err


def static_png(spec: dict[str, Any], scale: float = 1.0, colors: int = 256) -> bytes:
    """A compact PNG of a Vega-Lite ``spec``, rendered offline by vl-convert (no URL may be fetched).

    vl-convert writes 8-bit RGBA rows with the Sub filter and fast compression: a chart of 800 x 350 pixels
    takes 100-330 kB, too much for a notebook that stores several. Charts are a few flat colours plus
    anti-aliasing, so the image is re-encoded (by Pillow) with a palette of the ``colors`` most frequent colours
    (every other colour mapped to its nearest), composited onto white, deflated at level 9: 7-22 kB for the
    tutorials' charts with no visible change.

    Parameters
    ----------
    spec : dict
        A Vega-Lite specification with its data inline (``chart.to_dict()``, or a ``JupyterChart``'s ``spec``).
    scale : float
        Pixels per CSS pixel: finite, > 0, and within :data:`dfit_nb.views.MAX_PNG_PIXELS` pixels in all.
    colors : int
        Palette size, 2 to 256.

    Returns
    -------
    bytes
        The PNG file.

    Examples
    --------
    >>> png = static_png({"data": {"values": [{"x": 1}, {"x": 2}]}, "mark": "bar", "encoding": {"x": {"field": "x"}}})
    >>> png[:4] == b"\\x89PNG" and len(png) < 2_000
    True
    """
    from ..views import render_png

    if not 2 <= colors <= 256:
        raise ValueError(f"colors={colors!r}: a PNG palette holds 2 to 256 colours")
    png = render_png(spec, scale, "static_png", allowed_base_urls=[])  # a scale vl-convert can draw, or named
    return _palette_png(_rgb_pixels(png), colors)


def _rgb_pixels(png: bytes) -> np.ndarray:
    """(height, width, 3) uint8 pixels of a PNG image, composited onto white."""
    from PIL import Image

    with Image.open(io.BytesIO(png), formats=["PNG"]) as image:
        rgba = np.asarray(image.convert("RGBA"))
    rgb, alpha = rgba[..., :3].astype(np.int32), rgba[..., 3:].astype(np.int32)
    # rounded to nearest: a pixel of alpha 255 keeps its colour exactly
    return ((rgb * alpha + 255 * (255 - alpha) + 127) // 255).astype(np.uint8)


def _palette_png(rgb: np.ndarray, colors: int) -> bytes:
    """An indexed-colour PNG of ``rgb``: the most frequent colours, every other mapped to its nearest."""
    from PIL import Image

    height, width, _ = rgb.shape
    key = (rgb[..., 0].astype(np.int32) << 16) | (rgb[..., 1].astype(np.int32) << 8) | rgb[..., 2]
    unique, inverse, counts = np.unique(key.reshape(-1), return_inverse=True, return_counts=True)
    palette = unique if len(unique) <= colors else unique[np.argsort(-counts, kind="stable")[:colors]]
    channels = np.stack([(unique >> s) & 255 for s in (16, 8, 0)], 1).astype(np.float32)
    chosen = np.stack([(palette >> s) & 255 for s in (16, 8, 0)], 1).astype(np.float32)
    nearest = np.empty(len(unique), np.intp)
    for start in range(0, len(unique), 8192):  # bounded memory: 8192 x 256 distances at a time
        block = channels[start:start + 8192]
        nearest[start:start + 8192] = (-2 * block @ chosen.T + (chosen ** 2).sum(1)).argmin(1)
    image = Image.fromarray(nearest[inverse.reshape(-1)].reshape(height, width).astype(np.uint8), "P")
    image.putpalette(chosen.astype(np.uint8).tobytes())
    out = io.BytesIO()
    image.save(out, "PNG", compress_level=9)
    return out.getvalue()
