"""What :func:`dfit_nb.precision` is given, checked and read: the formats named, the program and its arguments,
the outputs' names and which are logits, the region each GEMM is grouped under; and the error bad input raises.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._quantise import FORMATS, Format
from .capture import Trace, capture
from .capture.api import is_dynamic
from .errors import DfitError


class PrecisionError(DfitError, ValueError):
    """Bad input to :func:`precision` or :func:`precision_verdict`: an unknown format, a program without GEMMs,
    outputs that are not floating point, arguments that do not fit the trace."""


def check_formats(formats: Any) -> list[Format]:
    """The :class:`Format` of each name in ``formats`` (one name or a sequence of them), in order.

    >>> [f.name for f in check_formats("int8")]
    ['int8']
    """
    valid = ", ".join(FORMATS)
    if isinstance(formats, str):
        formats = (formats,)
    try:
        names = list(formats)
    except TypeError:
        raise PrecisionError(f"formats must be a format name or a sequence of them ({valid}), "
                             f"got {type(formats).__name__}") from None
    if not names:
        raise PrecisionError(f"formats is empty; give one or more of {valid}")
    unknown = [n for n in names if not isinstance(n, str) or n not in FORMATS]
    if unknown:
        raise PrecisionError(f"unknown format(s) {', '.join(map(repr, unknown))}; valid formats: {valid}")
    if len(set(names)) != len(names):
        raise PrecisionError(f"formats names a format twice: {names}")
    return [FORMATS[n] for n in names]


def trace_and_args(trace_or_fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Trace, list[Any]]:
    """The trace :func:`dfit_nb.precision` runs (``trace_or_fn`` captured when it is a function) and its array
    arguments, checked against the trace's inputs."""
    if isinstance(trace_or_fn, Trace):
        trace = trace_or_fn
        if trace.jaxpr is None:
            raise PrecisionError("this Trace holds no jaxpr (a trace loaded from disk keeps only its text): "
                                 "precision() runs the program; pass the function, dfit_nb.precision(fn, *args)")
    elif callable(trace_or_fn):
        trace = capture(trace_or_fn, *args, **kwargs)
    else:
        raise PrecisionError(f"precision() needs a function or a dfit_nb Trace, got {type(trace_or_fn).__name__}")
    leaves = jax.tree_util.tree_leaves((args, kwargs))
    dyn = [leaf for leaf in leaves if is_dynamic(leaf)]
    specs = [i for i, leaf in enumerate(dyn) if isinstance(leaf, jax.ShapeDtypeStruct)]
    if specs:
        raise PrecisionError(f"precision() runs the function, so every traced argument must be a concrete array; "
                             f"array argument(s) {specs} are jax.ShapeDtypeStruct")
    want = [(tuple(a.shape), str(a.dtype)) for a in trace.jaxpr.in_avals]
    have = [(tuple(np.shape(x)), str(jax.dtypes.canonicalize_dtype(x.dtype))) for x in dyn]
    if want != have:
        def text(s: list[tuple[tuple[int, ...], str]]) -> str:
            return " ".join(f"{d}[{','.join(map(str, sh))}]" for sh, d in s) or "none"
        raise PrecisionError(f"the arguments do not fit the trace: it takes arrays {text(want)}, got {text(have)}")
    return trace, dyn


def output_names(trace: Trace, args: tuple[Any, ...], kwargs: dict[str, Any], n: int) -> list[str]:
    """Names of the program's ``n`` output leaves: their ``jax.tree_util.keystr`` paths when the function is at
    hand, else ``out`` / ``out0``, ``out1``, ..."""
    names = None
    if trace.fn is not None:
        try:
            shapes = jax.eval_shape(trace.fn, *args, **kwargs)
            paths = jax.tree_util.tree_flatten_with_path(shapes)[0]
            if len(paths) == n:
                names = [jax.tree_util.keystr(path) or "out" for path, _ in paths]
        except Exception:  # a name is a nicety: never fail a study for it
            names = None
    if names is None or len(set(names)) != n:
        names = ["out"] if n == 1 else [f"out{i}" for i in range(n)]
    return names


def is_logits(x: Any) -> bool:
    """Whether an output looks like logits: floating, at least 1-D, last axis longer than 1.

    >>> import jax.numpy as jnp
    >>> is_logits(jnp.zeros((2, 10))), is_logits(jnp.zeros((2, 1))), is_logits(jnp.zeros(3, int))
    (True, False, False)
    """
    return bool(jnp.issubdtype(x.dtype, jnp.floating) and x.ndim >= 1 and x.shape[-1] > 1)


def logits_flags(outputs: list[Any], names: list[str], logits: Any) -> list[bool]:
    """Per output, whether its top-1 agreement is measured: by the rule (``logits`` None), for every floating
    output (True) or none (False), or for the outputs ``logits`` names (by name or index)."""
    if logits is None:
        return [is_logits(x) for x in outputs]
    if isinstance(logits, bool):
        flags = [logits and jnp.issubdtype(x.dtype, jnp.floating) and x.ndim >= 1 for x in outputs]
        return [bool(f) for f in flags]
    if isinstance(logits, (str, int)):
        logits = [logits]
    chosen = set()
    for key in logits:
        if isinstance(key, str) and key in names:
            chosen.add(names.index(key))
        elif isinstance(key, int) and not isinstance(key, bool) and -len(names) <= key < len(names):
            chosen.add(key % len(names))
        else:
            raise PrecisionError(f"logits names no output: {key!r}; outputs: {', '.join(names)}")
    for i in chosen:
        if outputs[i].ndim < 1 or not jnp.issubdtype(outputs[i].dtype, jnp.floating):
            raise PrecisionError(f"logits: output {names[i]} ({outputs[i].dtype}{list(outputs[i].shape)}) is not a "
                                 "floating array of at least one axis")
    return [i in chosen for i in range(len(outputs))]


def region_of(path: str, depth: int | None) -> str:
    """``path`` cut to its first ``depth`` segments (``None``: the whole path).

    >>> region_of("enc/layer_0/attn", 2), region_of("enc/layer_0/attn", None), region_of("", 1)
    ('enc/layer_0', 'enc/layer_0/attn', '')
    """
    if depth is None:
        return path
    return "/".join(path.split("/")[:depth]) if path else path
