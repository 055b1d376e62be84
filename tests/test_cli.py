"""``dfit-nb report``: the printed tables, the files it writes, bad input, and the HTML report in a real browser."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import dfit_nb
from dfit_nb.cli import main, parse_spec

from .events import perfetto_ui


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """One report build shared by the module: the mlp example on npu_like, its trace saved too (capsys is
    function-scoped: output is redirected by hand)."""
    out = tmp_path_factory.mktemp("report")
    buf, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
        code = main(["report", "--example", "mlp", "--hw", "npu_like", "-o", str(out / "r"),
                     "--save-trace", str(out / "m.nc")])
    return {"code": code, "out": buf.getvalue(), "err": err.getvalue(), "dir": out / "r", "trace": out / "m.nc"}


def test_report_writes_every_file(report):
    assert report["code"] == 0, report["err"]
    d = report["dir"]
    names = sorted(p.name for p in d.iterdir())
    assert names == ["npu_like.nc", "npu_like.perfetto.json", "playbook_npu_like.html", "playbook_npu_like.md",
                     "report.html"]
    run = dfit_nb.load_run(d / "npu_like.nc")
    assert run.attrs["hardware"] == "npu_like" and int(run.summary["n_events"]) > 0
    trace_events = json.loads((d / "npu_like.perfetto.json").read_text())
    assert len(trace_events["traceEvents"]) > 0
    assert dfit_nb.load_trace(report["trace"]).ops.sizes["op"] == 21
    assert (d / "playbook_npu_like.md").read_text().startswith("# Dataflow policy playbook: mlp on npu_like")


def test_report_prints_the_tables_and_where_the_files_are(report):
    out = report["out"]
    assert "dense_0" in out and "MFLOP" in out  # the region table
    assert "ops costed alone" in out and "replayed on each preset" in out and "bottleneck" in out
    assert "ops alone vs the replay" in out  # the reconciliation: one story from the one model
    assert "hybrid dataflow policy per preset" in out and "vs ws E" in out
    assert "npu_like" in out and "tpu_like" not in out
    assert str(report["dir"] / "report.html") in out and "MB" in out and "saved" in out


def test_report_html_content(report):
    page = (report["dir"] / "report.html").read_text()
    assert page.count("<script type='module'>") == 2  # the Vega bundle once, the embedding code once
    # (membership checks on lists: pytest's diff of a 1.4 MB page would take minutes)
    wanted = ["What was captured", "Summary per preset", "Hybrid dataflow policy", "Playbook: npu_like",
              "href='npu_like.nc'", "href='npu_like.perfetto.json'", "href='playbook_npu_like.md'",
              *(f"data-target='chart-{key}'" for key in ("regions", "roofline", "timeline", "utilization",
                                                          "traffic_mix", "noc_load", "buffer_pressure", "policy"))]
    assert [w for w in wanted if w not in page] == []
    # outside the inlined Vega bundle (whose code holds URLs it never fetches here) nothing refers to the network
    # but the specs' "$schema" (an identifier vega-embed reads the version from, never fetched)
    start = page.index("<script type='module'>")
    rest = page[:start] + page[page.index("</script>", start):]
    urls = [u for u in re.findall(r"\"?\$?\w*\"?:?\"?https?://[^\"' <>]*", rest) if not u.startswith('"$schema"')]
    assert urls == []
    assert not re.findall(r"<link|<img|<iframe| src=", rest)


def test_cross_preset_comparison_chart(report):
    from dfit_nb.report import PresetResult, comparison_chart

    run = dfit_nb.load_run(report["dir"] / "npu_like.nc")
    results = [PresetResult(name, None, run, None, False, 0.0) for name in ("a", "b")]
    spec = comparison_chart(results).to_dict()
    assert len(spec["hconcat"]) == 2 and "$schema" in spec


@pytest.mark.parametrize("argv, token, valid", [
    (["--hw", "npu_like", "nope_like"], "'nope_like'", "tpu_like"),
    (["--module", "os.path:join", "--args", "f33[2]"], "'f33[2]'", "bf16"),
    (["--module", "os.path:join", "--args", "f32[2,x]"], "'f32[2,x]'", "whole number"),
    (["--module", "os.path:join", "--args", "f32[2]x"], "'f32[2]x'", "dtype[shape]"),
    (["--module", "no_such_pkg_xyz.mod:fn", "--args", "f32[2]"], "'no_such_pkg_xyz.mod'", "importable"),
    (["--module", "os.path:no_such_fn", "--args", "f32[2]"], "'no_such_fn'", "join"),
    (["--module", "os.path", "--args", "f32[2]"], "'os.path'", "pkg.mod:fn"),
    (["--example", "nope"], "'nope'", "encoder"),
    (["--args", "f32[2]"], "--args", "--module"),
])
def test_bad_input_exits_2_naming_the_token(capsys, argv, token, valid):
    assert main(["report", *argv]) == 2
    err = capsys.readouterr().err
    assert token in err and valid in err and "Traceback" not in err


def test_the_entry_point_exits_2_without_a_traceback():
    p = subprocess.run([sys.executable, "-m", "dfit_nb", "report", "--hw", "bogus"], capture_output=True, text=True)
    assert p.returncode == 2 and "'bogus'" in p.stderr and "Traceback" not in p.stderr


def test_parse_spec():
    s = parse_spec("bf16[2,3], i8[] bool[4]  f64[1, 2]")
    assert [(x.shape, str(x.dtype)) for x in s] == [((2, 3), "bfloat16"), ((), "int8"), ((4,), "bool"),
                                                      ((1, 2), "float64")]
    assert parse_spec("") == []


def test_module_function_is_captured_from_shapes(tmp_path, monkeypatch, capsys):
    (tmp_path / "cli_model_xyz.py").write_text(textwrap.dedent("""
        import jax, jax.numpy as jnp

        def forward(x, w):
            with jax.named_scope("proj"):
                return jnp.tanh(x @ w)
    """))
    monkeypatch.chdir(tmp_path)
    code = main(["report", "--module", "cli_model_xyz:forward", "--args", "f32[8,16] f32[16,8]", "--hw"])
    out = capsys.readouterr().out
    assert code == 0 and "forward" in out and "proj" in out and "no preset given" in out
    assert not (tmp_path / "dfit_report").exists()
    # a spec that does not fit the function is bad input too
    assert main(["report", "--module", "cli_model_xyz:forward", "--args", "f32[8,16] f32[7,8]", "--hw"]) == 2
    assert "capturing" in capsys.readouterr().err


def test_save_trace_into_the_output_folder_it_creates(tmp_path, monkeypatch, capsys):
    # -o is created before the trace is saved into it: the same folder may hold both
    (tmp_path / "cli_small_xyz.py").write_text("import jax.numpy as jnp\n\ndef f(x, w):\n    return x @ w\n")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "new" / "out"
    code = main(["report", "--module", "cli_small_xyz:f", "--args", "f32[8,16] f32[16,8]", "--hw", "scalesim_32",
                 "-o", str(out), "--save-trace", str(out / "trace.nc"), "--no-progress", "--charts", "svg"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert dfit_nb.load_trace(out / "trace.nc").ops.sizes["op"] == 1 and (out / "report.html").is_file()


# ------------------------------------------------------------------------------------------------ real browser

_MISSING = perfetto_ui.missing()


@pytest.mark.skipif(_MISSING is not None and not os.environ.get("CI"),
                    reason=f"browser check {_MISSING} (CI installs them)")
def test_the_report_renders_offline_in_headless_chromium(report):
    assert perfetto_ui.chromium() is not None, f"CI must run the browser check: it {_MISSING}"
    from playwright.sync_api import sync_playwright

    path: Path = report["dir"] / "report.html"
    requests, errors = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=perfetto_ui.chromium(), headless=True,
                                    args=perfetto_ui.BROWSER_ARGS)
        page = browser.new_page()
        page.on("request", lambda r: requests.append(r.url))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                   else route.abort())
        page.goto(path.as_uri())
        n = page.locator("div.vl").count()
        page.wait_for_function(f"document.querySelectorAll('div.vl svg.marks, div.vl canvas.marks').length >= {n}"
                               " || document.querySelector('div.vl .err') !== null", timeout=60_000)
        marks = page.evaluate("Array.from(document.querySelectorAll('div.vl')).map(d => [d.id, "
                              "d.querySelectorAll('svg.marks path, svg.marks rect, svg.marks line, "
                              "svg.marks text, svg.marks circle').length])")
        title = page.inner_text("h1")
        browser.close()
    assert title == "dfit_nb report: mlp"
    assert [u for u in requests if not u.startswith("file:")] == []
    assert errors == []
    assert n >= 9 and all(count > 0 for _, count in marks), marks
