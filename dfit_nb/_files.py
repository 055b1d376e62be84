"""Results on disk: an ``xarray.DataTree`` written atomically as netCDF4 (h5netcdf) or Zarr, read back checked.

Shared by :class:`dfit_nb.Trace` and :class:`dfit_nb.Run`; no pickle, no code runs on load.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import xarray as xr

from .errors import DfitError


def save_tree(tree: xr.DataTree, path: str | os.PathLike[str]) -> Path:
    """Write ``tree`` to ``path`` (``.zarr``: Zarr; otherwise netCDF4 via h5netcdf).

    The file is written next to ``path`` and moved into place only once complete, so a failure never
    leaves a half-written result behind (nor replaces a good one).
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        if path.suffix == ".zarr":
            tree.to_zarr(tmp, consolidated=False)
        else:
            tree.to_netcdf(tmp, engine="h5netcdf")
        if path.is_dir():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()
    return path


def open_tree(path: str | os.PathLike[str], what: str, parts: Sequence[str],
              foreign: Mapping[str, str] | None = None) -> xr.DataTree:
    """Read a tree written by :func:`save_tree`, loaded into memory, with the groups ``parts``.

    Errors name the file and say it is not a dfit_nb ``what`` (a trace, a run); when groups are missing
    and the file has a group of ``foreign`` (a group that marks another kind of result), its hint is added.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no {what} at {path}")
    try:
        if path.suffix == ".zarr":
            tree = xr.open_datatree(path, engine="zarr", consolidated=False)
        else:
            tree = xr.open_datatree(path, engine="h5netcdf")
        tree = tree.load()
    except Exception as err:
        raise DfitError(f"{path} is not a dfit_nb {what} file: {err}") from err
    missing = [p for p in parts if p not in tree.children]
    if missing:
        hints = [f" ({hint})" for group, hint in (foreign or {}).items() if group in tree.children]
        raise DfitError(f"{path} is not a dfit_nb {what}: groups {missing} are missing{''.join(hints)}")
    return tree
