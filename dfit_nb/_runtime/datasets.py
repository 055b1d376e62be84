"""Datasets built from parts already known to be consistent: the one place dfit_nb uses xarray's internals.

The public constructor (``xr.Dataset(data, coords=...)``) checks and aligns every variable against every other.
Where a Dataset is built on every call of the model (``cost()``'s result, a replay's tables with their bottleneck
classes), its variables match by construction, so :func:`consistent` hands them to xarray's own constructor of
an already-consistent Dataset (``Dataset._construct_direct``, the one xarray's methods use). It is private API:
each caller keeps the public constructor as its fallback for an xarray whose internals moved, and the tests check
that both give identical Datasets and that the direct path is taken. ``python benchmarks/bench_dataset_build.py``
prints what the public constructor costs beside this helper.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
import xarray as xr


def consistent(variables: Mapping[str, Any], coord_names: set[str], sizes: Mapping[str, int],
               attrs: dict[str, Any], indexes: Mapping[str, Any]) -> xr.Dataset:
    """The Dataset of ``variables`` (name -> ``xr.Variable``; those in ``coord_names`` are coordinates) whose
    dims already have ``sizes`` and whose indexed coordinates have ``indexes``, without the public constructor's
    alignment. The caller guarantees the consistency; an xarray without this constructor raises
    ``AttributeError``, the caller's cue to build the Dataset publicly."""
    return xr.Dataset._construct_direct(dict(variables), set(coord_names), dict(sizes), attrs, dict(indexes))


def assemble(data: Mapping[str, tuple[tuple[str, ...], np.ndarray, dict[str, str]]],
             index: Mapping[str, np.ndarray], attrs: dict[str, Any]) -> xr.Dataset:
    """An ``xr.Dataset`` of ``data`` (name -> (dims, array, attrs)) over the dimension coordinates ``index``:
    shapes checked once per (dims, shape), then :func:`consistent`; the public constructor where this xarray's
    internals refuse (``tests/sim/test_cost.py`` checks both are identical, and that the direct path is taken).

    >>> import numpy as np
    >>> ds = assemble({"a": (("op",), np.arange(3.0), {"units": "1"})}, {"op": np.arange(3)}, {})
    >>> ds.identical(assemble_public({"a": (("op",), np.arange(3.0), {"units": "1"})}, {"op": np.arange(3)}, {}))
    True
    """
    try:
        return _assemble_direct(data, index, attrs)
    except (AttributeError, TypeError, ValueError):  # an xarray whose internals moved: the public path
        return assemble_public(data, index, attrs)


def assemble_public(data: Mapping[str, tuple[tuple[str, ...], np.ndarray, dict[str, str]]],
                    index: Mapping[str, np.ndarray], attrs: dict[str, Any]) -> xr.Dataset:
    """:func:`assemble` through the public ``xr.Dataset`` constructor (the reference the fast path must equal)."""
    return xr.Dataset(dict(data), coords=dict(index), attrs=attrs)


def _assemble_direct(data: Mapping[str, tuple[tuple[str, ...], np.ndarray, dict[str, str]]],
                     index: Mapping[str, np.ndarray], attrs: dict[str, Any]) -> xr.Dataset:
    sizes: dict[str, int] = {}
    variables: dict[str, Any] = {}
    checked: set[tuple[tuple[str, ...], tuple[int, ...]]] = set()  # most variables share dims and shape
    direct = _slots_known()
    for name, (dims, arr, var_attrs) in data.items():
        dims = tuple(dims)
        if (dims, arr.shape) not in checked:
            if arr.ndim != len(dims):
                raise ValueError(f"{name}: {arr.ndim} dims, named {dims}")
            for dim, size in zip(dims, arr.shape, strict=True):
                if sizes.setdefault(dim, size) != size:
                    raise ValueError(f"{name}: {dim} has {size} values, not {sizes[dim]}")
            checked.add((dims, arr.shape))
        if direct and type(arr) is np.ndarray:
            # xr.Variable(dims, arr, dict(var_attrs), fastpath=True) with its slots filled directly: the shapes
            # were checked above, and the constructor's fast path would store this array as is
            var = object.__new__(xr.Variable)
            var._dims, var._data, var._attrs, var._encoding = dims, arr, dict(var_attrs) or None, None
            variables[name] = var
        else:  # anything else than a NumPy array, or an xarray whose Variable has other slots
            variables[name] = xr.Variable(dims, arr, dict(var_attrs), fastpath=True)
    indexes: dict[str, Any] = {}
    for name, values in index.items():
        if sizes.setdefault(name, len(values)) != len(values):
            raise ValueError(f"coordinate {name}: {len(values)} values, not {sizes[name]}")
        if _is_range(values):
            indexes[name], variables[name] = _range_index(name, len(values)), _range_variable(name, len(values))
        else:
            indexes[name] = xr.indexes.PandasIndex(values, name)
            variables[name] = indexes[name].create_variables()[name]
    return consistent(variables, set(index), sizes, attrs, indexes)


def _is_range(values: Any) -> bool:
    """Whether ``values`` is ``0, 1, ..., n - 1`` as int64 (the op coordinate of a table without one)."""
    return (type(values) is np.ndarray and values.dtype == np.int64 and values.ndim == 1
            and np.array_equal(values, _range(len(values))))


@functools.lru_cache(maxsize=64)
def _range(n: int) -> np.ndarray:
    out = np.arange(n, dtype=np.int64)
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=64)
def _range_index(name: str, n: int) -> Any:
    """The index of ``0 .. n - 1`` named ``name``, built once: xarray's indexes are immutable and shared between
    Datasets (a shallow copy shares them too); each Dataset still gets its own coordinate variable."""
    return xr.indexes.PandasIndex(_range(n), name)


@functools.lru_cache(maxsize=64)
def _range_template(name: str, n: int) -> xr.IndexVariable:
    """The coordinate variable of :func:`_range_index`, built once (its data, the index's immutable adapter, is
    what every Dataset's own copy shares)."""
    return _range_index(name, n).create_variables()[name]


def _range_variable(name: str, n: int) -> xr.IndexVariable:
    """A coordinate variable of ``0 .. n - 1`` of its own (its attrs and encoding are its own; the data, which
    xarray never lets anyone modify, is shared with every other)."""
    template = _range_template(name, n)
    if not _slots_known() or template._attrs is not None or template._encoding is not None:
        return template.copy(deep=False)
    var = object.__new__(xr.IndexVariable)
    var._dims, var._data, var._attrs, var._encoding = template._dims, template._data, None, None
    return var


#: the slots of an ``xr.Variable`` that :func:`_assemble_direct` fills (every slot it has in the xarray this was
#: written for)
_VARIABLE_SLOTS = frozenset({"_attrs", "_data", "_dims", "_encoding"})


@functools.cache
def _slots_known() -> bool:
    """Whether this xarray's ``Variable`` and ``IndexVariable`` have exactly the slots :func:`_assemble_direct` and
    :func:`_range_variable` fill (and no ``__dict__``)."""
    for kind in (xr.Variable, xr.IndexVariable):
        slots = {s for cls in kind.__mro__ for s in getattr(cls, "__slots__", ())}
        if slots != _VARIABLE_SLOTS or hasattr(kind(("x",), np.zeros(1)), "__dict__"):
            return False
    return True
