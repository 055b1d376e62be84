"""The reductions of a sweep refuse bad input with a ReductionError naming it (eager Datasets: no Dask needed)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from dfit_nb.sim.pareto import ReductionError, best, pareto_front, quantiles

DS = xr.Dataset({"latency_cycles": ("machine", [3.0, 1.0, 2.0]), "energy_j": ("machine", [1.0, 3.0, 2.0])},
                coords={"machine": [10, 11, 12]})


@pytest.mark.parametrize("objectives", [5, {"latency_cycles": 1, "energy_j": 2}, [["latency_cycles"], ["energy_j"]]])
def test_objectives_that_are_not_two_names_are_refused(objectives):
    # a number failed on len(), a dict on [0] (KeyError), a list of lists as an unhashable name (TypeError)
    with pytest.raises(ReductionError, match=r"objectives must be two variable names \(x, y\)"):
        pareto_front(DS, objectives)


def test_text_objectives_are_refused_and_names_in_an_array_still_work():
    with pytest.raises(ReductionError, match=r"objectives \['s'\] are not numeric"):
        pareto_front(DS.assign(s=("machine", ["a", "b", "c"])), ["s", "energy_j"])
    names = np.array(["latency_cycles", "energy_j"])
    assert pareto_front(DS, names)["machine"].values.tolist() == [11, 12, 10]


def test_one_point_is_its_own_front():
    # 0-d objectives (one machine's totals) failed on np.unravel_index of a 0-d shape
    front = pareto_front(xr.Dataset({"latency_cycles": 1.0, "energy_j": 2.0}))
    assert front.sizes["front"] == 1 and float(front["energy_j"][0]) == 2.0


@pytest.mark.parametrize("reduce", [lambda ds: best(ds, "energy_j"), lambda ds: quantiles(ds, "energy_j")])
def test_not_a_dataset_is_refused(reduce):
    with pytest.raises(ReductionError, match=r"needs an xarray\.Dataset .*got NoneType"):
        reduce(None)


@pytest.mark.parametrize("ds", [DS.isel(machine=slice(0, 0)), DS.assign(energy_j=("machine", [np.nan] * 3))])
def test_best_of_nothing_names_the_objective(ds):
    # NumPy's "All-NaN slice" / "argmin of an empty sequence" ValueError
    with pytest.raises(ReductionError, match=r"best\(\) objective 'energy_j' has no value to minimise"):
        best(ds, "energy_j")


def test_best_takes_one_keep_dim_as_a_string():
    two = DS.expand_dims(dataflow=["os", "ws"])
    assert best(two, "energy_j", keep="dataflow")["machine"].values.tolist() == [10, 10]


@pytest.mark.parametrize("q", [float("nan"), "a", [], [0.5, 1.5]])
def test_quantiles_outside_0_1_are_refused(q):
    # NaN fails both bounds of the range check; text is not a quantile: both named by ReductionError
    with pytest.raises(ReductionError, match=r"quantiles q must be one or more numbers in \[0, 1\]"):
        quantiles(DS, "energy_j", q)


def test_quantiles_of_no_points_are_refused():
    with pytest.raises(ReductionError, match=r"quantiles\(\) variable 'energy_j' has no numeric points"):
        quantiles(DS.isel(machine=slice(0, 0)), "energy_j")  # NumPy's IndexError
