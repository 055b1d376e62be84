"""Program-level charts on real traces, runs, a policy and sweeps: valid Vega-Lite, PNG export, row budgets."""

from __future__ import annotations

import struct
import warnings

import numpy as np
import pytest
import xarray as xr

import dfit_nb
from dfit_nb.sim import Hardware, presets
from dfit_nb.views import _common, _region_tree, program

EXAMPLES = ("encoder", "mlp", "cnn", "scan_model")


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _check(chart) -> dict:
    spec = chart.to_dict()  # validates against the Vega-Lite schema
    assert "$schema" in spec
    title = spec["title"]
    assert title["text"]
    for rows in spec.get("datasets", {}).values():
        assert len(rows) <= _common.MAX_ROWS
    width, height = _png_size(_common.png(chart))
    assert width > 100 and height > 50
    return spec


def _has_tooltip(spec: dict) -> bool:
    return '"tooltip"' in str(spec).replace("'", '"')


@pytest.fixture(scope="module")
def policy_encoder(static_traces):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dfit_nb.sim.select_dataflows(static_traces["encoder"], presets.get("eyeriss_like"), "energy")


@pytest.fixture(scope="module")
def grid_sweep(static_traces):
    return dfit_nb.sim.sweep(static_traces["mlp"], presets.get("npu_like"), ["ws", "os"],
                             pe=[(8, 8), (16, 16), (32, 32)], dram_bw=[30.0, 60.0])


@pytest.fixture(scope="module")
def batch(static_traces):
    base = presets.get("npu_like")
    machines = [base.replace(dram_bytes_per_cycle=bw, pe_rows=pe, pe_cols=pe)
                for bw in (15.0, 60.0, 240.0) for pe in (8.0, 16.0, 32.0)]
    return dfit_nb.sim.replay_batch(static_traces["mlp"], Hardware.stack(machines))


# ---- regions ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", EXAMPLES)
def test_regions_of_traces(static_traces, name):
    spec = _check(program.regions(static_traces[name]))
    assert _has_tooltip(spec)


@pytest.mark.parametrize("metric", ["flops", "bytes", "time", "energy"])
def test_regions_of_a_run(all_runs, metric):
    _check(program.regions(all_runs[("encoder", "npu_like")], metric, max_depth=4, color="metric"))


def test_regions_layout_nests_children_inside_parents(static_traces):
    trace = static_traces["encoder"]
    df, _ = _region_tree._region_table(trace, "flops")
    x0, x1 = _region_tree._icicle_layout(df)
    par = df["parent_index"].values
    assert np.all(x0 >= x0[par] - 1e-6) and np.all(x1 <= x1[par] + 1e-6)
    root = int(np.flatnonzero(par == np.arange(len(df)))[0])
    assert x1[root] == pytest.approx(float(trace.regions["flops"].values[root]))
    # siblings do not overlap
    for p in np.unique(par):
        kids = np.flatnonzero((par == p) & (np.arange(len(df)) != p))
        order = np.argsort(x0[kids])
        assert np.all(x0[kids][order][1:] >= x1[kids][order][:-1] - 1e-6)


def test_regions_rejects_what_a_static_trace_lacks(static_traces):
    with pytest.raises(ValueError, match="energy"):
        program.regions(static_traces["mlp"], "energy")
    with pytest.raises(ValueError, match="measured time"):
        program.regions(static_traces["mlp"], "time")
    with pytest.raises(ValueError, match="metric"):
        program.regions(static_traces["mlp"], "watts")


# ---- roofline ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", [("encoder", "npu_like"), ("cnn", "eyeriss_like"), ("scan_model", "cerebras_like")])
def test_roofline(all_runs, static_traces, key):
    run = all_runs[key]
    spec = _check(program.roofline(run, trace=static_traces[key[0]]))
    assert _has_tooltip(spec)
    text = str(spec)
    peak = 2 * run.attrs["hw_tile_rows"] * run.attrs["hw_tile_cols"] * run.attrs["hw_pe_rows"] * run.attrs[
        "hw_pe_cols"] * run.attrs["hw_clock_ghz"] * 1e9
    assert f"peak {peak / 1e12:.4g} TFLOP/s" in text
    assert "'type': 'log'" in text


def test_roofline_with_hardware_override(all_runs):
    _check(program.roofline(all_runs[("mlp", "npu_like")], hw=presets.get("tpu_like")))


# ---- traffic mix ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", EXAMPLES)
def test_traffic_mix_of_runs(all_runs, name):
    spec = _check(program.traffic_mix(all_runs[(name, "npu_like")]))
    assert _has_tooltip(spec)


def test_traffic_mix_of_a_policy(policy_encoder):
    spec = _check(program.traffic_mix(policy_encoder, top=2))
    text = str(spec)
    assert "(other)" in text and "hybrid" in text
    _check(program.traffic_mix(policy_encoder, level="dram"))
    with pytest.raises(ValueError, match="level"):
        program.traffic_mix(policy_encoder, level="l3")


# ---- reuse and policy -------------------------------------------------------------------------------------------
def test_reuse_map(policy_encoder):
    spec = _check(program.reuse_map(policy_encoder))
    rows = next(iter(spec["datasets"].values()))
    ds = policy_encoder.artifacts["reuse"]
    assert len(rows) == ds["reuse"].size
    assert rows[0]["op"].startswith(f"#{int(ds['op'][0])} ")


def test_policy_chart(policy_encoder):
    spec = _check(program.policy(policy_encoder))
    text = str(spec)
    assert "replayed gains" in text and "'rule'" in text
    n_sw = int(policy_encoder.choices["switch"].sum())
    assert f"{n_sw} switch" in str(spec["title"])


# ---- sweep ------------------------------------------------------------------------------------------------------
def _front(x: np.ndarray, y: np.ndarray) -> set[int]:
    """Non-dominated points, the brute-force way."""
    out = set()
    for i in range(x.size):
        dominated = np.any((x <= x[i]) & (y <= y[i]) & ((x < x[i]) | (y < y[i])))
        if not dominated:
            out.add(i)
    return out


def _rows(spec: dict) -> list[dict]:
    return next(iter(spec["datasets"].values()))


def test_sweep_grid(grid_sweep):
    spec = _check(program.sweep(grid_sweep))
    rows = _rows(spec)
    assert len(rows) == 3 * 2 * 2
    assert any(p.get("name") == "picked" for p in spec.get("params", []))
    x = np.array([r["latency_s"] for r in rows])
    y = np.array([r["energy_j"] for r in rows])
    expected = _front(x, y)
    assert {i for i, r in enumerate(rows) if r["pareto"]} == expected
    clock = grid_sweep.attrs["hw_clock_ghz"] * 1e9
    assert sorted(x) == pytest.approx(sorted(grid_sweep["total_cycles"].values.ravel() / clock))


def test_sweep_replay_batch(batch):
    spec = _check(program.sweep(batch, color="pe_rows"))
    rows = _rows(spec)
    assert len(rows) == batch.sizes["machine"]
    x = np.array([r["latency_s"] for r in rows])
    y = np.array([r["energy_j"] for r in rows])
    assert {i for i, r in enumerate(rows) if r["pareto"]} == _front(x, y)
    assert any(p.get("name") == "picked" for p in spec.get("params", []))


def test_sweep_aggregates_big_grids_and_keeps_the_front():
    rng = np.random.default_rng(0)
    n = 3000
    ds = xr.Dataset({"total_cycles": (("a", "dataflow"), rng.uniform(1, 1e6, (n, 2))),
                     "total_energy_j": (("a", "dataflow"), rng.uniform(1e-3, 1, (n, 2)))},
                    coords={"a": np.arange(n), "dataflow": ["ws", "os"]}, attrs={"hw_clock_ghz": 1.0})
    spec = _check(program.sweep(ds))
    rows = _rows(spec)
    assert len(rows) <= _common.MAX_ROWS
    assert "aggregated" in str(spec["title"]["subtitle"])
    flat_x = ds["total_cycles"].values.ravel() / 1e9
    flat_y = ds["total_energy_j"].values.ravel()
    front = _front(flat_x, flat_y)
    got = np.array(sorted((r["latency_s"], r["energy_j"]) for r in rows if r["pareto"]))
    want = np.array(sorted((flat_x[i], flat_y[i]) for i in front))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_pareto_mask_matches_brute_force():
    rng = np.random.default_rng(1)
    for _ in range(20):
        x, y = rng.integers(0, 6, 30).astype(float), rng.integers(0, 6, 30).astype(float)
        mask = program.pareto_mask(x, y)
        front = _front(x, y)
        # duplicates keep one representative: the masked points are the distinct non-dominated positions
        assert {(x[i], y[i]) for i in np.flatnonzero(mask)} == {(x[i], y[i]) for i in front}
        assert mask.sum() == len({(x[i], y[i]) for i in front})


def test_sweep_rejects_unknown_inputs(grid_sweep):
    with pytest.raises(ValueError, match="per-configuration"):
        program.sweep(grid_sweep, x="watts")
    with pytest.raises(ValueError, match="expected"):
        program.sweep(xr.Dataset({"a": ("x", [1.0])}))


@pytest.mark.parametrize("x", ["dataflow", "pe", "config"])
def test_sweep_names_a_swept_dim_given_as_an_axis(grid_sweep, x):
    """A swept dim (or the points' label text) as x ended in numpy's "ufunc 'isfinite' not supported"."""
    with pytest.raises(ValueError, match=f"sweep\\(\\) needs x as a per-configuration value, not '{x}'"):
        program.sweep(grid_sweep, x=x)


def test_sweep_says_which_points_it_cannot_draw(static_traces):
    """A configuration with a NaN latency was dropped, the subtitle counting only the rest; one with 0 energy was
    Pareto-optimal yet left out by the log axis. Both are now said, and the 0 drawn on a linear axis."""
    from dfit_nb.sim import Hardware, replay_batch

    hw = presets.get("npu_like")
    batch = replay_batch(static_traces["mlp"], Hardware.stack([hw, hw.replace(pe_rows=8), hw.replace(pe_cols=8)]))
    nan = batch.copy(deep=True)
    nan["latency_s"].values[0] = np.nan
    subtitle = program.sweep(nan).to_dict()["title"]["subtitle"]
    assert "1 of 3 configurations not drawn: latency_s or energy_j is not finite (NaN or inf)" in subtitle
    zero = batch.copy(deep=True)
    zero["energy_j"].values[0] = 0.0
    spec = program.sweep(zero).to_dict()
    assert "energy_j on a linear axis: it has values <= 0" in spec["title"]["subtitle"]
    assert {layer["encoding"]["y"]["scale"]["type"] for layer in spec["layer"]} == {"linear"}
    plain = program.sweep(batch).to_dict()  # valid sweeps keep their log axes and one-line subtitle
    assert {layer["encoding"]["y"]["scale"]["type"] for layer in plain["layer"]} == {"log"}
    assert len(plain["title"]["subtitle"]) == 1 and plain["title"]["subtitle"][0].startswith("3 configurations, ")


def test_roofline_refuses_a_trace_of_another_program():
    """trace= gives non-GEMM ops their FLOPs by op id: another program's Trace drew its FLOPs on this run's ops
    (and ops this run does not have). It is refused, naming the first op that differs."""
    import jax.numpy as jnp

    mine = dfit_nb.capture(lambda x: jnp.tanh(jnp.exp(x) * 3.0), jnp.ones((8, 8)))
    other = dfit_nb.capture(lambda x: jnp.sort(x, axis=0) + x, jnp.ones((16, 16)))
    run = dfit_nb.replay(mine, presets.get("npu_like"))
    assert "$schema" in program.roofline(run, trace=mine).to_dict()
    with pytest.raises(_common.ViewInputError, match=r"trace= is not the program this run replayed: op 0"):
        program.roofline(run, trace=other)
