"""Run notebooks in a real JupyterLab, in headless Chromium, and report what the page drew.

JupyterLab is started on 127.0.0.1 with ``--LabApp.expose_app_in_browser=True``
(the page then exposes ``window.jupyterapp``), the browser is the system's
Chromium (Debian's ``chromium`` package) driven by Playwright through
``executable_path`` (nothing is downloaded), and every request that does not go
to the local server is aborted and recorded: the views must render offline.
Screenshots go to ``$DFIT_TEST_ARTIFACTS`` (default ``test-artifacts/`` in the
repository), which CI can keep.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.events.perfetto_ui import BROWSER_ARGS, chromium, lacking

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("DFIT_TEST_ARTIFACTS", ROOT / "test-artifacts"))
MARKS = ".vega-embed svg.marks, .vega-embed canvas.marks"


def missing() -> str | None:
    """Why the JupyterLab browser test cannot run here (None when it can)."""
    return lacking("playwright", "jupyterlab")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def jupyterlab(root: Path, log: Path, timeout_s: float = 90.0) -> Iterator[str]:
    """A JupyterLab server over ``root``; yields its base URL (with the token as a query string)."""
    port, token = _free_port(), secrets.token_hex(16)
    settings = root / ".settings"
    # every cell rendered (JupyterLab 4 skips off-screen cells by default, and their charts with them), no news pop-up
    for plugin, values in (("notebook-extension/tracker", {"windowingMode": "none"}),
                           ("apputils-extension/notification", {"fetchNews": "false", "checkForUpdates": False})):
        path = settings / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(root / ".jupyter"), "JUPYTER_RUNTIME_DIR": str(root / ".runtime"),
           "JUPYTERLAB_WORKSPACES_DIR": str(root / ".workspaces"), "JUPYTERLAB_SETTINGS_DIR": str(settings)}
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           f"--ServerApp.token={token}", f"--ServerApp.root_dir={root}", "--ServerApp.open_browser=False",
           "--LabApp.expose_app_in_browser=True", "--ServerApp.disable_check_xsrf=False"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=root)
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + timeout_s
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"JupyterLab exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
                try:
                    with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterLab did not answer in {timeout_s:.0f} s:\n{log.read_text()[-3000:]}")
                time.sleep(0.5)
            yield f"{base}|{token}"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


@dataclass
class Page:
    """What a notebook run in JupyterLab left on the page."""

    charts_with_marks: int
    widgets: int
    errors: list[str]
    images: int  # pictures (<img>) in the output areas: the stored static charts, if any survived the run
    screenshot: Path


_RUN_ALL = """async () => {
  const app = window.jupyterapp;
  const panel = app.shell.currentWidget;
  await panel.context.ready;
  await panel.sessionContext.ready;
  await app.commands.execute('notebook:run-all-cells');
}"""

_DONE = """() => {
  const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  if (!panel || !panel.sessionContext || !panel.sessionContext.session) return false;
  const kernel = panel.sessionContext.session.kernel;
  const prompts = [...document.querySelectorAll('.jp-Cell.jp-CodeCell .jp-InputPrompt')].map(p => p.textContent);
  return kernel && kernel.status === 'idle' && prompts.length > 0 && prompts.every(t => /\\[\\d+\\]/.test(t));
}"""

_COUNT = """(marks) => ({
  charts: [...document.querySelectorAll(marks)].filter(m => m.getBoundingClientRect().width > 0 ||
                                                            m.closest('.lm-TabPanel')).length,
  // rendered widget views (ipywidgets and anywidgets such as JupyterChart) that hold elements
  widgets: [...document.querySelectorAll('.jp-OutputArea-output')]
    .filter(o => o.querySelector('.widget-box, .vega-embed, .jupyter-widgets')).length,
  errors: [...document.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.error"]')]
          .map(e => e.textContent.slice(0, 2000)),
  images: document.querySelectorAll('.jp-OutputArea-output img').length,
})"""


def _visible_chart_image(page, scope: str) -> str:
    """A fingerprint of the first visible chart in ``scope``: its canvas pixels or its SVG markup."""
    return page.evaluate("""(scope) => {
      const root = document.querySelector(scope) || document;
      const marks = [...root.querySelectorAll('.vega-embed canvas.marks, .vega-embed svg.marks')]
        .filter(m => m.getBoundingClientRect().width > 0);
      if (!marks.length) return '';
      const m = marks[0];
      return m.tagName.toLowerCase() === 'canvas' ? m.toDataURL() : m.outerHTML;
    }""", scope)


@contextlib.contextmanager
def browser_page(server: str, artifacts: Path) -> Iterator[tuple[object, list[str], list[str]]]:
    """A Chromium page that may only talk to ``server``; yields (page, blocked requests, console errors)."""
    from playwright.sync_api import sync_playwright

    base = server.split("|")[0]
    blocked: list[str] = []
    console_errors: list[str] = []
    artifacts.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), headless=True, args=BROWSER_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})

            def route(r) -> None:
                if r.request.url.startswith(base) or r.request.url.startswith(("data:", "blob:")):
                    r.continue_()
                else:
                    blocked.append(r.request.url)
                    r.abort()

            context.route("**/*", route)
            page = context.new_page()
            page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
            yield page, blocked, console_errors
        finally:
            browser.close()


_OUTPUTS = """() => [...document.querySelectorAll('.jp-Cell.jp-CodeCell')].map(cell =>
  [...cell.querySelectorAll('.jp-OutputArea-output')].map(o => ({
    mime: o.dataset.mimeType || '',
    // pictures the browser decoded and laid out (a broken or empty image has no natural width)
    images: [...o.querySelectorAll('img')].filter(i => i.complete && i.naturalWidth > 0 &&
                                                     i.getBoundingClientRect().width > 0).length,
    marks: o.querySelectorAll('.vega-embed svg.marks, .vega-embed canvas.marks').length,
    text: o.textContent.slice(0, 200),
  })))"""


def open_notebook(page, server: str, name: str) -> None:
    """Open ``name`` (relative to the server root) in JupyterLab, as stored, and wait until its outputs are drawn."""
    base, token = server.split("|")
    page.goto(f"{base}/lab/tree/{name}?reset&token={token}", wait_until="domcontentloaded", timeout=120_000)
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget && "
                           "window.jupyterapp.shell.currentWidget.sessionContext", timeout=120_000)
    page.wait_for_function("async () => { await window.jupyterapp.shell.currentWidget.context.ready; return true; }",
                           timeout=120_000)
    # every stored picture decoded (images load asynchronously from their data: URLs)
    page.wait_for_function("() => [...document.querySelectorAll('.jp-OutputArea-output img')].every(i => i.complete)",
                           timeout=60_000, polling=250)


def stored_outputs(page) -> list[list[dict]]:
    """Per code cell, what each output area shows: its mime type, decoded pictures, Vega marks and text."""
    return page.evaluate(_OUTPUTS)


def run_notebook(page, server: str, name: str, artifacts: Path, timeout_s: float = 300.0) -> Page:
    """Open ``name`` (relative to the server root) in JupyterLab, run all cells, and count what was drawn."""
    open_notebook(page, server, name)
    page.evaluate(_RUN_ALL)
    page.wait_for_function(_DONE, timeout=timeout_s * 1000, polling=500)
    page.wait_for_selector(MARKS, timeout=60_000, state="attached")
    time.sleep(1.0)  # let the last charts finish their first render
    counts = page.evaluate(_COUNT, MARKS)
    shot = artifacts / f"{Path(name).stem}.png"
    page.screenshot(path=str(shot), full_page=True)
    return Page(counts["charts"], counts["widgets"], counts["errors"], counts["images"], shot)


def wait_for_chart_change(page, scope: str, before: str, timeout_s: float = 180.0) -> str:
    """Poll the first visible chart in ``scope`` until it differs from ``before``; returns the new fingerprint."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = _visible_chart_image(page, scope)
        if now and now != before:
            return now
        time.sleep(0.5)
    raise AssertionError(f"the chart in {scope} did not change within {timeout_s:.0f} s")


@contextlib.contextmanager
def screenshot_on_failure(page, name: str) -> Iterator[None]:
    """Keep a screenshot of the page when the block fails (the artifact that explains a CI failure)."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
        raise
