"""The IPython magics, through a real (non-kernel) IPython shell: %load_ext dfit_nb, %dfit, %%dfit, %dfit_presets,
%dfit_compare, their errors and help."""

from __future__ import annotations

import subprocess
import sys
import warnings

import altair as alt
import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

import dfit_nb
from dfit_nb import magics
from dfit_nb.sim import presets
from tests.shared import ipython_shell

SETUP = """
import jax.numpy as jnp

def f(a, b):
    return jnp.tanh(a @ b)

a = jnp.ones((8, 16))
b = jnp.ones((16, 4))
"""


@pytest.fixture(scope="module")
def shell():
    """One InteractiveShell for the module, with f, a and b defined."""
    with ipython_shell() as sh:
        assert sh.run_cell(SETUP).success
        yield sh


@pytest.fixture(scope="module")
def runs(shell):
    """Two stored runs of f(a, b): ws and os on npu_like."""
    with capture_output():
        shell.run_line_magic("dfit", "--no-explorer --dataflow ws -o r_ws f(a, b)")
        shell.run_line_magic("dfit", "--no-explorer --dataflow os -o r_os f(a, b)")
    return shell.user_ns["r_ws"], shell.user_ns["r_os"]


def _state(shell):
    """What a failed magic must leave alone: the namespace (names and objects) and the Altair renderer."""
    return ({k: id(v) for k, v in shell.user_ns.items()}, alt.renderers.active, dict(alt.renderers.options),
            list(warnings.filters))


def test_import_dfit_nb_does_not_import_the_magics():
    code = ("import sys, dfit_nb\n"
            "assert 'dfit_nb.magics' not in sys.modules\n"
            "assert callable(dfit_nb.load_ipython_extension) and callable(dfit_nb.unload_ipython_extension)\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_load_ext_registers_the_magics_and_offline_rendering(shell):
    for name in ("dfit", "dfit_presets", "dfit_compare"):
        assert shell.find_line_magic(name) is not None, name
    assert shell.find_cell_magic("dfit") is not None
    assert alt.renderers.active == "jupyter"
    assert alt.renderers.options.get("offline") is True


def test_dfit_stores_run_and_trace_and_displays_the_summary(shell):
    with capture_output() as out:
        result = shell.run_line_magic("dfit", "--hw npu_like --no-explorer -o r f(a, b)")
    assert result is None
    run, trace = shell.user_ns["r"], shell.user_ns["r_trace"]
    assert isinstance(run, dfit_nb.Run) and isinstance(trace, dfit_nb.Trace)
    assert run.attrs["hardware"] == "npu_like" and run.attrs["dataflow"] == "ws"
    assert int(run.summary["macs"]) == 8 * 16 * 4
    assert trace.mode == "static"
    assert len(out.outputs) == 1
    assert out.outputs[0].data["text/html"] == run._repr_html_()


def test_dfit_in_a_cell_echoes_nothing(shell):
    with capture_output() as out:
        result = shell.run_cell("%dfit --no-explorer f(a, b=b)")
    assert result.success and result.result is None
    assert "Out[" not in out.stdout
    assert "text/html" in out.outputs[0].data


def test_dfit_shows_the_explorer_with_the_options(shell, monkeypatch):
    shown = []
    monkeypatch.setattr(magics, "display", shown.append)
    shell.run_line_magic("dfit", "--objective latency -o h f(a, b)")  # --objective alone: hybrid
    policy, run, explorer = shown  # the verified policy (replayed against every single style), then its run
    assert run is shell.user_ns["h"] and run is policy.runs["hybrid"]
    assert run.attrs["hardware"] == "npu_like" and run.attrs["dataflow"] == policy.name
    assert isinstance(explorer, dfit_nb.widgets.Explorer)
    assert explorer.trace is shell.user_ns["h_trace"]
    assert explorer.controls["preset"].value == "npu_like"
    assert explorer.controls["dataflow"].value == "hybrid"
    assert explorer.controls["objective"].value == "latency"


def test_hw_may_name_a_hardware_in_the_namespace(shell):
    shell.user_ns["mine"] = presets.get("npu_like").replace(dram_bytes_per_cycle=600.0)
    with capture_output():
        shell.run_line_magic("dfit", "--hw mine --no-explorer -o on_mine f(a, b)")
    assert float(shell.user_ns["on_mine"].attrs["hw_dram_bytes_per_cycle"]) == 600.0


def test_fusion_chooses_the_kernels(shell):
    with capture_output():
        shell.run_line_magic("dfit", "--fusion none --no-explorer -o unfused f(a, b)")
        shell.run_line_magic("dfit", "--no-explorer -o fused f(a, b)")
    unfused, fused = shell.user_ns["unfused"], shell.user_ns["fused"]
    assert unfused.attrs["fusion"] == "none" and fused.attrs["fusion"] == "rules"
    assert unfused.kernels.sizes["kernel"] == unfused.ops.sizes["op"] >= fused.kernels.sizes["kernel"]


def test_dfit_options_and_expression_keep_their_text(shell):
    """EXPR is taken verbatim after the options: quotes, spaces and keywords survive; ``--x=v`` and ``-oNAME`` work."""
    shell.user_ns["args"] = {"a": shell.user_ns["a"], "b": shell.user_ns["b"]}
    with capture_output():
        shell.run_line_magic("dfit", "--dataflow=os --no-explorer -oq f(**args)")
        shell.run_line_magic("dfit", "--no-explorer -o s -- f(args[ 'a' ], args[\"b\"])")
    assert shell.user_ns["q"].attrs["dataflow"] == "os"
    assert int(shell.user_ns["s"].summary["macs"]) == 8 * 16 * 4


def test_cell_magic_runs_the_other_lines_first(shell):
    shell.user_ns.pop("c2", None)
    cell = "c2 = b * 2\n%time c3 = 1\nf(a,\n  c2)\n"
    with capture_output() as out:
        shell.run_cell_magic("dfit", "--no-explorer -o cell", cell)
    assert shell.user_ns["c3"] == 1
    assert "c2" in shell.user_ns and isinstance(shell.user_ns["cell"], dfit_nb.Run)
    assert shell.user_ns["cell_trace"].ops.sizes["op"] >= 2
    assert any("text/html" in o.data for o in out.outputs)


def test_cell_magic_through_run_cell(shell):
    with capture_output():
        result = shell.run_cell("%%dfit --no-explorer -o cell2\nw = jnp.ones((16, 8))\nf(a, w)\n")
    assert result.success, result.error_in_exec
    assert int(shell.user_ns["cell2"].summary["macs"]) == 8 * 16 * 8


def test_spill_warning_is_shown_once_and_does_not_raise(shell):
    # static capture of shape specs: 16 MiB operands on eyeriss_like's 108 KiB of SRAM, re-read per block
    assert shell.run_cell("import jax\nbig = jax.ShapeDtypeStruct((2048, 2048), jnp.float32)").success
    before = list(warnings.filters)
    with capture_output() as out:
        shell.run_line_magic("dfit", "--no-explorer --hw eyeriss_like -o spilled f(big, big)")
    assert out.stderr.count("SpillWarning:") == 1, out.stderr
    assert "eyeriss_like" in out.stderr
    assert list(warnings.filters) == before
    assert isinstance(shell.user_ns["spilled"], dfit_nb.Run)


def test_presets_lists_every_machine(shell):
    table = shell.run_line_magic("dfit_presets", "")
    assert tuple(table.index) == presets.names()
    assert {"tiles", "PE array", "SRAM per tile", "clock GHz", "peak TOPS", "execution"} <= set(table.columns)
    with capture_output() as out:
        assert shell.run_cell("%dfit_presets").success
    for name in presets.names():
        assert name in out.stdout, name


def test_compare_shows_the_comparison_and_its_chart(shell, runs):
    with capture_output() as out:
        result = shell.run_line_magic("dfit_compare", "-o ab r_ws r_os")
    assert result is None
    ab = shell.user_ns["ab"]
    assert ab["run"].values.tolist() == ["a", "b"]
    assert "delta_energy_j" in ab
    assert len(out.outputs) == 2
    assert "text/html" in out.outputs[0].data and "delta" not in out.outputs[0].data["text/html"]  # the table
    assert "energy_j" in out.outputs[0].data["text/plain"] and "b / a" in out.outputs[0].data["text/plain"]
    assert any("vega" in k or "widget" in k for k in out.outputs[1].data), list(out.outputs[1].data)


@pytest.mark.parametrize(("magic", "line", "tokens"), [
    ("dfit", "--no-explorer -o bad f(a, nope)", ["'nope'", "not defined"]),
    ("dfit", "--no-explorer -o bad nope(a, b)", ["'nope'"]),
    ("dfit", "--no-explorer -o bad a + b", ["'a + b'", "call"]),
    ("dfit", "--no-explorer -o bad f", ["'f'", "call"]),
    ("dfit", "--no-explorer -o bad a(b)", ["'a'", "not a function"]),
    ("dfit", "--no-explorer -o bad f(a,", ["'f(a,'"]),
    ("dfit", "--hw nope_hw -o bad f(a, b)", ["'nope_hw'", "npu_like", "eyeriss_like"]),
    ("dfit", "--hw a -o bad f(a, b)", ["'a'"]),
    ("dfit", "--dataflow xx -o bad f(a, b)", ["'xx'", "--dataflow"]),
    ("dfit", "--mode fast -o bad f(a, b)", ["'fast'", "--mode"]),
    ("dfit", "--objective cheap -o bad f(a, b)", ["'cheap'"]),
    ("dfit", "--fusion xla -o bad f(a, b)", ["'xla'", "--fusion"]),
    ("dfit", "--dataflow ws --objective edp -o bad f(a, b)", ["--objective", "hybrid"]),
    ("dfit", "--bogus f(a, b)", ["'--bogus'"]),
    ("dfit", "-o 1bad f(a, b)", ["'1bad'"]),
    # issue 42, item 7: -o onto a builtin, a dunder or IPython's own names replaced them
    ("dfit", "-o __builtins__ f(a, b)", ["-o '__builtins__'", "special (dunder) name"]),
    ("dfit", "-o print f(a, b)", ["-o 'print'", "a Python builtin", "another name"]),
    ("dfit", "-o len f(a, b)", ["-o 'len'", "a Python builtin"]),
    ("dfit", "-o Out f(a, b)", ["-o 'Out'", "a name IPython uses"]),
    ("dfit", "-o class f(a, b)", ["'class'", "not a valid Python name"]),
    ("dfit_compare", "-o print r_ws r_os", ["-o 'print'", "a Python builtin"]),
    ("dfit", "--no-explorer", ["missing EXPR"]),
    ("dfit", "", ["missing EXPR"]),
    ("dfit", "--hw", ["--hw", "expected one argument"]),
    ("dfit", "-o bad f(a, b, mode='eager')", ["'mode'"]),
    ("dfit_compare", "r_ws", ["B"]),
    ("dfit_compare", "", ["A", "B"]),
    ("dfit_compare", "r_ws nope", ["'nope'", "not defined"]),
    ("dfit_compare", "r_ws a", ["'a'", "not a dfit_nb.Run"]),
    ("dfit_compare", "r_ws r_ws extra", ["extra"]),
    ("dfit_presets", "extra", ["extra"]),
])
def test_bad_input_raises_usage_error_naming_it_and_changes_nothing(shell, runs, magic, line, tokens):
    before = _state(shell)
    with capture_output(), pytest.raises(UsageError) as err:
        shell.run_line_magic(magic, line)
    for token in tokens:
        assert token in str(err.value), (token, str(err.value))
    assert _state(shell) == before
    assert "bad" not in shell.user_ns and "bad_trace" not in shell.user_ns


def test_dfit_does_not_expand_variables_in_its_line(shell):
    """Issue 42, item 7: IPython ran ``{expr}`` and expanded ``$name`` in the line before dfit_nb parsed it (code
    run by a line that was to be parsed; 181 s on a 150 kB line). ``%dfit`` is ``no_var_expand`` now: the braces
    reach dfit_nb as typed and are refused as not a call, and nothing in them runs."""
    assert getattr(magics.DfitMagics.dfit, "_ipython_magic_no_var_expand", False)
    assert getattr(magics.DfitMagics.dfit_compare, "_ipython_magic_no_var_expand", False)
    shell.user_ns["ran"], shell.user_ns["name"] = [], "expanded"
    before = _state(shell)
    for option in ("{ran.append(1)or(name)}", "$name"):  # expanded, each would store the run as 'expanded'
        with capture_output(), pytest.raises(UsageError) as err:
            shell.run_line_magic("dfit", f"--no-explorer -o {option} f(a, b)")
        assert f"-o {option!r} is not a valid Python name" in str(err.value)
    assert shell.user_ns["ran"] == [] and _state(shell) == before and "expanded" not in shell.user_ns
    del shell.user_ns["ran"], shell.user_ns["name"]


def test_an_over_long_line_is_refused_at_once(shell):
    import time

    before = _state(shell)
    line = "--no-explorer -o bad f(a, b" + ", a" * 50_000 + ")"  # 150 kB, as in the audit
    t0 = time.perf_counter()
    with capture_output(), pytest.raises(UsageError) as err:
        shell.run_line_magic("dfit", line)
    assert time.perf_counter() - t0 < 1.0
    assert f"{len(line):,} characters long" in str(err.value) and "more than 10,000" in str(err.value)
    assert "'--no-explorer -o bad f(a, b, a, a" in str(err.value)  # its start, to find it by
    assert _state(shell) == before and "bad" not in shell.user_ns


@pytest.mark.parametrize("magic", ["dfit_presets", "dfit_compare"])
def test_every_magic_neither_expands_nor_reads_an_over_long_line(shell, magic):
    """%dfit_presets expanded its line as %dfit once did: a 150 kB line ran past two minutes before its error;
    %dfit_compare's error repeated the whole line (150 kB of "unrecognized arguments"). Every magic of dfit_nb
    is no_var_expand and refuses such a line at once, naming its length."""
    import time

    assert getattr(getattr(magics.DfitMagics, magic), "_ipython_magic_no_var_expand", False)
    before = _state(shell)
    line = "a " * 75_000
    t0 = time.perf_counter()
    with capture_output(), pytest.raises(UsageError) as err:
        shell.run_line_magic(magic, line)
    assert time.perf_counter() - t0 < 1.0
    message = str(err.value)
    assert message.startswith(f"%{magic}: the line is 150,000 characters long") and len(message) < 300, message
    assert _state(shell) == before


def test_compare_of_different_programs_is_a_usage_error(shell, runs):
    with capture_output():
        shell.run_line_magic("dfit", "--no-explorer -o other f(b.T, a.T)")
    before = _state(shell)
    with pytest.raises(UsageError, match="force"):
        shell.run_line_magic("dfit_compare", "r_ws other")
    assert _state(shell) == before
    with capture_output() as out:
        shell.run_line_magic("dfit_compare", "--force r_ws other")
    assert len(out.outputs) == 2


def test_compare_of_different_programs_names_the_magics_force_option(shell, runs):
    """compare()'s message says "pass force=True"; the magic's option is --force, and its message says so."""
    with capture_output():
        shell.run_line_magic("dfit", "--no-explorer -o other2 f(b.T, a.T)")
    with pytest.raises(UsageError) as err:
        shell.run_line_magic("dfit_compare", "r_ws other2")
    assert "pass --force to compare anyway" in str(err.value) and "force=True" not in str(err.value)


@pytest.mark.parametrize("call", ["f(a, b=(yield))", "f(a, await b)", "f(a, [(yield) for _ in b])"])
def test_yield_or_await_in_the_call_is_a_usage_error(shell, call):
    """ast.parse accepts yield and await in an expression; compile refused them with a bare SyntaxError (and a
    traceback through the magic). Now a UsageError naming the call, raised before anything is evaluated; in
    %%dfit, before the cell's other lines run."""
    shell.user_ns.pop("ran", None)
    before = _state(shell)
    with pytest.raises(UsageError, match="cannot be evaluated here") as err:
        shell.run_line_magic("dfit", f"--no-explorer {call}")
    assert repr(call) in str(err.value), str(err.value)
    with pytest.raises(UsageError, match="cannot be evaluated here"):
        shell.run_cell_magic("dfit", "--no-explorer", f"ran = 1\n{call}\n")
    assert "ran" not in shell.user_ns
    assert _state(shell) == before


@pytest.mark.parametrize(("cell", "tokens"), [
    ("ran = 1\nx = a + b\n", ["'x = a + b'", "Assign"]),
    ("ran = 1\na + b\n", ["'a + b'", "BinOp"]),
    ("ran = 1\nf(a, b\n", ["not valid Python"]),
    ("\n", ["empty"]),
])
def test_bad_cell_raises_before_running_anything(shell, cell, tokens):
    shell.user_ns.pop("ran", None)
    before = _state(shell)
    with pytest.raises(UsageError) as err:
        shell.run_cell_magic("dfit", "--no-explorer -o bad", cell)
    for token in tokens:
        assert token in str(err.value), (token, str(err.value))
    assert _state(shell) == before
    with pytest.raises(UsageError, match="'f\\(a, b\\)'"):
        shell.run_cell_magic("dfit", "--no-explorer f(a, b)", "f(a, b)\n")  # a call on the magic's line


def test_cell_with_an_undefined_name_in_the_call_names_it(shell):
    with pytest.raises(UsageError, match="'undefined_in_cell'"):
        shell.run_cell_magic("dfit", "--no-explorer -o bad", "ok = 1\nf(a, undefined_in_cell)\n")
    assert "bad" not in shell.user_ns


def test_help_is_the_docstring(shell):
    doc = shell.find_line_magic("dfit").__doc__
    for text in ("%dfit [--hw PRESET]", "--dataflow", "--objective", "--mode", "-o NAME", "NAME_trace",
                 "--no-explorer", "EXPR", "%%dfit", "Returns None"):
        assert text in doc, text
    assert shell.find_cell_magic("dfit").__doc__ == doc
    assert "%dfit_compare [-o NAME] [--force] A B" in shell.find_line_magic("dfit_compare").__doc__
    assert "%dfit_presets" in shell.find_line_magic("dfit_presets").__doc__
    with capture_output() as out:
        shell.run_line_magic("pinfo", "%dfit")
    assert "%dfit [--hw PRESET]" in out.stdout


def test_unload_and_reload(shell):
    try:
        shell.run_line_magic("unload_ext", "dfit_nb")
        assert shell.find_line_magic("dfit") is None and shell.find_cell_magic("dfit") is None
        assert shell.find_line_magic("dfit_compare") is None
    finally:
        shell.run_line_magic("load_ext", "dfit_nb")
    assert shell.find_line_magic("dfit") is not None
