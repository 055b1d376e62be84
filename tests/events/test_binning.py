"""Time binning: conservation, agreement with a brute-force overlap, edge cases, scale."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dfit_nb.events.binning import BinningError, bin_intervals, busy_fraction, time_edges


def brute_force(start, end, weight, group, n_groups, edges):
    """The N x n_bins overlap matrix, the obvious way (small inputs only)."""
    lo, hi = edges[:-1][None, :], edges[1:][None, :]
    s, e = start[:, None], end[:, None]
    length = end - start
    overlap = np.clip(np.minimum(e, hi) - np.maximum(s, lo), 0, None)
    share = np.where(length[:, None] > 0, overlap / np.where(length > 0, length, 1)[:, None], 0.0)
    # zero-length intervals: the bin holding start (the last one for start == edges[-1])
    b = np.minimum(np.searchsorted(edges, start, side="right") - 1, len(edges) - 2)
    point = (length == 0) & (start >= edges[0]) & (start <= edges[-1])
    share[np.flatnonzero(point), b[point]] = 1.0
    out = np.zeros((len(edges) - 1, n_groups))
    for g in range(n_groups):  # a loop over groups is fine in the reference
        out[:, g] = (share[group == g] * weight[group == g, None]).sum(axis=0)
    return out


def random_intervals(rng, n, n_groups, t_max=100.0, p_zero=0.2):
    start = rng.uniform(0, t_max, n)
    length = rng.exponential(t_max / 5, n) * (rng.uniform(size=n) > p_zero)
    end = np.minimum(start + length, t_max)
    return start, end, rng.uniform(0, 10, n), rng.integers(0, n_groups, n)


@settings(max_examples=60)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 200), n_groups=st.integers(1, 7),
       n_bins=st.integers(1, 40), uneven=st.booleans())
def test_total_weight_is_conserved_per_group(seed, n, n_groups, n_bins, uneven):
    rng = np.random.default_rng(seed)
    start, end, weight, group = random_intervals(rng, n, n_groups)
    edges = time_edges(100.0, n_bins)
    if uneven:
        edges = np.concatenate([[0.0], np.sort(rng.uniform(0, 100, n_bins - 1)), [100.0]])
        edges = np.unique(edges)
    out = bin_intervals(start, end, weight, group, n_groups, edges)
    assert out.shape == (len(edges) - 1, n_groups)
    np.testing.assert_allclose(out.sum(axis=0), np.bincount(group, weights=weight, minlength=n_groups),
                               rtol=1e-9, atol=1e-9)
    assert out.min() >= -1e-9


@pytest.mark.parametrize("n_groups", [5, 80])  # 80: wide enough to cumulate the bins row by row
@pytest.mark.parametrize("seed", range(8))
def test_agrees_with_brute_force_overlap(seed, n_groups):
    rng = np.random.default_rng(seed)
    start, end, weight, group = random_intervals(rng, 300, n_groups, p_zero=0.1)
    # some intervals stick out of the edges on either side: only the inside part counts
    start[:20] -= 30.0
    end[20:40] += 30.0
    edges = np.concatenate([[0.0], np.sort(rng.uniform(0, 100, 12)), [100.0]])
    got = bin_intervals(start, end, weight, group, n_groups, edges)
    np.testing.assert_allclose(got, brute_force(start, end, weight, group, n_groups, edges), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("shape", [(1, 1), (7, 3), (40, 63), (40, 64), (3, 4096)])
def test_bins_cumulate_exactly_as_numpy_cumsum(shape):
    """Row by row (wide grids) or np.cumsum (narrow ones): the same sums in the same order, bit for bit."""
    from dfit_nb.events.binning import _cumulate_bins

    x = np.random.default_rng(0).normal(size=shape)
    expected = np.cumsum(x, axis=0)
    got = _cumulate_bins(x.copy())
    assert np.array_equal(got, expected)


def test_zero_length_intervals_go_to_the_bin_holding_start():
    edges = np.array([0.0, 1.0, 2.0, 3.0])
    start = np.array([0.0, 1.0, 2.5, 3.0, -1.0, 4.0])
    out = bin_intervals(start, start, [1.0, 2.0, 4.0, 8.0, 16.0, 32.0], np.zeros(6, int), 1, edges)
    # on an edge: the bin starting there; at edges[-1]: the last bin; outside: dropped
    np.testing.assert_array_equal(out[:, 0], [1.0, 2.0, 12.0])


def test_intervals_touching_edges():
    edges = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    start = np.array([0.0, 1.0, 1.0, 3.0, -2.0, 4.0])
    end = np.array([1.0, 3.0, 2.0, 4.0, 0.0, 6.0])
    out = bin_intervals(start, end, [1.0, 2.0, 4.0, 8.0, 16.0, 32.0], np.arange(6), 6, edges)
    expected = np.zeros((4, 6))
    expected[0, 0] = 1.0
    expected[[1, 2], 1] = 1.0
    expected[1, 2] = 4.0
    expected[3, 3] = 8.0  # ends exactly at edges[-1]; the last two lie outside and touch only an edge
    np.testing.assert_array_equal(out, expected)


def test_full_bins_between_partial_ones():
    out = bin_intervals([0.5], [9.5], [9.0], [0], 1, np.arange(11.0))
    np.testing.assert_allclose(out[:, 0], [0.5, 1, 1, 1, 1, 1, 1, 1, 1, 0.5])


def test_busy_fraction_at_most_one_for_disjoint_intervals_per_group():
    rng = np.random.default_rng(1)
    n_groups, per_group = 6, 50
    # per group: sorted cut points, alternate busy/idle, so intervals never overlap
    cuts = np.sort(rng.uniform(0, 1000, (n_groups, 2 * per_group)), axis=1)
    start, end = cuts[:, 0::2].ravel(), cuts[:, 1::2].ravel()
    group = np.repeat(np.arange(n_groups), per_group)
    edges = time_edges(1000.0, 64)
    frac = busy_fraction(start, end, group, n_groups, edges)
    assert frac.max() <= 1 + 1e-9 and frac.min() >= -1e-12
    busy_time = (frac * np.diff(edges)[:, None]).sum(axis=0)
    np.testing.assert_allclose(busy_time, np.bincount(group, weights=end - start))


def test_busy_fraction_of_one_long_interval_is_one():
    frac = busy_fraction([0.0], [10.0], [0], 1, time_edges(10.0, 7))
    np.testing.assert_allclose(frac[:, 0], 1.0)


def test_time_edges():
    np.testing.assert_array_equal(time_edges(8.0, 4), [0, 2, 4, 6, 8])
    np.testing.assert_array_equal(time_edges(0.0, 256), [0.0, 1.0])
    for bad in ((-1.0, 4), (float("nan"), 4), (1.0, 0), (1.0, 2.5)):
        with pytest.raises(BinningError):
            time_edges(*bad)


@pytest.mark.parametrize(("args", "match"), [
    (([0.0], [1.0], [1.0], [0], 1, [0.0, 0.0, 1.0]), "strictly increasing"),
    (([0.0], [1.0], [1.0], [0], 1, [1.0]), "at least 2"),
    (([1.0], [0.0], [1.0], [0], 1, [0.0, 1.0]), "ends before it starts"),
    (([0.0], [1.0], [1.0], [3], 2, [0.0, 1.0]), r"\[0, 2\)"),
    (([0.0], [1.0], [1.0], [0.5], 2, [0.0, 1.0]), "integers"),
    (([np.nan], [1.0], [1.0], [0], 1, [0.0, 1.0]), "finite"),
])
def test_bad_input_is_named(args, match):
    with pytest.raises(BinningError, match=match):
        bin_intervals(*[np.asarray(a) for a in args[:4]], args[4], np.asarray(args[5]))


def test_no_intervals():
    out = bin_intervals(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0, int), 3, time_edges(1.0, 4))
    np.testing.assert_array_equal(out, np.zeros((4, 3)))


def test_a_million_intervals_over_256_bins_and_4096_groups():
    rng = np.random.default_rng(0)
    n, n_groups = 1_000_000, 4096
    start = rng.uniform(0, 1e6, n)
    end = start + rng.exponential(2e4, n) * (rng.uniform(size=n) > 0.05)
    group = rng.integers(0, n_groups, n)
    edges = time_edges(float(end.max()), 256)
    out = bin_intervals(start, end, np.ones(n), group, n_groups, edges)
    assert out.shape == (256, n_groups)
    np.testing.assert_allclose(out.sum(), n, rtol=1e-9)
