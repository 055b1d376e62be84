"""The Zarr store of a lazy sweep: streamed to chunk by chunk (:func:`to_zarr`: resumable, checksummed per chunk)
and opened lazily, checked as it is read (:func:`open_sweep`).

A store's layout is its bookkeeping variables (:data:`DONE`, :data:`CHECKSUMS`) and root attributes
(:data:`CHUNK_VARIABLES` and the others); a local store is created beside its path and renamed in, as a save is
(:mod:`dfit_nb._files`). The public face is :mod:`dfit_nb.sim.scale`; the chunks' tasks are
:mod:`dfit_nb.sim._chunks`.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import operator
import os
import urllib.parse
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import xarray as xr
from dask.highlevelgraph import HighLevelGraph

from .. import _files, _targets
from ..errors import DfitError, IntegrityError, LoadRefusedError, SaveError, SaveRefusedError
from ._chunks import WRITE_PREFIX, ScaleOutError, _Bar, _client, dashboard

#: the Zarr variable that records which chunks are on disk (what a resumed :func:`to_zarr` skips)
DONE = "chunk_done"
#: the Zarr variable (dims ``chunk``, ``chunk_variable``) holding the checksum of each chunk's block of each lazy
#: variable (of the store's kind, :data:`CHUNK_KINDS`), written by the chunk's task before its :data:`DONE` flag;
#: checked by :func:`open_sweep`
CHECKSUMS = "chunk_checksum"
#: the kinds of :data:`CHECKSUMS` a store's ``dfit_checksum`` attribute may name: ``"crc32c"`` (Castagnoli,
#: ``google_crc32c``, which zarr requires: about 18 GB/s with its C extension, 4x zlib's CRC32 here, so a checked
#: read costs little more than the read) for new stores when that extension is there, else ``"crc32"`` (zlib; the
#: stores written before the CRC32C). The eager variables' and attributes' checksums are ``"crc32:..."`` strings
#: in every kind (:func:`dfit_nb._files.checksum`).
CHUNK_KINDS = ("crc32", "crc32c")
#: root attributes of a store :func:`to_zarr` creates: the lazy variables in the order of :data:`CHECKSUMS`' columns,
#: the leading dims their chunks split and the chunk sizes along them, and the CRC32 of every eager variable and
#: coordinate (name -> ``"crc32:..."``, JSON); with ``dfit_checksum`` (the kind) and ``dfit_attrs_checksum`` (the
#: root attributes' checksums, as a save writes them)
CHUNK_VARIABLES, CHUNK_DIMS, CHUNK_SPLIT, EAGER_CHECKSUMS = ("dfit_chunk_variables", "dfit_chunk_dims",
                                                             "dfit_chunk_split", "dfit_eager_checksums")


def _lead(ds: xr.Dataset) -> tuple[list[str], tuple[str, ...], tuple[tuple[int, ...], ...]]:
    """The lazy variables of ``ds``, the dims their chunks split (the leading ones all share) and those chunks."""
    lazy = [str(v) for v in ds.data_vars if isinstance(ds[v].data, da.Array)] if isinstance(ds, xr.Dataset) else []
    if not lazy:  # an eager Dataset, or not a Dataset at all
        raise ScaleOutError("to_zarr() streams a lazy Dataset chunk by chunk: pass one from sweep(..., chunks=N) or "
                            "replay_batch(..., chunks=N) (an eager one: use ds.to_zarr)")
    lead: tuple[str, ...] = ds[lazy[0]].dims
    for v in lazy[1:]:
        dims = ds[v].dims
        lead = lead[:next((i for i, (a, b) in enumerate(zip(lead, dims, strict=False)) if a != b),
                          min(len(lead), len(dims)))]
    split = ds[lazy[0]].data.chunks[:len(lead)]
    for v in lazy:
        arr = ds[v].data
        if arr.chunks[:len(lead)] != split or any(n > 1 for n in arr.numblocks[len(lead):]):
            raise ScaleOutError(f"to_zarr() writes whole chunks of machines: variable {v!r} is chunked "
                                f"{arr.chunks}, not along the leading dims {lead} alone like the others (rechunk it "
                                "back, or write it with ds.to_zarr)")
    return lazy, lead, split


def _write_block(store: str, number: int, regions: dict[str, tuple[slice, ...]], values: dict[str, np.ndarray],
                 sums: Sequence[str] = (), kind: str = "crc32") -> int:
    """Write one chunk's blocks into their regions and, for a store with :data:`CHECKSUMS`, the checksum (of the
    store's ``kind``) of each of ``sums`` (the lazy variables in the store's order), then mark the chunk done (a
    chunk killed between the two is written again, in place, by the resumed run: never lost, never twice)."""
    import zarr

    group = zarr.open_group(store, mode="r+")
    for name, value in values.items():
        group[name][regions[name]] = value
    if sums:
        group[CHECKSUMS][number, :] = np.array([_crc(values[name], kind) for name in sums], np.uint32)
    group[DONE][number] = True
    return number


def _crc(values: np.ndarray, kind: str = "crc32") -> int:
    """The checksum of kind ``kind`` (:data:`CHUNK_KINDS`) of ``values``, as a number (a :data:`CHECKSUMS` entry).

    ``"crc32"``: the CRC32 :func:`dfit_nb._files.checksum` gives. ``"crc32c"``: the CRC32C of the same bytes (the
    shape's ``repr``, then the values in C order) for a numeric array, read in place; text arrays as ``"crc32"``.
    """
    a = np.asarray(values)
    if kind == "crc32c" and a.dtype.kind not in "OUST":
        import google_crc32c

        flat = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        if flat.flags.writeable:  # the C extension reads read-only buffers only: a view, no copy
            flat = flat.view()
            flat.flags.writeable = False
        return int(google_crc32c.extend(google_crc32c.value(repr(a.shape).encode()), flat))
    return int(_files.checksum(a).partition(":")[2], 16)


def _new_chunk_kind() -> str:
    """The :data:`CHECKSUMS` kind of a new store: ``"crc32c"`` with ``google_crc32c``'s C extension (zarr requires
    the package), else ``"crc32"`` (its pure-Python fallback would be far slower than zlib)."""
    try:
        import google_crc32c
    except ImportError:
        return "crc32"
    return "crc32c" if getattr(google_crc32c, "implementation", "") == "c" else "crc32"


def _local(store: str) -> bool:
    """Whether ``store`` names a local path (not an fsspec URL such as ``s3://bucket/sweep.zarr``)."""
    return "://" not in store


#: URL protocols fsspec can only read: a store there can be opened, never written
_READ_ONLY_PROTOCOLS = frozenset(("http", "https"))


def _store_name(store: Any, writing: bool) -> str:
    """``store`` as zarr is to open it, checked before any work: a local path as given; a ``file://`` URL (of no
    host, or ``localhost``) as its local path, so that it is created, refused and resumed as a path is; any other
    URL as given, once fsspec (through which zarr opens URLs) has an implementation of each of its protocols here
    (``simplecache::s3://...`` chains several) and, when ``writing``, none is read-only (``http``, ``https``).

    Raises :class:`SaveRefusedError` (``writing``) or :class:`LoadRefusedError` for a NUL character in
    ``store``; :class:`SaveRefusedError` for a local path to write that starts with ``~`` (Python does not expand
    it, and ``to_zarr`` creates missing folders: a folder named ``~`` would be made); :class:`ScaleOutError`
    naming ``store`` as the user gave it and what to do: a ``file://`` URL of another host, an unknown protocol,
    a protocol whose package is missing (fsspec's words name it: ``s3fs`` for ``s3://``, ``gcsfs`` for
    ``gs://``), or a write to a read-only one."""
    refused = SaveRefusedError if writing else LoadRefusedError
    if not isinstance(store, (str, bytes, os.PathLike)):  # else os.fspath's bare TypeError, naming no argument
        raise refused(f"refusing to {'write a sweep to' if writing else 'open'} {store!r:.80}: the store must be a "
                      f"path (a str or an os.PathLike, such as 'sweep.zarr') or a URL, got {type(store).__name__}")
    store = os.fsdecode(os.fspath(store))  # bytes as the OS decodes them: the checks below test a str
    if "\x00" in store:  # else a bare ValueError("embedded null byte") from the first os call, naming nothing
        raise refused(f"refusing to {'write a sweep to' if writing else 'open'} {store!r}: a path cannot hold a "
                      "NUL character ('\\x00'); give a path without it")
    if _local(store):
        first = Path(store).parts[:1]
        if writing and first and first[0].startswith("~"):  # its missing folders are created: '~' among them
            raise SaveRefusedError(f"refusing to write a sweep to {store!r}: it starts with {first[0]!r}, which is "
                                   f"not expanded here, so a folder named {first[0]!r} would be made in "
                                   f"{Path.cwd()}; write the path out, e.g. {os.path.expanduser(store)}")
        return store
    verb = "write a sweep to" if writing else "open"
    if store.startswith("file://"):
        parts = urllib.parse.urlsplit(store)
        if parts.netloc not in ("", "localhost"):
            raise ScaleOutError(f"cannot {verb} {store!r}: a file:// URL of the host {parts.netloc!r}; give a "
                                "local path, or a path where that host's folder is mounted")
        return urllib.parse.unquote(parts.path)  # %20 and the like, as fsspec reads them
    import fsspec

    for link in store.split("::"):
        protocol = link.split("://", 1)[0]  # a chain's links before the last are protocols alone
        if writing and protocol in _READ_ONLY_PROTOCOLS:  # first: installing its package would not help
            raise ScaleOutError(f"cannot write a sweep to {store!r}: fsspec reads {protocol}:// URLs but cannot "
                                "write them; write to a local path or to an object store (s3://, gs://, ...), "
                                "then serve it over HTTP if you like")
        try:
            fsspec.get_filesystem_class(protocol)
        except ImportError as err:  # fsspec knows it; the package that implements it is not installed
            raise ScaleOutError(f"cannot {verb} {store!r}: {protocol}:// URLs need a package that is not "
                                f"installed here ({err}); install it, or give a local path") from err
        except ValueError as err:  # "Protocol not known"
            raise ScaleOutError(f"cannot {verb} {store!r}: {protocol!r} is not a protocol fsspec (through which "
                                "zarr opens URLs) knows; give a local path, or a URL such as s3://bucket/sweep.zarr"
                                ) from err
    return store


def _check_new_store(path: Path, store: str) -> list[Path]:
    """Refuse a local ``path`` a new sweep store cannot be created at, before anything is written; create its
    missing parent folders and return them (removed again if the creation fails).

    Raises :class:`SaveRefusedError` (something there that is not a store of this sweep) or :class:`SaveError`
    (a parent that is a file, or cannot be created), each naming ``store`` as the user gave it."""
    special = _targets.special_directory(path)
    if special:
        raise SaveRefusedError(f"refusing to write a sweep to {store!r}: it is {special}, which dfit_nb never writes "
                               f"into; give a new path such as {str(path / 'sweep.zarr')!r}")
    if os.path.lexists(path):
        if not path.is_dir():
            kind = _files.special_file(path) or ("a link" if path.is_symlink() else "a file")
            raise SaveRefusedError(f"refusing to write a sweep to {store!r}: it is {kind}, not a Zarr store "
                                   "to_zarr() started; give a new path (a folder to be created, such as "
                                   f"{str(path.with_name(path.name + '.zarr'))!r}), or move it away")
        if any(path.iterdir()):
            raise SaveRefusedError(f"refusing to write a sweep to {store!r}: it is a folder that holds other files, "
                                   "not a Zarr store to_zarr() started; give a new path, such as "
                                   f"{str(path / 'sweep.zarr')!r}")
    existing = path.parent
    missing = []
    while not os.path.lexists(existing) and existing.parent != existing:
        missing.append(existing)
        existing = existing.parent
    if not existing.is_dir():
        failed = SaveError(f"cannot write a sweep to {store!r}: {existing} is a file, not a folder, so the store "
                           "cannot be created under it; give a path inside a folder")
        failed.errno = errno.ENOTDIR
        raise failed
    made: list[Path] = []
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        except OSError as err:
            _remove_empty(made)
            failed = SaveError(f"cannot write a sweep to {store!r}: its folder {folder} cannot be created: "
                               f"{_files.os_reason(err)}; {_files.what_to_do(err, folder.parent)}")
            failed.errno = err.errno
            raise failed from err
        made.append(folder)
    return made


def _remove_empty(folders: Sequence[Path]) -> None:
    """Remove the folders a failed creation made (deepest first), each only if still empty."""
    for folder in reversed(folders):
        with contextlib.suppress(OSError):
            folder.rmdir()


def _create_store(meta: xr.Dataset, store: str, encoding: dict[str, Any]) -> None:
    """Write the new store's metadata, coordinates and eager variables: for a local path into a temporary beside it
    (``<name>.dfit-tmp-<pid>-<n>``), renamed in once complete, so a failure (a full disk, no permission) leaves
    nothing under the user's name; raises :class:`SaveError` naming ``store``."""
    if not _local(store):
        meta.to_zarr(store, mode="w-", compute=False, encoding=encoding, zarr_format=2)
        return
    path = Path(store)
    made = _check_new_store(path, store)
    tmp = _files.sibling(path, _files.TMP)
    try:  # (to_zarr holds the path's lock)
        _files.clean_leftovers(path)
        meta.to_zarr(tmp, mode="w-", compute=False, encoding=encoding, zarr_format=2)
        if path.is_dir():  # an empty folder the user made for it: replaced by the store
            path.rmdir()
        os.rename(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            _files.remove_ours(tmp)
        _remove_empty(made)
        failed = SaveError(f"could not write a sweep to {store!r}: {_files.os_reason(err)} (nothing was written "
                           f"there; the temporary {tmp.name} was removed); {_files.what_to_do(err, path.parent)}")
        failed.errno = err.errno
        raise failed from err


def _check_flag(fn: str, name: str, value: Any) -> None:
    """A switch given as anything but a bool is refused: ``"no"`` or ``"False"`` would read as True."""
    if not isinstance(value, (bool, np.bool_)):
        raise ScaleOutError(f"{fn}() needs {name} as True or False, got {value!r}")


def to_zarr(ds: xr.Dataset, store: str | os.PathLike[str], progress: bool = True) -> int:
    """Stream a lazy Dataset to a Zarr store chunk by chunk; resumable: a run that was interrupted (killed,
    out of time) continues from the chunks already written.

    Chunks run on the local threads or on the active ``dask.distributed`` client (then ``store`` must be a path
    every worker can write). Variable ``chunk_done`` (dim ``chunk``) records the chunks on disk, and
    ``chunk_checksum`` (dims ``chunk``, ``chunk_variable``) the checksum (:data:`CHUNK_KINDS`: CRC32C in a new
    store) of each chunk's blocks; open the result
    with :func:`open_sweep` (which checks them) or ``xarray.open_zarr(store)``.

    A new local store is created beside its path (``<name>.dfit-tmp-<pid>-<n>``) and renamed in once its metadata
    is written, so a failure there leaves nothing under the name; missing parent folders are created (and
    removed again if the creation fails). Calls on one local store (from threads) take turns in this process: a
    later one resumes what the earlier left, which is nothing when it completed.

    Parameters
    ----------
    ds : xarray.Dataset
        From ``sweep(..., chunks=N)`` or ``replay_batch(..., chunks=N)``.
    store : path
        A new directory, or one a previous ``to_zarr`` of the same sweep (same inputs and chunks) started. A
        ``file://`` URL is taken as its local path; another fsspec URL (``s3://bucket/sweep.zarr``, with
        ``s3fs`` installed) is written in place, chunk checksums included, without the temporary and the
        rename a local store is created with (object stores cannot rename a folder).
    progress : bool
        A progress bar over the chunks written (local scheduler).

    Returns
    -------
    int
        The chunks this call wrote (0 when the store was complete).

    Raises
    ------
    SaveRefusedError
        ``store`` is a file, a folder holding other files, or a folder dfit_nb never writes into (``.``, the home
        directory), or holds a NUL character, or starts with ``~`` (not expanded), or is not a path at all (``None``,
        a number); nothing is written.
    SaveError
        The store cannot be created (a parent that is a file, no permission, a full disk: nothing is left at
        ``store``), or a chunk could not be written (a full disk: the chunks on disk are kept, and the same call
        again writes the rest). ``errno`` is the cause's.
    ScaleOutError
        ``ds`` is not a lazy Dataset; ``store`` is a Zarr store of another sweep, or one ``to_zarr`` did not start; or
        a URL of a protocol that
        fsspec does not know, whose package is not installed (``s3fs``, ``gcsfs``), or that it cannot write
        (``http://``, ``https://``), or a ``file://`` URL of another host; nothing is written.

    Examples
    --------
    >>> import tempfile, os, xarray as xr
    >>> from dfit_nb.sim import presets, sweep
    >>> lazy = sweep({"m": [64], "k": [64], "n": [64]}, presets.get("scalesim_32"), ["os"], chunks=1,
    ...              per_op=False, dram_bw=[4.0, 8.0])
    >>> path = os.path.join(tempfile.mkdtemp(), "sweep.zarr")
    >>> to_zarr(lazy, path, progress=False), to_zarr(lazy, path, progress=False)
    (2, 0)
    >>> xr.open_zarr(path)["total_cycles"].values.tolist() == lazy["total_cycles"].values.tolist()
    True
    """
    _check_flag("to_zarr", "progress", progress)
    store = _store_name(store, writing=True)
    if not _local(store):
        return _stream(ds, store, progress)
    # one call per local store at a time in this process: a second call waits, then resumes what the first left
    # (nothing, when it completed); both creating the store raised "Directory not empty" in all but one
    with _files.path_lock(Path(store)):
        return _stream(ds, store, progress)


def _stream(ds: xr.Dataset, store: str, progress: bool) -> int:
    """:func:`to_zarr`'s work on ``store`` (as :func:`_store_name` returned it): create the store or resume it,
    then write the chunks not yet done; the chunks written."""
    import zarr

    lazy, lead, split = _lead(ds)
    source = ",".join(sorted(ds[v].data.name for v in lazy))
    grid = tuple(len(c) for c in split)
    n = int(np.prod(grid)) if grid else 1
    group = None
    if not _local(store) or Path(store).is_dir():  # else nothing to resume: a new store (a file there is refused)
        try:
            group = zarr.open_group(store, mode="r")
        except (FileNotFoundError, NotADirectoryError, zarr.errors.GroupNotFoundError):
            group = None
    sums: Sequence[str] = ()
    kind = "crc32"
    if group is not None and DONE in group:
        if group.attrs.get("dfit_source") != source:
            raise ScaleOutError(f"the Zarr store {store!r} holds another sweep (other inputs or chunks): resume it "
                                "with the Dataset that started it, or write this one to a new path")
        done = np.asarray(group[DONE][:], bool)
        if CHECKSUMS in group:  # (a store started before the checksums is resumed without them)
            sums = list(group.attrs.get(CHUNK_VARIABLES, ()))
            kind = str(group.attrs.get(_files.CHECKSUM_ATTR, "crc32"))  # resumed with the kind it started with
            if kind not in CHUNK_KINDS:
                raise ScaleOutError(f"the Zarr store {store!r} records checksums of kind {kind!r}, which this "
                                    "version of dfit_nb does not know; upgrade dfit_nb to resume it")
    elif group is not None:
        raise ScaleOutError(f"{store!r} is a Zarr store that to_zarr() did not start; write to a new path")
    else:
        sums, kind = lazy, _new_chunk_kind()
        meta = ds.assign({DONE: ("chunk", np.zeros(n, bool)),
                          CHECKSUMS: (("chunk", "chunk_variable"), np.zeros((n, len(lazy)), np.uint32))})
        meta = meta.copy(deep=False)  # each variable's attrs a copy: ``ds`` is not changed
        # the eager variables and coordinates are checksummed now, the lazy ones chunk by chunk by their tasks
        eager = {str(k): _files.checksum(v.values) for k, v in meta.variables.items()
                 if k not in lazy and k not in (DONE, CHECKSUMS)}
        meta.attrs.update({"dfit_source": source, CHUNK_VARIABLES: list(lazy), CHUNK_DIMS: list(lead),
                           CHUNK_SPLIT: json.dumps([list(map(int, c)) for c in split]),
                           EAGER_CHECKSUMS: json.dumps(eager, sort_keys=True), _files.CHECKSUM_ATTR: kind})
        meta.attrs[_files.ATTRS_CHECKSUM_ATTR] = json.dumps({"/": _files.attrs_checksums(meta.attrs)},
                                                            separators=(",", ":"), sort_keys=True)
        # metadata, coordinates and the eager variables now; the lazy ones chunk by chunk below
        # Zarr format 2: format 3 has no specification yet for the string coordinates (dataflow, pe labels) nor
        # for consolidated metadata (zarr warns of both)
        _create_store(meta, store, {DONE: {"chunks": (1,)}, CHECKSUMS: {"chunks": (1, max(len(lazy), 1))}})
        done = np.zeros(n, bool)
    starts = [np.concatenate([[0], np.cumsum(c)[:-1]]).astype(int) for c in split]
    tasks = []
    for number, index in enumerate(np.ndindex(*grid)):
        if done[number]:
            continue
        lead_slices = tuple(slice(int(s[i]), int(s[i]) + c[i]) for s, c, i in zip(starts, split, index, strict=True))
        values, regions = {}, {}
        for v in lazy:
            arr = ds[v].data
            values[v] = arr.blocks[(*index, *(0,) * (arr.ndim - len(lead)))]
            regions[v] = (*lead_slices, *(slice(None),) * (arr.ndim - len(lead)))
        tasks.append(dask.delayed(_write_block, pure=False)(store, number, regions, values, sums, kind,
                                                            dask_key_name=f"{WRITE_PREFIX}{number}-{source[-12:]}"))
    try:
        with contextlib.ExitStack() as stack:
            if progress and _client() is not None:
                print(dashboard(f"to_zarr of {len(tasks)} chunks"))  # the cluster's dashboard shows the tasks
            elif progress:
                stack.enter_context(_Bar(WRITE_PREFIX, "to_zarr"))
            dask.compute(*tasks)
    except OSError as err:
        if isinstance(err, DfitError):
            raise
        try:
            on_disk = f"{int(np.sum(zarr.open_group(store, mode='r')[DONE][:]))} of {n} chunks are"
        except Exception:
            on_disk = "the chunks written are"
        folder = Path(store).parent if _local(store) else Path(".")
        failed = SaveError(f"could not write the sweep to {store!r}: {_files.os_reason(err)}; {on_disk} on disk and "
                           f"kept: {_files.what_to_do(err, folder)}, then call to_zarr() again with the same Dataset "
                           "and path to write the rest (or remove the folder to give up the sweep)")
        failed.errno = err.errno
        raise failed from err
    return len(tasks)


def open_sweep(store: str | os.PathLike[str], check: bool = True) -> xr.Dataset:
    """Open a sweep store written by :func:`to_zarr`, lazily, checked against the checksums its writes recorded.

    At open, each eager variable and coordinate is checked against :data:`EAGER_CHECKSUMS` and the root
    attributes against theirs; each lazy variable's blocks are checked as they are read (every ``.load()``,
    ``.compute()`` or ``.values``), each against the checksum its chunk's task recorded in :data:`CHECKSUMS` (of
    the store's kind, :data:`CHUNK_KINDS`), in the Dask task that reads it: no second pass over the store and no
    second task per block. A store written before the checksums opens unchecked. The returned Dataset is
    ``xarray.open_zarr(store)`` without the bookkeeping (:data:`CHECKSUMS` and the ``dfit_`` checksum
    attributes; :data:`DONE` stays), one Dask block per chunk written.

    Parameters
    ----------
    store : path
        A store :func:`to_zarr` completed: a local path, a ``file://`` URL, or another fsspec URL (as
        :func:`to_zarr` takes it; ``http(s)://`` too, with fsspec's HTTP packages installed).
    check : bool
        Compare the data with the checksums (``False``: open only, as ``xarray.open_zarr`` does).

    Raises
    ------
    FileNotFoundError
        Nothing at ``store``.
    LoadRefusedError
        ``store`` is a FIFO, a socket or a device, or a store holding one, or holds a NUL character, or is not a path
        (``None``, a number); nothing is opened.
    ScaleOutError
        ``store`` is not a store :func:`to_zarr` wrote, or not all its chunks are written (resume it first); or a
        URL fsspec cannot open here (an unknown protocol, or its package not installed).
    IntegrityError
        An eager variable or a root attribute differs from its checksum (at open), or a chunk of a lazy variable
        does (when it is read); the message names the store, the variable and the chunk, or the attribute.

    Examples
    --------
    >>> import tempfile, os
    >>> from dfit_nb.sim import presets, sweep
    >>> lazy = sweep({"m": [64], "k": [64], "n": [64]}, presets.get("scalesim_32"), ["os"], chunks=1,
    ...              per_op=False, dram_bw=[4.0, 8.0])
    >>> path = os.path.join(tempfile.mkdtemp(), "sweep.zarr")
    >>> to_zarr(lazy, path, progress=False)
    2
    >>> open_sweep(path)["total_cycles"].values.tolist() == lazy["total_cycles"].values.tolist()
    True
    """
    import zarr

    _check_flag("open_sweep", "check", check)
    name = _store_name(store, writing=False)
    if _local(name):
        if not os.path.lexists(name):
            raise FileNotFoundError(f"no sweep store at {name!r}")
        special = _files.special_file(name)
        if special:
            raise LoadRefusedError(f"refusing to open {name!r}: it is {special}, not a Zarr store; give the path of "
                                   "a store to_zarr() wrote")
        inside = _files.special_inside(name) if os.path.isdir(name) else None
        if inside is not None:  # zarr would open it as a chunk or a metadata file, and block
            raise LoadRefusedError(f"refusing to open {name!r}: {inside[0]} inside it is {inside[1]}, not a file "
                                   "to_zarr() writes; write the sweep again, or open a good copy")
    try:
        group = zarr.open_group(name, mode="r")
    except Exception as err:
        raise ScaleOutError(f"{name!r} is not a sweep store to_zarr() wrote: {err}") from err
    if DONE not in group:
        raise ScaleOutError(f"{name!r} is a Zarr store that to_zarr() did not write (no {DONE!r} variable); open it "
                            "with xarray.open_zarr")
    done = np.asarray(group[DONE][:], bool)
    if not done.all():
        raise ScaleOutError(f"{name!r} holds {int(done.sum())} of {done.size} chunks of its sweep: call to_zarr() "
                            "again with the Dataset that started it to write the rest, then open it")
    attrs = dict(group.attrs)
    if check and _files.CHECKSUM_ATTR in attrs:
        ds = _checked_sweep(group, attrs, name)
    else:
        ds = xr.open_zarr(name)
    for key in (_files.CHECKSUM_ATTR, _files.ATTRS_CHECKSUM_ATTR, EAGER_CHECKSUMS, CHUNK_VARIABLES, CHUNK_DIMS,
                CHUNK_SPLIT):
        ds.attrs.pop(key, None)
    return ds.drop_vars([CHECKSUMS], errors="ignore")


_SWEEP_DAMAGED = ("the store changed after to_zarr() wrote it (a damaged disk or copy, an edited or deleted chunk); "
                  "write the sweep again, or open a good copy")


def _checked_sweep(group: Any, attrs: dict[str, Any], store: str) -> xr.Dataset:
    """Check a sweep store's root attributes and eager variables now, and return it opened as ``xarray.open_zarr``
    does, with each lazy variable's blocks checked as they are read (see :func:`open_sweep`); raise
    :class:`IntegrityError`.

    The store is opened once in two parts, each variable in one: the eager ones and the coordinates as
    ``open_zarr`` opens them, the lazy ones lazily indexed (:class:`_CheckedBlocks` reads them)."""
    kind = attrs[_files.CHECKSUM_ATTR]
    if kind not in CHUNK_KINDS:
        raise IntegrityError(f"{store!r} records checksums of kind {kind!r}, which this version of dfit_nb does not "
                             "know; upgrade dfit_nb to open it")
    _files.verify_attrs([("/", attrs)], attrs.get(_files.ATTRS_CHECKSUM_ATTR), repr(store), "sweep store",
                        "refusing to open")
    try:
        lazy = [str(v) for v in attrs[CHUNK_VARIABLES]]
        split = tuple(tuple(int(c) for c in axis) for axis in json.loads(attrs[CHUNK_SPLIT]))
        eager = json.loads(attrs[EAGER_CHECKSUMS])
        sums = np.asarray(group[CHECKSUMS][:], np.uint32)
    except (KeyError, TypeError, ValueError) as err:
        raise IntegrityError(f"refusing to open {store!r}: its chunk checksums ({CHECKSUMS!r} and the "
                             f"dfit_chunk_* attributes) are missing or unreadable ({err!r}); {_SWEEP_DAMAGED}"
                             ) from err
    ds = xr.open_zarr(store, drop_variables=lazy)
    # the lazy variables' sources: xarray's lazily indexed (and decoded) arrays, never cached, read block by block
    sources = xr.open_dataset(store, engine="zarr", chunks=None, cache=False, create_default_indexes=False,
                              drop_variables=[k for k in ds.variables if k not in ds.dims])
    fixed = {name: var for name, var in ds.variables.items() if name not in lazy and name not in (DONE, CHECKSUMS)}
    values = dict(zip(fixed, dask.compute(*(var.data for var in fixed.values())), strict=True))  # one pass
    for name in fixed:
        found, saved = _files.checksum(np.asarray(values[name])), eager.get(str(name))
        if saved is None:
            raise IntegrityError(f"refusing to open {store!r}: its variable {name!r} was not written by to_zarr() "
                                 f"(it has no checksum); {_SWEEP_DAMAGED}")
        if found != saved:
            raise IntegrityError(f"refusing to open {store!r}: its variable {name!r} reads back with checksum "
                                 f"{found}, but was written with {saved!r}; {_SWEEP_DAMAGED}")
    missing = sorted((set(eager) | set(lazy)) - {str(k) for k in (*ds.variables, *sources.variables)})
    if missing:
        raise IntegrityError(f"refusing to open {store!r}: its variable {missing[0]!r}, written by to_zarr(), is "
                             f"missing; {_SWEEP_DAMAGED}")
    grid = tuple(len(c) for c in split)
    if sums.shape != (int(np.prod(grid)), len(lazy)):
        raise IntegrityError(f"refusing to open {store!r}: its {CHECKSUMS!r} has shape {sums.shape}, not one row per "
                             f"chunk and one column per variable {(int(np.prod(grid)), len(lazy))}; {_SWEEP_DAMAGED}")
    # a chunk's block along the leading dims: its slices, and from its first indices the chunk's number
    lead = [[slice(int(a), int(a + n)) for a, n in zip(np.cumsum((0, *axis)), axis, strict=False)] for axis in split]
    numbers = {tuple(s.start for s in index): int(number)
               for number, index in enumerate(itertools.product(*lead))}
    token = uuid.uuid4().hex  # names of this open's own (as xarray's hold the files' mtimes): a store changed on
    # disk between two opens is read again, never taken from results Dask holds under the old names
    checked = {}
    for column, name in enumerate(lazy):
        var = sources[name].variable
        # one block per chunk written: the leading dims as the writes split them, the rest whole (as Zarr's chunks
        # are); each block one task that reads it and checks it, no second task per block
        reader = _CheckedBlocks(var, store, name, sums[:, column], numbers, kind)
        rest = tuple(slice(0, n) for n in var.shape[len(split):])
        key = f"open_sweep-{name}-{token}"
        layer = {(key, *where, *(0,) * len(rest)): (operator.getitem, reader, (*index, *rest))
                 for where, index in zip(itertools.product(*(range(len(axis)) for axis in split)),
                                         itertools.product(*lead), strict=True)}
        data = da.Array(HighLevelGraph.from_collections(key, layer), key,
                        split + tuple((n,) for n in var.shape[len(split):]),
                        meta=np.empty((0,) * var.ndim, var.dtype))
        checked[name] = xr.Variable(var.dims, data, var.attrs, var.encoding)
    ds = ds.assign(checked)
    order = [k for k in group.array_keys() if k in ds.data_vars]  # as open_zarr orders them
    if list(ds.data_vars) != order and sorted(order) == sorted(ds.data_vars):
        ordered = ds[order]
        ds = ordered.assign_coords({k: v for k, v in ds.coords.items() if k not in ordered.coords})
    return ds


class _CheckedBlocks:
    """A lazy variable of a sweep store whose every block is checked against its chunk's checksum as it is read,
    in the task that reads it (each task of a lazy variable's graph in :func:`open_sweep` indexes it once).

    ``source``: the variable as xarray reads it, lazily and decoded; ``sums``: its column of :data:`CHECKSUMS`;
    ``numbers``: a chunk's first indices along the leading dims -> its number."""

    def __init__(self, source: xr.Variable, store: str, name: str, sums: np.ndarray,
                 numbers: dict[tuple[int, ...], int], kind: str) -> None:
        self.source, self.store, self.name, self.sums, self.kind = source, store, name, sums, kind
        self.shape, self.dtype, self.ndim = source.shape, source.dtype, source.ndim
        self.numbers, self.lead = numbers, len(next(iter(numbers)))

    def __getitem__(self, key: tuple[slice, ...]) -> np.ndarray:
        block = np.asarray(self.source[key].values)
        try:  # the block's first indices: which chunk wrote it (its task asks for one whole chunk's block)
            number = self.numbers[tuple(k.start for k in key[:self.lead])]
        except (KeyError, AttributeError, TypeError):
            raise IntegrityError(f"refusing to read {self.store!r}: {key!r} of its variable {self.name!r} is not "
                                 "one chunk to_zarr() wrote, so it cannot be checked; read it through the Dataset "
                                 "open_sweep() returns, or with check=False") from None
        found, saved = _crc(block, self.kind), int(self.sums[number])
        if found != saved:
            raise IntegrityError(f"refusing to read {self.store!r}: chunk {number} of its variable {self.name!r} "
                                 f"reads back with checksum {self.kind}:{found:08x}, but was written with "
                                 f"{self.kind}:{saved:08x}; {_SWEEP_DAMAGED}")
        return block
