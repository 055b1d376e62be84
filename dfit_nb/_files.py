"""Results on disk: an ``xarray.DataTree`` written atomically as netCDF4 (netCDF-C) or Zarr, read back checked.

Shared by :class:`dfit_nb.Trace` and :class:`dfit_nb.Run`; no pickle, no code runs on load.

What a save promises (``docs/architecture.md``, "What save promises"):

- It replaces only a file or Zarr store that dfit_nb wrote, recognised by a root attribute (:data:`FORMAT_ATTR`,
  or ``dfit_nb_version`` / ``dfit_calibration`` in files from before the format version); anything else at the
  path, and ``.``, ``..``, ``/``, the home and working directories, are refused with :class:`SaveRefusedError`.
- It is atomic: the new result is written beside the path (``<name>.dfit-tmp-<pid>-<n>``, ``n`` counting this
  process's saves, so no two calls share a name) and renamed in once complete. A Zarr store (a directory, which
  cannot be renamed over) is swapped in three renames: the old store aside (``<name>.dfit-old-<pid>-<n>``), the
  new one in, then the old one deleted. A process killed at any moment leaves either a loadable result at the
  path or the old store aside, which the next load or save restores.
- Threads: saves and loads of one path are serialised in the process (a lock per path), so the last save wins
  whole and a load never sees a swap half done; every netCDF/HDF5 call holds one process-wide lock
  (:data:`HDF5_LOCK`), since the netCDF-C and HDF5 libraries are not thread-safe.
- Leftovers of a killed save (temporaries and asides whose process is gone) are removed by the next save to
  the same path. A failed write (a full disk) removes its temporary, leaves the old result unchanged and raises
  :class:`SaveError` naming the path.
- Every save records :data:`FORMAT_VERSION`; a load refuses a newer major format with
  :class:`FormatVersionError` and loads files without a version (older dfit_nb) as before.
- Integrity: every variable is saved with a CRC32 of its values (:data:`CHECKSUM_ATTR`), and every attribute of
  every group with a CRC32 of its value (:data:`ATTRS_CHECKSUM_ATTR`), checked on load; a changed value (a
  flipped byte, a deleted Zarr chunk read back as fill values, an edited attribute) is refused with
  :class:`IntegrityError` naming the file and the variable or attribute. Files saved before the checksums load
  unchecked (format 1.0 files: their attributes).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import re
import shutil
import stat
import sys
import threading
import time
import urllib.parse
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from ._version import __version__
from .errors import DfitError, FormatVersionError, IntegrityError, LoadRefusedError, SaveError, SaveRefusedError

#: the format of the files this version writes, ``"MAJOR.MINOR"``: a new minor only adds what older readers
#: ignore; a new major is refused by older readers
FORMAT_VERSION = "1.1"  # 1.1: the attributes' checksums (:data:`ATTRS_CHECKSUM_ATTR`)
#: the root attribute holding :data:`FORMAT_VERSION`; also the marker of a file or store dfit_nb wrote
FORMAT_ATTR = "dfit_nb_format"
#: the newest major format this version reads
READS_MAJOR = 1
#: root attributes that mark a file as dfit_nb's: the format, and what traces, runs and calibrations carried
#: before it (so their files can be replaced by a newer save too)
_MARKERS = (FORMAT_ATTR, "dfit_nb_version", "dfit_calibration")

#: the attribute of every saved variable holding the checksum of its values (:func:`checksum`), and the root
#: attribute naming the checksum kind, which says that every variable of the file has one (both removed on load)
CHECKSUM_ATTR = "dfit_checksum"
_CHECKSUM_KIND = "crc32"
#: the root attribute holding the checksum of every attribute of every group (:func:`attrs_checksums`), as JSON:
#: ``{"<group path>": {"<attribute>": "crc32:<8 hex digits>"}}``; required from format 1.1 on
ATTRS_CHECKSUM_ATTR = "dfit_attrs_checksum"
#: root attributes of the file rather than of the result, checked on their own (the format, the checksum kind)
#: and so not covered by :data:`ATTRS_CHECKSUM_ATTR`: a newer minor format may be written into them
_FILE_ATTRS = frozenset((FORMAT_ATTR, CHECKSUM_ATTR, ATTRS_CHECKSUM_ATTR))

#: Test hook (for crash-safety tests only): ``DFIT_NB_SAVE_TEST_HOOK=<point>`` stops a save at ``point``: it
#: prints ``dfit_nb save hook: <point>`` to stderr and sleeps (up to 120 s), so a test can kill the process
#: there; ``<point>:exit`` ends the process at once with ``os._exit(75)``. Points, in order: ``partial``
#: (netCDF: half the temporary written), ``written`` (the temporary complete, nothing replaced), ``aside``
#: (Zarr: the old store moved aside, the new one not yet in), ``replaced`` (Zarr: the new store in, the old one
#: aside not yet deleted).
HOOK_ENV = "DFIT_NB_SAVE_TEST_HOOK"
#: xarray's engine for ``.nc`` files. The netCDF4 library (netCDF-C) rather than h5netcdf: on a replayed run's
#: ~150 variables it writes 4x and reads 6x faster (``python benchmarks/bench_saves.py``); the files are the same
#: netCDF4/HDF5 format, so files h5netcdf wrote (dfit_nb before 2026-12) load unchanged.
NETCDF_ENGINE = "netcdf4"
_TMP, _OLD = "dfit-tmp", "dfit-old"
#: Held around every call into the netCDF-C or HDF5 libraries (xarray's netCDF4 engine, h5py), from any thread.
#: Neither library is thread-safe as built in the wheels: two threads saving or loading netCDF files, even
#: different ones, crashed the process (SIGSEGV or SIGABRT inside netCDF-C; plain xarray does the same). h5py
#: serialises its own calls but not against netCDF4's, which share the one HDF5 library, so it is held for h5py's
#: reads too. Re-entrant: a load reads the markers (h5py) and then the file (netCDF4) under one hold.
HDF5_LOCK = threading.RLock()
#: per path (its resolved folder and its name): the lock its saves and loads hold, and how many calls want it
_PATH_LOCKS: dict[str, tuple[threading.Lock, int]] = {}
_PATH_LOCKS_GUARD = threading.Lock()
#: numbers this process's temporaries: with the pid, a name no other call (thread or process) uses
_CALLS = itertools.count()
#: what a load says of a file whose values differ from their checksums or do not decode at all
_DAMAGED = ("the file changed after dfit_nb saved it (a damaged disk, copy or download, an edited or deleted "
            "chunk); save it again, or load a good copy")


def save_tree(tree: xr.DataTree, path: str | os.PathLike[str]) -> Path:
    """Write ``tree`` to ``path`` (``.zarr``: a Zarr store; otherwise netCDF4 via the netCDF4 library), atomically.

    Parameters
    ----------
    tree : xarray.DataTree
        What to write; saved with :data:`FORMAT_ATTR` added to its root attrs (``tree`` is not changed).
    path : str or os.PathLike
        A new path, or one that holds a previous dfit_nb save of the same kind (netCDF file or Zarr store).

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    SaveRefusedError
        ``path`` holds something dfit_nb did not write, or is ``.``, ``..``, ``/``, the home or the working
        directory (or one of its parents), or holds a NUL character. Nothing is written.
    SaveError
        The directory of ``path`` is missing, or writing failed (a full disk); the previous result at ``path``
        is unchanged and the temporary is removed. ``errno`` is the cause's.
    """
    path = local_path(path, saving=True)
    if "\x00" in str(path):  # else os.stat's bare ValueError("embedded null byte"), naming nothing
        raise SaveRefusedError(f"refusing to save to {str(path)!r}: a path cannot hold a NUL character ('\\x00'); "
                               "give a path without it")
    zarr = path.suffix == ".zarr"
    stamped = tree.copy(deep=False)  # shares the arrays; only the attrs differ (each variable's are a copy)
    stamped.attrs = {**tree.attrs, FORMAT_ATTR: FORMAT_VERSION, CHECKSUM_ATTR: _CHECKSUM_KIND}
    for _, _, var in _own_variables(stamped):
        var.attrs[CHECKSUM_ATTR] = checksum(var.values)
    stamped.attrs[ATTRS_CHECKSUM_ATTR] = json.dumps(
        {node.path: attrs_checksums(node.attrs) for node in stamped.subtree}, separators=(",", ":"), sort_keys=True)
    # Another thread's save of this path waits, then replaces this one whole. The target is checked inside: a
    # store another thread has moved aside for a moment must not read as a foreign one.
    with _path_lock(path):
        check_target(path, zarr)
        _clean_leftovers(path)
        existed = os.path.lexists(path)
        tmp = _sibling(path, _TMP)
        try:
            if zarr:
                _write_zarr(stamped.map_over_datasets(text_as_objects), tmp)
                _test_hook("written")
                _swap_in(tmp, path)
            else:
                _write_netcdf(stamped, tmp)
                _test_hook("written")
                os.replace(tmp, path)  # atomic on one file system: readers see the old file or the new one
        except SaveError:
            raise
        except OSError as err:
            before = "the previous save there is unchanged" if existed else "nothing was saved there"
            if err.errno == errno.ENAMETOOLONG:  # the temporary's name, not the user's, was too long: say so
                extra = len(os.fsencode(tmp.name)) - len(os.fsencode(path.name))
                failed = SaveError(f"could not save {path}: its name is {len(os.fsencode(path.name))} bytes, and "
                                   f"a save writes its temporary beside it under the name plus {extra} bytes "
                                   f"(.{_TMP}-<pid>-<n>), which is too long for this file system; give a name "
                                   f"{extra} bytes shorter than its limit (usually 255 bytes) ({before})")
            else:
                failed = SaveError(f"could not save {path}: {os_reason(err)} ({before}; the temporary {tmp.name} "
                                   f"was removed); {what_to_do(err, path.parent)}")
            failed.errno = err.errno
            raise failed from err
        finally:
            with contextlib.suppress(OSError):  # never mask the error that brought us here
                _remove(tmp)
    return path


def os_reason(err: OSError) -> str:
    """``err`` as ``[Errno N] reason``, without the file name it carries: that name is often a temporary or a file
    inside a store, where the message should name the path the user gave (the caller names it)."""
    if err.errno is None:
        return str(err.args[0] if len(err.args) == 1 else err) or type(err).__name__
    return f"[Errno {err.errno}] {err.strerror or os.strerror(err.errno)}"


def what_to_do(err: OSError, folder: Path) -> str:
    """What a user can do about a failed write into ``folder``, by the cause's ``errno``."""
    code = err.errno
    if code in (errno.ENOSPC, errno.EDQUOT):
        return f"free space on the disk holding {folder} (or your quota there), or save to another disk"
    if code in (errno.EACCES, errno.EPERM):
        return f"the folder {folder} is not writable by this user: save into a folder you can write to"
    if code == errno.EROFS:
        return f"{folder} is on a read-only file system: save into a writable folder"
    if code == errno.EFBIG:
        return "the file is larger than this file system or a limit (ulimit -f) allows: save to another disk"
    if code in (errno.ENOTDIR, errno.ENOENT):
        return (f"{folder} is not a folder that exists (it was moved or removed during the save): give a path in "
                "an existing folder")
    return f"check the disk and the folder {folder}, then save again"


def text_as_objects(ds: xr.Dataset) -> xr.Dataset:
    """Fixed-width text arrays (NumPy ``<U``) as Python strings: variable-length on disk (Zarr v3 specifies
    variable-length UTF-8 only). A run's Datasets are built this way too.

    Through ``ds.variables`` and one constructor: ``ds[name]`` builds a DataArray per variable and each ``assign``
    merges the whole Dataset again (2.0 ms against 1.1 ms on a run's per-op Dataset)."""
    if not any(v.dtype.kind == "U" for v in ds.variables.values()):
        return ds
    var = {n: text_variable(v) for n, v in ds.variables.items()}
    return xr.Dataset({n: var[n] for n in ds.data_vars}, coords={n: var[n] for n in ds.coords}, attrs=ds.attrs)


def text_variable(v: xr.Variable) -> xr.Variable:
    """``v`` with fixed-width text (NumPy ``<U``) as Python strings (see :func:`text_as_objects`); else ``v``."""
    return xr.Variable(v.dims, v.values.astype(object), v.attrs) if v.dtype.kind == "U" else v


def open_tree(path: str | os.PathLike[str], what: str, parts: Sequence[str],
              foreign: Mapping[str, str] | None = None) -> xr.DataTree:
    """Read a tree written by :func:`save_tree`, loaded into memory, with the groups ``parts``.

    Parameters
    ----------
    path : str or os.PathLike
        A netCDF file or a ``.zarr`` store. If it is missing but a Zarr save to it was killed after moving the
        old store aside, the old store is moved back and loaded.
    what : str
        What the caller loads ("trace", "run"), for the messages.
    parts : sequence of str
        The groups the tree must have.
    foreign : mapping of str to str, optional
        Group -> hint, added to the message when groups are missing and the file has that group (a group that
        marks another kind of result).

    Returns
    -------
    xarray.DataTree
        The tree, without :data:`FORMAT_ATTR` in its root attrs.

    Raises
    ------
    FileNotFoundError
        Nothing at ``path``.
    LoadRefusedError
        ``path`` is a FIFO, a socket or a device (:func:`special_file`), or a store holding one
        (:func:`special_inside`), or ``path`` holds a NUL character; nothing is opened.
    FormatVersionError
        The file was written by a newer major format than :data:`READS_MAJOR`.
    IntegrityError
        A variable's values or an attribute differ from the checksum saved with them, or lack one in a file whose
        variables or attributes all have one (:func:`verify_checksums`).
    DfitError
        The file is not a dfit_nb ``what``.
    """
    path = local_path(path, saving=False)
    if "\x00" in str(path):  # no file has such a name: said so, with the NUL shown, not printed raw
        raise LoadRefusedError(f"refusing to load {str(path)!r}: a path cannot hold a NUL character ('\\x00'); "
                               f"give the path of a saved dfit_nb {what} without it")
    with _path_lock(path):  # a save of this path on another thread finishes first: no swap is seen half done
        if not os.path.lexists(path):
            _recover(path)
        if not path.exists():
            raise FileNotFoundError(f"no {what} at {path}")
        special = special_file(path)
        if special:  # before any open: opening a FIFO blocks until a writer comes, and Ctrl-C cannot stop it
            raise LoadRefusedError(f"refusing to load {path}: it is {special}, not a file; reading it could block "
                                   f"or consume another program's data; give the path of a saved dfit_nb {what} "
                                   "(a netCDF file or a .zarr folder)")
        inside = special_inside(path) if path.suffix == ".zarr" and path.is_dir() else None
        if inside is not None:  # zarr would open it as one of the store's files, and block the same way
            raise LoadRefusedError(f"refusing to load {path}: {inside[0]} inside it is {inside[1]}, not a file "
                                   "dfit_nb writes into a store; reading it could block or consume another "
                                   f"program's data; save the {what} again, or give the path of a good copy")
        # the version is checked before xarray opens the file: a newer format may fail there misleadingly
        markers = _markers(path)
        if markers is not None:
            _check_format(path, markers, what)
        try:
            if path.suffix == ".zarr":
                opened = xr.open_datatree(path, engine="zarr", consolidated=False)
                tree = _load_closed(opened)
            else:
                with HDF5_LOCK:
                    tree = _load_closed(xr.open_datatree(path, engine=NETCDF_ENGINE))
        except Exception as err:
            if markers is not None and not (isinstance(err, OSError) and err.errno is not None):
                # dfit_nb's mark is in its root, yet its data do not decode (a flipped byte in a compressed Zarr
                # chunk, or in HDF5's own structures): damaged, not another program's file. An OS error with an
                # errno (no permission on a chunk) is not damage and is told as it is.
                raise IntegrityError(f"refusing to load {path}: it is a dfit_nb {what} (its root carries dfit_nb's "
                                     f"mark), but its data cannot be read back: {err}; {_DAMAGED}") from err
            raise DfitError(f"{path} is not a dfit_nb {what} file: {err}") from err
    verify_checksums(tree, path, what)
    missing = [p for p in parts if p not in tree.children]
    if missing:
        hints = [f" ({hint})" for group, hint in (foreign or {}).items() if group in tree.children]
        raise DfitError(f"{path} is not a dfit_nb {what}: groups {missing} are missing{''.join(hints)}")
    tree.attrs.pop(FORMAT_ATTR, None)  # a property of the file, not of the trace or run
    return tree


def local_path(path: str | os.PathLike[str], saving: bool) -> Path:
    """``path`` as a local :class:`~pathlib.Path`: a path as given, a ``file://`` URL (of no host, or
    ``localhost``) as its path; any other URL (``s3://bucket/run.zarr``) is refused, naming it as given.

    ``Path`` would have made ``s3://bucket/run.zarr`` the local ``s3:/bucket/run.zarr``, and the save failed
    naming a folder ``s3:`` the user never gave. Saves and loads of traces, runs and calibrations are local
    only: a save replaces atomically by renaming, which object stores cannot do (a sweep's ``to_zarr`` writes
    URLs, in place).

    >>> local_path("run.nc", saving=True), local_path("file:///tmp/a%20b.nc", saving=False)
    (PosixPath('run.nc'), PosixPath('/tmp/a b.nc'))
    """
    raw = os.fspath(path)
    if "://" not in raw:
        return Path(raw)
    parts = urllib.parse.urlsplit(raw)
    if parts.scheme == "file" and parts.netloc in ("", "localhost"):
        return Path(urllib.parse.unquote(parts.path))
    refused = SaveRefusedError if saving else LoadRefusedError
    verb, fix = (("save to", "save to a local path, then copy the file") if saving else
                 ("load", "copy it to a local path, then load that"))
    raise refused(f"refusing to {verb} {raw!r}: it is a URL, and dfit_nb saves and loads traces, runs and "
                  f"calibrations on a local file system only (a save replaces by renaming, which object stores "
                  f"cannot do atomically); {fix}")


def checksum(values: np.ndarray) -> str:
    """The checksum a save records for a variable's values: ``"crc32:<8 hex digits>"``.

    A CRC32 (``zlib``: a few GB/s) of the shape, then of the values in C order: the bytes of a numeric array
    (what a disk or a copy can damage; a Zarr chunk deleted from a store reads back as fill values, other
    bytes), or for text (object arrays of ``str`` as saved; NumPy ``<U`` from netCDF, ``StringDType`` from Zarr
    as loaded) its runs of equal strings: the length of each run, the length of its string, then the strings
    joined and UTF-8 encoded. The lengths make the joining unambiguous, as no separator inside the strings could.
    Runs, because a run's text columns repeat (an event's region, kind, dataflow: a few hundred runs in 600,000
    events): the runs are found by one vectorised comparison, and only their first strings become Python
    strings, which for a loaded ``StringDType`` column of every string took 0.1 s per 600,000.

    Parameters
    ----------
    values : numpy.ndarray
        The values, as saved or as loaded.

    Returns
    -------
    str
        ``"crc32:"`` and the checksum as 8 hexadecimal digits.

    Examples
    --------
    >>> import numpy as np
    >>> checksum(np.arange(3)) == checksum(np.arange(3)), checksum(np.arange(3)) == checksum(np.arange(1, 4))
    (True, False)
    >>> checksum(np.array(["ab", "c"])) == checksum(np.array(["ab", "c"], dtype=object)) != checksum(
    ...     np.array(["a", "bc"], dtype=object))
    True
    """
    a = np.asarray(values)
    crc = zlib.crc32(repr(a.shape).encode())
    if a.dtype.kind in "OUST":
        flat = a.reshape(-1)
        starts = np.flatnonzero(np.concatenate(([flat.size > 0], flat[1:] != flat[:-1])))
        runs = np.diff(np.append(starts, flat.size)).astype(np.int64)
        heads = flat[starts].tolist()
        try:  # strings: lengths (in code points), then one join and one encode, all in C
            text = "".join(heads)
            lengths = np.fromiter(map(len, heads), np.int64, len(heads))
            data = text.encode("utf-8", "surrogatepass")
        except TypeError:  # bytes or other objects: one at a time, each as UTF-8 text or its own bytes
            parts = [x if isinstance(x, bytes) else str(x).encode("utf-8", "surrogatepass") for x in heads]
            lengths = np.fromiter(map(len, parts), np.int64, len(parts))
            data = b"".join(parts)
        crc = zlib.crc32(runs.tobytes(), crc)
        crc = zlib.crc32(data, zlib.crc32(lengths.tobytes(), crc))
    else:
        crc = zlib.crc32(np.ascontiguousarray(a).reshape(-1).view(np.uint8), crc)
    return f"{_CHECKSUM_KIND}:{crc:08x}"


def attr_checksum(value: Any) -> str:
    """The checksum a save records for one attribute's value: ``"crc32:<8 hex digits>"`` of its canonical form.

    The canonical form is what both formats read back alike: netCDF returns a one-element list as a scalar, lists
    as NumPy arrays and numbers as NumPy scalars; Zarr returns JSON lists and Python numbers. So a value is
    flattened, then written as JSON tagged by kind: whole numbers (and bools) as integers, other real numbers as
    floats (a float32 as the float64 it widens to), text as strings (bytes decoded as UTF-8, NUL characters left
    out: netCDF drops them from attributes); anything else (a dict, which only Zarr stores) as sorted JSON.

    Examples
    --------
    >>> import numpy as np
    >>> attr_checksum([5]) == attr_checksum(np.int64(5)) == attr_checksum(5), attr_checksum(5) == attr_checksum(5.0)
    (True, False)
    >>> attr_checksum(["a"]) == attr_checksum("a") != attr_checksum("b")
    True
    """
    return f"{_CHECKSUM_KIND}:{zlib.crc32(_canonical(value).encode('utf-8', 'surrogatepass')):08x}"


def _canonical(value: Any) -> str:
    if isinstance(value, dict):
        return json.dumps(["d", _plain(value)], sort_keys=True, separators=(",", ":"), default=repr)
    try:
        a = np.asarray(value)
    except Exception:  # ragged or odd objects: their text
        return json.dumps(["r", repr(value)])
    flat = a.reshape(-1).tolist()
    kind = a.dtype.kind
    if kind == "O" and all(isinstance(x, (str, bytes)) for x in flat):
        kind = "U"
    if kind in "US":
        text = [(x.decode("utf-8", "surrogateescape") if isinstance(x, bytes) else str(x)).replace("\x00", "")
                for x in flat]
        return json.dumps(["s", text], separators=(",", ":"))
    if kind in "biu":
        return json.dumps(["i", [int(x) for x in flat]], separators=(",", ":"))
    if kind == "f":
        return json.dumps(["f", [float(x) for x in flat]], separators=(",", ":"))
    return json.dumps(["o", _plain(value)], sort_keys=True, separators=(",", ":"), default=repr)


def _plain(value: Any) -> Any:
    """``value`` with NumPy scalars and arrays, tuples and dicts' keys as JSON has them (Zarr's attributes)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (np.ndarray, np.generic)):
        return _plain(value.tolist())
    return value


def attrs_checksums(attrs: Mapping[Any, Any]) -> dict[str, str]:
    """Attribute name -> :func:`attr_checksum` of its value, for every attribute but the file's own
    (:data:`_FILE_ATTRS`)."""
    return {str(k): attr_checksum(v) for k, v in attrs.items() if k not in _FILE_ATTRS}


def _own_variables(tree: xr.DataTree) -> Iterator[tuple[xr.DataTree, str, xr.Variable]]:
    """(node, name, variable) of every variable each node of ``tree`` holds itself (not inherited coordinates:
    a file stores each once, in its own group)."""
    for node in tree.subtree:
        for name in node.to_dataset(inherit=False).variables:
            yield node, str(name), node.variables[name]


def verify_checksums(tree: xr.DataTree, path: str | os.PathLike[str], what: str) -> None:
    """Check every variable of the loaded ``tree`` against the checksum saved with it, then drop the checksums.

    Files saved before the checksums (no :data:`CHECKSUM_ATTR` in the root) pass unchecked; in a file with it,
    every variable must have one (a lost attribute is damage too).

    Raises
    ------
    IntegrityError
        A variable's values differ from its checksum, or it has none in a file whose variables all have one. The
        message names ``path``, the group and the variable.
    """
    kind = tree.attrs.pop(CHECKSUM_ATTR, None)
    if isinstance(kind, bytes):
        kind = kind.decode("utf-8", "replace")
    if kind is not None and kind != _CHECKSUM_KIND:
        raise IntegrityError(f"{path} records checksums of kind {kind!r}, which this version of dfit_nb does not "
                             f"know (it writes {_CHECKSUM_KIND!r}); upgrade dfit_nb to load this {what}")
    damaged = _DAMAGED
    saved_attrs = tree.attrs.pop(ATTRS_CHECKSUM_ATTR, None)
    if saved_attrs is not None or _format_minor(tree.attrs.get(FORMAT_ATTR)) >= (1, 1):
        verify_attrs([(node.path, node.attrs) for node in tree.subtree], saved_attrs, path, what)
    for node, name, var in _own_variables(tree):
        saved = var.attrs.pop(CHECKSUM_ATTR, None)
        where = f"variable {name!r} of group {node.path!r}" if node.path != "/" else f"variable {name!r}"
        if saved is None:
            if kind is not None:
                raise IntegrityError(f"refusing to load {path}: its {where} has no checksum, which every variable "
                                     f"of this {what} was saved with; {damaged}")
            continue
        if isinstance(saved, bytes):
            saved = saved.decode("utf-8", "replace")
        found = checksum(var.values)
        if found != saved:
            raise IntegrityError(f"refusing to load {path}: its {where} reads back with checksum {found}, but was "
                                 f"saved with {saved!r}; {damaged}")


def verify_attrs(groups: Sequence[tuple[str, Mapping[Any, Any]]], saved: Any, path: str | os.PathLike[str],
                 what: str, refusing: str = "refusing to load") -> None:
    """Check the attributes of each ``(group path, attrs)`` against ``saved``, the JSON of
    :data:`ATTRS_CHECKSUM_ATTR` (None when the file has none, though its format says every file has).

    Raises
    ------
    IntegrityError
        An attribute's value differs from its checksum, an attribute saved is missing or one is there that was not
        saved, a group has no checksums, or ``saved`` is missing or unreadable. The message, starting with
        ``refusing`` and ``path``, names the attribute and its group.
    """
    damaged = ("it changed after dfit_nb wrote it (a damaged disk, copy or download, an edited attribute); "
               "write it again, or use a good copy")
    if isinstance(saved, bytes):
        saved = saved.decode("utf-8", "replace")
    try:
        doc = json.loads(saved) if saved is not None else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        state = "has no checksums of its attributes" if saved is None else "has unreadable checksums of its attributes"
        raise IntegrityError(f"{refusing} {path}: it {state} ({ATTRS_CHECKSUM_ATTR!r}), which every {what} of "
                             f"its format was saved with; {damaged}")
    for group, attrs in groups:
        where = f" of group {group!r}" if group != "/" else ""
        sums = doc.get(group)
        if not isinstance(sums, dict):
            raise IntegrityError(f"{refusing} {path}: its group {group!r} has no checksums of its attributes; "
                                 f"{damaged}")
        found = attrs_checksums(attrs)
        for name in sorted(set(sums) | set(found)):
            if name not in found:
                raise IntegrityError(f"{refusing} {path}: its attribute {name!r}{where}, saved with it, is "
                                     f"missing; {damaged}")
            if name not in sums:
                raise IntegrityError(f"{refusing} {path}: its attribute {name!r}{where} was not saved with it "
                                     f"(added after the save); {damaged}")
            if found[name] != sums[name]:
                raise IntegrityError(f"{refusing} {path}: its attribute {name!r}{where} reads back with "
                                     f"checksum {found[name]}, but was saved with {sums[name]!r}; {damaged}")


def _format_minor(version: Any) -> tuple[int, int]:
    """``"MAJOR.MINOR"`` as two numbers; (0, 0) for no version or an unreadable one (refused elsewhere)."""
    if isinstance(version, bytes):
        version = version.decode("utf-8", "replace")
    try:
        major, _, minor = str(version).partition(".")
        return int(major), int(minor or 0)
    except ValueError:
        return 0, 0


def _load_closed(opened: xr.DataTree) -> xr.DataTree:
    """``opened`` loaded into memory, then closed: an open handle would keep a replaced file's space and lock it."""
    try:
        return opened.load()
    finally:
        opened.close()


@contextlib.contextmanager
def _path_lock(path: Path) -> Iterator[None]:
    """Hold the lock of ``path``: saves and loads of one path (written any way: relative, through a linked folder)
    run one at a time in this process. Other processes are kept apart by the temporaries' pids instead.

    The key is the resolved folder and the name, not the resolved path: a save replaces a link at the path,
    it does not write through it. A lock lives while a call wants it, so the table does not grow with paths.
    """
    key = os.path.join(os.path.realpath(path.parent), path.name)
    with _PATH_LOCKS_GUARD:
        lock, users = _PATH_LOCKS.get(key, (None, 0))
        lock = lock or threading.Lock()
        _PATH_LOCKS[key] = (lock, users + 1)
    try:
        with lock:
            yield
    finally:
        with _PATH_LOCKS_GUARD:
            lock, users = _PATH_LOCKS[key]
            if users == 1:
                del _PATH_LOCKS[key]
            else:
                _PATH_LOCKS[key] = (lock, users - 1)


# ---------------------------------------------------------------------------------------------- the target


def check_target(path: Path, zarr: bool) -> None:
    """Refuse a path whose replacement could destroy what dfit_nb did not write; nothing is written."""
    valid = (f"give a new path (such as {path / 'result.nc'} to save inside it) or the path of a previous "
             "dfit_nb save")
    special = _special_directory(path)
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
    if _markers(path) is None:
        hint = valid if kind == "directory" else "give a new path or the path of a previous dfit_nb save"
        raise SaveRefusedError(f"refusing to replace {path}: it is a {kind} that dfit_nb did not write (no dfit_nb "
                               f"marker in it); {hint}")
    if zarr != path.is_dir():
        have, want = ("a Zarr store", "a netCDF file") if path.is_dir() else ("a netCDF file", "a Zarr store")
        raise SaveRefusedError(f"refusing to replace {path}: it is {have} dfit_nb wrote, but this path saves "
                               f"{want} (a .zarr suffix saves Zarr); give a new path, or remove {path} first")


def _special_directory(path: Path) -> str:
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
        return _markers(path) is not None
    if not path.is_file():  # a FIFO or a device: opening it could block or consume it
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(_HEAD_BYTES)
            if head.startswith(b"\x89HDF"):
                return _markers(path) is not None
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


def _markers(path: Path) -> dict[str, Any] | None:
    """The dfit_nb marker attributes in the root of the file or store at ``path``; None when it has none.

    Reads only metadata: a Zarr store's root JSON, or a netCDF file's root attributes through h5py.
    """
    try:
        if path.is_dir():
            for name, key in (("zarr.json", "attributes"), (".zattrs", None)):  # Zarr v3, v2
                meta = path / name
                if meta.is_file():
                    doc = json.loads(meta.read_text())
                    attrs = doc.get(key) if key and isinstance(doc, dict) else doc
                    found = {k: v for k, v in attrs.items() if k in _MARKERS} if isinstance(attrs, dict) else {}
                    return found or None
            return None
        if not path.is_file():  # a FIFO or a device: opening it could block or consume it
            return None
        import h5py

        with HDF5_LOCK, h5py.File(path, "r") as f:
            found = {k: f.attrs[k] for k in _MARKERS if k in f.attrs}
        return found or None
    except Exception:  # unreadable or not HDF5/Zarr: not ours
        return None


def _check_format(path: Path, markers: Mapping[str, Any], what: str) -> None:
    """Refuse a file of a newer major format; files without a version (older dfit_nb) pass."""
    version = markers.get(FORMAT_ATTR)
    if version is None:
        return
    if isinstance(version, bytes):
        version = version.decode("utf-8", "replace")
    try:
        major = int(str(version).split(".")[0])
    except ValueError:
        raise FormatVersionError(f"{path} has an unreadable dfit_nb format version {version!r}; this version "
                                 f"reads formats up to {READS_MAJOR}") from None
    if major > READS_MAJOR:
        raise FormatVersionError(f"{path} was written by a newer dfit_nb format {major}; this version reads up to "
                                 f"{READS_MAJOR} (dfit_nb {__version__}): upgrade dfit_nb to load this {what}")


# ---------------------------------------------------------------------------------------------- writing


def _write_netcdf(tree: xr.DataTree, tmp: Path) -> None:
    """Write ``tree`` as netCDF4 to the new file ``tmp``, synced to disk.

    HDF5 builds the file in memory and only Python writes it to disk: HDF5 (through h5py at least) crashes the
    interpreter (segfault) when it closes a file after a failed write (ENOSPC, EFBIG), which a full disk turns
    into a lost session. Python's writes fail with an ``OSError`` instead. The price is one copy of the file in
    memory.
    """
    with HDF5_LOCK:
        data = tree.to_netcdf(None, engine=NETCDF_ENGINE, encoding=_compressed(tree))
    half = len(data) // 2
    with open(tmp, "xb") as f:  # "x": never write through a file we did not just create
        f.write(data[:half])
        f.flush()
        _test_hook("partial")
        f.write(data[half:])
        f.flush()
        os.fsync(f.fileno())  # the rename that follows must not publish a file whose data is still in cache


#: numeric variables of at least this many bytes are written to netCDF compressed (zlib level 1 over byte-shuffled
#: values): a replay's cube is mostly zeros where tiles idle, and on a large grid it is most of the file
COMPRESS_BYTES = 64 * 2**10


def _compressed(tree: xr.DataTree) -> dict[str, dict[str, dict[str, Any]]]:
    """The netCDF encoding that compresses ``tree``'s large numeric variables (:data:`COMPRESS_BYTES`)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for node in tree.subtree:
        big = {name: {"zlib": True, "complevel": 1, "shuffle": True} for name, v in node.dataset.variables.items()
               if v.dtype.kind in "biuf" and v.nbytes >= COMPRESS_BYTES}
        if big:
            out[node.path] = big
    return out


#: trees up to this size (in memory, before compression) are encoded into a Zarr store in memory, then written out
#: in one pass; larger ones go straight to disk through Zarr's local store
ZARR_IN_MEMORY_BYTES = 256 * 2**20


def _write_zarr(tree: xr.DataTree, tmp: Path) -> None:
    """Write ``tree`` as a Zarr store to the new directory ``tmp``.

    Zarr's local store makes several file-system round trips per array (its metadata written, then its
    attributes written again, then its chunk), each waiting on Zarr's I/O thread: a replayed run's ~150 arrays took
    1.1-1.4 s, where encoding them into an in-memory store took 0.4-0.6 s and writing its ~560 files after it
    0.02 s. The files are the local store's layout exactly (a key is a path under the store; ``tests/test_saves.py``
    checks the two stores identical file by file), so any Zarr reader opens them. A tree larger than
    :data:`ZARR_IN_MEMORY_BYTES` goes straight to disk, where its bytes, not the round trips, take the time and
    a second copy in memory would cost more than it saves.
    """
    if tree.nbytes > ZARR_IN_MEMORY_BYTES:
        tree.to_zarr(tmp, consolidated=False)
        return
    from zarr.storage import MemoryStore

    encoded: dict[str, Any] = {}
    tree.to_zarr(MemoryStore(store_dict=encoded), consolidated=False)
    os.mkdir(tmp)
    made = {tmp}
    for key, buffer in encoded.items():
        file = tmp.joinpath(*key.split("/"))
        if file.parent not in made:
            file.parent.mkdir(parents=True, exist_ok=True)
            made.add(file.parent)
        _write_file(file, buffer.to_bytes())


def _write_file(file: Path, data: bytes) -> None:
    with open(file, "xb") as f:  # "x": never write through a file we did not just create
        f.write(data)


def _swap_in(tmp: Path, path: Path) -> None:
    """Move the complete store ``tmp`` to ``path``; a store already there is moved aside, then deleted.

    A directory cannot be renamed over another, so the swap is three steps; at every moment the old store is
    at ``path`` or aside (restored by :func:`_recover`), or the new one is at ``path``.
    """
    old = _sibling(path, _OLD)
    had_old = os.path.lexists(path)
    if had_old:
        os.rename(path, old)
        _test_hook("aside")
    try:
        os.rename(tmp, path)
    except BaseException:
        if had_old and not os.path.lexists(path):
            os.rename(old, path)
        raise
    _test_hook("replaced")
    _remove(old)


# ---------------------------------------------------------------------------------------------- leftovers


def _sibling(path: Path, kind: str) -> Path:
    """A new temporary (``kind`` "dfit-tmp") or aside ("dfit-old") name for a save of ``path``, used by no other
    call: ``<name>.<kind>-<pid>-<n>``, ``n`` counting this process's calls (threads share the count)."""
    return path.with_name(f"{path.name}.{kind}-{os.getpid()}-{next(_CALLS)}")


def _leftovers(path: Path) -> list[tuple[str, int, Path]]:
    """(kind, pid, path) of every temporary or aside of our naming beside ``path``, newest first.

    Also the names of older dfit_nb: ``<name>.<kind>-<pid>`` (one per process) and, before the format version,
    ``.<name>.tmp-<pid>``.
    """
    ours = re.compile(rf"{re.escape(path.name)}\.({_TMP}|{_OLD})-(\d+)(?:-\d+)?")
    legacy = re.compile(rf"\.{re.escape(path.name)}\.tmp-(\d+)")
    found = []
    with contextlib.suppress(OSError), os.scandir(path.parent) as entries:
        for entry in entries:
            if m := ours.fullmatch(entry.name):
                found.append((m.group(1), int(m.group(2)), Path(entry.path)))
            elif m := legacy.fullmatch(entry.name):
                found.append((_TMP, int(m.group(1)), Path(entry.path)))
    return sorted(found, key=lambda f: _mtime(f[2]), reverse=True)


def _mtime(path: Path) -> float:
    try:
        return path.lstat().st_mtime
    except OSError:
        return 0.0


def _alive(pid: int) -> bool:
    """Whether another process ``pid`` runs (its save may be in progress: leave its files alone).

    Our own pid counts as gone: the caller holds the path's lock, so no thread of this process is saving to the
    path, and a leftover with our pid is from a killed process that had it before (or a removal that failed).
    """
    if pid <= 0 or pid == os.getpid():  # pid 0 would signal our own process group
        return False
    if os.name == "nt":  # there os.kill(pid, 0) terminates the process: assume it runs, leave its files
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except OSError:
        return False
    return True


def _recover(path: Path) -> bool:
    """Move back the newest old store left aside by a killed Zarr save of the missing ``path``."""
    for kind, pid, leftover in _leftovers(path):
        if kind == _OLD and not _alive(pid) and not os.path.lexists(path):
            with contextlib.suppress(OSError):  # another process recovered it first
                os.rename(leftover, path)
                return True
    return False


def _clean_leftovers(path: Path) -> None:
    """Before a save: restore an old store left aside (so a failed save keeps it), then remove stale leftovers.

    Only names of our own naming whose process is gone are removed: a running save's files are left alone.
    """
    if not os.path.lexists(path):
        _recover(path)
    for _, pid, leftover in _leftovers(path):
        if not _alive(pid):
            with contextlib.suppress(OSError):
                _remove(leftover)


def _remove(path: Path) -> None:
    """Delete a file, link or directory tree of ours at ``path``, if any."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.is_dir():
        shutil.rmtree(path)


def _test_hook(point: str) -> None:
    """Stop here when the test hook :data:`HOOK_ENV` names ``point`` (see there); otherwise do nothing."""
    spec = os.environ.get(HOOK_ENV)
    if not spec:
        return
    name, _, action = spec.partition(":")
    if name != point:
        return
    if action == "exit":
        os._exit(75)
    sys.stderr.write(f"dfit_nb save hook: {point}\n")
    sys.stderr.flush()
    time.sleep(120)  # the test kills us here; never linger if it does not
    os._exit(75)
