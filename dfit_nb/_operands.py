"""The shapes and dtypes of every op's inputs and outputs as data: the ``trace.operands`` Dataset.

One row (dim ``operand``) per array an op reads or writes, grouped by op (its inputs in order, then its outputs in
order: a contiguous ragged array), each with the op's id, its ``role`` and ``position``, its ``dtype`` and its
``shape`` (dims padded with -1 past its ``rank``; rank -1: a value that is not an array, such as an effect token).
The capture builds it (:func:`operands_dataset`); the cost model, the replay's preparation, the kernel rules and
the precision study read it (:func:`input_table`, :func:`reduced_row`).

Text such as ``float32[2,3] int32[]`` is only a display: :func:`text` writes it (the ops table's ``in_shapes`` and
``out_shapes`` columns, messages), and :func:`parse` reads it back in the two places text still comes in: traces
saved before the Dataset existed (:func:`from_text`) and op tables a user writes with an ``in_shapes`` column.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import xarray as xr

from . import _dtypes
from .errors import DfitError

#: one operand: its dtype name and its dims (None: a value that is not an array, named by its type)
Operand = tuple[str, "tuple[int, ...] | None"]

#: (units, description) of every variable of ``trace.operands``: the data contract users read
OPERAND_VARS: dict[str, tuple[str, str]] = {
    "op": ("", "id of the op (trace.ops' op coordinate) that reads or writes the array"),
    "role": ("", "input | output: which side of the op the array is on"),
    "position": ("", "index among the op's inputs or outputs (dot_general and conv inputs: 0 lhs, 1 rhs)"),
    "dtype": ("", "dtype name (NumPy or ml_dtypes; JAX's float0 and key<impl>), or the type of a value that is "
                  "not an array (a token)"),
    "rank": ("1", "number of dimensions; -1 for a value that is not an array"),
    "shape": ("1", "the dimensions in order, -1 past the array's rank"),
}
ROLES = ("input", "output")


class ShapeTextError(DfitError, ValueError):
    """A shapes text (``float32[2,3] int32[]``) is malformed."""


def text(operands: Iterable[Operand]) -> str:
    """The display text of some operands: ``dtype[d0,d1]`` each, space-separated (a non-array value by its type).

    >>> text([("float32", (2, 3)), ("int32", ()), ("AbstractToken", None)])
    'float32[2,3] int32[] AbstractToken'
    """
    return " ".join(dtype if dims is None else f"{dtype}[{','.join(map(str, dims))}]" for dtype, dims in operands)


def parse(shapes: str, label: str = "shapes") -> list[Operand]:
    """The operands a display text (:func:`text`) names: ``(dtype, dims)`` each, dims None for a bare name.

    Raises :class:`ShapeTextError` naming ``label`` (a column and row), the token and what is valid when a token
    is not ``dtype[d0,d1,...]`` with whole non-negative dims, or a bare type name.

    >>> parse("float32[2,3] int32[] AbstractToken")
    [('float32', (2, 3)), ('int32', ()), ('AbstractToken', None)]
    >>> parse("bfloat16[16, 32]")
    [('bfloat16', (16, 32))]
    >>> parse("float32[2,x]", "ops column 'in_shapes' row 4")
    Traceback (most recent call last):
    ...
    dfit_nb._operands.ShapeTextError: ops column 'in_shapes' row 4: 'float32[2,x]' is not a shape; valid: ...
    """
    out: list[Operand] = []
    for token in _tokens(str(shapes)):
        name, bracket, rest = token.partition("[")
        dims: tuple[int, ...] | None = None
        ok = bool(name) and (name[0].isalpha() or name[0] == "_") and "]" not in name
        if bracket:
            body, close, tail = rest.partition("]")
            parts = [p.strip() for p in body.split(",")] if body.strip() else []
            ok = ok and bool(close) and not tail and all(p.isascii() and p.isdigit() for p in parts)
            dims = tuple(int(p) for p in parts) if ok else None
        if not ok:
            raise ShapeTextError(f"{label}: {token!r} is not a shape; valid: space-separated dtype[d0,d1,...] "
                                 "tokens with whole non-negative dims, such as 'float32[2,3] int32[]'")
        out.append((name, dims))
    return out


def _tokens(shapes: str) -> list[str]:
    """``shapes`` split at the spaces outside brackets (``float32[2, 3]`` is one token)."""
    tokens, current, depth = [], "", 0
    for ch in shapes:
        if ch.isspace() and depth <= 0:
            if current:
                tokens.append(current)
            current = ""
            continue
        depth += (ch == "[") - (ch == "]")
        current += ch
    return [*tokens, current] if current else tokens


def operands_dataset(op: Sequence[int], inputs: Sequence[Sequence[Operand]],
                     outputs: Sequence[Sequence[Operand]]) -> xr.Dataset:
    """The ``trace.operands`` Dataset of ops ``op`` (ids) with ``inputs`` and ``outputs`` each.

    >>> ds = operands_dataset([0, 1], [[("float32", (4, 8)), ("float32", (8, 2))], []], [[("float32", (4, 2))],
    ...                       [("int32", ())]])
    >>> ds["op"].values.tolist(), ds["role"].values.tolist(), ds["shape"].values.tolist()
    ([0, 0, 0, 1], ['input', 'input', 'output', 'output'], [[4, 8], [8, 2], [4, 2], [-1, -1]])
    """
    rows = [(o, role, p, arr) for o, ins, outs in zip(op, inputs, outputs, strict=True)
            for role, arrays in zip(ROLES, (ins, outs), strict=True) for p, arr in enumerate(arrays)]
    rank = np.array([-1 if arr[1] is None else len(arr[1]) for *_, arr in rows], np.int64)
    shape = np.full((len(rows), int(rank.max(initial=0))), -1, np.int64)
    for i, (*_, (_, dims)) in enumerate(rows):
        if dims:
            shape[i, :len(dims)] = dims
    columns = {
        "op": np.array([r[0] for r in rows], np.int64),
        "role": np.array([r[1] for r in rows], dtype=object),
        "position": np.array([r[2] for r in rows], np.int64),
        "dtype": np.array([str(r[3][0]) for r in rows], dtype=object),
        "rank": rank,
    }
    data = {name: xr.DataArray(values, dims=("operand",), attrs=_attrs(name)) for name, values in columns.items()}
    data["shape"] = xr.DataArray(shape, dims=("operand", "axis"), attrs=_attrs("shape"))
    return xr.Dataset(data, coords={"operand": np.arange(len(rows), dtype=np.int64)},
                      attrs={"description": "the inputs and outputs of every op, grouped by op (inputs, then "
                                            "outputs, each in order)"})


def _attrs(name: str) -> dict[str, str]:
    units, description = OPERAND_VARS[name]
    return {"description": description, **({"units": units} if units else {})}


def from_text(op: Sequence[int], in_shapes: Sequence[str], out_shapes: Sequence[str],
              label: str = "ops column") -> xr.Dataset:
    """The ``trace.operands`` Dataset read from ``in_shapes`` / ``out_shapes`` display texts (a trace saved before
    the Dataset existed); a malformed text is refused naming ``label``, the column and the row.

    >>> from_text([3], ["float32[2] float32[2]"], ["float32[2]"])["position"].values.tolist()
    [0, 1, 0]
    """
    ins = [parse(s, f"{label} 'in_shapes' row {i}") for i, s in enumerate(in_shapes)]
    outs = [parse(s, f"{label} 'out_shapes' row {i}") for i, s in enumerate(out_shapes)]
    return operands_dataset(op, ins, outs)


def of_ops(operands: xr.Dataset, op: Sequence[int]) -> tuple[list[list[Operand]], list[list[Operand]]]:
    """``(inputs, outputs)`` of each op ``op`` as :data:`Operand` lists, read from ``operands``.

    >>> ds = operands_dataset([0, 1], [[("float32", (2,))], []], [[("float32", (2,))], [("int32", ())]])
    >>> of_ops(ds, [1, 0])
    ([[], [('float32', (2,))]], [[('int32', ())], [('float32', (2,))]])
    """
    index = {int(o): i for i, o in enumerate(op)}
    ins: list[list[Operand]] = [[] for _ in index]
    outs: list[list[Operand]] = [[] for _ in index]
    rows = np.flatnonzero(np.isin(operands["op"].values, list(index)))
    rank, shape = operands["rank"].values[rows].tolist(), operands["shape"].values[rows].tolist()
    for o, role, dtype, r, dims in zip(operands["op"].values[rows].tolist(), operands["role"].values[rows],
                                       operands["dtype"].values[rows], rank, shape, strict=True):
        (ins if role == "input" else outs)[index[o]].append((str(dtype), None if r < 0 else tuple(dims[:r])))
    return ins, outs


def text_columns(operands: xr.Dataset, op: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The display columns ``in_shapes`` and ``out_shapes`` (object arrays of :func:`text`) of ops ``op``.

    >>> ds = operands_dataset([0], [[("float32", (2, 3))]], [[("float32", (3,))]])
    >>> [c.tolist() for c in text_columns(ds, [0])]
    [['float32[2,3]'], ['float32[3]']]
    """
    ins, outs = of_ops(operands, op)
    return (np.array([text(x) for x in ins] + [""], dtype=object)[:-1],
            np.array([text(x) for x in outs] + [""], dtype=object)[:-1])


def elements(operands: xr.Dataset) -> np.ndarray:
    """Elements of each operand (float64: products of large dims stay finite; 1 for a rank-0 array, 0 for a
    value that is not an array).

    >>> elements(operands_dataset([0], [[("float32", (2, 3)), ("int32", ()), ("AbstractToken", None)]], [[]])).tolist()
    [6.0, 1.0, 0.0]
    """
    rank = operands["rank"].values
    shape = operands["shape"].values.astype(np.float64)
    return np.where(rank >= 0, np.prod(np.where(shape >= 0, shape, 1.0), axis=1), 0.0)


def input_table(operands: xr.Dataset, op: Sequence[int], default_itemsize: float, with_elements: bool = False
                ) -> tuple[np.ndarray, ...]:
    """``(start, nbytes)``: the bytes of every input of the ops ``op`` (ids, in that order), a ragged array: op
    ``i``'s inputs are ``nbytes[start[i]:start[i + 1]]`` in position order. An array whose dtype has no known
    width (JAX's key and float0 types) counts ``default_itemsize`` bytes per element; a value that is not an array
    counts 0. ``with_elements``: ``(start, nbytes, elements)``, each input's element count beside its bytes.

    >>> ds = operands_dataset([5, 7], [[("float32", (2, 3)), ("bfloat16", (4,))], [("int32", ())]],
    ...                       [[("float32", (2,))], []])
    >>> [x.tolist() for x in input_table(ds, [7, 5], 4.0)]
    [[0, 1, 3], [4.0, 24.0, 8.0]]
    >>> input_table(ds, [7, 5], 4.0, with_elements=True)[2].tolist()
    [1.0, 6.0, 4.0]
    """
    op = np.asarray(op, np.int64).reshape(-1)
    is_input = operands["role"].values == "input"
    owner = operands["op"].values[is_input]
    position = operands["position"].values[is_input]
    row = np.full(int(max(owner.max(initial=-1), op.max(initial=-1))) + 1, -1, np.int64)
    row[op] = np.arange(len(op))
    mine = row[owner] >= 0
    order = np.lexsort((position[mine], row[owner[mine]]))
    dtypes = operands["dtype"].values[is_input][mine][order]
    names, inverse = np.unique(dtypes.astype(str), return_inverse=True)
    sizes = np.array([_dtypes.itemsize(n) or default_itemsize for n in names])
    elems = elements(operands.isel(operand=np.flatnonzero(is_input)[mine][order]))
    nbytes = elems * sizes[inverse.reshape(-1)]
    counts = np.bincount(row[owner[mine]], minlength=len(op))
    start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return (start, nbytes, elems) if with_elements else (start, nbytes)


def input_bytes_at(start: np.ndarray, nbytes: np.ndarray, row: np.ndarray, position: np.ndarray) -> np.ndarray:
    """Bytes of input ``position`` of each op ``row`` in an :func:`input_table` (0 where it has no such input).

    >>> input_bytes_at(np.array([0, 2, 3]), np.array([4.0, 24.0, 8.0]), np.array([0, 0, 1, 1]), np.array([1, 2, 0, 1]))
    array([24.,  0.,  8.,  0.])
    """
    row, position = np.asarray(row, np.int64), np.asarray(position, np.int64)
    have = position < start[row + 1] - start[row]
    return np.where(have, nbytes[np.where(have, start[row] + position, 0)] if len(nbytes) else 0.0, 0.0)


def reduced_row(operands: xr.Dataset, op: Sequence[int]) -> np.ndarray:
    """Per op ``op`` (ids, in order), the length of the last axis of its first input when its first output is
    that input's shape without the last axis (a reduction over rows of that length), else 0 (float64).

    >>> ds = operands_dataset([0, 1, 2], [[("float32", (8, 128))], [("float32", (8, 128))], [("float32", (8,))]],
    ...                       [[("float32", (8,))], [("float32", (128,))], [("float32", ())]])
    >>> reduced_row(ds, [0, 1, 2]).tolist()
    [128.0, 0.0, 8.0]
    """
    op = np.asarray(op, np.int64).reshape(-1)
    out = np.zeros(len(op))
    if not len(op) or not operands.sizes.get("operand", 0):
        return out
    first = operands["position"].values == 0
    owner, rank, shape = operands["op"].values, operands["rank"].values, operands["shape"].values
    size = int(max(owner.max(), op.max())) + 1
    where = {}
    for role in ROLES:
        at = np.full(size, -1, np.int64)
        hit = np.flatnonzero(first & (operands["role"].values == role))
        at[owner[hit]] = hit
        where[role] = at[op]
    a, b = where["input"], where["output"]
    both = (a >= 0) & (b >= 0)
    a, b = np.where(both, a, 0), np.where(both, b, 0)
    ra, rb = rank[a], rank[b]
    last = np.take_along_axis(shape[a], np.maximum(ra - 1, 0)[:, None], axis=1)[:, 0] if shape.shape[1] else 0 * ra
    width = shape.shape[1]
    prefix = np.arange(width)[None, :] < (ra - 1)[:, None]
    same = np.all(np.where(prefix, shape[a] == shape[b], True), axis=1)
    hit = both & (ra >= 1) & (rb == ra - 1) & same & (last > 1)
    out[hit] = last[hit].astype(np.float64)
    return out
