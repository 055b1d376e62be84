"""Kernels: which ops the chip runs together, as one compiled kernel.

A chip does not run jaxpr primitives one by one: its compiler fuses them into
kernels. Inside a kernel, intermediates stay on chip (no DRAM round trip, no
retile between its ops), the kernel pays one fixed launch cost, and its vector
work (a GEMM's bias, activation, scale) runs on the vector unit while the PE
array works. :func:`group` decides the kernels of a replayed op table; the one
machine model (:mod:`dfit_nb.sim.machine`) prices them.

Who decides (``fusion=``)
-------------------------
``"rules"`` (the default)
    A fusion model of a dataflow accelerator's compiler, written after XLA's
    own fusion passes (``InstructionFusion``: producer into consumer;
    ``MultiOutputFusion``: a result used inside and outside a fusion is still
    written once; the fusion kinds ``kLoop``, ``kInput`` (a reduction as root)
    and ``kOutput`` (a dot with its elementwise consumers) of XLA's HLO), with
    these rules, applied in program order:

    1. layout and cast ops (:data:`FREE_PRIMITIVES`: reshape, broadcast,
       squeeze, expand_dims, convert, ...) are free: they become a kernel's
       indexing and cost no compute or SRAM traffic; so are ops of constants
       alone, which every compiler folds (the capture's ``folded_reason``);
    2. an elementwise op (or a fusible data movement: transpose, slice,
       concatenate, pad, select, gather) fuses into the kernel of its producer
       (a chain of elementwise ops is one kernel);
    3. a GEMM's elementwise consumers fuse into its kernel (the epilogue:
       bias, activation, scale, convert), and a GEMM fuses into a kernel of free
       ops feeding it (the prologue: a convert or broadcast of its operand);
       a kernel holds at most one GEMM, or two that chain (rule 10);
    4. a reduction fuses into the kernel of its elementwise producers and roots
       it: nothing else joins a kernel after its reduction, unless it reduces
       rows (rule 9);
    5. a kernel is one loop over its iteration space: an op over more elements
       than the kernel makes (through a broadcast) does not join a kernel holding
       an expensive op (a transcendental, a GEMM), which it would recompute per
       element (XLA's check that a fusion would not duplicate expensive work:
       the ``rsqrt`` of a layer norm stays apart from the normalisation it
       scales);
    6. ops that run a different number of times (a scan body and its caller)
       never share a kernel, and sort, scatter, control flow and opaque ops are
       kernels of their own;
    7. a fusion never creates a cycle between kernels (an op joins a kernel only
       when none of its other producers depends on that kernel);
    8. a fusion ends where its working set exceeds the machine's SRAM. The
       kernels these rules make stream: a block of the iteration space goes
       through every op of the kernel and is done (a reduction roots its
       kernel, so no value is needed after its block; a row kernel also holds
       its rows, rule 9), so the working set is one block, double-buffered, of
       every intermediate (every result consumed inside the kernel), not the
       tensors. A kernel whose block does not fit a tile's SRAM runs as unfused
       ops (:func:`dfit_nb.sim.machine.kernel_fits`). This is the one rule that
       depends on the machine, so it is applied inside the model;
    9. a reduction over its operand's last axis (a row: the max and the sum of
       a softmax, the mean and variance of a layer norm) does not root its
       kernel: its consumers, which use the reduced value across the row it
       came from, join it, and the kernel keeps that row on chip instead of
       writing and reading it back (the normalisation "diamond": XLA's GPU
       ``SoftmaxRewriterTriton`` pass turns it into one fusion, and a GPU
       library's softmax and layer norm are one kernel each). The kernel
       holds a row of each such reduction's input (``row``) besides its
       streamed blocks; rows too long for the machine to keep
       (``Hardware.row_buffer_bytes``, or a tile's SRAM) make it a looped
       reduction, which streams the kernel's inputs again after each
       reduction over the rows, as a GPU library's multi-pass softmax does
       (:func:`dfit_nb.sim.machine.row_rereads`).
       This rule is the machine's compiler's (``Hardware.row_reductions``):
       ``"fused"`` (the default) applies it; ``"split"`` does not, as
       XLA:TPU, which splits a layer norm and a softmax at their reductions
       (the ``tpu_v4`` and ``tpu_v6e`` presets);
    10. a matrix product whose rows are another's in the same open kernel,
       after elementwise work only (an MLP, ``act(x @ w1 + b) @ w2``: the
       same rows, reducing over the first product's columns), joins that
       kernel when its other operand comes from outside it (a weight): the
       rows stream through both products and the hidden activations never
       leave the chip. XLA:TPU makes this fusion (one fusion for an MLP's two
       matmuls and its activation, on TPU v4 and v6e: ``docs/validation.md``);
       a split or slice between the products (a gated FFN's gate and up
       halves) ends the chain, as it does there, and so do convolutions. The
       kernel keeps the second product's weight on chip (``weight``), spread
       over the chip's tiles as any weight is, so a weight too large for the
       chip's SRAM runs unfused (:func:`dfit_nb.sim.machine.kernel_fits`).
       At most two products a kernel.

    Free ops feeding only one kernel join it (XLA folds a broadcast of a bias
    into its consumer); a kernel of free ops alone is a view (a bitcast) and
    pays no launch.
``"compiler"``
    The capture's own XLA fusion map (``trace.ops["fusion"]``): each op runs in
    the first executed fusion that holds it; ops XLA folded away (bitcasts,
    CSE, constants: ``folded_reason``) are free and join their consumer's
    kernel. By default the capture compiles for this process's device (on a
    laptop, XLA:CPU), so this is how *that* compiler grouped the program;
    ``capture(..., lower_for=device)`` compiles for another device instead,
    such as a TPU topology's without a TPU (``docs/validation.md``, "Kernels
    against XLA:TPU's own fusions"). An op XLA computes in several fusions runs
    once, in the first.
``"none"``
    One kernel per primitive (the model before kernels), kept for comparison.

>>> import numpy as np
>>> table = {"primitive": np.array(["dot_general", "add", "tanh"]), "op_class": np.array(
...     ["gemm", "elementwise", "transcendental"]), "count": np.ones(3), "gemm": np.array([1.0, 0, 0])}
>>> group(table, np.array([[-1], [0], [1]]), "rules").kernel.tolist()
[0, 0, 0]
>>> group(table, np.array([[-1], [0], [1]]), "none").kernel.tolist()
[0, 1, 2]
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..errors import DfitError
from .hardware import MIXED

#: the ways :func:`group` decides kernels (the first is the default)
FUSION_MODES = ("rules", "compiler", "none")
DEFAULT_FUSION = "rules"

#: layout and cast primitives a compiler folds into a kernel's indexing: no compute, no SRAM traffic of their own
FREE_PRIMITIVES = frozenset({
    "reshape", "broadcast_in_dim", "squeeze", "expand_dims", "convert_element_type", "stop_gradient",
    "bitcast_convert_type", "reduce_precision", "copy", "copy_p", "device_put", "sharding_constraint",
    "optimization_barrier", "pvary", "layout_constraint", "mesh_cast", "reshard", "zeros_like",
})
#: data movement a loop fusion can hold (an index computation), priced as vector work
FUSIBLE_MOVES = frozenset({
    "transpose", "slice", "dynamic_slice", "concatenate", "pad", "rev", "iota", "select_n", "gather", "split",
    "clamp", "tile", "stack", "unstack",
})
#: op classes that fuse like elementwise ops
_VECTOR_CLASSES = frozenset({"elementwise", "transcendental"})

# roles of an op in the rules
FREE, VECTOR, REDUCTION, GEMM, ALONE = range(5)


class FusionError(DfitError, ValueError):
    """A fusion mode is unknown, or the trace cannot be grouped that way."""


@dataclasses.dataclass(frozen=True)
class Kernels:
    """The kernels of a replayed op table (one row per op, program order).

    ``kernel``: the kernel each op runs in (numbered in program order of their first op); ``name`` per kernel;
    ``free``: the op is folded into its kernel's indexing (no compute or SRAM traffic); ``payer``: the op that
    pays its kernel's launch (one per kernel that does work); ``internal``: every consumer of the op's result is
    in its kernel (the result never leaves it); ``working_set``: per op, its kernel's intermediates (results
    consumed only inside it, not views): the values a streamed element carries through the kernel; ``size``: ops in
    the op's kernel; ``split``: rule 9 was off (the machine's compiler ends a kernel at every reduction);
    ``row``: per op, the elements its kernel keeps on chip besides its streamed blocks (one row
    per row reduction whose result the kernel uses; rule 9), 0 for a kernel that streams; ``weight``: per op, the
    elements of the weights its kernel keeps on chip for a chained GEMM (rule 10), 0 for others.
    """

    mode: str
    kernel: np.ndarray
    name: np.ndarray
    free: np.ndarray
    payer: np.ndarray
    internal: np.ndarray
    working_set: np.ndarray
    size: np.ndarray
    row: np.ndarray
    weight: np.ndarray
    split: bool = False

    @property
    def count(self) -> int:
        """Kernels (including views of free ops alone, which launch nothing)."""
        return len(self.name)


def check_mode(fusion: Any) -> str:
    """``fusion`` as one of :data:`FUSION_MODES`, or a clear error listing them."""
    if fusion is None:
        return DEFAULT_FUSION
    if not isinstance(fusion, str) or fusion.strip().lower() not in FUSION_MODES:
        raise FusionError(f"fusion={fusion!r} is not a fusion mode; valid: {', '.join(map(repr, FUSION_MODES))} "
                          f"(the machine's fusion rules, the capture's XLA fusion map, one kernel per primitive)")
    return fusion.strip().lower()


def role(primitive: str, op_class: str, gemm: bool) -> int:
    """An op's role in the fusion rules (:data:`FREE`, :data:`VECTOR`, :data:`REDUCTION`, :data:`GEMM`,
    :data:`ALONE`)."""
    if gemm:
        return GEMM
    if primitive in FREE_PRIMITIVES:
        return FREE
    if op_class == "reduction":
        return REDUCTION
    if op_class in _VECTOR_CLASSES or primitive in FUSIBLE_MOVES:
        return VECTOR
    return ALONE


def group(table: Any, preds: np.ndarray, fusion: str = DEFAULT_FUSION, fusions: Any = None, split: bool = False
          ) -> Kernels:
    """The kernels of a replayed op table.

    Parameters
    ----------
    table : Mapping or xarray.Dataset
        Per op (program order): ``primitive``, ``op_class``, ``count``, ``gemm`` (1 for a GEMM), for
        ``"rules"`` optionally ``reduced_row`` (:func:`reduced_rows`), ``elems_in``, ``elems_out`` and
        ``folded_reason``, and for ``"compiler"`` ``fusion`` and ``folded_reason`` (the capture's columns).
    preds : ndarray
        ``(ops, P)`` producer row indices, -1 padding (:class:`dfit_nb.sim._prepare.Prepared`).
    fusion : {"rules", "compiler", "none"}
    fusions : Sequence of str, optional
        The fusion names the capture's lowering records (``trace.lowering["fusion"]``): for ``"compiler"``, an
        op naming a fusion outside them is refused (a trace and a fusion map that do not belong together).
    split : bool
        For ``"rules"``: a reduction over rows roots its kernel like any other (rule 9 off; the machine's
        ``Hardware.row_reductions == "split"``, :func:`splits_rows`). The other modes ignore it.
    """
    mode = check_mode(fusion)
    primitive = np.asarray(table["primitive"]).astype(str)
    n = len(primitive)
    preds = np.asarray(preds, np.int64).reshape(n, -1)
    op_class = np.asarray(table["op_class"]).astype(str) if "op_class" in table else np.full(n, "")
    gemm = np.asarray(table["gemm"], np.float64) > 0
    roles = np.array([role(p, c, g) for p, c, g in zip(primitive, op_class, gemm, strict=True)], np.int64)
    count = np.asarray(table["count"], np.float64)
    consumers: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        for p in preds[i]:
            if p >= 0:
                consumers[int(p)].append(i)
    held = np.zeros(n)
    if mode == "none":
        kernel = np.arange(n)
        free = np.zeros(n, bool)
    elif mode == "compiler":
        kernel, free = _compiler(table, preds, consumers, fusions)
    else:
        # what every compiler folds: an op of literals and closed-over constants (the capture's folded_reason)
        folded = np.asarray(table["folded_reason"]).astype(str) if "folded_reason" in table else np.full(n, "")
        roles = np.where(np.char.startswith(folded, "constant-folded"), FREE, roles)
        elems = np.asarray(table["elems_out"], np.float64) if "elems_out" in table else np.ones(n)
        expensive = np.isin(op_class, ["transcendental"]) | (roles == GEMM)
        rows = reduced_rows(table, roles == REDUCTION) * (0.0 if split else 1.0)
        chain = _chainable(table, roles, op_class, primitive)
        kernel, chained = _rules(roles, preds, consumers, count, elems, expensive, rows, chain)
        free = roles == FREE
        # a chained GEMM's weight stays on chip while the rows stream through both GEMMs (rule 10)
        held = np.where(chained, chain["weight"], 0.0)
    out = _finish(mode, kernel, free, primitive, consumers,
                  np.asarray(table["fusion"]).astype(str) if mode == "compiler" else None,
                  rows if mode == "rules" else np.zeros(n), held)
    return dataclasses.replace(out, split=True) if split and mode == "rules" else out


def splits_rows(hw: Any) -> bool:
    """Whether ``hw``'s compiler ends a kernel at a reduction over rows (``Hardware.row_reductions``): the
    ``split`` argument of :func:`group` for the rules.

    >>> from dfit_nb.sim import presets
    >>> splits_rows(presets.get("tpu_v4")), splits_rows(presets.get("tpu_like"))
    (True, False)
    """
    way = getattr(hw, "row_reductions", "fused")
    if way == MIXED:
        raise FusionError("these machines' compilers fuse a reduction over rows differently (a Hardware.stack of "
                          "machines whose row_reductions are 'fused' and 'split'): a Trace's kernels differ between "
                          "them; stack and replay the machines of each way apart (e.g. group them by "
                          "(hw.execution, hw.row_reductions))")
    return way == "split"


def reduced_rows(table: Any, among: Any = None) -> np.ndarray:
    """Per op, the length of the rows it reduces when it reduces its first operand over its last axis (its first
    output is its first input's shape without the last dimension: the table's ``reduced_row`` column, which
    :class:`~dfit_nb.sim._prepare.Prepared` reads from ``trace.operands``), else 0 (no such column, another axis,
    or a row of one element). ``among``: a mask of the ops to read (the reductions; default all).

    With ``elems_in`` and ``elems_out`` columns the length is their ratio (the elements reduced into each
    result), so a table rescaled to other sizes (:func:`dfit_nb.sim.shapes.scaled`, whose shapes stay the
    captured ones) gets its own rows.

    >>> import numpy as np
    >>> reduced_rows({"reduced_row": np.array([128.0, 0.0, 8.0])}).tolist()
    [128.0, 0.0, 8.0]
    >>> reduced_rows({"reduced_row": np.array([128.0, 0.0, 8.0]), "elems_in": np.array([512.0, 512.0, 8.0]),
    ...               "elems_out": np.array([2.0, 128.0, 1.0])}, among=np.array([True, True, False])).tolist()
    [256.0, 0.0, 0.0]
    """
    n = len(np.asarray(table["primitive"])) if "primitive" in table else len(np.asarray(table["reduced_row"]))
    if "reduced_row" not in table:
        return np.zeros(n)
    out = np.asarray(table["reduced_row"], np.float64).copy()
    if among is not None:
        out = np.where(np.asarray(among, bool), out, 0.0)
    if "elems_in" in table and "elems_out" in table:
        ratio = np.asarray(table["elems_in"], np.float64) / np.maximum(np.asarray(table["elems_out"], np.float64), 1.0)
        out = np.where(out > 0, np.maximum(np.round(ratio), 2.0), 0.0)
    return out


def _chainable(table: Any, roles: np.ndarray, op_class: np.ndarray, primitive: np.ndarray) -> dict[str, np.ndarray]:
    """What rule 10 reads per op: whether it is a matrix product (not a convolution) with its dimensions, the
    elements of its row operand (``batch x m x k``) and of its weight (``batch x k x n``), and whether it moves data
    (a split, slice, transpose: what ends a chain)."""
    n = len(roles)
    dims = {d: (np.asarray(table[d], np.float64) if d in table else np.zeros(n)) for d in ("m", "k", "n", "batch")}
    batch = np.maximum(dims["batch"], 1.0)
    return {"gemm": (roles == GEMM) & (op_class == "gemm") & (dims["m"] > 0), **dims,
            "lhs": batch * dims["m"] * dims["k"], "weight": batch * dims["k"] * dims["n"],
            "move": np.isin(primitive, list(FUSIBLE_MOVES))}


def _rules(roles: np.ndarray, preds: np.ndarray, consumers: list[list[int]], count: np.ndarray,
           elems: np.ndarray, expensive: np.ndarray, rows: np.ndarray, chain: dict[str, np.ndarray]
           ) -> tuple[np.ndarray, np.ndarray]:
    """Kernel ids by the fusion rules (see the module docstring), and per op whether it is a GEMM that joined
    another GEMM's kernel (rule 10)."""
    n = len(roles)
    parent = list(range(n))  # union-find over ops; a kernel is a root

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    # per kernel root: its members (a bitset), what its members depend on (a bitset of ops, through edges and
    # through the kernels their producers ran in), whether it holds a GEMM, is closed (a reduction rooted it, or
    # it runs alone), runs alone, holds only free ops
    members = [1 << i for i in range(n)]
    kneed = [0] * n
    has_gemm = [bool(r == GEMM) for r in roles]
    # a reduction roots its kernel, except one over rows, whose kernel keeps the row on chip (rule 9)
    closed = [bool(r == ALONE or (r == REDUCTION and not row > 0)) for r, row in zip(roles, rows, strict=True)]
    alone = [bool(r == ALONE) for r in roles]
    only_free = [bool(r == FREE) for r in roles]
    # a fused kernel lives in one loop body: its ops run equally often
    runs = count.tolist()
    # a kernel is one loop over its iteration space (the most elements a working op of it makes); an op over
    # more elements would recompute what an expensive op (a transcendental, a GEMM) made once per element
    space = [0.0 if r == FREE else float(e) for r, e in zip(roles, elems, strict=True)]
    costly = [bool(x) for x in expensive]
    # rule 10: per kernel, the GEMMs it holds, its last GEMM (-1 none), whether a data move joined it
    gemms = [int(r == GEMM) for r in roles]
    last_gemm = [i if r == GEMM else -1 for i, r in enumerate(roles)]
    moved = [bool(x) for x in chain["move"]]
    chained = np.zeros(n, bool)

    def chains(i: int, k: int, ps: list[int]) -> bool:
        """GEMM ``i`` continues kernel ``k``'s GEMM: its rows are that GEMM's rows after elementwise work (same
        rows, its reduction over the other's columns), read from inside the kernel, and its weight from outside."""
        g = last_gemm[k]
        if gemms[k] != 1 or moved[k] or g < 0 or not (chain["gemm"][i] and chain["gemm"][g]):
            return False
        if (chain["m"][i], chain["k"][i], chain["batch"][i]) != (chain["m"][g], chain["n"][g], chain["batch"][g]):
            return False
        inside = [p for p in ps if (members[k] >> p) & 1]
        return len(inside) == 1 and elems[inside[0]] == chain["lhs"][i]

    def joinable(i: int, k: int, others: list[int], need_i: int, ps: list[int]) -> bool:
        r = roles[i]
        if alone[k] or closed[k] or runs[i] != runs[k]:
            return False
        if r == GEMM and not only_free[k] and not chains(i, k, ps):
            return False
        if r == REDUCTION and has_gemm[k]:
            return False
        if costly[k] and r != FREE and elems[i] > space[k]:
            return False
        # no cycle: none of the op's other producers may depend on the kernel
        return all(not ((kneed[find(p)] | (1 << p)) & members[k]) for p in others)

    def absorb(k: int, q: int) -> None:
        parent[q] = k
        gemms[k] += gemms[q]
        last_gemm[k] = max(last_gemm[k], last_gemm[q])
        moved[k] |= moved[q]
        members[k] |= members[q]
        kneed[k] |= kneed[q]
        has_gemm[k] |= has_gemm[q]
        closed[k] |= closed[q]
        only_free[k] &= only_free[q]
        space[k] = max(space[k], space[q])
        costly[k] |= costly[q]

    def mergeable(k: int, q: int, i: int, before: int) -> bool:
        """Another producer's kernel ``q`` fuses into op ``i``'s kernel ``k`` (XLA fuses a producer into its
        consumer): ``q`` is open, its results feed only itself and ``i``, at most one GEMM between them, and no
        path runs between the two kernels outside ``i`` (``before``: what ``k`` depended on before ``i`` joined)."""
        if alone[q] or closed[q] or runs[q] != runs[k] or (has_gemm[q] and has_gemm[k]):
            return False
        if roles[i] == GEMM and not only_free[q]:
            return False
        if costly[q] and space[k] > space[q]:
            return False
        if (before & members[q]) or (kneed[q] & (members[k] & ~(1 << i))):
            return False
        inside = members[q] | (1 << i)
        bits = members[q]
        while bits:
            m = _first(bits)
            bits &= bits - 1
            if any(not (inside >> c) & 1 for c in consumers[m]):
                return False
        return True

    for i in range(n):
        ps = [int(p) for p in preds[i] if p >= 0]
        need_i = 0
        for p in ps:
            need_i |= (1 << p) | kneed[find(p)]
        kneed[i] = need_i
        if roles[i] == ALONE or not ps:
            continue
        # the producer kernel to join first: one that does work (not a view of free ops alone), a GEMM's (the
        # epilogue), the latest
        order = sorted({find(p) for p in ps}, key=lambda k: (only_free[k], not has_gemm[k], -max(
            p for p in ps if find(p) == k)))
        for k in order:
            others = [q for q in ps if find(q) != k]
            if joinable(i, k, others, need_i, ps):
                before = kneed[k]
                chained[i] = roles[i] == GEMM and has_gemm[k]
                absorb(k, i)
                for q in order:
                    if q != k and find(q) == q and mergeable(k, q, i, before):
                        absorb(k, q)
                break
    # free ops alone in a kernel, fed by nothing inside the program (a broadcast of a bias, a reshape of a weight),
    # whose consumers all run in one kernel: folded into that kernel (XLA fuses such a producer into its consumer)
    for i in range(n):
        k = find(i)
        if not only_free[k] or members[k] != 1 << i or (preds[i] >= 0).any() or not consumers[i]:
            continue
        targets = {find(c) for c in consumers[i]}
        if len(targets) == 1:
            t = targets.pop()
            if runs[t] == runs[i]:
                absorb(t, i)
    return np.array([find(i) for i in range(n)], np.int64), chained


def _first(bits: int) -> int:
    """The lowest op index in a bitset."""
    return (bits & -bits).bit_length() - 1


def _compiler(table: Any, preds: np.ndarray, consumers: list[list[int]], fusions: Any
              ) -> tuple[np.ndarray, np.ndarray]:
    """Kernel ids from the capture's fusion map; ops XLA folded away are free and join a consumer's kernel."""
    if "fusion" not in table:
        raise FusionError("fusion='compiler' needs the capture's fusion map (trace.ops['fusion']); this op table "
                          "has none: capture the function again, or use fusion='rules'")
    names = [str(f).split(";")[0] for f in np.asarray(table["fusion"])]
    folded = (np.asarray(table["folded_reason"]).astype(str) if "folded_reason" in table
              else np.full(len(names), ""))
    n = len(names)
    if fusions is not None:
        known = {str(f) for f in np.asarray(fusions)}
        unknown = sorted({f for f in names if f and f not in known})
        if unknown:
            raise FusionError(f"fusion='compiler': {len(unknown)} fusion(s) the ops name are not in the trace's "
                              f"fusion map ({', '.join(unknown[:5])}{' ...' if len(unknown) > 5 else ''}): the op "
                              "table and the lowering do not belong together (a trace saved by another version?); "
                              "capture the function again, or use fusion='rules'")
    if n and not any(names):
        raise FusionError("fusion='compiler': no op of this trace names an XLA fusion (its lowering was not "
                          "recorded); capture the function again, or use fusion='rules'")
    by_name: dict[str, int] = {}
    kernel = np.full(n, -1, np.int64)
    for i, f in enumerate(names):
        if f:
            kernel[i] = by_name.setdefault(f, i)
    free = (kernel < 0) & (folded != "")
    # folded ops join the kernel of a consumer (the one XLA absorbed them into), else of a producer; ops XLA ran
    # outside any fusion, and folded ops with neither, are kernels of their own
    for i in range(n - 1, -1, -1):
        if kernel[i] < 0 and free[i]:
            fused = [kernel[c] for c in consumers[i] if kernel[c] >= 0]
            if fused:
                kernel[i] = fused[0]
    for i in range(n):
        if kernel[i] < 0 and free[i]:
            fused = [kernel[p] for p in preds[i] if p >= 0 and kernel[p] >= 0]
            kernel[i] = fused[0] if fused else i
        elif kernel[i] < 0:
            kernel[i] = i
    return kernel, free


def members(kernel: np.ndarray, count: int) -> list[np.ndarray]:
    """The op rows of each of ``count`` kernels (ids ``0 .. count - 1``), each in program order: one sort, not a
    scan of every op per kernel.

    >>> [m.tolist() for m in members(np.array([1, 0, 1, 2]), 3)]
    [[1], [0, 2], [3]]
    """
    order = np.argsort(kernel, kind="stable")
    return np.split(order, np.cumsum(np.bincount(kernel, minlength=count))[:-1])


def _finish(mode: str, kernel: np.ndarray, free: np.ndarray, primitive: np.ndarray, consumers: list[list[int]],
            fusion_names: Any, rows: np.ndarray, held: np.ndarray) -> Kernels:
    """Number kernels in program order and derive the per-op flags the model reads."""
    n = len(kernel)
    _, first, inverse = np.unique(kernel, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    kid = rank[inverse.reshape(-1)] if n else np.zeros(0, np.int64)
    size = np.bincount(kid, minlength=len(order))[kid] if n else np.zeros(0, np.int64)
    # the launch is paid by the kernel's first op that does work; a kernel of free ops alone is a view
    payer = np.zeros(n, bool)
    seen: set[int] = set()
    for i in range(n):
        if not free[i] and kid[i] not in seen:
            payer[i] = True
            seen.add(int(kid[i]))
    internal = np.array([bool(consumers[i]) and all(kid[c] == kid[i] for c in consumers[i]) for i in range(n)])
    # the values each streamed element carries inside the kernel: its intermediates that are not views
    inter = (internal & ~free).astype(np.float64)
    ws = np.bincount(kid, weights=inter, minlength=len(order))[kid] if n else np.zeros(0)
    # a kernel keeps a row of a reduction's input on chip when the reduction's result is used inside it (rule 9):
    # the row its consumers combine the result with
    kept = np.array([rows[i] if any(kid[c] == kid[i] for c in consumers[i]) else 0.0 for i in range(n)])
    row = np.bincount(kid, weights=kept, minlength=len(order)) if n else np.zeros(0)
    names = []
    for k, ops in enumerate(members(kid, len(order))):
        named = [str(fusion_names[i]).split(";")[0] for i in ops if str(fusion_names[i])] \
            if fusion_names is not None else []
        if named:
            names.append(named[0])
            continue
        work = [str(primitive[i]) for i in ops if not free[i]] or [str(primitive[ops[0]])]
        names.append(f"k{k} " + "+".join(work[:4]) + (f"+{len(work) - 4} more" if len(work) > 4 else ""))
    return Kernels(mode=mode, kernel=kid.astype(np.int64), name=np.asarray(names, dtype=object),
                   free=free.astype(bool), payer=payer, internal=internal, working_set=ws,
                   size=size.astype(np.int64), row=row[kid] if n else np.zeros(0),
                   weight=np.bincount(kid, weights=held, minlength=len(order))[kid] if n else np.zeros(0))
