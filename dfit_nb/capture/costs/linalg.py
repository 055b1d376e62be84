"""Cost rules of the FFT and of dense linear algebra (Cholesky, LU, QR, eigen, SVD ...).

The FFT follows XLA's count. The linear-algebra primitives run as LAPACK custom calls on
CPU, for which XLA reports no exact count; their rules give textbook estimates per matrix,
times the batch.
"""

from __future__ import annotations

import math
from typing import Any

from ._registry import CostContext, OpCost, register_cost_rule
from ._shapes import _floor_log2, _shape


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


@register_cost_rule("lu_pivots_to_permutation")
def _lu_pivots_rule(ctx: CostContext) -> OpCost:
    """The row swaps of an LU's pivots applied to ``0 .. n-1`` (``jax.scipy.linalg.lu_factor``): integer index
    work, no FLOPs; its bytes are the pivots read and the permutation written."""
    return ctx.cost(op_class="other")


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
