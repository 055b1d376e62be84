"""Padding and packing of the model programs' inputs, shared by the cost model, sweeps and replays.

Sizes (ops, machines, grids) are rounded up to powers of two so that tables of similar size share one compiled
program; small inputs are packed into blocks that XLA's CPU runtime runs on the calling thread.
"""

from __future__ import annotations

import functools

import numpy as np

#: the largest buffer with which XLA's CPU runtime still runs a program's kernels one after another on the
#: calling thread (its ThunkExecutor's ``execute_sequential_buffer_threshold``): a program with any larger buffer
#: runs them concurrently on its thread pool, whose hand-offs cost more than a small program's kernels
SEQUENTIAL_BYTES = 512


def rows_per_block(row_values: int) -> int:
    """How many rows of ``row_values`` float64 values a block of :data:`SEQUENTIAL_BYTES` holds (0 where one row
    is larger: then blocks gain nothing and all rows go in one)."""
    return SEQUENTIAL_BYTES // (8 * row_values) if 0 < 8 * row_values <= SEQUENTIAL_BYTES else 0


def pack(table: np.ndarray, fields: np.ndarray, df: np.ndarray) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """A program's inputs (``cost()``'s): the ``(columns, ops)`` table in blocks of :func:`rows_per_block` rows,
    and the field vector and the dataflow codes (``(ops,)`` or ``(dataflows,)``) end to end."""
    per = rows_per_block(table.shape[1]) or len(table)
    return tuple(table[i:i + per] for i in range(0, len(table), per)), np.concatenate([fields, df])


def padded_count(n: int, at_least: int) -> int:
    """The size ``n`` ops (or machines, or grids) are compiled for: ``n`` rounded up to a power of two, at least
    ``at_least``; the copies added repeat a real entry and are sliced off (each op is priced alone, each machine
    on its own), so tables of similar size share one compiled program and no result changes.

    >>> padded_count(5, 1), padded_count(5, 8), padded_count(9, 8)
    (8, 8, 16)
    """
    return max(at_least, 1 << max(n - 1, 0).bit_length())


def padded_index(n: int, size: int) -> np.ndarray:
    """Indexes ``0 .. n - 1`` then ``size - n`` zeros: entry 0 repeated up to ``size``."""
    return np.concatenate([np.arange(n), np.zeros(size - n, np.int64)])


@functools.lru_cache(maxsize=64)
def padding(n: int, at_least: int) -> np.ndarray:
    """:func:`padded_index` of ``n`` entries to :func:`padded_count` of them, built once per size (read-only)."""
    out = padded_index(n, padded_count(n, at_least))
    out.setflags(write=False)
    return out
