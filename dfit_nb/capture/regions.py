"""Regions from parameters: name every op after the model parameter it works for, and tag its direction.

A model's parameters are the leaves of its pytree arguments, and their paths name the layers: the path
``blocks/3/attn/qkv/kernel`` of a kernel names the layer ``blocks/3/attn/qkv``. This module turns those paths into
regions, for Flax NNX (``nnx.split`` state), Equinox (module fields), Flax Linen (``params`` dicts), Keras
(``stateless_call``'s variable lists) and plain dicts, with no change to the user's code.

The rule (also in ``docs/recipes.md``):

1. **Parameters.** A traced argument leaf is a parameter when its path inside its argument has a *named* key (a
   dict key, an attribute, a flattened index): the leaves of a dict, a module or an NNX ``State`` are, a bare array
   argument and the items of a plain tuple or list (a batch ``(x, labels)``) are not. ``param_args=`` names the
   arguments that hold parameters instead (then every leaf of them is one). ``model.stateless_call`` of Keras gets
   its variable lists named by ``model.trainable_variables[i].path``.
2. **Names.** The path's keys joined with ``/``, without library noise (NNX's ``value`` / ``raw_value``, Linen's
   leading collection ``params`` / ``batch_stats``) and without the last key, the leaf's own name (``kernel``,
   ``bias``, ``weight``, ...), unless it is the only key (``{"w1": ..., "w2": ...}`` keeps ``w1``, ``w2``). An
   optimizer state's leaves (an optax state, or a path through ``mu`` / ``nu``) name the parameter they track:
   ``(ScaleByAdamState.mu, conv0, kernel)`` is ``conv0``.
3. **Anchors.** An op that reads a parameter, directly or through layout-only ops (reshape, transpose,
   convert, broadcast: ``walk.PASS_THROUGH``), takes that parameter's region (the first one it reads).
4. **Between anchors.** Backward and optimizer ops take the region of their first (lowest op id) consumer that
   has one, else of their latest producer; forward ops the region of their latest (highest op id) producer that
   has one, else of their first consumer; an op with neither (dead code) that of the op before it. So a ReLU
   belongs to the layer it follows, a loss to the head, a weight gradient to the layer whose optimizer update
   consumes it. A forward GEMM or convolution of two computed operands whose producers lie in different regions
   (attention's ``q @ k.T`` from ``attn/query`` and ``attn/key``, and the scores times ``attn/value``) takes the
   path those regions share (``attn``), the module that holds both layers, when they share one.
5. **Direction.** An op under JAX's ``transpose(...)`` name-stack wrapper is ``backward``; else an op that reads
   an optimizer state leaf or depends on a backward or optimizer op is ``optimizer``; else ``forward``. The
   wrappers ``jvp``, ``transpose``, ``vmap`` (and ``pmap``) are removed from the path: ``transpose(jvp(CNN))/conv0``
   is ``CNN/conv0``. So is ``jnp.einsum``'s scope (its subscripts, ``bqhd,bkhd->bhqk``: every attention layer
   enters it, a library segment under the user's layer): ``attn/qk/bqhd,bkhd->bhqk`` is ``attn/qk``. When a
   program has more than one direction, every region starts with it:
   ``forward/conv0``, ``backward/conv0``, ``optimizer/conv0``.
6. **Scopes and parameters** (``regions="both"``, the default). Named scopes stay authoritative: an op keeps
   its scope path when the path has a segment that neither JAX nor a library wrote (a nested ``jit(...)``,
   Equinox's class names ``eqx.nn.Conv``): a scope the user entered,
   or Linen's and Keras' module scopes. Any other op (no scope, or only such segments: NNX, Equinox, optax
   updates, a nested ``jit(fn)`` alone) takes its parameter region, spelled as the region's *home* where it has one:
   the scope path shared by the scopes of the ops reading it, counting only scopes that read that one region
   (Linen's ``conv0`` lives in ``CNN/conv0``, so its optimizer ops are ``optimizer/CNN/conv0``).
   ``regions="scopes"`` keeps the scopes only; ``regions="params"`` the parameter regions only.
7. **Containers** (jit, scan, cond, ...) are in the region of their ops when all of them are in one region (and
   the container's own scope is not kept); otherwise in their own scope's (a jit of the whole program stays in
   the root), after their ops' direction when that is one. Their direction is their first op's.

A program whose arguments hold no parameter falls back to scopes; when it closes over arrays (its weights as
constants) a :class:`ParameterRegionWarning` says so.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

import jax

from ..errors import CaptureError, DfitWarning
from .walk import OpRecord

REGION_MODES = ("both", "params", "scopes")
DIRECTIONS = ("forward", "backward", "optimizer")
#: Unicode categories refused in region and op names: control characters (NUL, tab, newline, escape, ...), line
#: and paragraph separators (U+2028, U+2029). netCDF drops a NUL (two regions merged on a round trip) and a
#: U+2028 ends a line inside the report's JavaScript; refusing them at capture keeps every format and chart safe
#: without escaping in each one.
REFUSED_CATEGORIES = ("Cc", "Zl", "Zp")

#: JAX's name-stack wrappers of transformations: ``jvp(CNN)``, ``transpose(jvp(CNN))``, ``vmap(conv0)``
_WRAPPER = re.compile(r"^(jvp|transpose|vmap|pmap|xmap|batched)\((.*)\)$")
#: scope segments JAX or a library writes, naming no layer: a nested jit as the walk writes it (``jit(block)``; a
#: library's own jits add no segment at all), Equinox's class names (``eqx.nn.Conv``: every layer of a class shares
#: it)
_LIBRARY = re.compile(r"^(jit\(.*\)|eqx\..*)$")
#: ``jnp.einsum``'s scope, its subscripts (``BNTS,BSNH->BTNH``): dropped from every path, wherever it sits
_SUBSCRIPTS = re.compile(r"^.*->.*$")
#: primitives that multiply two computed operands (rule 4's products of two layers' outputs)
_BILINEAR = frozenset({"dot_general", "conv_general_dilated"})
#: trailing keys libraries add under a variable (Flax NNX's ``Variable.value``)
_NOISE_TAIL = frozenset({"value", "raw_value"})
#: leading keys naming a Flax Linen variable collection
_COLLECTIONS = frozenset({"params", "batch_stats", "cache", "intermediates", "constants", "stats"})
#: fields of optimizer states that mirror the parameters (optax: mu, nu, trace, ...)
_OPT_FIELDS = frozenset({"mu", "nu", "trace", "ema", "sum_of_squares", "nu_hat", "grad_acc", "acc_grads",
                         "momentum", "velocity", "m", "v", "count", "inner_state", "inner_states", "opt_state"})


class ParameterRegionWarning(DfitWarning):
    """Regions could not be taken from parameters (none among the arguments): scopes are used instead."""


@dataclasses.dataclass(frozen=True)
class Param:
    """A traced argument leaf that is a model parameter (or an optimizer state tracking one)."""

    region: str  # the layer it names ('' for state that names none, such as optax's step count)
    path: str  # its full key path, for messages
    optimizer: bool


def refused_characters(name: str) -> list[str]:
    """The characters of ``name`` that region and op names may not hold (``REFUSED_CATEGORIES``), in order, once.

    >>> refused_characters("attention/\\u00e9"), refused_characters("a\\x00b\\u2028\\x00")
    ([], ['\\x00', '\\u2028'])
    """
    return list(dict.fromkeys(c for c in name if unicodedata.category(c) in REFUSED_CATEGORIES))


def check_name(name: str, what: str, function: str) -> None:
    """Refuse a name holding a character of ``REFUSED_CATEGORIES``, naming it and the characters.

    Parameters
    ----------
    name
        The name to check (a region path, a named scope path, a function or primitive name).
    what
        What the name is, for the message: ``"the function name"``, ``"op 3 ('tanh'): its region"``, ...
    function
        The captured function's name, for the message (already checked, or the name itself).

    Raises
    ------
    CaptureError
        ``name`` holds a control character (Unicode category Cc, Zl or Zp); the message shows the name with
        ``repr``, so the character is visible, and each refused character with its code point.
    """
    bad = refused_characters(name)
    if not bad:
        return
    chars = ", ".join(f"{c!r} (U+{ord(c):04X})" for c in bad)
    raise CaptureError(
        f"cannot capture {function!r}: {what} {name!r} holds {chars}; region and op names (named scopes, "
        f"function names, parameter keys) may not hold control characters, line or paragraph separators "
        f"(Unicode categories Cc, Zl, Zp: NUL, tab, newline, escape, U+2028, U+2029, ...), which files drop "
        f"or merge and charts cannot show. Rename it without them.")


def check_names(records: Iterable[Any], function: str) -> None:
    """Refuse, by :func:`check_name`, any op whose name-stack path, region or primitive holds a refused character.

    The path as walked is checked too, not only the region kept: JAX writes it into the lowered program's
    metadata, which a trace keeps, and a name should not be accepted under one ``regions=`` mode and refused
    under another.
    """
    seen: set[str] = set()  # a program's ops share a few hundred names: each distinct one is read once
    for r in records:
        for what, name in (("region", r.region), ("named scope path", r.scope), ("primitive", r.primitive)):
            if name not in seen:
                check_name(name, f"op {r.id} ({r.primitive!r}): its {what}", function)
                seen.add(name)


def _key_str(k: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def _named(k: Any) -> bool:
    return not isinstance(k, jax.tree_util.SequenceKey)


def _is_optax(node: Any) -> bool:
    return type(node).__module__.split(".")[0] == "optax"


def _holds_optimizer_state(arg: Any) -> bool:
    found = jax.tree_util.tree_flatten(arg, is_leaf=_is_optax)[0]
    return any(_is_optax(x) for x in found)


def region_of_path(keys: Sequence[Any], optimizer: bool = False) -> str:
    """The region a parameter's key path names (rule 2 of the module docstring).

    >>> from jax.tree_util import DictKey as D, GetAttrKey as A, SequenceKey as S
    >>> region_of_path([D("blocks"), D(3), D("attn"), D("qkv"), D("kernel"), A("value")])
    'blocks/3/attn/qkv'
    >>> region_of_path([D("params"), D("conv0"), D("kernel")]), region_of_path([D("w1")])
    ('conv0', 'w1')
    >>> region_of_path([S(0), A("mu"), D("conv0"), D("kernel")], optimizer=True)
    'conv0'
    """
    keys = list(keys)
    if optimizer:  # the structure of the state down to its last field that mirrors the parameters
        cut = max((i + 1 for i, k in enumerate(keys) if _key_str(k) in _OPT_FIELDS), default=0)
        keys = keys[cut:]
        while keys and not _named(keys[0]):
            keys = keys[1:]
    parts = [_key_str(k) for k in keys]
    while parts and parts[-1] in _NOISE_TAIL:
        parts.pop()
    if len(parts) > 1 and parts[0] in _COLLECTIONS:
        parts = parts[1:]
    if len(parts) > 1:
        parts = parts[:-1]
    return "/".join(parts)


def _keras_names(fn: Any) -> dict[int, list[str]] | None:
    """Keras ``model.stateless_call``: its first two arguments are the variable lists, named by the model."""
    model = getattr(fn, "__self__", None)
    if getattr(fn, "__name__", "") != "stateless_call" or model is None:
        return None
    try:
        return {0: [v.path for v in model.trainable_variables], 1: [v.path for v in model.non_trainable_variables]}
    except AttributeError:
        return None


def parameter_leaves(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                     param_args: int | str | Sequence[int | str] | None = None) -> list[Param | None]:
    """One entry per leaf of ``(args, kwargs)`` (``jax.tree_util`` order): its :class:`Param`, or ``None``.

    Raises
    ------
    ValueError
        ``param_args`` names an argument ``fn`` was not given.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> params = {"dense0": {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)}}
    >>> [p and p.region for p in parameter_leaves(None, (params, (jnp.ones(2), jnp.ones(2))), {})]
    ['dense0', 'dense0', None, None]
    """
    chosen: set[int | str] | None = None
    if param_args is not None:
        items = [param_args] if isinstance(param_args, (int, str)) else list(param_args)
        valid = [*range(len(args)), *kwargs]
        for a in items:
            if isinstance(a, bool) or a not in valid:
                raise ValueError(f"param_args names argument {a!r}, which was not given; the arguments are "
                                 f"positions 0..{len(args) - 1}" + (f" and keywords {', '.join(kwargs)}" if kwargs
                                                                    else ""))
        chosen = set(items)
    keras = _keras_names(fn)
    optimizer_args = {i for i, a in enumerate(args) if _holds_optimizer_state(a)}
    optimizer_args |= {k for k, a in kwargs.items() if _holds_optimizer_state(a)}
    arg_names: list[str] = []
    if fn is not None:
        try:
            arg_names = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            pass
    out: list[Param | None] = []
    for path, _ in jax.tree_util.tree_flatten_with_path((args, kwargs))[0]:
        arg = path[1].idx if path[0].idx == 0 else path[1].key  # (args, kwargs)[0][i] or [1][name]
        rest = path[2:]
        keys = [_key_str(k) for k in rest]
        optimizer = arg in optimizer_args or any(k in ("mu", "nu") for k in keys)
        if keras is not None and arg in keras and len(rest) == 1 and rest[0].idx < len(keras[arg]):
            name = keras[arg][rest[0].idx]
            out.append(Param("/".join(name.split("/")[:-1]) or name, name, False))
            continue
        if chosen is not None:
            is_param = arg in chosen
        else:
            is_param = any(_named(k) for k in rest)
        if not is_param:
            out.append(None)
            continue
        label = arg if isinstance(arg, str) else (arg_names[arg] if arg < len(arg_names) else f"arg{arg}")
        region = region_of_path(rest, optimizer) if rest else str(label)
        out.append(Param(region, "/".join([str(label), *keys]), optimizer))
    return out


def _unwrap(segment: str) -> str:
    while (m := _WRAPPER.match(segment)) is not None:
        segment = m.group(2)
    return segment


def _scope_path(raw: str) -> tuple[str, bool]:
    """(path without transform wrappers and einsum subscripts, whether a ``transpose(...)`` wrapper was in it)."""
    parts = raw.split("/") if raw else []
    backward = any(p.startswith("transpose(") or "(transpose(" in p for p in parts)
    return "/".join(u for u in (_unwrap(p) for p in parts) if u and not _SUBSCRIPTS.match(u)), backward


def _common(a: str, b: str) -> str:
    """The longest common path prefix of two region paths."""
    out = []
    for x, y in zip(a.split("/"), b.split("/"), strict=False):
        if x != y:
            break
        out.append(x)
    return "/".join(out)


def assign_regions(records: list[OpRecord], edges: Sequence[tuple[int, int, int, int]],
                   params: Sequence[Param | None], mode: str = "both") -> None:
    """Set ``region`` and ``direction`` of every record in place, by the module docstring's rule.

    ``params`` has one entry per traced leaf (the program's inputs, in order). ``records[i].scope`` is the
    walked name-stack path.
    """
    n = len(records)
    producers: list[list[int]] = [[] for _ in range(n)]
    consumers: list[list[int]] = [[] for _ in range(n)]
    for src, dst, _, _ in edges:
        producers[dst].append(src)
        consumers[src].append(dst)
    scope = [""] * n
    backward = [False] * n
    for r in records:
        scope[r.id], backward[r.id] = _scope_path(r.scope)
    leaf_ops = [r.id for r in records if not r.container or r.container == "opaque"]

    # directions, in op-id order (producers come first)
    direction = ["forward"] * n
    for i in leaf_ops:
        read = [params[j] for j in records[i].reads if j < len(params) and params[j] is not None]
        if backward[i]:
            direction[i] = "backward"
        elif any(p.optimizer for p in read) or any(direction[p] != "forward" for p in producers[i]):
            direction[i] = "optimizer"

    # anchors, then rule 4
    anchor = [""] * n
    for i in leaf_ops:
        anchor[i] = next((params[j].region for j in records[i].reads
                          if j < len(params) and params[j] is not None and params[j].region), "")
    region = list(anchor)

    def from_consumers(ops: list[int]) -> None:
        for i in reversed(ops):
            if not region[i]:
                region[i] = next((region[c] for c in sorted(consumers[i]) if region[c]), "")

    def from_producers(ops: list[int]) -> None:
        for i in ops:
            if not region[i] and records[i].primitive in _BILINEAR and direction[i] == "forward":
                # a product of two layers' outputs (attention's scores from the query and key projections, its
                # weighted sum from the scores and the value projection) is the work of the module holding both
                held = {region[p] for p in producers[i] if region[p]}
                if len(held) > 1:
                    region[i] = functools.reduce(_common, sorted(held))
            if not region[i]:
                region[i] = next((region[p] for p in sorted(producers[i], reverse=True) if region[p]), "")

    from_consumers([i for i in leaf_ops if direction[i] != "forward"])
    from_producers(leaf_ops)
    from_consumers(leaf_ops)
    previous = ""
    for i in leaf_ops:
        parent = records[i].parent
        if not region[i] and parent >= 0 and records[parent].container == "opaque":
            region[i] = region[parent]  # ops inside an opaque op have no edges of their own: they belong where it does
        if not region[i]:
            region[i] = previous  # no producer or consumer with a region (dead code): the op before it
        previous = region[i]

    anchored = [i for i in leaf_ops if anchor[i]]
    by_scopes = mode == "scopes" or not anchored

    def keeps_scope(s: str) -> bool:
        """Rule 6: a scope someone entered for a layer, not one JAX or a library wrote."""
        return mode == "both" and bool(s) and not all(_LIBRARY.match(seg) for seg in s.split("/"))

    if by_scopes:
        final = list(scope)
    elif mode == "params":
        final = list(region)
    else:
        layers_in: dict[str, set[str]] = {}  # scope -> the parameter regions its ops read
        for i in anchored:
            layers_in.setdefault(scope[i], set()).add(anchor[i])
        # the scope a parameter region lives in: what the scopes of its reading ops that hold it alone share
        home: dict[str, str] = {}
        for i in anchored:
            s = scope[i]
            if keeps_scope(s) and len(layers_in[s]) == 1:
                home[anchor[i]] = _common(home[anchor[i]], s) if anchor[i] in home else s
        final = [scope[i] if keeps_scope(scope[i]) else (home.get(region[i]) or region[i]) for i in range(n)]

    several = len({direction[i] for i in leaf_ops}) > 1

    def full(i: int) -> str:
        return "/".join(p for p in (direction[i] if several else "", final[i]) if p)

    path = {i: full(i) for i in leaf_ops}
    # containers, innermost first (children have higher ids): where all their ops are, when that is one region
    # (a nested jit inside a layer); otherwise, or when their own scope is kept, their own scope (a jit of the
    # whole program stays in the root)
    children: dict[int, list[int]] = {}
    for r in records:
        if r.parent >= 0:
            children.setdefault(r.parent, []).append(r.id)
    for r in reversed(records):
        if not r.container or r.container == "opaque":
            continue
        inner = children.get(r.id, [])
        dirs = {direction[c] for c in inner}
        direction[r.id] = direction[inner[0]] if inner else direction[r.id]
        paths = {path[c] for c in inner}
        if len(paths) == 1 and not by_scopes and not keeps_scope(scope[r.id]):
            path[r.id] = paths.pop()
        else:
            path[r.id] = "/".join(p for p in (direction[r.id] if several and len(dirs) == 1 else "", scope[r.id])
                                  if p)
    for r in records:
        r.direction = direction[r.id]
        r.region = path[r.id]
