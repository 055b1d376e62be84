"""Nested jaxprs, region paths, counts and edges."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import dfit_nb


@jax.custom_jvp
def _cj(x):
    return jnp.sin(x)


_cj.defjvp(lambda p, t: (_cj(p[0]), jnp.cos(p[0]) * t[0]))


@jax.custom_vjp
def _cv(x):
    return jnp.exp(x)


_cv.defvjp(lambda x: (jnp.exp(x), x), lambda r, g: (g * jnp.exp(r),))


@jax.jit
def _inner_jit(x):
    with jax.named_scope("inside_jit"):
        return x * 3.0


def nested(x, w):
    with jax.named_scope("outer"):
        def body(c, xs):
            with jax.named_scope("step"):
                return jnp.tanh(c @ w) + xs, c.sum()
        c, ys = lax.scan(body, x, jnp.ones((5, *x.shape)))
        c = lax.switch(jnp.int32(1), [lambda a: a + 1.0, lambda a: a @ w, lambda a: jnp.exp(a)], c)
        c = lax.while_loop(lambda a: a.sum() > 1.0, lambda a: a * 0.5, c)
        c = jax.checkpoint(lambda a: _cj(a) * 2.0)(c)
        c = _cv(c) + _inner_jit(c)
    return c.sum() + ys.sum()


@pytest.fixture(scope="module")
def trace():
    return dfit_nb.capture(nested, jnp.ones((4, 8)), jnp.ones((8, 8)) * 0.1)


def _ops(trace, **where):
    ops = trace.ops
    mask = np.ones(ops.sizes["op"], bool)
    for key, value in where.items():
        mask &= ops[key].values == value
    return ops.isel(op=np.flatnonzero(mask))


def test_every_container_kind_is_walked(trace):
    kinds = set(trace.ops["container"].values) - {""}
    assert {"scan", "cond", "while", "remat", "custom_jvp", "custom_vjp", "jit"} <= kinds


def test_scan_body_counts_are_multiplied_by_the_trip_count(trace):
    scan = _ops(trace, container="scan")
    assert int(scan["trip_count"][0]) == 5
    body = _ops(trace, parent=int(scan["op"][0]), context="body")
    assert body.sizes["op"] > 0
    assert set(body["count"].values) == {5}
    assert set(body["count_source"].values) == {"exact"}
    dot = body.where(body["primitive"] == "dot_general", drop=True)
    assert int(dot["count"][0]) == 5 and int(dot["flops"][0]) == 2 * 4 * 8 * 8


def test_every_cond_branch_is_recorded_with_its_index(trace):
    cond = _ops(trace, container="cond")
    cid = int(cond["op"][0])
    branches = _ops(trace, parent=cid)
    assert sorted(set(branches["branch"].values)) == [0, 1, 2]
    assert {f"branch{b}" for b in range(3)} == set(branches["context"].values)
    # statically the most expensive branch (the matmul) is assumed to run
    counts = {str(c): int(n) for c, n in zip(branches["context"].values, branches["count"].values, strict=True)}
    assert counts["branch1"] == 1 and counts["branch0"] == 0 and counts["branch2"] == 0
    assert set(branches["count_source"].values) == {"assumed"}


def test_while_trip_count_is_marked_unknown_then_hinted():
    x, w = jnp.ones((4, 8)), jnp.ones((8, 8)) * 0.1
    t = dfit_nb.capture(nested, x, w)
    wid = int(_ops(t, container="while")["op"][0])
    body = _ops(t, parent=wid, context="body")
    assert set(body["count_source"].values) == {"assumed"} and set(body["count"].values) == {1}
    hinted = dfit_nb.capture(nested, x, w, while_trips={wid: 7})
    body = _ops(hinted, parent=wid, context="body")
    assert set(body["count"].values) == {7} and set(body["count_source"].values) == {"hint"}
    pred = _ops(hinted, parent=wid, context="cond")
    assert set(pred["count"].values) == {8}  # the predicate runs once more than the body
    by_region = dfit_nb.capture(nested, x, w, while_trips={"outer": 2})
    assert set(_ops(by_region, parent=wid, context="body")["count"].values) == {2}


def test_region_paths_concatenate_through_nesting(trace):
    regions = set(trace.ops["region"].values)
    assert "outer/step" in regions  # named scope inside a scan body
    assert "outer/jit(_inner_jit)/inside_jit" in regions  # nested jit path
    assert any(r.startswith("outer/") and "jit(" in r for r in regions)
    tree = trace.regions
    assert "" in tree["region"].values
    parent = dict(zip(tree["region"].values, tree["parent"].values, strict=True))
    assert parent["outer/jit(_inner_jit)/inside_jit"] == "outer/jit(_inner_jit)"
    assert parent["outer"] == ""


def test_region_rollup_is_consistent(trace):
    r = trace.regions
    assert int(r["flops"].sel(region="")) == trace.total_flops()
    children = [p for p in r["region"].values if r["parent"].sel(region=p).item() == "outer"]
    total = int(r["self_flops"].sel(region="outer")) + sum(int(r["flops"].sel(region=c)) for c in children)
    assert total == int(r["flops"].sel(region="outer"))


def test_edges_follow_dataflow_through_containers(trace):
    ops = trace.ops
    src, dst = trace.edges["src"].values, trace.edges["dst"].values
    prim = ops["primitive"].values
    # the scan body's dot consumes the scan's carry, produced outside the scan? no: x is an input.
    # tanh inside the body consumes the body's dot
    dots = {int(o) for o in ops["op"].values[(prim == "dot_general") & (ops["context"].values == "body")]}
    tanhs = {int(o) for o in ops["op"].values[prim == "tanh"]}
    assert any(s in dots and d in tanhs for s, d in zip(src, dst, strict=True))
    # ops after the while loop consume what the while body (or its init) produced
    wid = int(_ops(trace, container="while")["op"][0])
    body_mul = {int(o) for o in _ops(trace, parent=wid, context="body")["op"].values}
    assert any(s in body_mul and d > wid for s, d in zip(src, dst, strict=True))
    assert (trace.edges["bytes"].values > 0).all()
    # the operand position names which input of the consumer the tensor feeds
    inputs = trace.operands["op"].values[trace.operands["role"].values == "input"]
    n_in = np.bincount(inputs, minlength=ops.sizes["op"])
    pos = trace.edges["operand"].values
    assert ((pos >= 0) & (pos < n_in[dst])).all()
    # edges run forward in op order: the op id order is a topological order of the leaves
    assert (src < dst).all()
    # containers carry no cost of their own, so totals do not double count
    containers = ops["container"].values != ""
    assert (ops["flops"].values[containers] == 0).all()


def test_a_costed_primitive_holding_a_jaxpr_is_a_leaf():
    # lax.reduce with a custom reducer is the generic `reduce` primitive, whose params hold the
    # reducer's jaxpr; its cost rule already charges the reducer, so the walk must not descend.
    def f(x):
        return lax.reduce(x, 0.0, lambda a, b: a + 2.0 * b, (1,))

    x = jnp.ones((4, 8))
    t = dfit_nb.capture(f, x)
    assert list(t.ops["primitive"].values) == ["reduce"]
    cost = jax.jit(f).lower(x).compile().cost_analysis()
    assert t.total_flops() == int(cost["flops"])


@pytest.mark.parametrize("mode", ["eager", "profile"])
def test_runtime_modes_count_every_container_as_it_ran(mode):
    x, w = jnp.ones((4, 8)), jnp.ones((8, 8)) * 0.1
    t = dfit_nb.capture(nested, x, w, mode=mode, profile_rounds=1, profile_calls=3)
    ops = t.ops
    # lax.switch(1, ...): only branch 1 ran
    cid = int(_ops(t, container="cond")["op"][0])
    for b, expected in ((0, 0), (1, 1), (2, 0)):
        in_b = (ops["parent"].values == cid) & (ops["branch"].values == b)
        assert set(ops["count"].values[in_b]) == {expected}, (mode, b)
    # scan bodies still run 5 times, custom_jvp/custom_vjp/remat/jit bodies once
    assert set(_ops(t, parent=int(_ops(t, container="scan")["op"][0]))["count"].values) == {5}
    for kind in ("custom_jvp", "custom_vjp", "remat", "jit"):
        for op in _ops(t, container=kind)["op"].values:
            assert set(_ops(t, parent=int(op))["count"].values) == {1}, kind
    # the while loop halves until the sum is <= 1: its trip count is what really ran
    wid = int(_ops(t, container="while")["op"][0])
    body = _ops(t, parent=wid, context="body")
    unseen = set(t.lowering["fusion"].values[~np.isfinite(t.lowering["time_s"].values)])
    if mode == "profile" and set(body["fusion"].values) <= unseen:
        # XLA outlined this loop into a `call`, inside which the CPU runtime emits no events:
        # profile mode must then not claim a measurement
        assert set(body["count_source"].values) == {"assumed"}
        return
    c = np.asarray(jax.jit(lambda x, w: jax.lax.scan(
        lambda c, xs: (jnp.tanh(c @ w) + xs, None), x, jnp.ones((5, 4, 8)))[0] @ w)(x, w))
    trips = 0
    while c.sum() > 1.0:
        c, trips = c * 0.5, trips + 1
    assert float(ops["trip_count"].values[wid]) == trips and trips > 0
    assert set(body["count"].values) == {trips} and set(body["count_source"].values) == {"measured"}
