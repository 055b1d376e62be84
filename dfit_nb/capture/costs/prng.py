"""Cost rules of random-number primitives: keys, splits, bits and XLA's RNG ops.

Threefry hashing is counted as XLA counts JAX's lowering (per element, plus the key
schedule and the counter computation; it depends on ``jax_threefry_partitionable``);
``rbg`` keys and ``rng_bit_generator`` use an estimate of XLA's Philox expansion.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax

from ._registry import CostContext, OpCost, register_cost_rule
from ._shapes import _dtype_of, _family, _itemsize, _numel


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
