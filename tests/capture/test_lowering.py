"""Tests for dfit_nb.capture.lowering and dfit_nb.capture.profile_events."""

from __future__ import annotations

import re
from dataclasses import dataclass

import jax
import jax.extend.core as jc
import jax.numpy as jnp
import pytest
from jax import lax

import dfit_nb
from dfit_nb.capture.lowering import (
    FusionMap,
    build_fusion_map,
    container_op_ids,
    executed_instructions,
    hlo_module_name,
    op_ids_in,
    parse_hlo_module,
    shape_bytes,
)
from dfit_nb.capture.profile_events import (
    HloModuleMismatchError,
    find_xplane_files,
    read_hlo_op_timings,
)


# --------------------------------------------------------------------------
# A minimal stand-in for the capture stage's tagging rewrite.
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class OpInfo:
    primitive: str
    parent: int  # enclosing container op id, -1 at top level
    slot: str  # param holding the sub-jaxpr in the parent: "jaxpr", "branches[1]", ...


def _tagged(fn, *args) -> tuple[dict[int, OpInfo], str]:
    """Tag every eqn with a ``dfit_op<N>`` scope; return op infos and HLO text."""
    infos: dict[int, OpInfo] = {}

    def rw_val(v, parent, slot):
        if isinstance(v, jc.ClosedJaxpr):
            return jc.ClosedJaxpr(rw(v.jaxpr, parent, slot), v.consts)
        if isinstance(v, jc.Jaxpr):
            return rw(v, parent, slot)
        if isinstance(v, tuple | list) and any(isinstance(x, jc.ClosedJaxpr | jc.Jaxpr) for x in v):
            return type(v)(rw_val(x, parent, f"{slot}[{i}]") for i, x in enumerate(v))
        return v

    def rw(j, parent=-1, slot=""):
        eqns = []
        for e in j.eqns:
            i = len(infos)
            infos[i] = OpInfo(e.primitive.name, parent, slot)
            si = e.source_info.replace(name_stack=e.source_info.name_stack.extend(f"dfit_op{i}"))
            params = {k: rw_val(v, i, k) for k, v in e.params.items()}
            eqns.append(e.replace(params=params, source_info=si))
        return j.replace(eqns=eqns)

    cj = jax.make_jaxpr(fn)(*args)
    g = jax.jit(jc.jaxpr_as_fun(jc.ClosedJaxpr(rw(cj.jaxpr), cj.consts)))
    return infos, g.lower(*args).compile().as_text()


def _ids(infos, primitive, parent=None, slot=None) -> list[int]:
    return [
        i
        for i, o in infos.items()
        if o.primitive == primitive and (parent is None or o.parent == parent) and (slot is None or o.slot == slot)
    ]


def _example(x, w):
    with jax.named_scope("enc"):
        y = x @ w

        def body(c, _):
            with jax.named_scope("inner"):
                return jnp.tanh(c @ w), None

        y, _ = lax.scan(body, y, None, length=3)
        y = lax.cond(y.sum() > 0, lambda a: a * 2, lambda a: a + 1, y)
        y = lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] * 1.01), (0, y))[1]
    return jax.nn.softmax(jax.nn.relu(y)).sum()


@pytest.fixture(scope="module")
def example():
    x, w = jnp.ones((64, 128)), jnp.ones((128, 128))
    infos, text = _tagged(_example, x, w)
    return infos, text, parse_hlo_module(text), build_fusion_map(text)


def _record_of(fm: FusionMap, op_id: int):
    names = fm.fusions_of(op_id)
    assert names, f"op {op_id} has no executed instruction"
    return fm.record(names[0])


def _instruction(comps, name):
    return next(i for c in comps.values() for i in c.instructions if i.name == name)


# --------------------------------------------------------------------------
# Parsing and mapping of a real module
# --------------------------------------------------------------------------
def test_parse_example_structure(example):
    _, text, comps, fm = example
    assert len(comps) == len(re.findall(r"^}$", text, flags=re.M))
    entries = [c for c in comps.values() if c.is_entry]
    assert len(entries) == 1
    assert entries[0].name == re.search(r"^ENTRY %(\S+)", text, flags=re.M).group(1)
    assert sum(i.is_root for i in entries[0].instructions) == 1
    assert fm.module_name == hlo_module_name(text) == "jit_jaxpr_as_fun"
    names = [r.name for r in fm.records]
    assert len(names) == len(set(names))
    assert all(r.kind != "control" or r.opcode in {"while", "conditional", "call"} for r in fm.records)


def test_every_surviving_tag_is_mapped(example):
    infos, text, _, fm = example
    # Independent of the parser: every id that is the producing (last) tag of
    # some op_name in the text must reach an executed instruction.
    surviving = {op_ids_in(m)[-1] for m in re.findall(r'op_name="([^"]*dfit_op[^"]*)"', text)}
    assert surviving <= fm.op_ids
    assert fm.op_ids <= set(infos)
    survivors = "dot_general tanh reduce_sum gt cond while scan add mul lt max reduce_max sub exp div"
    for prim in survivors.split():
        assert any(fm.fusions_of(i) for i in _ids(infos, prim)), prim
    # stop_gradient lowers to nothing: no instruction holds it.
    assert not any(fm.fusions_of(i) for i in _ids(infos, "stop_gradient"))
    # Container-only ops (custom_jvp_call, nested jit) show up as enclosing ids.
    enclosing = {i for r in fm.records for i in r.enclosing_op_ids}
    assert set(_ids(infos, "custom_jvp_call")) <= enclosing


def test_scan_body_ops_land_in_while_body(example):
    infos, _, comps, fm = example
    (scan,) = _ids(infos, "scan")
    scan_rec = next(r for r in fm.records if r.opcode == "while" and scan in r.op_ids)
    assert scan_rec.kind == "control" and scan_rec.op_ids == (scan,)
    edges = dict(_instruction(comps, scan_rec.name).call_edges)
    (dot,) = _ids(infos, "dot_general", parent=scan)
    (tanh,) = _ids(infos, "tanh", parent=scan)
    for op in (dot, tanh):
        recs = [fm.record(n) for n in fm.fusions_of(op)]
        assert recs and all(r.computation == edges["body"] for r in recs)
        assert all(scan in r.enclosing_op_ids for r in recs)
    dot_rec = _record_of(fm, dot)
    if dot_rec.kind == "kCustom":  # e.g. ynn_fusion on x86 CPUs
        assert dot_rec.op_ids == (dot,)


def test_cond_branches_land_in_branch_computations(example):
    infos, _, comps, fm = example
    (cond,) = _ids(infos, "cond")
    cond_rec = next(r for r in fm.records if r.opcode == "conditional")
    assert cond_rec.op_ids == (cond,) and cond_rec.kind == "control"
    branches = _instruction(comps, cond_rec.name).call_edges
    branches = [c for k, c in branches if k == "branch_computations"]
    assert len(branches) == 2
    (add,) = _ids(infos, "add", parent=cond, slot="branches[0]")
    (mul,) = _ids(infos, "mul", parent=cond, slot="branches[1]")
    assert _record_of(fm, add).computation == branches[0]
    assert _record_of(fm, mul).computation == branches[1]


def test_fusions_bytes_and_contents(example):
    infos, _, comps, fm = example
    fusions = [r for r in fm.records if r.opcode == "fusion"]
    assert fusions and all(r.bytes_accessed > 0 for r in fusions)
    # The top-level x @ w reads 64x128 + 128x128 f32 and writes 64x128 f32.
    top_dot = _ids(infos, "dot_general", parent=-1)[0]
    rec = _record_of(fm, top_dot)
    assert rec.bytes_accessed == (64 * 128 + 128 * 128 + 64 * 128) * 4
    entry = next(c.name for c in comps.values() if c.is_entry)
    assert rec.computation == entry
    # Softmax: exp and the reduce_max feeding it end up in one fusion.
    (exp,) = _ids(infos, "exp")
    (rmax,) = _ids(infos, "reduce_max")
    exp_rec = _record_of(fm, exp)
    assert exp_rec.kind in {"kLoop", "kInput", "kOutput", "kCustom"}
    assert rmax in exp_rec.op_ids
    # gt and convert_element_type fuse into one instruction: several op ids.
    (gt,) = _ids(infos, "gt")
    (cvt,) = _ids(infos, "convert_element_type")
    assert set(fm.fusions_of(gt)) & set(fm.fusions_of(cvt))


def test_executed_instructions_skip_fused_and_reducer_computations(example):
    _, _, comps, fm = example
    fused = {c for comp in comps.values() for i in comp.instructions if i.opcode == "fusion" for c in i.calls}
    reducers = {
        c
        for comp in comps.values()
        for i in comp.instructions
        if i.opcode in {"reduce", "reduce-window", "scatter", "sort"}
        for c in i.calls
    }
    record_comps = {r.computation for r in fm.records}
    assert record_comps.isdisjoint(fused | reducers)
    assert not any(r.opcode in {"parameter", "constant", "tuple", "get-tuple-element", "bitcast"} for r in fm.records)
    assert executed_instructions(comps) == list(fm.records)


# --------------------------------------------------------------------------
# Conv net
# --------------------------------------------------------------------------
def _convnet(x, k1, k2, wd):
    dn = ("NHWC", "HWIO", "NHWC")
    y = jax.nn.relu(lax.conv_general_dilated(x, k1, (1, 1), "SAME", dimension_numbers=dn))
    y = lax.reduce_window(y, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    y = lax.conv_general_dilated(y, k2, (1, 1), "SAME", dimension_numbers=dn)
    y = lax.reduce_window(y, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4
    return jax.nn.log_softmax(y.reshape(y.shape[0], -1) @ wd).mean()


def test_conv_net_and_its_gradient():
    ks = jax.random.split(jax.random.PRNGKey(0), 4)
    args = (
        jax.random.normal(ks[0], (2, 16, 16, 3)),
        jax.random.normal(ks[1], (3, 3, 3, 8)),
        jax.random.normal(ks[2], (3, 3, 8, 8)),
        jax.random.normal(ks[3], (128, 10)),
    )
    infos, text = _tagged(_convnet, *args)
    fm = build_fusion_map(text)
    for prim in ("conv_general_dilated", "reduce_window_max", "reduce_window_sum", "dot_general"):
        ids = _ids(infos, prim)
        assert ids and all(fm.fusions_of(i) for i in ids), prim
    convs = [fm.record(n) for i in _ids(infos, "conv_general_dilated") for n in fm.fusions_of(i)]
    assert all(r.bytes_accessed > 0 for r in convs)
    assert {r.computation for r in fm.records} == {c.name for c in parse_hlo_module(text).values() if c.is_entry}

    infos, text = _tagged(jax.grad(_convnet, argnums=(1, 2, 3)), *args)
    fm = build_fusion_map(text)
    # Every conv of the forward and backward pass reaches an executed
    # instruction (weight-gradient convs may only via a bitcast user's tag).
    for i in _ids(infos, "conv_general_dilated"):
        assert fm.fusions_of(i), i
    assert all(r.op_ids for r in fm.records if r.op_ids_inferred)


# --------------------------------------------------------------------------
# Hand-written HLO with awkward syntax
# --------------------------------------------------------------------------
TRICKY_HLO = r"""HloModule jit_tricky, is_scheduled=true, entry_computation_layout={(f32[8,4]{1,0}, s32[])->(f32[8,4]{1,0}, bf16[4]{0})}, frontend_attributes={a="{x}"}

FileNames
1 "/tmp/some file {with braces}.py"

FunctionNames
1 "f"

FileLocations
1 {file_name_id=1 function_name_id=1 line=3 end_line=3 column=1 end_column=9}

StackFrames
1 {file_location_id=1 parent_frame_id=1}


%add_reducer (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0), metadata={op_name="reduce_sum"}
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b), metadata={op_name="jit(f)/dfit_op4/reduce_sum"}
}

%fused_exp (p0: f32[8,4], p1: f32[]) -> f32[4] {
  %p0 = f32[8,4]{1,0} parameter(0)
  %e = f32[8,4]{1,0} exponential(%p0), metadata={op_name="jit(f)/dfit_op3/exp"}
  %p1 = f32[] parameter(1)
  ROOT %r = f32[4]{0} reduce(%e, %p1), dimensions={0}, to_apply=%add_reducer, metadata={op_name="jit(f)/dfit_op4/reduce_sum"}
}

%gemm (g0: f32[8,4], g1: f32[4,4]) -> f32[8,4] {
  %g0 = f32[8,4]{1,0} parameter(0)
  %g1 = f32[4,4]{1,0} parameter(1)
  ROOT %d = f32[8,4]{1,0} dot(%g0, %g1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(f)/dfit_op1/while/body/transpose(jvp(dfit_op2))/dot_general"}
}

%body (t: (s32[], f32[8,4], f32[4,4])) -> (s32[], f32[8,4], f32[4,4]) {
  %t = (s32[], f32[8,4]{1,0}, f32[4,4]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %x = f32[8,4]{1,0} get-tuple-element(%t), index=1
  %w = f32[4,4]{1,0} get-tuple-element(%t), index=2
  %ynn_fusion = f32[8,4]{1,0} fusion(%x, %w), kind=kCustom, calls=%gemm, metadata={op_name="jit(f)/dfit_op1/while/body/transpose(jvp(dfit_op2))/dot_general"}, backend_config={"fusion_config":{"kind":"__ynn_fusion","odd":"a},b{"},"outer_dimension_partitions":[]}
  %one = s32[] constant(1)
  %i1 = s32[] add(%i, %one), metadata={op_name="jit(f)/dfit_op1/while/body/add"}
  ROOT %out = (s32[], f32[8,4]{1,0}, f32[4,4]{1,0}) tuple(%i1, %ynn_fusion, %w)
}

%cond (c: (s32[], f32[8,4], f32[4,4])) -> pred[] {
  %c = (s32[], f32[8,4]{1,0}, f32[4,4]{1,0}) parameter(0)
  %ci = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%ci, %n), direction=LT, metadata={op_name="jit(f)/dfit_op1/while/cond/lt"}
}

%yes (y: f32[8,4]) -> f32[8,4] {
  %y = f32[8,4]{1,0} parameter(0)
  ROOT %neg = f32[8,4]{1,0} negate(%y), metadata={op_name="jit(f)/dfit_op5/cond/branch_1_fun/dfit_op7/neg"}
}

%no (z: f32[8,4]) -> f32[8,4] {
  ROOT %z = f32[8,4]{1,0} parameter(0)
}

ENTRY %main.9 (arg0: f32[8,4], arg1: s32[]) -> (f32[8,4], bf16[4]) {
  %arg0 = f32[8,4]{1,0} parameter(0), metadata={op_name="args[0]"}
  %arg1 = s32[] parameter(1)
  %zero = f32[] constant(0)
  %eye = f32[4,4]{1,0} constant({ {1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1} })
  %c0 = s32[] constant(0)
  %copy.3 = s32[] copy(%c0)
  %init = (s32[], f32[8,4]{1,0}, f32[4,4]{1,0}) tuple(%copy.3, %arg0, %eye)
  %while.9 = (s32[], f32[8,4]{1,0}, f32[4,4]{1,0}) while(%init), condition=%cond, body=%body, metadata={op_name="jit(f)/dfit_op1/while"}, backend_config={"known_trip_count":{"n":"3"}}
  %xw = f32[8,4]{1,0} get-tuple-element(%while.9), index=1
  %p = pred[] compare(%arg1, %c0), direction=GT, metadata={op_name="jit(f)/dfit_op6/gt"}
  %cond.2 = f32[8,4]{1,0} conditional(%p, %xw, %xw), true_computation=%yes, false_computation=%no, metadata={op_name="jit(f)/dfit_op5/cond"}
  %exp_reduce_fusion = f32[4]{0} fusion(%cond.2, %zero), kind=kInput, calls=%fused_exp, metadata={op_name="jit(f)/dfit_op4/reduce_sum"}
  %custom-call.1 = bf16[4]{0} custom-call(%exp_reduce_fusion, %cond.2, %xw, %arg1, %zero, /*index=5*/%exp_reduce_fusion), custom_call_target="my_target", api_version=API_VERSION_TYPED_FFI, backend_config="{\"k\": \"v, w}\"}", metadata={op_name="jit(f)/dfit_op8/ffi_call \"q\""}
  %transpose.4 = f32[4,8]{1,0} transpose(%cond.2), dimensions={1,0}
  %bitcast.5 = f32[32]{0} bitcast(%transpose.4), metadata={op_name="jit(f)/dfit_op9/reshape"}
  %s4 = s4[10]{0} constant({1,2,3,4,5,6,7,0,1,2})
  ROOT %res = (f32[8,4]{1,0}, bf16[4]{0}) tuple(%cond.2, %custom-call.1)
}
"""  # noqa: E501


def test_tricky_hlo_parse():
    comps = parse_hlo_module(TRICKY_HLO)
    assert hlo_module_name(TRICKY_HLO) == "jit_tricky"
    assert list(comps) == ["add_reducer", "fused_exp", "gemm", "body", "cond", "yes", "no", "main.9"]
    assert [c.name for c in comps.values() if c.is_entry] == ["main.9"]
    entry = comps["main.9"]
    byname = {i.name: i for i in entry.instructions}
    assert byname["res"].is_root and byname["res"].opcode == "tuple"
    assert byname["res"].shape == "(f32[8,4]{1,0}, bf16[4]{0})"
    cc = byname["custom-call.1"]
    assert cc.opcode == "custom-call" and cc.custom_call_target == "my_target"
    assert cc.operands == ("exp_reduce_fusion", "cond.2", "xw", "arg1", "zero", "exp_reduce_fusion")
    assert cc.op_name == 'jit(f)/dfit_op8/ffi_call "q"'
    assert byname["eye"].operands == ()
    assert byname["while.9"].call_edges == (("body", "body"), ("condition", "cond"))
    assert byname["cond.2"].calls == ("yes", "no")
    ynn = next(i for i in comps["body"].instructions if i.name == "ynn_fusion")
    assert ynn.fusion_kind == "kCustom" and ynn.calls == ("gemm",)
    assert comps["fused_exp"].instructions[-1].calls == ("add_reducer",)


def test_tricky_hlo_records():
    fm = build_fusion_map(TRICKY_HLO)
    recs = {r.name: r for r in fm.records}
    # fused computations, the reducer and free instructions give no records
    assert set(recs) == {
        *("ynn_fusion", "i1", "lt", "neg", "copy.3", "while.9", "p", "cond.2"),
        *("exp_reduce_fusion", "custom-call.1", "transpose.4"),
    }
    assert recs["ynn_fusion"].op_ids == (2,) and recs["ynn_fusion"].enclosing_op_ids == (1,)
    assert recs["ynn_fusion"].kind == "kCustom" and recs["ynn_fusion"].computation == "body"
    assert recs["i1"].op_ids == (1,) and recs["lt"].computation == "cond"
    assert recs["while.9"].kind == "control" and recs["while.9"].op_ids == (1,)
    assert recs["cond.2"].kind == "control" and recs["cond.2"].op_ids == (5,)
    assert recs["neg"].computation == "yes" and recs["neg"].enclosing_op_ids == (5,)
    assert recs["exp_reduce_fusion"].op_ids == (3, 4) and recs["exp_reduce_fusion"].kind == "kInput"
    assert recs["copy.3"].op_ids == () and recs["copy.3"].kind == "unfused"
    assert recs["custom-call.1"].custom_call_target == "my_target"
    # a tag left only on a bitcast user is borrowed, and flagged
    assert recs["transpose.4"].op_ids == (9,) and recs["transpose.4"].op_ids_inferred
    assert fm.fusions_of(4) == ("exp_reduce_fusion",) and fm.fusions_of(99) == ()
    # bytes: operands (duplicates once) + output
    assert recs["ynn_fusion"].bytes_accessed == (32 + 16 + 32) * 4
    assert recs["custom-call.1"].bytes_accessed == 4 * 4 + 32 * 4 + 32 * 4 + 4 + 4 + 4 * 2
    assert recs["while.9"].bytes_accessed == 2 * (4 + 32 * 4 + 16 * 4)
    assert recs["p"].bytes_accessed == 4 + 4 + 1


def test_shape_bytes_and_tags():
    assert shape_bytes("f32[]") == 4
    assert shape_bytes("bf16[3,5]{1,0}") == 30
    assert shape_bytes("(pred[2], s4[4], c128[1], f8e4m3fn[2], token[])") == 2 + 4 + 16 + 2
    assert shape_bytes("f32[<=6,2]{1,0}") == 48
    assert op_ids_in("jit(f)/xdfit_op3/dfit_op12/transpose(jvp(dfit_op40))/mul") == [12, 40]


# --------------------------------------------------------------------------
# Profiler
# --------------------------------------------------------------------------
TRIPS, RUNS = 4, 2


def _loop(x):
    return lax.fori_loop(0, TRIPS, lambda i, c: jnp.tanh(c @ c) + 1.0, x).sum()


def test_profiler_timings(tmp_path):
    x = jnp.ones((16, 16))
    jf = jax.jit(_loop)
    text = jf.lower(x).compile().as_text()
    fm = build_fusion_map(text)
    jf(x).block_until_ready()  # compile outside the trace
    jax.profiler.start_trace(str(tmp_path))
    try:
        for _ in range(RUNS):
            jf(x).block_until_ready()
    finally:
        jax.profiler.stop_trace()
    (xplane,) = find_xplane_files(tmp_path)

    timings = read_hlo_op_timings(xplane, fm.module_name)
    assert timings.exact and timings.matched == (fm.module_name,) and timings.note == ""
    assert set(timings) <= {r.name for r in fm.records}
    (loop,) = [r for r in fm.records if r.opcode == "while"]
    body = _instruction(parse_hlo_module(text), loop.name).call_edges[0][1]
    body_recs = [r for r in fm.records if r.computation == body]
    assert body_recs
    for rec in body_recs:
        t = timings[rec.name]
        assert t.runs == RUNS
        assert t.n_events == TRIPS * RUNS, rec.name
    w = timings[loop.name]
    assert w.n_events == RUNS and 0 <= w.exclusive_ns < w.total_ns
    assert w.total_ns >= sum(timings[r.name].total_ns for r in body_recs)
    for t in timings.values():
        assert t.exclusive_ns <= t.total_ns

    # bytes work too; a module name that only prefixes the real one is noted
    prefixed = read_hlo_op_timings(xplane.read_bytes(), fm.module_name[:-1])
    assert not prefixed.exact and fm.module_name in prefixed.note
    assert prefixed[loop.name] == w

    with pytest.raises(HloModuleMismatchError, match=re.escape(fm.module_name)) as err:
        read_hlo_op_timings(xplane, "no_such_module")
    assert fm.module_name in err.value.seen


def test_a_loop_carry_with_a_literal_start_is_not_a_constant():
    def f(x):
        def body(c, _):
            i, acc = c
            return (i + 1, acc * 2.0 + i), None
        (i, acc), _ = jax.lax.scan(body, (0, x), None, length=4)
        return acc, i

    t = dfit_nb.capture(f, jnp.ones(8))
    prims = [str(p) for p in t.ops["primitive"].values]
    reasons = [str(r) for r in t.ops["folded_reason"].values]
    counter = prims.index("add")  # i + 1: its input is a carry that starts as the literal 0
    assert "constant" not in reasons[counter], reasons[counter]


# --------------------------------------------------------------------------
# Attribution: shared constants and containers
# --------------------------------------------------------------------------
# Two "layers" (ops 34 and 104) each compute 1 / sum; XLA shares the broadcast of the literal 1,
# which keeps layer 0's op_name, and hoists literals under the enclosing jit (op 0) as the last tag.
# A `while` (op 7, a scan) owns its loop and counter; op 9 is a nested jit inside its body.
SHARED_CONSTANT_HLO = r"""HloModule jit_shared, is_scheduled=true

%div_layer0 (a0: f32[2,4]) -> f32[2,4] {
  %one0 = f32[] constant(1), metadata={op_name="jit(f)/dfit_op0/jit(enc)"}
  %b0 = f32[2,4]{1,0} broadcast(%one0), dimensions={}, metadata={op_name="jit(f)/dfit_op0/jit(enc)/layer_0/dfit_op34/div"}
  %a0 = f32[2,4]{1,0} parameter(0)
  ROOT %d0 = f32[2,4]{1,0} divide(%b0, %a0), metadata={op_name="jit(f)/dfit_op0/jit(enc)/layer_0/dfit_op34/div"}
}

%div_layer1 (a1: f32[2,4]) -> f32[2,4] {
  %one1 = f32[] constant(1), metadata={op_name="jit(f)/dfit_op0/jit(enc)"}
  %b1 = f32[2,4]{1,0} broadcast(%one1), dimensions={}, metadata={op_name="jit(f)/dfit_op0/jit(enc)/layer_0/dfit_op34/div"}
  %a1 = f32[2,4]{1,0} parameter(0)
  ROOT %d1 = f32[2,4]{1,0} divide(%b1, %a1), metadata={op_name="jit(f)/dfit_op0/jit(enc)/layer_1/dfit_op104/div"}
}

%scaled (s0: f32[], s1: f32[2,4]) -> f32[2,4] {
  %s0 = f32[] parameter(0)
  %sb = f32[2,4]{1,0} broadcast(%s0), dimensions={}, metadata={op_name="jit(f)/dfit_op0/jit(enc)/layer_0/dfit_op40/mul"}
  %s1 = f32[2,4]{1,0} parameter(1)
  ROOT %m = f32[2,4]{1,0} multiply(%s1, %sb), metadata={op_name="jit(f)/dfit_op0/jit(enc)/layer_1/dfit_op110/mul"}
}

%wrapped_broadcast_computation (w0: f32[]) -> f32[2,4] {
  %w0 = f32[] parameter(0)
  ROOT %wb = f32[2,4]{1,0} broadcast(%w0), dimensions={}, metadata={op_name="jit(f)/dfit_op0/jit(enc)"}
}

%ones_computation (o0: f32[]) -> f32[2,4] {
  %o0 = f32[] parameter(0)
  ROOT %ob = f32[2,4]{1,0} broadcast(%o0), dimensions={}, metadata={op_name="jit(f)/dfit_op0/jit(enc)/dfit_op50/broadcast_in_dim"}
}

%body (t: (s32[], f32[2,4])) -> (s32[], f32[2,4]) {
  %t = (s32[], f32[2,4]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %x = f32[2,4]{1,0} get-tuple-element(%t), index=1
  %one = s32[] constant(1), metadata={op_name="jit(f)/dfit_op0/jit(enc)/dfit_op7/while/body"}
  %i1 = s32[] add(%i, %one), metadata={op_name="jit(f)/dfit_op0/jit(enc)/dfit_op7/while/body/add"}
  %y = f32[2,4]{1,0} negate(%x), metadata={op_name="jit(f)/dfit_op0/jit(enc)/dfit_op7/while/body/dfit_op9/jit(g)/dfit_op10/neg"}
  %z = f32[2,4]{1,0} copy(%y), metadata={op_name="jit(f)/dfit_op0/jit(enc)/dfit_op7/while/body/dfit_op9/jit(g)"}
  ROOT %out = (s32[], f32[2,4]{1,0}) tuple(%i1, %z)
}

%cond (c: (s32[], f32[2,4])) -> pred[] {
  %c = (s32[], f32[2,4]{1,0}) parameter(0)
  %ci = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(3), metadata={op_name="jit(f)/dfit_op0/jit(enc)/dfit_op7/while/cond"}
  ROOT %lt = pred[] compare(%ci, %n), direction=LT, metadata={op_name="jit(f)/dfit_op0/jit(enc)/dfit_op7/while/cond/lt"}
}

ENTRY %main (p: f32[2,4], q: f32[2,4]) -> (f32[2,4], f32[2,4], f32[2,4], f32[2,4], f32[2,4], f32[2,4]) {
  %p = f32[2,4]{1,0} parameter(0)
  %q = f32[2,4]{1,0} parameter(1)
  %half = f32[] constant(0.5), metadata={op_name="jit(f)/dfit_op0/jit(enc)"}
  %r0 = f32[2,4]{1,0} fusion(%p), kind=kLoop, calls=%div_layer0, metadata={op_name="jit(f)/dfit_op0/jit(enc)/layer_0/dfit_op34/div"}
  %r1 = f32[2,4]{1,0} fusion(%q), kind=kLoop, calls=%div_layer1, metadata={op_name="jit(f)/dfit_op0/jit(enc)/layer_1/dfit_op104/div"}
  %r2 = f32[2,4]{1,0} fusion(%half, %q), kind=kLoop, calls=%scaled, metadata={op_name="jit(f)/dfit_op0/jit(enc)/layer_1/dfit_op110/mul"}
  %wrapped_broadcast = f32[2,4]{1,0} fusion(%half), kind=kLoop, calls=%wrapped_broadcast_computation, metadata={op_name="jit(f)/dfit_op0/jit(enc)"}
  %ones = f32[2,4]{1,0} fusion(%half), kind=kLoop, calls=%ones_computation, metadata={op_name="jit(f)/dfit_op0/jit(enc)/dfit_op50/broadcast_in_dim"}
  %c0 = s32[] constant(0)
  %init = (s32[], f32[2,4]{1,0}) tuple(%c0, %p)
  %loop = (s32[], f32[2,4]{1,0}) while(%init), condition=%cond, body=%body, metadata={op_name="jit(f)/dfit_op0/jit(enc)/dfit_op7/while"}
  %lx = f32[2,4]{1,0} get-tuple-element(%loop), index=1
  ROOT %res = (f32[2,4]{1,0}, f32[2,4]{1,0}, f32[2,4]{1,0}, f32[2,4]{1,0}, f32[2,4]{1,0}, f32[2,4]{1,0}) tuple(%r0, %r1, %r2, %wrapped_broadcast, %ones, %lx)
}
"""  # noqa: E501


def test_shared_constants_do_not_attribute_a_fusion():
    fm = build_fusion_map(SHARED_CONSTANT_HLO)
    recs = {r.name: r for r in fm.records}
    # the broadcast of the shared literal keeps op 34's op_name; the fusion is layer 1's op alone
    assert recs["r1"].op_ids == (104,)
    assert recs["r0"].op_ids == (34,)
    assert fm.fusions_of(34) == ("r0",) and fm.fusions_of(104) == ("r1",)
    # constant-like through a fused parameter fed by a constant: broadcast(param <- constant)
    assert recs["r2"].op_ids == (110,)
    assert fm.fusions_of(40) == ()
    # a record made of constant-like instructions only keeps the leaf op that made it
    assert recs["ones"].op_ids == (50,) and not recs["ones"].op_ids_inferred


def test_containers_hold_no_instructions():
    fm = build_fusion_map(SHARED_CONSTANT_HLO)
    recs = {r.name: r for r in fm.records}
    # jit containers (op 0 around everything, op 9 inside the loop body) hold nothing
    assert fm.fusions_of(0) == () and fm.fusions_of(9) == ()
    assert all(0 not in r.op_ids and 9 not in r.op_ids for r in fm.records)
    assert all(0 in r.enclosing_op_ids for r in fm.records if r.name != "wrapped_broadcast")
    # a constant hoisted under the jit is nobody's op; it is still executed, with no op ids
    assert recs["wrapped_broadcast"].op_ids == () and recs["wrapped_broadcast"].enclosing_op_ids == (0,)
    # an instruction whose last tag is a jit container (an output copy) holds no op either
    assert recs["z"].op_ids == () and recs["z"].enclosing_op_ids == (0, 7, 9)
    assert recs["y"].op_ids == (10,) and recs["y"].enclosing_op_ids == (0, 7, 9)
    # a loop container owns what it lowers to: the while, its counter and its trip compare
    assert recs["loop"].kind == "control" and recs["loop"].op_ids == (7,)
    assert recs["i1"].op_ids == (7,) and recs["lt"].op_ids == (7,)
    assert set(fm.fusions_of(7)) == {"loop", "i1", "lt"}


def test_container_ids_from_the_text_and_from_the_caller():
    comps = parse_hlo_module(SHARED_CONSTANT_HLO)
    # 0 and 9 enclose other tags; 7 encloses tags too but owns a while
    assert container_op_ids(comps) == (0, 9)
    assert container_op_ids(comps, [50, 7]) == (0, 9, 50)
    fm = build_fusion_map(SHARED_CONSTANT_HLO, containers=[50])
    assert fm.fusions_of(50) == () and fm.record("ones").enclosing_op_ids == (0, 50)
    # without tags on containers' own instructions nothing changes (the tricky module's ids)
    assert container_op_ids(parse_hlo_module(TRICKY_HLO)) == ()


def test_parameters_are_numbered():
    comps = parse_hlo_module(SHARED_CONSTANT_HLO)
    assert [i.parameter_number for i in comps["scaled"].instructions] == [0, -1, 1, -1]


@pytest.fixture(scope="module")
def encoder_trace():
    fn, args = dfit_nb.examples.get("encoder").build()
    return dfit_nb.capture(fn, *args)


def _layer(region: str) -> str:
    parts = region.split("/")
    return "/".join(parts[:2]) if len(parts) > 1 and parts[1].startswith("layer_") else parts[0]


def test_encoder_fusions_hold_ops_of_one_layer(encoder_trace):
    ops, low = encoder_trace.ops, encoder_trace.lowering
    region = ops["region"].values
    for fusion, ids in zip(low["fusion"].values, low["op_ids"].values, strict=True):
        layers = {_layer(str(region[int(o)])) for o in filter(None, str(ids).split(","))}
        assert len(layers) <= 1, (fusion, ids, layers)
    # layer 0's softmax div is no longer in any fusion of layer 1
    divs = [i for i in range(ops.sizes["op"]) if ops["primitive"].values[i] == "div"
            and str(region[i]).endswith("attn/softmax")]
    assert len(divs) == 2
    for d in divs:
        for f in str(ops["fusion"].values[d]).split(";"):
            row = str(low["op_ids"].sel(fusion=f).values).split(",")
            assert {_layer(str(region[int(o)])) for o in row} == {_layer(str(region[d]))}


def test_encoder_containers_have_no_fusion(encoder_trace):
    ops, low = encoder_trace.ops, encoder_trace.lowering
    containers = [i for i in range(ops.sizes["op"]) if ops["container"].values[i]]
    assert containers and ops["primitive"].values[0] == "jit"
    for i in containers:
        assert ops["fusion"].values[i] == "", i
        assert str(ops["folded_reason"].values[i]).startswith("container"), i
    held = {int(o) for ids in low["op_ids"].values for o in filter(None, str(ids).split(","))}
    assert held.isdisjoint(containers)
    # attribution moved, FLOPs did not: every FLOP-carrying leaf op still sits in an instruction
    leaf_flops = (ops["container"].values == "") & (ops["flops"].values > 0)
    assert (ops["fusion"].values[leaf_flops & ops["live"].values] != "").mean() > 0.9


def test_an_op_made_only_of_a_broadcast_literal_is_constant_folded():
    def f(x):
        return x * jnp.broadcast_to(jnp.float32(2.0), x.shape)

    t = dfit_nb.capture(f, jnp.ones((8, 16)))
    prims = [str(p) for p in t.ops["primitive"].values]
    bcast, mul = prims.index("broadcast_in_dim"), prims.index("mul")
    assert t.ops["fusion"].values[mul] != ""
    assert t.ops["fusion"].values[bcast] == ""
    assert str(t.ops["folded_reason"].values[bcast]).startswith("constant-folded")


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no FIFOs on this platform")
def test_read_hlo_op_timings_refuses_a_fifo_unopened_and_names_a_missing_file(tmp_path):
    """A FIFO given as the profile would block the read forever: it is refused before anything opens it."""
    import os

    from dfit_nb.errors import LoadRefusedError

    fifo = tmp_path / "trace.xplane.pb"
    os.mkfifo(fifo)
    with pytest.raises(LoadRefusedError, match="FIFO"):
        read_hlo_op_timings(fifo, "jit_f")
    with pytest.raises(FileNotFoundError, match=r"missing\.xplane\.pb"):
        read_hlo_op_timings(tmp_path / "missing.xplane.pb", "jit_f")
