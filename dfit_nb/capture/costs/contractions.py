"""Cost rules of matrix products (``dot_general``) and convolutions.

Both give a GEMM view ``(batch, m, k, n)`` besides the flop count: ``2 * batch * m * k * n``
for a dot (with XLA's strength reductions of degenerate shapes), and for a convolution two
flops per multiply-add that reads a real, non-padding, non-hole input element.
"""

from __future__ import annotations

import math

from ._registry import CostContext, OpCost, register_cost_rule
from ._shapes import _dtype_of, _itemsize, _shape


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
