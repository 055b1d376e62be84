"""The stored notebooks' chart pictures: static_png keeps a chart's pixels (exactly, when it has few colours)."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd
import pytest
import vl_convert
from PIL import Image

from dfit_nb.widgets import _offline


def _palette_pixels(png: bytes) -> np.ndarray:
    """(height, width, 3) pixels of an 8-bit indexed PNG written by static_png."""
    with Image.open(io.BytesIO(png), formats=["PNG"]) as image:
        assert image.mode == "P" and image.size == _offline.png_size(png), "8-bit indexed colour"
        palette = np.array(image.getpalette(), np.uint8).reshape(-1, 3)
        return palette[np.asarray(image)]


def _chart(n: int) -> dict:
    df = pd.DataFrame({"x": np.arange(n), "y": np.sin(np.arange(n) / 3.0), "k": np.arange(n) % 4})
    return alt.Chart(df).mark_line().encode(x="x", y="y", color="k:N").properties(width=300, height=120).to_dict()


def test_the_picture_keeps_the_charts_pixels_and_is_far_smaller():
    spec = _chart(60)
    original = _offline._rgb_pixels(vl_convert.vegalite_to_png(spec, scale=1.0, allowed_base_urls=[]))
    png = _offline.static_png(spec)
    pixels = _palette_pixels(png)
    assert pixels.shape == original.shape
    n_colours = len(np.unique(original.reshape(-1, 3), axis=0))
    assert n_colours > 256, "anti-aliased lines: more colours than a palette holds"
    error = np.abs(pixels.astype(int) - original.astype(int))
    assert error.mean() < 1.0 and (error.max(axis=-1) <= 24).mean() > 0.99  # nearest colours, nothing lost
    assert len(png) < len(vl_convert.vegalite_to_png(spec, scale=1.0)) / 3


def test_a_chart_with_few_colours_is_kept_exactly():
    spec = alt.Chart(pd.DataFrame({"x": ["a", "b"], "y": [1, 2]})).mark_bar().encode(x="x", y="y").to_dict()
    spec["config"] = {"axis": {"labels": False, "title": None, "grid": False, "domain": False, "ticks": False}}
    original = _offline._rgb_pixels(vl_convert.vegalite_to_png(spec, scale=1.0, allowed_base_urls=[]))
    assert len(np.unique(original.reshape(-1, 3), axis=0)) <= 256
    assert np.array_equal(_palette_pixels(_offline.static_png(spec)), original)


def test_bad_palettes_and_non_pngs_are_named():
    with pytest.raises(ValueError, match="colors=300"):
        _offline.static_png(_chart(5), colors=300)
    with pytest.raises(ValueError, match="not a PNG"):
        _offline.png_size(b"GIF89a" + b"\0" * 30)


@pytest.mark.parametrize("scale", [0, -1.0, float("nan"), 1e5])
def test_a_scale_vl_convert_cannot_draw_is_named_not_a_panic_or_an_abort(scale):
    with pytest.raises(ValueError, match=r"static_png\(\).*scale"):
        _offline.static_png(_chart(5), scale=scale)


def _script():
    path = Path(__file__).resolve().parents[2] / "scripts" / "execute_notebooks.py"
    spec = importlib.util.spec_from_file_location("execute_notebooks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_picture_of_a_widget_is_its_visible_chart():
    """A box lists its charts in order; a tab shows its selected child only; other widgets hold none."""
    chart = {"model_name": "AnyModel", "state": {"spec": {"mark": "bar"}}}
    state = {"a": chart, "b": {"model_name": "AnyModel", "state": {"spec": {"mark": "line"}}},
             "slider": {"model_name": "IntSliderModel", "state": {"value": 3}},
             "tabs": {"model_name": "TabModel", "state": {"children": ["IPY_MODEL_a", "IPY_MODEL_b"],
                                                         "selected_index": 1}},
             "box": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_slider", "IPY_MODEL_tabs",
                                                                      "IPY_MODEL_a"]}}}
    specs = _script().chart_specs
    assert specs("box", state) == [{"mark": "line"}, {"mark": "bar"}]
    assert specs("slider", state) == [] and specs("missing", state) == []
    state["tabs"]["state"]["selected_index"] = None
    assert specs("tabs", state) == [{"mark": "bar"}]
