"""sim.design: the lattice relaxation, a search whose machines meet their constraints when replayed exactly, the
optimum of an enumerable grid, the result object, and bad input refused before any work."""

from __future__ import annotations

import dataclasses
import itertools
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dfit_nb
from dfit_nb.sim import area, power, presets
from dfit_nb.sim._design import (
    CONSTRAINTS,
    OBJECTIVES,
    SPACE,
    DesignError,
    _simplex,
    design,
    machine_at,
    replay_machines,
    space,
)

BASE = "npu_like"
FIELDS = {"pe_rows": (4, 32), "pe_cols": (4, 32), "sram_kb": (16, 256)}  # 4 x 4 x 5 = 80 machines
LIMITS = {"area_mm2": 10.5, "power_w": 2.0}


@pytest.fixture(scope="module")
def trace() -> dfit_nb.Trace:
    def f(a: jax.Array, b: jax.Array, c: jax.Array) -> jax.Array:
        return jnp.tanh(a @ b) @ c

    spec = jax.ShapeDtypeStruct
    return dfit_nb.capture(f, spec((256, 512), jnp.bfloat16), spec((512, 256), jnp.bfloat16),
                           spec((256, 128), jnp.bfloat16))


@pytest.fixture(scope="module")
def designed(trace: dfit_nb.Trace):  # type: ignore[no-untyped-def]
    return design(trace, presets.get(BASE), "edp", LIMITS, FIELDS, budget_s=300, starts=4, replays=8, max_steps=8)


def test_simplex_blends_lattice_neighbours() -> None:
    sp = space(presets.get(BASE), FIELDS)
    with jax.enable_x64(True):
        on = jnp.asarray([3.0, 4.0, 6.0])  # 8 x 16 PEs, 64 KiB: a lattice point
        corners, w = _simplex(on, sp)
        assert float(w[0]) == 1.0 and np.allclose(np.asarray(corners[0]), on)
        u = jnp.asarray([3.25, 4.5, 6.75])
        corners, w = _simplex(u, sp)
        assert np.isclose(float(w.sum()), 1.0) and np.all(np.asarray(w) >= 0)
        # barycentric: the weighted corners give the point back, each corner a lattice point one step apart
        assert np.allclose(np.asarray(w @ corners), np.asarray(u))
        steps = np.diff(np.asarray(corners), axis=0)
        assert np.all(steps.sum(1) == 1.0) and np.all((steps == 0) | (steps == 1))
        # the weights move with u: the gradient of a blend reaches the whole-number fields
        g = jax.grad(lambda x: _simplex(x, sp)[1] @ jnp.arange(4.0))(u)
        assert np.all(np.asarray(g) != 0)


def test_returned_machine_meets_constraints_replayed(designed, trace) -> None:  # type: ignore[no-untyped-def]
    hw = designed.hardware
    run = dfit_nb.replay(trace, hw, designed.figures["dataflow"])
    assert area(hw) <= LIMITS["area_mm2"]
    assert power(run) <= LIMITS["power_w"]
    assert float(run.summary["latency_s"]) == pytest.approx(designed.figures["latency_s"], rel=1e-9)
    assert float(run.summary["energy_j"]) == pytest.approx(designed.figures["energy_j"], rel=1e-9)
    ev = designed.evaluated
    ok = ev["feasible"].values
    assert np.all(ev["area_mm2"].values[ok] <= LIMITS["area_mm2"])
    assert np.all(ev["power_w"].values[ok] <= LIMITS["power_w"])
    assert designed.figures["edp_js"] == pytest.approx(float(ev["edp_js"].where(ev["feasible"]).min()))


def test_within_two_percent_of_the_enumerated_grid(designed, trace) -> None:  # type: ignore[no-untyped-def]
    base = presets.get(BASE)
    sp = space(base, FIELDS)
    points = np.array(list(itertools.product(*(sp.levels(i) for i in range(len(sp.fields))))))
    machines = [machine_at(base, sp, p) for p in points]
    machines = [m for m in machines if area(m) <= LIMITS["area_mm2"]]
    ev = replay_machines(trace, machines, "edp", LIMITS)
    optimum = float(ev["edp_js"].where(ev["feasible"]).min())
    assert designed.figures["edp_js"] <= 1.02 * optimum
    assert designed.evaluated.sizes["candidate"] <= 8 < len(machines)


def test_fewer_replays_replay_the_first_candidates(designed, trace) -> None:  # type: ignore[no-untyped-def]
    # bench_design.py reads design(replays=k) from a run with more replays: the search does not depend on replays,
    # and the candidates replayed are the priced ranking's first
    few = design(trace, presets.get(BASE), "edp", LIMITS, FIELDS, budget_s=300, starts=4, replays=3, max_steps=8)
    assert few.evaluated.sizes["candidate"] == 3
    for f in FIELDS:
        np.testing.assert_array_equal(few.evaluated[f].values, designed.evaluated[f].values[:3])
    np.testing.assert_array_equal(few.evaluated["edp_js"].values, designed.evaluated["edp_js"].values[:3])


def test_a_progress_bar_over_the_steps_unless_turned_off(trace, capsys) -> None:  # type: ignore[no-untyped-def]
    capsys.readouterr()
    design(trace, presets.get(BASE), "edp", LIMITS, FIELDS, budget_s=300, starts=4, replays=2, max_steps=2)
    assert "design" in capsys.readouterr().err
    design(trace, presets.get(BASE), "edp", LIMITS, FIELDS, budget_s=300, starts=4, replays=2, max_steps=2,
           progress=False)
    assert "design" not in capsys.readouterr().err


def test_result_object(designed) -> None:  # type: ignore[no-untyped-def]
    assert set(designed.times) == {"prepare", "search", "polish", "replay", "total"}
    assert designed.path.sizes["start"] == 4 and 1 <= designed.path.sizes["step"] <= 8
    assert set(FIELDS) <= set(designed.path.data_vars) and "objective" in designed.path
    front = designed.front
    assert 1 <= front.sizes["front"] <= designed.evaluated.sizes["candidate"]
    assert "Design(edp" in repr(designed)
    odd = dataclasses.replace(designed, hardware=designed.hardware.replace(name="npu <b>"))
    html = odd._repr_html_()
    assert "&lt;b&gt;" in html and "<b>npu" not in html


def test_bad_input_refused_before_any_work(trace) -> None:  # type: ignore[no-untyped-def]
    hw = presets.get(BASE)
    with pytest.raises(DesignError, match="needs a dfit_nb Trace"):
        design({"m": [64], "k": [64], "n": [64]}, hw)
    with pytest.raises(DesignError, match=f"not one of {', '.join(OBJECTIVES)}"):
        design(trace, hw, "speed")
    with pytest.raises(DesignError, match=f"valid constraints: {', '.join(CONSTRAINTS)}"):
        design(trace, hw, constraints={"area": 10.0})
    valid = ", ".join(SPACE)
    with pytest.raises(DesignError, match=f"cannot design field\\(s\\) \\['clock'\\]; valid fields: {valid}"):
        design(trace, hw, fields=("pe_rows", "clock"))
    with pytest.raises(DesignError, match="must be a finite number of seconds > 0"):
        design(trace, hw, budget_s=0)
    for bad in ("a", -1):
        with pytest.raises(DesignError, match="seed must be a whole number >= 0"):
            design(trace, hw, seed=bad)
    start = time.perf_counter()
    with pytest.raises(DesignError, match=r"area_mm2'\] = 1 mm\^2 is infeasible: the smallest machine of the space "
                                          r"\(pe_rows=4, pe_cols=4, sram_kb=16\) takes 9.927 mm\^2"):
        design(trace, hw, constraints={"area_mm2": 1.0}, fields=FIELDS)
    assert time.perf_counter() - start < 1.0  # refused before any pricing


def test_budget_too_small_names_the_step_time(trace) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DesignError, match=r"budget_s = 0.001 s is too small: one step took [0-9.]+ s"):
        design(trace, presets.get(BASE), "edp", LIMITS, FIELDS, budget_s=0.001, starts=4, replays=8, max_steps=8)
