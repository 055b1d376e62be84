"""Map jaxpr ops to the HLO instructions that XLA actually executes.

How the mapping works
---------------------
The capture stage gives every jaxpr equation (nested ones included) its own
name-stack scope ``dfit_op<N>``, where ``N`` is the op id.  JAX copies the name
stack of an equation into the ``op_name`` metadata of every HLO instruction it
lowers that equation to, and XLA keeps that metadata on instructions while it
optimises: a fusion carries the metadata of its root, the instructions *inside*
a fused computation keep their own, a ``while`` keeps the scan/while op's name.
An ``op_name`` such as::

    jit(f)/enc/dfit_op1/while/body/closed_call/inner/dfit_op2/dot_general

therefore says: "made by op 2, which sits inside container op 1".  The last
``dfit_op`` id is the producing op; earlier ones are enclosing containers.
Transform wrappers are fine too (``transpose(jvp(dfit_op7))`` names op 7).

This module parses the optimised HLO text (``compiled.as_text()``), keeps the
instructions that run on their own (fusions and standalone instructions of
non-fused computations), and collects for each of them the ids found on it and,
for fusions, on every instruction of the computations it calls.  The result is
a :class:`FusionMap` from op ids to executed instruction names, the names that
the profiler reports as ``hlo_op``.

Two kinds of tags are not taken at face value:

* *Constant-like* instructions (``constant``, ``iota`` and broadcasts, reshapes,
  converts, ... whose operands are all constant-like, transitively, through the
  parameters of fused computations too) do not attribute their fusion: XLA CSEs
  them across the whole program, so a broadcast of the literal ``1`` made for
  layer 0 may sit in a fusion of layer 1 with layer 0's op_name.  A record's ops
  come from its other instructions; only a record made of nothing but
  constant-like instructions falls back to their ids.
* *Container* ops (jit, closed_call, remat, custom_jvp/vjp, ...: an id seen as an
  enclosing tag, or passed in ``containers``) own no instructions: constants that
  jit lowering hoists carry the jit's tag last, yet belong to no op.  Such an id
  is only an enclosing id.  Loop and branch containers (scan, while, cond: a
  container whose tag is the last one on a ``while``/``conditional``) keep what
  they really lower to: the loop or branch instruction and its bookkeeping
  (counter increment, trip compare).

Everything here is plain text and number processing; it imports no JAX. The HLO text is parsed by
:mod:`dfit_nb.capture._hlo_text`, whose public names are importable from here too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from ._hlo_text import HloComputation as HloComputation
from ._hlo_text import HloInstruction as HloInstruction
from ._hlo_text import hlo_module_name as hlo_module_name
from ._hlo_text import parse_hlo_module as parse_hlo_module
from ._hlo_text import shape_bytes as shape_bytes

__all__ = [
    "CONTROL_OPCODES",
    "FREE_OPCODES",
    "TAG_PREFIX",
    "FusionMap",
    "FusionRecord",
    "HloComputation",
    "HloInstruction",
    "build_fusion_map",
    "container_op_ids",
    "executed_instructions",
    "hlo_module_name",
    "op_ids_in",
    "parse_hlo_module",
    "shape_bytes",
]

TAG_PREFIX = "dfit_op"

#: Instructions that do no work at run time (aliasing, tuple plumbing, literals);
#: they never become records.
FREE_OPCODES = frozenset(
    {
        "parameter",
        "constant",
        "tuple",
        "get-tuple-element",
        "bitcast",
        "after-all",
        "opt-barrier",
        "add-dependency",
    }
)

#: Instructions that run other computations instruction by instruction; their
#: records carry only their own op ids (the bodies are records of their own).
CONTROL_OPCODES = frozenset({"while", "conditional", "call", "async-start", "async-update", "async-done"})

# (opcode, key) pairs whose target computations are executed as real code.
_CONTROL_EDGES = {
    ("while", "body"),
    ("while", "condition"),
    ("conditional", "branch_computations"),
    ("conditional", "true_computation"),
    ("conditional", "false_computation"),
    ("call", "to_apply"),
    ("call", "calls"),
    ("async-start", "calls"),
    ("async-start", "called_computations"),
}

_TAG_RE = re.compile(r"(?<![A-Za-z0-9_])" + TAG_PREFIX + r"(\d+)")


def op_ids_in(op_name: str) -> list[int]:
    """Return every ``dfit_op<N>`` id in an ``op_name``, in order.

    The last id is the op that produced the instruction; the earlier ones
    are the container ops (scan, cond, jit, custom_jvp, ...) around it.

    Examples
    --------
    >>> op_ids_in("jit(f)/dfit_op1/while/body/transpose(jvp(dfit_op12))/dot")
    [1, 12]
    >>> op_ids_in("jit(f)/mul")
    []
    """
    return [int(m) for m in _TAG_RE.findall(op_name)]


# --------------------------------------------------------------------------
# Executed instructions
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class FusionRecord:
    """An instruction that the runtime executes as one unit.

    ``op_ids`` are the producing op ids (last ``dfit_op`` of each op_name) of
    the instruction and, unless it is a control instruction, of every
    instruction in the computations it calls.  ``enclosing_op_ids`` are the
    container ids seen on the way (earlier ``dfit_op`` components).  When the
    instruction itself carries no id, XLA sometimes left the metadata only on
    a ``bitcast`` user; those ids are then used and ``op_ids_inferred`` is set.
    """

    name: str
    opcode: str
    kind: str
    computation: str
    op_ids: tuple[int, ...]
    bytes_accessed: int
    custom_call_target: str = ""
    enclosing_op_ids: tuple[int, ...] = ()
    op_ids_inferred: bool = False


def _executed_computations(comps: dict[str, HloComputation]) -> list[str]:
    """Computations run instruction by instruction, in text order.

    These are ENTRY plus everything reachable from it through while bodies and
    conditions, conditional branches, ``call`` and async computations.  Fused
    computations and reducers (``to_apply`` of reduce, sort, scatter, ...) are
    never reached this way.  Without an ENTRY, every computation that nobody
    calls is taken as a root.
    """
    roots = [c.name for c in comps.values() if c.is_entry]
    if not roots:
        called = {n for c in comps.values() for i in c.instructions for n in i.calls}
        roots = [n for n in comps if n not in called]
    seen, stack = set(roots), list(roots)
    while stack:
        for instr in comps[stack.pop()].instructions:
            for key, target in instr.call_edges:
                known = target in comps and target not in seen
                if known and (instr.opcode, key) in _CONTROL_EDGES:
                    seen.add(target)
                    stack.append(target)
    return [n for n in comps if n in seen]


#: Instructions that make values that depend on nothing computed at run time.
_CONSTANT_SOURCES = frozenset({"constant", "iota"})
#: Instructions that only move, re-type or regroup data: constant-like when all their operands are.
_CONSTANT_PRESERVING = frozenset(
    {
        "broadcast",
        "reshape",
        "dynamic-reshape",
        "bitcast",
        "bitcast-convert",
        "convert",
        "copy",
        "transpose",
        "slice",
        "reverse",
        "concatenate",
        "pad",
        "tuple",
        "get-tuple-element",
    }
)
#: Control instructions whose tag makes a container the owner of instructions (loops and branches).
_OWNING_OPCODES = frozenset({"while", "conditional"})


class _ConstantLike:
    """Which instructions of a computation are constant-like, memoised per computation.

    An instruction is constant-like if it is a ``constant`` or an ``iota``, a
    parameter of a fused computation whose operand in the caller is constant-like,
    a fusion whose root is constant-like, or a :data:`_CONSTANT_PRESERVING`
    instruction whose operands are all constant-like.  Instructions are decided in
    printed order, which XLA makes a topological order (an operand printed later
    counts as not constant-like).
    """

    def __init__(self, comps: dict[str, HloComputation]) -> None:
        self._comps = comps
        self._memo: dict[tuple[str, frozenset[int]], frozenset[str]] = {}

    def names(self, comp: str, const_params: frozenset[int] = frozenset()) -> frozenset[str]:
        """Names of the constant-like instructions of ``comp`` given its constant-like parameters."""
        key = (comp, const_params)
        if key not in self._memo:
            self._memo[key] = frozenset()  # what a (malformed) recursive call sees
            self._memo[key] = self._compute(self._comps[comp], const_params)
        return self._memo[key]

    @staticmethod
    def fused_params(instr: HloInstruction, const_names: AbstractSet[str]) -> frozenset[int]:
        """Parameter numbers of ``instr``'s fused computation whose operands are constant-like."""
        if instr.opcode != "fusion":
            return frozenset()
        return frozenset(i for i, operand in enumerate(instr.operands) if operand in const_names)

    def _compute(self, comp: HloComputation, const_params: frozenset[int]) -> frozenset[str]:
        found: set[str] = set()
        for instr in comp.instructions:
            if instr.opcode in _CONSTANT_SOURCES:
                const = True
            elif instr.opcode == "parameter":
                const = instr.parameter_number in const_params
            elif instr.opcode in _CONSTANT_PRESERVING:
                const = all(o in found for o in instr.operands)
            elif instr.opcode == "fusion":
                params = self.fused_params(instr, found)
                const = any(c in self._comps and self._root_is_const(c, params) for c in instr.calls)
            else:
                const = False
            if const:
                found.add(instr.name)
        return frozenset(found)

    def _root_is_const(self, comp: str, const_params: frozenset[int]) -> bool:
        roots = [i.name for i in self._comps[comp].instructions if i.is_root]
        return bool(roots) and roots[-1] in self.names(comp, const_params)


def _tagged_instructions(
    instr: HloInstruction,
    comp: HloComputation,
    comps: dict[str, HloComputation],
    const: _ConstantLike,
    recurse: bool,
) -> list[tuple[HloInstruction, bool]]:
    """``instr`` and, if asked, every instruction of its callees, each with whether it is constant-like."""
    comp_const = const.names(comp.name)
    out = [(instr, instr.name in comp_const)]
    todo = [(instr, comp_const)] if recurse else []
    seen: set[tuple[str, frozenset[int]]] = set()
    while todo:
        caller, caller_const = todo.pop()
        params = const.fused_params(caller, caller_const)
        for callee in caller.calls:
            if callee not in comps or (callee, params) in seen:
                continue
            seen.add((callee, params))
            callee_const = const.names(callee, params)
            for inner in comps[callee].instructions:
                out.append((inner, inner.name in callee_const))
                if inner.calls:
                    todo.append((inner, callee_const))
    return out


def _collect_ids(
    tagged: Iterable[tuple[HloInstruction, bool]], pure_containers: frozenset[int]
) -> tuple[set[int], set[int]]:
    """(producing ids, enclosing ids) of the instructions of one record.

    Producing ids come from the instructions that are not constant-like, or from
    the constant-like ones when there are no others; they are the last tag of an
    ``op_name`` and never an id of ``pure_containers`` (those become enclosing).
    """
    produced: set[int] = set()
    from_constants: set[int] = set()
    enclosing: set[int] = set()
    for cur, constant_like in tagged:
        ids = op_ids_in(cur.op_name)
        if ids:
            (from_constants if constant_like else produced).add(ids[-1])
            enclosing.update(ids[:-1])
    containers = (produced | from_constants) & pure_containers
    produced -= pure_containers
    if not produced:
        produced = from_constants - pure_containers
    return produced, enclosing | containers


def _bitcast_users(comp: HloComputation) -> dict[str, list[HloInstruction]]:
    users: dict[str, list[HloInstruction]] = {}
    for instr in comp.instructions:
        if instr.opcode == "bitcast":
            for operand in instr.operands:
                users.setdefault(operand, []).append(instr)
    return users


def _bitcast_user_ids(name: str, users: dict[str, list[HloInstruction]]) -> tuple[set[int], set[int]]:
    """Ids on bitcast users (followed through bitcast chains) of ``name``."""
    produced: set[int] = set()
    enclosing: set[int] = set()
    todo, seen = [name], {name}
    while todo:
        for user in users.get(todo.pop(), ()):
            ids = op_ids_in(user.op_name)
            if ids:
                produced.add(ids[-1])
                enclosing.update(ids[:-1])
            elif user.name not in seen:
                seen.add(user.name)
                todo.append(user.name)
    return produced, enclosing


def _bytes_accessed(instr: HloInstruction, shapes: dict[str, str]) -> int:
    """Output bytes plus bytes of each distinct operand."""
    operands = dict.fromkeys(instr.operands)
    return shape_bytes(instr.shape) + sum(shape_bytes(shapes.get(o, "")) for o in operands)


def _record(
    instr: HloInstruction,
    comp: HloComputation,
    comps: dict[str, HloComputation],
    shapes: dict[str, str],
    bitcast_users: dict[str, list[HloInstruction]],
    const: _ConstantLike,
    pure_containers: frozenset[int],
) -> FusionRecord:
    control = instr.opcode in CONTROL_OPCODES
    tagged = _tagged_instructions(instr, comp, comps, const, recurse=not control)
    produced, enclosing = _collect_ids(tagged, pure_containers)
    inferred = False
    if not produced:
        borrowed, extra = _bitcast_user_ids(instr.name, bitcast_users)
        produced = borrowed - pure_containers
        enclosing |= extra | (borrowed & pure_containers)
        inferred = bool(produced)
    if control:
        kind = "control"
    elif instr.opcode == "fusion":
        kind = instr.fusion_kind or "fusion"
    else:
        kind = "unfused"
    return FusionRecord(
        name=instr.name,
        opcode=instr.opcode,
        kind=kind,
        computation=comp.name,
        op_ids=tuple(sorted(produced)),
        bytes_accessed=_bytes_accessed(instr, shapes),
        custom_call_target=instr.custom_call_target,
        enclosing_op_ids=tuple(sorted(enclosing - produced)),
        op_ids_inferred=inferred,
    )


def container_op_ids(comps: dict[str, HloComputation], containers: Iterable[int] = ()) -> tuple[int, ...]:
    """Ids of the container ops that own no instruction, sorted.

    Containers are the ``containers`` given plus every id that some ``op_name`` of
    the module shows as an enclosing (not last) tag.  Those whose tag is the last
    one on a ``while`` or ``conditional`` (scan, while, cond) own their loop or
    branch instructions and are left out.

    Examples
    --------
    >>> comps = parse_hlo_module('''HloModule m
    ... ENTRY %main (p: f32[2]) -> f32[2] {
    ...   %p = f32[2]{0} parameter(0)
    ...   ROOT %n = f32[2]{0} negate(%p), metadata={op_name="jit(f)/dfit_op0/jit(g)/dfit_op1/neg"}
    ... }''')
    >>> container_op_ids(comps), container_op_ids(comps, [7])
    ((0,), (0, 7))
    """
    found, owners = set(containers), set()
    for comp in comps.values():
        for instr in comp.instructions:
            ids = op_ids_in(instr.op_name)
            found.update(ids[:-1])
            if ids and instr.opcode in _OWNING_OPCODES:
                owners.add(ids[-1])
    return tuple(sorted(found - owners))


def executed_instructions(comps: dict[str, HloComputation], containers: Iterable[int] = ()) -> list[FusionRecord]:
    """Records for every instruction that runs as a unit, in text order.

    Instructions of fused computations and reducers are folded into the
    records of the instructions that call them; instructions in
    :data:`FREE_OPCODES` are skipped; ``while``/``conditional``/``call``
    become ``kind="control"`` records whose bodies yield records of their own.
    Constant-like instructions and container ops attribute no record (see the
    module docstring and :func:`container_op_ids`; ``containers`` is passed on).

    Examples
    --------
    >>> comps = parse_hlo_module('''HloModule m
    ... ENTRY %main (p: f32[2]) -> f32[2] {
    ...   %p = f32[2]{0} parameter(0)
    ...   ROOT %n = f32[2]{0} negate(%p), metadata={op_name="jit(f)/dfit_op3/neg"}
    ... }''')
    >>> [(r.name, r.kind, r.op_ids, r.bytes_accessed) for r in executed_instructions(comps)]
    [('n', 'unfused', (3,), 16)]
    """
    pure_containers = frozenset(container_op_ids(comps, containers))
    const = _ConstantLike(comps)
    records = []
    for cname in _executed_computations(comps):
        comp = comps[cname]
        shapes = {i.name: i.shape for i in comp.instructions}
        users = _bitcast_users(comp)
        for instr in comp.instructions:
            if instr.opcode not in FREE_OPCODES:
                records.append(_record(instr, comp, comps, shapes, users, const, pure_containers))
    return records


@dataclass(frozen=True)
class FusionMap:
    """Executed instructions and, per op id, the instructions holding it."""

    records: tuple[FusionRecord, ...]
    op_to_fusions: dict[int, tuple[str, ...]] = field(compare=False)
    module_name: str = ""
    _by_name: dict[str, FusionRecord] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {r.name: r for r in self.records})

    def fusions_of(self, op_id: int) -> tuple[str, ...]:
        """Names of the executed instructions holding ``op_id`` (maybe empty)."""
        return self.op_to_fusions.get(op_id, ())

    def record(self, name: str) -> FusionRecord:
        """The record of the executed instruction called ``name`` (KeyError if none)."""
        return self._by_name[name]

    @property
    def op_ids(self) -> frozenset[int]:
        """Every op id that reached at least one executed instruction."""
        return frozenset(self.op_to_fusions)


def _invert(records: Iterable[FusionRecord]) -> dict[int, tuple[str, ...]]:
    mapping: dict[int, list[str]] = {}
    for rec in records:
        for op_id in rec.op_ids:
            mapping.setdefault(op_id, []).append(rec.name)
    return {k: tuple(v) for k, v in sorted(mapping.items())}


def build_fusion_map(hlo_text: str, containers: Iterable[int] = ()) -> FusionMap:
    """Parse optimised HLO text and map op ids to executed instructions.

    ``containers`` are op ids known to be containers (the walk's ``container``
    ops); ids the text shows as enclosing tags are containers too.  Containers
    other than loops and branches never hold an instruction.

    Examples
    --------
    >>> fm = build_fusion_map('''HloModule jit_f
    ... %fc (a: f32[4]) -> f32[4] {
    ...   %a = f32[4]{0} parameter(0)
    ...   %e = f32[4]{0} exponential(%a), metadata={op_name="jit(f)/dfit_op0/exp"}
    ...   ROOT %n = f32[4]{0} negate(%e), metadata={op_name="jit(f)/dfit_op1/neg"}
    ... }
    ... ENTRY %main (p: f32[4]) -> f32[4] {
    ...   %p = f32[4]{0} parameter(0)
    ...   ROOT %fusion = f32[4]{0} fusion(%p), kind=kLoop, calls=%fc
    ... }''')
    >>> fm.fusions_of(0), fm.record("fusion").op_ids, fm.module_name
    (('fusion',), (0, 1), 'jit_f')
    """
    records = tuple(executed_instructions(parse_hlo_module(hlo_text), containers))
    try:
        name = hlo_module_name(hlo_text)
    except ValueError:
        name = ""
    return FusionMap(records=records, op_to_fusions=_invert(records), module_name=name)
