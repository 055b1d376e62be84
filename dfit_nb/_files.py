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

The format's stamp and its checks (versions, checksums) are :mod:`dfit_nb._format`; which paths a save may replace
and a load may open, :mod:`dfit_nb._targets`. Their public names are importable from here too.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import xarray as xr

from ._format import ATTRS_CHECKSUM_ATTR as ATTRS_CHECKSUM_ATTR
from ._format import CHECKSUM_ATTR as CHECKSUM_ATTR
from ._format import CHECKSUM_KIND, DAMAGED, check_format, own_variables, read_markers
from ._format import FORMAT_ATTR as FORMAT_ATTR
from ._format import FORMAT_VERSION as FORMAT_VERSION
from ._format import HDF5_LOCK as HDF5_LOCK
from ._format import READS_MAJOR as READS_MAJOR
from ._format import attr_checksum as attr_checksum
from ._format import attrs_checksums as attrs_checksums
from ._format import checksum as checksum
from ._format import verify_attrs as verify_attrs
from ._format import verify_checksums as verify_checksums
from ._targets import HTML_MARK as HTML_MARK
from ._targets import MARKDOWN_MARK as MARKDOWN_MARK
from ._targets import ZARR_ROOT_FILES as ZARR_ROOT_FILES
from ._targets import check_target as check_target
from ._targets import foreign_file as foreign_file
from ._targets import local_path as local_path
from ._targets import refuse_shared_folder as refuse_shared_folder
from ._targets import root_or_home as root_or_home
from ._targets import special_file as special_file
from ._targets import special_inside as special_inside
from ._targets import written_by_dfit as written_by_dfit
from .errors import DfitError, IntegrityError, LoadRefusedError, SaveError, SaveRefusedError

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
TMP, OLD = "dfit-tmp", "dfit-old"
#: per path (its resolved folder and its name): the lock its saves and loads hold, and how many calls want it
_PATH_LOCKS: dict[str, tuple[threading.Lock, int]] = {}
_PATH_LOCKS_GUARD = threading.Lock()
#: numbers this process's temporaries: with the pid, a name no other call (thread or process) uses
_CALLS = itertools.count()


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
    stamped.attrs = {**tree.attrs, FORMAT_ATTR: FORMAT_VERSION, CHECKSUM_ATTR: CHECKSUM_KIND}
    for _, _, var in own_variables(stamped):
        var.attrs[CHECKSUM_ATTR] = checksum(var.values)
    stamped.attrs[ATTRS_CHECKSUM_ATTR] = json.dumps(
        {node.path: attrs_checksums(node.attrs) for node in stamped.subtree}, separators=(",", ":"), sort_keys=True)
    # Another thread's save of this path waits, then replaces this one whole. The target is checked inside: a
    # store another thread has moved aside for a moment must not read as a foreign one.
    with path_lock(path):
        check_target(path, zarr)
        clean_leftovers(path)
        existed = os.path.lexists(path)
        tmp = sibling(path, TMP)
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
                                   f"(.{TMP}-<pid>-<n>), which is too long for this file system; give a name "
                                   f"{extra} bytes shorter than its limit (usually 255 bytes) ({before})")
            else:
                failed = SaveError(f"could not save {path}: {os_reason(err)} ({before}; the temporary {tmp.name} "
                                   f"was removed); {what_to_do(err, path.parent)}")
            failed.errno = err.errno
            raise failed from err
        finally:
            with contextlib.suppress(OSError):  # never mask the error that brought us here
                remove_ours(tmp)
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


#: NumPy's text dtypes: fixed-width (``<U``) and variable-width (``StringDType``)
TEXT_KINDS = ("U", "T")


def text_as_objects(ds: xr.Dataset) -> xr.Dataset:
    """Fixed-width text arrays (NumPy ``<U``) as Python strings: variable-length on disk (Zarr v3 specifies
    variable-length UTF-8 only). A run's Datasets are built this way too.

    Through ``ds.variables`` and one constructor: ``ds[name]`` builds a DataArray per variable and each ``assign``
    merges the whole Dataset again (2.0 ms against 1.1 ms on a run's per-op Dataset)."""
    if not any(v.dtype.kind in TEXT_KINDS for v in ds.variables.values()):
        return ds
    var = {n: text_variable(v) for n, v in ds.variables.items()}
    return xr.Dataset({n: var[n] for n in ds.data_vars}, coords={n: var[n] for n in ds.coords}, attrs=ds.attrs)


def text_variable(v: xr.Variable) -> xr.Variable:
    """``v`` with fixed-width text (NumPy ``<U``) or variable-width text (``StringDType``, as Zarr loads it) as
    Python strings (see :func:`text_as_objects`); else ``v``."""
    return xr.Variable(v.dims, v.values.astype(object), v.attrs) if v.dtype.kind in TEXT_KINDS else v


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
    with path_lock(path):  # a save of this path on another thread finishes first: no swap is seen half done
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
        markers = read_markers(path)
        if markers is not None:
            check_format(path, markers, what)
        try:
            if path.suffix == ".zarr":
                opened = xr.open_datatree(path, engine="zarr", consolidated=False)
                # Zarr reads text back as NumPy's StringDType, which astype(str) refuses: Python strings, as
                # a netCDF load gives
                tree = _load_closed(opened).map_over_datasets(text_as_objects)
            else:
                with HDF5_LOCK:
                    tree = _load_closed(xr.open_datatree(path, engine=NETCDF_ENGINE))
        except Exception as err:
            if markers is not None and not (isinstance(err, OSError) and err.errno is not None):
                # dfit_nb's mark is in its root, yet its data do not decode (a flipped byte in a compressed Zarr
                # chunk, or in HDF5's own structures): damaged, not another program's file. An OS error with an
                # errno (no permission on a chunk) is not damage and is told as it is.
                raise IntegrityError(f"refusing to load {path}: it is a dfit_nb {what} (its root carries dfit_nb's "
                                     f"mark), but its data cannot be read back: {err}; {DAMAGED}") from err
            raise DfitError(f"{path} is not a dfit_nb {what} file: {err}") from err
    verify_checksums(tree, path, what)
    missing = [p for p in parts if p not in tree.children]
    if missing:
        hints = [f" ({hint})" for group, hint in (foreign or {}).items() if group in tree.children]
        raise DfitError(f"{path} is not a dfit_nb {what}: groups {missing} are missing{''.join(hints)}")
    tree.attrs.pop(FORMAT_ATTR, None)  # a property of the file, not of the trace or run
    return tree


def _load_closed(opened: xr.DataTree) -> xr.DataTree:
    """``opened`` loaded into memory, then closed: an open handle would keep a replaced file's space and lock it."""
    try:
        return opened.load()
    finally:
        opened.close()


@contextlib.contextmanager
def path_lock(path: Path) -> Iterator[None]:
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
    old = sibling(path, OLD)
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
    remove_ours(old)


# ---------------------------------------------------------------------------------------------- leftovers


def sibling(path: Path, kind: str) -> Path:
    """A new temporary (``kind`` "dfit-tmp") or aside ("dfit-old") name for a save of ``path``, used by no other
    call: ``<name>.<kind>-<pid>-<n>``, ``n`` counting this process's calls (threads share the count)."""
    return path.with_name(f"{path.name}.{kind}-{os.getpid()}-{next(_CALLS)}")


def _leftovers(path: Path) -> list[tuple[str, int, Path]]:
    """(kind, pid, path) of every temporary or aside of our naming beside ``path``, newest first.

    Also the names of older dfit_nb: ``<name>.<kind>-<pid>`` (one per process) and, before the format version,
    ``.<name>.tmp-<pid>``.
    """
    ours = re.compile(rf"{re.escape(path.name)}\.({TMP}|{OLD})-(\d+)(?:-\d+)?")
    legacy = re.compile(rf"\.{re.escape(path.name)}\.tmp-(\d+)")
    found = []
    with contextlib.suppress(OSError), os.scandir(path.parent) as entries:
        for entry in entries:
            if m := ours.fullmatch(entry.name):
                found.append((m.group(1), int(m.group(2)), Path(entry.path)))
            elif m := legacy.fullmatch(entry.name):
                found.append((TMP, int(m.group(1)), Path(entry.path)))
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
        if kind == OLD and not _alive(pid) and not os.path.lexists(path):
            with contextlib.suppress(OSError):  # another process recovered it first
                os.rename(leftover, path)
                return True
    return False


def clean_leftovers(path: Path) -> None:
    """Before a save: restore an old store left aside (so a failed save keeps it), then remove stale leftovers.

    Only names of our own naming whose process is gone are removed: a running save's files are left alone.
    """
    if not os.path.lexists(path):
        _recover(path)
    for _, pid, leftover in _leftovers(path):
        if not _alive(pid):
            with contextlib.suppress(OSError):
                remove_ours(leftover)


def remove_ours(path: Path) -> None:
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
