"""Cost rules of elementwise primitives, from a measured per-element table.

Plain arithmetic, comparisons, logic and conversions cost one flop per output element;
transcendentals one transcendental. Primitives that JAX or XLA expand into instruction
sequences (``logistic``, complex arithmetic, special functions such as ``erf_inv``,
``lgamma`` or ``igamma``) use the measured per-element counts of the expansion, by dtype
family. ``pow``, ``integer_pow``, ``select_n`` and the conversions have their own rules.
"""

from __future__ import annotations

from typing import Any

from ._registry import CostContext, OpCost, register_cost_rule
from ._shapes import _dtype_of, _family, _itemsize

# Per-output-element (flops, transcendentals[, constant flops per op]) keyed by dtype family;
# "*" is the fallback, "i" covers int and uint. Measured against XLA's CPU pipeline for the
# primitives JAX expands (chlo decompositions, complex arithmetic).
_Entry = tuple[int, ...]
_EW: dict[str, dict[str, _Entry]] = {}

for _name in ("add", "add_any", "sub", "mul", "div", "rem", "neg", "abs", "floor", "ceil", "round",
              "is_finite", "and", "or", "xor", "not", "shift_left", "shift_right_logical",
              "shift_right_arithmetic", "eq", "ne", "lt", "le", "gt", "ge", "population_count", "clz", "real",
              "imag", "complex", "reduce_precision", "clamp", "mulhi"):
    _EW[_name] = {"*": (1, 0)}
_EW["max"] = _EW["min"] = {"*": (1, 0), "c": (9, 0)}
_EW["sign"] = {"*": (1, 0), "uint": (2, 0)}
_EW["square"] = {"*": (1, 0), "c": (14, 0)}
_EW["conj"] = {"*": (1, 0), "c": (4, 0)}
for _name in ("expm1", "tanh", "tan", "rsqrt", "cbrt", "erf", "pow", "atan2"):
    _EW[_name] = {"*": (0, 1)}
_EW["exp"] = {"*": (0, 1), "c": (15, 4)}
_EW["log"] = {"*": (0, 1), "c": (61, 4)}
_EW["log1p"] = {"*": (0, 1), "c": (79, 5)}
_EW["sqrt"] = {"*": (0, 1), "c": (98, 7)}
_EW["sin"] = {"*": (0, 1), "c": (14, 4)}
_EW["cos"] = {"*": (0, 1), "c": (15, 4)}
_EW["atan"] = {"*": (0, 1), "c": (47, 2)}
_EW["exp2"] = {"*": (1, 1), "c": (16, 4)}
_EW["logistic"] = {"*": (3, 1), "c": (18, 4)}
_EW["asin"] = {"*": (5, 2), "c": (197, 9)}
_EW["acos"] = {"*": (3, 2), "c": (197, 9)}
_EW["sinh"] = {"f16": (12, 3), "*": (10, 3), "c": (33, 8)}
_EW["cosh"] = {"f16": (5, 2), "*": (3, 2), "c": (33, 8)}
_EW["asinh"] = {"*": (11, 3), "c": (205, 9)}
_EW["acosh"] = {"*": (7, 4), "c": (233, 9)}
_EW["atanh"] = {"*": (6, 2), "c": (45, 2)}
_EW["erf_inv"] = {"f16": (39, 2), "f64": (100, 2), "*": (37, 2)}
_EW["erfc"] = {"f16": (62, 1), "f64": (88, 1), "*": (60, 1)}
_EW["lgamma"] = {"f16": (54, 4), "*": (52, 4)}
_EW["digamma"] = {"f16": (75, 3), "*": (73, 3)}
_EW["bessel_i0e"] = _EW["bessel_i1e"] = {"f16": (85, 1), "f64": (173, 1), "*": (83, 1)}
_EW["polygamma"] = {"f16": (259, 19), "*": (254, 19)}
_EW["zeta"] = {"f16": (127, 11), "*": (122, 11)}
_EW["nextafter"] = {"*": (23, 0)}
# These contain a loop that XLA counts once, hence a per-op constant.
_EW["igamma"] = _EW["igammac"] = {"f16": (294, 6, 5), "*": (268, 6, 5)}
_EW["igamma_grad_a"] = {"*": (539, 11, 14)}
_EW["regularized_incomplete_beta"] = {"*": (258, 16, 102)}


def _ew_entry(primitive: str, dtype: Any) -> _Entry:
    table = _EW[primitive]
    fam = _family(dtype)
    for key in (fam, "i" if fam in ("int", "uint") else None, "*"):
        if key is not None and key in table:
            return table[key]
    return (1, 0)


def _ew_cost(ctx: CostContext, entry: _Entry, elements: int, extra_flops: int = 0) -> OpCost:
    flops = entry[0] * elements + (entry[2] if len(entry) > 2 and elements else 0) + extra_flops
    trans = entry[1] * elements
    return ctx.cost(flops=flops, transcendentals=trans,
                    op_class="transcendental" if trans else "elementwise")


@register_cost_rule(*sorted(set(_EW) - {"pow"}))
def _elementwise_rule(ctx: CostContext) -> OpCost:
    """Elementwise primitives: a per-output-element constant from the measured table.

    Plain arithmetic, comparisons, logic, shifts, ``clamp``, ``reduce_precision``: one flop
    per element. Transcendentals: one transcendental per element. Primitives that XLA
    expands (``logistic`` = 3 flops + 1 exp, ``erf_inv``, ``lgamma``, complex ``exp`` ...)
    use the measured per-element counts of the expansion, by dtype family.
    The dtype is that of the first input (the output of a comparison is bool).
    """
    dtype = _dtype_of(ctx.in_avals[0]) if ctx.in_avals else _dtype_of(ctx.out_avals[0])
    return _ew_cost(ctx, _ew_entry(ctx.primitive, dtype), ctx.out_size())


@register_cost_rule("pow")
def _pow_rule(ctx: CostContext) -> OpCost:
    """``pow``: one transcendental per element; an integer exponent adds its conversion.

    XLA rewrites ``pow`` with a *literal* exponent (2, 3, 0.5 ...) into cheaper ops; a
    per-equation rule cannot see literal values, so that case is overcounted.
    """
    extra = 0
    if len(ctx.in_avals) > 1 and _family(_dtype_of(ctx.in_avals[1])) in ("int", "uint"):
        extra = ctx.in_size(1)
    return _ew_cost(ctx, _ew_entry("pow", _dtype_of(ctx.in_avals[0])), ctx.out_size(), extra)


@register_cost_rule("integer_pow")
def _integer_pow_rule(ctx: CostContext) -> OpCost:
    """``x ** y`` for a static integer ``y``, lowered by JAX to repeated squaring.

    ``|y|`` costs ``(bit_length - 1)`` squarings plus ``(popcount - 1)`` multiplies per
    element; a negative ``y`` adds one division. ``y`` in (0, 1) costs nothing.
    """
    y = int(ctx.params.get("y", 1))
    k = abs(y)
    muls = (k.bit_length() - 1) + (bin(k).count("1") - 1) if k else 0
    per = muls + (1 if y < 0 else 0)
    return ctx.cost(flops=per * ctx.out_size(), op_class="elementwise")


@register_cost_rule("select_n")
def _select_n_rule(ctx: CostContext) -> OpCost:
    """``select_n(which, *cases)``.

    A boolean predicate is one select per element. An integer predicate with ``n`` cases
    is lowered to a binary tree of ``n - 1`` compares (on the predicate's shape) and
    ``n - 1`` selects (on the output's shape).
    """
    cases = len(ctx.in_avals) - 1
    if cases <= 1:
        return ctx.cost(op_class="elementwise")
    out = ctx.out_size()
    if _family(_dtype_of(ctx.in_avals[0])) == "bool":
        flops = (cases - 1) * out
    else:
        flops = (cases - 1) * (out + ctx.in_size(0))
    return ctx.cost(flops=flops, op_class="elementwise")


@register_cost_rule("convert_element_type")
def _convert_rule(ctx: CostContext) -> OpCost:
    """One flop per element; a conversion to the same dtype (weak-type change) is free."""
    same = _dtype_of(ctx.in_avals[0]) == _dtype_of(ctx.out_avals[0])
    return ctx.cost(flops=0 if same else ctx.out_size(), op_class="elementwise")


@register_cost_rule("bitcast_convert_type")
def _bitcast_convert_rule(ctx: CostContext) -> OpCost:
    """Same width: one flop per element. Width changes are expanded by XLA into shifts,
    masks and conversions: 6 flops per output element when narrowing, ``5 * ratio`` per
    output element when widening by ``ratio``."""
    a = _itemsize(_dtype_of(ctx.in_avals[0]))
    b = _itemsize(_dtype_of(ctx.out_avals[0]))
    out = ctx.out_size()
    if a == b or not a or not b:
        per = 1
    elif a > b:
        per = 6
    else:
        per = 5 * (b // a)
    return ctx.cost(flops=per * out, op_class="elementwise")
