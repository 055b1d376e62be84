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
from dfit_nb._files import written_by_dfit
from dfit_nb.cli import main, parse_spec

from .events import perfetto_ui
from .shared import one_error_line


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
    # the first line is dfit_nb's mark (hidden when rendered), which lets the next report replace the file
    mark, blank, heading = (d / "playbook_npu_like.md").read_text().split("\n", 3)[:3]
    assert (mark, blank) == ("[//]: # (generator: dfit_nb)", "")
    assert heading == "# Dataflow policy playbook: mlp on npu_like"
    assert all(written_by_dfit(p) for p in d.iterdir())  # every file carries dfit_nb's mark
    assert not [p.name for p in d.iterdir() if p.name.startswith(".")]  # no temporary left behind


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
    (["--hw", "npu_like", "npu_like"], "'npu_like' more than once", "each preset once"),
    (["--depth", "-1", "--hw"], "--depth -1", "0 (the program) or more"),
    (["--save-trace", "", "--hw"], "--save-trace", "the path is empty"),
])
def test_bad_input_exits_2_naming_the_token(capsys, argv, token, valid):
    assert main(["report", *argv]) == 2
    err = capsys.readouterr().err
    assert token in err and valid in err and "Traceback" not in err


def test_the_entry_point_exits_2_without_a_traceback():
    p = subprocess.run([sys.executable, "-m", "dfit_nb", "report", "--hw", "bogus"], capture_output=True, text=True)
    assert p.returncode == 2 and "'bogus'" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.slow
def test_the_command_flushes_everything_before_it_skips_the_teardown(tmp_path):
    """``python -m dfit_nb`` ends with ``os._exit`` after a report (cli.run): what it printed through a pipe is all
    there, its files are complete, and the exit code is main()'s."""
    p = subprocess.run([sys.executable, "-m", "dfit_nb", "report", "--example", "mlp", "--hw", "npu_like",
                        "--no-progress", "-o", str(tmp_path / "r")], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.rstrip().splitlines()
    assert "ops costed alone" in p.stdout and lines[-1].startswith("done in ")
    assert dfit_nb.load_run(tmp_path / "r" / "npu_like.nc").attrs["hardware"] == "npu_like"
    assert (tmp_path / "r" / "report.html").read_text().rstrip().endswith("</html>")


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


@pytest.mark.slow
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


# ------------------------------------------------------------------------------------------------ --build

_BUILDERS = textwrap.dedent("""
    import jax, jax.numpy as jnp
    import flax.linen as nn

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Conv(8, (3, 3), name="conv0")(x)
            x = nn.BatchNorm(use_running_average=True, name="bn0")(x)
            x = nn.relu(nn.Conv(16, (3, 3), name="conv1")(nn.relu(x)))
            return nn.Dense(10, name="head")(x.mean(axis=(1, 2)))

    def build():
        model, x = CNN(), jnp.ones((2, 8, 8, 3))
        return model.apply, (model.init(jax.random.key(0), x), x)

    def shapes():  # structs, not arrays: static capture takes them; runtime modes make arrays of them
        return (lambda x, w: jnp.tanh(x @ w)), [jax.ShapeDtypeStruct((4, 8), jnp.float32),
                                                jax.ShapeDtypeStruct((8, 2), jnp.float32)]

    def three():
        return build()[0], build()[1], "extra"

    def a_dict():
        return {"fn": build()[0]}

    def nothing():
        pass

    def not_callable():
        return 42, ()

    def one_array():
        return (lambda x: x * 2), jnp.ones(3)

    def args_dict():
        return (lambda x: x * 2), {"x": jnp.ones(3)}

    def needs_an_argument(size):
        return build()

    def fails():
        raise FileNotFoundError("weights.msgpack not found")

    not_a_function = 7
""")


@pytest.fixture
def builders(tmp_path, monkeypatch):
    (tmp_path / "cli_builders_xyz.py").write_text(_BUILDERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield "cli_builders_xyz"
    sys.modules.pop("cli_builders_xyz", None)


def test_build_captures_a_real_model_with_its_weights_as_arguments(builders, tmp_path, capsys):
    code = main(["report", "--build", f"{builders}:build", "--hw", "--save-trace", str(tmp_path / "t.nc")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out = captured.out
    assert "<dfit_nb.Trace apply mode=static ops=27" in out
    for region in ("CNN", "conv0", "bn0", "conv1", "head"):  # Linen's module paths, in the region table
        assert re.search(rf"^\s+{re.escape(region)}\s+\d+", out, re.M), region
    # weights passed as arguments: XLA compiled the model as written, its FLOP count equals dfit_nb's
    xla, ours = re.search(r"XLA cost analysis FLOPs: (\d+) .*dfit_nb FLOPs \(flops x count\): (\d+)", out).groups()
    assert int(xla) == int(ours) == 306_212
    trace = dfit_nb.load_trace(tmp_path / "t.nc")
    assert trace.ops.sizes["op"] == 27 and "CNN/bn0" in trace.regions.region.values


@pytest.mark.parametrize("mode", ["static", "eager"])
def test_build_may_return_shape_dtype_structs(builders, capsys, mode):
    code = main(["report", "--build", f"{builders}:shapes", "--hw", "--mode", mode])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "dfit_nb FLOPs (flops x count): 128" in captured.out  # 2 x 4 x 8 x 2 (tanh: a transcendental)
    assert mode == "static" or "eager mode: plain call" in captured.out  # it ran, on arrays made from the structs


@pytest.mark.parametrize("name, said", [
    ("three", "it returned a tuple of 3 items"),
    ("a_dict", "it returned a dict"),
    ("nothing", "it returned None"),
    ("not_callable", "its first item is an int, not callable"),
    ("one_array", "its second item is an array float32[3], not a tuple or list (wrap a single argument as (x,))"),
    ("args_dict", "its second item is a dict, not a tuple or list"),
])
def test_a_build_that_returns_the_wrong_shape_exits_2_naming_what_was_expected(builders, capsys, name, said):
    assert main(["report", "--build", f"{builders}:{name}", "--hw"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and one_error_line(err)
    assert f"--build '{builders}:{name}': {name}() must return (fn, args)" in err
    assert "a tuple or list of its positional arguments" in err and said in err


@pytest.mark.parametrize("target, said", [
    (":needs_an_argument", "calling needs_an_argument() failed: TypeError: needs_an_argument() missing 1 required "
                           "positional argument: 'size' (needs_an_argument is called with no arguments"),
    (":fails", "calling fails() failed: FileNotFoundError: weights.msgpack not found"),
    (":not_a_function", "'not_a_function' is an int, not a function"),
    (":no_such_builder", "has no attribute 'no_such_builder'; its public callables: CNN, a_dict, args_dict, build"),
    ("", "expected pkg.mod:build (a module, a colon, a function of no arguments)"),
])
def test_a_build_that_cannot_be_called_exits_2(builders, capsys, target, said):
    assert main(["report", "--build", f"{builders}{target}", "--hw"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and one_error_line(err)
    assert said in err


def test_build_takes_no_args_and_excludes_module(builders, capsys):
    assert main(["report", "--build", f"{builders}:build", "--args", "f32[2]", "--hw"]) == 2
    err = capsys.readouterr().err
    assert "--build 'cli_builders_xyz:build' returns its own (fn, args): drop --args" in err
    assert main(["report", "--build", f"{builders}:build", "--module", f"{builders}:build", "--hw"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_build_whose_function_does_not_trace_is_bad_input(builders, tmp_path, capsys):
    (tmp_path / "cli_badfn_xyz.py").write_text(
        "import jax.numpy as jnp\n\ndef build():\n"
        "    return (lambda x, w: x @ w), (jnp.ones((2, 3)), jnp.ones((4, 5)))\n")
    try:
        assert main(["report", "--build", "cli_badfn_xyz:build", "--hw"]) == 2
    finally:
        sys.modules.pop("cli_badfn_xyz", None)
    err = capsys.readouterr().err
    assert err.startswith("dfit-nb: error: capturing <lambda> from --build cli_badfn_xyz:build failed: TypeError")


def test_the_help_documents_build(capsys):
    assert main(["report", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--build PKG.MOD:BUILD" in out and "(fn, args)" in out and "docs/recipes.md" in out


def test_user_code_that_calls_sys_exit_is_an_error_not_a_silent_success(tmp_path, monkeypatch, capsys):
    """A function (or a module as it is imported) that calls sys.exit ended dfit-nb with that status and no word:
    exit 0 with nothing captured looked like a success. It is bad input, said in one line, status 2."""
    (tmp_path / "cli_exits_xyz.py").write_text("import sys\n\ndef f(x):\n    sys.exit(0)\n")
    (tmp_path / "cli_exits_on_import_xyz.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.chdir(tmp_path)
    assert main(["report", "--module", "cli_exits_xyz:f", "--args", "f32[4]", "--hw"]) == 2
    assert "it called sys.exit(0); nothing was captured" in capsys.readouterr().err
    assert main(["report", "--module", "cli_exits_on_import_xyz:f", "--args", "f32[4]", "--hw"]) == 2
    assert "called sys.exit(3) while it was loaded" in capsys.readouterr().err
