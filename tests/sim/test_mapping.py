"""The mapping search: dropping the candidates that cannot fit the compiled grid changes no mapping."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from dfit_nb.sim import mapping, presets, schedule
from dfit_nb.sim._cost import for_jit, grid_tables
from dfit_nb.sim._optable import alone_arrays


def _valid_pairs(tiles: int) -> set[tuple[int, int, int]]:
    """Every (layout, iy, ix) of the full candidate set whose factors fit a ``tiles``-tile machine (brute force)."""
    q = float(mapping.odd_part(float(tiles), np))
    values = [2.0 ** a for a in range(mapping.MAX_LOG2 + 1)] + [q * 2.0 ** a for a in range(mapping.MAX_LOG2 + 1)]
    valid = [True] * (mapping.MAX_LOG2 + 1) + [q > 1] * (mapping.MAX_LOG2 + 1)
    c = mapping.CANDIDATES
    return {(int(lay), int(iy), int(ix)) for lay, iy, ix in zip(c["layout"], c["iy"], c["ix"], strict=True)
            if valid[iy] and valid[ix] and values[iy] * values[ix] <= tiles}


@pytest.mark.parametrize("bound", [1, 8, 20, 64, 320, 512, 4096])
def test_the_kept_candidates_hold_every_one_a_smaller_grid_can_use(bound):
    kept = mapping.candidates_within(bound)
    keys = set(zip(kept["layout"].astype(int).tolist(), kept["iy"].tolist(), kept["ix"].tolist(), strict=True))
    for tiles in sorted({1, 2, 3, 5, 6, 7, 12, 15, 20, 24, 45, 64, 96, 320, 512, 4096} | {bound}):
        if tiles <= bound:
            missing = _valid_pairs(tiles) - keys
            assert not missing, (bound, tiles, sorted(missing)[:5])
    # in the full set's order, so ties still go to the same (earlier) candidate
    order = {k: i for i, k in enumerate(zip(mapping.CANDIDATES["layout"].astype(int).tolist(),
                                            mapping.CANDIDATES["iy"].tolist(), mapping.CANDIDATES["ix"].tolist(),
                                            strict=True))}
    positions = [order[k] for k in zip(kept["layout"].astype(int).tolist(), kept["iy"].tolist(),
                                       kept["ix"].tolist(), strict=True)]
    assert positions == sorted(positions) and positions[0] == 0
    assert len(kept["layout"]) < len(mapping.CANDIDATES["layout"])


def _ops(seed: int, n: int = 40) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    m, k, nn = (np.exp(rng.uniform(0, np.log(5000), n)).round() for _ in range(3))
    k[: n // 5] = 0  # some vector ops
    arrays, _ = alone_arrays({"m": m, "k": k, "n": nn, "batch": rng.integers(1, 5, n).astype(float),
                              "elems_in": m * nn, "elems_out": m * nn})
    return arrays


@pytest.mark.parametrize("preset", ["npu_like", "sambanova_like"])  # 20 and 320 tiles in buckets of 64 and 512
def test_the_pruned_search_picks_what_the_full_search_picks(preset, monkeypatch):
    hw = for_jit(presets.get(preset))
    rows, cols = int(hw.tile_rows), int(hw.tile_cols)
    grid = schedule.bucket(rows, cols)
    tables = grid_tables(rows, cols, grid.rows, grid.cols, grid.tiles)
    n_tiles = float(rows * cols)
    with jax.enable_x64(True):
        for seed, df in ((0, 0.0), (1, 1.0), (2, 2.0)):
            ops = _ops(seed)
            n = len(ops["m"])
            free = {"layout": np.full(n, -1.0), "gy": np.zeros(n), "gx": np.zeros(n)}
            # a few pins, as a user's per-region layouts make them
            pinned = {"layout": np.where(np.arange(n) % 7 == 3, 1.0, -1.0), "gy": np.where(np.arange(n) % 11 == 5,
                                                                                            2.0, 0.0),
                      "gx": np.zeros(n)}
            for pins in (free, pinned):
                # a new function per call: jit caches traces by function, and the two must trace apart
                fast = jax.jit(lambda *a: mapping.search(*a))(ops, hw, np.full(n, df), n_tiles, pins, tables)
                with monkeypatch.context() as mp:
                    mp.setattr(mapping, "candidates_within", lambda _: mapping.CANDIDATES)
                    full = jax.jit(lambda *a: mapping.search(*a))(ops, hw, np.full(n, df), n_tiles, pins, tables)
                for key in ("layout", "gy", "gx"):
                    np.testing.assert_array_equal(np.asarray(fast[key]), np.asarray(full[key]), err_msg=key)


# A division by a broadcast divisor is compiled as a multiplication by its reciprocal (XLA's algebraic
# simplifier), so ceil(1260 / 420) came out as 4 when an op's candidates broadcast against it, and the search
# scored a mapping other than the one the model then charged (hypothesis found it: a 2 x 2 grid where 4x the
# SRAM made the op 4.8% slower). Counts are exact now, however the operands broadcast.
def test_a_candidate_costs_the_same_alone_and_beside_others():
    import jax.numpy as jnp

    from dfit_nb.sim import machine
    from dfit_nb.sim.hardware import Hardware

    hw = for_jit(Hardware(pe_rows=32, pe_cols=8, tile_rows=2, tile_cols=2, sram_input_bytes=4096,
                          sram_weight_bytes=4096, sram_output_bytes=4096, dram_bytes_per_cycle=64.0,
                          noc_link_bytes_per_cycle=32.0))
    arrays, _ = alone_arrays({"m": [420, 96, 7], "k": [206, 96, 300], "n": [32, 200, 5], "batch": [3, 1, 2]})
    gy, gx = np.array([[1.0, 4.0, 2.0, 3.0, 1.0]]), np.array([[4.0, 1.0, 2.0, 1.0, 3.0]])
    layout = np.array([[0.0, 0.0, 1.0, 1.0, 0.0]])
    with jax.enable_x64(True):
        ops = {k: jnp.asarray(v, jnp.float64)[:, None] for k, v in arrays.items()}
        together = machine.model(ops, hw, jnp.zeros((1, 1)), layout, gy, gx, 4.0)
        for j in range(gy.shape[1]):
            alone = machine.model(ops, hw, jnp.zeros((1, 1)), layout[:, j:j + 1], gy[:, j:j + 1], gx[:, j:j + 1],
                                  4.0)
            for key in ("compute_v", "sram_bytes", "noc_in", "sram_reads_weight", "dram_bytes", "fold"):
                np.testing.assert_array_equal(np.asarray(together[key])[:, j], np.asarray(alone[key])[:, 0],
                                              err_msg=f"{key}, candidate {j}")


def test_counts_divide_exactly_however_the_divisor_broadcasts():
    import jax.numpy as jnp

    from dfit_nb.sim.machine import ceil_div, floor_div

    rng = np.random.default_rng(0)
    b = rng.integers(1, 5000, 400).astype(np.float64)
    a = np.concatenate([b * rng.integers(0, 50, 400), b * rng.integers(0, 50, 400) + rng.integers(-3, 4, 400)])
    with jax.enable_x64(True):
        for j in range(0, 400, 40):  # one divisor broadcast against many numerators: XLA multiplies by 1/b
            div = jnp.asarray(b[j])[None]
            got_c = jax.jit(ceil_div)(jnp.asarray(a), div)
            got_f = jax.jit(floor_div)(jnp.asarray(a), div)
            np.testing.assert_array_equal(np.asarray(got_c), -(-a // b[j]))
            np.testing.assert_array_equal(np.asarray(got_f), a // b[j])


def test_a_layer_pipelined_region_is_a_tile_count_the_mapping_fills():
    """On a 4x5 grid the split factors are 2^a and 5 x 2^a, so the counts a mapping fills are their products up to
    20 tiles; a region is rounded down to one of them (the tiles above would hold nothing), a need up to one."""
    import jax.numpy as jnp

    hw = presets.get("tpu_like").replace(tile_rows=4, tile_cols=5)
    with jax.enable_x64(True):  # dfit_nb's programs run in float64
        counts = np.asarray(mapping.tile_counts(hw))
        alloc = schedule.allocate(jnp.array([7.0, 3.0, 1.0]), hw, jnp.array([0.0, 0.0, 3.0]), counts)
    assert sorted(set(counts[np.isfinite(counts)].tolist())) == [1, 2, 4, 5, 8, 10, 16, 20]
    # shares of the 18-tile pool: 11, 4 and 1 tiles -> 10 and 4; the third op's need of 3 tiles -> 4
    assert np.asarray(alloc).tolist() == [10.0, 4.0, 4.0]
