"""The review memo: every template field with a real value, stable hashes, the decision rule, the first persistent
divergence and the tail latency under batch variance."""

from __future__ import annotations

import hashlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dfit_nb
from dfit_nb import examples
from dfit_nb.sim import CompareError, Hardware, compare, presets, select_dataflows
from dfit_nb.sim._batch import summarize
from dfit_nb.sim._prepare import hardware_key, prepare
from dfit_nb.sim._rescale import _codes, exponents, scaled
from dfit_nb.sim.memo import CALIBRATED_ERROR, DECISIONS, OWNERS, MemoError, batch_variance, decide, hypotheses, tags


def mlp_args(batch):
    return examples.get("mlp").build(batch=batch)[1]


@pytest.fixture(scope="module")
def memo_policy(static_traces):
    """The mlp (batch 8) on npu_like, with a seed and the default batch mix."""
    policy = select_dataflows(static_traces["mlp"], presets.get("npu_like"), "energy", seed=7,
                              tags={"model_revision": "r1"})
    return policy.with_batch_variance(mlp_args, {"batch": 8})


def test_every_template_field_has_a_real_value(memo_policy, static_traces):
    p, trace = memo_policy, static_traces["mlp"]
    md = p.report()
    tg = p.tags
    assert tg["dfit_nb"] == dfit_nb.__version__ and tg["jax"] == jax.__version__
    assert tg["backend"] == jax.default_backend() and tg["seed"] == "7" and tg["model_revision"] == "r1"
    assert tg["hardware"] == "npu_like" and tg["hardware_hash"] == hardware_key(presets.get("npu_like"))
    assert tg["jaxpr_hash"] == hashlib.sha1(trace.jaxpr_text.encode()).hexdigest()[:16]
    assert tg["param_shapes_hash"] == hashlib.sha1(trace.attrs["arg_shapes"].encode()).hexdigest()[:16]
    for key in ("dfit_nb", "jax", "jaxlib", "xla_flags", "backend", "hardware_hash", "jaxpr_hash",
                "param_shapes_hash", "seed"):
        assert f"| {key} | {tg[key]} |" in md, key
    best = p.baselines.attrs["best_single"]
    # 1. symptom: metric, slice, first failing stage, tags
    e_best, e_pol = (float(p.baselines["energy_j"].sel(policy=k)) * 1e3 for k in (best, "hybrid"))
    assert f"Failing metric: energy of the best single style, {e_best:.4g} mJ under {best}" in md
    assert f"{e_pol:.4g} mJ under the policy" in md
    from dfit_nb.capture.trace import describe_arguments

    shapes = describe_arguments(p.baselines.attrs.get("arg_shapes", "") or p.trace.attrs["arg_shapes"])
    assert f"Workload slice: mlp (arguments: {shapes.split(':')[0]}: " in md and "First failing stage: " in md
    first = compare(p.runs[best], p.runs["hybrid"]).attrs["first_divergence"]
    assert (f"First failing stage: {first}" in md) if first else ("First failing stage: none" in md)
    # 2. mechanism: every bottleneck class of the Run ranked by its evidence, the primary first; missing evidence
    ranked = hypotheses(p.runs[best])
    s = p.runs[best].summary
    dim = s["class_evidence"].dims[0]
    classes = s[dim].values.tolist()
    assert [h["mechanism"] for h in ranked] == sorted(classes, key=lambda c: -float(s["class_evidence"].sel({dim: c})))
    assert ranked[0]["mechanism"] == s["bottleneck_class"].item()
    members = [m for m in s["mechanism"].values.tolist() if m not in classes]  # the memory class's sub-classes
    composite = [h for h in ranked if h["detail"]]
    assert len(composite) == 1 and all(f"{m} " in composite[0]["detail"] for m in members)
    assert f"| 1 (primary) | {ranked[0]['mechanism']} | {ranked[0]['evidence']:.1%} |" in md
    assert "### Missing evidence" in md and "A measured trace of this workload on npu_like" in md
    assert "Thermal parameters are assumptions" in md or "Thermal behaviour is not modelled" in md
    # 3. proposed action: p50/p95/p99 of the policy and the baseline, as replayed
    for label, name in (("policy", p.name), ("baseline", best)):
        cells = " | ".join(f"{v * 1e6:.4g}" for v in p.tail["latency_q"].sel(policy=label).values)
        assert f"| {name} | {cells} |" in md, label
    for risk in ("Correctness:", "Quality:", "Thermal: average power", "Software compatibility:"):
        assert risk in md
    # 4. signoff: owners and a decision by the stated rule, with the project's calibrated error
    assert all(f"| {o} |" in md for o in OWNERS)
    decision = next(d for d in DECISIONS if f"\n{d.upper()}: " in md)
    b = p.baselines
    tail = p.tail
    regression = max(-float(b["latency_gain"].sel(policy=best)), *[
        (float(tail["latency_q"].sel(policy="policy", quantile=q)) - float(tail["latency_q"].sel(
            policy="baseline", quantile=q))) / float(tail["latency_q"].sel(policy="baseline", quantile=q))
        for q in (0.95, 0.99)], 0.0)
    assert decision == decide(p.replayed_gain(), CALIBRATED_ERROR, regression)[0]
    assert f"e = {CALIBRATED_ERROR:.1%}" in md
    html = p.report("html")
    assert "<h3>Build and runtime tags</h3>" in html and "<h2>4. Signoff</h2>" in html


def test_the_hashes_are_stable_and_follow_the_machine_and_the_program():
    fn, args = examples.get("mlp").build()
    hw = presets.get("npu_like")
    a, b = dfit_nb.capture(fn, *args), dfit_nb.capture(fn, *args)
    ta, tb = tags(a, hw), tags(b, hw)
    assert ta == tb  # two captures of one program on one machine: the same tags
    other_hw = tags(a, hw.replace(dram_bytes_per_cycle=float(hw.dram_bytes_per_cycle) * 2))
    assert other_hw["hardware_hash"] != ta["hardware_hash"] and other_hw["jaxpr_hash"] == ta["jaxpr_hash"]
    assert tags(a, hw.replace(name="renamed"))["hardware_hash"] == ta["hardware_hash"]  # fields, not the name
    x, w = jnp.ones((4, 8)), jnp.ones((8, 2))
    t1 = tags(dfit_nb.capture(lambda x, w: jnp.tanh(x @ w), x, w), hw)
    t2 = tags(dfit_nb.capture(lambda x, w: jax.nn.relu(x @ w), x, w), hw)
    assert t1["jaxpr_hash"] != t2["jaxpr_hash"] and t1["param_shapes_hash"] == t2["param_shapes_hash"]
    t3 = tags(dfit_nb.capture(lambda x, w: jnp.tanh(x @ w), jnp.ones((4, 8)), jnp.ones((8, 3))), hw)
    assert t3["param_shapes_hash"] != t1["param_shapes_hash"]
    assert tags(a, hw, seed=3)["seed"] == "3" and ta["seed"] == "not given"


@pytest.mark.parametrize("gain,error,regression,expected", [
    (0.20, 0.079, 0.0, "ship"),
    (0.20, 0.079, 0.079, "ship"),  # a regression within the error is not one
    (0.20, 0.079, 0.08, "bounded rollout"),
    (0.079, 0.079, 0.0, "escalate"),  # at the error bound: within it
    (0.0, 0.079, 0.0, "escalate"),
    (-0.079, 0.079, 0.0, "escalate"),
    (-0.08, 0.079, 0.0, "rollback"),
    (0.01, 0.0, 0.0, "ship"),  # an exact model: any gain ships
])
def test_the_decision_rule(gain, error, regression, expected):
    decision, why = decide(gain, error, regression)
    assert decision == expected and f"{gain:+.1%}" in why


def test_the_decision_rule_refuses_bad_numbers():
    with pytest.raises(MemoError, match="error >= 0"):
        decide(0.1, -0.01)
    with pytest.raises(MemoError, match="gain"):
        decide(float("nan"), 0.079)
    with pytest.raises(MemoError, match=r"'gain': True"):
        decide(True, 0.079)  # a bool is not a gain (True would read as 100 %)


@pytest.fixture(scope="module")
def encoder_ws(static_traces):
    t, hw = static_traces["encoder"], presets.get("npu_like")
    return t, hw, dfit_nb.replay(t, hw, "ws")


@pytest.mark.parametrize("gemm", [4, 9])  # layer 0's fc1 (its MLP kernel's first GEMM), layer 1's attention proj
def test_compare_names_the_region_from_which_two_runs_diverge(encoder_ws, gemm):
    t, hw, a = encoder_ws
    prim = a.ops["primitive"].values.astype(str)
    start = np.flatnonzero(np.isin(prim, ["dot_general", "conv_general_dilated"]))[gemm]
    per_op = np.full(len(prim), "ws", dtype=object)
    per_op[start:] = "os"  # the same program, its dataflow switched from this GEMM on
    b = dfit_nb.replay(t, hw, per_op)
    ab = compare(a, b)
    region = str(a.ops["region"].values[start])
    assert ab.attrs["first_divergence"] == region
    i = ab.attrs["first_divergence_index"]
    assert str(ab["stage"].values[i]) == region and bool(ab["persists"].values[i])
    assert not ab["diverges"].values[:i].any()  # nothing before the switch differs
    assert float(np.abs(ab["time_shift_s"].values[:i]).max(initial=0.0)) == 0.0
    same = compare(a, a)
    assert same.attrs["first_divergence"] == "" and same.attrs["first_divergence_index"] == -1
    with pytest.raises(CompareError, match="threshold must be a finite number >= 0"):
        compare(a, b, threshold=-1)
    with pytest.raises(CompareError, match=r"threshold must be a finite number >= 0.*got True"):
        compare(a, b, threshold=True)  # a bool is not a threshold (True would read as 100 %)
    with pytest.raises(CompareError, match=r"force must be True or False.*got 'no'"):
        compare(a, b, force="no")  # truthy: compared runs of different programs anyway
    assert compare(a, b, threshold=np.int64(0)).attrs["divergence_threshold"] == 0.0  # a NumPy integer is a number


def test_batch_variance_is_the_per_size_replay_and_its_quantiles(memo_policy, static_traces):
    p, trace = memo_policy, static_traces["mlp"]
    tail = p.tail
    assert tail["size"].values.tolist() == [8, 16, 32, 64, 128]  # the default mix: multiples of the base batch
    # the vmapped replay equals one scalar replay per size, on the op table rescaled to it
    prep = prepare(trace)
    exps = exponents(trace, mlp_args, {"batch": 8})
    per_op = np.asarray(p.per_op, dtype=object)  # one name per replayed op
    assert len(per_op) == len(prep.op)
    best = p.baselines.attrs["best_single"]
    for size in (16, 128):
        sp = scaled(prep, exps, {"batch": size / 8})
        pol = summarize(sp, p.hw, _codes(np.where(per_op == "", "ws", per_op)))
        base = summarize(sp, p.hw, _codes(np.full(len(prep.op), best)))
        assert float(tail["latency_s"].sel(size=size, policy="policy")) == pytest.approx(pol["latency_s"], rel=1e-9)
        assert float(tail["energy_j"].sel(size=size, policy="baseline")) == pytest.approx(base["energy_j"], rel=1e-9)
    # at the captured size the batch replay is the policy's own replay
    assert float(tail["latency_s"].sel(size=8, policy="policy")) == pytest.approx(
        float(p.runs["hybrid"].summary["latency_s"]), rel=1e-9)
    # default mix: 50 % at 1x -> p50 is 1x; 8 % at 8x reaches 98 % -> p95 is 8x; p99 is the 16x tail
    lat = tail["latency_s"].sel(policy="policy")
    assert tail["latency_q"].sel(policy="policy").values.tolist() == [float(lat.sel(size=s)) for s in (8, 64, 128)]


def test_bad_memo_inputs(memo_policy, static_traces):
    with pytest.raises(MemoError, match="whole sizes >= 1"):
        batch_variance(memo_policy, mlp_args, {"batch": 8}, {0: 1.0})
    with pytest.raises(MemoError, match="axis 'seq' is not in base"):
        batch_variance(memo_policy, mlp_args, {"batch": 8}, axis="seq")
    # a NaN quantile passed the range check (NaN compares false) and read the largest size as any quantile
    with pytest.raises(MemoError, match=r"quantiles must be a non-empty list .*these are not: \[nan\]"):
        batch_variance(memo_policy, mlp_args, {"batch": 8}, [8, 16], quantiles=[0.5, float("nan")])
    with pytest.raises(MemoError, match=r"batch_sizes needs finite whole sizes >= 1 with finite weights"):
        batch_variance(memo_policy, mlp_args, {"batch": 8}, {8: float("inf"), 16: 1.0})
    # the base shape is checked as the base (not reported as batch sizes the user never gave); a list is no base
    with pytest.raises(MemoError, match=r"base size batch=0 must be a positive integer"):
        batch_variance(memo_policy, mlp_args, {"batch": 0})
    with pytest.raises(MemoError, match=r"base must be a dict"):
        batch_variance(memo_policy, mlp_args, [8])
    # hw is one machine: None and a batch are named, not hashed or read as one
    for hw in (None, Hardware.stack([presets.get("npu_like")] * 2)):
        with pytest.raises(MemoError, match=r"tags\(\)( takes one machine.*hw|: hw must be one dfit_nb\.sim)"):
            tags(static_traces["mlp"], hw)
    from dfit_nb.sim.memo import missing_evidence

    with pytest.raises(MemoError, match=r"hypotheses\(\) needs a dfit_nb Run .*got Dataset"):
        hypotheses(memo_policy.runs["hybrid"].summary)  # a summary is not a Run: named as such
    with pytest.raises(MemoError, match=r"missing_evidence\(\) needs an evaluated dfit_nb\.sim\.Policy .*NoneType"):
        missing_evidence(None)
    with pytest.raises(MemoError, match="seed must be an int"):
        tags(static_traces["mlp"], presets.get("npu_like"), seed="zero")
    with pytest.raises(MemoError, match=r"must be a dfit_nb\.sim\.Calibration"):
        select_dataflows(static_traces["mlp"], presets.get("npu_like"), calibration={"mape": 0.1}, evaluate=False)
    unevaluated = select_dataflows(static_traces["mlp"], presets.get("npu_like"), evaluate=False)
    with pytest.raises(MemoError, match="evaluated policy"):
        unevaluated.with_batch_variance(mlp_args, {"batch": 8})


def test_batch_variance_over_too_many_sizes_is_refused_before_building_them(memo_policy, monkeypatch):
    from dfit_nb.sim.memory import MemoryGuardError

    # a sample of 10**5 distinct sizes built one op table per size, then one replay of each at once
    monkeypatch.setenv("DFIT_NB_MEMORY_LIMIT", "1GiB")
    with pytest.raises(MemoryGuardError, match=r"batch variance over 100000 distinct sizes needs about .*"
                                               r"fewer distinct batch sizes"):
        batch_variance(memo_policy, mlp_args, {"batch": 8}, list(range(1, 100_001)))


def test_segment_by_model_family(static_traces):
    from dfit_nb.sim.families import FamilyError, by_family, family_table, layer_classes

    hw = presets.get("npu_like")
    traces = {"cnn": static_traces["cnn"], "transformer": static_traces["encoder"]}
    ds = by_family(traces, hw, "energy")
    assert ds["family"].values.tolist() == ["cnn", "transformer"]
    assert set(ds["layer_class"].values) == {"conv", "grouped conv", "dense", "batched matmul"}
    assert ds["n_gemms"].sel(family="transformer", layer_class="conv").item() == 0
    assert ds["class_winner"].sel(family="transformer", layer_class="conv").item() == ""
    assert ds["n_gemms"].sel(family="transformer", layer_class="batched matmul").item() == 4  # qk and av, 2 layers
    for family, trace in traces.items():
        policy = select_dataflows(trace, hw, "energy")
        assert ds["winner"].sel(family=family).item() == policy.baselines.attrs["best_single"]
        assert float(ds["hybrid_gain"].sel(family=family)) == pytest.approx(policy.replayed_gain(), abs=1e-12)
        _, classes = layer_classes(trace)
        assert int(ds["n_gemms"].sel(family=family).sum()) == policy.choices.sizes["op"] == len(classes)
        cost = policy.choices["cost"].values
        for c in set(classes):
            summed = cost[classes == c].sum(axis=0)
            np.testing.assert_allclose(ds["class_cost"].sel(family=family, layer_class=c).values, summed, rtol=1e-12)
            best = ds["candidate"].values[int(np.argmin(summed))]
            assert ds["class_winner"].sel(family=family, layer_class=c).item() == best
    table = family_table(ds)
    assert table.count("\n| cnn |") == 4  # the whole model and its three layer classes
    assert "| transformer | batched matmul | 4 | " in table
    with pytest.raises(FamilyError, match="non-empty dict"):
        by_family({}, hw)
    with pytest.raises(FamilyError, match=r"one dfit_nb\.sim\.Hardware"):
        by_family(traces, Hardware.stack([hw, hw]))


@pytest.mark.slow  # a calibration fit and an evaluated selection: ~20 s on 2 shared cores
def test_a_given_calibration_sets_the_error_the_decision_uses(static_traces):
    import pandas as pd

    from dfit_nb.sim.calibration import calibrate, predict

    hw = presets.get("npu_like")
    sizes = np.array([64, 128, 256, 512] * 2)
    rows = pd.DataFrame({"m": sizes, "k": sizes[::-1], "n": sizes, "dtype": "float32"})
    rows["time_s"] = predict(rows, hw.replace(op_overhead_cycles=3000.0))["seconds"]
    cal = calibrate(rows, hw, ["clock_ghz"])  # the overhead it cannot fit leaves a real held-out error
    mape = float(cal.metrics["mape"].sel(machine="fitted", split="held_out", bucket="pooled"))
    assert mape > 0
    md = select_dataflows(static_traces["mlp"], hw, calibration=cal).report()
    assert f"e = {mape:.1%}, the held-out pooled MAPE of the given calibration ({len(rows)} measured rows)" in md


@pytest.mark.slow  # four replays and four thermal analyses: ~16 s on 2 shared cores
def test_the_memo_ranks_thermal_once_a_thermal_analysis_is_attached():
    import dataclasses

    trace = dfit_nb.capture(lambda a: a @ a, jnp.ones((64, 64)))
    hw = presets.get("npu_like")
    policy = select_dataflows(trace, hw)
    hot = hw.replace(thermal_resistance_k_per_w=1e3, heat_capacity_j_per_k=1e-6, throttle_clock_factor=0.25)
    runs = {k: r.with_thermal(r.thermal(10**5, steps=64, hw=hot)) for k, r in policy.runs.items()}
    md = dataclasses.replace(policy, runs=runs).report()
    best = policy.baselines.attrs["best_single"]
    ranked = hypotheses(runs[best])
    assert ranked[0]["mechanism"] == "thermal" and ranked[0]["attributed"]  # the toy machine throttles
    assert f"| 1 (primary) | thermal | {ranked[0]['evidence']:.1%} |" in md
    cycles = float(runs["hybrid"].summary["thermal_cycles"])
    assert cycles > 0 and f"throttling adds {cycles:.4g} cycles under the policy" in md
    assert "not analysed" not in md.split("### Competing hypotheses")[1].split("| thermal |")[1].split("\n")[0]
    plain = policy.report()
    assert "| thermal | not analysed |" in plain and "no throttling is attributed to either run" in plain
