"""The on-disk format of a saved result: the stamp a save writes into a tree's root, and its checks on load.

What a file records about itself: :data:`FORMAT_VERSION` under :data:`FORMAT_ATTR` (its marker: a file with one is
dfit_nb's), a CRC32 of every variable's values (:data:`CHECKSUM_ATTR`) and of every attribute of every group
(:data:`ATTRS_CHECKSUM_ATTR`). :func:`read_markers` reads the stamp from a file's metadata alone, :func:`check_format`
refuses a newer major format, :func:`verify_checksums` and :func:`verify_attrs` refuse a changed value. The saves
and loads that use them are :mod:`dfit_nb._files`; sweep stores (:mod:`dfit_nb.sim.scale`) use the same checksums.
"""

from __future__ import annotations

import json
import os
import threading
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from ._version import __version__
from .errors import FormatVersionError, IntegrityError

#: the format of the files this version writes, ``"MAJOR.MINOR"``: a new minor only adds what older readers
#: ignore; a new major is refused by older readers
FORMAT_VERSION = "1.2"  # 1.1: the attributes' checksums (:data:`ATTRS_CHECKSUM_ATTR`); 1.2: a trace's operands
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
CHECKSUM_KIND = "crc32"
#: the root attribute holding the checksum of every attribute of every group (:func:`attrs_checksums`), as JSON:
#: ``{"<group path>": {"<attribute>": "crc32:<8 hex digits>"}}``; required from format 1.1 on
ATTRS_CHECKSUM_ATTR = "dfit_attrs_checksum"
#: root attributes of the file rather than of the result, checked on their own (the format, the checksum kind)
#: and so not covered by :data:`ATTRS_CHECKSUM_ATTR`: a newer minor format may be written into them
_FILE_ATTRS = frozenset((FORMAT_ATTR, CHECKSUM_ATTR, ATTRS_CHECKSUM_ATTR))
#: Held around every call into the netCDF-C or HDF5 libraries (xarray's netCDF4 engine, h5py), from any thread.
#: Neither library is thread-safe as built in the wheels: two threads saving or loading netCDF files, even
#: different ones, crashed the process (SIGSEGV or SIGABRT inside netCDF-C; plain xarray does the same). h5py
#: serialises its own calls but not against netCDF4's, which share the one HDF5 library, so it is held for h5py's
#: reads too. Re-entrant: a load reads the markers (h5py) and then the file (netCDF4) under one hold.
HDF5_LOCK = threading.RLock()
#: what a load says of a file whose values differ from their checksums or do not decode at all
DAMAGED = ("the file changed after dfit_nb saved it (a damaged disk, copy or download, an edited or deleted "
           "chunk); save it again, or load a good copy")


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
    return f"{CHECKSUM_KIND}:{crc:08x}"


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
    return f"{CHECKSUM_KIND}:{zlib.crc32(_canonical(value).encode('utf-8', 'surrogatepass')):08x}"


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


def own_variables(tree: xr.DataTree) -> Iterator[tuple[xr.DataTree, str, xr.Variable]]:
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
    if kind is not None and kind != CHECKSUM_KIND:
        raise IntegrityError(f"{path} records checksums of kind {kind!r}, which this version of dfit_nb does not "
                             f"know (it writes {CHECKSUM_KIND!r}); upgrade dfit_nb to load this {what}")
    damaged = DAMAGED
    saved_attrs = tree.attrs.pop(ATTRS_CHECKSUM_ATTR, None)
    if saved_attrs is not None or _format_minor(tree.attrs.get(FORMAT_ATTR)) >= (1, 1):
        verify_attrs([(node.path, node.attrs) for node in tree.subtree], saved_attrs, path, what)
    for node, name, var in own_variables(tree):
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


def read_markers(path: Path) -> dict[str, Any] | None:
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


def check_format(path: Path, markers: Mapping[str, Any], what: str) -> None:
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
