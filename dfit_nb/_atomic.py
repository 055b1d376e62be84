"""Write a file so that no reader ever sees half of it: a temporary beside it, renamed onto it when complete.

Used for the files dfit_nb writes whole (a report's pages, a Perfetto trace, an exported program, a compilation
cache entry). Saved results (:mod:`dfit_nb._files`) go through their own save, which also swaps Zarr folders and
recovers from a killed process.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from .errors import DfitError, SaveError

__all__ = ["atomic_file"]


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], mode: str = "wb", *, permissions: int | None = None,
                prefix: str | None = None) -> Iterator[IO[Any]]:
    """A file open for writing whose contents replace ``path`` when the block completes, and nothing otherwise.

    The file is a hidden temporary in ``path``'s folder (``prefix``, default ``.<name>.``, then a part unique to
    this call, then ``.tmp``), so two writers, threads or processes, never share one; a block that raises removes
    it. ``mode`` is ``"wb"`` or ``"w"`` (UTF-8 text). ``permissions``: the file's mode bits before the rename
    (a temporary is created ``0o600``). A write that fails (a missing folder, no permission, a full disk)
    raises :class:`~dfit_nb.errors.SaveError` (an ``OSError`` with the cause's ``errno``) naming ``path`` and
    what to do, not the temporary.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> with atomic_file(folder / "a.txt", "w") as f:
    ...     _ = f.write("whole")
    >>> (folder / "a.txt").read_text(), sorted(p.name for p in folder.iterdir())
    ('whole', ['a.txt'])
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=prefix if prefix is not None else f".{path.name}.", suffix=".tmp",
                                   dir=folder)
    except OSError as err:
        raise _failed(path, folder, err) from err
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as file:
            yield file
        if permissions is not None:
            os.chmod(tmp, permissions)
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError) and not isinstance(err, DfitError):
            raise _failed(path, folder, err) from err
        raise


def _failed(path: Path, folder: Path, err: OSError) -> OSError:
    """The error of a failed write of ``path``, naming it rather than the hidden temporary the OS named
    (``.report.html.x1y2.tmp``), with the cause and what to do: a :class:`~dfit_nb.errors.SaveError`, an
    ``OSError`` with the cause's ``errno``, so callers that catch ``OSError`` (a cache that can do without the
    file) still do."""
    from ._files import os_reason, what_to_do  # on failure only: this module is imported before xarray is

    advice = (f"the folder {folder} does not exist; create it first, or give a path in a folder that exists"
              if err.errno == errno.ENOENT else what_to_do(err, folder))
    failed = SaveError(f"could not write {path}: {os_reason(err)} (nothing was written there); {advice}")
    failed.errno = err.errno
    return failed
