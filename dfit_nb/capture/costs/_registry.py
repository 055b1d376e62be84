"""The cost-rule registry: :class:`OpCost`, :class:`CostContext` and rule lookup.

A rule is a function from a :class:`CostContext` (one equation reduced to its primitive
name, params and avals) to an :class:`OpCost`; :func:`register_cost_rule` files it under
primitive names and :func:`cost_of` looks it up and applies it. :func:`_jaxpr_cost` applies
the rules to every equation of a small jaxpr, such as the reducer body of ``lax.reduce``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ._shapes import _numel, aval_nbytes

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
