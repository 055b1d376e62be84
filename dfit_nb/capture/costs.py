"""Per-primitive cost rules for jaxpr equations.

A *cost rule* turns one jaxpr equation (primitive name, params, input and output avals)
into an :class:`OpCost`: floating-point work, transcendental work, bytes moved and, for
matrix products and convolutions, a GEMM view ``(batch, m, k, n)``. Rules live in a
registry keyed by primitive name (:func:`register_cost_rule`); :func:`cost_of` looks the
rule up and applies it. There is one small rule per primitive family, not an if-chain,
and users may replace any rule by registering a new one under the same name.

Conventions
-----------
The numbers follow the conventions of XLA's ``HloCostAnalysis``, i.e. what
``jax.jit(f).lower(*args).compile().cost_analysis()`` reports, so that summing
``flops`` over the equations of a program (times their execution counts) reproduces
XLA's total. The rules were checked one primitive at a time against the CPU backend of
JAX 0.10.2 (see ``tests/capture/test_costs.py``). In short:

* **flops** are counted per executed HLO instruction *after* XLA's optimizations, per
  single execution of the op: an elementwise arithmetic, comparison, logical, select,
  clamp or conversion instruction costs one flop per output element; a reduction costs
  one application of its reducer per element it folds away (``in - out``); a dot costs
  ``2 * batch * m * k * n``; a convolution costs two flops per multiply-add that touches
  real (non-padding, non-hole) input; data movement costs nothing.
* **transcendentals** count the instructions XLA treats as transcendental (exp, log,
  log1p, expm1, tanh, logistic's exp, sin, cos, tan, atan2, pow, sqrt, rsqrt, cbrt, erf,
  ...), one per output element, and they are *not* also counted as flops.
* Several JAX primitives are not single HLO instructions: JAX or XLA expands them
  (``logistic``, ``erf_inv``, ``lgamma``, ``asinh``, ``nextafter``, ``integer_pow``,
  ``argmax``, ``select_n`` with an integer predicate, ``cumsum`` ...). Their rules count
  the expanded instruction sequence; the per-element constants for the special functions
  were measured and depend on the dtype (float16 and bfloat16 share one row because both
  are computed in float32 by the expansion).
* **bytes_read / bytes_written** are the unfused view: the sizes of all input avals
  (literals included) and of all output avals. Fusion is a later, separate concern.
* Containers (``jit``, ``scan``, ``while``, ``cond``, ``remat`` ...) cost zero: the caller
  walks their sub-jaxprs, whose equations carry the cost.

Known gaps (documented per rule where they apply)
-------------------------------------------------
* Whole-program effects are invisible to a per-equation rule: algebraic simplification
  with literal operands (``x * 1``, ``x + 0``, ``pow(x, 2.0)``), common-subexpression
  elimination, dead-code elimination, constant folding.
* The CPU backend computes bfloat16 arithmetic (and float16/bfloat16 dots and
  convolutions) in float32 and counts the inserted conversions as flops. The rules
  follow the backend-neutral HLO instead (one flop per element, ``2mkn`` per dot).
* Linear-algebra primitives (LAPACK custom calls on CPU), ``top_k`` and
  ``rng_bit_generator`` have no exact XLA count; their rules give textbook estimates.

Examples
--------
>>> import jax, jax.numpy as jnp
>>> from dfit_nb.capture.costs import cost_of
>>> closed = jax.make_jaxpr(jnp.dot)(jnp.ones((4, 8)), jnp.ones((8, 8)))
>>> eqn = closed.eqns[0]
>>> c = cost_of(eqn.primitive.name, eqn.params,
...             [v.aval for v in eqn.invars], [v.aval for v in eqn.outvars])
>>> c.flops, (c.batch, c.m, c.k, c.n), c.op_class
(512, (1, 4, 8, 8), 'gemm')
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

__all__ = (
    "OP_CLASSES",
    "CostContext",
    "CostRule",
    "OpCost",
    "UnknownPrimitiveError",
    "aval_nbytes",
    "cost_of",
    "cost_of_eqn",
    "get_cost_rule",
    "has_cost_rule",
    "register_cost_rule",
    "registered_primitives",
)

#: The coarse classes an op can fall in.
OP_CLASSES: tuple[str, ...] = (
    "gemm",
    "conv",
    "elementwise",
    "transcendental",
    "reduction",
    "data_movement",
    "control",
    "opaque",
    "other",
)

_INT_FIELDS = ("flops", "transcendentals", "bytes_read", "bytes_written", "m", "k", "n", "batch")


@dataclasses.dataclass(frozen=True)
class OpCost:
    """The cost of one execution of one primitive.

    Attributes
    ----------
    flops : int
        Floating-point (and integer/logical) operations, XLA ``HloCostAnalysis`` convention.
    transcendentals : int
        Transcendental operations (exp, log, tanh, ...); not included in ``flops``.
    bytes_read, bytes_written : int
        Sum of the sizes of all input (resp. output) avals, unfused view.
    m, k, n, batch : int
        GEMM view of a dot or convolution; 0 for every other op.
    op_class : str
        One of :data:`OP_CLASSES`.

    Examples
    --------
    >>> OpCost(flops=28, bytes_read=128, bytes_written=16, op_class="reduction").flops
    28
    """

    flops: int = 0
    transcendentals: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    m: int = 0
    k: int = 0
    n: int = 0
    batch: int = 0
    op_class: str = "elementwise"

    def __post_init__(self) -> None:
        for name in _INT_FIELDS:
            object.__setattr__(self, name, int(getattr(self, name)))
        if self.op_class not in OP_CLASSES:
            raise ValueError(f"op_class must be one of {OP_CLASSES}, got {self.op_class!r}")


@dataclasses.dataclass(frozen=True)
class CostContext:
    """What a cost rule sees: one equation, reduced to names, params and avals.

    ``in_avals`` and ``out_avals`` hold objects with ``.shape`` and ``.dtype`` (tokens and
    abstract refs may lack them; such entries count as zero elements and zero bytes).

    Examples
    --------
    >>> import jax, numpy as np
    >>> a = jax.ShapeDtypeStruct((4, 8), np.float32)
    >>> ctx = CostContext("neg", {}, (a,), (a,))
    >>> ctx.out_size(), ctx.bytes_read()
    (32, 128)
    >>> ctx.cost(flops=32).bytes_written
    128
    """

    primitive: str
    params: Mapping[str, Any]
    in_avals: tuple[Any, ...]
    out_avals: tuple[Any, ...]

    def in_size(self, i: int = 0) -> int:
        """Number of elements of input ``i`` (0 when it has no static shape)."""
        return _numel(self.in_avals[i]) if i < len(self.in_avals) else 0

    def out_size(self, i: int = 0) -> int:
        """Number of elements of output ``i`` (0 when it has no static shape)."""
        return _numel(self.out_avals[i]) if i < len(self.out_avals) else 0

    def bytes_read(self) -> int:
        """Sum of :func:`aval_nbytes` over the inputs."""
        return sum(aval_nbytes(a) for a in self.in_avals)

    def bytes_written(self) -> int:
        """Sum of :func:`aval_nbytes` over the outputs."""
        return sum(aval_nbytes(a) for a in self.out_avals)

    def cost(self, **fields: Any) -> OpCost:
        """An :class:`OpCost` with ``fields`` and the unfused byte counts filled in."""
        fields.setdefault("bytes_read", self.bytes_read())
        fields.setdefault("bytes_written", self.bytes_written())
        return OpCost(**fields)


CostRule = Callable[[CostContext], OpCost]


class UnknownPrimitiveError(KeyError):
    """Raised by :func:`cost_of` for a primitive that has no registered rule.

    Examples
    --------
    >>> try:
    ...     cost_of("no_such_primitive", {}, (), ())
    ... except UnknownPrimitiveError as err:
    ...     print(err.primitive)
    no_such_primitive
    """

    def __init__(self, primitive: str) -> None:
        super().__init__(primitive)
        self.primitive = primitive

    def __str__(self) -> str:
        return f"no cost rule registered for primitive {self.primitive!r}"


_REGISTRY: dict[str, CostRule] = {}


def register_cost_rule(*primitive_names: str) -> Callable[[CostRule], CostRule]:
    """Register the decorated function as the cost rule of ``primitive_names``.

    Registering a name again replaces its rule, so users can override any built-in rule.

    Parameters
    ----------
    *primitive_names : str
        Primitive names as they appear in jaxprs (``eqn.primitive.name``).

    Returns
    -------
    Callable
        A decorator that registers its argument and returns it unchanged.

    Examples
    --------
    >>> import jax, numpy as np
    >>> x = jax.ShapeDtypeStruct((4, 8), np.float32)
    >>> previous = get_cost_rule("neg")
    >>> @register_cost_rule("neg")
    ... def _neg_rule(ctx):
    ...     return ctx.cost(flops=2 * ctx.out_size())
    >>> cost_of("neg", {}, [x], [x]).flops
    64
    >>> _ = register_cost_rule("neg")(previous)  # restore the built-in rule
    >>> cost_of("neg", {}, [x], [x]).flops
    32
    """
    if not primitive_names:
        raise TypeError("register_cost_rule needs at least one primitive name")
    for name in primitive_names:
        if not isinstance(name, str) or not name:
            raise TypeError(f"primitive names must be non-empty strings, got {name!r}")

    def decorator(rule: CostRule) -> CostRule:
        for name in primitive_names:
            _REGISTRY[name] = rule
        return rule

    return decorator


def has_cost_rule(primitive_name: str) -> bool:
    """Whether a rule is registered for ``primitive_name``.

    Examples
    --------
    >>> has_cost_rule("dot_general"), has_cost_rule("no_such_primitive")
    (True, False)
    """
    return primitive_name in _REGISTRY


def get_cost_rule(primitive_name: str) -> CostRule:
    """The rule registered for ``primitive_name``; raises :class:`UnknownPrimitiveError`.

    Examples
    --------
    >>> callable(get_cost_rule("add"))
    True
    """
    try:
        return _REGISTRY[primitive_name]
    except KeyError:
        raise UnknownPrimitiveError(primitive_name) from None


def registered_primitives() -> tuple[str, ...]:
    """Sorted names of all primitives that have a rule.

    Examples
    --------
    >>> "conv_general_dilated" in registered_primitives()
    True
    """
    return tuple(sorted(_REGISTRY))


def cost_of(primitive: str, params: Mapping[str, Any] | None, in_avals: Iterable[Any],
            out_avals: Iterable[Any]) -> OpCost:
    """Cost of one execution of ``primitive`` with the given params and avals.

    Parameters
    ----------
    primitive : str
        Primitive name (a ``jax.extend.core.Primitive`` is accepted too).
    params : Mapping
        The equation's params.
    in_avals, out_avals : iterable
        Avals of the equation's inputs (literals included) and outputs.

    Returns
    -------
    OpCost

    Raises
    ------
    UnknownPrimitiveError
        If no rule is registered for ``primitive``.

    Examples
    --------
    >>> import jax, numpy as np
    >>> x = jax.ShapeDtypeStruct((4, 8), np.float32)
    >>> y = jax.ShapeDtypeStruct((4,), np.float32)
    >>> cost_of("reduce_sum", {"axes": (1,)}, [x], [y]).flops
    28
    >>> cost_of("tanh", {}, [x], [x]).transcendentals
    32
    """
    name = primitive if isinstance(primitive, str) else getattr(primitive, "name", str(primitive))
    rule = get_cost_rule(name)
    ctx = CostContext(name, params if params is not None else {}, tuple(in_avals), tuple(out_avals))
    return rule(ctx)


def cost_of_eqn(eqn: Any) -> OpCost:
    """:func:`cost_of` applied to a jaxpr equation.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> eqn = jax.make_jaxpr(jnp.exp)(jnp.ones(5)).eqns[0]
    >>> cost_of_eqn(eqn).transcendentals
    5
    """
    return cost_of(eqn.primitive.name, eqn.params, [v.aval for v in eqn.invars],
                   [v.aval for v in eqn.outvars])


# ----------------------------------------------------------------------------------------
# Shape and dtype helpers
# ----------------------------------------------------------------------------------------

def _numel(aval: Any) -> int:
    shape = getattr(aval, "shape", None)
    if shape is None:
        return 0
    try:
        return math.prod(int(d) for d in shape)
    except Exception:  # symbolic (shape-polymorphic) dimensions have no static size
        return 0


def _shape(aval: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in getattr(aval, "shape", ()))


def _itemsize(dtype: Any) -> int:
    try:
        if jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
            size = getattr(dtype, "itemsize", None)
            return int(size) if size is not None else 0
        return int(np.dtype(dtype).itemsize)
    except Exception:
        return int(getattr(dtype, "itemsize", 0) or 0)


def aval_nbytes(aval: Any) -> int:
    """Size in bytes of an aval: ``size * itemsize``; 0 for non-arrays.

    Extended dtypes (PRNG key arrays) use ``dtype.itemsize`` when it exists, else 0.

    Examples
    --------
    >>> import jax, numpy as np, jax.numpy as jnp
    >>> aval_nbytes(jax.ShapeDtypeStruct((4, 8), jnp.bfloat16))
    64
    >>> aval_nbytes(jax.ShapeDtypeStruct((3,), np.bool_)), aval_nbytes(object())
    (3, 0)
    """
    dtype = getattr(aval, "dtype", None)
    if dtype is None or getattr(aval, "shape", None) is None:
        return 0
    return _numel(aval) * _itemsize(dtype)


def _family(dtype: Any) -> str:
    """Dtype family used by the per-element tables: f16, f32, f64, c, int, uint, bool, other."""
    try:
        if jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
            return "other"
        if jax.dtypes.issubdtype(dtype, np.bool_):
            return "bool"
        if jax.dtypes.issubdtype(dtype, np.complexfloating):
            return "c"
        if jax.dtypes.issubdtype(dtype, np.floating):
            size = np.dtype(dtype).itemsize
            return "f16" if size <= 2 else ("f32" if size == 4 else "f64")
        if jax.dtypes.issubdtype(dtype, np.unsignedinteger):
            return "uint"
        if jax.dtypes.issubdtype(dtype, np.integer):
            return "int"
    except Exception:
        pass
    return "other"


def _dtype_of(aval: Any) -> Any:
    return getattr(aval, "dtype", None)


def _is_inexact(dtype: Any) -> bool:
    return _family(dtype) in ("f16", "f32", "f64", "c")


def _floor_log2(x: int) -> int:
    return x.bit_length() - 1 if x > 0 else 0


def _ceil_log2(x: int) -> int:
    return (x - 1).bit_length() if x > 1 else 0


def _jaxpr_cost(jaxpr: Any) -> tuple[int, int]:
    """(flops, transcendentals) of one evaluation of a (closed) jaxpr, e.g. a reducer body.

    Container equations inside are expanded (``cond``: the most expensive branch).
    Primitives without a rule count one flop per output element.
    """
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    flops = trans = 0
    for eqn in getattr(inner, "eqns", ()):
        try:
            c = cost_of_eqn(eqn)
        except UnknownPrimitiveError:
            c = OpCost(flops=sum(_numel(v.aval) for v in eqn.outvars))
        flops += c.flops
        trans += c.transcendentals
        if c.op_class == "control":
            subs = [_jaxpr_cost(j) for j in _sub_jaxprs(eqn.params)]
            if subs and eqn.primitive.name == "cond":
                f, t = max(subs)
                flops, trans = flops + f, trans + t
            else:
                flops += sum(f for f, _ in subs)
                trans += sum(t for _, t in subs)
    return flops, trans


def _sub_jaxprs(params: Mapping[str, Any]) -> list[Any]:
    found: list[Any] = []
    for value in params.values():
        items = value if isinstance(value, (tuple, list)) else (value,)
        for item in items:
            if hasattr(item, "eqns") or hasattr(getattr(item, "jaxpr", None), "eqns"):
                found.append(item)
    return found


# ----------------------------------------------------------------------------------------
# Elementwise
# ----------------------------------------------------------------------------------------

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
for _name in ("exp", "log", "log1p", "expm1", "tanh", "sin", "cos", "tan", "sqrt", "rsqrt", "cbrt",
              "erf", "atan", "pow", "atan2"):
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


# ----------------------------------------------------------------------------------------
# Reductions
# ----------------------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------------------
# Matrix products and convolutions
# ----------------------------------------------------------------------------------------

def _dot_dims(ctx: CostContext) -> tuple[int, int, int, int]:
    (lc, rc), (lb, rb) = ctx.params["dimension_numbers"]
    ls, rs = _shape(ctx.in_avals[0]), _shape(ctx.in_avals[1])
    batch = math.prod(ls[i] for i in lb)
    k = math.prod(ls[i] for i in lc)
    m = math.prod(d for i, d in enumerate(ls) if i not in lc and i not in lb)
    n = math.prod(d for i, d in enumerate(rs) if i not in rc and i not in rb)
    return batch, m, k, n


@register_cost_rule("dot_general")
def _dot_general_rule(ctx: CostContext) -> OpCost:
    """``2 * batch * m * k * n`` with batch/m/k/n the products of the batch, lhs-free,
    contracting and rhs-free dimensions.

    XLA strength-reduces two degenerate cases, counted as it does: a dot with no
    contraction (``k == 1``) becomes a multiply (``batch * m * n``); a vector-vector dot
    (``m == n == 1``) becomes multiply + reduce (``batch * (2k - 1)``).
    ``preferred_element_type`` does not change the count.
    """
    batch, m, k, n = _dot_dims(ctx)
    if batch * m * n == 0:
        flops = 0
    elif m == 1 and n == 1:
        flops = batch * max(2 * k - 1, 0)
    elif k == 1:
        flops = batch * m * n
    else:
        flops = 2 * batch * m * k * n
    return ctx.cost(flops=flops, m=m, k=k, n=n, batch=batch, op_class="gemm")


def _count_congruent(lo: int, hi: int, residue: int, modulus: int) -> int:
    """How many integers o in [lo, hi] have o = residue (mod modulus)."""
    if lo > hi:
        return 0
    return (hi - residue) // modulus - (lo - 1 - residue) // modulus


def _valid_taps(size: int, kernel: int, out: int, stride: int, pad_lo: int, lhs_dil: int,
                rhs_dil: int) -> int:
    """Pairs (output position, kernel tap) that read a real input element along one axis.

    Input positions are those of the lhs dilated by ``lhs_dil`` (holes excluded) and padded
    by ``pad_lo`` on the low side; kernel taps are spaced by ``rhs_dil``.
    """
    if size <= 0 or kernel <= 0 or out <= 0:
        return 0
    extent = (size - 1) * lhs_dil + 1
    total = 0
    for tap in range(kernel):
        shift = tap * rhs_dil - pad_lo  # input position = o * stride + shift
        lo = max(0, -(shift // stride))  # ceil(-shift / stride)
        hi = min(out - 1, (extent - 1 - shift) // stride)
        if lo > hi:
            continue
        if lhs_dil == 1:
            total += hi - lo + 1
            continue
        # need (o * stride + shift) % lhs_dil == 0
        target = (-shift) % lhs_dil
        g = math.gcd(stride, lhs_dil)
        if target % g:
            continue
        mod = lhs_dil // g
        residue = 0 if mod == 1 else (target // g) * pow(stride // g, -1, mod) % mod
        total += _count_congruent(lo, hi, residue, mod)
    return total


@register_cost_rule("conv_general_dilated")
def _conv_rule(ctx: CostContext) -> OpCost:
    """Convolution: 2 flops per multiply-add that reads a real input element.

    Per spatial axis the count of valid (output position, kernel tap) pairs accounts for
    padding (including negative padding), window strides, lhs dilation (holes are not
    real input) and rhs dilation; the total is
    ``2 * (C_in / feature_groups) * C_out * (N / batch_groups) * prod(valid pairs)``.

    A ``batch_group_count`` equal to both the batch and the output-feature count (the
    weight gradient of a depthwise convolution) is expanded by XLA into a full
    convolution, a mask compare + select, a reduce-window over the groups and, for
    dtypes narrower than 32 bits, conversions to float32 and back; counted that way.

    GEMM view: ``batch = feature_group_count * batch_group_count``,
    ``m = N / batch_group_count * prod(output spatial)``,
    ``k = C_in / feature_group_count * prod(kernel spatial)``, ``n = C_out / batch``; so
    ``2 * batch * m * k * n`` is the dense upper bound of ``flops`` (equal without padding
    or dilation holes).
    """
    p = ctx.params
    dn = p["dimension_numbers"]
    lhs_spec, rhs_spec, out_spec = dn.lhs_spec, dn.rhs_spec, dn.out_spec
    ls, rs, os_ = _shape(ctx.in_avals[0]), _shape(ctx.in_avals[1]), _shape(ctx.out_avals[0])
    fg = int(p.get("feature_group_count", 1) or 1)
    bg = int(p.get("batch_group_count", 1) or 1)
    n_batch, c_in, c_out = ls[lhs_spec[0]], ls[lhs_spec[1]], rs[rhs_spec[0]]
    nsp = len(lhs_spec) - 2
    strides = tuple(p.get("window_strides") or (1,) * nsp)
    padding = tuple(p.get("padding") or ((0, 0),) * nsp)
    lhs_dil = tuple(p.get("lhs_dilation") or (1,) * nsp)
    rhs_dil = tuple(p.get("rhs_dilation") or (1,) * nsp)
    taps = 1
    out_spatial = kernel_spatial = 1
    for i in range(nsp):
        size, kernel, out = ls[lhs_spec[2 + i]], rs[rhs_spec[2 + i]], os_[out_spec[2 + i]]
        out_spatial *= out
        kernel_spatial *= kernel
        taps *= _valid_taps(size, kernel, out, int(strides[i]), int(padding[i][0]),
                            int(lhs_dil[i]), int(rhs_dil[i]))
    flops = 2 * (c_in // fg) * c_out * (n_batch // bg) * taps
    if bg > 1 and n_batch == bg and c_out == bg:
        out = ctx.out_size()
        expanded = out * bg
        flops = flops * bg + 2 * expanded + out * (bg - 1)
        if _itemsize(_dtype_of(ctx.out_avals[0])) < 4:
            flops += expanded + out
    groups = fg * bg
    return ctx.cost(flops=flops, m=(n_batch // bg) * out_spatial, k=(c_in // fg) * kernel_spatial,
                    n=c_out // groups, batch=groups, op_class="conv")


# ----------------------------------------------------------------------------------------
# Data movement
# ----------------------------------------------------------------------------------------

_DATA_MOVEMENT = (
    "broadcast_in_dim", "broadcast_to", "reshape", "squeeze", "expand_dims", "transpose", "slice",
    "dynamic_slice", "dynamic_update_slice", "concatenate", "pad", "rev", "iota", "copy", "copy_p",
    "split", "tile", "stack", "unstack", "device_put", "sharding_constraint", "reshard", "mesh_cast",
    "layout_constraint", "optimization_barrier", "random_wrap", "random_unwrap", "random_clone",
    "pvary", "stop_gradient", "zeros_like",
)


@register_cost_rule(*_DATA_MOVEMENT)
def _data_movement_rule(ctx: CostContext) -> OpCost:
    """Layout, indexing and copy primitives: no flops, only bytes."""
    return ctx.cost(op_class="data_movement")


def _mode_name(mode: Any) -> str:
    return str(getattr(mode, "name", mode)).upper()


@register_cost_rule("gather")
def _gather_rule(ctx: CostContext) -> OpCost:
    """A gather moves data (no flops), except in ``FILL_OR_DROP`` mode, which JAX lowers
    with a bounds mask: two compares and an ``and`` per index element, an ``and``-reduce
    over the index vector, a select per output element (and a conversion of the indices
    when their dtype is not the index dtype JAX picks for the operand)."""
    if "FILL_OR_DROP" not in _mode_name(ctx.params.get("mode")):
        return ctx.cost(op_class="data_movement")
    operand, indices = ctx.in_avals[0], ctx.in_avals[1]
    idx_shape = _shape(indices)
    n_idx = ctx.in_size(1)
    vec = idx_shape[-1] if idx_shape else 1
    flops = 3 * n_idx + (n_idx - n_idx // vec if vec > 1 else 0) + ctx.out_size()
    index_dtype = np.int64 if any(d > np.iinfo(np.int32).max for d in _shape(operand)) else np.int32
    if _dtype_of(indices) != np.dtype(index_dtype):
        flops += n_idx
    return ctx.cost(flops=flops, op_class="data_movement")


_SCATTER_COMBINER = {
    "scatter-add": "add", "scatter_add": "add", "scatter-sub": "sub", "scatter_sub": "sub",
    "scatter-mul": "mul", "scatter_mul": "mul", "scatter-min": "min", "scatter_min": "min",
    "scatter-max": "max", "scatter_max": "max",
}


@register_cost_rule("scatter", *_SCATTER_COMBINER)
def _scatter_rule(ctx: CostContext) -> OpCost:
    """Scatter: one combiner application per update element (``scatter-add`` etc.); plain
    ``scatter`` costs its ``update_jaxpr`` per update element (nothing for ``.set``).
    ``CLIP`` mode clamps the indices (one flop per index element)."""
    updates = ctx.in_size(2)
    if ctx.primitive == "scatter":
        jaxpr = ctx.params.get("update_jaxpr")
        per: _Entry = _jaxpr_cost(jaxpr) if jaxpr is not None else (0, 0)
    else:
        per = _ew_entry(_SCATTER_COMBINER[ctx.primitive], _dtype_of(ctx.in_avals[0]))
    flops = updates * per[0]
    if "CLIP" in _mode_name(ctx.params.get("mode")):
        flops += ctx.in_size(1)
    return ctx.cost(flops=flops, transcendentals=updates * per[1], op_class="data_movement")


@register_cost_rule("sort")
def _sort_rule(ctx: CostContext) -> OpCost:
    """``n * ceil(log2 n)`` with ``n`` the total element count of the first operand,
    whatever the sort dimension, the number of operands or keys (XLA's convention)."""
    n = ctx.in_size(0)
    return ctx.cost(flops=n * _ceil_log2(n), op_class="data_movement")


@register_cost_rule("top_k", "approx_top_k")
def _top_k_rule(ctx: CostContext) -> OpCost:
    """Estimate: the cost of sorting the operand (``n * ceil(log2 n)``).

    XLA's CPU backend runs top-k as a custom call and reports no count (-1) for it, so
    there is nothing to match; the estimate is what XLA charges when it decomposes top-k
    into a sort.
    """
    n = ctx.in_size(0)
    return ctx.cost(flops=n * _ceil_log2(n), op_class="data_movement")


# ----------------------------------------------------------------------------------------
# Random numbers
# ----------------------------------------------------------------------------------------

def _key_impl(dtype: Any) -> str:
    text = str(dtype)
    if text.startswith("key<") and text.endswith(">"):
        return text[4:-1]
    return ""


def _partitionable() -> bool:
    try:
        return bool(jax.config.jax_threefry_partitionable)
    except AttributeError:
        return True


def _iota_2x32_flops(shape: Sequence[int], n: int) -> int:
    """Flops XLA keeps for the flattened counter ``sum_d iota_d * stride_d`` (computed
    twice: once for the high and once for the low 32-bit word)."""
    dims = [int(d) for d in shape if int(d) != 1]
    if len(dims) <= 1:
        return 0
    return 2 * (sum(dims[:-1]) + (len(dims) - 1) * n)


_THREEFRY_BITS_PER_ELEMENT = {8: 46, 16: 46, 32: 45, 64: 48}


def _philox_blocks(words: int) -> int:
    return -(-words // 4)


@register_cost_rule("random_bits")
def _random_bits_rule(ctx: CostContext) -> OpCost:
    """Random bits from a key.

    threefry2x32 with ``jax_threefry_partitionable`` (JAX's default): one Threefry hash per
    output element (45 flops for 32-bit outputs, 46 for 8/16-bit, 48 for 64-bit; XLA counts
    the 5-iteration round loop once), 13 flops of key schedule, and the counter
    computation of :func:`_iota_2x32_flops`; a single element costs ``per + 8``.
    Non-partitionable threefry hashes pairs of 32-bit words (``41 * pairs + 13``;
    approximate below 32 bits). ``rbg``/``unsafe_rbg`` keys use XLA's Philox expansion:
    about ``149`` flops per 128-bit block plus 60 (exact above 4 elements of 32 bits).
    Exact for an unbatched key; a batch of keys is charged per key.
    """
    shape = tuple(int(d) for d in ctx.params.get("shape", ()))
    bits = int(ctx.params.get("bit_width", 32))
    n = math.prod(shape)
    keys = max(ctx.in_size(0), 1)
    impl = _key_impl(_dtype_of(ctx.in_avals[0]))
    if n == 0:
        flops = 0
    elif impl in ("rbg", "urbg"):
        flops = 149 * _philox_blocks(n * max(1, bits // 32)) + 60 + (n if bits < 32 else 0)
    elif _partitionable():
        per = _THREEFRY_BITS_PER_ELEMENT.get(bits, 45)
        flops = per + 8 if n == 1 else per * n + 13 + _iota_2x32_flops(shape, n)
    else:
        words = -(-n * bits // 32)
        flops = 41 * -(-words // 2) + 13
    return ctx.cost(flops=keys * flops, op_class="elementwise")


@register_cost_rule("random_split")
def _random_split_rule(ctx: CostContext) -> OpCost:
    """threefry split into ``n`` keys: ``44 n + 13`` plus the counter flops (52 for one key;
    ``41 n + 13`` without ``jax_threefry_partitionable``)."""
    shape = tuple(int(d) for d in ctx.params.get("shape", ()))
    n = math.prod(shape)
    if n == 0:
        flops = 0
    elif _partitionable():
        flops = 52 if n == 1 else 44 * n + 13 + _iota_2x32_flops(shape, n)
    else:
        flops = 41 * n + 13
    return ctx.cost(flops=max(ctx.in_size(0), 1) * flops, op_class="elementwise")


def _seed_flops(dtype: Any) -> int:
    size = _itemsize(dtype)
    if size == 8:
        return 4
    if _family(dtype) == "uint":
        return 1
    try:  # a signed seed is widened first when 64-bit types are enabled
        return 5 if jax.config.jax_enable_x64 else 3
    except AttributeError:
        return 3


@register_cost_rule("random_seed")
def _random_seed_rule(ctx: CostContext) -> OpCost:
    """Building a threefry key from an integer seed, per key: 1 flop for unsigned 32-bit
    seeds, 3 for signed ones (5 when ``jax_enable_x64`` is on), 4 for 64-bit seeds."""
    seed = ctx.in_avals[0] if ctx.in_avals else None
    return ctx.cost(flops=max(ctx.in_size(0), 1) * _seed_flops(_dtype_of(seed)), op_class="elementwise")


@register_cost_rule("random_fold_in")
def _random_fold_in_rule(ctx: CostContext) -> OpCost:
    """One threefry hash of the key (52 flops) plus seeding from the uint32 data (4), per key.

    JAX converts the folded-in data to uint32 in a separate equation beforehand.
    """
    return ctx.cost(flops=max(ctx.in_size(0), 1) * 56, op_class="elementwise")


@register_cost_rule("threefry2x32")
def _threefry2x32_rule(ctx: CostContext) -> OpCost:
    """The raw Threefry-2x32 hash over ``n`` pairs: ``41 n + 11 + 2 * key elements``."""
    n = ctx.out_size(0)
    key = max(ctx.in_size(0), ctx.in_size(1), 1)
    return ctx.cost(flops=41 * n + 11 + 2 * key if n else 0, op_class="elementwise")


@register_cost_rule("rng_bit_generator")
def _rng_bit_generator_rule(ctx: CostContext) -> OpCost:
    """Estimate of XLA's Philox expansion: ``149`` flops per 128-bit block plus 94, plus a
    conversion per element below 32 bits (exact on CPU above 4 elements)."""
    bits_aval = ctx.out_avals[1] if len(ctx.out_avals) > 1 else ctx.out_avals[0]
    n = _numel(bits_aval)
    width = 8 * _itemsize(_dtype_of(bits_aval))
    flops = 149 * _philox_blocks(n * max(1, width // 32)) + 94 + (n if width < 32 else 0) if n else 0
    return ctx.cost(flops=flops, op_class="elementwise")


@register_cost_rule("rng_uniform")
def _rng_uniform_rule(ctx: CostContext) -> OpCost:
    """Estimate: about 41 flops per element plus 21."""
    n = ctx.out_size()
    return ctx.cost(flops=41 * n + 21 if n else 0, op_class="elementwise")


# ----------------------------------------------------------------------------------------
# FFT and linear algebra
# ----------------------------------------------------------------------------------------

@register_cost_rule("fft")
def _fft_rule(ctx: CostContext) -> OpCost:
    """``8 * prod(floor(log2 L)) * operand elements`` over the FFT lengths ``L`` (XLA counts
    4 real multiply-adds per complex butterfly)."""
    lengths = tuple(int(x) for x in ctx.params.get("fft_lengths", ()))
    logs = math.prod(_floor_log2(x) for x in lengths) if lengths else 0
    return ctx.cost(flops=8 * logs * ctx.in_size(0), op_class="other")


def _matrix_batch(aval: Any) -> tuple[int, int, int]:
    shape = _shape(aval)
    if len(shape) < 2:
        return 1, (shape[0] if shape else 1), 1
    return math.prod(shape[:-2]), shape[-2], shape[-1]


@register_cost_rule("cholesky")
def _cholesky_rule(ctx: CostContext) -> OpCost:
    """Textbook estimate ``n^3 / 3`` per matrix (XLA's CPU count covers only the ops
    around the LAPACK call)."""
    b, n, _ = _matrix_batch(ctx.in_avals[0])
    return ctx.cost(flops=b * n**3 // 3, op_class="other")


@register_cost_rule("triangular_solve")
def _triangular_solve_rule(ctx: CostContext) -> OpCost:
    """Textbook estimate ``m^2 * nrhs`` per system (XLA's CPU backend reports -1)."""
    _, m, _ = _matrix_batch(ctx.in_avals[0])
    return ctx.cost(flops=ctx.in_size(1) * m, op_class="other")


@register_cost_rule("lu")
def _lu_rule(ctx: CostContext) -> OpCost:
    """Textbook estimate ``max * min^2 - min^3 / 3`` per matrix."""
    b, m, n = _matrix_batch(ctx.in_avals[0])
    lo, hi = min(m, n), max(m, n)
    return ctx.cost(flops=b * (hi * lo**2 - lo**3 // 3), op_class="other")


def _geqrf_flops(m: int, n: int) -> int:
    lo, hi = min(m, n), max(m, n)
    return 2 * hi * lo**2 - 2 * lo**3 // 3


def _orgqr_flops(m: int, n: int, k: int) -> int:
    return max(4 * m * n * k - 2 * (m + n) * k**2 + 4 * k**3 // 3, 0)


@register_cost_rule("geqrf", "geqp3")
def _geqrf_rule(ctx: CostContext) -> OpCost:
    """Textbook Householder QR estimate ``2 max min^2 - 2 min^3 / 3`` per matrix."""
    b, m, n = _matrix_batch(ctx.in_avals[0])
    return ctx.cost(flops=b * _geqrf_flops(m, n), op_class="other")


@register_cost_rule("householder_product")
def _householder_product_rule(ctx: CostContext) -> OpCost:
    """Textbook estimate ``4mnk - 2(m+n)k^2 + 4k^3/3`` per matrix."""
    b, m, n = _matrix_batch(ctx.in_avals[0])
    k = _shape(ctx.in_avals[1])[-1] if len(ctx.in_avals) > 1 and _shape(ctx.in_avals[1]) else min(m, n)
    return ctx.cost(flops=b * _orgqr_flops(m, n, k), op_class="other")


@register_cost_rule("qr")
def _qr_rule(ctx: CostContext) -> OpCost:
    """Textbook estimate: Householder QR plus forming Q."""
    b, m, n = _matrix_batch(ctx.in_avals[0])
    k = min(m, n)
    q_cols = m if ctx.params.get("full_matrices", True) else k
    return ctx.cost(flops=b * (_geqrf_flops(m, n) + _orgqr_flops(m, q_cols, k)), op_class="other")


@register_cost_rule("eigh")
def _eigh_rule(ctx: CostContext) -> OpCost:
    """Textbook estimate ``9 n^3`` per symmetric matrix (eigenvectors included)."""
    b, n, _ = _matrix_batch(ctx.in_avals[0])
    return ctx.cost(flops=b * 9 * n**3, op_class="other")


@register_cost_rule("eig")
def _eig_rule(ctx: CostContext) -> OpCost:
    """Textbook estimate: ``25 n^3`` with eigenvectors, ``10 n^3`` without."""
    b, n, _ = _matrix_batch(ctx.in_avals[0])
    vectors = ctx.params.get("compute_left_eigenvectors", True) or ctx.params.get(
        "compute_right_eigenvectors", True)
    return ctx.cost(flops=b * (25 if vectors else 10) * n**3, op_class="other")


@register_cost_rule("svd")
def _svd_rule(ctx: CostContext) -> OpCost:
    """Golub-Van Loan estimate: ``4 m^2 n + 8 m n^2 + 9 n^3`` with singular vectors
    (``m >= n``), ``4 m n^2 - 4 n^3 / 3`` without."""
    b, m, n = _matrix_batch(ctx.in_avals[0])
    hi, lo = max(m, n), min(m, n)
    if ctx.params.get("compute_uv", True):
        flops = 4 * hi**2 * lo + 8 * hi * lo**2 + 9 * lo**3
    else:
        flops = 4 * hi * lo**2 - 4 * lo**3 // 3
    return ctx.cost(flops=b * flops, op_class="other")


# ----------------------------------------------------------------------------------------
# Containers, callbacks, kernels, collectives
# ----------------------------------------------------------------------------------------

_CONTROL = (
    "jit", "pjit", "closed_call", "core_call", "call", "xla_call", "xla_pmap", "pmap", "scan", "while",
    "cond", "checkpoint", "remat", "remat2", "remat_opt", "custom_jvp_call", "custom_jvp_call_jaxpr",
    "custom_vjp_call", "custom_vjp_call_jaxpr", "custom_lin", "custom_transpose_call",
    "custom_vmap_call", "custom_linear_solve", "linear_call", "run_state", "shard_map", "composite",
    "for",
)


@register_cost_rule(*_CONTROL)
def _control_rule(ctx: CostContext) -> OpCost:
    """Containers cost nothing themselves (no flops, no bytes): the caller walks their
    sub-jaxprs, whose equations carry the cost."""
    return OpCost(op_class="control")


@register_cost_rule("pure_callback", "io_callback", "debug_callback", "debug_print", "ffi_call")
def _opaque_rule(ctx: CostContext) -> OpCost:
    """Host callbacks and foreign calls: known, but their work is invisible (bytes only)."""
    return ctx.cost(op_class="opaque")


@register_cost_rule("pallas_call")
def _pallas_call_rule(ctx: CostContext) -> OpCost:
    """A Pallas kernel: its ``cost_estimate`` when given (what XLA uses too), else opaque."""
    est = ctx.params.get("cost_estimate")
    if est is None:
        return ctx.cost(op_class="opaque")
    return ctx.cost(flops=getattr(est, "flops", 0), transcendentals=getattr(est, "transcendentals", 0),
                    op_class="other")


@register_cost_rule("psum", "pmax", "pmin", "ppermute", "all_gather", "all_to_all", "reduce_scatter",
                    "psum_scatter", "axis_index", "pbroadcast", "psum_invariant", "all_gather_invariant",
                    "ragged_all_to_all", "unreduced_psum")
def _collective_rule(ctx: CostContext) -> OpCost:
    """Collectives: communication, counted as bytes only (no flops)."""
    return ctx.cost(op_class="other")
