"""The catalogue of bad inputs (issue 14, items 4, 6 and 7): each is refused with the right class (the CLI: exit status
2 and one error line) and a message naming the offending field, value or token; hostile names cannot break the HTML
and Markdown outputs or steer file names; and random valid machines and op tables give finite, non-negative,
conserved costs (hypothesis). Issue 42's second audit is indexed at the end (``AUDIT_42``): each case, and the
tests here and in other files that hold it."""

from __future__ import annotations

import errno
import json
import os
import re
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import dfit_nb
from dfit_nb import _files, views
from dfit_nb.errors import CaptureError, DfitError, IntegrityError, SaveError, SaveRefusedError
from dfit_nb.sim import Hardware, HardwareError, PolicyError, SpillWarning, cost, presets, scale, select_dataflows
from dfit_nb.sim.machine import ENERGY_LEVELS
from dfit_nb.views import ViewInputError

from .events import perfetto_ui
from .shared import ipython_shell, one_error_line

# ------------------------------------------------------------------------------------------------ fixtures


def _three_layers(x, w1, w2, w3):
    with jax.named_scope("a"):
        h = jnp.tanh(x @ w1)
    with jax.named_scope("b"):
        h = jnp.tanh(h @ w2)
    with jax.named_scope("c"):
        return h @ w3


_SHAPES = ((32, 64), (64, 48), (48, 32), (32, 16))


@pytest.fixture(scope="module")
def trace():
    """Three GEMMs in regions a, b, c (program order)."""
    return dfit_nb.capture(_three_layers, *(jnp.ones(s) for s in _SHAPES))


@pytest.fixture(scope="module")
def run(trace):
    return dfit_nb.replay(trace, presets.get("npu_like"))


@pytest.fixture(scope="module")
def policy(trace):
    return select_dataflows(trace, presets.get("npu_like"), "energy", evaluate=False)


# ------------------------------------------------------------------------------------------------ item 4: Hardware

_NUMBER = "must be a number"


_HARDWARE_CASES = [
        # not numbers: named with the type given
        ("pe_rows", None, ("Hardware.pe_rows", _NUMBER, "None")),
        ("clock_ghz", None, ("Hardware.clock_ghz", "None")),
        ("dram_bytes_per_cycle", {}, ("Hardware.dram_bytes_per_cycle", "dict")),
        ("noc_link_bytes_per_cycle", {"bw": 32}, ("Hardware.noc_link_bytes_per_cycle", "dict")),
        ("tile_rows", object(), ("Hardware.tile_rows", "object")),
        ("sram_input_bytes", "262144", ("Hardware.sram_input_bytes", "str", "'262144'")),
        ("word_bytes", "bf16", ("Hardware.word_bytes", _NUMBER, "bf16")),
        ("fold_overlap", 0.5 + 0j, ("Hardware.fold_overlap", "complex")),
        ("mac_pj_1", [None, 1.0], ("Hardware.mac_pj_1", "dtype object")),
        ("pe_cols", [[8, 16], [32]], ("Hardware.pe_cols", "list")),
        # bools are numbers to Python, slips to us
        ("pe_rows", True, ("Hardware.pe_rows", "bool", "True")),
        ("pe_cols", False, ("Hardware.pe_cols", "bool", "False")),
        ("dram_bytes_per_cycle", True, ("Hardware.dram_bytes_per_cycle", "bool")),
        ("memory_overlap", np.bool_(True), ("Hardware.memory_overlap", "bool")),
        ("tile_cols", np.array([True, False]), ("Hardware.tile_cols", "bools")),
        # word sizes
        ("word_bytes", 3, ("Hardware.word_bytes = 3", "1, 2, 4 or 8")),
        ("word_bytes", 16, ("Hardware.word_bytes = 16", "1, 2, 4 or 8")),
        ("word_bytes", 6.0, ("Hardware.word_bytes = 6.0", "1, 2, 4 or 8")),
        ("word_bytes", np.array([1, 2, 3]), ("Hardware.word_bytes", "element 2", "1, 2, 4 or 8")),
        # physically meaningful ranges
        ("dram_bytes_per_cycle", 1e-300, ("Hardware.dram_bytes_per_cycle = 1e-300", "physically meaningful",
                                          "0.001")),
        ("noc_link_bytes_per_cycle", 1e-4, ("Hardware.noc_link_bytes_per_cycle = 0.0001", "physically meaningful")),
        ("clock_ghz", 1e-6, ("Hardware.clock_ghz = 1e-06", "physically meaningful", "0.001")),
        ("clock_ghz", 5e3, ("Hardware.clock_ghz = 5000.0", "<= 1000")),
        ("dram_bytes_per_cycle", np.array([16.0, 1e-9]), ("Hardware.dram_bytes_per_cycle", "element 1",
                                                          "physically meaningful")),
        # names: what region and op names may not hold (issue 42, item 5); a NUL was dropped by a .nc round trip
        ("name", "a\x00b", ("Hardware.name 'a\\x00b'", "'\\x00' (U+0000)", "Cc, Zl, Zp")),
        ("name", "npu\u2028x", ("Hardware.name 'npu\\u2028x'", "U+2028", "rename it")),
]


@pytest.mark.parametrize(("field", "value", "tokens"), [
    pytest.param(f, v, t, id=f"{f}={type(v).__name__ if type(v) is object else repr(v)}"[:48])
    for f, v, t in _HARDWARE_CASES])
def test_hardware_refuses_a_bad_field_naming_it(field, value, tokens):
    with pytest.raises(HardwareError) as info:
        Hardware(**{field: value})
    for token in tokens:
        assert token in str(info.value), (token, str(info.value))


def test_hardware_name_and_replace_are_checked_too():
    with pytest.raises(HardwareError, match=r"Hardware.name must be a str .* got None"):
        Hardware(name=None)
    with pytest.raises(HardwareError, match=r"Hardware.word_bytes = 3 is not a word size"):
        presets.get("npu_like").replace(word_bytes=3)
    with pytest.raises(HardwareError, match=r"Hardware.clock_ghz must be a number .* got a bool"):
        presets.get("npu_like").replace(clock_ghz=True)


def test_valid_machines_stay_valid_and_jax_values_stay_unchecked():
    for name in presets.names():  # every preset, and a batch of all of them
        presets.get(name).replace(name=name)
    Hardware.stack([presets.get(n) for n in presets.names() if presets.get(n).execution == "time"])
    Hardware(word_bytes=8, sram_input_bytes=1 << 20, sram_weight_bytes=1 << 20, sram_output_bytes=1 << 20,
             dram_bytes_per_cycle=1e-3, noc_link_bytes_per_cycle=np.float32(0.5), clock_ghz=1e3)
    # jax Arrays are a transformation's values (a cotangent may be 0 or negative): unchecked, as before
    Hardware(dram_bytes_per_cycle=jnp.asarray(0.0), clock_ghz=jnp.asarray(-1.0))
    hw = presets.get("npu_like")
    # JAX rebuilds the pytree with placeholders (vmap's object() sentinels): never a user's input, never refused
    batch = Hardware.stack([hw, hw.replace(pe_rows=8)])
    assert jax.vmap(lambda h: h.peak_macs_per_cycle)(batch).tolist() == [hw.peak_macs_per_cycle,
                                                                          8 * hw.pe_cols * hw.tiles]
    paths = [jax.tree_util.keystr(k) for k, _ in jax.tree_util.tree_flatten_with_path(hw)[0][:2]]
    assert paths == [".tile_rows", ".tile_cols"]  # keyed as register_dataclass keyed it
    grad = jax.grad(lambda h: h.clock_ghz * h.dram_bytes_per_cycle)(jax.tree.map(lambda x: jnp.asarray(x, float), hw))
    assert float(grad.clock_ghz) == float(hw.dram_bytes_per_cycle)


# ------------------------------------------------------------------------------------------------ item 4: pins


@pytest.mark.parametrize("budget", [0, -1.0, float("nan"), float("inf"), True, "60"])
def test_a_search_budget_that_is_no_positive_number_is_refused_naming_it(trace, budget):
    with pytest.raises(PolicyError, match=r"search_budget_s must be a positive number of seconds or None"):
        select_dataflows(trace, presets.get("npu_like"), "edp", search_budget_s=budget, evaluate=False)


def test_infeasible_pins_under_no_switch_are_refused_naming_them(trace):
    with pytest.raises(PolicyError) as info:
        select_dataflows(trace, presets.get("npu_like"), pins={"a": "ws", "c": "os"}, max_switches=0,
                         evaluate=False)
    text = str(info.value)
    for token in ("'a': 'ws'", "'c': 'os'", "max_switches=0", "at least 1 switch", "max_switches >= 1"):
        assert token in text, (token, text)


def test_infeasible_pins_under_a_cap_name_the_switches_they_need(trace):
    pins = {"a": "ws", "b": "os", "c": "ws"}
    with pytest.raises(PolicyError) as info:  # one kernel per op: a, b and c may each switch
        select_dataflows(trace, presets.get("npu_like"), pins=pins, max_switches=1, evaluate=False, fusion="none")
    text = str(info.value)
    for token in ("'b': 'os'", "max_switches=1", "at least 2 switches", "max_switches >= 2", "or None"):
        assert token in text, (token, text)
    # by default a's and b's GEMMs chain into one kernel (rule 10), where no switch can fall whatever the cap
    with pytest.raises(PolicyError, match=r"'a' -> ws.* disagree on GEMM ops \[0, 2\], which run in one kernel"):
        select_dataflows(trace, presets.get("npu_like"), pins=pins, evaluate=False)


def test_feasible_pins_all_hold(trace):
    hw = presets.get("npu_like")
    p = select_dataflows(trace, hw, pins={"a": "ws", "c": "os"}, max_switches=1, evaluate=False)
    assert p.choices["dataflow"].values[[0, 2]].tolist() == ["ws", "os"] and p.switches == 1
    same = select_dataflows(trace, hw, pins={"a": "is", "c": "is"}, max_switches=0, evaluate=False)
    assert set(same.choices["dataflow"].values) == {"is"}
    batch = select_dataflows(trace, Hardware.stack([hw, hw.replace(pe_rows=8)]), pins={"b": "os"}, max_switches=0)
    assert (batch["dataflow"].values == "os").all()


@pytest.mark.parametrize(("pins", "tokens"), [
    (["a", "ws"], ("pins must be a dict", "list")),
    ({"a": 1}, ("'a'", "1")),
    ({3: "ws"}, ("3", "'ws'")),
])
def test_malformed_pins_are_named(trace, pins, tokens):
    with pytest.raises(PolicyError) as info:
        select_dataflows(trace, presets.get("npu_like"), pins=pins, evaluate=False)
    for token in tokens:
        assert token in str(info.value)


def test_a_pin_the_dp_could_not_honour_is_an_error_not_a_silent_drop(trace, monkeypatch):
    """Whatever the feasibility check misses (here: a GEMM whose every cost is infinite) must not be dropped."""
    from dfit_nb.sim import policy as policy_mod

    real = policy_mod.gemm_costs

    def infinite_last(*args, **kwargs):
        energy, cycles = real(*args, **kwargs)
        energy = energy.copy()
        energy[..., -1, :] = np.inf
        return energy, cycles

    monkeypatch.setattr(policy_mod, "gemm_costs", infinite_last)
    with pytest.raises(PolicyError) as info:
        select_dataflows(trace, presets.get("npu_like"), pins={"c": "is"}, max_switches=0, evaluate=False)
    assert "'c'" in str(info.value) and "'is'" in str(info.value) and "max_switches=0" in str(info.value)


# ------------------------------------------------------------------------------------------------ item 6: views

# view -> (the parameter's name, the kind it names)
_VIEWS = {
    "timeline": ("'run'", "a Run"),
    "utilization": ("'run'", "a Run"),
    "noc_load": ("'run'", "a Run"),
    "buffer_pressure": ("'run_or_dataset'", "a Run"),
    "roofline": ("'run'", "a Run"),
    "traffic_mix": ("'run_or_policy'", "a Policy"),
    "regions": ("'trace_or_run'", "a Trace"),
    "reuse_map": ("'policy'", "a Policy"),
    "policy": ("'policy'", "a Policy"),
    "compare": ("'ab'", "dfit_nb.sim.compare"),
    "sweep": ("'ds'", "dfit_nb.sim.sweep"),
    "calibration": ("'cal'", "a Calibration"),
}
# the neighbouring kind a user reaches for (a Trace where a Run is needed, a Run where a Policy is...)
_NEIGHBOUR = {"timeline": "trace", "utilization": "trace", "noc_load": "trace", "buffer_pressure": "trace",
              "roofline": "trace", "traffic_mix": "trace", "regions": "policy", "reuse_map": "run", "policy": "run",
              "compare": "run", "sweep": "run", "calibration": "run"}
_GIVEN = {"str": "a str ('run.nc')", "None": "got None", "trace": "got a Trace", "run": "got a Run",
          "policy": "got a Policy"}


@pytest.mark.parametrize("wrong", ["str", "None", "neighbour"])
@pytest.mark.parametrize("view", sorted(_VIEWS))
def test_a_view_given_the_wrong_object_says_what_it_needs_and_got(view, wrong, trace, run, policy):
    param, needs = _VIEWS[view]
    kind = _NEIGHBOUR[view] if wrong == "neighbour" else wrong
    obj = {"str": "run.nc", "None": None, "trace": trace, "run": run, "policy": policy}[kind]
    with pytest.raises(ViewInputError) as info:
        getattr(views, view)(obj)
    err = info.value
    assert isinstance(err, TypeError) and isinstance(err, DfitError)
    text = str(err)
    for token in (f"{view}()", param, needs, _GIVEN[kind]):
        assert token in text, (token, text)


@pytest.mark.parametrize(("call", "tokens"), [
    (lambda run, trace: views.roofline(run, hw="npu_like"), ("roofline()", "hw must be one dfit_nb.sim.Hardware",
                                                             "'npu_like'")),
    (lambda run, trace: views.roofline(run, trace=run), ("'trace'", "a Trace", "got a Run")),
    (lambda run, trace: views.timeline(run, region=3), ("region", "got an int (3)")),
    (lambda run, trace: views.timeline(run, max_rows="many"), ("max_rows", "'many'")),
    (lambda run, trace: views.utilization(run, time_window="0-1us"), ("time_window", "'0-1us'")),
    (lambda run, trace: views.noc_load(run, time_window=(0.0,)), ("time_window", "tuple")),
    (lambda run, trace: views.traffic_mix(run, top=None), ("top", "None")),
    (lambda run, trace: views.regions(trace, selected=["a"]), ("'selected'", "a list (['a'])")),
    (lambda run, trace: views.buffer_pressure(xr.Dataset({"x": 1.0})), ("buffer_pressure()", "variables ['x']")),
    (lambda run, trace: views.compare(run.cube), ("compare()", "delta_energy_pj", "an xarray.Dataset")),
    (lambda run, trace: views.sweep(xr.Dataset(), x=None), ("sweep()", "x", "None")),
    (lambda run, trace: views.pareto_mask(["fast", "slow"], [1.0, 2.0]), ("pareto_mask()", "x", "'fast'")),
    (lambda run, trace: views.png("chart.png"), ("png()", "Altair chart", "'chart.png'")),
    (lambda run, trace: views.in_region(["a"], region=1), ("in_region()", "region", "an int (1)")),
], ids=["roofline-hw-str", "roofline-trace-run", "timeline-region-int", "timeline-max_rows-str",
        "utilization-window-str", "noc_load-window-1-tuple", "traffic_mix-top-None", "regions-selected-list",
        "buffer_pressure-foreign-dataset", "compare-a-cube", "sweep-x-None", "pareto_mask-x-str", "png-str",
        "in_region-region-int"])
def test_a_view_parameter_of_the_wrong_type_is_named(call, tokens, run, trace):
    with pytest.raises(ViewInputError) as info:
        call(run, trace)
    for token in tokens:
        assert token in str(info.value), (token, str(info.value))


@pytest.mark.parametrize(("make", "tokens"), [
    (lambda t, r: ("Explorer", (r,), {}), ("Explorer()", "'trace'", "a Trace", "got a Run")),
    (lambda t, r: ("Explorer", ("trace.nc",), {}), ("Explorer()", "'trace'", "'trace.nc'")),
    (lambda t, r: ("Explorer", (None,), {}), ("Explorer()", "'trace'", "got None")),
    (lambda t, r: ("Explorer", (t, 3), {}), ("Explorer()", "hw must be one dfit_nb.sim.Hardware", "an int (3)",
                                              "npu_like")),
    (lambda t, r: ("Explorer", (t,), {"views_shown": "timeline"}), ("views_shown", "'timeline'")),
    (lambda t, r: ("SweepExplorer", (r,), {}), ("SweepExplorer()", "'ds'", "got a Run")),
    (lambda t, r: ("SweepExplorer", (None,), {}), ("SweepExplorer()", "'ds'", "got None")),
    (lambda t, r: ("SweepExplorer", (xr.Dataset({"x": ("machine", [1.0])}),), {}),
     ("SweepExplorer()", "replay_batch", "variables ['x']")),
    (lambda t, r: ("SweepExplorer", (dfit_nb.sim.sweep(t, presets.get("npu_like"), ["ws"], pe=[(8, 8)]), r), {}),
     ("SweepExplorer()", "'trace'", "got a Run")),
], ids=["Explorer-run", "Explorer-str", "Explorer-None", "Explorer-hw-int", "Explorer-views-str",
        "SweepExplorer-run", "SweepExplorer-None", "SweepExplorer-foreign-dataset", "SweepExplorer-trace-run"])
def test_a_widget_given_the_wrong_object_says_what_it_needs_and_got(make, tokens, trace, run):
    from dfit_nb import widgets

    name, args, kwargs = make(trace, run)
    with pytest.raises(ViewInputError) as info:
        getattr(widgets, name)(*args, **kwargs)
    assert isinstance(info.value, TypeError)
    for token in tokens:
        assert token in str(info.value), (token, str(info.value))


@pytest.mark.parametrize(("options", "error", "tokens"), [
    ({"mode": "profile", "profile_rounds": 0}, ValueError, ("profile_rounds", ">= 1", "got 0")),
    ({"mode": "profile", "profile_rounds": -2}, ValueError, ("profile_rounds", "got -2")),
    ({"mode": "profile", "profile_calls": 0}, ValueError, ("profile_calls", "got 0")),
    ({"mode": "profile", "profile_rounds": 2.5}, TypeError, ("profile_rounds", "whole number", "2.5")),
    ({"mode": "profile", "profile_rounds": True}, TypeError, ("profile_rounds", "bool")),
    ({"mode": "profile", "profile_calls": "10"}, TypeError, ("profile_calls", "'10'")),
])
def test_capture_refuses_profile_settings_that_time_nothing(options, error, tokens):
    with pytest.raises(error) as info:
        dfit_nb.capture(lambda x: x * 2, jnp.ones(3), **options)
    for token in tokens:
        assert token in str(info.value), (token, str(info.value))


# ------------------------------------------------------------------------------------------------ item 7: names

# no newline: control characters in names are refused at capture (issue 42, item 5; tested below)
_HOSTILE = ("<!--<script>", "p|q r &amp; <img src=x onerror=alert(1)>", "![img](x.png) [link](javascript:x)")


def _hostile(x, w1, w2, w3):
    with jax.named_scope(_HOSTILE[0]):
        h = jnp.tanh(x @ w1)
    with jax.named_scope(_HOSTILE[1]):
        h = jnp.tanh(h @ w2)
    with jax.named_scope(_HOSTILE[2]):
        return h @ w3


@pytest.fixture(scope="module")
def hostile_trace():
    return dfit_nb.capture(_hostile, *(jnp.ones(s) for s in _SHAPES))


@pytest.fixture(scope="module")
def hostile_report(hostile_trace, tmp_path_factory):
    """A report on a machine named ``../x`` of a program whose regions hold HTML, a pipe and Markdown."""
    from dfit_nb.report import write_report

    root = tmp_path_factory.mktemp("hostile")
    hw = presets.get("npu_like").replace(name="../x")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpillWarning)
        report = write_report(hostile_trace, [hw, presets.get("npu_like").replace(name="x")], root / "out",
                              charts="interactive", progress=False)
    return root, report


def test_a_machine_named_dotdot_cannot_write_outside_the_report_folder(hostile_report):
    root, report = hostile_report
    assert sorted(p.name for p in root.iterdir()) == ["out"]  # nothing beside the folder
    out = (root / "out").resolve()
    assert all(p.resolve().parent == out for p in report.files())
    # "../x" and "x" sanitise to one stem: the second is made unique, neither overwrites the other
    assert report.runs["../x"].name == "x.nc" and report.runs["x"].name == "x-2.nc"
    assert dfit_nb.load_run(report.runs["../x"]).attrs["hardware"] == "../x"


def test_file_stems_never_leave_the_folder():
    from dfit_nb.report import file_stem

    for name in ("../x", "..", ".", "/etc/passwd", "a/../../b", "C:\\evil", "~", "", ".hidden", "a\x00b"):
        stem = file_stem(name)
        assert stem and not stem.startswith(".") and "/" not in stem and "\\" not in stem and "\x00" not in stem


def test_a_hostile_region_name_cannot_break_the_embedded_chart_specs(hostile_report):
    _, report = hostile_report
    page = report.html.read_text()
    specs = re.findall(r"<script type='application/json' class='vl-spec'[^>]*>(.*?)</script>", page, re.S)
    assert len(specs) >= 8
    for text in specs:
        assert "<" not in text  # no tag, comment or </script> can start inside the JSON
    decoded = "".join(json.dumps(json.loads(t)) for t in specs)
    assert json.dumps(_HOSTILE[0])[1:-1] in decoded  # the names survive, escaped only for the HTML parser
    # outside the specs the names are HTML-escaped text
    assert "<!--<script>" not in page and "<img src=x" not in page


def test_the_markdown_playbook_escapes_table_breaking_characters_and_html(hostile_report):
    _, report = hostile_report
    md = report.playbooks["../x"].read_text()
    assert "<!--" not in md and "<img" not in md and "![img](x.png)" not in md and "[link](" not in md
    assert "&lt;!--&lt;script>" in md and "p\\|q r &amp;amp; &lt;img" in md and "!\\[img\\](x.png)" in md
    rows = [line for line in md.splitlines() if line.startswith("| #")]
    assert len(rows) == 3
    header = next(line for line in md.splitlines() if line.startswith("| op |"))
    cells = len(re.split(r"(?<!\\)\|", header))
    assert all(len(re.split(r"(?<!\\)\|", row)) == cells for row in rows)  # no name split a row


_MISSING = perfetto_ui.missing()


@pytest.mark.skipif(_MISSING is not None, reason=f"browser check {_MISSING}")
def test_every_chart_renders_despite_a_hostile_region_name(hostile_report):
    from playwright.sync_api import sync_playwright

    _, report = hostile_report
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=perfetto_ui.chromium(), headless=True,
                                    args=perfetto_ui.BROWSER_ARGS)
        page = browser.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                   else route.abort())
        page.goto(Path(report.html).as_uri())
        n = page.locator("div.vl").count()
        # a broken page renders nothing: waiting fails (a Timeout) rather than hanging
        page.wait_for_function(f"document.querySelectorAll('div.vl svg.marks').length >= {n}"
                               " || document.querySelector('div.vl .err') !== null", timeout=30_000)
        drawn = page.locator("div.vl svg.marks").count()
        failed = page.locator("div.vl .err").count()
        browser.close()
    assert n >= 8 and drawn == n and failed == 0 and errors == []


# ------------------------------------------------------------------------------------------------ property test


@st.composite
def _machines(draw: st.DrawFn) -> Hardware:
    """Small valid machines: 1-4 x 1-4 tiles, 4-64 PEs a side, 4 KiB-1 MiB per SRAM partition, 1-512 B/cycle."""
    sram = st.integers(4 * 1024, 1024 * 1024)
    share = st.floats(0.0, 1.0)
    bandwidth = st.floats(1.0, 512.0)
    return Hardware(
        tile_rows=draw(st.integers(1, 4)), tile_cols=draw(st.integers(1, 4)),
        pe_rows=draw(st.integers(4, 64)), pe_cols=draw(st.integers(4, 64)),
        sram_input_bytes=draw(sram), sram_weight_bytes=draw(sram), sram_output_bytes=draw(sram),
        word_bytes=draw(st.sampled_from([1, 2, 4, 8])), vector_lanes=draw(st.integers(1, 64)),
        accumulator_bytes=draw(st.sampled_from([0, 1, 2, 4, 8])),
        noc_link_bytes_per_cycle=draw(bandwidth), dram_bytes_per_cycle=draw(bandwidth),
        fold_overlap=draw(share), memory_overlap=draw(share), op_overhead_cycles=draw(st.floats(0.0, 1000.0)),
    )


# three rows always: one compiled program per grid shape, not one per table size
_OPS = st.fixed_dictionaries({
    key: st.lists(st.integers(1, 512) if key != "batch" else st.integers(1, 4), min_size=3, max_size=3)
    for key in ("m", "k", "n", "batch")
} | {"dtype": st.lists(st.sampled_from(["int8", "bfloat16", "float32"]), min_size=3, max_size=3)})


@settings(max_examples=30)
@given(hw=_machines(), ops=_OPS)
def test_random_valid_machines_and_ops_cost_finite_non_negative_and_conserved(hw, ops):
    ds = cost(ops, hw, ["ws", "os", "is"])
    for name, var in ds.data_vars.items():
        values = np.asarray(var.values, np.float64)
        assert np.isfinite(values).all(), name
        assert (values >= 0).all(), name
    assert (ds["cycles"] > 0).all() and (ds["seconds"] > 0).all()
    levels = sum(ds[f"energy_{lv}_pj"] for lv in ENERGY_LEVELS)
    np.testing.assert_allclose(ds["energy_pj"].values, levels.values, rtol=1e-9)
    for operand in ("input", "weight"):  # DRAM delivers into SRAM: never more read from DRAM than from SRAM
        assert (ds[f"dram_reads_{operand}"] <= ds[f"sram_reads_{operand}"] * (1 + 1e-12)).all(), operand


# ------------------------------------------------------------------------------------------------ item 6: CLI, magics

# The CLI runs in-process (dfit_nb.cli.main); its checks are real: a real file at -o, a real read-only folder.


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    from dfit_nb.cli import main

    code = main(["report", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def tracer_module(tmp_path, monkeypatch):
    """A --module function that leaves a marker file when it is traced: proof that a capture ran (or did not)."""
    marker = tmp_path / "traced.marker"
    (tmp_path / "cli_marked_xyz.py").write_text(
        "import pathlib\n"
        "import jax.numpy as jnp\n\n"
        "def forward(x, w):\n"
        f"    pathlib.Path({str(marker)!r}).touch()\n"
        "    return jnp.tanh(x @ w)\n\n"
        "def noisy(x):\n"
        "    raise ValueError('first line of a long error\\nsecond\\nthird')\n")
    monkeypatch.chdir(tmp_path)  # --module imports from the working directory, as `python -m` does
    # a module imported by an earlier test would write its marker into that test's folder: import afresh
    monkeypatch.delitem(sys.modules, "cli_marked_xyz", raising=False)
    return {"target": "cli_marked_xyz:forward", "args": "f32[8,16] f32[16,8]", "marker": marker, "dir": tmp_path}


@pytest.mark.parametrize(("token", "tokens"), [
    ("f32[100000000000000000000]", ("'f32[100000000000000000000]'", "'100000000000000000000'", "too large",
                                    "256 TiB")),
    ("f32[1e20]", ("'f32[1e20]'", "'1e20'", "not a whole number in digits", "e.g. f32[8,128]")),
    ("f32[8,-3]", ("'f32[8,-3]'", "'-3'", "negative", ">= 1")),
    ("f32[0]", ("'f32[0]'", "'0'", "zero", ">= 1")),
    ("i8[4,000]", ("'i8[4,000]'", "'000'", "zero")),
    ("f32[2.5]", ("'f32[2.5]'", "'2.5'", "whole number")),
    ("f32[x]", ("'f32[x]'", "'x'", "whole number")),
    ("f32[0x10]", ("'f32[0x10]'", "'0x10'", "in digits")),
    ("f32[2,,3]", ("'f32[2,,3]'", "empty dimension")),
    ("f32[70368744177665]", ("'f32[70368744177665]'", "7.037e+13 elements x 4 bytes", "281,474,976,710,656")),
    # 2**62 elements: XLA would abort the whole process on it, so it must never get that far
    ("f32[4611686018427387904]", ("'f32[4611686018427387904]'", "4.612e+18 elements", "256 TiB")),
    ("f32[1048576,1048576,1048576]", ("'f32[1048576,1048576,1048576]'", "elements x 4 bytes")),
    ("f32[" + "9" * 5000 + "]", ("5005 characters", "too large")),  # int() would refuse > 4300 digits itself
    ("q7[2]", ("'q7[2]'", "unknown dtype 'q7'", "bf16")),
    ("float32[2]", ("'float32[2]'", "unknown dtype 'float32'", "f32")),
    ("f32", ("'f32'", "expected dtype[shape]")),
    ("f32[2]]", ("'f32[2]]'", "expected dtype[shape]")),
])
def test_cli_bad_args_token_is_one_line_naming_it(capsys, token, tokens):
    # no presets: nothing could run after the parse anyway; the point is the parse itself answers
    code, out, err = _cli(capsys, "--module", "os.path:join", "--args", f"f32[2] {token}", "--hw")
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert len(line) < 600, line  # one readable line, never a dump
    for t in tokens:
        assert t in line, (t, line)


def test_cli_parse_spec_errors_are_dfit_errors_and_value_errors():
    from dfit_nb.cli import UsageError, parse_spec

    with pytest.raises(UsageError) as info:
        parse_spec("f32[1e20]")
    assert isinstance(info.value, DfitError) and isinstance(info.value, ValueError)
    assert [s.shape for s in parse_spec("f32[70368744177664] u8[1]")] == [(2**46,), (1,)]  # the limit itself passes


def test_cli_output_dir_that_is_a_file_is_refused_before_any_capture(capsys, tracer_module):
    afile = tracer_module["dir"] / "notes.txt"
    afile.write_text("mine")
    code, out, err = _cli(capsys, "--module", tracer_module["target"], "--args", tracer_module["args"],
                          "--hw", "npu_like", "-o", str(afile))
    assert code == 2
    line = one_error_line(err)
    assert f"-o {str(afile)!r}" in line and "is a file, not a folder" in line
    assert not tracer_module["marker"].exists() and "<dfit_nb.Trace" not in out  # nothing was traced
    assert afile.read_text() == "mine"


def test_cli_output_dir_below_a_file_is_refused_naming_the_file(capsys, tracer_module):
    afile = tracer_module["dir"] / "notes.txt"
    afile.write_text("mine")
    code, _, err = _cli(capsys, "--module", tracer_module["target"], "--args", tracer_module["args"],
                        "--hw", "npu_like", "-o", str(afile / "sub" / "deeper"))
    assert code == 2
    line = one_error_line(err)
    assert "cannot be created" in line and f"{afile} is a file" in line
    assert not tracer_module["marker"].exists()


def test_cli_output_dir_holding_what_dfit_nb_did_not_write_is_refused_first(capsys, tracer_module):
    out_dir = tracer_module["dir"] / "out"
    out_dir.mkdir()
    (out_dir / "npu_like.nc").write_text("a user's file")
    code, _, err = _cli(capsys, "--module", tracer_module["target"], "--args", tracer_module["args"],
                        "--hw", "npu_like", "-o", str(out_dir))
    assert code == 2
    line = one_error_line(err)
    assert str(out_dir / "npu_like.nc") in line and "did not write" in line and "another -o folder" in line
    assert not tracer_module["marker"].exists()
    assert (out_dir / "npu_like.nc").read_text() == "a user's file"
    (out_dir / "npu_like.nc").unlink()
    (out_dir / "report.html").mkdir()  # a folder where the page goes
    code, _, err = _cli(capsys, "--module", tracer_module["target"], "--args", tracer_module["args"],
                        "--hw", "npu_like", "-o", str(out_dir))
    assert code == 2 and str(out_dir / "report.html") in one_error_line(err) and "is a folder" in err
    assert not tracer_module["marker"].exists()


@pytest.mark.parametrize("names", [("report.html",), ("playbook_npu_like.md",), ("npu_like.perfetto.json",),
                                   ("playbook_npu_like.html",), ("report.html", "npu_like.perfetto.json")])
def test_cli_output_dir_holding_a_users_report_file_is_refused_naming_every_one(capsys, tracer_module, names):
    # issue 42, item 1: the page, the playbooks and the Perfetto trace were replaced without a word (only the .nc
    # was checked); each is the user's until it carries dfit_nb's mark
    out_dir = tracer_module["dir"] / "out"
    out_dir.mkdir()
    for name in names:
        (out_dir / name).write_text("mine")
    (out_dir / "notes.txt").write_text("mine")  # a name the report does not write: not in the way
    code, _, err = _cli(capsys, "--module", tracer_module["target"], "--args", tracer_module["args"],
                        "--hw", "npu_like", "-o", str(out_dir))
    assert code == 2
    line = one_error_line(err)
    assert all(str(out_dir / name) in line for name in names) and "notes.txt" not in line
    assert "did not write" in line and "another -o folder" in line and "delete" in line
    assert not tracer_module["marker"].exists()  # refused before the capture
    assert all((out_dir / name).read_text() == "mine" for name in names)


def test_cli_output_dir_of_a_previous_report_is_replaced_and_its_marks_are_recognised(capsys, tracer_module):
    from dfit_nb._files import written_by_dfit

    out_dir = tracer_module["dir"] / "out"
    for _ in range(2):  # the second run replaces the first one's files: each carries dfit_nb's mark
        code, _, err = _cli(capsys, "--module", tracer_module["target"], "--args", tracer_module["args"],
                            "--hw", "npu_like", "-o", str(out_dir))
        assert code == 0, err
    files = sorted(out_dir.iterdir())
    assert [p.name for p in files] == ["npu_like.nc", "npu_like.perfetto.json", "playbook_npu_like.html",
                                       "playbook_npu_like.md", "report.html"]
    assert all(written_by_dfit(p) for p in files)
    # files dfit_nb wrote before the marks (their first bytes) are its own too; look-alikes without them are not
    legacy = {"report.html": "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>dfit_nb report: f",
              "playbook_npu_like.md": "# Dataflow policy playbook: f on npu_like\n\nObjective: energy.",
              "npu_like.perfetto.json": '{"traceEvents":[\n],\n"otherData":{"dfit_nb_version": "0.1"}}\n'}
    for name, text in legacy.items():
        (out_dir / name).write_text(text)
        assert written_by_dfit(out_dir / name), name
    for text in ("<!DOCTYPE html><html><title>dfit_nb report: f", "# Dataflow policy playbook: mine",
                 '{"traceEvents":[],"otherData":{"version": "0.1"}}', '{"traceEvents":[] "otherData":{'):
        (out_dir / "x").write_text(text)
        assert not written_by_dfit(out_dir / "x"), text


@pytest.mark.parametrize("where", ["root", "home"])
def test_cli_output_dir_at_the_root_or_home_is_refused_even_for_root(capsys, tracer_module, monkeypatch, where):
    home = tracer_module["dir"] / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # Path.home() reads it: a home of the test's own, writable by anyone
    target = "/" if where == "root" else str(home)
    code, _, err = _cli(capsys, "--module", tracer_module["target"], "--args", tracer_module["args"],
                        "--hw", "npu_like", "-o", target)
    assert code == 2
    line = one_error_line(err)
    said = "the root of the file system" if where == "root" else "the home directory"
    assert f"-o {target!r} is {said}" in line and "a folder of its own" in line
    assert not tracer_module["marker"].exists() and list(home.iterdir()) == []


@pytest.mark.parametrize(("out_dir", "said"), [("", "is empty; give the report a folder of its own"),
                                               ("~/dfit", "starts with '~', which is not expanded here"),
                                               ("~", "starts with '~'")])
def test_an_empty_or_tilde_report_folder_is_refused_by_the_cli_and_write_report(capsys, tracer_module, monkeypatch,
                                                                                  tmp_path, trace, out_dir, said):
    # -o "" and out_dir="" wrote the report into the working directory, unasked ('.' still does, on purpose);
    # -o '~/dfit' (quoted: no shell expands it) and out_dir="~/dfit" made a folder named '~' there
    from dfit_nb.report import write_report

    monkeypatch.chdir(tmp_path)
    before = _tree(tmp_path)
    code, _, err = _cli(capsys, "--module", tracer_module["target"], "--args", tracer_module["args"],
                        "--hw", "npu_like", "-o", out_dir)
    assert code == 2 and f"-o {out_dir!r} {said}" in one_error_line(err) and not tracer_module["marker"].exists()
    with pytest.raises(SaveRefusedError) as info:
        write_report(trace, ["npu_like"], out_dir, progress=False)
    assert str(info.value).startswith(f"out_dir {out_dir!r} {said}"), str(info.value)
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("option", ["-o", "--save-trace"])
def test_cli_a_url_for_an_output_is_refused_naming_it_not_made_a_local_folder(capsys, tracer_module, monkeypatch,
                                                                              tmp_path, option):
    # -o s3://b/out made a local folder 's3:' (Path collapses '//') and wrote the report there, exit 0;
    # --save-trace s3://b/t.nc named a directory 's3:/b' the user never gave
    monkeypatch.chdir(tmp_path)
    url = "s3://b/out" if option == "-o" else "s3://b/t.nc"
    extra = [option, url] if option == "-o" else [option, url, "-o", str(tmp_path / "out")]
    code, _, err = _cli(capsys, "--module", tracer_module["target"], "--args", tracer_module["args"],
                        "--hw", "npu_like", *extra)
    assert code == 2
    line = one_error_line(err)
    assert f"{option} {url!r}" in line and "URL" in line and "s3:/b" not in line.replace(url, ""), line
    assert not tracer_module["marker"].exists()
    assert not (tmp_path / "s3:").exists() and not (tmp_path / "out").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only folder: nothing to refuse")
@pytest.mark.parametrize("below", ["", "new/sub"])
def test_cli_output_dir_that_cannot_be_written_is_refused_before_any_capture(capsys, tracer_module, below):
    locked = tracer_module["dir"] / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        target = locked / below if below else locked
        code, _, err = _cli(capsys, "--module", tracer_module["target"], "--args", tracer_module["args"],
                            "--hw", "npu_like", "-o", str(target))
    finally:
        locked.chmod(0o755)
    assert code == 2
    line = one_error_line(err)
    assert f"-o {str(target)!r}" in line and "not writable" in line and str(locked) in line
    assert not tracer_module["marker"].exists()


def test_cli_save_trace_into_a_missing_directory_names_it_before_any_capture(capsys, tracer_module):
    missing = tracer_module["dir"] / "no_such_dir"
    code, out, err = _cli(capsys, "--module", tracer_module["target"], "--args", tracer_module["args"], "--hw",
                          "--save-trace", str(missing / "t.nc"))
    assert code == 2
    line = one_error_line(err)
    assert f"the directory {missing} does not exist" in line and "dfit-tmp" not in line
    assert not tracer_module["marker"].exists() and out == ""


@pytest.mark.parametrize("kind", ["foreign file", "the -o folder"])
def test_cli_save_trace_that_would_be_refused_is_refused_before_any_capture(capsys, tracer_module, kind):
    d = tracer_module["dir"]
    (d / "mine.nc").write_text("a user's file")
    argv = ["--save-trace", str(d / "mine.nc"), "--hw"] if kind == "foreign file" else \
        ["--save-trace", str(d / "rep"), "-o", str(d / "rep"), "--hw", "npu_like"]
    code, _, err = _cli(capsys, "--module", tracer_module["target"], "--args", tracer_module["args"], *argv)
    assert code == 2
    line = one_error_line(err)
    if kind == "foreign file":
        assert str(d / "mine.nc") in line and "did not write" in line
    else:
        assert f"--save-trace {str(d / 'rep')!r} is the -o folder" in line and "trace.nc" in line
    assert not tracer_module["marker"].exists()
    assert (d / "mine.nc").read_text() == "a user's file"


@pytest.mark.parametrize("mode", ["eager", "profile"])
def test_cli_runtime_mode_refuses_args_beyond_memory_before_allocating(capsys, tracer_module, mode):
    # 2**46 floats (256 TiB) fit the --args limit but no machine's memory: refused by size, never allocated
    code, _, err = _cli(capsys, "--module", tracer_module["target"], "--args", "f32[8388608,8388608] f32[1,1]",
                        "--mode", mode, "--hw")
    assert code == 2
    line = one_error_line(err)
    assert f"--mode {mode}" in line and "2.815e+05 GB" in line and "free on" in line and "--mode static" in line
    assert not tracer_module["marker"].exists()


def test_cli_the_marker_shows_a_capture_when_one_runs(capsys, tracer_module):
    # the control for the tests above: with good paths the same call is traced (and its marker written)
    code, out, err = _cli(capsys, "--module", tracer_module["target"], "--args", tracer_module["args"], "--hw",
                          "--save-trace", str(tracer_module["dir"] / "t.nc"))
    assert code == 0, err
    assert tracer_module["marker"].exists() and "<dfit_nb.Trace forward" in out
    assert dfit_nb.load_trace(tracer_module["dir"] / "t.nc").ops.sizes["op"] >= 1


def test_cli_a_function_that_fails_to_capture_is_one_line(capsys, tracer_module):
    code, _, err = _cli(capsys, "--module", "cli_marked_xyz:noisy", "--args", "f32[3]", "--hw")
    assert code == 2
    line = one_error_line(err)
    assert "capturing cli_marked_xyz:noisy(f32[3]) failed: ValueError: first line of a long error" in line
    assert "2 more lines" in line


# The magics: malformed call expressions answer IPython's UsageError naming the expression, never a raw TypeError.


@pytest.fixture(scope="module")
def shell():
    with ipython_shell() as sh:
        sh.user_ns.update(bi_f=lambda a, b: jnp.tanh(a @ b), bi_a=jnp.ones((8, 16)), bi_b=jnp.ones((16, 4)),
                          bi_n=5, bi_keys={1: 2}, bi_kw={"b": 1},
                          bi_hws=Hardware.stack([presets.get("npu_like"), presets.get("tpu_like")]))
        yield sh


@pytest.mark.parametrize(("expr", "tokens"), [
    ("bi_f(*5)", ("*5", "'bi_f(*5)'", "an int, not an iterable", "list or tuple")),
    ("bi_f(bi_a, *bi_n)", ("*bi_n", "'bi_f(bi_a, *bi_n)'", "not an iterable")),
    ("bi_f(**1)", ("**1", "'bi_f(**1)'", "not a mapping", "dict")),
    ("bi_f(bi_a, **bi_keys)", ("**bi_keys", "the key 1", "must be strings")),
    ("bi_f(bi_a, b=bi_b, **bi_kw)", ("'bi_f(bi_a, b=bi_b, **bi_kw)'", "keyword 'b' twice")),
    ("bi_f(**bi_kw, **bi_kw)", ("keyword 'b' twice",)),
    ("bi_f(", ("'bi_f('", "not a Python expression", "f(args...)")),
    ("bi_f(bi_a,, bi_b)", ("'bi_f(bi_a,, bi_b)'", "f(args...)")),
    ("3", ("'3'", "one call f(args...)", "a Constant")),
    ("bi_f(bi_a)[0]", ("'bi_f(bi_a)[0]'", "one call", "a Subscript")),
    ("bi_f(bi_a, bi_b) + 1", ("'bi_f(bi_a, bi_b) + 1'", "one call")),
    ("bi_f(bi_a, bi_b, bi_a)", ("'bi_f(bi_a, bi_b, bi_a)'", "does not match", "(a, b)", "too many")),
    ("bi_f(bi_a)", ("'bi_f(bi_a)'", "does not match", "missing a required argument: 'b'")),
    ("bi_f(bi_a, bi_b, c=1)", ("'bi_f(bi_a, bi_b, c=1)'", "unexpected keyword argument 'c'")),
    ("bi_f(bi_a, bi_b, fn=1)", ("'fn'", "parameter of dfit_nb.capture")),
    ("bi_n(bi_a)", ("'bi_n'", "an int, not a function")),
    ("--hw bi_n bi_f(bi_a, bi_b)", ("'bi_n'", "an int, not a dfit_nb.sim.Hardware", "npu_like")),
    ("--hw bi_hws bi_f(bi_a, bi_b)", ("'bi_hws'", "batch of machines", "(2,)")),
])
def test_dfit_magic_malformed_call_is_a_usage_error_naming_it(shell, expr, tokens):
    from IPython.core.error import UsageError

    before = set(shell.user_ns)
    with pytest.raises(UsageError) as info:
        shell.run_line_magic("dfit", f"--no-explorer -o bi_bad {expr}")
    for token in tokens:
        assert token in str(info.value), (token, str(info.value))
    assert set(shell.user_ns) == before  # nothing stored


def test_dfit_cell_magic_malformed_call_is_a_usage_error_naming_it(shell):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError) as info:
        shell.run_cell_magic("dfit", "--no-explorer -o bi_bad", "bi_ran = 1\nbi_f(*5)\n")
    assert "%%dfit: *5 in 'bi_f(*5)'" in str(info.value) and "not an iterable" in str(info.value)
    with pytest.raises(UsageError) as info:
        shell.run_cell_magic("dfit", "--no-explorer -o bi_bad", "bi_f(bi_a,\0)\n")
    assert "not valid Python" in str(info.value) and "line None" not in str(info.value)
    assert "bi_bad" not in shell.user_ns


# ------------------------------------------------------------------------------------------------ item 6: sizes

_F32 = jax.ShapeDtypeStruct((2**40,), jnp.float32)


@pytest.mark.parametrize(("fn", "args", "kwargs", "tokens"), [
    # an intermediate XLA cannot represent: its compiler would abort the process (not a Python exception)
    (lambda a, b: jnp.outer(a, b), (_F32, _F32), {},
     ("op 2 (mul", "float32[1099511627776,1099511627776]", "2**63 bytes", "mode='static'")),
    (lambda x: x + 1, (jax.ShapeDtypeStruct((2**31, 2**30), jnp.float32),), {},
     ("argument leaf 0", "float32[2147483648,1073741824]", "2**63 bytes")),
    # FLOPs past int64 on arrays XLA represents
    (lambda a, b: a @ b, (jax.ShapeDtypeStruct((2**21, 2**21), jnp.float32),) * 2, {},
     ("dot_general", "2**64 FLOPs", "64-bit")),
    # eager mode would allocate a 128 TiB intermediate
    (lambda a, b: jnp.outer(a, b), (jnp.ones(2**23), jnp.ones(2**22)), {"mode": "eager"},
     ("mode='eager'", "op 2 (mul", "float32[8388608,4194304]", "128.0 TiB", "mode='static'")),
])
def test_capture_refuses_arrays_that_cannot_be_built(fn, args, kwargs, tokens):
    with pytest.raises(dfit_nb.errors.CaptureError) as info:
        dfit_nb.capture(fn, *args, **kwargs)
    assert isinstance(info.value, DfitError) and "\n" not in str(info.value)
    for token in tokens:
        assert token in str(info.value), (token, str(info.value))


def _nested_scans(inner: int, middle: int, outer: int):
    """``tanh(h @ w)`` in three nested scans: the matmul runs ``inner x middle x outer`` times per call."""
    def fn(x, w):
        def body(h, _):
            return jnp.tanh(h @ w), None

        def mid(h, _):
            return jax.lax.scan(body, h, None, length=inner)[0], None

        def out(h, _):
            return jax.lax.scan(mid, h, None, length=middle)[0], None

        return jax.lax.scan(out, x, None, length=outer)[0]
    return fn


@pytest.mark.parametrize(("lengths", "tokens"), [
    # the count itself past int64 (it wrapped to a negative count, then a bare OverflowError in the region table)
    ((2**30, 2**30, 2**20), ("op 3 (dot_general", "1.20893e+24 times per call", "64-bit", "scans shorter")),
    # a count that fits, times FLOPs per execution that do not
    ((2**30, 2**20, 1), ("op 3 (dot_general", "2**69 FLOPs per call", "524,288 per execution",
                         "1.1259e+15 executions", "scans shorter")),
])
def test_capture_refuses_counts_that_nested_scans_push_past_64_bits(lengths, tokens):
    # issue 42, item 6: static capture only counts, so these capture in no time; the refusal names the op
    with pytest.raises(dfit_nb.errors.CaptureError) as info:
        dfit_nb.capture(_nested_scans(*lengths), jnp.ones((64, 64)), jnp.ones((64, 64)), mode="static")
    assert "cannot capture fn" in str(info.value)
    for token in tokens:
        assert token in str(info.value), (token, str(info.value))


# ------------------------------------------------------------------------------------------------ issue 42, item 6

_GEMMS = {"m": [512, 256, 128, 64], "k": [512, 256, 128, 64], "n": [512, 256, 128, 64],
          "dtype": ["float32", "bfloat16", "float16", "float32"]}


@pytest.mark.parametrize(("column", "values", "tokens"), [
    ("dtype", ["float32", "float33", "float16", "float32"],
     ("ops column 'dtype' row 1", "'float33'", "not a dtype", "bfloat16", "float32", "int8")),
    ("dtype", ["float32", "bfloat16", "object", "str"], ("row 2", "'object'")),
    ("m", ["512", "4096x", "128", "64"], ("ops column 'm'", "numeric", "row 1", "'4096x'")),
    ("k", [512, 256, None, 64], ("ops column 'k'", "row 2 is nan")),  # pandas reads a gap as NaN
])
def test_cost_refuses_an_unknown_dtype_or_text_in_a_number_naming_column_and_row(column, values, tokens):
    # float33 was costed as the machine's word; "4096x" read from a CSV failed inside NumPy, unnamed
    import pandas as pd

    from dfit_nb.sim._cost import CostInputError

    table = pd.DataFrame({**_GEMMS, column: values})
    with pytest.raises(CostInputError) as info:
        cost(table, presets.get("npu_like"))
    assert isinstance(info.value, ValueError)
    for token in tokens:
        assert token in str(info.value), (token, str(info.value))


def test_cost_keeps_the_dtypes_a_capture_writes():
    # "" (no array output), PRNG keys, float0 and ml_dtypes' narrow types are a trace's own: costed as before
    table = {"m": [0] * 6 + [64], "k": [0] * 6 + [64], "n": [0] * 6 + [64],
             "dtype": ["", "key<fry>", "float0", "int4", "float8_e4m3fn", "bool", "bfloat16"]}
    out = cost(table, presets.get("npu_like"))
    assert np.isfinite(out["cycles"].values).all()


@pytest.mark.parametrize(("column", "value", "tokens"), [
    ("m", 0, ("measured 'm'", "whole numbers >= 1", "row 2 is 0")),
    ("k", -64, ("measured 'k'", "row 2 is -64")),
    ("n", np.inf, ("measured 'n'", "row 2 is inf")),
    ("batch", 1.5, ("measured 'batch'", "row 2 is 1.5")),
    ("m", "4096x", ("measured 'm'", "numeric", "row 2 is '4096x'")),
    ("time_s", "fast", ("measured 'time_s'", "numeric", "row 2 is 'fast'")),
    ("time_s", 0.0, ("measured 'time_s'", "finite and > 0", "row 2 is 0")),
    ("time_us", np.nan, ("measured 'time_us'", "row 2 is nan")),
    ("dtype", "float33", ("measured 'dtype' row 2", "'float33'", "not a dtype", "bfloat16")),
])
def test_calibrate_refuses_a_bad_row_naming_column_and_row(column, value, tokens):
    # m = 0 was accepted and moved the held-out error; "4096x" gave "TypeError: can't multiply sequence"
    import pandas as pd

    from dfit_nb.sim.calibration import CalibrationError, calibrate

    rows = pd.DataFrame({"m": [64, 128, 256, 512] * 2, "k": [64, 128, 256, 512] * 2, "n": [64] * 8,
                         "batch": [1] * 8, "dtype": ["float32"] * 8,
                         ("time_us" if column == "time_us" else "time_s"): [1e-5, 2e-5, 4e-5, 8e-5] * 2})
    rows[column] = rows[column].astype(object)
    rows.loc[2, column] = value
    with pytest.raises(CalibrationError) as info:
        calibrate(rows, presets.get("npu_like"))
    assert isinstance(info.value, ValueError)
    for token in tokens:
        assert token in str(info.value), (token, str(info.value))


def _per_row_rows():
    import pandas as pd

    return pd.DataFrame({"m": [64, 128, 256, 512] * 2, "k": [64, 128, 256, 512] * 2, "n": [64] * 8,
                         "dtype": ["bfloat16"] * 8, "math_fidelity": ["HiFi2"] * 8, "a_on_chip": [False] * 8,
                         "out_on_chip": [True] * 8, "tile_cols": [4, 5] * 4,
                         "time_s": [1e-5, 2e-5, 4e-5, 8e-5] * 2})


def test_calibrate_refuses_a_column_it_does_not_know_naming_it_and_the_known_ones():
    # issue 39: a typo of a per-row setting (tile_row) would price every row on the unchanged machine
    from dfit_nb.sim.calibration import CalibrationError, calibrate

    rows = _per_row_rows().rename(columns={"tile_cols": "tile_col"}).assign(source="tt-metal")
    with pytest.raises(CalibrationError) as info:
        calibrate(rows, presets.get("npu_like"), ["clock_ghz"])
    for token in ("['tile_col', 'source']", "neither measurement columns nor Hardware fields",
                  "'tile_col': did you mean 'tile_cols'?", "known: m, k, n, batch, dtype, bucket, math_fidelity, "
                  "a_on_chip, b_on_chip, out_on_chip, time_s", "tile_rows, tile_cols, pe_rows"):
        assert token in str(info.value), (token, str(info.value))


@pytest.mark.parametrize(("column", "value", "tokens"), [
    ("math_fidelity", "HiFi5", ("measured 'math_fidelity' row 2", "'HiFi5'", "LoFi (1)", "HiFi4 (4)")),
    ("math_fidelity", 7, ("measured 'math_fidelity' row 2", "7", "passes 1-4")),
    ("a_on_chip", "L1", ("measured 'a_on_chip' row 2", "'L1'", "not a boolean", "True or False")),
    ("out_on_chip", 0.5, ("measured 'out_on_chip' row 2", "0.5", "not a boolean")),
    ("dtype", "bfp16", ("measured 'dtype' row 2", "'bfp16'", "bfp8, bfp4")),
    ("tile_cols", 0, ("measured column 'tile_cols' row 2", "Hardware.tile_cols", "out of range")),
    ("tile_cols", 2.5, ("measured column 'tile_cols' row 2", "whole number")),
    ("tile_cols", "4x", ("measured 'tile_cols'", "numeric", "row 2 is '4x'")),
])
def test_calibrate_names_the_row_of_a_bad_per_row_setting(column, value, tokens):
    # issue 39's bad input: an unknown dtype, a fidelity out of range, a placement that is not boolean, a machine
    # field no machine can have, each named by its row
    from dfit_nb.sim.calibration import CalibrationError, calibrate

    rows = _per_row_rows()
    rows[column] = rows[column].astype(object)
    rows.loc[2, column] = value
    with pytest.raises(CalibrationError) as info:
        calibrate(rows, presets.get("npu_like"), ["clock_ghz"])
    for token in tokens:
        assert token in str(info.value), (token, str(info.value))


def test_calibrate_refuses_to_fit_a_field_the_rows_set():
    from dfit_nb.sim.calibration import CalibrationError, calibrate

    rows = _per_row_rows().assign(clock_ghz=1.0)
    with pytest.raises(CalibrationError, match=r"\['clock_ghz'\] set those Hardware fields per row, so they cannot "
                                               r"also be fitted"):
        calibrate(rows, presets.get("npu_like"), ["clock_ghz", "op_overhead_cycles"])


def test_a_csv_read_by_pandas_with_text_in_a_number_is_refused_naming_column_and_row(tmp_path):
    # the audit's case as a user meets it: a CSV of measured GEMMs with a typo, read with pandas.read_csv (the
    # column becomes text), given to calibrate and to cost
    import pandas as pd

    from dfit_nb.sim._cost import CostInputError
    from dfit_nb.sim.calibration import CalibrationError, calibrate

    path = tmp_path / "gemms.csv"
    path.write_text("m,k,n,batch,dtype,time_s\n64,64,64,1,float32,1e-5\n128,128,64,1,float32,2e-5\n"
                    "4096x,256,64,1,float32,4e-5\n512,512,64,1,float32,8e-5\n")
    rows = pd.read_csv(path)
    assert not pd.api.types.is_numeric_dtype(rows["m"])  # pandas reads the column as text
    with pytest.raises(CalibrationError, match=r"measured 'm'.*numeric.*row 2 is '4096x'"):
        calibrate(rows, presets.get("npu_like"))
    with pytest.raises(CostInputError, match=r"ops column 'm'.*numeric.*row 2.*'4096x'"):
        cost(rows, presets.get("npu_like"))


@pytest.mark.parametrize("field", ["pe_rows", "clock_ghz"])
def test_an_empty_hardware_field_is_refused_naming_it(trace, field):
    # Hardware(pe_rows=np.array([])) then replay_batch gave a bare IndexError
    from dfit_nb.sim import ReplayError, replay_batch

    with pytest.raises(HardwareError, match=rf"Hardware\.{field} is an empty array \(shape \(0,\)\)"):
        Hardware(**{field: np.array([])})
    with pytest.raises(HardwareError, match=rf"Hardware\.{field} is an empty array"):
        presets.get("npu_like").replace(**{field: np.array([])})
    # a batch emptied by jax.tree.map skips the constructor: replay_batch names what is empty
    batch = Hardware.stack([presets.get("npu_like")] * 2)
    empty = jax.tree.map(lambda x: np.asarray(x)[:0], batch)
    with pytest.raises(ReplayError, match=rf"batch of no machines: .*Hardware\.{field}"):
        replay_batch(trace, empty)


# ------------------------------------------------------------------------------------------------ issue 42, item 5


def _scoped(name: str):
    """``tanh(x)`` in the named scope ``name``, then ``x * 2`` in ``"ok"``."""
    def fn(x):
        with jax.named_scope(name):
            y = jnp.tanh(x)
        with jax.named_scope("ok"):
            return y * 2
    return fn


@pytest.mark.parametrize(("name", "code"), [
    ("a\x00b", "U+0000"),  # netCDF dropped the NUL: "a\x00b" and "ab" merged into one region on a round trip
    ("attn\u2028", "U+2028"),  # ended a line inside the report's JavaScript: two charts failed
    ("attn\u2029x", "U+2029"),
    ("la\tyer", "U+0009"),
    ("\x1b[31mred", "U+001B"),
    ("two\nlines", "U+000A"),
    ("del\x7f", "U+007F"),
    ("c1\x85", "U+0085"),
])
def test_capture_refuses_a_control_character_in_a_named_scope_showing_the_name(name, code):
    with pytest.raises(dfit_nb.errors.CaptureError) as info:
        dfit_nb.capture(_scoped(name), jnp.ones(3), mode="static")
    message = str(info.value)
    assert repr(name) in message and code in message and "Cc, Zl, Zp" in message, message
    assert "cannot capture 'fn'" in message
    assert all(c not in message for c in name if not c.isprintable() and c != " ")  # shown escaped, not raw


def test_capture_refuses_a_control_character_in_a_function_name_or_a_parameter_key():
    def inner(x):
        return x + 1

    inner.__name__ = "in\u2028ner"
    with pytest.raises(dfit_nb.errors.CaptureError, match=r"the function name 'in\\u2028ner'.*U\+2028"):
        dfit_nb.capture(inner, jnp.ones(3), mode="static")
    # a nested jit's function name is a segment of the region path
    with pytest.raises(dfit_nb.errors.CaptureError, match=r"cannot capture 'outer'.*'jit\(in\\u2028ner\)'"):
        def outer(x):
            return jax.jit(inner)(x) * 2
        dfit_nb.capture(outer, jnp.ones(3), mode="static")
    # a parameter key names a region too (regions from parameters)
    with pytest.raises(dfit_nb.errors.CaptureError, match=r"its region 'la\\x00yer'.*U\+0000"):
        dfit_nb.capture(lambda p, x: x @ p["la\x00yer"]["w"], {"la\x00yer": {"w": jnp.ones((3, 3))}}, jnp.ones(3),
                        mode="static")
    # refused under every regions= mode: the scope path reaches the lowered program's metadata in each
    for regions in ("both", "params", "scopes"):
        with pytest.raises(dfit_nb.errors.CaptureError, match=r"'a\\x00b'"):
            dfit_nb.capture(_scoped("a\x00b"), jnp.ones(3), mode="static", regions=regions)


def test_ordinary_unicode_names_are_kept_through_a_netcdf_round_trip(tmp_path):
    name = "attention/é/注意 q·k"
    trace = dfit_nb.capture(_scoped(name), jnp.ones(3), mode="static")
    regions = set(trace.ops["region"].values.tolist())
    assert name in regions and "ok" in regions
    trace.save(tmp_path / "t.nc")
    loaded = dfit_nb.load_trace(tmp_path / "t.nc")
    assert loaded.ops["region"].values.tolist() == trace.ops["region"].values.tolist()


# ------------------------------------------------------------------------------------------------ issue 42, leftovers
# Every save entry point (Trace/Run saves to .nc and .zarr, the sweep's to_zarr) names the path the user gave and
# what to do, and leaves nothing under that name, when the path cannot be written; damaged attributes and sweep
# stores are refused; write_report from Python refuses files dfit_nb did not write.

_ENTRY_POINTS = ["trace.nc", "trace.zarr", "run.nc", "run.zarr", "sweep.zarr"]


@pytest.fixture(scope="module")
def lazy_sweep():
    """Two machines, one per chunk: a lazy sweep for ``scale.to_zarr``."""
    return dfit_nb.sim.sweep({"m": [64, 8], "k": [64, 8], "n": [64, 8]}, presets.get("scalesim_32"), ["os"],
                             chunks=1, per_op=False, dram_bw=[4.0, 8.0])


def _save(entry: str, path: Path, trace, run, lazy_sweep):
    if entry.startswith("sweep"):
        return scale.to_zarr(lazy_sweep, path, progress=False)
    return (trace if entry.startswith("trace") else run).save(path)


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _fail_writes(monkeypatch, entry: str, code: int) -> None:
    """Make the low-level writes of ``entry`` fail with ``code`` (no full disk or read-only folder can be made
    here, and root writes anywhere), naming the file they write, as the OS would: a temporary inside a store."""
    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code), str(args[0]) if args else None)

    if entry.startswith("sweep"):
        import zarr.storage._local

        monkeypatch.setattr(zarr.storage._local, "_put", fail)
    elif entry.endswith(".zarr"):
        monkeypatch.setattr(_files, "_write_file", fail)
    else:
        monkeypatch.setattr(_files, "open", fail, raising=False)  # the temporary's open, in _write_netcdf


@pytest.mark.parametrize("entry", _ENTRY_POINTS)
def test_a_save_under_a_regular_file_names_the_users_path_and_writes_nothing(entry, tmp_path, trace, run,
                                                                               lazy_sweep):
    (tmp_path / "notes").write_text("mine")
    path = tmp_path / "notes" / "out" / entry
    with pytest.raises(SaveError) as info:
        _save(entry, path, trace, run, lazy_sweep)
    message = str(info.value)
    assert str(path) in message and "notes is " in message and "not a" in message, message
    assert _tree(tmp_path) == ["notes"] and (tmp_path / "notes").read_text() == "mine"


@pytest.mark.parametrize("entry", _ENTRY_POINTS)
def test_a_path_holding_a_nul_is_refused_by_every_save_and_load_naming_it(entry, tmp_path, trace, run, lazy_sweep):
    # os.stat said ValueError("embedded null byte") and named nothing; a load printed the NUL raw
    from dfit_nb.errors import LoadRefusedError
    from dfit_nb.sim import calibration

    path = tmp_path / f"a\x00b.{entry.split('.')[1]}"
    with pytest.raises(SaveRefusedError) as info:
        _save(entry, path, trace, run, lazy_sweep)
    assert repr(str(path)) in str(info.value) and "cannot hold a NUL character" in str(info.value), str(info.value)
    loads = {"trace": [dfit_nb.load_trace], "run": [dfit_nb.load_run, calibration.load],
             "sweep": [scale.open_sweep]}[entry.split(".")[0]]
    for load in loads:
        with pytest.raises(LoadRefusedError) as info:
            load(path)
        assert repr(str(path)) in str(info.value) and "NUL" in str(info.value), str(info.value)
    assert _tree(tmp_path) == []


@pytest.mark.parametrize("entry", _ENTRY_POINTS)
def test_a_save_into_a_users_folder_is_refused_naming_it_not_an_empty_name(entry, tmp_path, trace, run,
                                                                             lazy_sweep):
    # the sweep's to_zarr said "Cannot create '' with mode 'w-'" (zarr's words, no path)
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "mine.txt").write_text("mine")
    with pytest.raises(SaveRefusedError) as info:
        _save(entry, folder, trace, run, lazy_sweep)
    message = str(info.value)
    assert str(folder) in message and "Cannot create ''" not in message, message
    assert str(folder / ("sweep.zarr" if entry.startswith("sweep") else "result.nc")) in message  # what to give
    assert _tree(tmp_path) == ["results", "results/mine.txt"]


@pytest.mark.parametrize("entry", _ENTRY_POINTS)
@pytest.mark.parametrize(("code", "advice"), [(errno.ENOSPC, "free space on the disk holding"),
                                              (errno.EACCES, "is not writable by this user"),
                                              (errno.EROFS, "read-only file system")])
def test_a_failed_write_names_the_users_path_and_what_to_do_and_leaves_nothing(entry, code, advice, tmp_path,
                                                                                 monkeypatch, trace, run,
                                                                                 lazy_sweep):
    path = tmp_path / entry
    _fail_writes(monkeypatch, entry, code)
    with pytest.raises(SaveError) as info:
        _save(entry, path, trace, run, lazy_sweep)
    message = str(info.value)
    assert info.value.errno == code and isinstance(info.value, OSError)
    assert re.match(rf"(could not save {re.escape(str(path))}|could not write a sweep to "
                    rf"{re.escape(repr(str(path)))}): \[Errno {code}\] {re.escape(os.strerror(code))} \(nothing "
                    r"was (saved|written) there", message), message
    assert advice in message and str(tmp_path) in message.split(";")[-1], message
    assert _tree(tmp_path) == []  # no store, no temporary under the user's name or beside it


def test_a_sweep_whose_disk_fills_half_way_keeps_its_chunks_and_says_how_to_resume(tmp_path, monkeypatch,
                                                                                  lazy_sweep):
    import dask
    import zarr.storage._local

    path = tmp_path / "sweep.zarr"
    put = zarr.storage._local._put

    flagged = []

    def full_after_first_chunk(file, value, *args, **kwargs):
        # the store is created, one chunk is written and flagged; then every write into the store fails
        if flagged and path in file.parents:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(file))
        written = put(file, value, *args, **kwargs)
        if file.parent.name == scale.DONE and path in file.parents:
            flagged.append(file.name)
        return written

    monkeypatch.setattr(zarr.storage._local, "_put", full_after_first_chunk)
    with dask.config.set(scheduler="synchronous"), pytest.raises(SaveError) as info:
        scale.to_zarr(lazy_sweep, path, progress=False)
    message = str(info.value)
    assert info.value.errno == errno.ENOSPC
    assert message.startswith(f"could not write the sweep to {str(path)!r}: [Errno {errno.ENOSPC}] "), message
    assert "1 of 2 chunks are on disk and kept" in message and "call to_zarr() again" in message, message
    assert _tree(tmp_path)[0] == "sweep.zarr" and not any("dfit-tmp" in p for p in _tree(tmp_path))
    monkeypatch.setattr(zarr.storage._local, "_put", put)
    assert scale.to_zarr(lazy_sweep, path, progress=False) == 1  # the rest, once
    assert scale.open_sweep(path)["total_cycles"].values.tolist() == lazy_sweep["total_cycles"].values.tolist()


@pytest.mark.parametrize("flag", ["no", "False", 0, None])
def test_a_store_switch_that_is_no_bool_is_refused_naming_it(flag, tmp_path, lazy_sweep):
    # "no" and "False" are truthy: they read as True before
    path = tmp_path / "s.zarr"
    with pytest.raises(scale.ScaleOutError, match=r"to_zarr\(\) needs progress as True or False"):
        scale.to_zarr(lazy_sweep, path, progress=flag)
    assert not path.exists()  # refused before any write
    scale.to_zarr(lazy_sweep, path, progress=False)
    with pytest.raises(scale.ScaleOutError, match=r"open_sweep\(\) needs check as True or False"):
        scale.open_sweep(path, check=flag)


@pytest.mark.parametrize("name", ["inferences", "time_bins"])
def test_a_replay_count_given_as_a_bool_is_refused_naming_it(trace, name):
    from dfit_nb.sim import ReplayError

    # a bool is an int to Python: True replayed as 1 inference (or 1 time bin) before
    with pytest.raises(ReplayError, match=rf"{name} must be a positive integer, got True"):
        dfit_nb.replay(trace, presets.get("npu_like"), **{name: True})


def _set_attr(path: Path, group: str, name: str, value) -> None:
    """Write (``value`` not None) or delete one attribute of ``group`` ("/" the root) in a saved file or store."""
    if path.is_dir():
        meta = path / group.strip("/") / "zarr.json" if group != "/" else path / "zarr.json"
        doc = json.loads(meta.read_text())
        if value is None:
            del doc["attributes"][name]
        else:
            doc["attributes"][name] = value
        meta.write_text(json.dumps(doc))
        return
    import h5py

    with h5py.File(path, "r+") as f:
        node = f[group] if group != "/" else f
        if value is None:
            del node.attrs[name]
        else:
            node.attrs[name] = value


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
@pytest.mark.parametrize(("kind", "group", "name", "value", "tokens"), [
    ("run", "/", "hardware", "tpu_v9", ("attribute 'hardware'", "reads back with checksum")),
    ("run", "/events", "clock_ghz", 2.0, ("attribute 'clock_ghz' of group '/events'", "reads back")),
    ("trace", "/lowering", "xla_flops", 1.0, ("attribute 'xla_flops' of group '/lowering'", "reads back")),
    ("trace", "/", "planted", "x", ("attribute 'planted'", "was not saved with it")),
    ("trace", "/", "function", None, ("attribute 'function'", "saved with it, is missing")),
    ("run", "/", _files.ATTRS_CHECKSUM_ATTR, None, ("has no checksums of its attributes",)),
    ("run", "/", _files.ATTRS_CHECKSUM_ATTR, "{not json", ("unreadable checksums of its attributes",)),
])
def test_a_changed_attribute_is_refused_naming_the_file_and_the_attribute(kind, group, name, value, tokens, suffix,
                                                                          tmp_path, trace, run):
    path = (trace if kind == "trace" else run).save(tmp_path / f"{kind}{suffix}")
    _set_attr(path, group, name, value)
    with pytest.raises(IntegrityError) as info:
        (dfit_nb.load_trace if kind == "trace" else dfit_nb.load_run)(path)
    message = str(info.value)
    assert message.startswith(f"refusing to load {path}: ") and all(t in message for t in tokens), message


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_files_from_before_the_attribute_checksums_still_load(suffix, tmp_path, run):
    # a format 1.0 file (variables checksummed, attributes not): what dfit_nb wrote before; an edit there loads
    path = run.save(tmp_path / f"run{suffix}")
    _set_attr(path, "/", _files.ATTRS_CHECKSUM_ATTR, None)
    _set_attr(path, "/", _files.FORMAT_ATTR, "1.0")
    _set_attr(path, "/", "hardware", "edited")
    back = dfit_nb.load_run(path)
    assert back.attrs["hardware"] == "edited" and _files.ATTRS_CHECKSUM_ATTR not in back.attrs
    assert back.events.identical(run.events)


def test_attribute_checksums_agree_across_both_formats_for_every_kind_of_value(tmp_path, trace):
    odd = {"i": 3, "f": 1.5, "nan": float("nan"), "one": [5], "ints": [1, 2], "floats": [1.0, 2.5], "texts": ["a", "b"],
           "text1": ["a"], "f32": np.float32(0.1), "i32": np.int32(7), "uni": "é注", "nul": "a\x00b", "big": 2**62,
           "array": np.arange(3), "empty": [], "tuple": (1, 2), "blank": ""}
    tagged = trace.__class__(**{p: getattr(trace, p) for p in ("ops", "edges", "regions", "lowering")},
                             attrs={**trace.attrs, **odd}, overhead=trace.overhead)
    for suffix in (".nc", ".zarr"):
        back = dfit_nb.load_trace(tagged.save(tmp_path / f"t{suffix}"))  # raises if any checksum disagrees
        assert back.attrs["uni"] == "é注"


def _sweep_store(tmp_path: Path, lazy_sweep) -> Path:
    path = tmp_path / "sweep.zarr"
    assert scale.to_zarr(lazy_sweep, path, progress=False) == 2
    return path


@pytest.mark.parametrize(("damage", "when", "tokens"), [
    # a lazy variable's chunks are checked as they are read; the eager ones and the attributes at open
    ("chunk", "read", ("chunk 1 of its variable 'total_cycles'", "reads back with checksum crc32")),
    ("deleted chunk", "read", ("chunk 0 of its variable 'total_energy_j'", "reads back")),
    ("coordinate", "open", ("its variable 'dram_bw'", "reads back with checksum")),
    ("attribute", "open", ("its attribute 'hardware'", "reads back with checksum")),
])
def test_a_damaged_sweep_store_is_refused_by_open_sweep_naming_what_changed(damage, when, tokens, tmp_path,
                                                                            lazy_sweep):
    import zarr

    path = _sweep_store(tmp_path, lazy_sweep)
    group = zarr.open_group(path, mode="r+")
    if damage == "chunk":
        group["total_cycles"][1, 0] = 1.0
    elif damage == "deleted chunk":
        (path / "total_energy_j" / "0.0").unlink()  # read back as fill values, with no error
    elif damage == "coordinate":
        group["dram_bw"][0] = 5.0
    else:
        group.attrs["hardware"] = "tpu_v9"
    if when == "read":
        opened = scale.open_sweep(path)  # lazily: nothing read yet
        with pytest.raises(IntegrityError) as info:
            opened.load()
    else:
        with pytest.raises(IntegrityError) as info:
            scale.open_sweep(path)
    message = str(info.value)
    assert message.startswith(f"refusing to {when} {str(path)!r}: ") and all(t in message for t in tokens), message
    assert scale.open_sweep(path, check=False).load().sizes["dram_bw"] == 2  # unchecked, as xarray would read it


def test_open_sweep_refuses_an_unfinished_or_foreign_store_and_opens_old_ones(tmp_path, lazy_sweep):
    import zarr

    path = _sweep_store(tmp_path, lazy_sweep)
    zarr.open_group(path, mode="r+")[scale.DONE][1] = False
    with pytest.raises(scale.ScaleOutError, match=rf"{re.escape(repr(str(path)))} holds 1 of 2 chunks.*to_zarr"):
        scale.open_sweep(path)
    other = tmp_path / "plain.zarr"
    xr.Dataset({"a": ("x", [1, 2])}).to_zarr(other, consolidated=False)
    with pytest.raises(scale.ScaleOutError, match=rf"{re.escape(repr(str(other)))} is a Zarr store that to_zarr"):
        scale.open_sweep(other)
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "none.zarr"))):
        scale.open_sweep(tmp_path / "none.zarr")
    # a store written before the checksums (no kind attribute) opens unchecked
    zarr.open_group(path, mode="r+")[scale.DONE][1] = True
    group = zarr.open_group(path, mode="r+")
    group.attrs["hardware"] = "edited"
    del group.attrs[_files.CHECKSUM_ATTR]
    assert scale.open_sweep(path).attrs["hardware"] == "edited"


def test_write_report_from_python_refuses_files_dfit_nb_did_not_write(tmp_path, trace):
    from dfit_nb.report import write_report

    (tmp_path / "report.html").write_text("my own page")
    (tmp_path / "playbook_npu_like.md").write_text("my notes")
    (tmp_path / "npu_like.perfetto.json").mkdir()
    with pytest.raises(SaveRefusedError) as info:
        write_report(trace, ["npu_like"], tmp_path, progress=False)
    message = str(info.value)
    for name in ("report.html", "playbook_npu_like.md", "npu_like.perfetto.json"):
        assert str(tmp_path / name) in message, (name, message)
    assert "3 file(s) that dfit_nb did not write" in message and "move or delete them" in message
    assert (tmp_path / "report.html").read_text() == "my own page"
    assert _tree(tmp_path) == ["npu_like.perfetto.json", "playbook_npu_like.md", "report.html"]


# ------------------------------------------------------------------------------------------- issue 42, last gaps
# Run.to_perfetto from Python replaced any file at its path; write_report from Python accepted / and the home
# directory as out_dir, which the CLI refuses (one shared check now).


@pytest.mark.parametrize("kind", ["a user's file", "a user's trace", "a link to nothing", "a FIFO"])
def test_to_perfetto_refuses_a_file_dfit_nb_did_not_write_naming_it(kind, tmp_path, run):
    from dfit_nb.events.perfetto import to_perfetto

    path = tmp_path / "mine.perfetto.json"
    if kind == "a user's file":
        path.write_text("my notes")
    elif kind == "a user's trace":  # a trace-event file of another tool: no dfit_nb_version in its otherData
        path.write_text('{"traceEvents":[],"otherData":{"tool":"mine"}}')
    elif kind == "a link to nothing":
        path.symlink_to(tmp_path / "gone.json")
    else:
        os.mkfifo(path)
    before = _tree(tmp_path)
    for call in (lambda: run.to_perfetto(path),
                 lambda: to_perfetto(run.events, str(path), clock_ghz=run.attrs["clock_ghz"])):
        with pytest.raises(SaveRefusedError) as info:
            call()  # refused before any work: a FIFO is never opened, so this cannot block
        message = str(info.value)
        said = "a special file (not a regular file)" if kind == "a FIFO" else "did not write"
        assert message.startswith(f"refusing to replace {path}: ") and said in message, message
        assert "overwrite=True" in message, message
    assert _tree(tmp_path) == before
    if kind in ("a user's file", "a user's trace"):
        assert "my notes" in path.read_text() or '"tool":"mine"' in path.read_text()


@pytest.mark.parametrize("case", ["missing folder", "full disk", "URL", "NUL"])
def test_to_perfetto_names_the_users_path_when_it_cannot_write_it(case, tmp_path, run, monkeypatch):
    # a missing folder or a URL (made a local 's3:' folder) got an OSError naming the hidden temporary
    # ('.x.json.r4ons_7d.tmp'); a NUL, a bare ValueError("embedded null byte")
    path = {"missing folder": str(tmp_path / "nodir" / "run.json"), "full disk": str(tmp_path / "run.json"),
            "URL": "s3://bucket/run.json", "NUL": str(tmp_path / "a\x00b.json")}[case]
    if case == "full disk":
        def full(*args, **kwargs):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(os, "replace", full)  # the rename of the complete temporary
    monkeypatch.chdir(tmp_path)
    expected = SaveRefusedError if case in ("URL", "NUL") else SaveError
    with pytest.raises(expected) as info:
        run.to_perfetto(path)
    message = str(info.value)
    assert (repr(path) if case in ("URL", "NUL") else path) in message and ".tmp" not in message, message
    advice = {"missing folder": "does not exist; create it first", "full disk": "free space on the disk holding",
              "URL": "it is a URL", "NUL": "cannot hold a NUL character"}[case]
    assert advice in message, message
    assert _tree(tmp_path) == []  # no temporary left, no 's3:' folder made


@pytest.mark.parametrize("name", ["report.html", "playbook_npu_like.md", "playbook_npu_like.html"])
def test_write_report_names_the_file_it_cannot_write_not_its_temporary(name, tmp_path, trace, monkeypatch):
    # a full disk while writing the page or a playbook raised the OS's OSError naming the hidden temporary
    # ('.report.html.xyz.tmp'); every whole-file write goes through _atomic.atomic_file, which names the file
    from dfit_nb import _atomic
    from dfit_nb.report import write_report

    make = _atomic.tempfile.mkstemp

    def full(*args, prefix=None, **kwargs):
        if prefix == f".{name}.":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f"{kwargs['dir']}/{prefix}xyz.tmp")
        return make(*args, prefix=prefix, **kwargs)

    monkeypatch.setattr(_atomic.tempfile, "mkstemp", full)
    with pytest.raises(SaveError) as info:
        write_report(trace, ["npu_like"], tmp_path / "out", progress=False)
    message = str(info.value)
    assert isinstance(info.value, OSError) and info.value.errno == errno.ENOSPC
    assert message.startswith(f"could not write {tmp_path / 'out' / name}: [Errno {errno.ENOSPC}]"), message
    assert ".tmp" not in message and "free space on the disk holding" in message, message
    assert not [p for p in _tree(tmp_path) if p.endswith(".tmp")]


def test_to_perfetto_replaces_its_own_trace_and_a_users_file_when_told(tmp_path, run):
    from dfit_nb._files import written_by_dfit
    from dfit_nb.events.perfetto import PerfettoExportError

    path = run.to_perfetto(tmp_path / "run.perfetto.json")
    assert written_by_dfit(path)
    first = path.read_text()
    assert run.to_perfetto(path) == path and path.read_text() == first  # its own: replaced without asking
    mine = tmp_path / "mine.json"
    mine.write_text("my notes")
    assert run.to_perfetto(mine, overwrite=True) == mine and written_by_dfit(mine)
    with pytest.raises(PerfettoExportError, match="overwrite must be True or False, got 'yes'"):
        run.to_perfetto(tmp_path / "new.json", overwrite="yes")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.json", "run.perfetto.json"]


@pytest.mark.parametrize("where", ["root", "home", "above home"])
def test_write_report_from_python_refuses_root_and_home_as_the_cli_does(where, tmp_path, monkeypatch, trace):
    from dfit_nb.report import write_report

    home = tmp_path / "users" / "me"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))  # Path.home() reads it: a home of the test's own
    target = {"root": "/", "home": str(home), "above home": str(tmp_path / "users")}[where]
    said = {"root": "the root of the file system", "home": "the home directory",
            "above home": "a folder above the home directory"}[where]
    with pytest.raises(SaveRefusedError) as info:
        write_report(trace, ["npu_like"], target, progress=False)
    message = str(info.value)
    assert message.startswith(f"out_dir {target!r} is {said}; ") and "a folder of its own" in message, message
    assert list(home.iterdir()) == []


def test_sweep_stores_of_both_chunk_checksum_kinds_are_checked_and_resumed_with_their_own(tmp_path, monkeypatch,
                                                                                          lazy_sweep):
    # new stores record CRC32C (google_crc32c, 4x zlib's CRC32: a checked read costs little more than the read);
    # stores written with zlib's CRC32 before it (and where the C extension is missing) are checked as written
    import zarr

    from dfit_nb.sim import _sweep_store

    for kind in ("crc32", "crc32c"):
        monkeypatch.setattr(_sweep_store, "_new_chunk_kind", lambda kind=kind: kind)
        path = tmp_path / f"{kind}.zarr"
        with monkeypatch.context() as m:  # stopped after the first chunk: the resume must use the store's kind
            m.setattr(_sweep_store, "_write_block", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
            with pytest.raises(KeyboardInterrupt):
                scale.to_zarr(lazy_sweep, path, progress=False)
        monkeypatch.setattr(_sweep_store, "_new_chunk_kind", lambda kind=kind: "crc32c" if kind == "crc32" else "crc32")
        assert scale.to_zarr(lazy_sweep, path, progress=False) == 2
        assert zarr.open_group(path, mode="r").attrs[_files.CHECKSUM_ATTR] == kind
        opened = scale.open_sweep(path)
        assert opened["total_cycles"].values.tolist() == lazy_sweep["total_cycles"].values.tolist()
        assert list(opened.data_vars) == list(scale.open_sweep(path, check=False).data_vars)
        zarr.open_group(path, mode="r+")["total_cycles"][0, 0] = -1.0
        with pytest.raises(IntegrityError) as info:
            scale.open_sweep(path).load()
        message = str(info.value)
        assert message.startswith(f"refusing to read {str(path)!r}: chunk 0 of its variable 'total_cycles' reads "
                                  f"back with checksum {kind}:"), message
    zarr.open_group(path, mode="r+").attrs[_files.CHECKSUM_ATTR] = "sha3"
    with pytest.raises(scale.ScaleOutError, match=rf"{re.escape(repr(str(path)))} records checksums of kind "
                                                   r"'sha3'.*upgrade dfit_nb"):
        scale.to_zarr(lazy_sweep, path, progress=False)


# ------------------------------------------------------------------------------------------- issue 42, URLs
# to_zarr and open_sweep pass a URL to zarr, which opens it through fsspec: s3:// without s3fs raised fsspec's bare
# ImportError ("Install s3fs to access S3", no path), open_sweep called such a URL "not a sweep store", and a
# file:// URL failed inside fsspec (FileNotFoundError of a '.zattrs' in a folder it never created).


@pytest.mark.parametrize(("url", "package", "tokens"), [
    ("s3://bucket/sweep.zarr", "s3fs", ("s3:// URLs need a package that is not installed", "s3fs")),
    ("gs://bucket/sweep.zarr", "gcsfs", ("gs:// URLs need a package that is not installed", "gcsfs")),
    ("abc://bucket/sweep.zarr", None, ("'abc' is not a protocol fsspec", "give a local path")),
    ("simplecache::abc://bucket/sweep.zarr", None, ("'abc' is not a protocol fsspec",)),
    ("file://server/share/sweep.zarr", None, ("a file:// URL of the host 'server'",)),
])
def test_a_url_zarr_cannot_open_is_refused_naming_it_before_any_work(url, package, tokens, lazy_sweep):
    import importlib.util

    if package is not None and importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here: {url} would be opened")
    for call, verb in ((lambda: scale.to_zarr(lazy_sweep, url, progress=False), "write a sweep to"),
                       (lambda: scale.open_sweep(url), "open")):
        with pytest.raises(scale.ScaleOutError) as info:
            call()
        message = str(info.value)
        assert message.startswith(f"cannot {verb} {url!r}: ") and all(t in message for t in tokens), message


@pytest.mark.parametrize("entry", _ENTRY_POINTS[:4])
def test_a_url_is_refused_by_saves_and_loads_of_results_and_a_file_url_is_its_path(entry, tmp_path, trace, run,
                                                                                   monkeypatch):
    # Path made 's3://bucket/t.nc' the local 's3:/bucket/t.nc': the save named a folder 's3:' the user never gave
    from dfit_nb.errors import LoadRefusedError
    from dfit_nb.report import write_report

    monkeypatch.chdir(tmp_path)
    obj, load = (trace, dfit_nb.load_trace) if entry.startswith("trace") else (run, dfit_nb.load_run)
    url = f"s3://bucket/{entry}"
    with pytest.raises(SaveRefusedError) as info:
        obj.save(url)
    assert str(info.value).startswith(f"refusing to save to {url!r}: it is a URL"), str(info.value)
    with pytest.raises(LoadRefusedError) as info:
        load(url)
    assert str(info.value).startswith(f"refusing to load {url!r}: it is a URL"), str(info.value)
    if entry == "trace.nc":
        with pytest.raises(SaveRefusedError, match=r"out_dir 's3://bucket/out' is a URL"):
            write_report(trace, ["npu_like"], "s3://bucket/out", progress=False)
    assert list(tmp_path.iterdir()) == []
    path = obj.save((tmp_path / entry).as_uri())  # file:// is the local path
    assert path == tmp_path / entry and _tree(tmp_path)[0] == entry
    assert load(path.as_uri()).attrs == load(path).attrs


def test_to_zarr_refuses_a_path_starting_with_a_tilde_naming_the_expanded_one(tmp_path, monkeypatch, lazy_sweep):
    # to_zarr creates a store's missing folders: '~/sweeps/s.zarr' made a folder named '~' in the working directory
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SaveRefusedError) as info:
        scale.to_zarr(lazy_sweep, "~/sweeps/s.zarr", progress=False)
    message = str(info.value)
    assert message.startswith("refusing to write a sweep to '~/sweeps/s.zarr': it starts with '~'"), message
    assert os.path.expanduser("~/sweeps/s.zarr") in message and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("url", ["http://example.com/sweep.zarr", "https://example.com/sweep.zarr"])
def test_to_zarr_refuses_a_read_only_url_naming_it(url, lazy_sweep):
    with pytest.raises(scale.ScaleOutError) as info:
        scale.to_zarr(lazy_sweep, url, progress=False)
    message = str(info.value)
    assert message.startswith(f"cannot write a sweep to {url!r}: ") and "cannot write them" in message, message


def test_a_file_url_is_written_as_its_local_path_and_a_remote_store_is_checked(tmp_path, lazy_sweep):
    # file:// is the local path (a temporary and a rename, its folders created); memory:// stands for a remote
    # object store: written in place, checksummed, and its damage refused as a local store's is
    import fsspec
    import zarr

    url = (tmp_path / "sub dir" / "sweep.zarr").as_uri()  # a space: %20 in the URL
    assert url.startswith("file://") and "%20" in url
    assert scale.to_zarr(lazy_sweep, url, progress=False) == 2
    assert (tmp_path / "sub dir" / "sweep.zarr" / "total_cycles").is_dir()
    assert not [p for p in _tree(tmp_path) if "dfit-" in p]  # its temporary renamed in, nothing beside it
    assert scale.to_zarr(lazy_sweep, url, progress=False) == 0  # resumed: nothing left to write
    expected = lazy_sweep["total_cycles"].values.tolist()
    assert scale.open_sweep(url)["total_cycles"].values.tolist() == expected
    remote = f"memory://{tmp_path.name}/sweep.zarr"
    try:
        assert scale.to_zarr(lazy_sweep, remote, progress=False) == 2
        assert scale.open_sweep(remote)["total_cycles"].values.tolist() == expected
        zarr.open_group(remote, mode="r+")["total_cycles"][1, 0] = 1.0
        with pytest.raises(IntegrityError, match=rf"refusing to read {re.escape(repr(remote))}: chunk 1 of its "
                                                 r"variable 'total_cycles'"):
            scale.open_sweep(remote).load()
    finally:  # the memory file system lives as long as the process
        fsspec.filesystem("memory").rm(f"/{tmp_path.name}", recursive=True)


# ------------------------------------------------------------------------------------------- issue 42, the index
# Every case of the second audit (issue 42's "Why" and "What to build"), and the test that holds it; tests in
# other files are named by file. Each asserts the exception type and that its message names the input (or, for a
# loss, a crash or a hang, that the result is whole and nothing else happened).

AUDIT_42 = {
    # losses
    "report -o DIR replaced the user's report.html, playbooks and Perfetto trace": [
        "test_bad_inputs.py::test_cli_output_dir_holding_a_users_report_file_is_refused_naming_every_one",
        "test_bad_inputs.py::test_write_report_from_python_refuses_files_dfit_nb_did_not_write"],
    "two threads saving one Run to one .zarr destroyed the save there": [
        "test_saves.py::test_threads_saving_one_path_leave_one_whole_save_and_lose_nothing",
        "test_saves.py::test_loads_of_a_zarr_path_never_see_a_swap_half_done"],
    "threads streaming one sweep to one new store: all but one failed, 'Directory not empty' (found this round)": [
        "test_saves.py::test_threads_streaming_one_sweep_to_one_store_take_turns"],
    # crash, hangs
    "threads in Run.save/load_run with netCDF killed the process": [
        "test_saves.py::test_threads_saving_and_loading_netcdf_files_do_not_crash_the_process"],
    "load_trace on a FIFO blocked forever (and sockets, devices)": [
        "test_saves.py::test_files_that_are_not_files_are_refused_by_load_and_save_unopened",
        "test_bad_inputs.py::test_to_perfetto_refuses_a_file_dfit_nb_did_not_write_naming_it"],
    "read_hlo_op_timings on a FIFO blocked forever": [
        "capture/test_lowering.py::test_read_hlo_op_timings_refuses_a_fifo_unopened_and_names_a_missing_file"],
    "a FIFO inside a Zarr store blocked its load (found in this round)": [
        "test_saves.py::test_a_fifo_inside_a_zarr_store_is_refused_by_load_unopened"],
    "a 150 kB %dfit line took 181 s; {expr} ran before dfit_nb parsed the line": [
        "test_magics.py::test_an_over_long_line_is_refused_at_once",
        "test_magics.py::test_dfit_does_not_expand_variables_in_its_line"],
    "%dfit_presets expanded a 150 kB line for minutes; %dfit_compare's error repeated it (found this round)": [
        "test_magics.py::test_every_magic_neither_expands_nor_reads_an_over_long_line"],
    # silent results
    "%dfit -o __builtins__ (a builtin, a keyword, IPython's names) replaced them": [
        "test_magics.py::test_bad_input_raises_usage_error_naming_it_and_changes_nothing"],
    "a NUL in region names was dropped by .nc (two regions merged); control characters in names": [
        "test_bad_inputs.py::test_capture_refuses_a_control_character_in_a_named_scope_showing_the_name",
        "test_bad_inputs.py::test_capture_refuses_a_control_character_in_a_function_name_or_a_parameter_key",
        "test_bad_inputs.py::test_hardware_refuses_a_bad_field_naming_it"],
    "damaged stores loaded wrong values: a flipped byte in a Zarr chunk": [
        "test_saves.py::test_a_flipped_byte_in_any_file_of_a_zarr_store_never_loads_wrong_values",
        "test_saves.py::test_a_value_changed_in_a_netcdf_file_is_refused_naming_the_file_and_the_variable"],
    "damaged stores: a deleted Zarr chunk read back as fill values": [
        "test_saves.py::test_a_deleted_or_swapped_zarr_chunk_is_refused_naming_the_variable",
        "test_bad_inputs.py::test_a_damaged_sweep_store_is_refused_by_open_sweep_naming_what_changed"],
    "damaged stores: 9 of 30 single-byte flips of a .nc file loaded": [
        "test_saves.py::test_single_byte_flips_in_a_netcdf_file_never_load_wrong_values",
        "test_bad_inputs.py::test_a_changed_attribute_is_refused_naming_the_file_and_the_attribute"],
    "unknown dtype strings (float33) costed as 8-byte words in cost and calibrate": [
        "test_bad_inputs.py::test_cost_refuses_an_unknown_dtype_or_text_in_a_number_naming_column_and_row",
        "test_bad_inputs.py::test_calibrate_refuses_a_bad_row_naming_column_and_row"],
    "a calibration row with m = 0 (non-positive, non-finite shapes and times) was fitted": [
        "test_bad_inputs.py::test_calibrate_refuses_a_bad_row_naming_column_and_row"],
    # poor answers
    "a U+2028 in a region name broke two report charts": [
        "test_bad_inputs.py::test_capture_refuses_a_control_character_in_a_named_scope_showing_the_name",
        "test_bad_inputs.py::test_every_chart_renders_despite_a_hostile_region_name"],
    "nested scans whose FLOPs x count pass int64 raised a bare OverflowError": [
        "test_bad_inputs.py::test_capture_refuses_counts_that_nested_scans_push_past_64_bits"],
    "a 253-character file name got an OSError naming the hidden temporary": [
        "test_saves.py::test_a_name_too_long_for_its_temporary_names_the_users_path"],
    "a NUL in a path: a bare ValueError('embedded null byte') from every save (found this round)": [
        "test_bad_inputs.py::test_a_path_holding_a_nul_is_refused_by_every_save_and_load_naming_it"],
    "to_zarr into a user's folder got zarr's \"Cannot create '' with mode 'w-'\"": [
        "test_bad_inputs.py::test_a_save_into_a_users_folder_is_refused_naming_it_not_an_empty_name",
        "test_bad_inputs.py::test_a_save_under_a_regular_file_names_the_users_path_and_writes_nothing"],
    "to_zarr on a full disk got ENOSPC without a path (every save names the user's path)": [
        "test_bad_inputs.py::test_a_failed_write_names_the_users_path_and_what_to_do_and_leaves_nothing",
        "test_bad_inputs.py::test_a_sweep_whose_disk_fills_half_way_keeps_its_chunks_and_says_how_to_resume"],
    "a CSV with 4096x in a numeric column got TypeError: can't multiply sequence": [
        "test_bad_inputs.py::test_a_csv_read_by_pandas_with_text_in_a_number_is_refused_naming_column_and_row",
        "test_bad_inputs.py::test_cost_refuses_an_unknown_dtype_or_text_in_a_number_naming_column_and_row"],
    "Hardware(pe_rows=np.array([])) then replay_batch got a bare IndexError": [
        "test_bad_inputs.py::test_an_empty_hardware_field_is_refused_naming_it"],
    "two pytest workers shared JAX's persistent cache (a truncated entry read)": [
        "test_compile_cache.py::test_an_xdist_worker_compiles_into_a_folder_of_its_own",
        "test_compile_cache.py::test_each_worker_holds_its_own_folder_while_it_lives"],
    # what to build, beyond the cases above
    "-o / and -o ~ refused, for root too (the CLI and write_report)": [
        "test_bad_inputs.py::test_cli_output_dir_at_the_root_or_home_is_refused_even_for_root",
        "test_bad_inputs.py::test_write_report_from_python_refuses_root_and_home_as_the_cli_does"],
    "an empty -o / out_dir wrote the report into the working directory; '~/dfit' made a folder '~' (this round)": [
        "test_bad_inputs.py::test_an_empty_or_tilde_report_folder_is_refused_by_the_cli_and_write_report"],
    "a previous report's files (dfit_nb's mark) are replaced": [
        "test_bad_inputs.py::test_cli_output_dir_of_a_previous_report_is_replaced_and_its_marks_are_recognised"],
    "a URL (s3://) for a Trace/Run save or load, write_report, the CLI's -o and --save-trace (found this round)": [
        "test_bad_inputs.py::test_a_url_is_refused_by_saves_and_loads_of_results_and_a_file_url_is_its_path",
        "test_bad_inputs.py::test_cli_a_url_for_an_output_is_refused_naming_it_not_made_a_local_folder"],
    "to_zarr to '~/sweeps/s.zarr' made a folder named '~' (found this round)": [
        "test_bad_inputs.py::test_to_zarr_refuses_a_path_starting_with_a_tilde_naming_the_expanded_one"],
    "to_zarr / open_sweep to a non-local URL (s3://, gs://, http://, file://)": [
        "test_bad_inputs.py::test_a_url_zarr_cannot_open_is_refused_naming_it_before_any_work",
        "test_bad_inputs.py::test_to_zarr_refuses_a_read_only_url_naming_it",
        "test_bad_inputs.py::test_a_file_url_is_written_as_its_local_path_and_a_remote_store_is_checked"],
    "to_perfetto into a missing folder or a URL named its hidden temporary; a NUL in its path (this round)": [
        "test_bad_inputs.py::test_to_perfetto_names_the_users_path_when_it_cannot_write_it"],
    "write_report on a full disk named the page's or playbook's hidden temporary (found this round)": [
        "test_bad_inputs.py::test_write_report_names_the_file_it_cannot_write_not_its_temporary"],
    "a lost checksum or an unknown checksum kind": [
        "test_saves.py::test_a_lost_checksum_or_an_unknown_kind_is_refused",
        "test_bad_inputs.py::test_sweep_stores_of_both_chunk_checksum_kinds_are_checked_and_resumed_with_their_own"],
}


def test_every_case_of_the_second_audit_names_tests_that_exist():
    """The index above stays true: each case names at least one test, and each named test is a test function of
    its file (a renamed or deleted test fails here, not silently out of the catalogue)."""
    import ast

    folder = Path(__file__).parent
    defined: dict[str, set[str]] = {}
    for case, tests in AUDIT_42.items():
        assert tests, case
        for test in tests:
            file, _, name = test.partition("::")
            if file not in defined:
                tree = ast.parse((folder / file).read_text(encoding="utf-8"))
                defined[file] = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)
                                 and n.name.startswith("test_")}
            assert name in defined[file], (case, test)


@pytest.mark.parametrize("mode", ["eager", "profile"])
def test_a_program_that_fails_as_it_runs_is_a_capture_error(mode):
    """A runtime mode runs the user's program; an error it raises there (a host callback's) came out as JAX's own
    JaxRuntimeError from dfit_nb's probes. It is a CaptureError naming the function, the mode and the error."""
    def bad_row(a):
        raise ValueError("bad row")

    def fn(x):
        return jax.pure_callback(bad_row, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    with pytest.raises(CaptureError, match=rf"fn failed while running in mode='{mode}': .*ValueError: bad row"):
        dfit_nb.capture(fn, jnp.ones(3), mode=mode)


def test_profile_mode_beside_a_running_profiler_says_what_to_do(tmp_path):
    jax.profiler.start_trace(str(tmp_path / "theirs"))
    try:
        with pytest.raises(CaptureError, match=r"another profiler trace is running.*stop_trace.*mode='eager'"):
            dfit_nb.capture(lambda x: x * 2.0, jnp.ones(3), mode="profile")
    finally:
        jax.profiler.stop_trace()
