"""Which paths a save may replace and a load may open: the checks made before any file is written or opened.

A save replaces only what dfit_nb wrote (:func:`check_target`, :func:`written_by_dfit`, :func:`foreign_file`) and
never a special folder (the root, the home or working directory: :func:`root_or_home`,
:func:`refuse_shared_folder`); saves and loads take local paths only (:func:`local_path`) and never open a FIFO,
socket or device (:func:`special_file`, :func:`special_inside`). The writing and reading themselves are
:mod:`dfit_nb._files`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
import urllib.parse
from pathlib import Path

from ._format import read_markers
from .errors import LoadRefusedError, SaveError, SaveRefusedError


def local_path(path: str | bytes | os.PathLike[str] | os.PathLike[bytes], saving: bool) -> Path:
    """``path`` as a local :class:`~pathlib.Path`: a path as given (bytes decoded by :func:`os.fsdecode`), a
    ``file://`` URL (of no host, or ``localhost``) as its path; any other URL (``s3://bucket/run.zarr``) is
    refused, naming it as given, and so are an empty path and what is not a path (``None``, a number):
    :class:`SaveRefusedError` when ``saving``, else :class:`LoadRefusedError`.

    ``Path`` would have made ``s3://bucket/run.zarr`` the local ``s3:/bucket/run.zarr``, and the save failed
    naming a folder ``s3:`` the user never gave. Saves and loads of traces, runs and calibrations are local
    only: a save replaces atomically by renaming, which object stores cannot do (a sweep's ``to_zarr`` writes
    URLs, in place).

    >>> local_path("run.nc", saving=True), local_path("file:///tmp/a%20b.nc", saving=False)
    (PosixPath('run.nc'), PosixPath('/tmp/a b.nc'))
    """
    refused = SaveRefusedError if saving else LoadRefusedError
    verb, fix = (("save to", "save to a local path, then copy the file") if saving else
                 ("load", "copy it to a local path, then load that"))
    if not isinstance(path, (str, bytes, os.PathLike)):  # else os.fspath's bare TypeError, naming no argument
        raise refused(f"refusing to {verb} {path!r:.80}: the path must be a str or an os.PathLike (such as "
                      f"'run.nc' or pathlib.Path('run.nc')), got {type(path).__name__}")
    # bytes (b'/tmp/x.nc', or a PathLike giving them) are decoded as the OS does: the checks below test str
    raw = os.fsdecode(os.fspath(path))
    if raw == "":  # Path("") is '.': the error named the working directory, which the user never gave
        raise refused(f"refusing to {verb} an empty path ''; give a file name such as 'run.nc'")
    if "://" not in raw:
        return Path(raw)
    parts = urllib.parse.urlsplit(raw)
    if parts.scheme == "file" and parts.netloc in ("", "localhost"):
        return Path(urllib.parse.unquote(parts.path))
    raise refused(f"refusing to {verb} {raw!r}: it is a URL, and dfit_nb saves and loads traces, runs and "
                  f"calibrations on a local file system only (a save replaces by renaming, which object stores "
                  f"cannot do atomically); {fix}")


def check_target(path: Path, zarr: bool) -> None:
    """Refuse a path whose replacement could destroy what dfit_nb did not write; nothing is written."""
    valid = (f"give a new path (such as {path / 'result.nc'} to save inside it) or the path of a previous "
             "dfit_nb save")
    special = special_directory(path)
    if special:
        raise SaveRefusedError(f"refusing to save to {str(path)!r}: it is {special}, which dfit_nb never "
                               f"replaces; {valid}")
    parent = path.parent
    if not parent.is_dir():
        # named here: otherwise the error names the temporary file inside the missing directory
        existing = parent
        while not os.path.lexists(existing) and existing.parent != existing:
            existing = existing.parent
        if existing.is_dir():
            failed = SaveError(f"cannot save to {path}: the directory {parent} does not exist; create it first, or "
                               "give a path in a folder that exists")
            failed.errno = errno.ENOENT
        else:  # a file where a folder of the path should be: name it, not the missing folder below it
            failed = SaveError(f"cannot save to {path}: {existing} is not a directory (it is a file), so nothing can "
                               "be saved under it; give a path in a folder that exists")
            failed.errno = errno.ENOTDIR
        raise failed
    if not os.path.lexists(path):
        return
    special = special_file(path)
    if special:  # the same check a load makes: never opened, so a FIFO cannot block the save
        raise SaveRefusedError(f"refusing to replace {path}: it is {special}, not a file dfit_nb wrote; give a new "
                               "path or the path of a previous dfit_nb save")
    kind = "directory" if path.is_dir() else "file" if path.is_file() else "broken link"
    if read_markers(path) is None:
        hint = valid if kind == "directory" else "give a new path or the path of a previous dfit_nb save"
        raise SaveRefusedError(f"refusing to replace {path}: it is a {kind} that dfit_nb did not write (no dfit_nb "
                               f"marker in it); {hint}")
    if zarr != path.is_dir():
        have, want = ("a Zarr store", "a netCDF file") if path.is_dir() else ("a netCDF file", "a Zarr store")
        raise SaveRefusedError(f"refusing to replace {path}: it is {have} dfit_nb wrote, but this path saves "
                               f"{want} (a .zarr suffix saves Zarr); give a new path, or remove {path} first")


def special_directory(path: Path) -> str:
    """What makes ``path`` a directory no save may replace ("" when nothing does)."""
    if path.name in ("", ".", ".."):
        return "the current or a parent directory"
    resolved = path.resolve()
    shared = root_or_home(resolved)
    if shared and shared != _ABOVE_HOME:
        return shared
    cwd = Path.cwd().resolve()
    if resolved == cwd or resolved in cwd.parents:
        return "the working directory or one of its parents"
    return shared


_ABOVE_HOME = "a folder above the home directory"


def root_or_home(path: str | os.PathLike[str]) -> str:
    """What makes ``path`` a folder no dfit_nb output goes into, whoever runs it (root included): "the root of the
    file system", "the home directory" or "a folder above the home directory"; "" for any other path.

    Checked for saves and for the CLI's ``-o`` folder: a report there would scatter its files among the user's
    own, and root may write anywhere, so permissions would not stop it.
    """
    resolved = Path(path).resolve()
    if resolved == Path(resolved.anchor):
        return "the root of the file system"
    with contextlib.suppress(RuntimeError, KeyError):  # no home directory known
        home = Path.home().resolve()
        if resolved == home:
            return "the home directory"
        if resolved in home.parents:
            return _ABOVE_HOME
    return ""


def refuse_shared_folder(folder: str | os.PathLike[str], label: str) -> None:
    """Refuse ``folder`` as a report folder when it is the root of the file system, the home directory or a folder
    above it (:func:`root_or_home`), for every user, root included: the one check of the CLI's ``-o`` folder and
    of :func:`dfit_nb.report.write_report`'s ``out_dir``.

    Raises :class:`SaveRefusedError` ``"<label> is <what>; give the report a folder of its own, e.g. ..."``, where
    ``label`` names the input as the user gave it (``"-o '/'"``, ``"out_dir '/'"``); also for a URL
    (``s3://bucket/out`` made a local folder ``s3:`` and the report went there), an empty name (the report
    went into the working directory; ``'.'`` says so on purpose) and a leading ``~`` (``'~/dfit'`` made a folder
    named ``~`` in the working directory: only a shell expands it).
    """
    if os.fspath(folder) == "":  # Path("") is the working directory: the report went there unasked
        raise SaveRefusedError(f"{label} is empty; give the report a folder of its own, e.g. dfit_report (created "
                               "if missing), or '.' to write it into the working directory")
    first = Path(os.fspath(folder)).parts[:1]
    if first and first[0].startswith("~"):  # Python expands no '~': it would be a folder of that name, here
        raise SaveRefusedError(f"{label} starts with {first[0]!r}, which is not expanded here: the report would go "
                               f"into a folder named {first[0]!r} in {Path.cwd()}; write the path out, e.g. "
                               f"{os.path.expanduser(os.fspath(folder))}")
    if "://" in os.fspath(folder):
        raise SaveRefusedError(f"{label} is a URL; the report is written to a folder on a local file system: give "
                               "a folder path (copy the folder anywhere afterwards)")
    shared = root_or_home(folder)
    if shared:  # permissions do not stop root, and a report there would mix its files with the user's own
        raise SaveRefusedError(f"{label} is {shared}; give the report a folder of its own, e.g. "
                               f"{Path(folder) / 'dfit_report'} (created if missing)")

#: the marks dfit_nb writes into the first bytes of its text files (a report page, a playbook): a file with one is
#: dfit_nb's to replace, as a netCDF file or Zarr store with :data:`FORMAT_ATTR` is
HTML_MARK = "<meta name='generator' content='dfit_nb'>"
#: (the Markdown one is a link reference definition, the usual Markdown comment: never rendered, and no raw HTML
#: in a playbook whose every other "<" is escaped)
MARKDOWN_MARK = "[//]: # (generator: dfit_nb)"
#: the same files as dfit_nb wrote them before the marks: the report page's and the playbook's first bytes
_LEGACY_TEXT = (
    re.compile(r"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>dfit_nb report: "),
    re.compile(r"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Dataflow policy playbook: [^<]*</title>"
               r"<style>body\{font-family:system-ui,sans-serif;max-width:60em;margin:2em auto;line-height:1\.45\}"),
    re.compile(r"# Dataflow policy playbook: [^\n]*\n\nObjective: "),
)
#: how much of a text file's head holds its mark; how much of a Perfetto trace's tail holds its ``otherData``
_HEAD_BYTES, _TAIL_BYTES = 4096, 2**20


def written_by_dfit(path: str | os.PathLike[str]) -> bool:
    """Whether the file or Zarr store at ``path`` is one dfit_nb wrote, and so one it may replace.

    A netCDF file or Zarr store: its root marker attribute (:data:`FORMAT_ATTR` and older). A report page or
    playbook: :data:`HTML_MARK` or :data:`MARKDOWN_MARK` in its first 4 KiB (or the first bytes dfit_nb wrote before
    the marks). A Perfetto trace (``.json``): dfit_nb's ``{"traceEvents":[`` opening and a ``dfit_nb_version`` in
    the ``otherData`` at its end. Anything else, a FIFO or device (never opened), or a file that cannot be read:
    False. Reads at most 4 KiB and 1 MiB of the file.
    """
    path = Path(path)
    if path.is_dir():
        return read_markers(path) is not None
    if not path.is_file():  # a FIFO or a device: opening it could block or consume it
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(_HEAD_BYTES)
            if head.startswith(b"\x89HDF"):
                return read_markers(path) is not None
            if head.startswith(b'{"traceEvents":['):
                f.seek(max(0, os.fstat(f.fileno()).st_size - _TAIL_BYTES))
                return _perfetto_is_ours(f.read())
    except OSError:
        return False
    text = head.decode("utf-8", "replace")
    return HTML_MARK in text or MARKDOWN_MARK in text or any(p.match(text) for p in _LEGACY_TEXT)


def foreign_file(path: str | os.PathLike[str]) -> bool:
    """Whether something is at ``path`` that a write of a file there (a report page, a playbook, a Perfetto trace)
    would destroy: anything but a file :func:`written_by_dfit` recognises (a user's file, a folder, a link to
    nothing, a FIFO). The one test of :func:`dfit_nb.report.check_report_folder`, the CLI's ``-o`` check and
    :func:`dfit_nb.events.perfetto.to_perfetto`."""
    path = Path(path)
    return os.path.lexists(path) and (not path.is_file() or not written_by_dfit(path))


def _perfetto_is_ours(tail: bytes) -> bool:
    """Whether a Perfetto trace's last bytes end with an ``otherData`` that names dfit_nb's version (written last
    by :func:`dfit_nb.events.perfetto.to_perfetto`)."""
    at = tail.rfind(b'"otherData":')
    if at < 0:
        return False
    rest = tail[at + len(b'"otherData":'):].rstrip()
    if not rest.endswith(b"}"):
        return False
    try:
        other = json.loads(rest[:-1])  # without the closing brace of the whole object
    except ValueError:
        return False
    return isinstance(other, dict) and "dfit_nb_version" in other


def special_file(path: str | os.PathLike[str]) -> str:
    """What ``path`` is when it is neither a regular file nor a folder: "a FIFO (named pipe)", "a socket", "a
    character device" or "a block device" (through links); "" otherwise, and when nothing is there.

    Saves and loads refuse these before opening them (:func:`save_tree`, :func:`open_tree`): opening a FIFO
    blocks until another program opens it, uninterruptibly, and reading a device or socket consumes its data.
    Only ``stat`` is called.
    """
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # nothing there, a broken link, a NUL in the name
        return ""
    for test, kind in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return ""


#: the files at the root of a Zarr store (format 3; format 2's group, attributes and array metadata)
ZARR_ROOT_FILES = ("zarr.json", ".zgroup", ".zattrs", ".zarray")


def special_inside(folder: str | os.PathLike[str]) -> tuple[Path, str] | None:
    """The first entry under ``folder``, a Zarr store, through links, that :func:`special_file` names, and what
    it is; None when every entry is a regular file or a folder, or when ``folder`` is not a Zarr store (no
    :data:`ZARR_ROOT_FILES` there: zarr opens nothing in it, and a folder such as ``/`` is never walked).

    Loads check a store with it before opening any file of it: zarr reads a chunk or a metadata file that is a
    FIFO by opening it, which blocks as opening the store's own path would. Only ``scandir`` and, for what is
    neither a file nor a folder, ``stat`` are called: 9 ms for the 1,000 entries of the large run's store
    (``benchmarks/bench_large_run.py``), 0.2% of its load.
    """
    root = Path(folder)
    if not any(os.path.lexists(root / name) for name in ZARR_ROOT_FILES):
        return None
    pending, seen = [root], set()
    while pending:
        current = pending.pop()
        try:
            key = os.stat(current)
            if (key.st_dev, key.st_ino) in seen:  # a link back up the tree: already walked
                continue
            seen.add((key.st_dev, key.st_ino))
            entries = list(os.scandir(current))
        except OSError:  # gone, or unreadable: the load that follows reports it
            continue
        for entry in entries:
            try:
                if entry.is_dir():  # through links, as zarr follows them
                    pending.append(Path(entry.path))
                    continue
                if entry.is_file():
                    continue
            except OSError:
                continue
            kind = special_file(entry.path)
            if kind:
                return Path(entry.path), kind
    return None
