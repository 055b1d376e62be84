"""What :func:`dfit_nb.report.write_report` and :func:`~dfit_nb.report.analyse` give back, as plain data: each
preset's replay and policy (:class:`PresetResult`), what was written (:class:`Report`), and the error and
warning a report raises. Importable from :mod:`dfit_nb.report`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pandas as pd

from .errors import DfitError, DfitWarning
from .sim.hardware import Hardware
from .sim.machine import DATAFLOWS

SINGLE_STYLES = DATAFLOWS  # the single styles, defined once in sim.machine


class ReportError(DfitError, ValueError):
    """A report cannot be written with these arguments (unknown preset, chart mode, objective...)."""


class ReportWarning(DfitWarning):
    """A part of the report (one chart, one preset's policy) could not be built; the rest was written."""


@dataclasses.dataclass
class PresetResult:
    """One preset's replay and hybrid policy.

    Attributes
    ----------
    name : str
    hw : Hardware
    run : Run
        The replay under the requested dataflow.
    policy : Policy or None
        The evaluated hybrid policy (``None`` when selection failed, e.g. a trace without GEMMs).
    spills : bool
        Some op re-read data through DRAM, or some kernel ran unfused, because the data exceed the SRAM (a
        :class:`~dfit_nb.sim.SpillWarning` was caught).
    seconds : float
        Wall time of the replay and the selection.
    note : str
        Why ``policy`` is missing, if it is.
    """

    name: str
    hw: Hardware
    run: Any
    policy: Any
    spills: bool
    seconds: float
    note: str = ""


@dataclasses.dataclass
class Report:
    """What :func:`write_report` wrote.

    Attributes
    ----------
    directory, html : pathlib.Path
        The output folder and its ``report.html``.
    runs, perfetto, playbooks, playbooks_html : dict of str to pathlib.Path
        Per preset: the event cube (netCDF), the Perfetto JSON, the playbook (Markdown, HTML).
    results : list of PresetResult
        The replays and policies behind the page.
    summary : pandas.DataFrame
        One row per preset (the page's summary table, in numbers).
    charts : {"interactive", "svg"}
        How the charts were embedded.
    html_bytes : int
        Size of ``report.html``.
    seconds : dict of str to float
        Wall time of the stages: ``"replay"`` (replays and policies), ``"charts"``, ``"files"`` (the wait for
        the files past those two: each machine's files are written on a second thread from when its replays are
        done), ``"html"``.
    """

    directory: Path
    html: Path
    runs: dict[str, Path]
    perfetto: dict[str, Path]
    playbooks: dict[str, Path]
    playbooks_html: dict[str, Path]
    results: list[PresetResult] = dataclasses.field(repr=False)
    summary: pd.DataFrame = dataclasses.field(repr=False)
    charts: str = "interactive"
    html_bytes: int = 0
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)

    def files(self) -> list[Path]:
        """Every file written, the page first."""
        return [self.html, *self.runs.values(), *self.perfetto.values(), *self.playbooks.values(),
                *self.playbooks_html.values()]

    def __repr__(self) -> str:
        return (f"<dfit_nb.report.Report {self.html} ({self.html_bytes / 1e6:.2f} MB, {self.charts} charts), "
                f"{len(self.results)} preset(s), {len(self.files())} files>")
