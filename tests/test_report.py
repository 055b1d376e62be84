"""The report charts a preset with something to show, and says so in one line where a view would be empty."""

from __future__ import annotations

import markupsafe
import pytest

import dfit_nb
from dfit_nb import examples, report
from dfit_nb.sim import playbook


@pytest.fixture(scope="module")
def mlp_results():
    fn, args = examples.get("mlp").build()
    trace = dfit_nb.capture(fn, *args)
    return trace, report.analyse(trace, ["scalesim_32", "npu_like"], progress=False)


def test_the_featured_preset_is_the_first_with_more_than_one_tile(mlp_results):
    _, results = mlp_results
    assert [r.name for r in results] == ["scalesim_32", "npu_like"]
    assert report.featured(results).name == "npu_like"
    assert report.featured(results[:1]).name == "scalesim_32"  # none has more: the first


def test_the_page_charts_the_featured_preset_and_draws_no_empty_noc_chart(mlp_results, tmp_path, monkeypatch):
    """The featured preset's charts, a one-line note where a view has nothing to show, and specs that are valid
    Vega-Lite: the report builds them unvalidated (report._specs), so each must pass the schema Altair ships."""
    from altair.utils.schemapi import validate_jsonschema
    from altair.vegalite.v6.schema.core import load_schema
    from jsonschema import ValidationError

    trace, results = mlp_results
    built = []
    real_specs = report._specs
    monkeypatch.setattr(report, "_specs", lambda *args: built.append(real_specs(*args)) or built[-1])
    page = report.write_report(trace, out_dir=tmp_path / "two", results=results, charts="svg", progress=False)
    html = page.html.read_text()
    assert "Charts: npu_like" in html and "Playbook: npu_like" in html
    assert "Nothing to show" not in html  # npu_like's mesh carries the program's data: a NoC chart
    drawn = [spec for _, _, spec in built[0] if isinstance(spec, dict)]
    assert len(drawn) == len(built[0]) >= 9  # every chart drawn (none failed, none had nothing to show)
    schema = load_schema()
    for spec in drawn:
        validate_jsonschema(spec, schema)  # raises on an invalid spec
    with pytest.raises(ValidationError):  # the check can fail
        validate_jsonschema({**drawn[0], "mark": {"type": "no such mark"}}, schema)
    single = report.write_report(trace, out_dir=tmp_path / "one", results=results[:1], charts="svg",
                                 progress=False)
    html = single.html.read_text()
    assert "Charts: scalesim_32" in html
    noc = html[html.index("<section class='chart' id='noc_load'>"):]
    noc = noc[: noc.index("</section>")]
    assert "Nothing to show: scalesim_32 has one tile: no data crosses its mesh." in noc and "<svg" not in noc


def test_the_playbook_files_carry_the_full_memo(mlp_results, tmp_path):
    trace, _ = mlp_results
    build = examples.get("mlp").build
    rep = report.write_report(trace, ["npu_like"], tmp_path, charts="svg", progress=False, seed=11,
                              tags={"model_revision": "r2"},
                              batch_variance={"make_args": lambda batch: build(batch=batch)[1], "base": {"batch": 8}})
    md = rep.playbooks["npu_like"].read_text()
    html = rep.playbooks_html["npu_like"].read_text()
    policy = rep.results[0].policy
    for field in ("## 1. Symptom", "Failing metric:", "Workload slice:", "First failing stage:",
                  "### Build and runtime tags", "| seed | 11 |", "| model_revision | r2 |", "## 2. Mechanism",
                  "### Competing hypotheses", "### Missing evidence", "## 3. Proposed action",
                  "### Expected movement", "p95 latency (us)", "p99 latency (us)", "### Regression risk",
                  "## 4. Signoff", "### Required owners", "### Suggested decision"):
        assert field in md, field
        assert field.lstrip("#| ").split(" |")[0].rstrip(":") in html, field
    p99 = float(policy.tail["latency_q"].sel(policy="policy", quantile=0.99)) * 1e6
    assert f"{p99:.4g}" in md and f"| jaxpr_hash | {policy.tags['jaxpr_hash']} |" in md
    # the page renders the same memo from its document model, every heading two levels down under its own h2
    page = rep.html.read_text()
    section = page[page.index("<div class='playbook'>"):page.index("<h2 id='files'>")]
    headings = [(int(kind[1]) + 2, text) for kind, text in playbook.document(policy) if kind in ("h1", "h2", "h3")]
    assert len(headings) > 10
    at = 0
    for level, text in headings:
        at = section.index(f"<h{level}>{markupsafe.escape(text)}</h{level}>", at)  # in order
    assert "<h2>" not in section and "<body>" not in section


def test_the_next_machine_is_warmed_ahead_and_each_file_is_written_as_its_machine_is_done(mlp_results, tmp_path,
                                                                                            monkeypatch):
    """analyse() loads and runs the next machine's replay program on a second thread while it analyses the current
    one; the selection then reads that run instead of running it again (no program run twice). write_report
    hands each machine's files to its writer thread as soon as that machine is analysed, and the files are the
    same as those of a report from results computed first."""
    import threading

    import xarray as xr

    from dfit_nb._runtime import exported as _exported
    from dfit_nb.sim import _replay

    trace, results = mlp_results
    runs, written = [], []
    call, write_files, one = _exported.call, report._write_files, report._analyse_one

    def counted(fn, *args, **kwargs):
        if fn is _replay.program:
            runs.append(threading.current_thread().name)
        return call(fn, *args, **kwargs)

    def spied(folder, stem, r):
        written.append((r.name, len(analysed)))
        return write_files(folder, stem, r)

    analysed = []
    monkeypatch.setattr(_exported, "call", counted)
    monkeypatch.setattr(report, "_write_files", spied)
    monkeypatch.setattr(report, "_analyse_one", lambda *a: analysed.append(a[1].name) or one(*a))
    _replay._kept.clear()
    page = report.write_report(trace, ["scalesim_32", "npu_like"], tmp_path / "piped", charts="svg",
                               progress=False)
    ahead = [name for name in runs if name.startswith("dfit-nb-ahead")]
    assert len(ahead) == 2  # each machine's first run, loaded and run on the second thread
    assert len(runs) == 2 * 4  # per machine: 3 single styles priced (ws read from the warm-up's) + the hybrid
    assert written[0] == ("scalesim_32", 1)  # submitted when its machine was done, before the next one started
    before = report.write_report(trace, out_dir=tmp_path / "after", results=results, charts="svg", progress=False)
    for name in ("scalesim_32", "npu_like"):
        xr.testing.assert_identical(dfit_nb.load_run(page.runs[name]).cube, dfit_nb.load_run(before.runs[name]).cube)
        assert page.playbooks[name].read_text() == before.playbooks[name].read_text()


def test_a_report_replaces_its_own_files_and_refuses_a_users_before_any_work(mlp_results, tmp_path, monkeypatch):
    """issue 42: the CLI refused files dfit_nb did not write in its -o folder; write_report from Python replaced
    them. A previous report's files (marked) are still replaced, so a report can be re-run into its folder."""
    from dfit_nb.errors import SaveRefusedError

    trace, results = mlp_results
    report.write_report(trace, out_dir=tmp_path, results=results[:1], charts="svg", progress=False)
    written = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert "report.html" in written and "scalesim_32.nc" in written
    again = report.write_report(trace, out_dir=tmp_path, results=results[:1], charts="svg", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(written) and again.html.exists()
    (tmp_path / "report.html").write_text("my own page")
    monkeypatch.setattr(report, "_write_files", lambda *a: pytest.fail("wrote before refusing"))
    with pytest.raises(SaveRefusedError) as info:
        report.write_report(trace, out_dir=tmp_path, results=results[:1], charts="svg", progress=False)
    message = str(info.value)
    assert str(tmp_path / "report.html") in message and "1 file(s) that dfit_nb did not write" in message, message
    assert "scalesim_32.nc" not in message  # its own files are not in the way
    assert (tmp_path / "report.html").read_text() == "my own page"
