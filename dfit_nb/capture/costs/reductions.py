"""Cost rules of reductions, cumulative scans and reduce-windows.

A reduction costs one application of its reducer per element it folds away. Cumulative
reductions and scan-shaped reduce-windows follow XLA's CPU rewrite (quadratic up to
:data:`SCAN_TREE_BASE` elements, a tree above); ``argmax``/``argmin`` and the max-pool
gradients count the variadic reduces XLA expands them into.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ._registry import CostContext, OpCost, _jaxpr_cost, register_cost_rule
from ._shapes import _dtype_of, _is_inexact, _shape
from .elementwise import _Entry, _ew_entry

_MONOID_REDUCER = {
    "reduce_sum": "add", "reduce_prod": "mul", "reduce_max": "max", "reduce_min": "min",
    "reduce_and": "and", "reduce_or": "or", "reduce_xor": "xor",
}


@register_cost_rule(*_MONOID_REDUCER)
def _reduce_rule(ctx: CostContext) -> OpCost:
    """One reducer application per element folded away: ``in - out``."""
    apps = max(ctx.in_size(0) - ctx.out_size(0), 0)
    entry = _ew_entry(_MONOID_REDUCER[ctx.primitive], _dtype_of(ctx.in_avals[0]))
    return ctx.cost(flops=apps * entry[0], transcendentals=apps * entry[1], op_class="reduction")


@register_cost_rule("argmax", "argmin")
def _argminmax_rule(ctx: CostContext) -> OpCost:
    """Lowered to a variadic (value, index) reduce: 9 flops per step for floating inputs
    (value compare, NaN check, tie-break on index, two selects), 7 for integers/bool
    (XLA drops the NaN check)."""
    apps = max(ctx.in_size(0) - ctx.out_size(0), 0)
    per = 9 if _is_inexact(_dtype_of(ctx.in_avals[0])) else 7
    return ctx.cost(flops=apps * per, op_class="reduction")


@register_cost_rule("reduce")
def _generic_reduce_rule(ctx: CostContext) -> OpCost:
    """``lax.reduce`` with a user computation: ``(in - out)`` times the cost of its jaxpr."""
    apps = max(ctx.in_size(0) - ctx.out_size(0), 0)
    f, t = _jaxpr_cost(ctx.params.get("jaxpr"))
    return ctx.cost(flops=apps * f, transcendentals=apps * t, op_class="reduction")


#: XLA's CPU pipeline rewrites a cumulative reduce-window longer than this into a tree.
SCAN_TREE_BASE = 16


def _scan_tree_apps(length: int, base: int = SCAN_TREE_BASE) -> int:
    """Reducer applications of XLA's tree rewrite of one cumulative scan of ``length > base``.

    The scan is padded to ``K`` (a multiple of ``base``), cut into ``K / base`` rows scanned
    with a window of ``base`` (``K * (base - 1)``), the row totals get an exclusive scan
    (itself rewritten again if longer than ``base``) and are combined back (``K``).
    """
    padded = -(-length // base) * base
    rows = padded // base
    inner = _scan_tree_apps(rows, base) if rows > base else (rows + 1) * (rows - 1)
    return padded * base + inner


def _scan_apps(length: int) -> int:
    if length <= SCAN_TREE_BASE:
        return length * (length - 1)
    return _scan_tree_apps(length)


_CUMULATIVE_REDUCER = {"cumsum": "add", "cumprod": "mul", "cummax": "max", "cummin": "min"}


@register_cost_rule("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp")
def _cumulative_rule(ctx: CostContext) -> OpCost:
    """Cumulative reductions, lowered by JAX to a reduce-window over the whole axis.

    Up to :data:`SCAN_TREE_BASE` elements: ``n * (n - 1)`` reducer applications per scanned
    row (the quadratic reduce-window). Longer scans follow XLA's tree rewrite
    (:func:`_scan_tree_apps`). ``cumlogsumexp``'s reducer is 8 flops + 2 transcendentals.
    """
    shape = _shape(ctx.in_avals[0])
    axis = int(ctx.params.get("axis", 0))
    length = shape[axis] if shape else 1
    total = ctx.in_size(0)
    if length <= 1 or total == 0:
        return ctx.cost(op_class="reduction")
    apps = (total // length) * _scan_apps(length)
    if ctx.primitive == "cumlogsumexp":
        per: _Entry = (8, 2)
    else:
        per = _ew_entry(_CUMULATIVE_REDUCER[ctx.primitive], _dtype_of(ctx.in_avals[0]))
    return ctx.cost(flops=apps * per[0], transcendentals=apps * per[1], op_class="reduction")


def _window_params(params: Mapping[str, Any], rank: int) -> tuple[Any, ...]:
    """(window dims, strides, padding pairs, base dilation, window dilation), defaults filled."""
    ones = (1,) * rank
    wd = tuple(int(d) for d in params.get("window_dimensions", ones))
    ws = tuple(int(d) for d in (params.get("window_strides") or ones))
    pad = tuple((int(lo), int(hi)) for lo, hi in (params.get("padding") or ((0, 0),) * rank))
    bd = tuple(int(d) for d in (params.get("base_dilation") or ones))
    wdil = tuple(int(d) for d in (params.get("window_dilation") or ones))
    return wd, ws, pad, bd, wdil


def _scan_pattern(operand_shape: Sequence[int], params: Mapping[str, Any]) -> tuple[int, bool] | None:
    """(length, exclusive) if this reduce-window is a cumulative scan XLA rewrites as a tree."""
    rank = len(operand_shape)
    wd, ws, pad, bd, wdil = _window_params(params, rank)
    nontrivial = [d for d in range(rank)
                  if not (wd[d] == 1 and ws[d] == 1 and pad[d] == (0, 0) and bd[d] == 1 and wdil[d] == 1)]
    if len(nontrivial) != 1:
        return None
    d = nontrivial[0]
    length = int(operand_shape[d])
    lo, hi = pad[d]
    if length <= SCAN_TREE_BASE or ws[d] != 1 or wd[d] != length or bd[d] != 1 or wdil[d] != 1:
        return None
    forward = lo in (length - 1, length) and hi == 0
    backward = hi in (length - 1, length) and lo == 0
    if not (forward or backward):
        return None
    return length, (lo == length) if forward else (hi == length)


def _window_apps(ctx: CostContext) -> int:
    out = ctx.out_size(0)
    shape = _shape(ctx.in_avals[0])
    scan = _scan_pattern(shape, ctx.params)
    if scan is not None:
        length, exclusive = scan
        rows = out // (length + 1 if exclusive else length)
        return rows * _scan_tree_apps(length)
    window = math.prod(_window_params(ctx.params, len(shape))[0])
    return out * max(window - 1, 0)


_WINDOW_REDUCER = {"reduce_window_sum": "add", "reduce_window_max": "max", "reduce_window_min": "min"}


@register_cost_rule("reduce_window_sum", "reduce_window_max", "reduce_window_min", "reduce_window")
def _reduce_window_rule(ctx: CostContext) -> OpCost:
    """Pooling-style reduce-window: ``(window elements - 1)`` reducer applications per
    output element, whatever the padding, strides or dilations. A window that spans a
    whole axis with scan padding (a cumulative sum written by hand) follows XLA's tree
    rewrite instead. Generic ``reduce_window`` uses the cost of its reducer jaxpr.
    """
    apps = _window_apps(ctx)
    if ctx.primitive == "reduce_window":
        per: _Entry = _jaxpr_cost(ctx.params.get("jaxpr"))
    else:
        per = _ew_entry(_WINDOW_REDUCER[ctx.primitive], _dtype_of(ctx.in_avals[0]))
    return ctx.cost(flops=apps * per[0], transcendentals=apps * per[1], op_class="reduction")


@register_cost_rule("select_and_scatter_add", "select_and_scatter")
def _select_and_scatter_rule(ctx: CostContext) -> OpCost:
    """Max-pool gradient. XLA expands it into a variadic (value, index) reduce-window of
    11 flops per step followed by a scatter-add: ``source * (11 * (window - 1) + 1)``.
    ``select_and_scatter`` (generic computations) uses the same estimate."""
    window = math.prod(int(d) for d in ctx.params.get("window_dimensions", (1,)))
    source = ctx.in_size(0)
    return ctx.cost(flops=source * (11 * (window - 1) + 1), op_class="reduction")


@register_cost_rule("select_and_gather_add")
def _select_and_gather_add_rule(ctx: CostContext) -> OpCost:
    """Max-pool JVP: a packed (value, tangent) reduce-window of 3 flops per step."""
    window = math.prod(int(d) for d in ctx.params.get("window_dimensions", (1,)))
    return ctx.cost(flops=ctx.out_size() * 3 * (window - 1), op_class="reduction")
