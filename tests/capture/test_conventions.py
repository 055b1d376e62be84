"""FLOP conventions spanning two ops (issue 15): clip counted as one clamp, an explicit pad folded into the
convolution it feeds, as XLA counts them; the GEMM view's padding MACs named on the Trace."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dfit_nb


def xla(trace) -> float:
    return float(trace.lowering.attrs["xla_flops"])


@pytest.mark.parametrize("fn", [lambda x: jnp.clip(x, 0.0, 6.0) * 2, jax.nn.relu6,
                                lambda x: jnp.maximum(jnp.minimum(x, 1.0), -1.0)],
                         ids=["clip", "relu6", "max_of_min"])
def test_clip_counts_one_flop_per_element_like_xla(fn):
    t = dfit_nb.capture(fn, jnp.ones(1000))
    assert t.total_flops() == xla(t)
    assert "counted as one clamp" in t.lowering.attrs["merged_ops_note"]


@pytest.mark.parametrize("fn", [
    lambda x, lo: jnp.clip(x, lo, 6.0),  # a traced bound: XLA keeps max and min
    lambda x, lo: (lambda m: jnp.minimum(m, 6.0) + m)(jnp.maximum(x, 0.0)),  # max read twice: kept
    lambda x, lo: jnp.minimum(jnp.maximum(x, 6.0), 0.0),  # lo > hi: not a clamp
], ids=["traced_bound", "shared_max", "unordered"])
def test_what_xla_does_not_merge_is_counted_op_by_op(fn):
    t = dfit_nb.capture(fn, jnp.ones(1000), jnp.float32(0))
    assert t.total_flops() == xla(t)
    assert t.lowering.attrs["merged_ops_note"] == "none"


def conv(x, w, padding="VALID"):
    return jax.lax.conv_general_dilated(x, w, (2, 2), padding, dimension_numbers=("NHWC", "HWIO", "NHWC"))


def test_an_explicit_pad_before_a_valid_conv_counts_like_the_conv_padding():
    x, w = jnp.ones((1, 32, 32, 3)), jnp.ones((7, 7, 3, 8))
    padded = dfit_nb.capture(lambda x, w: conv(jnp.pad(x, ((0, 0), (3, 3), (3, 3), (0, 0))), w), x, w)
    own = dfit_nb.capture(lambda x, w: conv(x, w, ((3, 3), (3, 3))), x, w)
    conv_flops = [int(t.ops.flops.values[t.ops.primitive.values == "conv_general_dilated"][0]) for t in (padded, own)]
    assert conv_flops[0] == conv_flops[1] == xla(own) == 539_328
    # the pad's scalar 0 converted to float32 is one FLOP XLA constant-folds
    assert padded.total_flops() - xla(padded) == 1
    assert "folded into the following convolution" in padded.lowering.attrs["merged_ops_note"]
    # a non-zero pad value is not padding XLA folds
    edge = dfit_nb.capture(lambda x, w: conv(jnp.pad(x, ((0, 0), (3, 3), (3, 3), (0, 0)), constant_values=1.0), w),
                           x, w)
    assert int(edge.ops.flops.values[edge.ops.primitive.values == "conv_general_dilated"][0]) == 2 * 16 * 16 * 49 * 24


def test_the_gemm_view_padding_macs_are_named_on_the_trace():
    x, w = jnp.ones((2, 8, 8, 3)), jnp.ones((3, 3, 3, 8))
    t = dfit_nb.capture(lambda x, w: jax.lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")), x, w)
    o = t.ops
    view = int((o.m * o.k * o.n * np.maximum(o.batch, 1)).sum())
    assert view == 2 * 64 * 27 * 8
    padding = t.lowering.attrs["conv_gemm_view_padding_macs"]
    assert view == t.total_flops() // 2 + padding  # replay MACs = sum(flops) / 2 + the named padding MACs
    assert padding == 2 * 8 * 3 * (64 * 9 - 22 * 22)  # taps outside the 8x8 image, per image, in and out channel
