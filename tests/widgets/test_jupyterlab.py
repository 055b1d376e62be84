"""The Explorer in a real JupyterLab, in headless Chromium: cells run, charts draw marks, a slider redraws a chart.

Offline: every request that does not go to the local JupyterLab server is aborted and must not happen.
Screenshots land in ``test-artifacts/`` (``$DFIT_TEST_ARTIFACTS``). Under ``CI=true`` a missing browser fails.
"""

from __future__ import annotations

import os

import nbformat
import pytest

from tests import jupyterlab as lab

_MISSING = lab.missing()
needs_browser = pytest.mark.skipif(_MISSING is not None and not os.environ.get("CI"),
                                   reason=f"JupyterLab browser test {_MISSING} (CI installs them)")

EXPLORER_CELLS = [
    "import dfit_nb, dfit_nb.widgets\nfrom dfit_nb.widgets import Explorer",
    "fn, args = dfit_nb.examples.get('encoder').build()\ntrace = dfit_nb.capture(fn, *args)",
    "ex = Explorer(trace, 'npu_like')\nex",
]


def _explorer_notebook(root):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in EXPLORER_CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "explorer.ipynb")
    return "explorer.ipynb"


@pytest.mark.slow
@needs_browser
def test_the_explorer_draws_and_a_slider_redraws_a_chart(lab_server):
    server, root = lab_server
    name = _explorer_notebook(root)
    with lab.browser_page(server, lab.ARTIFACTS) as (page, blocked, console_errors), \
            lab.screenshot_on_failure(page, "explorer-failure"):
        seen = lab.run_notebook(page, server, name, lab.ARTIFACTS)
        assert not seen.errors, seen.errors
        assert seen.widgets >= 1, "the Explorer's widgets did not render"
        assert seen.charts_with_marks >= 1, "no chart drew marks"
        scope = ".jp-OutputArea-output .lm-TabPanel-stackedPanel:not(.lm-mod-hidden)"
        before = lab._visible_chart_image(page, scope)
        assert before, "the Explorer's visible tab has no drawn chart"
        slider = page.locator(".widget-hslider", has_text="PE rows").locator(".noUi-handle").first
        value = page.locator(".widget-hslider", has_text="PE rows").locator(".widget-readout").first
        old = value.inner_text()
        slider.focus()
        page.keyboard.press("ArrowRight")
        page.wait_for_function("([el, old]) => el.textContent.trim() !== old", arg=[value.element_handle(), old],
                               timeout=30_000)
        after = lab.wait_for_chart_change(page, scope, before)
        page.screenshot(path=str(lab.ARTIFACTS / "explorer-after-slider.png"), full_page=True)
        # a second tab draws when opened
        page.locator(".jupyter-widgets .lm-TabBar-tab", has_text="utilization").first.click()
        lab.wait_for_chart_change(page, scope, after, timeout_s=60)
        page.screenshot(path=str(lab.ARTIFACTS / "explorer-utilization.png"), full_page=True)
        assert not blocked, f"the page tried to reach the network: {blocked[:5]}"
        vega_errors = [e for e in console_errors if "vega" in e.lower() or "altair" in e.lower()]
        assert not vega_errors, vega_errors
