"""Walk a ClosedJaxpr and every jaxpr nested in it, one row per equation.

The walk is a depth-first pre-order traversal: an equation gets its op id, then
the jaxprs in its params get theirs, in parameter order. In the same pass it
builds a *tagged* copy of the jaxpr where every equation runs under one extra
name scope ``dfit_op<id>``; lowering that copy stamps the op id into the
``op_name`` metadata of every HLO instruction the op turns into (see
``lowering.py``), and the eager probe interprets the same copy.

Regions: an equation's name stack is relative to the jaxpr that holds it, so
the path of an op is the path of its enclosing container plus its own stack.
Nested ``jit`` calls add a ``jit(<name>)`` segment (the nested-jit path), unless
the jitted function is a library's (written in an installed package or the
standard library: ``jnp.take``'s ``_take``, ``jax.nn.relu``), which is how the
library is written and no layer of the user's; other
containers (scan, while, cond, remat, custom_jvp/vjp) add none: their nesting is
recorded in ``parent``, ``context`` and ``branch`` instead.

Dataflow edges connect *leaf* ops (ops that compute) through containers: a
nested jaxpr's inputs are bound to whatever produced the container's inputs,
and a container's outputs to the leaf ops that produced its jaxpr's outputs
(for ``cond``, every branch's). Loop-carried edges (a scan body's output
feeding the next iteration) are not listed; a cond's predicate is an edge into
the cond op itself.

Array sizes: the same pass looks at every variable (the inputs and constants of
every jaxpr, the outputs of every equation) and keeps the arrays XLA cannot
represent (:data:`XLA_MAX_BYTES`) and the largest output of an op that runs
whenever the program runs, so that capture can refuse a program before
XLA's compiler aborts the process on it, or before a runtime mode allocates
more than the device holds.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Iterator
from typing import Any

import jax.extend.core as jcore

from .._operands import Operand
from .._operands import text as operand_text
from ..errors import OpaquePrimitiveWarning
from . import _jax_internals as internals
from .costs import OpCost, UnknownPrimitiveError, aval_nbytes, conventions, cost_of, has_cost_rule
from .costs._shapes import _itemsize

TAG_PREFIX = "dfit_op"

#: The most bytes one array may have for XLA to represent it: 2**63 - 1. XLA's shape code
#: (``ShapeUtil::MakeValidatedShape``, xla/shape_util.cc) multiplies the element's byte width by each dimension in
#: turn and refuses the shape when that running product overflows int64; inside ``compile()`` the refusal is a
#: failed ``StatusOr`` access, "overflow in static extent product", which aborts the whole process (no Python
#: exception). Measured with jaxlib 0.10.2 on the CPU backend, compiling ``jnp.broadcast_to(x, shape)`` (and
#: ``x * 2`` of an argument of that shape) in a subprocess: float32[2**61 - 1], int16[2**62 - 1], int8[2**63 - 1],
#: int8[2**31, 2**32 - 1], int4[2**63 - 1] and bool[2**63 - 1] compile (sub-byte types count one byte an element);
#: float32[2**61], int16[2**62], int8[2**32, 2**31] and float32[2**31, 2**30] abort, and so does
#: float32[2**40, 2**40, 0] (no elements, but the product overflows before the zero) while float32[0, 2**40, 2**40]
#: compiles. Lowering to StableHLO and ``jax.make_jaxpr`` accept all of them: the abort comes at compile, in every
#: mode (static mode compiles too). A dimension of 2**63 or more fails earlier, in JAX's lowering (a TypeError).
XLA_MAX_BYTES = 2**63 - 1


@dataclasses.dataclass
class OpRecord:
    """One jaxpr equation as captured (per single execution)."""

    id: int
    primitive: str
    region: str
    parent: int  # enclosing container op, -1 at the top level
    context: str  # which jaxpr of the parent holds it: body, cond, branch1, jit, ...
    branch: int  # index of the innermost enclosing cond branch, -1 if none
    depth: int
    container: str  # canonical container kind ('' for leaf ops)
    trip_count: int  # scan length; shards of a shard_map; 0 for while (unknown statically); 1 otherwise
    n_branches: int  # cond only
    inputs: tuple[Operand, ...]  # (dtype, dims) of each input: trace.operands (dfit_nb._operands)
    outputs: tuple[Operand, ...]  # and of each output
    dtype: str
    source: str
    cost: OpCost
    opaque: bool = False
    # argument leaves (positions among the traced leaves) the op reads directly or through layout-only ops
    # (reshape, transpose, convert, broadcast, ...): what parameter regions anchor on (regions.py)
    reads: tuple[int, ...] = ()
    scope: str = ""  # the name-stack path as walked (named scopes, transform wrappers, nested jits)
    direction: str = "forward"  # forward | backward | optimizer (regions.py)

    @property
    def in_shapes(self) -> str:
        """The inputs as display text (``float32[2,3] int32[]``)."""
        return operand_text(self.inputs)

    @property
    def out_shapes(self) -> str:
        """The outputs as display text."""
        return operand_text(self.outputs)


@dataclasses.dataclass(frozen=True)
class ArrayInfo:
    """One array of the program as the walk saw it: where it comes from, its shape and dtype."""

    op: int  # the op whose output it is, or whose nested jaxpr it enters; -1: an input or constant of the program
    role: str  # "output" (of op), "input" (of the program or of op's nested jaxpr), "constant"
    index: int  # position among the op's outputs, or the jaxpr's inputs or constants
    shape: tuple[int, ...]
    dtype: str
    itemsize: int  # bytes per element as XLA counts them (sub-byte types: 1)

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.elements * self.itemsize

    def describe(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


def xla_representable(shape: tuple[int, ...], itemsize: int) -> bool:
    """XLA's own overflow check of a shape (:data:`XLA_MAX_BYTES`): the byte width times each dimension in turn
    stays within 2**63 - 1, so a zero-size array fails too when the dimensions before its 0 overflow.

    >>> xla_representable((2**61 - 1,), 4), xla_representable((2**61,), 4), xla_representable((2**40, 2**40, 0), 4)
    (True, False, False)
    """
    extent = max(int(itemsize), 1)
    for d in shape:
        extent *= d
        if extent > XLA_MAX_BYTES:
            return False
    return True


@dataclasses.dataclass
class Walk:
    """What a walk produces."""

    records: list[OpRecord]
    edges: list[tuple[int, int, int, int]]  # (src, dst, operand position in dst, bytes)
    input_edges: list[tuple[int, int, int, int]]  # (argument leaf, dst, operand position in dst, bytes)
    tagged: jcore.ClosedJaxpr
    eqn_op: dict[int, int]  # id(tagged eqn) -> op id, for interpreters
    live: set[int]  # ops whose outputs are used (or are outputs)
    constant: set[int]  # ops whose inputs are all literals or closed-over constants
    opaque_primitives: tuple[str, ...]
    # arrays XLA cannot represent (XLA_MAX_BYTES), in walk order: each jaxpr's inputs and constants, then its
    # equations' outputs, an op's after those of its nested jaxprs
    unrepresentable: list[ArrayInfo] = dataclasses.field(default_factory=list)
    # the largest output of an op that runs whenever the program runs (not inside a cond branch, a while body,
    # a scan of length 0 or an opaque op): a lower bound of what interpreting the program op by op allocates
    largest: ArrayInfo | None = None
    const_arrays: int = 0  # closed-over constants of one dimension or more, in every jaxpr walked
    outputs: set[int] = dataclasses.field(default_factory=set)  # leaf ops that may produce the program's outputs
    # two ops XLA merges before counting, counted as it counts them (costs/conventions.py):
    # (kind "clamp" | "pad_into_conv", inner op, outer op, FLOPs per execution this removed from the plain count)
    merged: list[tuple[str, int, int, int]] = dataclasses.field(default_factory=list)


def sub_jaxprs(eqn: Any) -> list[tuple[str, Any]]:
    """The jaxprs held in an equation's params, with a context label each.

    Order is parameter order (and position inside tuples), which fixes op ids.
    """
    found: list[tuple[str, Any]] = []
    if internals.CONTAINER_ALIASES.get(eqn.primitive.name) == "linear_solve":  # the one jaxpr the forward pass runs
        solve = getattr(eqn.params.get("jaxprs"), "solve", None)
        return [] if solve is None else [(_context_label(eqn.primitive.name, "jaxprs", 2), solve)]
    for key, value in eqn.params.items():
        if isinstance(value, (jcore.ClosedJaxpr, jcore.Jaxpr)):
            found.append((_context_label(eqn.primitive.name, key, None), value))
        elif isinstance(value, (tuple, list)):
            for i, item in enumerate(value):
                if isinstance(item, (jcore.ClosedJaxpr, jcore.Jaxpr)):
                    found.append((_context_label(eqn.primitive.name, key, i), item))
    return found


def _context_label(primitive: str, key: str, index: int | None) -> str:
    kind = internals.CONTAINER_ALIASES.get(primitive, "")
    if kind == "cond" and key == "branches":
        return f"branch{index}"
    if kind == "while":
        return "cond" if key.startswith("cond") else "body"
    if kind == "scan":
        return "body"
    if kind and kind != "linear_solve":  # a linear solve's jaxprs are four of one tuple: labelled by position
        return kind
    return key if index is None else f"{key}{index}"


def _open(j: Any) -> tuple[jcore.Jaxpr, list[Any]]:
    if isinstance(j, jcore.ClosedJaxpr):
        return j.jaxpr, list(j.consts)
    return j, []


@functools.cache
def _dtype_name(dtype: Any) -> str:
    return str(dtype)  # numpy's dtype.__str__ is slow and called for every aval


def _operands(avals: Iterator[Any]) -> tuple[Operand, ...]:
    """``(dtype, dims)`` of each abstract value (a value that is not an array: its type's name, dims None)."""
    out = []
    for a in avals:
        shape = getattr(a, "shape", None)
        out.append((type(a).__name__, None) if shape is None else (_dtype_name(a.dtype), tuple(map(int, shape))))
    return tuple(out)


#: Primitives that move or re-type an array without computing on it: an argument leaf read through them is still
#: that leaf, for parameter regions (``NNX``'s ``value`` converted, an Equinox bias reshaped, a kernel transposed).
PASS_THROUGH = frozenset({"reshape", "transpose", "convert_element_type", "broadcast_in_dim", "squeeze",
                          "expand_dims", "copy", "copy_p", "reduce_precision", "bitcast_convert_type",
                          "rev"})  # rev: a backward convolution reads its kernel flipped


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


class _Walker:
    def __init__(self) -> None:
        self.records: list[OpRecord] = []
        self.edges: list[tuple[int, int, int, int]] = []
        self.input_edges: list[tuple[int, int, int, int]] = []  # (argument leaf, op, operand, bytes)
        self.eqn_op: dict[int, int] = {}
        self.live: set[int] = set()
        self.constant: set[int] = set()
        self.const_vars: set[Any] = set()
        self.opaque: dict[str, None] = {}
        self.whole_program_jit = False
        self.unrepresentable: list[ArrayInfo] = []
        self.largest: ArrayInfo | None = None
        self.always_runs = True  # whether the jaxpr being walked runs whenever the program does
        self.const_arrays = 0
        self.merged: list[tuple[str, int, int, int]] = []

    def _note(self, avals: Any, op: int, role: str) -> None:
        """Look at the sizes of ``avals``: keep those XLA cannot represent and the largest op output."""
        for index, aval in enumerate(avals):
            shape = getattr(aval, "shape", None)
            if shape is None:
                continue
            try:
                dims = tuple(int(d) for d in shape)
            except Exception:  # symbolic (shape-polymorphic) dimensions: no static size to check
                continue
            itemsize = max(_itemsize(aval.dtype), 1)
            nbytes = math.prod(dims) * itemsize
            largest = self.largest.nbytes if self.largest is not None else -1
            big = nbytes > XLA_MAX_BYTES or (0 in dims and not xla_representable(dims, itemsize))
            if big or (role == "output" and self.always_runs and nbytes > largest):
                info = ArrayInfo(op, role, index, dims, _dtype_name(aval.dtype), itemsize)
                if big:
                    self.unrepresentable.append(info)
                elif role == "output":
                    self.largest = info

    # env maps a Var to the set of leaf ops that may have produced it
    def walk(
        self,
        jaxpr: jcore.Jaxpr,
        env_in: list[frozenset[int]],
        *,
        region: str,
        parent: int,
        context: str,
        branch: int,
        depth: int,
        leaves_in: list[int | None] | None = None,
        aux_in: list[tuple[Any, float | None]] | None = None,
    ) -> tuple[jcore.Jaxpr, list[frozenset[int]], list[int | None], list[tuple[Any, float | None]]]:
        env: dict[Any, frozenset[int]] = {}
        for var, producers in zip(jaxpr.invars, env_in, strict=False):
            env[var] = producers
        # leaf[var]: the argument leaf the variable is, possibly reshaped or re-typed (PASS_THROUGH)
        leaf: dict[Any, int] = {v: i for v, i in zip(jaxpr.invars, leaves_in or (), strict=False) if i is not None}
        self.const_vars.update(jaxpr.constvars)
        self.const_arrays += sum(getattr(v.aval, "ndim", 0) >= 1 for v in jaxpr.constvars)
        self._note((v.aval for v in jaxpr.invars), parent, "input")
        self._note((v.aval for v in jaxpr.constvars), parent, "constant")
        used = _used_vars(jaxpr)
        # for the conventions spanning two ops: who made each variable here, and how many times it is read
        # (aux_in: what a nested jit's caller knows of its inputs: the op that made each, a scalar's value)
        made_by: dict[Any, tuple[int, Any, Any]] = {v: a[0] for v, a in zip(jaxpr.invars, aux_in or (), strict=False)
                                               if a[0] is not None}
        value: dict[Any, float] = {v: a[1] for v, a in zip(jaxpr.invars, aux_in or (), strict=False)
                                   if a[1] is not None}

        def value_of(v: Any) -> float | None:
            return conventions.literal(v) if isinstance(v, jcore.Literal) else value.get(v)

        uses: dict[Any, int] = {}
        for v in [*(u for e in jaxpr.eqns for u in e.invars), *jaxpr.outvars]:
            if not isinstance(v, jcore.Literal):
                uses[v] = uses.get(v, 0) + 1
        new_eqns = []
        for eqn in jaxpr.eqns:
            op_id = len(self.records)
            own = internals.name_stack_str(eqn.source_info)
            op_region = _join(region, own)
            in_prod = [env.get(v, frozenset()) if not isinstance(v, jcore.Literal) else frozenset()
                       for v in eqn.invars]
            name = eqn.primitive.name
            kind = internals.CONTAINER_ALIASES.get(name, "")
            subs = sub_jaxprs(eqn)
            record = OpRecord(
                id=op_id, primitive=name, region=op_region, parent=parent, context=context,
                branch=branch, depth=depth, container=kind if subs and kind else "",
                trip_count=(int(eqn.params.get("length", 1)) if kind == "scan" else 0 if kind == "while"
                            else _shards(eqn) if kind == "shard_map" else 1),
                n_branches=len(eqn.params.get("branches", ())) if kind == "cond" else 0,
                inputs=_operands(v.aval for v in eqn.invars),
                outputs=_operands(v.aval for v in eqn.outvars),
                dtype=_dtype_name(getattr(eqn.outvars[0].aval, "dtype", "")) if eqn.outvars else "",
                source=internals.user_source(eqn.source_info),
                cost=OpCost(op_class="control"),
                reads=tuple(dict.fromkeys(
                    leaf[v] for v in eqn.invars if not isinstance(v, jcore.Literal) and v in leaf)),
                scope=op_region,
            )
            self.records.append(record)
            if any(not isinstance(v, jcore.DropVar) and v in used for v in eqn.outvars):
                self.live.add(op_id)
            if all(isinstance(v, jcore.Literal) or v in self.const_vars for v in eqn.invars):
                self.constant.add(op_id)
                self.const_vars.update(eqn.outvars)
            out_leaf: list[int | None] = [None] * len(eqn.outvars)
            if subs and kind:
                in_leaf = [None if isinstance(v, jcore.Literal) else leaf.get(v) for v in eqn.invars]
                in_aux = [(None, None) if kind != "jit" else (None, value_of(v)) if isinstance(v, jcore.Literal) else
                          (made_by.get(v) if uses.get(v) == 1 else None, value_of(v)) for v in eqn.invars]
                new_params, out_prod, out_leaf, out_aux = self._descend(
                    eqn, record, subs, in_prod, op_region, depth, in_leaf, in_aux)
                for var, (made, val) in zip(eqn.outvars, out_aux, strict=True):
                    if made is not None:
                        made_by[var] = made
                    if val is not None:
                        value[var] = val
            else:
                if name in PASS_THROUGH and record.reads and len(eqn.outvars) == 1:
                    out_leaf = [record.reads[0]]
                new_params = dict(eqn.params)
                # A primitive with jaxprs in its params and a cost rule (reduce, scatter with an
                # update_jaxpr, ...) is a leaf: its rule already costs the inner computation.
                # Without a rule it is an opaque container: its jaxprs are walked so their ops
                # are visible, each assumed to run once per execution, and it stays a leaf for
                # dataflow.
                if subs and not has_cost_rule(name):
                    record.container = "opaque"
                    new_params = self._descend_opaque(eqn, record, subs, op_region, depth)
                record.cost, record.opaque = self._cost(eqn)
                self._merge(eqn, record, made_by, uses, value_of)
                known = tuple(value_of(v) for v in eqn.invars)  # its scalar operands, as XLA will see them
                made_by.update((v, (op_id, eqn, known)) for v in eqn.outvars)
                if name == "convert_element_type" and value_of(eqn.invars[0]) is not None:
                    value[eqn.outvars[0]] = value_of(eqn.invars[0])
                for position, (producers, var) in enumerate(zip(in_prod, eqn.invars, strict=True)):
                    for src in producers:
                        self.edges.append((src, op_id, position, aval_nbytes(var.aval)))
                    # an argument read as it is (no op made it here): which one, so that a kernel whose ops
                    # read the same argument brings it on chip once
                    if not producers and not isinstance(var, jcore.Literal) and var in leaf:
                        self.input_edges.append((leaf[var], op_id, position, aval_nbytes(var.aval)))
                out_prod = [frozenset({op_id})] * len(eqn.outvars)
            # after its nested jaxprs: an array too big is named at the innermost op that makes it
            self._note((v.aval for v in eqn.outvars), op_id, "output")
            for var, producers, lf in zip(eqn.outvars, out_prod, out_leaf, strict=True):
                if not isinstance(var, jcore.DropVar):
                    env[var] = producers
                    if lf is not None:
                        leaf[var] = lf
            tagged_eqn = eqn.replace(
                params=new_params,
                source_info=internals.tag_source_info(eqn.source_info, f"{TAG_PREFIX}{op_id}"),
            )
            self.eqn_op[id(tagged_eqn)] = op_id
            new_eqns.append(tagged_eqn)
        outs = [env.get(v, frozenset()) if not isinstance(v, jcore.Literal) else frozenset()
                for v in jaxpr.outvars]
        out_leaves = [None if isinstance(v, jcore.Literal) else leaf.get(v) for v in jaxpr.outvars]
        out_aux = [(None, None) if isinstance(v, jcore.Literal) else
                   (made_by.get(v) if uses.get(v) == 1 else None, value.get(v)) for v in jaxpr.outvars]
        return jaxpr.replace(eqns=new_eqns), outs, out_leaves, out_aux

    def _merge(self, eqn: Any, record: OpRecord, made_by: dict[Any, tuple[int, Any, Any]], uses: dict[Any, int],
               value_of: Any) -> None:
        """Count two ops XLA merges as it counts the merged one (costs/conventions.py)."""
        name = eqn.primitive.name
        if name not in ("min", "max", "conv_general_dilated") or record.opaque:
            return
        for v in eqn.invars[:1] if name == "conv_general_dilated" else eqn.invars:
            if isinstance(v, jcore.Literal) or v not in made_by or uses.get(v, 0) != 1:
                continue
            inner_id, inner, inner_values = made_by[v]
            if name == "conv_general_dilated":
                folded = conventions.conv_through_pad(eqn, inner, inner_values)
                if folded is not None and folded.flops != record.cost.flops:
                    self.merged.append(("pad_into_conv", inner_id, record.id, record.cost.flops - folded.flops))
                    record.cost = dataclasses.replace(record.cost, flops=folded.flops)
            else:
                if not conventions.clamp_inner(eqn, inner, [value_of(u) for u in eqn.invars], inner_values):
                    continue
                inner_rec = self.records[inner_id]
                self.merged.append(("clamp", inner_id, record.id, inner_rec.cost.flops))
                inner_rec.cost = conventions.without_flops(inner_rec.cost)
            return

    def _cost(self, eqn: Any) -> tuple[OpCost, bool]:
        in_avals = tuple(v.aval for v in eqn.invars)
        out_avals = tuple(v.aval for v in eqn.outvars)
        try:
            return cost_of(eqn.primitive.name, eqn.params, in_avals, out_avals), False
        except UnknownPrimitiveError:
            self.opaque.setdefault(eqn.primitive.name, None)
            nbytes_in = sum(aval_nbytes(a) for a in in_avals)
            nbytes_out = sum(aval_nbytes(a) for a in out_avals)
            return OpCost(bytes_read=nbytes_in, bytes_written=nbytes_out, op_class="opaque"), True

    def _descend(self, eqn, record, subs, in_prod, op_region, depth, in_leaf, in_aux):
        kind = record.container
        region = op_region
        # a library's own jit (jnp.take's `_take`, jax.nn.relu) is how the library is written, not a layer of the
        # user's: it adds no segment, so it never shows as a region under the user's layer
        if kind == "jit" and not (record.parent < 0 and self.whole_program_jit) and not internals.is_library_file(
                internals.function_file(eqn.params.get("jaxpr"))):
            region = _join(op_region, f"jit({eqn.params.get('name', '')})")
        new_params = dict(eqn.params)
        out_prod: list[frozenset[int]] = [frozenset()] * len(eqn.outvars)
        out_leaf: list[int | None] = [None] * len(eqn.outvars)
        out_aux: list[tuple[Any, float | None]] = [(None, None)] * len(eqn.outvars)
        if kind == "cond":
            self.edges.extend((src, record.id, 0, aval_nbytes(eqn.invars[0].aval)) for src in in_prod[0])
        rewritten: dict[tuple[str, int | None], Any] = {}
        for label, sub in subs:
            inner, consts = _open(sub)
            sub_in = _bind_inputs(kind, eqn, label, in_prod, len(inner.invars))
            # a loop carry is a leaf only on the first iteration: leaves pass into consts and scanned xs only
            sub_leaf = _bind_inputs(kind, eqn, label, in_leaf, len(inner.invars), fill=None)
            if kind == "scan":
                start = eqn.params["num_consts"]
                sub_leaf = [None if start <= i < start + eqn.params["num_carry"] else lf
                            for i, lf in enumerate(sub_leaf)]
            elif kind == "while":
                n_consts = eqn.params["cond_nconsts" if label == "cond" else "body_nconsts"]
                sub_leaf = [lf if i < n_consts else None for i, lf in enumerate(sub_leaf)]
            is_const = _bind_inputs(kind, eqn, label, [
                isinstance(v, jcore.Literal) or v in self.const_vars for v in eqn.invars], len(inner.invars))
            # a loop carry changes from one iteration to the next, whatever its initial value
            if kind == "scan":
                start = eqn.params["num_consts"]
                carry = range(start, start + eqn.params["num_carry"])
            elif kind == "while":
                carry = range(eqn.params["cond_nconsts" if label == "cond" else "body_nconsts"], len(is_const))
            else:
                carry = range(0)
            is_const = [c and i not in carry for i, c in enumerate(is_const)]
            self.const_vars.update(v for v, c in zip(inner.invars, is_const, strict=True) if c is True)
            branch = int(label[6:]) if label.startswith("branch") else record.branch
            # a cond runs one branch, a while body may run no time, a scan of length 0 runs no step
            outer_runs = self.always_runs
            self.always_runs = outer_runs and not (
                kind == "cond" or (kind == "while" and label != "cond") or (kind == "scan" and record.trip_count < 1))
            try:
                new_inner, sub_out, sub_out_leaf, sub_out_aux = self.walk(
                    inner, sub_in, region=region, parent=record.id, context=label,
                    branch=branch, depth=depth + 1, leaves_in=sub_leaf,
                    aux_in=in_aux if kind == "jit" and len(in_aux) == len(inner.invars) else None,
                )
            finally:
                self.always_runs = outer_runs
            rewritten[label] = (
                jcore.ClosedJaxpr(new_inner, consts) if isinstance(sub, jcore.ClosedJaxpr) else new_inner
            )
            if label != "cond":  # a while's cond jaxpr outputs only the predicate
                if kind == "while":
                    sub_out = [p | init for p, init in zip(sub_out, in_prod[-len(sub_out):], strict=True)]
                out_prod = [a | b for a, b in zip(out_prod, _pad(sub_out, len(eqn.outvars)), strict=True)]
                if kind in ("jit", "call", "remat"):  # one jaxpr, run once: an output that is a leaf stays one
                    out_leaf = _pad(sub_out_leaf, len(eqn.outvars), None)
                if kind == "jit":  # a jit's outputs: what XLA sees once it inlines the call
                    out_aux = _pad(sub_out_aux, len(eqn.outvars), (None, None))
        for key, value in eqn.params.items():
            if isinstance(value, (jcore.ClosedJaxpr, jcore.Jaxpr)):
                new_params[key] = rewritten[_context_label(eqn.primitive.name, key, None)]
            elif isinstance(value, (tuple, list)) and any(
                isinstance(v, (jcore.ClosedJaxpr, jcore.Jaxpr)) for v in value
            ):
                new_params[key] = _same_sequence(value, [
                    rewritten.get(_context_label(eqn.primitive.name, key, i), v) for i, v in enumerate(value)])
        return new_params, out_prod, out_leaf, out_aux

    def _descend_opaque(self, eqn, record, subs, op_region, depth):
        new_params = dict(eqn.params)
        for key, value in eqn.params.items():
            items = value if isinstance(value, (tuple, list)) else (value,)
            new_items = []
            for item in items:
                if isinstance(item, (jcore.ClosedJaxpr, jcore.Jaxpr)):
                    inner, consts = _open(item)
                    outer_runs, self.always_runs = self.always_runs, False  # run as one primitive, not op by op
                    try:
                        new_inner, _, _, _ = self.walk(
                            inner, [frozenset()] * len(inner.invars), region=op_region, parent=record.id,
                            context=key, branch=record.branch, depth=depth + 1,
                        )
                    finally:
                        self.always_runs = outer_runs
                    item = jcore.ClosedJaxpr(new_inner, consts) if isinstance(item, jcore.ClosedJaxpr) else new_inner
                new_items.append(item)
            if isinstance(value, (tuple, list)):
                new_params[key] = _same_sequence(value, new_items)
            elif isinstance(value, (jcore.ClosedJaxpr, jcore.Jaxpr)):
                new_params[key] = new_items[0]
        return new_params


def _same_sequence(like: Any, items: list[Any]) -> Any:
    """``items`` as a sequence of ``like``'s type: a named tuple (custom_linear_solve's jaxprs) takes them as
    arguments, a tuple or list as one iterable."""
    return type(like)(*items) if hasattr(like, "_fields") else type(like)(items)


def _pad(seq: list[Any], n: int, fill: Any = frozenset()) -> list[Any]:
    return (list(seq) + [fill] * n)[:n]


def _shards(eqn: Any) -> int:
    """The shards a ``shard_map`` runs its body on: the sizes of the mesh axes it makes manual (all of the mesh's
    when it names none). One chip runs every shard's work, so the body counts once per shard."""
    try:
        sizes = dict(eqn.params["mesh"].shape)
        axes = eqn.params.get("newly_manual_axes") or sizes
        return max(int(math.prod(int(sizes[a]) for a in axes)), 1)
    except Exception:  # a mesh this JAX describes otherwise: one shard, the body once
        return 1


def _bind_inputs(kind: str, eqn: Any, label: str, in_prod: list[Any], n_in: int, fill: Any = frozenset()):
    """Producers (or anything else per input) for a nested jaxpr's inputs, given the container's inputs."""
    if kind == "linear_solve":  # the operands: every jaxpr's constants in turn, then the right-hand side
        lengths = eqn.params["const_lengths"]
        start = lengths.matvec + lengths.vecmat
        rhs = in_prod[sum(lengths):]
        return _pad(list(in_prod[start:start + lengths.solve]) + list(rhs), n_in, fill)
    if kind == "cond":
        return _pad(in_prod[1:], n_in, fill)
    if kind == "while":
        cn, bn = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
        carry = in_prod[cn + bn:]
        consts = in_prod[:cn] if label == "cond" else in_prod[cn:cn + bn]
        return _pad(consts + carry, n_in, fill)
    # scan (consts, carry, xs), jit, call, remat, custom_jvp/vjp: positional
    if len(in_prod) >= n_in:
        return in_prod[len(in_prod) - n_in:]
    return _pad(in_prod, n_in, fill)


def _used_vars(jaxpr: jcore.Jaxpr) -> set[Any]:
    used = {v for v in jaxpr.outvars if not isinstance(v, jcore.Literal)}
    for eqn in jaxpr.eqns:
        used.update(v for v in eqn.invars if not isinstance(v, jcore.Literal))
    return used


def walk_closed_jaxpr(closed: jcore.ClosedJaxpr) -> Walk:
    """Walk ``closed`` and everything nested in it.

    Unknown primitives become opaque ops; one :class:`OpaquePrimitiveWarning`
    names all of them.
    """
    walker = _Walker()
    # a jitted function traces to one jit equation holding everything: no region segment for it
    eqns = closed.jaxpr.eqns
    walker.whole_program_jit = len(eqns) == 1 and internals.CONTAINER_ALIASES.get(eqns[0].primitive.name) == "jit"
    tagged, outs, _, _ = walker.walk(
        closed.jaxpr, [frozenset()] * len(closed.jaxpr.invars),
        region="", parent=-1, context="", branch=-1, depth=0, leaves_in=list(range(len(closed.jaxpr.invars))),
    )
    if walker.opaque:
        names = ", ".join(sorted(walker.opaque))
        warnings.warn(
            f"dfit_nb has no cost rule for primitive(s) {names}; they are recorded as 'opaque' ops "
            "(bytes counted, FLOPs unknown). Register one with "
            "dfit_nb.capture.register_cost_rule(...) to cost them.",
            OpaquePrimitiveWarning,
            stacklevel=3,
        )
    return Walk(
        records=walker.records,
        edges=walker.edges,
        input_edges=walker.input_edges,
        tagged=jcore.ClosedJaxpr(tagged, closed.consts),
        eqn_op=walker.eqn_op,
        live=walker.live,
        constant=walker.constant,
        opaque_primitives=tuple(walker.opaque),
        unrepresentable=walker.unrepresentable,
        largest=walker.largest,
        const_arrays=walker.const_arrays,
        merged=walker.merged,
        outputs=set().union(*outs) if outs else set(),
    )
