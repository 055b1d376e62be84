"""The thermal model: analytic steady state, energy balance, monotonicity, lateral spreading, throttling on a real
preset pair, bad input, and the bottleneck classes it feeds."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import dfit_nb
from dfit_nb.sim import Hardware, HardwareError, ThermalError, presets, thermal
from dfit_nb.sim._thermal import ON_DIE_KINDS, _network, _simulate, steady_state, tile_energy
from dfit_nb.sim.hardware import THERMAL_FIELDS
from dfit_nb.sim.run import BOTTLENECKS, CLASSES, MECHANISMS, MEMORY_MECHANISMS


def _transient(energy_j: np.ndarray, dt_s: float, hw: Hardware) -> dict[str, np.ndarray]:
    """The scan itself on a given per-step energy map (no run), never throttled unless the limit is reached."""
    import jax

    net = _network(hw)
    with jax.enable_x64(True):
        out = _simulate(jnp.asarray(energy_j), jnp.float64(dt_s), jnp.zeros(energy_j.shape[1:]),
                        {k: jnp.asarray(v) for k, v in net.items()},
                        jnp.float64(float(hw.thermal_limit_c) - float(hw.ambient_c)),
                        jnp.float64(float(hw.throttle_clock_factor)))
    return {k: np.asarray(v) for k, v in jax.device_get(out).items()}


GRID = Hardware(tile_rows=3, tile_cols=4, thermal_resistance_k_per_w=2.0, lateral_resistance_k_per_w=9.0,
                heat_capacity_j_per_k=0.6, ambient_c=30.0, thermal_limit_c=400.0)


@pytest.fixture(scope="module")
def small_run():
    """A 64 x 64 matmul on the 4 x 5 NPU grid: power on some tiles only (a real, non-uniform map)."""
    return dfit_nb.replay(dfit_nb.capture(lambda a: a @ a, jnp.ones((64, 64))), presets.get("npu_like"))


@pytest.fixture(scope="module")
def gemm_trace():
    """Two 1024^3 bf16 GEMMs: compute-bound enough to heat a TPU-class chip."""
    b = jnp.ones((1024, 1024), jnp.bfloat16)
    return dfit_nb.capture(lambda a, b: jnp.tanh(a @ b) @ b, b, b)


# ---- the RC network -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("grid", [(1, 1), (3, 4), (8, 2)])
def test_steady_state_of_a_uniform_power_map_is_the_analytic_one(grid):
    """Uniform power: no lateral flow, each tile T = T_amb + P x (R_chip x tiles), from the closed form and from the
    transient after many time constants."""
    hw = GRID.replace(tile_rows=grid[0], tile_cols=grid[1])
    n = grid[0] * grid[1]
    p = 0.75  # W per tile
    expected = 30.0 + p * 2.0 * n
    np.testing.assert_allclose(steady_state(np.full(grid, p), hw), expected, rtol=1e-12)
    tau = 0.6 * 2.0  # R x C of the chip: the uniform mode's time constant
    dt = 40 * tau / 64
    out = _transient(np.full((64, *grid), p * dt), dt, hw)
    np.testing.assert_allclose(out["theta"][-1] + 30.0, expected, rtol=1e-9)
    # the transient of the uniform mode is a single exponential: 1 - exp(-t / RC) of the way after the first step
    np.testing.assert_allclose(out["theta"][0], (expected - 30.0) * (1 - np.exp(-dt / tau)), rtol=1e-9)


def test_the_steady_state_solves_the_network_equations():
    """G theta = p with G assembled tile by tile (vertical conductance plus one lateral per mesh neighbour)."""
    rng = np.random.default_rng(0)
    p = rng.uniform(0, 3, (3, 4))
    theta = steady_state(p, GRID) - 30.0
    g_v, g_l = 1 / (2.0 * 12), 1 / 9.0
    padded = np.pad(theta, 1, mode="edge")  # insulated edges: a mirrored neighbour carries no flow
    lateral = sum(theta - padded[1 + dy:4 + dy, 1 + dx:5 + dx] for dy, dx in ((-1, 0), (1, 0), (0, -1), (0, 1)))
    np.testing.assert_allclose(g_v * theta + g_l * lateral, p, rtol=1e-10, atol=1e-12)


@settings(max_examples=25)
@given(p=arrays(np.float64, (3, 4), elements=st.floats(0, 5)),
       extra=arrays(np.float64, (3, 4), elements=st.floats(0, 5)),
       r=st.floats(0.05, 20), lateral=st.floats(0.1, 100))
def test_more_power_or_more_resistance_is_never_cooler(p, extra, r, lateral):
    hw = GRID.replace(thermal_resistance_k_per_w=r, lateral_resistance_k_per_w=lateral)
    base = steady_state(p, hw)
    assert np.all(steady_state(p + extra, hw) >= base - 1e-9)
    assert np.all(steady_state(p, hw.replace(thermal_resistance_k_per_w=2 * r)) >= base - 1e-9)
    assert np.all(base >= 30.0 - 1e-9)
    # the transient from ambient never overshoots the steady state of a constant map (monotone approach)
    dt = 0.01
    out = _transient(np.broadcast_to((p + extra) * dt, (16, 3, 4)).copy(), dt, hw)
    assert np.all(np.diff(out["theta"], axis=0) >= -1e-9)
    assert np.all(out["theta"] + 30.0 <= steady_state(p + extra, hw) + 1e-9)


def test_lateral_coupling_spreads_a_hotspot():
    p = np.zeros((3, 4))
    p[1, 1] = 2.0
    isolated = steady_state(p, GRID.replace(lateral_resistance_k_per_w=1e9))
    coupled = steady_state(p, GRID)
    assert isolated[1, 1] == pytest.approx(30.0 + 2.0 * 2.0 * 12, rel=1e-6)  # its own vertical path only
    assert np.allclose(np.delete(isolated.ravel(), 5), 30.0, atol=1e-6)
    assert coupled[1, 1] < isolated[1, 1]
    rise = coupled - 30.0
    assert rise[0, 1] > 0 and rise[1, 0] > 0 and rise[1, 2] > rise[1, 3] > 0  # decays with distance
    assert rise[0, 1] == pytest.approx(rise[2, 1], rel=1e-12)  # mirror images about the hot tile's row
    assert rise.sum() / (2.0 * 12) == pytest.approx(2.0, rel=1e-9)  # all of the power leaves vertically


# ---- driven by a replay -----------------------------------------------------------------------------------------

def test_power_comes_from_the_replays_on_die_events(small_run):
    energy, edges = tile_energy(small_run)
    ev = small_run.events
    on_die = np.isin(ev["kind"].values.astype(str), ON_DIE_KINDS) & (ev["source"].values == "simulated")
    assert energy.sum() == pytest.approx(float(ev["energy_pj"].values[on_die].sum()) * 1e-12, rel=1e-9)
    ops = small_run.ops
    assert energy.sum() * 1e12 == pytest.approx(float((ops["energy_pj"] - ops["energy_dram_pj"]).sum()), rel=1e-9)
    assert edges[-1] == pytest.approx(float(small_run.summary["latency_cycles"]))


def test_energy_is_conserved_and_sustained_operation_reaches_the_steady_state(small_run):
    hw = presets.get("npu_like").replace(throttle_clock_factor=1.0)
    energy, edges = tile_energy(small_run)
    latency_s = edges[-1] / 1e9
    inferences = int(40 * 2.5 / latency_s)  # 40 time constants (R x C = 5 K/W x 0.5 J/K)
    th = thermal(small_run, inferences, steps=128, hw=hw)
    e_in = float(th["energy_in_j"])
    assert e_in == pytest.approx(energy.sum() * inferences, rel=1e-9)
    assert float(th["heat_to_ambient_j"]) + float(th["stored_heat_j"]) == pytest.approx(e_in, rel=1e-9)
    mean_power = energy.sum(axis=0) / latency_s
    np.testing.assert_allclose(th["temperature"].values[-1], steady_state(mean_power, hw), rtol=1e-6)
    assert float(th["peak_temperature_c"]) == pytest.approx(steady_state(mean_power, hw).max(), rel=1e-6)
    hot = np.unravel_index(np.argmax(mean_power), mean_power.shape)
    assert bool(th["hotspot"].values[hot])
    assert (int(th["hottest_tile_y"]), int(th["hottest_tile_x"])) == tuple(
        int(i) for i in np.unravel_index(np.argmax(th["peak_tile_temperature_c"].values), mean_power.shape))
    assert float(th["throttle_fraction"]) == 0.0 and float(th["slowdown"]) == pytest.approx(1.0)


def test_the_dataset_describes_every_variable(small_run):
    th = thermal(small_run, 10, steps=4)
    assert th["temperature"].dims == ("time", "tile_y", "tile_x")
    for name in [*th.data_vars, "time"]:
        assert th[name].attrs.get("units") is not None and th[name].attrs.get("description"), name
    assert np.all(np.diff(th["time"].values) > 0)
    for f in THERMAL_FIELDS:
        assert th.attrs[f] == float(getattr(presets.get("npu_like"), f))


def test_one_inference_resolves_its_own_power_profile(small_run):
    """A step shorter than a call sees the call's time profile, not its average: the steps' energies are the
    replay's bins, re-gridded."""
    energy, _ = tile_energy(small_run)
    bins = energy.shape[0]
    th = thermal(small_run, 1, steps=bins)
    np.testing.assert_allclose(th["power_w"].values * np.diff(np.append(0.0, th["time"].values)),
                               energy.sum(axis=(1, 2)), rtol=1e-9, atol=1e-18)


def test_sustained_inference_throttles_the_air_cooled_tpu_and_not_the_liquid_cooled_one(gemm_trace):
    """The preset pair with documented thermal defaults: tpu_like (an air-cooled heat sink sized for a 175 W chip)
    throttles under back-to-back GEMMs; tpu_v4 (a liquid cold plate) does not."""
    results = {}
    for name in ("tpu_like", "tpu_v4"):
        run = dfit_nb.replay(gemm_trace, presets.get(name))
        th = run.thermal(200_000, steps=256)
        results[name] = (run, th)
    run, th = results["tpu_like"]
    hw = presets.get("tpu_like")
    assert float(th["peak_temperature_c"]) > float(hw.thermal_limit_c)
    assert 0 < float(th["throttle_fraction"]) < 1
    assert float(th["slowdown"]) > 1.05
    # the stretch is the throttled steps' work at 1 / factor: latency x (1 + (1/f - 1) x throttled share of work)
    work_share = float(th["throttled"].mean())
    assert float(th["slowdown"]) == pytest.approx(1 + (1 / float(hw.throttle_clock_factor) - 1) * work_share)
    # time-multiplexed: the ops' spans tile the latency, so their thermal cycles are the added latency
    extra_s = float(th["thermal_cycles"].sum()) / (float(hw.clock_ghz) * 1e9)
    assert extra_s == pytest.approx(float(th["throttled_latency_s"] - th["latency_s"]), rel=1e-6)
    hot = run.with_thermal(th)
    assert float(hot.summary["class_evidence"].sel(mechanism_class="thermal")) > 0
    assert float(run.summary["class_evidence"].sel(mechanism_class="thermal")) == 0
    cool_run, cool = results["tpu_v4"]
    assert float(cool["peak_temperature_c"]) < float(presets.get("tpu_v4").thermal_limit_c)
    assert float(cool["throttle_fraction"]) == 0 and float(cool["slowdown"]) == pytest.approx(1.0)
    assert float(cool_run.with_thermal(cool).summary["class_evidence"].sel(mechanism_class="thermal")) == 0


def test_thermal_fields_change_no_cost_model_number(small_run):
    trace = dfit_nb.capture(lambda a: a @ a, jnp.ones((64, 64)))
    other = presets.get("npu_like").replace(thermal_resistance_k_per_w=77.0, lateral_resistance_k_per_w=0.5,
                                            heat_capacity_j_per_k=9.0, ambient_c=-10.0, thermal_limit_c=30.0,
                                            throttle_clock_factor=0.1)
    run = dfit_nb.replay(trace, other)
    for part in ("summary", "ops"):
        a, b = getattr(small_run, part), getattr(run, part)
        a, b = a.drop_attrs(), b.drop_attrs()
        xr_equal = a.identical(b)
        assert xr_equal, part
    assert small_run.events.drop_attrs().identical(run.events.drop_attrs())


# ---- bottleneck classes ---------------------------------------------------------------------------------------

@pytest.mark.slow  # a large-grid preset (compiles its own grid bucket; tests/conftest.py)
def test_classes_without_analyses_keep_the_mechanism_names(small_run, static_traces):
    """Never analysed for precision or heat, ``bottleneck`` is the mechanism with the most evidence, as it always
    was: on the GEMM and on the encoder layer-pipelined (other bottlenecks, regions)."""
    encoder = dfit_nb.replay(static_traces["encoder"], presets.get("sambanova_like"))
    assert len({*small_run.ops["bottleneck"].values, *encoder.ops["bottleneck"].values}) >= 2
    for run in (small_run, encoder):
        for ds in (run.ops, run.regions, run.summary):
            ev = np.atleast_2d(ds["evidence"].values)
            old = np.asarray(MECHANISMS)[np.argmax(ev, axis=1)]
            assert np.array_equal(np.atleast_1d(ds["bottleneck"].values).astype(str), old)
            cls = np.atleast_2d(ds["class_evidence"].values)
            assert np.allclose(cls[:, 3:], 0.0)  # precision and thermal: not analysed
            memory = ev[:, [MECHANISMS.index(m) for m in MEMORY_MECHANISMS]].max(axis=1)
            assert np.allclose(cls[:, CLASSES.index("memory")], memory)
            names = np.atleast_1d(ds["bottleneck_class"].values).astype(str)
            assert set(names) <= set(CLASSES)
            assert set(np.atleast_1d(ds["bottleneck"].values).astype(str)) <= set(BOTTLENECKS)


def test_thermal_and_precision_evidence_per_op_region_and_run(small_run):
    hw = presets.get("npu_like").replace(thermal_resistance_k_per_w=1e3, heat_capacity_j_per_k=1e-6,
                                         throttle_clock_factor=0.25)
    th = small_run.thermal(10**5, steps=64, hw=hw)
    hot = small_run.with_thermal(th)
    span = hot.ops["span"].values
    np.testing.assert_allclose(hot.ops["class_evidence"].sel(mechanism_class="thermal").values,
                               th["thermal_cycles"].values / span)
    assert hot.summary["bottleneck"].item() == "thermal" and hot.summary["bottleneck_class"].item() == "thermal"
    root = hot.regions["region"].values.tolist().index("")
    assert float(hot.regions["thermal_cycles"][root]) == pytest.approx(float(th["thermal_cycles"].sum()))
    assert "thermal" in hot._repr_html_() and "thermal" not in small_run._repr_html_()
    # the copy leaves the original alone
    assert float(small_run.ops["thermal_cycles"].sum()) == 0
    trace = dfit_nb.capture(lambda a: a @ a, jnp.ones((64, 64)))
    wide = dfit_nb.replay(trace, presets.get("eyeriss_like"))
    narrow = dfit_nb.replay(trace, presets.get("eyeriss_like").replace(word_bytes=1))
    both = wide.with_precision(narrow)
    saved = wide.ops["span"].values - narrow.ops["span"].values
    np.testing.assert_allclose(both.ops["precision_cycles"].values, np.maximum(saved, 0))
    assert float(both.summary["class_evidence"].sel(mechanism_class="precision")) == pytest.approx(
        saved.sum() / wide.ops["span"].values.sum())


def test_an_analysed_run_saves_and_loads(small_run, tmp_path):
    hot = small_run.with_thermal(small_run.thermal(10, steps=4))
    back = dfit_nb.load_run(hot.save(tmp_path / "hot.nc"))
    assert back.summary["bottleneck_class"].item() == hot.summary["bottleneck_class"].item()
    np.testing.assert_array_equal(back.ops["class_evidence"].values, hot.ops["class_evidence"].values)


# ---- bad input ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field,value", [("thermal_resistance_k_per_w", -1.0), ("thermal_resistance_k_per_w", 0.0),
                                         ("lateral_resistance_k_per_w", 0.0), ("heat_capacity_j_per_k", -2.0),
                                         ("heat_capacity_j_per_k", 0.0), ("throttle_clock_factor", 0.0),
                                         ("throttle_clock_factor", 1.5), ("ambient_c", -300.0)])
def test_non_physical_thermal_fields_are_refused_by_name(field, value):
    with pytest.raises(HardwareError, match=field):
        Hardware(**{field: value})


def test_a_limit_below_ambient_is_refused():
    with pytest.raises(HardwareError, match=r"thermal_limit_c.*ambient_c"):
        Hardware(ambient_c=50.0, thermal_limit_c=40.0)


def test_bad_thermal_calls(small_run):
    with pytest.raises(ThermalError, match="inferences"):
        thermal(small_run, 0)
    with pytest.raises(ThermalError, match="steps"):
        thermal(small_run, 10, steps=True)
    # a transient whose seconds pass float64 (10**308 calls) and a count float() cannot hold (10**400) are refused
    # by name (else every temperature would be NaN)
    for huge in (10**308, 10**400):
        with pytest.raises(ThermalError, match=r"inferences must be .* finite in float64"):
            thermal(small_run, huge, steps=4)
    with pytest.raises(ThermalError, match="grid"):
        thermal(small_run, 10, hw=presets.get("tpu_like"))
    # the same grid at another clock would turn the run's cycles into other seconds (another power)
    with pytest.raises(ThermalError, match=r"hw differs from the machine the run was replayed on in clock_ghz = 2"):
        thermal(small_run, 10, steps=4, hw=presets.get("npu_like").replace(clock_ghz=2.0))
    with pytest.raises(ThermalError, match="Run"):
        thermal("not a run")
    with pytest.raises(ThermalError, match="shape"):
        steady_state(np.ones((2, 2)), GRID)
    with pytest.raises(ValueError, match="thermal_cycles"):
        small_run.with_thermal(small_run.summary)
    # the same program on another machine or dataflow has the same ops: only this run's analysis may be attached
    analysis = thermal(small_run, 10, steps=4)
    trace = dfit_nb.capture(lambda a: a @ a, jnp.ones((64, 64)))  # small_run's program
    for other in (dfit_nb.replay(trace, presets.get("scalesim_32")), dfit_nb.replay(trace, presets.get("npu_like"),
                                                                                      "os")):
        with pytest.raises(ThermalError, match=r"the thermal analysis is of another run \((hardware|dataflow) "):
            other.with_thermal(analysis)


def test_the_modal_step_equals_the_assembled_networks_exponential():
    """The DCT-mode solution against the tiles x tiles network stepped with scipy's matrix exponential."""
    import scipy.linalg

    tr, tc, n = 3, 4, 12
    g = np.eye(n) / (2.0 * n)
    idx = np.arange(n).reshape(tr, tc)
    for a, b in [(idx[:, :-1], idx[:, 1:]), (idx[:-1, :], idx[1:, :])]:
        a, b = a.ravel(), b.ravel()
        np.add.at(g, (a, a), 1 / 9.0)
        np.add.at(g, (b, b), 1 / 9.0)
        np.add.at(g, (a, b), -1 / 9.0)
        np.add.at(g, (b, a), -1 / 9.0)
    dt, c = 0.05, 0.6 / n
    e = scipy.linalg.expm(-g * dt / c)
    power = np.random.default_rng(1).uniform(0, 1, (20, n))
    theta, expected = np.zeros(n), []
    for p in power:
        ss = np.linalg.solve(g, p)
        theta = ss + e @ (theta - ss)
        expected.append(theta)
    out = _transient(power.reshape(20, tr, tc) * dt, dt, GRID)
    np.testing.assert_allclose(out["theta"].reshape(20, n), np.asarray(expected), rtol=1e-10, atol=1e-12)


def test_thermal_runs_one_call_per_inference():
    """Each inference is one call of the program, however many the replay streamed (replay's ``inferences=``)."""
    trace = dfit_nb.capture(lambda a: a @ a, jnp.ones((64, 64)))
    one = dfit_nb.replay(trace, presets.get("npu_like"))
    four = dfit_nb.replay(trace, presets.get("npu_like"), inferences=4)
    a, b = thermal(one, 1000, steps=8), thermal(four, 1000, steps=8)
    np.testing.assert_allclose(a["temperature"].values, b["temperature"].values, rtol=1e-12)
    assert a.attrs["calls"] == b.attrs["calls"] == 1000 and float(a["latency_s"]) == float(b["latency_s"])
