"""Nested jaxprs, region paths, counts and edges."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

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


def _total_flops(t):
    return float((t.ops["flops"] * t.ops["count"]).sum())


def test_containers_that_hold_their_work_are_walked():
    """shard_map, custom_vmap and custom_linear_solve hold their computation in a nested jaxpr; they were costed as
    zero-cost leaves, so a matmul inside a shard_map replayed in no time at all, and jnp.linalg.solve lost its
    triangular solves. Their jaxprs are walked now: the work inside counts as it does outside."""
    import jax.scipy.linalg as jsl
    from jax import custom_batching
    from jax.sharding import PartitionSpec as P

    a, b = jnp.ones((32, 32)), jnp.ones((32, 32))
    plain = _total_flops(dfit_nb.capture(lambda x, y: x @ y, a, b))
    mesh = jax.make_mesh((1,), ("x",))
    sharded = dfit_nb.capture(jax.shard_map(lambda x, y: x @ y, mesh=mesh, in_specs=(P(), P()), out_specs=P()), a, b)
    assert "dot_general" in set(sharded.ops["primitive"].values) and _total_flops(sharded) == plain

    @custom_batching.custom_vmap
    def g(x):
        return x @ x

    @g.def_vmap
    def _(axis_size, in_batched, x):
        return g(x), in_batched[0]

    assert _total_flops(dfit_nb.capture(g, a)) == plain

    m, rhs = jnp.eye(32) * 2.0 + 0.01, jnp.ones((32, 4))
    solve = dfit_nb.capture(lambda x, y: jnp.linalg.solve(x, y), m, rhs)
    by_hand = dfit_nb.capture(lambda x, y: jsl.lu_solve(jsl.lu_factor(x), y), m, rhs)
    assert "custom_linear_solve" in set(solve.ops["primitive"].values)
    assert _total_flops(solve) == _total_flops(by_hand) > 0
    run = dfit_nb.replay(sharded, dfit_nb.sim.presets.get("tpu_like"))
    assert float(run.summary["latency_cycles"]) == float(
        dfit_nb.replay(dfit_nb.capture(lambda x, y: x @ y, a, b), dfit_nb.sim.presets.get("tpu_like")).summary[
            "latency_cycles"])


def test_a_shard_map_body_counts_once_per_shard():
    """One chip runs every shard's work: a shard_map over four devices runs its body four times (the ops'
    count), the same FLOPs as the unsharded matmul. Run in a child process that has four host devices."""
    code = textwrap.dedent("""
        import jax, jax.numpy as jnp, dfit_nb
        from jax.sharding import AxisType, PartitionSpec as P
        mesh = jax.make_mesh((4,), ("x",), axis_types=(AxisType.Auto,))
        f = jax.shard_map(lambda a, b: a @ b, mesh=mesh, in_specs=(P("x"), P()), out_specs=P("x"))
        t = dfit_nb.capture(f, jnp.ones((64, 32)), jnp.ones((32, 16)))
        dot = t.ops["primitive"].values == "dot_general"
        print(int(t.ops["count"].values[dot][0]), float((t.ops["flops"] * t.ops["count"]).sum()))
    """)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": str(Path(dfit_nb.__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    count, flops = out.stdout.split()
    assert int(count) == 4 and float(flops) == 2 * 64 * 32 * 16
