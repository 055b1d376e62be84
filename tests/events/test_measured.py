"""Measured events from eager-mode traces: totals, host-sequential layout, static traces refused."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dfit_nb
import dfit_nb.events.accessor  # registers ds.dfit
from dfit_nb.errors import DfitError
from dfit_nb.events import schema
from dfit_nb.events.measured import NotMeasuredError, measured_events


def tiny(a, b):
    with jax.named_scope("enc"):
        x = jnp.tanh(a @ b)

    def body(c, _):
        return c * 2.0, None

    y, _ = jax.lax.scan(body, x, None, length=3)
    return y.sum()


ARGS = (jnp.ones((4, 8)), jnp.ones((8, 2)))


@pytest.fixture(scope="module")
def eager():
    return dfit_nb.capture(tiny, *ARGS, mode="eager")


def _leaf_timed(trace):
    ops = trace.ops
    return (ops["container"].values.astype(str) == "") & np.isfinite(ops["time_s"].values)


def test_one_event_per_timed_leaf_op_with_trace_totals(eager):
    ev = measured_events(eager)
    schema.check(ev)
    ops, keep = eager.ops, _leaf_timed(eager)
    assert keep.sum() < ops.sizes["op"]  # the scan container is skipped
    np.testing.assert_array_equal(ev["op"].values, ops["op"].values[keep])
    np.testing.assert_array_equal(ev["region"].values, ops["region"].values[keep].astype(str))
    count = ops["count"].values[keep]
    np.testing.assert_allclose(ev.dfit.duration("s").values, ops["time_s"].values[keep] * count)
    assert float(ev["bytes"].sum()) == eager.total_bytes()  # containers move no bytes
    gemm = ops["op_class"].values[keep] == "gemm"
    assert float(ev["macs"].sum()) == (ops["flops"].values[keep] * count)[gemm].sum() / 2
    assert float(ev["energy_pj"].sum()) == 0.0
    assert set(ev["kind"].values.tolist()) == {"compute"} and set(ev["source"].values.tolist()) == {"measured"}
    assert (ev["tile_y"].values == -1).all() and (ev["tile_x"].values == -1).all()
    assert np.isnan(ev["start"].values).all() and np.isnan(ev["end"].values).all()
    # the scan body's multiply ran 3 times: one event covering all three
    mul = ev["op"].values[ops["primitive"].values[keep] == "mul"]
    assert ops["count"].sel(op=mul).values.tolist() == [3]


def test_events_are_host_sequential_in_op_order(eager):
    ev = measured_events(eager)
    start, end = ev["start_s"].values, ev["end_s"].values
    assert start[0] == 0.0
    np.testing.assert_array_equal(start[1:], end[:-1])
    assert (np.diff(ev["op"].values) > 0).all()
    total = (eager.ops["time_s"] * eager.ops["count"]).where(_leaf_timed(eager)).sum()
    assert end[-1] == pytest.approx(float(total))
    loose = measured_events(eager, sequential=False)
    assert (loose["start_s"].values == 0).all()
    np.testing.assert_allclose(loose.dfit.duration("s").values, ev.dfit.duration("s").values)


def test_region_times_match_the_trace_regions(eager):
    ev = measured_events(eager)
    by = ev.dfit.by_region(var="duration", unit="s", inclusive=True)
    regions = eager.regions
    for r in by["region"].values:
        assert by["duration"].sel(region=r).item() == pytest.approx(float(regions["time_s"].sel(region=r)))


def test_provenance_attrs(eager):
    ev = measured_events(eager)
    assert ev.attrs["mode"] == "eager"
    for key in ("function", "arg_shapes", "jax_version", "dfit_nb_version", "backend", "device_kind"):
        assert ev.attrs[key] == eager.attrs[key]


def test_static_trace_is_refused():
    static = dfit_nb.capture(tiny, *ARGS)
    with pytest.raises(NotMeasuredError, match="mode='profile' or mode='eager'") as info:
        measured_events(static)
    assert isinstance(info.value, DfitError)


def test_what_is_not_a_trace_is_named():
    """A Run (it has ops, without times) raised KeyError 'time_s'; a path or None an AttributeError."""
    from dfit_nb.sim import presets

    static = dfit_nb.capture(tiny, *ARGS)
    run = dfit_nb.replay(static, presets.get("npu_like"))
    for wrong, tokens in ((run, ("'trace'", "got Run", "select(source='measured')")),
                          ("trace.nc", ("'trace'", "got str", "dfit_nb.load_trace(path)")),
                          (None, ("'trace'", "got NoneType"))):
        with pytest.raises(NotMeasuredError) as info:
            measured_events(wrong)
        assert all(t in str(info.value) for t in tokens), str(info.value)


def test_a_container_timed_as_a_whole_stands_for_its_untimed_ops():
    t = dfit_nb.capture(tiny, *ARGS, mode="eager")
    ops = t.ops
    scan = int(np.flatnonzero(ops["container"].values == "scan")[0])
    inside = ops["parent"].values == scan
    # as a profile whose loop body emitted no per-instruction events: the body is untimed, the loop timed
    time_s = ops["time_s"].values.copy()
    time_s[inside] = np.nan
    time_s[scan] = 1e-3
    t.ops = ops.assign(time_s=("op", time_s, ops["time_s"].attrs))
    ev = measured_events(t)
    assert scan in ev["op"].values.tolist()
    assert not set(np.flatnonzero(inside).tolist()) & set(ev["op"].values.tolist())
    # when the ops inside are timed, the container adds nothing (no double count)
    with_body = time_s.copy()
    with_body[inside] = 1e-4
    t.ops = ops.assign(time_s=("op", with_body, ops["time_s"].attrs))
    assert scan not in measured_events(t)["op"].values.tolist()
