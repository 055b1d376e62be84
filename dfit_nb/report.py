"""The offline HTML report that ``dfit-nb report`` writes: one trace replayed on hardware presets.

:func:`write_report` replays a captured :class:`~dfit_nb.capture.Trace` on each
preset, selects a hybrid dataflow policy per preset
(:func:`dfit_nb.sim.select_dataflows`, evaluated by replay), and writes to one
folder:

- ``report.html``: one self-contained page: what was captured, a per-preset
  summary table, the hybrid policy of every preset with its gains against the
  single-style baselines, the charts of :mod:`dfit_nb.views` for the featured
  preset (:func:`featured`: the first with more than one tile, so the
  utilisation heatmap and the NoC have something to show) plus a cross-preset
  comparison, its playbook, and links
  to the files below;
- ``<preset>.nc``: the replay's event cube (:meth:`Run.save`; reopen with
  :func:`dfit_nb.load_run`);
- ``<preset>.perfetto.json``: the replay as Chrome trace-event JSON
  (:meth:`Run.to_perfetto`; open it in https://ui.perfetto.dev);
- ``playbook_<preset>.md`` and ``playbook_<preset>.html``: the policy's
  playbook (:meth:`Policy.report`).

Charts: interactive and offline. The page inlines the Vega, Vega-Lite and
vega-embed JavaScript *once* (``vl_convert.javascript_bundle()``, the bundle
vl-convert-python builds from the libraries it ships, pinned to the Vega-Lite
version of the installed Altair) in a ``<script type="module">``, and embeds each
chart's Vega-Lite spec as JSON, drawn by ``vegaEmbed`` (SVG renderer; tooltips,
zoom and brushes work; the action menu keeps only the PNG/SVG export, which is
local). Chart data are inlined in the specs (the views aggregate to at most
:data:`~dfit_nb.views.MAX_ROWS` rows), so the page makes no network request of
any kind; a headless-Chromium test with every non-``file:`` request aborted
checks it. The bundle adds about 0.9 MB. Where no bundle can be built (an
older vl-convert without ``javascript_bundle``), or with ``charts="svg"``, each
chart is rendered to static SVG by vl-convert instead: still offline, not
interactive.

This module composes :mod:`dfit_nb.sim` and :mod:`dfit_nb.views` as the CLI
does; it never imports ipywidgets. The result types are :mod:`dfit_nb._report_results`, the folder's file names
and checks :mod:`dfit_nb._report_files`, the charts and the Vega bundle :mod:`dfit_nb._report_charts`; their
public names are importable from here too.
"""

from __future__ import annotations

from ._extras import require

require("ui", "dfit_nb.report (dfit-nb report)", ("altair", "vl_convert"))

import concurrent.futures
import contextlib
import datetime
import os
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import views
from ._atomic import atomic_file
from ._files import HTML_MARK, MARKDOWN_MARK
from ._html import render, trusted
from ._report_charts import NothingToShow as NothingToShow
from ._report_charts import bundle, chart_list, page_charts
from ._report_charts import bundle_available as bundle_available
from ._report_charts import comparison_chart as comparison_chart
from ._report_charts import embedded_json as embedded_json
from ._report_charts import featured as featured
from ._report_files import check_report_folder as check_report_folder
from ._report_files import file_stem as file_stem
from ._report_files import file_stems, inside, stem_files
from ._report_files import foreign_report_files as foreign_report_files
from ._report_files import report_file_names as report_file_names
from ._report_results import SINGLE_STYLES as SINGLE_STYLES
from ._report_results import PresetResult as PresetResult
from ._report_results import Report as Report
from ._report_results import ReportError as ReportError
from ._report_results import ReportWarning as ReportWarning
from .capture.trace import describe_arguments
from .errors import DfitError
from .sim import SpillWarning, presets, replay, warm
from .sim.hardware import Hardware, check_hardware
from .sim.playbook import document as playbook_document
from .sim.policy import OBJECTIVES, select_dataflows
from .sim.streaming import REPORTED_STREAM

__all__ = ["PresetResult", "Report", "ReportError", "ReportWarning", "analyse", "write_report"]


# ------------------------------------------------------------------------------------------------ the analysis


def _machines(hw: Any) -> list[Hardware]:
    """Preset names and/or Hardware objects -> Hardware objects (default: every preset)."""
    if hw is None:
        hw = presets.names()
    if isinstance(hw, (str, Hardware)):
        hw = [hw]
    out = []
    for h in hw:
        if isinstance(h, str):
            if h not in presets.names():
                raise ReportError(f"unknown preset {h!r}; valid: {', '.join(presets.names())} (or a Hardware)")
            out.append(presets.get(h))
        else:
            out.append(check_hardware(h, "the report", argument="each machine of hw", error=ReportError,
                                      also_valid=f"or a preset's name ({', '.join(presets.names())})"))
    if not out:
        raise ReportError("no hardware to replay on; give at least one preset")
    names = [h.name for h in out]
    if len(set(names)) != len(names):
        raise ReportError(f"hardware names must be unique (they name the files), got {names}")
    return out


def analyse(trace: Any, hw: Any = None, dataflow: Any = "ws", objective: str = "energy",
            progress: bool = True, *, seed: int | None = None, tags: dict[str, Any] | None = None,
            batch_variance: dict[str, Any] | None = None,
            on_result: Callable[[PresetResult], Any] | None = None, fusion: str | None = None) -> list[PresetResult]:
    """Replay ``trace`` on each machine under ``dataflow`` and select (and evaluate) a hybrid policy there.

    The policy's evaluation replays every single style, so for ``dataflow`` in ``ws`` / ``os`` / ``is`` the
    run is taken from it rather than replayed again. Spill warnings are caught and recorded (``spills``).
    ``progress`` shows a ``tqdm.auto`` bar over the machines. ``seed`` and ``tags`` go to the policies' build
    and runtime tags (:func:`dfit_nb.sim.select_dataflows`); ``batch_variance``, the keyword arguments of
    :meth:`~dfit_nb.sim.Policy.with_batch_variance` (``make_args``, ``base``, optionally ``batch_sizes`` and
    ``axis``), gives each policy's memo its p50/p95/p99 latency under batch variance. ``on_result`` is called
    with each machine's result as soon as it is ready (:func:`write_report` starts writing its files there).
    ``fusion``: how the replays group ops into kernels (:func:`dfit_nb.replay`; default the machine's rules).

    >>> import jax.numpy as jnp, dfit_nb
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    >>> [r] = analyse(t, ["npu_like"], progress=False)
    >>> r.name, r.run.attrs["hardware"], r.policy.baselines.sizes["policy"]
    ('npu_like', 'npu_like', 4)
    """
    from tqdm.auto import tqdm

    machines = _machines(hw)
    out = []
    bar = tqdm(machines, desc="replaying", unit="preset", disable=not progress, leave=False)
    # The next machine's replay program is loaded (or compiled) and run once on a second thread while this one is
    # analysed (dfit_nb.sim.warm): XLA releases the GIL while it loads, compiles and runs, and the selection's pricing
    # then reads that run's outputs (the one-machine replay keeps its last outputs) instead of running it again.
    ahead = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="dfit-nb-ahead")
    warmed = [ahead.submit(_warm, trace, h) for h in machines[:1]]
    try:
        for i, h in enumerate(bar):
            if i + 1 < len(machines):
                warmed.append(ahead.submit(_warm, trace, machines[i + 1]))
            concurrent.futures.wait([warmed[i]])  # its run kept before the pricing asks for the same run
            out.append(_analyse_one(trace, h, dataflow, objective, seed, tags, batch_variance, fusion))
            if on_result is not None:
                on_result(out[-1])
    finally:
        ahead.shutdown(wait=True, cancel_futures=True)
    bar.close()
    return out


def _warm(trace: Any, hw: Hardware) -> None:
    """:func:`dfit_nb.sim.warm`, quietly: what it would raise, the machine's own replay raises again."""
    # no catch_warnings here: it swaps the process' filters, which the analysis on the main thread is recording
    with contextlib.suppress(Exception):
        warm(trace, hw)


def _analyse_one(trace: Any, h: Hardware, dataflow: Any, objective: str, seed: int | None,
                 tags: dict[str, Any] | None, batch_variance: dict[str, Any] | None,
                 fusion: str | None = None) -> PresetResult:
    """One machine's replay and policy (see :func:`analyse`)."""
    t0 = time.perf_counter()
    note = ""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SpillWarning)
        try:
            policy = select_dataflows(trace, h, objective, seed=seed, tags=tags, fusion=fusion, progress=False)
            if batch_variance is not None:
                policy = policy.with_batch_variance(**batch_variance)
        except DfitError as err:  # e.g. no GEMM to choose a dataflow for: the replay still goes in the report
            policy, note = None, f"no hybrid policy: {err}"
        if policy is not None and isinstance(dataflow, str) and dataflow in policy.runs:
            run = policy.runs[dataflow]
        else:
            run = replay(trace, h, dataflow, fusion=fusion)
    spills = any(issubclass(w.category, SpillWarning) for w in caught)
    for w in caught:  # anything else goes on to the caller's filters
        if not issubclass(w.category, SpillWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return PresetResult(h.name, h, run, policy, spills, time.perf_counter() - t0, note)


def summary_frame(results: Sequence[PresetResult], inferences: int = REPORTED_STREAM) -> pd.DataFrame:
    """One row per preset: latency, energy, J/inference, utilisation, the throughput and steady-state utilisation
    of ``inferences`` streamed back to back (:meth:`dfit_nb.sim.Run.streamed`), bottleneck, and the policy's
    gains."""
    rows = []
    for r in results:
        s = r.run.summary
        stream = r.run.streamed(inferences)
        row = {"preset": r.name, "execution": r.run.attrs["execution"], "dataflow": str(r.run.attrs["dataflow"]),
               "latency_us": float(s["latency_s"]) * 1e6, "energy_mj": float(s["energy_j"]) * 1e3,
               "mj_per_inference": float(s["joules_per_inference"]) * 1e3,
               "utilization": float(s["utilization"]),
               "inferences_per_s": float(stream["throughput_inferences_per_s"]),
               "steady_utilization": float(stream["steady_state_utilization"]), "dram_mb": float(s["dram_bytes"]) / 1e6,
               "events": int(s["n_events"]), "bottleneck": str(s["bottleneck"].item()), "spills": r.spills,
               "policy": "", "switches": 0, "best_single": "", "gain_vs_best_single": np.nan}
        if r.policy is not None:
            b = r.policy.baselines
            best = b.attrs.get("best_single", "")
            gain = r.policy.replayed_gain() if best else np.nan  # replayed figures only
            row.update(policy=r.policy.name, switches=r.policy.switches, best_single=best, gain_vs_best_single=gain)
        rows.append(row)
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------------ charts


def _specs(trace: Any, first: PresetResult, results: Sequence[PresetResult]) -> list[tuple[str, str, Any]]:
    """(key, heading, Vega-Lite spec dict or the error text) per chart."""
    out = []
    for key, heading, build in chart_list(trace, first, results):
        try:
            chart = build()
            # not validated against the Vega-Lite schema here (0.34 s of the charts' ~0.9 s in a warm report,
            # sampled with py-spy): the views' tests validate every view, and tests/test_report.py every spec of a
            # report
            spec = chart if isinstance(chart, NothingToShow) else chart.to_dict(validate=False)
        except Exception as err:  # one broken chart must not cost the whole report
            warnings.warn(f"report chart {key!r} could not be built: {type(err).__name__}: {err}", ReportWarning,
                          stacklevel=3)
            spec = f"{type(err).__name__}: {err}"
        out.append((key, heading, spec))
    return out


# ------------------------------------------------------------------------------------------------ the page


def _captured(trace: Any) -> list[tuple[str, str]]:
    """The "What was captured" table: (what, value) rows."""
    a = trace.attrs
    rows = [("function", a.get("function", "?")), ("mode", trace.mode),
            ("arguments", describe_arguments(a.get("arg_shapes", "")) or "(none)"),
            ("FLOPs", f"{trace.total_flops():,} ({trace.total_flops() / 1e9:.4g} GFLOP)"),
            ("ops", f"{trace.ops.sizes['op']:,} primitive ops"),
            ("regions", f"{trace.regions.sizes['region']:,} (named scopes and nested jits)"),
            ("captured with", f"dfit_nb {a.get('dfit_nb_version', '?')}, JAX {a.get('jax_version', '?')} "
                              f"on {a.get('backend', '?')}")]
    if a.get("opaque_primitives"):
        rows.append(("opaque primitives", a["opaque_primitives"]))
    return [(k, str(v)) for k, v in rows]


def _policies(results: Sequence[PresetResult]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The policy section: one note per preset, and one table row per (preset, policy) of its baselines."""
    notes, rows = [], []
    for r in results:
        if r.policy is None:
            notes.append({"name": r.name, "note": r.note})
            continue
        b = r.policy.baselines
        notes.append({"name": r.name, "note": "", "policy": r.policy.name, "switches": r.policy.switches,
                      "uses": sorted(set(r.policy.choices["dataflow"].values.tolist())),
                      "best": b.attrs.get("best_single", "?"), "fallback": r.policy.fallback})
        for i, p in enumerate(str(p) for p in b["policy"].values):
            rows.append({"preset": r.name, "first": i == 0, "policy": p,
                         "latency_us": float(b["latency_s"].sel(policy=p)) * 1e6,
                         "energy_mj": float(b["energy_j"].sel(policy=p)) * 1e3,
                         "mj_per_inference": float(b["joules_per_inference"].sel(policy=p)) * 1e3,
                         "energy_gain": float(b["energy_gain"].sel(policy=p)) if p != "hybrid" else None,
                         "latency_gain": float(b["latency_gain"].sel(policy=p)) if p != "hybrid" else None})
    return notes, rows


def _page(trace: Any, results: Sequence[PresetResult], df: pd.DataFrame, specs: Sequence[tuple[str, str, Any]],
          mode: str, files: dict[str, dict[str, str]], inferences: int = REPORTED_STREAM) -> str:
    """The page, rendered from ``templates/report.html.j2``; the featured preset's playbook from its document
    model (:func:`dfit_nb.sim.playbook.document`)."""
    first = featured(results)
    notes, rows = _policies(results)
    interactive = mode == "interactive" and any(isinstance(s, dict) for _, _, s in specs)
    return render(
        "report.html.j2", mark=trusted(HTML_MARK), title=f"dfit_nb report: {trace.attrs.get('function', '?')}",
        trace_mode=trace.mode, presets=[r.name for r in results],
        when=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        captured=_captured(trace), region_table=trace.region_table(max_depth=3),
        summary=df.to_dict("records"), inferences=inferences, files=files,
        file_kinds=list(next(iter(files.values()), {})),
        objective=next((r.policy.objective for r in results if r.policy is not None), "energy"),
        policies=notes, policy_rows=rows, featured=first.name, featured_dataflow=str(first.run.attrs["dataflow"]),
        mode=mode, max_rows=views.MAX_ROWS, charts=page_charts(specs, mode),
        playbook=playbook_document(first.policy) if first.policy is not None else None, playbook_note=first.note,
        bundle=trusted(bundle()) if interactive else None) + "\n"


# ------------------------------------------------------------------------------------------------ the API


def _write_files(folder: Path, stem: str, r: PresetResult) -> dict[str, Path]:
    """One machine's files in ``folder``: its event cube (netCDF), Perfetto trace and, with a policy, its playbook
    (Markdown and HTML); what each is -> its path."""
    names = stem_files(stem)
    out = {"event cube": r.run.save(inside(folder, names["event cube"])),
           "Perfetto": r.run.to_perfetto(inside(folder, names["Perfetto"]))}
    if r.policy is not None:
        # the Markdown carries dfit_nb's mark (a Markdown comment, hidden when rendered) so that a later report may
        # replace it; the HTML playbook has its generator meta already
        out["playbook"] = _write_text(inside(folder, names["playbook"]),
                                      f"{MARKDOWN_MARK}\n\n{r.policy.report('markdown')}")
        out["playbook (HTML)"] = _write_text(inside(folder, names["playbook (HTML)"]), r.policy.report("html"))
    return out


def _write_text(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary of a name unique to this call, renamed in once complete: a
    reader never sees half a file, and two writers (threads or processes) never share a temporary."""
    # 0o644: a temporary's 0o600 would hide the report from the other users who can read the folder
    with atomic_file(path, "w", permissions=0o644) as f:
        f.write(text)
    return path


def write_report(trace: Any, hw: Any = None, out_dir: str | os.PathLike[str] = "dfit_report", *,
                 dataflow: Any = "ws", objective: str = "energy", charts: str = "auto", progress: bool = True,
                 results: Sequence[PresetResult] | None = None, seed: int | None = None,
                 tags: dict[str, Any] | None = None, batch_variance: dict[str, Any] | None = None,
                 fusion: str | None = None, inferences: int = REPORTED_STREAM) -> Report:
    """Replay ``trace`` on hardware presets, select a hybrid policy per preset, and write an offline report.

    Parameters
    ----------
    trace : Trace
        From :func:`dfit_nb.capture`.
    hw : str, Hardware, or a sequence of them, optional
        Preset names (:func:`dfit_nb.sim.presets.names`) or machines; default every preset. The charts are
        drawn for the first with more than one tile (:func:`featured`), else the first.
    out_dir : str or path-like
        Folder to write into (created if missing). Files of the names the report writes are replaced only if
        dfit_nb wrote them (a previous report); any other file of those names is refused before any work.
    dataflow : {"ws", "os", "is", "hybrid"} or Policy
        The dataflow of the replays in the summary table, the event cubes and the Perfetto traces.
    objective : {"energy", "latency", "edp"}
        What the hybrid policy minimises.
    charts : {"auto", "interactive", "svg"}
        ``"interactive"``: Vega/Vega-Lite/vega-embed inlined once, specs drawn in the browser; ``"svg"``:
        static SVG rendered by vl-convert; ``"auto"``: interactive when the bundle can be built, else SVG.
    progress : bool
        A ``tqdm.auto`` progress bar over the presets.
    results : sequence of PresetResult, optional
        Replays and policies already computed by :func:`analyse` (the CLI prints its tables from them).
    inferences : int
        Inferences streamed back to back for the summary's throughput and steady-state utilisation columns
        (the other figures are one inference's).
    seed, tags, batch_variance : optional
        Passed to :func:`analyse` (the playbooks' workload seed, extra tags, and p50/p95/p99 under batch
        variance) when ``results`` is not given.

    Returns
    -------
    Report
        The paths written (``report.html``, ``<preset>.nc``, ``<preset>.perfetto.json``,
        ``playbook_<preset>.md`` / ``.html``), the results, the summary table and the page's size. A file
        name takes the machine's name through :func:`file_stem` (letters, digits, ``.``, ``_``, ``-``; made
        unique), so every file lands inside ``out_dir`` whatever the name.

    Raises
    ------
    ReportError
        An unknown preset, chart mode or objective.
    SaveRefusedError
        ``out_dir`` is the root of the file system, the home directory or a folder above it, or holds a file of a
        name the report writes that dfit_nb did not write, or a folder or other non-file there
        (:func:`check_report_folder`, the CLI's checks of ``-o``); raised before any replay, nothing is written.

    Examples
    --------
    >>> import tempfile, dfit_nb
    >>> from dfit_nb.report import write_report
    >>> fn, args = dfit_nb.examples.get("mlp").build()
    >>> trace = dfit_nb.capture(fn, *args)
    >>> rep = write_report(trace, ["npu_like"], tempfile.mkdtemp(), progress=False)
    >>> sorted(p.name for p in rep.directory.iterdir())
    ['npu_like.nc', 'npu_like.perfetto.json', 'playbook_npu_like.html', 'playbook_npu_like.md', 'report.html']
    >>> rep.summary.loc[0, ["preset", "dataflow"]].tolist()
    ['npu_like', 'ws']
    >>> dfit_nb.load_run(rep.runs["npu_like"]).attrs["hardware"]
    'npu_like'
    >>> "<script type='module'>" in rep.html.read_text() and rep.html_bytes < 5_000_000
    True
    """
    if charts not in ("auto", "interactive", "svg"):
        raise ReportError(f"unknown charts mode {charts!r}; valid: auto, interactive, svg")
    if objective not in OBJECTIVES:
        raise ReportError(f"unknown objective {objective!r}; valid: energy, latency, edp")
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    folder = Path(out_dir)
    machines = _machines(hw) if results is None else []
    # file names come from machine names, which are a user's strings: sanitised and made unique first
    stems = file_stems([h.name for h in machines] if results is None else [r.name for r in results])
    check_report_folder(out_dir, list(stems.values()))  # before any work: never replace what the user wrote
    files: dict[str, dict[str, Any]] = {}
    # Each machine's files (event cube, Perfetto trace, playbooks) are written on a second thread as soon as its
    # result is ready, while the next machine replays and the charts are drawn here: netCDF's writes and the
    # replays' compiled programs release the GIL, so on two cores the two overlap. One writer thread: the netCDF
    # library is never entered from two threads at once.
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="dfit-nb-files") as writer:
        pending: dict[str, concurrent.futures.Future[dict[str, Any]]] = {}

        def write(r: PresetResult) -> None:
            if not pending:
                folder.mkdir(parents=True, exist_ok=True)
            pending[r.name] = writer.submit(_write_files, folder, stems[r.name], r)

        if results is None:
            results = analyse(trace, machines, dataflow, objective, progress, seed=seed, tags=tags,
                              batch_variance=batch_variance, on_result=write, fusion=fusion)
        else:
            for r in results:
                write(r)
        results = list(results)
        if not results:
            raise ReportError("no preset results to report")
        seconds["replay"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        mode = "svg" if charts == "svg" else "interactive" if charts == "interactive" or bundle_available() else "svg"
        if mode == "interactive" and not bundle_available():
            raise ReportError("interactive charts need vl_convert.javascript_bundle (vl-convert-python >= 1.2); "
                              "use charts='svg'")
        specs = _specs(trace, featured(results), results)
        seconds["charts"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        files = {name: future.result() for name, future in pending.items()}
        seconds["files"] = time.perf_counter() - t0  # what the files took past the replays and the charts
    runs = {name: f["event cube"] for name, f in files.items()}
    perfetto = {name: f["Perfetto"] for name, f in files.items()}
    playbooks = {name: f["playbook"] for name, f in files.items() if "playbook" in f}
    playbooks_html = {name: f["playbook (HTML)"] for name, f in files.items() if "playbook (HTML)" in f}
    names = {name: {k: p.name for k, p in f.items()} for name, f in files.items()}

    t0 = time.perf_counter()
    df = summary_frame(results, inferences)
    page = _page(trace, results, df, specs, mode, names, inferences)
    path = _write_text(folder / "report.html", page)
    seconds["html"] = time.perf_counter() - t0
    return Report(directory=folder, html=path, runs=runs, perfetto=perfetto, playbooks=playbooks,
                  playbooks_html=playbooks_html, results=results, summary=df, charts=mode,
                  html_bytes=path.stat().st_size, seconds=seconds)
