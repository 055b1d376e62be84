"""The report's folder: the names of the files it writes (:func:`report_file_names`, from each machine's file
stem) and the checks made before any work (:func:`check_report_folder`), shared by
:func:`dfit_nb.report.write_report` and the CLI's ``-o``. Importable from :mod:`dfit_nb.report`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from ._files import foreign_file, refuse_shared_folder
from ._report_results import ReportError
from .errors import SaveRefusedError


def file_stem(name: str) -> str:
    """A file name stem from a machine's name (a user's string): letters, digits, ``.``, ``_`` and ``-`` only, no
    leading or trailing dot, so no name (``../x``, ``/etc/passwd``, ``..``) can point outside the report's folder.

    >>> file_stem("npu_like"), file_stem("../x"), file_stem("a/b c"), file_stem("..")
    ('npu_like', 'x', 'a_b_c', 'hardware')
    """
    stem = re.sub(r"[^\w.-]+", "_", str(name), flags=re.ASCII).strip("._")
    return stem[:100] or "hardware"


def file_stems(names: Sequence[str]) -> dict[str, str]:
    """Machine name -> its file stem, unique (case-insensitively: macOS and Windows file systems fold case)."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for name in names:
        stem, k = file_stem(name), 2
        base = stem
        while stem.lower() in taken:
            stem, k = f"{base}-{k}", k + 1
        taken.add(stem.lower())
        out[name] = stem
    return out


def stem_files(stem: str) -> dict[str, str]:
    """What the report writes for one machine of file stem ``stem`` -> the file's name (the one list the writer
    and the CLI's check of its ``-o`` folder share)."""
    return {"event cube": f"{stem}.nc", "Perfetto": f"{stem}.perfetto.json", "playbook": f"playbook_{stem}.md",
            "playbook (HTML)": f"playbook_{stem}.html"}


def report_file_names(names: Sequence[str]) -> list[str]:
    """Every file name :func:`write_report` may write into its folder for the machines ``names``: ``report.html``
    and each machine's event cube, Perfetto trace and playbooks.

    >>> report_file_names(["npu_like"])
    ['report.html', 'npu_like.nc', 'npu_like.perfetto.json', 'playbook_npu_like.md', 'playbook_npu_like.html']
    """
    return ["report.html", *(name for stem in file_stems(names).values() for name in stem_files(stem).values())]


def foreign_report_files(folder: Path, names: Sequence[str]) -> list[Path]:
    """The files of ``names`` in ``folder`` that dfit_nb did not write, or that are not files
    (:func:`dfit_nb._files.foreign_file`): what a report must not replace. One check for :func:`write_report` and
    the CLI's ``-o`` folder."""
    return [folder / name for name in names if foreign_file(folder / name)]


def check_report_folder(folder: str | os.PathLike[str], stems: Sequence[str]) -> None:
    """Refuse, before any work, a report folder that is the root of the file system, the home directory or a folder
    above it (:func:`dfit_nb._files.refuse_shared_folder`, for root too), or that holds a file of a name the report
    writes for the machines of file stems ``stems`` (``report.html`` and each machine's files) that dfit_nb did not
    write, or anything that is not a file there (:func:`dfit_nb._files.foreign_file`): the same checks the CLI
    makes of its ``-o`` folder. A previous report's files carry dfit_nb's mark and are replaced.

    Raises
    ------
    SaveRefusedError
        Naming ``folder`` as given (``out_dir '...'``) and what it is, or every file in the way and how to
        proceed; nothing is written.
    """
    refuse_shared_folder(folder, f"out_dir {os.fspath(folder)!r}")
    folder = Path(folder)
    if not folder.is_dir():
        return
    names = ["report.html", *(name for stem in stems for name in stem_files(stem).values())]
    foreign = foreign_report_files(folder, names)
    if foreign:
        listed = ", ".join(str(p) for p in foreign)
        raise SaveRefusedError(f"refusing to write the report into {folder}: it holds {len(foreign)} file(s) that "
                               f"dfit_nb did not write (no dfit_nb mark in them) where the report writes its own: "
                               f"{listed}; move or delete them, or give another out_dir (a previous report's "
                               "files are replaced)")


def inside(folder: Path, name: str) -> Path:
    """``folder / name``, refused if it would resolve outside ``folder`` (file_stem makes that impossible; this
    keeps it so if the stem rules ever change)."""
    path = folder / name
    if path.resolve().parent != folder.resolve():
        raise ReportError(f"refusing to write {name!r}: it would land outside the report folder {folder}")
    return path
