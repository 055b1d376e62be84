"""HTML comes from the templates in dfit_nb/templates, autoescaped: a user's name never becomes markup."""

from __future__ import annotations

import html
from importlib import resources

import jax
import jax.numpy as jnp

import dfit_nb
from dfit_nb import _html
from dfit_nb.sim import presets

# no "/": a region path splits there
HOSTILE = "<!--<script>alert(1)<script> p|q & <img src=x onerror=alert(1)> 'quoted\" \u00e9"


def _no_markup_from(name: str, page: str) -> None:
    assert "<script" not in page and "<img" not in page and "<!--" not in page
    assert name in html.unescape(page)  # shown, as text


def test_every_template_is_a_file_of_the_package_and_escapes():
    names = sorted(p.name for p in resources.files("dfit_nb").joinpath("templates").iterdir())
    assert "report.html.j2" in names and "playbook.html.j2" in names and "trace.html.j2" in names
    assert _html._environment().autoescape is True  # for every template, whatever its name
    assert _html.render("pre.html.j2", text=HOSTILE).startswith("<pre>&lt;!--&lt;script&gt;")
    assert _html.render("pre.html.j2", text=_html.trusted("<b>x</b>")) == "<pre><b>x</b></pre>"


def test_a_hostile_machine_name_is_text_in_the_hardware_repr():
    _no_markup_from(repr(HOSTILE), presets.get("npu_like").replace(name=HOSTILE)._repr_html_())  # describe() quotes it


def test_a_hostile_region_name_is_text_in_the_trace_repr():
    def f(x):
        with jax.named_scope(HOSTILE):
            return jnp.tanh(x @ x)

    page = dfit_nb.capture(f, jnp.ones((4, 4)))._repr_html_()
    _no_markup_from(HOSTILE, page)
    assert page.count("<tr>") >= 2  # the root and the hostile region, each a row


def test_the_widgets_status_lines_escape_names():
    line = _html.macro("widgets.html.j2", "status", 12.3, HOSTILE, HOSTILE, [HOSTILE])
    _no_markup_from(HOSTILE, line)
    assert line.startswith("updated in 12 ms; machine <code>") and line.count("<code>") == 2
    assert _html.macro("widgets.html.j2", "focus", "", None) == "<i>no selection</i>"
    focus = _html.macro("widgets.html.j2", "focus", HOSTILE, (1e-6, 2e-6))
    _no_markup_from(HOSTILE, focus)
    assert focus.startswith("narrowed to region <code>") and focus.endswith(", window 1-2 us")
    assert _html.macro("widgets.html.j2", "focus", "", (1e-6, 2e-6)) == "narrowed to window 1-2 us"
